//! A whole measurement: open the target, fill it, run every job, collect
//! the report.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use crate::config::{DeviceConfig, Engine};
use crate::engine::{self, JobFailure, Measured};
use crate::identity::{identify, kernel_version, DeviceIdentity};
use crate::job::{fill_job, plan_jobs, JobLimit, JobSpec, Pattern};
use crate::report::{DeviceReport, JobResult, REPORT_SCHEMA};
use crate::stats::LatencySummary;
use crate::target::{classify, open_target, Target, TargetKind};

/// Where a run is.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// 0-based index of the running job.
    pub job_index: usize,
    /// Number of jobs in the run (including the fill).
    pub job_count: usize,
    /// e.g. `io_uring randread 4K QD32`.
    pub label: String,
    /// Fraction of this job done, 0..=1.
    pub job_fraction: f64,
    /// Fraction of the whole run done, 0..=1 (jobs weigh the same).
    pub overall_fraction: f64,
}

/// Measure the device behind `cfg.path`. Jobs that are not supported here
/// (polling modes on a device without poll queues, io_uring disabled…)
/// are reported with an `error` instead of failing the run; setting up the
/// target or filling the test file failing is an error.
pub fn run(cfg: &DeviceConfig, progress: &mut dyn FnMut(Progress)) -> Result<DeviceReport> {
    let (device, target) = open_measured(cfg)?;
    let mut notes = target.notes.clone();

    let mut jobs: Vec<JobSpec> = Vec::new();
    if target.needs_fill {
        jobs.push(fill_job(cfg, fill_engine(cfg)));
    }
    jobs.extend(plan_jobs(cfg, target.writable, target.needs_fill));

    let job_count = jobs.len();
    let mut results = Vec::with_capacity(job_count);
    for (job_index, spec) in jobs.iter().enumerate() {
        let label = spec.label();
        let mut report = |f: f64| {
            progress(Progress {
                job_index,
                job_count,
                label: label.clone(),
                job_fraction: f,
                overall_fraction: (job_index as f64 + f) / job_count as f64,
            })
        };
        report(0.0);
        let (spec, outcome) = if spec.fill {
            let (spec, measured) = fill(cfg, &target, spec, &mut notes, &mut report)?;
            (spec, Ok(measured))
        } else {
            let outcome = engine::run_job(&target, spec, cfg.sqpoll_idle_ms, &mut report);
            (spec.clone(), outcome)
        };
        report(1.0);
        results.push(job_result(&spec, outcome));
    }

    add_notes(cfg, &device, &results, &mut notes);
    Ok(DeviceReport {
        schema: REPORT_SCHEMA,
        tiermem_version: env!("CARGO_PKG_VERSION").to_string(),
        created_unix_s: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        path: cfg.path.clone(),
        target: target.kind,
        device,
        kernel: kernel_version(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        io_mode: target.io_mode,
        test_size: target.size,
        duration_per_job_s: cfg.duration_per_job.as_secs_f64(),
        qd: cfg.qd,
        jobs: results,
        notes,
    })
}

/// The device's sequential read bandwidth alone, measured as [`run`]
/// measures it (its sequential read job, after the fill of a private test
/// file in a directory), on the first engine of `cfg.engines` that works
/// here. `tiermem bench` runs it beside a scan, so that the scan is
/// compared with the device as it is during the same run. Returns the job
/// and the warnings that go with its figure: the target's (buffered I/O
/// where O_DIRECT was refused, a memory-backed filesystem: then it is not
/// the device's) and a fill that fell back to psync.
pub fn measure_seq_read(cfg: &DeviceConfig) -> Result<(JobResult, Vec<String>)> {
    let (_, target) = open_measured(cfg)?;
    let mut warnings: Vec<String> = target
        .notes
        .iter()
        .filter(|note| note.starts_with("WARNING"))
        .cloned()
        .collect();
    if target.needs_fill {
        let spec = fill_job(cfg, fill_engine(cfg));
        fill(cfg, &target, &spec, &mut warnings, &mut |_| {})?;
    }
    let mut failures = Vec::new();
    for &engine in &cfg.engines {
        let spec = JobSpec {
            engine,
            pattern: Pattern::SeqRead,
            block_size: cfg.seq_block_size,
            qd: cfg.seq_qd,
            limit: JobLimit::Time(cfg.duration_per_job),
            fill: false,
        };
        let result = job_result(
            &spec,
            engine::run_job(&target, &spec, cfg.sqpoll_idle_ms, &mut |_| {}),
        );
        match &result.error {
            None => return Ok((result, warnings)),
            Some(e) => failures.push(format!("{engine}: {e}")),
        }
    }
    bail!(
        "no engine could read {} sequentially ({})",
        cfg.path.display(),
        failures.join("; ")
    )
}

/// Checks `cfg`, identifies the device behind its path and opens the
/// target (a private test file in a directory, not yet filled).
fn open_measured(cfg: &DeviceConfig) -> Result<(DeviceIdentity, Target)> {
    cfg.validate()?;
    let kind = classify(&cfg.path)?;
    let device = identify(&cfg.path, kind == TargetKind::BlockDevice)
        .with_context(|| format!("identifying the device of {}", cfg.path.display()))?;
    let target = open_target(
        cfg,
        device.fs_type.as_deref(),
        device.block_device.as_deref(),
    )?;
    Ok((device, target))
}

/// io_uring fills a new test file where it is among the engines measured.
fn fill_engine(cfg: &DeviceConfig) -> Engine {
    if cfg.engines.contains(&Engine::IoUring) {
        Engine::IoUring
    } else {
        Engine::Psync
    }
}

/// Runs the fill job `spec`, falling back to psync (with a note) if its
/// engine fails. Returns the job as run. Without a filled file there is
/// nothing to measure, so failing here fails the measurement.
fn fill(
    cfg: &DeviceConfig,
    target: &Target,
    spec: &JobSpec,
    notes: &mut Vec<String>,
    report: &mut dyn FnMut(f64),
) -> Result<(JobSpec, Measured)> {
    let mut spec = spec.clone();
    let mut outcome = engine::run_job(target, &spec, cfg.sqpoll_idle_ms, report);
    if let (Err(e), true) = (&outcome, spec.engine != Engine::Psync) {
        notes.push(format!(
            "the {} fill failed ({}); filled with psync instead",
            spec.engine,
            e.message()
        ));
        spec.engine = Engine::Psync;
        outcome = engine::run_job(target, &spec, cfg.sqpoll_idle_ms, report);
    }
    match outcome {
        Ok(measured) => Ok((spec, measured)),
        Err(e) => bail!(
            "filling the test file in {} failed: {}",
            cfg.path.display(),
            e.message()
        ),
    }
}

fn job_result(spec: &JobSpec, outcome: Result<Measured, JobFailure>) -> JobResult {
    let mut r = JobResult {
        engine: spec.engine,
        pattern: spec.pattern,
        block_size: spec.block_size,
        qd: spec.qd,
        fill: spec.fill,
        runtime_s: 0.0,
        ops: 0,
        iops: 0.0,
        mb_s: 0.0,
        lat_mean_us: 0.0,
        lat_p50_us: 0.0,
        lat_p99_us: 0.0,
        lat_p999_us: 0.0,
        lat_max_us: 0.0,
        cpu_pct: 0.0,
        cpu_user_pct: 0.0,
        cpu_sys_pct: 0.0,
        io_thread_cpu_pct: None,
        registered_buffers: None,
        error: None,
    };
    match outcome {
        Err(e) => r.error = Some(e.message()),
        Ok(m) => {
            let secs = m.elapsed.as_secs_f64();
            if m.ops == 0 || secs <= 0.0 {
                r.error = Some("failed: no I/O completed".into());
                return r;
            }
            let lat = LatencySummary::of(&m.hist);
            r.runtime_s = round(secs, 1e6);
            r.ops = m.ops;
            r.iops = round(m.ops as f64 / secs, 1e3);
            r.mb_s = round(m.bytes as f64 / secs / 1e6, 1e3);
            r.lat_mean_us = round(lat.mean_us, 1e3);
            r.lat_p50_us = round(lat.p50_us, 1e3);
            r.lat_p99_us = round(lat.p99_us, 1e3);
            r.lat_p999_us = round(lat.p999_us, 1e3);
            r.lat_max_us = round(lat.max_us, 1e3);
            r.cpu_pct = round(m.cpu.total_pct, 1e3);
            r.cpu_user_pct = round(m.cpu.user_pct, 1e3);
            r.cpu_sys_pct = round(m.cpu.sys_pct, 1e3);
            r.io_thread_cpu_pct = m.io_thread_cpu_pct.map(|v| round(v, 1e3));
            r.registered_buffers = m.registered_buffers;
        }
    }
    r
}

/// Round to `1/scale`. Besides tidy JSON, this makes figures survive a
/// JSON round trip bit-exactly: `k / 10^n` with small `k` and `n` is
/// parsed exactly, and printed back in its shortest form.
fn round(v: f64, scale: f64) -> f64 {
    if v.is_finite() {
        (v * scale).round() / scale
    } else {
        0.0
    }
}

fn add_notes(
    cfg: &DeviceConfig,
    device: &crate::identity::DeviceIdentity,
    results: &[JobResult],
    notes: &mut Vec<String>,
) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    notes.push(format!(
        "CPU% is user+sys time of the whole process over wall time (100 = one CPU; {cpus} \
         online). It includes io_uring's kernel threads (SQPOLL iou-sqp, io-wq iou-wrk), which \
         belong to our thread group; kthr% is their share, read from /proc/self/task/*/schedstat"
    ));
    let ok = |e: Engine| results.iter().any(|j| j.engine == e && j.is_ok());
    if ok(Engine::IoUringSpin) {
        notes.push(
            "io_uring-spin: the submitting thread spins on the completion queue instead of \
             sleeping, so its CPU never idles and CPU% is about 100 per job; where it beats \
             io_uring at QD1, the difference is what waking a sleeping, idle CPU costs a read \
             here (on a VM that halts idle vCPUs at once, tens of microseconds)"
                .to_string(),
        );
    }
    if ok(Engine::IoUringSqpoll) {
        notes.push(format!(
            "io_uring-sqpoll: the SQPOLL kernel thread busy-polls the submission queue (idle \
             timeout {} ms), so it costs about one CPU while I/O runs; that is included in CPU%",
            cfg.sqpoll_idle_ms
        ));
    }
    let polled_ran = results.iter().any(|j| j.engine.is_polled() && j.is_ok());
    if polled_ran && device.io_poll == Some(false) {
        notes.push(format!(
            "io_uring-iopoll/hybrid: {} has no poll queues (queue/io_poll = 0; virtio_blk and \
             nvme need poll_queues > 0). Polled bios are refused (EOPNOTSUPP) where the block \
             layer sees them; the jobs that did complete were issued by the filesystem without \
             REQ_POLLED and completed by interrupt, so their figures are interrupt completion \
             plus CPU spent spinning in io_uring_enter, not true polling",
            device.block_device.as_deref().unwrap_or("the device")
        ));
    }
    let mut unsupported: Vec<String> = Vec::new();
    for j in results {
        if let Some(e) = &j.error {
            if e.starts_with("unsupported") && !unsupported.contains(&j.engine.to_string()) {
                unsupported.push(j.engine.to_string());
            }
        }
    }
    if !unsupported.is_empty() {
        notes.push(format!(
            "not supported here: {} (see the job rows for the reason)",
            unsupported.join(", ")
        ));
    }
    if results
        .iter()
        .any(|j| j.registered_buffers == Some(false) && j.is_ok())
    {
        notes.push(
            "io_uring buffer registration was refused (RLIMIT_MEMLOCK?); plain read/write \
             opcodes were used"
                .into(),
        );
    }
}
