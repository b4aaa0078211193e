//! The write policy test: write hits against read hits, written lines
//! written again after a pause, and misses that evict dirty lines against
//! misses that evict clean ones.

use super::{stamp, Probe, GRAIN};
use crate::report::WritePolicy;
use crate::stats::{median, vote_confidence, without_outliers};
use crate::sys::time_write;

/// How long written lines are left alone before they are written again:
/// long enough for a write-through pager to have copied them out.
const REWRITE_PAUSE: std::time::Duration = std::time::Duration::from_millis(40);

impl Probe<'_> {
    /// Write hits against read hits (a write-through cache pays the backing
    /// store on every write), written lines re-written after a pause (a
    /// cache that sees writes a page at a time writes through by copying
    /// the line out behind the writer and watching it again: the re-write
    /// traps), and misses that evict dirty lines against misses that evict
    /// clean ones (a write-back cache pays at eviction).
    pub(super) fn write_policy(&mut self, c: usize, l: usize) -> (WritePolicy, f64, String) {
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
            tiermem_host::format::ns_spaced(w),
            tiermem_host::format::ns_spaced(r),
            tiermem_host::format::ns_spaced(median(&first_writes)),
            REWRITE_PAUSE.as_millis(),
            tiermem_host::format::ns_spaced(median(&rewrites)),
            trapped,
            rewrites.len(),
            tiermem_host::format::ns_spaced(dirty_miss),
            tiermem_host::format::ns_spaced(clean_miss),
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
