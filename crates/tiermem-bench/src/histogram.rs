//! Per-access latency histogram in the style of pmbench.
//!
//! Paging latencies span six orders of magnitude (a DRAM hit is ~100 ns, a
//! swap-in from a slow device is ~10 ms), so the histogram uses log2 buckets:
//! bucket `k` holds `[2^k, 2^(k+1))` ns. A plain log2 bucket is too coarse to
//! tell a 9 µs fault from a 15 µs one, so each bucket is split into 16 linear
//! sub-bins, which bounds the relative error of any reported value by 1/16
//! (1/32 when the bin midpoint is reported). Bucket 0 also takes 0 ns, so it
//! covers `[0, 2)`; values below 16 ns each get a sub-bin of their own and are
//! therefore reported exactly.
//!
//! Recording is a table increment plus four scalar updates, cheap enough to
//! run on every single timed access without disturbing the measurement.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Number of log2 buckets: one per bit of a `u64` nanosecond value.
const BUCKETS: usize = 64;
/// log2 of the number of linear sub-bins per bucket.
const SUB_BIN_BITS: u32 = 4;
/// Linear sub-bins per log2 bucket.
const SUB_BINS: usize = 1 << SUB_BIN_BITS;
/// Total number of counters.
const BINS: usize = BUCKETS * SUB_BINS;
/// Values below this get one sub-bin each (buckets 0..=3), so they are exact.
const EXACT_BELOW: u64 = SUB_BINS as u64;
/// Width of the text bar in [`LatencyHistogram::render_pmbench`].
const BAR_WIDTH: usize = 6;

/// Bin index of each value below [`EXACT_BELOW`], precomputed so the hot path
/// needs no special arithmetic for tiny values.
const SMALL_VALUE_BIN: [u16; EXACT_BELOW as usize] = small_value_bins();

const fn small_value_bins() -> [u16; EXACT_BELOW as usize] {
    let mut table = [0u16; EXACT_BELOW as usize];
    let mut ns = 0;
    while ns < EXACT_BELOW {
        table[ns as usize] = small_value_bin(ns) as u16;
        ns += 1;
    }
    table
}

/// Bin of a value below 16 ns. Bucket 0 spans `[0, 2)`, so 0 lands in its
/// first sub-bin and 1 in its middle one; buckets 1..=3 place the value at
/// its linear position inside `[2^k, 2^(k+1))`.
const fn small_value_bin(ns: u64) -> usize {
    if ns < 2 {
        return ns as usize * (SUB_BINS / 2);
    }
    let bucket = 63 - ns.leading_zeros();
    let sub_bin = (ns << (SUB_BIN_BITS - bucket)) & (SUB_BINS as u64 - 1);
    bucket as usize * SUB_BINS + sub_bin as usize
}

/// Index of the counter that `ns` belongs to.
#[inline]
fn bin_index(ns: u64) -> usize {
    if ns < EXACT_BELOW {
        return SMALL_VALUE_BIN[ns as usize] as usize;
    }
    let bucket = 63 - ns.leading_zeros();
    let sub_bin = (ns >> (bucket - SUB_BIN_BITS)) as usize & (SUB_BINS - 1);
    // The mask is a no-op for valid input; it lets the compiler drop the bounds check.
    (bucket as usize * SUB_BINS + sub_bin) & (BINS - 1)
}

/// Smallest and largest value (inclusive) that can land in bin `index`.
fn bin_value_range(index: usize) -> (u64, u64) {
    let bucket = (index / SUB_BINS) as u32;
    let sub_bin = (index % SUB_BINS) as u64;
    if bucket < SUB_BIN_BITS {
        // Sub-bins narrower than 1 ns: each holds at most one integer value.
        let exact = (0..EXACT_BELOW).find(|&ns| bin_index(ns) == index);
        let value = exact.unwrap_or(1 << bucket);
        return (value, value);
    }
    let width = 1u64 << (bucket - SUB_BIN_BITS);
    let low = (1u64 << bucket) + sub_bin * width;
    (low, low + (width - 1))
}

/// The value reported for samples in bin `index`: the midpoint of its range.
fn bin_representative(index: usize) -> u64 {
    let (low, high) = bin_value_range(index);
    low + (high - low) / 2
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

/// The counters, boxed so a `ModeResult` stays small to move around, with a
/// `Debug` that prints only non-zero bins instead of 1024 numbers.
#[derive(Clone, PartialEq)]
struct Bins(Box<[u64; BINS]>);

impl Default for Bins {
    fn default() -> Self {
        Bins(Box::new([0; BINS]))
    }
}

impl fmt::Debug for Bins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(non_zero_bins(&self.0)).finish()
    }
}

fn non_zero_bins(bins: &[u64; BINS]) -> impl Iterator<Item = (usize, u64)> + '_ {
    bins.iter()
        .enumerate()
        .filter(|(_, &count)| count != 0)
        .map(|(index, &count)| (index, count))
}

/// Latency distribution of timed accesses, in nanoseconds.
///
/// Serializes compactly (only non-zero bins, as `[index, count]` pairs)
/// because it travels as JSON from each worker process to the parent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "HistogramWire", try_from = "HistogramWire")]
pub struct LatencyHistogram {
    bins: Bins,
    count: u64,
    /// Saturates instead of wrapping: a clamped mean beats a nonsense one.
    sum_ns: u64,
    /// `u64::MAX` while empty, so `record` needs no branch.
    min_ns: u64,
    max_ns: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    pub fn new() -> Self {
        LatencyHistogram {
            bins: Bins::default(),
            count: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }

    /// Adds one sample. Called once per timed access: no allocation, no
    /// floating point.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.bins.0[bin_index(ns)] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Adds every sample of `other`, as if they had been recorded here.
    pub fn merge(&mut self, other: &Self) {
        for (mine, theirs) in self.bins.0.iter_mut().zip(other.bins.0.iter()) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of all samples (saturating at `u64::MAX`).
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    /// Smallest sample, or 0 when empty.
    pub fn min_ns(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            self.min_ns
        }
    }

    /// Largest sample, or 0 when empty.
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// Mean of all samples, or 0 when empty.
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64
        }
    }

    /// The `q`-th percentile (`q` in 0..=100, clamped), or 0 when empty.
    ///
    /// Reports the midpoint of the sub-bin holding the sample of that rank,
    /// clamped to the observed min/max, so it is within 1/32 of the true
    /// value; p0 and p100 are the exact min and max.
    pub fn percentile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        match rank_for_percentile(q, self.count) {
            1 => self.min_ns,
            rank if rank == self.count => self.max_ns,
            _ => self
                .percentile_from_bin(0, self.count, q)
                .map_or(0, |value| value.clamp(self.min_ns, self.max_ns)),
        }
    }

    /// Number of samples at or above `threshold_ns`.
    ///
    /// Counted at sub-bin granularity: the sub-bin containing the threshold
    /// is included whole, so samples up to 1/16 below the threshold may be
    /// counted too. That is far finer than the gap between the fast and slow
    /// modes this is used to separate.
    pub fn count_at_least(&self, threshold_ns: u64) -> u64 {
        self.bins.0[bin_index(threshold_ns)..].iter().sum()
    }

    /// The `q`-th percentile among only the samples at or above
    /// `threshold_ns` (same granularity as [`Self::count_at_least`]), or
    /// `None` when there are none.
    ///
    /// This is the "miss latency": in a bimodal distribution of hits and
    /// page faults, it describes the faults alone, undiluted by the hits.
    pub fn percentile_at_least(&self, threshold_ns: u64, q: f64) -> Option<u64> {
        let slow_count = self.count_at_least(threshold_ns);
        if slow_count == 0 {
            return None;
        }
        let first_bin = bin_index(threshold_ns);
        let floor = threshold_ns.max(self.min_ns());
        let ceiling = self.max_ns.max(floor);
        if rank_for_percentile(q, slow_count) == slow_count {
            // The slowest sample is the overall maximum.
            return Some(ceiling);
        }
        self.percentile_from_bin(first_bin, slow_count, q)
            .map(|value| value.clamp(floor, ceiling))
    }

    /// Walks bins from `first_bin` (which together hold `population`
    /// samples) to the one holding the sample of rank `q`%.
    fn percentile_from_bin(&self, first_bin: usize, population: u64, q: f64) -> Option<u64> {
        if population == 0 {
            return None;
        }
        let target_rank = rank_for_percentile(q, population);
        let mut seen = 0u64;
        for (index, &count) in self.bins.0.iter().enumerate().skip(first_bin) {
            seen += count;
            if seen >= target_rank {
                return Some(bin_representative(index));
            }
        }
        None
    }

    /// Every non-empty sub-bin, low to high, as (smallest value, largest
    /// value, count): what a plot of the distribution draws.
    pub fn bins(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        non_zero_bins(&self.bins.0).map(|(index, count)| {
            let (low, high) = bin_value_range(index);
            (low, high, count)
        })
    }

    /// A pmbench-like text histogram: one line per non-empty log2 bucket
    /// with its range, count, share, a bar and its 16 sub-bin counts.
    pub fn render_pmbench(&self) -> String {
        let mut out = format!(
            "{} samples, mean {}, min {}, max {}\n",
            self.count,
            crate::report::format::human_ns(self.mean_ns()),
            crate::report::format::human_ns(self.min_ns() as f64),
            crate::report::format::human_ns(self.max_ns as f64),
        );
        if self.count == 0 {
            return out;
        }
        out.push_str(&format!(
            "{:>13} {:>10} {:>7} {:<BAR_WIDTH$} | 16 linear sub-bins, low to high\n",
            "range", "count", "share", "",
        ));
        for bucket in 0..BUCKETS {
            let sub_bins = &self.bins.0[bucket * SUB_BINS..(bucket + 1) * SUB_BINS];
            let bucket_count: u64 = sub_bins.iter().sum();
            if bucket_count != 0 {
                out.push_str(&self.render_bucket_line(bucket, bucket_count, sub_bins));
                out.push('\n');
            }
        }
        out
    }

    fn render_bucket_line(&self, bucket: usize, bucket_count: u64, sub_bins: &[u64]) -> String {
        let (low, high) = bucket_value_range(bucket);
        let range = format!("{}-{}", compact_ns(low), compact_ns(high.saturating_add(1)));
        let share = bucket_count as f64 / self.count as f64;
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
}

/// Bucket bounds are powers of two; three significant digits are plenty.
fn compact_ns(ns: u64) -> String {
    if ns == 0 {
        "0ns".to_string()
    } else {
        crate::report::format::human_ns(ns as f64)
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

/// 1-based rank of the `q`-th percentile sample among `population` (> 0).
fn rank_for_percentile(q: f64, population: u64) -> u64 {
    let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 100.0) };
    let rank = (q / 100.0 * population as f64).ceil() as u64;
    rank.clamp(1, population.max(1))
}

/// The JSON form: summary scalars plus non-zero bins as `[index, count]`.
#[derive(Clone, Serialize, Deserialize)]
struct HistogramWire {
    count: u64,
    sum_ns: u64,
    min_ns: u64,
    max_ns: u64,
    bins: Vec<(u16, u64)>,
}

impl From<LatencyHistogram> for HistogramWire {
    fn from(histogram: LatencyHistogram) -> Self {
        HistogramWire {
            count: histogram.count,
            sum_ns: histogram.sum_ns,
            min_ns: histogram.min_ns(),
            max_ns: histogram.max_ns,
            bins: non_zero_bins(&histogram.bins.0)
                .map(|(index, count)| (index as u16, count))
                .collect(),
        }
    }
}

/// Why a serialized histogram was rejected.
#[derive(Debug, thiserror::Error)]
pub enum HistogramDecodeError {
    #[error("histogram bin index {index} out of range (max {max})")]
    BinOutOfRange { index: u16, max: usize },
    #[error("histogram count {declared} does not match the sum of its bins {actual}")]
    CountMismatch { declared: u64, actual: u64 },
}

impl TryFrom<HistogramWire> for LatencyHistogram {
    type Error = HistogramDecodeError;

    fn try_from(wire: HistogramWire) -> Result<Self, Self::Error> {
        let mut histogram = LatencyHistogram::new();
        for (index, count) in wire.bins {
            let slot = histogram.bins.0.get_mut(usize::from(index)).ok_or(
                HistogramDecodeError::BinOutOfRange {
                    index,
                    max: BINS - 1,
                },
            )?;
            *slot = slot.saturating_add(count);
            histogram.count = histogram.count.saturating_add(count);
        }
        if histogram.count != wire.count {
            return Err(HistogramDecodeError::CountMismatch {
                declared: wire.count,
                actual: histogram.count,
            });
        }
        if histogram.count != 0 {
            histogram.sum_ns = wire.sum_ns;
            histogram.min_ns = wire.min_ns;
            histogram.max_ns = wire.max_ns;
        }
        Ok(histogram)
    }
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

    fn assert_within_relative(actual: u64, expected: u64, tolerance: f64) {
        let error = (actual as f64 - expected as f64).abs() / expected as f64;
        assert!(
            error <= tolerance,
            "{actual} vs {expected}: relative error {error} > {tolerance}"
        );
    }

    #[test]
    fn empty_histogram_reports_zeros() {
        let histogram = LatencyHistogram::new();
        assert_eq!(histogram.count(), 0);
        assert_eq!(histogram.min_ns(), 0);
        assert_eq!(histogram.max_ns(), 0);
        assert_eq!(histogram.mean_ns(), 0.0);
        assert_eq!(histogram.percentile(50.0), 0);
        assert_eq!(histogram.percentile_at_least(10, 50.0), None);
        assert!(histogram.render_pmbench().contains("0 samples"));
    }

    #[test]
    fn every_value_maps_into_its_bins_range() {
        let probes = (0..5000u64)
            .chain((0..64).map(|bit| 1u64 << bit))
            .chain((1..64).map(|bit| (1u64 << bit) - 1))
            .chain([u64::MAX, u64::MAX - 1, 123_456_789]);
        for ns in probes {
            let (low, high) = bin_value_range(bin_index(ns));
            assert!(low <= ns && ns <= high, "{ns} outside bin [{low}, {high}]");
        }
    }

    #[test]
    fn small_values_are_exact() {
        for ns in 0..16 {
            let histogram = histogram_of([ns, ns, ns]);
            assert_eq!(histogram.percentile(50.0), ns);
        }
        let histogram = histogram_of(0..16);
        for ns in 0..16u64 {
            // Each value is one sixteenth of the samples.
            let q = (ns + 1) as f64 * 100.0 / 16.0;
            assert_eq!(histogram.percentile(q), ns, "q={q}");
        }
    }

    #[test]
    fn uniform_percentiles_within_a_sixteenth() {
        let histogram = histogram_of(1..=100_000);
        assert_eq!(histogram.count(), 100_000);
        assert_eq!(histogram.min_ns(), 1);
        assert_eq!(histogram.max_ns(), 100_000);
        assert!((histogram.mean_ns() - 50_000.5).abs() < 1e-9);
        for (q, expected) in [
            (50.0, 50_000),
            (90.0, 90_000),
            (99.0, 99_000),
            (10.0, 10_000),
        ] {
            assert_within_relative(histogram.percentile(q), expected, 1.0 / 16.0);
        }
        assert_eq!(histogram.percentile(0.0), 1);
        assert_eq!(histogram.percentile(100.0), 100_000);
    }

    #[test]
    fn out_of_range_quantiles_are_clamped() {
        let histogram = histogram_of([10, 20, 30]);
        assert_eq!(histogram.percentile(-5.0), 10);
        assert_eq!(histogram.percentile(250.0), 30);
        assert_eq!(histogram.percentile(f64::NAN), 10);
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
    fn bimodal_slow_percentile_picks_the_slow_mode() {
        // 90% DRAM hits around 100 ns, 10% faults around 50 µs.
        let hits = (0..90_000u64).map(|i| 80 + i % 40);
        let faults = (0..10_000u64).map(|i| 40_000 + i * 2);
        let histogram = histogram_of(hits.chain(faults));
        assert!(histogram.percentile(50.0) < 200);
        let threshold = 10_000;
        assert_eq!(histogram.count_at_least(threshold), 10_000);
        let slow_p50 = histogram.percentile_at_least(threshold, 50.0);
        assert_within_relative(slow_p50.unwrap_or(0), 50_000, 1.0 / 16.0);
        let slow_p100 = histogram.percentile_at_least(threshold, 100.0);
        assert_eq!(slow_p100, Some(59_998));
        assert_eq!(histogram.percentile_at_least(1_000_000, 50.0), None);
    }

    #[test]
    fn slow_percentile_never_reports_below_threshold() {
        let histogram = histogram_of([10_000, 10_001, 10_002]);
        let slow = histogram.percentile_at_least(10_050, 0.0);
        assert!(slow.is_some_and(|value| value >= 10_050));
    }

    #[test]
    fn serde_roundtrip_is_exact_and_compact() {
        let histogram = histogram_of((0..1000).map(|i| i * i * 7).chain([u64::MAX, 0]));
        let json = serde_json::to_string(&histogram).unwrap();
        assert!(json.len() < 4000, "not compact: {} bytes", json.len());
        let back: LatencyHistogram = serde_json::from_str(&json).unwrap();
        assert_eq!(back, histogram);

        let empty = LatencyHistogram::new();
        let back: LatencyHistogram =
            serde_json::from_str(&serde_json::to_string(&empty).unwrap()).unwrap();
        assert_eq!(back, empty);
    }

    #[test]
    fn malformed_json_is_rejected() {
        let bad_index = r#"{"count":1,"sum_ns":1,"min_ns":1,"max_ns":1,"bins":[[5000,1]]}"#;
        assert!(serde_json::from_str::<LatencyHistogram>(bad_index).is_err());
        let bad_count = r#"{"count":2,"sum_ns":1,"min_ns":1,"max_ns":1,"bins":[[8,1]]}"#;
        assert!(serde_json::from_str::<LatencyHistogram>(bad_count).is_err());
    }

    #[test]
    fn huge_values_do_not_panic() {
        let mut histogram = histogram_of([u64::MAX, u64::MAX, 1 << 63, 0]);
        histogram.merge(&histogram.clone());
        assert_eq!(histogram.max_ns(), u64::MAX);
        assert_eq!(histogram.sum_ns(), u64::MAX);
        assert_eq!(histogram.percentile(100.0), u64::MAX);
        assert!(histogram.percentile(60.0) >= 1 << 63);
        assert_eq!(histogram.count_at_least(u64::MAX), 4);
        assert!(histogram.percentile_at_least(u64::MAX, 50.0).is_some());
        assert!(histogram.render_pmbench().lines().count() >= 3);
    }

    #[test]
    fn render_shows_each_non_empty_bucket() {
        let histogram = histogram_of((0..1000).map(|_| 150).chain((0..10).map(|_| 40_000)));
        let text = histogram.render_pmbench();
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
    fn compact_counts_fit_four_columns() {
        for count in [0, 7, 999, 1000, 9_949, 9_950, 999_499, 999_500, u64::MAX] {
            let text = compact_count(count);
            assert!(text.len() <= 4, "{count} -> {text}");
        }
        assert_eq!(compact_count(1_234), "1.2k");
        assert_eq!(compact_count(35_000), "35k");
    }
}
