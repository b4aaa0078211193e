//! How the runtime talks to the backing device: engine, queue depth,
//! polling, read-ahead and write prediction. Part of [`crate::Config`]; each setting has a
//! `TIERMEM_*` variable and goes through the same error reporting.

use std::str::FromStr;

use crate::error::{invalid, Error, Result};
use crate::settings::env_or_default;
use crate::units::parse_switch;

/// How page reads are issued: `io_uring` (the default) or `psync`.
pub const ENV_IO_ENGINE: &str = "TIERMEM_IO_ENGINE";
/// Page reads one handler thread keeps in flight at most, 1 to 1024.
pub const ENV_IO_DEPTH: &str = "TIERMEM_IO_DEPTH";
/// Completion polling of the io_uring: `none` (the default), `sqpoll`,
/// `iopoll` or `hybrid`.
pub const ENV_IO_POLL: &str = "TIERMEM_IO_POLL";
/// Read-ahead of sequential and strided streams: `on` (the default) or `off`.
pub const ENV_READAHEAD: &str = "TIERMEM_READAHEAD";
/// Read faults installed writable once most read pages get written: `on`
/// (the default) or `off`.
pub const ENV_PREDICT_WRITES: &str = "TIERMEM_PREDICT_WRITES";
/// How long a fault handler polls before it sleeps, in microseconds (0 to
/// 10000).
pub const ENV_IDLE_SPIN: &str = "TIERMEM_IDLE_SPIN_US";
/// When eviction checks for pages pinned by asynchronous I/O: `auto` (the
/// default), `on` or `off`.
pub const ENV_ASYNC_IO: &str = "TIERMEM_ASYNC_IO";
/// How long a fault handler polls for its next event before it sleeps,
/// by default. A program that pages keeps faulting every few tens of
/// microseconds, so a window of a few misses keeps the handlers awake
/// through a paging burst and lets them sleep a fifth of a millisecond
/// after it.
pub const DEFAULT_IDLE_SPIN_US: u32 = 200;
/// The longest idle spin accepted: beyond a few milliseconds a spinning
/// handler is a busy loop, not a shortcut past a wake-up.
pub const MAX_IDLE_SPIN_US: u32 = 10_000;

/// Page reads one handler thread keeps in flight at most: enough for the
/// parallelism of an NVMe or virtio queue at 4 KiB.
pub const DEFAULT_IO_DEPTH: u32 = 32;
const MAX_IO_DEPTH: u32 = 1024;

/// How page reads are issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoEngine {
    /// io_uring with registered buffers and many reads in flight per
    /// handler; pread/pwrite where io_uring is unavailable (e.g. seccomp).
    IoUring,
    /// Synchronous pread/pwrite, one read per handler thread at a time.
    Psync,
}

/// Completion polling of the io_uring: polling spends CPU time to take
/// microseconds off each completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollMode {
    /// Interrupt-driven completions.
    None,
    /// A kernel thread polls the submission queue (IORING_SETUP_SQPOLL).
    Sqpoll,
    /// Completions polled from the device (IORING_SETUP_IOPOLL). Needs a
    /// backing device with poll queues; falls back with a note otherwise.
    Iopoll,
    /// IOPOLL that sleeps for about half the expected latency before it
    /// polls (IORING_SETUP_HYBRID_IOPOLL); same requirement.
    Hybrid,
}

/// Whether eviction asks the kernel about pages pinned by asynchronous
/// I/O (io_uring, AIO) before it unmaps a dirty page (see `pins`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncIo {
    /// From the moment the program sets up an io_uring or an AIO context
    /// (the interposer sees the system call).
    Auto,
    /// From the start: for programs whose setup tiermem cannot see (a
    /// system call instruction of their own, a ring received from another
    /// process, the Rust API without the C library).
    On,
    /// Never: for programs whose asynchronous I/O never targets tiered
    /// memory, which then evict at full speed.
    Off,
}

impl AsyncIo {
    /// The name `TIERMEM_ASYNC_IO` takes.
    pub fn name(self) -> &'static str {
        match self {
            AsyncIo::Auto => "auto",
            AsyncIo::On => "on",
            AsyncIo::Off => "off",
        }
    }
}

impl FromStr for AsyncIo {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(AsyncIo::Auto),
            "on" => Ok(AsyncIo::On),
            "off" => Ok(AsyncIo::Off),
            _ => Err(invalid(
                ENV_ASYNC_IO,
                s,
                "expected auto (the default), on or off",
            )),
        }
    }
}

impl PollMode {
    /// The name `TIERMEM_IO_POLL` takes.
    pub fn name(self) -> &'static str {
        match self {
            PollMode::None => "none",
            PollMode::Sqpoll => "sqpoll",
            PollMode::Iopoll => "iopoll",
            PollMode::Hybrid => "hybrid",
        }
    }
}

/// How the runtime talks to the backing device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoSettings {
    /// How page reads are issued.
    pub engine: IoEngine,
    /// Page reads one handler thread keeps in flight at most.
    pub depth: u32,
    /// Completion polling of the io_uring.
    pub poll: PollMode,
    /// Detect sequential and strided streams and read ahead of them.
    pub readahead: bool,
    /// Install read faults writable once most read pages get written
    /// (see `fault::write_prediction`).
    pub predict_writes: bool,
    /// Microseconds a fault handler keeps polling for its next fault or
    /// completion before it sleeps; 0 sleeps at once (see
    /// `fault::ring`'s idle spin).
    pub idle_spin_us: u32,
    /// When eviction checks for pages pinned by asynchronous I/O.
    pub async_io: AsyncIo,
}

impl Default for IoSettings {
    fn default() -> Self {
        IoSettings {
            engine: IoEngine::IoUring,
            depth: DEFAULT_IO_DEPTH,
            poll: PollMode::None,
            readahead: true,
            predict_writes: true,
            idle_spin_us: DEFAULT_IDLE_SPIN_US,
            async_io: AsyncIo::Auto,
        }
    }
}

impl FromStr for IoEngine {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "io_uring" | "io-uring" | "uring" => Ok(IoEngine::IoUring),
            "psync" | "pread" => Ok(IoEngine::Psync),
            _ => Err(invalid(ENV_IO_ENGINE, s, "expected io_uring or psync")),
        }
    }
}

impl FromStr for PollMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" | "off" | "interrupt" => Ok(PollMode::None),
            "sqpoll" => Ok(PollMode::Sqpoll),
            "iopoll" => Ok(PollMode::Iopoll),
            "hybrid" | "hybrid-iopoll" => Ok(PollMode::Hybrid),
            _ => Err(invalid(
                ENV_IO_POLL,
                s,
                "expected none, sqpoll, iopoll or hybrid",
            )),
        }
    }
}

/// `TIERMEM_IDLE_SPIN_US`: microseconds, 0 to `MAX_IDLE_SPIN_US`.
pub fn parse_idle_spin(v: &str) -> Result<u32> {
    v.trim()
        .parse()
        .ok()
        .filter(|us| *us <= MAX_IDLE_SPIN_US)
        .ok_or_else(|| {
            invalid(
                ENV_IDLE_SPIN,
                v,
                "expected microseconds from 0 (sleep at once) to 10000",
            )
        })
}

impl IoSettings {
    /// Defaults overridden by the I/O variables `lookup` returns.
    pub fn from_lookup(lookup: &impl Fn(&str) -> Option<String>) -> Result<IoSettings> {
        let mut io = IoSettings::default();
        if let Some(v) = env_or_default(ENV_IO_ENGINE, lookup) {
            io.engine = v.parse()?;
        }
        if let Some(v) = env_or_default(ENV_IO_DEPTH, lookup) {
            io.depth = v
                .trim()
                .parse()
                .ok()
                .filter(|d| (1..=MAX_IO_DEPTH).contains(d))
                .ok_or_else(|| {
                    invalid(ENV_IO_DEPTH, &v, "expected a whole number from 1 to 1024")
                })?;
        }
        if let Some(v) = env_or_default(ENV_IO_POLL, lookup) {
            io.poll = v.parse()?;
        }
        if let Some(v) = env_or_default(ENV_READAHEAD, lookup) {
            io.readahead = parse_switch(ENV_READAHEAD, &v)?;
        }
        if let Some(v) = env_or_default(ENV_PREDICT_WRITES, lookup) {
            io.predict_writes = parse_switch(ENV_PREDICT_WRITES, &v)?;
        }
        if let Some(v) = env_or_default(ENV_IDLE_SPIN, lookup) {
            io.idle_spin_us = parse_idle_spin(&v)?;
        }
        if let Some(v) = env_or_default(ENV_ASYNC_IO, lookup) {
            io.async_io = v.parse()?;
        }
        Ok(io)
    }

    /// Appends every I/O setting as a variable, for a child process.
    pub fn to_env(&self, env: &mut Vec<(&'static str, String)>) {
        let engine = match self.engine {
            IoEngine::IoUring => "io_uring",
            IoEngine::Psync => "psync",
        };
        env.push((ENV_IO_ENGINE, engine.into()));
        env.push((ENV_IO_DEPTH, self.depth.to_string()));
        env.push((ENV_IO_POLL, self.poll.name().into()));
        env.push((
            ENV_READAHEAD,
            if self.readahead { "on" } else { "off" }.into(),
        ));
        env.push((
            ENV_PREDICT_WRITES,
            if self.predict_writes { "on" } else { "off" }.into(),
        ));
        env.push((ENV_IDLE_SPIN, self.idle_spin_us.to_string()));
        env.push((ENV_ASYNC_IO, self.async_io.name().into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_round_trip() {
        let env = |k: &str| match k {
            ENV_IO_ENGINE => Some("psync".to_string()),
            ENV_IO_DEPTH => Some("8".to_string()),
            ENV_READAHEAD => Some("off".to_string()),
            ENV_IO_POLL => Some("hybrid".to_string()),
            ENV_PREDICT_WRITES => Some("off".to_string()),
            ENV_IDLE_SPIN => Some("50".to_string()),
            ENV_ASYNC_IO => Some("on".to_string()),
            _ => None,
        };
        let io = IoSettings::from_lookup(&env).unwrap();
        assert_eq!(
            io,
            IoSettings {
                engine: IoEngine::Psync,
                depth: 8,
                poll: PollMode::Hybrid,
                readahead: false,
                predict_writes: false,
                idle_spin_us: 50,
                async_io: AsyncIo::On,
            }
        );
        let mut out = Vec::new();
        io.to_env(&mut out);
        let back = IoSettings::from_lookup(&|k: &str| {
            out.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        })
        .unwrap();
        assert_eq!(back, io);
        let bad = IoSettings::from_lookup(&|k: &str| (k == ENV_IO_DEPTH).then(|| "0".into()));
        assert!(bad.unwrap_err().to_string().contains(ENV_IO_DEPTH));
        let bad = IoSettings::from_lookup(&|k: &str| (k == ENV_ASYNC_IO).then(|| "maybe".into()));
        assert!(bad.unwrap_err().to_string().contains(ENV_ASYNC_IO));
        for spin in ["-1", "10001", "lots"] {
            let bad = IoSettings::from_lookup(&|k: &str| (k == ENV_IDLE_SPIN).then(|| spin.into()));
            let err = bad.unwrap_err().to_string();
            assert!(err.contains(ENV_IDLE_SPIN), "{spin}: {err}");
        }
    }
}
