//! `MADV_WIPEONFORK` and `MADV_KEEPONFORK` on tiered memory.
//!
//! The kernel gives a forked child zeros where the parent advised
//! `MADV_WIPEONFORK`: a random generator's state, say, which a parent and
//! its child must never share. It cannot do so for tiered memory: a page
//! the parent evicted is in the store, and the child's pager would read it
//! back. So tiermem keeps the advised pages in a set of its own, and a
//! forked child discards them first thing, before its pager starts: every
//! one reads as zeros there, and is the child's own memory from then on.
//!
//! The kernel's advice belongs to the mapping, and so does this: `munmap`
//! and `MAP_FIXED` end it, `MADV_DONTNEED` keeps it, `mremap` carries it to
//! where the memory moves (and over the pages a mapping grows by), and a
//! child keeps it for its own children.

use std::ops::Range;
use std::sync::{Arc, MutexGuard};

use rangemap::RangeSet;

use crate::page_table::PageNo;
use crate::runtime::Runtime;
use crate::shared::Shared;

impl Shared {
    /// The advised pages, for the fork handlers to hold across a fork too:
    /// program threads take them in `madvise`, which the fork does not pause.
    pub(crate) fn wipe_on_fork_guard(&self) -> MutexGuard<'_, RangeSet<PageNo>> {
        self.wipe_on_fork.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the advice over `pages` (the memory was unmapped or replaced).
    pub(super) fn forget_wipe_on_fork(&self, pages: Range<PageNo>) {
        if !pages.is_empty() {
            self.wipe_on_fork_guard().remove(pages);
        }
    }

    /// Advises `pages` too (memory the advice moved to).
    pub(super) fn extend_wipe_on_fork(&self, pages: Range<PageNo>) {
        if !pages.is_empty() {
            self.wipe_on_fork_guard().insert(pages);
        }
    }

    /// The pages `tail` a mapping grew by, after `last`: the kernel grows
    /// the mapping itself, so they take its advice, if `last` has it.
    pub(super) fn grow_wipe_on_fork(&self, tail: Range<PageNo>, last: PageNo) {
        if !self.wipe_on_fork_runs(last..last + 1).is_empty() {
            self.extend_wipe_on_fork(tail);
        }
    }

    /// The advised runs within `pages`, clipped to them.
    pub(super) fn wipe_on_fork_runs(&self, pages: Range<PageNo>) -> Vec<Range<PageNo>> {
        if pages.is_empty() {
            return Vec::new();
        }
        self.wipe_on_fork_guard()
            .overlapping(&pages)
            .map(|run| run.start.max(pages.start)..run.end.min(pages.end))
            .collect()
    }
}

impl Runtime {
    /// `madvise(MADV_WIPEONFORK)` (`on`) or `MADV_KEEPONFORK` on the tiered
    /// pages `[addr, addr + len)` touches: a child forked later reads zeros
    /// there (see the module's notes).
    pub fn wipe_on_fork(&self, addr: usize, len: usize, on: bool) {
        let rt = self.shared();
        let pages = rt.pages_in(addr, len);
        if pages.is_empty() {
            return;
        }
        let mut advised = rt.wipe_on_fork_guard();
        match on {
            true => advised.insert(pages),
            false => advised.remove(pages),
        }
    }
}

impl Shared {
    /// In a freshly forked child, before its pager starts: the advised
    /// pages are discarded, so they read as zeros.
    ///
    /// # Safety
    /// Only in the child's fork handler, once the child has its own store
    /// and before any of its threads runs.
    pub(crate) unsafe fn wipe_advised_in_child(self: &Arc<Self>) {
        let runs: Vec<Range<PageNo>> = self.wipe_on_fork_guard().iter().cloned().collect();
        Runtime::borrowed(self, |rt| {
            for run in runs {
                let addr = self.page_addr(run.start);
                let len = (run.end - run.start) as usize * self.page_size;
                // SAFETY: the child's own copy of its memory, which the
                // parent asked the kernel to leave out of it.
                unsafe { rt.discard(addr, len, false) };
            }
        });
    }
}
