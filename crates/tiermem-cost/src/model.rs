//! The Optane swap blueprint's server cost model (§3) and its VM classes (§2.1).
//!
//! Server A holds all its memory in DRAM; server B has less DRAM plus a
//! fast device that pages stand on. Only memory is priced: the blueprint takes
//! the rest of both servers as identical.

use anyhow::{bail, Result};

use crate::size::{self, SizeFlag};

pub const DRAM_A: SizeFlag = SizeFlag {
    name: "--dram-a",
    what: "server A's DRAM (the DRAM-only server)",
    example: "384G",
};
pub const DRAM_B: SizeFlag = SizeFlag {
    name: "--dram-b",
    what: "server B's DRAM (the server with the device)",
    example: "192G",
};
pub const DEVICE_B: SizeFlag = SizeFlag {
    name: "--device-b",
    what: "server B's fast device capacity (all devices together)",
    example: "200G",
};
pub const VM_SIZE: SizeFlag = SizeFlag {
    name: "--vm-size",
    what: "the guest memory of one VM",
    example: "16G",
};

/// What to pass as `--price-ratio`, for the end of its errors.
const RATIO_HINT: &str = "pass the per-GiB price of DRAM divided by the device's, e.g. \
                          --price-ratio 5 (DRAM five times the device's price per GiB)";

/// The two servers and the price ratio, checked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    pub dram_a: u64,
    pub dram_b: u64,
    pub device_b: u64,
    /// Per-GiB price of DRAM divided by the device's (the blueprint's
    /// DRAM_to_Optane).
    pub price_ratio: f64,
}

impl CostModel {
    /// Checks what the sizes must satisfy between them.
    pub fn new(dram_a: u64, dram_b: u64, device_b: u64, price_ratio: f64) -> Result<CostModel> {
        if dram_b > dram_a {
            bail!(
                "--dram-b ({}) is more than --dram-a ({}): server B is the one with less DRAM, \
                 its device making up the rest; pass a --dram-b of at most {}",
                size::human(dram_b),
                size::human(dram_a),
                size::human(dram_a)
            );
        }
        Ok(CostModel {
            dram_a,
            dram_b,
            device_b,
            price_ratio,
        })
    }

    /// Server A's memory price, in units of one GiB of the device: r × DRAM_A.
    pub fn server_a_units(&self) -> f64 {
        self.price_ratio * size::gib(self.dram_a)
    }

    /// Server B's memory price, in units of one GiB of the device:
    /// r × DRAM_B + device_B.
    pub fn server_b_units(&self) -> f64 {
        self.price_ratio * size::gib(self.dram_b) + size::gib(self.device_b)
    }

    /// The blueprint's §3: (r × DRAM_B + device_B) / (r × DRAM_A).
    pub fn relative_cost(&self) -> f64 {
        self.server_b_units() / self.server_a_units()
    }

    /// Things worth knowing about the inputs that are not errors.
    pub fn notes(&self) -> Vec<String> {
        let b_total = self.dram_b + self.device_b;
        let mut notes = Vec::new();
        if b_total < self.dram_a {
            notes.push(format!(
                "server B holds less memory in all ({}) than server A ({}): the two do not \
                 serve the same memory",
                size::human(b_total),
                size::human(self.dram_a)
            ));
        }
        notes
    }
}

/// Parses `--price-ratio`: a finite number above zero.
pub fn parse_price_ratio(text: &str) -> Result<f64> {
    let ratio: f64 = match text.trim().parse() {
        Ok(ratio) => ratio,
        Err(_) => bail!("--price-ratio '{text}' is not a number: {RATIO_HINT}"),
    };
    if !ratio.is_finite() {
        bail!("--price-ratio '{text}' is not a finite number: {RATIO_HINT}");
    }
    if ratio <= 0.0 {
        bail!("--price-ratio '{text}' must be above zero: {RATIO_HINT}");
    }
    Ok(ratio)
}

/// The message for a missing `--price-ratio`.
pub fn missing_ratio() -> String {
    format!("--price-ratio is missing: {RATIO_HINT}")
}

/// The blueprint's VM classes (§2.1), by the share of guest memory in DRAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmClass {
    Gold,
    Silver,
    Bronze,
}

impl VmClass {
    pub const ALL: [VmClass; 3] = [VmClass::Gold, VmClass::Silver, VmClass::Bronze];

    pub fn name(self) -> &'static str {
        match self {
            VmClass::Gold => "gold",
            VmClass::Silver => "silver",
            VmClass::Bronze => "bronze",
        }
    }

    /// The share of guest memory in DRAM, as numerator and denominator so
    /// that the counts below stay in exact integer arithmetic.
    fn dram_share(self) -> (u64, u64) {
        match self {
            VmClass::Gold => (1, 1),
            VmClass::Silver => (1, 2),
            VmClass::Bronze => (1, 4),
        }
    }

    pub fn dram_fraction(self) -> f64 {
        let (num, den) = self.dram_share();
        num as f64 / den as f64
    }
}

/// Which of server B's memories a class runs out of first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Dram,
    Device,
}

impl Limit {
    pub fn name(self) -> &'static str {
        match self {
            Limit::Dram => "dram",
            Limit::Device => "device",
        }
    }
}

/// How many VMs of one class server B holds, and what each costs.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassFit {
    pub class: VmClass,
    /// VMs whose DRAM share fits in server B's DRAM.
    pub fit_in_dram: u64,
    /// VMs whose device share fits on server B's device; `None` for Gold,
    /// which puts nothing there.
    pub fit_on_device: Option<u64>,
    /// The smaller of the two: what server B holds.
    pub vms: u64,
    pub limited_by: Limit,
    /// VMs that server A's price buys in servers B: vms / relative cost.
    pub vms_for_server_a_price: f64,
    /// The price of one such VM on server B over that of a Gold VM on
    /// server A; `None` when either server holds none.
    pub cost_per_vm_vs_gold_on_a: Option<f64>,
}

/// The blueprint's §2.1 applied to the two servers: server A holds only Gold VMs
/// (it has no device); server B holds each class as far as its DRAM and
/// device last.
#[derive(Clone, Debug, PartialEq)]
pub struct VmMix {
    pub vm_size: u64,
    pub server_a_gold_vms: u64,
    pub classes: Vec<ClassFit>,
}

impl VmMix {
    pub fn new(model: &CostModel, vm_size: u64) -> VmMix {
        let server_a_gold_vms = model.dram_a / vm_size;
        let classes = VmClass::ALL
            .iter()
            .map(|&class| class_fit(model, vm_size, server_a_gold_vms, class))
            .collect();
        VmMix {
            vm_size,
            server_a_gold_vms,
            classes,
        }
    }
}

/// One class on server B: each VM takes share × size of DRAM and the rest
/// of the device; the count is whichever runs out first.
fn class_fit(model: &CostModel, vm_size: u64, a_vms: u64, class: VmClass) -> ClassFit {
    let (num, den) = class.dram_share();
    // count = memory / (vm_size × part / den), in u128 so nothing overflows.
    let fit = |memory: u64, part: u64| {
        (memory as u128 * den as u128 / (vm_size as u128 * part as u128)) as u64
    };
    let fit_in_dram = fit(model.dram_b, num);
    let fit_on_device = (den > num).then(|| fit(model.device_b, den - num));
    let (vms, limited_by) = match fit_on_device {
        Some(device) if device < fit_in_dram => (device, Limit::Device),
        _ => (fit_in_dram, Limit::Dram),
    };
    let relative_cost = model.relative_cost();
    let cost_per_vm_vs_gold_on_a =
        (vms > 0 && a_vms > 0).then(|| relative_cost * a_vms as f64 / vms as f64);
    ClassFit {
        class,
        fit_in_dram,
        fit_on_device,
        vms,
        limited_by,
        vms_for_server_a_price: vms as f64 / relative_cost,
        cost_per_vm_vs_gold_on_a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::size::GIB;

    /// The blueprint's servers (§3): A with 384 GiB of DRAM, B with 192 GiB and
    /// two 100 GiB Optane SSDs.
    fn blueprint(ratio: f64) -> CostModel {
        CostModel::new(384 * GIB, 192 * GIB, 200 * GIB, ratio).expect("the blueprint's servers")
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn the_blueprints_servers_cost_what_the_formula_gives_by_hand() {
        // (r × 192 + 200) / (r × 384), worked out by hand.
        let cases = [
            (1.0, 392.0 / 384.0),    // 1.0208: equal prices, B has more memory
            (2.0, 584.0 / 768.0),    // 0.7604
            (5.0, 1160.0 / 1920.0),  // 0.6042
            (10.0, 2120.0 / 3840.0), // 0.5521
            (0.5, 296.0 / 192.0),    // 1.5417: a device dearer than DRAM
        ];
        for (ratio, expected) in cases {
            let cost = blueprint(ratio).relative_cost();
            assert!(close(cost, expected), "r={ratio}: {cost} != {expected}");
        }
        assert!((blueprint(1.0).relative_cost() - 1.0208).abs() < 1e-4);
        assert!((blueprint(5.0).relative_cost() - 0.6042).abs() < 1e-4);
        assert!((blueprint(10.0).relative_cost() - 0.5521).abs() < 1e-4);
        // A very dear DRAM leaves B at DRAM_B / DRAM_A = 1/2.
        assert!((blueprint(1e9).relative_cost() - 0.5).abs() < 1e-6);
    }

    #[test]
    fn server_prices_are_in_gib_of_the_device() {
        let model = blueprint(5.0);
        assert!(close(model.server_a_units(), 1920.0));
        assert!(close(model.server_b_units(), 1160.0));
    }

    #[test]
    fn more_dram_on_b_than_on_a_is_refused_with_both_sizes() {
        let err = CostModel::new(384 * GIB, 512 * GIB, 200 * GIB, 5.0)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--dram-b (512 GiB) is more than --dram-a (384 GiB)")
                && err.contains("at most 384 GiB"),
            "{err}"
        );
        // Equal DRAM is a server with a device added: allowed.
        assert!(CostModel::new(384 * GIB, 384 * GIB, 200 * GIB, 5.0).is_ok());
    }

    #[test]
    fn a_server_b_with_less_memory_in_all_is_noted() {
        assert!(blueprint(5.0).notes().is_empty());
        let small = CostModel::new(384 * GIB, 192 * GIB, 100 * GIB, 5.0).unwrap();
        let notes = small.notes();
        assert!(
            notes.len() == 1 && notes[0].contains("292 GiB"),
            "{notes:?}"
        );
    }

    #[test]
    fn price_ratios_must_be_finite_numbers_above_zero() {
        assert_eq!(parse_price_ratio("5").unwrap(), 5.0);
        assert_eq!(parse_price_ratio(" 7.5 ").unwrap(), 7.5);
        for (text, why) in [
            ("0", "must be above zero"),
            ("-3", "must be above zero"),
            ("abc", "is not a number"),
            ("", "is not a number"),
            ("inf", "is not a finite number"),
            ("NaN", "is not a finite number"),
        ] {
            let err = parse_price_ratio(text).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("--price-ratio '{text}' {why}"))
                    && err.contains("e.g. --price-ratio 5"),
                "{text}: {err}"
            );
        }
        assert!(missing_ratio().contains("--price-ratio is missing"));
    }

    #[test]
    fn the_blueprints_vm_classes_fit_as_counted_by_hand() {
        // 16 GiB VMs. A: 384 / 16 = 24 Gold. B: Gold 192 / 16 = 12;
        // Silver 8 GiB DRAM + 8 GiB device each: 24 and 25, so 24;
        // Bronze 4 GiB DRAM + 12 GiB device: 48 and 16, so 16.
        let model = blueprint(5.0);
        let mix = VmMix::new(&model, 16 * GIB);
        assert_eq!(mix.server_a_gold_vms, 24);
        let got: Vec<(u64, Option<u64>, u64, Limit)> = mix
            .classes
            .iter()
            .map(|c| (c.fit_in_dram, c.fit_on_device, c.vms, c.limited_by))
            .collect();
        assert_eq!(
            got,
            vec![
                (12, None, 12, Limit::Dram),
                (24, Some(25), 24, Limit::Dram),
                (48, Some(16), 16, Limit::Device),
            ]
        );
        let rel = 1160.0 / 1920.0;
        let silver = &mix.classes[1];
        assert!(close(silver.vms_for_server_a_price, 24.0 / rel));
        // A Silver VM on B costs the relative cost of a Gold VM on A: same count.
        assert!(close(silver.cost_per_vm_vs_gold_on_a.unwrap(), rel));
        let gold = &mix.classes[0];
        assert!(close(gold.cost_per_vm_vs_gold_on_a.unwrap(), rel * 2.0));
        let bronze = &mix.classes[2];
        assert!(close(
            bronze.cost_per_vm_vs_gold_on_a.unwrap(),
            rel * 24.0 / 16.0
        ));
    }

    #[test]
    fn vms_larger_than_a_server_leave_the_cost_per_vm_undefined() {
        let mix = VmMix::new(&blueprint(5.0), 512 * GIB);
        assert_eq!(mix.server_a_gold_vms, 0);
        assert!(mix.classes.iter().all(|c| c.vms == 0));
        assert!(mix
            .classes
            .iter()
            .all(|c| c.cost_per_vm_vs_gold_on_a.is_none()));
    }
}
