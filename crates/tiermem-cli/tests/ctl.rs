//! `tiermem ctl` and `tiermem top` against a real program under
//! `tiermem run`: statistics, a live budget change that the resident set
//! follows, refusal of another user, clear errors for a bad size and a
//! process with no control socket, and `TIERMEM_CONTROL=off`. Every
//! process runs under timeout(1); the program itself is killed with its
//! process group if the test fails half-way.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../tests/support/libtiermem.rs"]
mod support;

const TIERMEM: &str = env!("CARGO_BIN_EXE_tiermem");

/// Touches every page of 64 MiB, says `ready`, waits for a line on stdin,
/// then prints the sum of one byte per page (65530) and exits.
const HOLDER: &str = "import sys\n\
b = bytearray(64 << 20)\n\
for i in range(0, len(b), 4096): b[i] = (i >> 12) % 7 + 1\n\
print('ready', flush=True)\n\
sys.stdin.readline()\n\
print(sum(b[::4096]), flush=True)\n";

/// The holder under `tiermem run --dram 32M`, killed (with its group) on drop.
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Holder {
    fn start(extra_env: &[(&str, &str)]) -> Holder {
        let mut cmd = Command::new("timeout");
        cmd.args(["-k", "5", "120", TIERMEM, "run", "--dram", "32M", "--"])
            .args(["python3", "-c", HOLDER])
            .env("TIERMEM_LIB", support::libtiermem())
            .env("TIERMEM_COMPRESS", "off")
            .envs(extra_env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().expect("starting tiermem run");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("the holder's first line");
        assert_eq!(line.trim(), "ready", "the holder did not start");
        Holder {
            child,
            stdin,
            stdout,
        }
    }

    /// The pid of the tiered program: the python process in the group.
    fn program_pid(&self) -> u32 {
        let group = self.child.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
                let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                    continue;
                };
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
                let pgrp: u32 = after
                    .split_whitespace()
                    .nth(2)
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0);
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                if pgrp == group && comm.trim().starts_with("python") {
                    return pid;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("no python process in group {group}");
    }

    /// Lets the holder finish; its last line.
    fn finish(mut self) -> String {
        let mut stdin = self.stdin.take().expect("stdin");
        stdin.write_all(b"go\n").expect("writing to the holder");
        drop(stdin);
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("the holder's answer");
        let status = self.child.wait().expect("waiting for the holder");
        assert!(status.success(), "the holder failed: {status}");
        line.trim().to_string()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the holder's own process group.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

fn tiermem(args: &[&str]) -> Output {
    Command::new("timeout")
        .args(["-k", "5", "60", TIERMEM])
        .args(args)
        .output()
        .expect("running tiermem")
}

fn stats(pid: u32) -> serde_json::Value {
    let out = tiermem(&["ctl", &pid.to_string(), "stats", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stats as JSON")
}

#[test]
fn ctl_reads_stats_and_moves_the_budget_live() {
    let holder = Holder::start(&[]);
    let pid = holder.program_pid();
    let before = stats(pid);
    assert_eq!(before["schema"], "tiermem.stats/1");
    assert_eq!(before["pid"], pid);
    assert_eq!(before["stats"]["budget_bytes"], 32u64 << 20);
    assert!(before.get("host").is_some(), "the envelope: {before}");

    let out = tiermem(&["ctl", &pid.to_string(), "budget", "16M"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("16.0 MiB (was 32.0 MiB)"), "{text}");
    let asked = Instant::now();
    let took = loop {
        let now = stats(pid);
        if now["stats"]["resident_bytes"].as_u64().unwrap_or(u64::MAX) <= 16 << 20 {
            break asked.elapsed();
        }
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "resident never fell: {now}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    println!("the resident set was within the new budget {took:?} after tiermem ctl");
    assert_eq!(stats(pid)["stats"]["budget_bytes"], 16u64 << 20);

    let out = tiermem(&["top", "--once", "--json", "--interval", "0.2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let top: serde_json::Value = serde_json::from_slice(&out.stdout).expect("top as JSON");
    assert_eq!(top["schema"], "tiermem.top/1");
    let row = top["processes"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["pid"] == pid)
        .unwrap_or_else(|| panic!("top does not list {pid}: {top}"));
    assert_eq!(row["budget_bytes"], 16u64 << 20);

    let out = tiermem(&["top", "--once", "--interval", "0.2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("RESIDENT") && text.contains(&pid.to_string()),
        "{text}"
    );

    // Every page survived the squeeze.
    assert_eq!(holder.finish(), "65530");
}

#[test]
fn bad_requests_and_other_users_get_clear_errors() {
    let holder = Holder::start(&[]);
    let pid = holder.program_pid().to_string();

    let out = tiermem(&["ctl", &pid, "budget", "lots"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid budget 'lots'"));

    // pid 1 is never tiered here.
    let out = tiermem(&["ctl", "1", "stats"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no tiermem control socket"));

    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let out = Command::new("timeout")
            .args(["-k", "5", "60", "setpriv", "--reuid=65534", "--regid=65534"])
            .args(["--clear-groups", TIERMEM, "ctl", &pid, "budget", "1M"])
            .output()
            .expect("setpriv");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("refused"), "{err}");
        assert_eq!(
            stats(pid.parse().unwrap())["stats"]["budget_bytes"],
            32u64 << 20
        );
    } else {
        eprintln!("skipped the other-user case: it needs root to run as nobody");
    }
    assert_eq!(holder.finish(), "65530");
}

#[test]
fn control_off_leaves_no_socket() {
    let holder = Holder::start(&[("TIERMEM_CONTROL", "off")]);
    let pid = holder.program_pid().to_string();
    let out = tiermem(&["ctl", &pid, "stats"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TIERMEM_CONTROL=off"));
    assert_eq!(holder.finish(), "65530");
}
