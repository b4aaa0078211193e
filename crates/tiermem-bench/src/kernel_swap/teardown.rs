//! What a live sandbox has made and so must undo, the teardown that undoes
//! it in order (children, cgroup tasks, swap, swapfile, cgroup, saved
//! settings), and the process-global registry of live sandboxes that the
//! signal thread, the abort hook and the leftover scan consult.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::bail;

use super::swapfile::swap_off;
use crate::cgroup::{kill_cgroup_tasks, remove_cgroup_dir, Version};
use crate::saved_settings::SettingsGuard;

/// Name prefix of the cgroups we create: `tiermem-bench-<pid>-<n>`.
pub(super) const CGROUP_PREFIX: &str = "tiermem-bench-";
/// Name prefix of the swapfiles we create: `.tiermem-swap-<pid>-<n>`.
pub(super) const SWAPFILE_PREFIX: &str = ".tiermem-swap-";

/// How long a killed task may take to exit before teardown reports it.
pub(super) const KILL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `rmdir` of the cgroup is retried while it is still busy.
pub(super) const RMDIR_TIMEOUT: Duration = Duration::from_secs(3);

/// The part of a sandbox shared with the signal thread through the registry.
#[derive(Debug)]
pub(super) struct Inner {
    pub(super) cgroup: PathBuf,
    /// The interface of the hierarchy `cgroup` lives in.
    pub(super) version: Version,
    /// The swapfile, or the swap device of `SandboxSpec::swap_device`.
    pub(super) swapfile: PathBuf,
    /// Whether `swapfile` is a device (turned off, never deleted).
    pub(super) device: bool,
    /// The overflow swapfile behind the device (`SandboxSpec::overflow_swapfile_bytes`).
    pub(super) overflow: Option<PathBuf>,
    pub(super) state: Mutex<State>,
}

/// What exists right now and so must be undone.
#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) cgroup_created: bool,
    pub(super) swapfile_created: bool,
    pub(super) swap_active: bool,
    pub(super) overflow_created: bool,
    pub(super) overflow_active: bool,
    /// Adopted children, killed and reaped on teardown.
    pub(super) children: Vec<i32>,
    /// Set by the first teardown: no more setup, adopted children die at once.
    pub(super) closed: bool,
    /// Machine settings changed for this sandbox's run, restored after the
    /// swap is off (see [`SwapSandbox::add_restore`](super::SwapSandbox::add_restore)).
    pub(super) restores: Vec<Arc<SettingsGuard>>,
}

/// Live sandboxes, for the signal thread.
pub(super) static LIVE: Mutex<Vec<Arc<Inner>>> = Mutex::new(Vec::new());
/// Set (under the `LIVE` lock) once a signal started the final teardown.
pub(super) static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

impl Inner {
    pub(super) fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Undoes whatever `st` says exists; returns the failures. Idempotent.
    pub(super) fn teardown_locked(&self, st: &mut State) -> Vec<String> {
        st.closed = true;
        let mut errors = Vec::new();

        let mut survivors = Vec::new();
        for pid in std::mem::take(&mut st.children) {
            if let Err(e) = kill_and_reap_child(pid) {
                errors.push(e);
                survivors.push(pid);
            }
        }
        st.children = survivors;

        if st.cgroup_created {
            if let Err(e) = kill_cgroup_tasks(&self.cgroup, KILL_TIMEOUT) {
                errors.push(e);
            }
        }

        if st.swap_active {
            match swap_off(&self.swapfile) {
                Ok(()) => st.swap_active = false,
                Err(e) => errors.push(e),
            }
        }

        remove_swapfile(
            &self.swapfile,
            st.swap_active,
            &mut st.swapfile_created,
            &mut errors,
        );
        if let Some(overflow) = &self.overflow {
            if st.overflow_active {
                match swap_off(overflow) {
                    Ok(()) => st.overflow_active = false,
                    Err(e) => errors.push(e),
                }
            }
            remove_swapfile(
                overflow,
                st.overflow_active,
                &mut st.overflow_created,
                &mut errors,
            );
        }

        if st.cgroup_created {
            match remove_cgroup_dir(&self.cgroup, RMDIR_TIMEOUT) {
                Ok(()) => st.cgroup_created = false,
                Err(e) => errors.push(e),
            }
        }

        // Last: a zram device is reset only once its swap is off.
        let mut kept = Vec::new();
        for guard in std::mem::take(&mut st.restores) {
            if let Err(e) = guard.restore() {
                errors.push(e);
                kept.push(guard);
            }
        }
        st.restores = kept;
        errors
    }
}

/// Deletes a swapfile this sandbox `created`, unless it is still `active`.
fn remove_swapfile(path: &Path, active: bool, created: &mut bool, errors: &mut Vec<String>) {
    if !*created {
        return;
    }
    if active {
        errors.push(format!(
            "not deleting {0} because it is still in use as swap; \
             run `swapoff {0}` and delete it",
            path.display()
        ));
        return;
    }
    match std::fs::remove_file(path) {
        Ok(()) => *created = false,
        Err(e) if e.kind() == io::ErrorKind::NotFound => *created = false,
        Err(e) => errors.push(format!("deleting {}: {e}", path.display())),
    }
}

// ---------------------------------------------------------------------------
// Registry

pub(super) fn registry() -> MutexGuard<'static, Vec<Arc<Inner>>> {
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub(super) fn register(inner: &Arc<Inner>) -> anyhow::Result<()> {
    let mut live = registry();
    if SHUTTING_DOWN.load(Ordering::SeqCst) {
        bail!("not creating a kernel-swap sandbox: the process is exiting on a signal");
    }
    live.push(Arc::clone(inner));
    Ok(())
}

pub(super) fn unregister(inner: &Arc<Inner>) {
    registry().retain(|other| !Arc::ptr_eq(other, inner));
}

/// Writes to stderr without panicking (stderr may be gone after SIGHUP).
pub(super) fn log(msg: &str) {
    let _ = writeln!(io::stderr(), "tiermem bench: {msg}");
}

/// SIGKILLs and reaps an adopted child. A child that was already reaped (by
/// the caller) is not signalled: its pid may belong to someone else by now.
pub(super) fn kill_and_reap_child(pid: i32) -> Result<(), String> {
    let Ok(id) = libc::id_t::try_from(pid) else {
        return Ok(());
    };
    if pid <= 0 {
        return Ok(());
    }
    let running = loop {
        // SAFETY: siginfo_t is plain data for which all-zeroes is valid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: info is a valid, writable siginfo_t. WNOWAIT leaves the
        // child waitable, so this only looks at its state.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                id,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            // SAFETY: after a successful waitid, si_pid is the field the
            // kernel fills in (0 when no child has changed state).
            break unsafe { info.si_pid() } == 0;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            // Not (or no longer) our child: already reaped, nothing to kill.
            Some(libc::ECHILD) => return Ok(()),
            _ => {
                return Err(format!(
                    "checking child {pid}: {}",
                    io::Error::last_os_error()
                ))
            }
        }
    };
    if running {
        // SAFETY: pid > 0 is our own child that has not been reaped, so the
        // pid cannot have been reused by another process.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let deadline = Instant::now() + KILL_TIMEOUT;
    loop {
        let mut status = 0;
        // SAFETY: status is a valid, writable int.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == pid {
            return Ok(());
        }
        if rc < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // Reaped concurrently by the caller (e.g. Child::wait).
                Some(libc::ECHILD) => return Ok(()),
                _ => {
                    return Err(format!(
                        "reaping child {pid}: {}",
                        io::Error::last_os_error()
                    ))
                }
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "child {pid} did not exit within {}s of SIGKILL",
                KILL_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
