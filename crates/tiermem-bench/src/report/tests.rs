//! The report rendered from synthetic results: rows, ratios, footnotes.

use std::collections::BTreeMap;

use super::*;
use crate::device_ref::DeviceLimit;
use crate::hit_ratio::{HitRatio, MissCount};
use crate::result::{VerifyReport, CPU_PERCENT};
use crate::scan_resistance::{ScanResistanceResult, ScanShape};
use tiermem_host::histogram::LatencyHistogram;

const SLOW_NS: u64 = 10_000;

/// A run where `fault_percent` of accesses take ~`fault_ns`, the rest 100 ns.
fn synthetic(mode: Mode, pages_per_sec: f64, fault_percent: u64, fault_ns: u64) -> ModeResult {
    let mut latency = LatencyHistogram::new();
    for i in 0..10_000u64 {
        latency.record(if i % 100 < fault_percent {
            fault_ns
        } else {
            100
        });
    }
    ModeResult {
        mode,
        accesses: 10_000,
        reads: 7_000,
        writes: 3_000,
        elapsed_s: 10_000.0 / pages_per_sec,
        pages_per_sec,
        page_size: 4096,
        latency,
        slow_threshold_ns: SLOW_NS,
        verify: VerifyReport {
            pages_checked: 4096,
            ..VerifyReport::default()
        },
        hit_ratio: HitRatio::new(
            10_000,
            MissCount {
                misses: 100 * fault_percent,
                device_reads: Some(200 * fault_percent),
                counters: BTreeMap::new(),
            },
            &format!("{} counters", mode.name()),
        ),
        first_touch_s: None,
        scan_resistance: None,
        counters: BTreeMap::new(),
        notes: Vec::new(),
    }
}

fn skipped(mode: Mode, why: &str) -> ModeResult {
    ModeResult {
        accesses: 0,
        reads: 0,
        writes: 0,
        pages_per_sec: 0.0,
        elapsed_s: 0.0,
        latency: LatencyHistogram::new(),
        verify: VerifyReport::default(),
        hit_ratio: None,
        notes: vec![why.to_string()],
        ..synthetic(mode, 1.0, 0, 0)
    }
}

fn three_modes() -> Vec<ModeResult> {
    vec![
        synthetic(Mode::Dram, 2_000_000.0, 0, 0),
        synthetic(Mode::Tiermem, 1_430_000.0, 5, 50_000),
        synthetic(Mode::KernelSwap, 1_000_000.0, 10, 90_000),
    ]
}

fn row<'a>(table: &'a str, label: &str) -> &'a str {
    table
        .lines()
        .find(|line| line.starts_with(label))
        .unwrap_or_else(|| panic!("no row '{label}' in\n{table}"))
}

#[test]
fn table_has_modes_in_order_and_ratios() {
    let table = render_table(&three_modes(), None);
    let header = table.lines().next().unwrap();
    let dram = header.find("dram").unwrap();
    let tiermem = header.find("tiermem").unwrap();
    let swap = header.find("kernel-swap").unwrap();
    assert!(dram < tiermem && tiermem < swap, "{table}");
    assert!(row(&table, "vs kernel-swap").contains("1.43x"), "{table}");
    assert!(row(&table, "vs dram").contains("0.715x"), "{table}");
    assert!(row(&table, "pages/s").contains("1.43M"), "{table}");
    assert!(row(&table, "accesses").contains("10,000"), "{table}");
    assert!(
        row(&table, "reads/writes").contains("7.00k/3.00k"),
        "{table}"
    );
    assert!(
        row(&table, "verification").contains("ok: 4,096 pages"),
        "{table}"
    );
    assert!(!table.contains("device reference"), "{table}");
    assert!(!table.contains("FAILED"), "{table}");
}

#[test]
fn hit_ratios_and_their_sources_are_shown() {
    let table = render_table(&three_modes(), None);
    let hits = row(&table, "hit ratio");
    assert!(
        hits.contains("100%") && hits.contains("95.00%") && hits.contains("90.00%"),
        "{table}"
    );
    let read_ahead = row(&table, "hit ratio, RA = miss");
    assert!(
        read_ahead.contains("90.00%") && read_ahead.contains("80.00%"),
        "{table}"
    );
    let misses = row(&table, "misses");
    assert!(
        misses.contains("500") && misses.contains("1,000"),
        "{table}"
    );
    for source in ["dram counters", "tiermem counters", "kernel-swap counters"] {
        assert!(table.contains(source), "{table}");
    }
    assert!(!table.contains("hot hit ratio"), "{table}");
}

#[test]
fn scan_resistance_rows_appear_with_the_workload() {
    let mut results = three_modes();
    let ratio = |misses: u64| {
        HitRatio::new(
            1000,
            MissCount {
                misses,
                device_reads: Some(misses + 10),
                counters: BTreeMap::new(),
            },
            "test",
        )
        .unwrap()
    };
    results[2].scan_resistance = Some(ScanResistanceResult {
        shape: ScanShape {
            hot_pages: 8,
            scan_pages: 32,
            chunk_pages: 4,
        },
        hot_during_scan: ratio(123),
        hot_after_scan: ratio(4),
        scan: ratio(900),
    });
    let table = render_table(&results, None);
    let during = row(&table, "hot hit ratio, during scan");
    assert!(during.ends_with("87.70%"), "{table}");
    let read_ahead = row(&table, "hot, during scan, RA = miss");
    assert!(read_ahead.ends_with("86.70%"), "{table}");
    assert!(row(&table, "hot hit ratio, after scan").ends_with("99.60%"));
    assert!(row(&table, "scan hit ratio").ends_with("10.00%"));
    // Modes without the result show the placeholder.
    assert!(during.contains(MISSING), "{table}");
}

#[test]
fn skipped_modes_and_missing_counters_show_no_hit_ratio() {
    let mut results = three_modes();
    results[1].hit_ratio = None;
    results[2] = skipped(Mode::KernelSwap, "not root");
    let table = render_table(&results, None);
    let hits = row(&table, "hit ratio");
    assert_eq!(hits.matches(MISSING).count(), 2, "{table}");
    assert!(!table.contains("tiermem counters"), "{table}");
}

#[test]
fn table_is_aligned() {
    let table = render_table(&three_modes(), None);
    let widths: Vec<usize> = table
        .lines()
        .take_while(|line| !line.is_empty())
        .map(|line| line.chars().count())
        .collect();
    assert!(widths.iter().all(|&width| width == widths[0]), "{table}");
}

#[test]
fn slow_rows_show_share_and_miss_latency() {
    let table = render_table(&three_modes(), None);
    let slow = row(&table, "slow (>= 10.0us)");
    assert!(
        slow.contains("0%") && slow.contains("5.00%") && slow.contains("10.0%"),
        "{table}"
    );
    let miss = row(&table, "slow p50 (miss)");
    assert!(
        miss.contains("50.0us") && miss.contains("90.0us"),
        "{table}"
    );
    assert!(
        miss.trim_start_matches("slow p50 (miss)").contains(MISSING),
        "{table}"
    );
}

#[test]
fn each_modes_process_cpu_is_shown_where_measured() {
    let mut results = three_modes();
    let table = render_table(&results, None);
    assert!(
        !table.contains("CPU (process)"),
        "no figures, no row: {table}"
    );
    results[1].counters.insert(CPU_PERCENT.into(), 193.6);
    results[2].counters.insert(CPU_PERCENT.into(), 52.2);
    let table = render_table(&results, None);
    let cpu = row(&table, "CPU (process)");
    assert!(cpu.contains("194%") && cpu.contains("52%"), "{table}");
    assert!(cpu.contains(MISSING), "dram has no figure here: {table}");
}

#[test]
fn bandwidth_is_shown_in_bytes_and_against_the_device() {
    let results = three_modes();
    let table = render_table(&results, None);
    let expected = results[1].pages_per_sec * 4096.0 / 1e6;
    assert!(
        row(&table, "MB/s").contains(&format!("{expected:.0}")),
        "{table}"
    );
    assert!(!table.contains("of dev seq read"), "{table}");

    let device = DeviceRef {
        qd1_read_latency_us: None,
        seq_read_mb_s: Some(expected * 2.0),
        ..DeviceRef::default()
    };
    let table = render_table(&results, Some(&device));
    let share = row(&table, "of dev seq read");
    assert!(share.contains("50%"), "{table}");
    assert!(!share.contains("70%"), "a share for dram: {table}");
}

#[test]
fn device_reference_adds_overhead_row() {
    let device = DeviceRef {
        qd1_read_latency_us: Some(12.0),
        seq_read_mb_s: Some(2100.0),
        source: "fio on /dev/nvme0n1".to_string(),
        ..DeviceRef::default()
    };
    let table = render_table(&three_modes(), Some(&device));
    let overhead = row(&table, "slow p50 - dev QD1 read");
    assert!(overhead.contains("+38."), "{table}");
    assert!(table.contains("QD1 4k read 12.0us"), "{table}");
    assert!(table.contains("2100 MB/s"), "{table}");
    assert!(table.contains("sequential read 2100 MB/s"), "{table}");
    assert!(table.contains("fio on /dev/nvme0n1"), "{table}");

    let no_latency = DeviceRef {
        qd1_read_latency_us: None,
        ..device
    };
    let table = render_table(&three_modes(), Some(&no_latency));
    assert!(!table.contains("dev QD1"), "{table}");
}

#[test]
fn device_limit_gives_each_paging_mode_its_share() {
    let device = DeviceRef {
        qd1_read_latency_us: Some(50.0),
        limit: Some(Ok(DeviceLimit {
            pages_per_sec: 2_000_000.0,
            best_hit_ratio: 0.25,
            basis: "1 thread(s) / ((1 - 25.0%) x 50.0us)".into(),
        })),
        ..DeviceRef::default()
    };
    let table = render_table(&three_modes(), Some(&device));
    let share = row(&table, "of device limit");
    assert!(share.contains("72%") && share.contains("50%"), "{table}");
    assert!(!share.contains("100%"), "a share for dram: {table}");
    assert!(
        table.contains("device limit: 2.00M pages/s = 1 thread(s) / ((1 - 25.0%) x 50.0us)"),
        "{table}"
    );

    let none = DeviceRef {
        limit: Some(Err("the working set fits in the budget".into())),
        ..device
    };
    let table = render_table(&three_modes(), Some(&none));
    assert!(!table.contains("of device limit"), "{table}");
    assert!(
        table.contains("device limit: none (the working set fits in the budget)"),
        "{table}"
    );
}

#[test]
fn verification_failure_is_loud() {
    let mut results = three_modes();
    results[1].verify = VerifyReport {
        pages_checked: 4096,
        lost: 3,
        corrupted: 2,
        first_bad_page: Some(17),
    };
    let table = render_table(&results, None);
    assert!(
        row(&table, "verification").contains("FAILED: LOST 3, CORRUPTED 2, first bad page 17"),
        "{table}"
    );
    assert!(
        table.contains("!!! DATA VERIFICATION FAILED for tiermem"),
        "{table}"
    );
}

#[test]
fn skipped_mode_shows_skipped_and_its_note() {
    let results = vec![
        synthetic(Mode::Dram, 2_000_000.0, 0, 0),
        synthetic(Mode::Tiermem, 1_500_000.0, 5, 50_000),
        skipped(Mode::KernelSwap, "no swap device configured"),
    ];
    let table = render_table(&results, None);
    assert!(row(&table, "pages/s").ends_with("skipped"), "{table}");
    assert!(!table.contains("vs kernel-swap"), "{table}");
    assert!(table.contains("notes for kernel-swap:"), "{table}");
    assert!(table.contains("no swap device configured"), "{table}");
    assert_eq!(
        ratio_summary(&results),
        vec![("tiermem/dram pages/s".to_string(), 0.75)]
    );
    assert!(render_histograms(&results).contains("== kernel-swap latency ==\nskipped"));
}

#[test]
fn mixed_thresholds_go_into_cells() {
    let mut results = three_modes();
    results[2].slow_threshold_ns = 20_000;
    let table = render_table(&results, None);
    assert!(
        row(&table, "slow accesses").contains("(>= 20.0us)"),
        "{table}"
    );
}

#[test]
fn ratio_summary_names_each_pair_once() {
    let ratios = ratio_summary(&three_modes());
    let names: Vec<&str> = ratios.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "tiermem/kernel-swap pages/s",
            "tiermem/dram pages/s",
            "kernel-swap/dram pages/s",
        ]
    );
    assert!((ratios[0].1 - 1.43).abs() < 1e-9);
    assert!((ratios[1].1 - 0.715).abs() < 1e-9);
    assert!((ratios[2].1 - 0.5).abs() < 1e-9);
}

#[test]
fn histograms_have_headings() {
    let text = render_histograms(&three_modes());
    for mode in Mode::DEFAULT {
        assert!(
            text.contains(&format!("== {} latency ==", mode.name())),
            "{text}"
        );
    }
    assert!(text.contains("samples"));
}
