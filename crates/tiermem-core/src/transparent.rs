//! What transparent mode (`tiermem run`) needs beyond explicit allocation:
//! lazily committed regions, and the `munmap`/`madvise`/`mremap`/`MAP_FIXED`
//! semantics of anonymous memory on top of tiered pages.
//!
//! These operate on whole tiermem pages. With the default 4 KiB page that is
//! exact; with larger pages a range that covers part of a page discards (or
//! zeroes) only whole pages and leaves partial ones in place.

mod drain;
mod foreign;
mod fork_advice;

pub use drain::Drained;

use std::ptr::NonNull;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::page_table::{Kind, PageNo};
use crate::ranges::RangeAllocator;
use crate::runtime::Runtime;
use crate::shared::Shared;

/// A page range `[start, start+pages)` of the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pages {
    start: u64,
    pages: u64,
}

impl Pages {
    fn as_page_nos(self) -> std::ops::Range<PageNo> {
        self.start as PageNo..(self.start + self.pages) as PageNo
    }
}

impl Shared {
    /// The pages wholly inside `[addr, addr+len)`, clipped to the arena.
    fn pages_within(&self, addr: usize, len: usize) -> Pages {
        let lo = addr.max(self.arena.addr());
        let hi = addr
            .saturating_add(len)
            .min(self.arena.addr() + self.arena.len());
        if hi <= lo {
            return Pages { start: 0, pages: 0 };
        }
        let first = (lo - self.arena.addr()).div_ceil(self.page_size) as u64;
        let end = ((hi - self.arena.addr()) / self.page_size) as u64;
        Pages {
            start: first,
            pages: end.saturating_sub(first),
        }
    }

    fn zone_of(&self, page: u64) -> (&Mutex<RangeAllocator>, bool) {
        if self.is_lazy(page as PageNo) {
            (&self.lazy, true)
        } else {
            (&self.ranges, false)
        }
    }
}

fn lock(m: &Mutex<RangeAllocator>) -> std::sync::MutexGuard<'_, RangeAllocator> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Runtime {
    /// Allocates `len` bytes of zeroed tiered memory whose backing space is
    /// committed page by page on first touch (as the kernel overcommits
    /// anonymous memory), not now. For interposed `mmap` and the malloc arena.
    pub fn alloc_lazy(&self, len: usize) -> Result<NonNull<u8>> {
        let rt = self.shared();
        let pages = len.max(1).div_ceil(rt.page_size) as u64;
        let start = lock(&rt.lazy)
            .alloc(pages)
            .ok_or(Error::OutOfBackingSpace {
                requested: len as u64,
                available: 0,
            })?;
        // No marking: in the lazy zone a `Free` page already reads as zeros.
        // SAFETY: arena addresses are never null.
        Ok(unsafe { NonNull::new_unchecked(rt.page_addr(start as PageNo) as *mut u8) })
    }

    /// `madvise(MADV_HUGEPAGE)` (`on`) or `MADV_NOHUGEPAGE` on tiered
    /// memory: the kernel maps no huge page behind userfaultfd's back, but
    /// whole 2 MiB regions of advised memory are kept resident the way the
    /// kernel keeps a huge page (`policy::huge_regions`).
    pub fn advise_huge(&self, addr: usize, len: usize, on: bool) {
        let rt = self.shared();
        let range = rt.pages_within(addr, len);
        rt.table
            .regions()
            .advise(range.start as PageNo, range.pages, on);
    }

    /// Whether `addr` lies in the lazily committed zone.
    pub fn is_lazy_addr(&self, addr: usize) -> bool {
        let rt = self.shared();
        rt.page_of(addr).is_some_and(|p| rt.is_lazy(p))
    }

    /// `munmap` semantics: the pages of `[addr, addr+len)` stop being part of
    /// any allocation; their DRAM, slots and commitments come back. Pages of
    /// the range that were not allocated are ignored.
    pub fn unmap(&self, addr: usize, len: usize) {
        let rt = self.shared();
        let range = rt.pages_within(addr, len);
        rt.forget_wipe_on_fork(range.as_page_nos());
        self.for_each_zone(range, |zone, lazy, part| {
            let taken = lock(zone).take_range(part.start, part.pages);
            for (start, pages) in taken {
                let held = self.release_pages(start, pages, Kind::Free);
                rt.slots().uncommit(if lazy { held } else { pages });
                lock(zone).give_back(start, pages);
            }
        });
    }

    /// `MADV_DONTNEED` semantics: allocated pages of `[addr, addr+len)` read
    /// back as zeros; their DRAM and slots come back, the allocation stays.
    /// With `zero_partial`, bytes of partially covered pages are zeroed too
    /// (DONTNEED); without, they are left alone (MADV_FREE may keep data).
    ///
    /// # Safety
    /// The caller must own the range (as with madvise on its own memory).
    pub unsafe fn discard(&self, addr: usize, len: usize, zero_partial: bool) {
        let rt = self.shared();
        let whole = rt.pages_within(addr, len);
        self.for_each_zone(whole, |zone, lazy, part| {
            let live = Self::live_parts(&lock(zone), part);
            for p in live {
                let to = if lazy { Kind::Free } else { Kind::Zero };
                let held = self.release_pages(p.start, p.pages, to);
                if lazy {
                    rt.slots().uncommit(held);
                }
            }
        });
        if zero_partial {
            self.zero_partial_edges(addr, len, whole);
        }
    }

    /// Zeroes the bytes of `[addr, addr+len)` outside the whole pages `whole`.
    unsafe fn zero_partial_edges(&self, addr: usize, len: usize, whole: Pages) {
        let rt = self.shared();
        let end = addr + len;
        let (ws, we) = if whole.pages == 0 {
            (end, end)
        } else {
            (
                rt.page_addr(whole.start as PageNo),
                rt.page_addr((whole.start + whole.pages) as PageNo),
            )
        };
        for (from, to) in [(addr, ws.min(end)), (we.max(addr), end)] {
            if to > from && self.contains(from) {
                // The program's own memory: writing faults pages in as needed.
                std::ptr::write_bytes(from as *mut u8, 0, to - from);
            }
        }
    }

    /// `mmap(MAP_FIXED)` of private anonymous memory over `[addr, addr+len)`:
    /// the range becomes allocated, zero-filled tiered memory.
    ///
    /// # Safety
    /// As for [`Runtime::discard`].
    pub unsafe fn map_fixed_zero(&self, addr: usize, len: usize) {
        let rt = self.shared();
        self.discard(addr, len, true);
        let range = rt.pages_within(addr, len);
        // A new mapping: the old one's fork advice ends with it.
        rt.forget_wipe_on_fork(range.as_page_nos());
        self.for_each_zone(range, |zone, lazy, part| {
            let claimed = lock(zone).claim(part.start, part.pages);
            for (start, pages) in claimed {
                if !lazy {
                    // Strict zone: keep the promise that every allocated page has a slot.
                    if let Err(e) = rt.slots().commit(pages, rt.store()) {
                        rt.fatal(&format!("MAP_FIXED inside tiered memory: {e}"));
                    }
                    self.mark_zero(start, pages);
                }
            }
        });
    }

    /// `mmap(MAP_FIXED_NOREPLACE)` of private anonymous memory over
    /// `[addr, addr+len)`, a hole the program left in the lazily committed
    /// zone: the range becomes allocated, zero-filled tiered memory if no
    /// page of it is allocated, checked and claimed under the zone's lock.
    /// `false` when any page is taken (the kernel's `EEXIST`), or the range
    /// is not whole pages of the lazy zone.
    pub fn map_fixed_noreplace(&self, addr: usize, len: usize) -> bool {
        let rt = self.shared();
        let ps = rt.page_size;
        if !addr.is_multiple_of(ps) || len == 0 {
            return false;
        }
        let range = rt.pages_within(addr, len.next_multiple_of(ps));
        let whole = range.pages as usize * ps == len.next_multiple_of(ps);
        let last = range.start + range.pages.saturating_sub(1);
        if !whole || !rt.is_lazy(range.start as PageNo) || !rt.is_lazy(last as PageNo) {
            return false;
        }
        let mut zone = lock(&rt.lazy);
        if !Self::live_parts(&zone, range).is_empty() {
            return false;
        }
        // Free pages of the lazy zone already read as zeros.
        zone.claim(range.start, range.pages);
        true
    }

    /// `mremap` of a range inside the arena. Shrinks in place, grows in
    /// place when the following pages are free, and otherwise (with
    /// `may_move`) moves the contents to a new lazily committed range.
    /// Returns the new address.
    ///
    /// # Safety
    /// The caller must own `[old, old+old_len)`; with a move, the old range
    /// must no longer be used.
    pub unsafe fn remap(
        &self,
        old: usize,
        old_len: usize,
        new_len: usize,
        may_move: bool,
    ) -> Result<usize> {
        let rt = self.shared();
        let ps = rt.page_size;
        let old_pages = old_len.div_ceil(ps);
        let new_pages = new_len.div_ceil(ps);
        if new_pages <= old_pages {
            self.unmap(old + new_pages * ps, (old_pages - new_pages) * ps);
            return Ok(old);
        }
        if self.grow_in_place(old, old_pages, new_pages) {
            return Ok(old);
        }
        if !may_move {
            return Err(Error::OutOfBackingSpace {
                requested: new_len as u64,
                available: 0,
            });
        }
        let new = self.alloc_lazy(new_len)?.as_ptr() as usize;
        // Pages fault in and out as needed, so the copy works at any budget.
        std::ptr::copy_nonoverlapping(old as *const u8, new as *mut u8, old_len);
        self.move_wipe_on_fork(old, old_len, new, new_len);
        self.unmap(old, old_len);
        Ok(new)
    }

    fn grow_in_place(&self, old: usize, old_pages: usize, new_pages: usize) -> bool {
        let rt = self.shared();
        let Some(first) = rt.page_of(old) else {
            return false;
        };
        let tail = Pages {
            start: first as u64 + old_pages as u64,
            pages: (new_pages - old_pages) as u64,
        };
        let last = tail.start + tail.pages - 1;
        let (zone, lazy) = rt.zone_of(first as u64);
        if last >= rt.arena.len() as u64 / rt.page_size as u64
            || rt.zone_of(last).1 != lazy
            || !lazy
        {
            return false;
        }
        let mut z = lock(zone);
        if !Self::live_parts(&z, tail).is_empty() {
            return false;
        }
        let claimed: u64 = z.claim(tail.start, tail.pages).iter().map(|c| c.1).sum();
        debug_assert_eq!(claimed, tail.pages);
        drop(z);
        rt.grow_wipe_on_fork(tail.as_page_nos(), tail.start as PageNo - 1);
        true
    }

    /// `mremap` moved `[old, old + old_len)` to `new` and grew it to
    /// `new_len`: its fork advice goes along.
    fn move_wipe_on_fork(&self, old: usize, old_len: usize, new: usize, new_len: usize) {
        let rt = self.shared();
        let (Some(from), Some(to)) = (rt.page_of(old), rt.page_of(new)) else {
            return;
        };
        let old_pages = rt.pages_in(old, old_len);
        for run in rt.wipe_on_fork_runs(old_pages.clone()) {
            let moved = run.start - from + to..run.end - from + to;
            rt.extend_wipe_on_fork(moved);
        }
        let moved_last = old_pages.end - from + to - 1;
        rt.grow_wipe_on_fork(moved_last + 1..rt.pages_in(new, new_len).end, moved_last);
    }

    /// The parts of `range` that are live allocations.
    fn live_parts(zone: &RangeAllocator, range: Pages) -> Vec<Pages> {
        let mut parts = Vec::new();
        let end = range.start + range.pages;
        let mut at = range.start;
        while at < end {
            match zone.containing(at) {
                Some((s, l)) => {
                    let stop = (s + l).min(end);
                    parts.push(Pages {
                        start: at,
                        pages: stop - at,
                    });
                    at = stop;
                }
                None => at += 1,
            }
        }
        parts
    }

    /// Whether every page `[addr, addr+len)` touches inside the arena is
    /// part of a live allocation: what the kernel's `mincore` calls mapped.
    /// `munmap` gives tiered memory back to the arena, which stays mapped.
    pub fn all_allocated(&self, addr: usize, len: usize) -> bool {
        let touched = self.shared().pages_in(addr, len);
        let range = Pages {
            start: touched.start as u64,
            pages: (touched.end - touched.start) as u64,
        };
        let mut live = 0;
        self.for_each_zone(range, |zone, _, part| {
            live += Self::live_parts(&lock(zone), part)
                .iter()
                .map(|p| p.pages)
                .sum::<u64>();
        });
        live == range.pages
    }

    /// Splits `range` at the boundary between the strict and lazy zones.
    fn for_each_zone(&self, range: Pages, mut f: impl FnMut(&Mutex<RangeAllocator>, bool, Pages)) {
        if range.pages == 0 {
            return;
        }
        let rt = self.shared();
        let boundary = rt.lazy_start as u64;
        let end = range.start + range.pages;
        if range.start < boundary {
            let stop = end.min(boundary);
            f(
                &rt.ranges,
                false,
                Pages {
                    start: range.start,
                    pages: stop - range.start,
                },
            );
        }
        if end > boundary {
            let from = range.start.max(boundary);
            f(
                &rt.lazy,
                true,
                Pages {
                    start: from,
                    pages: end - from,
                },
            );
        }
    }
}

impl Runtime {
    /// Bytes of address space in the lazily committed zone.
    pub fn lazy_zone_bytes(&self) -> u64 {
        let rt = self.shared();
        rt.arena.len() as u64 - rt.lazy_start as u64 * rt.page_size as u64
    }

    /// The arena's address range `[start, end)`.
    pub fn arena_bounds(&self) -> (usize, usize) {
        let rt = self.shared();
        (rt.arena.addr(), rt.arena.addr() + rt.arena.len())
    }
}
