//! `--target dram`: the same five questions asked of the CPU's caches, whose
//! organization is known, so that a wrong answer here shows the method
//! itself is wrong.
//!
//! At this scale a miss costs ~100 ns and a hit ~1 ns, next to a timing
//! overhead of ~10–30 ns, so single accesses are classified against a
//! calibrated threshold, the cache is cleared line by line with clflush, and
//! sizes come from pointer chasing (one dependent load after another over a
//! random cyclic permutation: the average load latency by working-set size
//! steps up at each cache level).

use crate::report::{Estimate, Evidence, Report, WritePolicy};
use crate::stats::{median, vote_confidence, without_outliers};
use crate::sys::{clflush, time_read, time_write, IrqCounter, Region, Rng};

const LINE_GUESS_MAX: usize = 4096;

pub struct CpuProbe<'a> {
    r: Region,
    irq: Option<IrqCounter>,
    rng: Rng,
    tpn: f64,
    thr: u64,
    /// Median miss latency, in ticks.
    miss: u64,
    sink: u8,
    progress: &'a mut dyn FnMut(&str, f64),
    disturbed: u64,
    batches: u64,
    ev: Evidence,
    notes: Vec<String>,
}

impl<'a> CpuProbe<'a> {
    pub fn new(
        cpu: usize,
        seed: u64,
        tpn: f64,
        progress: &'a mut dyn FnMut(&str, f64),
    ) -> anyhow::Result<Self> {
        let r = Region::new(128 << 20, true)?;
        // Fault everything in first.
        let mut off = 0;
        while off < r.len {
            // SAFETY: inside the region.
            unsafe { std::ptr::write_volatile(r.at(off), 1) };
            off += 4096;
        }
        Ok(CpuProbe {
            r,
            irq: IrqCounter::open(cpu),
            rng: Rng::new(seed),
            tpn,
            thr: 0,
            miss: 0,
            sink: 0,
            progress,
            disturbed: 0,
            batches: 0,
            ev: Evidence::default(),
            notes: Vec::new(),
        })
    }

    fn read(&mut self, off: usize) -> u64 {
        time_read(self.r.at(off), &mut self.sink)
    }

    fn flush(&self, off: usize) {
        clflush(self.r.at(off));
    }

    fn guard(&mut self) -> Option<u64> {
        self.irq.as_mut().and_then(|c| c.read())
    }

    /// Follows `loads` links from `p` under an interrupt guard; the mean
    /// nanoseconds per load, or None if a timer interrupt disturbed it.
    ///
    /// # Safety
    /// As for [`chase`].
    unsafe fn timed_chase(&mut self, base: *mut u8, p: usize, loads: usize) -> Option<f64> {
        let g = self.guard();
        let t0 = std::time::Instant::now();
        let p = chase(base, p, loads);
        let el = t0.elapsed().as_nanos() as f64;
        self.sink = self.sink.wrapping_add(p as u8);
        self.clean(g).then(|| el / loads as f64)
    }

    fn clean(&mut self, start: Option<u64>) -> bool {
        self.batches += 1;
        let end = self.irq.as_mut().and_then(|c| c.read());
        let ok = !matches!((start, end), (Some(a), Some(b)) if a != b);
        if !ok {
            self.disturbed += 1;
        }
        ok
    }

    fn page(&mut self) -> usize {
        self.rng.below(self.r.len / 4096 - 2) * 4096
    }

    pub fn run(mut self) -> anyhow::Result<Report> {
        let started = std::time::Instant::now();
        (self.progress)("calibrating", 0.0);
        let (hit, miss) = self.calibrate();
        (self.progress)("line size", 0.1);
        let line = self.line_size();
        let l = line.value as usize;
        (self.progress)("cache sizes", 0.25);
        let (size, levels) = self.cache_sizes(l);
        (self.progress)("prefetch", 0.7);
        let prefetch = self.prefetch(l);
        (self.progress)("associativity", 0.75);
        let assoc = self.associativity(size.value as usize, l, levels.get(1).copied());
        (self.progress)("write policy", 0.9);
        let (wp, wp_conf, wp_ev) = self.write_policy();
        (self.progress)("done", 1.0);
        self.notes.push(format!(
            "cache levels found by pointer chasing: {}",
            levels
                .iter()
                .map(|b| tiermem_host::format::bytes_exact_or_mib(*b as u64))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if let Some(sys) = sysfs_caches() {
            self.notes.push(format!("the kernel reports: {sys}"));
        }
        Ok(Report {
            target: String::new(),
            cache_size: size,
            line_size: line,
            associativity: assoc,
            prefetch,
            write_policy: wp,
            write_policy_confidence: wp_conf,
            write_policy_evidence: wp_ev,
            hit_ns: hit,
            miss_ns: miss,
            disturbed_batches: self.disturbed,
            total_batches: self.batches,
            seconds: started.elapsed().as_secs_f64(),
            notes: std::mem::take(&mut self.notes),
            evidence: std::mem::take(&mut self.ev),
        })
    }

    /// Hit: a line read twice. Miss: a line read right after clflush.
    fn calibrate(&mut self) -> (f64, f64) {
        let (mut hits, mut misses) = (Vec::new(), Vec::new());
        while misses.len() < 400 {
            let p = self.page() + self.rng.below(64) * 64;
            let _ = self.read(p);
            let g = self.guard();
            let h = self.read(p);
            self.flush(p);
            let m = self.read(p);
            if self.clean(g) {
                hits.push(h as f64);
                misses.push(m as f64);
            }
        }
        let h = median(&without_outliers(&hits));
        let m = median(&without_outliers(&misses));
        self.thr = (h * m).sqrt() as u64;
        self.miss = m as u64;
        self.ev.threshold_ns = self.thr as f64 / self.tpn;
        (h / self.tpn, m / self.tpn)
    }

    /// Two methods. Decisive: load `a`, clflush `a + x`, time `a` again: it
    /// misses iff `a + x` shares its line (clflush works per line), so the
    /// line is the smallest power of two `x` after which `a` survives.
    /// For the figures: pairs after flushing (first read `a + x`,
    /// then `a`), whose second read is fast within a line.
    fn line_size(&mut self) -> Estimate {
        let mut line = 0;
        let mut agree = 0;
        let mut total = 0;
        let mut x = 1;
        while x <= LINE_GUESS_MAX {
            let (mut survived, mut n) = (0, 0);
            while n < 41 {
                let a = self.page();
                let _ = self.read(a);
                let g = self.guard();
                self.flush(a + x);
                let t = self.read(a);
                if self.clean(g) {
                    n += 1;
                    survived += (t < self.thr) as usize;
                }
            }
            let same = 2 * survived < n;
            total += n;
            agree += if same { n - survived } else { survived };
            for _ in 0..8 {
                let a = self.page();
                for d in [x - 1, x] {
                    self.flush(a);
                    self.flush(a + d);
                    let g = self.guard();
                    let t1 = self.read(a + d);
                    let t2 = self.read(a);
                    if self.clean(g) && d == x {
                        self.ev.line_first_reverse.push(t1 as f64 / self.tpn);
                        self.ev.line_second.push((x as f64, t2 as f64 / self.tpn));
                    }
                }
                self.flush(a);
                self.flush(a + x);
                let g = self.guard();
                let t1 = self.read(a);
                let _ = self.read(a + x);
                if self.clean(g) {
                    self.ev.line_first_forward.push(t1 as f64 / self.tpn);
                }
            }
            if !same && line == 0 {
                line = x;
            }
            if line != 0 && x >= 4 * line {
                break;
            }
            x *= 2;
        }
        Estimate {
            value: line as u64,
            confidence: vote_confidence(agree, total),
            evidence: format!(
                "clflush(a + x) evicts a for x < {line} only ({agree}/{total} samples agree)"
            ),
        }
    }

    /// Average latency of a dependent chase over `bytes` (ns per load).
    fn chase(&mut self, bytes: usize, l: usize, guess_ns: f64) -> f64 {
        let lines = (bytes / l).max(2);
        let mut order: Vec<usize> = (0..lines).collect();
        self.rng.shuffle(&mut order);
        let base = self.r.base;
        for i in 0..lines {
            let from = order[i] * l;
            let to = order[(i + 1) % lines] * l;
            // SAFETY: both offsets lie inside the region; 8-byte aligned.
            unsafe { (base.add(from) as *mut usize).write(to) };
        }
        // A batch must be short next to the 4 ms timer tick (HZ=250), or
        // nearly every one would be disturbed: about 10k loads.
        // ~200 µs per batch: long enough for the clock, short next to a tick.
        let loads = ((200_000.0 / guess_ns.max(0.5)) as usize).clamp(2_000, 200_000);
        let mut samples = Vec::new();
        let mut tries = 0;
        while samples.len() < 9 && tries < 40 {
            tries += 1;
            // Warm pass.
            // SAFETY: every stored link is an in-region offset.
            let p = unsafe { chase(base, 0, lines.min(loads)) };
            // SAFETY: as above.
            if let Some(ns) = unsafe { self.timed_chase(base, p, loads) } {
                samples.push(ns);
            }
        }
        if samples.is_empty() {
            f64::NAN
        } else {
            median(&samples)
        }
    }

    /// Latency by working set, quarter octaves from 4 KiB to 64 MiB; a
    /// level ends where the latency starts rising after a flat stretch.
    fn cache_sizes(&mut self, l: usize) -> (Estimate, Vec<usize>) {
        let mut sizes = Vec::new();
        let mut s = 4096f64;
        while s <= (64 << 20) as f64 {
            sizes.push((s as usize).next_multiple_of(l));
            s *= 2f64.powf(0.25);
        }
        let mut lat: Vec<f64> = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            let guess = lat.last().copied().filter(|v| v.is_finite()).unwrap_or(2.0);
            let v = self.chase(s, l, guess);
            lat.push(v);
            self.ev.size_points.push((s as f64, v));
            (self.progress)("cache sizes", 0.25 + 0.45 * i as f64 / sizes.len() as f64);
        }
        let levels = levels_of(&sizes, &lat);
        let l1 = levels.first().copied().unwrap_or(0);
        let plateau = lat.iter().take(4).copied().fold(f64::INFINITY, f64::min);
        let sizes_at = |b: usize| {
            sizes
                .iter()
                .position(|&s| s >= b)
                .unwrap_or(sizes.len() - 1)
        };
        let confidence = if l1 == 0 {
            0.0
        } else {
            let i = sizes_at(l1);
            let after = lat.get(i + 4).copied().unwrap_or(plateau);
            (1.0 - plateau / after).clamp(0.0, 1.0)
        };
        (
            Estimate {
                value: l1 as u64,
                confidence,
                evidence: format!(
                    "first level (L1d) of the pointer-chase curve, {:.1} ns per load inside it, {:.1} ns at 4x",
                    plateau,
                    lat.get(sizes_at(l1 * 4)).copied().unwrap_or(f64::NAN)
                ),
            },
            levels,
        )
    }

    fn prefetch(&mut self, l: usize) -> Estimate {
        let mut runs = Vec::new();
        for _ in 0..32 {
            let a = self.page();
            for j in 0..64 {
                self.flush(a + j * l);
            }
            let mut classes = Vec::with_capacity(64);
            let g = self.guard();
            for j in 0..64 {
                let t = self.read(a + j * l);
                classes.push(t >= self.thr);
                self.ev.prefetch_walk.push((j as f64, t as f64 / self.tpn));
                if j == 0 {
                    self.ev.prefetch_first.push(t as f64 / self.tpn);
                }
            }
            if !self.clean(g) || !classes[0] {
                continue;
            }
            runs.extend(crate::stats::hit_runs_after_misses(&classes));
        }
        if runs.is_empty() {
            return Estimate::default();
        }
        let mut s = runs.clone();
        s.sort_unstable();
        let p = s[s.len() / 2];
        let agree = runs.iter().filter(|&&r| r == p).count();
        Estimate {
            value: p as u64,
            confidence: vote_confidence(agree, runs.len()),
            evidence: format!(
                "hits after each miss in sequential walks: median {p} (the CPU's prefetchers adapt; runs {:?}...)",
                &runs[..runs.len().min(10)]
            ),
        }
    }

    /// Average ns per load of a dependent chase around `k` lines `step`
    /// bytes apart (median of clean batches).
    fn chase_set(&mut self, k: usize, step: usize) -> f64 {
        let base = self.r.base;
        let start = self.page() % (self.r.len - (k + 1) * step);
        for i in 0..k {
            let from = start + i * step;
            let to = start + ((i + 1) % k) * step;
            // SAFETY: in-region, 8-byte aligned offsets.
            unsafe { (base.add(from) as *mut usize).write(to) };
        }
        let loads = 20_000;
        let mut samples = Vec::new();
        let mut tries = 0;
        while samples.len() < 7 && tries < 30 {
            tries += 1;
            // SAFETY: every link is an in-region offset.
            let p = unsafe { chase(base, start, 4 * k) };
            // SAFETY: as above.
            if let Some(ns) = unsafe { self.timed_chase(base, p, loads) } {
                samples.push(ns);
            }
        }
        median(&samples)
    }

    /// L1 associativity, by the method of the paging test (`paging`), with
    /// chasing instead of single timed loads (an L1 and an L2 hit differ by
    /// less than the timing overhead): `w + 1` lines one way apart all fall
    /// into one set of a `w`-way cache, so chasing around them misses L1 on
    /// every load once `w` reaches the associativity. A way spans a power of
    /// two (sets are indexed by address bits): the one nearest to the
    /// measured size / `w`.
    fn associativity(&mut self, c: usize, l: usize, _l2: Option<usize>) -> Estimate {
        if c < 4 * l {
            return Estimate::default();
        }
        let base_lat = self.chase_set(2, 64);
        let mut w = 1;
        let mut lats = Vec::new();
        while c / w >= l && w <= 64 {
            let step = 1usize << ((c as f64 / w as f64).log2().round() as u32);
            let lat = self.chase_set(w + 1, step);
            lats.push(lat);
            self.ev.assoc_points.push((w as f64, lat / base_lat));
            if lat > 1.5 * base_lat {
                // Confirm: one way fewer must stay in L1.
                let below = if w > 1 {
                    self.chase_set(w, step)
                } else {
                    base_lat
                };
                let confirmed = below < 1.25 * base_lat;
                return Estimate {
                    value: w as u64,
                    confidence: if confirmed { 0.9 } else { 0.4 },
                    evidence: format!(
                        "L1: chasing {} lines {} apart takes {lat:.1} ns per load, {} lines {below:.1} ns (L1 hit {base_lat:.1} ns)",
                        w + 1,
                        tiermem_host::format::bytes_exact_or_mib(step as u64),
                        w
                    ),
                };
            }
            w *= 2;
        }
        Estimate {
            value: 0,
            confidence: 0.3,
            evidence: format!(
                "no L1 set conflict up to {} ways (ns per load {lats:.1?}, L1 hit {base_lat:.1})",
                w / 2
            ),
        }
    }

    fn write_policy(&mut self) -> (WritePolicy, f64, String) {
        let (mut w, mut r) = (Vec::new(), Vec::new());
        while w.len() < 200 {
            let a = self.page();
            let _ = self.read(a);
            let g = self.guard();
            let tw = time_write(self.r.at(a), 3);
            let tr = self.read(a);
            if self.clean(g) {
                w.push(tw as f64 / self.tpn);
                r.push(tr as f64 / self.tpn);
            }
        }
        // Writes over 2 MiB of flushed lines, for figure 4.5.
        let a = self.page() % (self.r.len - (2 << 20));
        for i in (0..(2 << 20)).step_by(4096) {
            self.flush(a + i);
        }
        for i in (0..(2 << 20)).step_by(4096) {
            let t = time_write(self.r.at(a + i), 5);
            self.ev.write_points.push((i as f64, t as f64 / self.tpn));
        }
        let mw = median(&without_outliers(&w));
        let mr = median(&without_outliers(&r));
        // A write-through write waits for memory, about a miss; a write-back
        // write costs a hit plus the fence. Split halfway between a read hit
        // and a miss: the hit/miss threshold (a geometric mean) sits too
        // close to a fenced write hit, and noise pushed writes over it.
        let thr_ns = (mr + self.miss as f64 / self.tpn) / 2.0;
        let slow = w.iter().filter(|&&t| t >= thr_ns).count();
        self.ev.write_hits = w.clone();
        self.ev.read_hits = r;
        let (policy, agree) = if 2 * slow > w.len() {
            (WritePolicy::WriteThrough, slow)
        } else {
            (WritePolicy::WriteBack, w.len() - slow)
        };
        (
            policy,
            vote_confidence(agree, w.len()),
            format!(
                "a write to a cached line takes {} (a read {}): it does not wait for memory",
                tiermem_host::format::ns_spaced(mw),
                tiermem_host::format::ns_spaced(mr)
            ),
        )
    }
}

/// Cache levels in a latency-by-size curve. The curve is cut into flat
/// stretches (plateaus: steps under 12%, within 30%) and rises between them; a level's
/// size is where a quarter of its rise is done (latency a quarter of the
/// way between the two plateaus: the first misses), in log size.
fn levels_of(sizes: &[usize], lat: &[f64]) -> Vec<usize> {
    let n = lat.len();
    let mut plateaus: Vec<(usize, usize)> = Vec::new(); // index ranges
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && lat[j + 1] / lat[j] < 1.12 && lat[j + 1] / lat[i] < 1.3 {
            j += 1;
        }
        if j > i {
            plateaus.push((i, j));
        }
        i = j + 1;
    }
    let mut levels = Vec::new();
    for w in plateaus.windows(2) {
        let ((a0, a1), (b0, _)) = (w[0], w[1]);
        let la = crate::stats::median(&lat[a0..=a1]);
        let lb = lat[b0];
        if lb < la * 1.5 {
            continue;
        }
        let half = la + 0.25 * (lb - la);
        let Some(k) = (a1 + 1..=b0).find(|&k| lat[k] >= half) else {
            continue;
        };
        let (x0, x1) = ((sizes[k - 1] as f64).log2(), (sizes[k] as f64).log2());
        let f = ((half - lat[k - 1]) / (lat[k] - lat[k - 1])).clamp(0.0, 1.0);
        let c = 2f64.powf(x0 + f * (x1 - x0));
        levels.push(c as usize / 64 * 64);
    }
    levels
}

/// `/sys/devices/system/cpu/cpu0/cache`, e.g. "L1d 32K 8-way 64 B lines, ...".
pub fn sysfs_caches() -> Option<String> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut out = Vec::new();
    for i in 0..8 {
        let d = dir.join(format!("index{i}"));
        let get = |f: &str| {
            std::fs::read_to_string(d.join(f))
                .ok()
                .map(|s| s.trim().to_string())
        };
        let Some(level) = get("level") else { break };
        let ty = get("type").unwrap_or_default();
        if ty == "Instruction" {
            continue;
        }
        let short = match ty.as_str() {
            "Data" => "d",
            _ => "",
        };
        out.push(format!(
            "L{level}{short} {} {}-way {} B lines",
            get("size").unwrap_or_default(),
            get("ways_of_associativity").unwrap_or_default(),
            get("coherency_line_size").unwrap_or_default()
        ));
    }
    (!out.is_empty()).then(|| out.join(", "))
}

/// Follows `n` links of a pointer chain stored in the region at `base`,
/// starting at offset `p`; returns the offset reached.
///
/// # Safety
/// Every link reachable from `p` must be an 8-byte aligned offset inside
/// the region at `base`.
unsafe fn chase(base: *mut u8, mut p: usize, n: usize) -> usize {
    for _ in 0..n {
        p = (base.add(p) as *const usize).read_volatile();
    }
    p
}
