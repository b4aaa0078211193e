//! Pages the kernel unmapped behind the runtime's back.
//!
//! A program may discard tiered memory with its own `madvise` system call,
//! which no interposer sees: Go's runtime returns memory to the system with
//! `MADV_DONTNEED` made directly, not through the C library (a program
//! built with cgo maps its heap through the C library, so it is tiered).
//! The kernel then removes the page's mapping while the page table still
//! says it is mapped (`Resident`), or while the evictor owns it. The next
//! access faults as missing, and the runtime served that fault as a
//! duplicate, so the thread faulted again forever; the evictor's own copy
//! of such a page faulted and waited for itself.
//!
//! The kernel's promise for discarded private memory is that it reads as
//! zeros, so that is what is installed: a missing fault on a mapped page
//! tries to install zeros on the faulting base page, which the kernel
//! refuses (`EEXIST`) when the page is there, the duplicate fault it
//! usually is.
//!
//! The evictor's own fault on such a page is served the same way, by the
//! handler that reads it. But when every handler is waiting for DRAM, which
//! only the evictor frees, none reads it: so the evictor says which page
//! it is copying ([`CopyWatch`]), and a handler waiting for DRAM that sees
//! the evictor on one page for two of its checks installs the zeros
//! itself.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::page_table::{Kind, PageNo, PageState};
use crate::shared::Shared;
use crate::stats::Counters;
use crate::sys::uffd::{Copied, Fault};

/// What a missing fault on a page the table says is mapped came to.
pub(super) enum Served {
    /// The page was mapped: the fault raced with another that installed
    /// it. The thread is woken to access it again.
    Duplicate,
    /// The page's mapping was gone: its faulting base page now reads
    /// zeros, and the page is dirty.
    Zeroed,
    /// The page changed state meanwhile; look again.
    Changed,
}

/// Serves a missing fault on `page`, `Resident` in `state`.
pub(super) fn serve_resident(rt: &Shared, page: PageNo, state: PageState, fault: &Fault) -> Served {
    let claimed = state.with_kind(Kind::Loading);
    if !rt.table.transition(page, state, claimed) {
        return Served::Changed;
    }
    let base = fault.address & !(rt.base_page - 1);
    // SAFETY: `zero_run` holds at least a page of zeros; `base` is a base
    // page of a registered page we own (`Loading`).
    let copied = unsafe {
        rt.uffd
            .copy(base, rt.zero_run.as_ptr(), rt.base_page, false, true)
    };
    match copied {
        Ok(Copied::Done) => {
            // Its content is no longer its slot's: written back if evicted.
            rt.table
                .finish(page, state.with_dirty(true).with_prefetched(false));
            Counters::add(&rt.counters.discarded_behind_our_back, 1);
            Served::Zeroed
        }
        Ok(_) => {
            rt.table.finish(page, state);
            rt.uffd.wake(base, rt.base_page);
            Served::Duplicate
        }
        Err(e) => rt.fatal(&format!(
            "installing zeros for a page discarded behind tiermem's back at {base:#x} failed: {e}"
        )),
    }
}

/// Whether the fault comes from the evictor, copying a victim it owns whose
/// mapping the kernel removed: the copy then reads zeros, installed
/// write-protected as the evictor's victims are (a write waits until the
/// page has left DRAM).
pub(super) fn zeros_for_the_evictor(rt: &Shared, fault: &Fault) -> bool {
    if fault.write_protect || fault.thread_id == 0 || fault.thread_id != rt.evictor_thread_id() {
        return false;
    }
    let base = fault.address & !(rt.base_page - 1);
    // SAFETY: as in `serve_resident`; the evictor owns the page
    // (`Evicting`) and waits on this very fault.
    let copied = unsafe {
        rt.uffd
            .copy(base, rt.zero_run.as_ptr(), rt.base_page, true, true)
    };
    match copied {
        Ok(Copied::Done) => {
            Counters::add(&rt.counters.discarded_behind_our_back, 1);
            let page_addr = fault.address & !(rt.page_size - 1);
            rt.copy_watch.note_zeroed(page_addr);
        }
        Ok(_) => rt.uffd.wake(base, rt.base_page),
        Err(e) => rt.fatal(&format!(
            "installing zeros at {base:#x} for the evictor, whose victim was discarded behind tiermem's back, failed: {e}"
        )),
    }
    true
}

/// The mapped page the evictor is copying, for handlers waiting for DRAM to
/// unblock it (see the module's documentation). Page addresses are
/// aligned, so the low bit marks a handler at work on it: the evictor
/// cannot finish the copy (and later unmap the page) while it is set.
pub(crate) struct CopyWatch {
    copying: AtomicUsize,
    /// What the last check saw, for "twice in a row".
    seen: AtomicUsize,
    /// The page where zeros went in during the copy: the copy may hold
    /// bytes from before the discard and zeros after it, and is made again.
    zeroed: AtomicUsize,
}

const RESCUING: usize = 1;

impl CopyWatch {
    pub(crate) const fn new() -> CopyWatch {
        CopyWatch {
            copying: AtomicUsize::new(0),
            seen: AtomicUsize::new(0),
            zeroed: AtomicUsize::new(0),
        }
    }

    /// The evictor starts copying the page mapped at `addr`.
    pub(crate) fn begin(&self, addr: usize) {
        self.zeroed.store(0, Ordering::SeqCst);
        self.copying.store(addr, Ordering::SeqCst);
    }

    /// The evictor's copy at `addr` is done; waits out a handler that is
    /// installing zeros there. False if zeros went in during the copy,
    /// which must then be made again.
    pub(crate) fn end(&self, addr: usize) -> bool {
        while self
            .copying
            .compare_exchange(addr, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            std::thread::yield_now();
        }
        self.zeroed.load(Ordering::SeqCst) != addr
    }

    /// Zeros went in on the page at `page_addr` for the evictor.
    fn note_zeroed(&self, page_addr: usize) {
        self.zeroed.store(page_addr, Ordering::SeqCst);
    }

    /// From a thread waiting for DRAM: if the evictor has been copying the
    /// same page since the last check, its mapping may be gone and the
    /// evictor stuck in a fault no handler will read. Zeros go there; the
    /// kernel refuses them (`EEXIST`) if the page is mapped after all.
    pub(crate) fn unblock_a_stuck_copy(&self, rt: &Shared) {
        let addr = self.copying.load(Ordering::SeqCst);
        if addr == 0 || addr & RESCUING != 0 {
            return;
        }
        if self.seen.swap(addr, Ordering::SeqCst) != addr {
            return;
        }
        let marked = self.copying.compare_exchange(
            addr,
            addr | RESCUING,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        if marked.is_err() {
            return;
        }
        // Each base page of the page: the evictor may be stuck on any.
        for base in (addr..addr + rt.page_size).step_by(rt.base_page) {
            // SAFETY: the evictor owns the page (`Evicting`) and cannot
            // finish its copy, let alone unmap the page, until the mark is
            // cleared.
            let copied = unsafe {
                rt.uffd
                    .copy(base, rt.zero_run.as_ptr(), rt.base_page, true, true)
            };
            if let Ok(Copied::Done) = copied {
                Counters::add(&rt.counters.discarded_behind_our_back, 1);
                self.note_zeroed(addr);
            }
        }
        self.copying.store(addr, Ordering::SeqCst);
    }
}
