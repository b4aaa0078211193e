//! The fault path, top to bottom.
//!
//! A fault passes five stages, each in files of its own, and each stage
//! calls the next:
//!
//! 1. **Read the event.** A handler thread waits on the userfaultfd and
//!    reads faults in batches: [`ring`] (io_uring, many page reads in
//!    flight) or [`sync`] (pread, one read at a time per handler; the
//!    fallback where io_uring is unavailable or `TIERMEM_IO_ENGINE=psync`).
//!    Under signal delivery ([`signal`]) there is no handler thread: the
//!    faulting thread gets SIGBUS and runs the stages itself. While the
//!    runtime is paused for a fork, a parked handler serves the forking
//!    thread's faults ([`fork_window`]).
//! 2. **Resolve the page's state** ([`resolve`]): `begin_fault` counts the
//!    fault and `resolve_fault` decides from the page's state word:
//!    - **missing**, page `Zero`: install zeros (charged against the
//!      budget), and the pages after it when first touches run in order
//!      ([`zero_ahead`]);
//!    - **missing**, page `Stored`: claim it (`Loading`) and hand a
//!      [`PageRead`](page_read::PageRead) to stage 3. It goes in
//!      write-protected (so the first write is seen and the page can later
//!      be dropped clean), or writable and dirty if the fault was a write
//!      or one is predicted ([`write_prediction`]);
//!    - **missing**, page in `Probation`: install it from its DRAM frame,
//!      no I/O, and mark it referenced;
//!    - **missing**, page `Compressed`: decompress it from the compressed
//!      pool, no I/O ([`compressed`]);
//!    - **missing**, page already `Resident`: a duplicate fault another
//!      thread resolved, wake the waiter; or a page the program discarded
//!      with a system call of its own, which reads zeros again
//!      ([`discarded`]);
//!    - **write-protect**, page `Resident` and clean: mark it dirty, drop
//!      its now-stale slot, and lift the protection (which wakes the
//!      writer);
//!    - page busy (`Loading`, `Evicting`): its owner finishes shortly;
//!      the loop of stage 1 retries later.
//!
//!    With set-associative placement a miss in a full set evicts the set's
//!    victim on the spot ([`conflict`]).
//! 3. **Read from the store**: the loop of stage 1 reads the claimed page's
//!    slot into a runtime-owned buffer and checks it; [`read_error`]
//!    settles a read that failed or whose bytes fail their check.
//! 4. **Install the page** ([`install`]): `UFFDIO_COPY` into the arena,
//!    then the page becomes `Resident` and goes to the policy.
//! 5. **Read ahead**: a miss that continues a stream ([`readahead`]) has
//!    the ring claim the window's stored pages through stage 2, read them
//!    in large requests and install them through stage 4, a run of pages
//!    with one call. The middle page of each window is parked as a marker
//!    ([`markers`]): the program's fault on it starts the next window.
//!    A miss no stream takes reads the next page with it while misses come
//!    in adjacent pairs (objects spanning two pages, [`neighbours`]).
//!
//! Budget charging happens before a page is claimed, so no page is held
//! while waiting for the evictor. No locks are taken: every step is a
//! compare-and-swap on the page's state word. Handler threads never touch
//! tiered memory themselves; I/O goes through runtime-owned buffers.

mod compressed;
mod conflict;
pub(crate) mod copy_watch;
mod discarded;
mod fork_window;
mod install;
mod markers;
pub(crate) mod neighbours;
mod page_read;
mod pread;
mod read_error;
mod readahead;
mod resolve;
mod ring;

pub use ring::default_buffer_bytes as ring_buffer_bytes;
pub(crate) mod signal;
mod sync;
mod uring;
pub(crate) mod write_prediction;
mod zero_ahead;
pub(crate) mod zero_stream;

use crate::io_config::IoEngine;
use crate::shared::Shared;
use crate::sys::spare_fds;

/// Faults read per read(2).
const FAULT_BATCH: usize = 64;

/// A fault handler thread: the io_uring loop, or pread where io_uring
/// cannot be set up or is not wanted.
pub(crate) fn handler_loop(rt: &Shared) {
    if rt.config.io.engine == IoEngine::IoUring {
        let ring = ring::RingHandler::new(rt);
        spare_fds::setup_done();
        match ring {
            Ok(mut handler) => {
                rt.note_io_engine(handler.engine_name());
                return handler.run();
            }
            Err(reason) => rt.note_io_fallback(&reason),
        }
    } else {
        spare_fds::setup_done();
        rt.note_io_engine("pread (TIERMEM_IO_ENGINE=psync)");
    }
    sync::run(rt);
}

/// Bytes of read buffers one fault handler holds, outside the budget.
pub(crate) fn handler_buffer_bytes(rt: &Shared) -> u64 {
    match rt.config.io.engine {
        IoEngine::IoUring => ring::buffer_bytes(rt),
        IoEngine::Psync => rt.page_size as u64,
    }
}

/// Under signal delivery, the read-ahead thread: an io_uring handler that
/// reads the windows faulting threads ask for ([`signal`]'s
/// `read_ahead`). Without a ring it says why and leaves read-ahead off.
pub(crate) fn read_ahead_loop(rt: &Shared) {
    let Some(requests) = rt.signal_slots.as_ref().and_then(|s| s.read_ahead.as_ref()) else {
        spare_fds::setup_done();
        return;
    };
    let ring = ring::RingHandler::new(rt);
    spare_fds::setup_done();
    match ring {
        Ok(mut handler) => {
            requests.set_serving(true);
            handler.run();
            requests.set_serving(false);
        }
        Err(reason) => {
            eprintln!(
                "tiermem: the read-ahead thread has no io_uring ({reason}); read-ahead is off"
            )
        }
    }
}
