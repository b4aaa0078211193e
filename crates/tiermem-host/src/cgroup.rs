//! Which memory cgroup interface this machine offers: version 1 (a
//! `memory` hierarchy) or version 2 (the unified hierarchy with the
//! `memory` controller), and where.
//!
//! Version 1 wins where both are mounted (it is what the kernel-swap
//! figures in BENCHMARKS.md were measured with); otherwise version 2,
//! which most current distributions have alone.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// Which cgroup interface a root speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Version {
    #[serde(rename = "v1")]
    V1,
    #[serde(rename = "v2")]
    V2,
}

impl Version {
    pub fn name(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }

    /// The file that limits the cgroup's memory (its DRAM budget).
    pub fn limit_file(self) -> &'static str {
        match self {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        }
    }

    /// The file with the cgroup's peak memory use (v2: Linux 5.19+).
    pub fn peak_file(self) -> &'static str {
        match self {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        }
    }
}

/// Where new memory cgroups are made, and in which version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root {
    pub dir: PathBuf,
    pub version: Version,
}

/// The memory cgroup root of this machine: v1's `memory` hierarchy if it
/// is mounted, else the v2 hierarchy if its root offers `memory`.
pub fn find_root() -> Option<Root> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    root_from_mounts(&mounts, &|p: &Path| std::fs::read_to_string(p).ok())
}

/// [`find_root`] over a mount table and a file reader (for tests).
pub fn root_from_mounts(mounts: &str, read: &dyn Fn(&Path) -> Option<String>) -> Option<Root> {
    let entries: Vec<(PathBuf, &str, &str)> = mounts
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (_dev, dir, fstype, options) = (f.next()?, f.next()?, f.next()?, f.next()?);
            Some((
                PathBuf::from(crate::mounts::unescape_octal(dir)),
                fstype,
                options,
            ))
        })
        .collect();
    let v1 = entries.iter().find_map(|(dir, fstype, options)| {
        let memory = *fstype == "cgroup" && options.split(',').any(|o| o == "memory");
        (memory && read(&dir.join(Version::V1.limit_file())).is_some()).then(|| Root {
            dir: dir.clone(),
            version: Version::V1,
        })
    });
    v1.or_else(|| {
        entries.iter().find_map(|(dir, fstype, _)| {
            let controllers = read(&dir.join("cgroup.controllers"))?;
            let memory = controllers.split_whitespace().any(|c| c == "memory");
            (*fstype == "cgroup2" && memory).then(|| Root {
                dir: dir.clone(),
                version: Version::V2,
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn files(pairs: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let map: HashMap<PathBuf, String> = pairs
            .iter()
            .map(|(p, v)| (PathBuf::from(p), v.to_string()))
            .collect();
        move |p: &Path| map.get(p).cloned()
    }

    const V1_AND_V2: &str = "\
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,memory 0 0
";

    #[test]
    fn v1_memory_wins_where_both_are_mounted() {
        let read = files(&[
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712",
            ),
            ("/sys/fs/cgroup/unified/cgroup.controllers", "memory pids"),
        ]);
        let root = root_from_mounts(V1_AND_V2, &read).unwrap();
        assert_eq!(root.version, Version::V1);
        assert_eq!(root.dir, PathBuf::from("/sys/fs/cgroup/memory"));
    }

    #[test]
    fn a_v2_only_machine_uses_the_unified_root_when_it_offers_memory() {
        let mounts = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nsdelegate 0 0\n";
        let read = files(&[(
            "/sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory pids",
        )]);
        let root = root_from_mounts(mounts, &read).unwrap();
        assert_eq!(root.version, Version::V2);
        assert_eq!(root.dir, PathBuf::from("/sys/fs/cgroup"));
        // The memory controller bound elsewhere (to v1) is not v2's to use.
        let read = files(&[("/sys/fs/cgroup/cgroup.controllers", "cpu io pids")]);
        assert_eq!(root_from_mounts(mounts, &read), None);
    }

    #[test]
    fn mount_points_with_spaces_are_unescaped() {
        let mounts = "cgroup2 /mnt/cg\\040two cgroup2 rw 0 0\n";
        let read = files(&[("/mnt/cg two/cgroup.controllers", "memory")]);
        assert_eq!(
            root_from_mounts(mounts, &read).unwrap().dir,
            PathBuf::from("/mnt/cg two")
        );
    }
}
