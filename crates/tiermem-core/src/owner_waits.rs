//! Sleeping until a busy page's owner lets go of it.
//!
//! Under signal delivery a thread that faults on a page another thread
//! owns (a read-ahead read in flight, a page being evicted) has to wait in
//! its signal handler. Spinning there takes a whole CPU in a scan: the
//! program catches up with read-ahead and yields in a loop on one of the
//! two vCPUs, while the read-ahead thread that has to install its pages
//! and the evictor share the other. So, after a short spin, it sleeps on a futex. Every owner that
//! releases a page wakes the sleepers, and only when there are some: one
//! fence and one load on its way out otherwise. Runtimes with handler
//! threads, whose faulting threads wait in the kernel, have no
//! `OwnerWaits` at all (`PageTable::with_owner_waits`).
//!
//! A sleeper re-checks its page when woken, and every sleep has a timeout,
//! so a page released without a wake-up (or a wake-up for another page)
//! costs at most that timeout, never a lost wake-up for good.

use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::Duration;

use crate::sys::futex;

#[derive(Default)]
pub(crate) struct OwnerWaits {
    /// Bumped by each release that finds sleepers: the futex word.
    releases: AtomicU32,
    sleepers: AtomicU32,
}

impl OwnerWaits {
    /// Sleeps until an owner releases a page or `timeout` passes, unless
    /// `still_owned` says the wait is over already. May return early.
    pub fn sleep_while(&self, still_owned: impl Fn() -> bool, timeout: Duration) {
        let seen = self.releases.load(Ordering::Relaxed);
        self.sleepers.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `released`: either the owner's release is
        // visible to `still_owned` below, or the owner sees this sleeper and
        // bumps `releases`, which ends the futex wait.
        fence(Ordering::SeqCst);
        if still_owned() {
            futex::wait(&self.releases, seen, timeout);
        }
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
    }

    /// An owner has published a page's new state: wakes the sleepers.
    pub fn released(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) != 0 {
            self.releases.fetch_add(1, Ordering::Relaxed);
            futex::wake_all(&self.releases);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_release_wakes_a_sleeper_long_before_its_timeout() {
        let waits = Arc::new(OwnerWaits::default());
        let owned = Arc::new(AtomicBool::new(true));
        let sleeper = {
            let (waits, owned) = (Arc::clone(&waits), Arc::clone(&owned));
            std::thread::spawn(move || {
                let started = Instant::now();
                while owned.load(Ordering::SeqCst) {
                    waits.sleep_while(|| owned.load(Ordering::SeqCst), Duration::from_secs(10));
                }
                started.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        owned.store(false, Ordering::SeqCst);
        waits.released();
        let slept = sleeper.join().expect("the sleeper");
        assert!(slept < Duration::from_secs(5), "slept {slept:?}");
    }

    #[test]
    fn with_no_release_a_sleep_lasts_its_timeout() {
        let waits = OwnerWaits::default();
        let started = Instant::now();
        waits.sleep_while(|| true, Duration::from_millis(30));
        assert!(
            started.elapsed() >= Duration::from_millis(25),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(waits.sleepers.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn nothing_owned_means_no_sleep() {
        let waits = OwnerWaits::default();
        let started = Instant::now();
        waits.sleep_while(|| false, Duration::from_secs(10));
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(waits.sleepers.load(Ordering::SeqCst), 0);
    }
}
