//! `tiermem bench` run for real: all modes, JSON output, verification, and
//! cleanup of kernel-swap mode on Ctrl-C.

mod timed;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Every run under timeout(1), so that a hang fails the test.
fn tiermem() -> Command {
    timed::tiermem_within(300)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn our_swapfiles(pid: u32) -> Vec<String> {
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    swaps
        .lines()
        .filter(|l| l.contains(&format!(".tiermem-swap-{pid}-")))
        .map(str::to_string)
        .collect()
}

fn our_cgroups(pid: u32) -> Vec<String> {
    std::fs::read_dir("/sys/fs/cgroup/memory")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("tiermem-bench-{pid}-")))
                .collect()
        })
        .unwrap_or_default()
}

/// The JSON report of a bench run that must have succeeded, and its text.
fn successful_json(out: &std::process::Output) -> (serde_json::Value, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bench failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = serde_json::from_str(&stdout).expect("--json prints only JSON");
    (json, stdout)
}

#[test]
fn bench_runs_every_mode_and_verifies_every_page() {
    let out = tiermem()
        .args([
            "bench",
            "--working-set",
            "96M",
            "--dram",
            "24M",
            "--duration",
            "1",
            "--warmup",
            "0.2",
        ])
        .args([
            "--threads",
            "2",
            "--pattern",
            "zipf:0.9",
            "--json",
            "--no-device-check",
        ])
        .output()
        .unwrap();
    let (json, stdout) = successful_json(&out);
    let results = json["results"].as_array().unwrap();
    let expected_modes = if is_root() { 3 } else { 2 };
    let ran: Vec<&serde_json::Value> = results
        .iter()
        .filter(|r| r["accesses"].as_u64().unwrap_or(0) > 0)
        .collect();
    assert_eq!(ran.len(), expected_modes, "modes that ran: {stdout}");
    for r in ran {
        let v = &r["verify"];
        assert_eq!(v["pages_checked"].as_u64(), Some(96 * 256), "{v}");
        assert_eq!(v["lost"].as_u64(), Some(0), "{}: {v}", r["mode"]);
        assert_eq!(v["corrupted"].as_u64(), Some(0), "{}: {v}", r["mode"]);
    }
    let tm = results.iter().find(|r| r["mode"] == "tiermem").unwrap();
    assert!(
        tm["counters"]["page_outs"].as_f64().unwrap() > 0.0,
        "tiermem must have paged: {tm}"
    );
    // Read-ahead, neighbour reads among it, is in the counters and a note.
    let read_ahead = tm["counters"]["prefetch_issued"].as_f64().unwrap();
    let neighbours = tm["counters"]["neighbour_reads"].as_f64().unwrap();
    assert!(neighbours <= read_ahead, "{tm}");
    assert!(
        tm["notes"].to_string().contains("neighbour reads"),
        "no read-ahead note: {tm}"
    );
    assert!(
        json["ratios"].as_object().is_some_and(|m| !m.is_empty()),
        "ratios missing"
    );
    // How idle vCPUs wait goes with the figures: on a guest that halts at
    // once, the report says so.
    let idle = tiermem_core::cpuidle::IdleWait::read();
    let reported = &json["idle_wait"];
    assert_eq!(reported["guest"].as_bool(), Some(idle.guest), "{reported}");
    assert_eq!(
        reported["halts_at_once"].as_bool(),
        Some(idle.halts_at_once()),
        "{reported}"
    );
    match reported["note"].as_str() {
        Some(note) => assert!(
            idle.halts_at_once() && note.contains(tiermem_core::cpuidle::HALT_NOTE_MARK),
            "a note where none belongs, or without its words: {reported}"
        ),
        None => assert!(!idle.halts_at_once(), "no note: {reported}"),
    }
}

#[test]
fn cpus_places_every_mode_and_is_reported() {
    let status = std::fs::read_to_string("/proc/self/status").expect("our status");
    let cpu: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|list| list.trim().split([',', '-']).next()?.parse().ok())
        .expect("a CPU we may use");
    let out = tiermem()
        .args(["bench", "--working-set", "16M", "--dram", "8M"])
        .args([
            "--duration",
            "0.3",
            "--warmup",
            "0",
            "--modes",
            "dram,tiermem",
        ])
        .args(["--cpus", &cpu.to_string(), "--json", "--no-device-check"])
        .output()
        .unwrap();
    let (json, _) = successful_json(&out);
    assert_eq!(
        json["cpus"]["list"],
        serde_json::json!([cpu]),
        "{}",
        json["cpus"]
    );
    for r in json["results"].as_array().unwrap() {
        assert!(r["accesses"].as_u64().unwrap_or(0) > 0, "{}", r["mode"]);
        assert_eq!(r["verify"]["lost"].as_u64(), Some(0), "{}", r["verify"]);
        assert_eq!(
            r["verify"]["corrupted"].as_u64(),
            Some(0),
            "{}",
            r["verify"]
        );
    }
}

/// A scan is judged against the device's sequential read bandwidth, so the
/// bench measures it in the same run and reports the scan's share of it; a
/// report saved by `tiermem device` is quoted beside it.
#[test]
fn a_scan_is_compared_with_the_device_measured_in_the_same_run() {
    let cache = tempfile::tempdir().expect("a cache directory");
    let saved = tiermem()
        .args(["device", "/var/tmp", "--quick", "--engines", "psync"])
        .env("XDG_CACHE_HOME", cache.path())
        .output()
        .unwrap();
    assert!(
        saved.status.success(),
        "{}",
        String::from_utf8_lossy(&saved.stderr)
    );
    let out = tiermem()
        .env("XDG_CACHE_HOME", cache.path())
        .args(["bench", "--working-set", "64M", "--dram", "16M"])
        .args(["--duration", "0.5", "--warmup", "0", "--modes", "tiermem"])
        .args(["--pattern", "sequential", "--read-ratio", "100", "--json"])
        .output()
        .unwrap();
    let (json, stdout) = successful_json(&out);
    let device_mb_s = json["device_seq_read_mb_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("no sequential device figure: {stdout}"));
    assert!(device_mb_s > 0.0, "{stdout}");
    let source = json["device_source"].as_str().unwrap_or_default();
    assert!(source.contains("sequential: "), "{source}");
    assert!(
        source.contains("`tiermem device` report saved 0.0 h ago: QD1 4k read "),
        "{source}"
    );
    let summary = &json["summary"][0];
    let pages_per_sec = summary["pages_per_sec"].as_f64().unwrap();
    let mb_s = summary["mb_per_sec"].as_f64().expect("MB/s of the scan");
    assert!(
        (mb_s - pages_per_sec * 4096.0 / 1e6).abs() < 1e-6 * mb_s.max(1.0),
        "{summary}"
    );
    let share = summary["of_device_seq_read"].as_f64().expect("the share");
    assert!((share - mb_s / device_mb_s).abs() < 1e-9, "{summary}");
    // A scan's device limit is that bandwidth, in pages.
    let limit = json["device_limit"]["pages_per_sec"]
        .as_f64()
        .expect("a limit");
    assert!(
        (limit - device_mb_s * 1e6 / 4096.0).abs() < 1e-6 * limit,
        "{stdout}"
    );
    let of_limit = summary["of_device_limit"]
        .as_f64()
        .expect("the share of it");
    assert!((of_limit - share).abs() < 1e-9, "{summary}");
    assert_eq!(json["results"][0]["verify"]["lost"].as_u64(), Some(0));
}

/// Random misses are judged against what a pager that cost nothing would
/// reach: every miss waits for one page read at the run's queue depth, and
/// the budget allows uniform draws a hit ratio of its share of the set.
#[test]
fn random_misses_are_compared_with_the_device_limit() {
    let out = tiermem()
        .args([
            "bench",
            "--working-set",
            "32M",
            "--dram",
            "8M",
            "--threads",
            "2",
        ])
        .args(["--duration", "0.5", "--warmup", "0", "--modes", "tiermem"])
        .args(["--pattern", "uniform", "--json"])
        .output()
        .unwrap();
    let (json, stdout) = successful_json(&out);
    // Timed asleep and spinning; the faster sets the limit.
    let reads = json["device_page_reads"].as_array().expect("page reads");
    assert_eq!(reads.len(), 2, "{stdout}");
    for read in reads {
        assert_eq!(read["job"]["threads"].as_u64(), Some(2), "{stdout}");
        assert_eq!(read["job"]["block_bytes"].as_u64(), Some(4096), "{stdout}");
    }
    let mean_ns = reads
        .iter()
        .map(|read| read["mean_ns"].as_f64().expect("a QD2 read's mean"))
        .fold(f64::INFINITY, f64::min);
    let limit = &json["device_limit"];
    assert_eq!(limit["best_hit_ratio"].as_f64(), Some(0.25), "{limit}");
    let pages_per_sec = limit["pages_per_sec"].as_f64().unwrap();
    let expected = 2.0 / (0.75 * mean_ns * 1e-9);
    // JSON times are whole nanoseconds: the mean read is off by half a
    // nanosecond at most.
    let rounding = 0.5 / mean_ns + 1e-9;
    assert!((pages_per_sec / expected - 1.0).abs() < rounding, "{limit}");
    let summary = &json["summary"][0];
    let share = summary["of_device_limit"].as_f64().expect("the share");
    let measured = summary["pages_per_sec"].as_f64().unwrap();
    assert!((share - measured / pages_per_sec).abs() < 1e-9, "{summary}");
    assert!(share > 0.0, "{summary}");
    // Misses happen at 4x the budget: both miss percentiles are given, in order.
    let p50 = summary["miss_p50_ns"].as_u64().expect("miss p50");
    let p99 = summary["miss_p99_ns"].as_u64().expect("miss p99");
    assert!(p50 > 0 && p99 >= p50, "{summary}");
    assert_eq!(json["results"][0]["verify"]["lost"].as_u64(), Some(0));
}

#[test]
fn signal_fault_delivery_runs_verifies_and_is_reported() {
    let out = tiermem()
        .args(["bench", "--working-set", "32M", "--dram", "8M"])
        .args(["--duration", "0.5", "--warmup", "0", "--modes", "tiermem"])
        .args(["--faults", "signal", "--json", "--no-device-check"])
        .output()
        .unwrap();
    let (json, _) = successful_json(&out);
    assert_eq!(json["faults"], "signal");
    let r = &json["results"][0];
    assert!(
        r["counters"]["page_ins"].as_f64().unwrap_or(0.0) > 0.0,
        "{r}"
    );
    assert_eq!(r["verify"]["lost"].as_u64(), Some(0), "{}", r["verify"]);
    assert_eq!(
        r["verify"]["corrupted"].as_u64(),
        Some(0),
        "{}",
        r["verify"]
    );
    let notes = r["notes"].to_string();
    assert!(notes.contains("faulting thread (SIGBUS"), "{notes}");
}

/// `--suite --rounds 2` with tiermem alone (no root needed): every case
/// runs in each round, every page of every round is verified, and the
/// medians cover every case with one figure slot per round. Its output is
/// no terminal, so stderr reports each case as it ends.
#[test]
fn a_suite_in_rounds_runs_every_case_each_round_and_sums_them_up() {
    let out = tiermem()
        .args([
            "bench",
            "--suite",
            "--rounds",
            "2",
            "--modes",
            "tiermem",
            "--working-set",
            "32M",
            "--dram",
            "8M",
            "--duration",
            "0.3",
            "--warmup",
            "0.1",
            "--no-device-check",
            "--json",
        ])
        .output()
        .unwrap();
    let (json, stdout) = successful_json(&out);
    assert_eq!(json["schema"], "tiermem.bench-suite-rounds/1", "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let progress: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("tiermem bench --suite: round "))
        .collect();
    assert_eq!(progress.len(), 10, "one line per case and round: {stderr}");
    assert!(
        progress[0].starts_with("tiermem bench --suite: round 1/2, 1/5 done: ")
            && progress[0].contains("tiermem ")
            && progress[0].contains(" pages/s"),
        "{stderr}"
    );
    let rounds = json["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 2, "{stdout}");
    for round in rounds {
        let cases = round["suite"].as_array().expect("each round is a suite");
        assert_eq!(cases.len(), 5, "{stdout}");
        for case in cases {
            let r = &case["results"][0];
            assert_eq!(r["mode"], "tiermem");
            assert_eq!(r["verify"]["pages_checked"], 8192, "{case}");
            assert_eq!(r["verify"]["lost"], 0, "{case}");
            assert_eq!(r["verify"]["corrupted"], 0, "{case}");
        }
    }
    let medians = json["medians"]["cases"].as_array().expect("medians");
    assert_eq!(medians.len(), 5);
    for case in medians {
        // Without kernel swap there is no ratio, so no verdict either.
        assert_eq!(case["each_round"].as_array().map(Vec::len), Some(2));
        assert!(case["met"].is_null(), "{case}");
    }
}

#[test]
fn bad_flags_are_refused_clearly() {
    // Each bad value, and the words the refusal must name: the flag or the
    // value, and the accepted forms.
    let cases: [(&[&str], &[&str]); 11] = [
        (&["--rounds", "2"], &["--rounds applies to --suite"]),
        (&["--suite", "--rounds", "0"], &["--rounds", "1..=20"]),
        (&["--dram", "lots"], &["--dram", "lots", "256M"]),
        (
            &["--pattern", "zipf:abc"],
            &["zipf:abc", "uniform", "sequential"],
        ),
        (&["--cpus", "0,x"], &["--cpus", "\"x\"", "irq"]),
        (
            &["--faults", "irq"],
            &["--faults", "irq", "handler or signal"],
        ),
        (
            &["--pool-in-budget"],
            &["--pool-in-budget", "add one to --modes"],
        ),
        (
            &[
                "--pool-in-budget",
                "--modes",
                "kernel-zram",
                "--zram-size",
                "1G",
            ],
            &["--pool-in-budget sizes zram itself", "--zram-size"],
        ),
        (
            &[
                "--pool-in-budget",
                "--modes",
                "kernel-zswap",
                "--dram",
                "64M",
            ],
            &["steps of 1%", "use a budget of at least"],
        ),
        (
            &["--page-cluster", "32"],
            &["--page-cluster '32'", "keep", "0-31"],
        ),
        (
            &["--page-cluster", "off"],
            &["--page-cluster 'off'", "keep", "0-31"],
        ),
    ];
    for (flags, words) in cases {
        let out = tiermem().arg("bench").args(flags).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?} was accepted");
        for w in words {
            assert!(err.contains(w), "{flags:?}: {w} missing: {err}");
        }
    }
}

#[test]
fn ctrl_c_during_kernel_swap_mode_removes_swap_and_cgroup() {
    if !is_root() || !std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
        eprintln!("skipped: needs root and the cgroup v1 memory controller");
        return;
    }
    // Not under timeout(1): the test signals this very process, and bounds
    // its own waits.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tiermem"))
        .args([
            "bench",
            "--modes",
            "kernel-swap",
            "--working-set",
            "128M",
            "--dram",
            "32M",
            "--duration",
            "60",
        ])
        .args(["--no-device-check", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while our_swapfiles(pid).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !our_swapfiles(pid).is_empty(),
        "kernel-swap mode never enabled its swapfile"
    );
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: sending SIGINT to our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("bench did not stop within 60 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "bench should stop on SIGINT");
    assert!(
        our_swapfiles(pid).is_empty(),
        "swapfile still active after Ctrl-C: {:?}",
        our_swapfiles(pid)
    );
    assert!(
        our_cgroups(pid).is_empty(),
        "cgroup left after Ctrl-C: {:?}",
        our_cgroups(pid)
    );
    let leftovers: Vec<_> = std::fs::read_dir("/var/tmp")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!(".tiermem-swap-{pid}-"))
        })
        .collect();
    assert!(leftovers.is_empty(), "swapfile not deleted");
}
