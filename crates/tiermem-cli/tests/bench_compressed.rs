//! `tiermem bench` with the kernel's compressed tiers, kernel-zswap and
//! kernel-zram, run for real: pages must be stored compressed, every page
//! verified, and every setting the modes changed must be back afterwards,
//! with no swap left on. One test in its own binary, as the modes refuse
//! to run while another test's swapfile is on.

mod redis_tools;
mod timed;

use std::path::Path;

use redis_tools::redis_available;

const ZSWAP: &str = "/sys/module/zswap/parameters";
const ZRAM: &str = "/sys/block/zram0";
const PAGE_CLUSTER: &str = "/proc/sys/vm/page-cluster";
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
    if let Ok(v) = std::fs::read_to_string(PAGE_CLUSTER) {
        out.push((PAGE_CLUSTER.into(), v.trim().to_string()));
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
    leaving_the_machine_as_it_was(|| {
        timed::tiermem_within(300)
            .arg("bench")
            .args(args)
            .args(["--duration", "1", "--warmup", "0.2"])
            .args(["--no-device-check", "--json"])
            .output()
            .unwrap()
    })
}

/// Runs `run` on its own and checks that it left every setting as it
/// found it and no swap on; `None` where the machine cannot run it.
fn leaving_the_machine_as_it_was(
    run: impl FnOnce() -> std::process::Output,
) -> Option<std::process::Output> {
    let _turn = MACHINE_SWAP.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() || !Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
        eprintln!("skipped: needs root and the cgroup v1 memory controller");
        return None;
    }
    let before = machine_settings();
    let out = run();
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
        for words in ["ratio", "vm.page-cluster 0"] {
            assert!(
                r["notes"].as_array().is_some_and(|n| n
                    .iter()
                    .any(|n| n.as_str().is_some_and(|n| n.contains(words)))),
                "{name}: no note with {words:?}: {r}"
            );
        }
    }
}

/// `tiermem bench --modes MODES --pool-in-budget` on 1.5 GiB of text in
/// 512 MiB, checked to succeed; its JSON, or `None` where the machine
/// cannot run it.
fn text_with_pools_in_budget(modes: &str) -> Option<serde_json::Value> {
    let out = bench_leaving_the_machine_as_it_was(&[
        "--modes",
        modes,
        "--pool-in-budget",
        "--data",
        "text",
        "--working-set",
        "1536M",
        "--dram",
        "512M",
    ])?;
    if budget_too_small_for_this_machine(&out, "512M") {
        return None;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stdout}\n{stderr}");
    Some(serde_json::from_str(&stdout).expect("JSON"))
}

/// The run of `mode` in a bench report, every one of its 1.5 GiB of pages
/// checked and intact.
fn intact_run<'a>(json: &'a serde_json::Value, mode: &str) -> &'a serde_json::Value {
    let run = json["results"]
        .as_array()
        .and_then(|runs| runs.iter().find(|r| r["mode"] == mode))
        .unwrap_or_else(|| panic!("no {mode} in {json}"));
    let v = &run["verify"];
    assert_eq!(v["pages_checked"].as_u64(), Some(1536 * 256), "{mode}: {v}");
    assert_eq!(v["lost"].as_u64(), Some(0), "{mode}: {v}");
    assert_eq!(v["corrupted"].as_u64(), Some(0), "{mode}: {v}");
    run
}

#[test]
fn pool_in_budget_caps_zswaps_pool_at_tiermems_share_of_the_budget() {
    let Some(json) = text_with_pools_in_budget("tiermem,kernel-zswap") else {
        return;
    };
    let zswap = intact_run(&json, "kernel-zswap");
    let notes = zswap["notes"].to_string();
    let percent = percent_after(&notes, "pool in budget: zswap's pool at most ");
    let pool = zswap["counters"]["zswap_pool_total_size"]
        .as_f64()
        .unwrap_or(0.0);
    assert_within_zswap_cap(pool, percent, zswap);
    let tiermem = intact_run(&json, "tiermem");
    let tier_notes = tiermem["notes"].to_string();
    let share = percent_after(&notes, "tiermem's pool at most ");
    assert!(
        tier_notes.contains(&format!("at most {share}% of the budget")),
        "tiermem's share is not zswap's: {tier_notes} / {notes}"
    );
}

/// zram under `--pool-in-budget`: sized so that its pool fills at the cap,
/// with a swapfile behind it that takes the pages beyond; every page of
/// the working set comes back intact.
#[test]
fn pool_in_budget_fills_zram_to_the_cap_and_passes_the_rest_to_a_swapfile() {
    let Some(json) = text_with_pools_in_budget("kernel-zram") else {
        return;
    };
    let zram = intact_run(&json, "kernel-zram");
    let notes = zram["notes"].to_string();
    let mib_after = |marker: &str| -> f64 {
        notes
            .split(marker)
            .nth(1)
            .and_then(|rest| rest.split(" MiB").next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {marker:?} in the notes: {notes}"))
    };
    let disksize = mib_after("zram sized to ") * 1048576.0;
    let cap = mib_after("fills at the ") * 1048576.0;
    let counters = &zram["counters"];
    let stored = counters["zram_orig_data_size"].as_f64().unwrap_or(0.0);
    let used = counters["zram_mem_used_max"].as_f64().unwrap_or(0.0);
    // Full: the rest of the 1.5 GiB beyond the cgroup went to the swapfile.
    assert!(
        stored >= 0.95 * disksize,
        "zram not full: {stored} of {disksize}: {zram}"
    );
    assert!(
        used <= cap * 1.02 && used >= 0.8 * cap,
        "zram's pool of {used} bytes is not at its cap of {cap}: {zram}"
    );
    assert!(
        notes.contains("its pool peaked at") && !notes.contains("past it"),
        "the report does not hold the peak against the cap: {notes}"
    );
}

/// `bench-redis --modes tiermem,kernel-zswap --pool-in-budget` with text
/// values: both modes keep every key, zswap's pool stays within its cap,
/// and tiermem's pool takes the same share of the budget (past the 50% it
/// would take by default), with swap readahead off for zswap and every
/// setting put back.
#[test]
fn bench_redis_with_zswaps_pool_in_budget_keeps_every_key_and_gives_tiermem_the_same_share() {
    if !redis_available() {
        return;
    }
    let Some(out) = leaving_the_machine_as_it_was(|| {
        timed::tiermem_within(600)
            .args(["bench-redis", "--dataset", "768M", "--dram", "288M"])
            .args(["--requests", "2000", "--data", "text", "--json"])
            .args(["--modes", "tiermem,kernel-zswap", "--pool-in-budget"])
            .env_remove("TIERMEM_COMPRESS")
            .env_remove("TIERMEM_COMPRESS_SHARE")
            .output()
            .unwrap()
    }) else {
        return;
    };
    if budget_too_small_for_this_machine(&out, "288M") {
        return;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench-redis failed: {stdout}\n{stderr}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(json["data_loss"], false, "{stdout}");
    let modes = json["modes"].as_array().expect("modes");
    let mode = |name: &str| {
        modes
            .iter()
            .find(|m| m["mode"] == name)
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
    };
    for name in ["tiermem", "kernel-zswap"] {
        let m = mode(name);
        assert_eq!(m["status"], "ok", "{m}");
        for field in ["lost_keys", "corrupt_keys", "missing_after"] {
            assert_eq!(m["run"][field], 0, "{field} in {m}");
        }
    }
    let zswap = mode("kernel-zswap");
    let notes = zswap["notes"].to_string();
    assert!(notes.contains("vm.page-cluster 0"), "{notes}");
    let percent = percent_after(&notes, "zswap's pool at most ");
    let share = percent_after(&notes, "tiermem's pool at most ");
    assert!(
        share > 50,
        "the split should give tiermem more than its default: {notes}"
    );
    let tiermem = mode("tiermem");
    assert!(
        tiermem["notes"]
            .to_string()
            .contains(&format!("at most {share}% of the budget")),
        "{tiermem}"
    );
    // "compressed      3948 page(s) in 7.2 MiB (ratio 2.13); ..." at exit:
    // 768 MiB of text in 288 MiB fills the pool to its share, past the
    // default 50% (144 MiB).
    let line = tiermem["run"]["tiermem_stats"]
        .as_array()
        .and_then(|lines| {
            lines
                .iter()
                .filter_map(|l| l.as_str())
                .find(|l| l.starts_with("compressed"))
        })
        .unwrap_or_else(|| panic!("no compressed line in {tiermem}"))
        .to_string();
    let pool_mib: f64 = line
        .split(" in ")
        .nth(1)
        .and_then(|rest| rest.split(" MiB").next())
        .and_then(|m| m.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pool size in {line:?}"));
    let budget_mib = 288.0;
    assert!(
        pool_mib > budget_mib * 0.55 && pool_mib <= budget_mib * share as f64 / 100.0 * 1.02,
        "tiermem's pool of {pool_mib} MiB is not at its {share}% share: {line}"
    );
    let pool = zswap["run"]["compressed"]["zswap_pool_total_size"]
        .as_f64()
        .unwrap_or(0.0);
    assert_within_zswap_cap(pool, percent, zswap);
}

/// The whole percent that follows `marker` in a run's notes, as in "zswap's
/// pool at most 1% of ..." or "tiermem's pool at most 75% of ...".
fn percent_after(notes: &str, marker: &str) -> u64 {
    notes
        .split(marker)
        .nth(1)
        .and_then(|rest| rest.split('%').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no {marker:?} in the notes: {notes}"))
}

/// Whether the run was refused because zswap's 1% steps of this machine's
/// memory do not fit `budget`: then the test cannot run here.
fn budget_too_small_for_this_machine(out: &std::process::Output, budget: &str) -> bool {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let refused = !out.status.success() && stderr.contains("steps of 1%");
    if refused {
        eprintln!("skipped: this machine's memory is too large for a {budget} budget: {stderr}");
    }
    refused
}

/// zswap stops storing once past its cap, `percent` of the machine's
/// memory, by at most a few pages.
fn assert_within_zswap_cap(pool_bytes: f64, percent: u64, run: &serde_json::Value) {
    assert!(pool_bytes > 0.0, "zswap stored nothing: {run}");
    let cap = ram_bytes() / 100 * percent;
    assert!(
        pool_bytes <= cap as f64 * 1.02,
        "zswap's pool of {pool_bytes} bytes past its cap of {cap}: {run}"
    );
}

/// MemTotal, in bytes.
fn ram_bytes() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .expect("MemTotal in /proc/meminfo");
    kib * 1024
}
