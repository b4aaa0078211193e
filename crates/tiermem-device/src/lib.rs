//! `tiermem device`: measure the backing device the way `fio` does.
//!
//! Latency of a low-latency block device is mostly physics (media access,
//! bus, interrupt delivery); what software can change is how much CPU it
//! burns to get close to it. This crate runs a small fixed matrix of jobs
//! (4 KiB random read/write at QD1 and QD N, 1 MiB sequential read/write)
//! over several submission engines — `psync`, `io_uring`, `io_uring` with a
//! submission-polling kernel thread (SQPOLL), with completion polling
//! (IOPOLL) and with hybrid polling — and records IOPS, bandwidth, latency
//! percentiles and CPU cost of each. `tiermem bench` runs the sequential
//! read job alone ([`measure_seq_read`]) beside a scan to print its "% of
//! device limit", and quotes the cached report.
//!
//! Entry points: [`run`] with a [`DeviceConfig`], giving a [`DeviceReport`];
//! [`cache_path_for`] / [`cached_for`] to find a saved report for the
//! filesystem holding a path.

mod buffer;
mod cache;
mod config;
mod engine;
mod identity;
mod job;
mod report;
mod run;
mod stats;
mod target;

pub use cache::{cache_dir, cache_path_for, cached_for};
pub use config::{parse_engines, DeviceConfig, Engine};
pub use identity::{kernel_version, DeviceIdentity};
pub use job::Pattern;
pub use report::{DeviceReport, JobResult, REPORT_SCHEMA};
pub use run::{measure_seq_read, run, Progress};
pub use stats::{CpuSnapshot, CpuUsage, LatencySummary};
pub use target::{IoMode, TargetKind};
