//! `tiermem probe`: infers the organization of a memory cache from timing
//! alone — five tests (cache size, line size, prefetch, associativity,
//! write policy), after the method of "An Analysis and Software
//! Reimplementation of Intel Optane DC Memory Mode" (chapter 4), done with
//! serialized rdtsc/rdtscp timing, timer-interrupt filtering, randomized
//! cache clearing and outlier removal.
//!
//! Targets:
//! - `dram`: the CPU's caches, measured in this process (validates the method);
//! - `tiermem`: a child process started with libtiermem.so preloaded, as
//!   `tiermem run` starts programs, probing a large anonymous mmap that tiermem
//!   tiers; configured by the same flags and `TIERMEM_*` variables;
//! - `kernel-swap`: a child in a memory cgroup limited to `--dram`, with a
//!   swapfile (root; everything is removed on every exit path).
//!
//! The child reports progress as `@progress <fraction> <phase>` lines on
//! stderr and its report as JSON on stdout.

pub mod cpu;
pub mod paging;
pub mod plot;
pub mod report;
pub mod stats;
pub mod sys;

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, Context};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use tiermem_core::config::{ENV_BACKING, ENV_DRAM, ENV_PAGE_SIZE, ENV_POLICY};
use tiermem_core::Config;

pub use report::{Estimate, Report, WritePolicy};

/// The hidden argument that turns the binary into a probe worker.
pub const WORKER_ARG: &str = "__probe-worker";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum Target {
    /// The CPU's own caches (L1/L2/L3 in front of DRAM).
    Dram,
    /// tiermem: DRAM in front of the backing store.
    Tiermem,
    /// Linux kernel swap: a memory cgroup in front of a swapfile.
    KernelSwap,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Dram => "dram",
            Target::Tiermem => "tiermem",
            Target::KernelSwap => "kernel-swap",
        }
    }
}

/// Infer a memory cache's size, line size, prefetch degree, associativity
/// and write policy from access timing alone.
///
/// Examples:
///   tiermem probe --target dram
///   tiermem probe --target tiermem --dram 16M --page-size 16K --json
///   TIERMEM_ASSOCIATIVITY=4 tiermem probe --dram 16M --plot figs/
///   sudo tiermem probe --target kernel-swap --dram 32M
#[derive(Args, Debug, Clone)]
#[command(verbatim_doc_comment)]
pub struct ProbeArgs {
    /// What to probe.
    #[arg(long, value_enum, default_value = "tiermem")]
    pub target: Target,
    /// DRAM budget (tiermem) or cgroup memory limit (kernel-swap).
    /// [default: TIERMEM_DRAM, else 64M]
    #[arg(long, value_name = "SIZE")]
    pub dram: Option<String>,
    /// tiermem page size. [default: TIERMEM_PAGE_SIZE, else 4K]
    #[arg(long, value_name = "SIZE")]
    pub page_size: Option<String>,
    /// tiermem replacement policy. [default: TIERMEM_POLICY, else clock]
    #[arg(long, value_name = "clock|fifo|s3fifo")]
    pub policy: Option<String>,
    #[command(flatten)]
    pub organization: tiermem_core::organization::OrganizationArgs,
    /// Backing store (tiermem) or swapfile directory (kernel-swap).
    /// [default: TIERMEM_BACKING, else /var/tmp]
    #[arg(long, value_name = "PATH")]
    pub backing: Option<String>,
    /// Size of the probed region. [default: 4 x the budget + 32M]
    #[arg(long, value_name = "SIZE")]
    pub region: Option<String>,
    /// Print exactly the five parameters as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write SVG figures (scatter plots and histograms of each test) here;
    /// the directory is made if need be. SVG text needs no font installed.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Seed for the random placement of test regions.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// What the parent tells a worker.
#[derive(Serialize, Deserialize, Debug)]
struct WorkerSpec {
    target: Target,
    region_bytes: u64,
    hint_bytes: u64,
    seed: u64,
}

const DEFAULT_BUDGET: u64 = 64 << 20;

fn parse(setting: &'static str, text: &str) -> anyhow::Result<u64> {
    Ok(tiermem_core::parse_size(setting, text)?.resolve())
}

/// The configuration a `--target tiermem` worker runs with: flags over
/// `TIERMEM_*` variables over defaults (64 MiB budget), as `tiermem run`.
pub fn resolve_config(args: &ProbeArgs) -> anyhow::Result<Config> {
    let flag = |var: &str| -> Option<String> {
        match var {
            ENV_DRAM => args.dram.clone(),
            ENV_PAGE_SIZE => args.page_size.clone(),
            ENV_POLICY => args.policy.clone(),
            ENV_BACKING => args.backing.clone(),
            _ => args.organization.flag_for(var).map(|(_, v)| v),
        }
    };
    let env = |var: &str| std::env::var(var).ok();
    let config = Config::from_lookup(|var| {
        tiermem_core::settings::setting(var)
            .and_then(|setting| tiermem_core::settings::given(setting, flag(var), &env))
            .map(|r| r.value)
            // The probe's own budget; the core fills in the other defaults.
            .or_else(|| (var == ENV_DRAM).then(|| DEFAULT_BUDGET.to_string()))
    })?;
    Ok(config)
}

/// `libtiermem.so`, found as every tiermem command finds it.
pub fn find_library() -> anyhow::Result<PathBuf> {
    Ok(tiermem_core::preload_library::find()?)
}

/// Runs the probe as the user asked; returns the exit status.
pub fn run(args: &ProbeArgs, worker: Command) -> anyhow::Result<i32> {
    if let Some(dir) = &args.plot {
        // Before measuring: a directory that cannot be made should not cost a probe.
        plot::make_dir(dir)?;
    }
    let report = match args.target {
        Target::Dram => run_dram(args)?,
        Target::Tiermem => run_tiermem(args, worker)?,
        Target::KernelSwap => run_kernel_swap(args, worker)?,
    };
    if let Some(path) = std::env::var_os("TIERMEM_PROBE_DUMP") {
        // Everything measured, for records and further analysis.
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", Path::new(&path).display()))?;
    }
    if let Some(dir) = &args.plot {
        plot::write_all(&report, dir)
            .with_context(|| format!("writing figures to {}", dir.display()))?;
    }
    if args.json {
        let body = serde_json::to_value(report.json())?;
        let out = tiermem_host::wrap("tiermem.probe/1", body);
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", report.table());
        if let Some(dir) = &args.plot {
            println!("figures: {}", dir.display());
        }
    }
    Ok(0)
}

fn progress_bar() -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(1000);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {msg}")
            .expect("valid template"),
    );
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    pb
}

fn run_dram(args: &ProbeArgs) -> anyhow::Result<Report> {
    let pb = progress_bar();
    let cpu = sys::pin_to_current_cpu();
    let tpn = sys::ticks_per_ns();
    let mut progress = |what: &str, done: f64| {
        pb.set_position((done * 1000.0) as u64);
        pb.set_message(what.to_string());
    };
    let mut report = cpu::CpuProbe::new(cpu, args.seed, tpn, &mut progress)?.run()?;
    pb.finish_and_clear();
    report.target = "dram (CPU caches)".into();
    Ok(report)
}

fn region_for(args: &ProbeArgs, hint: u64) -> anyhow::Result<u64> {
    Ok(match &args.region {
        Some(r) => parse("--region", r)?,
        None => 4 * hint + (32 << 20),
    })
}

fn worker_spec_arg(spec: &WorkerSpec) -> anyhow::Result<OsString> {
    Ok(serde_json::to_string(spec)?.into())
}

fn run_tiermem(args: &ProbeArgs, mut worker: Command) -> anyhow::Result<Report> {
    let config = resolve_config(args)?;
    let lib = find_library()?;
    let spec = WorkerSpec {
        target: Target::Tiermem,
        region_bytes: region_for(args, config.dram_budget)?,
        hint_bytes: config.dram_budget,
        seed: args.seed,
    };
    worker.arg(worker_spec_arg(&spec)?);
    worker.envs(config.to_env());
    worker.env("TIERMEM_PRELOAD", "1");
    let mut preload = lib.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    worker.env("LD_PRELOAD", preload);
    let mut report = run_worker(worker, None)?;
    let organization = config.organization.describe();
    let organization = match config.organization.prefetch {
        None if !config.io.readahead => {
            organization.replace("adaptive read-ahead", "read-ahead off")
        }
        _ => organization,
    };
    report.target = format!(
        "tiermem (budget {}, page {}, policy {}; {organization})",
        tiermem_host::format::bytes_exact_or_mib(config.dram_budget),
        tiermem_host::format::bytes_exact_or_mib(config.page_size as u64),
        config.policy.name(),
    );
    Ok(report)
}

fn run_kernel_swap(args: &ProbeArgs, mut worker: Command) -> anyhow::Result<Report> {
    use tiermem_bench::kernel_swap::{SandboxSpec, SwapSandbox};
    let limit = match args.dram.clone().or_else(|| std::env::var(ENV_DRAM).ok()) {
        Some(v) => parse(ENV_DRAM, &v)?,
        None => DEFAULT_BUDGET,
    };
    let region = region_for(args, limit)?;
    let swap_dir = PathBuf::from(
        args.backing
            .clone()
            .or_else(|| std::env::var(ENV_BACKING).ok())
            .unwrap_or_else(|| "/var/tmp".into()),
    );
    let mut sandbox = SwapSandbox::create(&SandboxSpec {
        memory_limit_bytes: limit,
        swap_bytes: region + (64 << 20),
        swap_dir,
        swap_device: None,
        overflow_swapfile_bytes: None,
    })?;
    let spec = WorkerSpec {
        target: Target::KernelSwap,
        region_bytes: region,
        hint_bytes: limit,
        seed: args.seed,
    };
    worker.arg(worker_spec_arg(&spec)?);
    // Untiered: the worker must not inherit a preload.
    worker
        .env_remove("LD_PRELOAD")
        .env_remove("TIERMEM_PRELOAD");
    sandbox.configure_command(&mut worker);
    let result = run_worker(worker, Some(&sandbox));
    let stats = sandbox.stats().ok();
    let cleanup = sandbox.cleanup();
    let mut report = result?;
    cleanup?;
    report.target = format!(
        "kernel swap (cgroup v1 limit {})",
        tiermem_host::format::bytes_exact_or_mib(limit)
    );
    if let Some(st) = stats {
        report.notes.push(format!(
            "cgroup: {} major faults, peak usage {}",
            st.pgmajfault,
            tiermem_host::format::bytes_exact_or_mib(st.max_usage_bytes)
        ));
    }
    Ok(report)
}

/// Starts a worker, shows its progress, returns its report.
fn run_worker(
    mut cmd: Command,
    sandbox: Option<&tiermem_bench::kernel_swap::SwapSandbox>,
) -> anyhow::Result<Report> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().context("starting the probe worker")?;
    if let Some(sb) = sandbox {
        sb.adopt_child(child.id() as i32);
    }
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let pb = progress_bar();
    let stderr = child.stderr.take().expect("piped");
    let mut messages = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        if let Some(rest) = line.strip_prefix("@progress ") {
            if let Some((f, what)) = rest.split_once(' ') {
                pb.set_position((f.parse::<f64>().unwrap_or(0.0) * 1000.0) as u64);
                pb.set_message(what.to_string());
            }
        } else {
            pb.suspend(|| eprintln!("{line}"));
            messages.push(line);
        }
    }
    pb.finish_and_clear();
    let status = child.wait().context("waiting for the probe worker")?;
    let out = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(anyhow!(
            "the probe worker failed ({status}){}",
            messages
                .last()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ));
    }
    serde_json::from_str(&out).context("reading the probe worker's report")
}

/// The worker's `main`: measures and prints its report as JSON.
pub fn worker_main(spec: &str) -> i32 {
    let spec: WorkerSpec = match serde_json::from_str(spec) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bad worker spec: {e}");
            return 2;
        }
    };
    let cpu = sys::pin_to_current_cpu();
    let tpn = sys::ticks_per_ns();
    let mut progress = |what: &str, done: f64| {
        eprintln!("@progress {done:.3} {what}");
    };
    let result = match spec.target {
        Target::Dram => {
            cpu::CpuProbe::new(cpu, spec.seed, tpn, &mut progress).and_then(|p| p.run())
        }
        Target::Tiermem | Target::KernelSwap => {
            let setup = paging::Setup {
                region_bytes: spec.region_bytes as usize,
                hint_bytes: spec.hint_bytes as usize,
                seed: spec.seed,
                cpu,
                ticks_per_ns: tpn,
            };
            paging::Probe::new(&setup, &mut progress).and_then(|p| p.run())
        }
    };
    match result {
        Ok(report) => {
            println!("{}", serde_json::to_string(&report).expect("serializable"));
            0
        }
        Err(e) => {
            eprintln!("probe: {e:#}");
            1
        }
    }
}
