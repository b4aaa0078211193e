//! fork without exec: the runtime's fork handlers (see tiermem-core's
//! `fork` module for the design), registered with pthread_atfork once the
//! process-wide runtime runs, whether the preload or the C API started it.

use std::sync::Once;

use tiermem_core::global;

use super::{program_name, Guard};

static INSTALLED: Once = Once::new();

/// Registers the fork handlers, once per process.
pub fn install() {
    INSTALLED.call_once(|| {
        // SAFETY: registers three plain extern "C" functions.
        let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        if rc != 0 {
            eprintln!(
                "tiermem: pthread_atfork failed ({rc}); a forked child would lose evicted memory"
            );
        }
    });
}

extern "C" fn prepare() {
    let _inside = Guard::enter();
    if let Some(rt) = global::running() {
        rt.prepare_fork();
    }
}

extern "C" fn parent() {
    let _inside = Guard::enter();
    if let Some(rt) = global::running() {
        rt.after_fork_parent();
    }
}

extern "C" fn child() {
    let _inside = Guard::enter();
    let Some(rt) = global::running() else {
        return;
    };
    // SAFETY: glibc runs child handlers first thing in the new process, on
    // its only thread; nothing borrows the runtime's store across fork.
    if let Err(e) = unsafe { rt.after_fork_child() } {
        // The child cannot see its evicted memory: stopping is the only
        // answer that loses nothing silently.
        eprintln!(
            "tiermem: a forked child of {} cannot start its pager: {e}",
            program_name()
        );
        // SAFETY: _exit ends the child without running anything else.
        unsafe { libc::_exit(1) };
    }
}
