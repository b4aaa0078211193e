//! Eviction that lets the kernel say whether a dirty page is pinned.
//!
//! Asynchronous I/O (io_uring, including registered buffers, and AIO)
//! writes a buffer by DMA while the kernel holds a pin on its pages, and
//! completes outside any call tiermem sees; write protection does not stop
//! a device. Once a program has set such I/O up (`pins::expect_async_io`,
//! or `TIERMEM_ASYNC_IO=on`), each dirty victim is first moved out of the
//! tiered region into a staging page with `UFFDIO_MOVE`, then copied from
//! there. The kernel clears the page table entry and checks the pin count
//! in one step, so either the page leaves with every byte any I/O wrote
//! to it (later I/O faults it back in), or the kernel keeps it where it is
//! and it stays resident, counted in `pinned_skips`.
//!
//! Clean victims need no move: they are write-protected, so I/O that
//! would write one faults first, and the handler marks it dirty. A pin
//! that only reads a page (an `O_DIRECT` write from it) keeps the old page
//! alive and unchanged, so unmapping it loses nothing.
//!
//! The kernel also refuses to move a page that is not exclusively the
//! process's: one shared with a forked child, or shared once and not
//! written since. A pinned page is always exclusive (the kernel unshares
//! a page before it pins it, and copies pinned pages at fork), so the
//! page map decides a refusal:
//! - mapped by another process too: not pinned; evicted the usual way;
//! - mapped here only, present and not write-protected: unshared with a
//!   write fault that keeps its bytes (`MADV_POPULATE_WRITE`), which the
//!   kernel serves alone (no userfaultfd event: the page is present and
//!   not write-protected, and the evictor owns it), then moved again;
//!   refused again, it is pinned;
//! - anything else: kept resident, as a pinned page is.
//!
//! A move costs one ioctl and one TLB shootdown per page, where zaps
//! share one shootdown per batch; programs without asynchronous I/O do
//! not pay it.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::frames::BATCH;
use crate::io_config::AsyncIo;
use crate::shared::Shared;
use crate::sys::mem::{zap, Mapping};
use crate::sys::uffd::MoveOut;

/// Empty pages, registered with the userfaultfd, that dirty victims are
/// moved to (`UFFDIO_MOVE` needs a registered, empty destination).
pub(super) struct Staging {
    pages: Mapping,
    page_size: usize,
    used: usize,
    /// /proc/self/pagemap, to tell a pinned page from a shared one.
    pagemap: File,
}

/// `MADV_POPULATE_WRITE` (Linux 5.14; missing from older libc bindings).
const MADV_POPULATE_WRITE: i32 = 23;

/// Bits of a /proc/PID/pagemap entry (Documentation/admin-guide/mm/pagemap.rst).
const PM_PRESENT: u64 = 1 << 63;
const PM_UFFD_WP: u64 = 1 << 57;
const PM_MMAP_EXCLUSIVE: u64 = 1 << 56;

/// Where an owned victim's bytes are read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    /// Still mapped at its address (write-protected before the copy).
    Mapped,
    /// Moved out to this staging address; its own address is empty.
    Staged(usize),
}

/// Whether dirty victims must be moved out first.
pub(super) fn wanted(rt: &Shared) -> bool {
    match rt.config.io.async_io {
        AsyncIo::Off => false,
        AsyncIo::On => true,
        AsyncIo::Auto => crate::pins::async_io_expected(),
    }
}

impl Staging {
    /// Staging for one batch, or `None` (said once on stderr) where the
    /// kernel has no `UFFDIO_MOVE`: then pages under asynchronous I/O may
    /// be evicted mid-I/O, as before Linux 6.8.
    pub(super) fn new(rt: &Shared) -> Option<Staging> {
        if !rt.uffd.can_move() {
            eprintln!(
                "tiermem: warning: the program uses asynchronous I/O (io_uring or AIO), and this \
                 kernel has no UFFDIO_MOVE (Linux 6.8+) to tell which pages such I/O has pinned; \
                 a page evicted while a read into it is in flight loses that read's bytes"
            );
            return None;
        }
        let len = BATCH * rt.page_size;
        let pages = match Mapping::reserve(len, "reserving the eviction staging pages") {
            Ok(m) => m,
            Err(e) => rt.fatal(&format!("{e}")),
        };
        if let Err(e) = rt.uffd.register(pages.addr(), len) {
            rt.fatal(&format!("registering the eviction staging pages: {e}"));
        }
        let pagemap = match File::open("/proc/self/pagemap") {
            Ok(f) => f,
            Err(e) => rt.fatal(&format!("opening /proc/self/pagemap: {e}")),
        };
        Some(Staging {
            pages,
            page_size: rt.page_size,
            used: 0,
            pagemap,
        })
    }

    /// Moves the dirty page at `addr`, which the evictor owns, out.
    /// `Some(source)` if it may be evicted from there, `None` if it must
    /// stay (pinned, as far as the kernel and the page map tell).
    pub(super) fn take(&mut self, rt: &Shared, addr: usize) -> Option<Source> {
        match self.move_to_staging(rt, addr) {
            MoveOut::Moved => return Some(self.staged()),
            // A range that cannot move (mprotect'ed read-only) cannot be
            // written by I/O either: the usual path is safe.
            MoveOut::Unsupported => return Some(Source::Mapped),
            MoveOut::Busy => {}
        }
        let entry = self.pagemap_entry(rt, addr);
        if entry & PM_PRESENT != 0 && entry & PM_MMAP_EXCLUSIVE == 0 {
            return Some(Source::Mapped); // shared with another process
        }
        if entry & PM_PRESENT == 0 || entry & PM_UFFD_WP != 0 || !unshare(addr, self.page_size) {
            return None;
        }
        match self.move_to_staging(rt, addr) {
            MoveOut::Moved => Some(self.staged()),
            MoveOut::Unsupported => Some(Source::Mapped),
            MoveOut::Busy => None,
        }
    }

    fn move_to_staging(&self, rt: &Shared, addr: usize) -> MoveOut {
        debug_assert!(self.used < BATCH);
        let dst = self.pages.addr() + self.used * self.page_size;
        match rt.uffd.move_page(dst, addr, self.page_size) {
            Ok(outcome) => outcome,
            Err(e) => rt.fatal(&format!(
                "moving the page at {addr:#x} out for eviction failed: {e}"
            )),
        }
    }

    /// Counts the page just moved into staging; its address.
    fn staged(&mut self) -> Source {
        let dst = self.pages.addr() + self.used * self.page_size;
        self.used += 1;
        Source::Staged(dst)
    }

    /// The page map entry of `addr`; 0 (not present) if it cannot be read.
    fn pagemap_entry(&self, rt: &Shared, addr: usize) -> u64 {
        let mut entry = [0u8; 8];
        let offset = (addr / rt.page_size) as u64 * 8;
        match self.pagemap.read_exact_at(&mut entry, offset) {
            Ok(()) => u64::from_ne_bytes(entry),
            Err(_) => 0,
        }
    }

    /// Puts a staged page back at its empty address (no frame to copy it
    /// into), waking any thread that faulted on it meanwhile.
    pub(super) fn put_back(&self, rt: &Shared, staged: usize, addr: usize) {
        match rt.uffd.move_page(addr, staged, self.page_size) {
            Ok(MoveOut::Moved) => {}
            other => rt.fatal(&format!(
                "putting the page at {addr:#x} back from eviction staging failed: {other:?}"
            )),
        }
    }

    /// Empties the staging pages used by this batch, once their bytes are
    /// copied: the next batch moves into empty pages again.
    pub(super) fn clear(&mut self, rt: &Shared) {
        if self.used == 0 {
            return;
        }
        if let Err(e) = zap(self.pages.addr(), self.used * self.page_size) {
            rt.fatal(&format!("emptying the eviction staging pages failed: {e}"));
        }
        self.used = 0;
    }
}

/// Makes the present, writable page at `addr` exclusively the process's
/// with a write fault that keeps its bytes. Whether it worked.
fn unshare(addr: usize, len: usize) -> bool {
    // SAFETY: a write fault on the process's own present page, which the
    // caller owns and has checked is not write-protected by userfaultfd;
    // MADV_POPULATE_WRITE does not change the page's contents.
    unsafe { libc::madvise(addr as *mut libc::c_void, len, MADV_POPULATE_WRITE) == 0 }
}
