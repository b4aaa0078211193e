//! The latency histogram that `tiermem bench` and `tiermem device` share.
//!
//! Both tools time single operations (a page access, one I/O) whose
//! latencies span six orders of magnitude, and both report percentiles of
//! them; one type gives the two one rounding rule. The bins are an HDR
//! histogram (the `hdrhistogram` crate) at three significant figures: a bin
//! is at most 1/1024 of its values wide, and values below 2048 ns each have
//! a bin of their own. A percentile is the highest value of the bin that
//! holds the sample of that rank, as `hdrhistogram` reports it. The sample
//! count, sum, minimum and maximum are kept exactly beside the bins, which
//! would round them.
//!
//! Values above [`MAX_TRACKED_NS`] land in the top bin; the exact maximum,
//! sum and mean still see them as they are.

use std::fmt;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency the bins tell apart (two minutes); larger values are
/// counted in the top bin.
pub const MAX_TRACKED_NS: u64 = 120_000_000_000;

/// Significant figures of the bins: a bin is at most 1/1024 of its values
/// wide.
const SIGNIFICANT_FIGURES: u8 = 3;

/// Latency distribution of timed operations, in nanoseconds.
///
/// Serializes as the sample count, sum, minimum and maximum, and the
/// non-empty bins as `[highest value in ns, count]` pairs.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "HistogramWire", try_from = "HistogramWire")]
pub struct LatencyHistogram {
    bins: Histogram<u64>,
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

impl fmt::Debug for LatencyHistogram {
    /// The summary and the non-empty bins, not the tens of thousands of
    /// counters behind them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count())
            .field("sum_ns", &self.sum_ns)
            .field("min_ns", &self.min_ns())
            .field("max_ns", &self.max_ns)
            .field("bins", &self.bins().collect::<Vec<_>>())
            .finish()
    }
}

impl LatencyHistogram {
    pub fn new() -> Self {
        LatencyHistogram {
            bins: empty_bins(),
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }

    /// Adds one sample. Called once per timed operation: no allocation, no
    /// floating point.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.bins.saturating_record(ns);
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Adds every sample of `other`, as if they had been recorded here.
    pub fn merge(&mut self, other: &Self) {
        // Both sides have the same bounds, so every value of `other` has a
        // bin here and the addition cannot fail.
        let _ = self.bins.add(&other.bins);
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    pub fn count(&self) -> u64 {
        self.bins.len()
    }

    /// Sum of all samples (saturating at `u64::MAX`).
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    /// Smallest sample, exactly, or 0 when empty.
    pub fn min_ns(&self) -> u64 {
        if self.count() == 0 {
            0
        } else {
            self.min_ns
        }
    }

    /// Largest sample, exactly, or 0 when empty.
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// Mean of all samples, exactly, or 0 when empty.
    pub fn mean_ns(&self) -> f64 {
        match self.count() {
            0 => 0.0,
            count => self.sum_ns as f64 / count as f64,
        }
    }

    /// The value at quantile `q` (0 to 1, clamped; NaN counts as 0), or 0
    /// when empty: the highest value of the bin holding the sample of rank
    /// `ceil(q * count)` (at least 1), or for `q = 0` the lowest value of the
    /// first bin.
    pub fn quantile(&self, q: f64) -> u64 {
        self.bins.value_at_quantile(clamp_quantile(q))
    }

    /// Number of samples at or above `threshold_ns`.
    ///
    /// Counted at bin granularity: the bin containing the threshold is
    /// included whole, so samples up to 1/1024 below it may be counted too.
    pub fn count_at_least(&self, threshold_ns: u64) -> u64 {
        self.bins_from(threshold_ns)
            .map(|(_, _, count)| count)
            .sum()
    }

    /// The value at quantile `q` among only the samples at or above
    /// `threshold_ns` (same granularity as [`Self::count_at_least`], same
    /// rank rule as [`Self::quantile`]), or `None` when there are none.
    ///
    /// In a bimodal distribution of hits and page faults, this describes
    /// the faults alone, undiluted by the hits: the miss latency.
    pub fn quantile_at_least(&self, threshold_ns: u64, q: f64) -> Option<u64> {
        let population = self.count_at_least(threshold_ns);
        if population == 0 {
            return None;
        }
        let q = clamp_quantile(q);
        let rank = ((q * population as f64).ceil() as u64).clamp(1, population);
        let mut seen = 0u64;
        for (low, high, count) in self.bins_from(threshold_ns) {
            seen += count;
            if seen >= rank {
                return Some(if q == 0.0 { low } else { high });
            }
        }
        None
    }

    /// Every non-empty bin, low to high, as (smallest value, largest value,
    /// count): what a plot of the distribution draws.
    pub fn bins(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.bins.iter_recorded().map(|bin| {
            let high = bin.value_iterated_to();
            (
                self.bins.lowest_equivalent(high),
                high,
                bin.count_at_value(),
            )
        })
    }

    /// The non-empty bins whose values reach `threshold_ns`.
    fn bins_from(&self, threshold_ns: u64) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.bins()
            .filter(move |&(_, high, _)| high >= threshold_ns)
    }
}

fn empty_bins() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts (low >= 1,
    // high >= 2 * low, at most 5 significant figures), so this cannot fail.
    Histogram::new_with_bounds(1, MAX_TRACKED_NS, SIGNIFICANT_FIGURES)
        .expect("constant histogram bounds are valid")
}

fn clamp_quantile(q: f64) -> f64 {
    if q.is_nan() {
        0.0
    } else {
        q.clamp(0.0, 1.0)
    }
}

/// The JSON form: summary scalars, then the non-empty bins as
/// `[highest value in ns, count]`.
#[derive(Clone, Serialize, Deserialize)]
struct HistogramWire {
    count: u64,
    sum_ns: u64,
    min_ns: u64,
    max_ns: u64,
    bins: Vec<(u64, u64)>,
}

impl From<LatencyHistogram> for HistogramWire {
    fn from(histogram: LatencyHistogram) -> Self {
        HistogramWire {
            count: histogram.count(),
            sum_ns: histogram.sum_ns,
            min_ns: histogram.min_ns(),
            max_ns: histogram.max_ns,
            bins: histogram
                .bins()
                .map(|(_, high, count)| (high, count))
                .collect(),
        }
    }
}

/// Why a serialized histogram was rejected.
#[derive(Debug, PartialEq)]
pub enum HistogramDecodeError {
    /// A bin's value is beyond [`MAX_TRACKED_NS`]'s bin.
    ValueOutOfRange { value_ns: u64 },
    /// The declared count is not the sum of the bins' counts.
    CountMismatch { declared: u64, actual: u64 },
}

impl fmt::Display for HistogramDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistogramDecodeError::ValueOutOfRange { value_ns } => write!(
                f,
                "histogram bin value {value_ns} ns is out of range (max {MAX_TRACKED_NS} ns)"
            ),
            HistogramDecodeError::CountMismatch { declared, actual } => write!(
                f,
                "histogram count {declared} does not match the sum of its bins {actual}"
            ),
        }
    }
}

impl std::error::Error for HistogramDecodeError {}

impl TryFrom<HistogramWire> for LatencyHistogram {
    type Error = HistogramDecodeError;

    fn try_from(wire: HistogramWire) -> Result<Self, Self::Error> {
        let mut histogram = LatencyHistogram::new();
        for (value_ns, count) in wire.bins {
            histogram
                .bins
                .record_n(value_ns, count)
                .map_err(|_| HistogramDecodeError::ValueOutOfRange { value_ns })?;
        }
        if histogram.count() != wire.count {
            return Err(HistogramDecodeError::CountMismatch {
                declared: wire.count,
                actual: histogram.count(),
            });
        }
        if wire.count != 0 {
            histogram.sum_ns = wire.sum_ns;
            histogram.min_ns = wire.min_ns;
            histogram.max_ns = wire.max_ns;
        }
        Ok(histogram)
    }
}

#[cfg(test)]
mod tests;
