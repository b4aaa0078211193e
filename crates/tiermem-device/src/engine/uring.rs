//! `io_uring`: one ring, up to QD requests in flight, new requests queued
//! as completions arrive and submitted in one `io_uring_enter` together
//! with the wait for the next completion. Buffers are page-aligned slots
//! of one mapping, registered with the ring when the kernel allows it.

use std::io;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use tiermem_host::histogram::LatencyHistogram;

use super::{before_deadline, fraction, io_failure, ring, JobFailure, Measured};
use crate::buffer::AlignedBuf;
use crate::config::Engine;
use crate::job::{JobLimit, JobSpec, Offsets, SeqCursor};
use crate::stats::{record_latency, CpuSnapshot, ThreadTimes};
use crate::target::Target;

/// How often progress is reported.
const PROGRESS_EVERY: Duration = Duration::from_millis(50);
/// Resubmissions of a request that completed with EAGAIN before giving up.
const MAX_RETRIES: u64 = 1_000_000;

pub(crate) fn run(
    target: &Target,
    spec: &JobSpec,
    sqpoll_idle_ms: u32,
    progress: &mut dyn FnMut(f64),
) -> Result<Measured, JobFailure> {
    let qd = spec.qd as usize;
    let bs = spec.block_size as usize;
    let len = u32::try_from(bs)
        .map_err(|_| JobFailure::Failed(format!("block size {bs} too large for io_uring")))?;
    // `bufs` is declared before `ring` so that it outlives it.
    let mut bufs = AlignedBuf::new(qd, bs)
        .map_err(|e| JobFailure::Failed(format!("cannot allocate I/O buffers: {e}")))?;
    let entries = spec.qd.next_power_of_two();
    let mut ring = ring::build(spec.engine, entries, sqpoll_idle_ms)?;
    let iovecs = bufs.iovecs();
    // SAFETY: the iovecs describe the slots of `bufs`, which stays alive
    // (and mapped) until after `ring` is dropped below; the kernel pins
    // the pages for as long as the registration lasts.
    let registered = unsafe { ring.submitter().register_buffers(&iovecs) }.is_ok();

    let mut job = Job {
        target,
        spec,
        len,
        fixed: registered,
        write: spec.pattern.is_write(),
        salt: rand::random(),
        slot_off: vec![0; qd],
        issued_at: vec![Instant::now(); qd],
        free: (0..qd).rev().collect(),
        retry: Vec::new(),
        done: Vec::with_capacity(qd),
        inflight: 0,
        retries: 0,
        hist: LatencyHistogram::new(),
        ops: 0,
        bytes: 0,
    };
    let cursor = SeqCursor::new();
    let mut offsets = Offsets::new(spec, target.size, &cursor);

    let threads0 = ThreadTimes::now();
    let cpu0 = CpuSnapshot::now();
    let start = Instant::now();
    let outcome = job.drive(&mut ring, &mut bufs, &mut offsets, start, |elapsed| {
        progress(fraction(spec, elapsed, &cursor, target.size))
    });
    let cpu1 = CpuSnapshot::now();
    let threads1 = ThreadTimes::now();

    if job.inflight > 0 && !job.drain(&mut ring) {
        // Requests may still target the buffers: never unmap them.
        std::mem::forget(bufs);
        drop(ring);
        return Err(outcome
            .err()
            .unwrap_or_else(|| JobFailure::Failed("could not drain in-flight requests".into())));
    }
    drop(ring);
    drop(bufs);
    let end = outcome?;

    let elapsed = end.duration_since(start);
    let io_thread_cpu_pct = match (threads0, threads1) {
        (Some(a), Some(b)) if !elapsed.is_zero() => {
            Some(100.0 * b.io_thread_ns_since(&a) as f64 / 1e9 / elapsed.as_secs_f64())
        }
        _ => None,
    };
    Ok(Measured {
        ops: job.ops,
        bytes: job.bytes,
        elapsed,
        hist: job.hist,
        cpu: cpu0.usage_until(&cpu1),
        io_thread_cpu_pct,
        registered_buffers: Some(registered),
    })
}

/// State of a running job.
struct Job<'a> {
    target: &'a Target,
    spec: &'a JobSpec,
    len: u32,
    fixed: bool,
    write: bool,
    salt: u64,
    /// Offset of the request in each slot.
    slot_off: Vec<u64>,
    /// When each slot's request was queued.
    issued_at: Vec<Instant>,
    /// Slots with no request.
    free: Vec<usize>,
    /// Slots whose request must be resubmitted (EAGAIN).
    retry: Vec<usize>,
    /// Completions reaped in the current round: (slot, result).
    done: Vec<(usize, i32)>,
    inflight: usize,
    retries: u64,
    hist: LatencyHistogram,
    ops: u64,
    bytes: u64,
}

impl Job<'_> {
    /// Run until the limit is reached and every request has completed.
    /// Returns the time of the last completion.
    fn drive(
        &mut self,
        ring: &mut IoUring,
        bufs: &mut AlignedBuf,
        offsets: &mut Offsets<'_>,
        start: Instant,
        mut progress: impl FnMut(Duration),
    ) -> Result<Instant, JobFailure> {
        let deadline = match self.spec.limit {
            JobLimit::Time(d) => Some(start + d),
            JobLimit::Once => None,
        };
        let mut issuing = true;
        let mut now = start;
        let mut last_progress = start;
        let mut last_completion = start;
        loop {
            // Queue resubmissions, then new requests into free slots.
            while let Some(slot) = self.retry.pop() {
                self.queue(ring, bufs, slot)?;
            }
            if issuing && !before_deadline(deadline, now) {
                issuing = false;
            }
            while issuing {
                let Some(&slot) = self.free.last() else { break };
                let Some(off) = offsets.next_offset() else {
                    issuing = false;
                    break;
                };
                self.free.pop();
                self.slot_off[slot] = off;
                self.queue(ring, bufs, slot)?;
            }
            if self.inflight == 0 {
                return Ok(last_completion);
            }

            // Submit what was queued and wait for at least one completion.
            if let Err(e) = self.submit_and_await(ring) {
                match e.raw_os_error() {
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY) => {}
                    _ => return Err(io_failure(self.spec.engine, &e, "io_uring_enter")),
                }
            }
            now = Instant::now();
            self.done.extend(
                ring.completion()
                    .map(|c: cqueue::Entry| (c.user_data() as usize, c.result())),
            );
            if !self.done.is_empty() {
                last_completion = now;
            }
            // Account every reaped completion, even after an error, so the
            // in-flight count stays exact for the drain.
            let mut done = std::mem::take(&mut self.done);
            let mut first_err = None;
            for (slot, res) in done.drain(..) {
                if first_err.is_some() {
                    self.inflight -= 1;
                } else if let Err(e) = self.complete(slot, res, now) {
                    first_err = Some(e);
                }
            }
            self.done = done;
            if let Some(e) = first_err {
                return Err(e);
            }

            if now.duration_since(last_progress) >= PROGRESS_EVERY {
                last_progress = now;
                progress(now.duration_since(start));
            }
        }
    }

    /// Submits what was queued, then waits for a completion: asleep in the
    /// kernel, or for `io_uring-spin` spinning on the completion queue (the
    /// completion arrives as task work, run when the kernel interrupts the
    /// spinning thread).
    fn submit_and_await(&self, ring: &mut IoUring) -> io::Result<()> {
        if self.spec.engine != Engine::IoUringSpin {
            return ring.submit_and_wait(1).map(drop);
        }
        ring.submit()?;
        while ring.completion().is_empty() {
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// Put the request of `slot` into the submission queue.
    fn queue(
        &mut self,
        ring: &mut IoUring,
        bufs: &mut AlignedBuf,
        slot: usize,
    ) -> Result<(), JobFailure> {
        let off = self.slot_off[slot];
        if self.write {
            bufs.stamp(slot, off ^ self.salt);
        }
        let fd = types::Fd(self.target.fd());
        let ptr = bufs.slot_ptr(slot);
        // Slot indices are < QD <= 1024, so they fit the u16 buffer index.
        let idx = slot as u16;
        let sqe: squeue::Entry = match (self.write, self.fixed) {
            (false, true) => opcode::ReadFixed::new(fd, ptr, self.len, idx)
                .offset(off)
                .build(),
            (false, false) => opcode::Read::new(fd, ptr, self.len).offset(off).build(),
            (true, true) => opcode::WriteFixed::new(fd, ptr, self.len, idx)
                .offset(off)
                .build(),
            (true, false) => opcode::Write::new(fd, ptr, self.len).offset(off).build(),
        };
        let sqe = sqe.user_data(slot as u64);
        self.issued_at[slot] = Instant::now();
        // SAFETY: the buffer slot stays mapped and is not reused until this
        // request's completion is reaped (the slot is off the free list),
        // and the ring is drained before the buffers are released.
        let pushed = unsafe { ring.submission().push(&sqe) };
        if pushed.is_err() {
            // The ring has at least QD entries, so this cannot happen
            // unless the kernel stopped consuming the queue.
            return Err(JobFailure::Failed("submission queue full".into()));
        }
        self.inflight += 1;
        Ok(())
    }

    /// Account one completion.
    fn complete(&mut self, slot: usize, res: i32, now: Instant) -> Result<(), JobFailure> {
        if slot >= self.slot_off.len() {
            return Err(JobFailure::Failed(format!(
                "completion for unknown slot {slot}"
            )));
        }
        self.inflight -= 1;
        if res < 0 {
            let errno = -res;
            if matches!(errno, libc::EAGAIN | libc::EINTR) && self.retries < MAX_RETRIES {
                self.retries += 1;
                self.retry.push(slot);
                return Ok(());
            }
            let err = io::Error::from_raw_os_error(errno);
            return Err(io_failure(
                self.spec.engine,
                &err,
                &format!("{} at offset {}", self.spec.pattern, self.slot_off[slot]),
            ));
        }
        if res as u32 != self.len {
            return Err(JobFailure::Failed(format!(
                "short {} at offset {}: {res} of {} bytes",
                self.spec.pattern, self.slot_off[slot], self.len
            )));
        }
        record_latency(&mut self.hist, now.duration_since(self.issued_at[slot]));
        self.ops += 1;
        self.bytes += u64::from(self.len);
        self.free.push(slot);
        Ok(())
    }

    /// After an error: wait for every request still in flight so no
    /// buffer is released under the kernel. Returns false if that failed.
    fn drain(&mut self, ring: &mut IoUring) -> bool {
        let give_up = Instant::now() + Duration::from_secs(10);
        while self.inflight > 0 && Instant::now() < give_up {
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) => {}
                Err(_) => return false,
            }
            let n = ring.completion().count();
            self.inflight = self.inflight.saturating_sub(n);
        }
        self.inflight == 0
    }
}
