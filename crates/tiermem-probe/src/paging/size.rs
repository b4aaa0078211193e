//! The cache size test: a block read twice in the same random order hits
//! the second time only if the cache holds it.

use super::{Probe, GRAIN};
use crate::report::Estimate;

/// Re-read hit ratio at which a block counts as fitting in the cache.
const FITS: f64 = 0.9;
/// Fresh blocks a size gets before it is taken not to fit.
const SIZE_TRIES: usize = 3;

impl Probe<'_> {
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

    pub(super) fn cache_size(&mut self, line: usize) -> Estimate {
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
                    tiermem_host::format::bytes_exact_or_mib(lo as u64)
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
                tiermem_host::format::bytes_exact_or_mib(lo as u64),
                100.0 * r_hi,
                tiermem_host::format::bytes_exact_or_mib(hi as u64)
            ),
        }
    }
}
