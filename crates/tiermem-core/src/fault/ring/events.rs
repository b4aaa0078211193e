//! Waiting for events: new faults, completed reads, and the stop, pause
//! and read-ahead eventfds, all through the ring. The ring watches the
//! userfaultfd and the eventfds with multishot polls, so one
//! `io_uring_enter` waits for all of them.

use std::sync::atomic::Ordering;

use io_uring::{cqueue, opcode, types};

use super::RingHandler;
use crate::fault::uring::{must_enter, PollClock};
use crate::stats::Counters;
use crate::sys::now_ns;

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
/// How often held markers are checked while nothing else happens.
const MARKER_CHECK_NS: u32 = 2_000_000;

impl RingHandler<'_> {
    /// Watches the userfaultfd and the stop, pause and read-ahead eventfds.
    pub(super) fn watch_events(&mut self) {
        let rt = self.rt;
        for (fd, tag) in [
            (rt.uffd.raw(), TAG_UFFD),
            (rt.stop_event.raw(), TAG_STOP),
            (rt.pause.event.raw(), TAG_PAUSE),
            (rt.read_ahead_event.raw(), TAG_MARKER),
        ] {
            self.watch(fd, tag);
        }
    }

    /// Blocks for at least one event, or briefly when busy pages wait.
    /// First it polls: for a read a thread waits on, and otherwise, while
    /// the program pages, for the next fault (see [`Self::idle_spin`]).
    pub(super) fn wait(&mut self) {
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
    /// it takes 80–90% of a CPU during a scan.
    pub(super) fn someone_waits(&self) -> bool {
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
    pub(super) fn idle_spin(&mut self) -> bool {
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
    pub(super) fn note_activity(&mut self) {
        let window_ns = u64::from(self.rt.config.io.idle_spin_us) * 1000;
        if window_ns > 0 {
            self.rt
                .paging_until_ns
                .store(now_ns() + window_ns, Ordering::Relaxed);
        }
    }

    /// Polls for a completion for up to `limit_ns`; true if one arrived.
    pub(super) fn poll_completions(&mut self, limit_ns: u64) -> bool {
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
    pub(super) fn reap(&mut self) -> (bool, bool) {
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

    pub(super) fn rearm_if_done(&mut self, fd: i32, tag: u64, flags: u32) {
        if !cqueue::more(flags) {
            self.watch(fd, tag);
        }
    }

    pub(super) fn watch(&mut self, fd: i32, tag: u64) {
        let poll = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(tag);
        self.push(&poll);
    }
}
