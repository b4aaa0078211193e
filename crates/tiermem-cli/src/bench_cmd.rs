//! `tiermem bench`: DRAM, tiermem and kernel swap side by side.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tiermem_bench::report::{self, DeviceRef};
use tiermem_bench::result::Mode;
use tiermem_bench::runner::{run_plan, BenchPlan};
use tiermem_bench::worker::{worker_main, WorkloadSpec};
use tiermem_core::{parse_size, Config, PolicyKind};

/// A pmbench-style paging benchmark.
///
/// Every mode runs the same workload in its own process: threads access one
/// word of randomly chosen pages of the working set, each access timed.
/// Modes:
///   dram         plain anonymous memory, no limit;
///   tiermem      tiermem with the DRAM budget and backing store given;
///   kernel-swap  plain memory in a cgroup-v1 memory cgroup limited to the
///                budget, with a swapfile on the backing store's filesystem
///                (needs root; removed on every exit path, Ctrl-C included).
///
/// The report gives pages/s, ratios between modes, latency percentiles, the
/// latency of slow accesses (faults, "misses"), and a log2 histogram with
/// 16 sub-bins per power of two as pmbench prints. Every page is stamped
/// before the run and verified after it: lost or corrupted pages are
/// reported, and the exit status is 3 if there are any.
///
/// Examples:
///   tiermem bench                                   (1 GiB in 256 MiB, all modes)
///   tiermem bench --working-set 4G --dram 1G --read-ratio 0 --duration 30
///   tiermem bench --pattern zipf:0.99 --threads 2 --modes tiermem,kernel-swap --json
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct BenchArgs {
    /// Size of the working set (262144, 256K, 256M, 4G, 25%).
    #[arg(long, default_value = "1G")]
    working_set: String,
    /// DRAM budget for tiermem and the cgroup limit for kernel swap.
    #[arg(long, default_value = "256M", env = "TIERMEM_DRAM")]
    dram: String,
    /// Backing store: a directory (a private file is made there), a file or a
    /// block device. Kernel swap puts its swapfile on the same filesystem.
    #[arg(long, default_value = "/var/tmp", env = "TIERMEM_BACKING")]
    backing: PathBuf,
    /// Page size: the unit of access and of tiermem paging (4K .. 2M).
    #[arg(long, default_value = "4K", env = "TIERMEM_PAGE_SIZE")]
    page_size: String,
    /// tiermem replacement policy: clock, fifo or s3fifo.
    #[arg(long, default_value = "clock", env = "TIERMEM_POLICY")]
    policy: String,
    /// tiermem userfaultfd handler threads (default: by CPU count).
    #[arg(long, env = "TIERMEM_HANDLER_THREADS")]
    handler_threads: Option<usize>,
    /// Application threads accessing the working set.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Percentage of accesses that are reads (0 = write-only).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=100))]
    read_ratio: u32,
    /// uniform, zipf[:THETA], sequential, normal[:SIGMA], pareto[:SHAPE].
    #[arg(long, default_value = "uniform")]
    pattern: String,
    /// Measured seconds per mode.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of unmeasured accesses before measuring (after stamping).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Comma-separated modes (default: all available).
    #[arg(long, value_delimiter = ',')]
    modes: Vec<Mode>,
    /// Skip the quick QD1 read-latency measurement of the backing device.
    #[arg(long)]
    no_device_check: bool,
    /// Also print each mode's latency histogram.
    #[arg(long)]
    histograms: bool,
    /// Print the results as JSON on stdout (nothing else goes to stdout).
    #[arg(long)]
    json: bool,
    /// Seed of the access pattern, identical in every mode.
    #[arg(long, default_value_t = 0x7469_6572)]
    seed: u64,
}

fn size(setting: &'static str, text: &str) -> anyhow::Result<u64> {
    Ok(parse_size(setting, text)?.resolve())
}

fn plan(args: &BenchArgs) -> anyhow::Result<BenchPlan> {
    let page_size = size("--page-size", &args.page_size)?;
    let mut builder = Config::builder()
        .dram_budget(size("--dram", &args.dram)?)
        .backing(&args.backing)
        .page_size(page_size as usize)
        .policy(args.policy.parse::<PolicyKind>()?);
    if let Some(n) = args.handler_threads {
        builder = builder.handler_threads(n);
    }
    let tiermem = builder.build()?;
    let working_set = size("--working-set", &args.working_set)?;
    anyhow::ensure!(
        working_set >= page_size,
        "--working-set must hold at least one page"
    );
    anyhow::ensure!(args.threads >= 1, "--threads must be at least 1");
    args.pattern
        .parse::<tiermem_bench::pattern::Pattern>()
        .map_err(anyhow::Error::msg)?;
    let modes = if args.modes.is_empty() {
        Mode::ALL.to_vec()
    } else {
        args.modes.clone()
    };
    let exe = std::env::current_exe().context("locating the tiermem binary")?;
    Ok(BenchPlan {
        workload: WorkloadSpec {
            working_set_bytes: working_set,
            page_size,
            threads: args.threads,
            read_percent: args.read_ratio,
            pattern: args.pattern.clone(),
            duration_s: args.duration,
            warmup_s: args.warmup,
            seed: args.seed,
        },
        modes,
        tiermem,
        worker: (exe, vec!["__bench-worker".into()]),
    })
}

pub fn run(args: &BenchArgs) -> anyhow::Result<i32> {
    let plan = plan(args)?;
    let device = if args.no_device_check {
        None
    } else {
        let dir = if plan.tiermem.backing.is_dir() {
            plan.tiermem.backing.clone()
        } else {
            PathBuf::from("/var/tmp")
        };
        match tiermem_bench::device_ref::measure_qd1_read(&dir, Duration::from_secs(2)) {
            Ok(d) => Some(d),
            Err(e) => {
                eprintln!("tiermem bench: device check skipped: {e:#}");
                None
            }
        }
    };
    let bar = progress_bar(!args.json && std::io::stdout().is_terminal());
    let results = run_plan(&plan, &mut |mode, phase, done| {
        if let Some(b) = &bar {
            b.set_message(format!("{:<11} {phase}", mode.name()));
            b.set_position((done.clamp(0.0, 1.0) * 1000.0) as u64);
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let clean = results.iter().all(|r| r.verify.is_clean());
    if args.json {
        print_json(&plan, &results, device.as_ref())?;
    } else {
        print_human(&plan, &results, device.as_ref(), args.histograms);
    }
    Ok(if clean { 0 } else { 3 })
}

fn progress_bar(show: bool) -> Option<ProgressBar> {
    if !show {
        return None;
    }
    let bar = ProgressBar::new(1000);
    let style = ProgressStyle::with_template("{msg:24} [{bar:40}] {percent:>3}%").ok()?;
    bar.set_style(style.progress_chars("=> "));
    Some(bar)
}

fn print_human(
    plan: &BenchPlan,
    results: &[tiermem_bench::result::ModeResult],
    device: Option<&DeviceRef>,
    histograms: bool,
) {
    let w = &plan.workload;
    println!(
        "tiermem bench: working set {}, budget {}, page {}, {} thread(s), {}% reads, {}, {}s (+{}s warm-up), policy {}",
        report::human_bytes(w.working_set_bytes),
        report::human_bytes(plan.tiermem.dram_budget),
        report::human_bytes(w.page_size),
        w.threads,
        w.read_percent,
        w.pattern,
        w.duration_s,
        w.warmup_s,
        plan.tiermem.policy
    );
    println!();
    print!("{}", report::render_table(results, device));
    if histograms {
        println!();
        print!("{}", report::render_histograms(results));
    }
}

fn print_json(
    plan: &BenchPlan,
    results: &[tiermem_bench::result::ModeResult],
    device: Option<&DeviceRef>,
) -> anyhow::Result<()> {
    let ratios: serde_json::Map<String, serde_json::Value> = report::ratio_summary(results)
        .into_iter()
        .map(|(k, v)| (k, v.into()))
        .collect();
    let summary: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            serde_json::json!({
                "mode": r.mode.name(),
                "pages_per_sec": r.pages_per_sec,
                "mean_ns": r.latency.mean_ns(),
                "p50_ns": r.latency.percentile(50.0),
                "p90_ns": r.latency.percentile(90.0),
                "p99_ns": r.latency.percentile(99.0),
                "p999_ns": r.latency.percentile(99.9),
                "slow_fraction": r.latency.count_at_least(r.slow_threshold_ns) as f64 / r.latency.count().max(1) as f64,
                "miss_p50_ns": r.latency.percentile_at_least(r.slow_threshold_ns, 50.0),
            })
        })
        .collect();
    let out = serde_json::json!({
        "workload": plan.workload,
        "budget_bytes": plan.tiermem.dram_budget,
        "policy": plan.tiermem.policy.name(),
        "backing": plan.tiermem.backing,
        "device_qd1_read_us": device.and_then(|d| d.qd1_read_latency_us),
        "summary": summary,
        "ratios": ratios,
        "results": results,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

pub fn worker(mode: &str, spec: &str) -> i32 {
    let parsed = mode
        .parse::<Mode>()
        .map_err(anyhow::Error::msg)
        .and_then(|m| Ok((m, serde_json::from_str::<WorkloadSpec>(spec)?)));
    match parsed {
        Ok((mode, spec)) => worker_main(mode, &spec),
        Err(e) => {
            eprintln!("tiermem __bench-worker: {e:#}");
            2
        }
    }
}
