//! Predicting the write that follows a read fault.
//!
//! A read fault installs its page write-protected, so a page that is only
//! read stays clean and leaves DRAM without a write. But many programs read
//! a word and then write it (`x += 1`, a compare-and-swap, a
//! read-modify-write of a struct): each such miss then takes two faults,
//! the second only to lift the protection. The kernel avoids the second
//! one with the hardware dirty bit, which user space cannot read.
//!
//! So the handlers keep score: of the pages a read fault installed
//! protected, how many were written while resident? Once that share
//! reaches [`THRESHOLD_PERCENT`], read faults install their page writable
//! and dirty, as a write fault does. A page that is then only read costs
//! one write-back, batched and off the fault path; each page that is
//! written saves a fault round trip, which costs the faulting thread more
//! than that write-back costs the evictor. One read fault in
//! [`SAMPLE_EVERY`] still installs protected, so the score follows the
//! program when it changes its ways.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::config::Config;
use crate::organization::{Inclusion, WritePolicy};

/// Share of protected read installs later written, from which read faults
/// install writable.
const THRESHOLD_PERCENT: u64 = 30;
/// Protected read installs seen before any prediction is made.
const MIN_SAMPLES: u64 = 64;
/// The score halves every this many protected installs, so it reflects
/// the recent past.
const WINDOW: u64 = 2048;
/// While predicting, one read fault in this many still installs protected.
const SAMPLE_EVERY: u64 = 8;

pub(crate) struct WritePrediction {
    enabled: bool,
    /// Protected read installs (high half) and how many of them were
    /// written afterwards (low half).
    score: AtomicU64,
    reads: AtomicU64,
}

fn pack(installs: u64, written: u64) -> u64 {
    installs << 32 | written
}

fn unpack(score: u64) -> (u64, u64) {
    (score >> 32, score & u32::MAX as u64)
}

impl WritePrediction {
    pub fn new(enabled: bool) -> WritePrediction {
        WritePrediction {
            enabled,
            score: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        }
    }

    /// Write-through must see every write, and an exclusive cache installs
    /// every page dirty anyway: prediction is for write-back, inclusive
    /// caches, unless switched off (`TIERMEM_PREDICT_WRITES=off`).
    pub fn for_config(config: &Config) -> WritePrediction {
        let org = &config.organization;
        WritePrediction::new(
            config.io.predict_writes
                && org.write_policy == WritePolicy::WriteBack
                && org.inclusion == Inclusion::Inclusive,
        )
    }

    /// Whether a read fault about to read its page from the store should
    /// install it writable and dirty.
    pub fn predicts_write(&self) -> bool {
        if !self.enabled {
            return false;
        }
        let (installs, written) = unpack(self.score.load(Relaxed));
        if installs < MIN_SAMPLES || written * 100 < installs * THRESHOLD_PERCENT {
            return false;
        }
        !self
            .reads
            .fetch_add(1, Relaxed)
            .is_multiple_of(SAMPLE_EVERY)
    }

    /// A read fault installs its page write-protected.
    pub fn installed_protected(&self) {
        if self.enabled {
            self.update(|installs, written| match installs + 1 {
                WINDOW => (WINDOW / 2, written / 2),
                n => (n, written),
            });
        }
    }

    /// A page a read fault installed protected takes its first write.
    pub fn written_after_read(&self) {
        if self.enabled {
            self.update(|installs, written| (installs, (written + 1).min(installs)));
        }
    }

    fn update(&self, f: impl Fn(u64, u64) -> (u64, u64)) {
        let _ = self.score.fetch_update(Relaxed, Relaxed, |s| {
            let (installs, written) = unpack(s);
            let (i, w) = f(installs, written);
            Some(pack(i, w))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(reads: u64, written_every: u64, p: &WritePrediction) {
        for i in 0..reads {
            p.installed_protected();
            if written_every > 0 && i % written_every == 0 {
                p.written_after_read();
            }
        }
    }

    fn share_predicted(p: &WritePrediction) -> f64 {
        (0..1000).filter(|_| p.predicts_write()).count() as f64 / 1000.0
    }

    #[test]
    fn read_modify_write_is_predicted_and_pure_reads_are_not() {
        let p = WritePrediction::new(true);
        assert!(!p.predicts_write(), "no prediction without samples");
        after(5000, 1, &p);
        let share = share_predicted(&p);
        assert!(
            (0.85..0.9).contains(&share),
            "all but one read in {SAMPLE_EVERY} install writable: {share}"
        );
        let reads_only = WritePrediction::new(true);
        after(5000, 0, &reads_only);
        assert_eq!(share_predicted(&reads_only), 0.0);
        let rare = WritePrediction::new(true);
        after(5000, 5, &rare);
        assert_eq!(
            share_predicted(&rare),
            0.0,
            "20% written is below the threshold"
        );
    }

    #[test]
    fn the_score_follows_a_change_of_pattern() {
        let p = WritePrediction::new(true);
        after(5000, 1, &p);
        assert!(p.predicts_write() || p.predicts_write());
        // The program now only reads: the protected samples are not written.
        after(3 * WINDOW, 0, &p);
        assert_eq!(share_predicted(&p), 0.0);
    }

    #[test]
    fn disabled_never_predicts() {
        let p = WritePrediction::new(false);
        after(5000, 1, &p);
        assert_eq!(share_predicted(&p), 0.0);
    }
}
