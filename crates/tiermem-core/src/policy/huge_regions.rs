//! Memory advised `MADV_HUGEPAGE` kept resident in 2 MiB regions, as the
//! kernel keeps a transparent huge page.
//!
//! **Why.** A program that asks for huge pages (QEMU does, for guest RAM)
//! touches its memory in a way that recency orders serve badly: a guest
//! walks its RAM in passes, and a recency order loses each page just before
//! its next visit (about x²/2 of the visits hit for a budget of x of the
//! memory, where keeping any fixed part would hit x). Under kernel swap
//! such memory sits in 2 MiB pages with one accessed bit each: every huge
//! page gets visits all the time, so the intact ones stay resident while
//! split ones turn over. tiermem maps 4 KiB pages and sees no accesses to
//! mapped ones, so it keeps that fixed part explicitly:
//!
//! - **Forming.** A region of advised memory that fills completely (every
//!   page installed, none leaving in between) is *kept*, while kept regions
//!   hold at most 5/6 of the pages the budget keeps mapped (5/8 of the
//!   budget, less the compressed pool's part); past that, the kept region touched
//!   longest ago makes room (the evictor decides, off the fault path).
//! - **Proving.** A kept region is shielded from the CLOCK hand only once a
//!   fault shows it in use after it was kept (a miss or a probation touch
//!   of one of its pages). A region filled by a sweep that moved on never
//!   proves itself, and leaves in CLOCK order like any other memory, so a
//!   new working set is not crowded out by the one before.
//! - **Checking.** Once per epoch (2/3 of the mapped pages demoted: half
//!   the budget without a compressed pool) the
//!   hand lets [`SAMPLES`] pages of each proven region go to probation, and
//!   shields the rest. A region with no fault at all since its last check's
//!   samples went out has gone cold: it is no longer kept.
//! - **Never all of DRAM.** The share is of the pages left mapped (the
//!   compressed pool and probation take their parts first), and the hand
//!   honours shields in
//!   its first turn of a call only (`policy::clock`): kept regions can slow
//!   the evictor, never stop it.
//!
//! Simulated (`docs/sim/huge_regions.py`), 65,536 pages in random
//! permutation passes: 26% of visits hit without regions, 39% with, in a
//! budget of 0.6 of the memory; 7% and 17% in 0.33; a block read twice after
//! a sweep still hits every second read; uniform and zipf access unchanged.
//!
//! One `AtomicU64` per region, lazily committed like the page table, which
//! holds this table (so page numbers are plain `u32`s here: the page table's
//! `PageNo`, without importing the module that imports this one).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crossbeam_queue::SegQueue;

use crate::error::Result;
use crate::sys::mem::Mapping;

type PageNo = u32;

/// Bytes in a region: an x86-64 transparent huge page.
pub const REGION_BYTES: usize = 2 << 20;

/// Pages of a proven region that go to probation per epoch as its check.
pub const SAMPLES: u32 = 8;

/// Kept regions hold at most KEPT_SHARE of the pages the budget leaves
/// mapped (5/8 of a budget whose quarter is probation, with no compressed
/// pool): the rest turns over in CLOCK order.
const KEPT_SHARE: (u64, u64) = (5, 6);

// The region word.
const HINT: u64 = 1 << 63;
const QUEUED: u64 = 1 << 62;
const KEEP_SHIFT: u32 = 60;
const KEEP_MASK: u64 = 3 << KEEP_SHIFT;
const FILLS_MASK: u64 = 0xffff;
const TOUCHED_SHIFT: u32 = 16;
const CHECKED_SHIFT: u32 = 32;
const SAMPLED_SHIFT: u32 = 48;
const EPOCH_MASK: u64 = 0xffff;
const SAMPLED_MASK: u64 = 0xff;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Turns over page by page, in CLOCK order.
    No,
    /// Filled completely; not yet seen in use since.
    Unproven,
    /// Seen in use since it was kept: shielded from the hand but for its
    /// samples.
    Proven,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct Word(u64);

impl Word {
    fn hinted(self) -> bool {
        self.0 & HINT != 0
    }
    fn keep(self) -> Keep {
        match (self.0 & KEEP_MASK) >> KEEP_SHIFT {
            0 => Keep::No,
            1 => Keep::Unproven,
            _ => Keep::Proven,
        }
    }
    fn with_keep(self, keep: Keep) -> Word {
        let k = match keep {
            Keep::No => 0,
            Keep::Unproven => 1,
            Keep::Proven => 2,
        };
        Word(self.0 & !KEEP_MASK | k << KEEP_SHIFT)
    }
    fn fills(self) -> u64 {
        self.0 & FILLS_MASK
    }
    fn with_fills(self, fills: u64) -> Word {
        Word(self.0 & !FILLS_MASK | fills.min(FILLS_MASK))
    }
    fn field(self, shift: u32) -> u16 {
        ((self.0 >> shift) & EPOCH_MASK) as u16
    }
    fn with_field(self, shift: u32, value: u16) -> Word {
        Word(self.0 & !(EPOCH_MASK << shift) | (value as u64) << shift)
    }
    /// The epoch of the last fault seen in the region.
    fn touched(self) -> u16 {
        self.field(TOUCHED_SHIFT)
    }
    /// The epoch of the region's last check.
    fn checked(self) -> u16 {
        self.field(CHECKED_SHIFT)
    }
    /// Samples let out in the epoch of the last check.
    fn sampled(self) -> u16 {
        ((self.0 >> SAMPLED_SHIFT) & SAMPLED_MASK) as u16
    }
    fn with_sampled(self, sampled: u16) -> Word {
        let n = (sampled as u64).min(SAMPLED_MASK);
        Word(self.0 & !(SAMPLED_MASK << SAMPLED_SHIFT) | n << SAMPLED_SHIFT)
    }
}

/// Whether epoch `a` comes before epoch `b` (16-bit epochs that wrap).
fn before(a: u16, b: u16) -> bool {
    (b.wrapping_sub(a) as i16) > 0
}

pub struct HugeRegions {
    words: Mapping,
    regions: u64,
    /// log2 of the pages in a region.
    shift: u32,
    epoch: AtomicU32,
    demoted_in_epoch: AtomicU64,
    /// Pages the budget keeps mapped, as of the last settling.
    mapped_pages: AtomicU64,
    /// Regions that filled while not kept; the evictor settles them.
    filled: SegQueue<u32>,
    /// Regions kept, as the evictor last saw them. Only the evictor's
    /// thread locks it, and never across a fork (the evictor is parked).
    kept: Mutex<Vec<u32>>,
    kept_now: AtomicU64,
    counts: Counts,
}

/// What the regions did so far, for `Stats`.
#[derive(Default)]
struct Counts {
    formed: AtomicU64,
    proven: AtomicU64,
    dropped: AtomicU64,
    displaced: AtomicU64,
}

/// A snapshot of [`HugeRegions`]' counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionCounts {
    /// Regions kept now (proven or not).
    pub kept: u64,
    /// Regions that filled and were kept, in all.
    pub formed: u64,
    /// Kept regions a fault then showed in use.
    pub proven: u64,
    /// Kept regions whose check found them unused.
    pub dropped: u64,
    /// Kept regions that made room for newer ones, or for a smaller budget.
    pub displaced: u64,
}

impl HugeRegions {
    /// Regions for an arena of `pages` pages of `page_size` bytes: a region
    /// is [`REGION_BYTES`] of pages (one page for pages that large or
    /// larger).
    pub fn new(pages: u64, page_size: usize) -> Result<HugeRegions> {
        let shift = (REGION_BYTES / page_size.max(1)).max(1).ilog2();
        let regions = pages.div_ceil(1 << shift).max(1);
        Ok(HugeRegions {
            words: Mapping::reserve(regions as usize * 8, "reserving the huge-region table")?,
            regions,
            shift,
            epoch: AtomicU32::new(0),
            demoted_in_epoch: AtomicU64::new(0),
            mapped_pages: AtomicU64::new(0),
            filled: SegQueue::new(),
            kept: Mutex::new(Vec::new()),
            kept_now: AtomicU64::new(0),
            counts: Counts::default(),
        })
    }

    fn region_pages(&self) -> u64 {
        1 << self.shift
    }

    fn region_of(&self, page: PageNo) -> u32 {
        (page as u64 >> self.shift) as u32
    }

    fn word(&self, region: u32) -> &AtomicU64 {
        assert!((region as u64) < self.regions);
        // SAFETY: the mapping holds `regions` zero-initialised u64s,
        // page-aligned, and lives as long as `self`; AtomicU64 has the
        // layout of u64.
        unsafe { &*(self.words.as_ptr() as *const AtomicU64).add(region as usize) }
    }

    fn load(&self, region: u32) -> Word {
        Word(self.word(region).load(Ordering::Relaxed))
    }

    /// Applies `f` until it sticks; returns (before, after). Relaxed: the
    /// word only steers eviction; no other memory is published through it.
    fn update(&self, region: u32, f: impl Fn(Word) -> Word) -> (Word, Word) {
        let cell = self.word(region);
        let mut cur = cell.load(Ordering::Relaxed);
        loop {
            let new = f(Word(cur)).0;
            match cell.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return (Word(cur), Word(new)),
                Err(actual) => cur = actual,
            }
        }
    }

    fn epoch(&self) -> u16 {
        self.epoch.load(Ordering::Relaxed) as u16
    }

    /// `madvise(MADV_HUGEPAGE)` (`on`) or `MADV_NOHUGEPAGE` over the pages
    /// `first..first + pages`: regions wholly inside take the advice; a
    /// region advised off forgets whether it was kept.
    pub fn advise(&self, first: PageNo, pages: u64, on: bool) {
        let size = self.region_pages();
        let start = (first as u64).div_ceil(size);
        let end = (first as u64 + pages) / size;
        for region in start..end.min(self.regions) {
            if on {
                self.update(region as u32, |w| Word(w.0 | HINT));
            } else {
                self.clear(region as u32);
            }
        }
    }

    /// The region of `page` no longer belongs to what advised it (unmapped).
    pub fn forget(&self, page: PageNo) {
        let region = self.region_of(page);
        if self.load(region).0 != 0 {
            self.clear(region);
        }
    }

    /// Forgets everything about `region`, its advice included.
    fn clear(&self, region: u32) {
        let old = Word(self.word(region).swap(0, Ordering::Relaxed));
        if old.keep() != Keep::No {
            self.kept_now.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Ends the keeping of `region`. True if it was kept: whoever ends it
    /// (a check, the evictor making room, an unmap) counts it once.
    fn unkeep(&self, region: u32) -> bool {
        let (old, _) = self.update(region, |w| w.with_keep(Keep::No));
        let was_kept = old.keep() != Keep::No;
        if was_kept {
            self.kept_now.fetch_sub(1, Ordering::Relaxed);
        }
        was_kept
    }

    /// Whether `page` lies in advised memory.
    #[cfg(test)]
    pub fn is_advised(&self, page: PageNo) -> bool {
        self.load(self.region_of(page)).hinted()
    }

    #[cfg(test)]
    pub fn keep_of(&self, page: PageNo) -> Keep {
        self.load(self.region_of(page)).keep()
    }

    /// `page` became resident (installed or rescued). `used` says the
    /// program touched it (not read ahead). On the fault path: one load for
    /// memory not advised, one CAS for memory that is; a region that fills
    /// is queued for the evictor.
    pub fn on_resident(&self, page: PageNo, used: bool) {
        let region = self.region_of(page);
        if !self.load(region).hinted() {
            return;
        }
        let epoch = self.epoch();
        let full = self.region_pages();
        let (before_w, after) = self.update(region, |w| {
            let mut w = w.with_fills(w.fills() + 1);
            if used {
                w = w.with_field(TOUCHED_SHIFT, epoch);
                if w.keep() == Keep::Unproven {
                    w = w.with_keep(Keep::Proven);
                }
            }
            if w.keep() == Keep::No && w.fills() >= full {
                w = Word(w.0 | QUEUED);
            }
            w
        });
        if before_w.keep() == Keep::Unproven && after.keep() == Keep::Proven {
            self.counts.proven.fetch_add(1, Ordering::Relaxed);
        }
        if after.0 & QUEUED != 0 && after.fills() == full.min(FILLS_MASK) {
            self.filled.push(region);
        }
    }

    /// `page` left DRAM: its region is no longer whole.
    pub fn on_leave(&self, page: PageNo) {
        let region = self.region_of(page);
        if self.load(region).hinted() {
            self.update(region, |w| w.with_fills(0));
        }
    }

    /// The CLOCK hand chose `page` as a victim: returns true if its region
    /// keeps it (the hand puts it back). Called by the evictor only.
    pub fn shields(&self, page: PageNo) -> bool {
        let region = self.region_of(page);
        let w = self.load(region);
        if w.keep() != Keep::Proven {
            return false;
        }
        let epoch = self.epoch();
        let new_check = w.checked() != epoch;
        if new_check && w.sampled() > 0 && before(w.touched(), w.checked()) {
            // No fault since the last check's samples went out.
            if self.unkeep(region) {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            }
            return false;
        }
        if !new_check && w.sampled() >= SAMPLES as u16 {
            // This epoch's samples are out: the rest stay, with no write.
            return true;
        }
        // One more sample, the first of a new check if the epoch moved on.
        let (old, _) = self.update(region, |w| {
            let w = match w.checked() == epoch {
                true => w,
                false => w.with_field(CHECKED_SHIFT, epoch).with_sampled(0),
            };
            w.with_sampled((w.sampled() + 1).min(SAMPLES as u16))
        });
        old.checked() == epoch && old.sampled() >= SAMPLES as u16
    }

    /// The hand gave `n` victims: epochs last 2/3 of the mapped pages.
    pub fn count_demoted(&self, n: usize) {
        let epoch_len = (self.mapped_pages.load(Ordering::Relaxed) * 2 / 3).max(1);
        let seen = self.demoted_in_epoch.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if seen >= epoch_len {
            self.demoted_in_epoch.store(0, Ordering::Relaxed);
            self.epoch.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Keeps the regions that filled since the last call, within their
    /// share of the `mapped_pages` the budget leaves mapped, the kept region
    /// touched longest ago making room. Called by the evictor before it
    /// picks victims.
    ///
    /// A smaller budget (a VM moved from Gold to Bronze) gives up the
    /// stalest kept regions at once: shielded pages must never be all the
    /// hand can find.
    pub fn settle(&self, mapped_pages: u64) {
        let previous = self.mapped_pages.swap(mapped_pages, Ordering::Relaxed);
        if self.filled.is_empty() && previous == mapped_pages {
            return;
        }
        let cap = (mapped_pages * KEPT_SHARE.0 / KEPT_SHARE.1) >> self.shift;
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|&r| self.load(r).keep() != Keep::No);
        while kept.len() as u64 > cap {
            let Some(oldest) = self.stalest(&kept) else {
                break;
            };
            self.displace(&mut kept, oldest);
        }
        while let Some(region) = self.filled.pop() {
            let (_, w) = self.update(region, |w| Word(w.0 & !QUEUED));
            if !w.hinted() || w.keep() != Keep::No || w.fills() < self.region_pages() {
                continue;
            }
            if kept.len() as u64 >= cap {
                let Some(oldest) = self.stalest(&kept) else {
                    continue;
                };
                self.displace(&mut kept, oldest);
            }
            let epoch = self.epoch();
            self.update(region, |w| {
                w.with_keep(Keep::Unproven)
                    .with_field(TOUCHED_SHIFT, epoch)
                    .with_field(CHECKED_SHIFT, epoch)
                    .with_sampled(0)
            });
            kept.push(region);
            self.kept_now.fetch_add(1, Ordering::Relaxed);
            self.counts.formed.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn displace(&self, kept: &mut Vec<u32>, index: usize) {
        if self.unkeep(kept.swap_remove(index)) {
            self.counts.displaced.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn counts(&self) -> RegionCounts {
        let c = &self.counts;
        RegionCounts {
            kept: self.kept_regions() as u64,
            formed: c.formed.load(Ordering::Relaxed),
            proven: c.proven.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            displaced: c.displaced.load(Ordering::Relaxed),
        }
    }

    /// The index in `kept` of the region whose last fault is oldest.
    fn stalest(&self, kept: &[u32]) -> Option<usize> {
        let now = self.epoch();
        kept.iter()
            .enumerate()
            .max_by_key(|(_, &r)| now.wrapping_sub(self.load(r).touched()))
            .map(|(i, _)| i)
    }

    /// Regions kept now. A counter, not the evictor's list, so that a
    /// stats reader never holds a lock a `fork` could copy held.
    pub fn kept_regions(&self) -> usize {
        self.kept_now.load(Ordering::Relaxed) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: u64 = 512;

    fn fill(h: &HugeRegions, region: u64, used: bool) {
        for p in region * R..(region + 1) * R {
            h.on_resident(p as PageNo, used);
        }
    }

    #[test]
    fn only_advised_regions_that_fill_are_kept() {
        let h = HugeRegions::new(8 * R, 4096).unwrap();
        h.advise(0, 2 * R, true);
        fill(&h, 0, true);
        fill(&h, 2, true); // not advised
        for p in R..2 * R - 1 {
            h.on_resident(p as PageNo, true); // one page short
        }
        h.settle(48 * R);
        assert_eq!(h.keep_of(0), Keep::Unproven);
        assert_eq!(h.keep_of(R as PageNo), Keep::No);
        assert_eq!(h.keep_of(2 * R as PageNo), Keep::No);
    }

    #[test]
    fn a_page_that_leaves_restarts_the_fill() {
        let h = HugeRegions::new(4 * R, 4096).unwrap();
        h.advise(0, R, true);
        for p in 0..R - 1 {
            h.on_resident(p as PageNo, true);
        }
        h.on_leave(3);
        h.on_resident(R as PageNo - 1, true);
        h.settle(48 * R);
        assert_eq!(h.keep_of(0), Keep::No);
    }

    #[test]
    fn an_unproven_region_is_not_shielded_and_a_fault_proves_it() {
        let h = HugeRegions::new(4 * R, 4096).unwrap();
        h.advise(0, R, true);
        fill(&h, 0, true);
        h.settle(48 * R);
        assert!(!h.shields(5), "a sweep's region leaves in CLOCK order");
        h.on_resident(5, false);
        assert_eq!(h.keep_of(0), Keep::Unproven, "read-ahead proves nothing");
        h.on_resident(5, true);
        assert_eq!(h.keep_of(0), Keep::Proven);
    }

    /// Enough demotions to start the next epoch, for `mapped` pages.
    fn next_epoch(h: &HugeRegions, mapped: u64) {
        h.count_demoted(mapped as usize);
    }

    fn proven_region(mapped: u64) -> HugeRegions {
        let h = HugeRegions::new(4 * R, 4096).unwrap();
        h.advise(0, R, true);
        fill(&h, 0, true);
        h.settle(mapped);
        h.on_resident(0, true);
        h
    }

    #[test]
    fn a_proven_region_lets_out_its_samples_and_shields_the_rest() {
        let h = proven_region(48 * R);
        let out = (0..100).filter(|&p| !h.shields(p)).count();
        assert_eq!(out, SAMPLES as usize);
    }

    #[test]
    fn a_region_untouched_since_its_check_is_dropped() {
        let mapped = 48 * R;
        let h = proven_region(mapped);
        for p in 0..SAMPLES {
            assert!(!h.shields(p));
        }
        // The proving fault came in the check's own epoch, before its
        // samples: it counts for that check. The next check's samples go
        // out in the next epoch, and nothing touches the region after.
        next_epoch(&h, mapped);
        assert!(!h.shields(40), "the next check's first sample");
        assert_eq!(h.keep_of(0), Keep::Proven);
        next_epoch(&h, mapped);
        assert!(!h.shields(50), "the check failed");
        assert_eq!(h.keep_of(0), Keep::No);
        assert!(!h.shields(51), "pages of a dropped region are victims");
    }

    #[test]
    fn a_region_touched_since_its_check_stays() {
        let mapped = 48 * R;
        let h = proven_region(mapped);
        for p in 0..SAMPLES {
            assert!(!h.shields(p));
        }
        next_epoch(&h, mapped);
        h.on_resident(3, true); // a sample came back: the region is in use
        next_epoch(&h, mapped);
        assert!(!h.shields(60), "a new check's first sample");
        assert_eq!(h.keep_of(0), Keep::Proven);
    }

    #[test]
    fn kept_regions_stay_within_their_share_and_the_stalest_makes_room() {
        // Six regions' worth mapped: 5 kept at most.
        let mapped = 6 * R;
        let h = HugeRegions::new(16 * R, 4096).unwrap();
        h.advise(0, 16 * R, true);
        for region in 0..5 {
            fill(&h, region, true);
        }
        h.settle(mapped);
        assert_eq!(h.kept_regions(), 5);
        next_epoch(&h, mapped);
        for region in [0, 2, 3, 4] {
            h.on_resident((region * R) as PageNo, true);
        }
        fill(&h, 9, true);
        h.settle(mapped);
        assert_eq!(h.kept_regions(), 5);
        assert_eq!(
            h.keep_of(R as PageNo),
            Keep::No,
            "region 1 was touched longest ago"
        );
        assert_eq!(h.keep_of(9 * R as PageNo), Keep::Unproven);
    }

    #[test]
    fn a_smaller_budget_gives_up_kept_regions_at_once() {
        let h = HugeRegions::new(16 * R, 4096).unwrap();
        h.advise(0, 16 * R, true);
        for region in 0..5 {
            fill(&h, region, true);
        }
        h.settle(6 * R);
        assert_eq!(h.kept_regions(), 5);
        h.settle(3 * R); // room for 2
        assert_eq!(h.kept_regions(), 2);
        h.settle(R); // none
        assert_eq!(h.kept_regions(), 0);
    }

    #[test]
    fn advice_off_and_unmapping_forget_the_region() {
        let h = HugeRegions::new(4 * R, 4096).unwrap();
        h.advise(0, 2 * R, true);
        fill(&h, 0, true);
        fill(&h, 1, true);
        h.settle(48 * R);
        h.advise(0, R, false);
        h.forget(R as PageNo + 7);
        assert!(!h.is_advised(0));
        assert!(!h.is_advised(R as PageNo));
        assert_eq!(h.kept_regions(), 0);
    }

    #[test]
    fn advice_covers_whole_regions_only() {
        let h = HugeRegions::new(4 * R, 4096).unwrap();
        h.advise(1, 2 * R, true);
        assert!(!h.is_advised(0));
        assert!(h.is_advised(R as PageNo));
        assert!(!h.is_advised(2 * R as PageNo));
    }

    #[test]
    fn the_fields_of_a_word_do_not_overlap() {
        let w = Word(HINT | QUEUED)
            .with_keep(Keep::Proven)
            .with_fills(u64::MAX)
            .with_field(TOUCHED_SHIFT, u16::MAX)
            .with_field(CHECKED_SHIFT, 0x1234)
            .with_sampled(u16::MAX);
        assert!(w.hinted() && w.0 & QUEUED != 0);
        assert_eq!(w.keep(), Keep::Proven);
        assert_eq!(w.fills(), FILLS_MASK);
        assert_eq!((w.touched(), w.checked()), (u16::MAX, 0x1234));
        assert_eq!(w.sampled(), SAMPLED_MASK as u16);
        let cleared = w.with_sampled(0).with_fills(0).with_keep(Keep::No);
        assert_eq!(
            cleared.0,
            HINT | QUEUED | 0xffff << TOUCHED_SHIFT | 0x1234 << CHECKED_SHIFT
        );
    }

    #[test]
    fn every_page_of_an_arena_of_large_pages_has_a_region() {
        // 64 KiB pages: 32 to a region, so 1,024 pages make 32 regions.
        let h = HugeRegions::new(1024, 64 << 10).unwrap();
        h.advise(0, 1024, true);
        for page in 0..1024 {
            h.on_resident(page, true);
        }
        h.settle(1024);
        assert_eq!(h.kept_regions(), 26, "5/6 of 32 regions");
        let huge = HugeRegions::new(8, 4 << 20).unwrap();
        huge.advise(0, 8, true);
        huge.on_resident(7, true);
        huge.settle(8);
        assert_eq!(huge.kept_regions(), 1, "a page as large as a region is one");
    }

    #[test]
    fn epochs_compare_across_the_wrap() {
        assert!(before(u16::MAX, 0));
        assert!(before(3, 9));
        assert!(!before(9, 3));
    }
}
