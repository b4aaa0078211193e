//! `tiermem bench-redis` run for real on a small dataset: DRAM and tiermem
//! modes, JSON output, no lost keys. Needs redis-server and redis-benchmark;
//! skipped without them unless CI is set.

mod redis_tools;
mod timed;

use std::process::Command;

use redis_tools::redis_available;

#[path = "../../../tests/support/libtiermem.rs"]
mod libtiermem;

/// Every run under timeout(1), so that a hang fails the test.
fn tiermem() -> Command {
    timed::tiermem_within(900)
}

/// Runs bench-redis on 64 MiB in 16 MiB with 2,000 requests and `extra`
/// flags, with tiermem's defaults; returns its JSON, and stdout for messages.
fn small_run(extra: &[&str]) -> (serde_json::Value, String) {
    libtiermem::libtiermem();
    let out = tiermem()
        .args(["bench-redis", "--dataset", "64M", "--dram", "16M"])
        .args(["--requests", "2000", "--json"])
        .args(extra)
        .env_remove("TIERMEM_LIB")
        .env_remove("TIERMEM_COMPRESS")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench-redis failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let v: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{stdout}\n{stderr}"));
    (v, stdout)
}

#[test]
fn bench_redis_runs_dram_and_tiermem_without_losing_keys() {
    if !redis_available() {
        return;
    }
    let (v, stdout) = small_run(&["--modes", "dram,tiermem"]);
    assert_eq!(v["data_loss"], false, "{stdout}");
    assert_eq!(v["plan"]["keys"], 16384, "{stdout}");
    let modes = v["modes"].as_array().expect("modes array");
    let names: Vec<&str> = modes.iter().filter_map(|m| m["mode"].as_str()).collect();
    assert_eq!(names, ["dram", "tiermem"], "{stdout}");
    for m in modes {
        assert_eq!(m["status"], "ok", "{m}");
        let run = &m["run"];
        for field in ["lost_keys", "corrupt_keys", "missing_after"] {
            assert_eq!(run[field], 0, "{field} in {m}");
        }
        assert_eq!(run["keys_verified"], 16384, "{m}");
        assert_eq!(run["dbsize_after"], 16384, "{m}");
        for test in ["get", "set"] {
            let rps = run[test]["rps"].as_f64().unwrap_or(0.0);
            assert!(rps > 0.0, "{test} rps in {m}");
        }
    }
    let tiermem = &modes[1]["run"];
    let stats = tiermem["tiermem_stats"].as_array().expect("tiermem stats");
    assert!(
        stats
            .iter()
            .any(|l| l.as_str().is_some_and(|l| l.contains("page-ins"))),
        "{tiermem}"
    );
    // Both modes ran, so the ratio to DRAM is there.
    assert!(modes[1]["ratios"]["get_vs_dram"].as_f64().is_some());
}

#[test]
fn bench_redis_refuses_bad_sizes_with_the_reason() {
    let out = tiermem()
        .args(["bench-redis", "--value-size", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--value-size"), "{stderr}");

    let out = tiermem()
        .args(["bench-redis", "--dataset", "1K", "--value-size", "4K"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no key to load"), "{stderr}");

    let out = tiermem()
        .args(["bench-redis", "--redis-server", "/nonexistent/redis-server"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--redis-server"), "{stderr}");
}

/// Text values compress: under tiermem most evicted ones go to the
/// compressed tier, and every key still reads back byte for byte (the
/// harness compares each value with the one it computes from the key).
#[test]
fn bench_redis_text_values_come_back_intact_through_the_compressed_tier() {
    if !redis_available() {
        return;
    }
    let (v, stdout) = small_run(&["--modes", "tiermem", "--data", "text"]);
    assert_eq!(v["plan"]["data"], "text", "{stdout}");
    assert_eq!(v["data_loss"], false, "{stdout}");
    let run = &v["modes"][0]["run"];
    for field in ["lost_keys", "corrupt_keys", "missing_after"] {
        assert_eq!(run[field], 0, "{field} in {run}");
    }
    assert_eq!(run["keys_verified"], 16384, "{run}");
    // "compressed      3948 page(s) in 7.2 MiB (ratio 2.13); stored 48168 ..."
    let stats = run["tiermem_stats"].as_array().expect("tiermem stats");
    let compressed = stats
        .iter()
        .filter_map(|l| l.as_str())
        .find(|l| l.starts_with("compressed"))
        .unwrap_or_else(|| panic!("no compressed line in {run}"));
    let stored: u64 = compressed
        .split("stored ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no stored count in {compressed:?}"));
    // 64 MiB of values in 16 MiB: most of them leave DRAM at least once.
    assert!(stored > 8192, "{compressed}");
}

#[test]
fn bench_redis_refuses_unknown_value_contents_and_names_the_choices() {
    let out = tiermem()
        .args(["bench-redis", "--data", "prose"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("prose") && stderr.contains("random, zero, text, mixed"),
        "{stderr}"
    );
}

#[test]
fn bench_redis_refuses_bad_compressed_mode_flags_with_the_reason() {
    if !redis_available() {
        return;
    }
    // The split itself is `tiermem bench`'s (bench_cli.rs checks its
    // refusals); these show bench-redis takes the flags through it.
    let cases: [(&[&str], &[&str]); 3] = [
        (
            &["--pool-in-budget"],
            &["--pool-in-budget", "add one to --modes"],
        ),
        (
            &["--pool-in-budget", "--modes", "kernel-zram"],
            &["kernel-zram", "mem_limit", "bench-redis does not"],
        ),
        (
            &["--page-cluster", "99"],
            &["--page-cluster '99'", "keep", "0-31"],
        ),
    ];
    for (flags, words) in cases {
        let out = tiermem().arg("bench-redis").args(flags).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {err}");
        for w in words {
            assert!(err.contains(w), "{flags:?}: {w} missing: {err}");
        }
    }
}
