//! Pages that must stay in DRAM: pinned by I/O in flight, or locked.
//!
//! - **I/O.** A read into a tiered buffer may be a device's DMA (O_DIRECT,
//!   or a FUSE file in direct I/O mode): the kernel pins the pages and the
//!   device writes them while no page table entry is involved. A page
//!   evicted meanwhile would be unmapped, its old bytes saved, and the
//!   read's bytes would land in a page nothing maps any more. The
//!   interposer pins the buffer's pages around such calls.
//! - **Locks.** `mlock`ed memory may hold secrets that must never reach a
//!   disk; a locked page is never evicted (nor written to the store).
//!
//! One 16-bit word per page, lazily committed: a count of I/O pins, and
//! one bit for a lock.
//!
//! **Asynchronous I/O** (io_uring, including registered buffers, and AIO)
//! pins pages in the kernel and completes outside any call the interposer
//! sees. Once a program sets up such a context ([`expect_async_io`]),
//! every runtime of the process evicts dirty pages by moving them out with
//! `UFFDIO_MOVE`, which the kernel refuses for a pinned page in the same
//! step that unmaps it (see the evictor's `move_first`).
//!
//! The evictor and a pinner meet as in Dekker's algorithm: the evictor
//! takes a page (`Evicting`), then looks at its pins; a pinner counts its
//! pin, then waits while the page is `Evicting`. With a full fence between
//! each side's write and read, either the evictor sees the pin and leaves
//! the page resident, or the pinner sees the eviction and waits until the
//! page is gone, so the kernel's pinning fault brings it back first.

use std::cell::Cell;
use std::sync::atomic::{fence, AtomicBool, AtomicU16, Ordering};
use std::time::Duration;

use crate::error::Result;
use crate::page_table::{Kind, PageNo, PageTable};
use crate::sys::mem::Mapping;

static ASYNC_IO: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set while this thread sets up one of tiermem's own rings, whose
    /// `io_uring_setup` passes through the same interposed `syscall()` as
    /// the program's (in every mode: the C API's threads are not marked
    /// as tiermem's).
    static OWN_RING_SETUP: Cell<bool> = const { Cell::new(false) };
}

/// Runs `setup`, which makes one of tiermem's own io_uring rings: it does
/// not count as the program's asynchronous I/O.
pub(crate) fn own_ring<T>(setup: impl FnOnce() -> T) -> T {
    let before = OWN_RING_SETUP.with(|own| own.replace(true));
    let ring = setup();
    OWN_RING_SETUP.with(|own| own.set(before));
    ring
}

/// The program set up asynchronous I/O (an io_uring or an AIO context):
/// from now on, pages may be pinned by I/O that no call of the program's
/// brackets. Process-wide and never undone (a ring lives as long as its
/// descriptor, which tiermem does not follow). Calls made while tiermem
/// sets up its own rings are ignored.
pub fn expect_async_io() {
    if OWN_RING_SETUP.try_with(Cell::get).unwrap_or(false) {
        return;
    }
    ASYNC_IO.store(true, Ordering::SeqCst);
}

/// Whether the program has set up asynchronous I/O ([`expect_async_io`]).
pub fn async_io_expected() -> bool {
    ASYNC_IO.load(Ordering::Relaxed)
}

const LOCKED: u16 = 1 << 15;
/// The page is `mprotect`ed without `PROT_READ`: the evictor reads it
/// through `/proc/self/mem`, which ignores protections, instead of the
/// mapping, where the copy would fault (not a reason to keep it in DRAM).
const UNREADABLE: u16 = 1 << 14;
const PIN_MAX: u16 = UNREADABLE - 1;

pub(crate) struct Pins {
    words: Mapping,
    pages: u64,
}

impl Pins {
    pub fn new(pages: u64) -> Result<Pins> {
        let words = Mapping::reserve(pages as usize * 2, "reserving the page pin table")?;
        Ok(Pins { words, pages })
    }

    /// Whether the evictor must leave `page` alone. Call after taking it
    /// (`Evicting`): see the module docs.
    #[inline]
    pub fn keeps_in_dram(&self, page: PageNo) -> bool {
        fence(Ordering::SeqCst);
        self.word(page).load(Ordering::Relaxed) & !UNREADABLE != 0
    }

    /// Whether `page` is locked (`mlock`).
    #[inline]
    pub fn locked(&self, page: PageNo) -> bool {
        self.word(page).load(Ordering::Relaxed) & LOCKED != 0
    }

    /// Whether `page` may not be read through its mapping. Call after
    /// taking it (`Evicting`), as [`Pins::keeps_in_dram`].
    #[inline]
    pub fn unreadable(&self, page: PageNo) -> bool {
        fence(Ordering::SeqCst);
        self.word(page).load(Ordering::Relaxed) & UNREADABLE != 0
    }

    /// Marks `pages` readable or not through their mapping. Before the
    /// kernel takes read access away, the marks are set and any eviction
    /// already copying one of the pages is waited for (the Dekker pairing
    /// of the module docs); after it gives access back, they are cleared.
    /// Only pages whose word was ever written are visited when clearing.
    pub fn set_unreadable(&self, table: &PageTable, pages: std::ops::Range<PageNo>, on: bool) {
        for page in pages.clone() {
            let word = self.word(page);
            if (word.load(Ordering::Relaxed) & UNREADABLE != 0) == on {
                continue;
            }
            match on {
                true => word.fetch_or(UNREADABLE, Ordering::Relaxed),
                false => word.fetch_and(!UNREADABLE, Ordering::Relaxed),
            };
        }
        if on {
            fence(Ordering::SeqCst);
            for page in pages {
                while table.load(page).kind() == Kind::Evicting {
                    table.sleep_while_owned(page, Duration::from_millis(1));
                }
            }
        }
    }

    /// Pins `pages` for I/O, then waits for any eviction of them that
    /// started before the pin to finish.
    pub fn pin_io(&self, table: &PageTable, pages: std::ops::Range<PageNo>) {
        for page in pages.clone() {
            let word = self.word(page);
            let mut cur = word.load(Ordering::Relaxed);
            // Saturates rather than overflow into the lock bit: a page
            // pinned 32,767 times at once stays pinned until all end.
            while cur & PIN_MAX != PIN_MAX {
                match word.compare_exchange_weak(cur, cur + 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => break,
                    Err(seen) => cur = seen,
                }
            }
        }
        fence(Ordering::SeqCst);
        for page in pages {
            while table.load(page).kind() == Kind::Evicting {
                table.sleep_while_owned(page, Duration::from_millis(1));
            }
        }
    }

    /// Ends the pins of [`Pins::pin_io`].
    pub fn unpin_io(&self, pages: std::ops::Range<PageNo>) {
        for page in pages {
            let word = self.word(page);
            let mut cur = word.load(Ordering::Relaxed);
            while cur & PIN_MAX != 0 && cur & PIN_MAX != PIN_MAX {
                match word.compare_exchange_weak(cur, cur - 1, Ordering::Release, Ordering::Relaxed)
                {
                    Ok(_) => break,
                    Err(seen) => cur = seen,
                }
            }
        }
    }

    /// Locks (or unlocks) `pages`: the evictor leaves them in DRAM. As with
    /// mlock(2), locks do not nest. Returns how many pages changed.
    pub fn set_locked(
        &self,
        table: &PageTable,
        pages: std::ops::Range<PageNo>,
        locked: bool,
    ) -> u64 {
        let mut changed = 0;
        for page in pages.clone() {
            let word = self.word(page);
            // Looked at first, so that unlocking a large range writes (and
            // commits) only the words that hold a lock.
            let was = word.load(Ordering::Relaxed) & LOCKED != 0;
            if was == locked {
                continue;
            }
            let before = match locked {
                true => word.fetch_or(LOCKED, Ordering::Relaxed),
                false => word.fetch_and(!LOCKED, Ordering::Relaxed),
            };
            changed += u64::from((before & LOCKED != 0) != locked);
        }
        if locked {
            fence(Ordering::SeqCst);
            for page in pages {
                while table.load(page).kind() == Kind::Evicting {
                    table.sleep_while_owned(page, Duration::from_millis(1));
                }
            }
        }
        changed
    }

    /// In a forked child: no I/O of the parent's is in flight here, and
    /// memory locks are not inherited across fork (mlock(2)).
    pub fn forget_all_in_child(&self) {
        // SAFETY: discards our private copy of the table, which then reads
        // as zeros; nothing holds a reference into it across this call.
        let _ = unsafe {
            crate::sys::raw::madvise(self.words.addr(), self.words.len(), libc::MADV_DONTNEED)
        };
    }

    /// DRAM the pins of `touched_pages` pages take.
    pub fn committed_bytes(&self, touched_pages: u64) -> u64 {
        touched_pages * 2
    }

    fn word(&self, page: PageNo) -> &AtomicU16 {
        assert!((page as u64) < self.pages);
        // SAFETY: the mapping holds `pages` zero-initialised u16s, 2-byte
        // aligned (page-aligned base), and lives as long as `self`.
        unsafe { &*(self.words.as_ptr() as *const AtomicU16).add(page as usize) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_count_and_locks_are_a_flag() {
        let table = PageTable::new(8).unwrap();
        let pins = Pins::new(8).unwrap();
        pins.pin_io(&table, 2..4);
        pins.pin_io(&table, 3..5);
        assert!(!pins.keeps_in_dram(1));
        assert!(pins.keeps_in_dram(2) && pins.keeps_in_dram(3) && pins.keeps_in_dram(4));
        pins.unpin_io(2..4);
        assert!(!pins.keeps_in_dram(2));
        assert!(pins.keeps_in_dram(3), "still pinned once");
        pins.unpin_io(3..5);
        assert!(!pins.keeps_in_dram(3) && !pins.keeps_in_dram(4));

        assert_eq!(pins.set_locked(&table, 0..3, true), 3);
        assert_eq!(pins.set_locked(&table, 1..2, true), 0, "locks do not nest");
        pins.pin_io(&table, 1..2);
        assert_eq!(pins.set_locked(&table, 1..2, false), 1);
        assert!(pins.keeps_in_dram(1), "the I/O pin outlives the unlock");
        pins.unpin_io(1..2);
        assert!(!pins.keeps_in_dram(1));
        assert_eq!(pins.set_locked(&table, 0..8, false), 2);
    }

    #[test]
    fn unreadable_pages_are_not_kept_and_keep_their_pins() {
        let table = PageTable::new(4).unwrap();
        let pins = Pins::new(4).unwrap();
        pins.set_unreadable(&table, 0..2, true);
        assert!(pins.unreadable(0) && pins.unreadable(1) && !pins.unreadable(2));
        assert!(!pins.keeps_in_dram(0), "unreadable is no reason to stay");
        pins.pin_io(&table, 1..2);
        assert!(pins.keeps_in_dram(1));
        pins.set_unreadable(&table, 0..4, false);
        assert!(
            !pins.unreadable(1) && pins.keeps_in_dram(1),
            "the pin stays"
        );
        pins.unpin_io(1..2);
        assert!(!pins.keeps_in_dram(1));
    }

    #[test]
    fn unpinning_an_unpinned_page_leaves_the_lock() {
        let table = PageTable::new(4).unwrap();
        let pins = Pins::new(4).unwrap();
        pins.set_locked(&table, 0..1, true);
        pins.unpin_io(0..1);
        assert!(pins.keeps_in_dram(0));
    }
}
