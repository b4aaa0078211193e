//! Slot allocation and the space commitment behind `tm_alloc`'s ENOMEM.
//!
//! Every allocated page is promised a slot at allocation time (committed),
//! so eviction can never run out of space and lose a page. Slots themselves
//! are handed out lazily, in ascending runs, so that a batch of evictions
//! lands in adjacent slots and becomes a few large writes.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crossbeam_queue::SegQueue;

use crate::error::{Error, Result};
use crate::store::Store;

/// Slot numbers below `base` belong to the parent process (a forked child
/// reads them but never frees or reuses them); this allocator hands out
/// `base..base+capacity`.
///
/// While forked children live (`deferring > 0`), freed slots are parked
/// instead of reused: a child may still read the old contents.
pub struct SlotAllocator {
    base: u64,
    deferring: AtomicUsize,
    deferred: SegQueue<u64>,
    bits: Vec<AtomicU64>,
    capacity: u64,
    committed: AtomicU64,
    in_use: AtomicU64,
    /// Next-fit cursor; only the evictor allocates, so this lock is uncontended.
    cursor: Mutex<u64>,
}

impl SlotAllocator {
    pub fn new(capacity: u64) -> SlotAllocator {
        Self::with_base(0, capacity)
    }

    /// An allocator for the slots `base..base+capacity` (a forked child's).
    pub fn with_base(base: u64, capacity: u64) -> SlotAllocator {
        let words = capacity.div_ceil(64) as usize;
        SlotAllocator {
            base,
            deferring: AtomicUsize::new(0),
            deferred: SegQueue::new(),
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            capacity,
            committed: AtomicU64::new(0),
            in_use: AtomicU64::new(0),
            cursor: Mutex::new(0),
        }
    }

    /// Promises slots for `pages` more pages, growing the store's backed
    /// space first. Fails with `OutOfBackingSpace` rather than overcommit.
    pub fn commit(&self, pages: u64, store: &dyn Store) -> Result<()> {
        let mut cur = self.committed.load(Ordering::Acquire);
        loop {
            let want = cur.checked_add(pages).filter(|w| *w <= self.capacity);
            let Some(want) = want else {
                return Err(self.out_of_space(pages, cur, store));
            };
            match self
                .committed
                .compare_exchange(cur, want, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        let needed = self.committed.load(Ordering::Acquire);
        if let Err(e) = store.ensure_backed(needed) {
            self.uncommit(pages);
            return Err(match e {
                Error::Backing { ref source, .. }
                    if source.raw_os_error() == Some(libc::ENOSPC) =>
                {
                    self.out_of_space(pages, needed - pages, store)
                }
                other => other,
            });
        }
        Ok(())
    }

    fn out_of_space(&self, pages: u64, committed: u64, store: &dyn Store) -> Error {
        let page = store.page_size() as u64;
        Error::OutOfBackingSpace {
            requested: pages.saturating_mul(page),
            available: self.capacity.saturating_sub(committed) * page,
        }
    }

    /// Gives commitments back. Saturates at zero: a forked child's fresh
    /// allocator gives back pages that were committed in its parent.
    pub fn uncommit(&self, pages: u64) {
        let _ = self
            .committed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some(c.saturating_sub(pages))
            });
    }

    /// Takes up to `n` free slots in ascending order, preferring the run
    /// after the last allocation. Committed pages guarantee enough exist
    /// below the backed size.
    pub fn alloc(&self, n: usize, backed_slots: u64, out: &mut Vec<u64>) {
        out.clear();
        let limit = backed_slots.min(self.capacity);
        if limit == 0 {
            return;
        }
        let mut cursor = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        let mut slot = *cursor % limit;
        let mut scanned = 0u64;
        while out.len() < n && scanned < limit {
            if slot >= limit {
                slot = 0;
            }
            let word = &self.bits[(slot / 64) as usize];
            let bit = 1u64 << (slot % 64);
            if word.load(Ordering::Relaxed) & bit == 0
                && word.fetch_or(bit, Ordering::AcqRel) & bit == 0
            {
                out.push(slot);
            }
            slot += 1;
            scanned += 1;
        }
        *cursor = slot;
        // After a wrap the run restarts at 0; sorted slots still merge.
        out.sort_unstable();
        for s in out.iter_mut() {
            *s += self.base;
        }
        self.in_use.fetch_add(out.len() as u64, Ordering::Relaxed);
    }

    pub fn free(&self, slot: u64) {
        if slot < self.base {
            return; // the parent's: read-only for us
        }
        if self.deferring.load(Ordering::SeqCst) > 0 {
            self.deferred.push(slot);
            return;
        }
        self.release(slot);
    }

    fn release(&self, slot: u64) {
        let slot = slot - self.base;
        let word = &self.bits[(slot / 64) as usize];
        let bit = 1u64 << (slot % 64);
        let prev = word.fetch_and(!bit, Ordering::AcqRel);
        debug_assert!(prev & bit != 0, "double free of slot {slot}");
        if prev & bit != 0 {
            self.in_use.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A child was forked: from now on freed slots are parked.
    pub fn start_deferring(&self) {
        self.deferring.fetch_add(1, Ordering::SeqCst);
    }

    /// A child is gone (exited or exec'd). When none is left, the parked
    /// slots become free.
    pub fn stop_deferring(&self) {
        if self.deferring.fetch_sub(1, Ordering::SeqCst) == 1 {
            while let Some(slot) = self.deferred.pop() {
                self.release(slot);
            }
        }
    }

    pub fn is_deferring(&self) -> bool {
        self.deferring.load(Ordering::SeqCst) > 0
    }

    pub fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    pub fn metadata_bytes(&self) -> u64 {
        self.bits.len() as u64 * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_ascending_runs_and_reuses_freed_slots() {
        let a = SlotAllocator::new(256);
        let mut out = Vec::new();
        a.alloc(10, 256, &mut out);
        assert_eq!(out, (0..10).collect::<Vec<_>>());
        a.free(3);
        a.free(4);
        a.alloc(5, 256, &mut out);
        assert_eq!(out, vec![10, 11, 12, 13, 14]);
        // Exhaust the rest: the scan wraps and finds the freed 3 and 4 too.
        a.alloc(1000, 256, &mut out);
        assert_eq!(out.len(), 256 - 13);
        assert_eq!(&out[..2], &[3, 4], "wrapped allocations come back sorted");
        assert_eq!(a.in_use(), 256);
        a.alloc(5, 256, &mut out);
        assert!(out.is_empty());
        a.free(200);
        a.free(1);
        a.alloc(5, 256, &mut out);
        assert_eq!(out, vec![1, 200], "wrapped allocations come back sorted");
        assert_eq!(a.in_use(), 256);
    }

    #[test]
    fn frees_wait_while_children_live_and_parent_slots_are_never_freed() {
        let a = SlotAllocator::with_base(1000, 64);
        let mut out = Vec::new();
        a.alloc(4, 64, &mut out);
        assert_eq!(out, vec![1000, 1001, 1002, 1003]);
        a.free(7); // a parent's slot: ignored
        a.start_deferring();
        a.free(1001);
        a.alloc(64, 64, &mut out);
        assert!(!out.contains(&1001), "a parked slot must not be reused");
        assert_eq!(a.in_use(), 64);
        a.stop_deferring();
        assert_eq!(a.in_use(), 63);
        a.alloc(1, 64, &mut out);
        assert_eq!(out, vec![1001]);
    }

    #[test]
    fn never_hands_out_slots_beyond_the_backed_size() {
        let a = SlotAllocator::new(1024);
        let mut out = Vec::new();
        a.alloc(100, 16, &mut out);
        assert_eq!(out.len(), 16);
        assert!(out.iter().all(|s| *s < 16));
    }
}
