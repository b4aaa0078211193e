//! zswap for `kernel-zswap` mode: the kernel's compressed cache in front of
//! swap, switched on for one run and back to what it was afterwards.
//!
//! The module parameters (`enabled`, `compressor`, `max_pool_percent`) are
//! saved through `saved_settings` before any is changed. The statistics
//! come from debugfs (`<debugfs>/zswap`), mounted for the run if it is not
//! and unmounted again on restore.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::saved_settings::{Kind, SettingsGuard};

/// zswap's module parameters.
pub const PARAMS_DIR: &str = "/sys/module/zswap/parameters";
/// Where debugfs is mounted by convention.
pub const DEBUGFS: &str = "/sys/kernel/debug";
/// The parameters a run changes, saved and restored in this order.
const SAVED: [&str; 3] = ["enabled", "compressor", "max_pool_percent"];
/// Statistics that are levels, not counts since boot.
const LEVELS: [&str; 4] = [
    "stored_pages",
    "pool_total_size",
    "same_filled_pages",
    "stored_incompressible_pages",
];

/// What `--zswap-compressor` and `--zswap-max-pool-percent` ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZswapOptions {
    pub compressor: String,
    /// `None` leaves the machine's value.
    pub max_pool_percent: Option<u32>,
}

impl Default for ZswapOptions {
    fn default() -> ZswapOptions {
        ZswapOptions {
            compressor: "lzo-rle".into(),
            max_pool_percent: None,
        }
    }
}

/// The compression algorithms the kernel's crypto API offers now (types
/// `compression`, `acomp`, `scomp` in /proc/crypto), which zswap can use.
pub fn offered_compressors(proc_crypto: &str) -> Vec<String> {
    let mut offered = Vec::new();
    let mut name = None;
    for line in proc_crypto.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim() {
            "name" => name = Some(value.trim().to_string()),
            "type" if matches!(value.trim(), "compression" | "acomp" | "scomp") => {
                if let Some(n) = name.take() {
                    if !offered.contains(&n) {
                        offered.push(n);
                    }
                }
            }
            _ => {}
        }
    }
    offered
}

/// Refuses a compressor the kernel does not offer, naming those it does.
pub fn check_compressor(wanted: &str, offered: &[String]) -> anyhow::Result<()> {
    if offered.iter().any(|o| o == wanted) {
        Ok(())
    } else {
        bail!(
            "--zswap-compressor {wanted}: this kernel offers {} (from /proc/crypto)",
            if offered.is_empty() {
                "none".to_string()
            } else {
                offered.join(", ")
            }
        )
    }
}

/// `kernel-zswap` with its pool counted against the budget, as tiermem's
/// pool is: zswap's pool capped at tiermem's share of the budget and the
/// cgroup's limit lowered by that cap, so that both modes hold their
/// resident and compressed pages in the same DRAM. Under the cgroup v1
/// memory controller zswap's pool is charged to no cgroup, so without this
/// the kernel mode has the whole budget plus its pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolInBudget {
    /// zswap's `max_pool_percent`: its only cap, in whole percents of the
    /// machine's memory.
    pub max_pool_percent: u32,
    /// That cap in bytes.
    pub pool_cap_bytes: u64,
    /// The cgroup's limit: the budget less the cap.
    pub cgroup_limit_bytes: u64,
    /// tiermem's pool share matching the cap, in percent of the budget.
    pub tiermem_share_percent: u32,
}

/// The split for a `budget` of which tiermem's pool may take
/// `share_percent`, on a machine of `ram` bytes. zswap's cap moves in
/// steps of 1% of `ram`, so the cap is the step nearest the share, and
/// tiermem's share follows it (to the nearest percent). Refused when no
/// step fits tiermem's range of shares.
pub fn pool_in_budget(
    budget: u64,
    share_percent: u32,
    ram: u64,
    shares: std::ops::RangeInclusive<u32>,
) -> anyhow::Result<PoolInBudget> {
    anyhow::ensure!(ram > 0 && budget > 0, "no budget or no memory to split");
    let wanted = budget as f64 * f64::from(share_percent) / 100.0;
    let step = ram as f64 / 100.0;
    let max_pool_percent = ((wanted / step).round() as u32).max(1);
    let pool_cap_bytes = ram / 100 * u64::from(max_pool_percent);
    let tiermem_share_percent = (pool_cap_bytes as f64 * 100.0 / budget as f64).round() as u32;
    if !shares.contains(&tiermem_share_percent) {
        let mib = |b: f64| b / 1048576.0;
        bail!(
            "--pool-in-budget: zswap caps its pool in steps of 1% of this machine's memory \
             ({:.1} MiB), and the step nearest {share_percent}% of the {:.1} MiB budget is \
             {:.0}% of the budget, outside the {}-{}% tiermem's pool can take; use a budget \
             of at least {:.0} MiB",
            mib(step),
            mib(budget as f64),
            f64::from(tiermem_share_percent),
            shares.start(),
            shares.end(),
            (mib(step) * 100.0 / f64::from(*shares.end())).ceil(),
        );
    }
    Ok(PoolInBudget {
        max_pool_percent,
        pool_cap_bytes,
        cgroup_limit_bytes: budget - pool_cap_bytes,
        tiermem_share_percent,
    })
}

impl PoolInBudget {
    /// What the report says of the split.
    pub fn describe(&self) -> String {
        format!(
            "pool in budget: zswap's pool at most {}% of the machine's memory ({:.1} MiB), \
             the cgroup limited to the rest of the budget ({:.1} MiB); tiermem's pool at most \
             {}% of the budget",
            self.max_pool_percent,
            self.pool_cap_bytes as f64 / 1048576.0,
            self.cgroup_limit_bytes as f64 / 1048576.0,
            self.tiermem_share_percent
        )
    }
}

/// Saves zswap's parameters in `params_dir` and switches zswap on with
/// `options`; the guard puts everything back.
pub fn enable(
    params_dir: &Path,
    state_dir: &Path,
    options: &ZswapOptions,
    offered: &[String],
) -> anyhow::Result<SettingsGuard> {
    if !params_dir.join("enabled").exists() {
        bail!(
            "this kernel has no zswap ({} is missing)",
            params_dir.display()
        );
    }
    check_compressor(&options.compressor, offered)?;
    if let Some(p) = options.max_pool_percent {
        if !(1..=100).contains(&p) {
            bail!("--zswap-max-pool-percent {p}: expected 1 to 100");
        }
    }
    let guard = SettingsGuard::save(state_dir, Kind::Zswap, params_dir, &SAVED)?;
    // The compressor first, so that zswap starts with it.
    guard.set("compressor", &options.compressor)?;
    if let Some(p) = options.max_pool_percent {
        guard.set("max_pool_percent", &p.to_string())?;
    }
    guard.set("enabled", "Y")?;
    let now = crate::saved_settings::read_setting(&params_dir.join("compressor"))?;
    if now != options.compressor {
        bail!(
            "zswap kept compressor {now} after {} was written to it",
            options.compressor
        );
    }
    Ok(guard)
}

/// zswap's statistics directory, mounting debugfs at `debugfs` first when
/// nothing is mounted there (noted in `guard`, which unmounts it).
pub fn stats_dir(debugfs: &Path, guard: &SettingsGuard) -> anyhow::Result<PathBuf> {
    let dir = debugfs.join("zswap");
    if dir.is_dir() {
        return Ok(dir);
    }
    if is_mountpoint(debugfs) {
        bail!("{} has no zswap statistics", debugfs.display());
    }
    mount_debugfs(debugfs)?;
    guard.note_mounted(debugfs)?;
    if !dir.is_dir() {
        bail!("debugfs mounted at {} has no zswap", debugfs.display());
    }
    Ok(dir)
}

/// Every statistic in zswap's debugfs directory.
pub fn read_stats(dir: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut stats = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        if let Ok(v) = text.trim().parse::<u64>() {
            stats.insert(entry.file_name().to_string_lossy().into_owned(), v);
        }
    }
    if !stats.contains_key("stored_pages") {
        bail!("{} has no stored_pages", dir.display());
    }
    Ok(stats)
}

/// The counters of a run, `zswap_`-prefixed: the levels of `peak` (the
/// sample that held the most pages), the counts since `start` at `end`, and
/// the compression ratio at the peak, stored bytes / pool bytes.
pub fn run_counters(
    start: &BTreeMap<String, u64>,
    peak: &BTreeMap<String, u64>,
    end: &BTreeMap<String, u64>,
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (name, &v) in end {
        let value = if LEVELS.contains(&name.as_str()) {
            peak.get(name).copied().unwrap_or(v)
        } else {
            v.saturating_sub(start.get(name).copied().unwrap_or(0))
        };
        out.insert(format!("zswap_{name}"), value as f64);
    }
    let stored = peak.get("stored_pages").copied().unwrap_or(0);
    let pool = peak.get("pool_total_size").copied().unwrap_or(0);
    if pool > 0 {
        out.insert(
            "zswap_compression_ratio".into(),
            stored as f64 * 4096.0 / pool as f64,
        );
    }
    out
}

/// One line for the report.
pub fn describe(counters: &BTreeMap<String, f64>, compressor: &str) -> String {
    let get = |k: &str| counters.get(k).copied().unwrap_or(0.0);
    let rejected: f64 = counters
        .iter()
        .filter(|(k, _)| k.starts_with("zswap_reject_"))
        .map(|(_, v)| v)
        .sum();
    format!(
        "zswap ({compressor}) at its fullest: {:.0} pages ({:.1} MiB) in a {:.1} MiB pool, \
         ratio {}; {:.0} pages written back to the swapfile, {rejected:.0} rejected",
        get("zswap_stored_pages"),
        get("zswap_stored_pages") * 4096.0 / 1048576.0,
        get("zswap_pool_total_size") / 1048576.0,
        counters
            .get("zswap_compression_ratio")
            .map_or("-".to_string(), |r| format!("{r:.2}x")),
        get("zswap_written_back_pages"),
    )
}

fn is_mountpoint(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mounts").is_ok_and(|mounts| {
        mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .any(|dir| Path::new(dir) == path)
    })
}

fn mount_debugfs(at: &Path) -> anyhow::Result<()> {
    let target = CString::new(at.as_os_str().as_bytes())
        .with_context(|| format!("{} contains a NUL byte", at.display()))?;
    let fstype = c"debugfs";
    // SAFETY: every pointer is a valid NUL-terminated string that outlives
    // the call; the data argument may be null.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        return Err(err).with_context(|| format!("mounting debugfs at {}", at.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRYPTO: &str = "name         : lzo-rle\ndriver       : lzo-rle-scomp\n\
                          type         : scomp\n\nname         : sha256\n\
                          type         : shash\n\nname         : deflate\n\
                          type         : acomp\n\nname         : lzo\ntype         : scomp\n";

    #[test]
    fn the_pool_in_budget_takes_the_nearest_step_and_the_cgroup_the_rest() {
        let gib = 1u64 << 30;
        let ram = 24 * gib;
        let split = pool_in_budget(512 << 20, 50, ram, 1..=90).unwrap();
        assert_eq!(split.max_pool_percent, 1);
        assert_eq!(split.pool_cap_bytes, ram / 100);
        assert_eq!(split.cgroup_limit_bytes, (512 << 20) - ram / 100);
        assert_eq!(split.tiermem_share_percent, 48);
        let split = pool_in_budget(4 * gib, 50, ram, 1..=90).unwrap();
        assert_eq!(split.max_pool_percent, 8);
        assert_eq!(split.tiermem_share_percent, 48);
        assert_eq!(split.pool_cap_bytes + split.cgroup_limit_bytes, 4 * gib);
    }

    #[test]
    fn a_budget_below_one_step_of_zswap_is_refused_with_the_smallest_that_works() {
        let ram = 24u64 << 30;
        let err = pool_in_budget(256 << 20, 50, ram, 1..=90)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("245.8 MiB") && err.contains("at least 274 MiB"),
            "{err}"
        );
    }

    #[test]
    fn compressors_come_from_proc_crypto() {
        let offered = offered_compressors(CRYPTO);
        assert_eq!(offered, vec!["lzo-rle", "deflate", "lzo"]);
        check_compressor("deflate", &offered).unwrap();
        let err = check_compressor("zstd", &offered).unwrap_err().to_string();
        assert!(
            err.contains("zstd") && err.contains("lzo-rle, deflate, lzo"),
            "{err}"
        );
    }

    fn fake_params() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, value) in [
            ("enabled", "N"),
            ("compressor", "lzo"),
            ("max_pool_percent", "20"),
            ("accept_threshold_percent", "90"),
        ] {
            std::fs::write(dir.path().join(name), format!("{value}\n")).unwrap();
        }
        dir
    }

    #[test]
    fn enabling_sets_what_was_asked_and_restoring_puts_all_back() {
        let params = fake_params();
        let state = tempfile::tempdir().unwrap();
        let offered = offered_compressors(CRYPTO);
        let options = ZswapOptions {
            compressor: "lzo-rle".into(),
            max_pool_percent: Some(30),
        };
        let guard = enable(params.path(), state.path(), &options, &offered).unwrap();
        let read = |n: &str| crate::saved_settings::read_setting(&params.path().join(n)).unwrap();
        assert_eq!(
            (
                read("enabled"),
                read("compressor"),
                read("max_pool_percent")
            ),
            ("Y".into(), "lzo-rle".into(), "30".into())
        );
        guard.restore().unwrap();
        assert_eq!(
            (
                read("enabled"),
                read("compressor"),
                read("max_pool_percent")
            ),
            ("N".into(), "lzo".into(), "20".into())
        );
        assert_eq!(read("accept_threshold_percent"), "90");
    }

    #[test]
    fn a_bad_compressor_changes_nothing() {
        let params = fake_params();
        let state = tempfile::tempdir().unwrap();
        let options = ZswapOptions {
            compressor: "zstd".into(),
            max_pool_percent: None,
        };
        let err = enable(
            params.path(),
            state.path(),
            &options,
            &offered_compressors(CRYPTO),
        )
        .unwrap_err();
        assert!(err.to_string().contains("zstd"), "{err}");
        let enabled = std::fs::read_to_string(params.path().join("enabled")).unwrap();
        assert_eq!(enabled.trim(), "N");
        assert!(std::fs::read_dir(state.path()).unwrap().next().is_none());
    }

    #[test]
    fn counters_are_peak_levels_and_counts_since_the_start() {
        let map = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        let start = map(&[
            ("stored_pages", 5),
            ("pool_total_size", 8192),
            ("written_back_pages", 100),
            ("reject_compress_poor", 7),
        ]);
        let peak = map(&[
            ("stored_pages", 1000),
            ("pool_total_size", 1000 * 4096 / 2),
            ("written_back_pages", 100),
            ("reject_compress_poor", 9),
        ]);
        let end = map(&[
            ("stored_pages", 0),
            ("pool_total_size", 0),
            ("written_back_pages", 130),
            ("reject_compress_poor", 10),
        ]);
        let c = run_counters(&start, &peak, &end);
        assert_eq!(c["zswap_stored_pages"], 1000.0);
        assert_eq!(c["zswap_written_back_pages"], 30.0);
        assert_eq!(c["zswap_reject_compress_poor"], 3.0);
        assert!((c["zswap_compression_ratio"] - 2.0).abs() < 1e-9);
        let line = describe(&c, "lzo-rle");
        assert!(
            line.contains("ratio 2.00x") && line.contains("3 rejected"),
            "{line}"
        );
    }
}
