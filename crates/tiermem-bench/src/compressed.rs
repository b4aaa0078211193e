//! The kernel's compressed swap tiers as anchor modes, each in the same
//! memory cgroup as `kernel-swap`:
//!
//! * `kernel-zswap`: the same swapfile on the same device, with zswap (a
//!   compressed cache in front of swap) switched on for the run;
//! * `kernel-zram`: swap on a zram device (compressed RAM) instead of the
//!   swapfile.
//!
//! Both change machine-wide settings, so both refuse to run while any other
//! swap area is active (their settings would reach it, and its pages would
//! blur their figures), first restoring what a killed run left changed.
//! Their statistics are sampled while the program runs, since the kernel
//! frees a process's swapped pages when it exits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::kernel_swap::{self, SandboxSpec, SwapSandbox};
use crate::page_data::PageData;
use crate::result::Mode;
use crate::saved_settings::STATE_DIR;
use crate::swap_readahead;
use crate::zram::{self, MmStat, ZramOptions};
use crate::zswap::{self, ZswapOptions};

/// How often the tier's statistics are read while the program runs.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// The options of both compressed modes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompressedOptions {
    pub zswap: ZswapOptions,
    pub zram: ZramOptions,
    /// The compressed kernel modes' pools counted against the budget
    /// (`--pool-in-budget`).
    pub pool_in_budget: Option<zswap::PoolInBudget>,
    /// What the pages hold, when it is known before the run (`tiermem
    /// bench`): zram's device is sized from it under `pool_in_budget`.
    pub page_data: Option<PageData>,
    /// `vm.page-cluster` for the run (`--page-cluster`); `None` keeps the
    /// machine's (see `swap_readahead`).
    pub page_cluster: Option<u32>,
}

/// Where a compressed mode's statistics come from.
#[derive(Clone, Debug)]
pub enum Tier {
    /// zswap's debugfs directory (`None`: debugfs could not be had).
    Zswap {
        stats: Option<PathBuf>,
        compressor: String,
    },
    /// The zram device's sysfs directory; the cap its pool was sized to
    /// fill under `--pool-in-budget`.
    Zram {
        sysfs: PathBuf,
        compressor: String,
        pool_cap: Option<u64>,
    },
}

/// A swap sandbox with a compressed tier set up for it.
pub struct CompressedSwap {
    pub sandbox: SwapSandbox,
    pub tier: Tier,
    /// What to keep in mind when reading the mode's figures.
    pub notes: Vec<String>,
}

/// Builds `mode`'s sandbox from `base` (the kernel-swap sandbox of the same
/// run) with its tier, and the swap readahead `options` ask for.
/// Everything changed is restored when the sandbox is removed, on every
/// path (see `kernel_swap`).
pub fn create(
    mode: Mode,
    base: &SandboxSpec,
    working_set_bytes: u64,
    options: &CompressedOptions,
) -> anyhow::Result<CompressedSwap> {
    let mut built = create_tier(mode, base, working_set_bytes, options)?;
    if let Some(value) = options.page_cluster {
        // On failure `built.sandbox`, dropped here, takes the tier down.
        let (guard, note) = swap_readahead::set_for_run(
            Path::new(swap_readahead::SYSCTL_DIR),
            Path::new(STATE_DIR),
            value,
        )?;
        built.sandbox.add_restore(Arc::new(guard));
        built.notes.push(note);
    }
    Ok(built)
}

fn create_tier(
    mode: Mode,
    base: &SandboxSpec,
    working_set_bytes: u64,
    options: &CompressedOptions,
) -> anyhow::Result<CompressedSwap> {
    SwapSandbox::availability().map_err(|why| anyhow::anyhow!(why))?;
    let mut notes = Vec::new();
    // Before the check for other swap areas below, which a killed run's
    // would fail; the sandbox's own removal then finds nothing more.
    let removed =
        kernel_swap::remove_leftovers().context("restoring what a killed run left behind")?;
    notes.extend(kernel_swap::leftover_warning(removed));
    let swaps = kernel_swap::active_swaps().context("reading /proc/swaps")?;
    if !swaps.is_empty() {
        bail!(
            "another swap area is active ({}): {} changes machine-wide swap, so it runs \
             only while no other swap is on (swapoff it, or leave the mode out)",
            swaps
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            mode.name()
        );
    }
    let state_dir = Path::new(STATE_DIR);
    match mode {
        Mode::KernelZswap => {
            let crypto = std::fs::read_to_string("/proc/crypto").context("reading /proc/crypto")?;
            let offered = zswap::offered_compressors(&crypto);
            // Checked before the sandbox exists, so a typo costs nothing.
            zswap::check_compressor(&options.zswap.compressor, &offered)?;
            let mut spec = base.clone();
            let mut zswap_options = options.zswap.clone();
            if let Some(split) = &options.pool_in_budget {
                spec.memory_limit_bytes = split.cgroup_limit_bytes;
                zswap_options.max_pool_percent = Some(split.max_pool_percent);
                notes.push(split.describe());
            }
            let sandbox = SwapSandbox::create(&spec)?;
            let guard = Arc::new(zswap::enable(
                Path::new(zswap::PARAMS_DIR),
                state_dir,
                &zswap_options,
                &offered,
            )?);
            sandbox.add_restore(Arc::clone(&guard));
            let stats = match zswap::stats_dir(Path::new(zswap::DEBUGFS), &guard) {
                Ok(dir) => Some(dir),
                Err(e) => {
                    notes.push(format!("no zswap statistics: {e:#}"));
                    None
                }
            };
            Ok(CompressedSwap {
                sandbox,
                tier: Tier::Zswap {
                    stats,
                    compressor: options.zswap.compressor.clone(),
                },
                notes,
            })
        }
        Mode::KernelZram => {
            let sysfs = PathBuf::from(zram::SYSFS);
            let device = PathBuf::from(zram::DEVICE);
            zram::check_free(&sysfs, &device, &swaps)?;
            let mut spec = SandboxSpec {
                swap_device: Some((device.clone(), zram::SWAP_PRIORITY)),
                ..base.clone()
            };
            let disksize = match &options.pool_in_budget {
                Some(split) => {
                    let (disksize, note) = zram_within_pool(split, options, working_set_bytes)?;
                    spec.memory_limit_bytes = split.cgroup_limit_bytes;
                    spec.overflow_swapfile_bytes = Some(base.swap_bytes);
                    notes.push(note);
                    disksize
                }
                None => options
                    .zram
                    .disksize
                    .unwrap_or_else(|| zram::default_disksize(working_set_bytes)),
            };
            let guard = Arc::new(zram::prepare(
                &sysfs,
                &device,
                state_dir,
                &options.zram,
                disksize,
            )?);
            // On failure the guard, dropped here, resets the device.
            let sandbox = SwapSandbox::create(&spec)?;
            sandbox.add_restore(guard);
            if options.pool_in_budget.is_none() {
                notes.push(format!(
                    "zram device of {} MiB (uncompressed)",
                    disksize >> 20
                ));
            }
            Ok(CompressedSwap {
                sandbox,
                tier: Tier::Zram {
                    sysfs,
                    compressor: options.zram.compressor.clone(),
                    pool_cap: options.pool_in_budget.as_ref().map(|s| s.pool_cap_bytes),
                },
                notes,
            })
        }
        other => bail!("{} is not a compressed mode", other.name()),
    }
}

/// zram's size under `--pool-in-budget`, and the note that explains it:
/// the device is sized so that its pool, at the memory a page of the run's
/// data takes, fills at the pool's cap; a swapfile behind it takes the rest.
fn zram_within_pool(
    split: &zswap::PoolInBudget,
    options: &CompressedOptions,
    working_set_bytes: u64,
) -> anyhow::Result<(u64, String)> {
    let Some(data) = options.page_data else {
        bail!(
            "--pool-in-budget with kernel-zram needs page contents known before the run, to \
             size zram so that its pool fills at the cap: tiermem bench has them, \
             bench-redis does not"
        );
    };
    if options.zram.disksize.is_some() {
        bail!("--pool-in-budget sizes zram itself: leave out --zram-size");
    }
    let per_page = zram::estimated_pool_bytes_per_page(data);
    let disksize = zram::disksize_for_pool(
        split.pool_cap_bytes,
        per_page,
        zram::default_disksize(working_set_bytes),
    );
    let mib = |b: u64| b as f64 / 1048576.0;
    let note = format!(
        "pool in budget: the cgroup limited to {:.1} MiB; zram sized to {:.1} MiB so that \
         its pool, at an estimated {per_page:.0} bytes per page of {data} data, fills at \
         the {:.1} MiB cap; a swapfile behind it, at a lower priority, takes the pages \
         beyond (the line on zram at its fullest gives the pool's peak against the cap)",
        mib(split.cgroup_limit_bytes),
        mib(disksize),
        mib(split.pool_cap_bytes),
    );
    Ok((disksize, note))
}

/// One reading of a tier's statistics.
#[derive(Clone, Debug)]
enum Sample {
    Zswap(BTreeMap<String, u64>),
    Zram(MmStat),
}

impl Sample {
    /// How much the tier holds: what "at its fullest" is judged by.
    fn weight(&self) -> u64 {
        match self {
            Sample::Zswap(stats) => stats.get("stored_pages").copied().unwrap_or(0),
            Sample::Zram(stat) => stat.orig_data_size,
        }
    }
}

impl Tier {
    fn sample(&self) -> anyhow::Result<Sample> {
        match self {
            Tier::Zswap { stats: None, .. } => bail!("no zswap statistics"),
            Tier::Zswap {
                stats: Some(dir), ..
            } => Ok(Sample::Zswap(zswap::read_stats(dir)?)),
            Tier::Zram { sysfs, .. } => Ok(Sample::Zram(MmStat::read(sysfs)?)),
        }
    }
}

/// Reads a tier's statistics every `SAMPLE_EVERY` from `start` to
/// `finish`, keeping the first, the fullest and the last reading.
pub struct Sampler {
    tier: Tier,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Readings>>,
}

#[derive(Default)]
struct Readings {
    first: Option<Sample>,
    fullest: Option<Sample>,
    last: Option<Sample>,
    error: Option<String>,
}

impl Readings {
    fn take(&mut self, tier: &Tier) {
        match tier.sample() {
            Ok(s) => {
                if self.first.is_none() {
                    self.first = Some(s.clone());
                }
                let fuller = match &self.fullest {
                    Some(f) => s.weight() > f.weight(),
                    None => true,
                };
                if fuller {
                    self.fullest = Some(s.clone());
                }
                self.last = Some(s);
            }
            Err(e) => self.error = Some(format!("{e:#}")),
        }
    }
}

impl Sampler {
    /// Takes the first reading now (before the program runs) and starts
    /// the thread that takes the others.
    pub fn start(tier: Tier) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let mut readings = Readings::default();
        readings.take(&tier);
        let thread = {
            let tier = tier.clone();
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("tiermem-tier-stats".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(SAMPLE_EVERY);
                        readings.take(&tier);
                    }
                    readings
                })
                .ok()
        };
        Sampler { tier, stop, thread }
    }

    /// Stops sampling. Returns the run's counters (zswap_* or zram_*, the
    /// compression ratio among them) and a line for the report.
    pub fn finish(mut self) -> (BTreeMap<String, f64>, String) {
        self.stop.store(true, Ordering::Relaxed);
        let mut readings = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            _ => Readings::default(),
        };
        readings.take(&self.tier);
        match (&self.tier, readings.first, readings.fullest, readings.last) {
            (Tier::Zswap { compressor, .. }, Some(first), Some(full), Some(last)) => {
                let (Sample::Zswap(first), Sample::Zswap(full), Sample::Zswap(last)) =
                    (first, full, last)
                else {
                    return (BTreeMap::new(), "mixed-up tier statistics".into());
                };
                let counters = zswap::run_counters(&first, &full, &last);
                let line = zswap::describe(&counters, compressor);
                (counters, line)
            }
            (
                Tier::Zram {
                    compressor,
                    pool_cap,
                    ..
                },
                _,
                Some(Sample::Zram(full)),
                _,
            ) => {
                let mut line = full.describe(compressor);
                if let Some(cap) = pool_cap {
                    line.push_str(&full.against_cap(*cap));
                }
                (full.counters(), line)
            }
            _ => (
                BTreeMap::new(),
                format!(
                    "no statistics of the compressed tier: {}",
                    readings.error.unwrap_or_else(|| "none read".into())
                ),
            ),
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
