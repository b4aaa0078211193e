//! What `tiermem bench-vm` measured: each class under each mode, and the
//! live class change.

use std::path::PathBuf;

use serde::Serialize;

use super::guest::{GuestRun, GuestSpec};
use super::plan::Class;
use crate::kernel_swap::CgroupStats;

/// One guest of one class under one mode.
#[derive(Debug, Serialize)]
pub struct ClassRun {
    /// The class.
    pub class: Class,
    /// `tiermem` or `kernel-swap`.
    pub mode: &'static str,
    /// DRAM budget (cgroup limit under kernel swap).
    pub budget_bytes: u64,
    /// How the guest ran; `None` when it could not start.
    pub guest: Option<GuestRun>,
    /// Why it could not start or failed.
    pub error: Option<String>,
    /// tiermem's statistics at exit (tiermem mode).
    pub tiermem_stats: Option<serde_json::Value>,
    /// The cgroup's counters at the end (kernel-swap mode).
    pub cgroup: Option<CgroupStats>,
    /// What the checking passes alone cost in device traffic and faults:
    /// the counters at the end less those when the stamping pass ended.
    pub checking: Option<CheckingCounters>,
}

/// Counters of the checking passes (every pass after the stamping one),
/// in the same terms for both modes, so that a gap in pages/s can be put
/// down to how many pages were read, how many accesses waited for the
/// device, or what each wait cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CheckingCounters {
    /// Pages read from the device, read-ahead included: tiermem's
    /// page-ins; kernel swap's swap-ins (`pswpin`, machine-wide; its
    /// read-around of 2^`vm.page-cluster` slots included).
    pub device_reads: u64,
    /// Accesses that waited for the device: tiermem's page-ins not read
    /// ahead; the cgroup's major faults (a touch of a page the kernel read
    /// around is a minor fault).
    pub device_waits: u64,
    /// Faults of every kind: tiermem's (missing and write-protect, each a
    /// round trip through a handler); the cgroup's (`pgfault`, each
    /// resolved in the kernel).
    pub faults: u64,
}

impl CheckingCounters {
    /// From tiermem's statistics when the stamping pass ended (`at`) and at
    /// exit (`end`), each the `stats` object of `tiermem ctl PID stats
    /// --json` or of the statistics file.
    pub fn of_tiermem(at: &serde_json::Value, end: &serde_json::Value) -> Option<CheckingCounters> {
        let delta = |name: &str| Some(end[name].as_u64()?.saturating_sub(at[name].as_u64()?));
        let reads = delta("page_ins")?;
        Some(CheckingCounters {
            device_reads: reads,
            device_waits: reads.saturating_sub(delta("prefetch_issued")?),
            faults: delta("faults")?,
        })
    }

    /// From the cgroup's counters when the stamping pass ended and at the
    /// end.
    pub fn of_kernel_swap(at: &CgroupStats, end: &CgroupStats) -> Option<CheckingCounters> {
        Some(CheckingCounters {
            device_reads: end.pswpin?.saturating_sub(at.pswpin?),
            device_waits: end.pgmajfault.saturating_sub(at.pgmajfault),
            faults: end.pgfault.saturating_sub(at.pgfault),
        })
    }
}

/// The live change of a Bronze guest to Gold.
#[derive(Debug, Default, Serialize)]
pub struct LiveChange {
    /// The guest, which ran a pass as Bronze, then the rest as Gold.
    pub guest: Option<GuestRun>,
    /// `tiermem ctl PID budget` from start to its reply, ms.
    pub ctl_ms: Option<f64>,
    /// From the start of `tiermem ctl` until the process reported the Gold
    /// budget, ms.
    pub budget_in_effect_ms: Option<f64>,
    /// From the start of `tiermem ctl` until page-outs stopped (no page-out
    /// for 200 ms), ms.
    pub evictions_stopped_ms: Option<f64>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// Everything one run measured.
#[derive(Debug, Serialize)]
pub struct Outcome {
    /// The guests' settings.
    pub spec: GuestSpec,
    /// The guest kernel.
    pub kernel: PathBuf,
    /// Why this accelerator.
    pub accel_note: String,
    /// Every class under every mode, in the order run.
    pub runs: Vec<ClassRun>,
    /// The live change, when asked for.
    pub live_change: Option<LiveChange>,
}
