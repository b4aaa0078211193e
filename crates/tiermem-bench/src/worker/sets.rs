//! The memory a mode gives the working set, and what the mode counts
//! about it: plain anonymous memory (DRAM, kernel swap) or tiermem.

use std::time::{Duration, Instant};

use crate::hit_ratio::MissCounters;

/// Memory for the working set, provided by the mode.
pub trait WorkingSet {
    fn base(&self) -> *mut u8;
    /// Mode-specific counters at the end (e.g. tiermem stats).
    fn counters(&self) -> Vec<(String, f64)> {
        Vec::new()
    }
    /// What the mode ran with, for the reader (e.g. how tiermem read pages).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// The mode's cumulative miss counters right now; misses over a window
    /// are the difference of two readings.
    fn miss_counters(&self) -> anyhow::Result<MissCounters>;
    /// Waits until the reads the mode has in flight are in its counters, so
    /// that they count in the window that caused them: tiermem counts a
    /// read-ahead page when its read completes, maybe after the accesses
    /// that started it. Polls the counters until they stay still for
    /// `SETTLE_QUIET`, for at most `SETTLE_LIMIT`.
    fn settle(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        let mut reading = self.miss_counters()?;
        while started.elapsed() < SETTLE_LIMIT {
            std::thread::sleep(SETTLE_QUIET);
            let next = self.miss_counters()?;
            if next == reading {
                break;
            }
            reading = next;
        }
        Ok(())
    }
}

/// How long a mode's counters must stay still to count as settled: longer
/// than one read of the device takes (tens to hundreds of microseconds).
pub const SETTLE_QUIET: Duration = Duration::from_millis(2);

/// The longest wait for settled counters: the kernel's `pswpin` is
/// system-wide, so other processes could keep it moving.
pub const SETTLE_LIMIT: Duration = Duration::from_millis(100);

/// Plain anonymous memory (modes `dram` and `kernel-swap`).
pub struct AnonymousSet {
    map: tiermem_core::sys::mem::Mapping,
    /// The memory cgroup's `memory.stat` in kernel-swap mode, where the
    /// major faults are counted; `None` for plain DRAM.
    memory_stat: Option<std::path::PathBuf>,
}

impl AnonymousSet {
    /// `memory_stat`: see the field.
    pub fn new(
        bytes: u64,
        memory_stat: Option<std::path::PathBuf>,
    ) -> anyhow::Result<AnonymousSet> {
        let map =
            tiermem_core::sys::mem::Mapping::reserve(bytes as usize, "allocating the working set")?;
        Ok(AnonymousSet { map, memory_stat })
    }
}

impl WorkingSet for AnonymousSet {
    fn base(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    fn miss_counters(&self) -> anyhow::Result<MissCounters> {
        match &self.memory_stat {
            None => Ok(MissCounters::Dram),
            Some(path) => Ok(MissCounters::KernelSwap {
                pgmajfault: crate::kernel_swap::read_major_faults(path)?,
                // Only the second ratio needs it: without it that one is
                // left out rather than the whole hit ratio.
                pswpin: crate::kernel_swap::read_swap_ins().ok(),
            }),
        }
    }
}

/// tiermem memory from a runtime configured by `TIERMEM_*` variables.
pub struct TiermemSet {
    rt: &'static tiermem_core::Runtime,
    base: std::ptr::NonNull<u8>,
}

impl TiermemSet {
    pub fn new(bytes: u64) -> anyhow::Result<TiermemSet> {
        let rt = tiermem_core::global::get()?;
        let base = rt.alloc(bytes as usize)?;
        Ok(TiermemSet { rt, base })
    }
}

impl WorkingSet for TiermemSet {
    fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    fn counters(&self) -> Vec<(String, f64)> {
        let s = self.rt.stats();
        let l = s.fault_latency;
        [
            ("faults", s.faults),
            ("page_ins", s.page_ins),
            ("page_outs", s.page_outs),
            ("clean_drops", s.clean_drops),
            ("zero_drops", s.zero_drops),
            ("probation_hits", s.probation_hits),
            ("prefetch_issued", s.prefetch_issued),
            ("prefetch_hits", s.prefetch_hits),
            ("prefetch_wasted", s.prefetch_wasted),
            // Read with a miss on the page before (part of prefetch_issued).
            ("neighbour_reads", s.neighbour_reads),
            ("neighbour_samples", s.neighbour_samples),
            ("neighbour_used", s.neighbour_used),
            ("wp_faults", s.wp_faults),
            ("predicted_writes", s.predicted_writes),
            ("budget_waits", s.budget_waits),
            ("read_errors", s.read_errors),
            ("write_errors", s.write_errors),
            ("checksum_errors", s.checksum_errors),
            ("bytes_read", s.bytes_read),
            ("bytes_written", s.bytes_written),
            ("write_batches", s.write_batches),
            ("peak_resident_bytes", s.peak_resident_bytes),
            ("budget_bytes", s.budget_bytes),
            ("metadata_bytes", s.metadata_bytes),
            ("fault_p50_ns", l.p50_ns),
            ("fault_p99_ns", l.p99_ns),
            ("fault_mean_ns", l.mean_ns),
            // The handlers' view of a miss: from reading the fault to the
            // install, and the device read within it. The program's own
            // miss latency minus these is the userfaultfd round trip.
            ("page_in_p50_ns", s.page_in_latency.p50_ns),
            ("read_p50_ns", s.read_latency.p50_ns),
            // Events the handlers found polling instead of asleep.
            ("spin_wakeups", s.spin_wakeups),
            // The compressed tier (all zero when it is off).
            ("compressed_pages", s.compressed_pages),
            ("compressed_bytes", s.compressed_bytes),
            ("pool_bytes", s.pool_bytes),
            ("compressed_stores", s.compressed_stores),
            ("same_filled_pages", s.same_filled_pages),
            ("dictionary_pages", s.dictionary_pages),
            ("compress_dictionary_bytes", s.compress_dictionary_bytes),
            ("dictionaries_gathered", s.dictionaries_gathered),
            ("compress_share_percent", s.compress_share_percent as u64),
            ("compress_share_moves", s.compress_share_moves),
            ("compress_rejected", s.compress_rejected),
            ("compress_bypassed", s.compress_bypassed),
            ("compressed_writebacks", s.compressed_writebacks),
            ("compressed_hits", s.compressed_hits),
            ("compaction_moves", s.compaction_moves),
            ("compressed_hit_p50_ns", s.compressed_hit_latency.p50_ns),
            ("compressed_hit_p99_ns", s.compressed_hit_latency.p99_ns),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v as f64))
        .collect()
    }

    fn notes(&self) -> Vec<String> {
        let s = self.rt.stats();
        vec![
            format!("page reads: {}", s.io_engine),
            read_ahead_note(&s),
            compressed_note(&s, self.rt.config()),
        ]
    }

    fn miss_counters(&self) -> anyhow::Result<MissCounters> {
        let stats = self.rt.stats();
        Ok(MissCounters::Tiermem {
            page_ins: stats.page_ins,
            prefetch_issued: stats.prefetch_issued,
        })
    }
}

/// Read-ahead, neighbour reads among it, up to the end of the measured
/// phase (the notes are taken before verification, whose scan would swamp
/// it; stamping first-touches pages and reads none).
fn read_ahead_note(s: &tiermem_core::Stats) -> String {
    format!(
        "read-ahead in warm-up and the measured phase: {} pages ({} seen used, {} wasted), \
         of them {} neighbour reads ({} of {} sampled used)",
        s.prefetch_issued,
        s.prefetch_hits,
        s.prefetch_wasted,
        s.neighbour_reads,
        s.neighbour_used,
        s.neighbour_samples
    )
}

/// What tiermem's compressed tier held and served, for the report.
fn compressed_note(s: &tiermem_core::Stats, config: &tiermem_core::Config) -> String {
    if !config.compress.is_on() {
        return "compressed tier: off".into();
    }
    format!(
        "compressed tier ({}, at most {}% of the budget{}): {} pages in {:.1} MiB after the measured phase \
         ({:.0}% of it objects, {} KiB of it dictionaries, {} gathered), ratio {:.2}x; \
         {} stored ({} same-filled, {} with the dictionary), {} rejected, {} passed by while full and unused, {} written back; \
         {} hits, p50 {:.1} us, p99 {:.1} us",
        s.compression,
        s.compress_share_percent,
        match config.compress.adapt_share {
            true => format!(
                " after {} step(s) from {}%",
                s.compress_share_moves, config.compress.share_percent
            ),
            false => String::new(),
        },
        s.compressed_pages,
        s.pool_bytes as f64 / (1 << 20) as f64,
        100.0 * s.compressed_bytes as f64 / s.pool_bytes.max(1) as f64,
        s.compress_dictionary_bytes >> 10,
        s.dictionaries_gathered,
        s.compression_ratio(),
        s.compressed_stores,
        s.same_filled_pages,
        s.dictionary_pages,
        s.compress_rejected,
        s.compress_bypassed,
        s.compressed_writebacks,
        s.compressed_hits,
        s.compressed_hit_latency.p50_ns as f64 / 1000.0,
        s.compressed_hit_latency.p99_ns as f64 / 1000.0,
    )
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// Counters that move on each of the first `moving` readings, then
    /// stay still (or never stop, with `u64::MAX`).
    struct Moving {
        readings: Cell<u64>,
        moving: u64,
    }

    impl WorkingSet for Moving {
        fn base(&self) -> *mut u8 {
            std::ptr::null_mut()
        }

        fn miss_counters(&self) -> anyhow::Result<MissCounters> {
            self.readings.set(self.readings.get() + 1);
            Ok(MissCounters::KernelSwap {
                pgmajfault: self.readings.get().min(self.moving),
                pswpin: None,
            })
        }
    }

    #[test]
    fn settle_waits_until_the_counters_stay_still() {
        let set = Moving {
            readings: Cell::new(0),
            moving: 3,
        };
        let started = Instant::now();
        set.settle().unwrap();
        // Readings 1, 2, 3 move; the 4th equals the 3rd.
        assert_eq!(set.readings.get(), 4);
        assert!(started.elapsed() >= 3 * SETTLE_QUIET);
    }

    #[test]
    fn settle_gives_up_on_counters_that_never_stop() {
        let set = Moving {
            readings: Cell::new(0),
            moving: u64::MAX,
        };
        let started = Instant::now();
        set.settle().unwrap();
        let waited = started.elapsed();
        assert!(waited >= SETTLE_LIMIT, "{waited:?}");
        assert!(waited < SETTLE_LIMIT + Duration::from_secs(2), "{waited:?}");
    }
}
