//! `tiermem bench --plot FILE.svg`: a bad path fails before anything runs,
//! and a short run draws every mode it ran.

mod timed;

use std::process::Command;
use std::time::{Duration, Instant};

/// Every run under timeout(1), so that a hang fails the test.
fn tiermem() -> Command {
    timed::tiermem_within(300)
}

/// The contents of every `<text>` element of an SVG document, trimmed.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = t.split_once('>')?.1;
            Some(body.split_once("</text>")?.0.trim().to_string())
        })
        .collect()
}

#[test]
fn a_bad_plot_path_fails_before_the_benchmark_runs() {
    let dir = tempfile::tempdir().expect("a directory");
    let a_directory = dir.path().join("figures.svg");
    std::fs::create_dir(&a_directory).expect("a directory named .svg");
    let cases = [
        (dir.path().join("no-such-dir/latency.svg"), "cannot write"),
        (dir.path().join("latency.png"), "ending in .svg"),
        (a_directory, "is a directory"),
    ];
    for (path, why) in cases {
        let started = Instant::now();
        let out = tiermem()
            .args(["bench", "--modes", "dram", "--duration", "60", "--plot"])
            .arg(&path)
            .output()
            .expect("running tiermem bench");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", path.display());
        assert!(
            stderr.contains("--plot") && stderr.contains(why),
            "{}: {stderr}",
            path.display()
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}: the benchmark ran first",
            path.display()
        );
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[test]
fn a_short_run_draws_every_mode_under_a_title_naming_the_workload() {
    let dir = tempfile::tempdir().expect("a directory");
    let figure = dir.path().join("latency.svg");
    let out = tiermem()
        .args([
            "bench",
            "--modes",
            "dram,tiermem",
            "--working-set",
            "32M",
            "--dram",
            "8M",
            "--read-ratio",
            "70",
            "--data",
            "text",
            "--duration",
            "0.5",
            "--warmup",
            "0.2",
            "--no-device-check",
            "--json",
            "--plot",
        ])
        .arg(&figure)
        .output()
        .expect("running tiermem bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str::<serde_json::Value>(&stdout).expect("--json prints only JSON");
    let svg = std::fs::read_to_string(&figure).expect("the figure");
    let text = texts(&svg);
    let subtitle = text
        .iter()
        .find(|t| t.starts_with("working set "))
        .unwrap_or_else(|| panic!("no workload line in {text:?}"));
    for part in [
        "32.0 MiB",
        "budget 8.00 MiB",
        "uniform",
        "70% reads",
        "text pages",
    ] {
        assert!(subtitle.contains(part), "{part} not in {subtitle}");
    }
    assert!(
        text.iter()
            .any(|t| t.starts_with("tiermem bench: latency per access, 20")),
        "no dated title in {text:?}"
    );
    for mode in ["dram", "tiermem"] {
        let legend = format!("{mode}: p50 ");
        assert!(
            text.iter().any(|t| t.starts_with(&legend)),
            "{legend}: {text:?}"
        );
    }
    assert!(text.iter().any(|t| t == "latency per access (log scale)"));
}

#[test]
fn help_describes_plot() {
    let out = tiermem()
        .args(["bench", "--help"])
        .output()
        .expect("running tiermem bench --help");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--plot <FILE.svg>"), "{help}");
    assert!(help.contains("one panel per case"), "{help}");
}
