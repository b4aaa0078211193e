//! The associativity test: lines a set's span apart evict each other once
//! there are more of them than the set has ways.

use super::Probe;
use crate::report::Estimate;
use crate::stats::vote_confidence;

impl Probe<'_> {
    /// The associativity test, with the measured size `c` and line `l`: if
    /// the cache had `w` ways, lines `c / w` apart would share a set, and
    /// reading `w + 1` of them would evict the first. The smallest `w`
    /// for which that happens is the associativity; if none does (up to a
    /// quarter of the cache), the cache is fully associative. Because the
    /// measured size is only approximately the sets' span (a direct-mapped
    /// cache passes the size test up to ~5% beyond its size: only pairs
    /// of lines conflict), spacings within ±11% of `c / w` are tried,
    /// nearest first.
    pub(super) fn associativity(&mut self, c: usize, l: usize) -> Estimate {
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
                        let (ways, spacing) = self.fewest_ways_that_conflict(w, d, l);
                        self.ev.assoc_points.push((ways as f64, 1.0));
                        let apart =
                            |d: usize| tiermem_host::format::bytes_exact_or_mib((d * l) as u64);
                        let how = if ways == w {
                            "fewer ways never did".to_string()
                        } else {
                            format!(
                                "{w} at {} apart first, then {ways} at {} apart, as a cache of {ways} ways would give both",
                                apart(d),
                                apart(spacing)
                            )
                        };
                        return Estimate {
                            value: ways as u64,
                            confidence: vote_confidence(1 + yes, 1 + votes.len())
                                * (1.0 - false_alarms as f64 / (screened_total + 1) as f64),
                            evidence: format!(
                                "{ways} misses on lines {} apart after the first evict it ({}/{} trials); {how}",
                                apart(spacing),
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

    /// A conflict confirmed with `w` ways at spacing `d` also arises in a
    /// cache of fewer ways, whose sets span more: `w / 2` ways conflict at
    /// `2 * d`, where a cache of `w` ways holds those lines without
    /// eviction. A real conflict at fewer ways screened as none (a miss
    /// timed as a hit, on a loaded machine) would otherwise report twice the
    /// ways or more: each halving is tried here, and kept when most of three
    /// usable samples conflict.
    fn fewest_ways_that_conflict(
        &mut self,
        mut w: usize,
        mut d: usize,
        l: usize,
    ) -> (usize, usize) {
        while w > 1 {
            let votes: Vec<bool> = (0..9)
                .filter_map(|_| self.conflict(w / 2, 2 * d, l))
                .take(3)
                .collect();
            if votes.iter().filter(|v| **v).count() < 2 {
                break;
            }
            w /= 2;
            d *= 2;
        }
        (w, d)
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
}
