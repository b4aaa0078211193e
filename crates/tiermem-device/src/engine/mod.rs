//! Engines: the code that issues a job's I/O and measures it.

pub(crate) mod psync;
pub(crate) mod ring;
pub(crate) mod uring;

use std::io;
use std::time::{Duration, Instant};

use crate::config::Engine;
use crate::job::{JobLimit, JobSpec, SeqCursor};
use tiermem_host::histogram::LatencyHistogram;

use crate::stats::CpuUsage;
use crate::target::{IoMode, Target};

/// What a finished job measured.
pub(crate) struct Measured {
    pub ops: u64,
    pub bytes: u64,
    /// From the first submission to the last completion.
    pub elapsed: Duration,
    pub hist: LatencyHistogram,
    pub cpu: CpuUsage,
    /// CPU of io_uring kernel threads (SQPOLL, io-wq), percent of one CPU.
    pub io_thread_cpu_pct: Option<f64>,
    /// Whether io_uring registered (fixed) buffers were used.
    pub registered_buffers: Option<bool>,
}

/// Why a job produced no numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JobFailure {
    /// The mode is not available here (kernel, device or filesystem).
    Unsupported(String),
    /// Something went wrong.
    Failed(String),
}

impl JobFailure {
    /// The text stored in `JobResult::error`.
    pub fn message(&self) -> String {
        match self {
            JobFailure::Unsupported(m) => format!("unsupported: {m}"),
            JobFailure::Failed(m) => format!("failed: {m}"),
        }
    }
}

/// Errors that mean "this polling mode does not work here".
fn is_unsupported_errno(errno: i32) -> bool {
    matches!(errno, libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS)
}

/// Classify an I/O error of a job; `what` names the operation, e.g.
/// `randread at offset 4096`.
pub(crate) fn io_failure(engine: Engine, err: &io::Error, what: &str) -> JobFailure {
    let errno = err.raw_os_error().unwrap_or(0);
    if engine.is_polled() && is_unsupported_errno(errno) {
        // The offset does not matter here: every polled request fails.
        let op = what.split(" at offset").next().unwrap_or(what);
        JobFailure::Unsupported(format!(
            "{op} failed with {err}; polled I/O needs O_DIRECT on a device with poll queues"
        ))
    } else {
        JobFailure::Failed(format!("{what}: {err}"))
    }
}

/// Run one job on `target`.
pub(crate) fn run_job(
    target: &Target,
    spec: &JobSpec,
    sqpoll_idle_ms: u32,
    progress: &mut dyn FnMut(f64),
) -> Result<Measured, JobFailure> {
    // Second line of defence behind the O_RDONLY open: never issue a write
    // to a target that is not ours to write.
    if spec.pattern.is_write() && !target.writable {
        return Err(JobFailure::Failed(
            "refusing to write: the target is read-only (--allow-write not given)".into(),
        ));
    }
    if spec.engine.is_polled() && target.io_mode == IoMode::Buffered {
        return Err(JobFailure::Unsupported(
            "polled completions need O_DIRECT, which this filesystem refused".into(),
        ));
    }
    match spec.engine {
        Engine::Psync => psync::run(target, spec, progress),
        _ => uring::run(target, spec, sqpoll_idle_ms, progress),
    }
}

/// Fraction of a job done, for progress reports.
pub(crate) fn fraction(
    spec: &JobSpec,
    elapsed: Duration,
    cursor: &SeqCursor,
    target_size: u64,
) -> f64 {
    let f = match spec.limit {
        JobLimit::Time(d) => elapsed.as_secs_f64() / d.as_secs_f64().max(1e-9),
        JobLimit::Once => cursor.issued() as f64 / target_size.max(1) as f64,
    };
    f.clamp(0.0, 1.0)
}

/// Whether `now` is before the (optional) deadline.
#[inline]
pub(crate) fn before_deadline(deadline: Option<Instant>, now: Instant) -> bool {
    match deadline {
        None => true,
        Some(d) => now < d,
    }
}
