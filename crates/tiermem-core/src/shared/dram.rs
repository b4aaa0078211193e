//! Charging DRAM against the budget, and waking the evictor: the
//! free-page watermarks it keeps, and how much it should free now.

use std::time::Duration;

use super::Shared;
use crate::stats::Counters;

impl Shared {
    /// Charges a page against the budget, waiting for the evictor if DRAM is full.
    pub fn charge_one_page(&self) {
        if self.pause.requested() {
            // The evictor is parked for a fork, and the forking thread's
            // faults must not wait for it: these few pages go past the
            // budget, and the evictor takes them back after the fork.
            self.budget.charge_past_limit();
            return;
        }
        let kick = || {
            self.kick_evictor();
            self.unblock_a_stuck_copy();
        };
        if self.budget.charge(kick, |waited| self.report_stall(waited)) {
            Counters::add(&self.counters.budget_waits, 1);
        }
    }

    /// Lets an evictor stuck copying a page the program discarded go on
    /// (`fault::copy_watch`).
    fn unblock_a_stuck_copy(&self) {
        let zeroed = self.copy_watch.unblock_a_stuck_copy(
            &self.uffd,
            self.zero_run.as_ptr(),
            self.page_size,
            self.base_page,
        );
        match zeroed {
            Ok(n) => Counters::add(&self.counters.discarded_behind_our_back, n),
            Err(e) => self.fatal(&format!(
                "installing zeros for the evictor, whose victim was discarded behind tiermem's back, failed: {e}"
            )),
        }
    }

    /// Free-page watermarks (low, high) for a budget of `limit` pages: the
    /// evictor starts below `low` free pages and stops at `high`.
    pub fn watermarks(&self, limit: u64) -> (u64, u64) {
        watermarks(limit, self.config.watermark_scale_factor)
    }

    /// How many pages the evictor should free now.
    pub fn pages_to_free(&self) -> u64 {
        let limit = self.budget.limit();
        if self.sets.as_ref().is_some_and(|s| s.capacity() <= limit) {
            // The sets evict on conflict and bound DRAM themselves.
            return 0;
        }
        let (low, high) = self.watermarks(limit);
        let excess = self.budget.excess();
        if excess > 0 {
            return excess + high;
        }
        let headroom = self.budget.headroom();
        if headroom >= low {
            return 0;
        }
        high - headroom
    }

    pub fn probation_target(&self) -> u64 {
        self.budget.limit() * self.policy.probation_share() as u64 / 256
    }

    pub fn kick_evictor(&self) {
        let (lock, cv) = &self.evictor_wake;
        let mut kicked = lock.lock().unwrap_or_else(|p| p.into_inner());
        *kicked = true;
        cv.notify_one();
    }

    pub fn kick_evictor_if_low(&self) {
        let (low, _) = self.watermarks(self.budget.limit());
        if self.budget.headroom() < low {
            self.kick_evictor();
        }
    }

    pub fn wait_until_eviction_needed(&self, timeout: Duration) {
        if self.pages_to_free() > 0 {
            return;
        }
        let (lock, cv) = &self.evictor_wake;
        let mut kicked = lock.lock().unwrap_or_else(|p| p.into_inner());
        if !*kicked {
            kicked = cv
                .wait_timeout(kicked, timeout)
                .map(|r| r.0)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        *kicked = false;
    }
}

/// Free-page watermarks (low, high) for a budget of `limit` pages and a
/// scale factor in ten-thousandths of it (`None`: 1/32, at most 4096 pages).
/// Never below 4 pages (a batch needs room) nor above half the budget.
fn watermarks(limit: u64, scale_factor: Option<u32>) -> (u64, u64) {
    let high = match scale_factor {
        Some(f) => limit * f as u64 / 10_000,
        None => (limit / 32).min(4096),
    };
    let high = high.max(4).min(limit / 2);
    (high / 2, high)
}

#[cfg(test)]
mod tests {
    use super::watermarks;

    #[test]
    fn watermarks_follow_the_scale_factor_within_bounds() {
        assert_eq!(watermarks(262_144, None), (2048, 4096), "1/32, capped");
        assert_eq!(watermarks(4096, None), (64, 128), "1/32");
        assert_eq!(watermarks(262_144, Some(1000)), (13_107, 26_214), "10%");
        assert_eq!(watermarks(100, Some(1)), (2, 4), "at least 4 pages");
        assert_eq!(watermarks(100, Some(5000)), (25, 50), "at most half");
    }
}
