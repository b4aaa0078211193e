//! Statistics for a program that ends without running its exit handlers.
//!
//! The library reports at exit from an `atexit` handler. A program that
//! ends with a direct `exit_group` system call (every Go program does) or a
//! fatal signal never runs it, and `--stats` or `--stats-file` would give
//! nothing. So while the program runs, `tiermem run` takes its summary and
//! statistics from its control socket, and each process that reports at
//! exit writes its pid to a pipe `tiermem run` holds. When the program it
//! started ends without having written there, `tiermem run` reports the
//! last statistics it took, and says how old they are.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use tiermem_host::stats_file::ENV_REPORTED_FD;

use crate::control_client::{stats_of, summary_of};

/// How often the statistics are taken: often at first, so that a short
/// program still has some, then every quarter second.
const FIRST_INTERVAL: Duration = Duration::from_millis(20);
const INTERVAL: Duration = Duration::from_millis(250);
const FIRST_PERIOD: Duration = Duration::from_millis(500);

/// What was taken last, each with when: the program may end between the
/// two requests of one round, so neither replaces the other.
#[derive(Default)]
struct Snapshot {
    summary: Option<(String, Instant)>,
    stats: Option<(Value, Instant)>,
}

/// What the program's exit report needs: what was asked for, the pipe's
/// read end, and the statistics taken so far.
pub(super) struct LastStats {
    summary: bool,
    stats_file: Option<String>,
    reported: File,
    /// The write end, which the program inherits when it is spawned; ours
    /// closes then (see [`LastStats::watch`]).
    write: Option<OwnedFd>,
    last: Arc<Mutex<Snapshot>>,
    stop: Arc<AtomicBool>,
}

impl LastStats {
    /// Sets up the pipe for `cmd` when `--stats` or `--stats-file` (its
    /// path template) asks for a report; `None` otherwise.
    pub(super) fn prepare(
        cmd: &mut Command,
        summary: bool,
        stats_file: Option<String>,
    ) -> std::io::Result<Option<LastStats>> {
        if !summary && stats_file.is_none() {
            return Ok(None);
        }
        let (read, write) = pipe_for_child()?;
        cmd.env(ENV_REPORTED_FD, write.as_raw_fd().to_string());
        Ok(Some(LastStats {
            summary,
            stats_file,
            reported: File::from(read),
            write: Some(write),
            last: Arc::new(Mutex::new(Snapshot::default())),
            stop: Arc::new(AtomicBool::new(false)),
        }))
    }

    /// Takes the statistics of `pid`, the program just spawned, until it
    /// ends.
    pub(super) fn watch(&mut self, pid: u32) {
        self.write = None;
        let (last, stop, summary) = (self.last.clone(), self.stop.clone(), self.summary);
        let started = Instant::now();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let interval = match started.elapsed() < FIRST_PERIOD {
                    true => FIRST_INTERVAL,
                    false => INTERVAL,
                };
                std::thread::sleep(interval);
                if let Some(text) = summary.then(|| summary_of(pid).ok()).flatten() {
                    lock(&last).summary = Some((text, Instant::now()));
                }
                if let Ok(stats) = stats_of(pid) {
                    lock(&last).stats = Some((stats, Instant::now()));
                }
            }
        });
    }

    /// After the program `pid` ended with `status`: reports for it if it
    /// did not report itself.
    pub(super) fn finish(mut self, pid: u32, status: ExitStatus, program: &str) {
        self.stop.store(true, Ordering::Relaxed);
        if self.reported_by(pid) {
            return;
        }
        let how = match std::os::unix::process::ExitStatusExt::signal(&status) {
            Some(sig) => format!("was killed by signal {sig}"),
            None => "ended without running its exit handlers (a direct exit_group system call, as Go programs make)".to_string(),
        };
        let last = std::mem::take(&mut *lock(&self.last));
        let Some(taken) = last
            .summary
            .as_ref()
            .map(|s| s.1)
            .or(last.stats.as_ref().map(|s| s.1))
        else {
            // Without a single answer the library may never have loaded.
            eprintln!(
                "tiermem: {program} (pid {pid}) did not report its statistics: it {how} before \
                 they could be taken, or tiermem's library was not loaded into it (a set-user-ID \
                 program, or one that clears LD_PRELOAD)"
            );
            return;
        };
        let age = taken.elapsed().as_millis();
        eprintln!("tiermem: {program} (pid {pid}) {how}; its statistics as of {age} ms before:");
        if let (true, Some((summary, _))) = (self.summary, &last.summary) {
            eprint!("{summary}");
        }
        if let (Some(template), Some((stats, at))) = (&self.stats_file, last.stats) {
            write_stats_file(template, pid, stats, at.elapsed().as_millis());
        }
    }

    /// Whether process `pid` wrote its pid to the pipe. Other processes of
    /// the run (its children) may hold the write end still, so the read
    /// never waits.
    fn reported_by(&mut self, pid: u32) -> bool {
        // What was read stays in `bytes` when the read stops at EAGAIN.
        let mut bytes = Vec::new();
        let _ = self.reported.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes)
            .lines()
            .any(|l| l.trim() == pid.to_string())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A pipe whose read end is ours, non-blocking and closed on exec, and
/// whose write end the program inherits.
fn pipe_for_child() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and ours alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a descriptor we own.
    let rc = unsafe {
        libc::fcntl(read.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC)
            | libc::fcntl(read.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK)
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((read, write))
}

/// Writes `stats` where the library would have, marked with how old it is.
fn write_stats_file(template: &str, pid: u32, mut stats: Value, age_ms: u128) {
    let path = tiermem_host::stats_file::expand(template, pid);
    // The control socket's reply has the file's fields under the socket's
    // schema name.
    if let Some(map) = stats.as_object_mut() {
        map.insert(
            "schema".into(),
            Value::from(tiermem_host::stats_file::SCHEMA),
        );
        map.insert("taken_before_exit_ms".into(), Value::from(age_ms as u64));
    }
    let text = serde_json::to_string_pretty(&stats).unwrap_or_default() + "\n";
    if let Err(e) = std::fs::write(&path, text) {
        eprintln!("tiermem: writing the statistics to {path} failed: {e}");
    }
}
