//! A Go program in a tiered process: warn when its runtime will count on
//! zeros tiermem cannot give ([`tiermem_host::go_runtime`] says why).
//! `tiermem run` sets `GODEBUG=madvdontneed=0` unless the user set
//! `madvdontneed`; a program preloaded by hand gets only this warning,
//! because Go reads its environment from the process's initial stack,
//! which the library cannot extend.

use std::os::unix::ffi::OsStrExt;

use tiermem_host::go_runtime::{clears_returned_memory, ENV_GODEBUG, ZEROS_WARNING};

use super::guard::Guard;

/// Prints the warning once, at start, for a Go program built with cgo
/// (the only kind tiermem tiers: it exports `crosscall2`, through which
/// C calls into Go) whose `GODEBUG` does not set `madvdontneed=0`.
pub(super) fn warn_if_go_counts_on_zeros(program: &str) {
    let _inside = Guard::enter();
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks
    // a symbol up in the loaded objects.
    let is_go = unsafe { !libc::dlsym(libc::RTLD_DEFAULT, c"crosscall2".as_ptr()).is_null() };
    if !is_go {
        return;
    }
    let godebug = std::env::var_os(ENV_GODEBUG).unwrap_or_default();
    if clears_returned_memory(godebug.as_bytes()) != Some(true) {
        eprintln!(
            "tiermem: warning: {program} (pid {}) is a Go program, and {ZEROS_WARNING}",
            std::process::id()
        );
    }
}
