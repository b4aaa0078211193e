//! Calibration: the latency that tells a hit from a miss on this target,
//! from the first and second reads of freshly cleared lines.

use super::{Probe, AREA, GRAIN};
use crate::stats::{median, without_outliers};

/// Most calibration rounds before the miss latency is taken as it is.
const CALIBRATION_ROUNDS: usize = 6;

/// An access faster than this took no fault, whatever the re-reads gave.
const NO_FAULT_FLOOR_NS: f64 = 1_000.0;

impl Probe<'_> {
    /// Misses: the first read of a line in a cleared region (lines 2 MiB
    /// apart, so no two share a line). Hits: the same line read again.
    /// Median first-read and re-read latencies (in ticks) of freshly
    /// cleared lines.
    fn calibrate_once(&mut self) -> anyhow::Result<(f64, f64)> {
        let (mut hits, mut misses) = (Vec::new(), Vec::new());
        let per_area = AREA / crate::sys::REGION_ALIGN;
        for _ in 0..3 {
            let t = self.fresh(AREA, crate::sys::REGION_ALIGN);
            for i in 0..per_area {
                let off = t + i * crate::sys::REGION_ALIGN + self.rng.below(64) * GRAIN;
                let g = self.guard();
                let a = self.read(off);
                let b = self.read(off);
                let c = self.read(off);
                if self.clean(g) {
                    misses.push(a as f64);
                    hits.push(b as f64);
                    hits.push(c as f64);
                }
            }
            if misses.len() >= 24 {
                break;
            }
        }
        let miss = median(&without_outliers(&misses));
        let hit = median(&without_outliers(&hits));
        if miss.is_nan() || miss <= 8.0 * hit {
            anyhow::bail!(
                "could not make memory uncached: first reads after clearing took {:.1} µs, re-reads {:.2} µs. \
                 Is the cache larger than the probe region ({} MiB)?",
                miss / self.tpn / 1e3,
                hit / self.tpn / 1e3,
                self.r.len >> 20
            );
        }
        Ok((miss, hit))
    }

    /// Sets the hit/miss threshold from the latencies of freshly cleared
    /// lines. A target still busy after the populate phase (a pager
    /// writing back what it evicted) reads slowly for a while, and a
    /// threshold set then would call every later miss a hit; so rounds are
    /// repeated, up to `CALIBRATION_ROUNDS`, until two in a row agree on
    /// the miss latency within a fifth.
    pub(super) fn calibrate(&mut self) -> anyhow::Result<()> {
        let (mut miss, mut hit) = self.calibrate_once()?;
        for _ in 1..CALIBRATION_ROUNDS {
            let (next_miss, next_hit) = self.calibrate_once()?;
            let settled = (next_miss - miss).abs() <= 0.2 * miss.min(next_miss);
            (miss, hit) = (next_miss, next_hit);
            if settled {
                break;
            }
        }
        // A device read takes well over half the median miss; a minor fault
        // (a hit that needed the kernel, e.g. a tiermem probation hit) well
        // under it.
        self.thr = ((0.5 * miss).max(10.0 * hit)) as u64;
        // A memory access, even one that misses the TLB and the CPU caches
        // on a guest, takes well under a microsecond; a fault, even a minor
        // one, takes more.
        let no_fault = (10.0 * hit).max(NO_FAULT_FLOOR_NS * self.tpn) as u64;
        self.no_fault_thr = no_fault.min(self.thr);
        self.miss_ns = miss / self.tpn;
        self.ev.threshold_ns = self.ns(self.thr);
        Ok(())
    }
}
