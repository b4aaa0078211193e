//! `psync`: blocking pread/pwrite. Queue depth N is N threads, each with
//! one I/O outstanding, as fio's psync engine with numjobs=N.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tiermem_host::histogram::LatencyHistogram;

use super::{before_deadline, fraction, io_failure, JobFailure, Measured};
use crate::buffer::AlignedBuf;
use crate::job::{JobLimit, JobSpec, Offsets, SeqCursor};
use crate::stats::{record_latency, CpuSnapshot};
use crate::target::Target;

struct WorkerOut {
    hist: LatencyHistogram,
    ops: u64,
    bytes: u64,
    end: Instant,
}

pub(crate) fn run(
    target: &Target,
    spec: &JobSpec,
    progress: &mut dyn FnMut(f64),
) -> Result<Measured, JobFailure> {
    let cursor = SeqCursor::new();
    let stop = AtomicBool::new(false);
    let finished = AtomicUsize::new(0);
    let threads = spec.qd as usize;

    let cpu0 = CpuSnapshot::now();
    let start = Instant::now();
    let deadline = match spec.limit {
        JobLimit::Time(d) => Some(start + d),
        JobLimit::Once => None,
    };

    let outcomes: Vec<Result<WorkerOut, JobFailure>> = thread::scope(|s| {
        let mut handles = Vec::with_capacity(threads);
        let mut spawn_error = None;
        for i in 0..threads {
            let (cursor, stop, finished) = (&cursor, &stop, &finished);
            let h = thread::Builder::new()
                .name(format!("tm-psync-{i}"))
                .spawn_scoped(s, move || {
                    let r = worker(target, spec, cursor, stop, deadline);
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    finished.fetch_add(1, Ordering::Release);
                    r
                });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    spawn_error = Some(JobFailure::Failed(format!(
                        "cannot start psync thread {i}: {e}"
                    )));
                    break;
                }
            }
        }
        while finished.load(Ordering::Acquire) < handles.len() {
            thread::sleep(Duration::from_millis(50));
            progress(fraction(spec, start.elapsed(), &cursor, target.size));
        }
        let mut out: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(JobFailure::Failed("psync worker panicked".into())))
            })
            .collect();
        if let Some(e) = spawn_error {
            out.push(Err(e));
        }
        out
    });
    let cpu1 = CpuSnapshot::now();

    let mut hist = LatencyHistogram::new();
    let (mut ops, mut bytes, mut end) = (0u64, 0u64, start);
    for o in outcomes {
        let o = o?;
        hist.merge(&o.hist);
        ops += o.ops;
        bytes += o.bytes;
        end = end.max(o.end);
    }
    Ok(Measured {
        ops,
        bytes,
        elapsed: end.duration_since(start),
        hist,
        cpu: cpu0.usage_until(&cpu1),
        io_thread_cpu_pct: None,
        registered_buffers: None,
    })
}

fn worker(
    target: &Target,
    spec: &JobSpec,
    cursor: &SeqCursor,
    stop: &AtomicBool,
    deadline: Option<Instant>,
) -> Result<WorkerOut, JobFailure> {
    let bs = spec.block_size as usize;
    let write = spec.pattern.is_write();
    let mut buf = AlignedBuf::new(1, bs)
        .map_err(|e| JobFailure::Failed(format!("cannot allocate an I/O buffer: {e}")))?;
    let salt: u64 = rand::random();
    let mut offsets = Offsets::new(spec, target.size, cursor);
    let mut hist = LatencyHistogram::new();
    let (mut ops, mut bytes) = (0u64, 0u64);
    let fd = target.fd();
    let mut now = Instant::now();
    while !stop.load(Ordering::Relaxed) && before_deadline(deadline, now) {
        let Some(off) = offsets.next_offset() else {
            break;
        };
        if write {
            buf.stamp(0, off ^ salt);
        }
        let ptr = buf.slot_ptr(0);
        let off_t = off as libc::off_t;
        let t0 = Instant::now();
        // SAFETY: `ptr` points to `bs` bytes owned by `buf`, alive for the
        // whole blocking call; `fd` stays open for the job.
        let n = unsafe {
            if write {
                libc::pwrite(fd, ptr.cast(), bs, off_t)
            } else {
                libc::pread(fd, ptr.cast(), bs, off_t)
            }
        };
        now = Instant::now();
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(io_failure(
                spec.engine,
                &e,
                &format!("{} at offset {off}", spec.pattern),
            ));
        }
        if n as usize != bs {
            return Err(JobFailure::Failed(format!(
                "short {} at offset {off}: {n} of {bs} bytes",
                spec.pattern
            )));
        }
        record_latency(&mut hist, now.duration_since(t0));
        ops += 1;
        bytes += bs as u64;
    }
    Ok(WorkerOut {
        hist,
        ops,
        bytes,
        end: now,
    })
}
