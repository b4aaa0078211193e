//! Cleanup beyond the sandbox's own `cleanup` and `Drop`: the signal thread
//! (and, when panics abort, the panic hook) that tears down every live
//! sandbox, and the removal of what crashed runs left behind.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::{anyhow, bail};

use super::swapfile::{read_proc_swaps, swap_off};
use super::teardown::{
    log, registry, Inner, CGROUP_PREFIX, KILL_TIMEOUT, RMDIR_TIMEOUT, SHUTTING_DOWN,
    SWAPFILE_PREFIX,
};
use crate::cgroup::{self, kill_cgroup_tasks, remove_cgroup_dir};
use crate::saved_settings;

/// The outcome of installing the signal thread, which happens once.
static SIGNAL_THREAD: OnceLock<Result<(), String>> = OnceLock::new();
/// Set by the signal handler itself when SIGINT/SIGTERM/SIGHUP arrives.
static SIGNAL_SEEN: OnceLock<Arc<AtomicBool>> = OnceLock::new();

// ---------------------------------------------------------------------------
// Signal handling

/// Installs, once per process (later calls return the first outcome):
///
/// * a signal thread that, on SIGINT, SIGTERM or SIGHUP, tears down every
///   live sandbox and exits with status 128+signo. Because of it, a Ctrl-C in
///   the middle of a run still removes the swapfile and the cgroup;
/// * when panics abort (as in tiermem's release and dev profiles), a panic
///   hook that tears down live sandboxes before the abort.
///
/// [`SwapSandbox::create`](super::SwapSandbox::create) calls it; call it
/// earlier to get the same behaviour for the whole run. Also call
/// [`wait_for_cleanup`] before exiting the process on your own.
pub fn install_signal_cleanup() -> anyhow::Result<()> {
    SIGNAL_THREAD
        .get_or_init(|| {
            use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
            let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
                .map_err(|e| format!("installing SIGINT/SIGTERM/SIGHUP handlers: {e}"))?;
            std::thread::Builder::new()
                .name("tiermem-swap-signals".into())
                .spawn(move || {
                    let mut first = true;
                    for sig in signals.forever() {
                        if first {
                            first = false;
                            // Keep receiving signals meanwhile, so a second
                            // Ctrl-C gets an answer instead of nothing.
                            let spawned = std::thread::Builder::new()
                                .name("tiermem-swap-cleanup".into())
                                .spawn(move || cleanup_all_and_exit(sig));
                            if spawned.is_err() {
                                cleanup_all_and_exit(sig);
                            }
                        } else {
                            log(
                                "still removing the kernel-swap sandbox (swapoff can take a while)",
                            );
                        }
                    }
                })
                .map_err(|e| format!("starting the signal thread: {e}"))?;
            let seen = Arc::new(AtomicBool::new(false));
            for sig in [SIGINT, SIGTERM, SIGHUP] {
                // Set by the signal handler itself, so wait_for_cleanup sees a
                // signal even before the signal thread has woken up. Without
                // it, wait_for_cleanup still sees SHUTTING_DOWN a bit later.
                if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&seen)) {
                    log(&format!("installing a flag for {}: {e}", signal_name(sig)));
                }
            }
            let _ = SIGNAL_SEEN.set(seen);
            #[cfg(panic = "abort")]
            install_abort_hook();
            Ok(())
        })
        .clone()
        .map_err(|e| anyhow!("kernel-swap mode cannot guarantee cleanup on Ctrl-C: {e}"))
}

/// Call before exiting the process on your own (e.g. `std::process::exit`
/// at the end of `main`): if a SIGINT/SIGTERM/SIGHUP arrived, the signal
/// thread may be removing sandboxes right now, and exiting would cut that
/// short. In that case this never returns; the signal thread exits the
/// process (status 128+signo) when it is done. Otherwise it returns at once.
pub fn wait_for_cleanup() {
    let signalled = SHUTTING_DOWN.load(Ordering::SeqCst)
        || SIGNAL_SEEN
            .get()
            .is_some_and(|seen| seen.load(Ordering::SeqCst));
    if signalled {
        loop {
            std::thread::park();
        }
    }
}

/// With `panic = "abort"`, `Drop` never runs on a panic; this hook is the
/// last chance to remove the sandboxes before the process aborts. It only
/// try-locks, so a panic while a lock is held cannot deadlock it.
#[cfg(panic = "abort")]
fn install_abort_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        let live: Vec<Arc<Inner>> = match super::teardown::LIVE.try_lock() {
            Ok(mut live) => live.drain(..).collect(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().drain(..).collect(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        for inner in live {
            let mut st = match inner.state.try_lock() {
                Ok(st) => st,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => continue,
            };
            let errors = inner.teardown_locked(&mut st);
            if !errors.is_empty() {
                log(&format!("after a panic: {}", errors.join("; ")));
            }
        }
    }));
}

fn cleanup_all_and_exit(sig: i32) -> ! {
    let live: Vec<Arc<Inner>> = {
        let mut live = registry();
        SHUTTING_DOWN.store(true, Ordering::SeqCst);
        live.drain(..).collect()
    };
    if !live.is_empty() {
        log(&format!(
            "caught {}, removing {} kernel-swap sandbox(es)",
            signal_name(sig),
            live.len()
        ));
    }
    for inner in &live {
        let errors = {
            let mut st = inner.lock_state();
            inner.teardown_locked(&mut st)
        };
        if !errors.is_empty() {
            log(&format!(
                "removing kernel-swap sandbox {} / {}: {}",
                inner.cgroup.display(),
                inner.swapfile.display(),
                errors.join("; ")
            ));
        }
    }
    std::process::exit(128 + sig)
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

// ---------------------------------------------------------------------------
// Leftovers of crashed runs

/// Sandboxes left behind by processes that are gone (crashed, SIGKILLed):
/// `tiermem-bench-<pid>-<n>` cgroups and `.tiermem-swap-<pid>-<n>` swapfiles
/// still listed in /proc/swaps whose `<pid>` is dead. Sandboxes of live
/// processes, including this one's, are not listed.
///
/// Liveness is judged by pid in this pid namespace, so do not use this while
/// a benchmark in another pid namespace shares the cgroup hierarchy. Swapfiles
/// that are no longer active are not found (their directory is unknown).
pub fn leftover_sandboxes() -> Vec<PathBuf> {
    let mut found = Vec::new();
    if let Some(root) = cgroup::find_root() {
        if let Ok(dir) = std::fs::read_dir(&root.dir) {
            for entry in dir.flatten() {
                let path = entry.path();
                let stale = entry
                    .file_name()
                    .to_str()
                    .and_then(|name| owner_pid(name, CGROUP_PREFIX))
                    .is_some_and(|pid| !owner_alive(pid, &path));
                if stale && path.is_dir() {
                    found.push(path);
                }
            }
        }
    }
    for swap in read_proc_swaps().unwrap_or_default() {
        let stale = swap
            .path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| owner_pid(name, SWAPFILE_PREFIX))
            .is_some_and(|pid| !owner_alive(pid, &swap.path));
        if stale {
            found.push(swap.path);
        }
    }
    found.extend(saved_settings::stale_states(Path::new(
        saved_settings::STATE_DIR,
    )));
    found
}

/// Removes what [`leftover_sandboxes`] finds: kills any task still in a stale
/// cgroup, turns stale swapfiles off and deletes them, removes the cgroups.
/// Returns how many were removed; fails (after trying all) if any could not be.
pub fn remove_leftovers() -> anyhow::Result<usize> {
    let state_dir = Path::new(saved_settings::STATE_DIR);
    let leftovers: Vec<PathBuf> = leftover_sandboxes()
        .into_iter()
        .filter(|p| !p.starts_with(state_dir))
        .collect();
    let root = cgroup::find_root().map(|r| r.dir);
    let (cgroups, swapfiles): (Vec<PathBuf>, Vec<PathBuf>) = leftovers
        .into_iter()
        .partition(|p| root.as_ref().is_some_and(|r| p.starts_with(r)));
    let mut errors = Vec::new();
    let mut removed = 0;
    // Workers first, so that swapoff does not page their memory back in.
    for cg in &cgroups {
        if let Err(e) = kill_cgroup_tasks(cg, KILL_TIMEOUT) {
            errors.push(e);
        }
    }
    for swapfile in &swapfiles {
        match swap_off(swapfile) {
            Ok(()) => match std::fs::remove_file(swapfile) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => removed += 1,
                Err(e) => errors.push(format!("deleting {}: {e}", swapfile.display())),
            },
            Err(e) => errors.push(e),
        }
    }
    for cg in &cgroups {
        match remove_cgroup_dir(cg, RMDIR_TIMEOUT) {
            Ok(()) => removed += 1,
            Err(e) => errors.push(e),
        }
    }
    // Settings last: a zram device is reset once no task uses its swap.
    match saved_settings::restore_stale(state_dir) {
        Ok(n) => removed += n,
        Err(e) => errors.push(format!("{e:#}")),
    }
    if errors.is_empty() {
        Ok(removed)
    } else {
        bail!("removed {removed} leftover(s), but: {}", errors.join("; "))
    }
}

/// `<prefix><pid>-<n>` → pid.
fn owner_pid(name: &str, prefix: &str) -> Option<i32> {
    let (pid, n) = name.strip_prefix(prefix)?.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse::<i32>().ok().filter(|&pid| pid > 0)
}

fn owner_alive(pid: i32, path: &Path) -> bool {
    // SAFETY: getpid has no preconditions and cannot fail.
    if pid == unsafe { libc::getpid() } {
        // Ours only if it is in our registry: otherwise it is from an earlier
        // process that had the same pid (e.g. in a fresh container).
        return registry().iter().any(|inner| {
            inner.cgroup == path
                || inner.swapfile == path
                || inner.overflow.as_deref() == Some(path)
        });
    }
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_parses_only_our_names() {
        assert_eq!(owner_pid("tiermem-bench-123-4", CGROUP_PREFIX), Some(123));
        assert_eq!(owner_pid(".tiermem-swap-77-0", SWAPFILE_PREFIX), Some(77));
        assert_eq!(owner_pid("tiermem-bench-123", CGROUP_PREFIX), None);
        assert_eq!(owner_pid("tiermem-bench-x-1", CGROUP_PREFIX), None);
        assert_eq!(owner_pid("tiermem-bench-0-1", CGROUP_PREFIX), None);
        assert_eq!(
            owner_pid(".tiermem-swap-5-1 (deleted)", SWAPFILE_PREFIX),
            None
        );
        assert_eq!(owner_pid("other-123-4", CGROUP_PREFIX), None);
    }
}
