//! `tiermem bench` with the kernel's compressed tiers, kernel-zswap and
//! kernel-zram, run for real: pages must be stored compressed, every page
//! verified, and every setting the modes changed must be back afterwards,
//! with no swap left on. One test in its own binary, as the modes refuse
//! to run while another test's swapfile is on.

mod timed;

use std::path::Path;

const ZSWAP: &str = "/sys/module/zswap/parameters";
const ZRAM: &str = "/sys/block/zram0";
/// The compressed modes refuse to run while another swap area is on, so
/// this file's tests, each of which turns swap on, take turns.
static MACHINE_SWAP: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Every zswap parameter and zram0 attribute the modes touch, and the
/// mounts and swaps, as they are now.
fn machine_settings() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dir in [ZSWAP, ZRAM] {
        for name in [
            "enabled",
            "compressor",
            "max_pool_percent",
            "shrinker_enabled",
            "accept_threshold_percent",
            "comp_algorithm",
            "disksize",
            "initstate",
        ] {
            let path = Path::new(dir).join(name);
            if let Ok(v) = std::fs::read_to_string(&path) {
                out.push((path.display().to_string(), v.trim().to_string()));
            }
        }
    }
    let debugfs_mounted = std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some("/sys/kernel/debug"));
    out.push(("debugfs mounted".into(), debugfs_mounted.to_string()));
    out
}

fn active_swaps() -> Vec<String> {
    std::fs::read_to_string("/proc/swaps")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect()
}

/// Runs `tiermem bench ARGS --no-device-check --json` (1 s measured) on its
/// own (the compressed modes refuse to share the machine's swap) and checks
/// that it left every setting as it found it and no swap on. `None` where
/// the machine cannot run it (not root, no cgroup v1 memory controller).
fn bench_leaving_the_machine_as_it_was(args: &[&str]) -> Option<std::process::Output> {
    let _turn = MACHINE_SWAP.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() || !Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
        eprintln!("skipped: needs root and the cgroup v1 memory controller");
        return None;
    }
    let before = machine_settings();
    let out = timed::tiermem_within(300)
        .arg("bench")
        .args(args)
        .args(["--duration", "1", "--warmup", "0.2"])
        .args(["--no-device-check", "--json"])
        .output()
        .unwrap();
    assert_eq!(machine_settings(), before, "settings not restored");
    assert!(
        active_swaps().is_empty(),
        "swap left on: {:?}",
        active_swaps()
    );
    Some(out)
}

#[test]
fn zswap_and_zram_store_pages_compressed_and_leave_the_machine_as_it_was() {
    let Some(out) = bench_leaving_the_machine_as_it_was(&[
        "--modes",
        "kernel-zswap,kernel-zram",
        "--data",
        "text",
        "--working-set",
        "256M",
        "--dram",
        "64M",
    ]) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stdout}\n{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(json["workload"]["data"], "text", "{stdout}");
    let results = json["results"].as_array().unwrap();
    let mode = |name: &str| {
        results
            .iter()
            .find(|r| r["mode"] == name)
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
    };
    for (name, stored, ratio) in [
        (
            "kernel-zswap",
            "zswap_stored_pages",
            "zswap_compression_ratio",
        ),
        (
            "kernel-zram",
            "zram_orig_data_size",
            "zram_compression_ratio",
        ),
    ] {
        let r = mode(name);
        assert!(
            r["accesses"].as_u64().unwrap_or(0) > 0,
            "{name} did not run: {r}"
        );
        let v = &r["verify"];
        assert_eq!(v["pages_checked"].as_u64(), Some(256 * 256), "{name}: {v}");
        assert_eq!(v["lost"].as_u64(), Some(0), "{name}: {v}");
        assert_eq!(v["corrupted"].as_u64(), Some(0), "{name}: {v}");
        let counters = &r["counters"];
        assert!(
            counters[stored].as_f64().unwrap_or(0.0) > 0.0,
            "{name} stored nothing: {counters}"
        );
        // Text compresses about 2.4x with LZ4; lzo-rle and lz4 land near.
        let got = counters[ratio].as_f64().unwrap_or(0.0);
        assert!((1.5..6.0).contains(&got), "{name}: ratio {got}: {counters}");
        assert!(
            r["notes"].as_array().is_some_and(|n| n
                .iter()
                .any(|n| n.as_str().is_some_and(|n| n.contains("ratio")))),
            "{name}: no note on the tier: {r}"
        );
    }
}

#[test]
fn pool_in_budget_caps_zswaps_pool_at_tiermems_share_of_the_budget() {
    let Some(out) = bench_leaving_the_machine_as_it_was(&[
        "--modes",
        "tiermem,kernel-zswap",
        "--pool-in-budget",
        "--data",
        "text",
        "--working-set",
        "1536M",
        "--dram",
        "512M",
    ]) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("steps of 1%") {
        eprintln!("skipped: this machine's memory is too large for a 512M budget: {stderr}");
        return;
    }
    assert!(out.status.success(), "bench failed: {stdout}\n{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let results = json["results"].as_array().unwrap();
    let zswap = results
        .iter()
        .find(|r| r["mode"] == "kernel-zswap")
        .unwrap_or_else(|| panic!("no kernel-zswap in {stdout}"));
    let v = &zswap["verify"];
    assert_eq!(v["lost"].as_u64(), Some(0), "{v}");
    assert_eq!(v["corrupted"].as_u64(), Some(0), "{v}");
    let notes = zswap["notes"].to_string();
    let split = notes
        .split("pool in budget: zswap's pool at most ")
        .nth(1)
        .unwrap_or_else(|| panic!("no split in the notes: {notes}"));
    let percent: u64 = split.split('%').next().unwrap().parse().unwrap();
    let ram = std::fs::read_to_string("/proc/meminfo").unwrap();
    let ram_kib: u64 = ram
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let cap = ram_kib * 1024 / 100 * percent;
    let pool = zswap["counters"]["zswap_pool_total_size"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(pool > 0.0, "zswap stored nothing: {zswap}");
    // zswap stops storing once past its cap, by at most a few pages.
    assert!(
        pool <= cap as f64 * 1.02,
        "pool of {pool} bytes past its cap of {cap}: {zswap}"
    );
    let tiermem = results.iter().find(|r| r["mode"] == "tiermem").unwrap();
    let tier_notes = tiermem["notes"].to_string();
    let share = split.split("tiermem's pool at most ").nth(1).unwrap();
    let share = share.split('%').next().unwrap();
    assert!(
        tier_notes.contains(&format!("at most {share}% of the budget")),
        "tiermem's share is not zswap's: {tier_notes} / {notes}"
    );
}
