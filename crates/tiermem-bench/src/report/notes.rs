//! What follows the table: how the hit ratios were counted, the device's
//! reference figures, loud verification failures, and each mode's notes.

use super::format::{human_count, human_ns};
use super::is_skipped;
use crate::device_ref::DeviceRef;
use crate::result::ModeResult;

/// Which counters each mode's misses came from, once per distinct source.
pub(super) fn hit_ratio_footnote(results: &[ModeResult]) -> String {
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

/// A banner per mode whose pages came back wrong: lost or corrupted data
/// means the mode is broken, whatever its speed, and must not be missed.
pub(super) fn verification_alarms(results: &[ModeResult]) -> String {
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

pub(super) fn device_footnote(device: Option<&DeviceRef>) -> String {
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

pub(super) fn notes_section(results: &[ModeResult]) -> String {
    let mut out = String::new();
    for result in results.iter().filter(|result| !result.notes.is_empty()) {
        out.push_str(&format!("\nnotes for {}:\n", result.mode.name()));
        for note in &result.notes {
            out.push_str(&format!("  - {note}\n"));
        }
    }
    out
}
