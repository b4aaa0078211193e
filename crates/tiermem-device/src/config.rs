//! What to measure: the target path, test-file size, job duration, queue
//! depth and the submission engines to compare.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// One way of submitting I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Engine {
    /// `pread`/`pwrite`; queue depth N is N threads each at QD1.
    #[serde(rename = "psync")]
    Psync,
    /// One io_uring, N requests in flight, interrupt-driven completions.
    #[serde(rename = "io_uring")]
    IoUring,
    /// A plain io_uring whose completions the submitting thread spins for
    /// in user space instead of sleeping: works on every device (no poll
    /// queues needed), and its CPU never idles, so on a guest that halts
    /// idle vCPUs it shows what that halt costs a read.
    #[serde(rename = "io_uring-spin")]
    IoUringSpin,
    /// io_uring with a kernel thread polling the submission queue
    /// (`IORING_SETUP_SQPOLL`).
    #[serde(rename = "io_uring-sqpoll")]
    IoUringSqpoll,
    /// io_uring with busy-polled completions (`IORING_SETUP_IOPOLL`).
    #[serde(rename = "io_uring-iopoll")]
    IoUringIopoll,
    /// io_uring with hybrid polling: sleep for about half the expected
    /// completion time, then poll (`IORING_SETUP_HYBRID_IOPOLL`, Linux 6.13+).
    #[serde(rename = "io_uring-hybrid")]
    IoUringHybrid,
}

impl Engine {
    /// Every engine, in the order jobs are run and shown.
    pub const ALL: [Engine; 6] = [
        Engine::Psync,
        Engine::IoUring,
        Engine::IoUringSpin,
        Engine::IoUringSqpoll,
        Engine::IoUringIopoll,
        Engine::IoUringHybrid,
    ];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Psync => "psync",
            Engine::IoUring => "io_uring",
            Engine::IoUringSpin => "io_uring-spin",
            Engine::IoUringSqpoll => "io_uring-sqpoll",
            Engine::IoUringIopoll => "io_uring-iopoll",
            Engine::IoUringHybrid => "io_uring-hybrid",
        }
    }

    /// Whether completions are busy-polled (needs O_DIRECT and poll support).
    pub fn is_polled(self) -> bool {
        matches!(self, Engine::IoUringIopoll | Engine::IoUringHybrid)
    }

    /// Whether this engine uses io_uring.
    pub fn is_uring(self) -> bool {
        self != Engine::Psync
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Engine {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        let norm = s.trim().to_ascii_lowercase().replace('_', "-");
        Ok(match norm.as_str() {
            "psync" | "pread" | "sync" => Engine::Psync,
            "io-uring" | "uring" | "iouring" => Engine::IoUring,
            "io-uring-spin" | "spin" | "uring-spin" => Engine::IoUringSpin,
            "io-uring-sqpoll" | "sqpoll" | "uring-sqpoll" => Engine::IoUringSqpoll,
            "io-uring-iopoll" | "iopoll" | "uring-iopoll" => Engine::IoUringIopoll,
            "io-uring-hybrid"
            | "hybrid"
            | "uring-hybrid"
            | "io-uring-hybrid-iopoll"
            | "hybrid-iopoll" => Engine::IoUringHybrid,
            _ => bail!(
                "unknown engine {s:?}; expected one of: psync, io_uring, io_uring-spin, \
                 io_uring-sqpoll, io_uring-iopoll, io_uring-hybrid (or \"all\")"
            ),
        })
    }
}

/// Parse a comma-separated engine list such as `psync,io_uring`; `all`
/// stands for every engine. Duplicates are dropped, order is kept.
pub fn parse_engines(list: &str) -> Result<Vec<Engine>> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.eq_ignore_ascii_case("all") {
            for e in Engine::ALL {
                if !out.contains(&e) {
                    out.push(e);
                }
            }
            continue;
        }
        let e: Engine = part.parse()?;
        if !out.contains(&e) {
            out.push(e);
        }
    }
    if out.is_empty() {
        bail!("empty engine list");
    }
    Ok(out)
}

/// Configuration of one device measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceConfig {
    /// A directory (a private, already-unlinked test file is created there),
    /// an existing regular file, or a block device.
    pub path: PathBuf,
    /// Size of the private test file created in a directory. Ignored for an
    /// existing file or a block device, whose whole size is used.
    pub file_size: u64,
    /// Run time of each job (the sequential fill of a new test file is
    /// size-bound instead).
    pub duration_per_job: Duration,
    /// Queue depth of the "QD N" random jobs.
    pub qd: u32,
    /// Queue depth of the 1 MiB sequential jobs.
    pub seq_qd: u32,
    /// Block size of the random jobs.
    pub rand_block_size: u64,
    /// Block size of the sequential jobs.
    pub seq_block_size: u64,
    /// Engines to compare, in order.
    pub engines: Vec<Engine>,
    /// Permit write tests on a block device or an existing regular file
    /// (destroys their contents). A private test file in a directory is
    /// always written.
    pub allow_write: bool,
    /// How long the SQPOLL kernel thread spins idle before sleeping.
    pub sqpoll_idle_ms: u32,
}

impl DeviceConfig {
    /// Default measurement of `path`: 1 GiB test file, 3 s per job, QD 32,
    /// all engines, no writes to block devices or existing files.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        DeviceConfig {
            path: path.into(),
            file_size: 1 << 30,
            duration_per_job: Duration::from_secs(3),
            qd: 32,
            seq_qd: 4,
            rand_block_size: 4096,
            seq_block_size: 1 << 20,
            engines: Engine::ALL.to_vec(),
            allow_write: false,
            sqpoll_idle_ms: 1000,
        }
    }

    /// A short run for tests and a first look: 256 MiB file, 0.5 s per job.
    pub fn quick(path: impl Into<PathBuf>) -> Self {
        DeviceConfig {
            file_size: 256 << 20,
            duration_per_job: Duration::from_millis(500),
            ..DeviceConfig::new(path)
        }
    }

    /// The path being measured.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Check the numbers before anything is opened.
    pub fn validate(&self) -> Result<()> {
        for (name, bs) in [
            ("random block size", self.rand_block_size),
            ("sequential block size", self.seq_block_size),
        ] {
            if bs < 512 || !bs.is_power_of_two() || bs > (64 << 20) {
                bail!("{name} must be a power of two between 512 B and 64 MiB, got {bs}");
            }
        }
        if self.qd == 0 || self.qd > 1024 {
            bail!("queue depth must be between 1 and 1024, got {}", self.qd);
        }
        if self.seq_qd == 0 || self.seq_qd > 1024 {
            bail!(
                "sequential queue depth must be between 1 and 1024, got {}",
                self.seq_qd
            );
        }
        let min = 2 * self.seq_block_size.max(self.rand_block_size);
        if self.file_size < min {
            bail!(
                "test file size {} is too small (minimum {} bytes)",
                self.file_size,
                min
            );
        }
        if self.duration_per_job.is_zero() {
            bail!("duration per job must be positive");
        }
        if self.duration_per_job > Duration::from_secs(3600) {
            bail!("duration per job must be at most one hour");
        }
        if self.engines.is_empty() {
            bail!("no engines selected");
        }
        Ok(())
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig::new("/var/tmp")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_names_round_trip() {
        for e in Engine::ALL {
            assert_eq!(e.name().parse::<Engine>().unwrap(), e);
            let json = serde_json::to_string(&e).unwrap();
            assert_eq!(json, format!("\"{}\"", e.name()));
        }
        assert_eq!("hybrid".parse::<Engine>().unwrap(), Engine::IoUringHybrid);
        assert!("spdk".parse::<Engine>().is_err());
    }

    #[test]
    fn engine_lists() {
        assert_eq!(parse_engines("all").unwrap(), Engine::ALL.to_vec());
        assert_eq!(
            parse_engines("io_uring, psync,io_uring").unwrap(),
            vec![Engine::IoUring, Engine::Psync]
        );
        assert!(parse_engines(" , ").is_err());
    }

    #[test]
    fn presets_validate() {
        DeviceConfig::default().validate().unwrap();
        let q = DeviceConfig::quick("/var/tmp");
        q.validate().unwrap();
        assert_eq!(q.file_size, 256 << 20);
        let mut bad = q.clone();
        bad.qd = 0;
        assert!(bad.validate().is_err());
        let mut bad = q;
        bad.file_size = 4096;
        assert!(bad.validate().is_err());
    }
}
