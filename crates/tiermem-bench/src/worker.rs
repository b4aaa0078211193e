//! The measuring side of `tiermem bench`: runs in its own process, one mode
//! per process, so each mode starts from a clean slate (and kernel-swap mode
//! can be put in a cgroup before it allocates anything).
//!
//! Each access touches one 8-byte word of one page, as pmbench does, and is
//! timed. Every page carries a stamp: its identity in its first and last
//! words and a version that writes bump with an atomic max, so concurrent
//! writers agree on the final value. The words between hold the chosen
//! contents (`--data`, see `page_data`). At the end every word of every
//! page is verified.
//!
//! Misses are counted by the mode itself (see `hit_ratio`), read just before
//! the measured phase starts and just after it ends.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tiermem_device::CpuSnapshot;

use crate::histogram::LatencyHistogram;
use crate::hit_ratio::{HitRatio, MissCount, MissCounters};
use crate::page_data::PageData;
use crate::pattern::{PageSampler, Pattern};
use crate::result::{Mode, ModeResult, VerifyReport, CPU_PERCENT};
use crate::scan_resistance::{self, ScanShape};

/// Accesses slower than this count as misses (any page fault takes longer).
pub const SLOW_THRESHOLD_NS: u64 = 1_000;
const STAMP_MAGIC: u64 = 0x706d_6265_6e63_6800;

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

fn tag(page: u64) -> u64 {
    STAMP_MAGIC ^ page.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The working set as stamped pages.
pub(crate) struct Pages {
    base: *mut u8,
    page_size: usize,
    count: u64,
    data: PageData,
    expected: Vec<AtomicU64>,
}

// SAFETY: all access to the working set is through atomics on words that
// belong to it; the raw base pointer is only offset within it.
unsafe impl Sync for Pages {}

impl Pages {
    /// The `count` pages of `page_size` bytes at `set.base()`, not stamped
    /// yet, to be filled with `data`.
    pub(crate) fn new(set: &dyn WorkingSet, page_size: usize, count: u64, data: PageData) -> Pages {
        Pages {
            base: set.base(),
            page_size,
            count,
            data,
            expected: (0..count).map(|_| AtomicU64::new(1)).collect(),
        }
    }

    #[inline]
    fn word(&self, page: u64, index: usize) -> &AtomicU64 {
        debug_assert!(page < self.count && index < self.page_size / 8);
        // SAFETY: `page < count` and `index` is inside the page, so the word
        // lies inside the working set, 8-byte aligned.
        unsafe { &*(self.base.add(page as usize * self.page_size + index * 8) as *const AtomicU64) }
    }

    fn last_word(&self) -> usize {
        self.page_size / 8 - 1
    }

    /// Writes the page's stamp and its contents: its first touch.
    pub(crate) fn stamp(&self, page: u64) {
        self.word(page, 0).store(tag(page), Ordering::Relaxed);
        self.word(page, 1).store(1, Ordering::Relaxed);
        if self.data != PageData::Zero {
            for i in 2..self.last_word() {
                self.word(page, i)
                    .store(self.data.word(page, i), Ordering::Relaxed);
            }
        }
        self.word(page, self.last_word())
            .store(tag(page), Ordering::Relaxed);
    }

    /// Whether every word between the stamp words holds its contents.
    fn contents_intact(&self, page: u64) -> bool {
        (2..self.last_word())
            .all(|i| self.word(page, i).load(Ordering::Relaxed) == self.data.word(page, i))
    }

    #[inline]
    pub(crate) fn access(&self, page: u64, read: bool) {
        if read {
            std::hint::black_box(self.word(page, 1).load(Ordering::Relaxed));
        } else {
            let v = self.expected[page as usize].fetch_add(1, Ordering::Relaxed) + 1;
            self.word(page, 1).fetch_max(v, Ordering::Relaxed);
        }
    }

    pub(crate) fn verify(&self) -> VerifyReport {
        let mut r = VerifyReport {
            pages_checked: self.count,
            ..Default::default()
        };
        for p in 0..self.count {
            let head = self.word(p, 0).load(Ordering::Relaxed);
            let tail = self.word(p, self.last_word()).load(Ordering::Relaxed);
            let version = self.word(p, 1).load(Ordering::Relaxed);
            let bad = if head != tag(p) || tail != tag(p) {
                r.lost += 1;
                true
            } else if version != self.expected[p as usize].load(Ordering::Relaxed)
                || !self.contents_intact(p)
            {
                r.corrupted += 1;
                true
            } else {
                false
            };
            if bad && r.first_bad_page.is_none() {
                r.first_bad_page = Some(p);
            }
        }
        r
    }
}

/// Progress events a worker prints (one JSON object per line on stdout).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum WorkerEvent {
    Progress { phase: String, done: f64 },
    Result(Box<ModeResult>),
    Failed { message: String },
}

pub fn emit(event: &WorkerEvent) {
    if let Ok(line) = serde_json::to_string(event) {
        println!("{line}");
    }
}

/// Runs the spec's workload on `set` and verifies every page afterwards.
pub fn run_workload(
    mode: Mode,
    spec: &WorkloadSpec,
    set: &dyn WorkingSet,
) -> anyhow::Result<ModeResult> {
    match spec.workload {
        Workload::Pattern => run_pattern_workload(mode, spec, set),
        Workload::ScanResistance(shape) => scan_resistance::run(mode, spec, &shape, set),
    }
}

/// Stamps, warms up, measures and verifies. `progress` gets phase updates.
fn run_pattern_workload(
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

/// Stamps `range` of the pages in order, with progress events.
pub(crate) fn stamp_pages(pages: &Pages, range: std::ops::Range<u64>) {
    let total = range.end - range.start;
    let step = (total / 100).max(1);
    for (stamped, page) in (0u64..).zip(range) {
        pages.stamp(page);
        if stamped.is_multiple_of(step) {
            emit(&WorkerEvent::Progress {
                phase: "stamp".into(),
                done: stamped as f64 / total as f64,
            });
        }
    }
}

pub(crate) fn verify_with_progress(pages: &Pages) -> VerifyReport {
    emit(&WorkerEvent::Progress {
        phase: "verify".into(),
        done: 0.0,
    });
    pages.verify()
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
                    PageSampler::new(pattern, pages.count, spec.seed, t, spec.threads);
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
            ("compress_rejected", s.compress_rejected),
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

/// What tiermem's compressed tier held and served, for the report.
fn compressed_note(s: &tiermem_core::Stats, config: &tiermem_core::Config) -> String {
    if !config.compress.is_on() {
        return "compressed tier: off".into();
    }
    format!(
        "compressed tier ({}, at most {}% of the budget): {} pages in {:.1} MiB after the measured phase \
         ({:.0}% of it objects), ratio {:.2}x; \
         {} stored ({} same-filled), {} rejected, {} written back; {} hits, p50 {:.1} us, p99 {:.1} us",
        s.compression,
        config.compress.share_percent,
        s.compressed_pages,
        s.pool_bytes as f64 / (1 << 20) as f64,
        100.0 * s.compressed_bytes as f64 / s.pool_bytes.max(1) as f64,
        s.compression_ratio(),
        s.compressed_stores,
        s.same_filled_pages,
        s.compress_rejected,
        s.compressed_writebacks,
        s.compressed_hits,
        s.compressed_hit_latency.p50_ns as f64 / 1000.0,
        s.compressed_hit_latency.p99_ns as f64 / 1000.0,
    )
}

/// The kernel-swap worker's `memory.stat`, which the parent names in the
/// environment (the worker was put in the cgroup before it started).
fn kernel_swap_memory_stat() -> anyhow::Result<std::path::PathBuf> {
    let path = std::env::var_os(crate::kernel_swap::MEMORY_STAT_ENV).with_context(|| {
        format!(
            "{} is not set: a kernel-swap worker is started by `tiermem bench` \
             inside its memory cgroup, which names the cgroup's memory.stat there",
            crate::kernel_swap::MEMORY_STAT_ENV
        )
    })?;
    Ok(path.into())
}

/// Entry point of a worker process: builds the mode's working set, runs,
/// and prints the result as a JSON event. Returns the exit code.
pub fn worker_main(mode: Mode, spec: &WorkloadSpec) -> i32 {
    let outcome = (|| -> anyhow::Result<ModeResult> {
        match mode {
            Mode::Dram => run_workload(
                mode,
                spec,
                &AnonymousSet::new(spec.working_set_bytes, None)?,
            ),
            Mode::KernelSwap | Mode::KernelZswap | Mode::KernelZram => {
                let memory_stat = kernel_swap_memory_stat()?;
                let set = AnonymousSet::new(spec.working_set_bytes, Some(memory_stat))?;
                run_workload(mode, spec, &set)
            }
            Mode::Tiermem => run_workload(mode, spec, &TiermemSet::new(spec.working_set_bytes)?),
        }
    })();
    match outcome {
        Ok(r) => {
            let clean = r.verify.is_clean();
            emit(&WorkerEvent::Result(Box::new(r)));
            if clean {
                0
            } else {
                3
            }
        }
        Err(e) => {
            emit(&WorkerEvent::Failed {
                message: format!("{e:#}"),
            });
            2
        }
    }
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

    /// Without the wait for a counted batch, a zero-length phase ends
    /// before any thread has looked at the recording flag: 0 accesses.
    #[test]
    fn every_thread_counts_a_batch_however_short_the_phase() {
        let spec = WorkloadSpec {
            working_set_bytes: 4 << 20,
            page_size: 4096,
            threads: 2,
            read_percent: 50,
            pattern: "uniform".into(),
            duration_s: 0.0,
            warmup_s: 0.0,
            seed: 7,
            workload: Workload::Pattern,
            data: PageData::Random,
        };
        let set = AnonymousSet::new(spec.working_set_bytes, None).unwrap();
        let result = run_workload(Mode::Dram, &spec, &set).unwrap();
        assert!(result.accesses >= 2 * 64, "{} accesses", result.accesses);
        assert_eq!(result.verify.lost + result.verify.corrupted, 0);
        assert!(result.first_touch_s.is_some_and(|s| s > 0.0));
    }

    /// Verification reads every word of every page: one byte changed in
    /// the middle of one page, away from the stamp words, is found, for
    /// each kind of contents.
    #[test]
    fn one_changed_byte_anywhere_in_a_page_is_found() {
        for data in PageData::ALL {
            let set = AnonymousSet::new(64 * 4096, None).unwrap();
            let pages = Pages::new(&set, 4096, 64, data);
            stamp_pages(&pages, 0..64);
            assert!(
                pages.verify().is_clean(),
                "{data}: clean pages reported bad"
            );
            // SAFETY: byte 2049 of page 37 lies inside the 64-page set.
            unsafe { *set.base().add(37 * 4096 + 2049) ^= 0x10 };
            let report = pages.verify();
            assert_eq!(report.corrupted, 1, "{data}");
            assert_eq!(report.first_bad_page, Some(37), "{data}");
        }
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
