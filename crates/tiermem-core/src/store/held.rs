//! The slots a forked child may still read: one bitmap per child, in memory
//! the parent and that child share.
//!
//! At fork the child's memory names the parent's slots for every page that
//! was in the store, so the parent must not reuse those slots while the
//! child can read them. The parent fills the bitmap with the slots its pages
//! referred to at the fork; the child clears a bit when it stops referring
//! to that slot (it rewrote or freed the page). A slot the parent frees is
//! parked only while some live child's bitmap holds it. Together these are
//! per-slot reference counts (how many children's bitmaps hold a slot), and
//! what a child pins is bounded by the parent's store at the time of the
//! fork: a long-lived child never makes the parent's store grow without
//! bound.
//!
//! A bitmap needs no cleanup from the child: when its lease ends (the child
//! exited, was killed, or exec'd), the parent drops the bitmap whole.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Result;
use crate::sys::mem::Mapping;

pub struct HeldSlots {
    words: Mapping,
    slots: u64,
}

impl HeldSlots {
    /// A bitmap shared with the child about to be forked, holding the
    /// slots (relative to the allocator's base) whose bits `referenced`
    /// gives, word by word, for the first `used_words` words; the rest
    /// start empty. Only words with a bit set are touched: the mapping
    /// starts zeroed, and takes memory only where it is written.
    pub fn snapshot(
        slots: u64,
        used_words: usize,
        referenced: impl Fn(usize) -> u64,
    ) -> Result<HeldSlots> {
        let words = slots.div_ceil(64) as usize;
        let map = Mapping::shared(words.max(1) * 8, "mapping the slots a forked child holds")?;
        let held = HeldSlots { words: map, slots };
        for i in 0..used_words.min(words) {
            let bits = referenced(i);
            if bits != 0 {
                held.word(i).store(bits, Ordering::Relaxed);
            }
        }
        Ok(held)
    }

    /// In the parent, during the fork: `slot` (relative) was taken after
    /// the snapshot, by a fault served while the fork waits, and the child
    /// will name it too.
    pub fn hold(&self, slot: u64) {
        if slot < self.slots {
            let bit = 1u64 << (slot % 64);
            self.word((slot / 64) as usize)
                .fetch_or(bit, Ordering::Release);
        }
    }

    pub fn word_count(&self) -> usize {
        self.slots.div_ceil(64) as usize
    }

    #[inline]
    pub fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.word_count(), "held-slot word {i} out of range");
        // SAFETY: the mapping holds `word_count()` 8-byte aligned words
        // (page-aligned start), `i` is in range, and every access to them is
        // atomic, from either process.
        unsafe { &*(self.words.as_ptr() as *const AtomicU64).add(i) }
    }

    /// In the child: it no longer refers to `slot` (relative), so the
    /// parent may reuse it once no other child holds it.
    pub fn release(&self, slot: u64) {
        if slot < self.slots {
            let bit = 1u64 << (slot % 64);
            self.word((slot / 64) as usize)
                .fetch_and(!bit, Ordering::Release);
        }
    }

    /// Bytes it may take: the words up to `used_words`.
    pub fn bytes(&self, used_words: usize) -> u64 {
        used_words.min(self.word_count()) as u64 * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_holds_what_it_was_given_until_released() {
        let held = HeldSlots::snapshot(130, 3, |i| [0b1010, 0, 1 << 1][i]).unwrap();
        assert_eq!(held.word_count(), 3);
        assert_eq!(held.word(0).load(Ordering::Relaxed), 0b1010);
        held.release(3);
        held.release(129);
        held.release(5000); // beyond the bitmap: ignored
        assert_eq!(held.word(0).load(Ordering::Relaxed), 0b0010);
        assert_eq!(held.word(2).load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_forked_child_releases_into_the_parents_bitmap() {
        let held = HeldSlots::snapshot(64, 1, |_| u64::MAX).unwrap();
        // SAFETY: the child only touches the shared bitmap, then _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            held.release(7);
            // SAFETY: leaves the forked test process at once.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(held.word(0).load(Ordering::Relaxed), !(1u64 << 7));
    }
}
