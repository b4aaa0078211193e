//! Hit ratios from each memory system's own miss counters.
//!
//! A latency threshold cannot tell hits from misses reliably (a fault served
//! from the kernel's swap cache is slow but needs no device read; a page-in
//! on a quiet device can be fast), so misses are counted by the system that
//! serves them, as the difference of its cumulative counters across a window
//! of accesses (the measured phase, or one pass over a hot set):
//!
//! * **dram**: nothing misses; the hit ratio is 1 by definition.
//! * **tiermem**: demand page-ins, `page_ins - prefetch_issued` (the runtime
//!   counts every read in `page_ins`, read-ahead included). A probation hit or
//!   a read-ahead hit is a hit: the access waited for no device read of its
//!   own.
//! * **kernel swap**: `pgmajfault` of the memory cgroup (`memory.stat`). The
//!   kernel counts a fault as major when it had to start the swap-in itself;
//!   pages brought in by swap read-ahead fault in as minor faults, so the two
//!   systems count the same thing.
//!
//! hit ratio = 1 - misses / accesses.
//!
//! Read-ahead hides misses from both counts. To tell whether the data stayed
//! in DRAM, each window also counts the pages read from the device, read-ahead
//! included: tiermem's `page_ins`, and the kernel's `pswpin` (`/proc/vmstat`,
//! system-wide, so exact only while the sandbox's swapfile is the one swap
//! area in use, as the kernel-swap mode checks). That gives a second ratio,
//! 1 - device reads / accesses, with every page read ahead counted as a miss.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

/// One reading of a memory system's cumulative miss counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissCounters {
    /// Plain DRAM: there is nothing to count.
    Dram,
    /// tiermem's runtime counters (`Runtime::stats`).
    Tiermem { page_ins: u64, prefetch_issued: u64 },
    /// The memory cgroup's `pgmajfault` from `memory.stat`, and the
    /// system's `pswpin` from `/proc/vmstat` when it could be read.
    KernelSwap {
        pgmajfault: u64,
        pswpin: Option<u64>,
    },
}

/// Misses over a window, with the counter deltas they were computed from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissCount {
    pub misses: u64,
    /// Pages read from the device, read-ahead included (`None`: unknown).
    pub device_reads: Option<u64>,
    /// Delta of each raw counter over the window, by the counter's name.
    pub counters: BTreeMap<String, u64>,
}

/// An empty window: no miss, no device read.
impl Default for MissCount {
    fn default() -> Self {
        MissCount {
            misses: 0,
            device_reads: Some(0),
            counters: BTreeMap::new(),
        }
    }
}

impl MissCount {
    /// Adds another window's misses and counter deltas to this one.
    pub fn add(&mut self, other: &MissCount) {
        self.misses += other.misses;
        self.device_reads = self
            .device_reads
            .zip(other.device_reads)
            .map(|(a, b)| a + b);
        for (name, delta) in &other.counters {
            *self.counters.entry(name.clone()).or_insert(0) += delta;
        }
    }
}

impl MissCounters {
    /// Which counters the misses come from, as the report states it.
    pub fn source(&self) -> &'static str {
        match self {
            MissCounters::Dram => "none: plain DRAM never misses (hit ratio 1 by definition)",
            MissCounters::Tiermem { .. } => {
                "tiermem runtime counters: misses = demand page-ins = page_ins - \
                 prefetch_issued; device reads = page_ins"
            }
            MissCounters::KernelSwap { .. } => {
                "memory cgroup memory.stat: misses = pgmajfault; device reads = \
                 pswpin of /proc/vmstat (system-wide)"
            }
        }
    }

    /// The misses between the reading `before` and this one.
    pub fn misses_since(&self, before: &MissCounters) -> anyhow::Result<MissCount> {
        match (*before, *self) {
            (MissCounters::Dram, MissCounters::Dram) => Ok(MissCount::default()),
            (
                MissCounters::Tiermem {
                    page_ins: ins_before,
                    prefetch_issued: prefetch_before,
                },
                MissCounters::Tiermem {
                    page_ins,
                    prefetch_issued,
                },
            ) => {
                let page_ins = counter_delta("page_ins", ins_before, page_ins)?;
                let prefetched =
                    counter_delta("prefetch_issued", prefetch_before, prefetch_issued)?;
                Ok(MissCount {
                    // Saturating: the snapshot reads page_ins before
                    // prefetch_issued, so a read-ahead completing in between
                    // shows up in the second counter only.
                    misses: page_ins.saturating_sub(prefetched),
                    device_reads: Some(page_ins),
                    counters: BTreeMap::from([
                        ("page_ins".to_string(), page_ins),
                        ("prefetch_issued".to_string(), prefetched),
                    ]),
                })
            }
            (
                MissCounters::KernelSwap {
                    pgmajfault: majfaults_before,
                    pswpin: swapins_before,
                },
                MissCounters::KernelSwap { pgmajfault, pswpin },
            ) => {
                let majfaults = counter_delta("pgmajfault", majfaults_before, pgmajfault)?;
                let swapins = match swapins_before.zip(pswpin) {
                    Some((before, after)) => Some(counter_delta("pswpin", before, after)?),
                    None => None,
                };
                let mut counters = BTreeMap::from([("pgmajfault".to_string(), majfaults)]);
                if let Some(swapins) = swapins {
                    counters.insert("pswpin".to_string(), swapins);
                }
                Ok(MissCount {
                    misses: majfaults,
                    device_reads: swapins,
                    counters,
                })
            }
            (before, after) => {
                bail!("miss counters of different systems: {before:?} then {after:?}")
            }
        }
    }
}

fn counter_delta(name: &str, before: u64, after: u64) -> anyhow::Result<u64> {
    after
        .checked_sub(before)
        .with_context(|| format!("counter {name} went backwards: {before} then {after}"))
}

/// The hit ratio of a window of accesses, with the counts it came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HitRatio {
    /// 1 - misses / accesses, clamped to [0, 1].
    pub ratio: f64,
    pub accesses: u64,
    pub misses: u64,
    /// Pages read from the device, read-ahead included, if known.
    #[serde(default)]
    pub device_reads: Option<u64>,
    /// 1 - device_reads / accesses: the hit ratio with every page read
    /// ahead counted as a miss, i.e. how much of the data stayed in DRAM.
    #[serde(default)]
    pub ratio_read_ahead_as_miss: Option<f64>,
    /// Which counters the misses come from.
    pub source: String,
    /// Delta of each raw counter over the window.
    pub counters: BTreeMap<String, u64>,
}

impl HitRatio {
    /// `None` for a window without accesses, whose ratio means nothing.
    pub fn new(accesses: u64, count: MissCount, source: &str) -> Option<HitRatio> {
        Some(HitRatio {
            ratio: hit_ratio(accesses, count.misses)?,
            accesses,
            misses: count.misses,
            device_reads: count.device_reads,
            ratio_read_ahead_as_miss: count
                .device_reads
                .and_then(|reads| hit_ratio(accesses, reads)),
            source: source.to_string(),
            counters: count.counters,
        })
    }
}

/// 1 - misses / accesses, `None` without accesses. Clamped at 0: the
/// cgroup counts every major fault of the worker, its own code pages
/// included, and read-ahead reads pages nobody asked for, so misses can in
/// principle exceed the accesses.
pub fn hit_ratio(accesses: u64, misses: u64) -> Option<f64> {
    if accesses == 0 {
        return None;
    }
    Some((1.0 - misses as f64 / accesses as f64).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_is_one_minus_misses_over_accesses() {
        assert_eq!(hit_ratio(1000, 0), Some(1.0));
        assert_eq!(hit_ratio(1000, 250), Some(0.75));
        assert_eq!(hit_ratio(1000, 1000), Some(0.0));
        assert_eq!(hit_ratio(10, 30), Some(0.0));
        assert_eq!(hit_ratio(0, 0), None);
    }

    #[test]
    fn tiermem_misses_are_demand_page_ins() {
        let before = MissCounters::Tiermem {
            page_ins: 100,
            prefetch_issued: 40,
        };
        let after = MissCounters::Tiermem {
            page_ins: 350,
            prefetch_issued: 90,
        };
        let count = after.misses_since(&before).unwrap();
        assert_eq!(count.misses, 200);
        assert_eq!(count.device_reads, Some(250));
        assert_eq!(count.counters["page_ins"], 250);
        assert_eq!(count.counters["prefetch_issued"], 50);
        let ratio = HitRatio::new(1000, count, after.source()).unwrap();
        assert_eq!(ratio.ratio, 0.8);
        assert_eq!(ratio.misses, 200);
        assert_eq!(ratio.ratio_read_ahead_as_miss, Some(0.75));
    }

    #[test]
    fn a_read_ahead_seen_half_way_does_not_underflow() {
        let before = MissCounters::Tiermem {
            page_ins: 10,
            prefetch_issued: 0,
        };
        let after = MissCounters::Tiermem {
            page_ins: 10,
            prefetch_issued: 1,
        };
        assert_eq!(after.misses_since(&before).unwrap().misses, 0);
    }

    #[test]
    fn kernel_swap_misses_are_major_faults() {
        let before = MissCounters::KernelSwap {
            pgmajfault: 7,
            pswpin: Some(100),
        };
        let after = MissCounters::KernelSwap {
            pgmajfault: 1007,
            pswpin: Some(3100),
        };
        let count = after.misses_since(&before).unwrap();
        assert_eq!(count.misses, 1000);
        assert_eq!(count.device_reads, Some(3000));
        assert_eq!(count.counters["pgmajfault"], 1000);
        assert_eq!(count.counters["pswpin"], 3000);
        let ratio = HitRatio::new(4000, count, after.source()).unwrap();
        assert_eq!(ratio.ratio, 0.75);
        assert_eq!(ratio.ratio_read_ahead_as_miss, Some(0.25));
    }

    #[test]
    fn unknown_swap_ins_leave_only_the_demand_ratio() {
        let before = MissCounters::KernelSwap {
            pgmajfault: 0,
            pswpin: None,
        };
        let after = MissCounters::KernelSwap {
            pgmajfault: 10,
            pswpin: Some(50),
        };
        let count = after.misses_since(&before).unwrap();
        assert_eq!((count.misses, count.device_reads), (10, None));
        assert!(!count.counters.contains_key("pswpin"));
        let ratio = HitRatio::new(100, count, after.source()).unwrap();
        assert_eq!((ratio.ratio, ratio.ratio_read_ahead_as_miss), (0.9, None));
    }

    #[test]
    fn dram_never_misses() {
        let count = MissCounters::Dram
            .misses_since(&MissCounters::Dram)
            .unwrap();
        assert_eq!(count, MissCount::default());
        let ratio = HitRatio::new(5, count, MissCounters::Dram.source()).unwrap();
        assert_eq!(ratio.ratio, 1.0);
    }

    #[test]
    fn backwards_or_mixed_counters_are_errors() {
        let before = MissCounters::KernelSwap {
            pgmajfault: 9,
            pswpin: Some(5),
        };
        let after = MissCounters::KernelSwap {
            pgmajfault: 8,
            pswpin: Some(5),
        };
        let error = after.misses_since(&before).unwrap_err().to_string();
        assert!(error.contains("pgmajfault went backwards"), "{error}");
        let after = MissCounters::KernelSwap {
            pgmajfault: 9,
            pswpin: Some(4),
        };
        let error = after.misses_since(&before).unwrap_err().to_string();
        assert!(error.contains("pswpin went backwards"), "{error}");
        assert!(MissCounters::Dram.misses_since(&before).is_err());
    }

    #[test]
    fn windows_add_up() {
        let mut total = MissCount::default();
        for (misses, reads) in [(3, Some(5)), (4, Some(6))] {
            total.add(&MissCount {
                misses,
                device_reads: reads,
                counters: BTreeMap::from([("pgmajfault".to_string(), misses)]),
            });
        }
        assert_eq!(total.misses, 7);
        assert_eq!(total.device_reads, Some(11));
        assert_eq!(total.counters["pgmajfault"], 7);
        total.add(&MissCount {
            misses: 1,
            device_reads: None,
            counters: BTreeMap::new(),
        });
        assert_eq!((total.misses, total.device_reads), (8, None));
    }
}
