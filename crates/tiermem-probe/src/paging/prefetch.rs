//! The prefetch test: fresh lines read one after another, counting the
//! hits that follow each miss.

use super::{Probe, AREA, GRAIN};
use crate::report::Estimate;
use crate::stats::{median, vote_confidence};

/// Sequential walks of the prefetch test.
const PREFETCH_WALKS: usize = 6;

impl Probe<'_> {
    /// Reads fresh lines one after another at a stride of one line and
    /// counts the hits that follow each miss: a cache that fetches `P`
    /// extra lines on a miss shows miss, P hits, miss, P hits...
    pub(super) fn prefetch(&mut self, line: usize) -> Estimate {
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
