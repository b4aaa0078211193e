//! The device limit of a run: the pages/s a pager that cost nothing would
//! reach on this device, with this budget and this pattern.
//!
//! A miss costs at least one read of the page, and a program thread that
//! misses waits for it, so `threads` threads can do at most
//! `threads / (miss ratio × mean page read at QD threads)` accesses per
//! second, hits being free. The lowest miss ratio any policy can expect for
//! independent draws is one minus the probability mass of the budget's worth
//! of most probable pages (keeping those is the optimal policy for such
//! draws, Aho, Denning and Ullman's A0). A sequential scan of a working set
//! larger than the budget reads every page, and read-ahead takes its
//! latency off the program's path, so there the limit is the device's
//! sequential read bandwidth.
//!
//! Writes are left out: a write-back can be merged and deferred, a read
//! cannot. So with uniform or zipf draws the limit is an upper bound that
//! no pager reaches, and the share of it says how much of the device a mode
//! turns into accesses. (Pareto and normal draws put hot pages side by
//! side, where a read ahead of one miss can bring in several wanted pages.)

pub use crate::device_ref::DeviceLimit;
use crate::device_ref::{DeviceRef, ReadLatency, Wait};
use crate::pattern::Pattern;
use crate::report::format::human_bytes;
use crate::worker::spec::{Workload, WorkloadSpec};

/// Ranks of a zipf distribution summed term by term; past them the sum is
/// taken as an integral (the midpoint rule's error there is below 1e-12 of
/// the total).
const EXACT_ZIPF_TERMS: u64 = 1 << 20;

/// The limit of `spec` with a budget of `budget_bytes` on `device`, or why
/// there is none.
pub fn device_limit(
    spec: &WorkloadSpec,
    budget_bytes: u64,
    device: &DeviceRef,
) -> Result<DeviceLimit, String> {
    if spec.workload != Workload::Pattern {
        return Err("the scan-resistance workload has no device limit".into());
    }
    let pattern: Pattern = spec.pattern.parse().map_err(|e| format!("{e}"))?;
    let page = spec.page_size.max(1);
    let pages = spec.working_set_bytes / page;
    let budget_pages = budget_bytes / page;
    if budget_pages >= pages {
        return Err("the working set fits in the budget: no access needs the device".into());
    }
    if matches!(pattern, Pattern::Sequential) {
        return bandwidth_limit(device, page);
    }
    let threads = spec.threads.max(1);
    let read = fastest_read(device, page, threads).ok_or_else(|| {
        format!(
            "no {} read at QD{threads} was measured in this run",
            human_bytes(page)
        )
    })?;
    let best = best_hit_ratio(&pattern, pages, budget_pages);
    let seconds_per_access = (1.0 - best) * read.mean_us * 1e-6;
    Ok(DeviceLimit {
        pages_per_sec: threads as f64 / seconds_per_access,
        best_hit_ratio: best,
        basis: format!(
            "{threads} thread(s) / ((1 - {:.1}%) x {:.1}us): every miss waits for one {} \
             read, whose mean at QD{threads} was measured in this run ({}, the faster \
             way); {:.1}% is the best hit ratio a policy can expect, {}; hits and \
             write-back cost nothing",
            best * 100.0,
            read.mean_us,
            human_bytes(page),
            match read.job.wait {
                Wait::Sleep => "asleep in pread",
                Wait::Spin => "spinning for an io_uring completion",
            },
            best * 100.0,
            hit_ratio_basis(&pattern),
        ),
    })
}

/// The quicker way of waiting for reads of `page` bytes at QD `threads`.
fn fastest_read(device: &DeviceRef, page: u64, threads: usize) -> Option<&ReadLatency> {
    device
        .page_reads
        .iter()
        .filter(|read| read.job.block_bytes == page && read.job.threads == threads)
        .min_by(|a, b| a.mean_us.total_cmp(&b.mean_us))
}

fn bandwidth_limit(device: &DeviceRef, page: u64) -> Result<DeviceLimit, String> {
    let mb_s = device
        .seq_read_mb_s
        .ok_or("the device's sequential read bandwidth was not measured")?;
    Ok(DeviceLimit {
        pages_per_sec: mb_s * 1e6 / page as f64,
        best_hit_ratio: 0.0,
        basis: format!(
            "the device's sequential read, {mb_s:.0} MB/s, in {} pages: a scan larger \
             than the budget reads every page",
            human_bytes(page)
        ),
    })
}

fn hit_ratio_basis(pattern: &Pattern) -> &'static str {
    match pattern {
        Pattern::Uniform => "the budget's share of the working set",
        Pattern::Zipf { .. } => "the probability of the budget's worth of most popular ranks",
        Pattern::Pareto { .. } => {
            "the share of accesses the budget's worth of hottest pages receives"
        }
        Pattern::Normal { .. } => {
            "the probability of the budget's worth of pages nearest the center"
        }
        Pattern::Sequential => "none for a scan",
    }
}

/// The probability that a draw of `pattern` over `pages` pages falls on
/// the `budget_pages` most probable of them.
pub fn best_hit_ratio(pattern: &Pattern, pages: u64, budget_pages: u64) -> f64 {
    if budget_pages >= pages {
        return 1.0;
    }
    let share = budget_pages as f64 / pages as f64;
    match *pattern {
        Pattern::Uniform => share,
        Pattern::Zipf { theta } => {
            generalized_harmonic(budget_pages, theta) / generalized_harmonic(pages, theta)
        }
        // Page = n × u^(α/(α-1)) puts the hottest pages first: the first
        // `share` of them is drawn with probability share^((α-1)/α).
        Pattern::Pareto { shape } => share.powf((shape - 1.0) / shape),
        Pattern::Normal { sigma_frac } => {
            central_mass(pages as f64, budget_pages as f64, sigma_frac)
        }
        Pattern::Sequential => 0.0,
    }
}

/// Σ k^-θ for k in 1..=n.
fn generalized_harmonic(n: u64, theta: f64) -> f64 {
    let exact = n.min(EXACT_ZIPF_TERMS);
    // Smallest terms first, for precision.
    let head: f64 = (1..=exact).rev().map(|k| (k as f64).powf(-theta)).sum();
    if n == exact {
        return head;
    }
    let (from, to) = (exact as f64 + 0.5, n as f64 + 0.5);
    let tail = if (theta - 1.0).abs() < 1e-12 {
        (to / from).ln()
    } else {
        (to.powf(1.0 - theta) - from.powf(1.0 - theta)) / (1.0 - theta)
    };
    head + tail
}

/// The normal pattern draws center + σ·Z and mirrors it into [0, n) at
/// both ends: the probability of the `width` pages around the center,
/// which are the most probable (the folded density falls away from it).
fn central_mass(n: f64, width: f64, sigma_frac: f64) -> f64 {
    let sigma = sigma_frac * n;
    let center = n / 2.0;
    let (lo, hi) = (center - width / 2.0, center + width / 2.0);
    let cdf = |x: f64| 0.5 * (1.0 + libm::erf((x - center) / (sigma * std::f64::consts::SQRT_2)));
    // Mirror images of [lo, hi) at every multiple of 2n within 10σ.
    let images = (10.0 * sigma / (2.0 * n)).ceil() as i64 + 1;
    let mut mass = 0.0;
    for k in -images..=images {
        let shift = 2.0 * n * k as f64;
        mass += cdf(hi + shift) - cdf(lo + shift);
        mass += cdf(-lo + shift) - cdf(-hi + shift);
    }
    mass.clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_ref::ReadJob;

    const GIB: u64 = 1 << 30;

    fn spec(pattern: &str, threads: usize) -> WorkloadSpec {
        WorkloadSpec {
            working_set_bytes: 4 * GIB,
            page_size: 4096,
            threads,
            read_percent: 50,
            pattern: pattern.into(),
            duration_s: 10.0,
            warmup_s: 3.0,
            seed: 1,
            workload: Workload::Pattern,
            data: Default::default(),
        }
    }

    fn read(threads: usize, wait: Wait, mean_us: f64) -> ReadLatency {
        ReadLatency {
            job: ReadJob {
                block_bytes: 4096,
                threads,
                wait,
            },
            mean_us,
            reads: 1000,
        }
    }

    /// Reads asleep take `mean_us`, spinning ones 10 µs more.
    fn device(threads: usize, mean_us: f64) -> DeviceRef {
        DeviceRef {
            qd1_read_latency_us: Some(50.0),
            seq_read_mb_s: Some(2000.0),
            page_reads: vec![
                read(threads, Wait::Sleep, mean_us),
                read(threads, Wait::Spin, mean_us + 10.0),
            ],
            ..DeviceRef::default()
        }
    }

    #[test]
    fn the_faster_way_of_waiting_sets_the_limit() {
        let mut spinning_faster = device(1, 60.0);
        spinning_faster.page_reads[1].mean_us = 40.0;
        let limit = device_limit(&spec("uniform", 1), GIB, &spinning_faster).unwrap();
        assert!(
            (limit.pages_per_sec - 1.0 / (0.75 * 40e-6)).abs() < 0.1,
            "{limit:?}"
        );
        assert!(
            limit.basis.contains("spinning for an io_uring completion"),
            "{}",
            limit.basis
        );
        let limit = device_limit(&spec("uniform", 1), GIB, &device(1, 60.0)).unwrap();
        assert!(limit.basis.contains("asleep in pread"), "{}", limit.basis);
    }

    #[test]
    fn uniform_four_gib_in_one_misses_three_accesses_in_four() {
        let limit = device_limit(&spec("uniform", 1), GIB, &device(1, 60.0)).unwrap();
        assert!((limit.best_hit_ratio - 0.25).abs() < 1e-12);
        // 1 / (0.75 × 60 µs)
        assert!((limit.pages_per_sec - 22_222.2).abs() < 0.1, "{limit:?}");
        assert!(
            limit.basis.contains("(1 - 25.0%) x 60.0us"),
            "{}",
            limit.basis
        );
    }

    #[test]
    fn two_threads_double_the_limit_at_their_own_read_latency() {
        let limit = device_limit(&spec("uniform", 2), GIB, &device(2, 80.0)).unwrap();
        assert!((limit.pages_per_sec - 2.0 / (0.75 * 80e-6)).abs() < 0.1);
        // A QD1 figure is not a QD2 one.
        let err = device_limit(&spec("uniform", 2), GIB, &device(1, 80.0)).unwrap_err();
        assert!(err.contains("QD2"), "{err}");
    }

    #[test]
    fn zipf_099_keeps_nine_accesses_in_ten_in_a_quarter_of_the_pages() {
        // The best hit ratio BENCHMARKS.md quotes for zipf: 89.8% for 4 GiB
        // in 1 GiB ("The first targets, against the device limit").
        let best = best_hit_ratio(&Pattern::Zipf { theta: 0.99 }, 1 << 20, 1 << 18);
        assert!((best - 0.898).abs() < 0.0005, "{best}");
    }

    #[test]
    fn the_zipf_tail_integral_matches_the_exact_sum() {
        let n = EXACT_ZIPF_TERMS * 3;
        for theta in [0.5, 0.99, 1.0, 1.2] {
            let exact: f64 = (1..=n).rev().map(|k| (k as f64).powf(-theta)).sum();
            let approx = generalized_harmonic(n, theta);
            assert!(
                (approx / exact - 1.0).abs() < 1e-9,
                "theta {theta}: {approx} vs {exact}"
            );
        }
    }

    #[test]
    fn pareto_gives_the_hottest_fifth_four_accesses_in_five() {
        let shape = 1.0 / (1.0 - (0.8f64).ln() / (0.2f64).ln());
        let best = best_hit_ratio(&Pattern::Pareto { shape }, 1_000_000, 200_000);
        assert!((best - 0.8).abs() < 1e-9, "{best}");
    }

    #[test]
    fn normal_central_mass_matches_the_sampler() {
        use crate::pattern::PageSampler;
        let pattern = Pattern::Normal { sigma_frac: 0.3 };
        let (pages, budget) = (10_000u64, 2_500u64);
        let best = best_hit_ratio(&pattern, pages, budget);
        let mut sampler = PageSampler::new(&pattern, pages, 3, 0, 1);
        let (lo, hi) = (pages / 2 - budget / 2, pages / 2 + budget / 2);
        let draws = 400_000;
        let inside = (0..draws)
            .filter(|_| (lo..hi).contains(&sampler.next_page()))
            .count();
        let seen = inside as f64 / draws as f64;
        assert!(
            (seen - best).abs() < 0.005,
            "sampled {seen}, computed {best}"
        );
        // A wide sigma folds into nearly uniform.
        let wide = best_hit_ratio(&Pattern::Normal { sigma_frac: 50.0 }, pages, budget);
        assert!((wide - 0.25).abs() < 0.01, "{wide}");
    }

    #[test]
    fn a_scan_is_limited_by_the_sequential_bandwidth() {
        let limit = device_limit(&spec("sequential", 1), GIB, &device(1, 60.0)).unwrap();
        assert!((limit.pages_per_sec - 2000.0e6 / 4096.0).abs() < 1e-6);
        assert_eq!(limit.best_hit_ratio, 0.0);
        let no_bandwidth = DeviceRef {
            seq_read_mb_s: None,
            ..device(1, 60.0)
        };
        assert!(device_limit(&spec("sequential", 1), GIB, &no_bandwidth).is_err());
    }

    #[test]
    fn a_working_set_within_the_budget_has_no_limit() {
        let err = device_limit(&spec("uniform", 1), 8 * GIB, &device(1, 60.0)).unwrap_err();
        assert!(err.contains("fits in the budget"), "{err}");
    }
}
