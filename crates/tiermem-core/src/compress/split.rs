//! How the DRAM budget is split between resident pages and the compressed
//! pool: set (`TIERMEM_COMPRESS_SHARE=N`, 50 by default), or adapted from
//! where the pool's hits land (`auto`).
//!
//! A page of budget can hold one resident page, whose accesses cost
//! nothing, or R compressed ones (R the pool's ratio), whose accesses cost
//! a decompression and a fault (`t_hit`, about 12 µs) plus the compression
//! of the page that leaves DRAM in exchange (`t_evict`, about 10 µs of the
//! evictor), but spare a device read (`t_miss`, 50–80 µs) to each. Which use pays depends on the access
//! pattern, and the pool tells it: it is ordered by the time of
//! compression, so its youngest objects are the pages that left the
//! resident set last, and its oldest are the next to leave for the store.
//!
//! - Hits on the youngest objects (the last `step` pages to leave) would
//!   have been resident hits with `step` more pages resident: growing the
//!   resident set by a step saves `young hits × (t_hit + t_evict)`.
//! - Hits on the oldest `R × step` objects are what a pool smaller by a
//!   step would lose to the store, and, by continuity, what one larger by a
//!   step would gain: `old hits × (t_miss − t_hit)`.
//!
//! Every half second with enough hits to judge, the share moves one step
//! (5% of the budget) towards the larger saving, between 10% and 90%.
//! Uniform access spreads hits evenly, so the pool grows (the bench's text,
//! at ratio 3.8: 50% → 22.9k pages/s, 70% → 28k); a skewed one brings hot
//! pages back soon after they leave, so its hits crowd the young end and
//! the resident set keeps its hot pages (zipf text lost half at a set 90%,
//! and 12–16% when a first version of this left out `t_evict` and grew
//! the pool to 60–65%).
//! The two slices are measured from the fault path with two counters and
//! no lock; the evictor, which owns the pool, decides.
//!
//! What it cannot see is a resident page's hits: under `bench-redis` it grew
//! the pool to 75–90% and lost 8–28% of the requests per second, as Redis's
//! hot metadata lost its place in DRAM without a sign in the pool. That is
//! why it is not the default.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The share moves by this much of the budget at a time, in percent.
pub const STEP_PERCENT: u32 = 5;
/// The smallest share an adapting pool keeps, in percent: room enough to
/// learn where hits land.
pub const MIN_PERCENT: u32 = 10;
/// Hits in the two slices needed in an interval to move: fewer say
/// little. Uniform access puts about an eighth of the pool's hits there.
const MIN_HITS: u64 = 200;
/// One use must save this much more than the other (in percent) to move
/// the share, so that noise does not make it swing.
const MARGIN_PERCENT: u64 = 25;
/// A slice is at most this share of the pool (in 1/65536), so that the
/// young and the old slice never overlap.
const MAX_SLICE: u32 = 1 << 15;

/// What the evictor knows when it decides.
#[derive(Clone, Copy, Debug)]
pub struct Inputs {
    /// Objects in the pool.
    pub objects: u64,
    /// Pages per budget page in the pool (its ratio), at least 1.
    pub ratio: f64,
    /// Budget pages.
    pub budget_pages: u64,
    /// Typical cost of a compressed hit, of a miss, and of the compression
    /// of a page leaving DRAM, in ns.
    pub hit_ns: u64,
    pub miss_ns: u64,
    pub evict_ns: u64,
}

pub struct Split {
    percent: AtomicU32,
    adaptive: bool,
    max_percent: u32,
    /// Hits on objects younger than `young_from`, older than `old_below`
    /// (positions in the pool's order, in 1/65536 of it).
    young_hits: AtomicU64,
    old_hits: AtomicU64,
    young_from: AtomicU32,
    old_below: AtomicU32,
    /// The sequence number of the oldest object (about: the last one the
    /// write-back took).
    oldest_seq: AtomicU32,
}

impl Split {
    /// A split starting at `percent`; `adaptive` lets it move, up to
    /// `max_percent`.
    pub fn new(percent: u32, adaptive: bool, max_percent: u32) -> Split {
        Split {
            percent: AtomicU32::new(percent),
            adaptive,
            max_percent,
            young_hits: AtomicU64::new(0),
            old_hits: AtomicU64::new(0),
            young_from: AtomicU32::new(u32::MAX),
            old_below: AtomicU32::new(0),
            oldest_seq: AtomicU32::new(0),
        }
    }

    /// The pool's share of the budget now, in percent.
    pub fn percent(&self) -> u32 {
        self.percent.load(Ordering::Relaxed)
    }

    pub fn is_adaptive(&self) -> bool {
        self.adaptive
    }

    /// Records where a compressed hit landed: its object's sequence number,
    /// and the next one to be handed out. Fault path: no lock.
    pub fn note_hit(&self, seq: u32, next_seq: u32) {
        if !self.adaptive {
            return;
        }
        let oldest = self.oldest_seq.load(Ordering::Relaxed);
        let span = next_seq.wrapping_sub(oldest).max(1) as u64;
        let at = (seq.wrapping_sub(oldest) as u64).min(span);
        let position = (at << 16) / span;
        if position >= self.young_from.load(Ordering::Relaxed) as u64 {
            self.young_hits.fetch_add(1, Ordering::Relaxed);
        } else if position < self.old_below.load(Ordering::Relaxed) as u64 {
            self.old_hits.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records the sequence number of the oldest object taken for write-back.
    pub fn note_oldest(&self, seq: u32) {
        self.oldest_seq.store(seq, Ordering::Relaxed);
    }

    /// Decides on the hits since the last call: moves the share one step if
    /// one use saves clearly more, and sets the slices for the next
    /// interval. Returns the new share if it moved. Evictor only.
    pub fn adapt(&self, inputs: Inputs) -> Option<u32> {
        if !self.adaptive {
            return None;
        }
        let young = self.young_hits.swap(0, Ordering::Relaxed);
        let old = self.old_hits.swap(0, Ordering::Relaxed);
        self.set_slices(inputs);
        if young + old < MIN_HITS {
            return None;
        }
        let resident_saves = young * (inputs.hit_ns + inputs.evict_ns);
        let pool_saves = old * inputs.miss_ns.saturating_sub(inputs.hit_ns);
        let percent = self.percent();
        let next = if pool_saves * 100 > resident_saves * (100 + MARGIN_PERCENT) {
            (percent + STEP_PERCENT).min(self.max_percent)
        } else if resident_saves * 100 > pool_saves * (100 + MARGIN_PERCENT) {
            percent.saturating_sub(STEP_PERCENT).max(MIN_PERCENT)
        } else {
            percent
        };
        self.percent.store(next, Ordering::Relaxed);
        (next != percent).then_some(next)
    }

    /// The young slice is a step's worth of pages, the old slice a step's
    /// worth of budget in compressed pages, both as shares of the pool.
    fn set_slices(&self, inputs: Inputs) {
        let step_pages = inputs.budget_pages * STEP_PERCENT as u64 / 100;
        let objects = inputs.objects.max(1) as f64;
        let slice = |pages: f64| ((pages / objects * 65536.0) as u32).min(MAX_SLICE);
        let young = slice(step_pages as f64);
        let old = slice(step_pages as f64 * inputs.ratio.max(1.0));
        self.young_from.store(65536 - young, Ordering::Relaxed);
        self.old_below.store(old, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        // 1,000 budget pages, a pool of 2,000 objects at ratio 4: a step is
        // 50 pages, the young slice 50 objects (2.5%), the old 200 (10%).
        Inputs {
            objects: 2_000,
            ratio: 4.0,
            budget_pages: 1_000,
            hit_ns: 12_000,
            miss_ns: 60_000,
            evict_ns: 0,
        }
    }

    /// Hits at `positions` (fractions of the pool, 0 the oldest) in a pool
    /// whose sequence numbers run from 1,000 to 3,000.
    fn hit_at(split: &Split, positions: &[f64], each: usize) {
        split.note_oldest(1_000);
        for &p in positions {
            for _ in 0..each {
                split.note_hit(1_000 + (p * 2_000.0) as u32, 3_000);
            }
        }
    }

    #[test]
    fn hits_spread_evenly_grow_the_pool_to_its_limit() {
        let split = Split::new(50, true, 90);
        split.set_slices(inputs());
        let mut shares = Vec::new();
        for _ in 0..10 {
            let even: Vec<f64> = (0..200).map(|i| i as f64 / 200.0).collect();
            hit_at(&split, &even, 50);
            shares.push(split.adapt(inputs()));
        }
        assert_eq!(shares[0], Some(55));
        assert_eq!(split.percent(), 90, "{shares:?}");
    }

    #[test]
    fn hits_crowding_the_young_end_shrink_the_pool_to_its_floor() {
        let split = Split::new(50, true, 90);
        split.set_slices(inputs());
        for _ in 0..10 {
            hit_at(&split, &[0.99, 0.995, 0.5], 500);
            split.adapt(inputs());
        }
        assert_eq!(split.percent(), MIN_PERCENT);
    }

    #[test]
    fn balanced_or_scarce_hits_and_a_set_share_do_not_move() {
        let split = Split::new(50, true, 90);
        split.set_slices(inputs());
        // Young hits saving as much as old ones: 4 young per old one at
        // 12 against 48 µs.
        hit_at(&split, &[0.99], 800);
        hit_at(&split, &[0.01], 200);
        assert_eq!(split.adapt(inputs()), None);
        hit_at(&split, &[0.01], 100);
        assert_eq!(split.adapt(inputs()), None, "too few hits to judge");
        assert_eq!(split.percent(), 50);
        let set = Split::new(50, false, 90);
        set.set_slices(inputs());
        hit_at(&set, &[0.01], 5_000);
        assert_eq!(set.adapt(inputs()), None);
        assert_eq!(set.percent(), 50);
    }

    #[test]
    fn the_cost_of_evicting_for_a_hit_counts_for_the_resident_set() {
        // Balanced at 12 against 48 µs; with 12 µs of eviction per hit the
        // young hits save twice as much as before, and the pool shrinks.
        let split = Split::new(50, true, 90);
        split.set_slices(inputs());
        hit_at(&split, &[0.99], 800);
        hit_at(&split, &[0.01], 200);
        let costly = Inputs {
            evict_ns: 12_000,
            ..inputs()
        };
        assert_eq!(split.adapt(costly), Some(45));
    }

    #[test]
    fn slices_never_overlap_in_a_small_pool() {
        let split = Split::new(50, true, 90);
        split.set_slices(Inputs {
            objects: 10,
            ..inputs()
        });
        assert!(
            split.old_below.load(Ordering::Relaxed) <= split.young_from.load(Ordering::Relaxed)
        );
    }
}
