//! The cache size test: a block read twice in the same random order hits
//! the second time only if the cache holds it.

use super::{Probe, GRAIN};
use crate::report::Estimate;

/// Re-read hit ratio at which a block counts as fitting in the cache. Not
/// lower: a direct-mapped cache still re-reads (2C - s) / s of a block of s
/// bytes when s is over its size C, so a lower bar would take a block 5%
/// over C (at 0.9) or 33% over it (at 0.5) as fitting.
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
        let first = (16 * line).max(256 << 10);
        search(line, first, max, |s, trial| {
            let fit = self.fits(s, line);
            self.say(
                "cache size",
                0.3 + 0.3 * trial as f64 / MAX_SIZE_TRIALS as f64,
            );
            fit
        })
    }
}

/// Runs the cache size search from `first` up to `max`, with `fits(size,
/// trial number)` telling whether a block fits and its best hit ratio.
fn search(
    line: usize,
    first: usize,
    max: usize,
    mut fits: impl FnMut(usize, usize) -> (bool, f64),
) -> Estimate {
    let mut boundary = Boundary::new(line, first, max);
    let mut trials = 0;
    while let Some(s) = boundary.next_size() {
        if trials == MAX_SIZE_TRIALS {
            break;
        }
        trials += 1;
        let (fit, ratio) = fits(s, trials);
        boundary.record(s, fit, ratio);
    }
    boundary.estimate()
}

/// Trials of the whole search (each up to [`SIZE_TRIES`] blocks): doubling
/// and bisection take about 16 at the budgets probed; the rest is room for
/// re-checks that move the boundary up.
const MAX_SIZE_TRIALS: usize = 28;
/// Times the boundary is re-checked from above once the bisection has
/// closed on it.
const RECHECKS: usize = 3;

/// The cache size search: doubling until a block does not fit, then
/// bisection to 1%. A fit proves the cache holds that much, a miss does not
/// prove it cannot (pages an earlier trial warmed may still hold the room,
/// and on a busy machine hits that need the kernel, such as tiermem's
/// probation hits, can take longer than the miss threshold), so:
/// - a fit above a size that missed clears that miss;
/// - once the bisection closes, the size just above the boundary is tried
///   again, and a fit there reopens the search above it.
///
/// The estimate is the largest size that fit.
struct Boundary {
    line: usize,
    first: usize,
    max: usize,
    /// Largest size that fit, and its best re-read hit ratio.
    fit: Option<(usize, f64)>,
    /// Sizes that did not fit, above `fit`, with their best hit ratio.
    missed: Vec<(usize, f64)>,
    worst_fit: f64,
    best_miss: f64,
    rechecks: usize,
    /// The bisection's last close has had its re-check: a miss there ends
    /// the search, a fit reopens it.
    close_rechecked: bool,
}

impl Boundary {
    fn new(line: usize, first: usize, max: usize) -> Boundary {
        Boundary {
            line,
            first,
            max,
            fit: None,
            missed: Vec::new(),
            worst_fit: 1.0,
            best_miss: 0.0,
            rechecks: 0,
            close_rechecked: false,
        }
    }

    fn lo(&self) -> usize {
        self.fit.map_or(0, |(s, _)| s)
    }

    /// The smallest size that did not fit, if any.
    fn hi(&self) -> Option<(usize, f64)> {
        self.missed.iter().copied().min_by_key(|&(s, _)| s)
    }

    /// The next size to try, or `None` when the search is over.
    fn next_size(&mut self) -> Option<usize> {
        let lo = self.lo();
        let Some((hi, _)) = self.hi() else {
            // Still doubling.
            let s = if lo == 0 { self.first } else { 2 * lo };
            return (s <= self.max).then_some(s);
        };
        let lo = lo.max(self.line);
        if (hi - lo) as f64 > 0.01 * lo as f64 && hi - lo > self.line {
            return Some(((lo + hi) / 2 / self.line).max(1) * self.line);
        }
        if self.rechecks == RECHECKS || self.close_rechecked {
            return None;
        }
        self.rechecks += 1;
        self.close_rechecked = true;
        Some(hi)
    }

    fn record(&mut self, s: usize, fit: bool, ratio: f64) {
        if fit {
            self.worst_fit = self.worst_fit.min(ratio);
            if s >= self.lo() {
                self.fit = Some((s, ratio));
            }
            self.missed.retain(|&(m, _)| m > s);
            // A fit reopens the search; the next close gets its own re-check.
            self.close_rechecked = false;
        } else {
            self.best_miss = self.best_miss.max(ratio);
            let lo = self.lo();
            match self.missed.iter_mut().find(|(m, _)| *m == s) {
                Some(m) => m.1 = m.1.max(ratio),
                None if s > lo => self.missed.push((s, ratio)),
                None => {}
            }
        }
    }

    fn estimate(&self) -> Estimate {
        let lo = self.lo();
        let Some((hi, r_hi)) = self.hi() else {
            return Estimate {
                value: lo as u64,
                confidence: 0.2,
                evidence: format!(
                    "every block up to {} fit: the cache is at least that large",
                    tiermem_host::format::bytes_exact_or_mib(lo as u64)
                ),
            };
        };
        let r_lo = self.fit.map_or(0.0, |(_, r)| r);
        let confirmed = if self.close_rechecked { 1.0 } else { 0.5 };
        let confidence =
            (self.worst_fit * (1.0 - self.best_miss.min(1.0))).clamp(0.0, 1.0) * confirmed;
        Estimate {
            value: lo.max(self.line) as u64,
            confidence,
            evidence: format!(
                "re-read hit ratio {:.0}% at {}, {:.0}% at {} (each the best of up to \
                 {SIZE_TRIES} blocks; {} re-check{} of the boundary)",
                100.0 * r_lo,
                tiermem_host::format::bytes_exact_or_mib(lo as u64),
                100.0 * r_hi,
                tiermem_host::format::bytes_exact_or_mib(hi as u64),
                self.rechecks,
                if self.rechecks == 1 { "" } else { "s" }
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: usize = 4096;
    const FIRST: usize = 256 << 10;
    const MAX: usize = 64 << 20;
    const CACHE: usize = 8 << 20;

    /// A block fits iff it is no larger than `cache`; returns the estimate
    /// and the number of trials.
    fn probe(mut fits: impl FnMut(usize) -> bool) -> (Estimate, usize) {
        let mut trials = 0;
        let e = search(LINE, FIRST, MAX, |s, _| {
            trials += 1;
            let fit = fits(s);
            (fit, if fit { 1.0 } else { 0.0 })
        });
        (e, trials)
    }

    #[test]
    fn a_sharp_boundary_is_found_within_one_percent() {
        let (e, trials) = probe(|s| s <= CACHE - 50 * LINE);
        let want = (CACHE - 50 * LINE) as f64;
        assert!(
            e.value as f64 <= want && e.value as f64 >= 0.99 * want,
            "{e:?}"
        );
        assert!(trials <= 20, "{trials} trials");
        assert!(e.confidence > 0.9, "{e:?}");
    }

    #[test]
    fn misses_that_a_later_fit_disproves_do_not_lower_the_estimate() {
        // The first two blocks tried within 15% below the true size miss
        // (room held by earlier trials' warm pages); later ones fit.
        let mut false_misses = 2;
        let (e, _) = probe(|s| {
            if s > CACHE * 85 / 100 && s <= CACHE && false_misses > 0 {
                false_misses -= 1;
                return false;
            }
            s <= CACHE
        });
        assert!(e.value as f64 >= 0.98 * CACHE as f64, "{e:?}");
        assert!(e.value as usize <= CACHE, "{e:?}");
    }

    #[test]
    fn a_cache_larger_than_the_region_is_reported_as_a_lower_bound() {
        let (e, _) = probe(|_| true);
        assert_eq!(e.value as usize, MAX, "{e:?}");
        assert!(e.confidence <= 0.2, "{e:?}");
    }

    #[test]
    fn a_search_that_never_settles_stops_after_its_trial_budget() {
        let mut flip = false;
        let (_, trials) = probe(|s| {
            flip = !flip;
            s <= CACHE || flip
        });
        assert!(trials <= MAX_SIZE_TRIALS, "{trials} trials");
    }
}
