//! What the kernel-swap baseline of `tiermem bench` runs with: THP,
//! swappiness and zswap (reported: they change kernel swap's figures, not
//! whether it runs), and the memory cgroup it needs.
//!
//! The baseline puts its worker in a cgroup v1 `memory` hierarchy where
//! one is mounted (what the figures in BENCHMARKS.md were measured with),
//! else in the cgroup v2 hierarchy whose `cgroup.controllers` lists
//! `memory`. This check asks the same function the baseline asks
//! (`tiermem_host::cgroup::root_from_mounts`), over the tree's files, so
//! the two cannot disagree. Without either the baseline cannot run, which
//! is a warning here: the other modes of `tiermem bench` and all of
//! tiermem itself do not need one.

use std::path::Path;

use tiermem_host::cgroup::{self, Version};

use crate::check::Check;
use crate::tree::{unescape, Tree};

const NAME_SWAP: &str = "swap_settings";
const NAME_CGROUP: &str = "cgroup";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwapFacts {
    /// The active THP mode (`[madvise]` of the list).
    pub thp: Option<String>,
    pub swappiness: Option<u32>,
    /// zswap's `enabled` parameter (`Y`/`N`); `None` without zswap.
    pub zswap: Option<bool>,
    /// Whether `/proc/swaps` exists (the kernel has swap support).
    pub swap_support: bool,
}

impl SwapFacts {
    pub fn gather(tree: &Tree) -> SwapFacts {
        SwapFacts {
            thp: tree
                .read_trim("/sys/kernel/mm/transparent_hugepage/enabled")
                .map(|l| crate::queue::active_scheduler(&l)),
            swappiness: tree.read_num("/proc/sys/vm/swappiness"),
            zswap: tree
                .read_trim("/sys/module/zswap/parameters/enabled")
                .map(|v| v == "Y" || v == "1"),
            swap_support: tree.exists("/proc/swaps"),
        }
    }
}

/// The swap-settings check (pure): a report, failing only where the
/// kernel has no swap at all.
pub fn settings(facts: &SwapFacts) -> Check {
    let thp = facts.thp.clone().unwrap_or_else(|| "unknown".to_string());
    let swappiness = facts
        .swappiness
        .map_or("unknown".to_string(), |v| v.to_string());
    let zswap = match facts.zswap {
        Some(true) => "on",
        Some(false) => "off",
        None => "not built",
    };
    let detail = format!("THP {thp}, swappiness {swappiness}, zswap {zswap}");
    if !facts.swap_support {
        return Check::warn(
            NAME_SWAP,
            format!("{detail}; the kernel has no swap support (/proc/swaps is missing), so tiermem bench's kernel-swap baseline cannot run"),
            "run the baseline on a kernel built with CONFIG_SWAP, or run tiermem bench --modes dram,tiermem",
        );
    }
    Check::pass(
        NAME_SWAP,
        format!("{detail} (reported: the kernel-swap baseline of tiermem bench runs with them)"),
    )
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupFacts {
    /// The root the kernel-swap baseline makes its cgroup under, and its
    /// version.
    pub baseline: Option<(String, Version)>,
    /// Every cgroup2 mount, and whether its root lists `memory`, for the
    /// detail when there is no root.
    pub v2_mounts: Vec<(String, bool)>,
}

impl CgroupFacts {
    pub fn gather(tree: &Tree) -> CgroupFacts {
        let mounts = tree.read("/proc/self/mounts").unwrap_or_default();
        let read = |p: &Path| std::fs::read_to_string(tree.path(p)).ok();
        let baseline = cgroup::root_from_mounts(&mounts, &read)
            .map(|root| (root.dir.display().to_string(), root.version));
        let v2_mounts = mounts
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                let [_, dir, "cgroup2", ..] = f[..] else {
                    return None;
                };
                let dir = unescape(dir);
                let controllers = read(&Path::new(&dir).join("cgroup.controllers"));
                let memory =
                    controllers.is_some_and(|c| c.split_whitespace().any(|c| c == "memory"));
                Some((dir, memory))
            })
            .collect();
        CgroupFacts {
            baseline,
            v2_mounts,
        }
    }
}

/// The cgroup check (pure).
pub fn cgroup(facts: &CgroupFacts) -> Check {
    let v2: Vec<String> = facts
        .v2_mounts
        .iter()
        .map(|(dir, memory)| match memory {
            true => format!("cgroup2 at {dir} with the memory controller"),
            false => format!("cgroup2 at {dir} without the memory controller"),
        })
        .collect();
    let v2 = match v2.is_empty() {
        true => "no cgroup2".to_string(),
        false => v2.join(", "),
    };
    match &facts.baseline {
        Some((dir, Version::V1)) => Check::pass(
            NAME_CGROUP,
            format!("v1: the kernel-swap baseline uses the memory hierarchy at {dir} (memory.limit_in_bytes, its own swappiness); also {v2}"),
        ),
        Some((dir, Version::V2)) => Check::pass(
            NAME_CGROUP,
            format!("v2: the kernel-swap baseline uses {dir} (memory.max, memory.swap.max, memory.peak); v2 has no swappiness per cgroup, so vm.swappiness applies"),
        ),
        None => Check::warn(
            NAME_CGROUP,
            format!("no memory cgroup (no v1 memory hierarchy; {v2}): the kernel-swap baseline of tiermem bench cannot run; tiermem itself needs none"),
            "mount cgroup2 with the memory controller (mount -t cgroup2 none /sys/fs/cgroup; boot without cgroup_disable=memory), or run tiermem bench --modes dram,tiermem",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Status;

    #[test]
    fn settings_are_reported() {
        let f = SwapFacts {
            thp: Some("madvise".into()),
            swappiness: Some(60),
            zswap: Some(false),
            swap_support: true,
        };
        let c = settings(&f);
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(
            c.detail
                .starts_with("THP madvise, swappiness 60, zswap off"),
            "{c:?}"
        );
    }

    #[test]
    fn no_swap_support_warns() {
        let f = SwapFacts {
            swap_support: false,
            ..SwapFacts::default()
        };
        let c = settings(&f);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.detail.contains("THP unknown"), "{c:?}");
    }

    #[test]
    fn v1_or_v2_with_memory_passes_and_neither_warns() {
        let v1 = CgroupFacts {
            baseline: Some(("/sys/fs/cgroup/memory".into(), Version::V1)),
            v2_mounts: vec![("/sys/fs/cgroup/unified".into(), false)],
        };
        let c = cgroup(&v1);
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(c.detail.starts_with("v1"), "{c:?}");
        let v2 = CgroupFacts {
            baseline: Some(("/sys/fs/cgroup".into(), Version::V2)),
            v2_mounts: vec![("/sys/fs/cgroup".into(), true)],
        };
        let c = cgroup(&v2);
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(
            c.detail
                .starts_with("v2: the kernel-swap baseline uses /sys/fs/cgroup"),
            "{c:?}"
        );
        let no_memory = CgroupFacts {
            baseline: None,
            v2_mounts: vec![("/sys/fs/cgroup".into(), false)],
        };
        let c = cgroup(&no_memory);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.detail.contains("without the memory controller"), "{c:?}");
        assert_eq!(cgroup(&CgroupFacts::default()).status, Status::Warn);
    }

    #[test]
    fn the_mount_table_finds_both_versions() {
        let root = tempfile::tempdir().expect("a temp dir");
        let write = |rel: &str, text: &str| {
            let p = root.path().join(rel);
            std::fs::create_dir_all(p.parent().expect("a parent")).expect("dirs");
            std::fs::write(p, text).expect("a file");
        };
        write(
            "proc/self/mounts",
            "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n\
             cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n",
        );
        write(
            "sys/fs/cgroup/memory/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        write("sys/fs/cgroup/unified/cgroup.controllers", "\n");
        let f = CgroupFacts::gather(&Tree::new(root.path()));
        assert_eq!(
            f.baseline,
            Some(("/sys/fs/cgroup/memory".into(), Version::V1))
        );
        assert_eq!(f.v2_mounts, vec![("/sys/fs/cgroup/unified".into(), false)]);
    }

    #[test]
    fn a_v2_only_host_is_found_by_its_controllers() {
        let root = tempfile::tempdir().expect("a temp dir");
        let write = |rel: &str, text: &str| {
            let p = root.path().join(rel);
            std::fs::create_dir_all(p.parent().expect("a parent")).expect("dirs");
            std::fs::write(p, text).expect("a file");
        };
        write(
            "proc/self/mounts",
            "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n",
        );
        write(
            "sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory pids\n",
        );
        let f = CgroupFacts::gather(&Tree::new(root.path()));
        assert_eq!(f.baseline, Some(("/sys/fs/cgroup".into(), Version::V2)));
        assert_eq!(f.v2_mounts, vec![("/sys/fs/cgroup".into(), true)]);
        assert_eq!(cgroup(&f).status, Status::Pass);
    }
}
