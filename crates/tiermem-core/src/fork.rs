//! fork without exec.
//!
//! Without `UFFD_FEATURE_EVENT_FORK` (which needs CAP_SYS_PTRACE) a child's
//! copy of the arena loses its userfaultfd registration: every evicted page
//! would read as zeros there. tiermem therefore gives the child a pager of
//! its own over an exact copy of the memory:
//!
//! - **Before fork** the runtime threads park at safe points, so no page is
//!   half-way through a transition, and the allocators' locks are held.
//! - **The child** registers its arena with a fresh userfaultfd, write-
//!   protects what is resident (so it sees its own first writes), and starts
//!   its own threads. Resident pages are the kernel's copy-on-write copies;
//!   evicted pages are read from the *parent's* slots, read-only; whatever
//!   the child writes back goes to a private file of its own. Its budget
//!   is its own, equal to the parent's.
//! - **The parent** keeps running at once. Slots it frees are parked, not
//!   reused, while any child may still read them. A pipe per fork tells when
//!   that ends: the child holds its write end, close-on-exec, so the pipe
//!   reports end-of-file once the child (and any descendant sharing its
//!   memory) has exited or exec'd.
//!
//! `vfork`, `posix_spawn` and `system` share memory until exec and run no
//! fork handlers: they stay cheap.

use std::cell::UnsafeCell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::MutexGuard;

use crate::error::{Error, Result};
use crate::ranges::RangeAllocator;
use crate::runtime::{start_threads, Runtime, Shared};
use crate::store::{FileStore, ForkedStore, SlotAllocator, Store};

/// What `prepare_fork` holds until the fork is over on both sides.
struct InFlight {
    _ranges: MutexGuard<'static, RangeAllocator>,
    _lazy: MutexGuard<'static, RangeAllocator>,
    lease: Option<(OwnedFd, OwnedFd)>,
}

/// glibc runs fork handlers under its own lock, one fork at a time, on the
/// forking thread: this slot is only touched there.
struct ForkSlot(UnsafeCell<Option<InFlight>>);
// SAFETY: see above; accesses are serialised by glibc's atfork lock.
unsafe impl Sync for ForkSlot {}
static IN_FLIGHT: ForkSlot = ForkSlot(UnsafeCell::new(None));

impl Runtime {
    /// Call right before fork (a `pthread_atfork` prepare handler).
    pub fn prepare_fork(&'static self) {
        let rt = self.shared();
        let ranges = rt.ranges.lock().unwrap_or_else(|p| p.into_inner());
        let lazy = rt.lazy.lock().unwrap_or_else(|p| p.into_inner());
        rt.slots().start_deferring();
        let lease = lease_pipe();
        if lease.is_none() {
            eprintln!(
                "tiermem: could not create a fork lease pipe; slots freed from now on stay parked"
            );
        }
        rt.pause
            .pause_all(rt.config.handler_threads + 1, || rt.kick_evictor());
        // SAFETY: only the forking thread touches the slot (see ForkSlot).
        unsafe {
            *IN_FLIGHT.0.get() = Some(InFlight {
                _ranges: ranges,
                _lazy: lazy,
                lease,
            })
        };
    }

    /// Call in the parent right after fork.
    pub fn after_fork_parent(&'static self) {
        let rt = self.shared();
        // SAFETY: as in `prepare_fork`.
        let in_flight = unsafe { (*IN_FLIGHT.0.get()).take() };
        if let Some(InFlight {
            lease: Some((read, _write)),
            ..
        }) = in_flight
        {
            rt.fork_leases
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(read);
        }
        rt.pause.resume();
    }

    /// Call in the child right after fork, before anything else runs.
    ///
    /// # Safety
    /// Only in a freshly forked child, on its only thread, with no borrow
    /// of the runtime's store or slot allocator alive.
    pub unsafe fn after_fork_child(&'static self) -> Result<()> {
        let rt = self.shared();
        let in_flight = (*IN_FLIGHT.0.get()).take();
        if let Some(InFlight {
            lease: Some((_read, write)),
            ..
        }) = in_flight
        {
            // Held until this process exits or execs.
            std::mem::forget(write);
        }
        // Leases of our siblings are the parent's business.
        rt.fork_leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        rt.stop_event.replace_in_child()?;
        rt.read_ahead_event.replace_in_child()?;
        rt.pause.reset_in_child()?;
        self.take_over_arena()?;
        self.switch_to_own_store()?;
        if let Some(cipher) = &rt.cipher {
            cipher.rekey_in_child()?;
        }
        // The threads run until the process exits or execs.
        std::mem::forget(start_threads(self.shared_ref())?);
        Ok(())
    }

    /// Registers the child's copy of the arena with a userfaultfd of its own
    /// and write-protects what is mapped, so dirty tracking holds here too.
    fn take_over_arena(&self) -> Result<()> {
        let rt = self.shared();
        rt.uffd.replace_in_child()?;
        let (start, end) = self.arena_bounds();
        rt.uffd.register(start, end - start)?;
        rt.uffd
            .write_protect(start, end - start, true)
            .map_err(|source| Error::Os {
                what: "write-protecting the child's resident pages",
                source,
            })
    }

    /// The parent's slots become read-only; new writes go to a file of our own.
    unsafe fn switch_to_own_store(&self) -> Result<()> {
        let rt = self.shared();
        let own = FileStore::open(&child_backing_dir(rt), rt.page_size, None)?;
        own.warn_if_buffered();
        let boundary = rt.store().slot_span();
        let capacity = own.capacity_slots();
        rt.store_cell()
            .replace_in_child(|inherited| Box::new(ForkedStore::new(inherited, own)));
        rt.slots_cell()
            .replace_in_child(|_| Box::new(SlotAllocator::with_base(boundary, capacity)));
        Ok(())
    }
}

impl Shared {
    /// Ends the leases of children that have exited or exec'd.
    pub fn poll_fork_leases(&self) {
        let mut leases = self.fork_leases.lock().unwrap_or_else(|p| p.into_inner());
        if leases.is_empty() {
            return;
        }
        leases.retain(|fd| {
            let mut byte = 0u8;
            // SAFETY: a non-blocking read of one byte into a valid buffer.
            let n = unsafe { libc::read(fd.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) };
            let ended = n == 0;
            if ended {
                self.slots().stop_deferring();
            }
            !ended
        });
    }
}

/// Where a child's own backing file goes: the backing directory, or for a
/// file or block device, the default directory.
fn child_backing_dir(rt: &Shared) -> PathBuf {
    let backing = &rt.config.backing;
    if backing.is_dir() {
        backing.clone()
    } else {
        PathBuf::from(crate::config::DEFAULT_BACKING_DIR)
    }
}

/// A non-blocking, close-on-exec pipe: (read end, write end).
fn lease_pipe() -> Option<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if rc != 0 {
        return None;
    }
    // SAFETY: both descriptors are fresh and now owned here.
    Some(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
