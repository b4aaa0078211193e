//! The sandbox itself: a memory cgroup limited to the DRAM budget plus an
//! active swapfile (or swap device), built in order, handed the worker
//! processes, read for its counters and torn down on every path.

use std::ffi::CString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};

use super::cleanup::install_signal_cleanup;
use super::swapfile::{
    check_swap_filesystem, create_swapfile, find_tool, page_size, path_cstring, read_proc_swaps,
    swapon_error, vmstat,
};
use super::teardown::{
    kill_and_reap_child, log, register, unregister, Inner, State, CGROUP_PREFIX, SWAPFILE_PREFIX,
};
use crate::cgroup::{self, join_cgroup, write_control, Version};
use crate::saved_settings::SettingsGuard;

/// Swappiness set explicitly on the cgroup (the parent's value could be 0).
const SWAPPINESS: &str = "60";

/// Smallest swapfile we agree to create.
const MIN_SWAP_BYTES: u64 = 1 << 20;

/// Swap priority of the overflow swapfile, below any device in front of it.
const OVERFLOW_PRIORITY: i32 = 1;

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
    /// With `swap_device`: also a swapfile of this many bytes in
    /// `swap_dir`, at a priority below the device's, which the kernel fills
    /// once the device is full. This is how zram is deployed in front of a
    /// disk, and what holds zram's pool to a share of the budget.
    pub overflow_swapfile_bytes: Option<u64>,
}

/// Counters of the sandbox's cgroup, read from `memory.stat`,
/// `memory.max_usage_in_bytes`, `memory.failcnt` and `memory.oom_control`.
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
    /// Tasks the cgroup's OOM killer killed (`oom_kill`).
    #[serde(default)]
    pub oom_kills: u64,
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
/// SIGINT/SIGTERM/SIGHUP (see the [`kernel_swap`](super) documentation).
#[derive(Debug)]
pub struct SwapSandbox {
    inner: Arc<Inner>,
    /// `<cgroup>/cgroup.procs`, prepared before any fork.
    procs: CString,
    vmstat_at_start: (Option<u64>, Option<u64>),
    warnings: Vec<String>,
}

/// Makes sandbox names unique within the process.
static NEXT_N: AtomicU64 = AtomicU64::new(0);

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
    /// On failure everything made so far is removed again. What a killed
    /// run left behind (its swap, cgroup and machine settings) is removed
    /// first, and the sandbox's warnings say so.
    pub fn create(spec: &SandboxSpec) -> anyhow::Result<SwapSandbox> {
        SwapSandbox::availability().map_err(|why| anyhow!("kernel-swap mode: {why}"))?;
        let leftovers = super::cleanup::remove_leftovers()
            .context("restoring what a killed run left behind")?;
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
            None => checked_swap_dir(&spec.swap_dir, swap_bytes)?,
        };
        let overflow = match (&spec.swap_device, spec.overflow_swapfile_bytes) {
            (_, None) => None,
            (None, Some(_)) => bail!("an overflow swapfile needs a swap device in front of it"),
            (Some(_), Some(bytes)) => {
                let bytes = bytes / page_size() * page_size();
                if bytes < MIN_SWAP_BYTES {
                    bail!("overflow swapfile size {bytes} is too small (at least {MIN_SWAP_BYTES} is needed)");
                }
                let (dir, fs_type) = checked_swap_dir(&spec.swap_dir, bytes)?;
                Some((dir, fs_type, bytes))
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
            let overflow_file = overflow
                .as_ref()
                .map(|(dir, _, _)| dir.join(format!("{SWAPFILE_PREFIX}{pid}-{n}")));
            // Stale names from a crashed run with the same pid are skipped.
            if !path_exists(&cgroup)
                && (spec.swap_device.is_some() || !path_exists(&swapfile))
                && !overflow_file.as_deref().is_some_and(path_exists)
            {
                names = Some((cgroup, swapfile, overflow_file));
                break;
            }
        }
        let (cgroup, swapfile, overflow_file) = names.with_context(|| {
            format!(
                "no free sandbox name in {} / {}: a thousand names of this process id \
                 are taken by cgroups or swapfiles that are not leftovers of a dead \
                 process; swapoff and delete the {SWAPFILE_PREFIX}* files and rmdir the \
                 {CGROUP_PREFIX}* cgroups that no benchmark uses",
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
            overflow: overflow_file,
            state: Mutex::new(State::default()),
        });
        register(&inner)?;
        let mut sandbox = SwapSandbox {
            inner,
            procs,
            vmstat_at_start: (None, None),
            warnings: leftover_warning(leftovers).into_iter().collect(),
        };
        let priority = spec.swap_device.as_ref().map(|(_, p)| *p);
        let built = sandbox
            .setup(
                spec.memory_limit_bytes,
                swap_bytes,
                fs_type,
                &mkswap,
                priority,
            )
            .and_then(|()| match &overflow {
                Some((_, fs_type, bytes)) => sandbox.setup_overflow(*bytes, *fs_type, &mkswap),
                None => Ok(()),
            });
        if let Err(err) = built {
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
            create_swapfile(path, swap_bytes, fs_type, &mut st.swapfile_created)?;
        }

        make_swap_and_turn_on(path, mkswap, priority, fs_type)?;
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

    /// Builds the overflow swapfile behind the device, under the state
    /// lock as `setup` does.
    fn setup_overflow(&mut self, bytes: u64, fs_type: u32, mkswap: &Path) -> anyhow::Result<()> {
        let inner = Arc::clone(&self.inner);
        let mut st = inner.lock_state();
        if st.closed {
            bail!("interrupted by a signal while creating the kernel-swap sandbox");
        }
        let path = inner
            .overflow
            .as_ref()
            .context("the sandbox has no overflow swapfile")?;
        create_swapfile(path, bytes, fs_type, &mut st.overflow_created)?;
        make_swap_and_turn_on(path, mkswap, Some(OVERFLOW_PRIORITY), fs_type)?;
        st.overflow_active = true;
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
            oom_kills: c.oom_kills,
            pswpin: delta(vmstat("pswpin"), self.vmstat_at_start.0),
            pswpout: delta(vmstat("pswpout"), self.vmstat_at_start.1),
        })
    }

    /// The cgroup interface the sandbox uses.
    pub fn cgroup_version(&self) -> Version {
        self.inner.version
    }

    /// The cgroup's `memory.stat`, whose counters a worker inside it reads
    /// (see [`MEMORY_STAT_ENV`] and
    /// [`read_major_faults`](crate::cgroup::read_major_faults)).
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

    /// The overflow swapfile behind a swap device, if the sandbox has one.
    pub fn overflow_swapfile_path(&self) -> Option<&Path> {
        self.inner.overflow.as_deref()
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

impl Drop for SwapSandbox {
    fn drop(&mut self) {
        if let Err(e) = self.cleanup() {
            log(&format!("{e:#}"));
        }
        unregister(&self.inner);
    }
}

/// The warning for `removed` leftovers of killed runs, if there were any.
pub(crate) fn leftover_warning(removed: usize) -> Option<String> {
    (removed > 0).then(|| {
        format!("restored {removed} leftover(s) of a killed run first (swap, cgroups, settings)")
    })
}

/// `dir`, canonical, checked to be a directory on a filesystem that takes a
/// swapfile of `bytes`; with its filesystem type.
fn checked_swap_dir(dir: &Path, bytes: u64) -> anyhow::Result<(PathBuf, u32)> {
    let swap_dir = std::fs::canonicalize(dir)
        .with_context(|| format!("swap directory {} is not usable", dir.display()))?;
    if !swap_dir.is_dir() {
        bail!("swap directory {} is not a directory", swap_dir.display());
    }
    let fs_type = check_swap_filesystem(&swap_dir, bytes)?;
    Ok((swap_dir, fs_type))
}

/// `mkswap path`, then swapon with `priority` (none: the kernel's default).
fn make_swap_and_turn_on(
    path: &Path,
    mkswap: &Path,
    priority: Option<i32>,
    fs_type: u32,
) -> anyhow::Result<()> {
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
    Ok(())
}

fn path_exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}
