//! A job: access pattern × block size × queue depth × engine × limit, the
//! job plan of a run, and the offset generators the engines draw from.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{DeviceConfig, Engine};

/// Access pattern, named as in fio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Pattern {
    /// Random reads, offsets uniform over the whole target.
    #[serde(rename = "randread")]
    RandRead,
    /// Random writes, offsets uniform over the whole target.
    #[serde(rename = "randwrite")]
    RandWrite,
    /// Sequential reads, wrapping around at the end.
    #[serde(rename = "read")]
    SeqRead,
    /// Sequential writes.
    #[serde(rename = "write")]
    SeqWrite,
}

impl Pattern {
    /// The fio name of the pattern.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::RandRead => "randread",
            Pattern::RandWrite => "randwrite",
            Pattern::SeqRead => "read",
            Pattern::SeqWrite => "write",
        }
    }

    /// Whether the pattern writes.
    pub fn is_write(self) -> bool {
        matches!(self, Pattern::RandWrite | Pattern::SeqWrite)
    }

    /// Whether offsets are random.
    pub fn is_random(self) -> bool {
        matches!(self, Pattern::RandRead | Pattern::RandWrite)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// When a job stops issuing I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobLimit {
    /// Run for this long (sequential offsets wrap around).
    Time(Duration),
    /// Cover the target once, sequentially from offset 0.
    Once,
}

/// One job of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobSpec {
    pub engine: Engine,
    pub pattern: Pattern,
    pub block_size: u64,
    pub qd: u32,
    pub limit: JobLimit,
    /// This job is the sequential fill of a fresh test file.
    pub fill: bool,
}

impl JobSpec {
    /// Human-readable label, e.g. `io_uring randread 4K QD32`.
    pub fn label(&self) -> String {
        let mut s = format!(
            "{} {} {} QD{}",
            self.engine,
            self.pattern,
            tiermem_host::format::block_size(self.block_size),
            self.qd
        );
        if self.fill {
            s.push_str(" (fill)");
        }
        s
    }
}

/// The fill job that writes a fresh test file once with real data.
pub(crate) fn fill_job(cfg: &DeviceConfig, engine: Engine) -> JobSpec {
    JobSpec {
        engine,
        pattern: Pattern::SeqWrite,
        block_size: cfg.seq_block_size,
        qd: cfg.seq_qd,
        limit: JobLimit::Once,
        fill: true,
    }
}

/// The measurement jobs for every engine. Write jobs appear only when the
/// target may be written; the time-bound sequential write only when the
/// target was not already written by a fill job.
pub(crate) fn plan_jobs(cfg: &DeviceConfig, writable: bool, filled: bool) -> Vec<JobSpec> {
    let t = JobLimit::Time(cfg.duration_per_job);
    let mut jobs = Vec::new();
    for &engine in &cfg.engines {
        let mut push = |pattern, block_size, qd| {
            jobs.push(JobSpec {
                engine,
                pattern,
                block_size,
                qd,
                limit: t,
                fill: false,
            })
        };
        push(Pattern::RandRead, cfg.rand_block_size, 1);
        if cfg.qd > 1 {
            push(Pattern::RandRead, cfg.rand_block_size, cfg.qd);
        }
        push(Pattern::SeqRead, cfg.seq_block_size, cfg.seq_qd);
        if writable {
            push(Pattern::RandWrite, cfg.rand_block_size, 1);
            if cfg.qd > 1 {
                push(Pattern::RandWrite, cfg.rand_block_size, cfg.qd);
            }
            if !filled {
                push(Pattern::SeqWrite, cfg.seq_block_size, cfg.seq_qd);
            }
        }
    }
    jobs
}

/// Shared cursor of a sequential job (shared by psync threads).
#[derive(Debug, Default)]
pub(crate) struct SeqCursor(AtomicU64);

impl SeqCursor {
    pub fn new() -> Self {
        SeqCursor(AtomicU64::new(0))
    }

    /// Bytes handed out so far.
    pub fn issued(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Where the next I/O of one worker goes.
pub(crate) struct Offsets<'a> {
    random: bool,
    wrap: bool,
    bs: u64,
    size: u64,
    blocks: u64,
    rng: u64,
    cursor: &'a SeqCursor,
}

impl<'a> Offsets<'a> {
    /// `size` is the usable size of the target (a multiple of `bs` is used).
    pub fn new(spec: &JobSpec, size: u64, cursor: &'a SeqCursor) -> Self {
        let bs = spec.block_size;
        let blocks = (size / bs).max(1);
        let mut seed: u64 = rand::random();
        if seed == 0 {
            seed = 0x9E37_79B9_7F4A_7C15;
        }
        Offsets {
            random: spec.pattern.is_random(),
            wrap: matches!(spec.limit, JobLimit::Time(_)),
            bs,
            size: blocks * bs,
            blocks,
            rng: seed,
            cursor,
        }
    }

    /// The next aligned offset, or `None` when a once-through job is done.
    #[inline]
    pub fn next_offset(&mut self) -> Option<u64> {
        if self.random {
            // xorshift64*: plenty for spreading offsets, and no locking.
            self.rng ^= self.rng >> 12;
            self.rng ^= self.rng << 25;
            self.rng ^= self.rng >> 27;
            let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
            Some((r % self.blocks) * self.bs)
        } else {
            let off = self.cursor.0.fetch_add(self.bs, Ordering::Relaxed);
            if self.wrap {
                Some(off % self.size)
            } else if off + self.bs <= self.size {
                Some(off)
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pattern: Pattern, limit: JobLimit, bs: u64) -> JobSpec {
        JobSpec {
            engine: Engine::Psync,
            pattern,
            block_size: bs,
            qd: 1,
            limit,
            fill: false,
        }
    }

    #[test]
    fn random_offsets_aligned_and_in_range() {
        let c = SeqCursor::new();
        let s = spec(
            Pattern::RandRead,
            JobLimit::Time(Duration::from_secs(1)),
            4096,
        );
        let size = (64 << 20) + 100;
        let mut o = Offsets::new(&s, size, &c);
        let mut distinct = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let off = o.next_offset().unwrap();
            assert_eq!(off % 4096, 0);
            assert!(off + 4096 <= size);
            distinct.insert(off);
        }
        // 10000 uniform draws over 16384 blocks hit ~7490 distinct ones.
        assert!(
            distinct.len() > 6500,
            "offsets should spread: {}",
            distinct.len()
        );
    }

    #[test]
    fn sequential_once_stops_and_wrap_wraps() {
        let c = SeqCursor::new();
        let s = spec(Pattern::SeqWrite, JobLimit::Once, 1 << 20);
        let mut o = Offsets::new(&s, 3 << 20, &c);
        assert_eq!(o.next_offset(), Some(0));
        assert_eq!(o.next_offset(), Some(1 << 20));
        assert_eq!(o.next_offset(), Some(2 << 20));
        assert_eq!(o.next_offset(), None);

        let c = SeqCursor::new();
        let s = spec(
            Pattern::SeqRead,
            JobLimit::Time(Duration::from_secs(1)),
            1 << 20,
        );
        let mut o = Offsets::new(&s, 2 << 20, &c);
        let v: Vec<_> = (0..4).map(|_| o.next_offset().unwrap()).collect();
        assert_eq!(v, vec![0, 1 << 20, 0, 1 << 20]);
    }

    #[test]
    fn plan_without_write_permission_has_no_writes() {
        let cfg = DeviceConfig::quick("/dev/null");
        let jobs = plan_jobs(&cfg, false, false);
        assert!(!jobs.is_empty());
        assert!(jobs.iter().all(|j| !j.pattern.is_write()));
        let jobs = plan_jobs(&cfg, true, true);
        assert!(jobs.iter().any(|j| j.pattern == Pattern::RandWrite));
        assert!(jobs.iter().all(|j| j.pattern != Pattern::SeqWrite));
        let jobs = plan_jobs(&cfg, true, false);
        assert!(jobs.iter().any(|j| j.pattern == Pattern::SeqWrite));
    }

    #[test]
    fn block_size_format() {
        assert_eq!(tiermem_host::format::block_size(4096), "4K");
        assert_eq!(tiermem_host::format::block_size(1 << 20), "1M");
        assert_eq!(tiermem_host::format::block_size(512), "512");
    }
}
