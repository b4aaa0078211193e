//! Robust statistics: medians, percentiles, outlier removal, thresholds.

/// The `q` quantile (0..=1) of `v` (sorted copy, nearest rank).
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let i = ((s.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    s[i]
}

pub fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

pub fn variance(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64
}

/// Drops outliers by the modified z-score (Iglewicz and Hoaglin): values
/// whose distance from the median exceeds 3.5 robust standard deviations
/// (1.4826 × MAD). With a MAD of zero nothing is dropped.
pub fn without_outliers(v: &[f64]) -> Vec<f64> {
    if v.len() < 4 {
        return v.to_vec();
    }
    let m = median(v);
    let dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    let mad = median(&dev) * 1.4826;
    if mad <= 0.0 {
        return v.to_vec();
    }
    v.iter()
        .copied()
        .filter(|x| (x - m).abs() / mad <= 3.5)
        .collect()
}

/// Otsu's threshold on log2 of the values: the split that maximises the
/// between-class variance. Returns the threshold in the values' unit.
pub fn otsu_log(v: &[f64]) -> f64 {
    let logs: Vec<f64> = v.iter().filter(|x| **x > 0.0).map(|x| x.log2()).collect();
    if logs.len() < 2 {
        return f64::NAN;
    }
    let lo = logs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if hi - lo < 1e-9 {
        return 2f64.powf(hi);
    }
    const BINS: usize = 128;
    let mut hist = [0f64; BINS];
    for x in &logs {
        let b = (((x - lo) / (hi - lo)) * (BINS - 1) as f64).round() as usize;
        hist[b] += 1.0;
    }
    let total: f64 = hist.iter().sum();
    let sum_all: f64 = hist.iter().enumerate().map(|(i, h)| i as f64 * h).sum();
    let (mut w0, mut sum0, mut best, mut best_i) = (0.0, 0.0, -1.0, 0);
    for (i, h) in hist.iter().enumerate() {
        w0 += h;
        sum0 += i as f64 * h;
        let w1 = total - w0;
        if w0 == 0.0 || w1 == 0.0 {
            continue;
        }
        let m0 = sum0 / w0;
        let m1 = (sum_all - sum0) / w1;
        let between = w0 * w1 * (m0 - m1) * (m0 - m1);
        if between > best {
            best = between;
            best_i = i;
        }
    }
    2f64.powf(lo + (best_i as f64 + 0.5) / (BINS - 1) as f64 * (hi - lo))
}

/// Share of `n` votes that went the majority's way, as a 0..1 confidence
/// that also grows with the number of votes (1 vote: at most 0.5).
pub fn vote_confidence(agree: usize, total: usize) -> f64 {
    if total == 0 {
        return 0.0;
    }
    let share = agree as f64 / total as f64;
    let weight = 1.0 - 1.0 / (1.0 + total as f64);
    (share * weight).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outliers_are_dropped_and_the_body_kept() {
        let mut v: Vec<f64> = (0..100).map(|i| 100.0 + (i % 7) as f64).collect();
        v.push(10_000.0);
        v.push(-5_000.0);
        let kept = without_outliers(&v);
        assert_eq!(kept.len(), 100);
    }

    #[test]
    fn otsu_splits_a_bimodal_distribution() {
        let mut v: Vec<f64> = (0..500).map(|i| 100.0 + (i % 50) as f64).collect();
        v.extend((0..100).map(|i| 50_000.0 + (i * 100) as f64));
        let t = otsu_log(&v);
        assert!(t > 150.0 && t < 50_000.0, "{t}");
    }

    #[test]
    fn quantiles() {
        let v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(median(&v), 3.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 5.0);
    }
}

/// For a sequence of accesses classified as misses (`true`) and hits, the
/// number of hits that follow each miss up to the next miss (the last run,
/// which no miss closes, is not counted).
pub fn hit_runs_after_misses(classes: &[bool]) -> Vec<usize> {
    let mut runs = Vec::new();
    let mut run: Option<usize> = None;
    for &miss in classes {
        if miss {
            if let Some(r) = run {
                runs.push(r);
            }
            run = Some(0);
        } else if let Some(r) = run.as_mut() {
            *r += 1;
        }
    }
    runs
}

#[cfg(test)]
mod hit_run_tests {
    use super::hit_runs_after_misses;

    #[test]
    fn counts_hits_between_misses() {
        let c = [true, false, false, true, true, false, true, false];
        assert_eq!(hit_runs_after_misses(&c), vec![2, 0, 1]);
        assert!(hit_runs_after_misses(&[false, false]).is_empty());
    }
}
