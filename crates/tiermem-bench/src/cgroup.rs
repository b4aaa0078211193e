//! The memory cgroup kernel swap runs in, whichever version this machine
//! offers (found by [`tiermem_host::cgroup`]): the control files each
//! version names differently, and how its counters are read.

use std::path::Path;

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
}

/// Reads the counters of the cgroup at `dir` with `read`.
pub fn read_counters(
    dir: &Path,
    version: Version,
    read: &dyn Fn(&Path) -> Option<String>,
) -> anyhow::Result<Counters> {
    let stat_path = dir.join("memory.stat");
    let stat = read(&stat_path).with_context(|| format!("reading {}", stat_path.display()))?;
    let field = |text: &str, key: &str| crate::kernel_swap::stat_field(text, key).ok();
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
            }
        }
        // v2 counts are hierarchical already.
        Version::V2 => Counters {
            pgfault: field(&stat, "pgfault").unwrap_or(0),
            pgmajfault: field(&stat, "pgmajfault").unwrap_or(0),
            swap_bytes: number("memory.swap.current").unwrap_or(0),
            rss_bytes: field(&stat, "anon").unwrap_or(0),
            peak_bytes: number(Version::V2.peak_file()).unwrap_or(0),
            limit_hits: read(&dir.join("memory.events"))
                .and_then(|events| field(&events, "max"))
                .unwrap_or(0),
        },
    })
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
                "low 0\nhigh 0\nmax 17\noom 0\noom_kill 0\n",
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
        ]);
        let c = read_counters(Path::new("/cg"), Version::V1, &read).unwrap();
        assert_eq!(
            (c.rss_bytes, c.swap_bytes, c.pgfault, c.pgmajfault),
            (10, 20, 30, 40)
        );
        assert_eq!((c.peak_bytes, c.limit_hits), (50, 6));
    }

    #[test]
    fn a_missing_memory_stat_is_an_error_naming_it() {
        let read = files(&[]);
        let err = read_counters(Path::new("/cg"), Version::V2, &read).unwrap_err();
        assert!(format!("{err:#}").contains("/cg/memory.stat"), "{err:#}");
    }
}
