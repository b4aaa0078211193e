//! Slot allocation and the space commitment behind `tm_alloc`'s ENOMEM.
//!
//! Every allocated page is promised a slot at allocation time (committed),
//! so eviction can never run out of space and lose a page. Slots themselves
//! are handed out lazily, in ascending runs, so that a batch of evictions
//! lands in adjacent slots and becomes a few large writes.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::held::HeldSlots;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::sys::mem::Mapping;

/// Slot numbers below `base` belong to the ancestors (a forked child reads
/// them but never reuses them); this allocator hands out
/// `base..base+capacity`.
///
/// While forked children live, a freed slot that one of them still holds
/// (see [`HeldSlots`]) is parked instead of reused.
pub struct SlotAllocator {
    base: u64,
    bits: Words,
    /// One past the highest slot ever handed out, relative: the bitmaps
    /// are sized by the store's capacity, but only this much is ever
    /// visited (a growing file's capacity is the filesystem's free space).
    high_water: AtomicU64,
    /// Slots freed here that a live child held at the time: still in use
    /// in `bits`, reused once no child holds them.
    parked: Words,
    parked_count: AtomicU64,
    /// The union of the live children's bitmaps, as of the last review;
    /// read lock-free by `free` on the fault path.
    held_by_children: Words,
    /// Between a fork's snapshot and the fork itself: the new child's
    /// bitmap, which slots taken meanwhile join (see `alloc`).
    forking: AtomicBool,
    pending: Mutex<Option<Arc<HeldSlots>>>,
    /// Children whose bitmap could not be made: they hold every slot.
    children_holding_all: AtomicUsize,
    child_count: AtomicUsize,
    children: Mutex<Children>,
    /// In a forked child: the bitmap its parent shares with it.
    parent: Option<ParentHold>,
    capacity: u64,
    committed: AtomicU64,
    in_use: AtomicU64,
    /// Next-fit cursor; only the evictor allocates, so this lock is uncontended.
    cursor: Mutex<u64>,
}

/// What a forked child holds of its parent's slots: the shared bitmap, and
/// the parent's first slot number (bit 0 of the bitmap).
pub struct ParentHold {
    pub held: Arc<HeldSlots>,
    pub first: u64,
}

#[derive(Default)]
struct Children {
    list: Vec<Child>,
    last_review: Option<Instant>,
}

struct Child {
    /// `None` when the bitmap could not be made: then it holds everything.
    held: Option<Arc<HeldSlots>>,
    /// Reads end-of-file once the child and its descendants sharing its
    /// memory have exited or exec'd; `None` (no pipe) lasts as long as we do.
    lease: Option<OwnedFd>,
}

/// How often parked slots are looked at again while children live: the
/// children release slots on their own, with no message to the parent.
const REVIEW_EVERY: Duration = Duration::from_millis(100);

/// A zeroed array of atomic words that takes memory only where it is
/// written (a private `MAP_NORESERVE` mapping).
struct Words {
    map: Mapping,
    len: usize,
}

impl Words {
    fn new(len: usize, what: &'static str) -> Result<Words> {
        let map = Mapping::reserve(len.max(1) * 8, what)?;
        Ok(Words { map, len })
    }

    #[inline]
    fn get(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len, "slot word {i} out of range");
        // SAFETY: the mapping holds `len` zero-initialised, page-aligned
        // words, `i` is in range, and every access is atomic.
        unsafe { &*(self.map.as_ptr() as *const AtomicU64).add(i) }
    }
}

impl SlotAllocator {
    pub fn new(capacity: u64) -> Result<SlotAllocator> {
        Self::with_base(0, capacity, None)
    }

    /// An allocator for the slots `base..base+capacity` (a forked child's),
    /// releasing what it stops using of its parent's slots into `parent`.
    pub fn with_base(
        base: u64,
        capacity: u64,
        parent: Option<ParentHold>,
    ) -> Result<SlotAllocator> {
        let words = capacity.div_ceil(64) as usize;
        Ok(SlotAllocator {
            base,
            bits: Words::new(words, "reserving the slot bitmap")?,
            high_water: AtomicU64::new(0),
            parked: Words::new(words, "reserving the parked-slot bitmap")?,
            parked_count: AtomicU64::new(0),
            held_by_children: Words::new(words, "reserving the held-slot bitmap")?,
            forking: AtomicBool::new(false),
            pending: Mutex::new(None),
            children_holding_all: AtomicUsize::new(0),
            child_count: AtomicUsize::new(0),
            children: Mutex::new(Children::default()),
            parent,
            capacity,
            committed: AtomicU64::new(0),
            in_use: AtomicU64::new(0),
            cursor: Mutex::new(0),
        })
    }

    pub fn base(&self) -> u64 {
        self.base
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
            let word = self.bits.get((slot / 64) as usize);
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
        if let Some(&last) = out.last() {
            self.high_water.fetch_max(last + 1, Ordering::AcqRel);
        }
        if self.forking.load(Ordering::SeqCst) {
            self.hold_for_pending_child(out);
        }
        for s in out.iter_mut() {
            *s += self.base;
        }
        self.in_use.fetch_add(out.len() as u64, Ordering::Relaxed);
    }

    pub fn free(&self, slot: u64) {
        let Some(own) = slot.checked_sub(self.base) else {
            self.release_parents(slot);
            return;
        };
        if self.held_by_a_child(own) {
            let bit = 1u64 << (own % 64);
            // Counted first: the reviewer counts down only bits it saw.
            self.parked_count.fetch_add(1, Ordering::Relaxed);
            self.parked
                .get((own / 64) as usize)
                .fetch_or(bit, Ordering::AcqRel);
            return;
        }
        self.release(slot);
    }

    fn held_by_a_child(&self, own: u64) -> bool {
        if self.child_count.load(Ordering::SeqCst) == 0 {
            return false;
        }
        if self.children_holding_all.load(Ordering::SeqCst) > 0 {
            return true;
        }
        let word = self
            .held_by_children
            .get((own / 64) as usize)
            .load(Ordering::Acquire);
        word & (1u64 << (own % 64)) != 0
    }

    /// One of the parent's slots is no longer ours to read. A child that
    /// has forked children of its own keeps holding it: they may read it
    /// (and it stays held until this child ends: bounded by the parent's
    /// store at our fork).
    fn release_parents(&self, slot: u64) {
        let Some(parent) = &self.parent else { return };
        if self.has_children() {
            return;
        }
        if let Some(rel) = slot.checked_sub(parent.first) {
            parent.held.release(rel);
        }
    }

    fn release(&self, slot: u64) {
        let slot = slot - self.base;
        let word = self.bits.get((slot / 64) as usize);
        let bit = 1u64 << (slot % 64);
        let prev = word.fetch_and(!bit, Ordering::AcqRel);
        debug_assert!(prev & bit != 0, "double free of slot {slot}");
        if prev & bit != 0 {
            self.in_use.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Before a fork: a bitmap, shared with the child, of the slots our
    /// pages refer to now (in use and not parked). Until the child's lease
    /// ends, a slot it holds is parked when freed here. Call with the
    /// evictor and fault handlers paused; slots taken before the fork
    /// happens (by faults the fork window serves, or under signal
    /// delivery) join the bitmap as they are taken, until `fork_done`.
    pub fn hold_for_child(&self) -> Option<Arc<HeldSlots>> {
        let referenced = |i: usize| {
            self.bits.get(i).load(Ordering::Acquire) & !self.parked.get(i).load(Ordering::Acquire)
        };
        let used = self.used_words();
        let held = match HeldSlots::snapshot(self.capacity, used, referenced) {
            Ok(held) => Some(Arc::new(held)),
            Err(e) => {
                eprintln!(
                    "tiermem: {e}; every slot freed from now on stays parked until this child ends"
                );
                self.children_holding_all.fetch_add(1, Ordering::SeqCst);
                None
            }
        };
        if let Some(h) = &held {
            for i in 0..used {
                let bits = h.word(i).load(Ordering::Relaxed);
                if bits != 0 {
                    self.held_by_children
                        .get(i)
                        .fetch_or(bits, Ordering::AcqRel);
                }
            }
            *self.pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(h));
            self.forking.store(true, Ordering::SeqCst);
        }
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        children.list.push(Child {
            held: held.clone(),
            lease: None,
        });
        self.child_count.fetch_add(1, Ordering::SeqCst);
        held
    }

    /// Slots taken while a fork is pending (relative to our base): the
    /// child will name them too.
    fn hold_for_pending_child(&self, taken: &[u64]) {
        let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let Some(held) = pending.as_ref() else { return };
        for &own in taken {
            held.hold(own);
            self.held_by_children
                .get((own / 64) as usize)
                .fetch_or(1u64 << (own % 64), Ordering::AcqRel);
        }
    }

    /// After the fork (made or failed), in the parent: slots taken from
    /// now on are ours alone.
    pub fn fork_done(&self) {
        self.forking.store(false, Ordering::SeqCst);
        *self.pending.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Words of the bitmaps in use: up to the highest slot ever taken.
    fn used_words(&self) -> usize {
        self.high_water.load(Ordering::Acquire).div_ceil(64) as usize
    }

    /// After the fork, in the parent: the read end of the newest child's
    /// lease pipe (non-blocking).
    pub fn lease_child(&self, read_end: OwnedFd) {
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(child) = children.list.iter_mut().rev().find(|c| c.lease.is_none()) {
            child.lease = Some(read_end);
        }
    }

    /// Ends the holds of children that have exited or exec'd, and reuses
    /// parked slots that no live child holds any more. Called by the
    /// evictor between batches.
    pub fn review_children(&self) {
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        if children.list.is_empty() && self.parked_count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let before = children.list.len();
        children.list.retain(|c| !lease_ended(c.lease.as_ref()));
        let ended = children.list.len() < before;
        let due = children
            .last_review
            .is_none_or(|t| t.elapsed() >= REVIEW_EVERY);
        if !ended && !due {
            return;
        }
        children.last_review = Some(Instant::now());
        let holding_all = children.list.iter().filter(|c| c.held.is_none()).count();
        self.children_holding_all
            .store(holding_all, Ordering::SeqCst);
        self.child_count
            .store(children.list.len(), Ordering::SeqCst);
        for i in 0..self.used_words() {
            let word = self.held_by_children.get(i);
            let held = children
                .list
                .iter()
                .filter_map(|c| c.held.as_ref())
                .fold(0, |acc, h| acc | h.word(i).load(Ordering::Acquire));
            // Bits only ever go from held to free here: a child never
            // takes a slot back, and a new child is added with the
            // threads that free slots paused.
            word.store(held, Ordering::Release);
        }
        if holding_all == 0 {
            self.reuse_parked();
        }
    }

    /// Releases the parked slots no child holds now.
    fn reuse_parked(&self) {
        if self.parked_count.load(Ordering::Relaxed) == 0 {
            return;
        }
        for i in 0..self.used_words() {
            let parked = self.parked.get(i);
            let free = parked.load(Ordering::Acquire)
                & !self.held_by_children.get(i).load(Ordering::Acquire);
            if free == 0 {
                continue;
            }
            // Only the reviewer clears parked bits; `free` only sets them.
            parked.fetch_and(!free, Ordering::AcqRel);
            self.parked_count
                .fetch_sub(free.count_ones() as u64, Ordering::Relaxed);
            for b in 0..64 {
                if free & (1u64 << b) != 0 {
                    self.release(self.base + i as u64 * 64 + b);
                }
            }
        }
    }

    /// Whether forked children may still read our slots.
    pub fn has_children(&self) -> bool {
        self.child_count.load(Ordering::SeqCst) > 0
    }

    /// Slots freed here that children still hold.
    pub fn parked(&self) -> u64 {
        self.parked_count.load(Ordering::Relaxed)
    }

    pub fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    pub fn metadata_bytes(&self) -> u64 {
        let used = self.used_words();
        let children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        let held: u64 = children
            .list
            .iter()
            .filter_map(|c| c.held.as_ref())
            .map(|h| h.bytes(used))
            .sum();
        let bitmaps = if children.list.is_empty() { 1 } else { 3 };
        used as u64 * 8 * bitmaps + held
    }
}

/// Whether a child's lease pipe reads end-of-file: the child and every
/// descendant sharing its memory have exited or exec'd.
fn lease_ended(lease: Option<&OwnedFd>) -> bool {
    let Some(fd) = lease else { return false };
    let mut byte = 0u8;
    // SAFETY: a non-blocking read of one byte into a valid buffer.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) };
    n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_ascending_runs_and_reuses_freed_slots() {
        let a = SlotAllocator::new(256).unwrap();
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

    /// A pipe whose write end stands for a live child.
    fn lease() -> (OwnedFd, OwnedFd) {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) };
        assert_eq!(rc, 0);
        // SAFETY: both descriptors are fresh and owned here.
        unsafe {
            use std::os::fd::FromRawFd;
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        }
    }

    /// A fork as the handlers make it: the hold, the fork, the lease.
    /// Returns the child's bitmap and the lease's write end (the child).
    fn fork_child(a: &SlotAllocator) -> (Arc<HeldSlots>, OwnedFd) {
        let held = a.hold_for_child().expect("a bitmap");
        a.fork_done();
        let (read, write) = lease();
        a.lease_child(read);
        (held, write)
    }

    /// Reviews, past the review interval.
    fn review(a: &SlotAllocator) {
        a.children.lock().unwrap().last_review = None;
        a.review_children();
    }

    #[test]
    fn a_child_holds_only_the_slots_in_use_at_its_fork() {
        let a = SlotAllocator::with_base(1000, 64, None).unwrap();
        let mut out = Vec::new();
        a.alloc(4, 64, &mut out);
        assert_eq!(out, vec![1000, 1001, 1002, 1003]);
        a.free(7); // an ancestor's slot: ignored
        let held = a.hold_for_child().expect("a bitmap");
        a.alloc(1, 64, &mut out);
        assert_eq!(out, vec![1004]);
        a.fork_done();
        let (read, write) = lease();
        a.lease_child(read);
        a.free(1004);
        assert_eq!(
            a.parked(),
            1,
            "a slot taken before the fork happened is held"
        );
        held.release(4);
        review(&a);
        assert_eq!(a.parked(), 0);
        a.free(1001);
        assert_eq!(a.parked(), 1, "a slot the child holds is parked");
        a.alloc(60, 64, &mut out);
        assert!(!out.contains(&1001), "a parked slot must not be reused");
        a.free(1010);
        assert_eq!(
            a.parked(),
            1,
            "a slot taken after the fork is reused at once"
        );
        a.alloc(1, 64, &mut out);
        assert_eq!(out, vec![1010]);
        // The child rewrites its copy of the page: it lets the slot go.
        held.release(1);
        review(&a);
        assert_eq!(a.parked(), 0);
        a.free(1002);
        assert_eq!(a.parked(), 1, "still held");
        drop(write); // the child exits
        a.review_children();
        assert!(!a.has_children());
        assert_eq!(a.parked(), 0);
        assert_eq!(a.in_use(), 64 - 2);
    }

    #[test]
    fn a_slot_is_reused_only_when_no_child_holds_it() {
        let a = SlotAllocator::new(128).unwrap();
        let mut out = Vec::new();
        a.alloc(2, 128, &mut out);
        let (first, _w1) = fork_child(&a);
        let (second, _w2) = fork_child(&a);
        a.free(0);
        first.release(0);
        review(&a);
        assert_eq!(a.parked(), 1, "the second child still holds slot 0");
        second.release(0);
        review(&a);
        assert_eq!(a.parked(), 0);
        assert_eq!(a.in_use(), 1);
    }

    #[test]
    fn a_child_releases_its_parents_slots_unless_it_has_children() {
        let parent = SlotAllocator::new(64).unwrap();
        let mut out = Vec::new();
        parent.alloc(3, 64, &mut out);
        let held = parent.hold_for_child().expect("a bitmap");
        let child = SlotAllocator::with_base(
            64,
            64,
            Some(ParentHold {
                held: Arc::clone(&held),
                first: 0,
            }),
        )
        .unwrap();
        child.free(1);
        assert_eq!(held.word(0).load(Ordering::Relaxed), 0b101);
        let _grandchild = child.hold_for_child();
        child.free(2);
        assert_eq!(
            held.word(0).load(Ordering::Relaxed),
            0b101,
            "a grandchild may still read slot 2"
        );
    }

    #[test]
    fn never_hands_out_slots_beyond_the_backed_size() {
        let a = SlotAllocator::new(1024).unwrap();
        let mut out = Vec::new();
        a.alloc(100, 16, &mut out);
        assert_eq!(out.len(), 16);
        assert!(out.iter().all(|s| *s < 16));
    }
}
