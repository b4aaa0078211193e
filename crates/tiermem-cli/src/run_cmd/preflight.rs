//! Checks before the program starts: the backing path, and a runtime started
//! and stopped with the resolved settings.

use std::io;
use std::path::Path;
use std::sync::Arc;

use tiermem_core::{Config, Error as CoreError, Runtime};

use super::stop::Stop;

/// Refuses a backing path whose directory does not exist, before the core
/// would try to create a file there.
pub(super) fn check_backing_path(backing: &Path, from_flag: bool) -> Result<(), Stop> {
    let how = if from_flag {
        "--backing"
    } else {
        "--backing (or TIERMEM_BACKING)"
    };
    match std::fs::metadata(backing) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        _ => return Ok(()),
    }
    let parent = match backing.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if parent.is_dir() {
        return Ok(());
    }
    Err(Stop::new(
        1,
        format!(
            "backing store {}: neither it nor its directory {} exists.\n\
             Fix: create the directory (mkdir -p {}) or give {how} an existing directory, \
             a file of mode 0600 or a block device.",
            backing.display(),
            parent.display(),
            backing.display(),
        ),
    ))
}

/// Starts and stops a runtime with `config`: opens the backing store and
/// userfaultfd exactly as the program's runtime will.
pub(super) fn preflight_runtime(config: &Config) -> Result<(), Stop> {
    // The program's own runtime repeats any warning (e.g. no O_DIRECT on the
    // backing filesystem); keep this trial run from printing it twice.
    let started = with_stderr_silenced(|| Runtime::new(config.clone()).map(drop));
    started.map_err(|e| {
        let msg = match &e {
            CoreError::Backing { .. } => format!(
                "{e}\nFix: give --backing (or TIERMEM_BACKING) a directory this user can write, \
                 a file of its own of mode 0600 that is empty or that tiermem wrote before (not a symbolic link), or a block device that is blank, or given to tiermem with `tiermem format-store DEV`."
            ),
            CoreError::OutOfBackingSpace { .. } => format!(
                "{e}\nFix: free space on the backing store, or give --backing a larger one."
            ),
            CoreError::UffdNotPermitted { .. } | CoreError::UffdFeatureMissing { .. } => {
                e.to_string()
            }
            _ => format!("cannot start tiermem with these settings: {e}"),
        };
        Stop::new(1, msg)
    })
}

/// Runs `f` with fd 2 pointed at /dev/null. A panic inside `f` gets stderr
/// back before its message is printed.
fn with_stderr_silenced<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: dup of a descriptor number; failure is reported as -1.
    let saved = unsafe { libc::dup(2) };
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null");
    let (Ok(null), true) = (null, saved >= 0) else {
        if saved >= 0 {
            // SAFETY: `saved` is our own descriptor from dup above.
            unsafe { libc::close(saved) };
        }
        return f();
    };
    let restore = move || {
        // SAFETY: `saved` stays open until after the last restore; dup2 onto
        // fd 2 only replaces our own redirection.
        unsafe { libc::dup2(saved, 2) };
    };
    let previous = Arc::new(std::panic::take_hook());
    let hook_previous = Arc::clone(&previous);
    std::panic::set_hook(Box::new(move |info| {
        restore();
        hook_previous(info);
    }));
    // SAFETY: both are open descriptors owned by this function.
    unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 2) };
    let out = f();
    restore();
    let _ = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| previous(info)));
    // SAFETY: `saved` is our own descriptor; fd 2 no longer refers to it.
    unsafe { libc::close(saved) };
    out
}
