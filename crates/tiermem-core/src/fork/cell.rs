//! What the fork handlers hold between prepare and parent or child: the
//! cell only the forking thread touches, and what it holds for one runtime
//! (the locks program threads may take, the lease pipe, the slots a child
//! may read). The runtime's shared state keeps one per runtime.

use std::cell::UnsafeCell;
use std::os::fd::OwnedFd;
use std::sync::{Arc, MutexGuard};

use crate::page_table::PageNo;
use crate::ranges::RangeAllocator;
use crate::store::HeldSlots;

/// State only the forking thread touches, between the prepare handler and
/// the parent's or child's. Forks are serialised by `LIVE`'s lock, which
/// `prepare_all` takes and `parent_all`/`child_all` release (glibc drops
/// its own atfork lock around each handler call).
pub(crate) struct ForkCell<T>(UnsafeCell<T>);
// SAFETY: see above; every access happens under `LIVE`'s lock, on the
// thread that holds it.
unsafe impl<T> Sync for ForkCell<T> {}
// SAFETY: the contents (lock guards among them) are put and taken by the
// forking thread alone, so a guard is released by the thread that took
// its lock (in the child, that thread's only copy); no other thread ever
// reaches them, whichever thread owns the runtime.
unsafe impl<T> Send for ForkCell<T> {}

impl<T> ForkCell<T> {
    pub(crate) const fn new(value: T) -> ForkCell<T> {
        ForkCell(UnsafeCell::new(value))
    }
}

impl<T: Default> ForkCell<T> {
    pub(crate) fn empty() -> ForkCell<T> {
        ForkCell(UnsafeCell::new(T::default()))
    }

    /// # Safety
    /// Only on the forking thread, inside the fork handlers.
    pub(super) unsafe fn put(&self, value: T) {
        *self.0.get() = value;
    }

    /// # Safety
    /// As for `put`.
    pub(super) unsafe fn take(&self) -> T {
        std::mem::take(&mut *self.0.get())
    }
}

/// What `prepare` holds for one runtime until the fork is over.
#[derive(Default)]
pub(crate) struct InFlight {
    pub(super) locks: Option<ForkLocks>,
    pub(super) lease: Option<(OwnedFd, OwnedFd)>,
    /// The slots the child may read of ours, shared with it.
    pub(super) held: Option<Arc<HeldSlots>>,
}

/// The locks program threads may hold, taken so that the child's copies
/// are whole and unlocked. `'static` because the runtime outlives them: it
/// stays in `LIVE`, whose lock is held for as long.
pub(super) struct ForkLocks {
    pub(super) _ranges: MutexGuard<'static, RangeAllocator>,
    pub(super) _lazy: MutexGuard<'static, RangeAllocator>,
    pub(super) _locked: MutexGuard<'static, Vec<std::ops::Range<PageNo>>>,
    pub(super) _wipe_on_fork: MutexGuard<'static, rangemap::RangeSet<PageNo>>,
}
