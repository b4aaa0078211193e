//! The store's error policy, on a real C API program (`tests/c/io_faults.c`,
//! 32 MiB in an 8 MiB budget, every byte checked twice) with a real backing
//! file: injected read and write errors (a sweep over which request fails),
//! writes that keep failing, a backing file damaged while the program runs,
//! and `kill -9`. Every run is under timeout(1); a hang fails the test.
//!
//! A run may end in two ways only: every byte right, or stopped (SIGBUS for
//! a lost page, abort for writes that keep failing) with a diagnostic that
//! names the backing file and the byte offset. Never different bytes.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../tests/support/c_program.rs"]
mod c_program;
use c_program::{compile_into, tempfile_dir};

const BUDGET: &str = "8M";

/// Environment variables for one run.
type Env = &'static [(&'static str, &'static str)];
/// A run takes about half a second; anything near this is a hang.
const RUN_LIMIT_S: &str = "60";

/// How one run ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Exit 0, every byte checked; how many I/O errors tiermem counted.
    Verified { io_errors: u64 },
    /// Killed by `signal` with the full diagnostic on stderr.
    Stopped { signal: i32 },
    /// The program saw bytes that differ: must never happen.
    WrongData,
    /// timeout(1) killed it.
    Hung,
    /// Anything else (a crash without a diagnostic, a setup failure).
    Other(String),
}

struct Client {
    exe: PathBuf,
    lib: PathBuf,
    scratch: PathBuf,
}

impl Client {
    /// The client, compiled into a scratch directory of the test's own.
    fn new(test: &str) -> Client {
        let (exe, lib, scratch) =
            compile_into("io_faults", tempfile_dir(&format!("io_faults-{test}")));
        Client { exe, lib, scratch }
    }

    /// A command running the client under timeout(1) with `env` set.
    fn command(&self, mode: &str, backing: &Path, env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new("timeout");
        cmd.args(["-k", "5", RUN_LIMIT_S])
            .arg(&self.exe)
            .arg(mode)
            .env("LD_LIBRARY_PATH", &self.lib)
            .env("TIERMEM_DRAM", BUDGET)
            .env("TIERMEM_BACKING", backing)
            // The store's errors are under test, and the client's regular
            // bytes would all fit in the compressed pool; the sweep turns
            // the tier on, with a small pool, for its write-back path.
            .env("TIERMEM_COMPRESS", "off")
            .envs(env.iter().copied());
        cmd
    }

    fn run(&self, env: &[(&str, &str)]) -> (Outcome, String) {
        let out = self
            .command("run", Path::new("/var/tmp"), env)
            .output()
            .expect("running io_faults under timeout(1)");
        classify(&out)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

fn classify(out: &Output) -> (Outcome, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let text = format!("{}\n{stdout}{stderr}", out.status);
    let diagnosed = stderr.contains("byte offset") && stderr.contains("/var/tmp");
    let outcome = match (out.status.code(), out.status.signal()) {
        (Some(0), _) if stdout.contains("io_faults: ok") => Outcome::Verified {
            io_errors: number_after(&stdout, "io errors "),
        },
        (Some(3), _) if stdout.contains("WRONG DATA") => Outcome::WrongData,
        (Some(124), _) | (Some(137), _) => Outcome::Hung,
        // timeout(1) passes on the child's death by signal as 128 + n.
        (Some(code), _) if code > 128 && diagnosed => Outcome::Stopped { signal: code - 128 },
        (None, Some(signal)) if diagnosed => Outcome::Stopped { signal },
        _ => Outcome::Other(text.clone()),
    };
    (outcome, text)
}

fn number_after(text: &str, label: &str) -> u64 {
    text.split(label)
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// SQLite-style sweep: the n-th read, the n-th write, two reads in a row,
/// and every read from n on fail with EIO. A single failure is always
/// survived (a read is retried, a write goes to other slots); two failed
/// reads of a page the program needs lose that page (SIGBUS); nothing may
/// ever come back different, and nothing may hang.
#[test]
fn injected_io_errors_never_hand_back_wrong_data() {
    let client = Client::new("sweep");
    let single_reads = [1u64, 2, 10, 40, 150, 600, 2000];
    let single_writes = [1u64, 2, 5, 20, 60, 150];
    let double_reads = [1u64, 30, 400, 1500];
    let mut plans: Vec<(String, bool)> = Vec::new();
    plans.extend(single_reads.iter().map(|n| (format!("read:{n}"), true)));
    plans.extend(single_writes.iter().map(|n| (format!("write:{n}"), true)));
    plans.extend(
        double_reads
            .iter()
            .map(|n| (format!("read:{n}-{}", n + 1), false)),
    );
    plans.push(("read:300-".into(), false));
    plans.push(("read:5,write:3".into(), true));
    // The other two read paths: pread handlers, and faulting threads that
    // read for themselves (signal delivery).
    // And set-associative placement, where a miss writes its set's victim
    // on the fault path; encryption at rest, where a read is decrypted in
    // place and cannot be checked twice; and the compressed tier with a
    // pool of 2% of the budget, which writes its oldest pages back to the
    // store all the time.
    let engines: [Env; 6] = [
        &[],
        &[("TIERMEM_IO_ENGINE", "psync")],
        &[("TIERMEM_FAULTS", "signal")],
        &[("TIERMEM_ASSOCIATIVITY", "4")],
        &[("TIERMEM_ENCRYPT", "on")],
        &[("TIERMEM_COMPRESS", "lz4"), ("TIERMEM_COMPRESS_SHARE", "2")],
    ];
    let runs: Vec<(String, bool, Env)> = engines
        .iter()
        .enumerate()
        .flat_map(|(e, env)| {
            plans
                .iter()
                .enumerate()
                // Every plan with the default engine, every third with the others.
                .filter(move |(i, _)| e == 0 || i % 3 == e % 3)
                .map(move |(_, (plan, survive))| (plan.clone(), *survive, *env))
        })
        .collect();

    let (mut verified, mut stopped, mut wrong, mut hung) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    for (plan, must_survive, engine) in &runs {
        let mut env = vec![("TIERMEM_INJECT_FAULTS", plan.as_str())];
        env.extend_from_slice(engine);
        let plan = format!("{plan} {engine:?}");
        let (outcome, text) = client.run(&env);
        match &outcome {
            Outcome::Verified { io_errors } if *io_errors > 0 => verified += 1,
            Outcome::Verified { .. } => failures.push(format!(
                "{plan}: the injected error was never reached\n{text}"
            )),
            Outcome::Stopped { .. } if *must_survive => {
                failures.push(format!("{plan}: one error must be survived\n{text}"))
            }
            Outcome::Stopped { .. } => stopped += 1,
            Outcome::WrongData => {
                wrong += 1;
                failures.push(format!("{plan}: WRONG DATA\n{text}"));
            }
            Outcome::Hung => {
                hung += 1;
                failures.push(format!("{plan}: hung\n{text}"));
            }
            Outcome::Other(_) => failures.push(format!("{plan}: {outcome:?}")),
        }
    }
    eprintln!(
        "injection sweep: {} runs, {verified} verified, {stopped} stopped with a diagnostic, \
         {wrong} wrong data, {hung} hung",
        runs.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(
        stopped >= 1,
        "every read from 300 on failing must stop the program"
    );
}

/// Writes that never succeed stop the program once the deadline passes
/// (12 s here), with the diagnostic, instead of leaving it waiting for DRAM;
/// meanwhile the fault waiting for DRAM is reported after 10 s, with why.
#[test]
fn writes_that_keep_failing_stop_the_program_at_the_deadline() {
    let client = Client::new("deadline");
    let started = Instant::now();
    let (outcome, text) = client.run(&[
        ("TIERMEM_INJECT_FAULTS", "write:1-"),
        ("TIERMEM_IO_DEADLINE", "12"),
    ]);
    let took = started.elapsed();
    assert_eq!(
        outcome,
        Outcome::Stopped {
            signal: libc::SIGABRT
        },
        "{text}"
    );
    assert!(text.contains("have failed for 12 s"), "{text}");
    assert!(
        text.contains("a fault has waited 10 s for DRAM")
            && text.contains("writes to the backing store have failed for"),
        "no stall report: {text}"
    );
    assert!(
        took < Duration::from_secs(40),
        "stopped only after {took:?}"
    );
}

/// Bytes overwritten in every 4 KiB block of the live backing file, through
/// /proc/PID/fd, while the program sleeps: its next read of an evicted page
/// reports a checksum mismatch and the access gets SIGBUS. With checksums
/// off, the same damage reaches the program as different bytes, which shows
/// what the checksums are for (and that this test can fail). Encrypted
/// pages carry a tag that catches the same damage.
#[test]
fn a_damaged_backing_file_is_caught_by_the_checksums() {
    let client = Client::new("damage");
    let (outcome, text) = run_with_damage(&client, &[]);
    assert_eq!(
        outcome,
        Outcome::Stopped {
            signal: libc::SIGBUS
        },
        "{text}"
    );
    assert!(text.contains("checksum mismatch"), "{text}");

    let (outcome, text) = run_with_damage(&client, &[("TIERMEM_ENCRYPT", "on")]);
    assert_eq!(
        outcome,
        Outcome::Stopped {
            signal: libc::SIGBUS
        },
        "encrypted: {text}"
    );
    assert!(text.contains("checksum mismatch"), "encrypted: {text}");

    let (outcome, text) = run_with_damage(&client, &[("TIERMEM_CHECKSUMS", "off")]);
    assert_eq!(outcome, Outcome::WrongData, "{text}");
}

fn run_with_damage(client: &Client, env: &[(&str, &str)]) -> (Outcome, String) {
    let mut child = client
        .command("wait", Path::new("/var/tmp"), env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting io_faults");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("reading the client");
    assert_eq!(line.trim(), "filled", "the client did not start");
    let pid = client_pid(child.id());
    damage_backing_file(pid);
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(b"go\n")
        .expect("waking the client");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).expect("reading the client");
    let out = child.wait_with_output().expect("waiting for the client");
    let out = Output {
        stdout: format!("{line}{rest}").into_bytes(),
        ..out
    };
    classify(&out)
}

/// The client itself: the only child of the timeout(1) process `parent`.
fn client_pid(parent: u32) -> u32 {
    let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .expect("reading timeout(1)'s children");
    children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("timeout(1) has started the client")
}

/// Overwrites 64 bytes at the start of every 4 KiB block of the process's
/// backing file (the descriptor that points into /var/tmp).
fn damage_backing_file(pid: u32) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("listing the client's fds");
    let backing = fds
        .filter_map(|e| e.ok())
        .find(|e| {
            std::fs::read_link(e.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("/var/tmp/"))
        })
        .expect("the client has a backing file in /var/tmp")
        .path();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&backing)
        .expect("opening the backing file through /proc");
    let len = file.metadata().expect("its size").len();
    assert!(len > 0, "the backing file is empty");
    for offset in (0..len).step_by(4096) {
        file.write_all_at(&[b'X'; 64], offset)
            .expect("overwriting the backing file");
    }
}

/// `kill -9` while pages are in the store: the backing directory is left
/// exactly as it was (the file had no name), and the process is gone.
#[test]
fn kill_9_leaves_no_backing_file_behind() {
    let client = Client::new("kill");
    let backing = tempfile_dir("io-faults-kill");
    let mut child = client
        .command("wait", &backing, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting io_faults");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("piped stdout"))
        .read_line(&mut line)
        .expect("reading the client");
    assert_eq!(line.trim(), "filled");
    let pid = client_pid(child.id());
    // SAFETY: kill(2) on a process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let status = child.wait().expect("waiting for timeout(1)");
    // timeout(1) passes the death on: as 128 + 9, or by dying of it too.
    assert!(
        status.code() == Some(128 + libc::SIGKILL) || status.signal() == Some(libc::SIGKILL),
        "{status}"
    );
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} lives on"
    );
    let left: Vec<_> = std::fs::read_dir(&backing)
        .expect("the backing directory")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&backing);
}
