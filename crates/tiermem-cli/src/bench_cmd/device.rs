//! The device reference of a run: the backing device's read latency and
//! sequential bandwidth, measured where the backing store lives.

use std::path::PathBuf;
use std::time::Duration;

use tiermem_bench::device_limit::device_limit;
use tiermem_bench::device_ref::measure_device_ref;
use tiermem_bench::report::DeviceRef;
use tiermem_bench::runner::BenchPlan;
use tiermem_bench::worker::{Workload, WorkloadSpec};

/// The device reference of this run: the QD1 read latency, and for a
/// sequential pattern the sequential read bandwidth, both measured now, in
/// the backing store's directory (or /var/tmp), so that a noisy device is
/// compared with itself. A failed measurement is reported and left out.
pub(crate) fn check_device(plan: &BenchPlan) -> Option<DeviceRef> {
    let dir = device_check_dir(&plan.tiermem.backing);
    let mut device = match measure_device_ref(&dir, Duration::from_secs(2), page_reads(plan)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tiermem bench: device check skipped: {e:#}");
            return None;
        }
    };
    let saved = tiermem_device::cached_for(&dir);
    if is_sequential(&plan.workload) {
        match measure_seq_read(&dir) {
            Ok((mb_s, how)) => {
                device.seq_read_mb_s = Some(mb_s);
                device.source = format!("{}; {how}", device.source);
            }
            Err(e) => {
                eprintln!("tiermem bench: sequential device check failed: {e:#}");
                device.seq_read_mb_s = saved.as_ref().and_then(|r| r.seq_read_mb_s());
                if device.seq_read_mb_s.is_some() {
                    device.source = format!(
                        "{}; sequential: from the saved `tiermem device` report (this run's \
                         check failed)",
                        device.source
                    );
                }
            }
        }
    }
    if let Some(saved) = &saved {
        device.source = format!("{}; {}", device.source, describe_saved(saved));
    }
    device.limit = Some(device_limit(
        &plan.workload,
        plan.tiermem.dram_budget,
        &device,
    ));
    Some(device)
}

/// The read a miss of this run waits for, (page bytes, program threads),
/// for a run whose device limit comes from its misses.
fn page_reads(plan: &BenchPlan) -> Option<(u64, usize)> {
    let w = &plan.workload;
    let paged = w.workload == Workload::Pattern
        && !is_sequential(w)
        && w.working_set_bytes > plan.tiermem.dram_budget;
    paged.then_some((w.page_size, w.threads.max(1)))
}

/// Where the device is checked: the backing directory, a backing file's
/// directory, else (a block device, which the check would have to write)
/// /var/tmp, which the report names.
fn device_check_dir(backing: &std::path::Path) -> PathBuf {
    if backing.is_dir() {
        return backing.to_path_buf();
    }
    match backing.parent() {
        Some(parent) if backing.is_file() && parent.is_dir() => parent.to_path_buf(),
        _ => PathBuf::from("/var/tmp"),
    }
}

/// The figures of the saved `tiermem device` report, for comparison with
/// this run's (a device that got slower since shows here).
fn describe_saved(saved: &tiermem_device::DeviceReport) -> String {
    let age_h = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |now| {
            now.as_secs().saturating_sub(saved.created_unix_s) as f64 / 3600.0
        });
    let mut figures = Vec::new();
    if let Some(us) = saved.qd1_read_latency_us() {
        figures.push(format!("QD1 4k read {us:.1}us"));
    }
    if let Some(mb_s) = saved.seq_read_mb_s() {
        figures.push(format!("sequential read {mb_s:.0} MB/s"));
    }
    format!(
        "`tiermem device` report saved {age_h:.1} h ago: {}",
        figures.join(", ")
    )
}

fn is_sequential(spec: &WorkloadSpec) -> bool {
    spec.workload == Workload::Pattern
        && matches!(
            spec.pattern.parse::<tiermem_bench::pattern::Pattern>(),
            Ok(tiermem_bench::pattern::Pattern::Sequential)
        )
}

/// Sizes of the sequential check: the defaults of `tiermem device` (1 MiB
/// reads, 4 in flight, a 1 GiB file: smaller files were served faster,
/// apparently from a cache below the guest), for 2 s.
const SEQ_CHECK_FILE_BYTES: u64 = 1 << 30;
const SEQ_CHECK_SECONDS: u64 = 2;

/// The device's sequential read bandwidth as `tiermem device` measures it,
/// io_uring first, psync where io_uring is refused. Returns MB/s and how.
fn measure_seq_read(dir: &std::path::Path) -> anyhow::Result<(f64, String)> {
    use tiermem_device::{DeviceConfig, Engine};
    let cfg = DeviceConfig {
        file_size: SEQ_CHECK_FILE_BYTES,
        duration_per_job: Duration::from_secs(SEQ_CHECK_SECONDS),
        engines: vec![Engine::IoUring, Engine::Psync],
        ..DeviceConfig::new(dir)
    };
    let (job, warnings) = tiermem_device::measure_seq_read(&cfg)?;
    for warning in &warnings {
        eprintln!("tiermem bench: sequential device check: {warning}");
    }
    let mut how = format!(
        "sequential: {} {} KiB reads, QD{}, for {} s over a {} MiB file written first",
        job.engine,
        job.block_size >> 10,
        job.qd,
        SEQ_CHECK_SECONDS,
        SEQ_CHECK_FILE_BYTES >> 20
    );
    for warning in warnings {
        how = format!("{how} ({warning})");
    }
    Ok((job.mb_s, how))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_is_checked_where_the_backing_store_lives() {
        let dir = tempfile::tempdir().expect("a directory");
        assert_eq!(device_check_dir(dir.path()), dir.path());
        let file = dir.path().join("backing.img");
        std::fs::write(&file, b"").expect("a backing file");
        assert_eq!(device_check_dir(&file), dir.path());
        let missing = dir.path().join("no-such-dir/backing.img");
        assert_eq!(device_check_dir(&missing), PathBuf::from("/var/tmp"));
    }
}
