//! The page the evictor is copying, watched by threads waiting for DRAM.
//!
//! The evictor copies each dirty victim through its mapping. If the program
//! discarded the page with a system call of its own (`discarded`), the
//! mapping is gone and the copy faults; a handler serves that fault with
//! zeros, unless every handler is waiting for DRAM, which only the evictor
//! frees. So the evictor says which page it is copying, and a thread
//! waiting for DRAM that finds it on the same page at two of its checks
//! installs the zeros itself. This state carries no reference to the
//! runtime, which holds it.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sys::uffd::{Copied, Uffd};

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
    pub(crate) fn note_zeroed(&self, page_addr: usize) {
        self.zeroed.store(page_addr, Ordering::SeqCst);
    }

    /// From a thread waiting for DRAM: if the evictor has been copying the
    /// same page since the last check, its mapping may be gone and the
    /// evictor stuck in a fault no handler will read. Zeros go on each
    /// base page of it (`zeros` holds a base page of them); the kernel
    /// refuses them (`EEXIST`) where the page is mapped after all. Returns
    /// how many base pages got zeros.
    pub(crate) fn unblock_a_stuck_copy(
        &self,
        uffd: &Uffd,
        zeros: *const u8,
        page_size: usize,
        base_page: usize,
    ) -> io::Result<u64> {
        let addr = self.copying.load(Ordering::SeqCst);
        if addr == 0 || addr & RESCUING != 0 || self.seen.swap(addr, Ordering::SeqCst) != addr {
            return Ok(0);
        }
        let marked = self.copying.compare_exchange(
            addr,
            addr | RESCUING,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        if marked.is_err() {
            return Ok(0);
        }
        let mut zeroed = 0;
        let mut result = Ok(());
        for base in (addr..addr + page_size).step_by(base_page) {
            // SAFETY: the evictor owns the page (`Evicting`) and cannot
            // finish its copy, let alone unmap the page, until the mark is
            // cleared; the caller vouches for `zeros`.
            match unsafe { zero_fill(uffd, base, zeros, base_page, true) } {
                Ok(true) => zeroed += 1,
                Ok(false) => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if zeroed > 0 {
            self.note_zeroed(addr);
        }
        self.copying.store(addr, Ordering::SeqCst);
        result.map(|()| zeroed)
    }
}

/// Installs one base page of zeros at `base` (write-protected when asked)
/// and wakes its waiters: true if they went in, false if the kernel found
/// the page mapped or asks for a retry (the faulting thread's next fault
/// makes it).
///
/// # Safety
/// `zeros` holds `base_page` zero bytes; `base` is a base page of a
/// registered page that the caller (or the evictor, which cannot unmap it
/// meanwhile) owns.
pub(crate) unsafe fn zero_fill(
    uffd: &Uffd,
    base: usize,
    zeros: *const u8,
    base_page: usize,
    write_protect: bool,
) -> io::Result<bool> {
    // SAFETY: as the caller vouches.
    let copied = unsafe { uffd.copy(base, zeros, base_page, write_protect, true) }?;
    Ok(matches!(copied, Copied::Done))
}
