//! The five tests for a paging cache: DRAM in front of a backing device
//! (tiermem, kernel swap). Hits take ~0.1 µs (a mapped page) to ~20 µs (a
//! minor fault, e.g. a tiermem probation hit: still no device read), misses
//! ~50–100 µs (a device read), so one timed access tells them apart, and the
//! five tests work with page-scale strides.
//!
//! Method:
//! - every access is timed with serialized rdtsc/rdtscp (`sys::time_read`);
//! - timer interrupts of this CPU are counted from `/proc/interrupts` around
//!   each small batch of timed accesses; samples of a disturbed batch are
//!   discarded (and replaced by new ones);
//! - memory is made uncached by clearing around a test region placed at
//!   random, so that no region grows hot from test to test: the region is
//!   read first, then the memory before it descending and after it
//!   ascending, interleaved, for twice the cache size;
//! - latency summaries drop outliers (modified z-score), decisions are
//!   majority votes over repeated samples.
//!
//! A sample only counts if its first access really missed: that is how a
//! clearing that did not work is caught, instead of passing for a hit.
//!
//! The probe's tests, one to a file, in the order [`Probe::run`] runs
//! them: [`calibrate`] (the hit/miss threshold), [`line`], [`size`],
//! [`prefetch`], [`associativity`], [`write_policy`]. This file holds the
//! probe itself: its region, timed accesses, and cache clearing.

mod associativity;
mod calibrate;
mod line;
mod prefetch;
mod size;
mod write_policy;

use crate::report::{Evidence, Report};
use crate::stats::{median, quantile};
use crate::sys::{time_read, touch, IrqCounter, RawVec, Region, Rng};

/// The smallest unit a paging cache can work in.
const GRAIN: usize = 4096;
/// Fresh-area size for the line and prefetch tests.
const AREA: usize = 16 << 20;
/// The smallest line the line test can report.
const MIN_LINE: usize = 64;

pub struct Setup {
    pub region_bytes: usize,
    /// An upper bound of the cache size, used to size the clearing until
    /// the cache size test has measured it.
    pub hint_bytes: usize,
    pub seed: u64,
    pub cpu: usize,
    pub ticks_per_ns: f64,
}

pub struct Probe<'a> {
    r: Region,
    irq: Option<IrqCounter>,
    rng: Rng,
    tpn: f64,
    /// Accesses at least this slow (ticks) were served by the device.
    thr: u64,
    /// Accesses faster than this (ticks) took no fault at all: ten times a
    /// re-read's median, or a microsecond if more, and never above `thr`.
    no_fault_thr: u64,
    clear_bytes: usize,
    sink: u8,
    progress: &'a mut dyn FnMut(&str, f64),
    disturbed: u64,
    batches: u64,
    ev: Evidence,
    notes: Vec<String>,
    /// Scratch: line indices of a fresh area, in random order.
    order: RawVec<u32>,
    /// Line-test pairs, and those whose first read hit (clearing failed).
    pairs: (u64, u64),
    /// Median latency of a first read after clearing (ns).
    miss_ns: f64,
    /// Scratch: one test's latencies (ticks) and flags.
    lat: RawVec<u64>,
}

fn stamp(off: usize) -> u8 {
    ((off / GRAIN) % 251) as u8 + 1
}

impl<'a> Probe<'a> {
    pub fn new(setup: &Setup, progress: &'a mut dyn FnMut(&str, f64)) -> anyhow::Result<Self> {
        let region = Region::new(setup.region_bytes, false)?;
        let irq = IrqCounter::open(setup.cpu);
        let mut notes = Vec::new();
        if irq.is_none() {
            notes.push(format!(
                "no LOC line for CPU{} in /proc/interrupts: samples could not be checked for timer interrupts",
                setup.cpu
            ));
        }
        // The size test orders lines of the measured size, which can be as
        // small as 64 bytes (a CPU cache's, or a line test gone wrong).
        let smallest_lines = setup.region_bytes / MIN_LINE + 16;
        let lines = setup.region_bytes / GRAIN + 16;
        Ok(Probe {
            r: region,
            irq,
            rng: Rng::new(setup.seed),
            tpn: setup.ticks_per_ns,
            thr: u64::MAX,
            no_fault_thr: 0,
            clear_bytes: 2 * setup.hint_bytes,
            sink: 0,
            progress,
            disturbed: 0,
            batches: 0,
            ev: Evidence::default(),
            notes,
            miss_ns: f64::NAN,
            pairs: (0, 0),
            order: RawVec::with_capacity(smallest_lines),
            lat: RawVec::with_capacity(lines.max(1 << 16)),
        })
    }
}

impl Probe<'_> {
    fn ns(&self, ticks: u64) -> f64 {
        ticks as f64 / self.tpn
    }

    fn read(&mut self, off: usize) -> u64 {
        let p = self.r.at(off);
        time_read(p, &mut self.sink)
    }

    fn touch(&mut self, off: usize) {
        touch(self.r.at(off), &mut self.sink);
    }

    fn miss(&self, t: u64) -> bool {
        t >= self.thr
    }

    /// True if an access this fast (ticks) found its page mapped.
    fn without_fault(&self, t: u64) -> bool {
        t < self.no_fault_thr
    }

    /// Starts a batch of timed accesses.
    fn guard(&mut self) -> Option<u64> {
        self.irq.as_mut().and_then(|c| c.read())
    }

    /// Ends a batch: true if no timer interrupt hit this CPU meanwhile.
    fn clean(&mut self, start: Option<u64>) -> bool {
        self.batches += 1;
        let end = self.irq.as_mut().and_then(|c| c.read());
        let ok = match (start, end) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        if !ok {
            self.disturbed += 1;
        }
        ok
    }

    fn say(&mut self, what: &str, done: f64) {
        (self.progress)(what, done);
    }

    /// Gives every page real content: an all-zero page would come back as a
    /// zero fill, not a device read.
    fn populate(&mut self) {
        let len = self.r.len;
        let mut off = 0;
        while off < len {
            // SAFETY: inside the region.
            unsafe { std::ptr::write_volatile(self.r.at(off), stamp(off)) };
            off += GRAIN;
            if off % (64 << 20) == 0 {
                self.say("populating the region", 0.05 * off as f64 / len as f64);
            }
        }
        // Then read it all once, so that every page has been written back
        // and is clean: later evictions are all alike (no write-back lag to
        // reorder them), until the write test dirties pages on purpose.
        let mut off = 0;
        while off < len {
            self.touch(off);
            off += GRAIN;
        }
    }

    /// Cache clearing around a random test region: read the test region `t`
    /// first, then the memory before it descending and after it ascending,
    /// interleaved, `clear_bytes` in all.
    fn clear(&mut self, t_off: usize, t_len: usize) {
        let mut off = t_off;
        while off < t_off + t_len {
            self.touch(off);
            off += GRAIN;
        }
        let (mut down, mut up) = (t_off, t_off + t_len);
        let mut done = 0;
        while done < self.clear_bytes {
            let mut moved = false;
            if down >= GRAIN {
                down -= GRAIN;
                self.touch(down);
                done += GRAIN;
                moved = true;
            }
            if up + GRAIN <= self.r.len {
                self.touch(up);
                up += GRAIN;
                done += GRAIN;
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }

    /// A random, cleared test region of `len` bytes aligned to `align`.
    fn fresh(&mut self, len: usize, align: usize) -> usize {
        let slots = (self.r.len - len) / align;
        let off = self.rng.below(slots + 1) * align;
        self.clear(off, len);
        off
    }

    /// A random line-aligned offset whose `span` bytes lie in the region.
    fn random_line(&mut self, line: usize, span: usize) -> usize {
        let slots = (self.r.len - span - line) / line;
        self.rng.below(slots) * line
    }

    pub fn run(mut self) -> anyhow::Result<Report> {
        let started = std::time::Instant::now();
        self.say("populating the region", 0.0);
        self.populate();
        self.say("calibrating hit and miss latency", 0.1);
        self.calibrate()?;
        self.say("line size", 0.15);
        let line = self.line_size();
        let l = line.value as usize;
        self.say("cache size", 0.3);
        let size = self.cache_size(l);
        self.clear_bytes = 2 * size.value as usize;
        self.say("prefetch", 0.6);
        let prefetch = self.prefetch(l);
        self.say("associativity", 0.65);
        let assoc = self.associativity(size.value as usize, l);
        self.say("write policy", 0.85);
        let (wp, wp_conf, wp_ev) = self.write_policy(size.value as usize, l);
        self.say("done", 1.0);
        self.notes.push(format!(
            "cache clearing: {} of {} line-test first reads still hit (discarded)",
            self.pairs.1, self.pairs.0
        ));
        let hit_ns = median(&self.ev.read_hits);
        Ok(Report {
            target: String::new(),
            cache_size: size,
            line_size: line,
            associativity: assoc,
            prefetch,
            write_policy: wp,
            write_policy_confidence: wp_conf,
            write_policy_evidence: wp_ev,
            hit_ns,
            miss_ns: self.miss_ns,
            disturbed_batches: self.disturbed,
            total_batches: self.batches,
            seconds: started.elapsed().as_secs_f64(),
            notes: std::mem::take(&mut self.notes),
            evidence: std::mem::take(&mut self.ev),
        })
    }
}

#[allow(dead_code)]
fn p90(v: &[f64]) -> f64 {
    quantile(v, 0.9)
}
