//! The data a worker hands back to the parent: one `ModeResult` per mode.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hit_ratio::HitRatio;
use crate::scan_resistance::shape::ScanResistanceResult;
use tiermem_host::histogram::LatencyHistogram;

/// Which memory system a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Plain anonymous memory, no limit.
    Dram,
    /// tiermem with the configured budget and backing store.
    Tiermem,
    /// Plain anonymous memory inside a memory cgroup limited to the budget, with swap.
    KernelSwap,
    /// As `KernelSwap`, with zswap (compressed pages in DRAM in front of
    /// the swapfile) on for the run.
    KernelZswap,
    /// As `KernelSwap`, swapping to a zram device (compressed RAM) instead
    /// of the swapfile.
    KernelZram,
}

impl Mode {
    pub const ALL: [Mode; 5] = [
        Mode::Dram,
        Mode::Tiermem,
        Mode::KernelSwap,
        Mode::KernelZswap,
        Mode::KernelZram,
    ];
    /// The modes run when none are named: the compressed ones change
    /// machine-wide settings and are run only when asked for.
    pub const DEFAULT: [Mode; 3] = [Mode::Dram, Mode::Tiermem, Mode::KernelSwap];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Dram => "dram",
            Mode::Tiermem => "tiermem",
            Mode::KernelSwap => "kernel-swap",
            Mode::KernelZswap => "kernel-zswap",
            Mode::KernelZram => "kernel-zram",
        }
    }

    /// Whether the mode runs in a memory cgroup with kernel swap.
    pub fn is_kernel_swap(self) -> bool {
        matches!(
            self,
            Mode::KernelSwap | Mode::KernelZswap | Mode::KernelZram
        )
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "dram" => Ok(Mode::Dram),
            "tiermem" => Ok(Mode::Tiermem),
            "kernel-swap" | "swap" => Ok(Mode::KernelSwap),
            "kernel-zswap" | "zswap" => Ok(Mode::KernelZswap),
            "kernel-zram" | "zram" => Ok(Mode::KernelZram),
            _ => Err(format!(
                "unknown mode '{s}': expected dram, tiermem, kernel-swap, kernel-zswap or \
                 kernel-zram"
            )),
        }
    }
}

/// Outcome of the end-of-run check of every page's stamp.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    pub pages_checked: u64,
    /// Pages whose identity stamp is gone (zeroed or overwritten by another page).
    pub lost: u64,
    /// Pages whose identity is right but whose content is not the last value written.
    pub corrupted: u64,
    /// The first bad page index, to start debugging from.
    pub first_bad_page: Option<u64>,
}

impl ModeResult {
    /// Throughput in MB/s (10^6 bytes), if the page size is known.
    pub fn mb_per_sec(&self) -> Option<f64> {
        (self.page_size > 0).then(|| self.pages_per_sec * self.page_size as f64 / 1e6)
    }
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.lost == 0 && self.corrupted == 0
    }
}

/// The counter holding the worker process's CPU use over the measured
/// phase, in percent of one CPU (its access threads, and under tiermem its
/// handlers and evictor; the kernel's own threads are not in it).
pub const CPU_PERCENT: &str = "process_cpu_percent";

/// Everything one mode measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModeResult {
    pub mode: Mode,
    /// Measured accesses (warm-up excluded).
    pub accesses: u64,
    pub reads: u64,
    pub writes: u64,
    /// Wall time of the measured phase, seconds (JSON: `elapsed_ns`).
    #[serde(rename = "elapsed_ns", with = "tiermem_host::ns::seconds")]
    pub elapsed_s: f64,
    /// accesses / elapsed_s. Each access touches one page, as in pmbench.
    pub pages_per_sec: f64,
    /// Size of those pages, to turn pages/s into bytes/s; 0 if unknown
    /// (a skipped mode, or a result saved before this field existed).
    #[serde(default)]
    pub page_size: u64,
    /// Latency of every measured access, nanoseconds.
    pub latency: LatencyHistogram,
    /// Accesses at or above this latency count as "slow" (a fault, a miss).
    pub slow_threshold_ns: u64,
    pub verify: VerifyReport,
    /// Hit ratio of the measured accesses, from the mode's own miss counters
    /// (see `hit_ratio`); `None` when they could not be read (a note says why).
    #[serde(default)]
    pub hit_ratio: Option<HitRatio>,
    /// The hot set's hit ratios, for `--workload scan-resistance`.
    #[serde(default)]
    pub scan_resistance: Option<ScanResistanceResult>,
    /// Mode-specific counters: tiermem stats, cgroup fault and swap counts.
    pub counters: BTreeMap<String, f64>,
    /// Why a mode was skipped or what to keep in mind when reading it.
    pub notes: Vec<String>,
    /// Seconds the first touch of the whole working set took (stamping
    /// every page with its contents, in order, on one thread; JSON:
    /// `first_touch_ns`).
    #[serde(
        default,
        rename = "first_touch_ns",
        with = "tiermem_host::ns::opt_seconds"
    )]
    pub first_touch_s: Option<f64>,
}

impl ModeResult {
    /// Pages per second of the first touch, when it was timed.
    pub fn first_touch_pages_per_sec(&self) -> Option<f64> {
        let secs = self.first_touch_s.filter(|s| *s > 0.0)?;
        let pages = self.verify.pages_checked as f64;
        (pages > 0.0).then(|| pages / secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names_round_trip_and_bad_ones_name_every_mode() {
        for mode in Mode::ALL {
            assert_eq!(mode.name().parse::<Mode>(), Ok(mode));
        }
        assert_eq!("zswap".parse::<Mode>(), Ok(Mode::KernelZswap));
        assert_eq!("zram".parse::<Mode>(), Ok(Mode::KernelZram));
        let err = "kernel-zstd".parse::<Mode>().unwrap_err();
        assert!(
            err.contains("'kernel-zstd'")
                && err.contains("dram, tiermem, kernel-swap, kernel-zswap or kernel-zram"),
            "{err}"
        );
        assert!(!Mode::DEFAULT.contains(&Mode::KernelZswap));
        assert!(!Mode::DEFAULT.contains(&Mode::KernelZram));
        let json = serde_json::to_string(&Mode::KernelZram).unwrap();
        assert_eq!(json, "\"kernel-zram\"");
    }
}
