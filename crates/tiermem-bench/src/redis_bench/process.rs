//! The child processes' plumbing: log files unlinked as soon as they are
//! made, death with the parent, waiting with a timeout, exit statuses and
//! output tails in error messages.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

/// Name prefix of our directories and log files in the temporary directory.
pub(super) const WORK_DIR_PREFIX: &str = "tiermem-bench-redis-";

static NEXT_LOG: AtomicU64 = AtomicU64::new(0);

/// A file a child writes to, unlinked as soon as it is made: it vanishes
/// with the last descriptor, even if we are killed.
pub(super) struct Log {
    file: File,
}

impl Log {
    pub(super) fn create(dir: &Path, what: &str) -> anyhow::Result<Log> {
        let path = dir.join(format!(
            "{WORK_DIR_PREFIX}{}-{what}-{}",
            std::process::id(),
            NEXT_LOG.fetch_add(1, Ordering::Relaxed)
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        std::fs::remove_file(&path).with_context(|| format!("unlinking {}", path.display()))?;
        Ok(Log { file })
    }

    pub(super) fn stdio(&self) -> anyhow::Result<Stdio> {
        Ok(self
            .file
            .try_clone()
            .context("duplicating a log file")?
            .into())
    }

    /// Everything written so far. Reads with pread, so the offset the
    /// child shares with us is left alone.
    pub(super) fn read(&self) -> String {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match self.file.read_at(&mut buf, out.len() as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// Makes the child get SIGKILL when we die, so a server never outlives an
/// interrupted benchmark.
pub(crate) fn die_with_parent(cmd: &mut Command) {
    // SAFETY: getpid has no preconditions and cannot fail.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and only
    // makes the async-signal-safe system calls prctl and getppid, and builds
    // io::Error from a raw error code (no allocation); it touches no lock,
    // allocator or other shared state.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died before prctl took effect.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Polls `child` until it exits or `timeout` passes (`None`).
pub(super) fn wait_timeout(
    child: &mut Child,
    timeout: Duration,
) -> anyhow::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait().context("waiting for a child process")? {
            return Ok(Some(s));
        }
        if Instant::now() > deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => status.to_string(),
    }
}

/// The last `max` bytes of `text` (on a char boundary), newline-terminated.
pub(crate) fn tail(text: &str, max: usize) -> String {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let mut t = text[start..].to_string();
    if !t.is_empty() && !t.ends_with('\n') {
        t.push('\n');
    }
    t
}
