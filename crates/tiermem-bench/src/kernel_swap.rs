//! Kernel swap as a baseline: the benchmark worker runs inside a memory
//! cgroup whose limit is the DRAM budget (v1's `memory.limit_in_bytes`, or
//! v2's `memory.max` with `memory.swap.max` lifted; see [`crate::cgroup`]),
//! with a swapfile on the same filesystem as tiermem's backing file.
//!
//! The machine may be shared, so everything set up here is removed on every
//! exit path:
//!
//! * normal and error returns: [`SwapSandbox::cleanup`] or `Drop`;
//! * Ctrl-C, SIGTERM and SIGHUP of the parent: every live sandbox is kept in a
//!   process-global registry, and a signal thread (installed on first use)
//!   tears all of them down and then exits with status 128+signo. A Ctrl-C in
//!   the middle of a run therefore still removes the swapfile and the cgroup;
//! * crashes (SIGKILL, abort): nothing can run, so [`leftover_sandboxes`] and
//!   [`remove_leftovers`] find and remove what a dead process left behind,
//!   machine settings saved by `saved_settings` (zswap, zram) included.
//!
//! The compressed modes swap through the same sandbox: kernel-zswap on the
//! same swapfile with zswap on, kernel-zram on a zram device instead of a
//! file ([`SandboxSpec::swap_device`]); the settings they change are handed
//! to the sandbox ([`SwapSandbox::add_restore`]) and restored last.
//!
//! Teardown order matters: the worker is killed first (so `swapoff` does not
//! have to page its whole working set back in), then the swapfile is turned
//! off and deleted, then the cgroup is removed. Every step runs even if an
//! earlier one failed, and all failures are reported together, except that an
//! active swapfile is never deleted (a deleted swapfile that is still in use
//! can no longer be turned off by name).

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};

use crate::cgroup::{self, Version};
use crate::saved_settings::{self, SettingsGuard};
use tiermem_host::mounts::unescape_octal;

/// Name prefix of the cgroups we create: `tiermem-bench-<pid>-<n>`.
const CGROUP_PREFIX: &str = "tiermem-bench-";
/// Name prefix of the swapfiles we create: `.tiermem-swap-<pid>-<n>`.
const SWAPFILE_PREFIX: &str = ".tiermem-swap-";
/// Swappiness set explicitly on the cgroup (the parent's value could be 0).
const SWAPPINESS: &str = "60";
/// Free space left over on the filesystem after the swapfile is allocated.
const FREE_SPACE_MARGIN: u64 = 64 << 20;
/// Smallest swapfile we agree to create.
const MIN_SWAP_BYTES: u64 = 1 << 20;
/// How long a killed task may take to exit before teardown reports it.
const KILL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `rmdir` of the cgroup is retried while it is still busy.
const RMDIR_TIMEOUT: Duration = Duration::from_secs(3);

/// swapon(2) flags for a priority (linux/swap.h; not in the libc crate).
const SWAP_FLAG_PREFER: libc::c_int = 0x8000;
const SWAP_FLAG_PRIO_MASK: libc::c_int = 0x7fff;
const SWAP_FLAG_PRIO_SHIFT: libc::c_int = 0;

/// Environment variable naming the sandbox cgroup's `memory.stat` for a
/// benchmark worker inside it, which reads its own fault counts from there.
pub const MEMORY_STAT_ENV: &str = "TIERMEM_BENCH_MEMORY_STAT";

/// What to build: the DRAM budget and the swapfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    /// `memory.limit_in_bytes` of the cgroup: the DRAM budget.
    pub memory_limit_bytes: u64,
    /// Size of the swapfile (rounded down to whole pages).
    pub swap_bytes: u64,
    /// Directory for the swapfile; should be on the same filesystem as
    /// tiermem's backing file so both modes page to the same device.
    pub swap_dir: PathBuf,
    /// Swap on this block device (e.g. /dev/zram0, prepared by the caller)
    /// with this priority instead of a swapfile in `swap_dir`; the device
    /// is given a swap signature, turned on and off, never deleted.
    pub swap_device: Option<(PathBuf, i32)>,
}

/// Counters of the sandbox's cgroup, read from `memory.stat`,
/// `memory.max_usage_in_bytes` and `memory.failcnt`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupStats {
    /// Page faults of the tasks in the cgroup (`total_pgfault`).
    pub pgfault: u64,
    /// Major page faults, i.e. mostly swap-ins (`total_pgmajfault`).
    pub pgmajfault: u64,
    /// Bytes of the cgroup's memory currently in swap (`total_swap`; 0 when
    /// the kernel does not account swap per cgroup).
    pub swap_bytes: u64,
    /// Anonymous memory resident in DRAM (`total_rss`).
    pub rss_bytes: u64,
    /// Peak memory usage (`memory.max_usage_in_bytes`).
    pub max_usage_bytes: u64,
    /// How many times the limit was hit (`memory.failcnt`).
    pub failcnt: u64,
    /// Pages swapped in since the sandbox was created. **System-wide**
    /// (`/proc/vmstat` delta), so other processes' swapping is included.
    pub pswpin: Option<u64>,
    /// Pages swapped out since the sandbox was created. **System-wide**
    /// (`/proc/vmstat` delta), so other processes' swapping is included.
    pub pswpout: Option<u64>,
}

/// A memory cgroup limited to the DRAM budget plus an active swapfile.
///
/// Removed by [`SwapSandbox::cleanup`], by `Drop`, or by the signal thread on
/// SIGINT/SIGTERM/SIGHUP (see the module documentation).
#[derive(Debug)]
pub struct SwapSandbox {
    inner: Arc<Inner>,
    /// `<cgroup>/cgroup.procs`, prepared before any fork.
    procs: CString,
    vmstat_at_start: (Option<u64>, Option<u64>),
    warnings: Vec<String>,
}

/// The part of a sandbox shared with the signal thread through the registry.
#[derive(Debug)]
struct Inner {
    cgroup: PathBuf,
    /// The interface of the hierarchy `cgroup` lives in.
    version: Version,
    /// The swapfile, or the swap device of `SandboxSpec::swap_device`.
    swapfile: PathBuf,
    /// Whether `swapfile` is a device (turned off, never deleted).
    device: bool,
    state: Mutex<State>,
}

/// What exists right now and so must be undone.
#[derive(Debug, Default)]
struct State {
    cgroup_created: bool,
    swapfile_created: bool,
    swap_active: bool,
    /// Adopted children, killed and reaped on teardown.
    children: Vec<i32>,
    /// Set by the first teardown: no more setup, adopted children die at once.
    closed: bool,
    /// Machine settings changed for this sandbox's run, restored after the
    /// swap is off (see [`SwapSandbox::add_restore`]).
    restores: Vec<Arc<SettingsGuard>>,
}

/// Live sandboxes, for the signal thread.
static LIVE: Mutex<Vec<Arc<Inner>>> = Mutex::new(Vec::new());
/// Set (under the `LIVE` lock) once a signal started the final teardown.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);
/// Makes sandbox names unique within the process.
static NEXT_N: AtomicU64 = AtomicU64::new(0);
/// The outcome of installing the signal thread, which happens once.
static SIGNAL_THREAD: OnceLock<Result<(), String>> = OnceLock::new();
/// Set by the signal handler itself when SIGINT/SIGTERM/SIGHUP arrives.
static SIGNAL_SEEN: OnceLock<Arc<AtomicBool>> = OnceLock::new();

impl SwapSandbox {
    /// Why kernel-swap mode cannot run here (not root, no cgroup v1 memory
    /// controller, no swap support, no `mkswap`), or `Ok`.
    pub fn availability() -> Result<(), String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err(
                "kernel-swap mode needs root: it creates a memory cgroup and \
                        enables a swapfile (run as root or with sudo)"
                    .into(),
            );
        }
        if !Path::new("/proc/swaps").exists() {
            return Err("the kernel has no swap support (/proc/swaps is missing)".into());
        }
        if cgroup::find_root().is_none() {
            return Err(
                "no memory cgroup controller is available: neither a cgroup v1 \
                        `memory` hierarchy nor a cgroup v2 hierarchy whose \
                        cgroup.controllers lists `memory` is mounted; kernel-swap mode \
                        needs one (e.g. `mount -t cgroup2 none /sys/fs/cgroup`)"
                    .into(),
            );
        }
        if find_tool("mkswap").is_none() {
            return Err("`mkswap` was not found in PATH, /sbin or /usr/sbin \
                        (it is part of util-linux)"
                .into());
        }
        Ok(())
    }

    /// Creates the cgroup (limit and swappiness set) and an active swapfile.
    /// On failure everything made so far is removed again.
    pub fn create(spec: &SandboxSpec) -> anyhow::Result<SwapSandbox> {
        SwapSandbox::availability().map_err(|why| anyhow!("kernel-swap mode: {why}"))?;
        if spec.memory_limit_bytes == 0 {
            bail!("the memory limit of the kernel-swap cgroup must be more than 0 bytes");
        }
        let swap_bytes = spec.swap_bytes / page_size() * page_size();
        if spec.swap_device.is_none() && swap_bytes < MIN_SWAP_BYTES {
            bail!(
                "swapfile size {} is too small (at least {} is needed)",
                spec.swap_bytes,
                MIN_SWAP_BYTES
            );
        }
        let (swap_dir, fs_type) = match &spec.swap_device {
            Some((device, _)) => (device.clone(), 0),
            None => {
                let swap_dir = std::fs::canonicalize(&spec.swap_dir).with_context(|| {
                    format!("swap directory {} is not usable", spec.swap_dir.display())
                })?;
                if !swap_dir.is_dir() {
                    bail!("swap directory {} is not a directory", swap_dir.display());
                }
                let fs_type = check_swap_filesystem(&swap_dir, swap_bytes)?;
                (swap_dir, fs_type)
            }
        };
        let mkswap = find_tool("mkswap").context("`mkswap` not found")?;
        install_signal_cleanup()?;
        let root_cgroup = cgroup::find_root().context("no memory cgroup controller is mounted")?;
        cgroup::enable_memory_for_children(&root_cgroup)?;
        let root = &root_cgroup.dir;

        let pid = std::process::id();
        let mut names = None;
        for _ in 0..1000 {
            let n = NEXT_N.fetch_add(1, Ordering::Relaxed);
            let cgroup = root.join(format!("{CGROUP_PREFIX}{pid}-{n}"));
            let swapfile = match &spec.swap_device {
                Some((device, _)) => device.clone(),
                None => swap_dir.join(format!("{SWAPFILE_PREFIX}{pid}-{n}")),
            };
            // Stale names from a crashed run with the same pid are skipped.
            if !path_exists(&cgroup) && (spec.swap_device.is_some() || !path_exists(&swapfile)) {
                names = Some((cgroup, swapfile));
                break;
            }
        }
        let (cgroup, swapfile) = names.with_context(|| {
            format!(
                "no free sandbox name in {} / {} (leftovers of crashed runs? \
                 try the bench --cleanup option)",
                root.display(),
                swap_dir.display()
            )
        })?;
        let procs = path_cstring(&cgroup.join("cgroup.procs"))?;
        let inner = Arc::new(Inner {
            cgroup,
            version: root_cgroup.version,
            swapfile,
            device: spec.swap_device.is_some(),
            state: Mutex::new(State::default()),
        });
        register(&inner)?;
        let mut sandbox = SwapSandbox {
            inner,
            procs,
            vmstat_at_start: (None, None),
            warnings: Vec::new(),
        };
        let priority = spec.swap_device.as_ref().map(|(_, p)| *p);
        if let Err(err) = sandbox.setup(
            spec.memory_limit_bytes,
            swap_bytes,
            fs_type,
            &mkswap,
            priority,
        ) {
            return Err(match sandbox.cleanup() {
                Ok(()) => err,
                Err(cleanup_err) => anyhow!(
                    "{err:#}; removing the partly built sandbox also failed: {cleanup_err:#}"
                ),
            });
        }
        Ok(sandbox)
    }

    /// Builds everything while holding the state lock, so that the signal
    /// thread either sees nothing or the complete, recorded state.
    fn setup(
        &mut self,
        memory_limit_bytes: u64,
        swap_bytes: u64,
        fs_type: u32,
        mkswap: &Path,
        priority: Option<i32>,
    ) -> anyhow::Result<()> {
        let inner = Arc::clone(&self.inner);
        let mut st = inner.lock_state();
        if st.closed {
            bail!("interrupted by a signal while creating the kernel-swap sandbox");
        }

        let cg = &inner.cgroup;
        std::fs::create_dir(cg)
            .with_context(|| format!("creating memory cgroup {}", cg.display()))?;
        st.cgroup_created = true;
        for (file, value) in cgroup::limit_settings(inner.version, memory_limit_bytes, SWAPPINESS) {
            let path = cg.join(file);
            if file == inner.version.limit_file() || path.exists() {
                write_control(&path, &value)?;
            } else {
                self.warnings.push(format!(
                    "{} does not exist; it could not be set to {value}",
                    path.display()
                ));
            }
        }
        if inner.version == Version::V2 {
            self.warnings.push(
                "cgroup v2 has no swappiness of its own: the system's vm.swappiness applies".into(),
            );
        }

        let path = &inner.swapfile;
        if !inner.device {
            create_swapfile(path, swap_bytes, fs_type, &mut st)?;
        }

        let out = Command::new(mkswap)
            .arg(path)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", mkswap.display()))?;
        if !out.status.success() {
            bail!(
                "{} {} failed ({}): {} {}",
                mkswap.display(),
                path.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                String::from_utf8_lossy(&out.stdout).trim()
            );
        }

        let c_path = path_cstring(path)?;
        let flags = priority.map_or(0, |p| {
            SWAP_FLAG_PREFER | ((p.max(0) << SWAP_FLAG_PRIO_SHIFT) & SWAP_FLAG_PRIO_MASK)
        });
        // SAFETY: c_path is a valid NUL-terminated path that outlives the
        // call; swapon only reads it.
        if unsafe { libc::swapon(c_path.as_ptr(), flags) } != 0 {
            let err = io::Error::last_os_error();
            bail!("{}", swapon_error(path, &err, fs_type));
        }
        st.swap_active = true;

        let swaps = read_proc_swaps().context("reading /proc/swaps")?;
        let Some(ours) = swaps.iter().find(|s| s.path == *path) else {
            bail!(
                "swapon {} reported success but the file is not listed in /proc/swaps",
                path.display()
            );
        };
        for other in swaps
            .iter()
            .filter(|s| s.path != *path && s.priority >= ours.priority)
        {
            self.warnings.push(format!(
                "swap area {} (priority {}) is active too and is used before or \
                 alongside {} (priority {}), so kernel swap may not page to the \
                 same device as tiermem",
                other.path.display(),
                other.priority,
                path.display(),
                ours.priority
            ));
        }
        self.vmstat_at_start = (vmstat("pswpin"), vmstat("pswpout"));
        Ok(())
    }

    /// Makes `cmd` join the cgroup before it execs (its `pre_exec` writes
    /// "0", meaning itself, to `cgroup.procs`), so its memory is charged to
    /// the cgroup from its first allocation. Spawning fails if the child
    /// cannot join (e.g. the sandbox was already removed).
    pub fn configure_command(&self, cmd: &mut Command) {
        let procs = self.procs.clone();
        // SAFETY: the closure runs in the forked child before exec, where
        // only async-signal-safe operations are allowed. It only calls
        // open/write/close on a string allocated before the fork, reads errno
        // and builds `io::Error` from a raw OS error (no allocation); it
        // touches no lock, no allocator and no other shared state.
        unsafe {
            cmd.pre_exec(move || join_cgroup(&procs));
        }
    }

    /// Registers a spawned child so that cleanup (and the signal thread) kill
    /// it with SIGKILL and reap it. Only our own unreaped children may be
    /// adopted; if the caller reaps it first, it is left alone.
    pub fn adopt_child(&self, pid: i32) {
        // SAFETY: getpid has no preconditions and cannot fail.
        let me = unsafe { libc::getpid() };
        if pid <= 0 || pid == me {
            // kill(0 or -1, ...) would hit whole process groups: refuse.
            log(&format!(
                "ignoring invalid child pid {pid} for the kernel-swap sandbox"
            ));
            return;
        }
        let mut st = self.inner.lock_state();
        if st.closed {
            // Already torn down (e.g. by the signal thread): the child has no
            // sandbox, so it must not run.
            if let Err(e) = kill_and_reap_child(pid) {
                log(&e);
            }
            return;
        }
        if !st.children.contains(&pid) {
            st.children.push(pid);
        }
    }

    /// Current counters of the cgroup.
    pub fn stats(&self) -> anyhow::Result<CgroupStats> {
        let read = |p: &Path| std::fs::read_to_string(p).ok();
        let c = cgroup::read_counters(&self.inner.cgroup, self.inner.version, &read)?;
        let delta = |now: Option<u64>, then: Option<u64>| Some(now?.saturating_sub(then?));
        Ok(CgroupStats {
            pgfault: c.pgfault,
            pgmajfault: c.pgmajfault,
            swap_bytes: c.swap_bytes,
            rss_bytes: c.rss_bytes,
            max_usage_bytes: c.peak_bytes,
            failcnt: c.limit_hits,
            pswpin: delta(vmstat("pswpin"), self.vmstat_at_start.0),
            pswpout: delta(vmstat("pswpout"), self.vmstat_at_start.1),
        })
    }

    /// The cgroup interface the sandbox uses.
    pub fn cgroup_version(&self) -> Version {
        self.inner.version
    }

    /// The cgroup's `memory.stat`, whose counters a worker inside it reads
    /// (see [`MEMORY_STAT_ENV`] and [`read_major_faults`]).
    pub fn memory_stat_path(&self) -> PathBuf {
        self.inner.cgroup.join("memory.stat")
    }

    /// The cgroup directory, `<memory cgroup root>/tiermem-bench-<pid>-<n>`.
    pub fn cgroup_path(&self) -> &Path {
        &self.inner.cgroup
    }

    /// The swapfile, `<swap_dir>/.tiermem-swap-<pid>-<n>` (canonical path).
    pub fn swapfile_path(&self) -> &Path {
        &self.inner.swapfile
    }

    /// Things worth a note in the report, e.g. another active swap area that
    /// the kernel may use instead of our swapfile.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Hands machine settings changed for this sandbox's run (zswap's
    /// parameters, the zram device) to its teardown, which restores them
    /// after the swap is off, on every path the sandbox itself is removed
    /// on. A sandbox already torn down restores them at once.
    pub fn add_restore(&self, guard: Arc<SettingsGuard>) {
        let mut st = self.inner.lock_state();
        if st.closed {
            if let Err(e) = guard.restore() {
                log(&e);
            }
            return;
        }
        st.restores.push(guard);
    }

    /// Kills adopted children (and any other task left in the cgroup), turns
    /// the swapfile off, deletes it and removes the cgroup. Every step runs;
    /// all failures are reported. Calling it again retries only what failed.
    pub fn cleanup(&mut self) -> anyhow::Result<()> {
        let errors = {
            let mut st = self.inner.lock_state();
            self.inner.teardown_locked(&mut st)
        };
        if errors.is_empty() {
            unregister(&self.inner);
            Ok(())
        } else {
            Err(anyhow!(
                "removing kernel-swap sandbox {} / {}: {}",
                self.inner.cgroup.display(),
                self.inner.swapfile.display(),
                errors.join("; ")
            ))
        }
    }
}

/// Creates the swapfile (mode 0600, its blocks allocated), recording it in
/// `st` as soon as it exists so that teardown deletes it.
fn create_swapfile(
    path: &Path,
    swap_bytes: u64,
    fs_type: u32,
    st: &mut State,
) -> anyhow::Result<()> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("creating swapfile {}", path.display()))?;
    st.swapfile_created = true;
    // Whatever the umask: swap must not be readable by other users.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("setting mode 0600 on {}", path.display()))?;
    if fs_type == BTRFS_MAGIC {
        // btrfs only takes swapfiles that are not copy-on-write; the flag
        // must be set while the file is empty. Failure shows up at swapon.
        set_nocow(&file);
    }
    allocate(&file, swap_bytes, path)
}

impl Drop for SwapSandbox {
    fn drop(&mut self) {
        if let Err(e) = self.cleanup() {
            log(&format!("{e:#}"));
        }
        unregister(&self.inner);
    }
}

impl Inner {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Undoes whatever `st` says exists; returns the failures. Idempotent.
    fn teardown_locked(&self, st: &mut State) -> Vec<String> {
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

        if st.swapfile_created {
            if st.swap_active {
                errors.push(format!(
                    "not deleting {0} because it is still in use as swap; \
                     run `swapoff {0}` and delete it",
                    self.swapfile.display()
                ));
            } else {
                match std::fs::remove_file(&self.swapfile) {
                    Ok(()) => st.swapfile_created = false,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => st.swapfile_created = false,
                    Err(e) => errors.push(format!("deleting {}: {e}", self.swapfile.display())),
                }
            }
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

// ---------------------------------------------------------------------------
// Registry and signal handling

fn registry() -> MutexGuard<'static, Vec<Arc<Inner>>> {
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn register(inner: &Arc<Inner>) -> anyhow::Result<()> {
    let mut live = registry();
    if SHUTTING_DOWN.load(Ordering::SeqCst) {
        bail!("not creating a kernel-swap sandbox: the process is exiting on a signal");
    }
    live.push(Arc::clone(inner));
    Ok(())
}

fn unregister(inner: &Arc<Inner>) {
    registry().retain(|other| !Arc::ptr_eq(other, inner));
}

/// Installs, once per process (later calls return the first outcome):
///
/// * a signal thread that, on SIGINT, SIGTERM or SIGHUP, tears down every
///   live sandbox and exits with status 128+signo. Because of it, a Ctrl-C in
///   the middle of a run still removes the swapfile and the cgroup;
/// * when panics abort (as in tiermem's release and dev profiles), a panic
///   hook that tears down live sandboxes before the abort.
///
/// [`SwapSandbox::create`] calls it; call it earlier to get the same
/// behaviour for the whole run. Also call [`wait_for_cleanup`] before
/// exiting the process on your own.
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
        let live: Vec<Arc<Inner>> = match LIVE.try_lock() {
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

/// Writes to stderr without panicking (stderr may be gone after SIGHUP).
fn log(msg: &str) {
    let _ = writeln!(io::stderr(), "tiermem bench: {msg}");
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
        return registry()
            .iter()
            .any(|inner| inner.cgroup == path || inner.swapfile == path);
    }
    Path::new(&format!("/proc/{pid}")).exists()
}

// ---------------------------------------------------------------------------
// Processes

/// The pre_exec body. Async-signal-safe: open/write/close only.
fn join_cgroup(procs: &CStr) -> io::Result<()> {
    // SAFETY: procs is a valid NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let result = loop {
        // SAFETY: fd is open and the buffer is a 1-byte static string.
        let n = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
        if n == 1 {
            break Ok(());
        }
        let err = io::Error::last_os_error();
        if n < 0 && err.raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break Err(if n < 0 {
            err
        } else {
            io::Error::from_raw_os_error(libc::EIO)
        });
    };
    // SAFETY: fd was opened above and is closed exactly once.
    unsafe { libc::close(fd) };
    result
}

/// SIGKILLs and reaps an adopted child. A child that was already reaped (by
/// the caller) is not signalled: its pid may belong to someone else by now.
fn kill_and_reap_child(pid: i32) -> Result<(), String> {
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

/// SIGKILLs every task in the cgroup (except ourselves) until it is empty.
fn kill_cgroup_tasks(cgroup: &Path, timeout: Duration) -> Result<(), String> {
    let procs = cgroup.join("cgroup.procs");
    // SAFETY: getpid has no preconditions and cannot fail.
    let me = unsafe { libc::getpid() };
    let deadline = Instant::now() + timeout;
    loop {
        let pids = match read_pids(&procs) {
            Ok(pids) => pids,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("reading {}: {e}", procs.display())),
        };
        let pids: Vec<i32> = pids.into_iter().filter(|&p| p > 0 && p != me).collect();
        if pids.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "tasks {pids:?} are still in {} {}s after SIGKILL",
                cgroup.display(),
                timeout.as_secs()
            ));
        }
        for pid in pids {
            kill_cgroup_task(&procs, pid);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGKILLs `pid`, which was just listed in `procs`, making sure through a
/// pidfd that the signal cannot reach an unrelated process that reused it.
fn kill_cgroup_task(procs: &Path, pid: i32) {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        if io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            // Kernel without pidfds (< 5.3): plain kill; the pid was in the
            // cgroup a moment ago.
            // SAFETY: pid > 0 (checked by the caller), so this signals one
            // process, not a group.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        return; // ESRCH: already gone.
    }
    let Ok(fd) = libc::c_int::try_from(fd) else {
        return;
    };
    // The pidfd pins the process now; if it is still the one in our cgroup
    // (the pid is listed again), signal it through the pidfd.
    if read_pids(procs).is_ok_and(|pids| pids.contains(&pid)) {
        // SAFETY: fd is a pidfd we own; a null siginfo is allowed.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd,
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
    }
    // SAFETY: fd was returned by pidfd_open above and is closed exactly once.
    unsafe { libc::close(fd) };
}

fn read_pids(procs: &Path) -> io::Result<Vec<i32>> {
    Ok(std::fs::read_to_string(procs)?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect())
}

// ---------------------------------------------------------------------------
// Cgroups

/// The value of `key` in the text of a cgroup v1 `memory.stat` or of
/// `/proc/vmstat` (one `name value` pair per line). Names are matched whole:
/// `pgmajfault` is a cgroup's own count, `total_pgmajfault` includes its
/// descendants.
pub fn stat_field(text: &str, key: &str) -> anyhow::Result<u64> {
    let value = text
        .lines()
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            (fields.next() == Some(key)).then(|| fields.next().unwrap_or(""))
        })
        .with_context(|| format!("no {key} line"))?;
    value
        .parse()
        .with_context(|| format!("{key} is {value:?}, not a count"))
}

/// A counter from a `name value` file such as `memory.stat`.
fn read_stat_field(path: &Path, key: &str) -> anyhow::Result<u64> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    stat_field(&text, key).with_context(|| format!("in {}", path.display()))
}

/// The major faults of a memory cgroup so far (`pgmajfault` in the
/// `memory.stat` at `memory_stat`): the swap-ins its tasks waited for.
pub fn read_major_faults(memory_stat: &Path) -> anyhow::Result<u64> {
    read_stat_field(memory_stat, "pgmajfault")
}

/// Pages swapped in since boot, read-ahead included, by the whole system
/// (`pswpin` in `/proc/vmstat`; the kernel does not count it per cgroup).
pub fn read_swap_ins() -> anyhow::Result<u64> {
    read_stat_field(Path::new("/proc/vmstat"), "pswpin")
}

fn write_control(path: &Path, value: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    f.write_all(value.as_bytes())
        .with_context(|| format!("writing {value} to {}", path.display()))
}

/// `rmdir`, retried while tasks are still leaving (EBUSY).
fn remove_cgroup_dir(cgroup: &Path, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        match std::fs::remove_dir(cgroup) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(format!("removing cgroup {}: {e}", cgroup.display())),
        }
    }
}

// ---------------------------------------------------------------------------
// Swap

const TMPFS_MAGIC: u32 = 0x0102_1994;
const RAMFS_MAGIC: u32 = 0x8584_58f6;
const OVERLAYFS_MAGIC: u32 = 0x794c_7630;
const ZFS_MAGIC: u32 = 0x2fc1_2fc1;
const FUSE_MAGIC: u32 = 0x6573_5546;
const BTRFS_MAGIC: u32 = 0x9123_683e;

fn fs_name(magic: u32) -> String {
    match magic {
        TMPFS_MAGIC => "tmpfs".into(),
        RAMFS_MAGIC => "ramfs".into(),
        OVERLAYFS_MAGIC => "overlayfs".into(),
        ZFS_MAGIC => "zfs".into(),
        FUSE_MAGIC => "fuse".into(),
        BTRFS_MAGIC => "btrfs".into(),
        0xef53 => "ext2/3/4".into(),
        0x5846_5342 => "xfs".into(),
        0xf2f5_2010 => "f2fs".into(),
        0x6969 => "nfs".into(),
        other => format!("filesystem type {other:#x}"),
    }
}

/// Refuses filesystems that cannot hold swapfiles and checks free space.
/// Returns the filesystem magic.
fn check_swap_filesystem(dir: &Path, swap_bytes: u64) -> anyhow::Result<u32> {
    let c_dir = path_cstring(dir)?;
    // SAFETY: statfs is plain data for which all-zeroes is valid.
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c_dir is a valid NUL-terminated path and sfs a writable statfs.
    if unsafe { libc::statfs(c_dir.as_ptr(), &mut sfs) } != 0 {
        let err = io::Error::last_os_error();
        return Err(err).with_context(|| format!("statfs {}", dir.display()));
    }
    // f_type is a signed word whose width varies; the magic is its low 32 bits.
    #[allow(clippy::unnecessary_cast)]
    let magic = sfs.f_type as u32;
    if matches!(
        magic,
        TMPFS_MAGIC | RAMFS_MAGIC | OVERLAYFS_MAGIC | ZFS_MAGIC | FUSE_MAGIC
    ) {
        bail!(
            "{} is on {}, which cannot hold a swapfile; put the backing file \
             (and so the swapfile) on a disk filesystem such as ext4 or xfs",
            dir.display(),
            fs_name(magic)
        );
    }

    // SAFETY: statvfs is plain data for which all-zeroes is valid.
    let mut svfs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c_dir is a valid NUL-terminated path and svfs a writable statvfs.
    if unsafe { libc::statvfs(c_dir.as_ptr(), &mut svfs) } != 0 {
        let err = io::Error::last_os_error();
        return Err(err).with_context(|| format!("statvfs {}", dir.display()));
    }
    #[allow(clippy::unnecessary_cast)]
    let available = (svfs.f_bavail as u64).saturating_mul(svfs.f_frsize as u64);
    let needed = swap_bytes.saturating_add(FREE_SPACE_MARGIN);
    if available < needed {
        bail!(
            "not enough free space in {} for a {} MiB swapfile: {} MiB available, \
             {} MiB needed (including a {} MiB margin)",
            dir.display(),
            swap_bytes >> 20,
            available >> 20,
            needed >> 20,
            FREE_SPACE_MARGIN >> 20
        );
    }
    Ok(magic)
}

/// Sets the btrfs no-copy-on-write flag on an empty file (best effort).
fn set_nocow(file: &File) {
    const FS_NOCOW_FL: libc::c_int = 0x0080_0000;
    let mut flags: libc::c_int = 0;
    // SAFETY: the fd is open for the duration of the call and the ioctl
    // writes one int into `flags`.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) } == 0 {
        flags |= FS_NOCOW_FL;
        // SAFETY: as above; the ioctl reads one int from `flags`.
        unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) };
    }
}

/// Gives the file `len` bytes of real blocks: fallocate, or zeros where the
/// filesystem does not support it.
fn allocate(file: &File, len: u64, path: &Path) -> anyhow::Result<()> {
    let off_len =
        libc::off_t::try_from(len).with_context(|| format!("swapfile size {len} is too large"))?;
    // SAFETY: the fd is open for writing; fallocate only acts on it.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, off_len) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {}
        Some(libc::ENOSPC) => bail!(
            "not enough free space for the {} MiB swapfile {}",
            len >> 20,
            path.display()
        ),
        _ => {
            return Err(err)
                .with_context(|| format!("allocating {len} bytes for swapfile {}", path.display()))
        }
    }
    // No fallocate on this filesystem: write zeros in large chunks.
    let chunk = vec![0u8; 8 << 20];
    let mut left = len;
    let mut writer = file;
    while left > 0 {
        let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
        writer
            .write_all(&chunk[..n])
            .with_context(|| format!("writing zeros to swapfile {}", path.display()))?;
        left -= n as u64;
    }
    file.sync_all()
        .with_context(|| format!("syncing swapfile {}", path.display()))
}

fn swapon_error(path: &Path, err: &io::Error, fs_type: u32) -> String {
    let why = match err.raw_os_error() {
        Some(libc::EINVAL) => format!(
            "the kernel does not accept it as swap: {} may not support swapfiles \
             (btrfs needs a single-device, uncompressed filesystem; tmpfs, overlayfs, \
             zfs and fuse cannot), or the file has holes",
            fs_name(fs_type)
        ),
        Some(libc::EPERM) => "operation not permitted: the maximum number of swap areas \
                              is in use, or this environment (container?) forbids swapon"
            .to_string(),
        Some(libc::EBUSY) => "it is already in use as swap".to_string(),
        Some(libc::ENOSYS) => "the kernel was built without swap support".to_string(),
        _ => "swapon failed".to_string(),
    };
    format!("swapon {}: {err}: {why}", path.display())
}

/// swapoff, treating "not active (any more)" as success.
fn swap_off(path: &Path) -> Result<(), String> {
    let c_path = path_cstring(path).map_err(|e| format!("{e:#}"))?;
    let mut attempts = 0;
    loop {
        // SAFETY: c_path is a valid NUL-terminated path that outlives the call.
        if unsafe { libc::swapoff(c_path.as_ptr()) } == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        attempts += 1;
        // swapoff gives up with EINTR when a signal arrives while it pages in.
        if err.raw_os_error() == Some(libc::EINTR) && attempts < 10 {
            continue;
        }
        let still_active = read_proc_swaps()
            .map(|swaps| swaps.iter().any(|s| s.path == path))
            .unwrap_or(true);
        if !still_active {
            return Ok(());
        }
        return Err(format!("swapoff {}: {err}", path.display()));
    }
}

/// The swap areas active now (files and devices, from /proc/swaps).
pub fn active_swaps() -> io::Result<Vec<PathBuf>> {
    Ok(read_proc_swaps()?.into_iter().map(|s| s.path).collect())
}

/// swapoff `path` if it is an active swap area; nothing otherwise.
pub(crate) fn swap_off_if_active(path: &Path) -> Result<(), String> {
    let active = read_proc_swaps()
        .map_err(|e| format!("reading /proc/swaps: {e}"))?
        .iter()
        .any(|s| s.path == path);
    if active {
        swap_off(path)
    } else {
        Ok(())
    }
}

#[derive(Debug, Clone)]
struct SwapArea {
    path: PathBuf,
    priority: i64,
}

fn read_proc_swaps() -> io::Result<Vec<SwapArea>> {
    let text = std::fs::read_to_string("/proc/swaps")?;
    Ok(text
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let path = PathBuf::from(unescape_octal(fields.first()?));
            let priority = fields.get(4).and_then(|p| p.parse().ok()).unwrap_or(0);
            Some(SwapArea { path, priority })
        })
        .collect())
}

fn vmstat(key: &str) -> Option<u64> {
    read_stat_field(Path::new("/proc/vmstat"), key).ok()
}

// ---------------------------------------------------------------------------
// Small helpers

/// Looks for a system tool in PATH, then in /usr/sbin and /sbin.
fn find_tool(name: &str) -> Option<PathBuf> {
    let path_dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    path_dirs
        .into_iter()
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

fn path_exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

fn path_cstring(path: &Path) -> anyhow::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("path {} contains a NUL byte", path.display()))
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
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

    const MEMORY_STAT: &str = "cache 9261056\nrss 4505600\npgfault 216311\n\
                               pgmajfault 42\ninactive_anon 0\ntotal_pgfault 170004752\n\
                               total_pgmajfault 6620683\n";

    #[test]
    fn memory_stat_fields_are_matched_whole() {
        assert_eq!(stat_field(MEMORY_STAT, "pgmajfault").unwrap(), 42);
        assert_eq!(
            stat_field(MEMORY_STAT, "total_pgmajfault").unwrap(),
            6_620_683
        );
        assert_eq!(stat_field(MEMORY_STAT, "pgfault").unwrap(), 216_311);
        assert_eq!(stat_field(MEMORY_STAT, "rss").unwrap(), 4_505_600);
    }

    #[test]
    fn memory_stat_without_the_field_or_with_garbage_is_an_error() {
        let missing = stat_field("total_pgmajfault 5\n", "pgmajfault").unwrap_err();
        assert!(
            missing.to_string().contains("no pgmajfault line"),
            "{missing}"
        );
        let garbage = stat_field("pgmajfault lots\n", "pgmajfault").unwrap_err();
        assert!(format!("{garbage:#}").contains("\"lots\""), "{garbage:#}");
        assert!(stat_field("pgmajfault\n", "pgmajfault").is_err());
        assert!(stat_field("", "pgmajfault").is_err());
    }

    #[test]
    fn major_faults_are_read_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.stat");
        std::fs::write(&path, MEMORY_STAT).unwrap();
        assert_eq!(read_major_faults(&path).unwrap(), 42);
        let error = read_major_faults(&dir.path().join("absent")).unwrap_err();
        assert!(format!("{error:#}").contains("absent"), "{error:#}");
        std::fs::write(&path, "total_pgmajfault 5\n").unwrap();
        let error = format!("{:#}", read_major_faults(&path).unwrap_err());
        assert!(
            error.contains("memory.stat") && error.contains("no pgmajfault"),
            "{error}"
        );
    }

    #[test]
    fn swap_ins_are_read_from_proc_vmstat() {
        // Every kernel with swap support has the line, 0 or more.
        if Path::new("/proc/swaps").exists() {
            read_swap_ins().expect("pswpin in /proc/vmstat");
        }
    }

    #[test]
    fn unescapes_proc_paths() {
        assert_eq!(unescape_octal("/a\\040b"), "/a b");
        assert_eq!(unescape_octal("/a\\011b\\134"), "/a\tb\\");
        assert_eq!(unescape_octal("/plain"), "/plain");
        assert_eq!(unescape_octal("/x\\04"), "/x\\04");
    }
}
