//! The probe against tiermem configurations whose organization is known
//! (issue #5's recovery criterion): cache size within ±10% of the budget,
//! line size = page size exactly, no prefetch, fully associative (tiermem
//! today), write-back.
//!
//! Tiermem's adaptive read-ahead (`TIERMEM_READAHEAD`, on by default) is a
//! prefetcher whose degree grows with the stream; these configurations turn
//! it off so that "prefetch 0" is the known truth.
//!
//! Needs userfaultfd and `target/<profile>/libtiermem.so` (built with the
//! workspace). The probes run one at a time: they time accesses, and two at
//! once would disturb each other.

use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

struct Known {
    dram: u64,
    page: u64,
}

fn probe(k: Known) {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_tiermem-probe"))
        .args(["--target", "tiermem", "--json", "--seed"])
        .arg(format!("{}", k.page))
        .arg("--dram")
        .arg(k.dram.to_string())
        .arg("--page-size")
        .arg(k.page.to_string())
        .arg("--backing")
        .arg(std::env::temp_dir())
        .env("TIERMEM_READAHEAD", "off")
        .env_remove("TIERMEM_POLICY")
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
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        [
            "associativity",
            "cache_size_bytes",
            "line_size_bytes",
            "prefetch_lines",
            "write_policy"
        ],
        "exactly the five keys"
    );
    println!("budget {} page {}: {v} ({secs:.1} s)", k.dram, k.page);
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
    assert_eq!(v["prefetch_lines"].as_u64(), Some(0), "prefetch: {v}");
    assert_eq!(v["associativity"].as_u64(), Some(0), "associativity: {v}");
    assert_eq!(
        v["write_policy"].as_str(),
        Some("write-back"),
        "write policy: {v}"
    );
    assert!(secs < 60.0, "the probe took {secs:.1} s");
}

#[test]
fn fully_associative_4k_pages_no_prefetch_write_back() {
    probe(Known {
        dram: 8 << 20,
        page: 4 << 10,
    });
}

#[test]
fn sixteen_kib_pages() {
    probe(Known {
        dram: 16 << 20,
        page: 16 << 10,
    });
}

#[test]
fn sixty_four_kib_pages() {
    probe(Known {
        dram: 16 << 20,
        page: 64 << 10,
    });
}
