//! The scan-resistance workload: a hot set of half the DRAM budget is read
//! over and over while one sequential scan of twice the budget passes
//! through, 1 MiB of scan between two passes over the hot set, as
//! tiermem-core's `tests/scan_resistance.rs` does. A scan-resistant cache
//! keeps the hot set: the scan's pages are used once and should leave first.
//!
//! The hot set's hit ratio comes from the mode's own miss counters (see
//! `hit_ratio`: tiermem's demand page-ins, the memory cgroup's `pgmajfault`),
//! read right before and right after every hot pass. Only the hot pass runs
//! inside those windows (the scan runs between them), so every miss counted
//! there is a hot-set miss. The windows between them count the scan's misses.
//!
//! Before each reading the mode settles (see `WorkingSet::settle`): tiermem
//! counts a read-ahead page when its read completes, so without the pause
//! the scan's last read-ahead (up to 256 pages per chunk) would land in the
//! next hot window and count as hot-set device reads. Every mode pauses the
//! same way, and the pauses are left out of the measured time.
//!
//! Layout: the hot set is pages `[0, hot_pages)`, the scan region follows it.

use std::time::{Duration, Instant};

pub mod shape;

use anyhow::Context;

use crate::hit_ratio::{HitRatio, MissCount, MissCounters};
use crate::result::{Mode, ModeResult};
use crate::worker::events::{emit, WorkerEvent};
use crate::worker::pages::{stamp_pages, verify_with_progress, Pages};
use crate::worker::sets::WorkingSet;
use crate::worker::spec::{WorkloadSpec, SLOW_THRESHOLD_NS};
pub use shape::{ScanResistanceResult, ScanShape, SCAN_CHUNK_BYTES};
use tiermem_host::histogram::LatencyHistogram;

/// Misses and reads of one part of the workload, summed over its windows.
#[derive(Default)]
struct Tally {
    reads: u64,
    misses: MissCount,
}

impl Tally {
    fn add(&mut self, reads: u64, misses: &MissCount) {
        self.reads += reads;
        self.misses.add(misses);
    }

    fn hit_ratio(self, source: &str, part: &str) -> anyhow::Result<HitRatio> {
        HitRatio::new(self.reads, self.misses, source)
            .with_context(|| format!("the {part} read no page"))
    }
}

/// Stamps the pages, warms the hot set up, runs the scan with a hot pass
/// after every chunk, one more hot pass after it, and verifies every page.
/// The measured phase (pages/s, latency, overall hit ratio) is the scan and
/// the hot passes during it.
pub(crate) fn run(
    mode: Mode,
    spec: &WorkloadSpec,
    shape: &ScanShape,
    set: &dyn WorkingSet,
) -> anyhow::Result<ModeResult> {
    shape.validate(spec.working_set_bytes / spec.page_size.max(1))?;
    let pages = Pages::new(set, spec.page_size as usize, shape.total_pages(), spec.data);
    // Scan region first, hot set last, so the hot set starts out as the most
    // recently written data; then two reads of it, so it is also referenced.
    stamp_pages(&pages, shape.hot_pages..shape.total_pages());
    stamp_pages(&pages, 0..shape.hot_pages);
    let mut untimed = LatencyHistogram::new();
    for _ in 0..2 {
        read_hot_set(&pages, shape, &mut untimed);
    }

    let mut latency = LatencyHistogram::new();
    let (mut hot, mut scan) = (Tally::default(), Tally::default());
    let mut paused = Duration::ZERO;
    let started = Instant::now();
    let mut last = boundary(set, &mut paused)?;
    for (pass, chunk_start) in (0..shape.scan_pages)
        .step_by(shape.chunk_pages as usize)
        .enumerate()
    {
        let chunk_end = (chunk_start + shape.chunk_pages).min(shape.scan_pages);
        let scan_pages = (chunk_start..chunk_end).map(|index| shape.scan_page(index));
        let scan_reads = timed_reads(&pages, scan_pages, &mut latency);
        let before_hot = boundary(set, &mut paused)?;
        scan.add(scan_reads, &before_hot.misses_since(&last)?);
        let hot_reads = read_hot_set(&pages, shape, &mut latency);
        let after_hot = boundary(set, &mut paused)?;
        hot.add(hot_reads, &after_hot.misses_since(&before_hot)?);
        last = after_hot;
        emit(&WorkerEvent::Progress {
            phase: "measure".into(),
            done: (pass + 1) as f64 / shape.passes() as f64,
        });
    }
    let elapsed = started.elapsed().saturating_sub(paused);
    let mut after = Tally::default();
    let final_reads = read_hot_set(&pages, shape, &mut untimed);
    let after_final = boundary(set, &mut paused)?;
    after.add(final_reads, &after_final.misses_since(&last)?);

    let verify = verify_with_progress(&pages);
    let source = last.source();
    let accesses = hot.reads + scan.reads;
    let mut overall = MissCount::default();
    overall.add(&hot.misses);
    overall.add(&scan.misses);
    Ok(ModeResult {
        mode,
        accesses,
        reads: accesses,
        writes: 0,
        elapsed_s: elapsed.as_secs_f64(),
        pages_per_sec: accesses as f64 / elapsed.as_secs_f64().max(1e-9),
        page_size: spec.page_size,
        latency,
        slow_threshold_ns: SLOW_THRESHOLD_NS,
        verify,
        hit_ratio: HitRatio::new(accesses, overall, source),
        scan_resistance: Some(ScanResistanceResult {
            shape: *shape,
            hot_during_scan: hot.hit_ratio(source, "hot passes during the scan")?,
            hot_after_scan: after.hit_ratio(source, "hot pass after the scan")?,
            scan: scan.hit_ratio(source, "scan")?,
        }),
        counters: set.counters().into_iter().collect(),
        notes: Vec::new(),
        first_touch_s: None,
    })
}

/// The mode's counters at a window boundary, once its reads in flight are
/// counted; the wait is added to `paused`.
fn boundary(set: &dyn WorkingSet, paused: &mut Duration) -> anyhow::Result<MissCounters> {
    let started = Instant::now();
    set.settle()?;
    let reading = set.miss_counters();
    *paused += started.elapsed();
    reading
}

/// One pass over the hot set, in page order.
fn read_hot_set(pages: &Pages, shape: &ScanShape, latency: &mut LatencyHistogram) -> u64 {
    timed_reads(pages, 0..shape.hot_pages, latency)
}

/// Reads one word of each page, timing each read; returns how many.
fn timed_reads(
    pages: &Pages,
    page_indices: impl Iterator<Item = u64>,
    latency: &mut LatencyHistogram,
) -> u64 {
    let mut reads = 0;
    for page in page_indices {
        let started = Instant::now();
        pages.access(page, true);
        latency.record(started.elapsed().as_nanos() as u64);
        reads += 1;
    }
    reads
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::worker::AnonymousSet;

    const PAGE: u64 = 4096;

    fn spec(shape: ScanShape) -> WorkloadSpec {
        WorkloadSpec::scan_resistance(shape, PAGE, 1)
    }

    /// Plain memory whose "major fault" counter goes up by one per reading,
    /// so every window between two readings sees exactly one miss (it
    /// settles at once: a reading is taken only at a boundary).
    struct FakeCounters {
        memory: AnonymousSet,
        readings: Cell<u64>,
    }

    impl WorkingSet for FakeCounters {
        fn base(&self) -> *mut u8 {
            self.memory.base()
        }

        fn miss_counters(&self) -> anyhow::Result<MissCounters> {
            self.readings.set(self.readings.get() + 1);
            Ok(MissCounters::KernelSwap {
                pgmajfault: self.readings.get(),
                pswpin: Some(2 * self.readings.get()),
            })
        }

        fn settle(&self) -> anyhow::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn shape_follows_the_budget() {
        let shape = ScanShape::for_budget(256 << 20, PAGE).unwrap();
        assert_eq!(shape.hot_pages, 16_384 * 2);
        assert_eq!(shape.scan_pages, 131_072);
        assert_eq!(shape.chunk_pages, 256);
        assert_eq!(shape.passes(), 512);
        assert_eq!(shape.total_pages(), 163_840);
        let huge = ScanShape::for_budget(8 << 20, 2 << 20).unwrap();
        assert_eq!(
            (huge.hot_pages, huge.scan_pages, huge.chunk_pages),
            (2, 8, 1)
        );
        assert!(ScanShape::for_budget(PAGE, PAGE).is_err());
        assert!(ScanShape::for_budget(1 << 20, 0).is_err());
    }

    #[test]
    fn a_partial_last_chunk_is_a_pass_too() {
        let shape = ScanShape {
            hot_pages: 3,
            scan_pages: 10,
            chunk_pages: 4,
        };
        assert_eq!(shape.passes(), 3);
    }

    #[test]
    fn dram_reads_every_page_and_never_misses() {
        let shape = ScanShape {
            hot_pages: 16,
            scan_pages: 64,
            chunk_pages: 8,
        };
        let set = AnonymousSet::new(shape.total_pages() * PAGE, None).unwrap();
        let result = run(Mode::Dram, &spec(shape), &shape, &set).unwrap();
        assert!(result.verify.is_clean(), "{:?}", result.verify);
        assert_eq!(result.verify.pages_checked, 80);
        assert_eq!(result.accesses, 8 * 16 + 64);
        assert_eq!((result.reads, result.writes), (result.accesses, 0));
        assert_eq!(result.latency.count(), result.accesses);
        let scan = result.scan_resistance.unwrap();
        assert_eq!(scan.hot_during_scan.accesses, 8 * 16);
        assert_eq!(scan.hot_during_scan.ratio, 1.0);
        assert_eq!(scan.hot_after_scan.accesses, 16);
        assert_eq!(scan.scan.accesses, 64);
        assert_eq!(result.hit_ratio.unwrap().ratio, 1.0);
    }

    #[test]
    fn hot_and_scan_misses_come_from_their_own_windows() {
        let shape = ScanShape {
            hot_pages: 10,
            scan_pages: 40,
            chunk_pages: 10,
        };
        let set = FakeCounters {
            memory: AnonymousSet::new(shape.total_pages() * PAGE, None).unwrap(),
            readings: Cell::new(0),
        };
        let result = run(Mode::KernelSwap, &spec(shape), &shape, &set).unwrap();
        let scan = result.scan_resistance.unwrap();
        // One miss per window: 4 hot windows of 10 reads, 4 scan windows of 10.
        assert_eq!(scan.hot_during_scan.misses, 4);
        assert_eq!(scan.hot_during_scan.accesses, 40);
        assert_eq!(scan.hot_during_scan.ratio, 0.9);
        assert_eq!(scan.hot_during_scan.counters["pgmajfault"], 4);
        assert_eq!(scan.hot_during_scan.device_reads, Some(8));
        assert_eq!(scan.hot_during_scan.ratio_read_ahead_as_miss, Some(0.8));
        assert_eq!(scan.scan.misses, 4);
        assert_eq!(scan.hot_after_scan.misses, 1);
        assert_eq!(scan.hot_after_scan.ratio, 0.9);
        let overall = result.hit_ratio.unwrap();
        assert_eq!((overall.misses, overall.accesses), (8, 80));
        assert_eq!(overall.device_reads, Some(16));
        assert!(overall.source.contains("pgmajfault"), "{}", overall.source);
    }

    #[test]
    fn a_shape_larger_than_the_working_set_is_refused() {
        let shape = ScanShape {
            hot_pages: 4,
            scan_pages: 16,
            chunk_pages: 4,
        };
        let mut small = spec(shape);
        small.working_set_bytes = 8 * PAGE;
        let set = AnonymousSet::new(small.working_set_bytes, None).unwrap();
        let error = run(Mode::Dram, &small, &shape, &set).unwrap_err();
        assert!(error.to_string().contains("needs 20 pages"), "{error}");
    }
}
