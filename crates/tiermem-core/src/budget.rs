//! DRAM budget accounting. A page is charged before it is installed and
//! uncharged once it is out of DRAM, so resident tiered memory never exceeds
//! the limit. Faults only block here when DRAM is exhausted and they must
//! wait for the evictor.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// How long a fault waits for DRAM before the wait is reported, and how
/// often it is reported again.
pub const STALL_REPORT: Duration = Duration::from_secs(10);

pub struct Budget {
    limit_pages: AtomicU64,
    charged: AtomicU64,
    peak: AtomicU64,
    waiters: AtomicUsize,
    lock: Mutex<()>,
    freed: Condvar,
}

impl Budget {
    pub fn new(limit_pages: u64) -> Budget {
        Budget {
            limit_pages: AtomicU64::new(limit_pages),
            charged: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            freed: Condvar::new(),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit_pages.load(Ordering::Acquire)
    }

    pub fn set_limit(&self, pages: u64) {
        self.limit_pages.store(pages, Ordering::Release);
    }

    pub fn charged(&self) -> u64 {
        self.charged.load(Ordering::Acquire)
    }

    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Pages that may still be charged before the limit.
    pub fn headroom(&self) -> u64 {
        self.limit().saturating_sub(self.charged())
    }

    /// How far over the limit we are (after a shrink).
    pub fn excess(&self) -> u64 {
        self.charged().saturating_sub(self.limit())
    }

    /// Charges one page if it fits under the limit.
    pub fn try_charge(&self) -> bool {
        self.try_charge_pages(1)
    }

    /// Charges `pages` at once if they all fit under the limit (a segment
    /// of the compressed pool).
    pub fn try_charge_pages(&self, pages: u64) -> bool {
        let limit = self.limit();
        let mut cur = self.charged.load(Ordering::Acquire);
        loop {
            if cur + pages > limit {
                return false;
            }
            match self.charged.compare_exchange_weak(
                cur,
                cur + pages,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.peak.fetch_max(cur + pages, Ordering::Relaxed);
                    return true;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Charges one page even past the limit (the evictor gives it back).
    pub fn charge_past_limit(&self) {
        let now = self.charged.fetch_add(1, Ordering::AcqRel) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Charges one page, waiting for the evictor while DRAM is full.
    /// `kick` wakes the evictor; it is called before every wait. `stalled`
    /// is called with the time waited so far, every [`STALL_REPORT`] of
    /// waiting, so that a wait that does not end is never silent.
    pub fn charge(&self, kick: impl Fn(), stalled: impl Fn(Duration)) -> bool {
        if self.try_charge() {
            return false;
        }
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let started = std::time::Instant::now();
        let mut next_report = STALL_REPORT;
        while !self.try_charge() {
            kick();
            let waited = started.elapsed();
            if waited >= next_report {
                stalled(waited);
                next_report += STALL_REPORT;
            }
            let guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            // The timeout covers a wake-up lost between the check and the wait.
            let _ = self.freed.wait_timeout(guard, Duration::from_millis(1));
        }
        self.waiters.fetch_sub(1, Ordering::AcqRel);
        true
    }

    pub fn uncharge(&self, pages: u64) {
        if pages == 0 {
            return;
        }
        let prev = self.charged.fetch_sub(pages, Ordering::AcqRel);
        debug_assert!(prev >= pages, "budget underflow");
        if self.waiters.load(Ordering::Acquire) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.freed.notify_all();
        }
    }
}
