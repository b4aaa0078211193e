//! A remote disk as the backing store, with real faults. Debian's nbdkit
//! serves a RAM disk over NBD through its `log`, `error` and `delay`
//! filters, and nbdfuse exposes it as a file (this machine kind has no nbd,
//! ublk or device-mapper module). The log proves that pages really travel
//! to the server and back, past any cache; the error filter fails reads or
//! writes once a trigger file exists; the delay filter makes the disk slow.
//!
//! Needs root, nbdkit and nbdfuse (`.ci/run` installs them); every program
//! runs under timeout(1), and the disk is unmounted and its server stopped
//! even when a test fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../tests/support/c_program.rs"]
mod c_program;
#[path = "../../../tests/support/pager.rs"]
mod pager;
use pager::PAGER;

const TIERMEM: &str = env!("CARGO_BIN_EXE_tiermem");
/// The RAM disk's size.
const DISK: &str = "256M";
/// An nbdkit RAM disk mounted as a file by nbdfuse; unmounted, stopped and
/// removed on drop.
struct NbdDisk {
    dir: PathBuf,
    server: Child,
    fuse: Option<Child>,
}

impl NbdDisk {
    /// Starts the server with the log filter and `filters` (name, then
    /// their parameters), and mounts the disk at `self.file()`.
    fn start(tag: &str, filters: &[&str], params: &[String]) -> NbdDisk {
        let dir = disk_dir(tag);
        std::fs::create_dir_all(dir.join("mnt")).expect("creating the test directory");
        let mut server = Command::new("nbdkit");
        server
            .args(["-f", "--exit-with-parent", "-U"])
            .arg(dir.join("sock"))
            .arg("--filter=log");
        for f in filters {
            server.arg(format!("--filter={f}"));
        }
        server
            .args(["memory", DISK])
            .arg(format!("logfile={}", dir.join("log").display()))
            .args(params);
        let server = server
            .spawn()
            .expect("starting nbdkit (apt-get install nbdkit)");
        let mut disk = NbdDisk {
            dir,
            server,
            fuse: None,
        };
        disk.wait_for(&disk.dir.join("sock"));
        let fuse = Command::new("nbdfuse")
            .args(["-o", "umask=077"])
            .arg(disk.file())
            .arg("--unix")
            .arg(disk.dir.join("sock"))
            .spawn()
            .expect("starting nbdfuse (apt-get install libnbd-bin)");
        disk.fuse = Some(fuse);
        disk.wait_for(&disk.file());
        disk
    }

    fn file(&self) -> PathBuf {
        self.dir.join("mnt").join("disk")
    }

    /// The file whose existence makes the error filter fail requests.
    fn trigger(&self) -> PathBuf {
        self.dir.join("trigger")
    }

    fn wait_for(&self, path: &Path) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !path.exists() {
            assert!(
                Instant::now() < deadline,
                "{} never appeared",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Bytes the server was asked to read and to write, from its log.
    fn bytes_read_and_written(&self) -> (u64, u64) {
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        let (mut read, mut written) = (0, 0);
        for line in log.lines() {
            let count = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("count=0x"))
                .and_then(|hex| u64::from_str_radix(hex, 16).ok())
                .unwrap_or(0);
            if line.contains(" Read id=") {
                read += count;
            } else if line.contains(" Write id=") {
                written += count;
            }
        }
        (read, written)
    }
}

impl Drop for NbdDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.join("mnt")).status();
        if let Some(mut fuse) = self.fuse.take() {
            let _ = fuse.kill();
            let _ = fuse.wait();
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tiermem(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new("timeout")
        .args(["-k", "10", "300", TIERMEM])
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("running tiermem under timeout(1)")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Gives the disk's file to tiermem.
fn format(disk: &NbdDisk) {
    let file = disk.file();
    let formatted = tiermem(&["format-store", file.to_str().expect("a UTF-8 path")], &[]);
    assert!(formatted.status.success(), "{:?}", text(&formatted));
}

/// Runs the pager on the disk's file under a 16 MiB budget; with `trigger`,
/// the pager creates the trigger file between its two passes.
fn run_pager(disk: &NbdDisk, trigger: bool, env: &[(&str, &str)]) -> Output {
    let file = disk.file();
    let file = file.to_str().expect("a UTF-8 path");
    let trigger_path = disk.trigger();
    let mut args = vec![
        "run",
        "--dram",
        "16M",
        "--stats",
        "--backing",
        file,
        "--",
        "python3",
        "-c",
        PAGER,
    ];
    if trigger {
        args.push(trigger_path.to_str().expect("a UTF-8 path"));
    }
    tiermem(&args, env)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Pages written to the remote disk come back with every byte right, and
/// the server's log shows that they really went there and back: at least
/// the 48 MiB that cannot stay in DRAM, both ways.
#[test]
fn pages_travel_to_the_nbd_server_and_back_intact() {
    if !is_root() {
        eprintln!("skipped: mounting a FUSE file needs root");
        return;
    }
    let disk = NbdDisk::start("roundtrip", &[], &[]);
    format(&disk);
    let out = run_pager(&disk, false, &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("same"), "{stdout}\n{stderr}");
    let shown = format!("backing         {}", disk.file().display());
    assert!(
        stderr.contains(&shown),
        "the program paged elsewhere:\n{stderr}"
    );
    let (read, written) = disk.bytes_read_and_written();
    assert!(
        written >= 48 << 20,
        "the server saw {written} bytes written"
    );
    assert!(read >= 48 << 20, "the server saw {read} bytes read");
}

/// The disk's file holds bytes tiermem did not write (a RAM disk reads as
/// zeros, and its size is fixed): it is refused until formatted.
#[test]
fn an_unformatted_nbd_file_is_refused_by_name() {
    if !is_root() {
        eprintln!("skipped: mounting a FUSE file needs root");
        return;
    }
    let disk = NbdDisk::start("refused", &[], &[]);
    let file = disk.file();
    let out = tiermem(
        &[
            "run",
            "--dram",
            "16M",
            "--backing",
            file.to_str().unwrap(),
            "--",
            "true",
        ],
        &[],
    );
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("tiermem did not write"), "{stderr}");
    assert!(stderr.contains("tiermem format-store"), "{stderr}");
}

/// Once the server fails every read, the next access to an evicted page
/// gets SIGBUS, with the address, the file, the offset and the errno on
/// stderr; the program never sees wrong bytes.
#[test]
fn a_failing_server_read_is_a_sigbus_naming_the_file_and_offset() {
    if !is_root() {
        eprintln!("skipped: mounting a FUSE file needs root");
        return;
    }
    let disk = NbdDisk::start(
        "readerr",
        &["error"],
        &[
            "error-pread=EIO".into(),
            "error-pread-rate=100%".into(),
            format!("error-pread-file={}", disk_trigger("readerr").display()),
        ],
    );
    format(&disk);
    let out = run_pager(&disk, true, &[]);
    let (stdout, stderr) = text(&out);
    assert!(!stdout.contains("DIFFERENT"), "{stdout}\n{stderr}");
    assert!(!stdout.contains("same"), "{stdout}\n{stderr}");
    assert_eq!(out.status.code(), Some(128 + libc::SIGBUS), "{stderr}");
    let named = format!(
        "from the backing store {} at byte offset",
        disk.file().display()
    );
    assert!(stderr.contains(&named), "{stderr}");
    assert!(stderr.contains("Input/output error"), "{stderr}");
    assert!(stderr.contains("the retry failed the same way"), "{stderr}");
}

/// Once the server fails every write, the pages stay in DRAM and the
/// program is stopped with the diagnostic when the deadline passes, not
/// left to retry forever.
#[test]
fn a_failing_server_write_stops_the_program_at_the_deadline() {
    if !is_root() {
        eprintln!("skipped: mounting a FUSE file needs root");
        return;
    }
    let trigger = disk_trigger("writeerr");
    let disk = NbdDisk::start(
        "writeerr",
        &["error"],
        &[
            "error-pwrite=EIO".into(),
            "error-pwrite-rate=100%".into(),
            format!("error-pwrite-file={}", trigger.display()),
        ],
    );
    format(&disk);
    std::fs::write(&trigger, b"").expect("creating the trigger");
    let started = Instant::now();
    let out = run_pager(&disk, false, &[("TIERMEM_IO_DEADLINE", "3")]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("same"), "{stdout}\n{stderr}");
    assert!(stderr.contains("failed: Input/output error"), "{stderr}");
    assert!(
        stderr.contains("writes to the backing store have failed for 3 s"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}

/// A slow server (2 ms per read and per write) makes paging slow, never
/// wrong.
#[test]
fn a_slow_server_returns_every_byte() {
    if !is_root() {
        eprintln!("skipped: mounting a FUSE file needs root");
        return;
    }
    let disk = NbdDisk::start(
        "slow",
        &["delay"],
        &["rdelay=2ms".into(), "wdelay=2ms".into()],
    );
    format(&disk);
    let out = run_pager(&disk, false, &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("same"), "{stdout}\n{stderr}");
}

/// O_DIRECT reads from a slow disk (50 ms a read) into tiered buffers,
/// while two other threads page hard through an 8 MiB budget: each read's
/// pages stay in DRAM until it ends, so no byte of any read is lost
/// (`tests/c/preload_direct_io.c` checks every byte). Without the pins a
/// page evicted mid-read kept its old bytes, in every run tried, with
/// either policy. The test needs a read's pages to come up as victims
/// while it is in flight: under FIFO that takes the paging threads a whole
/// budget's worth of faults within one read, which 20 ms a read did not
/// always leave on a loaded machine (the compressed tier serves those
/// faults in about 10 µs each).
#[test]
fn o_direct_reads_from_a_slow_disk_into_tiered_buffers_lose_nothing() {
    if !is_root() {
        eprintln!("skipped: mounting a FUSE file needs root");
        return;
    }
    let disk = NbdDisk::start("direct", &["delay"], &["rdelay=50ms".into()]);
    let (exe, _, scratch) = c_program::compile("preload_direct_io");
    let file = disk.file();
    for policy in ["clock", "fifo"] {
        let out = Command::new("timeout")
            .args(["-k", "10", "300", TIERMEM, "run", "--dram", "8M", "--stats"])
            .args(["--policy", policy, "--"])
            .arg(&exe)
            .arg(&file)
            .arg("6")
            .stdin(Stdio::null())
            .output()
            .expect("running tiermem under timeout(1)");
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{policy}: {stdout}\n{stderr}");
        assert!(stdout.contains("OK reads="), "{policy}: {stdout}\n{stderr}");
        assert!(
            stderr.contains("kept in DRAM"),
            "{policy}: no victim was ever pinned\n{stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(scratch);
}

/// The directory of `NbdDisk::start(tag, ..)`: socket, log, mount point.
fn disk_dir(tag: &str) -> PathBuf {
    PathBuf::from(format!("/var/tmp/tiermem-nbd-{tag}-{}", std::process::id()))
}

/// The disk's trigger file, for filter parameters given before it starts.
fn disk_trigger(tag: &str) -> PathBuf {
    disk_dir(tag).join("trigger")
}
