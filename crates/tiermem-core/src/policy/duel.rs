//! Where a page that missed enters CLOCK: behind the hand (recency, as
//! CLOCK always does) or at the hand (thrash-resistant), chosen by set
//! dueling.
//!
//! **Why.** When a program cycles through more pages than the budget holds
//! (a loop over a large array, a guest walking its RAM pass after pass), a
//! recency order evicts every page shortly before its next use: CLOCK then
//! hits almost never, while keeping any fixed part of the loop resident
//! would hit in budget / loop of the accesses. Bimodal insertion (BIP, from
//! Qureshi et al., "Adaptive insertion policies for high performance
//! caching", ISCA 2007) does keep a fixed part: a page that missed enters
//! at the hand, where it is the next victim unless it is referenced before
//! the hand reaches it, and only one in [`BIP_ODDS`] enters behind the hand.
//! The pages already in the ring stay, and the ring drifts slowly enough to
//! follow a working set that changes.
//!
//! **Set dueling.** BIP is wrong for a working set that fits: a page that
//! will be reused soon leaves before its reuse. So two groups of pages, one
//! in 32 each by a hash of the page number, are leaders: one always enters
//! behind the hand, the other always bimodally. A saturating counter moves
//! up on each read miss of the first group and down on each read miss of
//! the second; every other page follows the group that misses less. The
//! leaders share one cache, so they compare the two insertions under the
//! program's own access pattern, with no model of it.
//!
//! Cost on the fault path: one multiply for the group, one relaxed atomic
//! add on the counter for leader pages, and for BIP one relaxed atomic add
//! for the odds. No lock, no allocation.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use crate::page_table::PageNo;

/// One page that missed in this many enters behind the hand under BIP (the
/// paper's 1/32): enough for the resident set to follow a drifting working
/// set, few enough that a loop keeps a fixed part.
pub const BIP_ODDS: u32 = 32;

/// Saturation of the selector (the paper's 10-bit counter): the followers
/// switch after this many more misses of one leader group than the other,
/// about a second at tens of thousands of misses per second.
const SELECTOR_LIMIT: i32 = 1024;

/// Which insertion a page's group uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// Always enters behind the hand.
    RecencyLeader,
    /// Always enters bimodally.
    ThrashLeader,
    /// Follows the leader group that misses less.
    Follower,
}

/// The group of `page`: a Fibonacci hash spreads the leaders over the whole
/// arena, so neither group is one region of the program's memory.
pub fn group_of(page: PageNo) -> Group {
    match page.wrapping_mul(0x9E37_79B1) >> 27 {
        0 => Group::RecencyLeader,
        1 => Group::ThrashLeader,
        _ => Group::Follower,
    }
}

/// A page that left DRAM fewer than this many times the queued pages'
/// worth of evictions ago, and misses again, is thrashing: a cache this
/// much larger would have held it. With a quarter of the budget in
/// probation that is about three budgets. A block of pages read again after
/// a sweep of four budgets or more comes back from further away and enters
/// behind the hand, so it becomes resident at once; a loop of up to about
/// four budgets (a guest walking 768 MiB in 256 MiB, whose pages come back
/// about 3.2 queued-pages' worth of evictions later) is still recognised.
pub const THRASH_DISTANCE_BUDGETS: u64 = 4;

/// Whether a page whose eviction mark is `mark` (0: none), missing when the
/// eviction count is `now`, left DRAM within [`THRASH_DISTANCE_BUDGETS`]
/// times `resident` evictions.
pub fn is_thrashing(mark: u32, now: u32, resident: usize) -> bool {
    mark != 0 && (now.wrapping_sub(mark) as u64) < THRASH_DISTANCE_BUDGETS * resident as u64
}

#[derive(Default)]
pub struct Duel {
    /// Read misses of recency leaders minus those of thrash leaders,
    /// saturating at ±[`SELECTOR_LIMIT`]. Positive: recency misses more, so
    /// followers insert bimodally.
    selector: AtomicI32,
    /// Counts bimodal insertions, for the one-in-[`BIP_ODDS`] choice.
    bimodal_turn: AtomicU32,
}

impl Duel {
    /// A read of `page` missed: records it for the duel and says whether the
    /// page enters at the hand. Only a page that left DRAM recently
    /// (`thrashing`, see [`is_thrashing`]) may: one that comes back after a
    /// long absence, or for the first time, is the start of a new working
    /// set, and enters behind the hand whatever the duel says.
    pub fn on_read_miss(&self, page: PageNo, thrashing: bool) -> bool {
        let bimodal = match group_of(page) {
            Group::RecencyLeader => {
                self.nudge(1);
                false
            }
            Group::ThrashLeader => {
                self.nudge(-1);
                true
            }
            Group::Follower => self.thrash_resistant(),
        };
        bimodal && thrashing && self.bimodal_at_hand()
    }

    /// Whether followers insert bimodally now.
    pub fn thrash_resistant(&self) -> bool {
        self.selector.load(Ordering::Relaxed) > 0
    }

    fn bimodal_at_hand(&self) -> bool {
        !self
            .bimodal_turn
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(BIP_ODDS)
    }

    fn nudge(&self, by: i32) {
        // Relaxed: the selector only steers insertion; a lost race moves it
        // by one miss less.
        let _ = self
            .selector
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                Some((s + by).clamp(-SELECTOR_LIMIT, SELECTOR_LIMIT))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_leader_group_is_about_one_page_in_32() {
        let pages = 1u32 << 16;
        let count = |g| (0..pages).filter(|&p| group_of(p) == g).count() as f64;
        for g in [Group::RecencyLeader, Group::ThrashLeader] {
            let share = count(g) / pages as f64;
            assert!((share - 1.0 / 32.0).abs() < 0.002, "{g:?}: {share}");
        }
    }

    #[test]
    fn leaders_are_spread_over_the_arena() {
        // Every 1 MiB region of 4 KiB pages holds leaders of both groups.
        for region in 0..64u32 {
            let pages = region * 256..(region + 1) * 256;
            for g in [Group::RecencyLeader, Group::ThrashLeader] {
                assert!(pages.clone().any(|p| group_of(p) == g), "{g:?} in {region}");
            }
        }
    }

    fn page_in(g: Group) -> PageNo {
        (0..).find(|&p| group_of(p) == g).expect("some page")
    }

    #[test]
    fn followers_switch_when_recency_leaders_miss_more() {
        let duel = Duel::default();
        let follower = page_in(Group::Follower);
        assert!(!duel.on_read_miss(follower, true), "recency at first");
        for _ in 0..10 {
            duel.on_read_miss(page_in(Group::RecencyLeader), true);
        }
        assert!(duel.thrash_resistant());
        let at_hand = (0..64)
            .filter(|_| duel.on_read_miss(follower, true))
            .count();
        assert_eq!(at_hand, 62, "all but one in {BIP_ODDS} at the hand");
        for _ in 0..11 {
            duel.on_read_miss(page_in(Group::ThrashLeader), true);
        }
        assert!(!duel.thrash_resistant(), "and back");
        assert!(!duel.on_read_miss(follower, true));
    }

    #[test]
    fn only_pages_that_left_recently_enter_at_the_hand() {
        let duel = Duel::default();
        let thrash = page_in(Group::ThrashLeader);
        assert!(
            !duel.on_read_miss(thrash, false),
            "a new working set enters behind"
        );
        assert!(!is_thrashing(0, 100, 10), "never evicted");
        assert!(
            is_thrashing(90, 100, 10),
            "ten evictions ago, budget of ten"
        );
        assert!(!is_thrashing(60, 100, 10), "forty evictions ago is too far");
        assert!(is_thrashing(u32::MAX - 5, 4, 10), "across the wrap");
    }

    #[test]
    fn the_selector_saturates() {
        let duel = Duel::default();
        for _ in 0..5000 {
            duel.on_read_miss(page_in(Group::RecencyLeader), true);
        }
        for _ in 0..SELECTOR_LIMIT {
            duel.on_read_miss(page_in(Group::ThrashLeader), true);
        }
        assert!(!duel.thrash_resistant(), "5000 misses count as the limit");
    }

    #[test]
    fn leaders_keep_their_insertion_whatever_the_selector() {
        let duel = Duel::default();
        let recency = page_in(Group::RecencyLeader);
        for _ in 0..100 {
            assert!(!duel.on_read_miss(recency, true));
        }
        let thrash = page_in(Group::ThrashLeader);
        let at_hand = (0..64).filter(|_| duel.on_read_miss(thrash, true)).count();
        assert_eq!(at_hand, 62);
    }
}
