//! Kernel swap as a baseline: a control-group v1 memory cgroup limited to
//! the budget, and a swapfile on the same filesystem as tiermem's backing
//! file.
//!
//! Everything set up here is torn down on every exit path: `cleanup`/`Drop`
//! on normal and error returns, and a signal thread for SIGINT, SIGTERM and
//! SIGHUP that cleans every live sandbox (kill the worker first, so swapoff
//! need not page its memory back in) before exiting.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

const CGROUP_ROOT: &str = "/sys/fs/cgroup/memory";

pub struct SandboxSpec {
    pub memory_limit_bytes: u64,
    pub swap_bytes: u64,
    pub swap_dir: PathBuf,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CgroupStats {
    pub pgfault: u64,
    pub pgmajfault: u64,
    pub swap_bytes: u64,
    pub rss_bytes: u64,
    pub max_usage_bytes: u64,
    pub failcnt: u64,
    /// System-wide /proc/vmstat deltas since the sandbox was created.
    pub pswpin: Option<u64>,
    pub pswpout: Option<u64>,
}

/// What must be undone, shared with the signal thread.
#[derive(Clone, Debug)]
struct Resources {
    id: u64,
    cgroup: PathBuf,
    swapfile: PathBuf,
    swap_on: bool,
    children: Vec<i32>,
}

static LIVE: Mutex<Vec<Resources>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);
static SIGNALS: Once = Once::new();
/// Held for a whole teardown, so the signal thread and the main thread never
/// tear down at once, and the process never exits halfway through one.
static TEARDOWN: Mutex<()> = Mutex::new(());

/// Waits until no teardown is in progress. Call before exiting the process.
pub fn wait_for_cleanup() {
    drop(TEARDOWN.lock().unwrap_or_else(|p| p.into_inner()));
}

pub struct SwapSandbox {
    res: Resources,
    vmstat_at_start: (Option<u64>, Option<u64>),
    cleaned: bool,
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn vmstat(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

fn find_tool(name: &str) -> PathBuf {
    ["/sbin", "/usr/sbin", "/usr/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}

impl SwapSandbox {
    /// Why kernel-swap mode cannot run here, if it cannot.
    pub fn availability() -> Result<(), String> {
        if !is_root() {
            return Err("kernel-swap mode needs root (cgroup and swapon)".into());
        }
        if !Path::new(CGROUP_ROOT)
            .join("memory.limit_in_bytes")
            .exists()
        {
            return Err(format!("no cgroup v1 memory controller at {CGROUP_ROOT}"));
        }
        Ok(())
    }

    pub fn create(spec: &SandboxSpec) -> anyhow::Result<SwapSandbox> {
        Self::availability().map_err(anyhow::Error::msg)?;
        install_signal_cleanup();
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let res = Resources {
            id,
            cgroup: Path::new(CGROUP_ROOT).join(format!("tiermem-bench-{pid}-{id}")),
            swapfile: spec.swap_dir.join(format!(".tiermem-swap-{pid}-{id}")),
            swap_on: false,
            children: Vec::new(),
        };
        lock().push(res.clone());
        let mut sb = SwapSandbox {
            res,
            vmstat_at_start: (vmstat("pswpin"), vmstat("pswpout")),
            cleaned: false,
        };
        sb.setup(spec)?; // on error, Drop removes whatever was made
        Ok(sb)
    }

    fn setup(&mut self, spec: &SandboxSpec) -> anyhow::Result<()> {
        let cg = &self.res.cgroup;
        std::fs::create_dir(cg).with_context(|| format!("creating cgroup {}", cg.display()))?;
        write_file(
            &cg.join("memory.limit_in_bytes"),
            &spec.memory_limit_bytes.to_string(),
        )?;
        let _ = write_file(&cg.join("memory.swappiness"), "60");
        self.make_swapfile(spec.swap_bytes)?;
        Ok(())
    }

    fn make_swapfile(&mut self, bytes: u64) -> anyhow::Result<()> {
        let path = self.res.swapfile.clone();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("creating swapfile {}", path.display()))?;
        // SAFETY: fallocate on our own fd with a valid range.
        let rc =
            unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, bytes as i64) };
        if rc != 0 {
            bail!(
                "allocating {bytes} bytes for swapfile {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
        drop(f);
        let out = Command::new(find_tool("mkswap"))
            .arg(&path)
            .output()
            .context("running mkswap")?;
        if !out.status.success() {
            bail!(
                "mkswap {} failed: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let c = CString::new(path.as_os_str().as_bytes())?;
        // SAFETY: swapon takes a valid NUL-terminated path and flags.
        if unsafe { libc::swapon(c.as_ptr(), 0) } != 0 {
            bail!(
                "swapon {} failed: {} (the filesystem may not support swapfiles)",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
        self.res.swap_on = true;
        self.sync_registry();
        Ok(())
    }

    fn sync_registry(&self) {
        let mut live = lock();
        if let Some(r) = live.iter_mut().find(|r| r.id == self.res.id) {
            *r = self.res.clone();
        }
    }

    /// Makes `cmd` join the cgroup before exec, so every byte it allocates
    /// is charged to it.
    pub fn configure_command(&self, cmd: &mut Command) {
        let procs = CString::new(self.res.cgroup.join("cgroup.procs").as_os_str().as_bytes())
            .unwrap_or_default();
        // SAFETY: the closure only calls async-signal-safe open/write/close
        // on a path prepared before fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                libc::close(fd);
                if ok {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }

    pub fn adopt_child(&mut self, pid: i32) {
        self.res.children.push(pid);
        self.sync_registry();
    }

    pub fn stats(&self) -> anyhow::Result<CgroupStats> {
        let cg = &self.res.cgroup;
        let text =
            std::fs::read_to_string(cg.join("memory.stat")).context("reading memory.stat")?;
        let get = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or(0)
        };
        let num = |f: &str| {
            std::fs::read_to_string(cg.join(f))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0)
        };
        let delta = |now: Option<u64>, then: Option<u64>| Some(now?.saturating_sub(then?));
        Ok(CgroupStats {
            pgfault: get("total_pgfault"),
            pgmajfault: get("total_pgmajfault"),
            swap_bytes: get("total_swap"),
            rss_bytes: get("total_rss"),
            max_usage_bytes: num("memory.max_usage_in_bytes"),
            failcnt: num("memory.failcnt"),
            pswpin: delta(vmstat("pswpin"), self.vmstat_at_start.0),
            pswpout: delta(vmstat("pswpout"), self.vmstat_at_start.1),
        })
    }

    pub fn cgroup_path(&self) -> &Path {
        &self.res.cgroup
    }
    pub fn swapfile_path(&self) -> &Path {
        &self.res.swapfile
    }

    pub fn cleanup(&mut self) -> anyhow::Result<()> {
        if self.cleaned {
            return Ok(());
        }
        self.cleaned = true;
        lock().retain(|r| r.id != self.res.id);
        teardown(&self.res)
    }
}

impl Drop for SwapSandbox {
    fn drop(&mut self) {
        if let Err(e) = self.cleanup() {
            eprintln!("tiermem bench: cleaning up kernel-swap sandbox: {e:#}");
        }
    }
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Resources>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

fn write_file(path: &Path, value: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    f.write_all(value.as_bytes())
        .with_context(|| format!("writing '{value}' to {}", path.display()))
}

/// Kills children, swapoff, unlink, rmdir: every step runs, errors collected.
fn teardown(res: &Resources) -> anyhow::Result<()> {
    let _serialized = TEARDOWN.lock().unwrap_or_else(|p| p.into_inner());
    teardown_locked(res)
}

fn teardown_locked(res: &Resources) -> anyhow::Result<()> {
    let mut errors = Vec::new();
    for &pid in &res.children {
        // SAFETY: signalling and reaping a child we spawned.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    if res.swap_on {
        if let Ok(c) = CString::new(res.swapfile.as_os_str().as_bytes()) {
            // SAFETY: swapoff takes a valid NUL-terminated path.
            if unsafe { libc::swapoff(c.as_ptr()) } != 0 {
                errors.push(format!(
                    "swapoff {}: {}",
                    res.swapfile.display(),
                    std::io::Error::last_os_error()
                ));
            }
        }
    }
    if let Err(e) = std::fs::remove_file(&res.swapfile) {
        if e.kind() != std::io::ErrorKind::NotFound {
            errors.push(format!("removing {}: {e}", res.swapfile.display()));
        }
    }
    if res.cgroup.exists() {
        let mut removed = false;
        for _ in 0..50 {
            if std::fs::remove_dir(&res.cgroup).is_ok() {
                removed = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if !removed {
            errors.push(format!("removing cgroup {}", res.cgroup.display()));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        bail!(errors.join("; "))
    }
}

/// On SIGINT/SIGTERM/SIGHUP: tear down every live sandbox, then exit.
fn install_signal_cleanup() {
    SIGNALS.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
            eprintln!(
                "tiermem bench: cannot install signal handlers; Ctrl-C may leave swap behind"
            );
            return;
        };
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let _serialized = TEARDOWN.lock().unwrap_or_else(|p| p.into_inner());
                let live: Vec<Resources> = lock().drain(..).collect();
                for res in &live {
                    if let Err(e) = teardown_locked(res) {
                        eprintln!("tiermem bench: cleanup after signal: {e:#}");
                    }
                }
                std::process::exit(128 + sig);
            }
        });
    });
}

/// Sandboxes left behind by crashed runs whose process is gone.
pub fn leftover_sandboxes() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let alive = |name: &str, prefix: &str| -> bool {
        name.strip_prefix(prefix)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
    };
    if let Ok(dir) = std::fs::read_dir(CGROUP_ROOT) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("tiermem-bench-") && !alive(&name, "tiermem-bench-") {
                found.push(e.path());
            }
        }
    }
    if let Ok(swaps) = std::fs::read_to_string("/proc/swaps") {
        for line in swaps.lines().skip(1) {
            let path = line.split_whitespace().next().unwrap_or("");
            let name = Path::new(path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.starts_with(".tiermem-swap-") && !alive(&name, ".tiermem-swap-") {
                found.push(PathBuf::from(path));
            }
        }
    }
    found
}

pub fn remove_leftovers() -> anyhow::Result<usize> {
    let leftovers = leftover_sandboxes();
    for p in &leftovers {
        let res = if p.starts_with(CGROUP_ROOT) {
            Resources {
                id: 0,
                cgroup: p.clone(),
                swapfile: PathBuf::from("/nonexistent"),
                swap_on: false,
                children: vec![],
            }
        } else {
            Resources {
                id: 0,
                cgroup: PathBuf::from("/nonexistent"),
                swapfile: p.clone(),
                swap_on: true,
                children: vec![],
            }
        };
        teardown(&res)?;
    }
    Ok(leftovers.len())
}
