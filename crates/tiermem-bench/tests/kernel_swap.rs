//! Root-only tests of the kernel-swap sandbox (memory cgroup v1 + swapfile).
//! They skip, saying why, where `SwapSandbox::availability()` fails.
//!
//! Helper processes are this test binary re-executed with `TIERMEM_SWAP_TEST_ROLE`
//! set (see `helper_role`): "hog" allocates and touches memory, "demo" builds a
//! sandbox with a hog in it and waits to be signalled or killed.
//!
//! The tests run one at a time (they all page against the machine's swap) and
//! every one of them removes what it made even when an assertion fails.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tiermem_bench::kernel_swap::{leftover_sandboxes, remove_leftovers, SandboxSpec, SwapSandbox};

const ROLE_ENV: &str = "TIERMEM_SWAP_TEST_ROLE";
const HOG_MIB_ENV: &str = "TIERMEM_SWAP_TEST_HOG_MIB";
const SWAP_DIR_ENV: &str = "TIERMEM_SWAP_TEST_DIR";
const MIB: u64 = 1 << 20;
/// Helpers never outlive this, whatever happens to the test.
const HELPER_LIFETIME: Duration = Duration::from_secs(60);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn available() -> bool {
    match SwapSandbox::availability() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("skipped: {why}");
            false
        }
    }
}

/// A directory on the root filesystem (not tmpfs). It is removed with a plain
/// `rmdir`, never recursively: an active swapfile inside must never be
/// unlinked, as it could then no longer be turned off by name.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(tag: &str) -> ScratchDir {
        let path = PathBuf::from(format!(
            "/var/tmp/tiermem-swap-test-{}-{tag}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).expect("creating a scratch dir in /var/tmp");
        ScratchDir(path)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn spec(limit_mib: u64, swap_mib: u64, dir: &Path) -> SandboxSpec {
    SandboxSpec {
        memory_limit_bytes: limit_mib * MIB,
        swap_bytes: swap_mib * MIB,
        swap_dir: dir.to_path_buf(),
        swap_device: None,
        overflow_swapfile_bytes: None,
    }
}

fn helper(role: &str) -> Command {
    let exe = std::env::current_exe().expect("locating the test executable");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "helper_role", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, role)
        .stdin(Stdio::null());
    cmd
}

/// The active swap areas, with the KiB each has in use (/proc/swaps).
fn swap_areas() -> Vec<(PathBuf, u64)> {
    std::fs::read_to_string("/proc/swaps")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let path = PathBuf::from(fields.first()?.replace("\\040", " "));
            Some((path, fields.get(3)?.parse().unwrap_or(0)))
        })
        .collect()
}

fn active_swaps() -> Vec<PathBuf> {
    swap_areas().into_iter().map(|(path, _)| path).collect()
}

fn is_active_swap(path: &Path) -> bool {
    active_swaps().iter().any(|p| p == path)
}

fn process_exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn assert_removed(cgroup: &Path, swapfile: &Path) {
    assert!(!cgroup.exists(), "cgroup {} still exists", cgroup.display());
    assert!(
        !is_active_swap(swapfile),
        "{} is still active swap",
        swapfile.display()
    );
    assert!(
        std::fs::symlink_metadata(swapfile).is_err(),
        "swapfile {} still exists",
        swapfile.display()
    );
}

/// Lines of a child's stdout, read by a thread so that waits can time out.
fn line_reader(stdout: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

// ---------------------------------------------------------------------------
// Helper processes

/// Does nothing in a normal test run; in a re-executed helper, plays its role.
#[test]
fn helper_role() {
    match std::env::var(ROLE_ENV).as_deref() {
        Ok("hog") => hog(),
        Ok("demo") => demo(),
        _ => {}
    }
}

/// Allocates and touches `TIERMEM_SWAP_TEST_HOG_MIB` MiB, says so, and keeps it.
fn hog() {
    let mib: usize = std::env::var(HOG_MIB_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128);
    // A non-zero fill writes every page.
    let memory = vec![0x5au8; mib << 20];
    std::hint::black_box(&memory);
    println!("HOG-READY");
    let _ = std::io::stdout().flush();
    std::thread::sleep(HELPER_LIFETIME);
    std::hint::black_box(&memory);
}

/// Builds a sandbox with a hog inside, prints
/// `SANDBOX <cgroup> <swapfile> <hog pid>` and waits to be signalled.
fn demo() {
    let dir = PathBuf::from(std::env::var_os(SWAP_DIR_ENV).expect("swap dir env var"));
    let mut sandbox = SwapSandbox::create(&spec(32, 64, &dir)).expect("creating the sandbox");
    let mut cmd = helper("hog");
    cmd.env(HOG_MIB_ENV, "48").stdout(Stdio::piped());
    sandbox.configure_command(&mut cmd);
    let mut hog = cmd.spawn().expect("spawning the hog");
    sandbox.adopt_child(hog.id() as i32);
    let lines = line_reader(hog.stdout.take().expect("hog stdout"));
    // libtest may have printed "test helper_role ... " on the same line.
    let ready = lines.iter().any(|l| l.ends_with("HOG-READY"));
    assert!(ready, "the hog never got ready");
    println!(
        "SANDBOX\t{}\t{}\t{}",
        sandbox.cgroup_path().display(),
        sandbox.swapfile_path().display(),
        hog.id()
    );
    let _ = std::io::stdout().flush();
    std::thread::sleep(HELPER_LIFETIME);
    // Never signalled: clean up and say so through the exit status.
    let _ = sandbox.cleanup();
    std::process::exit(3);
}

/// A running `demo` helper. Dropping it kills the demo if it still runs and
/// removes whatever it left behind (its owner is then dead, so it is a
/// leftover), so a failed assertion leaves nothing on the machine.
struct Demo {
    child: Child,
    cgroup: PathBuf,
    swapfile: PathBuf,
    hog: i32,
    _dir: ScratchDir,
}

impl Demo {
    /// A demo SIGKILLed once its sandbox is up: nothing of it cleans up.
    fn killed(tag: &str) -> Demo {
        let mut demo = Demo::start(tag);
        // SAFETY: signalling our own child, which has not been reaped.
        unsafe { libc::kill(demo.pid(), libc::SIGKILL) };
        let status = wait_timeout(&mut demo.child, Duration::from_secs(20)).expect("demo exit");
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{tag}");
        demo
    }

    fn start(tag: &str) -> Demo {
        let dir = ScratchDir::new(tag);
        let mut child = helper("demo")
            .env(SWAP_DIR_ENV, dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawning the demo");
        let lines = line_reader(child.stdout.take().expect("demo stdout"));
        let mut demo = Demo {
            child,
            cgroup: PathBuf::new(),
            swapfile: PathBuf::new(),
            hog: 0,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    // libtest may have printed "test helper_role ... " first.
                    let Some((_, report)) = line.split_once("SANDBOX\t") else {
                        continue;
                    };
                    let fields: Vec<&str> = report.split('\t').collect();
                    if let [cgroup, swapfile, hog] = fields[..] {
                        demo.cgroup = PathBuf::from(cgroup);
                        demo.swapfile = PathBuf::from(swapfile);
                        demo.hog = hog.parse().expect("hog pid");
                        return demo;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        panic!("the demo never reported its sandbox");
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Err(e) = remove_leftovers() {
            eprintln!("removing the demo's leftovers: {e:#}");
        }
    }
}

// ---------------------------------------------------------------------------
// Tests

#[test]
fn worker_in_the_sandbox_swaps_beyond_the_limit_and_cleanup_removes_everything() {
    let _serial = serial();
    if !available() {
        return;
    }
    let dir = ScratchDir::new("pageout");
    let mut sandbox = SwapSandbox::create(&spec(32, 256, dir.path())).expect("creating");
    let cgroup = sandbox.cgroup_path().to_path_buf();
    let swapfile = sandbox.swapfile_path().to_path_buf();
    let name = cgroup.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(&format!("tiermem-bench-{}-", std::process::id())));
    assert!(swapfile.starts_with(dir.path()));
    assert!(is_active_swap(&swapfile), "{swapfile:?} not in /proc/swaps");
    let mode = std::fs::metadata(&swapfile).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let read = |f: &str| std::fs::read_to_string(cgroup.join(f)).unwrap();
    assert_eq!(read("memory.limit_in_bytes").trim(), (32 * MIB).to_string());
    assert_eq!(read("memory.swappiness").trim(), "60");
    assert!(
        !leftover_sandboxes().contains(&cgroup),
        "a live sandbox of this process was listed as a leftover"
    );

    let mut cmd = helper("hog");
    cmd.env(HOG_MIB_ENV, "128")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    sandbox.configure_command(&mut cmd);
    let mut child = cmd.spawn().expect("spawning the hog");
    let pid = child.id() as i32;
    // From here on the sandbox kills and reaps the hog, whatever happens.
    sandbox.adopt_child(pid);
    let own_cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(
        own_cgroup
            .lines()
            .any(|l| l.contains(":memory:") && l.ends_with(&format!("/{name}"))),
        "the hog is not in the sandbox cgroup: {own_cgroup}"
    );

    let deadline = Instant::now() + Duration::from_secs(20);
    let mut stats = sandbox.stats().expect("stats");
    while Instant::now() < deadline {
        stats = sandbox.stats().expect("stats");
        if stats.swap_bytes > 0 || stats.pgmajfault > 0 || stats.pswpout.unwrap_or(0) > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("cgroup stats: {stats:?}");
    assert!(
        stats.swap_bytes > 0 || stats.pgmajfault > 0 || stats.pswpout.unwrap_or(0) > 0,
        "no swapping seen: {stats:?}"
    );
    assert!(stats.max_usage_bytes <= 32 * MIB, "{stats:?}");
    assert!(stats.pgfault > 0, "{stats:?}");

    sandbox.cleanup().expect("cleanup");
    assert_removed(&cgroup, &swapfile);
    assert!(!process_exists(pid), "the hog survived cleanup");
    // The sandbox reaped it, so there is nothing left to wait for.
    assert!(child.wait().is_err(), "cleanup did not reap the hog");
    assert!(sandbox.stats().is_err());
    sandbox.cleanup().expect("a second cleanup is a no-op");
}

/// A loop device over a file in a scratch directory, detached and deleted
/// on drop: a swap device that is not zram, so the test leaves zram0 alone.
struct LoopDevice {
    device: PathBuf,
    file: PathBuf,
}

impl LoopDevice {
    fn new(dir: &Path, mib: u64) -> Option<LoopDevice> {
        let file = dir.join("loop-backing");
        let f = std::fs::File::create(&file).expect("creating the loop device's file");
        f.set_len(mib * MIB).expect("sizing the loop device's file");
        drop(f);
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&file)
            .output();
        match out {
            Ok(out) if out.status.success() => Some(LoopDevice {
                device: PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
                file,
            }),
            other => {
                eprintln!("skipped: no loop device: {other:?}");
                let _ = std::fs::remove_file(&file);
                None
            }
        }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        if is_active_swap(&self.device) {
            eprintln!("{} is still swap: not detaching it", self.device.display());
            return;
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
        let _ = std::fs::remove_file(&self.file);
    }
}

/// KiB in use on the swap area `path` (0 if it is not active).
fn swap_used_kib(path: &Path) -> u64 {
    swap_areas()
        .into_iter()
        .find(|(area, _)| area == path)
        .map_or(0, |(_, used)| used)
}

#[test]
fn an_overflow_swapfile_behind_a_full_device_takes_the_rest_and_goes_with_the_sandbox() {
    let _serial = serial();
    if !available() {
        return;
    }
    let dir = ScratchDir::new("overflow");
    let Some(device) = LoopDevice::new(dir.path(), 16) else {
        return;
    };
    let spec = SandboxSpec {
        swap_device: Some((device.device.clone(), 100)),
        overflow_swapfile_bytes: Some(128 * MIB),
        ..spec(32, 16, dir.path())
    };
    let mut sandbox = SwapSandbox::create(&spec).expect("creating");
    let cgroup = sandbox.cgroup_path().to_path_buf();
    let overflow = sandbox
        .overflow_swapfile_path()
        .expect("an overflow swapfile")
        .to_path_buf();
    assert!(overflow.starts_with(dir.path()), "{overflow:?}");
    assert!(is_active_swap(&device.device) && is_active_swap(&overflow));

    let mut cmd = helper("hog");
    cmd.env(HOG_MIB_ENV, "96")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    sandbox.configure_command(&mut cmd);
    let mut child = cmd.spawn().expect("spawning the hog");
    sandbox.adopt_child(child.id() as i32);
    let lines = line_reader(child.stdout.take().expect("hog stdout"));
    let ready = lines.iter().any(|l| l.ends_with("HOG-READY"));
    assert!(ready, "the hog never got ready");
    // 96 MiB in 32: the 16 MiB device is full and the swapfile holds the rest.
    let on_device = swap_used_kib(&device.device);
    let on_overflow = swap_used_kib(&overflow);
    eprintln!("in swap: device {on_device} KiB, overflow {on_overflow} KiB");
    assert!(
        on_device >= 15 * 1024,
        "the device is not full: {on_device} KiB"
    );
    assert!(on_overflow > 0, "nothing went to the overflow swapfile");

    sandbox.cleanup().expect("cleanup");
    assert!(child.wait().is_err(), "cleanup did not reap the hog");
    assert!(!cgroup.exists(), "cgroup {} still exists", cgroup.display());
    assert!(!is_active_swap(&device.device), "the device is still swap");
    assert!(!is_active_swap(&overflow), "the overflow is still swap");
    assert!(
        std::fs::symlink_metadata(&overflow).is_err(),
        "{overflow:?} still exists"
    );
}

#[test]
fn drop_removes_everything() {
    let _serial = serial();
    if !available() {
        return;
    }
    let dir = ScratchDir::new("drop");
    let sandbox = SwapSandbox::create(&spec(16, 32, dir.path())).expect("creating");
    let cgroup = sandbox.cgroup_path().to_path_buf();
    let swapfile = sandbox.swapfile_path().to_path_buf();
    assert!(cgroup.is_dir());
    assert!(is_active_swap(&swapfile));
    let stats = sandbox.stats().expect("stats of a fresh sandbox");
    assert_eq!(stats.swap_bytes, 0);
    drop(sandbox);
    assert_removed(&cgroup, &swapfile);
}

#[test]
fn sigint_and_sigterm_of_the_parent_remove_everything() {
    let _serial = serial();
    if !available() {
        return;
    }
    for (sig, tag) in [(libc::SIGINT, "sigint"), (libc::SIGTERM, "sigterm")] {
        let mut demo = Demo::start(tag);
        assert!(demo.cgroup.is_dir(), "{tag}: cgroup missing");
        assert!(is_active_swap(&demo.swapfile), "{tag}: swap not active");
        assert!(process_exists(demo.hog), "{tag}: hog not running");
        // SAFETY: signalling our own child, which has not been reaped.
        unsafe { libc::kill(demo.pid(), sig) };
        let status = wait_timeout(&mut demo.child, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{tag}: the demo did not exit"));
        assert_eq!(status.code(), Some(128 + sig), "{tag}: {status:?}");
        assert_removed(&demo.cgroup, &demo.swapfile);
        assert!(!process_exists(demo.hog), "{tag}: the hog survived");
    }
}

#[test]
fn remove_leftovers_cleans_up_after_a_killed_parent() {
    let _serial = serial();
    if !available() {
        return;
    }
    let demo = Demo::killed("crash");
    // Nothing could clean up: the sandbox (and the orphaned hog) remain.
    let leftovers = leftover_sandboxes();
    assert!(leftovers.contains(&demo.cgroup), "{leftovers:?}");
    assert!(leftovers.contains(&demo.swapfile), "{leftovers:?}");
    let removed = remove_leftovers().expect("removing leftovers");
    assert!(removed >= 2, "removed {removed}");
    assert_removed(&demo.cgroup, &demo.swapfile);
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_exists(demo.hog) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!process_exists(demo.hog), "the orphaned hog survived");
    assert!(!leftover_sandboxes().contains(&demo.cgroup));
}

/// The next sandbox removes what a killed run left behind, and says so.
#[test]
fn a_new_sandbox_removes_a_killed_runs_leftovers_first() {
    let _serial = serial();
    if !available() {
        return;
    }
    let demo = Demo::killed("crash-then-new");
    assert!(leftover_sandboxes().contains(&demo.swapfile));
    let dir = ScratchDir::new("after-crash");
    let mut sandbox = SwapSandbox::create(&spec(16, 32, dir.path())).expect("creating");
    let warnings = sandbox.warnings().join("; ");
    sandbox.cleanup().expect("cleanup");
    assert_removed(&demo.cgroup, &demo.swapfile);
    assert!(
        warnings.contains("leftover(s) of a killed run first"),
        "no word of the leftovers: {warnings}"
    );
}

#[test]
fn unusable_swap_dirs_are_refused_clearly_and_leave_nothing() {
    let _serial = serial();
    if !available() {
        return;
    }
    let ours = || -> Vec<PathBuf> {
        let prefix = format!("tiermem-bench-{}-", std::process::id());
        std::fs::read_dir("/sys/fs/cgroup/memory")
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = ours();

    let dir = ScratchDir::new("refuse");
    let err = SwapSandbox::create(&spec(16, 1 << 40, dir.path())).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("free space"), "{msg}");

    let err = SwapSandbox::create(&spec(16, 32, Path::new("/nonexistent/dir"))).unwrap_err();
    assert!(format!("{err:#}").contains("/nonexistent/dir"), "{err:#}");

    let overflow_alone = SandboxSpec {
        overflow_swapfile_bytes: Some(32 << 20),
        ..spec(16, 32, dir.path())
    };
    let err = SwapSandbox::create(&overflow_alone).unwrap_err();
    assert!(
        format!("{err:#}").contains("needs a swap device in front of it"),
        "{err:#}"
    );

    let shm = Path::new("/dev/shm");
    let shm_is_tmpfs = std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            l.split_whitespace()
                .take(3)
                .eq(["tmpfs", "/dev/shm", "tmpfs"])
        });
    if shm_is_tmpfs {
        let err = SwapSandbox::create(&spec(16, 32, shm)).unwrap_err();
        assert!(format!("{err:#}").contains("tmpfs"), "{err:#}");
    }

    assert_eq!(ours(), before, "a failed create left a cgroup behind");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a failed create left a file behind"
    );
}
