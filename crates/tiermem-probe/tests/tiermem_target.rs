//! The probe against tiermem configurations whose organization is known,
//! recovered to this precision: cache size within ±10% of the budget,
//! line size = page size exactly, associativity, prefetch degree and write
//! policy exactly. Five organizations are covered: fully associative with
//! 4 KiB pages and no prefetch (write-back), 4-way with 16 KiB pages,
//! direct-mapped with 64 KiB pages (the memory-mode preset), write-through,
//! and a prefetch degree of 4; plus two more page sizes, and tiermem's
//! adaptive read-ahead, which must be seen as prefetching.
//!
//! Needs userfaultfd and `target/<profile>/libtiermem.so` (built with the
//! workspace). The probes run one at a time: they time accesses, and two at
//! once would disturb each other.

use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A configuration, as flags, and what the probe must find.
struct Known {
    dram: u64,
    page: u64,
    flags: &'static [&'static str],
    associativity: u64,
    prefetch: u64,
    write_policy: &'static str,
}

impl Known {
    /// Fully associative, write-back, no prefetch: tiermem with read-ahead off.
    fn plain(dram: u64, page: u64) -> Known {
        Known {
            dram,
            page,
            flags: &["--prefetch", "0"],
            associativity: 0,
            prefetch: 0,
            write_policy: "write-back",
        }
    }
}

/// Runs the probe; returns its JSON output (checked for exactly the five
/// result keys beside the envelope every tiermem `--json` carries).
fn run_probe(k: &Known, readahead: &str) -> serde_json::Value {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_tiermem-probe"))
        .args(["--target", "tiermem", "--json", "--seed"])
        .arg(k.page.to_string())
        .arg("--dram")
        .arg(k.dram.to_string())
        .arg("--page-size")
        .arg(k.page.to_string())
        .arg("--backing")
        .arg(std::env::temp_dir())
        .args(k.flags)
        .env("TIERMEM_READAHEAD", readahead)
        // The organization to recover is the DRAM cache's: a compressed
        // tier would hold the probe's regular pages and show up as a
        // larger cache (which it is, to a program).
        .env("TIERMEM_COMPRESS", "off")
        .env_remove("TIERMEM_POLICY")
        .env_remove("TIERMEM_PRESET")
        .env_remove("TIERMEM_ASSOCIATIVITY")
        .env_remove("TIERMEM_PREFETCH")
        .env_remove("TIERMEM_WRITE_POLICY")
        .env_remove("TIERMEM_INCLUSION")
        .output()
        .expect("running tiermem-probe");
    let secs = started.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "probe failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON output");
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "associativity",
            "cache_size_bytes",
            "command_line",
            "host",
            "kernel",
            "line_size_bytes",
            "prefetch_lines",
            "schema",
            "tiermem_version",
            "write_policy"
        ],
        "exactly the five keys and the envelope"
    );
    assert_eq!(v["schema"], "tiermem.probe/1");
    println!(
        "budget {} page {} {:?} read-ahead {readahead}: {v} ({secs:.1} s)",
        k.dram, k.page, k.flags
    );
    assert!(secs < 60.0, "the probe took {secs:.1} s");
    v
}

fn recovers(k: Known) {
    let v = run_probe(&k, "off");
    let size = v["cache_size_bytes"].as_u64().unwrap() as f64;
    let budget = k.dram as f64;
    assert!(
        (size - budget).abs() <= 0.10 * budget,
        "cache size {size} not within 10% of the budget {budget}: {v}"
    );
    assert_eq!(
        v["line_size_bytes"].as_u64(),
        Some(k.page),
        "line size: {v}"
    );
    assert_eq!(
        v["prefetch_lines"].as_u64(),
        Some(k.prefetch),
        "prefetch: {v}"
    );
    assert_eq!(
        v["associativity"].as_u64(),
        Some(k.associativity),
        "associativity: {v}"
    );
    assert_eq!(
        v["write_policy"].as_str(),
        Some(k.write_policy),
        "write policy: {v}"
    );
}

#[test]
fn fully_associative_4k_pages_no_prefetch_write_back() {
    recovers(Known::plain(8 << 20, 4 << 10));
}

#[test]
fn four_way_16k_pages() {
    recovers(Known {
        flags: &["--associativity", "4", "--prefetch", "0"],
        associativity: 4,
        ..Known::plain(16 << 20, 16 << 10)
    });
}

#[test]
fn direct_mapped_64k_pages_memory_mode_preset() {
    recovers(Known {
        flags: &["--preset", "memory-mode"],
        associativity: 1,
        ..Known::plain(16 << 20, 64 << 10)
    });
}

#[test]
fn write_through() {
    recovers(Known {
        flags: &["--write-policy", "write-through", "--prefetch", "0"],
        write_policy: "write-through",
        ..Known::plain(8 << 20, 4 << 10)
    });
}

#[test]
fn prefetch_of_four() {
    recovers(Known {
        flags: &["--prefetch", "4"],
        prefetch: 4,
        ..Known::plain(8 << 20, 4 << 10)
    });
}

#[test]
fn sixteen_kib_pages() {
    recovers(Known::plain(16 << 20, 16 << 10));
}

/// The prefetch test is not blind: tiermem's adaptive read-ahead is seen as
/// prefetching, and the other parameters are still recovered.
#[test]
fn read_ahead_is_seen_as_prefetch() {
    let k = Known {
        flags: &[],
        ..Known::plain(8 << 20, 4 << 10)
    };
    let v = run_probe(&k, "on");
    assert!(
        v["prefetch_lines"].as_u64().unwrap() > 0,
        "no prefetch seen: {v}"
    );
    assert_eq!(
        v["line_size_bytes"].as_u64(),
        Some(k.page),
        "line size: {v}"
    );
    assert_eq!(v["associativity"].as_u64(), Some(0), "associativity: {v}");
}
