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
