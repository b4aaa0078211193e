//! The report as short tables for a person, or as one JSON object.

use serde_json::{json, Map, Value};

use crate::bench::ModeCost;
use crate::model::{CostModel, VmMix};
use crate::size::{self, gib, number};
use crate::{envelope, BenchReport, PricedRun, Report, SCHEMA};

/// The formula as printed in both outputs.
const FORMULA: &str = "(r x DRAM_B + device_B) / (r x DRAM_A)";

/// The whole report as tables.
pub fn human(report: &Report) -> String {
    let mut out = cost_section(&report.model);
    out += "\n";
    out += &vm_section(&report.mix);
    if let Some(bench) = &report.bench {
        out += "\n";
        out += &bench_section(bench);
    }
    out += &notes_section(&report.notes);
    out
}

/// The two servers and the formula worked out with their numbers.
fn cost_section(model: &CostModel) -> String {
    let r = number(model.price_ratio);
    let rel = model.relative_cost();
    let (how, diff) = if rel <= 1.0 {
        ("less", 1.0 - rel)
    } else {
        ("more", rel - 1.0)
    };
    format!(
        "Memory cost of server B against server A (the Optane swap blueprint, section 3)\n\
         \x20 server A  {a} DRAM\n\
         \x20 server B  {b} DRAM + {d} device = {total}\n\
         \x20 r         {r} (per-GiB price of DRAM over the device's)\n\
         \n\
         \x20 relative cost = {FORMULA}\n\
         \x20               = ({r} x {bn} + {dn}) / ({r} x {an}) = {bu} / {au} = {rel:.4}\n\
         \x20 Server B's memory costs {pct:.1}% of server A's: {diff:.1}% {how}.\n",
        a = size::human(model.dram_a),
        b = size::human(model.dram_b),
        d = size::human(model.device_b),
        total = size::human(model.dram_b + model.device_b),
        an = number(gib(model.dram_a)),
        bn = number(gib(model.dram_b)),
        dn = number(gib(model.device_b)),
        au = number(model.server_a_units()),
        bu = number(model.server_b_units()),
        pct = rel * 100.0,
        diff = diff * 100.0,
    )
}

/// The blueprint's VM classes (§2.1) on both servers.
fn vm_section(mix: &VmMix) -> String {
    let mut rows = vec![row(&[
        "class",
        "in DRAM",
        "fit in DRAM",
        "fit on device",
        "server B holds",
        "for A's price",
        "cost/VM vs Gold on A",
    ])];
    for c in &mix.classes {
        rows.push(vec![
            c.class.name().into(),
            format!("{:.0}%", c.class.dram_fraction() * 100.0),
            c.fit_in_dram.to_string(),
            c.fit_on_device.map_or("-".into(), |n| n.to_string()),
            format!("{} ({})", c.vms, c.limited_by.name()),
            format!("{:.1}", c.vms_for_server_a_price),
            c.cost_per_vm_vs_gold_on_a
                .map_or("-".into(), |x| format!("{x:.3}")),
        ]);
    }
    format!(
        "VMs of {size} (the Optane swap blueprint, section 2.1: Gold all in DRAM, Silver half, Bronze a quarter,\n\
         the rest on the device). Server A, DRAM only, holds {a} Gold VMs.\n\
         {table}\
         \x20 server B holds: the smaller fit, limited by the memory named\n\
         \x20 for A's price: VMs that server A's price buys in servers B (held / relative cost)\n\
         \x20 cost/VM: a VM's share of its server's memory price, a Gold VM on server A = 1\n",
        size = size::human(mix.vm_size),
        a = mix.server_a_gold_vms,
        table = table(&rows),
    )
}

/// Each run of the bench file, priced.
fn bench_section(bench: &BenchReport) -> String {
    let share = bench
        .file
        .dram_share()
        .map(|s| format!(", {:.0}% of its working set in DRAM", s * 100.0))
        .unwrap_or_default();
    let command = match bench.file.shape {
        "suite" => "tiermem bench --suite",
        _ => "tiermem bench",
    };
    let mut out = format!(
        "Cost per throughput (--bench {}: {command}{share})\n",
        bench.file.path.display(),
    );
    for priced in &bench.runs {
        out += &run_table(priced);
    }
    out += "  vs dram: pages/s over the dram mode's; cost/throughput: memory cost / vs dram,\n\
           \x20 DRAM on server A = 1, lower is cheaper for the same work; per Mpages/s: memory\n\
           \x20 cost per million pages/s, in server A's memory price\n";
    out += &notes_section(&bench.notes);
    out
}

fn run_table(priced: &PricedRun) -> String {
    let mut out = String::new();
    if let Some(case) = &priced.run.case {
        out += &format!("case {case}\n");
    }
    let mut rows = vec![row(&[
        "mode",
        "server",
        "pages/s",
        "vs dram",
        "memory cost",
        "cost/throughput",
        "per Mpages/s",
    ])];
    rows.extend(priced.costs.iter().map(cost_row));
    out += &table(&rows);
    for note in &priced.notes {
        out += &format!("  note: {note}\n");
    }
    out
}

fn cost_row(c: &ModeCost) -> Vec<String> {
    let or_dash = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
    vec![
        c.mode.clone(),
        c.server.to_string(),
        rate(c.pages_per_sec),
        or_dash(c.throughput_vs_dram),
        format!("{:.3}", c.memory_cost),
        or_dash(c.cost_per_throughput),
        format!("{:.3}", c.cost_per_million_pages_per_sec),
    ]
}

fn notes_section(notes: &[String]) -> String {
    notes.iter().map(|n| format!("note: {n}\n")).collect()
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

/// Left-aligned columns two spaces apart, indented by two.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out += &format!("  {}\n", cells.join("  ").trim_end());
    }
    out
}

/// `2.10M`, `512.0K`, `950`: pages/s as the bench tables print them.
fn rate(pages_per_sec: f64) -> String {
    if pages_per_sec >= 1e6 {
        format!("{:.2}M", pages_per_sec / 1e6)
    } else if pages_per_sec >= 1e3 {
        format!("{:.1}K", pages_per_sec / 1e3)
    } else {
        format!("{pages_per_sec:.0}")
    }
}

/// The whole report as one object: the envelope, then the results, all at
/// the top level. Sizes are in bytes.
pub fn json(report: &Report) -> Value {
    let model = &report.model;
    let mut out = envelope(SCHEMA);
    let fields = json!({
        "relative_cost": model.relative_cost(),
        "saving": 1.0 - model.relative_cost(),
        "formula": FORMULA,
        "price_ratio": model.price_ratio,
        "dram_a_bytes": model.dram_a,
        "dram_b_bytes": model.dram_b,
        "device_b_bytes": model.device_b,
        "server_a_cost_device_gib": model.server_a_units(),
        "server_b_cost_device_gib": model.server_b_units(),
        "vm_mix": vm_json(&report.mix),
        "bench": report.bench.as_ref().map(bench_json),
        "notes": report.notes,
    });
    extend(&mut out, fields);
    Value::Object(out)
}

fn vm_json(mix: &VmMix) -> Value {
    let classes: Vec<Value> = mix
        .classes
        .iter()
        .map(|c| {
            json!({
                "class": c.class.name(),
                "dram_share": c.class.dram_fraction(),
                "fit_in_dram": c.fit_in_dram,
                "fit_on_device": c.fit_on_device,
                "vms": c.vms,
                "limited_by": c.limited_by.name(),
                "vms_for_server_a_price": c.vms_for_server_a_price,
                "cost_per_vm_vs_gold_on_a": c.cost_per_vm_vs_gold_on_a,
            })
        })
        .collect();
    json!({
        "vm_size_bytes": mix.vm_size,
        "server_a_gold_vms": mix.server_a_gold_vms,
        "classes": classes,
    })
}

fn bench_json(bench: &BenchReport) -> Value {
    let runs: Vec<Value> = bench
        .runs
        .iter()
        .map(|priced| {
            json!({
                "case": priced.run.case,
                "modes": priced.costs.iter().map(mode_json).collect::<Vec<_>>(),
                "missing_modes": priced.run.missing,
                "notes": priced.notes,
            })
        })
        .collect();
    json!({
        "file": bench.file.path.display().to_string(),
        "shape": bench.file.shape,
        "budget_bytes": bench.file.budget_bytes,
        "working_set_bytes": bench.file.working_set_bytes,
        "dram_share": bench.file.dram_share(),
        "runs": runs,
        "notes": bench.notes,
    })
}

fn mode_json(c: &ModeCost) -> Value {
    json!({
        "mode": c.mode,
        "server": c.server.to_string(),
        "pages_per_sec": c.pages_per_sec,
        "throughput_vs_dram": c.throughput_vs_dram,
        "memory_cost": c.memory_cost,
        "cost_per_throughput": c.cost_per_throughput,
        "cost_per_million_pages_per_sec": c.cost_per_million_pages_per_sec,
    })
}

/// Moves the fields of `value` (an object) into `out`.
fn extend(out: &mut Map<String, Value>, value: Value) {
    if let Value::Object(fields) = value {
        out.extend(fields);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CostArgs;

    fn seed_report(ratio: &str) -> Report {
        Report::build(&CostArgs {
            dram_a: Some("384G".into()),
            dram_b: Some("192G".into()),
            device_b: Some("200G".into()),
            price_ratio: Some(ratio.into()),
            vm_size: "16G".into(),
            ..CostArgs::default()
        })
        .expect("the blueprint's servers")
    }

    #[test]
    fn the_table_works_the_formula_out_with_the_blueprints_numbers() {
        let text = human(&seed_report("5"));
        for expected in [
            "server A  384 GiB DRAM",
            "server B  192 GiB DRAM + 200 GiB device = 392 GiB",
            "= (5 x 192 + 200) / (5 x 384) = 1160 / 1920 = 0.6042",
            "costs 60.4% of server A's: 39.6% less",
            "holds 24 Gold VMs",
        ] {
            assert!(text.contains(expected), "{expected:?} not in\n{text}");
        }
        let bronze = text.lines().find(|l| l.trim_start().starts_with("bronze"));
        let cells: Vec<&str> = bronze.expect("a bronze row").split_whitespace().collect();
        assert_eq!(cells[..6], ["bronze", "25%", "48", "16", "16", "(device)"]);
        let dearer = human(&seed_report("1"));
        assert!(
            dearer.contains("costs 102.1% of server A's: 2.1% more"),
            "{dearer}"
        );
    }

    #[test]
    fn json_has_the_envelope_and_the_results_at_the_top_level() {
        let value = json(&seed_report("10"));
        assert_eq!(value["schema"], SCHEMA);
        assert!(value["command_line"].is_array());
        assert!(value.get("kernel").is_some() && value.get("tiermem_version").is_some());
        let rel = value["relative_cost"].as_f64().unwrap();
        assert!((rel - 2120.0 / 3840.0).abs() < 1e-12, "{rel}");
        assert_eq!(value["dram_a_bytes"], 384u64 << 30);
        assert_eq!(value["vm_mix"]["server_a_gold_vms"], 24);
        assert_eq!(value["vm_mix"]["classes"][2]["limited_by"], "device");
        assert_eq!(value["vm_mix"]["classes"][0]["fit_on_device"], Value::Null);
        assert_eq!(value["bench"], Value::Null);
    }

    #[test]
    fn rates_print_like_the_bench_tables() {
        assert_eq!(rate(2_100_000.0), "2.10M");
        assert_eq!(rate(512_000.0), "512.0K");
        assert_eq!(rate(950.0), "950");
    }
}
