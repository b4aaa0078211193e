//! The line size test: reverse pairs of reads, which hit the second time
//! only when both fall in one line.

use super::{Probe, AREA, MIN_LINE};
use crate::report::Estimate;
use crate::stats::vote_confidence;

/// Largest line the line test distinguishes.
const MAX_LINE_LOG2: u32 = 21;

impl Probe<'_> {
    /// Reverse pairs (the line size test): read `a + x`, then `a`
    /// with `a` aligned to the power of two above `x`. The second read hits
    /// only when both are in one line; reading backwards keeps a forward
    /// prefetcher from faking it. Returns (hit, valid) for one sample.
    ///
    /// The second read counts as a hit only if it took no fault: a line
    /// comes in whole, mapped at once. The miss threshold would not do:
    /// it is half the median first read, and with a prefetcher a first read
    /// waits for the whole prefetch group, so a lone miss of `a` (its
    /// followers already in) took 0.4 to 0.8 of the pair's first read and
    /// could fall under it.
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
        Some(self.without_fault(t2))
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

    pub(super) fn line_size(&mut self) -> Estimate {
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
                        tiermem_host::format::bytes_exact_or_mib(1 << mid)
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
        let line = self.smallest_line_confirmed(1usize << lo, &mut area);
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
                tiermem_host::format::bytes_exact_or_mib(line as u64)
            ),
        }
    }

    /// `line`, or a smaller line when pairs half of it apart are confirmed
    /// to be in two lines. A second read that hits for another reason (a
    /// page left resident by the clearing, or brought in by the target's
    /// prefetcher) counts as "one line", and three such in a bisection
    /// step's five samples double the line reported; a miss has no such
    /// cause. So each halving is tried with nine samples and kept when most
    /// of them miss.
    fn smallest_line_confirmed(&mut self, mut line: usize, area: &mut FreshChunks) -> usize {
        while line / 2 >= MIN_LINE {
            let (same, n) = self.same_line_votes(line / 2, 9, area);
            if n == 0 || 2 * same >= n {
                break;
            }
            self.notes.push(format!(
                "line size: the bisection gave {}, but {} of {n} pairs {} apart were in two lines",
                tiermem_host::format::bytes_exact_or_mib(line as u64),
                n - same,
                tiermem_host::format::bytes_exact_or_mib((line / 2) as u64)
            ));
            line /= 2;
        }
        line
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
