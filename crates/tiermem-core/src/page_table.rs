//! Flat per-page state: one atomic word per tiermem page.
//!
//! Finding a page's state must not be a search: a user-space Memory Mode
//! that kept its pages in linked lists spent 96% of its time searching them
//! ("An Analysis and Software Reimplementation of Intel Optane DC Memory
//! Mode"). Here a page's number is an index, its state is one `AtomicU64`, and
//! every transition is a compare-and-swap. Whoever moves a page into a busy
//! kind (`Loading`, `Evicting`) owns it exclusively until it moves it out.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::error::Result;
use crate::owner_waits::OwnerWaits;
use crate::policy::huge_regions::HugeRegions;
use crate::sys::mem::Mapping;

/// Where a page's content is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Not part of any allocation.
    Free = 0,
    /// Allocated, all zeros, not mapped, no slot.
    Zero = 1,
    /// Mapped in DRAM.
    Resident = 2,
    /// Not mapped; the content is in the page's store slot.
    Stored = 3,
    /// A handler thread is installing it (owned).
    Loading = 4,
    /// The evictor is taking it out (owned).
    Evicting = 5,
    /// Not mapped; the content waits in a DRAM frame. A touch brings it back
    /// without I/O and counts as a reference.
    Probation = 6,
    /// Not mapped, and its content is lost: its slot could not be read. The
    /// page table entry is a poison marker, so an access gets SIGBUS.
    Poisoned = 7,
    /// Not mapped; the content is compressed in the runtime's DRAM pool
    /// (`compress`), at the handle kept in the page's frame word. A clean
    /// one still has its slot, which stays valid.
    Compressed = 8,
    /// Allocated, but the program mapped something tiermem does not tier
    /// over it (a file, shared memory) with `MAP_FIXED`: that mapping is
    /// not registered with userfaultfd, so no fault of it reaches the
    /// runtime, and nothing the runtime does may install a page here.
    Foreign = 9,
}

/// Every change of a page's kind the runtime makes, by the kind it leaves:
/// whoever changes a page's kind makes one of these, which debug builds
/// check at every change ([`legal_transition`]). A change of flags alone
/// (dirty, referenced, queued, prefetched, the slot) keeps the kind and is
/// always legal.
const TRANSITIONS: [(Kind, &[Kind]); 10] = [
    // Allocated (zero-filled); in the lazily committed zone a first touch
    // claims it directly.
    (Kind::Free, &[Kind::Zero, Kind::Loading, Kind::Foreign]),
    // Claimed for a zero fill; freed, or discarded into the lazy zone.
    (Kind::Zero, &[Kind::Loading, Kind::Free, Kind::Foreign]),
    // A write to a clean page; taken by the evictor or a set conflict;
    // freed or discarded.
    (
        Kind::Resident,
        &[Kind::Loading, Kind::Evicting, Kind::Free, Kind::Zero],
    ),
    // Claimed for a read; freed or discarded.
    (Kind::Stored, &[Kind::Loading, Kind::Free, Kind::Zero]),
    // Installed; parked as a read-ahead marker; given back unread, as it
    // was, when a claim or a read-ahead falls through; lost to a failed
    // read.
    (
        Kind::Loading,
        &[
            Kind::Resident,
            Kind::Probation,
            Kind::Zero,
            Kind::Stored,
            Kind::Compressed,
            Kind::Free,
            Kind::Poisoned,
        ],
    ),
    // Demoted into probation, dropped or written out, found all-zero,
    // compressed; or put back as it was when it could not leave.
    (
        Kind::Evicting,
        &[
            Kind::Probation,
            Kind::Stored,
            Kind::Zero,
            Kind::Compressed,
            Kind::Resident,
        ],
    ),
    // A touch brings it back; it leaves DRAM; freed or discarded.
    (
        Kind::Probation,
        &[Kind::Loading, Kind::Evicting, Kind::Free, Kind::Zero],
    ),
    // Only freed or discarded: its content is gone.
    (Kind::Poisoned, &[Kind::Free, Kind::Zero]),
    // A fault decompresses it; the pool writes it back or moves it; freed
    // or discarded.
    (
        Kind::Compressed,
        &[Kind::Loading, Kind::Evicting, Kind::Free, Kind::Zero],
    ),
    // Given back to tiered memory when the program unmaps or replaces the
    // foreign mapping.
    (Kind::Foreign, &[Kind::Free, Kind::Zero]),
];

/// Whether a page may go from kind `from` to kind `to` (see
/// [`TRANSITIONS`]).
pub fn legal_transition(from: Kind, to: Kind) -> bool {
    from == to
        || TRANSITIONS
            .iter()
            .any(|(kind, to_kinds)| *kind == from && to_kinds.contains(&to))
}

/// In debug builds, stops at a change of `page`'s kind that is not in the
/// table; nothing in release builds.
#[inline]
fn debug_assert_legal(page: PageNo, from: PageState, to: PageState) {
    debug_assert!(
        legal_transition(from.kind(), to.kind()),
        "page {page}: {from:?} -> {to:?} is not a legal transition"
    );
}

const KIND_MASK: u64 = 0xf;
/// The DRAM copy differs from the slot (or there is no slot).
const DIRTY: u64 = 1 << 4;
/// Referenced since the policy last looked.
const REFERENCED: u64 = 1 << 5;
/// The page has an entry in the policy's queue.
const QUEUED: u64 = 1 << 6;
/// Read ahead, and not yet known to have been used.
const PREFETCHED: u64 = 1 << 7;
const SLOT_SHIFT: u32 = 16;

/// A decoded copy of a page's state word.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PageState(u64);

impl PageState {
    pub const FREE: PageState = PageState(0);

    /// Loading or evicting: a thread owns the page until it calls
    /// [`PageTable::finish`].
    pub fn is_owned(self) -> bool {
        matches!(self.kind(), Kind::Loading | Kind::Evicting)
    }

    pub fn kind(self) -> Kind {
        match self.0 & KIND_MASK {
            0 => Kind::Free,
            1 => Kind::Zero,
            2 => Kind::Resident,
            3 => Kind::Stored,
            4 => Kind::Loading,
            5 => Kind::Evicting,
            6 => Kind::Probation,
            7 => Kind::Poisoned,
            8 => Kind::Compressed,
            _ => Kind::Foreign,
        }
    }
    pub fn is_dirty(self) -> bool {
        self.0 & DIRTY != 0
    }
    pub fn is_referenced(self) -> bool {
        self.0 & REFERENCED != 0
    }
    pub fn is_prefetched(self) -> bool {
        self.0 & PREFETCHED != 0
    }
    pub fn with_prefetched(self, prefetched: bool) -> PageState {
        PageState(if prefetched {
            self.0 | PREFETCHED
        } else {
            self.0 & !PREFETCHED
        })
    }
    pub fn is_queued(self) -> bool {
        self.0 & QUEUED != 0
    }
    /// The store slot holding this page's clean copy, if any.
    pub fn slot(self) -> Option<u64> {
        match self.0 >> SLOT_SHIFT {
            0 => None,
            s => Some(s - 1),
        }
    }

    pub fn with_kind(self, kind: Kind) -> PageState {
        PageState(self.0 & !KIND_MASK | kind as u64)
    }
    pub fn with_dirty(self, dirty: bool) -> PageState {
        PageState(if dirty {
            self.0 | DIRTY
        } else {
            self.0 & !DIRTY
        })
    }
    pub fn with_referenced(self, referenced: bool) -> PageState {
        PageState(if referenced {
            self.0 | REFERENCED
        } else {
            self.0 & !REFERENCED
        })
    }
    pub fn with_queued(self, queued: bool) -> PageState {
        PageState(if queued {
            self.0 | QUEUED
        } else {
            self.0 & !QUEUED
        })
    }
    pub fn with_slot(self, slot: Option<u64>) -> PageState {
        let field = slot.map_or(0, |s| s + 1);
        PageState(self.0 & ((1 << SLOT_SHIFT) - 1) | field << SLOT_SHIFT)
    }
}

impl std::fmt::Debug for PageState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.kind())?;
        if self.is_dirty() {
            f.write_str("+dirty")?;
        }
        if self.is_referenced() {
            f.write_str("+ref")?;
        }
        if self.is_prefetched() {
            f.write_str("+prefetched")?;
        }
        if self.is_queued() {
            f.write_str("+queued")?;
        }
        if let Some(s) = self.slot() {
            write!(f, "@slot{s}")?;
        }
        Ok(())
    }
}

/// A page number inside the arena.
pub type PageNo = u32;

/// Largest arena, in pages: page numbers are u32 and slots fit in 48 bits.
pub const MAX_PAGES: u64 = u32::MAX as u64;

/// The state words of every page of the arena, the frame index of each page
/// in probation, and each page's heat (see `policy::heat`). The arrays live
/// in lazily committed anonymous memory, so an arena of millions of pages
/// costs only what is touched.
pub struct PageTable {
    states: Mapping,
    frames: Mapping,
    heat: Mapping,
    regions: HugeRegions,
    pages: u64,
    /// Only under signal delivery do threads wait for a page's owner here
    /// (handler threads wait in the kernel); elsewhere releasing a page
    /// stays a bare CAS.
    owner_waits: Option<OwnerWaits>,
}

impl PageTable {
    /// A table for `pages` pages of 4 KiB, as the unit tests build one.
    #[cfg(test)]
    pub fn new(pages: u64) -> Result<PageTable> {
        PageTable::with_page_size(pages, 4096)
    }

    /// A table for `pages` pages of `page_size` bytes: how many pages make
    /// a huge region depends on it.
    pub fn with_page_size(pages: u64, page_size: usize) -> Result<PageTable> {
        assert!(pages <= MAX_PAGES, "arena too large for u32 page numbers");
        let n = pages as usize;
        Ok(PageTable {
            states: Mapping::reserve(n * 8, "reserving the page-state table")?,
            frames: Mapping::reserve(n * 4, "reserving the probation frame table")?,
            heat: Mapping::reserve(n, "reserving the page heat table")?,
            regions: HugeRegions::new(pages, page_size)?,
            pages,
            owner_waits: None,
        })
    }

    /// A table whose busy pages can be waited for with
    /// [`Self::sleep_while_owned`] (signal delivery).
    pub fn with_owner_waits(pages: u64, page_size: usize) -> Result<PageTable> {
        Ok(PageTable {
            owner_waits: Some(OwnerWaits::default()),
            ..PageTable::with_page_size(pages, page_size)?
        })
    }

    /// Pages the table covers.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    #[inline]
    fn word(&self, page: PageNo) -> &AtomicU64 {
        assert!((page as u64) < self.pages);
        // SAFETY: the mapping holds `pages` zero-initialised u64s, suitably
        // aligned (page-aligned base), and lives as long as `self`; AtomicU64
        // has the same layout as u64.
        unsafe { &*(self.states.as_ptr() as *const AtomicU64).add(page as usize) }
    }

    #[inline]
    pub fn load(&self, page: PageNo) -> PageState {
        PageState(self.word(page).load(Ordering::Acquire))
    }

    /// Moves `page` from `old` to `new`; false if someone changed it first.
    #[inline]
    pub fn transition(&self, page: PageNo, old: PageState, new: PageState) -> bool {
        debug_assert_legal(page, old, new);
        self.word(page)
            .compare_exchange(old.0, new.0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Publishes the new state of a page the caller owns (`Loading` or
    /// `Evicting`). The `QUEUED` bit belongs to the policy's queue, which may
    /// flip it concurrently, so it is carried over rather than overwritten.
    /// Threads sleeping in [`Self::sleep_while_owned`] are woken.
    pub fn finish(&self, page: PageNo, new: PageState) {
        self.update(page, |cur| new.with_queued(cur.is_queued()));
        if let Some(waits) = &self.owner_waits {
            waits.released();
        }
    }

    /// Sleeps until `page` is no longer owned (`Loading`, `Evicting`), or
    /// for at most `timeout`; may return early, so callers re-check. In a
    /// table made without owner waits it only yields.
    pub fn sleep_while_owned(&self, page: PageNo, timeout: std::time::Duration) {
        match &self.owner_waits {
            Some(waits) => waits.sleep_while(|| self.load(page).is_owned(), timeout),
            None => std::thread::yield_now(),
        }
    }

    /// Sets or clears flag bits with a CAS loop, whatever the kind.
    /// Returns the new state.
    pub fn update(&self, page: PageNo, f: impl Fn(PageState) -> PageState) -> PageState {
        f(self.update_returning_old(page, &f))
    }

    /// Like [`Self::update`] but returns the state it replaced.
    pub fn update_returning_old(
        &self,
        page: PageNo,
        f: impl Fn(PageState) -> PageState,
    ) -> PageState {
        self.update_word(page, |cur| {
            let next = f(cur);
            debug_assert_legal(page, cur, next);
            next
        })
    }

    /// [`Self::update`] without the check of the kind's change: a test's
    /// shortcut to the state it starts from.
    #[cfg(test)]
    pub fn update_unchecked(&self, page: PageNo, f: impl Fn(PageState) -> PageState) -> PageState {
        f(self.update_word(page, &f))
    }

    /// The compare-and-swap loop of [`Self::update_returning_old`].
    fn update_word(&self, page: PageNo, f: impl Fn(PageState) -> PageState) -> PageState {
        let w = self.word(page);
        let mut cur = w.load(Ordering::Acquire);
        loop {
            let next = f(PageState(cur)).0;
            match w.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return PageState(cur),
                Err(actual) => cur = actual,
            }
        }
    }

    #[inline]
    fn frame_word(&self, page: PageNo) -> &AtomicU32 {
        assert!((page as u64) < self.pages);
        // SAFETY: as for `word`, with u32 elements.
        unsafe { &*(self.frames.as_ptr() as *const AtomicU32).add(page as usize) }
    }

    /// Records the frame of a page entering probation. Call before the state
    /// becomes `Probation`; the state's release store publishes it.
    pub fn set_frame(&self, page: PageNo, frame: u32) {
        self.frame_word(page).store(frame, Ordering::Relaxed);
    }

    /// The frame of a page the caller observed in `Probation` and now owns.
    pub fn frame(&self, page: PageNo) -> u32 {
        self.frame_word(page).load(Ordering::Relaxed)
    }

    /// Records where a page entering `Compressed` sits in the pool; the
    /// frame word is free while a page is not in probation. Call before the
    /// state becomes `Compressed`.
    pub fn set_pool_handle(&self, page: PageNo, handle: u32) {
        self.frame_word(page).store(handle, Ordering::Relaxed);
    }

    /// The pool handle of a page the caller observed in `Compressed` and
    /// now owns.
    pub fn pool_handle(&self, page: PageNo) -> u32 {
        self.frame_word(page).load(Ordering::Relaxed)
    }

    /// The heat byte of `page`: its observed uses and CLOCK credits, kept
    /// whatever the page's kind (see `policy::heat`).
    #[inline]
    pub fn heat(&self, page: PageNo) -> &AtomicU8 {
        assert!((page as u64) < self.pages);
        // SAFETY: as for `word`, with u8 elements (no alignment needed).
        unsafe { &*(self.heat.as_ptr() as *const AtomicU8).add(page as usize) }
    }

    /// The 2 MiB regions of memory advised `MADV_HUGEPAGE` (see
    /// `policy::huge_regions`).
    pub fn regions(&self) -> &HugeRegions {
        &self.regions
    }

    /// Released memory starts cold: the heat of what a page held before
    /// says nothing about what is allocated there next.
    pub fn forget_heat(&self, page: PageNo) {
        self.heat(page).store(0, Ordering::Relaxed);
    }

    /// Bytes of page-table memory actually committed (touched) so far.
    pub fn committed_bytes(&self, touched_pages: u64) -> u64 {
        touched_pages * 13
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_word_round_trips_every_field() {
        let s = PageState::FREE
            .with_kind(Kind::Resident)
            .with_dirty(true)
            .with_referenced(true)
            .with_queued(true)
            .with_slot(Some((1 << 40) + 7));
        assert_eq!(s.kind(), Kind::Resident);
        assert!(s.is_dirty() && s.is_referenced() && s.is_queued());
        assert_eq!(s.slot(), Some((1 << 40) + 7));
        let s = s
            .with_slot(None)
            .with_dirty(false)
            .with_kind(Kind::Probation);
        assert_eq!(s.slot(), None);
        assert!(!s.is_dirty() && s.is_queued());
        assert_eq!(s.kind(), Kind::Probation);
        assert_eq!(s.with_slot(Some(0)).slot(), Some(0));
    }

    const KINDS: [Kind; 10] = [
        Kind::Free,
        Kind::Zero,
        Kind::Resident,
        Kind::Stored,
        Kind::Loading,
        Kind::Evicting,
        Kind::Probation,
        Kind::Poisoned,
        Kind::Compressed,
        Kind::Foreign,
    ];

    #[test]
    fn the_transition_table_has_one_row_per_kind() {
        for kind in KINDS {
            let rows = TRANSITIONS.iter().filter(|(from, _)| *from == kind).count();
            assert_eq!(rows, 1, "{kind:?}");
            assert!(legal_transition(kind, kind), "{kind:?} keeps its kind");
        }
    }

    #[test]
    fn only_the_table_s_transitions_are_legal() {
        assert!(legal_transition(Kind::Free, Kind::Zero));
        assert!(legal_transition(Kind::Stored, Kind::Loading));
        assert!(legal_transition(Kind::Loading, Kind::Resident));
        assert!(legal_transition(Kind::Resident, Kind::Evicting));
        assert!(legal_transition(Kind::Evicting, Kind::Probation));
        // A page is installed only by whoever owns it, and leaves DRAM only
        // through the evictor's hands.
        assert!(!legal_transition(Kind::Stored, Kind::Resident));
        assert!(!legal_transition(Kind::Free, Kind::Resident));
        assert!(!legal_transition(Kind::Resident, Kind::Stored));
        assert!(!legal_transition(Kind::Evicting, Kind::Loading));
        assert!(!legal_transition(Kind::Poisoned, Kind::Loading));
        // Nothing is installed where a foreign mapping sits.
        assert!(!legal_transition(Kind::Foreign, Kind::Loading));
        assert!(!legal_transition(Kind::Resident, Kind::Foreign));
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "is not a legal transition")]
    fn an_illegal_transition_stops_a_debug_build() {
        let t = PageTable::new(16).unwrap();
        t.transition(
            2,
            PageState::FREE,
            PageState::FREE.with_kind(Kind::Resident),
        );
    }

    #[test]
    fn transitions_are_exclusive() {
        let t = PageTable::new(1024).unwrap();
        let zero = PageState::FREE.with_kind(Kind::Zero);
        assert!(t.transition(5, PageState::FREE, zero));
        assert!(!t.transition(5, PageState::FREE, zero));
        let loading = zero.with_kind(Kind::Loading);
        assert!(t.transition(5, zero, loading));
        assert!(!t.transition(5, zero, loading), "second owner must lose");
        assert_eq!(t.load(5).kind(), Kind::Loading);
        assert_eq!(t.load(6), PageState::FREE);
    }

    #[test]
    fn finishing_a_page_wakes_whoever_sleeps_on_its_owner() {
        use std::time::{Duration, Instant};
        let t = std::sync::Arc::new(PageTable::with_owner_waits(16, 4096).unwrap());
        let loading = PageState::FREE.with_kind(Kind::Loading);
        assert!(t.transition(3, PageState::FREE, loading));
        let sleeper = {
            let t = std::sync::Arc::clone(&t);
            std::thread::spawn(move || {
                let started = Instant::now();
                while t.load(3).is_owned() {
                    t.sleep_while_owned(3, Duration::from_secs(10));
                }
                started.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        t.finish(3, PageState::FREE.with_kind(Kind::Resident));
        let slept = sleeper.join().expect("the sleeper");
        assert!(slept < Duration::from_secs(5), "slept {slept:?}");
        assert!(!t.load(3).is_owned());
    }
}
