//! Carves allocations out of the one big registered arena.
//!
//! Registering every allocation with userfaultfd separately runs into VMA
//! limits (UMap fails beyond ~950 regions), so the arena is registered once
//! and this first-fit allocator hands out page ranges inside it. It is not
//! on the fault path.
//!
//! An allocator manages one zone of the arena, `[base, base+pages)`. Besides
//! whole allocations it supports what `munmap`/`mremap`/`MAP_FIXED` need in
//! transparent mode: releasing any sub-range of live allocations (which
//! splits them) and claiming a given free range.

use std::collections::BTreeMap;

#[derive(Debug)]
pub struct RangeAllocator {
    /// start page -> length in pages, for free ranges (coalesced).
    free: BTreeMap<u64, u64>,
    /// start page -> length in pages, for live allocations.
    live: BTreeMap<u64, u64>,
}

impl RangeAllocator {
    pub fn new(pages: u64) -> RangeAllocator {
        Self::zone(0, pages)
    }

    /// An allocator for the pages `[base, base+pages)`.
    pub fn zone(base: u64, pages: u64) -> RangeAllocator {
        let mut free = BTreeMap::new();
        if pages > 0 {
            free.insert(base, pages);
        }
        RangeAllocator {
            free,
            live: BTreeMap::new(),
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

    /// The live allocation holding `page`, as (start, length).
    pub fn containing(&self, page: u64) -> Option<(u64, u64)> {
        let (&start, &len) = self.live.range(..=page).next_back()?;
        (page < start + len).then_some((start, len))
    }

    /// Ends a live allocation; the caller returns its pages with [`Self::give_back`]
    /// once they are clean, so no new allocation sees stale pages.
    pub fn take(&mut self, start: u64) -> Option<u64> {
        self.live.remove(&start)
    }

    /// Ends whatever live allocations cover `[start, start+pages)`, splitting
    /// those that stick out. Returns the live sub-ranges it removed; the
    /// caller cleans them and hands them to [`Self::give_back`].
    pub fn take_range(&mut self, start: u64, pages: u64) -> Vec<(u64, u64)> {
        let end = start + pages;
        let mut taken = Vec::new();
        let first = self.containing(start).map_or(start, |(s, _)| s);
        let overlapping: Vec<(u64, u64)> =
            self.live.range(first..end).map(|(&s, &l)| (s, l)).collect();
        for (s, l) in overlapping {
            let e = s + l;
            let (cut_s, cut_e) = (s.max(start), e.min(end));
            if cut_s >= cut_e {
                continue;
            }
            self.live.remove(&s);
            if s < cut_s {
                self.live.insert(s, cut_s - s);
            }
            if cut_e < e {
                self.live.insert(cut_e, e - cut_e);
            }
            taken.push((cut_s, cut_e - cut_s));
        }
        taken
    }

    /// Makes the free pages of `[start, start+pages)` live, as one or more
    /// allocations (live pages inside stay as they are). Returns the newly
    /// claimed sub-ranges.
    pub fn claim(&mut self, start: u64, pages: u64) -> Vec<(u64, u64)> {
        let end = start + pages;
        let mut claimed = Vec::new();
        let first = match self.free.range(..=start).next_back() {
            Some((&s, &l)) if s + l > start => s,
            _ => start,
        };
        let overlapping: Vec<(u64, u64)> =
            self.free.range(first..end).map(|(&s, &l)| (s, l)).collect();
        for (s, l) in overlapping {
            let e = s + l;
            let (cut_s, cut_e) = (s.max(start), e.min(end));
            if cut_s >= cut_e {
                continue;
            }
            self.free.remove(&s);
            if s < cut_s {
                self.free.insert(s, cut_s - s);
            }
            if cut_e < e {
                self.free.insert(cut_e, e - cut_e);
            }
            self.live.insert(cut_s, cut_e - cut_s);
            claimed.push((cut_s, cut_e - cut_s));
        }
        claimed
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

    #[test]
    fn taking_a_sub_range_splits_allocations() {
        let mut r = RangeAllocator::zone(1000, 100);
        let a = r.alloc(10).unwrap();
        let b = r.alloc(10).unwrap();
        assert_eq!((a, b), (1000, 1010));
        // Trim the head of `a`, the middle of both, and nothing outside.
        assert_eq!(r.take_range(995, 7), vec![(1000, 2)]);
        assert_eq!(r.take_range(1008, 4), vec![(1008, 2), (1010, 2)]);
        assert_eq!(r.containing(1002), Some((1002, 6)));
        assert_eq!(r.containing(1013), Some((1012, 8)));
        assert_eq!(r.containing(1009), None);
        assert_eq!(r.live_pages(), 14);
        for (s, l) in [(1000, 2), (1008, 2), (1010, 2)] {
            r.give_back(s, l);
        }
        assert_eq!(r.take_range(1000, 20), vec![(1002, 6), (1012, 8)]);
        r.give_back(1002, 6);
        r.give_back(1012, 8);
        assert_eq!(r.alloc(100), Some(1000), "everything coalesced back");
    }

    #[test]
    fn claiming_takes_only_free_pages() {
        let mut r = RangeAllocator::zone(0, 100);
        let a = r.alloc(10).unwrap();
        assert_eq!(r.claim(5, 10), vec![(10, 5)]);
        assert_eq!(r.containing(12), Some((10, 5)));
        assert_eq!(r.alloc(1), Some(15), "claimed pages are not handed out");
        assert_eq!(r.claim(50, 50), vec![(50, 50)]);
        assert_eq!(r.alloc(40), None);
        let _ = a;
    }
}
