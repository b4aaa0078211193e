//! The io_uring fault loop: one handler thread keeps many page reads in
//! flight.
//!
//! The ring watches the userfaultfd and the stop and pause eventfds with
//! multishot polls, so one `io_uring_enter` waits for new faults and for
//! completed reads alike. Faults are read in batches; a page that must come
//! from the store is claimed and its read submitted at once (reads use
//! buffers registered with the ring, owned by the runtime, never tiered
//! memory); read-ahead adds the pages a stream will want next. Each read is
//! installed the moment it completes. A fault on a page someone else owns
//! right now is set aside and retried after the next completion.

use std::collections::VecDeque;
use std::io;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::readahead::Readahead;
use super::{
    begin_fault, claim_for_prefetch, finish_read, prefetch_used, resolve_missing, Missing,
    PageRead, FAULT_BATCH,
};
use crate::io_config::PollMode;
use crate::page_table::PageNo;
use crate::runtime::Shared;
use crate::stats::Counters;
use crate::sys::mem::Mapping;
use crate::sys::uffd::{message_buffer, Fault};

const TAG_UFFD: u64 = u64::MAX;
const TAG_STOP: u64 = u64::MAX - 1;
const TAG_PAUSE: u64 = u64::MAX - 2;
/// How long to wait before retrying faults on busy pages when none of our
/// own reads is in flight (the page's owner is another thread).
const BUSY_RETRY_NS: u32 = 20_000;
/// Longest a handler polls for a read to complete before it sleeps: about
/// two device reads.
const POLL_NS: u64 = 200_000;

pub(crate) struct RingHandler<'a> {
    rt: &'a Shared,
    ring: IoUring,
    engine: &'static str,
    buffers: Mapping,
    registered: bool,
    free_buffers: Vec<u16>,
    in_flight: Vec<Option<PageRead>>,
    in_flight_count: usize,
    submitted_ns: Vec<u64>,
    /// Claimed pages waiting for a buffer: demand reads first.
    waiting: VecDeque<PageRead>,
    /// Faults on busy pages, to retry.
    deferred: Vec<(PageNo, Fault)>,
    readahead: Option<Readahead>,
    raw: Vec<linux_raw_sys::general::uffd_msg>,
    faults: Vec<Fault>,
    completions: Vec<(u64, i32, u32)>,
    uffd_ready: bool,
}

impl<'a> RingHandler<'a> {
    /// Sets up the ring and its buffers; the error says why not, for the
    /// fallback note.
    pub fn new(rt: &'a Shared) -> Result<RingHandler<'a>, String> {
        let depth = rt.config.io.depth as usize;
        let entries = (depth * 2 + 8).next_power_of_two() as u32;
        let (ring, engine) = build_ring(entries, rt.config.io.poll)?;
        let buffers = Mapping::reserve_aligned(
            depth * rt.page_size,
            rt.page_size,
            "allocating read buffers",
        )
        .map_err(|e| e.to_string())?;
        let iovecs: Vec<libc::iovec> = (0..depth)
            .map(|i| libc::iovec {
                // SAFETY: offsets stay inside the buffer mapping.
                iov_base: unsafe { buffers.as_ptr().add(i * rt.page_size) }.cast(),
                iov_len: rt.page_size,
            })
            .collect();
        // SAFETY: the buffers are runtime-owned, live as long as the ring
        // (both belong to this handler), and are never tiered memory.
        let registered = unsafe { ring.submitter().register_buffers(&iovecs) }.is_ok();
        let mut h = RingHandler {
            rt,
            ring,
            engine: if registered {
                engine
            } else {
                "io_uring (unregistered buffers)"
            },
            buffers,
            registered,
            free_buffers: (0..depth as u16).rev().collect(),
            in_flight: vec![None; depth],
            in_flight_count: 0,
            submitted_ns: vec![0; depth],
            waiting: VecDeque::new(),
            deferred: Vec::new(),
            readahead: rt.config.io.readahead.then(Readahead::new),
            raw: message_buffer(FAULT_BATCH),
            faults: Vec::with_capacity(FAULT_BATCH),
            completions: Vec::with_capacity(entries as usize),
            uffd_ready: false,
        };
        for (fd, tag) in [
            (rt.uffd.raw(), TAG_UFFD),
            (rt.stop_event.raw(), TAG_STOP),
            (rt.pause.event.raw(), TAG_PAUSE),
        ] {
            h.watch(fd, tag);
        }
        h.ring
            .submit()
            .map_err(|e| format!("submitting polls: {e}"))?;
        Ok(h)
    }

    pub fn engine_name(&self) -> &'static str {
        self.engine
    }

    pub fn run(&mut self) {
        loop {
            self.wait();
            let (stop, pause) = self.reap();
            if stop || self.rt.stopping() {
                self.drain();
                return;
            }
            if pause && self.rt.pause.requested() {
                // A forked child must not inherit a page mid-read.
                self.drain();
                self.rt.pause.park();
            }
            self.retry_deferred();
            if self.uffd_ready {
                self.read_faults();
            }
            self.flush();
        }
    }

    /// Blocks for at least one event, or briefly when busy pages wait.
    ///
    /// While reads are in flight their faulting threads sleep, so the CPU
    /// is free: the handler polls for the completion instead of sleeping,
    /// which saves a wake-up (tens of microseconds on a VM) per fault.
    fn wait(&mut self) {
        if self.in_flight_count > 0 && self.poll_completions(POLL_NS) {
            return;
        }
        let result = if !self.deferred.is_empty() && self.in_flight_count == 0 {
            let ts = types::Timespec::new().nsec(BUSY_RETRY_NS);
            let args = types::SubmitArgs::new().timespec(&ts);
            self.ring.submitter().submit_with_args(1, &args)
        } else {
            self.ring.submit_and_wait(1)
        };
        match result {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::ETIME | libc::EBUSY)
                ) => {}
            Err(e) => self
                .rt
                .fatal(&format!("waiting on the fault ring failed: {e}")),
        }
    }

    /// Polls for a completion (a read, or a poll event such as a new
    /// fault) for up to `limit_ns`; true if one arrived. Yielding keeps the
    /// CPU out of idle (a halted vCPU costs tens of microseconds to wake)
    /// without taking it from a runnable program thread.
    fn poll_completions(&mut self, limit_ns: u64) -> bool {
        let deadline = crate::sys::now_ns() + limit_ns;
        loop {
            // Entering the kernel runs the completion's task work.
            if let Err(e) = self.ring.submit_and_wait(0) {
                if !matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) {
                    self.rt
                        .fatal(&format!("polling the fault ring failed: {e}"));
                }
            }
            if !self.ring.completion().is_empty() {
                return true;
            }
            if crate::sys::now_ns() > deadline {
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// Handles every completion; returns (stop requested, pause requested).
    fn reap(&mut self) -> (bool, bool) {
        self.completions.clear();
        for cqe in self.ring.completion() {
            self.completions
                .push((cqe.user_data(), cqe.result(), cqe.flags()));
        }
        let (mut stop, mut pause) = (false, false);
        for i in 0..self.completions.len() {
            let (tag, result, flags) = self.completions[i];
            match tag {
                TAG_UFFD => {
                    self.uffd_ready = true;
                    self.rearm_if_done(self.rt.uffd.raw(), tag, flags);
                }
                TAG_STOP => stop = true,
                TAG_PAUSE => {
                    pause = true;
                    self.rearm_if_done(self.rt.pause.event.raw(), tag, flags);
                }
                buffer => self.complete(buffer as usize, result),
            }
        }
        (stop, pause)
    }

    fn rearm_if_done(&mut self, fd: i32, tag: u64, flags: u32) {
        if !cqueue::more(flags) {
            self.watch(fd, tag);
        }
    }

    fn watch(&mut self, fd: i32, tag: u64) {
        let poll = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(tag);
        self.push(&poll);
    }

    /// A read finished: install the page, then start a waiting read.
    fn complete(&mut self, buffer: usize, result: i32) {
        let Some(read) = self.in_flight[buffer].take() else {
            return;
        };
        self.in_flight_count -= 1;
        if result == -libc::EINTR || result == -libc::EAGAIN {
            self.submit_read(buffer, read);
            return;
        }
        if result != self.rt.page_size as i32 {
            self.rt.fatal(&format!(
                "reading page {} from backing slot {} failed: {}",
                read.page,
                read.slot,
                if result < 0 {
                    io::Error::from_raw_os_error(-result).to_string()
                } else {
                    format!("short read of {result} bytes")
                }
            ));
        }
        self.rt.store().read_done(read.slot);
        if !read.prefetch {
            self.rt
                .read_latency
                .record(crate::sys::now_ns().saturating_sub(self.submitted_ns[buffer]));
        }
        finish_read(self.rt, &read, self.buffer(buffer));
        self.free_buffers.push(buffer as u16);
        if let Some(next) = self.waiting.pop_front() {
            self.start(next);
        }
    }

    fn read_faults(&mut self) {
        loop {
            match self.rt.uffd.read_faults(&mut self.raw, &mut self.faults) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.uffd_ready = false;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => self
                    .rt
                    .fatal(&format!("reading userfaultfd events failed: {e}")),
            }
            for i in 0..self.faults.len() {
                let fault = self.faults[i];
                if let Some(page) = begin_fault(self.rt, &fault) {
                    self.resolve(page, &fault);
                }
            }
            if self.faults.len() < FAULT_BATCH {
                return;
            }
        }
    }

    fn resolve(&mut self, page: PageNo, fault: &Fault) {
        match resolve_missing(self.rt, page, fault) {
            Missing::Resolved => {}
            Missing::Busy => self.deferred.push((page, *fault)),
            Missing::Read(read) => {
                self.start(read);
                self.read_ahead(page);
            }
        }
    }

    fn retry_deferred(&mut self) {
        let deferred = std::mem::take(&mut self.deferred);
        for (page, fault) in deferred {
            self.resolve(page, &fault);
        }
    }

    /// Reads ahead of the stream `page` belongs to, if it is one.
    fn read_ahead(&mut self, page: PageNo) {
        let Some(window) = self.readahead.as_mut().and_then(|ra| ra.on_miss(page)) else {
            return;
        };
        let pages = (self.rt.arena.len() / self.rt.page_size) as i64;
        let mut q = window.passed_from;
        while q != page as i64 && (0..pages).contains(&q) {
            prefetch_used(self.rt, q as PageNo);
            q += window.stride;
        }
        for k in 0..window.count as i64 {
            let q = window.start + k * window.stride;
            if !(0..pages).contains(&q) {
                break;
            }
            if let Some(read) = claim_for_prefetch(self.rt, q as PageNo) {
                self.start(read);
            }
        }
    }

    /// Submits `read` if a buffer is free, else queues it (demand first).
    fn start(&mut self, read: PageRead) {
        match self.free_buffers.pop() {
            Some(buffer) => self.submit_read(buffer as usize, read),
            None if read.prefetch => self.waiting.push_back(read),
            None => self.waiting.push_front(read),
        }
    }

    fn submit_read(&mut self, buffer: usize, read: PageRead) {
        let (fd, offset) = self.rt.store().read_target(read.slot);
        let len = self.rt.page_size as u32;
        let ptr = self.buffer(buffer);
        let sqe = if self.registered {
            opcode::ReadFixed::new(types::Fd(fd), ptr, len, buffer as u16)
                .offset(offset)
                .build()
        } else {
            opcode::Read::new(types::Fd(fd), ptr, len)
                .offset(offset)
                .build()
        }
        .user_data(buffer as u64);
        self.in_flight[buffer] = Some(read);
        self.submitted_ns[buffer] = crate::sys::now_ns();
        self.in_flight_count += 1;
        Counters::max(&self.rt.counters.max_in_flight, self.in_flight_count as u64);
        self.push(&sqe);
    }

    fn push(&mut self, sqe: &squeue::Entry) {
        loop {
            // SAFETY: every buffer an entry points at is runtime-owned and
            // outlives the ring; the polled fds live as long as the runtime.
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return;
            }
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.ring.submission().is_empty() {
            return;
        }
        match self.ring.submit() {
            Ok(n) if n > 0 => Counters::add(&self.rt.counters.io_batches, 1),
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
            Err(e) => self.rt.fatal(&format!("submitting page reads failed: {e}")),
        }
    }

    /// Finishes every read this handler has claimed.
    fn drain(&mut self) {
        while self.in_flight_count > 0 || !self.waiting.is_empty() {
            while let Some(read) = self.waiting.pop_front() {
                match self.free_buffers.pop() {
                    Some(b) => self.submit_read(b as usize, read),
                    None => {
                        self.waiting.push_front(read);
                        break;
                    }
                }
            }
            self.flush();
            self.wait();
            let (_, _) = self.reap();
        }
    }

    fn buffer(&self, i: usize) -> *mut u8 {
        // SAFETY: `i` < depth, so the offset stays inside the mapping.
        unsafe { self.buffers.as_ptr().add(i * self.rt.page_size) }
    }
}

fn build_ring(entries: u32, poll: PollMode) -> Result<(IoUring, &'static str), String> {
    if poll == PollMode::Sqpoll {
        match IoUring::builder().setup_sqpoll(50).build(entries) {
            Ok(ring) => return Ok((ring, "io_uring+sqpoll")),
            Err(e) => eprintln!(
                "tiermem: IORING_SETUP_SQPOLL refused ({e}); using interrupt-driven io_uring"
            ),
        }
    }
    IoUring::new(entries)
        .map(|ring| (ring, "io_uring"))
        .map_err(|e| format!("io_uring_setup: {e}"))
}
