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
//!   its own threads, once it has discarded what the parent advised
//!   `MADV_WIPEONFORK` (`transparent::fork_advice`). Resident pages are the
//!   kernel's copy-on-write copies; evicted pages are read from the
//!   *parent's* slots, read-only; whatever the child writes back goes to a
//!   private file of its own. Its budget is its own, equal to the parent's.
//! - **The parent** keeps running at once. A slot it frees is parked, not
//!   reused, while a child may still read it: each child holds the slots
//!   in use at its fork and lets each go as it stops referring to it (see
//!   `store::held`). A pipe per fork tells when a child's hold ends: the
//!   child holds its write end, close-on-exec, so the pipe reports
//!   end-of-file once the child (and any descendant sharing its memory)
//!   has exited or exec'd.
//!
//! `vfork`, `posix_spawn` and `system` share memory until exec and run no
//! fork handlers: they stay cheap.

pub(crate) mod cell;

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock};

use crate::error::{Error, Result};
use crate::fork::cell::{ForkCell, ForkLocks, InFlight};
use crate::page_table::PageNo;
use crate::ranges::RangeAllocator;
use crate::shared::Shared;
use crate::store::{FileStore, ForkedStore, HeldSlots, ParentHold, SlotAllocator, Store};
use crate::sys::spare_fds;
use crate::threads::start_threads;

/// Every running runtime, through the C API, the preload or the Rust API:
/// the fork handlers serve them all.
static LIVE: Mutex<Vec<Arc<Shared>>> = Mutex::new(Vec::new());

/// What the fork handlers hold from prepare until the fork is over on
/// both sides: the registry, so that no runtime comes or goes meanwhile.
static LIVE_HELD: ForkCell<Option<MutexGuard<'static, Vec<Arc<Shared>>>>> = ForkCell::new(None);

/// The spare descriptors, locked from prepare until the fork is over on
/// both sides, so that the child's copy is never left locked by a thread
/// it does not have (a runtime thread tops the spares up once it starts).
static SPARES_HELD: ForkCell<Option<MutexGuard<'static, spare_fds::Reserve>>> = ForkCell::new(None);

/// How the handlers run: set by a host (the preload) that must mark the
/// forking thread as inside tiermem while they do.
static WRAPPER: OnceLock<fn(&mut dyn FnMut())> = OnceLock::new();

static INSTALLED: Once = Once::new();

/// Serves `shared` in forked children from now on (the handlers are
/// registered with pthread_atfork the first time).
pub(crate) fn register(shared: &Arc<Shared>) {
    INSTALLED.call_once(|| {
        // SAFETY: registers three plain extern "C" functions.
        let rc =
            unsafe { libc::pthread_atfork(Some(prepare_all), Some(parent_all), Some(child_all)) };
        if rc != 0 {
            eprintln!(
                "tiermem: pthread_atfork failed ({rc}); a forked child would lose evicted memory"
            );
        }
    });
    live().push(Arc::clone(shared));
}

/// The runtime is going away: forks no longer concern it.
pub(crate) fn unregister(shared: &Arc<Shared>) {
    let mut runtimes = live();
    runtimes.retain(|s| !Arc::ptr_eq(s, shared));
    if runtimes.is_empty() {
        spare_fds::retire();
    }
}

/// Holds forks off (their prepare handlers wait for this) for as long as
/// the guard lives: a drain of shared memory pauses the runtime itself.
pub(crate) fn hold_off_forks() -> MutexGuard<'static, Vec<Arc<Shared>>> {
    live()
}

fn live() -> MutexGuard<'static, Vec<Arc<Shared>>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes the fork handlers run inside `wrapper`, which calls what it is
/// given once. The preload marks the thread as inside tiermem there, so
/// that what the handlers allocate comes from plain memory.
pub fn set_wrapper(wrapper: fn(&mut dyn FnMut())) {
    let _ = WRAPPER.set(wrapper);
}

fn wrapped(mut f: impl FnMut()) {
    match WRAPPER.get() {
        Some(wrapper) => wrapper(&mut f),
        None => f(),
    }
}

/// The prepare handler: every runtime's threads park at safe points.
/// Public for forks that run no atfork handlers (`_Fork`, raw clone),
/// which a host wraps with these three.
pub extern "C" fn prepare_all() {
    wrapped(|| {
        // Before any lock is taken: a fault in flight may need one.
        crate::fault::signal::fork_gate::close_for_fork();
        let runtimes = live();
        for rt in runtimes.iter() {
            rt.prepare_fork();
        }
        // SAFETY: only the forking thread, inside the handlers.
        unsafe {
            LIVE_HELD.put(Some(runtimes));
            SPARES_HELD.put(Some(spare_fds::reserve()));
        }
    });
}

/// The parent's handler: every runtime goes on.
pub extern "C" fn parent_all() {
    wrapped(|| {
        // SAFETY: only the forking thread, inside the handlers.
        let runtimes = unsafe { LIVE_HELD.take() };
        for rt in runtimes.iter().flat_map(|r| r.iter()) {
            rt.after_fork_parent();
        }
        // SAFETY: only the forking thread, inside the handlers.
        if let Some(mut spares) = unsafe { SPARES_HELD.take() } {
            spares.refill();
        }
        crate::fault::signal::fork_gate::open_after_fork(false);
    });
}

/// The child's handler: every runtime starts a pager of its own. A child
/// that cannot would read its evicted memory as zeros, so it stops.
pub extern "C" fn child_all() {
    wrapped(|| {
        // SAFETY: only the forking thread, inside the handlers.
        let runtimes = unsafe { LIVE_HELD.take() };
        // The pager about to start needs descriptors, which the program
        // may have used up: the spares make room.
        // SAFETY: only the forking thread, inside the handlers.
        if let Some(mut spares) = unsafe { SPARES_HELD.take() } {
            spares.release(usize::MAX);
        }
        // The parent's threads' rings and pidfds: nothing here uses them.
        crate::sys::thread_fds::close_in_child();
        for rt in runtimes.iter().flat_map(|r| r.iter()) {
            // SAFETY: glibc runs child handlers first thing in the new
            // process, on its only thread; nothing borrows a store across
            // the fork.
            if let Err(e) = unsafe { rt.after_fork_child() } {
                eprintln!(
                    "tiermem: a forked child of {} cannot start its pager: {e}",
                    program_name()
                );
                // SAFETY: _exit ends the child without running anything else.
                unsafe { libc::_exit(1) };
            }
        }
        // The spares come back once the pager's threads have opened their
        // descriptors (`spare_fds::setup_done`), not here, before.
        crate::fault::signal::open_in_child();
    });
}

fn program_name() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .map(|s| s.trim_end().to_owned())
        .unwrap_or_else(|_| "a tiered program".into())
}

impl Shared {
    /// Right before fork.
    fn prepare_fork(&self) {
        let ranges = self.ranges.lock().unwrap_or_else(|p| p.into_inner());
        let lazy = self.lazy.lock().unwrap_or_else(|p| p.into_inner());
        let locked = self.locked_ranges_guard();
        let wipe_on_fork = self.wipe_on_fork_guard();
        // SAFETY: only lifetimes change. The guards are dropped in
        // `after_fork_parent` or `after_fork_child`, while `LIVE`'s lock
        // (held from `prepare_all` until then) keeps this runtime alive.
        let locks = unsafe {
            ForkLocks {
                _ranges: std::mem::transmute::<
                    MutexGuard<'_, RangeAllocator>,
                    MutexGuard<'static, RangeAllocator>,
                >(ranges),
                _lazy: std::mem::transmute::<
                    MutexGuard<'_, RangeAllocator>,
                    MutexGuard<'static, RangeAllocator>,
                >(lazy),
                _locked: std::mem::transmute::<
                    MutexGuard<'_, Vec<std::ops::Range<PageNo>>>,
                    MutexGuard<'static, Vec<std::ops::Range<PageNo>>>,
                >(locked),
                _wipe_on_fork: std::mem::transmute::<
                    MutexGuard<'_, rangemap::RangeSet<PageNo>>,
                    MutexGuard<'static, rangemap::RangeSet<PageNo>>,
                >(wipe_on_fork),
            }
        };
        spare_fds::refill();
        let lease = lease_pipe().or_else(|| {
            // Out of descriptors: two spares make room for the pipe.
            spare_fds::release(2);
            lease_pipe()
        });
        if lease.is_none() {
            eprintln!(
                "tiermem: could not create a fork lease pipe; slots freed from now on stay parked"
            );
        }
        self.pause
            .pause_all(self.fault_threads() + 1, || self.kick_evictor());
        // With the evictor and handlers parked, no slot is taken or freed
        // behind the snapshot.
        let held = self.slots().hold_for_child();
        // SAFETY: only the forking thread, inside the handlers.
        unsafe {
            self.fork_in_flight.put(InFlight {
                locks: Some(locks),
                lease,
                held,
            })
        };
    }

    /// In the parent right after fork.
    fn after_fork_parent(&self) {
        // SAFETY: only the forking thread, inside the handlers.
        let in_flight = unsafe { self.fork_in_flight.take() };
        self.slots().fork_done();
        if let Some((read, _write)) = in_flight.lease {
            self.slots().lease_child(read);
        }
        drop(in_flight.locks);
        self.pause.resume();
    }

    /// In the child right after fork, before anything else runs.
    ///
    /// # Safety
    /// Only in a freshly forked child, on its only thread, with no borrow
    /// of the runtime's store or slot allocator alive.
    unsafe fn after_fork_child(self: &Arc<Self>) -> Result<()> {
        let in_flight = self.fork_in_flight.take();
        if let Some((_read, write)) = in_flight.lease {
            // Held until this process exits or execs.
            std::mem::forget(write);
        }
        drop(in_flight.locks);
        self.stop_event.replace_in_child()?;
        self.read_ahead_event.replace_in_child()?;
        self.pause.reset_in_child()?;
        self.forget_pins_in_child();
        self.take_over_arena()?;
        if let Some(slots) = &self.signal_slots {
            // SAFETY: the child's only thread, with no fault in flight.
            unsafe { slots.replace_rings_in_child()? };
        }
        self.switch_to_own_store(in_flight.held)?;
        // SAFETY: this child has its own store now, and no thread yet.
        unsafe { self.wipe_advised_in_child() };
        if let Some(cipher) = &self.cipher {
            cipher.rekey_in_child()?;
        }
        // The threads run until the process exits or execs.
        std::mem::forget(start_threads(self)?);
        Ok(())
    }

    /// Registers the child's copy of the arena with a userfaultfd of its own
    /// and write-protects what is mapped, so dirty tracking holds here too.
    fn take_over_arena(&self) -> Result<()> {
        let rt = self;
        rt.uffd.replace_in_child()?;
        // Foreign mappings (files, shared memory) are not tiered, here as in
        // the parent; a file mapping would make the registration fail.
        for span in rt.tiered_spans() {
            let len = span.end - span.start;
            rt.uffd.register(span.start, len)?;
            rt.uffd
                .write_protect(span.start, len, true)
                .map_err(|source| Error::Os {
                    what: "write-protecting the child's resident pages",
                    source,
                })?;
        }
        Ok(())
    }

    /// The parent's slots become read-only; new writes go to a file of our
    /// own. What we stop reading of the parent's slots goes back through
    /// `held`, the bitmap it shares with us. The parent's other children's
    /// holds are its business, so our copy of its allocator goes.
    unsafe fn switch_to_own_store(&self, held: Option<Arc<HeldSlots>>) -> Result<()> {
        let rt = self;
        let own = FileStore::open(&child_backing_dir(rt), rt.page_size, None)?;
        own.warn_if_buffered();
        let boundary = rt.store().slot_span();
        let capacity = own.capacity_slots();
        let parent = held.map(|held| ParentHold {
            held,
            first: rt.slots().base(),
        });
        let allocator = SlotAllocator::with_base(boundary, capacity, parent)?;
        rt.store_cell()
            .replace_in_child(|inherited| Box::new(ForkedStore::new(inherited, own)));
        rt.slots_cell().replace_in_child(|_| Box::new(allocator));
        Ok(())
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
