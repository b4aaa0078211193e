//! Zipf-distributed ranks by rejection-inversion, for the zipf pattern.

use super::rng::Xoshiro256PlusPlus;

/// Zipf ranks in `[1, n]` with P(r) ∝ r^-theta, by Hörmann and Derflinger's
/// rejection-inversion ("Rejection-inversion to generate variates from
/// monotone discrete distributions", 1996).
///
/// Exact for every theta > 0, O(1) setup and memory, and it nearly always
/// accepts the first candidate. `rand_distr::Zipf` rejects most candidates
/// near theta = 1 and was measured at ~230 ns per sample for theta 0.99.
///
/// The acceptance test costs four `exp`/`ln` calls, so for the hottest
/// ranks (where most samples land and the cheap squeeze test often fails)
/// it is precomputed as a threshold on `x`, leaving one `ln_1p` and one
/// `exp` per sample.
#[derive(Clone, Debug)]
pub(super) struct ZipfRanks {
    n: u64,
    theta: f64,
    /// H(1.5) - h(1): makes rank 1 always accepted.
    h_integral_x1: f64,
    h_integral_n: f64,
    /// `accept_from[k - 1]`: candidate rank k is accepted iff x >= this.
    accept_from: Vec<f64>,
    /// Beyond the table, candidates with `k - x` at most this are accepted
    /// without evaluating the full test. It grows with k, so the value for
    /// the first rank past the table is valid for all later ones.
    tail_squeeze: f64,
}

/// Ranks with a precomputed acceptance threshold (8 KiB per sampler).
const ZIPF_THRESHOLD_TABLE_LEN: u64 = 1024;

impl ZipfRanks {
    pub(super) fn new(n: u64, theta: f64) -> Self {
        Self::with_table_len(n, theta, ZIPF_THRESHOLD_TABLE_LEN)
    }

    pub(super) fn with_table_len(n: u64, theta: f64, table_len: u64) -> Self {
        let mut ranks = ZipfRanks {
            n,
            theta,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            accept_from: Vec::new(),
            tail_squeeze: 0.0,
        };
        ranks.h_integral_x1 = ranks.h_integral(1.5) - 1.0;
        ranks.h_integral_n = ranks.h_integral(n as f64 + 0.5);
        let table_len = table_len.clamp(1, n);
        ranks.accept_from = (1..=table_len)
            .map(|rank| ranks.acceptance_threshold(rank))
            .collect();
        let first_untabled = (table_len + 1) as f64;
        ranks.tail_squeeze = first_untabled - ranks.acceptance_threshold(table_len + 1);
        ranks
    }

    /// Smallest x for which candidate `rank` passes the exact test
    /// `u >= H(rank + 1/2) - h(rank)` (H is increasing, so is its inverse).
    fn acceptance_threshold(&self, rank: u64) -> f64 {
        let rank = rank as f64;
        self.h_integral_inverse(self.h_integral(rank + 0.5) - self.h(rank))
    }

    #[inline]
    pub(super) fn sample(&self, rng: &mut Xoshiro256PlusPlus) -> u64 {
        loop {
            let u = self.h_integral_n + rng.unit_f64() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            // `as` saturates; the clamp absorbs float error at both ends.
            let k = ((x + 0.5) as u64).clamp(1, self.n);
            if self.accepts(k, x, u) {
                return k;
            }
        }
    }

    #[inline]
    fn accepts(&self, k: u64, x: f64, u: f64) -> bool {
        match self.accept_from.get((k - 1) as usize) {
            Some(&threshold) => x >= threshold,
            None => {
                let kf = k as f64;
                kf - x <= self.tail_squeeze || u >= self.h_integral(kf + 0.5) - self.h(kf)
            }
        }
    }

    /// The unnormalized density x^-theta.
    fn h(&self, x: f64) -> f64 {
        (-self.theta * x.ln()).exp()
    }

    /// ∫ h from 1 to x: (x^(1-theta) - 1) / (1 - theta), stable at theta = 1.
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        exp_m1_over_x((1.0 - self.theta) * log_x) * log_x
    }

    #[inline]
    fn h_integral_inverse(&self, x: f64) -> f64 {
        // Float error can push t just below -1, where ln(1 + t) is undefined.
        let t = (x * (1.0 - self.theta)).max(-1.0);
        (ln_1p_over_x(t) * x).exp()
    }
}

/// ln(1 + x) / x, continuous at 0.
fn ln_1p_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x - 1) / x, continuous at 0.
fn exp_m1_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}
