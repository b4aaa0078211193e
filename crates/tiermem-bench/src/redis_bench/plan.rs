//! The run's plan: the settings as given, resolved and checked (sizes
//! parsed, the key count derived, the Redis tools and libtiermem.so found)
//! before the first server starts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context};
use serde::Serialize;
use tiermem_core::parse_size;

use crate::compressed::CompressedOptions;
use crate::page_data::PageData;
use crate::report::human_bytes;
use crate::result::Mode;

/// Largest value accepted (Redis' default proto-max-bulk-len is 512 MiB).
const MAX_VALUE_SIZE: u64 = 64 << 20;

/// What `tiermem bench-redis` was asked for, as given on its command line:
/// sizes are still text, parsed (and named by their flags) in the plan.
#[derive(Debug)]
pub struct Settings {
    /// `--dataset`: bytes of values loaded.
    pub dataset: String,
    /// `--dram`: the DRAM budget for tiermem and the cgroup limit for
    /// kernel swap.
    pub dram: String,
    /// `--value-size`: the size of each value.
    pub value_size: String,
    /// `--data`: what the loaded values hold.
    pub data: PageData,
    /// `--clients`: parallel connections of redis-benchmark.
    pub clients: u32,
    /// `--requests`: requests per test of redis-benchmark.
    pub requests: u64,
    /// `--backing`: tiermem's backing store; kernel swap's swapfile goes on
    /// its filesystem.
    pub backing: PathBuf,
    /// `--modes`: the modes, run in this order.
    pub modes: Vec<Mode>,
    /// `--json`: the results as JSON on stdout instead of the table.
    pub json: bool,
    /// `--redis-server`: the redis-server to run (default: PATH).
    pub redis_server: Option<PathBuf>,
    /// `--redis-benchmark`: the redis-benchmark to run (default: PATH).
    pub redis_benchmark: Option<PathBuf>,
    /// The compressed modes' options, or why their flags are invalid: an
    /// error is reported after every other setting has been checked.
    pub compressed: anyhow::Result<CompressedOptions>,
}

/// Everything resolved before the first server starts.
#[derive(Debug, Serialize)]
pub(super) struct Plan {
    pub(super) dataset_bytes: u64,
    pub(super) dram_bytes: u64,
    pub(super) value_size: u64,
    /// What the loaded values hold (redis-benchmark's SETs write its own
    /// values, runs of 'x').
    pub(super) data: PageData,
    pub(super) keys: u64,
    pub(super) clients: u32,
    pub(super) requests: u64,
    pub(super) backing: PathBuf,
    pub(super) redis_server: PathBuf,
    pub(super) redis_server_version: String,
    pub(super) redis_benchmark: PathBuf,
    #[serde(skip)]
    pub(super) modes: Vec<Mode>,
    #[serde(skip)]
    pub(super) compressed: CompressedOptions,
}

pub(super) fn make_plan(args: Settings) -> anyhow::Result<Plan> {
    let size = |setting: &'static str, text: &str| -> anyhow::Result<u64> {
        Ok(parse_size(setting, text)?.resolve())
    };
    let dataset_bytes = size("--dataset", &args.dataset)?;
    let dram_bytes = size("--dram", &args.dram)?;
    let value_size = size("--value-size", &args.value_size)?;
    if value_size == 0 || value_size > MAX_VALUE_SIZE {
        bail!(
            "invalid --value-size '{}': expected 1 byte to {}",
            args.value_size,
            human_bytes(MAX_VALUE_SIZE)
        );
    }
    let keys = dataset_bytes / value_size;
    if keys == 0 {
        bail!(
            "--dataset {} is smaller than one value (--value-size {}): no key to load",
            args.dataset,
            args.value_size
        );
    }
    if keys >= 1_000_000_000_000 {
        bail!("--dataset / --value-size gives {keys} keys; at most 999999999999 fit redis-benchmark's key format");
    }
    if dram_bytes == 0 {
        bail!(
            "invalid --dram '{}': the budget must be more than 0 bytes",
            args.dram
        );
    }
    let mut modes = Vec::new();
    for m in &args.modes {
        if !modes.contains(m) {
            modes.push(*m);
        }
    }
    if modes.is_empty() {
        bail!(
            "--modes is empty: give some of dram, tiermem, kernel-swap, kernel-zswap, kernel-zram"
        );
    }
    let redis_server = find_tool(
        args.redis_server.as_deref(),
        "redis-server",
        "--redis-server",
    )?;
    let redis_benchmark = find_tool(
        args.redis_benchmark.as_deref(),
        "redis-benchmark",
        "--redis-benchmark",
    )?;
    let redis_server_version = Command::new(&redis_server)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} --version", redis_server.display()))
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())?;
    Ok(Plan {
        dataset_bytes,
        dram_bytes,
        value_size,
        data: args.data,
        keys,
        clients: args.clients,
        requests: args.requests,
        backing: args.backing.clone(),
        redis_server,
        redis_server_version,
        redis_benchmark,
        modes,
        compressed: args.compressed?,
    })
}

/// `given` if set (it must exist), else `name` searched in PATH.
fn find_tool(given: Option<&Path>, name: &str, flag: &str) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        if !p.is_file() {
            bail!("{flag} {}: no such file", p.display());
        }
        return Ok(p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow!(
                "{name} was not found in PATH.\n\
                 Fix: install Redis (e.g. `apt-get install redis-server redis-tools`) or pass {flag} PATH."
            )
        })
}

/// The libtiermem.so to preload: found the way `tiermem run` finds it.
pub(super) fn find_library() -> anyhow::Result<PathBuf> {
    tiermem_core::preload_library::find().context(
        "tiermem mode preloads libtiermem.so into redis-server (or leave tiermem out of --modes)",
    )
}
