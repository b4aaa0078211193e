//! The per-thread re-entrancy guard (see `guard.c`).
//!
//! While a thread is inside tiermem or mimalloc, or is one of tiermem's own
//! threads, what it allocates comes from glibc and what it maps is not
//! tiered: tiermem must never recurse into its own allocator, and its
//! threads must never fault on tiered memory they serve themselves.

use std::ffi::c_uint;

extern "C" {
    fn tm_guard_depth() -> c_uint;
    fn tm_guard_set_depth(depth: c_uint);
}

/// Whether this thread is inside tiermem (allocations bypass tiering).
#[inline]
pub fn inside() -> bool {
    // SAFETY: reads this thread's own initial-exec TLS word.
    unsafe { tm_guard_depth() != 0 }
}

/// Marks the current thread as inside tiermem until dropped.
pub struct Guard(());

impl Guard {
    #[inline]
    pub fn enter() -> Guard {
        // SAFETY: read-modify-write of this thread's own TLS word.
        unsafe { tm_guard_set_depth(tm_guard_depth() + 1) };
        Guard(())
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as in `enter`; the depth was raised by our own `enter`.
        unsafe { tm_guard_set_depth(tm_guard_depth() - 1) };
    }
}

/// Marks a tiermem thread for its whole life (the runtime's thread-start hook).
pub fn mark_runtime_thread() {
    // SAFETY: writes this thread's own TLS word.
    unsafe { tm_guard_set_depth(1) };
}
