//! The runtime's threads: the fault handlers (or, under signal delivery,
//! the read-ahead thread) and the evictor. A new runtime starts them, and
//! so does a forked child's copy of one.

use std::sync::{Arc, OnceLock};

use crate::error::Result;
use crate::evictor::evictor_loop;
use crate::fault::{handler_loop, read_ahead_loop};
use crate::shared::Shared;
use crate::sys::thread::{self, Thread};

/// Starts the fault handlers and the evictor.
pub(crate) fn start_threads(shared: &Arc<Shared>) -> Result<Vec<Thread>> {
    let mut threads = Vec::new();
    let cpus = crate::sys::thread::allowed_cpus();
    // Under signal delivery the faulting threads serve themselves: no
    // handler threads, and a read-ahead thread if its ring was made.
    let handlers = match &shared.signal_slots {
        None => shared.config.handler_threads,
        Some(_) => 0,
    };
    let read_ahead = shared
        .signal_slots
        .as_ref()
        .is_some_and(|slots| slots.read_ahead.is_some());
    // The spares are topped up once every thread has opened its
    // descriptors (see `spare_fds`).
    crate::sys::spare_fds::expect_setups(shared.fault_threads() + 1);
    if let Some(slots) = &shared.signal_slots {
        shared.note_io_engine(slots.engine);
        if let Some(reason) = &slots.fallback {
            eprintln!("tiermem: io_uring is unavailable ({reason}); faulting threads read their pages with pread");
        }
    }
    if read_ahead {
        let s = Arc::clone(shared);
        threads.push(spawn("tiermem-ahead".into(), move || read_ahead_loop(&s))?);
    }
    for i in 0..handlers {
        let s = Arc::clone(shared);
        let cpu = cpus.get(i % cpus.len().max(1)).copied();
        threads.push(spawn(format!("tiermem-fault{i}"), move || {
            // One handler per CPU, so that a handler runs wherever faults
            // happen. It does not make a miss local: a handler already
            // running elsewhere often reads the fault first, and the
            // scheduler moves a woken thread away from a busy handler's
            // CPU. It measures no worse than one unpinned handler.
            if let Some(cpu) = cpu {
                // Best effort: placement is a matter of speed only.
                let _ = crate::sys::thread::pin_current_thread(cpu);
            }
            handler_loop(&s)
        })?);
    }
    let s = Arc::clone(shared);
    threads.push(spawn("tiermem-evict".into(), move || evictor_loop(&s))?);
    Ok(threads)
}

impl Shared {
    /// How many threads serve faults beside the evictor: the handlers, or
    /// under signal delivery the read-ahead thread if its ring was made.
    /// The fork handlers wait for them all to park.
    pub(crate) fn fault_threads(&self) -> usize {
        match &self.signal_slots {
            None => self.config.handler_threads,
            Some(slots) => usize::from(slots.read_ahead.is_some()),
        }
    }
}

static THREAD_START_HOOK: OnceLock<fn()> = OnceLock::new();

/// Registers a function every runtime thread (fault handlers, evictor) runs
/// first. Transparent mode uses it to mark those threads so that anything
/// they allocate comes from plain memory, never from tiered memory they
/// would have to fault in themselves.
pub fn set_thread_start_hook(hook: fn()) {
    let _ = THREAD_START_HOOK.set(hook);
}

/// Starts a runtime thread: a small stack, and the start hook first.
fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<Thread> {
    thread::spawn(
        name,
        256 << 10,
        THREAD_START_HOOK.get().copied(),
        Box::new(f),
    )
}
