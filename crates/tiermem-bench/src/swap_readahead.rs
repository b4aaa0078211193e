//! `vm.page-cluster` for the compressed kernel modes: how many swap slots
//! the kernel reads around each swap-in, set for one run and put back
//! afterwards.
//!
//! The kernel reads 2^page-cluster slots around a faulting one (8 at the
//! default of 3), which pays on a disk, where neighbours come nearly free
//! with the seek. From a compressed tier each neighbour is a decompression
//! into the swap cache, charged to the memory cgroup. Under `tiermem
//! bench-redis --modes kernel-zswap` at the default, on Linux 6.18 with
//! cgroup v1, those neighbours fill the cgroup (297 of 320 MiB of swap
//! cache, all on the active list, 34 MiB mapped) until its OOM killer ends
//! redis-server; at 0 the run finishes (BENCHMARKS.md, "Redis with
//! compressible values"). So the compressed modes run at 0 unless told
//! otherwise (`--page-cluster`); kernel-swap keeps the machine's setting,
//! as swap on a disk is used.

use std::path::Path;

use anyhow::bail;

use crate::saved_settings::{Kind, SettingsGuard};

/// Where the kernel's vm tunables are.
pub const SYSCTL_DIR: &str = "/proc/sys/vm";
/// The tunable's file name.
pub const NAME: &str = "page-cluster";
/// The largest value the kernel accepts (its `page_cluster_max`).
pub const MAX: u32 = 31;

/// What `--page-cluster` asks for: a value for the run, or the machine's.
pub fn parse(text: &str) -> anyhow::Result<Option<u32>> {
    if text == "keep" {
        return Ok(None);
    }
    match text.parse::<u32>() {
        Ok(v) if v <= MAX => Ok(Some(v)),
        _ => bail!(
            "invalid --page-cluster '{text}': expected keep (the machine's setting) or 0-{MAX} \
             (the kernel reads 2^N swap slots around each swap-in)"
        ),
    }
}

/// Sets `vm.page-cluster` in `sysctl_dir` to `value`, after saving the
/// original to a state file in `state_dir`. Returns the guard that puts
/// it back, and a note for the report.
pub fn set_for_run(
    sysctl_dir: &Path,
    state_dir: &Path,
    value: u32,
) -> anyhow::Result<(SettingsGuard, String)> {
    let guard = SettingsGuard::save(state_dir, Kind::Sysctl, sysctl_dir, &[NAME])?;
    let original = guard.original(NAME).unwrap_or_default();
    guard.set(NAME, &value.to_string())?;
    let note = if original == value.to_string() {
        format!("vm.page-cluster {value}, as the machine has it")
    } else {
        format!(
            "vm.page-cluster {value} for the run (the machine's {original}, put back after): \
             swap readahead from a compressed tier fills the memory cgroup with swap cache"
        )
    };
    Ok((guard, note))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_and_values_in_the_kernels_range_parse_and_others_are_refused() {
        assert_eq!(parse("keep").unwrap(), None);
        assert_eq!(parse("0").unwrap(), Some(0));
        assert_eq!(parse("31").unwrap(), Some(31));
        for bad in ["32", "-1", "", "three"] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(
                err.contains("--page-cluster") && err.contains("0-31"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_value_is_set_for_the_run_and_put_back_by_the_guard() {
        let sysctl = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let file = sysctl.path().join(NAME);
        std::fs::write(&file, "3\n").unwrap();
        let (guard, note) = set_for_run(sysctl.path(), state.path(), 0).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "0");
        assert!(
            note.contains("page-cluster 0") && note.contains("machine's 3"),
            "{note}"
        );
        assert!(guard.state_file().exists());
        guard.restore().unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), "3");
        assert!(!guard.state_file().exists());
    }

    #[test]
    fn a_value_the_machine_already_has_is_noted_as_such() {
        let sysctl = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        std::fs::write(sysctl.path().join(NAME), "0\n").unwrap();
        let (_guard, note) = set_for_run(sysctl.path(), state.path(), 0).unwrap();
        assert_eq!(note, "vm.page-cluster 0, as the machine has it");
    }
}
