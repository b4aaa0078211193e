//! Neighbour reads: a miss on page P also reads P + 1, while misses come
//! in adjacent pairs.
//!
//! An object that spans two pages (a Redis value of 4 KiB sits in a 5 KiB
//! allocation) misses twice in a row: the program faults on P, waits for
//! the device, then faults on P + 1 and waits again. Such pairs are no
//! stream (the next miss is anywhere), so read-ahead rightly ignores them;
//! Linux's swap-in catches some with its VMA read-around, whose window
//! follows how often its extra pages are used. Here the two reads go out
//! together, so the object costs one device wait instead of two.
//!
//! Whether to read the neighbour is learnt from the misses no stream took,
//! shared by every handler (a pair's two faults may reach different ones):
//! - a **pair** is a miss on P + 1 shortly after a miss on P, or a fault on
//!   a parked neighbour (the pair the read absorbed, counted for its sample);
//! - each epoch of misses gives the share of pairs; neighbour reads turn on
//!   at a quarter and off below an eighth, so that a workload whose
//!   neighbours go unused (uniform random pages) never pays the extra
//!   device reads and DRAM.
//!
//! A neighbour read is mapped at once, so the program uses it without even
//! a fault; one in [`SAMPLE`] is parked unmapped instead, like a read-ahead
//! marker, and the program's arrival there (a fault served from DRAM)
//! counts for the whole sample. A write miss reads its neighbour writable:
//! an object being overwritten is written through both of its pages.
//!
//! The io_uring handlers read neighbours (the default engine); the pread
//! fallback reads one page at a time, and under signal delivery the
//! faulting thread reads only its own page, so neither does.
//!
//! Everything here is a relaxed atomic: the counts steer a heuristic, and
//! a miss lost in a race moves it by one part in an epoch.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::page_table::PageNo;

/// Recent misses remembered for pairing: a pair's second fault follows its
/// first within a few misses even when several threads page at once.
const RECENT: usize = 8;
/// Misses per decision: enough for a stable share, few enough to follow a
/// program from one phase to the next within milliseconds of paging.
const EPOCH: u32 = 256;

/// One neighbour read in this many is parked, and the program's fault on
/// it tells whether it was used; the rest are mapped at once, so using
/// them costs nothing, not even a fault.
const SAMPLE: u32 = 4;

/// What to do with the page after a miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Neighbour {
    /// Nothing: misses do not come in pairs now.
    Skip,
    /// Read it with the miss and map it.
    Map,
    /// Read it with the miss and park it, as a sample of their use.
    Park,
}

/// The adjacent-pair detector, one per runtime.
pub struct NeighbourReads {
    /// Recent misses, as page + 1 so that 0 means none.
    recent: [AtomicU64; RECENT],
    cursor: AtomicUsize,
    misses: AtomicU32,
    pairs: AtomicU32,
    on: AtomicBool,
}

impl Default for NeighbourReads {
    fn default() -> Self {
        NeighbourReads {
            recent: std::array::from_fn(|_| AtomicU64::new(0)),
            cursor: AtomicUsize::new(0),
            misses: AtomicU32::new(0),
            pairs: AtomicU32::new(0),
            on: AtomicBool::new(false),
        }
    }
}

impl NeighbourReads {
    /// A miss on `page` that no stream took; returns whether to read
    /// `page + 1` with it, and if so whether to park it as a sample.
    pub fn on_miss(&self, page: PageNo) -> Neighbour {
        let page = u64::from(page);
        let follows = self.recent.iter().any(|r| r.load(Relaxed) == page);
        let i = self.cursor.fetch_add(1, Relaxed) % RECENT;
        self.recent[i].store(page + 1, Relaxed);
        if follows {
            self.pairs.fetch_add(1, Relaxed);
        }
        let epoch_position = self.count_miss();
        match self.on.load(Relaxed) {
            false => Neighbour::Skip,
            true if epoch_position.is_multiple_of(SAMPLE) => Neighbour::Park,
            true => Neighbour::Map,
        }
    }

    /// The program faulted on a parked neighbour: it used the page read
    /// with its pair's first, and so, by the sample, did the unparked ones.
    pub fn on_used(&self) {
        self.pairs.fetch_add(SAMPLE, Relaxed);
    }

    #[cfg(test)]
    fn is_on(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// Counts a miss; returns its position in the epoch.
    fn count_miss(&self) -> u32 {
        let position = self.misses.fetch_add(1, Relaxed) + 1;
        // Only the miss that completes an epoch decides: a handler that
        // counts past it meanwhile must not decide again on the pairs of
        // an epoch just begun. The subtraction keeps its count, and any
        // multiple decides, so that a count carried past the next end
        // before the subtraction still comes back.
        if !position.is_multiple_of(EPOCH) {
            return position;
        }
        self.misses.fetch_sub(EPOCH, Relaxed);
        let pairs = self.pairs.swap(0, Relaxed);
        let on = self.on.load(Relaxed);
        // Hysteresis: a share near the threshold does not flip every epoch.
        let threshold = if on { EPOCH / 8 } else { EPOCH / 4 };
        self.on.store(pairs >= threshold, Relaxed);
        position
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn miss_many(n: &NeighbourReads, pages: impl IntoIterator<Item = u64>) -> bool {
        let mut last = Neighbour::Skip;
        for p in pages {
            last = n.on_miss(p as PageNo);
        }
        last != Neighbour::Skip
    }

    #[test]
    fn objects_spanning_two_pages_turn_neighbour_reads_on() {
        let n = NeighbourReads::default();
        // Two-page objects far apart: P, P + 1, Q, Q + 1, ...
        let pairs = (0..EPOCH as u64).flat_map(|i| [i * 1000, i * 1000 + 1]);
        miss_many(&n, pairs);
        assert!(n.is_on());
    }

    #[test]
    fn random_pages_leave_them_off() {
        let n = NeighbourReads::default();
        let mut x = 12345u64;
        let random = (0..4 * EPOCH).map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % 1_000_000
        });
        assert!(!miss_many(&n, random));
    }

    #[test]
    fn used_neighbours_keep_them_on_and_unused_ones_turn_them_off() {
        let n = NeighbourReads::default();
        miss_many(&n, (0..EPOCH as u64).flat_map(|i| [i * 1000, i * 1000 + 1]));
        assert!(n.is_on());
        // On: the second page of each pair is read with the first, so only
        // the first misses, and the program's use of the parked sample counts.
        let mut parked = 0;
        for i in 0..EPOCH as u64 {
            if n.on_miss((i * 7919 + 5_000_000) as PageNo) == Neighbour::Park {
                n.on_used();
                parked += 1;
            }
        }
        assert_eq!(parked, EPOCH / SAMPLE, "one neighbour in SAMPLE is parked");
        assert!(n.is_on());
        // Nobody uses the neighbours any more.
        miss_many(&n, (0..EPOCH as u64).map(|i| i * 7919 + 9_000_000));
        assert!(!n.is_on());
    }

    #[test]
    fn only_the_miss_that_completes_an_epoch_decides() {
        let n = NeighbourReads::default();
        miss_many(&n, (0..EPOCH as u64).flat_map(|i| [i * 1000, i * 1000 + 1]));
        assert!(n.is_on());
        // A second handler counted past the epoch's end before the first
        // reset the count: its miss must not decide on the new epoch's
        // pairs (none yet), which would turn reads off.
        n.misses.store(EPOCH, Relaxed);
        assert_eq!(n.count_miss(), EPOCH + 1);
        assert!(n.is_on());
    }

    #[test]
    fn a_count_carried_past_the_next_epoch_still_decides() {
        let n = NeighbourReads::default();
        miss_many(&n, (0..EPOCH as u64).flat_map(|i| [i * 1000, i * 1000 + 1]));
        assert!(n.is_on());
        // Handlers counted a whole epoch more before the subtraction: the
        // miss at twice the epoch decides (no pairs: off) and brings the
        // count back, instead of counting on with no decision ever again.
        n.misses.store(2 * EPOCH - 1, Relaxed);
        n.count_miss();
        assert!(!n.is_on());
        assert_eq!(n.misses.load(Relaxed), EPOCH);
    }

    #[test]
    fn a_share_between_the_thresholds_keeps_the_state() {
        let n = NeighbourReads::default();
        // A sixth of the misses are pairs: not enough to turn on...
        let mixed = |base: u64| {
            (0..EPOCH as u64).map(move |i| {
                if i % 6 == 1 {
                    base + (i - 1) * 100 + 1
                } else {
                    base + i * 100
                }
            })
        };
        assert!(!miss_many(&n, mixed(0)));
        // ...and, once on, not little enough to turn off.
        miss_many(&n, (0..EPOCH as u64).flat_map(|i| [i * 1000, i * 1000 + 1]));
        assert!(n.is_on());
        miss_many(&n, mixed(50_000_000));
        assert!(n.is_on());
    }
}
