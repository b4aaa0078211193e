//! The scan-resistance workload's sizes, and what one mode's run of it
//! measured.

use anyhow::ensure;
use serde::{Deserialize, Serialize};

use crate::hit_ratio::HitRatio;

/// Scan bytes read between two passes over the hot set.
pub const SCAN_CHUNK_BYTES: u64 = 1 << 20;

/// Sizes of the workload, in pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanShape {
    /// Pages of the hot set: half the budget.
    pub hot_pages: u64,
    /// Pages of the scan: twice the budget, read once.
    pub scan_pages: u64,
    /// Scan pages read between two passes over the hot set (1 MiB).
    pub chunk_pages: u64,
}

impl ScanShape {
    /// The shape for a DRAM budget: hot set half of it, scan twice it.
    pub fn for_budget(budget_bytes: u64, page_size: u64) -> anyhow::Result<ScanShape> {
        ensure!(page_size > 0, "the page size must be more than 0 bytes");
        let budget_pages = budget_bytes / page_size;
        ensure!(
            budget_pages >= 2,
            "the scan-resistance workload needs a budget of at least two pages \
             (the hot set is half of it), got {budget_bytes} bytes with {page_size}-byte pages"
        );
        Ok(ScanShape {
            hot_pages: budget_pages / 2,
            scan_pages: budget_pages * 2,
            chunk_pages: (SCAN_CHUNK_BYTES / page_size).max(1),
        })
    }

    /// Hot set plus scan region.
    pub fn total_pages(&self) -> u64 {
        self.hot_pages + self.scan_pages
    }

    /// How many hot passes run during the scan (one after each chunk).
    pub fn passes(&self) -> u64 {
        self.scan_pages.div_ceil(self.chunk_pages)
    }

    /// The page index of the `index`-th page of the scan.
    pub(super) fn scan_page(&self, index: u64) -> u64 {
        self.hot_pages + index
    }

    pub(super) fn validate(&self, pages_in_set: u64) -> anyhow::Result<()> {
        ensure!(
            self.hot_pages > 0 && self.scan_pages > 0 && self.chunk_pages > 0,
            "scan-resistance shape {self:?} has an empty part"
        );
        ensure!(
            self.total_pages() <= pages_in_set,
            "scan-resistance shape {self:?} needs {} pages, the working set has {pages_in_set}",
            self.total_pages()
        );
        Ok(())
    }
}

/// What one mode's run of the workload measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScanResistanceResult {
    pub shape: ScanShape,
    /// The hot passes between the scan's chunks: the figure of merit.
    pub hot_during_scan: HitRatio,
    /// One pass over the hot set after the scan ended (not timed).
    pub hot_after_scan: HitRatio,
    /// The scan's own reads. Read-ahead (tiermem's, the kernel's swap
    /// read-ahead) turns most of them into hits, so this says how much the
    /// scan cost, not whether it reached the device.
    pub scan: HitRatio,
}
