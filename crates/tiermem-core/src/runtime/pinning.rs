//! Pages kept in DRAM at the program's request: locked (`mlock`), or pinned
//! while I/O may reach them by DMA; and `mprotect`, which the evictor must
//! know about to copy a page out.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Runtime;
use crate::error::{Error, Result};
use crate::page_table::PageNo;

impl Runtime {
    /// Keeps the tiered pages of `[addr, addr + len)` in DRAM until the
    /// guard drops: I/O that may reach them by DMA (an `O_DIRECT` read) is
    /// about to start. Pins beyond the arena are ignored. The caller keeps
    /// a pinned span well within the budget (see [`Runtime::pin_span`]).
    pub fn pin_for_io(&self, addr: usize, len: usize) -> PinnedIo<'_> {
        let rt = &self.shared;
        let pages = rt.pages_in(addr, len);
        let n = (pages.end - pages.start) as u64;
        // All pins together stay within half the budget, less what is
        // locked, so that faults always find room: past that, wait.
        loop {
            let room = (rt.budget.limit() / 2)
                .saturating_sub(rt.locked_pages.load(Ordering::Relaxed))
                .max(n);
            let reserved =
                rt.pinned_for_io
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |cur| {
                        (cur + n <= room).then_some(cur + n)
                    });
            if reserved.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        rt.pins.pin_io(&rt.table, pages.clone());
        PinnedIo { rt: self, pages }
    }

    /// The most bytes one call should pin at once: an eighth of the budget
    /// in whole pages, so pinned pages never crowd out the pages the I/O
    /// itself faults in, and pieces of an `O_DIRECT` read stay aligned.
    pub fn pin_span(&self) -> usize {
        let page = self.shared.page_size as u64;
        (self.dram_budget() / 8 / page).max(1) as usize * page as usize
    }

    /// `mprotect` on tiered memory. The evictor copies a victim through its
    /// mapping, where a page without `PROT_READ` would fault (a crash, in
    /// the evictor); such pages are marked first, so that it reads them
    /// through `/proc/self/mem` instead, and marked readable again once
    /// the kernel has given the access back.
    pub fn protect(&self, addr: usize, len: usize, prot: i32) -> Result<()> {
        let rt = &self.shared;
        let pages = rt.pages_in(addr, len);
        let readable = prot & libc::PROT_READ != 0;
        if !readable {
            rt.pins.set_unreadable(&rt.table, pages.clone(), true);
        }
        // SAFETY: the caller's own mprotect(2) of its own memory.
        unsafe { crate::sys::raw::mprotect(addr, len, prot) }.map_err(|source| Error::Os {
            what: "changing the protection of tiered memory (mprotect)",
            source,
        })?;
        if readable {
            rt.pins.set_unreadable(&rt.table, pages, false);
        }
        Ok(())
    }

    /// `mlock`: the tiered pages of `[addr, addr + len)` stay in DRAM and
    /// never reach the store, until [`Runtime::unlock`] or their release.
    /// Refused (`EAGAIN`, as the kernel does past its limit) when locked
    /// pages would take more than half the budget.
    pub fn lock(&self, addr: usize, len: usize) -> Result<()> {
        let rt = &self.shared;
        let pages = rt.pages_in(addr, len);
        let most = (pages.end - pages.start) as u64;
        // Room for every page of the range is reserved first, so that two
        // calls at once cannot both pass the limit.
        let limit = rt.budget.limit() / 2;
        let reserved = rt
            .locked_pages
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n + most <= limit).then_some(n + most)
            });
        if reserved.is_err() {
            return Err(Error::Os {
                what: "locking tiered memory: locked pages may take at most half the DRAM budget",
                source: std::io::Error::from_raw_os_error(libc::EAGAIN),
            });
        }
        let changed = rt.pins.set_locked(&rt.table, pages.clone(), true);
        rt.locked_pages.fetch_sub(most - changed, Ordering::Relaxed);
        rt.locked_ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pages.clone());
        // The kernel's lock too, so the host's own swap never takes the
        // pages either; it faults them in (through the pager) as it locks.
        let span = self.span_of(&pages);
        if let Err(source) = crate::sys::raw::mlock(span.0, span.1, true) {
            self.unlock(addr, len);
            return Err(Error::Os {
                what: "locking tiered memory (mlock)",
                source,
            });
        }
        Ok(())
    }

    /// The runs of locked tiered pages ([`Runtime::lock`]) in
    /// `[addr, addr + len)`, as address ranges; none in a runtime that
    /// holds no lock, without a look at the pages.
    pub fn locked_runs(&self, addr: usize, len: usize) -> Vec<std::ops::Range<usize>> {
        let rt = &self.shared;
        let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
        if rt.locked_pages.load(Ordering::Relaxed) == 0 {
            return runs;
        }
        for page in rt.pages_in(addr, len).filter(|&page| rt.pins.locked(page)) {
            let at = rt.page_addr(page);
            match runs.last_mut() {
                Some(run) if run.end == at => run.end += rt.page_size,
                _ => runs.push(at..at + rt.page_size),
            }
        }
        runs
    }

    /// `munlock`: ends [`Runtime::lock`] on the tiered pages of the range.
    pub fn unlock(&self, addr: usize, len: usize) {
        let rt = &self.shared;
        if rt.locked_pages.load(Ordering::Relaxed) == 0 {
            return;
        }
        let pages = rt.pages_in(addr, len);
        let changed = rt.pins.set_locked(&rt.table, pages.clone(), false);
        if changed == 0 {
            return;
        }
        let span = self.span_of(&pages);
        // Unlocked memory may be zapped again (MADV_DONTNEED refuses locked
        // memory); munlock of a range never locked is harmless.
        let _ = crate::sys::raw::mlock(span.0, span.1, false);
        rt.locked_pages.fetch_sub(changed, Ordering::Relaxed);
    }

    /// `munlockall`: every tiered page unlocked (the ranges ever locked are
    /// visited, not the whole arena).
    pub fn unlock_all(&self) {
        let ranges = std::mem::take(
            &mut *self
                .shared
                .locked_ranges
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for pages in ranges {
            let (addr, len) = self.span_of(&pages);
            self.unlock(addr, len);
        }
    }

    /// Address and length of a run of pages.
    fn span_of(&self, pages: &std::ops::Range<PageNo>) -> (usize, usize) {
        let rt = &self.shared;
        (
            rt.page_addr(pages.start),
            (pages.end - pages.start) as usize * rt.page_size,
        )
    }
}

/// Pages pinned for I/O by [`Runtime::pin_for_io`]; unpinned on drop.
pub struct PinnedIo<'a> {
    rt: &'a Runtime,
    pages: std::ops::Range<PageNo>,
}

impl Drop for PinnedIo<'_> {
    fn drop(&mut self) {
        let rt = &self.rt.shared;
        rt.pins.unpin_io(self.pages.clone());
        let n = (self.pages.end - self.pages.start) as u64;
        rt.pinned_for_io.fetch_sub(n, Ordering::Relaxed);
    }
}
