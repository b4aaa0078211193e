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

use crate::report::{Estimate, Evidence, Report, WritePolicy};
use crate::stats::{median, quantile, vote_confidence, without_outliers};
use crate::sys::{time_read, time_write, touch, IrqCounter, RawVec, Region, Rng};

/// The smallest unit a paging cache can work in.
const GRAIN: usize = 4096;
/// Fresh-area size for the line and prefetch tests.
const AREA: usize = 16 << 20;
/// Most calibration rounds before the miss latency is taken as it is.
const CALIBRATION_ROUNDS: usize = 6;
/// Re-read hit ratio at which a block counts as fitting in the cache.
const FITS: f64 = 0.9;
/// Fresh blocks a size gets before it is taken not to fit.
const SIZE_TRIES: usize = 3;
/// How long written lines are left alone before they are written again:
/// long enough for a write-through pager to have copied them out.
const REWRITE_PAUSE: std::time::Duration = std::time::Duration::from_millis(40);
/// Sequential walks of the prefetch test.
const PREFETCH_WALKS: usize = 6;
/// Largest line the line test distinguishes.
const MAX_LINE_LOG2: u32 = 21;
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
    fn calibrate(&mut self) -> anyhow::Result<()> {
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
        self.miss_ns = miss / self.tpn;
        self.ev.threshold_ns = self.ns(self.thr);
        Ok(())
    }

    /// Reverse pairs (the line size test): read `a + x`, then `a`
    /// with `a` aligned to the power of two above `x`. The second read hits
    /// only when both are in one line; reading backwards keeps a forward
    /// prefetcher from faking it. Returns (hit, valid) for one sample.
    fn pair(&mut self, x: usize, reverse: bool, area: &mut FreshChunks) -> Option<bool> {
        let align = (x + 1).next_power_of_two().max(64 << 10);
        let a = area.take(self, align);
        let (first, second) = if reverse { (a + x, a) } else { (a, a + x) };
        let g = self.guard();
        let t1 = self.read(first);
        let t2 = self.read(second);
        if !self.clean(g) {
            return None;
        }
        // Figure 4.1 shows every first read: how often clearing worked.
        let (n1, n2) = (self.ns(t1), self.ns(t2));
        if reverse {
            self.ev.line_first_reverse.push(n1);
        } else {
            self.ev.line_first_forward.push(n1);
        }
        self.pairs.0 += 1;
        if !self.miss(t1) {
            self.pairs.1 += 1;
            return None;
        }
        if reverse {
            self.ev.line_second.push((x as f64, n2));
        }
        Some(!self.miss(t2))
    }

    /// `want` valid reverse-pair samples at `x`: how many saw one line.
    fn same_line_votes(&mut self, x: usize, want: usize, area: &mut FreshChunks) -> (usize, usize) {
        let (mut same, mut n, mut tries) = (0, 0, 0);
        while n < want && tries < want * 20 {
            tries += 1;
            if let Some(hit) = self.pair(x, true, area) {
                n += 1;
                same += hit as usize;
            }
        }
        (same, n)
    }

    fn line_size(&mut self) -> Estimate {
        let mut area = FreshChunks::default();
        // Bisection over log2 of the line: "x = 2^n is in the same line".
        let (mut lo, mut hi) = (MIN_LINE.trailing_zeros(), MAX_LINE_LOG2);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let mut votes = self.same_line_votes(1 << mid, 5, &mut area);
            if votes.1 == 0 {
                // No usable sample is no evidence either way: try once more
                // in a newly cleared area before taking the pair as split.
                area = FreshChunks::default();
                votes = self.same_line_votes(1 << mid, 5, &mut area);
                if votes.1 == 0 {
                    self.notes.push(format!(
                        "line size: no usable sample at {}, taken as two lines",
                        crate::report::size(1 << mid)
                    ));
                }
            }
            let (same, n) = votes;
            if n > 0 && 2 * same > n {
                lo = mid + 1;
            } else {
                hi = mid;
            }
            self.say("line size", 0.15 + 0.08 * (lo as f64 - 6.0) / 15.0);
        }
        let line = 1usize << lo;
        // Verify around the boundary, with deltas of both forms (2^n and
        // 2^n - 1).
        let mut agree = 0;
        let mut total = 0;
        let checks: [(usize, bool); 4] = [
            (line / 2, true),
            (line - 1, true),
            (line, false),
            (line * 2, false),
        ];
        for (x, expect_same) in checks {
            if !(MIN_LINE..1 << MAX_LINE_LOG2).contains(&x) {
                continue;
            }
            let (same, n) = self.same_line_votes(x, 6, &mut area);
            total += n;
            agree += if expect_same { same } else { n - same };
        }
        // Forward pairs at the line size, for figure 4.1's forward panel.
        for _ in 0..8 {
            let _ = self.pair(line / 2, false, &mut area);
        }
        self.say("line size", 0.3);
        Estimate {
            value: line as u64,
            confidence: vote_confidence(agree, total),
            evidence: format!(
                "reverse pairs: {agree}/{total} samples around {} agree (same line below, different at and above)",
                crate::report::size(line as u64)
            ),
        }
    }

    /// One trial of the cache size test: read a block of `s` bytes line by
    /// line in a random order, then again in the same order, timing the
    /// second pass. Every line's reuse distance is `s`, so the second pass
    /// hits iff the block fits; the random order keeps read-ahead out.
    fn size_trial(&mut self, s: usize, line: usize) -> f64 {
        let lines = s / line;
        let off = self.fresh(s, line.max(GRAIN));
        self.order.clear();
        for i in 0..lines as u32 {
            self.order.push(i);
        }
        self.rng.shuffle(self.order.as_mut_slice());
        for i in 0..lines {
            let o = off + self.order.as_slice()[i] as usize * line;
            self.touch(o);
        }
        let (mut hits, mut n) = (0usize, 0usize);
        let mut i = 0;
        let keep_every = (lines / 48).max(1);
        while i < lines {
            // Short batches: a miss takes ~100 µs, the timer ticks every 4 ms.
            let end = (i + 8).min(lines);
            self.lat.clear();
            let g = self.guard();
            for j in i..end {
                let o = off + self.order.as_slice()[j] as usize * line;
                let t = self.read(o);
                self.lat.push(t);
            }
            if self.clean(g) {
                for (k, &t) in self.lat.as_slice().iter().enumerate() {
                    n += 1;
                    hits += !self.miss(t) as usize;
                    if (i + k) % keep_every == 0 {
                        self.ev.size_points.push((s as f64, t as f64 / self.tpn));
                    }
                }
            }
            i = end;
        }
        let ratio = if n == 0 { 0.0 } else { hits as f64 / n as f64 };
        self.ev.size_hit_ratio.push((s as f64, ratio));
        ratio
    }

    /// Whether a block of `s` bytes fits, and its best hit ratio. A fit
    /// proves the cache holds `s`; a miss does not prove it cannot: pages a
    /// frequency-aware policy keeps from earlier tests (tiermem's heat
    /// survives the clearing scan, by design) take room the block needs.
    /// So a block that misses gets fresh regions, up to `SIZE_TRIES` in all.
    fn fits(&mut self, s: usize, line: usize) -> (bool, f64) {
        let mut best: f64 = 0.0;
        for _ in 0..SIZE_TRIES {
            best = best.max(self.size_trial(s, line));
            if best >= FITS {
                return (true, best);
            }
        }
        (false, best)
    }

    fn cache_size(&mut self, line: usize) -> Estimate {
        let max = (self.r.len / 2).next_multiple_of(line);
        // Double until a block no longer fits, then bisect to 1%.
        let mut lo = 0usize;
        let mut hi = 0usize;
        let mut s = (16 * line).max(256 << 10);
        let mut worst_fit: f64 = 1.0;
        let mut best_miss: f64 = 0.0;
        while s <= max {
            let (fit, r) = self.fits(s, line);
            self.say("cache size", 0.3 + 0.1 * (s as f64 / max as f64));
            if fit {
                lo = s;
                worst_fit = worst_fit.min(r);
                s *= 2;
            } else {
                hi = s;
                best_miss = best_miss.max(r);
                break;
            }
        }
        if hi == 0 {
            return Estimate {
                value: lo as u64,
                confidence: 0.2,
                evidence: format!(
                    "every block up to {} fit: the cache is at least that large",
                    crate::report::size(lo as u64)
                ),
            };
        }
        if lo == 0 {
            lo = line;
        }
        let mut steps = 0;
        while (hi - lo) as f64 > 0.01 * lo as f64 && hi - lo > line && steps < 10 {
            steps += 1;
            let mid = ((lo + hi) / 2 / line).max(1) * line;
            let (fit, r) = self.fits(mid, line);
            if fit {
                lo = mid;
                worst_fit = worst_fit.min(r);
            } else {
                hi = mid;
                best_miss = best_miss.max(r);
            }
            self.say("cache size", 0.4 + 0.2 * steps as f64 / 10.0);
        }
        // Confirm both sides of the boundary once more.
        let (_, r_lo) = self.fits(lo, line);
        let r_hi = self.size_trial(hi, line);
        let confidence = (r_lo.min(worst_fit) * (1.0 - r_hi.max(best_miss).min(1.0)))
            .clamp(0.0, 1.0)
            * if r_lo >= FITS && r_hi < FITS {
                1.0
            } else {
                0.5
            };
        Estimate {
            value: lo as u64,
            confidence,
            evidence: format!(
                "re-read hit ratio {:.0}% at {} (best of up to {SIZE_TRIES} blocks), {:.0}% at {} \
                 (one block)",
                100.0 * r_lo,
                crate::report::size(lo as u64),
                100.0 * r_hi,
                crate::report::size(hi as u64)
            ),
        }
    }

    /// Reads fresh lines one after another at a stride of one line and
    /// counts the hits that follow each miss: a cache that fetches `P`
    /// extra lines on a miss shows miss, P hits, miss, P hits...
    fn prefetch(&mut self, line: usize) -> Estimate {
        let walk = (AREA / line).clamp(8, 64);
        let mut runs: Vec<usize> = Vec::new();
        let (mut hits, mut misses) = (0usize, 0usize);
        let mut growing = 0;
        let mut walks = 0;
        let mut per_walk: Vec<f64> = Vec::new();
        for _ in 0..PREFETCH_WALKS {
            let t = self.fresh(walk * line, line.max(GRAIN));
            let mut classes = Vec::with_capacity(walk);
            let mut i = 0;
            while i < walk {
                let end = (i + 8).min(walk);
                self.lat.clear();
                let g = self.guard();
                for j in i..end {
                    let t = self.read(t + j * line);
                    self.lat.push(t);
                }
                let clean = self.clean(g);
                for (k, &lat) in self.lat.as_slice().iter().enumerate() {
                    // A disturbed batch still tells hit from miss (an
                    // interrupt costs microseconds, a miss tens of them),
                    // but its samples are left out of the latency figures.
                    classes.push(self.miss(lat));
                    if clean {
                        let ns = lat as f64 / self.tpn;
                        self.ev.prefetch_walk.push(((i + k) as f64, ns));
                        if i + k == 0 {
                            self.ev.prefetch_first.push(ns);
                        }
                    }
                }
                i = end;
            }
            // Not fresh if the first access hit: the walk is not used.
            let ok = classes[0];
            if ok {
                walks += 1;
                let mut walk_runs = crate::stats::hit_runs_after_misses(&classes);
                if walk_runs.is_empty() {
                    // One miss, then only hits: prefetch covers the walk.
                    walk_runs.push(walk - 1);
                }
                if walk_runs.windows(2).filter(|p| p[1] > p[0]).count() >= 2 {
                    growing += 1;
                }
                runs.extend(walk_runs);
                let walk_misses = classes.iter().filter(|m| **m).count();
                misses += walk_misses;
                hits += classes.len() - walk_misses;
                per_walk.push((classes.len() - walk_misses) as f64 / walk_misses.max(1) as f64);
            }
        }
        if runs.is_empty() {
            return Estimate {
                value: 0,
                confidence: 0.0,
                evidence: "no walk started with a miss".into(),
            };
        }
        // Lines fetched per miss beyond the missing one: hits per miss, the
        // median over the walks. A fixed degree P gives exactly P; a walk
        // that overtook a prefetch still in flight (a late line counts as a
        // miss and splits a run) is outvoted by the others. An adaptive,
        // asynchronous read-ahead (windows that grow) gives its average,
        // and runs that disagree with it.
        // A fixed degree shows as one run length that most runs share:
        // take it, unless runs disagree (an adaptive read-ahead's windows
        // grow), then the median ratio.
        let nonzero: Vec<usize> = runs.iter().copied().filter(|&r| r > 0).collect();
        let p = match majority(&nonzero) {
            Some(m) if 2 * nonzero.len() >= runs.len() => m,
            _ => median(&per_walk).round() as usize,
        };
        let agree = runs.iter().filter(|&&r| r == p).count();
        let mut evidence = format!(
            "{} sequential walks: {hits} hits, {misses} misses; hits after each miss {:?}",
            walks,
            &runs[..runs.len().min(12)]
        );
        if growing > walks / 2 {
            evidence += " (growing: adaptive read-ahead)";
        }
        Estimate {
            value: p as u64,
            confidence: vote_confidence(agree, runs.len()),
            evidence,
        }
    }

    /// The associativity test, with the measured size `c` and line `l`: if
    /// the cache had `w` ways, lines `c / w` apart would share a set, and
    /// reading `w + 1` of them would evict the first. The smallest `w`
    /// for which that happens is the associativity; if none does (up to a
    /// quarter of the cache), the cache is fully associative. Because the
    /// measured size is only approximately the sets' span (a direct-mapped
    /// cache passes the size test up to ~5% beyond its size: only pairs
    /// of lines conflict), spacings within ±11% of `c / w` are tried,
    /// nearest first.
    fn associativity(&mut self, c: usize, l: usize) -> Estimate {
        let n = (c / l).max(1);
        let mut w = 1usize;
        let mut screened_total = 0;
        let mut false_alarms = 0;
        while n / w >= 16 && w < n / 4 {
            let center = n / w;
            let reach = (center * 11 / 100).max(2);
            let mut candidates: Vec<usize> = vec![center];
            for d in 1..=reach {
                candidates.push(center + d);
                candidates.push(center - d);
            }
            let mut conflicts = 0;
            let mut screened = 0;
            for (k, &d) in candidates.iter().enumerate() {
                // A sample is unusable when its first read hit or a timer
                // interrupt came: try again rather than skip the spacing,
                // which may be the one that conflicts.
                // Two usable samples screen a spacing: one may miss a
                // conflict that is there (a slow hit, a fast miss).
                let screen: Vec<bool> = (0..6)
                    .filter_map(|_| self.conflict(w, d, l))
                    .take(2)
                    .collect();
                if screen.is_empty() {
                    continue;
                }
                let c1 = screen.contains(&true);
                screened += 1;
                if c1 {
                    conflicts += 1;
                    // Confirm: three more, at least two must conflict.
                    let votes: Vec<bool> = (0..9)
                        .filter_map(|_| self.conflict(w, d, l))
                        .take(3)
                        .collect();
                    let yes = votes.iter().filter(|v| **v).count();
                    if yes >= 2 {
                        self.ev.assoc_points.push((w as f64, 1.0));
                        return Estimate {
                            value: w as u64,
                            confidence: vote_confidence(1 + yes, 1 + votes.len())
                                * (1.0 - false_alarms as f64 / (screened_total + 1) as f64),
                            evidence: format!(
                                "{} misses on lines {} apart after the first evict it ({}/{} trials); fewer ways never did",
                                w,
                                crate::report::size((d * l) as u64),
                                1 + yes,
                                1 + votes.len()
                            ),
                        };
                    }
                    false_alarms += 1;
                }
                if k % 8 == 0 {
                    self.say(
                        "associativity",
                        0.65 + 0.2 * (w as f64).log2() / (n as f64).log2(),
                    );
                }
            }
            screened_total += screened;
            self.ev.assoc_points.push((
                w as f64,
                if screened == 0 {
                    0.0
                } else {
                    conflicts as f64 / screened as f64
                },
            ));
            w *= 2;
        }
        Estimate {
            value: 0,
            confidence: if screened_total == 0 {
                0.0
            } else {
                (1.0 - false_alarms as f64 / screened_total as f64)
                    * vote_confidence(screened_total, screened_total)
            },
            evidence: format!(
                "no set conflicts for 1..{} ways in {} trials ({} unconfirmed): fully associative",
                w / 2,
                screened_total,
                false_alarms
            ),
        }
    }

    /// Reads line `b` (it must miss), then lines `d` lines further on,
    /// one after another, until `w` of them have missed: each miss took a
    /// way of `b`'s set if `d` spans the sets. A line that was cached
    /// already took none, which is why misses are counted rather than
    /// lines. Then reads `b` again: Some(true) if it was evicted, None if
    /// the sample is unusable.
    fn conflict(&mut self, w: usize, d: usize, l: usize) -> Option<bool> {
        // Room for twice the lines a `w`-way set needs, if the region has it.
        let span = [2 * w * d * l, w * d * l]
            .into_iter()
            .find(|span| span + l < self.r.len)?;
        let b = self.random_line(l, span);
        let g = self.guard();
        let t0 = self.read(b);
        if !self.clean(g) || !self.miss(t0) {
            return None;
        }
        let mut missed = 0;
        for j in 1..=4 * w {
            let off = b + j * d * l;
            if off + l > self.r.len {
                return None;
            }
            // A timer interrupt costs microseconds, a miss tens of them:
            // the class is clear without the interrupt check.
            let t = self.read(off);
            missed += self.miss(t) as usize;
            if missed == w {
                let g = self.guard();
                let t = self.read(b);
                return self.clean(g).then_some(self.miss(t));
            }
        }
        None
    }

    /// Write hits against read hits (a write-through cache pays the backing
    /// store on every write), written lines re-written after a pause (a
    /// cache that sees writes a page at a time writes through by copying
    /// the line out behind the writer and watching it again: the re-write
    /// traps), and misses that evict dirty lines against misses that evict
    /// clean ones (a write-back cache pays at eviction).
    fn write_policy(&mut self, c: usize, l: usize) -> (WritePolicy, f64, String) {
        let (mut w_hits, mut r_hits, mut first_writes) = (Vec::new(), Vec::new(), Vec::new());
        let mut written = Vec::new();
        let mut tries = 0;
        while w_hits.len() < 32 && tries < 200 {
            tries += 1;
            let b = self.random_line(l, l);
            let g = self.guard();
            let t0 = self.read(b);
            if !self.clean(g) || !self.miss(t0) {
                continue;
            }
            let p = self.r.at(b);
            let v = stamp(b);
            let g = self.guard();
            let w1 = time_write(p, v);
            let w2 = time_write(p, v);
            let w3 = time_write(p, v);
            let r1 = self.read(b);
            if !self.clean(g) {
                continue;
            }
            first_writes.push(self.ns(w1));
            w_hits.push(self.ns(w2));
            w_hits.push(self.ns(w3));
            r_hits.push(self.ns(r1));
            written.push(b);
        }
        let rewrites = self.rewrites_after_pause(&written);
        // Figure 4.5: writes every line over twice the cache, then misses
        // with a cache full of dirty lines, then with one full of clean ones.
        let span = (2 * c).min(self.r.len / 2).next_multiple_of(l);
        let start = self.fresh(0, l.max(GRAIN));
        let start = start.min(self.r.len - span - l);
        let keep_every = (span / l / 400).max(1);
        let mut i = 0;
        while i < span / l {
            let end = (i + 16).min(span / l);
            self.lat.clear();
            let g = self.guard();
            for j in i..end {
                let off = start + j * l;
                let t = time_write(self.r.at(off), stamp(off));
                self.lat.push(t);
            }
            if self.clean(g) {
                for (k, &t) in self.lat.as_slice().iter().enumerate() {
                    if (i + k) % keep_every == 0 {
                        self.ev
                            .write_points
                            .push((((i + k) * l) as f64, t as f64 / self.tpn));
                    }
                }
            }
            i = end;
        }
        self.say("write policy", 0.92);
        let dirty_miss = self.miss_latency_after(l, start, span);
        // Now the same with clean lines: read twice the cache.
        let clean_start = self.random_line(l, span);
        let mut off = clean_start;
        while off < clean_start + span {
            self.touch(off);
            off += l;
        }
        let clean_miss = self.miss_latency_after(l, clean_start, span);
        self.ev.write_hits = w_hits.clone();
        self.ev.read_hits = r_hits.clone();
        let w = median(&without_outliers(&w_hits));
        let r = median(&without_outliers(&r_hits));
        let thr_ns = self.ns(self.thr);
        let slow_writes = w_hits.iter().filter(|&&t| t >= thr_ns).count();
        // A trap costs microseconds; a write to a writable cached line, even
        // one missing the CPU caches, well under one.
        let trap_ns = (20.0 * r).max(5_000.0);
        let trapped = rewrites.iter().filter(|&&t| t >= trap_ns).count();
        let ratio = dirty_miss / clean_miss;
        let (policy, agree, total) = if 2 * slow_writes > w_hits.len() {
            (WritePolicy::WriteThrough, slow_writes, w_hits.len())
        } else if 2 * trapped > rewrites.len() {
            (WritePolicy::WriteThrough, trapped, rewrites.len())
        } else {
            let fast = w_hits.len() - slow_writes + rewrites.len() - trapped;
            (WritePolicy::WriteBack, fast, w_hits.len() + rewrites.len())
        };
        let mut conf = vote_confidence(agree, total);
        // The eviction side: write-back makes dirty evictions dearer.
        let eviction_agrees = match policy {
            WritePolicy::WriteBack => ratio > 1.1,
            WritePolicy::WriteThrough => ratio <= 1.1,
        };
        if !eviction_agrees {
            conf *= 0.8;
        }
        let evidence = format!(
            "write to a cached line {} vs read {} (first write {}); re-written after {} ms: {} ({}/{} trapped); misses evicting dirty lines {} vs clean {} ({:.2}x)",
            crate::report::ns(w),
            crate::report::ns(r),
            crate::report::ns(median(&first_writes)),
            REWRITE_PAUSE.as_millis(),
            crate::report::ns(median(&rewrites)),
            trapped,
            rewrites.len(),
            crate::report::ns(dirty_miss),
            crate::report::ns(clean_miss),
            ratio
        );
        (policy, conf, evidence)
    }

    /// Waits, then times one more write to each line of `written`
    /// (nanoseconds, undisturbed samples only).
    fn rewrites_after_pause(&mut self, written: &[usize]) -> Vec<f64> {
        std::thread::sleep(REWRITE_PAUSE);
        let mut out = Vec::with_capacity(written.len());
        for &b in written {
            let g = self.guard();
            let t = time_write(self.r.at(b), stamp(b));
            if self.clean(g) {
                out.push(self.ns(t));
            }
        }
        out
    }

    /// Median latency (ns) of reads of 128 fresh lines in random order,
    /// avoiding `[avoid, avoid + span)`.
    fn miss_latency_after(&mut self, l: usize, avoid: usize, span: usize) -> f64 {
        let mut v = Vec::new();
        let mut tries = 0;
        while v.len() < 128 && tries < 1000 {
            tries += 1;
            let b = self.random_line(l, l);
            if b + l > avoid && b < avoid + span {
                continue;
            }
            let g = self.guard();
            let t = self.read(b);
            if self.clean(g) && self.miss(t) {
                v.push(self.ns(t));
            }
        }
        median(&without_outliers(&v))
    }
}

/// Fresh memory handed out in aligned chunks, in random order; a new cleared
/// area is made when one is used up.
#[derive(Default)]
struct FreshChunks {
    off: usize,
    len: usize,
    align: usize,
    order: Vec<u32>,
    next: usize,
}

impl FreshChunks {
    fn take(&mut self, p: &mut Probe<'_>, align: usize) -> usize {
        if self.len == 0 || align != self.align || self.next >= self.order.len() {
            self.align = align;
            self.len = AREA.max(8 * align);
            self.off = p.fresh(self.len, crate::sys::REGION_ALIGN);
            self.order = (0..(self.len / align) as u32).collect();
            p.rng.shuffle(&mut self.order);
            self.next = 0;
        }
        let c = self.order[self.next] as usize;
        self.next += 1;
        self.off + c * align
    }
}

/// The value more than half of `v` share, if any.
fn majority(v: &[usize]) -> Option<usize> {
    let mut counts = std::collections::BTreeMap::new();
    for &x in v {
        *counts.entry(x).or_insert(0usize) += 1;
    }
    counts
        .into_iter()
        .find(|&(_, n)| 2 * n > v.len())
        .map(|(x, _)| x)
}

#[allow(dead_code)]
fn p90(v: &[f64]) -> f64 {
    quantile(v, 0.9)
}

#[cfg(test)]
mod tests {
    use super::majority;

    #[test]
    fn a_majority_needs_more_than_half() {
        assert_eq!(majority(&[4, 4, 1, 2, 4, 4]), Some(4));
        assert_eq!(majority(&[7, 16, 29, 8]), None);
        assert_eq!(majority(&[3, 4]), None);
        assert_eq!(majority(&[]), None);
    }
}
