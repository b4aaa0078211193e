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
//! A page out of DRAM when the program discards it has no mapping to
//! remove, so nothing here sees the discard, and the page keeps its bytes.
//! Go's runtime counts on the zeros from Go 1.26; `tiermem run` has it
//! clear such memory itself instead (`tiermem_host::go_runtime`).
//!
//! The evictor's own fault on such a page is served the same way, by the
//! handler that reads it. But when every handler is waiting for DRAM, which
//! only the evictor frees, none reads it: so the evictor says which page
//! it is copying, and a handler waiting for DRAM that sees it on one page
//! for two of its checks installs the zeros itself
//! ([`copy_watch`](super::copy_watch)).

use super::copy_watch::zero_fill;
use crate::page_table::{Kind, PageNo, PageState};
use crate::shared::Shared;
use crate::stats::Counters;
use crate::sys::uffd::Fault;

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
    // SAFETY: we own the page (`Loading`).
    if unsafe { install_zeros(rt, base, false) } {
        // Its content is no longer its slot's: written back if evicted.
        rt.table
            .finish(page, state.with_dirty(true).with_prefetched(false));
        return Served::Zeroed;
    }
    rt.table.finish(page, state);
    rt.uffd.wake(base, rt.base_page);
    Served::Duplicate
}

/// Installs zeros on the base page at `base`, and wakes its waiters; false
/// if the kernel found it mapped (or asks for a retry, which the faulting
/// thread's next fault makes). Counts what went in.
///
/// # Safety
/// `base` is a base page of a registered page that the caller owns, or
/// that the evictor owns and cannot unmap meanwhile.
unsafe fn install_zeros(rt: &Shared, base: usize, write_protect: bool) -> bool {
    // SAFETY: the caller vouches for `base`; `zero_run` holds zeros.
    let filled = unsafe {
        zero_fill(
            &rt.uffd,
            base,
            rt.zero_run.as_ptr(),
            rt.base_page,
            write_protect,
        )
    };
    match filled {
        Ok(true) => {
            Counters::add(&rt.counters.discarded_behind_our_back, 1);
            true
        }
        Ok(false) => false,
        Err(e) => rt.fatal(&format!(
            "installing zeros at {base:#x}, on a page discarded behind tiermem's back, failed: {e}"
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
    // SAFETY: the evictor owns the page (`Evicting`) and waits on this very
    // fault.
    match unsafe { install_zeros(rt, base, true) } {
        true => rt
            .copy_watch
            .note_zeroed(fault.address & !(rt.page_size - 1)),
        false => rt.uffd.wake(base, rt.base_page),
    }
    true
}
