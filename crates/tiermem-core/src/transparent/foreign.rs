//! Memory tiermem does not tier, mapped by the program over tiered memory
//! with `MAP_FIXED`: a file or shared memory mapped into address space the
//! program reserved. QEMU maps `memory-backend-memfd` guest RAM this way,
//! into a `PROT_NONE` reservation that `tiermem run` placed in the arena.
//!
//! The range stays the program's, but its pages are `Foreign`: the kernel's
//! mapping there is not registered with userfaultfd, so no fault of it
//! reaches the runtime, and nothing of the runtime's (a read-ahead, a zero
//! fill ahead of a first touch) installs a page there. When the program
//! unmaps it, or maps private memory over it, the range becomes tiered
//! memory again: mapped anonymous, registered, zero-filled.

use std::ops::Range;

use super::lock;
use crate::error::{Error, Result};
use crate::page_table::{Kind, PageNo, PageState};
use crate::runtime::Runtime;
use crate::sys::{backoff, raw};

impl Runtime {
    /// Whether `[addr, addr+len)` is whole pages of the lazily committed
    /// zone, the only tiered memory a foreign mapping may replace (the
    /// explicit API's memory is never the program's to map over).
    pub fn is_lazy_range(&self, addr: usize, len: usize) -> bool {
        let rt = self.shared();
        let ps = rt.page_size;
        if len == 0 || !addr.is_multiple_of(ps) || !len.is_multiple_of(ps) {
            return false;
        }
        let pages = rt.pages_in(addr, len);
        pages.end - pages.start == (len / ps) as PageNo && rt.is_lazy(pages.start)
    }

    /// Lets the program map memory tiermem does not tier over
    /// `[addr, addr+len)`, which [`Runtime::is_lazy_range`] accepts: the
    /// contents go (as `MAP_FIXED` replaces them), the range stays allocated,
    /// and its pages become `Foreign`. The caller then maps over it; if that
    /// fails, [`Runtime::take_back_foreign`] makes it tiered memory again.
    ///
    /// # Safety
    /// The caller owns the range, as with `mmap(MAP_FIXED)` over it.
    pub unsafe fn cede_to_foreign(&self, addr: usize, len: usize) {
        let rt = self.shared();
        let pages = rt.pages_in(addr, len);
        self.discard(addr, len, false);
        lock(&rt.lazy).claim(pages.start as u64, (pages.end - pages.start) as u64);
        for page in pages.clone() {
            self.make_foreign(page);
        }
        let mut foreign = rt.foreign_ranges();
        cut_out(&mut foreign, pages.clone());
        foreign.push(pages);
    }

    /// A userfaultfd of the program's own is about to be registered over
    /// `[addr, addr+len)`, whole pages of the lazily committed zone
    /// ([`Runtime::is_lazy_range`]). The kernel refuses a range that another
    /// userfaultfd handles, so tiermem stops handling this one, and keeps
    /// its contents: every page that holds data is brought into DRAM and
    /// left mapped where it is, the pages become `Foreign` (the program's,
    /// outside the budget), and tiermem's registration ends there. As with
    /// a foreign mapping, `munmap` makes the range tiered memory again.
    ///
    /// # Safety
    /// The caller owns the range.
    pub unsafe fn hand_over_to_program(&self, addr: usize, len: usize) -> Result<()> {
        let rt = self.shared();
        let pages = rt.pages_in(addr, len);
        lock(&rt.lazy).claim(pages.start as u64, (pages.end - pages.start) as u64);
        for page in pages.clone() {
            self.keep_in_place_as_foreign(page)?;
        }
        rt.uffd.unregister(addr, len);
        let mut foreign = rt.foreign_ranges();
        cut_out(&mut foreign, pages.clone());
        foreign.push(pages);
        Ok(())
    }

    /// Moves one page to `Foreign` with its bytes mapped where they are:
    /// a page in the store, compressed or on probation is brought back
    /// first (the evictor may take it again meanwhile: then once more).
    /// Returns whether the page was lost (to a read error, before or while
    /// it was brought back): it keeps its poison marker.
    pub(super) fn keep_in_place_as_foreign(&self, page: PageNo) -> Result<bool> {
        let rt = self.shared();
        loop {
            let s = rt.table.load(page);
            let kept = PageState::FREE
                .with_queued(s.is_queued())
                .with_kind(Kind::Foreign);
            match s.kind() {
                Kind::Foreign => return Ok(false),
                // Nothing mapped (zeros), or mapped and current: the kernel
                // keeps what it maps. A lost page keeps its poison marker.
                Kind::Free | Kind::Zero | Kind::Resident | Kind::Poisoned => {
                    if !rt.table.transition(page, s, kept) {
                        continue;
                    }
                    if s.kind() != Kind::Free && rt.let_go(page, s, Kind::Foreign) {
                        rt.slots().uncommit(1);
                    }
                    return Ok(s.kind() == Kind::Poisoned);
                }
                Kind::Loading | Kind::Evicting => backoff(),
                _ => {
                    if let Err(e) = populate_read(rt.page_addr(page), rt.page_size) {
                        // A read that failed twice poisoned the page (the
                        // populate gets EFAULT): the next turn takes it as
                        // lost. Anything else is the kernel's refusal.
                        if rt.table.load(page).kind() != Kind::Poisoned && e.errno() != libc::EINTR
                        {
                            return Err(e);
                        }
                    }
                }
            }
        }
    }

    /// Moves one page to `Foreign`, whatever took it since the discard (a
    /// zero fill ahead of a neighbour's first touch) given back first.
    fn make_foreign(&self, page: PageNo) {
        let rt = self.shared();
        loop {
            let s = rt.table.load(page);
            match s.kind() {
                Kind::Foreign => return,
                Kind::Free | Kind::Zero => {
                    let foreign = PageState::FREE
                        .with_queued(s.is_queued())
                        .with_kind(Kind::Foreign);
                    if rt.table.transition(page, s, foreign) {
                        return;
                    }
                }
                Kind::Loading | Kind::Evicting => backoff(),
                _ => {
                    let held = self.release_pages(page as u64, 1, Kind::Free);
                    rt.slots().uncommit(held);
                }
            }
        }
    }

    /// The parts of `[addr, addr+len)` that foreign mappings hold, as
    /// address ranges in ascending order.
    pub fn foreign_parts(&self, addr: usize, len: usize) -> Vec<Range<usize>> {
        let rt = self.shared();
        let pages = rt.pages_in(addr, len);
        let mut parts: Vec<Range<usize>> = rt
            .foreign_ranges()
            .iter()
            .filter(|r| r.start < pages.end && pages.start < r.end)
            .map(|r| {
                let from = rt.page_addr(r.start.max(pages.start)).max(addr);
                let to = rt.page_addr(r.end.min(pages.end)).min(addr + len);
                from..to
            })
            .collect();
        parts.sort_by_key(|r| r.start);
        parts
    }

    /// Makes the foreign pages of `[addr, addr+len)` tiered memory again:
    /// anonymous, registered with userfaultfd, zero-filled and still
    /// allocated. Whatever the foreign mapping held there is gone, as with
    /// `munmap` or a new `MAP_FIXED` mapping over it.
    ///
    /// # Safety
    /// The caller owns the range and no longer uses the foreign mapping.
    pub unsafe fn take_back_foreign(&self, addr: usize, len: usize) -> Result<()> {
        let rt = self.shared();
        for part in self.foreign_parts(addr, len) {
            remap_registered(rt, part.clone())?;
            let pages = rt.pages_in(part.start, part.end - part.start);
            for page in pages.clone() {
                let s = rt.table.load(page);
                if s.kind() == Kind::Foreign {
                    rt.table.transition(page, s, s.with_kind(Kind::Free));
                }
            }
            cut_out(&mut rt.foreign_ranges(), pages);
        }
        Ok(())
    }

    /// How many pages foreign mappings hold: allocated, but not tiered.
    pub(crate) fn foreign_pages(&self) -> u64 {
        let rt = self.shared();
        let held = rt
            .foreign_ranges()
            .iter()
            .map(|r| r.end - r.start)
            .sum::<PageNo>();
        held as u64
    }
}

/// Maps `part` anonymous again, as the arena is, and registers it.
///
/// # Safety
/// `part` lies in the arena, and nothing uses what was mapped there.
unsafe fn remap_registered(rt: &crate::shared::Shared, part: Range<usize>) -> Result<()> {
    let len = part.end - part.start;
    let os = |what: &'static str| move |source: std::io::Error| Error::Os { what, source };
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED;
    raw::mmap(
        part.start,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        flags,
        -1,
        0,
    )
    .map_err(os(
        "mapping tiered memory again where a foreign mapping was",
    ))?;
    // Transparent huge pages would map memory behind userfaultfd's back.
    let _ = raw::madvise(part.start, len, libc::MADV_NOHUGEPAGE);
    rt.uffd.register(part.start, len)
}

/// `MADV_POPULATE_READ` (Linux 5.14; missing from older libc bindings).
const MADV_POPULATE_READ: i32 = 22;

/// Faults `[addr, addr+len)` in for reading, through the pager.
fn populate_read(addr: usize, len: usize) -> Result<()> {
    // SAFETY: populating changes no byte of the range, only what is mapped.
    unsafe { raw::madvise(addr, len, MADV_POPULATE_READ) }.map_err(|source| Error::Os {
        what: "bringing tiered memory into DRAM for the program's own userfaultfd",
        source,
    })
}

/// Removes `pages` from the list of foreign ranges, splitting a range that
/// holds them in its middle.
pub(super) fn cut_out(ranges: &mut Vec<Range<PageNo>>, pages: Range<PageNo>) {
    let mut kept = Vec::with_capacity(ranges.len() + 1);
    for r in ranges.drain(..) {
        if r.end <= pages.start || r.start >= pages.end {
            kept.push(r);
            continue;
        }
        if r.start < pages.start {
            kept.push(r.start..pages.start);
        }
        if r.end > pages.end {
            kept.push(pages.end..r.end);
        }
    }
    *ranges = kept;
}

#[cfg(test)]
mod tests {
    use super::cut_out;

    #[test]
    fn cutting_out_splits_and_trims_ranges() {
        let mut r = vec![0..10, 20..30, 40..50];
        cut_out(&mut r, 5..25);
        assert_eq!(r, vec![0..5, 25..30, 40..50]);
        cut_out(&mut r, 42..44);
        assert_eq!(r, vec![0..5, 25..30, 40..42, 44..50]);
        cut_out(&mut r, 0..100);
        assert!(r.is_empty());
    }
}
