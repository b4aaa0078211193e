//! Stopping the runtime's threads at safe points, around a fork.
//!
//! A child must not inherit a page half-way through a transition (its owner
//! thread does not exist there), so `fork` first asks every fault handler to
//! park between two batches of faults and the evictor between two runs.
//! The evictor parks last: a handler may be waiting for it to free DRAM.
//! A parked handler still serves the forking thread's own faults (see
//! `fault::fork_window`): glibc's `fork()` touches heap memory after the
//! prepare handlers have run.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::error::Result;
use crate::sys::mem::EventFd;

pub struct Pause {
    requested: AtomicBool,
    /// The thread that asked for the pause (its kernel thread id), whose
    /// faults parked handlers keep serving; 0 when none.
    forking_thread: AtomicU32,
    parked: Mutex<usize>,
    changed: Condvar,
    /// Wakes handlers blocked in poll(2) on the userfaultfd.
    pub event: EventFd,
}

impl Pause {
    pub fn new() -> Result<Pause> {
        Ok(Pause {
            requested: AtomicBool::new(false),
            forking_thread: AtomicU32::new(0),
            parked: Mutex::new(0),
            changed: Condvar::new(),
            event: EventFd::new()?,
        })
    }

    #[inline]
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn parked(&self) -> usize {
        *self.lock()
    }

    /// The thread whose faults parked handlers serve (0: none).
    pub fn forking_thread(&self) -> u32 {
        self.forking_thread.load(Ordering::Acquire)
    }

    /// Asks all runtime threads to park; returns once `threads` have.
    /// `kick` wakes the evictor, which parks only after the handlers. The
    /// calling thread's faults are still served while the pause is on.
    pub fn pause_all(&self, threads: usize, kick: impl Fn()) {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        self.forking_thread.store(me, Ordering::Release);
        self.requested.store(true, Ordering::Release);
        self.event.signal();
        let mut parked = self.lock();
        while *parked < threads {
            kick();
            parked = self
                .changed
                .wait_timeout(parked, Duration::from_millis(1))
                .map(|r| r.0)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Called by a runtime thread at a safe point: blocks while a pause is on.
    pub fn park(&self) {
        let mut parked = self.lock();
        *parked += 1;
        self.changed.notify_all();
        while self.requested() {
            parked = self.changed.wait(parked).unwrap_or_else(|p| p.into_inner());
        }
        *parked -= 1;
    }

    /// Like [`Pause::park`], but runs `meanwhile` over and over while the
    /// pause is on (each call must return within a millisecond or so).
    pub fn park_while(&self, mut meanwhile: impl FnMut()) {
        {
            let mut parked = self.lock();
            *parked += 1;
            self.changed.notify_all();
        }
        while self.requested() {
            meanwhile();
        }
        *self.lock() -= 1;
    }

    /// Lets the parked threads go.
    pub fn resume(&self) {
        let _parked = self.lock();
        self.requested.store(false, Ordering::Release);
        self.forking_thread.store(0, Ordering::Release);
        self.event.drain();
        self.changed.notify_all();
    }

    /// In a forked child, whose parked threads do not exist.
    pub fn reset_in_child(&self) -> Result<()> {
        *self.lock() = 0;
        self.requested.store(false, Ordering::Release);
        self.forking_thread.store(0, Ordering::Release);
        self.event.replace_in_child()
    }
}
