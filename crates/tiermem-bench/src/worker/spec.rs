//! What one worker runs: the workload, its size and its pattern, sent to
//! the worker process as JSON.

use serde::{Deserialize, Serialize};

use crate::page_data::PageData;
use crate::scan_resistance::shape::ScanShape;

/// Accesses slower than this count as misses (any page fault takes longer).
pub const SLOW_THRESHOLD_NS: u64 = 1_000;

/// What one worker runs. Sent to the worker process as JSON.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkloadSpec {
    pub working_set_bytes: u64,
    /// Unit of access: one word of each `page_size` page is touched.
    pub page_size: u64,
    pub threads: usize,
    pub read_percent: u32,
    pub pattern: String,
    /// The measured phase and the warm-up before it, in seconds (JSON:
    /// `duration_ns`, `warmup_ns`).
    #[serde(rename = "duration_ns", with = "tiermem_host::ns::seconds")]
    pub duration_s: f64,
    #[serde(rename = "warmup_ns", with = "tiermem_host::ns::seconds")]
    pub warmup_s: f64,
    pub seed: u64,
    /// What the accesses do; older specs without it mean `Pattern`.
    #[serde(default)]
    pub workload: Workload,
    /// What fills the pages; older specs without it mean zeros.
    #[serde(default)]
    pub data: PageData,
}

impl WorkloadSpec {
    /// The scan-resistance workload of `shape` over pages of `page_size`:
    /// one thread, reads only, a fixed amount of work (no duration).
    pub fn scan_resistance(shape: ScanShape, page_size: u64, seed: u64) -> WorkloadSpec {
        WorkloadSpec {
            working_set_bytes: shape.total_pages() * page_size,
            page_size,
            threads: 1,
            read_percent: 100,
            pattern: "sequential".into(),
            duration_s: 0.0,
            warmup_s: 0.0,
            seed,
            workload: Workload::ScanResistance(shape),
            data: PageData::default(),
        }
    }
}

/// The kind of workload a worker runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Workload {
    /// `threads` threads access pages drawn from `pattern` for `duration_s`
    /// seconds after `warmup_s`, `read_percent` of them reads.
    #[default]
    Pattern,
    /// A hot set re-read while a sequential scan passes (see
    /// `scan_resistance`); one thread, reads only, a fixed amount of work.
    ScanResistance(ScanShape),
}
