//! The measuring side of `tiermem bench`: runs in its own process, one mode
//! per process, so each mode starts from a clean slate (and kernel-swap mode
//! can be put in a cgroup before it allocates anything).
//!
//! Each access touches one 8-byte word of one page, as pmbench does, and is
//! timed. Every page carries a stamp: its identity in its first and last
//! words and a version that writes bump with an atomic max, so concurrent
//! writers agree on the final value. At the end every page is verified.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::histogram::LatencyHistogram;
use crate::pattern::{PageSampler, Pattern};
use crate::result::{Mode, ModeResult, VerifyReport};

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
    pub duration_s: f64,
    pub warmup_s: f64,
    pub seed: u64,
}

/// Memory for the working set, provided by the mode.
pub trait WorkingSet {
    fn base(&self) -> *mut u8;
    /// Mode-specific counters at the end (e.g. tiermem stats).
    fn counters(&self) -> Vec<(String, f64)> {
        Vec::new()
    }
}

fn tag(page: u64) -> u64 {
    STAMP_MAGIC ^ page.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

struct Pages {
    base: *mut u8,
    page_size: usize,
    count: u64,
    expected: Vec<AtomicU64>,
}

// SAFETY: all access to the working set is through atomics on words that
// belong to it; the raw base pointer is only offset within it.
unsafe impl Sync for Pages {}

impl Pages {
    #[inline]
    fn word(&self, page: u64, index: usize) -> &AtomicU64 {
        debug_assert!(page < self.count && index < self.page_size / 8);
        // SAFETY: `page < count` and `index` is inside the page, so the word
        // lies inside the working set, 8-byte aligned.
        unsafe { &*(self.base.add(page as usize * self.page_size + index * 8) as *const AtomicU64) }
    }

    fn stamp(&self, page: u64) {
        self.word(page, 0).store(tag(page), Ordering::Relaxed);
        self.word(page, 1).store(1, Ordering::Relaxed);
        self.word(page, self.page_size / 8 - 1)
            .store(tag(page), Ordering::Relaxed);
    }

    #[inline]
    fn access(&self, page: u64, read: bool) {
        if read {
            std::hint::black_box(self.word(page, 1).load(Ordering::Relaxed));
        } else {
            let v = self.expected[page as usize].fetch_add(1, Ordering::Relaxed) + 1;
            self.word(page, 1).fetch_max(v, Ordering::Relaxed);
        }
    }

    fn verify(&self) -> VerifyReport {
        let mut r = VerifyReport {
            pages_checked: self.count,
            ..Default::default()
        };
        for p in 0..self.count {
            let head = self.word(p, 0).load(Ordering::Relaxed);
            let tail = self.word(p, self.page_size / 8 - 1).load(Ordering::Relaxed);
            let version = self.word(p, 1).load(Ordering::Relaxed);
            let bad = if head != tag(p) || tail != tag(p) {
                r.lost += 1;
                true
            } else if version != self.expected[p as usize].load(Ordering::Relaxed) {
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

/// Stamps, warms up, measures and verifies. `progress` gets phase updates.
pub fn run_workload(
    mode: Mode,
    spec: &WorkloadSpec,
    set: &dyn WorkingSet,
) -> anyhow::Result<ModeResult> {
    let pattern: Pattern = spec.pattern.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let page_size = spec.page_size as usize;
    let count = spec.working_set_bytes / spec.page_size;
    anyhow::ensure!(count > 0, "the working set holds no page");
    let pages = Pages {
        base: set.base(),
        page_size,
        count,
        expected: (0..count).map(|_| AtomicU64::new(1)).collect(),
    };
    stamp_all(&pages);
    let (latency, reads, writes, elapsed) = measure(&pages, &pattern, spec);
    emit(&WorkerEvent::Progress {
        phase: "verify".into(),
        done: 0.0,
    });
    let verify = pages.verify();
    let accesses = reads + writes;
    Ok(ModeResult {
        mode,
        accesses,
        reads,
        writes,
        elapsed_s: elapsed.as_secs_f64(),
        pages_per_sec: accesses as f64 / elapsed.as_secs_f64().max(1e-9),
        latency,
        slow_threshold_ns: SLOW_THRESHOLD_NS,
        verify,
        counters: set.counters().into_iter().collect(),
        notes: Vec::new(),
    })
}

fn stamp_all(pages: &Pages) {
    let step = (pages.count / 100).max(1);
    for p in 0..pages.count {
        pages.stamp(p);
        if p % step == 0 {
            emit(&WorkerEvent::Progress {
                phase: "stamp".into(),
                done: p as f64 / pages.count as f64,
            });
        }
    }
}

/// Runs warm-up then the measured phase on `spec.threads` threads.
fn measure(
    pages: &Pages,
    pattern: &Pattern,
    spec: &WorkloadSpec,
) -> (LatencyHistogram, u64, u64, Duration) {
    let recording = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let mut merged = LatencyHistogram::new();
    let (mut reads, mut writes) = (0, 0);
    let mut elapsed = Duration::ZERO;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..spec.threads)
            .map(|t| {
                let (recording, stop) = (&recording, &stop);
                let mut sampler =
                    PageSampler::new(pattern, pages.count, spec.seed, t, spec.threads);
                let read_percent = spec.read_percent;
                s.spawn(move || access_loop(pages, &mut sampler, read_percent, recording, stop))
            })
            .collect();
        tick_phase("warmup", spec.warmup_s);
        let started = Instant::now();
        recording.store(true, Ordering::Release);
        tick_phase("measure", spec.duration_s);
        stop.store(true, Ordering::Release);
        elapsed = started.elapsed();
        for h in handles {
            if let Ok((hist, r, w)) = h.join() {
                merged.merge(&hist);
                reads += r;
                writes += w;
            }
        }
    });
    (merged, reads, writes, elapsed)
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

fn access_loop(
    pages: &Pages,
    sampler: &mut PageSampler,
    read_percent: u32,
    recording: &AtomicBool,
    stop: &AtomicBool,
) -> (LatencyHistogram, u64, u64) {
    let mut hist = LatencyHistogram::new();
    let (mut reads, mut writes) = (0u64, 0u64);
    let mut counting = false;
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
        if stop.load(Ordering::Relaxed) {
            break;
        }
        counting = recording.load(Ordering::Relaxed);
    }
    (hist, reads, writes)
}

/// Plain anonymous memory (modes `dram` and `kernel-swap`).
pub struct AnonymousSet {
    map: tiermem_core::sys::mem::Mapping,
}

impl AnonymousSet {
    pub fn new(bytes: u64) -> anyhow::Result<AnonymousSet> {
        let map =
            tiermem_core::sys::mem::Mapping::reserve(bytes as usize, "allocating the working set")?;
        Ok(AnonymousSet { map })
    }
}

impl WorkingSet for AnonymousSet {
    fn base(&self) -> *mut u8 {
        self.map.as_ptr()
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
            ("wp_faults", s.wp_faults),
            ("budget_waits", s.budget_waits),
            ("bytes_read", s.bytes_read),
            ("bytes_written", s.bytes_written),
            ("write_batches", s.write_batches),
            ("peak_resident_bytes", s.peak_resident_bytes),
            ("budget_bytes", s.budget_bytes),
            ("metadata_bytes", s.metadata_bytes),
            ("fault_p50_ns", l.p50_ns),
            ("fault_p99_ns", l.p99_ns),
            ("fault_mean_ns", l.mean_ns),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v as f64))
        .collect()
    }
}

/// Entry point of a worker process: builds the mode's working set, runs,
/// and prints the result as a JSON event. Returns the exit code.
pub fn worker_main(mode: Mode, spec: &WorkloadSpec) -> i32 {
    let outcome = (|| -> anyhow::Result<ModeResult> {
        match mode {
            Mode::Dram | Mode::KernelSwap => {
                run_workload(mode, spec, &AnonymousSet::new(spec.working_set_bytes)?)
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
