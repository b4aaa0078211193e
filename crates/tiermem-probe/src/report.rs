//! What a probe found: five estimates with confidences, the evidence for
//! plots, and their human and JSON forms.

use serde::{Deserialize, Serialize};
use tiermem_host::format;

/// One inferred parameter.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Estimate {
    pub value: u64,
    /// 0..1: how consistently the samples supported the value.
    pub confidence: f64,
    /// How it was decided, in a few words.
    pub evidence: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum WritePolicy {
    #[default]
    WriteBack,
    WriteThrough,
}

impl WritePolicy {
    pub fn name(self) -> &'static str {
        match self {
            WritePolicy::WriteBack => "write-back",
            WritePolicy::WriteThrough => "write-through",
        }
    }
}

/// Samples behind the `--plot` figures, in nanoseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Evidence {
    /// Line test: latency of the first read of each pair (forwards, reverse).
    pub line_first_forward: Vec<f64>,
    pub line_first_reverse: Vec<f64>,
    /// Line test: (delta in bytes, latency of the second read), reverse order.
    pub line_second: Vec<(f64, f64)>,
    /// Size test: (block size in bytes, latency of a re-read).
    pub size_points: Vec<(f64, f64)>,
    /// Size test: (block size in bytes, hit ratio of the re-read pass).
    pub size_hit_ratio: Vec<(f64, f64)>,
    /// Prefetch test: latency of the first access of each walk.
    pub prefetch_first: Vec<f64>,
    /// Prefetch test: (line index in the walk, latency).
    pub prefetch_walk: Vec<(f64, f64)>,
    /// Associativity test: (ways hypothesised, share of re-reads that missed).
    pub assoc_points: Vec<(f64, f64)>,
    /// Write test: (offset in bytes, latency of a write to a fresh line).
    pub write_points: Vec<(f64, f64)>,
    /// Write test: latencies of writes to cached lines, and of reads of them.
    pub write_hits: Vec<f64>,
    pub read_hits: Vec<f64>,
    /// Threshold between hit and miss, ns.
    pub threshold_ns: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    pub target: String,
    pub cache_size: Estimate,
    pub line_size: Estimate,
    pub associativity: Estimate,
    pub prefetch: Estimate,
    pub write_policy: WritePolicy,
    pub write_policy_confidence: f64,
    pub write_policy_evidence: String,
    /// Median hit and miss latency, ns.
    pub hit_ns: f64,
    pub miss_ns: f64,
    /// Sample batches thrown away because a timer interrupt hit them.
    pub disturbed_batches: u64,
    pub total_batches: u64,
    /// Seconds the measurement took.
    pub seconds: f64,
    /// Free-form remarks (e.g. the CPU's own cache description).
    pub notes: Vec<String>,
    pub evidence: Evidence,
}

/// The `--json` form: exactly the five keys (printed beside the envelope
/// every tiermem result carries).
#[derive(Serialize)]
pub struct JsonReport {
    pub cache_size_bytes: u64,
    pub line_size_bytes: u64,
    pub associativity: u64,
    pub prefetch_lines: u64,
    pub write_policy: &'static str,
}

impl Report {
    pub fn json(&self) -> JsonReport {
        JsonReport {
            cache_size_bytes: self.cache_size.value,
            line_size_bytes: self.line_size.value,
            associativity: self.associativity.value,
            prefetch_lines: self.prefetch.value,
            write_policy: self.write_policy.name(),
        }
    }

    pub fn table(&self) -> String {
        let mut s = String::new();
        let assoc = match self.associativity.value {
            0 => "fully associative".to_string(),
            1 => "direct-mapped".to_string(),
            n => format!("{n}-way"),
        };
        s += &format!("tiermem probe: target {}\n\n", self.target);
        s += &format!(
            "{:<15} {:>20} {:>11}  {}\n",
            "parameter", "value", "confidence", "evidence"
        );
        let rows = [
            (
                "cache size",
                format::bytes_exact_or_mib(self.cache_size.value),
                &self.cache_size,
            ),
            (
                "line size",
                format::bytes_exact_or_mib(self.line_size.value),
                &self.line_size,
            ),
            (
                "prefetch",
                format!("{} lines", self.prefetch.value),
                &self.prefetch,
            ),
            ("associativity", assoc, &self.associativity),
        ];
        for (name, value, e) in rows {
            s += &format!(
                "{:<15} {:>20} {:>10.0}%  {}\n",
                name,
                value,
                100.0 * e.confidence,
                e.evidence
            );
        }
        s += &format!(
            "{:<15} {:>20} {:>10.0}%  {}\n",
            "write policy",
            self.write_policy.name(),
            100.0 * self.write_policy_confidence,
            self.write_policy_evidence
        );
        s += &format!(
            "\nhit {} / miss {} (threshold {}); {} of {} sample batches discarded for timer interrupts; {:.1} s\n",
            format::ns_spaced(self.hit_ns),
            format::ns_spaced(self.miss_ns),
            format::ns_spaced(self.evidence.threshold_ns),
            self.disturbed_batches,
            self.total_batches,
            self.seconds
        );
        for n in &self.notes {
            s += &format!("note: {n}\n");
        }
        s
    }
}
