//! The memory cgroup kernel swap runs in, whichever version this machine
//! offers (found by [`tiermem_host::cgroup`]): the control files each
//! version names differently, how its counters are read, how a task joins
//! it before exec, and how its tasks are killed and it is removed.

use std::ffi::CStr;
use std::io::{self, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;

pub use tiermem_host::cgroup::{find_root, Root, Version};

/// Makes the `memory` controller available to the root's children
/// (v2 only: a child of the root has only the controllers the root's
/// `cgroup.subtree_control` lists).
pub fn enable_memory_for_children(root: &Root) -> anyhow::Result<()> {
    if root.version == Version::V1 {
        return Ok(());
    }
    let control = root.dir.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&control)
        .with_context(|| format!("reading {}", control.display()))?;
    if enabled.split_whitespace().any(|c| c == "memory") {
        return Ok(());
    }
    std::fs::write(&control, "+memory").with_context(|| {
        format!(
            "enabling the memory controller for child cgroups ({})",
            control.display()
        )
    })
}

/// The settings that put a cgroup's memory over `limit` into swap, as
/// (file, value) pairs in the order to write them; files a version lacks
/// are left out. v2 also lifts the swap limit (`memory.swap.max`), which
/// a parent's default may have set low. v1's swappiness is the cgroup's
/// own; v2 has none (the system's `vm.swappiness` applies).
pub fn limit_settings(
    version: Version,
    limit: u64,
    swappiness: &str,
) -> Vec<(&'static str, String)> {
    match version {
        Version::V1 => vec![
            (Version::V1.limit_file(), limit.to_string()),
            ("memory.swappiness", swappiness.to_string()),
        ],
        Version::V2 => vec![
            ("memory.swap.max", "max".to_string()),
            (Version::V2.limit_file(), limit.to_string()),
        ],
    }
}

/// Counters read from a cgroup's files, whichever version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub pgfault: u64,
    pub pgmajfault: u64,
    pub swap_bytes: u64,
    pub rss_bytes: u64,
    pub peak_bytes: u64,
    /// Times the limit was hit (v1 `memory.failcnt`, v2 `max` events).
    pub limit_hits: u64,
    /// Tasks the cgroup's OOM killer killed (`oom_kill` of v1
    /// `memory.oom_control`, of v2 `memory.events`).
    pub oom_kills: u64,
}

/// Reads the counters of the cgroup at `dir` with `read`.
pub fn read_counters(
    dir: &Path,
    version: Version,
    read: &dyn Fn(&Path) -> Option<String>,
) -> anyhow::Result<Counters> {
    let stat_path = dir.join("memory.stat");
    let stat = read(&stat_path).with_context(|| format!("reading {}", stat_path.display()))?;
    let field = |text: &str, key: &str| stat_field(text, key).ok();
    let number = |file: &str| -> Option<u64> { read(&dir.join(file))?.trim().parse().ok() };
    Ok(match version {
        Version::V1 => {
            // total_*: the cgroup with its descendants (the worker's children).
            let total = |key: &str| field(&stat, &format!("total_{key}")).or(field(&stat, key));
            Counters {
                pgfault: total("pgfault").unwrap_or(0),
                pgmajfault: total("pgmajfault").unwrap_or(0),
                swap_bytes: total("swap").unwrap_or(0),
                rss_bytes: total("rss").unwrap_or(0),
                peak_bytes: number(Version::V1.peak_file()).unwrap_or(0),
                limit_hits: number("memory.failcnt").unwrap_or(0),
                oom_kills: read(&dir.join("memory.oom_control"))
                    .and_then(|control| field(&control, "oom_kill"))
                    .unwrap_or(0),
            }
        }
        // v2 counts are hierarchical already.
        Version::V2 => {
            let events = read(&dir.join("memory.events")).unwrap_or_default();
            let events = |key: &str| field(&events, key).unwrap_or(0);
            Counters {
                pgfault: field(&stat, "pgfault").unwrap_or(0),
                pgmajfault: field(&stat, "pgmajfault").unwrap_or(0),
                swap_bytes: number("memory.swap.current").unwrap_or(0),
                rss_bytes: field(&stat, "anon").unwrap_or(0),
                peak_bytes: number(Version::V2.peak_file()).unwrap_or(0),
                limit_hits: events("max"),
                oom_kills: events("oom_kill"),
            }
        }
    })
}

// ---------------------------------------------------------------------------
// Tasks

/// The pre_exec body. Async-signal-safe: open/write/close only.
pub(crate) fn join_cgroup(procs: &CStr) -> io::Result<()> {
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

/// SIGKILLs every task in the cgroup (except ourselves) until it is empty.
pub(crate) fn kill_cgroup_tasks(cgroup: &Path, timeout: Duration) -> Result<(), String> {
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
// Control and counter files

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
pub(crate) fn read_stat_field(path: &Path, key: &str) -> anyhow::Result<u64> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    stat_field(&text, key).with_context(|| format!("in {}", path.display()))
}

/// The major faults of a memory cgroup so far (`pgmajfault` in the
/// `memory.stat` at `memory_stat`): the swap-ins its tasks waited for.
pub fn read_major_faults(memory_stat: &Path) -> anyhow::Result<u64> {
    read_stat_field(memory_stat, "pgmajfault")
}

pub(crate) fn write_control(path: &Path, value: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    f.write_all(value.as_bytes())
        .with_context(|| format!("writing {value} to {}", path.display()))
}

/// `rmdir`, retried while tasks are still leaving (EBUSY).
pub(crate) fn remove_cgroup_dir(cgroup: &Path, timeout: Duration) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::PathBuf;

    fn files(pairs: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let map: HashMap<PathBuf, String> = pairs
            .iter()
            .map(|(p, v)| (PathBuf::from(p), v.to_string()))
            .collect();
        move |p: &Path| map.get(p).cloned()
    }

    #[test]
    fn each_version_gets_its_own_limit_files() {
        let v1 = limit_settings(Version::V1, 512 << 20, "60");
        assert_eq!(v1[0], ("memory.limit_in_bytes", "536870912".to_string()));
        assert_eq!(v1[1], ("memory.swappiness", "60".to_string()));
        let v2 = limit_settings(Version::V2, 512 << 20, "60");
        assert_eq!(v2[0], ("memory.swap.max", "max".to_string()));
        assert_eq!(v2[1], ("memory.max", "536870912".to_string()));
    }

    #[test]
    fn v2_counters_come_from_stat_swap_peak_and_events() {
        let read = files(&[
            (
                "/cg/memory.stat",
                "anon 1048576\nfile 4096\npgfault 1200\npgmajfault 300\n",
            ),
            ("/cg/memory.swap.current", "8192\n"),
            ("/cg/memory.peak", "2097152\n"),
            (
                "/cg/memory.events",
                "low 0\nhigh 0\nmax 17\noom 3\noom_kill 2\n",
            ),
        ]);
        let c = read_counters(Path::new("/cg"), Version::V2, &read).unwrap();
        assert_eq!(
            c,
            Counters {
                pgfault: 1200,
                pgmajfault: 300,
                swap_bytes: 8192,
                rss_bytes: 1 << 20,
                peak_bytes: 2 << 20,
                limit_hits: 17,
                oom_kills: 2,
            }
        );
    }

    #[test]
    fn v1_counters_prefer_the_hierarchical_totals() {
        let read = files(&[
            (
                "/cg/memory.stat",
                "rss 1\nswap 2\npgfault 3\npgmajfault 4\ntotal_rss 10\ntotal_swap 20\ntotal_pgfault 30\ntotal_pgmajfault 40\n",
            ),
            ("/cg/memory.max_usage_in_bytes", "50\n"),
            ("/cg/memory.failcnt", "6\n"),
            (
                "/cg/memory.oom_control",
                "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
            ),
        ]);
        let c = read_counters(Path::new("/cg"), Version::V1, &read).unwrap();
        assert_eq!(
            (c.rss_bytes, c.swap_bytes, c.pgfault, c.pgmajfault),
            (10, 20, 30, 40)
        );
        assert_eq!((c.peak_bytes, c.limit_hits, c.oom_kills), (50, 6, 1));
    }

    #[test]
    fn a_missing_memory_stat_is_an_error_naming_it() {
        let read = files(&[]);
        let err = read_counters(Path::new("/cg"), Version::V2, &read).unwrap_err();
        assert!(format!("{err:#}").contains("/cg/memory.stat"), "{err:#}");
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
}
