//! `tiermem run` as a user runs it: exit status, signal pass-through, the
//! environment the program gets, and every preflight error stopping before
//! the program starts, with one message and the fix.
//!
//! The program is really started with libtiermem.so preloaded: these tests
//! build it for the same profile and preload a private copy (so that a
//! concurrent `cargo build` cannot replace it under a running test).

use std::io::{BufRead, BufReader, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Settings that could leak in from the environment of `cargo test`.
const SCRUBBED: [&str; 27] = [
    "TIERMEM_CHECKSUMS",
    "TIERMEM_ENCRYPT",
    "TIERMEM_IO_DEADLINE",
    "TIERMEM_INJECT_FAULTS",
    "TIERMEM_PRESET",
    "TIERMEM_ASSOCIATIVITY",
    "TIERMEM_PREFETCH",
    "TIERMEM_WRITE_POLICY",
    "TIERMEM_INCLUSION",
    "TIERMEM_WATERMARK_SCALE_FACTOR",
    "TIERMEM_IO_POLL",
    "TIERMEM_DRAM",
    "TIERMEM_BACKING",
    "TIERMEM_BACKING_SIZE",
    "TIERMEM_PAGE_SIZE",
    "TIERMEM_POLICY",
    "TIERMEM_HANDLER_THREADS",
    "TIERMEM_FAULTS",
    "TIERMEM_STATS",
    "TIERMEM_MMAP_THRESHOLD",
    "TIERMEM_NO_INHERIT",
    "TIERMEM_PRELOAD",
    "TIERMEM_LIB",
    "TIERMEM_TEST_DENY_UFFD",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "GODEBUG",
];

#[path = "../../../tests/support/libtiermem.rs"]
mod support;
use support::libtiermem as built_library;

/// A scratch directory with a private copy of libtiermem.so.
struct Scratch {
    dir: tempfile::TempDir,
    lib: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("tiermem-run-cli-")
            .tempdir()
            .expect("temporary directory");
        let lib = dir.path().join("libtiermem.so");
        std::fs::copy(built_library(), &lib).expect("copying libtiermem.so");
        Scratch { dir, lib }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn marker(&self) -> PathBuf {
        self.path().join("started")
    }

    /// `tiermem run ARGS` with a clean environment and this copy of the library.
    fn tiermem_run(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tiermem"));
        for var in SCRUBBED {
            cmd.env_remove(var);
        }
        cmd.env("TIERMEM_LIB", &self.lib)
            .stdin(Stdio::null())
            .arg("run")
            .args(args);
        cmd
    }

    /// Runs `tiermem run FLAGS -- touch <marker>` and checks that it stopped
    /// before the program started: status, one message, no marker.
    fn expect_stop(&self, mut cmd: Command, code: i32) -> String {
        let out = output_within(&mut cmd, Duration::from_secs(60));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
        assert!(
            !self.marker().exists(),
            "the program started although tiermem run failed: {stderr}"
        );
        assert!(out.stdout.is_empty(), "stdout: {:?}", out.stdout);
        assert!(stderr.starts_with("tiermem run: "), "{stderr}");
        assert_eq!(
            stderr.matches("tiermem run:").count(),
            1,
            "one message expected: {stderr}"
        );
        stderr
    }

    fn touch_marker(&self) -> Vec<String> {
        vec![
            "--".into(),
            "touch".into(),
            self.marker().display().to_string(),
        ]
    }
}

fn with_marker<'a>(flags: &[&'a str], tail: &'a [String]) -> Vec<&'a str> {
    flags
        .iter()
        .copied()
        .chain(tail.iter().map(String::as_str))
        .collect()
}

/// Waits for tiermem; past `limit`, kills its whole process group (tiermem
/// and the program: every test starts tiermem in a group of its own) and fails.
fn wait_within(child: &mut Child, limit: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("waiting for tiermem") {
            return status;
        }
        if start.elapsed() > limit {
            let processes = group_processes(child);
            kill_group(child);
            panic!("tiermem run did not exit within {limit:?}; its processes:\n{processes}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What tiermem's process group is doing, for a failure message.
fn group_processes(child: &Child) -> String {
    let pgid = child.id().to_string();
    Command::new("ps")
        .args(["-e", "-o", "pid=,ppid=,pgid=,stat=,wchan=,args="])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.split_whitespace().nth(2) == Some(pgid.as_str()))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_else(|e| format!("(ps failed: {e})"))
}

fn kill_group(child: &mut Child) {
    // SAFETY: kill has no memory-safety preconditions; the group is the one
    // this test created for tiermem (process_group(0)).
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
    let _ = child.kill();
    let _ = child.wait();
}

fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("starting tiermem");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let status = wait_within(&mut child, limit);
    Output {
        status,
        stdout: out_reader.join().expect("stdout reader"),
        stderr: err_reader.join().expect("stderr reader"),
    }
}

fn send(pid: u32, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions; `pid` is our child,
    // not yet reaped.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

/// Starts `tiermem run -- sh -c SCRIPT`, waits until the script prints
/// "ready", sends `sig` to tiermem's pid only, and returns the exit status
/// and the rest of the script's output.
fn signal_after_ready(script: &str, sig: libc::c_int) -> (ExitStatus, String) {
    let s = Scratch::new();
    let mut child = s
        .tiermem_run(&["--dram", "64M", "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("starting tiermem");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        let _ = tx.send(line);
        let mut rest = String::new();
        let _ = out.read_to_string(&mut rest);
        rest
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
    if line.trim() != "ready" {
        let processes = group_processes(&child);
        kill_group(&mut child);
        panic!("the script did not start: {line:?}; processes:\n{processes}");
    }
    send(child.id(), sig);
    let status = wait_within(&mut child, Duration::from_secs(20));
    (status, reader.join().expect("output reader"))
}

#[test]
fn exit_status_is_passed_through() {
    let s = Scratch::new();
    for (script, code) in [("exit 7", 7), ("exit 0", 0), ("exit 255", 255)] {
        let out = output_within(
            &mut s.tiermem_run(&["--dram", "64M", "--", "sh", "-c", script]),
            Duration::from_secs(60),
        );
        assert_eq!(
            out.status.code(),
            Some(code),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_signal_sent_to_tiermem_reaches_the_program() {
    let (status, _) = signal_after_ready(
        r#"trap "exit 42" TERM; echo ready; while :; do sleep 0.05; done"#,
        libc::SIGTERM,
    );
    assert_eq!(status.code(), Some(42));
    let (status, _) = signal_after_ready(
        r#"trap "exit 43" USR1; echo ready; while :; do sleep 0.05; done"#,
        libc::SIGUSR1,
    );
    assert_eq!(status.code(), Some(43));
}

#[test]
fn a_program_killed_by_a_signal_gives_128_plus_the_signal() {
    let (status, _) = signal_after_ready("echo ready; exec sleep 30", libc::SIGINT);
    assert_eq!(status.code(), Some(128 + libc::SIGINT));
    let s = Scratch::new();
    let out = output_within(
        &mut s.tiermem_run(&["--dram", "64M", "--", "sh", "-c", "kill -KILL $$"]),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(128 + libc::SIGKILL));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_signal_the_program_sends_to_its_group_is_not_echoed_back() {
    let s = Scratch::new();
    let script = r#"n=0; trap 'n=$((n+1))' USR1; kill -USR1 0; sleep 0.3; echo got=$n"#;
    let out = output_within(
        &mut s.tiermem_run(&["--dram", "64M", "--", "sh", "-c", script]),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "got=1");
}

/// Ctrl-C on a terminal reaches tiermem and the program (one process group):
/// the program must see it once, not a second time from tiermem.
#[test]
fn ctrl_c_on_a_terminal_is_delivered_once() {
    let s = Scratch::new();
    let (mut master, slave) = open_pty();
    let script = r#"n=0; trap 'n=$((n+1))' INT; echo ready; i=0; while [ $i -lt 30 ]; do sleep 0.05; i=$((i+1)); done; echo got=$n"#;
    let mut cmd = s.tiermem_run(&["--dram", "64M", "--", "sh", "-c", script]);
    cmd.stdin(slave.try_clone().expect("dup"))
        .stdout(slave.try_clone().expect("dup"))
        .stderr(slave);
    // SAFETY: only async-signal-safe calls (setsid, ioctl) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("starting tiermem on a pty");
    drop(cmd); // our copies of the slave side: the reader sees EOF at exit
    let (tx, rx) = std::sync::mpsc::channel();
    let mut reader = master.try_clone().expect("dup");
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !String::from_utf8_lossy(&seen).contains("ready") {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(chunk) => seen.extend(chunk),
            Err(_) => {
                kill_group(&mut child);
                panic!(
                    "no 'ready' from the program: {}",
                    String::from_utf8_lossy(&seen)
                );
            }
        }
    }
    std::io::Write::write_all(&mut master, b"\x03").expect("typing Ctrl-C");
    let status = wait_within(&mut child, Duration::from_secs(20));
    while let Ok(chunk) = rx.recv_timeout(Duration::from_secs(2)) {
        seen.extend(chunk);
        if String::from_utf8_lossy(&seen).contains("got=") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&seen);
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(
        text.contains("got=1"),
        "Ctrl-C delivered other than once: {text}"
    );
}

fn open_pty() -> (std::fs::File, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors; the name and settings
    // pointers may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are fresh from openpty and owned here alone.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            OwnedFd::from_raw_fd(slave),
        )
    }
}

#[test]
fn the_program_sees_the_resolved_configuration() {
    let s = Scratch::new();
    let out = output_within(
        s.tiermem_run(&[
            "--dram",
            "64M",
            "--",
            "sh",
            "-c",
            "echo $TIERMEM_DRAM $TIERMEM_PRELOAD; echo $LD_PRELOAD",
        ])
        .env("TIERMEM_DRAM", "32M"),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("67108864 1"), "{stdout}");
    let preload = lines.next().unwrap_or_default();
    assert!(preload.contains("libtiermem.so"), "{stdout}");
    let lib = s.lib.canonicalize().expect("library path");
    assert_eq!(preload.split(':').next(), lib.to_str(), "{stdout}");
}

/// Go's runtime must clear the memory it returned to the system before it
/// reuses it (see `tests/programs/go_heap`): the program gets
/// `madvdontneed=0` after the user's own `GODEBUG` settings, and a user who
/// set `madvdontneed` keeps it. No warning for a program not written in Go
/// (`run_programs.rs` has the one for a Go program).
#[test]
fn a_go_runtime_is_told_to_clear_the_memory_it_returns() {
    let s = Scratch::new();
    let godebug_of = |user: Option<&str>| {
        let mut cmd = s.tiermem_run(&["--dram", "16M", "--", "sh", "-c", "echo \"$GODEBUG\""]);
        if let Some(v) = user {
            cmd.env("GODEBUG", v);
        }
        let out = output_within(&mut cmd, Duration::from_secs(60));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
        (stdout, stderr)
    };
    let (plain, stderr) = godebug_of(None);
    assert_eq!(plain, "madvdontneed=0");
    assert!(stderr.is_empty(), "{stderr}");
    let (added, _) = godebug_of(Some("gctrace=1"));
    assert_eq!(added, "gctrace=1,madvdontneed=0");
    let (kept, stderr) = godebug_of(Some("madvdontneed=1"));
    assert_eq!(kept, "madvdontneed=1");
    assert!(stderr.is_empty(), "{stderr}");
}

/// The first CPU this test may run on, from its own status file.
fn first_allowed_cpu() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("our status");
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list");
    list.trim()
        .split([',', '-'])
        .next()
        .expect("a CPU")
        .to_string()
}

#[test]
fn cpus_restricts_the_program_to_those_cpus() {
    let s = Scratch::new();
    let cpu = first_allowed_cpu();
    for choice in [cpu.as_str(), "irq"] {
        let out = output_within(
            &mut s.tiermem_run(&[
                "--dram",
                "64M",
                "--cpus",
                choice,
                "--",
                "grep",
                "Cpus_allowed_list",
                "/proc/self/status",
            ]),
            Duration::from_secs(60),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if choice == "irq" && out.status.code() == Some(2) {
            // No block device with MSI interrupts under the backing store
            // (a container, tmpfs): refused with the reason.
            assert!(stderr.contains("--cpus"), "{stderr}");
            continue;
        }
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let allowed = stdout.split_whitespace().last().unwrap_or_default();
        let expected = match choice == cpu {
            true => cpu.clone(),
            false => {
                let (irq_cpus, _) = tiermem_core::cpus::device_irq_cpus(Path::new("/var/tmp"))
                    .expect("tiermem ran with --cpus irq, so the device was found");
                tiermem_core::cpus::format_cpu_list(&irq_cpus)
            }
        };
        assert_eq!(allowed, expected, "--cpus {choice}: {stdout}");
    }
}

#[test]
fn bad_cpus_stop_before_the_program() {
    let s = Scratch::new();
    let tail = s.touch_marker();
    let mut cmd = s.tiermem_run(&with_marker(&["--cpus", "3-1"], &tail));
    let out = output_within(&mut cmd, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!s.marker().exists(), "the program started: {stderr}");
    for word in ["--cpus", "3-1", "runs backwards", "irq"] {
        assert!(stderr.contains(word), "{word} missing: {stderr}");
    }
    let cmd = s.tiermem_run(&with_marker(&["--cpus", "1023"], &tail));
    let msg = s.expect_stop(cmd, 2);
    assert!(
        msg.contains("CPU 1023 is not one this process may run on"),
        "{msg}"
    );
}

/// The environment exactly as the program was started with it: what
/// /proc/<pid>/environ records at exec, whatever the library does later.
#[test]
fn flags_and_variables_reach_the_program() {
    let s = Scratch::new();
    let out = output_within(
        s.tiermem_run(&[
            "--stats",
            "--no-inherit",
            "--untiered-memfd",
            "--mmap-threshold",
            "64K",
            "--page-size",
            "8K",
            "--preset",
            "memory-mode",
            "--prefetch",
            "2",
            "--",
            "sh",
            "-c",
            "tr '\\0' '\\n' < /proc/$$/environ",
        ])
        .env("TIERMEM_DRAM", "48M")
        .env("TIERMEM_POLICY", "fifo")
        .env("TIERMEM_BACKING", "/var/tmp")
        .env("TIERMEM_WATERMARK_SCALE_FACTOR", "100")
        .env("TIERMEM_IO_POLL", "iopoll"),
        Duration::from_secs(60),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let env: Vec<&str> = stdout.lines().collect();
    for expected in [
        "TIERMEM_DRAM=50331648",
        "TIERMEM_PAGE_SIZE=8192",
        "TIERMEM_POLICY=fifo",
        "TIERMEM_BACKING=/var/tmp",
        "TIERMEM_PRELOAD=1",
        "TIERMEM_STATS=1",
        "TIERMEM_NO_INHERIT=1",
        "TIERMEM_MEMFD=off",
        "TIERMEM_MMAP_THRESHOLD=64K",
        "TIERMEM_ASSOCIATIVITY=1",
        "TIERMEM_PREFETCH=2",
        "TIERMEM_WRITE_POLICY=write-back",
        "TIERMEM_INCLUSION=inclusive",
        "TIERMEM_WATERMARK_SCALE_FACTOR=100",
        "TIERMEM_IO_POLL=iopoll",
    ] {
        assert!(env.contains(&expected), "{expected} missing: {stdout}");
    }
    // This machine's disk has no poll queues; wherever IOPOLL cannot be
    // used, a note says so and the program runs anyway.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("TIERMEM_IO_POLL=iopoll") && stderr.contains("interrupt-driven"),
        "{stderr}"
    );
    assert!(
        env.iter()
            .any(|l| l.starts_with("TIERMEM_HANDLER_THREADS=")),
        "{stdout}"
    );
    assert!(
        env.iter()
            .any(|l| l.starts_with("LD_PRELOAD=") && l.contains("libtiermem.so")),
        "{stdout}"
    );
}

#[test]
fn userfaultfd_not_permitted_stops_before_the_program() {
    let s = Scratch::new();
    let tail = s.touch_marker();
    let mut cmd = s.tiermem_run(&with_marker(&["--dram", "64M"], &tail));
    cmd.env("TIERMEM_TEST_DENY_UFFD", "1");
    let msg = s.expect_stop(cmd, 1);
    for fix in [
        "userfaultfd is not permitted",
        "vm.unprivileged_userfaultfd",
        "/dev/userfaultfd",
        "CAP_SYS_PTRACE",
    ] {
        assert!(msg.contains(fix), "{fix} missing: {msg}");
    }
}

/// `--stats-file`: the program tiermem run started writes its statistics
/// as JSON in the envelope, even through a shell that pages nothing and
/// forks the program that pages; with `%p` that child writes its own file
/// and the shell's helpers, which page nothing, write none.
#[test]
fn stats_file_holds_the_started_programs_statistics_as_json() {
    let s = Scratch::new();
    let pager =
        "python3 -c 'b = bytearray(48 << 20); b[::4096] = bytes(len(b[::4096])); print(sum(b))'";
    let one = s.path().join("one.json");
    let mut cmd = s.tiermem_run(&["--dram", "16M", "--stats-file"]);
    cmd.arg(&one).args([
        "--",
        "python3",
        "-c",
        "b = bytearray(48 << 20); print(len(b))",
    ]);
    let out = output_within(&mut cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&one).expect("the stats file")).expect("JSON");
    assert_eq!(json["schema"], "tiermem.run-stats/1");
    assert!(
        json["program"]
            .as_str()
            .unwrap_or("")
            .starts_with("python3"),
        "{json}"
    );
    assert!(
        json["stats"]["page_outs"].as_u64().unwrap_or(0) > 0,
        "{json}"
    );
    assert!(json["stats"]["fault_latency"]["p50_ns"].is_u64(), "{json}");
    for key in ["tiermem_version", "kernel", "command_line", "host"] {
        assert!(json.get(key).is_some(), "no {key}: {json}");
    }

    let dir = s.path().join("per-pid");
    std::fs::create_dir(&dir).expect("a directory for the files");
    let template = dir.join("s-%p.json");
    let mut cmd = s.tiermem_run(&["--dram", "16M", "--stats-file"]);
    cmd.arg(&template)
        .args(["--", "bash", "-c", &format!("{pager}; true")]);
    let out = output_within(&mut cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<serde_json::Value> = std::fs::read_dir(&dir)
        .expect("the directory")
        .map(|e| serde_json::from_slice(&std::fs::read(e.expect("entry").path()).unwrap()).unwrap())
        .collect();
    let programs: Vec<&str> = files.iter().filter_map(|j| j["program"].as_str()).collect();
    assert_eq!(
        files.len(),
        2,
        "the shell and python, nothing else: {programs:?}"
    );
    assert!(
        programs.iter().any(|p| p.starts_with("bash")),
        "{programs:?}"
    );
    assert!(
        programs.iter().any(|p| p.starts_with("python3")),
        "{programs:?}"
    );
}

#[test]
fn a_stats_file_in_a_missing_directory_stops_before_the_program() {
    let s = Scratch::new();
    let tail = s.touch_marker();
    let path = s.path().join("no-such-dir/stats.json");
    let path_text = path.display().to_string();
    let cmd = s.tiermem_run(&with_marker(
        &["--dram", "64M", "--stats-file", &path_text],
        &tail,
    ));
    let msg = s.expect_stop(cmd, 2);
    assert!(msg.contains("--stats-file"), "{msg}");
    assert!(msg.contains("no-such-dir"), "{msg}");
}

#[test]
fn missing_backing_directory_stops_before_the_program() {
    let s = Scratch::new();
    let backing = s.path().join("no-such-dir/sub");
    let backing_text = backing.display().to_string();
    let tail = s.touch_marker();
    let cmd = s.tiermem_run(&with_marker(
        &["--dram", "64M", "--backing", &backing_text],
        &tail,
    ));
    let msg = s.expect_stop(cmd, 1);
    assert!(msg.contains(&backing_text), "{msg}");
    assert!(msg.contains("mkdir -p"), "{msg}");
    assert!(msg.contains("Fix:"), "{msg}");
}

#[test]
fn missing_backing_directory_from_the_environment_stops_too() {
    let s = Scratch::new();
    let backing = s.path().join("gone/deeper");
    let tail = s.touch_marker();
    let mut cmd = s.tiermem_run(&with_marker(&["--dram", "64M"], &tail));
    cmd.env("TIERMEM_BACKING", &backing);
    let msg = s.expect_stop(cmd, 1);
    assert!(msg.contains(&backing.display().to_string()), "{msg}");
    assert!(msg.contains("TIERMEM_BACKING"), "{msg}");
}

/// Root can write to a mode-0500 directory, so the store goes where no one
/// can create a file: below a regular file (ENOTDIR).
#[test]
fn unusable_backing_store_stops_before_the_program() {
    let s = Scratch::new();
    let file = s.path().join("afile");
    std::fs::write(&file, b"not a directory").expect("creating afile");
    let backing = file.join("sub");
    let backing_text = backing.display().to_string();
    let tail = s.touch_marker();
    let cmd = s.tiermem_run(&with_marker(
        &["--dram", "64M", "--backing", &backing_text],
        &tail,
    ));
    let msg = s.expect_stop(cmd, 1);
    assert!(msg.contains(&backing_text), "{msg}");
    assert!(msg.contains("Not a directory"), "{msg}");
    assert!(msg.contains("Fix:") && msg.contains("--backing"), "{msg}");
}

#[test]
fn backing_store_on_a_read_only_filesystem_stops_before_the_program() {
    if !Path::new("/proc/self").is_dir() {
        eprintln!("skipped: no /proc");
        return;
    }
    let s = Scratch::new();
    let tail = s.touch_marker();
    let cmd = s.tiermem_run(&with_marker(
        &["--dram", "64M", "--backing", "/proc/self"],
        &tail,
    ));
    let msg = s.expect_stop(cmd, 1);
    assert!(msg.contains("/proc/self"), "{msg}");
    assert!(msg.contains("Fix:"), "{msg}");
}

#[test]
fn too_small_a_budget_stops_before_the_program() {
    let s = Scratch::new();
    let tail = s.touch_marker();
    for (flags, floor) in [
        (vec!["--dram", "8K"], "--dram 1M"),
        (vec!["--dram", "512K"], "--dram 1M"),
        (vec!["--dram", "16M", "--page-size", "2M"], "--dram 32M"),
    ] {
        let cmd = s.tiermem_run(&with_marker(&flags, &tail));
        let msg = s.expect_stop(cmd, 1);
        assert!(msg.contains("too small"), "{msg}");
        assert!(msg.contains("minimum"), "{msg}");
        assert!(msg.contains(floor), "{msg}");
    }
}

#[test]
fn bad_values_stop_before_the_program() {
    let s = Scratch::new();
    let tail = s.touch_marker();
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &["--dram", "lots"],
            &["TIERMEM_DRAM", "'lots'", "--dram", "256M"],
        ),
        (
            &["--page-size", "3000"],
            &["TIERMEM_PAGE_SIZE", "'3000'", "power of two"],
        ),
        (
            &["--policy", "lru"],
            &["TIERMEM_POLICY", "'lru'", "fifo, clock or s3fifo"],
        ),
        (
            &["--handler-threads", "0"],
            &["TIERMEM_HANDLER_THREADS", "1 to 64"],
        ),
        (
            &["--mmap-threshold", "huge"],
            &["TIERMEM_MMAP_THRESHOLD", "'huge'", "256K"],
        ),
    ];
    for (flags, words) in cases {
        let cmd = s.tiermem_run(&with_marker(flags, &tail));
        let msg = s.expect_stop(cmd, 1);
        for w in words {
            assert!(msg.contains(w), "{w} missing: {msg}");
        }
    }
    let mut cmd = s.tiermem_run(&with_marker(&[], &tail));
    cmd.env("TIERMEM_DRAM", "a lot");
    let msg = s.expect_stop(cmd, 1);
    assert!(msg.contains("invalid TIERMEM_DRAM 'a lot'"), "{msg}");
}

#[test]
fn signal_fault_delivery_is_refused_in_transparent_mode() {
    let s = Scratch::new();
    let tail = s.touch_marker();
    let mut cmd = s.tiermem_run(&with_marker(&[], &tail));
    cmd.env("TIERMEM_FAULTS", "signal");
    let msg = s.expect_stop(cmd, 1);
    for w in ["invalid TIERMEM_FAULTS 'signal'", "handler", "EFAULT"] {
        assert!(msg.contains(w), "{w} missing: {msg}");
    }
}

#[test]
fn command_not_found_is_127_and_not_executable_is_126() {
    let s = Scratch::new();
    let out = output_within(
        &mut s.tiermem_run(&["--dram", "64M", "--", "no-such-command-tiermem-xyz", "arg"]),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "tiermem run: no-such-command-tiermem-xyz: command not found\n"
    );
    let script = s.path().join("script.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ntouch {}\n", s.marker().display()),
    )
    .expect("writing the script");
    let script_text = script.display().to_string();
    let msg = s.expect_stop(s.tiermem_run(&["--dram", "64M", "--", &script_text]), 126);
    assert!(msg.contains("Permission denied"), "{msg}");
    let missing = s.path().join("missing-program").display().to_string();
    let msg = s.expect_stop(s.tiermem_run(&["--dram", "64M", "--", &missing]), 127);
    assert!(msg.contains("No such file or directory"), "{msg}");
}

#[test]
fn missing_library_stops_before_the_program() {
    let s = Scratch::new();
    let tail = s.touch_marker();
    let mut cmd = s.tiermem_run(&with_marker(&["--dram", "64M"], &tail));
    cmd.env("TIERMEM_LIB", "/nonexistent/libtiermem.so");
    let msg = s.expect_stop(cmd, 1);
    assert!(
        msg.contains("TIERMEM_LIB=/nonexistent/libtiermem.so"),
        "{msg}"
    );
    assert!(
        msg.contains("cargo build --release -p tiermem-capi"),
        "{msg}"
    );

    // A tiermem binary with no libtiermem.so next to it or in ../lib.
    let bin_dir = s.path().join("bin");
    std::fs::create_dir(&bin_dir).expect("bin dir");
    let lonely = bin_dir.join("tiermem");
    std::fs::copy(env!("CARGO_BIN_EXE_tiermem"), &lonely).expect("copying tiermem");
    let mut cmd = Command::new(&lonely);
    for var in SCRUBBED {
        cmd.env_remove(var);
    }
    cmd.arg("run").args(with_marker(&["--dram", "64M"], &tail));
    let msg = s.expect_stop(cmd, 1);
    assert!(msg.contains("cannot find libtiermem.so"), "{msg}");
    assert!(
        msg.contains(&bin_dir.join("libtiermem.so").display().to_string()),
        "{msg}"
    );
    assert!(msg.contains("lib/tiermem/libtiermem.so"), "{msg}");
    assert!(
        msg.contains("cargo build --release -p tiermem-capi"),
        "{msg}"
    );
    assert!(msg.contains("TIERMEM_LIB"), "{msg}");
}

#[test]
fn help_documents_the_contract() {
    let out = Command::new(env!("CARGO_BIN_EXE_tiermem"))
        .args(["run", "--help"])
        .output()
        .expect("tiermem run --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for word in [
        "--dram",
        "--backing",
        "--page-size",
        "--policy",
        "--handler-threads",
        "--mmap-threshold",
        "--stats",
        "--no-inherit",
        "--untiered-memfd",
        "TIERMEM_MEMFD",
        "--encrypt",
        "TIERMEM_ENCRYPT",
        "TIERMEM_CHECKSUMS",
        "TIERMEM_IO_DEADLINE",
        "format-store",
        "TIERMEM_DRAM",
        "TIERMEM_BACKING",
        "TIERMEM_PAGE_SIZE",
        "TIERMEM_POLICY",
        "TIERMEM_STATS",
        "TIERMEM_MMAP_THRESHOLD",
        "TIERMEM_FAULTS",
        "TIERMEM_LIB",
        "fork",
        "exec",
        "Exit status",
        "128+N",
        "vm.unprivileged_userfaultfd",
        "/dev/userfaultfd",
        "CAP_SYS_PTRACE",
    ] {
        assert!(help.contains(word), "--help lacks {word}");
    }
}
