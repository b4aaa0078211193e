//! The result of a run: per-job figures, device identity and notes, with a
//! text table, JSON persistence and the summary figures `tiermem bench`
//! compares against.

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::config::Engine;
use crate::identity::DeviceIdentity;
use crate::job::Pattern;
use crate::target::{IoMode, TargetKind};

/// Version of the JSON layout.
pub const REPORT_SCHEMA: u32 = 2;

/// Figures of one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    pub engine: Engine,
    pub pattern: Pattern,
    /// Bytes per I/O.
    pub block_size: u64,
    /// Requests in flight (psync: threads).
    pub qd: u32,
    /// This job was the sequential fill of the fresh test file.
    #[serde(default)]
    pub fill: bool,
    /// Wall time from first submission to last completion (JSON:
    /// `runtime_ns`, as every time tiermem writes).
    #[serde(rename = "runtime_ns", with = "tiermem_host::ns::seconds")]
    pub runtime_s: f64,
    /// Completed I/Os.
    pub ops: u64,
    pub iops: f64,
    /// Bandwidth in MB/s (10^6 bytes per second).
    pub mb_s: f64,
    /// Per-I/O latency, submission to completion, in µs (JSON: `lat_*_ns`).
    #[serde(rename = "lat_mean_ns", with = "tiermem_host::ns::micros")]
    pub lat_mean_us: f64,
    #[serde(rename = "lat_p50_ns", with = "tiermem_host::ns::micros")]
    pub lat_p50_us: f64,
    #[serde(rename = "lat_p99_ns", with = "tiermem_host::ns::micros")]
    pub lat_p99_us: f64,
    #[serde(rename = "lat_p999_ns", with = "tiermem_host::ns::micros")]
    pub lat_p999_us: f64,
    #[serde(rename = "lat_max_ns", with = "tiermem_host::ns::micros")]
    pub lat_max_us: f64,
    /// Process CPU (user+sys, all threads incl. io_uring kernel threads)
    /// over wall time; 100 = one CPU.
    pub cpu_pct: f64,
    pub cpu_user_pct: f64,
    pub cpu_sys_pct: f64,
    /// Of `cpu_pct`, the share of io_uring kernel threads (SQPOLL, io-wq).
    pub io_thread_cpu_pct: Option<f64>,
    /// io_uring registered buffers used.
    pub registered_buffers: Option<bool>,
    /// `unsupported: …` or `failed: …` when the job produced no figures.
    pub error: Option<String>,
}

impl JobResult {
    /// Whether the job produced figures.
    pub fn is_ok(&self) -> bool {
        self.error.is_none() && self.ops > 0
    }

    /// e.g. `io_uring randread 4K QD32`.
    pub fn label(&self) -> String {
        format!(
            "{} {} {} QD{}{}",
            self.engine,
            self.pattern,
            tiermem_host::format::block_size(self.block_size),
            self.qd,
            if self.fill { " (fill)" } else { "" }
        )
    }
}

/// Everything measured about one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    pub schema: u32,
    pub tiermem_version: String,
    /// Seconds since the Unix epoch when the run finished.
    pub created_unix_s: u64,
    /// The path given.
    pub path: PathBuf,
    pub target: TargetKind,
    pub device: DeviceIdentity,
    pub kernel: String,
    /// Online CPUs (CPU % is per one CPU).
    pub cpus: usize,
    pub io_mode: IoMode,
    /// Bytes covered by the I/O (test file or device size).
    pub test_size: u64,
    #[serde(rename = "duration_per_job_ns", with = "tiermem_host::ns::seconds")]
    pub duration_per_job_s: f64,
    /// Queue depth of the "QD N" jobs.
    pub qd: u32,
    pub jobs: Vec<JobResult>,
    pub notes: Vec<String>,
}

fn best<'a>(
    jobs: impl Iterator<Item = &'a JobResult>,
    key: impl Fn(&JobResult) -> f64,
    lowest: bool,
) -> Option<f64> {
    jobs.filter(|j| j.is_ok())
        .map(key)
        .filter(|v| v.is_finite() && *v > 0.0)
        .reduce(|a, b| if (b < a) == lowest { b } else { a })
}

impl DeviceReport {
    fn matching(&self, pattern: Pattern, qd1: bool) -> impl Iterator<Item = &JobResult> {
        self.jobs
            .iter()
            .filter(move |j| j.pattern == pattern && (j.qd == 1) == qd1)
    }

    /// Best (lowest) mean latency of 4 KiB-class random reads at QD1, µs.
    pub fn qd1_read_latency_us(&self) -> Option<f64> {
        best(
            self.matching(Pattern::RandRead, true),
            |j| j.lat_mean_us,
            true,
        )
    }

    /// Best random-read IOPS at queue depth N (> 1).
    pub fn qdn_read_iops(&self) -> Option<f64> {
        best(self.matching(Pattern::RandRead, false), |j| j.iops, false)
    }

    /// Best sequential read bandwidth, MB/s.
    pub fn seq_read_mb_s(&self) -> Option<f64> {
        best(
            self.jobs.iter().filter(|j| j.pattern == Pattern::SeqRead),
            |j| j.mb_s,
            false,
        )
    }

    /// Best sequential write bandwidth (the fill, or the write jobs), MB/s.
    pub fn seq_write_mb_s(&self) -> Option<f64> {
        best(
            self.jobs.iter().filter(|j| j.pattern == Pattern::SeqWrite),
            |j| j.mb_s,
            false,
        )
    }

    /// Best (lowest) mean latency of random writes at QD1, µs.
    pub fn qd1_write_latency_us(&self) -> Option<f64> {
        best(
            self.matching(Pattern::RandWrite, true),
            |j| j.lat_mean_us,
            true,
        )
    }

    /// Best random-write IOPS at queue depth N (> 1).
    pub fn qdn_write_iops(&self) -> Option<f64> {
        best(self.matching(Pattern::RandWrite, false), |j| j.iops, false)
    }

    /// A fixed-width text table with a header and the notes.
    pub fn render_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "tiermem device — {} ({})",
            self.path.display(),
            match self.target {
                TargetKind::Directory => "private test file",
                TargetKind::RegularFile => "existing file",
                TargetKind::BlockDevice => "block device",
            }
        );
        let _ = writeln!(s, "device:  {}", self.device.describe());
        let _ = writeln!(
            s,
            "kernel:  {}, {} CPU{}, I/O {}, {} MiB covered, {:.1} s per job",
            self.kernel,
            self.cpus,
            if self.cpus == 1 { "" } else { "s" },
            match self.io_mode {
                IoMode::Direct => "O_DIRECT",
                IoMode::Buffered => "BUFFERED (page cache!)",
            },
            self.test_size >> 20,
            self.duration_per_job_s
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<16} {:<9} {:>3} {:>3} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6}",
            "engine",
            "job",
            "bs",
            "qd",
            "IOPS",
            "MB/s",
            "mean µs",
            "p50 µs",
            "p99 µs",
            "p99.9 µs",
            "CPU%",
            "kthr%"
        );
        let _ = writeln!(s, "{}", "-".repeat(109));
        for j in &self.jobs {
            let job = if j.fill {
                format!("{}*", j.pattern)
            } else {
                j.pattern.to_string()
            };
            let head = format!(
                "{:<16} {:<9} {:>3} {:>3}",
                j.engine.name(),
                job,
                tiermem_host::format::block_size(j.block_size),
                j.qd
            );
            match &j.error {
                Some(e) => {
                    let _ = writeln!(s, "{head}  {e}");
                }
                None => {
                    let _ = writeln!(
                        s,
                        "{head} {:>9.0} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>6.0} {:>6}",
                        j.iops,
                        j.mb_s,
                        j.lat_mean_us,
                        j.lat_p50_us,
                        j.lat_p99_us,
                        j.lat_p999_us,
                        j.cpu_pct,
                        j.io_thread_cpu_pct
                            .map_or_else(|| "-".to_string(), |v| format!("{v:.0}"))
                    );
                }
            }
        }
        let _ = writeln!(s);
        let fmt = |v: Option<f64>, unit: &str| {
            v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.1} {unit}"))
        };
        let _ = writeln!(
            s,
            "best: 4K randread QD1 {}, randread QD{} {}, seq read {}, 4K randwrite QD1 {}, \
             seq write {}",
            fmt(self.qd1_read_latency_us(), "µs"),
            self.qd,
            fmt(self.qdn_read_iops(), "IOPS"),
            fmt(self.seq_read_mb_s(), "MB/s"),
            fmt(self.qd1_write_latency_us(), "µs"),
            fmt(self.seq_write_mb_s(), "MB/s"),
        );
        if self.jobs.iter().any(|j| j.fill) {
            let _ = writeln!(s, "* = the sequential fill of the test file");
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).context("serialising the device report")
    }

    /// Write the report as JSON to `path` (atomically: temp file + rename),
    /// creating parent directories.
    pub fn save(&self, path: &Path) -> Result<()> {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let json = self.to_json()?;
        let tmp = dir.join(format!(
            ".{}.tmp-{}",
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "device".into()),
            std::process::id()
        ));
        let write = || -> std::io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(json.as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()?;
            fs::rename(&tmp, path)
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            anyhow::Error::new(e).context(format!("writing {}", path.display()))
        })
    }

    /// Read a report saved by [`DeviceReport::save`].
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let r: DeviceReport = serde_json::from_str(&text)
            .with_context(|| format!("parsing device report {}", path.display()))?;
        if r.schema != REPORT_SCHEMA {
            anyhow::bail!(
                "{}: report schema {} is not the supported {}",
                path.display(),
                r.schema,
                REPORT_SCHEMA
            );
        }
        Ok(r)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn job(engine: Engine, pattern: Pattern, qd: u32, iops: f64, lat: f64) -> JobResult {
        JobResult {
            engine,
            pattern,
            block_size: if pattern.is_random() { 4096 } else { 1 << 20 },
            qd,
            fill: false,
            runtime_s: 1.0,
            ops: iops as u64,
            iops,
            mb_s: iops * 4096.0 / 1e6,
            lat_mean_us: lat,
            lat_p50_us: lat,
            lat_p99_us: lat * 2.0,
            lat_p999_us: lat * 3.0,
            lat_max_us: lat * 4.0,
            cpu_pct: 50.0,
            cpu_user_pct: 10.0,
            cpu_sys_pct: 40.0,
            io_thread_cpu_pct: None,
            registered_buffers: Some(true),
            error: None,
        }
    }

    pub(crate) fn sample() -> DeviceReport {
        let mut unsupported = job(Engine::IoUringIopoll, Pattern::RandRead, 1, 0.0, 0.0);
        unsupported.ops = 0;
        unsupported.error = Some("unsupported: test".into());
        DeviceReport {
            schema: REPORT_SCHEMA,
            tiermem_version: "test".into(),
            created_unix_s: 1,
            path: "/var/tmp".into(),
            target: TargetKind::Directory,
            device: DeviceIdentity {
                major: 254,
                minor: 0,
                ..Default::default()
            },
            kernel: "6.18".into(),
            cpus: 2,
            io_mode: IoMode::Direct,
            test_size: 1 << 30,
            duration_per_job_s: 3.0,
            qd: 32,
            jobs: vec![
                job(Engine::Psync, Pattern::RandRead, 1, 15000.0, 60.0),
                job(Engine::IoUring, Pattern::RandRead, 1, 17000.0, 55.0),
                job(Engine::IoUring, Pattern::RandRead, 32, 100000.0, 300.0),
                job(Engine::Psync, Pattern::RandRead, 32, 80000.0, 390.0),
                job(Engine::IoUring, Pattern::RandWrite, 1, 10000.0, 95.0),
                job(Engine::IoUring, Pattern::SeqRead, 4, 1300.0, 3000.0),
                unsupported,
            ],
            notes: vec!["a note".into()],
        }
    }

    #[test]
    fn summary_figures_pick_the_best_engine() {
        let r = sample();
        assert_eq!(r.qd1_read_latency_us(), Some(55.0));
        assert_eq!(r.qdn_read_iops(), Some(100000.0));
        assert_eq!(r.qd1_write_latency_us(), Some(95.0));
        assert!((r.seq_read_mb_s().unwrap() - 1300.0 * 4096.0 / 1e6).abs() < 1e-9);
        assert_eq!(r.seq_write_mb_s(), None);
    }

    #[test]
    fn table_and_json_round_trip() {
        let r = sample();
        let t = r.render_table();
        assert!(t.contains("io_uring-iopoll"), "{t}");
        assert!(t.contains("unsupported: test"), "{t}");
        assert!(t.contains("note: a note"), "{t}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/report.json");
        r.save(&p).unwrap();
        assert_eq!(DeviceReport::load(&p).unwrap(), r);
        assert_eq!(
            std::fs::read_dir(dir.path().join("sub")).unwrap().count(),
            1
        );
        std::fs::write(&p, "{not json").unwrap();
        assert!(DeviceReport::load(&p).is_err());
    }
}
