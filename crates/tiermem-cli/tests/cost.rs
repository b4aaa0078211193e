//! `tiermem cost` as a user runs it: the Optane swap blueprint's server A and B, priced as
//! JSON and as a table, bad inputs refused with exit status 1, and
//! `--bench` reading bench results (fixtures in tests/data/cost_*.json,
//! checked here against the bench's own types so they keep its schema).

use std::process::{Command, Output};

use serde_json::Value;

/// The blueprint's servers: A 384 GiB of DRAM; B 192 GiB and 2 x 100 GiB Optane.
const SEED: [&str; 6] = ["--dram-a", "384G", "--dram-b", "192G", "--device-b", "200G"];

/// A `tiermem bench --json` result: dram 2M, tiermem 400K, kernel-swap 320K
/// pages/s, 512 MiB of a 1 GiB working set in DRAM.
const BENCH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cost_bench.json");

/// A `tiermem bench --suite --json` result run without root: two cases,
/// tiermem only, kernel-swap skipped, no dram mode.
const SUITE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cost_suite.json");

fn cost(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiermem"))
        .arg("cost")
        .args(args)
        .output()
        .expect("tiermem cost runs")
}

/// The blueprint's servers at `ratio`, plus `extra` flags.
fn seed_cost(ratio: &str, extra: &[&str]) -> Output {
    let mut args = SEED.to_vec();
    args.extend(["--price-ratio", ratio]);
    args.extend(extra);
    cost(&args)
}

/// The JSON a run that must succeed printed, and nothing on stderr.
fn json_of(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "{stdout}\n{stderr}"
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: not JSON:\n{stdout}"))
}

/// The stderr of a run that must fail with exit status 1 and print nothing
/// on stdout.
fn failure_of(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

fn f64_at(value: &Value, pointer: &str) -> f64 {
    value
        .pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("no number at {pointer} in {value:#}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn json_reproduces_the_blueprints_example_inside_the_envelope() {
    // (r x 192 + 200) / (r x 384), worked out by hand.
    for (ratio, expected) in [
        ("1", 392.0 / 384.0),
        ("5", 1160.0 / 1920.0),
        ("10", 2120.0 / 3840.0),
    ] {
        let json = json_of(&seed_cost(ratio, &["--json"]));
        let rel = f64_at(&json, "/relative_cost");
        assert!(close(rel, expected), "r={ratio}: {rel} != {expected}");
        assert!(close(f64_at(&json, "/saving"), 1.0 - expected));
    }
    let json = json_of(&seed_cost("5", &["--json"]));
    assert_eq!(json["schema"], "tiermem.cost/1");
    assert_eq!(json["tiermem_version"], env!("CARGO_PKG_VERSION"));
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("a kernel");
    assert_eq!(json["kernel"], release.trim());
    let command_line: Vec<&str> = json["command_line"]
        .as_array()
        .expect("command_line is an array")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        command_line[1..],
        [
            "cost",
            "--dram-a",
            "384G",
            "--dram-b",
            "192G",
            "--device-b",
            "200G",
            "--price-ratio",
            "5",
            "--json"
        ]
    );
    assert_eq!(json["dram_b_bytes"], 192u64 << 30);
    assert_eq!(json["vm_mix"]["vm_size_bytes"], 16u64 << 30);
    assert_eq!(json["vm_mix"]["server_a_gold_vms"], 24);
    let vms: Vec<(&str, u64)> = json["vm_mix"]["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .map(|c| (c["class"].as_str().unwrap(), c["vms"].as_u64().unwrap()))
        .collect();
    assert_eq!(vms, [("gold", 12), ("silver", 24), ("bronze", 16)]);
    assert_eq!(json["bench"], Value::Null);
}

#[test]
fn the_table_shows_the_formula_with_the_blueprints_numbers() {
    let out = seed_cost("5", &["--vm-size", "32G"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "relative cost = (r x DRAM_B + device_B) / (r x DRAM_A)",
        "(5 x 192 + 200) / (5 x 384) = 1160 / 1920 = 0.6042",
        "VMs of 32 GiB",
        "holds 12 Gold VMs",
    ] {
        assert!(stdout.contains(expected), "{expected:?} not in\n{stdout}");
    }
}

#[test]
fn bad_inputs_exit_1_saying_what_to_pass() {
    let cases: [(Vec<&str>, &str); 5] = [
        (
            vec![
                "--dram-a",
                "384G",
                "--dram-b",
                "512G",
                "--device-b",
                "200G",
                "--price-ratio",
                "5",
            ],
            "tiermem cost: --dram-b (512 GiB) is more than --dram-a (384 GiB)",
        ),
        (
            SEED.to_vec(),
            "tiermem cost: --price-ratio is missing: pass the per-GiB price of DRAM divided by \
             the device's, e.g. --price-ratio 5",
        ),
        (
            [&SEED[..], &["--price-ratio", "0"]].concat(),
            "tiermem cost: --price-ratio '0' must be above zero",
        ),
        (
            vec![
                "--dram-a",
                "0G",
                "--dram-b",
                "192G",
                "--device-b",
                "200G",
                "--price-ratio",
                "5",
            ],
            "tiermem cost: --dram-a '0G' is zero: pass server A's DRAM",
        ),
        (
            // A negative size after its flag reaches the check, not clap.
            vec![
                "--dram-a",
                "384G",
                "--dram-b",
                "192G",
                "--device-b",
                "-200G",
                "--price-ratio",
                "5",
            ],
            "tiermem cost: --device-b '-200G' is negative",
        ),
    ];
    for (args, expected) in cases {
        let stderr = failure_of(&cost(&args));
        assert!(stderr.starts_with(expected), "{args:?}: {stderr}");
    }
    let stderr = failure_of(&seed_cost("5", &["--vm-size", "16X"]));
    assert!(
        stderr.contains("--vm-size '16X' has an unknown unit 'X'"),
        "{stderr}"
    );
}

#[test]
fn the_bench_fixture_has_the_schema_of_tiermem_bench() {
    let text = std::fs::read_to_string(BENCH).expect("the fixture");
    let json: Value = serde_json::from_str(&text).expect("JSON");
    let results: Vec<tiermem_bench::result::ModeResult> =
        serde_json::from_value(json["results"].clone()).expect("results are ModeResults");
    let _: tiermem_bench::worker::WorkloadSpec =
        serde_json::from_value(json["workload"].clone()).expect("workload is a WorkloadSpec");
    let summary = json["summary"].as_array().expect("a summary");
    for (line, result) in summary.iter().zip(&results) {
        assert_eq!(line["mode"], result.mode.name());
        assert_eq!(line["pages_per_sec"].as_f64(), Some(result.pages_per_sec));
    }
    for (name, ratio) in tiermem_bench::report::ratio_summary(&results) {
        assert!(
            close(json["ratios"][&name].as_f64().unwrap(), ratio),
            "{name}"
        );
    }
    let suite: Value =
        serde_json::from_str(&std::fs::read_to_string(SUITE).expect("the fixture")).unwrap();
    for case in suite["suite"].as_array().expect("cases") {
        let results: Vec<tiermem_bench::result::ModeResult> =
            serde_json::from_value(case["results"].clone()).expect("results are ModeResults");
        let modes: Vec<&str> = results.iter().map(|r| r.mode.name()).collect();
        assert_eq!(modes, ["tiermem", "kernel-swap"]);
    }
}

#[test]
fn bench_prices_each_modes_throughput_against_dram_on_server_a() {
    let json = json_of(&seed_cost("5", &["--bench", BENCH, "--json"]));
    let rel = 1160.0 / 1920.0;
    let bench = &json["bench"];
    assert_eq!(bench["file"], BENCH);
    assert_eq!(bench["shape"], "bench");
    assert!(close(f64_at(bench, "/dram_share"), 0.5));
    let run = &bench["runs"][0];
    assert_eq!(run["missing_modes"], serde_json::json!([]));
    let modes = run["modes"].as_array().expect("modes");
    // dram 2M, tiermem 400K (0.2 of dram), kernel-swap 320K (0.16).
    let expected = [
        ("dram", "A", 1.0, 1.0, 1.0),
        ("tiermem", "B", 0.2, rel, rel / 0.2),
        ("kernel-swap", "B", 0.16, rel, rel / 0.16),
    ];
    assert_eq!(modes.len(), expected.len(), "{run:#}");
    for (m, (mode, server, vs_dram, memory, per_throughput)) in modes.iter().zip(expected) {
        assert_eq!(
            (m["mode"].as_str(), m["server"].as_str()),
            (Some(mode), Some(server))
        );
        assert!(close(f64_at(m, "/throughput_vs_dram"), vs_dram), "{m}");
        assert!(close(f64_at(m, "/memory_cost"), memory), "{m}");
        assert!(
            close(f64_at(m, "/cost_per_throughput"), per_throughput),
            "{m}"
        );
    }
    // 512 MiB of 1 GiB against server B's 192 of 392 GiB: close enough, no note.
    assert_eq!(bench["notes"], serde_json::json!([]));

    let out = seed_cost("5", &["--bench", BENCH]);
    let table = String::from_utf8_lossy(&out.stdout);
    let row = |mode: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(mode))
            .unwrap_or_else(|| panic!("no {mode} row in\n{table}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("tiermem")[..6],
        ["tiermem", "B", "400.0K", "0.200", "0.604", "3.021"]
    );
    assert_eq!(
        row("kernel-swap")[..6],
        ["kernel-swap", "B", "320.0K", "0.160", "0.604", "3.776"]
    );
}

#[test]
fn a_suite_without_dram_or_kernel_swap_reports_what_it_can() {
    let json = json_of(&seed_cost("5", &["--bench", SUITE, "--json"]));
    let bench = &json["bench"];
    assert_eq!(bench["shape"], "suite");
    let runs = bench["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["case"], "uniform, 50% reads, 1 thread");
    for run in runs {
        assert_eq!(
            run["missing_modes"],
            serde_json::json!(["dram", "kernel-swap"])
        );
        let modes = run["modes"].as_array().expect("modes");
        assert_eq!(modes.len(), 1, "{run:#}");
        assert_eq!(modes[0]["mode"], "tiermem");
        assert_eq!(modes[0]["cost_per_throughput"], Value::Null);
        let per_million = f64_at(&modes[0], "/cost_per_million_pages_per_sec");
        let pages = f64_at(&modes[0], "/pages_per_sec");
        assert!(close(per_million, (1160.0 / 1920.0) / (pages / 1e6)));
        let notes = run["notes"].to_string();
        assert!(notes.contains("kernel-swap mode needs root"), "{notes}");
        assert!(notes.contains("no dram result"), "{notes}");
    }
    // 512 MiB of 2 GiB is 25%, server B 49%: the slowdowns are the bench's.
    let note = bench["notes"][0]
        .as_str()
        .expect("a note on the DRAM share");
    assert!(note.contains("25%") && note.contains("49%"), "{note}");
}

#[test]
fn a_bench_file_that_is_missing_or_not_a_bench_result_is_named() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let missing = dir.path().join("no-such.json");
    let missing = missing.to_str().expect("a UTF-8 path");
    let stderr = failure_of(&seed_cost("5", &["--bench", missing]));
    assert!(
        stderr.starts_with(&format!("tiermem cost: --bench {missing}: cannot read it")),
        "{stderr}"
    );
    let cases = [
        ("{\"summary\": [", "not JSON"),
        (
            "{\"relative_cost\": 0.6}",
            "this is a `tiermem cost --json` result",
        ),
        (
            "{\"workload\": {}}",
            "expected a `tiermem bench --json` result",
        ),
    ];
    for (text, expected) in cases {
        let path = dir.path().join("cost_bad.json");
        std::fs::write(&path, text).expect("a bad file");
        let path = path.to_str().expect("a UTF-8 path");
        let stderr = failure_of(&seed_cost("5", &["--bench", path]));
        assert!(
            stderr.starts_with(&format!("tiermem cost: --bench {path}: "))
                && stderr.contains(expected),
            "{text}: {stderr}"
        );
    }
}

#[test]
fn help_gives_the_formula_every_flag_and_the_blueprints_example() {
    let out = cost(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for expected in [
        "relative cost = (r x DRAM_B + device_B) / (r x DRAM_A)",
        "--dram-a <SIZE>",
        "--dram-b <SIZE>",
        "--device-b <SIZE>",
        "--price-ratio <R>",
        "--vm-size <SIZE>",
        "--bench <FILE.json>",
        "--json",
        "Gold",
        "tiermem cost --dram-a 384G --dram-b 192G --device-b 200G --price-ratio 5",
    ] {
        assert!(help.contains(expected), "{expected:?} not in\n{help}");
    }
}
