//! Faults in flight across a fork, under signal delivery.
//!
//! Here program threads resolve their own faults, and the fork handlers
//! cannot park them the way they park handler threads. A fork taken while
//! one is half-way through a fault would copy that half into the child,
//! which has no thread to finish it: a page claimed for good, or a push to
//! the policy's queue half made, which the child's evictor then waits on
//! forever. So the fork handlers close this gate: faults that have begun
//! finish, new ones wait at the gate, and the fork goes ahead once none is
//! in flight. The parent's waiting threads go on when it opens again.
//!
//! The forking thread itself passes: fork handlers of the program's own may
//! run while the gate is closed (those registered before tiermem's), and it
//! cannot be half-way through a fault of its own while it forks.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use crate::sys::backoff;

/// Threads resolving a fault right now, in every runtime.
static FAULTING: AtomicUsize = AtomicUsize::new(0);
/// Set from the fork's prepare handler until its parent or child handler.
static CLOSED: AtomicBool = AtomicBool::new(false);
/// The thread that closed the gate, which passes it.
static FORKER: AtomicU32 = AtomicU32::new(0);

/// A fault in flight, counted until it drops.
pub(super) struct InFlight(());

impl Drop for InFlight {
    fn drop(&mut self) {
        FAULTING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts the calling thread's fault as in flight, once no fork is being
/// prepared. The count and the gate are each written before the other is
/// read (sequentially consistent on both sides), so either the fork sees
/// this fault, or this thread sees the fork and backs off.
pub(super) fn enter() -> InFlight {
    loop {
        while held_back() {
            std::thread::sleep(Duration::from_micros(50));
        }
        FAULTING.fetch_add(1, Ordering::SeqCst);
        if !held_back() {
            return InFlight(());
        }
        FAULTING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether the gate is closed to the calling thread.
fn held_back() -> bool {
    CLOSED.load(Ordering::SeqCst) && FORKER.load(Ordering::SeqCst) != current_thread()
}

fn current_thread() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// How many threads resolve a fault right now.
pub(super) fn faulting() -> usize {
    FAULTING.load(Ordering::Relaxed)
}

/// The fork's prepare handler: no new fault begins, and every fault begun
/// has finished when this returns. Faults in flight finish with the
/// runtime's threads still running, so none waits for a parked one.
pub(crate) fn close_for_fork() {
    FORKER.store(current_thread(), Ordering::SeqCst);
    CLOSED.store(true, Ordering::SeqCst);
    while FAULTING.load(Ordering::SeqCst) != 0 {
        backoff();
    }
}

/// The fork's parent and child handlers. The child has none of the threads
/// that were counted or waiting, so its count starts from zero.
pub(crate) fn open_after_fork(child: bool) {
    if child {
        FAULTING.store(0, Ordering::SeqCst);
    }
    CLOSED.store(false, Ordering::SeqCst);
}
