//! The shared latency histogram on synthetic samples: exact summaries,
//! bin precision, merging, the slow-sample quantiles and the JSON form.

use super::*;

fn histogram_of(values: impl IntoIterator<Item = u64>) -> LatencyHistogram {
    let mut histogram = LatencyHistogram::new();
    for ns in values {
        histogram.record(ns);
    }
    histogram
}

/// The sample of rank `ceil(q * n)` (at least 1) of sorted `samples`.
fn exact_quantile(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[test]
fn empty_histogram_reports_zeros() {
    let histogram = LatencyHistogram::new();
    assert_eq!(histogram.count(), 0);
    assert_eq!(histogram.min_ns(), 0);
    assert_eq!(histogram.max_ns(), 0);
    assert_eq!(histogram.mean_ns(), 0.0);
    assert_eq!(histogram.quantile(0.5), 0);
    assert_eq!(histogram.quantile_at_least(10, 0.5), None);
    assert_eq!(histogram.bins().count(), 0);
}

#[test]
fn values_below_2048_are_exact() {
    for ns in [0, 1, 15, 16, 1000, 2047] {
        let histogram = histogram_of([ns, ns, ns]);
        assert_eq!(histogram.quantile(0.5), ns);
        assert_eq!(histogram.bins().collect::<Vec<_>>(), [(ns, ns, 3)]);
    }
    let histogram = histogram_of(0..16);
    for ns in 0..16u64 {
        // Each value is one sixteenth of the samples.
        let q = (ns + 1) as f64 / 16.0;
        assert_eq!(histogram.quantile(q), ns, "q={q}");
    }
}

#[test]
fn quantiles_are_within_a_bin_of_the_exact_ones() {
    let samples: Vec<u64> = (0..200_000u64)
        .map(|i| 50 + (i * 7_919 % 200_000) * (1 + i % 97))
        .collect();
    let histogram = histogram_of(samples.iter().copied());
    let mut sorted = samples.clone();
    sorted.sort_unstable();
    for q in [0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
        let exact = exact_quantile(&sorted, q);
        let reported = histogram.quantile(q);
        assert!(reported >= exact, "q={q}: {reported} < {exact}");
        assert!(
            (reported - exact) as f64 <= exact as f64 / 1024.0,
            "q={q}: {reported} vs {exact}"
        );
    }
    assert_eq!(histogram.min_ns(), sorted[0]);
    assert_eq!(histogram.max_ns(), sorted[sorted.len() - 1]);
    let mean = samples.iter().sum::<u64>() as f64 / samples.len() as f64;
    assert_eq!(histogram.mean_ns(), mean);
}

#[test]
fn quantiles_are_those_of_hdrhistogram_at_three_significant_figures() {
    // `tiermem device` reported these figures from a plain `hdrhistogram`
    // with these bounds before the type was shared.
    let mut plain = Histogram::<u64>::new_with_bounds(1, 120_000_000_000, 3).unwrap();
    let mut histogram = LatencyHistogram::new();
    for i in 1..=100_000u64 {
        let ns = 3_000 + i * i % 1_000_003;
        plain.saturating_record(ns);
        histogram.record(ns);
    }
    for q in [0.0, 0.5, 0.99, 0.999, 1.0] {
        assert_eq!(histogram.quantile(q), plain.value_at_quantile(q), "q={q}");
    }
}

#[test]
fn out_of_range_quantiles_are_clamped() {
    let histogram = histogram_of([10, 20, 30]);
    assert_eq!(histogram.quantile(-5.0), 10);
    assert_eq!(histogram.quantile(2.5), 30);
    assert_eq!(histogram.quantile(f64::NAN), 10);
}

#[test]
fn merge_equals_recording_both() {
    let first: Vec<u64> = (0..10_000).map(|i| i * 37 % 9_001).collect();
    let second: Vec<u64> = (0..5_000).map(|i| 1_000_000 + i * 1_013).collect();
    let mut merged = histogram_of(first.iter().copied());
    merged.merge(&histogram_of(second.iter().copied()));
    let together = histogram_of(first.iter().chain(second.iter()).copied());
    assert_eq!(merged, together);
}

#[test]
fn merge_with_empty_keeps_min() {
    let mut histogram = histogram_of([500, 700]);
    histogram.merge(&LatencyHistogram::new());
    assert_eq!(histogram.min_ns(), 500);
    let mut empty = LatencyHistogram::new();
    empty.merge(&histogram);
    assert_eq!(empty, histogram);
}

#[test]
fn bimodal_slow_quantile_picks_the_slow_mode() {
    // 90% DRAM hits around 100 ns, 10% faults around 50 µs.
    let hits = (0..90_000u64).map(|i| 80 + i % 40);
    let faults = (0..10_000u64).map(|i| 40_000 + i * 2);
    let histogram = histogram_of(hits.chain(faults));
    assert!(histogram.quantile(0.5) < 200);
    let threshold = 10_000;
    assert_eq!(histogram.count_at_least(threshold), 10_000);
    // The 5000th fault is 49_998 ns, in the 32 ns wide bin 49_984..=50_015.
    assert_eq!(histogram.quantile_at_least(threshold, 0.5), Some(50_015));
    assert_eq!(histogram.quantile_at_least(threshold, 1.0), Some(59_999));
    assert_eq!(histogram.quantile_at_least(threshold, 0.0), Some(40_000));
    assert_eq!(histogram.quantile_at_least(1_000_000, 0.5), None);
}

#[test]
fn slow_quantile_never_reports_below_threshold() {
    let histogram = histogram_of([10_000, 10_001, 10_002, 10_050]);
    let slow = histogram.quantile_at_least(10_050, 0.5);
    assert!(slow.is_some_and(|value| value >= 10_050), "{slow:?}");
}

#[test]
fn serde_roundtrip_is_exact() {
    let histogram = histogram_of((0..1000).map(|i| i * i * 7).chain([0, MAX_TRACKED_NS]));
    let json = serde_json::to_string(&histogram).unwrap();
    let back: LatencyHistogram = serde_json::from_str(&json).unwrap();
    assert_eq!(back, histogram);
    assert_eq!(back.sum_ns(), histogram.sum_ns());

    let empty = LatencyHistogram::new();
    let back: LatencyHistogram =
        serde_json::from_str(&serde_json::to_string(&empty).unwrap()).unwrap();
    assert_eq!(back, empty);
}

#[test]
fn the_json_form_names_its_fields() {
    let json = serde_json::to_value(histogram_of([150, 150, 40_000])).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "count": 3, "sum_ns": 40_300, "min_ns": 150, "max_ns": 40_000,
            "bins": [[150, 2], [40_031, 1]],
        })
    );
}

#[test]
fn malformed_json_is_rejected() {
    let bad_value =
        r#"{"count":1,"sum_ns":1,"min_ns":1,"max_ns":1,"bins":[[18446744073709551615,1]]}"#;
    let error = serde_json::from_str::<LatencyHistogram>(bad_value).unwrap_err();
    assert!(error.to_string().contains("out of range"), "{error}");
    let bad_count = r#"{"count":2,"sum_ns":1,"min_ns":1,"max_ns":1,"bins":[[8,1]]}"#;
    let error = serde_json::from_str::<LatencyHistogram>(bad_count).unwrap_err();
    assert!(error.to_string().contains("does not match"), "{error}");
}

#[test]
fn huge_values_land_in_the_top_bin_and_stay_exact_in_the_summary() {
    let mut histogram = histogram_of([u64::MAX, u64::MAX, 1 << 63, 0]);
    histogram.merge(&histogram.clone());
    assert_eq!(histogram.count(), 8);
    assert_eq!(histogram.max_ns(), u64::MAX);
    assert_eq!(histogram.sum_ns(), u64::MAX);
    assert!(histogram.quantile(1.0) >= MAX_TRACKED_NS);
    assert_eq!(histogram.count_at_least(MAX_TRACKED_NS), 6);
    assert!(histogram.quantile_at_least(MAX_TRACKED_NS, 0.5).is_some());
}

#[test]
fn bins_cover_every_sample_low_to_high() {
    let histogram = histogram_of([5, 5, 150, 40_000]);
    let bins: Vec<(u64, u64, u64)> = histogram.bins().collect();
    assert_eq!(bins.iter().map(|b| b.2).sum::<u64>(), 4);
    assert_eq!(bins[0], (5, 5, 2));
    assert!(bins.windows(2).all(|w| w[0].1 < w[1].0), "{bins:?}");
    assert!(bins.iter().all(|&(low, high, _)| low <= high));
    assert!(bins[2].0 <= 40_000 && 40_000 <= bins[2].1, "{bins:?}");
}

#[test]
fn debug_shows_the_summary_and_non_empty_bins() {
    let text = format!("{:?}", histogram_of([7, 7]));
    assert_eq!(
        text,
        "LatencyHistogram { count: 2, sum_ns: 14, min_ns: 7, max_ns: 7, bins: [(7, 7, 2)] }"
    );
}
