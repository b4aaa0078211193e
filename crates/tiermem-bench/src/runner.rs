//! The parent side of `tiermem bench`: one worker process per mode, in
//! order, each result collected from the worker's JSON events.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::compressed::{self, CompressedOptions, Sampler};
use crate::kernel_swap::{SandboxSpec, SwapSandbox, MEMORY_STAT_ENV};
use crate::result::{Mode, ModeResult, VerifyReport};
use crate::worker::{WorkerEvent, WorkloadSpec};

/// A whole benchmark run.
#[derive(Clone, Debug)]
pub struct BenchPlan {
    pub workload: WorkloadSpec,
    pub modes: Vec<Mode>,
    /// The tiermem configuration (budget, backing, policy...).
    pub tiermem: tiermem_core::Config,
    /// The worker executable and the arguments before `<mode> <spec>`.
    pub worker: (PathBuf, Vec<String>),
    /// CPUs every worker is restricted to, the same for every mode; `None`
    /// leaves placement to the scheduler.
    pub cpus: Option<Placement>,
    /// Compressors and sizes of kernel-zswap and kernel-zram.
    pub compressed: CompressedOptions,
}

/// The CPUs of `--cpus` and why those.
#[derive(Clone, Debug)]
pub struct Placement {
    pub cpus: Vec<usize>,
    pub why: String,
}

/// Runs every mode of the plan. A mode that cannot run yields a result with
/// no accesses and a note saying why.
pub fn run_plan(plan: &BenchPlan, progress: &mut dyn FnMut(Mode, &str, f64)) -> Vec<ModeResult> {
    plan.modes
        .iter()
        .map(|&mode| {
            run_mode(plan, mode, progress).unwrap_or_else(|e| skipped(mode, format!("{e:#}")))
        })
        .collect()
}

pub fn skipped(mode: Mode, why: String) -> ModeResult {
    ModeResult {
        mode,
        accesses: 0,
        reads: 0,
        writes: 0,
        elapsed_s: 0.0,
        pages_per_sec: 0.0,
        page_size: 0,
        latency: Default::default(),
        slow_threshold_ns: crate::worker::SLOW_THRESHOLD_NS,
        verify: VerifyReport::default(),
        hit_ratio: None,
        scan_resistance: None,
        counters: Default::default(),
        notes: vec![format!("skipped: {why}")],
        first_touch_s: None,
    }
}

fn run_mode(
    plan: &BenchPlan,
    mode: Mode,
    progress: &mut dyn FnMut(Mode, &str, f64),
) -> anyhow::Result<ModeResult> {
    let (exe, args) = &plan.worker;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .arg(mode.name())
        .arg(serde_json::to_string(&plan.workload)?)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut sandbox = None;
    let mut tier = None;
    let mut notes = Vec::new();
    match mode {
        Mode::Tiermem => {
            cmd.envs(plan.tiermem.to_env());
        }
        Mode::KernelSwap | Mode::KernelZswap | Mode::KernelZram => {
            SwapSandbox::availability().map_err(|why| anyhow::anyhow!(why))?;
            let swap_dir = swap_dir_for(&plan.tiermem.backing);
            let spec = SandboxSpec {
                memory_limit_bytes: plan.tiermem.dram_budget,
                // Room for the whole working set plus the stamp table.
                swap_bytes: plan.workload.working_set_bytes
                    + plan.workload.working_set_bytes / 8
                    + (256 << 20),
                swap_dir,
                swap_device: None,
                overflow_swapfile_bytes: None,
            };
            let sb = if mode == Mode::KernelSwap {
                SwapSandbox::create(&spec)?
            } else {
                let built = compressed::create(
                    mode,
                    &spec,
                    plan.workload.working_set_bytes,
                    &plan.compressed,
                )?;
                tier = Some(built.tier);
                notes = built.notes;
                built.sandbox
            };
            sb.configure_command(&mut cmd);
            // The worker counts its major faults in the cgroup's memory.stat.
            cmd.env(MEMORY_STAT_ENV, sb.memory_stat_path());
            sandbox = Some(sb);
        }
        Mode::Dram => {}
    }
    if let Some(placement) = &plan.cpus {
        // After the sandbox's own set-up, so that nothing it does in the
        // child (joining a cgroup) can undo the placement.
        tiermem_core::cpus::restrict_command(&mut cmd, &placement.cpus);
    }
    let mut child = cmd.spawn()?;
    if let Some(sb) = &sandbox {
        sb.adopt_child(child.id() as i32);
    }
    // Sampled while the worker lives: its swapped pages go when it exits.
    let sampler = tier.map(Sampler::start);
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("worker has no stdout"))?;
    let mut result = None;
    let mut failure = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        match serde_json::from_str::<WorkerEvent>(&line) {
            Ok(WorkerEvent::Progress { phase, done }) => progress(mode, &phase, done),
            Ok(WorkerEvent::Result(r)) => result = Some(*r),
            Ok(WorkerEvent::Failed { message }) => failure = Some(message),
            Err(_) => {}
        }
    }
    let status = child.wait()?;
    let tier_stats = sampler.map(Sampler::finish);
    let mut result = match (result, failure) {
        (Some(r), _) => r,
        (None, Some(msg)) => anyhow::bail!("{msg}"),
        (None, None) if mode.is_kernel_swap() && status.signal() == Some(libc::SIGKILL) => {
            let oom_kills = sandbox
                .as_ref()
                .and_then(|sb| sb.stats().ok())
                .map_or(0, |stats| stats.oom_kills);
            let who = match oom_kills {
                0 => "most likely the memory cgroup's OOM killer (see dmesg)".to_string(),
                n => format!("the memory cgroup's OOM killer ({n} OOM kill(s); dmesg has details)"),
            };
            anyhow::bail!(
                "the worker died without a result ({status}): {who}, which reclaim into \
                 fast, compressed swap can leave behind in a budget of a few tens of MiB; \
                 try a larger --dram"
            )
        }
        (None, None) => anyhow::bail!("the worker died without a result ({status})"),
    };
    result.notes.extend(notes);
    if mode == Mode::KernelZswap {
        // A load from zswap's pool is no swap-in in /proc/vmstat, so
        // pswpin counts only what came from the swapfile: no measure of
        // read-ahead here.
        if let Some(h) = &mut result.hit_ratio {
            if h.device_reads.take().is_some() {
                h.ratio_read_ahead_as_miss = None;
                result.notes.push(
                    "no \"RA = miss\" ratio: pswpin does not count loads from zswap's pool".into(),
                );
            }
        }
    }
    if let Some((counters, line)) = tier_stats {
        result.counters.extend(counters);
        result.notes.push(line);
    }
    if let Some(mut sb) = sandbox {
        result.notes.extend(sb.warnings().iter().cloned());
        if let Ok(stats) = sb.stats() {
            result
                .counters
                .insert("cgroup_pgmajfault".into(), stats.pgmajfault as f64);
            result
                .counters
                .insert("cgroup_pgfault".into(), stats.pgfault as f64);
            result.counters.insert(
                "cgroup_max_usage_bytes".into(),
                stats.max_usage_bytes as f64,
            );
            if let Some(v) = stats.pswpin {
                result.counters.insert("pswpin".into(), v as f64);
            }
            if let Some(v) = stats.pswpout {
                result.counters.insert("pswpout".into(), v as f64);
            }
        }
        sb.cleanup()?;
    }
    Ok(result)
}

/// Swap lives on the same filesystem as tiermem's backing file.
fn swap_dir_for(backing: &std::path::Path) -> PathBuf {
    if backing.is_dir() {
        backing.to_path_buf()
    } else {
        backing
            .parent()
            .map_or_else(|| PathBuf::from("/var/tmp"), |p| p.to_path_buf())
    }
}
