//! The rows of the comparison table, one mode to a column: throughput and
//! its ratios, the device's share, CPU, hit ratios, latency percentiles,
//! the slow accesses, and verification.

use super::format::{
    group_thousands, hit_percent, human_count, human_ns, percent, ratio_text, signed_us,
};
use super::table::Table;
use super::{baseline, is_skipped, ran, with_samples, BASELINES, MISSING, PERCENTILE_ROWS};
use crate::device_ref::DeviceRef;
use crate::hit_ratio::HitRatio;
use crate::result::{Mode, ModeResult, CPU_PERCENT};

pub(super) fn add_throughput_rows(table: &mut Table, results: &[ModeResult]) {
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
pub(super) fn add_device_limit_row(
    table: &mut Table,
    results: &[ModeResult],
    device: Option<&DeviceRef>,
) {
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
pub(super) fn add_cpu_row(table: &mut Table, results: &[ModeResult]) {
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
pub(super) fn add_bandwidth_rows(
    table: &mut Table,
    results: &[ModeResult],
    device: Option<&DeviceRef>,
) {
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
pub(super) fn add_hit_ratio_rows(table: &mut Table, results: &[ModeResult]) {
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

pub(super) fn add_latency_rows(table: &mut Table, results: &[ModeResult]) {
    table.add_row("mean", results, |result| {
        with_samples(result, |result| human_ns(result.latency.mean_ns()))
    });
    for (label, q) in PERCENTILE_ROWS {
        table.add_row(label, results, |result| {
            with_samples(result, |result| human_ns(result.latency.quantile(q) as f64))
        });
    }
}

pub(super) fn add_slow_access_rows(
    table: &mut Table,
    results: &[ModeResult],
    device: Option<&DeviceRef>,
) {
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
        .quantile_at_least(result.slow_threshold_ns, 0.5)
}

pub(super) fn verification_cell(result: &ModeResult) -> String {
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
