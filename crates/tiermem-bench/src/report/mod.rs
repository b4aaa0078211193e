//! Human-readable rendering of a benchmark run: modes side by side.
//!
//! The point of `tiermem bench` is the comparison, so the table puts every
//! mode in its own column with ratios against the baselines, and separates
//! the fast and slow halves of the latency distribution: the mean hides a
//! bimodal hit/fault mix, while the slow-access p50 is the fault ("miss")
//! latency that can be compared with the raw device latency.

//!
//! One concern to a file: [`rows`] (the table's rows), [`notes`] (what
//! follows the table), [`format`] (numbers, short and aligned), [`table`]
//! (columns laid out), [`pmbench`] (the latency histograms as pmbench
//! prints them).

pub(crate) mod format;
mod notes;
mod pmbench;
mod rows;
mod table;
#[cfg(test)]
mod tests;

pub use crate::device_ref::DeviceRef;
use crate::result::{Mode, ModeResult};
pub use format::{human_bytes, human_ns};
use notes::{device_footnote, hit_ratio_footnote, notes_section, verification_alarms};
use rows::{
    add_bandwidth_rows, add_cpu_row, add_device_limit_row, add_hit_ratio_rows, add_latency_rows,
    add_slow_access_rows, add_throughput_rows, verification_cell,
};
use table::Table;

/// Percentiles shown in the table, with their row labels (as quantiles).
const PERCENTILE_ROWS: [(&str, f64); 4] =
    [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)];

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
            out.push_str(&pmbench::render_pmbench(&result.latency));
        }
        out.push('\n');
    }
    out
}
