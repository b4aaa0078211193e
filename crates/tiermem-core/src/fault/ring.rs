//! The io_uring fault loop: one handler thread keeps many page reads in
//! flight.
//!
//! The ring watches the userfaultfd and the stop and pause eventfds with
//! multishot polls, so one `io_uring_enter` waits for new faults and for
//! completed reads alike. Faults are read in batches; a page that must come
//! from the store is claimed and its read submitted at once. Read-ahead adds
//! the pages a stream will want next, and pages whose slots are adjacent
//! are read with one large request (a sequential scan becomes reads of
//! 128 KiB). Reads land in one runtime-owned area registered with the
//! ring, never in tiered memory. Each request's pages are installed the
//! moment it completes, a run of read-ahead pages with one call. The middle
//! page of each read-ahead window is parked as a marker: the program's
//! fault on it, on any handler, starts the next window. A fault on a page
//! someone else owns right now is set aside and retried after the next
//! completion.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::readahead::{max_window_pages, Readahead, Window};
use super::signal::{ReadAheadRequests, Request};
use super::{
    begin_fault, claim_for_prefetch, finish_read, finish_read_ahead_run, first_bad_page,
    is_parked_read_ahead, park_marker, park_state, prefetch_used, resolve_fault, settle,
    unpark_marker, BadRead, Missing, PageRead, Parked, FAULT_BATCH,
};
use crate::io_config::PollMode;
use crate::page_table::PageNo;
use crate::runtime::Shared;
use crate::stats::Counters;
use crate::store_errors::ReadFailure;
use crate::sys::mem::Mapping;
use crate::sys::now_ns;
use crate::sys::uffd::{message_buffer, Fault};

const TAG_UFFD: u64 = u64::MAX;
const TAG_STOP: u64 = u64::MAX - 1;
const TAG_PAUSE: u64 = u64::MAX - 2;
const TAG_MARKER: u64 = u64::MAX - 3;
/// How long to wait before retrying faults on busy pages when none of our
/// own reads is in flight (the page's owner is another thread).
const BUSY_RETRY_NS: u32 = 20_000;
/// Longest a handler polls for a read to complete before it sleeps: about
/// two device reads. The faulting threads sleep meanwhile, so the CPU is free.
const POLL_NS: u64 = 200_000;
/// How long an idle-spinning handler peeks at its ring before it reads
/// the userfaultfd and yields the CPU again.
const IDLE_PEEK_NS: u64 = 2_000;
/// Bytes of read buffer per handler, beyond one page per queue slot.
const BUFFER_BYTES: usize = 4 << 20;
/// Longest a read-ahead marker is held back for the program to reach it;
/// after that it is installed like the rest of its window.
const MARKER_HOLD_NS: u64 = 20_000_000;
/// How often held markers are checked while nothing else happens.
const MARKER_CHECK_NS: u32 = 2_000_000;
/// Largest read-ahead request: big enough for the device's sequential
/// bandwidth, small enough that the first pages arrive soon and several
/// requests overlap.
const MAX_RUN_BYTES: usize = 128 << 10;

/// A read-ahead marker this handler parked: it waits unmapped until the
/// program faults on it or it has waited long enough.
struct ParkedMarker {
    page: PageNo,
    since_ns: u64,
}

/// One read request: pages in adjacent slots, landing in adjacent buffers.
struct Io {
    reads: Vec<PageRead>,
    submitted_ns: u64,
}

pub(crate) struct RingHandler<'a> {
    rt: &'a Shared,
    ring: IoUring,
    engine: &'static str,
    /// The ring flags waiting task work (see `build_ring`).
    taskrun_flag: bool,
    buffers: Mapping,
    registered: bool,
    /// One flag per page-sized buffer.
    buffer_used: Vec<bool>,
    /// In-flight requests, by their first buffer.
    ios: Vec<Option<Io>>,
    in_flight: usize,
    /// Requests in flight that a thread waits for: a demand read, or a
    /// prefetch group's (read-ahead alone is waited for by nobody).
    awaited_in_flight: usize,
    depth: usize,
    /// Claimed runs waiting for buffers or a queue slot: demand reads first.
    waiting: VecDeque<Vec<PageRead>>,
    /// Faults on busy pages, to retry.
    deferred: Vec<(PageNo, Fault)>,
    /// Prefetch groups in flight: demand page, requests still out.
    groups: Vec<(PageNo, usize)>,
    markers: Vec<ParkedMarker>,
    streams: Streams<'a>,
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
        let pages = buffer_pages(rt);
        let entries = (depth * 2 + 8).next_power_of_two() as u32;
        let (ring, engine, taskrun_flag) = build_ring(rt, entries)?;
        let buffers = Mapping::reserve_aligned(
            pages * rt.page_size,
            rt.page_size,
            "allocating read buffers",
        )
        .map_err(|e| e.to_string())?;
        let area = [libc::iovec {
            iov_base: buffers.as_ptr().cast(),
            iov_len: buffers.len(),
        }];
        // SAFETY: the area is runtime-owned, lives as long as the ring (both
        // belong to this handler), and is never tiered memory.
        let registered = unsafe { ring.submitter().register_buffers(&area) }.is_ok();
        let mut h = RingHandler {
            rt,
            ring,
            engine: if registered {
                engine
            } else {
                "io_uring (unregistered buffers)"
            },
            taskrun_flag,
            buffers,
            registered,
            buffer_used: vec![false; pages],
            ios: (0..pages).map(|_| None).collect(),
            in_flight: 0,
            awaited_in_flight: 0,
            depth,
            waiting: VecDeque::new(),
            deferred: Vec::new(),
            groups: Vec::new(),
            markers: Vec::new(),
            streams: Streams::of(rt),
            raw: message_buffer(FAULT_BATCH),
            faults: Vec::with_capacity(FAULT_BATCH),
            completions: Vec::with_capacity(entries as usize),
            uffd_ready: false,
        };
        for (fd, tag) in [
            (rt.uffd.raw(), TAG_UFFD),
            (rt.stop_event.raw(), TAG_STOP),
            (rt.pause.event.raw(), TAG_PAUSE),
            (rt.read_ahead_event.raw(), TAG_MARKER),
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
                super::park_serving(self.rt);
            }
            self.check_markers();
            self.take_requested_windows();
            self.retry_deferred();
            if self.uffd_ready {
                self.read_faults();
            }
            self.flush();
        }
    }

    /// Blocks for at least one event, or briefly when busy pages wait.
    /// First it polls: for a read a thread waits on, and otherwise, while
    /// the program pages, for the next fault (see [`Self::idle_spin`]).
    fn wait(&mut self) {
        if self.someone_waits() && self.poll_completions(POLL_NS) {
            return;
        }
        if self.idle_spin() {
            return;
        }
        let timeout = match self.in_flight {
            0 if !self.deferred.is_empty() => Some(BUSY_RETRY_NS),
            0 if !self.markers.is_empty() => Some(MARKER_CHECK_NS),
            _ => None,
        };
        let result = match timeout {
            Some(ns) => {
                let ts = types::Timespec::new().nsec(ns);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
            None => self.ring.submit_and_wait(1),
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

    /// Whether a thread waits for a read in flight (a demand read, or a
    /// fault set aside on a busy page): polling then saves it a wake-up of
    /// this handler. Read-ahead alone is left to the interrupt: polling for
    /// it only takes the CPU the program and the evictor need. Under signal
    /// delivery the read-ahead thread reads nothing else, and polling for
    /// it takes 80–90% of a CPU during a scan
    /// (docs/notebook/benchmarks-random-access-passes.md, "Issue #4, fifth
    /// pass").
    fn someone_waits(&self) -> bool {
        self.awaited_in_flight > 0 || (self.in_flight > 0 && !self.deferred.is_empty())
    }

    /// While the program pages (an event within the idle-spin window),
    /// peeks at the ring for `IDLE_PEEK_NS` instead of sleeping and returns
    /// true, so that the caller reads the userfaultfd; false once the
    /// window has passed, and the caller sleeps.
    ///
    /// On a VM whose idle vCPUs halt, a halted vCPU costs every event that
    /// reaches it a trip through the host: the device's completion
    /// interrupt (a 4 KiB read at QD1 takes 41 µs when the interrupt's
    /// vCPU is busy, 57 µs when it halted), and each wake-up of a sleeping
    /// thread (about 25 µs between vCPUs). A miss served by a sleeping
    /// handler pays for both, and the faulting thread's wake-up on top,
    /// where the kernel's own swap-in pays for one. Handlers that poll
    /// through a paging burst keep every vCPU awake for its length: the
    /// fault reaches a running handler, the interrupt a running vCPU.
    /// The polling thread yields to any other runnable thread on its CPU
    /// (the program, the evictor), so it takes only time the CPU would
    /// have spent halted; a window without events puts it to sleep.
    fn idle_spin(&mut self) -> bool {
        // Under signal delivery faulting threads read their own pages and
        // this ring only reads ahead, which nobody waits for.
        if self.rt.signal_slots.is_some() {
            return false;
        }
        if now_ns() >= self.rt.paging_until_ns.load(Ordering::Relaxed) {
            return false;
        }
        // SAFETY: sched_yield takes no arguments and cannot fail.
        unsafe { libc::sched_yield() };
        let completed = self.poll_completions(IDLE_PEEK_NS);
        // Between peeks the userfaultfd is read directly: a queued fault
        // is taken without waiting for its poll's completion.
        self.uffd_ready = true;
        if completed {
            Counters::add(&self.rt.counters.spin_wakeups, 1);
        }
        true
    }

    /// An event was handled: every handler polls for the next one for the
    /// idle-spin window from now.
    fn note_activity(&mut self) {
        let window_ns = u64::from(self.rt.config.io.idle_spin_us) * 1000;
        if window_ns > 0 {
            self.rt
                .paging_until_ns
                .store(now_ns() + window_ns, Ordering::Relaxed);
        }
    }

    /// Polls for a completion for up to `limit_ns`; true if one arrived.
    fn poll_completions(&mut self, limit_ns: u64) -> bool {
        let mut clock = PollClock::start(limit_ns);
        loop {
            // Entering the kernel runs the completions' task work.
            if must_enter(&mut self.ring, self.taskrun_flag) || clock.due_for_entry() {
                if let Err(e) = self.ring.submit_and_wait(0) {
                    if !matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) {
                        self.rt
                            .fatal(&format!("polling the fault ring failed: {e}"));
                    }
                }
            }
            if !self.ring.completion().is_empty() {
                return true;
            }
            if !clock.polling() {
                return false;
            }
            std::hint::spin_loop();
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
        if !self.completions.is_empty() {
            self.note_activity();
        }
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
                TAG_MARKER => {
                    self.rt.read_ahead_event.drain();
                    self.rearm_if_done(self.rt.read_ahead_event.raw(), tag, flags);
                }
                first_buffer => self.complete(first_buffer as usize, result),
            }
        }
        self.start_waiting();
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

    /// A read finished: install its pages.
    fn complete(&mut self, first: usize, result: i32) {
        let Some(io) = self.ios[first].take() else {
            return;
        };
        self.in_flight -= 1;
        if is_awaited(&io.reads) {
            self.awaited_in_flight -= 1;
        }
        let len = io.reads.len() * self.rt.page_size;
        if result == -libc::EINTR || result == -libc::EAGAIN {
            self.submit(first, io.reads);
            return;
        }
        let failure = match self.rt.injector().read() {
            Some(e) => Some(ReadFailure::from(e)),
            None => ReadFailure::from_completion(result, len),
        };
        let took = now_ns().saturating_sub(io.submitted_ns);
        for read in &io.reads {
            self.rt.store().read_done(read.slot);
            if !read.prefetch {
                self.rt.read_latency.record(took);
            }
        }
        for used in &mut self.buffer_used[first..first + io.reads.len()] {
            *used = false;
        }
        let bad = match failure {
            Some(failure) => Some(BadRead::Request { at: None, failure }),
            None => first_bad_page(self.rt, &io.reads, |i| self.buffer(first + i)),
        };
        match bad {
            None => self.install_completed(first, &io.reads),
            Some(bad) => self.install_recovered(first, &io.reads, bad),
        }
        if let Some(group) = io.reads[0].group {
            self.group_request_done(group);
        }
    }

    /// A request failed, or one of its pages failed its check: page by
    /// page, each good page is installed and each bad one retried or given
    /// up (see [`settle`]).
    fn install_recovered(&self, first: usize, reads: &[PageRead], bad: BadRead) {
        for (i, read) in reads.iter().enumerate() {
            let buf = self.buffer(first + i);
            if settle(self.rt, i, read, buf, bad) {
                finish_read(self.rt, read, buf);
            }
        }
    }

    /// Installs the pages of a completed request. Runs of read-ahead pages
    /// go in with one call each; a window's marker is parked instead.
    fn install_completed(&mut self, first: usize, reads: &[PageRead]) {
        let mut run_start = 0;
        for i in 0..=reads.len() {
            let extends_run = reads.get(i).is_some_and(|r| {
                let prev = &reads[i.max(1) - 1];
                i > run_start && is_plain_read_ahead(r) && r.page == prev.page + 1
            });
            if extends_run {
                continue;
            }
            self.install_run(first + run_start, &reads[run_start..i]);
            run_start = i;
            if let Some(marker) = reads.get(i).filter(|r| r.marker) {
                if park_marker(self.rt, marker, self.buffer(first + i)) {
                    self.markers.push(ParkedMarker {
                        page: marker.page,
                        since_ns: now_ns(),
                    });
                } else {
                    finish_read(self.rt, marker, self.buffer(first + i));
                }
                run_start = i + 1;
            }
        }
    }

    /// Installs `reads` from the buffers starting at `first`.
    fn install_run(&self, first: usize, reads: &[PageRead]) {
        match reads {
            [] => {}
            [read] => finish_read(self.rt, read, self.buffer(first)),
            _ if reads.iter().all(is_plain_read_ahead) => {
                finish_read_ahead_run(self.rt, reads, self.buffer(first))
            }
            _ => {
                for (i, read) in reads.iter().enumerate() {
                    finish_read(self.rt, read, self.buffer(first + i));
                }
            }
        }
    }

    /// Follows the markers this handler parked: one the program reached
    /// (on any handler) starts the stream's next window; one left alone
    /// too long is installed like the rest of its window.
    fn check_markers(&mut self) {
        let now = now_ns();
        let mut i = 0;
        while i < self.markers.len() {
            let marker = &self.markers[i];
            let page = marker.page;
            match park_state(self.rt, page) {
                Parked::Reached => {
                    self.markers.swap_remove(i);
                    self.continue_stream(page);
                }
                Parked::Waiting if now.saturating_sub(marker.since_ns) > MARKER_HOLD_NS => {
                    self.markers.swap_remove(i);
                    unpark_marker(self.rt, page, false);
                }
                Parked::Waiting => i += 1,
            }
        }
    }

    /// Under signal delivery: read the windows faulting threads asked for.
    fn take_requested_windows(&mut self) {
        let Streams::Shared(requests) = self.streams else {
            return;
        };
        while let Some(Request { page, window }) = requests.take() {
            self.count_passed(&window, page);
            self.prefetch(window);
        }
    }

    /// The program reached `page` inside a stream's window: read the next.
    fn continue_stream(&mut self, page: PageNo) {
        let window = self.streams.on_catch_up(page);
        if let Some(window) = window {
            self.count_passed(&window, page);
            self.prefetch(window);
        }
    }

    /// The read-ahead pages the program passed on its way to `page` were
    /// used without a fault: count them as hits.
    fn count_passed(&self, window: &Window, page: PageNo) {
        let pages = (self.rt.arena.len() / self.rt.page_size) as i64;
        let mut q = window.passed_from;
        while (page as i64 - q) * window.stride.signum() > 0 && (0..pages).contains(&q) {
            prefetch_used(self.rt, q as PageNo);
            q += window.stride;
        }
    }

    /// A fault took a parked read-ahead page. If this handler parked it,
    /// its stream continues here; otherwise the handler that did is told.
    fn marker_reached(&mut self, page: PageNo) {
        match self.markers.iter().position(|m| m.page == page) {
            Some(i) => {
                self.markers.swap_remove(i);
                self.continue_stream(page);
            }
            None => self.rt.read_ahead_event.signal(),
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
            if !self.faults.is_empty() {
                self.note_activity();
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
        let parked = !fault.write_protect && is_parked_read_ahead(self.rt, page);
        match resolve_fault(self.rt, page, fault) {
            Missing::Resolved if parked => self.marker_reached(page),
            Missing::Resolved => {}
            Missing::Busy => {
                self.deferred.push((page, *fault));
                if !fault.write_protect {
                    self.continue_stream(page);
                }
            }
            Missing::Read(read) => match self.rt.config.organization.prefetch {
                // A fixed degree reads the next pages with the missing one,
                // in one request where their slots are adjacent.
                Some(degree) => self.read_run(vec![read], Window::next_pages(page, degree)),
                None => {
                    self.start(vec![read]);
                    self.read_ahead(page);
                }
            },
        }
    }

    fn retry_deferred(&mut self) {
        let deferred = std::mem::take(&mut self.deferred);
        for (page, fault) in deferred {
            self.resolve(page, &fault);
        }
    }

    /// Reads ahead of the stream `page` belongs to, if it is one: claims the
    /// window's stored pages and reads runs of adjacent slots together.
    fn read_ahead(&mut self, page: PageNo) {
        let Some(window) = self.streams.on_miss(page) else {
            return;
        };
        self.count_passed(&window, page);
        self.prefetch(window);
    }

    fn prefetch(&mut self, window: Window) {
        self.read_run(Vec::new(), window);
    }

    /// Claims the window's stored pages and reads them after `run` (empty,
    /// or a demand read), joining requests where slots are adjacent.
    fn read_run(&mut self, mut run: Vec<PageRead>, window: Window) {
        let pages = (self.rt.arena.len() / self.rt.page_size) as i64;
        let max_run = (MAX_RUN_BYTES / self.rt.page_size).clamp(1, self.buffer_used.len() / 2);
        let mut runs = Vec::new();
        for k in 0..window.count as i64 {
            let q = window.start + k * window.stride;
            if !(0..pages).contains(&q) {
                break;
            }
            let Some(read) = claim_for_prefetch(self.rt, q as PageNo) else {
                continue;
            };
            let joins = run.last().is_some_and(|last| {
                run.len() < max_run && self.rt.store().adjacent(last.slot, read.slot)
            });
            if !joins && !run.is_empty() {
                runs.push(std::mem::take(&mut run));
            }
            run.push(read);
        }
        if !run.is_empty() {
            runs.push(run);
        }
        if self.streams.adaptive() {
            mark_middle(&mut runs);
        }
        self.group_with_demand(&mut runs);
        for run in runs {
            self.start(run);
        }
    }

    /// A demand read with a fixed prefetch degree whose pages need more
    /// than one request: its waiter is woken when all of them are in.
    fn group_with_demand(&mut self, runs: &mut [Vec<PageRead>]) {
        let fixed = self.rt.config.organization.prefetch.is_some();
        let Some(demand) = runs.first().and_then(|r| r.first()).filter(|r| !r.prefetch) else {
            return;
        };
        if !fixed || runs.len() < 2 {
            return;
        }
        let group = demand.page;
        for read in runs.iter_mut().flatten() {
            read.group = Some(group);
        }
        self.groups.push((group, runs.len()));
    }

    /// One request of a prefetch group is in: wake the group's waiter once
    /// the last one is.
    fn group_request_done(&mut self, group: PageNo) {
        let Some(i) = self.groups.iter().position(|&(g, _)| g == group) else {
            return;
        };
        self.groups[i].1 -= 1;
        if self.groups[i].1 == 0 {
            self.groups.swap_remove(i);
            self.rt
                .uffd
                .wake(self.rt.page_addr(group), self.rt.page_size);
        }
    }

    /// Submits a run if the queue and buffers allow, else queues it.
    fn start(&mut self, run: Vec<PageRead>) {
        if self.waiting.is_empty() || !run[0].prefetch {
            if let Some(first) = self.free_buffers(run.len()) {
                if self.in_flight < self.depth {
                    self.submit(first, run);
                    return;
                }
            }
        }
        if run[0].prefetch {
            self.waiting.push_back(run);
        } else {
            self.waiting.push_front(run);
        }
    }

    fn start_waiting(&mut self) {
        while self.in_flight < self.depth {
            let Some(run) = self.waiting.front() else {
                return;
            };
            let Some(first) = self.free_buffers(run.len()) else {
                return;
            };
            let run = self.waiting.pop_front().unwrap_or_default();
            self.submit(first, run);
        }
    }

    /// The first of `n` adjacent free buffers.
    fn free_buffers(&self, n: usize) -> Option<usize> {
        let mut start = 0;
        while start + n <= self.buffer_used.len() {
            match self.buffer_used[start..start + n].iter().rposition(|u| *u) {
                None => return Some(start),
                Some(used) => start += used + 1,
            }
        }
        None
    }

    fn submit(&mut self, first: usize, reads: Vec<PageRead>) {
        let (fd, offset) = self.rt.store().read_target(reads[0].slot);
        let len = (reads.len() * self.rt.page_size) as u32;
        let ptr = self.buffer(first);
        let sqe = if self.registered {
            opcode::ReadFixed::new(types::Fd(fd), ptr, len, 0)
                .offset(offset)
                .build()
        } else {
            opcode::Read::new(types::Fd(fd), ptr, len)
                .offset(offset)
                .build()
        }
        .user_data(first as u64);
        for used in &mut self.buffer_used[first..first + reads.len()] {
            *used = true;
        }
        if is_awaited(&reads) {
            self.awaited_in_flight += 1;
        }
        self.ios[first] = Some(Io {
            reads,
            submitted_ns: now_ns(),
        });
        self.in_flight += 1;
        Counters::max(&self.rt.counters.max_in_flight, self.in_flight as u64);
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
        while self.in_flight > 0 || !self.waiting.is_empty() {
            self.start_waiting();
            self.flush();
            self.wait();
            let (_, _) = self.reap();
        }
        for marker in std::mem::take(&mut self.markers) {
            unpark_marker(self.rt, marker.page, true);
        }
    }

    fn buffer(&self, i: usize) -> *mut u8 {
        // SAFETY: `i` is a buffer index, so the offset stays inside the area.
        unsafe { self.buffers.as_ptr().add(i * self.rt.page_size) }
    }
}

/// The end of a thread's polling (a limit from its start), checked every
/// few spins only: reading the clock costs as much as a look at the ring.
pub(super) struct PollClock {
    deadline: u64,
    spins: u32,
    expired: bool,
}

impl PollClock {
    const SPINS_PER_CHECK: u32 = 32;
    const SPINS_PER_ENTRY: u32 = 128;

    pub fn start(limit_ns: u64) -> PollClock {
        PollClock {
            deadline: now_ns() + limit_ns,
            spins: 0,
            expired: false,
        }
    }

    /// Every so many spins, enter the kernel whatever the TASKRUN flag
    /// says: the kernel does not flag a ring whose completion joins task
    /// work the thread already has pending (another ring of the program's,
    /// say), and a look costs one system call per few microseconds.
    pub fn due_for_entry(&self) -> bool {
        self.spins.is_multiple_of(Self::SPINS_PER_ENTRY)
    }

    pub fn polling(&mut self) -> bool {
        self.spins += 1;
        if !self.expired && self.spins.is_multiple_of(Self::SPINS_PER_CHECK) {
            self.expired = now_ns() > self.deadline;
        }
        !self.expired
    }
}

/// Where a handler's read-ahead finds streams.
enum Streams<'a> {
    /// Read-ahead is off, or a fixed prefetch degree replaces it.
    Off,
    /// The handler's own detector, fed by the faults it reads (boxed: it
    /// holds a few streams, and the other kinds hold nothing).
    Own(Box<Readahead>),
    /// Under signal delivery, the read-ahead thread's: faulting threads
    /// feed the detector and queue the windows it finds.
    Shared(&'a ReadAheadRequests),
}

impl<'a> Streams<'a> {
    fn of(rt: &'a Shared) -> Streams<'a> {
        if let Some(requests) = rt.signal_slots.as_ref().and_then(|s| s.read_ahead.as_ref()) {
            return Streams::Shared(requests);
        }
        if rt.config.io.readahead && rt.config.organization.prefetch.is_none() {
            return Streams::Own(Box::new(Readahead::new(rt.page_size)));
        }
        Streams::Off
    }

    fn adaptive(&self) -> bool {
        !matches!(self, Streams::Off)
    }

    fn on_miss(&mut self, page: PageNo) -> Option<Window> {
        match self {
            Streams::Off => None,
            Streams::Own(streams) => streams.on_miss(page),
            Streams::Shared(requests) => requests.streams().on_miss(page),
        }
    }

    fn on_catch_up(&mut self, page: PageNo) -> Option<Window> {
        match self {
            Streams::Off => None,
            Streams::Own(streams) => streams.on_catch_up(page),
            Streams::Shared(requests) => requests.streams().on_catch_up(page),
        }
    }
}

/// Page-sized read buffers per ring handler: one per queue slot, and room
/// for a couple of read-ahead windows.
fn buffer_pages(rt: &Shared) -> usize {
    let max_window = max_window_pages(rt.page_size) as usize;
    (rt.config.io.depth as usize).max((BUFFER_BYTES / rt.page_size).min(2 * max_window))
}

/// Bytes of read buffers a ring handler holds (outside the DRAM budget).
pub(crate) fn buffer_bytes(rt: &Shared) -> u64 {
    (buffer_pages(rt) * rt.page_size) as u64
}

/// Whether a thread waits for this request: it holds a demand read or
/// part of a prefetch group.
fn is_awaited(reads: &[PageRead]) -> bool {
    reads.iter().any(|r| !r.prefetch || r.group.is_some())
}

/// A read-ahead page that can be installed with its neighbours in one call.
fn is_plain_read_ahead(read: &PageRead) -> bool {
    read.prefetch && !read.write && !read.marker && read.group.is_none()
}

/// Makes the middle page of a read-ahead window its marker. A window of
/// one page has none: the program's next miss past it continues the stream.
fn mark_middle(runs: &mut [Vec<PageRead>]) {
    let total: usize = runs.iter().map(Vec::len).sum();
    if total < 2 {
        return;
    }
    let mut index = total / 2;
    for run in runs {
        if index < run.len() {
            if run[index].prefetch {
                run[index].marker = true;
            }
            return;
        }
        index -= run.len();
    }
}

/// The ring, its engine's name, and whether it flags waiting task work.
/// Without SQPOLL it is set up with `IORING_SETUP_COOP_TASKRUN |
/// IORING_SETUP_TASKRUN_FLAG` where the kernel has them (5.19): a read that
/// completes while the handler polls then costs no IPI from the interrupt
/// CPU, and the handler enters the kernel when the flag says so.
fn build_ring(rt: &Shared, entries: u32) -> Result<(IoUring, &'static str, bool), String> {
    let poll = rt.config.io.poll;
    if matches!(poll, PollMode::Iopoll | PollMode::Hybrid) {
        note_no_device_polling(rt, poll);
    }
    if poll == PollMode::Sqpoll {
        match crate::pins::own_ring(|| IoUring::builder().setup_sqpoll(50).build(entries)) {
            Ok(ring) => return Ok((ring, "io_uring+sqpoll", false)),
            Err(e) => eprintln!(
                "tiermem: IORING_SETUP_SQPOLL refused ({e}); using interrupt-driven io_uring"
            ),
        }
    }
    cooperative_ring(entries)
        .map(|(ring, taskrun_flag)| (ring, "io_uring", taskrun_flag))
        .map_err(|e| format!("io_uring_setup: {e}"))
}

/// A ring that flags waiting task work (`IORING_SETUP_COOP_TASKRUN |
/// IORING_SETUP_TASKRUN_FLAG`, Linux 5.19), and whether it got the flags: a
/// plain ring where the kernel refuses them. A read completes as task work
/// of the thread that submitted it; with the flags, the kernel runs it when
/// that thread next enters instead of interrupting it with an IPI, and
/// says in the ring that it should enter.
pub(super) fn cooperative_ring(entries: u32) -> io::Result<(IoUring, bool)> {
    crate::pins::own_ring(|| {
        let cooperative = IoUring::builder()
            .setup_coop_taskrun()
            .setup_taskrun_flag()
            .build(entries);
        match cooperative {
            Ok(ring) => Ok((ring, true)),
            Err(_) => IoUring::new(entries).map(|ring| (ring, false)),
        }
    })
}

/// Whether a polling thread must enter the kernel to see its completions:
/// without the TASKRUN flag on every look; with it, when the kernel says
/// task work waits, or when a refused submission is still queued.
pub(super) fn must_enter(ring: &mut IoUring, taskrun_flag: bool) -> bool {
    let queue = ring.submission();
    !taskrun_flag || queue.taskrun() || !queue.is_empty()
}

/// IOPOLL and hybrid polling take completions from the device's poll
/// queues, and a ring set up for them can carry nothing else (no polls on
/// the userfaultfd). Say once why page reads use interrupt-driven
/// completions instead; the handler still polls its ring for a completion
/// for up to `POLL_NS` while a thread waits for one of its reads.
fn note_no_device_polling(rt: &Shared, poll: PollMode) {
    static NOTED: std::sync::Once = std::sync::Once::new();
    let (fd, _) = rt.store().read_target(0);
    let why = match crate::sys::device::has_poll_queues(fd) {
        Err(why) => why,
        Ok(()) => "polled page reads need a ring of their own beside the one that watches the userfaultfd, which tiermem does not have yet".to_string(),
    };
    NOTED.call_once(|| {
        eprintln!(
            "tiermem: TIERMEM_IO_POLL={}: {why}; page reads use interrupt-driven completions",
            poll.name()
        )
    });
}
