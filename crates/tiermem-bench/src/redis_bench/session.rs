//! One mode from start to end: its kernel-swap sandbox if it has one, a
//! fresh server, the load, the verification, redis-benchmark and the final
//! check, with progress on stderr.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use indicatif::{ProgressBar, ProgressStyle};

use super::benchmark::benchmark;
use super::dataset::{load, verify};
use super::plan::Plan;
use super::process::tail;
use super::report::{ModeReport, Ratios, RunResult, Status};
use super::resp::{Conn, Reply};
use super::server::{peak_rss, tiermem_summary, Launch, Server, WorkDir};
use crate::compressed::{self, Sampler};
use crate::kernel_swap::{SandboxSpec, SwapSandbox};
use crate::report::human_bytes;
use crate::result::Mode;

/// Runs one mode; errors become a `Failed` report, unavailability `Skipped`.
pub(super) fn run_mode(
    plan: &Plan,
    mode: Mode,
    library: Option<&Path>,
    show_bars: bool,
) -> ModeReport {
    let mut report = ModeReport {
        mode,
        status: Status::Ok,
        reason: None,
        run: None,
        ratios: Ratios::default(),
        notes: Vec::new(),
    };
    let outcome = match mode {
        Mode::KernelSwap | Mode::KernelZswap | Mode::KernelZram => {
            if let Err(why) = SwapSandbox::availability() {
                report.status = Status::Skipped;
                report.reason = Some(why);
                return report;
            }
            run_kernel_swap(plan, mode, show_bars, &mut report.notes)
        }
        Mode::Tiermem => match library {
            Some(lib) => {
                if let Some(split) = &plan.compressed.pool_in_budget {
                    report.notes.push(format!(
                        "pool in budget: tiermem's pool at most {}% of the budget, as zswap's",
                        split.tiermem_share_percent
                    ));
                }
                session(plan, mode, Launch::Tiermem(lib), show_bars)
            }
            None => Err(anyhow!("libtiermem.so was not located")),
        },
        Mode::Dram => session(plan, mode, Launch::Plain, show_bars),
    };
    match outcome {
        Ok(run) => report.run = Some(run),
        Err(e) => {
            report.status = Status::Failed;
            report.reason = Some(format!("{e:#}").trim_end().to_string());
        }
    }
    report
}

/// Builds the sandbox, runs the session in it and removes the sandbox on
/// every path (a panic aborts, and the abort hook of `kernel_swap` removes
/// it then; signals are handled by its signal thread).
fn run_kernel_swap(
    plan: &Plan,
    mode: Mode,
    show_bars: bool,
    notes: &mut Vec<String>,
) -> anyhow::Result<RunResult> {
    let swap_dir = if plan.backing.is_dir() {
        plan.backing.clone()
    } else {
        plan.backing
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    };
    let spec = SandboxSpec {
        memory_limit_bytes: plan.dram_bytes,
        // The values, Redis' per-key overhead and allocator slack.
        swap_bytes: plan.dataset_bytes.saturating_mul(2) + (512 << 20),
        swap_dir,
        swap_device: None,
        overflow_swapfile_bytes: None,
    };
    let (mut sandbox, tier) = if mode == Mode::KernelSwap {
        let sandbox = SwapSandbox::create(&spec).context("setting up kernel swap")?;
        (sandbox, None)
    } else {
        let built = compressed::create(mode, &spec, plan.dataset_bytes * 2, &plan.compressed)
            .with_context(|| format!("setting up {}", mode.name()))?;
        notes.extend(built.notes);
        (built.sandbox, Some(built.tier))
    };
    notes.extend(sandbox.warnings().iter().cloned());
    // Sampled while the server lives: its swapped pages go when it exits.
    let sampler = tier.map(Sampler::start);
    let mut result = session(plan, mode, Launch::Sandbox(&sandbox), show_bars);
    if let Some((counters, line)) = sampler.map(Sampler::finish) {
        notes.push(line);
        if let Ok(r) = &mut result {
            r.compressed = Some(counters);
        }
    }
    let cleaned = sandbox.cleanup();
    match (result, cleaned) {
        (Ok(r), Ok(())) => Ok(r),
        (Err(e), Ok(())) => Err(e),
        (Ok(_), Err(c)) => Err(c),
        (Err(e), Err(c)) => Err(anyhow!("{e:#}; and then: {c:#}")),
    }
}

/// One server from start to shutdown: load, verify, benchmark, check.
fn session(
    plan: &Plan,
    mode: Mode,
    launch: Launch<'_>,
    show_bars: bool,
) -> anyhow::Result<RunResult> {
    let dir = WorkDir::create(mode)?;
    let mut server = Server::start(plan, mode, launch, &dir)?;
    // The server's log files are already unlinked and it saves nothing: its
    // directory can go now, so that an interrupted run leaves nothing behind.
    drop(dir);
    let measured = measure(plan, mode, launch, &server, show_bars);
    let mut result = match measured {
        Ok(r) => r,
        Err(e) => {
            let e = server.explain(e);
            return Err(match launch {
                Launch::Sandbox(sb) => name_an_oom_kill(sb, plan, e),
                _ => e,
            });
        }
    };
    result.server_exit = server.shutdown()?;
    let stderr = server.stderr.read();
    if matches!(launch, Launch::Tiermem(_)) {
        result.tiermem_stats = tiermem_summary(&stderr);
        if result.tiermem_stats.is_empty() {
            bail!(
                "redis-server under tiermem printed no statistics at exit ({}); its stderr ends with:\n{}",
                result.server_exit,
                tail(&stderr, 2000)
            );
        }
    }
    Ok(result)
}

/// Says so when the cgroup's OOM killer ended the server: "killed by
/// signal 9" alone reads like a crash of Redis or of the harness.
fn name_an_oom_kill(sandbox: &SwapSandbox, plan: &Plan, e: anyhow::Error) -> anyhow::Error {
    match sandbox.stats() {
        Ok(stats) if stats.oom_kills > 0 => e.context(format!(
            "the memory cgroup's OOM killer killed redis-server ({} OOM kill(s) under the {} \
             limit): reclaim did not keep the cgroup under its limit; the kernel log (dmesg) \
             has the cgroup's memory at that moment",
            stats.oom_kills,
            human_bytes(plan.dram_bytes),
        )),
        _ => e,
    }
}

fn measure(
    plan: &Plan,
    mode: Mode,
    launch: Launch<'_>,
    server: &Server,
    show_bars: bool,
) -> anyhow::Result<RunResult> {
    let mut r = RunResult {
        port: server.port,
        ..RunResult::default()
    };
    let mut conn = Conn::connect(server.port)?;

    let bar = key_bar(show_bars, mode, "load", plan.keys);
    if !show_bars {
        eprintln!(
            "tiermem bench-redis: {}: loading {} keys of {} B",
            mode.name(),
            plan.keys,
            plan.value_size
        );
    }
    let started = Instant::now();
    load(&mut conn, plan, &bar).context("loading the dataset")?;
    r.load_seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    r.redis_used_memory = conn
        .info_field("memory", "used_memory")
        .context("INFO memory")?;

    let bar = key_bar(show_bars, mode, "verify", plan.keys);
    if !show_bars {
        eprintln!("tiermem bench-redis: {}: verifying every key", mode.name());
    }
    let started = Instant::now();
    let (lost, corrupt) = verify(&mut conn, plan, &bar).context("verifying the dataset")?;
    r.verify_seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    r.keys_verified = plan.keys;
    r.lost_keys = lost;
    r.corrupt_keys = corrupt;

    let spinner = spinner(show_bars, mode);
    if !show_bars {
        eprintln!(
            "tiermem bench-redis: {}: redis-benchmark, {} requests per test",
            mode.name(),
            plan.requests
        );
    }
    let started = Instant::now();
    let (get, set) = benchmark(plan, server.port)?;
    r.benchmark_seconds = started.elapsed().as_secs_f64();
    spinner.finish_and_clear();
    r.get = get;
    r.set = set;

    // redis-benchmark's connections may still be closing; a fresh one is
    // cheap and avoids depending on the old one's idle state.
    let mut conn = Conn::connect(server.port)?;
    r.dbsize_after = match conn.command(&[b"DBSIZE"])? {
        Reply::Int(n) if n >= 0 => n as u64,
        other => bail!("unexpected reply to DBSIZE: {other}"),
    };
    r.missing_after = plan.keys.saturating_sub(r.dbsize_after);
    r.server_peak_rss_bytes = peak_rss(server.pid());
    if let Launch::Sandbox(sb) = launch {
        r.cgroup = Some(sb.stats().context("reading the cgroup's counters")?);
    }
    Ok(r)
}

fn key_bar(show: bool, mode: Mode, phase: &str, len: u64) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix:<11} {msg:<6} [{bar:40}] {pos}/{len} keys, {per_sec}, eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(mode.name());
    bar.set_message(phase.to_string());
    bar
}

fn spinner(show: bool, mode: Mode) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{prefix:<11} {spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_prefix(mode.name());
    bar.set_message("redis-benchmark -t get,set");
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}
