//! Allocating, freeing and resizing tiered memory: ranges of the arena,
//! their slot commitments, and the pages a release gives back.

use std::ptr::NonNull;

use super::Runtime;
use crate::error::{Error, Result};
use crate::page_table::{Kind, PageNo, PageState};
use crate::sys::backoff;
use crate::sys::mem::zap;

impl Runtime {
    /// Allocates `len` bytes of zeroed, page-aligned tiered memory.
    pub fn alloc(&self, len: usize) -> Result<NonNull<u8>> {
        let rt = &self.shared;
        if len == 0 {
            return Err(Error::InvalidSetting {
                setting: "allocation size",
                value: "0".into(),
                expected: "at least 1 byte".into(),
            });
        }
        let pages = len.div_ceil(rt.page_size) as u64;
        rt.slots().commit(pages, rt.store())?;
        let start = rt
            .ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .alloc(pages);
        let Some(start) = start else {
            rt.slots().uncommit(pages);
            return Err(Error::OutOfBackingSpace {
                requested: pages * rt.page_size as u64,
                available: 0,
            });
        };
        self.mark_zero(start, pages);
        let ptr = rt.page_addr(start as PageNo) as *mut u8;
        // SAFETY: arena addresses are never null.
        Ok(unsafe { NonNull::new_unchecked(ptr) })
    }

    pub(crate) fn mark_zero(&self, start: u64, pages: u64) {
        for p in start..start + pages {
            self.shared.table.update(p as PageNo, |s| {
                PageState::FREE
                    .with_queued(s.is_queued())
                    .with_kind(Kind::Zero)
            });
        }
    }

    /// Frees an allocation: its DRAM and its slots come back.
    ///
    /// # Safety
    /// `ptr` must come from this runtime's `alloc`/`realloc`, and no one may
    /// use the memory afterwards.
    pub unsafe fn free(&self, ptr: NonNull<u8>) -> Result<()> {
        let rt = &self.shared;
        let start = self.start_page_of(ptr)?;
        let pages = rt
            .ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(start);
        let Some(pages) = pages else {
            return Err(Error::UnknownPointer(ptr.as_ptr() as usize));
        };
        self.release_pages(start, pages, Kind::Free);
        rt.ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .give_back(start, pages);
        rt.slots().uncommit(pages);
        Ok(())
    }

    fn start_page_of(&self, ptr: NonNull<u8>) -> Result<u64> {
        let addr = ptr.as_ptr() as usize;
        match self.shared.page_of(addr) {
            Some(p) if addr.is_multiple_of(self.shared.page_size) => Ok(p as u64),
            _ => Err(Error::UnknownPointer(addr)),
        }
    }

    /// Returns pages to `to` (`Free`, or `Zero` for a discard), releasing
    /// DRAM, frames and slots, then unmaps whatever was resident. Pages that
    /// are `Free` stay so. Returns how many pages held data (neither `Zero`
    /// nor `Free`): the commitments a lazily committed zone gives back.
    pub(crate) fn release_pages(&self, start: u64, pages: u64, to: Kind) -> u64 {
        let rt = &self.shared;
        // Memory freed while locked is unlocked first, as munmap does.
        let first = rt.page_addr(start as PageNo);
        self.unlock(first, pages as usize * rt.page_size);
        let mut held_data = 0;
        for p in start..start + pages {
            let page = p as PageNo;
            loop {
                let s = rt.table.load(page);
                let freed = PageState::FREE.with_queued(s.is_queued()).with_kind(to);
                match s.kind() {
                    Kind::Loading | Kind::Evicting => backoff(),
                    Kind::Free => break,
                    _ => {
                        if !rt.table.transition(page, s, freed) {
                            continue;
                        }
                        held_data += u64::from(rt.let_go(page, s, to));
                        break;
                    }
                }
            }
        }
        let addr = rt.page_addr(start as PageNo);
        if let Err(e) = zap(addr, pages as usize * rt.page_size) {
            rt.fatal(&format!("unmapping freed tiered memory failed: {e}"));
        }
        held_data
    }

    /// Resizes an allocation, preserving its contents up to the smaller size.
    /// Grows in place when the pages after it are free.
    ///
    /// # Safety
    /// As for [`Runtime::free`]; on success the old pointer must no longer be
    /// used unless it equals the new one.
    pub unsafe fn realloc(&self, ptr: NonNull<u8>, len: usize) -> Result<NonNull<u8>> {
        let rt = &self.shared;
        let start = self.start_page_of(ptr)?;
        let old_pages = rt
            .ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len_of(start)
            .ok_or(Error::UnknownPointer(ptr.as_ptr() as usize))?;
        let new_pages = len.max(1).div_ceil(rt.page_size) as u64;
        if new_pages == old_pages {
            return Ok(ptr);
        }
        if new_pages < old_pages {
            self.shrink(start, old_pages, new_pages);
            return Ok(ptr);
        }
        let extra = new_pages - old_pages;
        rt.slots().commit(extra, rt.store())?;
        if rt
            .ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_grow(start, new_pages)
        {
            self.mark_zero(start + old_pages, extra);
            return Ok(ptr);
        }
        rt.slots().uncommit(extra);
        let new = self.alloc(len)?;
        // Pages fault in and out as needed: the copy works at any budget.
        std::ptr::copy_nonoverlapping(
            ptr.as_ptr(),
            new.as_ptr(),
            old_pages as usize * rt.page_size,
        );
        self.free(ptr)?;
        Ok(new)
    }

    fn shrink(&self, start: u64, old_pages: u64, new_pages: u64) {
        let rt = &self.shared;
        rt.ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .shrink(start, new_pages);
        let tail = old_pages - new_pages;
        self.release_pages(start + new_pages, tail, Kind::Free);
        rt.ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .give_back(start + new_pages, tail);
        rt.slots().uncommit(tail);
    }
}

impl crate::shared::Shared {
    /// After `page` went from `was` to `to` (`Free`, `Zero` or `Foreign`):
    /// what it held goes back (its DRAM, its frame, its compressed copy, its
    /// slot), and whatever is allocated there next is new memory. Whether
    /// it held data: a commitment the lazily committed zone gives back.
    pub(crate) fn let_go(&self, page: PageNo, was: PageState, to: Kind) -> bool {
        let kind = was.kind();
        self.table.forget_heat(page);
        self.table.regions().on_leave(page);
        if to != Kind::Zero {
            self.table.regions().forget(page);
        }
        if matches!(kind, Kind::Resident | Kind::Probation) {
            self.budget.uncharge(1);
        }
        if kind == Kind::Probation {
            self.frames.release(self.table.frame(page));
        }
        if kind == Kind::Compressed {
            self.release_compressed(page);
        }
        if let Some(slot) = was.slot() {
            self.slots().free(slot);
        }
        kind != Kind::Zero
    }
}
