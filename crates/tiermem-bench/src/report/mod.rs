//! Human-readable rendering of a benchmark run: modes side by side.
//!
//! The point of `tiermem bench` is the comparison, so the table puts every
//! mode in its own column with ratios against the baselines, and separates
//! the fast and slow halves of the latency distribution: the mean hides a
//! bimodal hit/fault mix, while the slow-access p50 is the fault ("miss")
//! latency that can be compared with the raw device latency.

use serde::{Deserialize, Serialize};

use crate::device_limit::DeviceLimit;
use crate::device_ref::ReadLatency;
use crate::hit_ratio::HitRatio;
use crate::result::{Mode, ModeResult, CPU_PERCENT};

mod format;
mod table;

pub use format::{human_bytes, human_ns};

use format::{group_thousands, hit_percent, human_count, percent, ratio_text, signed_us};
use table::Table;

/// Reference numbers for the backing device, measured elsewhere (e.g. by
/// `tiermem-device` or fio), to show how much a fault costs on top of the
/// device itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceRef {
    pub qd1_read_latency_us: Option<f64>,
    pub seq_read_mb_s: Option<f64>,
    /// Reads of the run's page size at the run's queue depth, each way of
    /// waiting: the cost of a miss to a pager that cost nothing.
    #[serde(default)]
    pub page_reads: Vec<ReadLatency>,
    /// What the device allows this run, or why there is no such figure.
    #[serde(default)]
    pub limit: Option<Result<DeviceLimit, String>>,
    /// Where the numbers come from, printed with them.
    pub source: String,
}

/// Percentiles shown in the table, with their row labels.
const PERCENTILE_ROWS: [(&str, f64); 4] =
    [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9)];

/// Placeholder for a value that does not exist (no samples, no baseline).
const MISSING: &str = "-";

/// The baselines ratios are taken against, in the order they are reported.
const BASELINES: [Mode; 2] = [Mode::KernelSwap, Mode::Dram];

/// A mode that did not run: no accesses, and notes saying why.
fn is_skipped(result: &ModeResult) -> bool {
    result.accesses == 0 && !result.notes.is_empty()
}

/// The first result of `mode` that ran and has a usable throughput.
fn baseline(results: &[ModeResult], mode: Mode) -> Option<&ModeResult> {
    results
        .iter()
        .find(|result| result.mode == mode && !is_skipped(result) && result.pages_per_sec > 0.0)
}

/// The side-by-side comparison table, followed by device reference, loud
/// verification failures and per-mode notes.
pub fn render_table(results: &[ModeResult], device: Option<&DeviceRef>) -> String {
    let mut table = Table::new(results.iter().map(|result| result.mode.name().to_string()));
    add_throughput_rows(&mut table, results);
    add_device_limit_row(&mut table, results, device);
    add_bandwidth_rows(&mut table, results, device);
    add_cpu_row(&mut table, results);
    add_hit_ratio_rows(&mut table, results);
    add_latency_rows(&mut table, results);
    add_slow_access_rows(&mut table, results, device);
    table.add_row("verification", results, verification_cell);

    let mut out = table.render();
    out.push_str(&hit_ratio_footnote(results));
    out.push_str(&device_footnote(device));
    out.push_str(&verification_alarms(results));
    out.push_str(&notes_section(results));
    out
}

fn add_throughput_rows(table: &mut Table, results: &[ModeResult]) {
    table.add_row("pages/s", results, |result| {
        if is_skipped(result) {
            "skipped".to_string()
        } else {
            human_count(result.pages_per_sec)
        }
    });
    for base_mode in BASELINES {
        if let Some(base) = baseline(results, base_mode) {
            let label = format!("vs {}", base_mode.name());
            table.add_row(&label, results, |result| {
                ran(result, |result| {
                    ratio_text(result.pages_per_sec / base.pages_per_sec)
                })
            });
        }
    }
    table.add_row("accesses", results, |result| {
        ran(result, |result| group_thousands(result.accesses))
    });
    table.add_row("reads/writes", results, |result| {
        ran(result, |result| {
            format!(
                "{}/{}",
                human_count(result.reads as f64),
                human_count(result.writes as f64)
            )
        })
    });
}

/// Each mode's pages/s as a share of what the device allows the run (see
/// `device_limit`); DRAM never reads the device.
fn add_device_limit_row(table: &mut Table, results: &[ModeResult], device: Option<&DeviceRef>) {
    let Some(Ok(limit)) = device.and_then(|device| device.limit.as_ref()) else {
        return;
    };
    table.add_row("of device limit", results, |result| {
        ran(result, |result| match result.mode {
            Mode::Dram => MISSING.to_string(),
            _ => format!("{:.0}%", 100.0 * result.pages_per_sec / limit.pages_per_sec),
        })
    });
}

/// The CPU each mode's worker process used while it was measured: what
/// its way of waiting for misses costs (polling handlers keep CPUs busy).
fn add_cpu_row(table: &mut Table, results: &[ModeResult]) {
    if !results.iter().any(|r| r.counters.contains_key(CPU_PERCENT)) {
        return;
    }
    table.add_row("CPU (process)", results, |result| {
        ran(result, |result| {
            result
                .counters
                .get(CPU_PERCENT)
                .map_or(MISSING.to_string(), |p| format!("{p:.0}%"))
        })
    });
}

/// Throughput in bytes, and as a share of the device's sequential read
/// bandwidth where it is known: the limit a scan is judged against.
fn add_bandwidth_rows(table: &mut Table, results: &[ModeResult], device: Option<&DeviceRef>) {
    if !results.iter().any(|result| result.mb_per_sec().is_some()) {
        return;
    }
    table.add_row("MB/s", results, |result| {
        ran(result, |result| {
            result
                .mb_per_sec()
                .map_or(MISSING.to_string(), |mb_s| format!("{mb_s:.0}"))
        })
    });
    let Some(device_mb_s) = device.and_then(|device| device.seq_read_mb_s) else {
        return;
    };
    // DRAM never reads the device: a share would mean nothing there.
    table.add_row("of dev seq read", results, |result| {
        ran(result, |result| match result.mb_per_sec() {
            Some(mb_s) if result.mode != Mode::Dram => {
                format!("{:.0}%", 100.0 * mb_s / device_mb_s)
            }
            _ => MISSING.to_string(),
        })
    });
}

/// Hit ratio and misses of the measured phase; with the scan-resistance
/// workload, also the hot set's hit ratio during and after the scan. "RA =
/// miss" rows count every page read ahead as a miss (see the footnote).
fn add_hit_ratio_rows(table: &mut Table, results: &[ModeResult]) {
    table.add_row("hit ratio", results, |result| {
        hit_ratio_cell(result, result.hit_ratio.as_ref())
    });
    table.add_row("hit ratio, RA = miss", results, |result| {
        read_ahead_as_miss_cell(result, result.hit_ratio.as_ref())
    });
    table.add_row("misses", results, |result| {
        ran(result, |result| {
            result
                .hit_ratio
                .as_ref()
                .map_or(MISSING.to_string(), |hit| group_thousands(hit.misses))
        })
    });
    if !results
        .iter()
        .any(|result| result.scan_resistance.is_some())
    {
        return;
    }
    table.add_row("hot hit ratio, during scan", results, |result| {
        let scan = result.scan_resistance.as_ref();
        hit_ratio_cell(result, scan.map(|scan| &scan.hot_during_scan))
    });
    table.add_row("hot, during scan, RA = miss", results, |result| {
        let scan = result.scan_resistance.as_ref();
        read_ahead_as_miss_cell(result, scan.map(|scan| &scan.hot_during_scan))
    });
    table.add_row("hot hit ratio, after scan", results, |result| {
        let scan = result.scan_resistance.as_ref();
        hit_ratio_cell(result, scan.map(|scan| &scan.hot_after_scan))
    });
    table.add_row("scan hit ratio", results, |result| {
        let scan = result.scan_resistance.as_ref();
        hit_ratio_cell(result, scan.map(|scan| &scan.scan))
    });
}

fn hit_ratio_cell(result: &ModeResult, hit: Option<&HitRatio>) -> String {
    ran(result, |_| {
        hit.map_or(MISSING.to_string(), |hit| hit_percent(hit.ratio))
    })
}

fn read_ahead_as_miss_cell(result: &ModeResult, hit: Option<&HitRatio>) -> String {
    ran(result, |_| {
        hit.and_then(|hit| hit.ratio_read_ahead_as_miss)
            .map_or(MISSING.to_string(), hit_percent)
    })
}

/// Which counters each mode's misses came from, once per distinct source.
fn hit_ratio_footnote(results: &[ModeResult]) -> String {
    let mut lines: Vec<String> = Vec::new();
    for result in results.iter().filter(|result| !is_skipped(result)) {
        if let Some(hit) = &result.hit_ratio {
            let line = format!("  {}: {}\n", result.mode.name(), hit.source);
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "\nhit ratio = 1 - misses / accesses of the measured phase.\n\
         RA = miss: 1 - device reads / accesses, every page read ahead counted as a miss.\n\
         Counted by:\n{}",
        lines.concat()
    )
}

fn add_latency_rows(table: &mut Table, results: &[ModeResult]) {
    table.add_row("mean", results, |result| {
        with_samples(result, |result| human_ns(result.latency.mean_ns()))
    });
    for (label, q) in PERCENTILE_ROWS {
        table.add_row(label, results, |result| {
            with_samples(result, |result| {
                human_ns(result.latency.percentile(q) as f64)
            })
        });
    }
}

fn add_slow_access_rows(table: &mut Table, results: &[ModeResult], device: Option<&DeviceRef>) {
    let shared_threshold = shared_slow_threshold(results);
    let label = match shared_threshold {
        Some(threshold) => format!("slow (>= {})", human_ns(threshold as f64)),
        None => "slow accesses".to_string(),
    };
    table.add_row(&label, results, |result| {
        with_samples(result, |result| {
            let share = slow_share_text(result);
            match shared_threshold {
                Some(_) => share,
                None => format!("{share} (>= {})", human_ns(result.slow_threshold_ns as f64)),
            }
        })
    });
    table.add_row("slow p50 (miss)", results, |result| {
        slow_p50_ns(result).map_or(MISSING.to_string(), |ns| human_ns(ns as f64))
    });
    if let Some(device_us) = device.and_then(|device| device.qd1_read_latency_us) {
        table.add_row("slow p50 - dev QD1 read", results, |result| {
            slow_p50_ns(result).map_or(MISSING.to_string(), |ns| {
                signed_us(ns as f64 / 1000.0 - device_us)
            })
        });
    }
}

/// The slow threshold if every mode that ran uses the same one, so it can
/// go in the row label instead of every cell.
fn shared_slow_threshold(results: &[ModeResult]) -> Option<u64> {
    let mut thresholds = results
        .iter()
        .filter(|result| !is_skipped(result))
        .map(|result| result.slow_threshold_ns);
    let first = thresholds.next()?;
    thresholds
        .all(|threshold| threshold == first)
        .then_some(first)
}

fn slow_share_text(result: &ModeResult) -> String {
    let slow = result.latency.count_at_least(result.slow_threshold_ns);
    percent(slow as f64 / result.latency.count() as f64 * 100.0)
}

/// Median latency of the slow accesses alone: the fault ("miss") latency.
fn slow_p50_ns(result: &ModeResult) -> Option<u64> {
    if is_skipped(result) {
        return None;
    }
    result
        .latency
        .percentile_at_least(result.slow_threshold_ns, 50.0)
}

fn verification_cell(result: &ModeResult) -> String {
    let verify = &result.verify;
    if !verify.is_clean() {
        let first_bad = verify
            .first_bad_page
            .map_or("unknown".to_string(), |page| page.to_string());
        return format!(
            "FAILED: LOST {}, CORRUPTED {}, first bad page {first_bad}",
            verify.lost, verify.corrupted
        );
    }
    if is_skipped(result) {
        MISSING.to_string()
    } else if verify.pages_checked == 0 {
        "not verified".to_string()
    } else {
        format!("ok: {} pages", group_thousands(verify.pages_checked))
    }
}

/// A banner per mode whose pages came back wrong: lost or corrupted data
/// means the mode is broken, whatever its speed, and must not be missed.
fn verification_alarms(results: &[ModeResult]) -> String {
    let mut out = String::new();
    for result in results.iter().filter(|result| !result.verify.is_clean()) {
        out.push_str(&format!(
            "\n!!! DATA VERIFICATION FAILED for {}: {} pages LOST, {} pages CORRUPTED \
             (of {} checked), first bad page {}. Its numbers are meaningless. !!!\n",
            result.mode.name(),
            result.verify.lost,
            result.verify.corrupted,
            result.verify.pages_checked,
            result
                .verify
                .first_bad_page
                .map_or("unknown".to_string(), |page| page.to_string()),
        ));
    }
    out
}

fn device_footnote(device: Option<&DeviceRef>) -> String {
    let Some(device) = device else {
        return String::new();
    };
    let mut facts = Vec::new();
    if let Some(latency_us) = device.qd1_read_latency_us {
        facts.push(format!("QD1 4k read {}", human_ns(latency_us * 1000.0)));
    }
    if let Some(mb_s) = device.seq_read_mb_s {
        facts.push(format!("sequential read {mb_s:.0} MB/s"));
    }
    if facts.is_empty() {
        return String::new();
    }
    let source = if device.source.is_empty() {
        String::new()
    } else {
        format!(" (source: {})", device.source)
    };
    let limit = match &device.limit {
        Some(Ok(limit)) => format!(
            "device limit: {} pages/s = {}\n",
            human_count(limit.pages_per_sec),
            limit.basis
        ),
        Some(Err(why)) => format!("device limit: none ({why})\n"),
        None => String::new(),
    };
    format!("\ndevice reference: {}{source}\n{limit}", facts.join(", "))
}

fn notes_section(results: &[ModeResult]) -> String {
    let mut out = String::new();
    for result in results.iter().filter(|result| !result.notes.is_empty()) {
        out.push_str(&format!("\nnotes for {}:\n", result.mode.name()));
        for note in &result.notes {
            out.push_str(&format!("  - {note}\n"));
        }
    }
    out
}

/// `cell(result)` for a mode that ran, the placeholder for a skipped one.
fn ran(result: &ModeResult, cell: impl Fn(&ModeResult) -> String) -> String {
    if is_skipped(result) {
        MISSING.to_string()
    } else {
        cell(result)
    }
}

/// `cell(result)` for a mode with latency samples, the placeholder otherwise.
fn with_samples(result: &ModeResult, cell: impl Fn(&ModeResult) -> String) -> String {
    if is_skipped(result) || result.latency.count() == 0 {
        MISSING.to_string()
    } else {
        cell(result)
    }
}

/// Throughput ratios of each mode against the baselines, for JSON output:
/// `("tiermem/kernel-swap pages/s", 1.43)`, `("tiermem/dram pages/s", 0.97)`,
/// `("kernel-swap/dram pages/s", 0.68)`. Dram against kernel-swap is left
/// out: it is just the inverse of the last one.
pub fn ratio_summary(results: &[ModeResult]) -> Vec<(String, f64)> {
    let mut ratios = Vec::new();
    for result in results.iter().filter(|result| !is_skipped(result)) {
        for base_mode in BASELINES {
            let redundant = result.mode == Mode::Dram && base_mode == Mode::KernelSwap;
            if result.mode == base_mode || redundant {
                continue;
            }
            if let Some(base) = baseline(results, base_mode) {
                ratios.push((
                    format!("{}/{} pages/s", result.mode.name(), base_mode.name()),
                    result.pages_per_sec / base.pages_per_sec,
                ));
            }
        }
    }
    ratios
}

/// Each mode's pmbench-style latency histogram under a heading.
pub fn render_histograms(results: &[ModeResult]) -> String {
    let mut out = String::new();
    for result in results {
        out.push_str(&format!("== {} latency ==\n", result.mode.name()));
        if is_skipped(result) {
            out.push_str("skipped\n");
        } else {
            out.push_str(&result.latency.render_pmbench());
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::histogram::LatencyHistogram;
    use crate::hit_ratio::MissCount;
    use crate::result::VerifyReport;
    use crate::scan_resistance::{ScanResistanceResult, ScanShape};

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
            miss.contains("50.0us") && miss.contains("88.1us"),
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
}
