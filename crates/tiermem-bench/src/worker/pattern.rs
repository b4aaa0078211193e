//! The pattern workload: `threads` threads access pages drawn from the
//! pattern, timed one by one, through a warm-up and a measured phase.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tiermem_device::CpuSnapshot;

use super::events::{emit, WorkerEvent};
use super::pages::{stamp_pages, verify_with_progress, Pages};
use super::sets::WorkingSet;
use super::spec::{WorkloadSpec, SLOW_THRESHOLD_NS};
use crate::hit_ratio::{HitRatio, MissCount, MissCounters};
use crate::pattern::{PageSampler, Pattern};
use crate::result::{Mode, ModeResult, CPU_PERCENT};
use tiermem_host::histogram::LatencyHistogram;

/// Stamps, warms up, measures and verifies. `progress` gets phase updates.
pub(super) fn run_pattern_workload(
    mode: Mode,
    spec: &WorkloadSpec,
    set: &dyn WorkingSet,
) -> anyhow::Result<ModeResult> {
    let pattern: Pattern = spec.pattern.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let count = spec.working_set_bytes / spec.page_size;
    anyhow::ensure!(count > 0, "the working set holds no page");
    let pages = Pages::new(set, spec.page_size as usize, count, spec.data);
    let first_touch = Instant::now();
    stamp_pages(&pages, 0..count);
    let first_touch_s = first_touch.elapsed().as_secs_f64();
    let measured = measure(&pages, set, &pattern, spec);
    // Before verification, which reads every page back and so empties
    // tiermem's compressed pool: the notes describe the measured phase.
    let notes = set.notes();
    let verify = verify_with_progress(&pages);
    let accesses = measured.reads + measured.writes;
    let mut result = ModeResult {
        mode,
        accesses,
        reads: measured.reads,
        writes: measured.writes,
        elapsed_s: measured.elapsed.as_secs_f64(),
        pages_per_sec: accesses as f64 / measured.elapsed.as_secs_f64().max(1e-9),
        page_size: spec.page_size,
        latency: measured.latency,
        slow_threshold_ns: SLOW_THRESHOLD_NS,
        verify,
        hit_ratio: None,
        scan_resistance: None,
        counters: set.counters().into_iter().collect(),
        notes,
        first_touch_s: Some(first_touch_s),
    };
    // The worker's own CPU: the price of each mode's way of waiting.
    result
        .counters
        .insert(CPU_PERCENT.to_string(), measured.cpu_percent);
    match measured.misses {
        Ok((count, source)) => result.hit_ratio = HitRatio::new(accesses, count, source),
        Err(error) => result.notes.push(format!("no hit ratio: {error:#}")),
    }
    Ok(result)
}

/// What the measured phase of a pattern workload saw.
struct Measured {
    latency: LatencyHistogram,
    reads: u64,
    writes: u64,
    elapsed: Duration,
    /// CPU the worker process used over the measured phase, in percent of
    /// one CPU (its access threads and, under tiermem, its handlers and
    /// evictor).
    cpu_percent: f64,
    /// Misses over the measured phase and where they were counted.
    misses: anyhow::Result<(MissCount, &'static str)>,
}

/// Misses between two readings of the mode's counters, taken before and
/// after the measured phase, and where they were counted.
fn misses_between(
    before: anyhow::Result<MissCounters>,
    after: anyhow::Result<MissCounters>,
) -> anyhow::Result<(MissCount, &'static str)> {
    let before = before.context("reading the miss counters before the measured phase")?;
    let after = after.context("reading the miss counters after the measured phase")?;
    Ok((after.misses_since(&before)?, after.source()))
}

/// Runs warm-up then the measured phase on `spec.threads` threads. The miss
/// counters are read when recording starts and after every thread stopped:
/// a thread notices either flag only between batches of 64 accesses, so the
/// window may be off by that many accesses per thread out of millions. The
/// phase lasts until every thread has counted at least one batch: a batch
/// of misses can outlast a short phase (one pinned CPU, a busy device), and
/// a phase with no sample measures nothing.
fn measure(
    pages: &Pages,
    set: &dyn WorkingSet,
    pattern: &Pattern,
    spec: &WorkloadSpec,
) -> Measured {
    let recording = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let threads_counted = AtomicUsize::new(0);
    let mut merged = LatencyHistogram::new();
    let (mut reads, mut writes) = (0, 0);
    let mut elapsed = Duration::ZERO;
    let mut cpu_percent = 0.0;
    let mut misses = Err(anyhow::anyhow!("the measured phase did not run"));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..spec.threads)
            .map(|t| {
                let flags = PhaseFlags {
                    recording: &recording,
                    stop: &stop,
                    threads_counted: &threads_counted,
                };
                let mut sampler =
                    PageSampler::new(pattern, pages.count(), spec.seed, t, spec.threads);
                let read_percent = spec.read_percent;
                s.spawn(move || access_loop(pages, &mut sampler, read_percent, flags))
            })
            .collect();
        tick_phase("warmup", spec.warmup_s);
        let counters_before = set.miss_counters();
        let cpu_before = CpuSnapshot::now();
        let started = Instant::now();
        recording.store(true, Ordering::Release);
        tick_phase("measure", spec.duration_s);
        // (A thread that ended early, by a panic, never will count.)
        while threads_counted.load(Ordering::Acquire) < spec.threads
            && !handles.iter().any(|h| h.is_finished())
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Release);
        elapsed = started.elapsed();
        cpu_percent = cpu_before.usage_until(&CpuSnapshot::now()).total_pct;
        for h in handles {
            if let Ok((hist, r, w)) = h.join() {
                merged.merge(&hist);
                reads += r;
                writes += w;
            }
        }
        misses = misses_between(counters_before, set.miss_counters());
    });
    Measured {
        latency: merged,
        reads,
        writes,
        elapsed,
        cpu_percent,
        misses,
    }
}

fn tick_phase(phase: &str, seconds: f64) {
    let started = Instant::now();
    let total = Duration::from_secs_f64(seconds.max(0.0));
    while started.elapsed() < total {
        emit(&WorkerEvent::Progress {
            phase: phase.into(),
            done: started.elapsed().as_secs_f64() / seconds,
        });
        std::thread::sleep(Duration::from_millis(200).min(total.saturating_sub(started.elapsed())));
    }
}

/// What the measuring thread tells the access threads, and what they tell it.
#[derive(Clone, Copy)]
struct PhaseFlags<'a> {
    recording: &'a AtomicBool,
    stop: &'a AtomicBool,
    /// Threads that have counted a whole batch.
    threads_counted: &'a AtomicUsize,
}

fn access_loop(
    pages: &Pages,
    sampler: &mut PageSampler,
    read_percent: u32,
    flags: PhaseFlags<'_>,
) -> (LatencyHistogram, u64, u64) {
    let mut hist = LatencyHistogram::new();
    let (mut reads, mut writes) = (0u64, 0u64);
    let mut counting = false;
    let mut counted_a_batch = false;
    loop {
        for _ in 0..64 {
            let page = sampler.next_page();
            let read = sampler.read_or_write(read_percent);
            let t0 = Instant::now();
            pages.access(page, read);
            let ns = t0.elapsed().as_nanos() as u64;
            if counting {
                hist.record(ns);
                if read {
                    reads += 1;
                } else {
                    writes += 1;
                }
            }
        }
        if counting && !counted_a_batch {
            counted_a_batch = true;
            flags.threads_counted.fetch_add(1, Ordering::Release);
        }
        if flags.stop.load(Ordering::Relaxed) {
            break;
        }
        counting = flags.recording.load(Ordering::Relaxed);
    }
    (hist, reads, writes)
}
