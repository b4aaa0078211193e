//! S3-FIFO (Yang et al., SOSP'23): scan-resistant replacement with three
//! FIFO queues.
//!
//! - **S**, the small queue (about 10% of the queued pages): every page that
//!   enters DRAM for the first time lands here. A page that leaves S without
//!   having been referenced is evicted at once: a one-time scan passes
//!   through S and never disturbs the rest of DRAM.
//! - **M**, the main queue: pages referenced while in S, and pages that come
//!   back while their number is still in G. M is a CLOCK: a referenced page
//!   gets another round, an unreferenced one is evicted. M gives up pages only
//!   when S is below its 10% share.
//! - **G**, the ghost queue: the numbers (not the contents) of recently
//!   evicted pages, as many as there are queued pages. A page admitted while
//!   its number is in G is re-used soon after eviction, so it goes to M.
//!
//! **How references are detected.** Mapped pages do not trap, so the
//! `REFERENCED` bit of the page-state word is set only by events that do:
//! - a write fault on a clean page (dirty tracking write-protects them);
//! - a probation hit: a victim is first unmapped but kept in a DRAM frame
//!   (1/8 of the budget, [`PROBATION_SHARE`]). A touch there costs a minor
//!   fault and no I/O, and brings the page back referenced; since its number
//!   is also in G, it is promoted to M.
//!
//! The access that brings a page in does not count: the bit is cleared when
//! a page enters S (in S3-FIFO a new object has frequency zero), so a scan
//! that writes is no more harmful than one that reads.
//!
//! **What detection costs, per page.** Demotion copies the page into a
//! probation frame (one page-sized memcpy, e.g. ~1 µs for 4 KiB) and unmaps
//! it in a batched zap. A page touched during probation then costs one minor
//! userfaultfd fault (a few microseconds) instead of a device read; a page
//! that is not touched costs nothing more. The ghost costs about 32 bytes of
//! runtime memory per remembered page (a hash entry and a queue slot), at
//! most one per queued page. `admit` runs on the fault path and only pushes
//! onto a lock-free queue; all classification happens in `pick_victims`, on
//! the evictor, under a mutex only the evictor takes.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crossbeam_queue::SegQueue;

use super::{mark_queued, unmark_queued, Policy};
use crate::config::PolicyKind;
use crate::page_table::{Kind, PageNo, PageTable};

/// 32/256 = 1/8 of the budget (CLOCK keeps 1/4; S3-FIFO was not measured with more).
const PROBATION_SHARE: u32 = 32;

/// S's share of the queued pages, in percent (the paper's 10%).
const SMALL_PERCENT: usize = 10;

/// The ghost remembers at least this many pages, however small the cache.
const MIN_GHOST: usize = 64;

#[derive(Default)]
pub struct S3Fifo {
    /// Pages admitted since the evictor last looked (filled on the fault path).
    incoming: SegQueue<PageNo>,
    inner: Mutex<Queues>,
}

#[derive(Default)]
struct Queues {
    small: VecDeque<PageNo>,
    main: VecDeque<PageNo>,
    ghost: Ghost,
}

/// A bounded FIFO of page numbers with O(1) membership. Entries that were
/// removed (re-admitted) or re-inserted leave stale queue slots behind; the
/// sequence number tells a stale slot from the live one.
#[derive(Default)]
struct Ghost {
    order: VecDeque<(PageNo, u64)>,
    live: HashMap<PageNo, u64>,
    next_seq: u64,
}

impl Ghost {
    fn insert(&mut self, page: PageNo, capacity: usize) {
        self.next_seq += 1;
        self.live.insert(page, self.next_seq);
        self.order.push_back((page, self.next_seq));
        self.trim(capacity);
    }

    /// True (and forgets it) if `page` was remembered.
    fn take(&mut self, page: PageNo) -> bool {
        self.live.remove(&page).is_some()
    }

    fn trim(&mut self, capacity: usize) {
        while self.live.len() > capacity || self.order.len() > 2 * capacity.max(1) {
            let Some((page, seq)) = self.order.pop_front() else {
                break;
            };
            if self.live.get(&page) == Some(&seq) {
                self.live.remove(&page);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.live.len()
    }
}

impl Queues {
    fn queued(&self) -> usize {
        self.small.len() + self.main.len()
    }

    fn ghost_capacity(&self) -> usize {
        self.queued().max(MIN_GHOST)
    }

    /// Sorts newly admitted pages into S or M.
    fn classify(&mut self, table: &PageTable, page: PageNo) {
        if self.ghost.take(page) {
            // Re-used soon after eviction (or rescued from probation): keep
            // the reference bit, it was earned after admission.
            self.main.push_back(page);
        } else {
            table.update(page, |s| s.with_referenced(false));
            self.small.push_back(page);
        }
    }

    /// Evict from S while it holds at least its share, else from M.
    fn evict_from_small(&self) -> bool {
        let target = (self.queued() * SMALL_PERCENT / 100).max(1);
        !self.small.is_empty() && (self.small.len() >= target || self.main.is_empty())
    }

    /// Looks at one page of S or M; pushes it to `out` if it is a victim.
    fn step(&mut self, table: &PageTable, out: &mut Vec<PageNo>) -> bool {
        let from_small = self.evict_from_small();
        let page = if from_small {
            self.small.pop_front()
        } else {
            self.main.pop_front()
        };
        let Some(page) = page else { return false };
        let state = table.load(page);
        if state.kind() == Kind::Resident && state.is_referenced() {
            // S: referenced while small -> promote. M: second chance.
            table.update(page, |s| s.with_referenced(false));
            self.main.push_back(page);
            return true;
        }
        if unmark_queued(table, page).kind() == Kind::Resident {
            out.push(page);
            // Remember it whichever queue it left: a probation hit or an
            // early page-in then brings it back to M.
            let cap = self.ghost_capacity();
            self.ghost.insert(page, cap);
        }
        // Not resident: busy (its owner re-admits it) or freed.
        true
    }
}

impl S3Fifo {
    fn drain_incoming(&self, table: &PageTable, q: &mut Queues) {
        while let Some(page) = self.incoming.pop() {
            q.classify(table, page);
        }
    }

    #[cfg(test)]
    fn lens(&self, table: &PageTable) -> (usize, usize, usize) {
        let mut q = self.inner.lock().unwrap();
        self.drain_incoming(table, &mut q);
        (q.small.len(), q.main.len(), q.ghost.len())
    }
}

impl Policy for S3Fifo {
    fn kind(&self) -> PolicyKind {
        PolicyKind::S3Fifo
    }

    fn admit(&self, table: &PageTable, page: PageNo) {
        if mark_queued(table, page) {
            self.incoming.push(page);
        }
    }

    fn pick_victims(&self, table: &PageTable, want: usize, out: &mut Vec<PageNo>) {
        let mut q = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        self.drain_incoming(table, &mut q);
        // Each page is looked at most twice per queue it passes through
        // (S -> M -> M again), so this bound always suffices.
        let mut budget = 3 * q.queued() + want;
        let start = out.len();
        while out.len() - start < want && budget > 0 {
            budget -= 1;
            if !q.step(table, out) {
                break;
            }
        }
    }

    fn probation_share(&self) -> u32 {
        PROBATION_SHARE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_table::PageState;

    fn table_with_resident(n: u32) -> PageTable {
        let t = PageTable::new(n as u64).unwrap();
        for p in 0..n {
            t.update_unchecked(p, |s| s.with_kind(Kind::Resident));
        }
        t
    }

    fn reference(t: &PageTable, page: PageNo) {
        t.update(page, |s| s.with_referenced(true));
    }

    fn victims(p: &S3Fifo, t: &PageTable, want: usize) -> Vec<PageNo> {
        let mut out = Vec::new();
        p.pick_victims(t, want, &mut out);
        out
    }

    /// The evictor's part: a victim leaves the resident set.
    fn evict(t: &PageTable, pages: &[PageNo]) {
        for &page in pages {
            t.update_unchecked(page, |s| s.with_kind(Kind::Stored));
        }
    }

    /// A fault's part: the page comes back, referenced if it was a rescue.
    fn fault_in(p: &S3Fifo, t: &PageTable, page: PageNo, referenced: bool) {
        t.update_unchecked(page, |s| {
            s.with_kind(Kind::Resident).with_referenced(referenced)
        });
        p.admit(t, page);
    }

    #[test]
    fn unreferenced_pages_leave_small_in_fifo_order() {
        let t = table_with_resident(100);
        let p = S3Fifo::default();
        for page in 0..100 {
            p.admit(&t, page);
        }
        assert_eq!(p.lens(&t), (100, 0, 0));
        assert_eq!(victims(&p, &t, 5), vec![0, 1, 2, 3, 4]);
        for v in 0..5 {
            assert!(!t.load(v).is_queued(), "victim {v} still marked queued");
        }
        assert_eq!(p.lens(&t), (95, 0, 5));
    }

    #[test]
    fn admission_is_deduplicated_by_the_queued_bit() {
        let t = table_with_resident(4);
        let p = S3Fifo::default();
        for _ in 0..3 {
            p.admit(&t, 1);
        }
        assert_eq!(p.lens(&t), (1, 0, 0));
    }

    #[test]
    fn the_loading_access_does_not_count_as_a_reference() {
        let t = table_with_resident(10);
        let p = S3Fifo::default();
        for page in 0..10 {
            fault_in(&p, &t, page, true); // e.g. brought in by a write fault
        }
        assert_eq!(victims(&p, &t, 3), vec![0, 1, 2]);
        assert_eq!(p.lens(&t), (7, 0, 3));
    }

    #[test]
    fn a_page_referenced_in_small_is_promoted_to_main() {
        let t = table_with_resident(20);
        let p = S3Fifo::default();
        for page in 0..20 {
            p.admit(&t, page);
        }
        p.lens(&t); // classify first: the bit set on entry to S is cleared
        reference(&t, 0);
        reference(&t, 1);
        assert_eq!(victims(&p, &t, 3), vec![2, 3, 4]);
        assert_eq!(p.lens(&t), (15, 2, 3));
        // Promotion consumes the bit.
        assert!(!t.load(0).is_referenced() && t.load(0).is_queued());
    }

    #[test]
    fn a_page_back_while_in_the_ghost_goes_to_main() {
        let t = table_with_resident(20);
        let p = S3Fifo::default();
        for page in 0..20 {
            p.admit(&t, page);
        }
        let v = victims(&p, &t, 2);
        assert_eq!(v, vec![0, 1]);
        evict(&t, &v);
        // Page 0 is rescued from probation (referenced), page 1 paged in.
        fault_in(&p, &t, 0, true);
        fault_in(&p, &t, 1, false);
        assert_eq!(p.lens(&t), (18, 2, 0));
    }

    #[test]
    fn a_scan_cannot_flush_main() {
        // 40 hot pages reach M; then a scan of 400 pages passes through S.
        let t = table_with_resident(440);
        let p = S3Fifo::default();
        for page in 0..40 {
            p.admit(&t, page);
        }
        p.lens(&t);
        for page in 0..40 {
            reference(&t, page);
        }
        let mut evicted = Vec::new();
        for page in 40..440 {
            p.admit(&t, page);
            // A cache of 50 pages: evict one per admission once full.
            let (s, m, _) = p.lens(&t);
            if s + m > 50 {
                let v = victims(&p, &t, 1);
                evict(&t, &v);
                evicted.extend(v);
            }
        }
        assert_eq!(evicted.len(), 390);
        assert!(
            evicted.iter().all(|&v| v >= 40),
            "hot pages evicted by a scan: {:?}",
            evicted.iter().filter(|&&v| v < 40).collect::<Vec<_>>()
        );
        let (s, m, _) = p.lens(&t);
        assert_eq!((s, m), (10, 40));
    }

    #[test]
    fn main_is_a_clock() {
        let t = table_with_resident(30);
        let p = S3Fifo::default();
        for page in 0..20 {
            p.admit(&t, page);
        }
        p.lens(&t);
        for page in 0..20 {
            reference(&t, page);
        }
        // S promotes 0..19 one by one (clearing their bits) until it drops
        // below its 10% share; then M yields its oldest unreferenced page.
        assert_eq!(victims(&p, &t, 1), vec![0]);
        assert_eq!(p.lens(&t), (1, 18, 1));
        // A page of M referenced again gets a second chance.
        reference(&t, 1);
        assert_eq!(victims(&p, &t, 1), vec![2]);
        assert_eq!(p.lens(&t), (0, 18, 2));
        // New pages leave through S while it holds its share...
        for page in 20..25 {
            p.admit(&t, page);
        }
        assert_eq!(victims(&p, &t, 5), vec![20, 21, 22, 23, 24]);
        // ...and with S empty, M's clock goes on where it stopped.
        assert_eq!(victims(&p, &t, 1), vec![3]);
    }

    #[test]
    fn main_yields_when_small_is_below_its_share() {
        let t = table_with_resident(120);
        let p = S3Fifo::default();
        {
            // 100 pages that earned their place in M.
            let mut q = p.inner.lock().unwrap();
            for page in 0..100 {
                assert!(mark_queued(&t, page));
                q.main.push_back(page);
            }
        }
        // 5 new pages: S holds 5 of ~100 queued pages, under 10%, so M yields.
        for page in 100..105 {
            p.admit(&t, page);
        }
        let v = victims(&p, &t, 3);
        assert!(
            v.iter().all(|&v| v < 100),
            "S yielded below its share: {v:?}"
        );
        assert_eq!(p.lens(&t).0, 5);
    }

    #[test]
    fn pages_that_are_not_resident_are_dropped_not_picked() {
        let t = table_with_resident(10);
        let p = S3Fifo::default();
        for page in 0..10 {
            p.admit(&t, page);
        }
        p.lens(&t);
        t.update(0, |s| s.with_kind(Kind::Loading));
        t.update(1, |_| PageState::FREE.with_queued(true));
        assert_eq!(victims(&p, &t, 2), vec![2, 3]);
        assert!(!t.load(0).is_queued() && !t.load(1).is_queued());
        // The owner of page 0 re-admits it when done.
        fault_in(&p, &t, 0, false);
        assert_eq!(p.lens(&t), (7, 0, 2));
    }

    #[test]
    fn the_ghost_is_bounded_by_the_queued_pages() {
        let t = table_with_resident(1000);
        let p = S3Fifo::default();
        for page in 0..1000 {
            p.admit(&t, page);
        }
        let v = victims(&p, &t, 900);
        assert_eq!(v.len(), 900);
        let (s, m, g) = p.lens(&t);
        assert_eq!(s + m, 100);
        assert!(g <= 100.max(MIN_GHOST) + 1, "ghost holds {g}");
    }
}
