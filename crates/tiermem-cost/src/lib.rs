//! `tiermem cost`: the relative memory cost of a tiered server against a
//! DRAM-only one (the Optane swap blueprint §3), the VM classes each holds (§2.1), and,
//! with `--bench`, the price of a unit of measured throughput.

mod bench;

mod model;
mod render;
mod size;

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;

pub use tiermem_host::envelope;

use bench::{BenchFile, BenchRun, ModeCost};
use model::{CostModel, VmMix};
use size::SizeFlag;

/// The `schema` field of `tiermem cost --json`.
pub const SCHEMA: &str = "tiermem.cost/1";

const LONG_ABOUT: &str = "\
Compare the memory cost of two servers, with the cost model of Intel's
solutions blueprint \"Utilizing Linux Swap with Intel Optane DC SSDs as a
Memory Overcommit Technique\" (section 3):

  server A  DRAM only:                      --dram-a
  server B  less DRAM plus a fast device    --dram-b, --device-b
            (an SSD) that tiermem or kernel swap pages to

With r the per-GiB price of DRAM divided by the device's (--price-ratio),

  relative cost = (r x DRAM_B + device_B) / (r x DRAM_A)

that is server B's memory price over server A's. Below 1, server B is
cheaper. Only memory is priced: the blueprint takes CPUs, boards, disks and
power as identical in both servers, and so does this command.

VM classes (the Optane swap blueprint, section 2.1). A Gold VM has all its guest memory in
DRAM, a Silver VM half, a Bronze VM a quarter, the rest on the device.
For VMs of --vm-size each, the report gives how many of each class fit in
server B's DRAM and on its device, and holds the smaller count (the
memory that runs out first); server A, with no device, holds Gold VMs
only. Then, per class: how many VMs server A's price buys in servers B
(count / relative cost), and one VM's share of its server's price against
a Gold VM on server A (relative cost x A's Gold count / B's count).

Measured performance (--bench FILE). A cheaper server is only cheaper if
it does the work: FILE is the output of `tiermem bench --json` (or of
`tiermem bench --suite --json`, one report per case). For each mode that
ran, the report takes its pages/s over the dram mode's (the measured
slowdown) and gives

  cost per throughput = memory cost / (pages/s / dram pages/s)

where the memory cost is 1 for dram (server A) and the relative cost for
tiermem, kernel-swap and any other paging mode (server B). DRAM on server
A is 1; a mode below 1 does the same work for less money. It assumes the
whole server slows down as the benchmark did, so the bench should keep
about server B's share of memory in DRAM (a note says when it did not).
Without a dram result there is no slowdown; the cost per million pages/s
(in server A's memory price) still compares the modes. A mode missing
from FILE, or skipped in it, is named and the rest reported.

Sizes: a number with K, M, G or T (binary: 384G is 384 GiB), with an
optional B or iB (384GiB); a plain number is bytes, as everywhere in
tiermem, so a size under 1 MiB is refused as a forgotten unit.

Errors (exit status 1, the reason and what to pass on stderr): a missing
flag, a size that is zero, negative or unreadable, a ratio that is not a
number above zero, --dram-b above --dram-a, a --bench FILE that cannot be
read or is not a bench result.";

const EXAMPLES: &str = "\
Examples (the blueprint's servers: A 384 GiB DRAM; B 192 GiB DRAM + 2 x 100 GiB Optane):
  tiermem cost --dram-a 384G --dram-b 192G --device-b 200G --price-ratio 5
      relative cost (5 x 192 + 200) / (5 x 384) = 1160 / 1920 = 0.604
  tiermem cost --dram-a 384G --dram-b 192G --device-b 200G --price-ratio 1
      1.021: at equal prices per GiB, B costs more (it has 392 GiB)
  tiermem cost --dram-a 384G --dram-b 192G --device-b 200G --price-ratio 5 --json
  tiermem bench --dram 512M --working-set 1G --json > bench.json
  tiermem cost --dram-a 384G --dram-b 192G --device-b 200G --price-ratio 5 \\
      --vm-size 32G --bench bench.json";

/// Arguments of `tiermem cost`. The sizes and the ratio are read as text
/// and checked in `run`, so that each error says what to pass and exits
/// like every other failure of the command.
#[derive(Args, Debug, Default)]
#[command(
    about = "Server memory cost: DRAM only against less DRAM plus a device (Intel's Optane swap blueprint)",
    long_about = LONG_ABOUT,
    after_long_help = EXAMPLES,
    override_usage = "tiermem cost --dram-a SIZE --dram-b SIZE --device-b SIZE --price-ratio R \
                      [--vm-size SIZE] [--bench FILE.json] [--json]"
)]
pub struct CostArgs {
    /// Server A's DRAM, all its memory (required), e.g. 384G.
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub dram_a: Option<String>,

    /// Server B's DRAM (required; at most --dram-a), e.g. 192G.
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub dram_b: Option<String>,

    /// Server B's fast device capacity, all devices together (required),
    /// e.g. 200G for two 100 GiB SSDs.
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub device_b: Option<String>,

    /// r: the per-GiB price of DRAM divided by the device's (required,
    /// above 0), e.g. 5 when a GiB of DRAM costs five GiB of the device.
    #[arg(long, value_name = "R", allow_hyphen_values = true)]
    pub price_ratio: Option<String>,

    /// Guest memory of one VM, for the Gold/Silver/Bronze counts.
    #[arg(
        long,
        value_name = "SIZE",
        default_value = "16G",
        allow_hyphen_values = true
    )]
    pub vm_size: String,

    /// A `tiermem bench --json` (or `--suite --json`) result: price each
    /// mode's measured throughput.
    #[arg(long, value_name = "FILE.json")]
    pub bench: Option<PathBuf>,

    /// Print one JSON object on stdout (schema tiermem.cost/1) instead of
    /// the tables.
    #[arg(long)]
    pub json: bool,
}

/// Runs `tiermem cost`; returns the process exit code.
pub fn run(args: &CostArgs) -> Result<i32> {
    let report = Report::build(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&render::json(&report))?);
    } else {
        print!("{}", render::human(&report));
    }
    Ok(0)
}

/// Everything the command reports, computed before anything is printed.
pub(crate) struct Report {
    pub model: CostModel,
    pub mix: VmMix,
    pub bench: Option<BenchReport>,
    /// Notes on the inputs.
    pub notes: Vec<String>,
}

/// The `--bench` part: the file, and each run's modes priced.
pub(crate) struct BenchReport {
    pub file: BenchFile,
    pub runs: Vec<PricedRun>,
    /// Notes on the file as a whole.
    pub notes: Vec<String>,
}

pub(crate) struct PricedRun {
    pub run: BenchRun,
    pub costs: Vec<ModeCost>,
    /// The run's own notes, then what its missing modes leave out.
    pub notes: Vec<String>,
}

impl Report {
    /// Checks every input, reads the bench file, computes.
    fn build(args: &CostArgs) -> Result<Report> {
        let model = parse_model(args)?;
        let vm_size = model::VM_SIZE.parse(&args.vm_size)?;
        let mix = VmMix::new(&model, vm_size);
        let mut notes = model.notes();
        if mix.server_a_gold_vms == 0 {
            notes.push(format!(
                "a {} VM does not fit in server A's DRAM: no cost per VM; pass a smaller \
                 --vm-size",
                size::human(vm_size)
            ));
        }
        let bench = match &args.bench {
            Some(path) => Some(price_bench(BenchFile::read(path)?, &model)),
            None => None,
        };
        Ok(Report {
            model,
            mix,
            bench,
            notes,
        })
    }
}

/// The four required inputs, checked; every missing one is named at once.
fn parse_model(args: &CostArgs) -> Result<CostModel> {
    let sizes = [
        (&args.dram_a, model::DRAM_A),
        (&args.dram_b, model::DRAM_B),
        (&args.device_b, model::DEVICE_B),
    ];
    let mut missing: Vec<String> = sizes
        .iter()
        .filter(|(value, _)| value.is_none())
        .map(|(_, flag)| missing_size(flag))
        .collect();
    if args.price_ratio.is_none() {
        missing.push(model::missing_ratio());
    }
    if !missing.is_empty() {
        bail!("{}", missing.join("; "));
    }
    // All present: checked just above.
    let [dram_a, dram_b, device_b] =
        sizes.map(|(value, flag)| flag.parse(value.as_deref().unwrap_or_default()));
    let (dram_a, dram_b, device_b) = (dram_a?, dram_b?, device_b?);
    let ratio = model::parse_price_ratio(args.price_ratio.as_deref().unwrap_or_default())?;
    CostModel::new(dram_a, dram_b, device_b, ratio)
}

fn missing_size(flag: &SizeFlag) -> String {
    format!("{} is missing: {}", flag.name, flag.hint())
}

/// Prices every run of the bench file and gathers what to say about it.
fn price_bench(file: BenchFile, model: &CostModel) -> BenchReport {
    let notes = bench::share_note(&file, model).into_iter().collect();
    let runs = file
        .runs
        .iter()
        .map(|run| {
            let mut notes = run.notes.clone();
            notes.extend(bench::missing_notes(run));
            PricedRun {
                run: run.clone(),
                costs: bench::price(run, model),
                notes,
            }
        })
        .collect();
    BenchReport { file, runs, notes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blueprint_args(ratio: &str) -> CostArgs {
        CostArgs {
            dram_a: Some("384G".into()),
            dram_b: Some("192G".into()),
            device_b: Some("200G".into()),
            price_ratio: Some(ratio.into()),
            vm_size: "16G".into(),
            ..CostArgs::default()
        }
    }

    fn error(args: &CostArgs) -> String {
        match Report::build(args) {
            Ok(_) => panic!("{args:?} was accepted"),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn the_blueprints_example_is_reproduced_from_the_flags() {
        for (ratio, expected) in [("1", 1.0208), ("5", 0.6042), ("10", 0.5521)] {
            let report = Report::build(&blueprint_args(ratio)).expect("valid flags");
            let cost = report.model.relative_cost();
            assert!((cost - expected).abs() < 5e-5, "r={ratio}: {cost}");
            assert!(report.notes.is_empty(), "{:?}", report.notes);
            assert!(report.bench.is_none());
        }
    }

    #[test]
    fn every_missing_flag_is_named_with_what_to_pass() {
        let err = error(&CostArgs {
            vm_size: "16G".into(),
            ..CostArgs::default()
        });
        for expected in [
            "--dram-a is missing: pass server A's DRAM",
            "e.g. --dram-a 384G",
            "--dram-b is missing",
            "--device-b is missing",
            "--price-ratio is missing: pass the per-GiB price of DRAM divided by the device's",
        ] {
            assert!(err.contains(expected), "{expected}: {err}");
        }
        let err = error(&CostArgs {
            price_ratio: None,
            ..blueprint_args("5")
        });
        assert!(err.starts_with("--price-ratio is missing"), "{err}");
        assert!(!err.contains("--dram-a"), "{err}");
    }

    #[test]
    fn every_bad_input_says_what_was_wrong_and_what_to_pass() {
        let cases = [
            (
                CostArgs {
                    dram_a: Some("0G".into()),
                    ..blueprint_args("5")
                },
                "--dram-a '0G' is zero: pass server A's DRAM (the DRAM-only server) as a size, \
                 e.g. --dram-a 384G",
            ),
            (
                CostArgs {
                    dram_b: Some("-192G".into()),
                    ..blueprint_args("5")
                },
                "--dram-b '-192G' is negative: pass server B's DRAM",
            ),
            (
                CostArgs {
                    device_b: Some("0".into()),
                    ..blueprint_args("5")
                },
                "--device-b '0' is zero: pass server B's fast device capacity",
            ),
            (
                CostArgs {
                    device_b: Some("two hundred".into()),
                    ..blueprint_args("5")
                },
                "--device-b 'two hundred' is not a number followed by a unit",
            ),
            (
                CostArgs {
                    dram_a: Some("384Q".into()),
                    ..blueprint_args("5")
                },
                "--dram-a '384Q' has an unknown unit 'Q' (use K, M, G or T)",
            ),
            (
                CostArgs {
                    dram_a: Some("384".into()),
                    ..blueprint_args("5")
                },
                "--dram-a '384' is 384 bytes, under 1 MiB",
            ),
            (
                CostArgs {
                    vm_size: "0G".into(),
                    ..blueprint_args("5")
                },
                "--vm-size '0G' is zero: pass the guest memory of one VM as a size, e.g. \
                 --vm-size 16G",
            ),
            (blueprint_args("0"), "--price-ratio '0' must be above zero"),
            (
                blueprint_args("-5"),
                "--price-ratio '-5' must be above zero",
            ),
            (
                blueprint_args("cheap"),
                "--price-ratio 'cheap' is not a number",
            ),
            (
                CostArgs {
                    dram_b: Some("512G".into()),
                    ..blueprint_args("5")
                },
                "--dram-b (512 GiB) is more than --dram-a (384 GiB)",
            ),
        ];
        for (args, expected) in cases {
            let err = error(&args);
            assert!(
                err.starts_with(expected),
                "expected {expected:?}, got {err:?}"
            );
        }
    }

    #[test]
    fn a_vm_larger_than_server_a_is_noted_not_refused() {
        let report = Report::build(&CostArgs {
            vm_size: "400G".into(),
            ..blueprint_args("5")
        })
        .expect("a large VM is a valid question");
        assert_eq!(report.mix.server_a_gold_vms, 0);
        assert!(report.notes[0].contains("does not fit in server A's DRAM"));
    }

    #[test]
    fn a_missing_bench_file_is_an_error_naming_it() {
        let err = error(&CostArgs {
            bench: Some(PathBuf::from("/nonexistent/bench.json")),
            ..blueprint_args("5")
        });
        assert!(
            err.starts_with("--bench /nonexistent/bench.json: cannot read it"),
            "{err}"
        );
    }
}
