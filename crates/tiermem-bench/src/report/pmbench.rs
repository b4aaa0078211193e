//! The latency histogram as pmbench prints it (`tiermem bench --histograms`).
//!
//! pmbench readers know its layout: one line per power of two of
//! nanoseconds, each split into 16 linear sub-bins. The shared histogram
//! ([`tiermem_host::histogram`]) keeps finer bins, each inside exactly one
//! of these sub-bins (its bins below 2048 ns are single values, above that
//! aligned power-of-two ranges at most 1/1024 of their values wide), so the
//! sub-bin counts printed here are exact.

use tiermem_host::histogram::LatencyHistogram;

use super::format::human_ns;

/// Number of log2 buckets: one per bit of a `u64` nanosecond value.
const BUCKETS: usize = 64;
/// log2 of the number of linear sub-bins per bucket.
const SUB_BIN_BITS: u32 = 4;
/// Linear sub-bins per log2 bucket.
const SUB_BINS: usize = 1 << SUB_BIN_BITS;
/// Width of the text bar.
const BAR_WIDTH: usize = 6;

/// The log2 bucket and linear sub-bin holding `ns`. Bucket 0 also takes 0,
/// so it spans `[0, 2)`: 0 lands in its first sub-bin and 1 in its middle
/// one. Buckets 1 to 3 are narrower than 16 ns, so each value below 16 has
/// a sub-bin of its own.
fn sub_bin_of(ns: u64) -> (usize, usize) {
    if ns < 2 {
        return (0, ns as usize * (SUB_BINS / 2));
    }
    let bucket = 63 - ns.leading_zeros();
    let sub_bin = if bucket < SUB_BIN_BITS {
        ns << (SUB_BIN_BITS - bucket)
    } else {
        ns >> (bucket - SUB_BIN_BITS)
    } as usize
        & (SUB_BINS - 1);
    (bucket as usize, sub_bin)
}

/// Smallest and largest value (inclusive) of log2 bucket `bucket`.
fn bucket_value_range(bucket: usize) -> (u64, u64) {
    let low = if bucket == 0 { 0 } else { 1u64 << bucket };
    let high = if bucket == BUCKETS - 1 {
        u64::MAX
    } else {
        (1u64 << (bucket + 1)) - 1
    };
    (low, high)
}

/// The counts of every log2 bucket's 16 sub-bins.
fn sub_bin_counts(histogram: &LatencyHistogram) -> Vec<[u64; SUB_BINS]> {
    let mut counts = vec![[0u64; SUB_BINS]; BUCKETS];
    for (low, _high, count) in histogram.bins() {
        let (bucket, sub_bin) = sub_bin_of(low);
        counts[bucket][sub_bin] += count;
    }
    counts
}

/// A pmbench-like text histogram: one line per non-empty log2 bucket with
/// its range, count, share, a bar and its 16 sub-bin counts.
pub(super) fn render_pmbench(histogram: &LatencyHistogram) -> String {
    let count = histogram.count();
    let mut out = format!(
        "{count} samples, mean {}, min {}, max {}\n",
        human_ns(histogram.mean_ns()),
        human_ns(histogram.min_ns() as f64),
        human_ns(histogram.max_ns() as f64),
    );
    if count == 0 {
        return out;
    }
    out.push_str(&format!(
        "{:>13} {:>10} {:>7} {:<BAR_WIDTH$} | 16 linear sub-bins, low to high\n",
        "range", "count", "share", "",
    ));
    for (bucket, sub_bins) in sub_bin_counts(histogram).iter().enumerate() {
        let bucket_count: u64 = sub_bins.iter().sum();
        if bucket_count != 0 {
            out.push_str(&bucket_line(bucket, bucket_count, count, sub_bins));
            out.push('\n');
        }
    }
    out
}

fn bucket_line(bucket: usize, bucket_count: u64, total: u64, sub_bins: &[u64]) -> String {
    let (low, high) = bucket_value_range(bucket);
    let range = format!("{}-{}", compact_ns(low), compact_ns(high.saturating_add(1)));
    let share = bucket_count as f64 / total as f64;
    let bar_len = (share * BAR_WIDTH as f64).ceil() as usize;
    let bar = "#".repeat(bar_len.min(BAR_WIDTH));
    let sub_bin_text: String = sub_bins
        .iter()
        .map(|&count| format!(" {:>4}", compact_count(count)))
        .collect();
    format!(
        "{range:>13} {bucket_count:>10} {:>6.2}% {bar:<BAR_WIDTH$} |{sub_bin_text}",
        share * 100.0
    )
}

/// Bucket bounds are powers of two; three significant digits are plenty.
fn compact_ns(ns: u64) -> String {
    if ns == 0 {
        "0ns".to_string()
    } else {
        human_ns(ns as f64)
    }
}

/// A count in at most four characters (`7`, `512`, `1.2k`, `35k`, `1.2M`,
/// `999G`...), so 16 sub-bins fit on one line; `.` means zero, which keeps
/// sparse buckets easy to scan.
fn compact_count(count: u64) -> String {
    const UNITS: [(f64, &str); 5] = [(1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T"), (1e15, "P")];
    if count == 0 {
        return ".".to_string();
    }
    if count < 1000 {
        return count.to_string();
    }
    let value = count as f64;
    for (scale, unit) in UNITS {
        let scaled = value / scale;
        if scaled < 9.95 {
            return format!("{scaled:.1}{unit}");
        }
        if scaled < 999.5 {
            return format!("{scaled:.0}{unit}");
        }
    }
    format!("{:.0}E", value / 1e18)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram_of(values: impl IntoIterator<Item = u64>) -> LatencyHistogram {
        let mut histogram = LatencyHistogram::new();
        for ns in values {
            histogram.record(ns);
        }
        histogram
    }

    #[test]
    fn every_value_maps_into_its_buckets_range() {
        let probes = (0..5000u64)
            .chain((0..64).map(|bit| 1u64 << bit))
            .chain((1..64).map(|bit| (1u64 << bit) - 1))
            .chain([u64::MAX, u64::MAX - 1, 123_456_789]);
        for ns in probes {
            let (bucket, sub_bin) = sub_bin_of(ns);
            let (low, high) = bucket_value_range(bucket);
            assert!(low <= ns && ns <= high, "{ns} outside [{low}, {high}]");
            assert!(sub_bin < SUB_BINS);
        }
        let small: Vec<(usize, usize)> = (0..16).map(sub_bin_of).collect();
        let distinct: std::collections::BTreeSet<_> = small.iter().collect();
        assert_eq!(distinct.len(), 16, "{small:?}");
    }

    #[test]
    fn sub_bin_counts_are_those_of_the_samples() {
        let samples: Vec<u64> = (0..50_000u64)
            .map(|i| (i * 2_654_435_761) % 3_000_000)
            .collect();
        let mut expected = vec![[0u64; SUB_BINS]; BUCKETS];
        for &ns in &samples {
            let (bucket, sub_bin) = sub_bin_of(ns);
            expected[bucket][sub_bin] += 1;
        }
        assert_eq!(sub_bin_counts(&histogram_of(samples)), expected);
    }

    #[test]
    fn empty_histogram_prints_its_summary_alone() {
        let text = render_pmbench(&LatencyHistogram::new());
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("0 samples"), "{text}");
    }

    #[test]
    fn render_shows_each_non_empty_bucket() {
        let histogram = histogram_of((0..1000).map(|_| 150).chain((0..10).map(|_| 40_000)));
        let text = render_pmbench(&histogram);
        let bucket_lines: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(bucket_lines.len(), 2, "{text}");
        assert!(bucket_lines[0].contains("128ns-256ns"), "{text}");
        assert!(bucket_lines[0].contains("1000"), "{text}");
        assert!(bucket_lines[1].contains("32.8us-65.5us"), "{text}");
        assert!(
            text.lines().all(|line| line.chars().count() <= 121),
            "{text}"
        );
    }

    #[test]
    fn huge_values_render() {
        let histogram = histogram_of([u64::MAX, 1 << 63, 0]);
        let text = render_pmbench(&histogram);
        assert!(text.lines().count() >= 3, "{text}");
    }

    #[test]
    fn compact_counts_fit_four_columns() {
        for count in [0, 7, 999, 1000, 9_949, 9_950, 999_499, 999_500, u64::MAX] {
            let text = compact_count(count);
            assert!(text.len() <= 4, "{count} -> {text}");
        }
        assert_eq!(compact_count(1_234), "1.2k");
        assert_eq!(compact_count(35_000), "35k");
    }
}
