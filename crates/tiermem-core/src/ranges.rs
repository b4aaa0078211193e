//! Carves allocations out of the one big registered arena.
//!
//! Registering every allocation with userfaultfd separately runs into VMA
//! limits (UMap fails beyond ~950 regions), so the arena is registered once
//! and this first-fit allocator hands out page ranges inside it. It is not
//! on the fault path.

use std::collections::{BTreeMap, HashMap};

#[derive(Debug)]
pub struct RangeAllocator {
    /// start page -> length in pages, for free ranges (coalesced).
    free: BTreeMap<u64, u64>,
    /// start page -> length in pages, for live allocations.
    live: HashMap<u64, u64>,
}

impl RangeAllocator {
    pub fn new(pages: u64) -> RangeAllocator {
        let mut free = BTreeMap::new();
        if pages > 0 {
            free.insert(0, pages);
        }
        RangeAllocator {
            free,
            live: HashMap::new(),
        }
    }

    pub fn alloc(&mut self, pages: u64) -> Option<u64> {
        let (&start, &len) = self.free.iter().find(|(_, &len)| len >= pages)?;
        self.free.remove(&start);
        if len > pages {
            self.free.insert(start + pages, len - pages);
        }
        self.live.insert(start, pages);
        Some(start)
    }

    pub fn len_of(&self, start: u64) -> Option<u64> {
        self.live.get(&start).copied()
    }

    /// Ends a live allocation; the caller returns its pages with [`Self::give_back`]
    /// once they are clean, so no new allocation sees stale pages.
    pub fn take(&mut self, start: u64) -> Option<u64> {
        self.live.remove(&start)
    }

    pub fn give_back(&mut self, start: u64, pages: u64) {
        let mut start = start;
        let mut pages = pages;
        if let Some((&prev, &plen)) = self.free.range(..start).next_back() {
            if prev + plen == start {
                self.free.remove(&prev);
                start = prev;
                pages += plen;
            }
        }
        if let Some(&nlen) = self.free.get(&(start + pages)) {
            self.free.remove(&(start + pages));
            pages += nlen;
        }
        self.free.insert(start, pages);
    }

    /// Grows a live allocation in place when the pages after it are free.
    pub fn try_grow(&mut self, start: u64, new_pages: u64) -> bool {
        let Some(&old) = self.live.get(&start) else {
            return false;
        };
        let end = start + old;
        let extra = new_pages - old;
        match self.free.get(&end).copied() {
            Some(len) if len >= extra => {
                self.free.remove(&end);
                if len > extra {
                    self.free.insert(end + extra, len - extra);
                }
                self.live.insert(start, new_pages);
                true
            }
            _ => false,
        }
    }

    /// Shrinks a live allocation; the caller cleans the tail and gives it back.
    pub fn shrink(&mut self, start: u64, new_pages: u64) {
        if let Some(len) = self.live.get_mut(&start) {
            *len = new_pages;
        }
    }

    pub fn live_pages(&self) -> u64 {
        self.live.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_reuse_and_coalescing() {
        let mut r = RangeAllocator::new(100);
        let a = r.alloc(10).unwrap();
        let b = r.alloc(10).unwrap();
        let c = r.alloc(10).unwrap();
        assert_eq!((a, b, c), (0, 10, 20));
        let len = r.take(b).unwrap();
        r.give_back(b, len);
        assert_eq!(r.alloc(5), Some(10));
        assert!(r.try_grow(20, 80));
        assert!(!r.try_grow(20, 81));
        assert_eq!(r.alloc(100), None);
        for s in [0, 10, 20] {
            let len = r.take(s).unwrap();
            r.give_back(s, len);
        }
        assert_eq!(r.alloc(100), Some(0), "everything coalesced back");
    }
}
