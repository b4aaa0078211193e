//! `tiermem bench --suite`: the random-access matrix against kernel swap,
//! in one command.
//!
//! Each case runs tiermem and kernel swap one after the other, the order
//! alternating from case to case so that a device that drifts during the
//! run weighs on both alike. The device is measured before each case, as a
//! single `tiermem bench` run does. One table gives every ratio against
//! kernel swap, the target it is held to, and the share of the device limit.
//! With `--rounds N` the matrix runs N times and [`rounds`] sums them up.

pub mod rounds;

use std::time::Duration;

use tiermem_bench::report::{self, DeviceRef};
use tiermem_bench::result::{Mode, ModeResult};
use tiermem_bench::runner::{run_plan, BenchPlan};
use tiermem_host::format::{or_dash, ratio, share_percent, us_tenths};

use crate::bench_cmd::device::check_device;
use crate::bench_cmd::output::{json_summary, progress_bar};

/// One workload of the matrix and what tiermem must reach on it.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub name: &'static str,
    pub pattern: &'static str,
    pub threads: usize,
    pub read_percent: u32,
    pub target: Target,
}

/// What a case is held to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// pages/s at least this multiple of kernel swap's.
    Speedup(f64),
    /// pages/s at least this multiple of kernel swap's, and a hit ratio at
    /// least kernel swap's.
    SpeedupAndHitRatio(f64),
    /// MB/s at least this share of the device's sequential read.
    DeviceSeqShare(f64),
}

impl Target {
    /// Whether `figure` (see [`CaseRun::figure`]) and the hit-ratio margin
    /// meet the target; `None` when a figure it needs is missing.
    pub fn is_met(self, figure: Option<f64>, hit_margin: Option<f64>) -> Option<bool> {
        match self {
            Target::Speedup(x) => Some(figure? >= x),
            Target::SpeedupAndHitRatio(x) => Some(figure? >= x && hit_margin? >= 0.0),
            Target::DeviceSeqShare(s) => Some(figure? >= s),
        }
    }

    pub fn describe(self) -> String {
        match self {
            Target::Speedup(x) => format!(">= {x:.1}x"),
            Target::SpeedupAndHitRatio(x) => format!(">= {x:.1}x, hits >= ks"),
            Target::DeviceSeqShare(s) => format!(">= {:.0}% of dev seq", s * 100.0),
        }
    }
}

/// The matrix: the random-access workloads kernel swap is to be beaten on,
/// and the scan that must not suffer for it.
pub const CASES: [Case; 5] = [
    Case {
        name: "uniform, write-only, 1 thread",
        pattern: "uniform",
        threads: 1,
        read_percent: 0,
        target: Target::Speedup(1.0),
    },
    Case {
        name: "uniform, 50% reads, 1 thread",
        pattern: "uniform",
        threads: 1,
        read_percent: 50,
        target: Target::Speedup(1.0),
    },
    Case {
        name: "uniform, 50% reads, 2 threads",
        pattern: "uniform",
        threads: 2,
        read_percent: 50,
        target: Target::Speedup(1.2),
    },
    Case {
        name: "zipf(0.99), 50% reads, 1 thread",
        pattern: "zipf:0.99",
        threads: 1,
        read_percent: 50,
        target: Target::SpeedupAndHitRatio(1.2),
    },
    Case {
        name: "sequential scan, reads, 1 thread",
        pattern: "sequential",
        threads: 1,
        read_percent: 100,
        target: Target::DeviceSeqShare(0.7),
    },
];

/// The miss-latency targets, checked on every random-access case: p50 at
/// most kernel swap's + 5 µs, p99 at most 1.5x kernel swap's.
const MISS_P50_SLACK_NS: f64 = 5_000.0;
const MISS_P99_FACTOR: f64 = 1.5;
/// First touch of the working set: at least kernel swap's pages/s.
const FIRST_TOUCH_TARGET: f64 = 1.0;

/// One case as it ran.
pub struct CaseRun {
    pub case: Case,
    pub device: Option<DeviceRef>,
    pub results: Vec<ModeResult>,
}

impl CaseRun {
    fn result(&self, mode: Mode) -> Option<&ModeResult> {
        self.results
            .iter()
            .find(|r| r.mode == mode && r.accesses > 0)
    }

    fn pair(&self) -> Option<(&ModeResult, &ModeResult)> {
        Some((self.result(Mode::Tiermem)?, self.result(Mode::KernelSwap)?))
    }

    fn speedup(&self) -> Option<f64> {
        let (tm, ks) = self.pair()?;
        (ks.pages_per_sec > 0.0).then(|| tm.pages_per_sec / ks.pages_per_sec)
    }

    fn seq_share(&self, mode: Mode) -> Option<f64> {
        let mb_s = self.result(mode)?.mb_per_sec()?;
        Some(mb_s / self.device.as_ref()?.seq_read_mb_s?)
    }

    fn hit_ratio(&self, mode: Mode) -> Option<f64> {
        Some(self.result(mode)?.hit_ratio.as_ref()?.ratio)
    }

    /// Whether the case met its target; `None` when a figure is missing.
    pub fn met(&self) -> Option<bool> {
        self.case.target.is_met(self.figure(), self.hit_margin())
    }

    /// The figure the target is held to: the ratio against kernel swap,
    /// or for the scan the share of the device's sequential read.
    pub fn figure(&self) -> Option<f64> {
        match self.case.target {
            Target::Speedup(_) | Target::SpeedupAndHitRatio(_) => self.speedup(),
            Target::DeviceSeqShare(_) => self.seq_share(Mode::Tiermem),
        }
    }

    /// tiermem's hit ratio minus kernel swap's, in points of a share.
    pub fn hit_margin(&self) -> Option<f64> {
        Some(self.hit_ratio(Mode::Tiermem)? - self.hit_ratio(Mode::KernelSwap)?)
    }

    pub fn is_random_access(&self) -> bool {
        self.case.pattern != "sequential"
    }

    /// (p50 met, p99 met) of the miss latency against kernel swap's.
    pub fn miss_latency_met(&self) -> Option<(bool, bool)> {
        let (tm, ks) = self.pair()?;
        let p = |r: &ModeResult, q| r.latency.quantile_at_least(r.slow_threshold_ns, q);
        let (tm50, ks50) = (p(tm, 0.5)? as f64, p(ks, 0.5)? as f64);
        let (tm99, ks99) = (p(tm, 0.99)? as f64, p(ks, 0.99)? as f64);
        Some((
            tm50 <= ks50 + MISS_P50_SLACK_NS,
            tm99 <= ks99 * MISS_P99_FACTOR,
        ))
    }
}

/// The plan of one case: the base plan's settings with the case's pattern,
/// threads and read ratio, modes in the given order.
fn case_plan(base: &BenchPlan, case: &Case, modes: Vec<Mode>) -> BenchPlan {
    let mut plan = base.clone();
    plan.workload.pattern = case.pattern.into();
    plan.workload.threads = case.threads;
    plan.workload.read_percent = case.read_percent;
    plan.modes = modes;
    plan
}

/// Modes of case `index`: tiermem and kernel swap (and dram if asked),
/// kernel swap first on every other case.
fn case_modes(requested: &[Mode], index: usize) -> Vec<Mode> {
    let mut modes: Vec<Mode> = if requested.is_empty() {
        vec![Mode::Tiermem, Mode::KernelSwap]
    } else {
        requested.to_vec()
    };
    if index % 2 == 1 {
        modes.reverse();
    }
    modes
}

/// Runs every case `rounds` times: one `Vec<CaseRun>` per round. Which
/// mode runs first alternates from case to case, and from round to round,
/// so that each case runs in both orders over two rounds.
/// `no_device_check` skips the device measurements.
/// `bar` draws a progress bar; without one, a line on stderr reports each
/// case as it ends, so that a run whose output goes to a file still shows
/// where it is.
pub fn run_suite(
    base: &BenchPlan,
    requested: &[Mode],
    no_device_check: bool,
    rounds: usize,
    bar: bool,
) -> Vec<Vec<CaseRun>> {
    let bar = progress_bar(bar);
    let all = (0..rounds)
        .map(|round| run_round(base, requested, no_device_check, (round, rounds), &bar))
        .collect();
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    all
}

/// One round of the matrix; `(round, rounds)` place it for the progress
/// bar and the order of the modes.
fn run_round(
    base: &BenchPlan,
    requested: &[Mode],
    no_device_check: bool,
    (round, rounds): (usize, usize),
    bar: &Option<indicatif::ProgressBar>,
) -> Vec<CaseRun> {
    let steps = (rounds * CASES.len()) as f64;
    let label = |index: usize| match rounds {
        1 => format!("{}/{}", index + 1, CASES.len()),
        _ => format!(
            "round {}/{rounds}, {}/{}",
            round + 1,
            index + 1,
            CASES.len()
        ),
    };
    let mut runs = Vec::new();
    for (index, case) in CASES.iter().enumerate() {
        let plan = case_plan(base, case, case_modes(requested, index + round));
        if let Some(b) = bar {
            b.set_message(format!("{} device", label(index)));
        }
        let device = if no_device_check {
            None
        } else {
            check_device(&plan)
        };
        let results = run_plan(&plan, &mut |mode, phase, done| {
            if let Some(b) = bar {
                b.set_message(format!("{} {:<11} {phase}", label(index), mode.name()));
                let step = (round * CASES.len() + index) as f64;
                b.set_position(((step + done.clamp(0.0, 1.0)) / steps * 1000.0) as u64);
            }
        });
        let run = CaseRun {
            case: *case,
            device,
            results,
        };
        if bar.is_none() {
            eprintln!(
                "tiermem bench --suite: {} done: {}",
                label(index),
                progress_line(&run)
            );
        }
        runs.push(run);
    }
    runs
}

/// A finished case in one line: its name, each mode's figure, the ratio.
fn progress_line(run: &CaseRun) -> String {
    let figures: Vec<String> = run
        .results
        .iter()
        .map(|r| match run.is_random_access() {
            true => format!("{} {:.0} pages/s", r.mode.name(), r.pages_per_sec),
            false => format!(
                "{} {:.0} MB/s",
                r.mode.name(),
                r.mb_per_sec().unwrap_or(0.0)
            ),
        })
        .collect();
    let ratio = run
        .speedup()
        .map_or_else(String::new, |x| format!(" ({x:.2}x kernel swap)"));
    format!("{}: {}{ratio}", run.case.name, figures.join(", "))
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "-",
    }
}

fn miss_us(r: Option<&ModeResult>, q: f64) -> String {
    or_dash(
        r.and_then(|r| r.latency.quantile_at_least(r.slow_threshold_ns, q)),
        us_tenths,
    )
}

fn of_limit(run: &CaseRun, mode: Mode) -> Option<f64> {
    let r = run.result(mode)?;
    if !run.is_random_access() {
        return run.seq_share(mode);
    }
    let limit = run.device.as_ref()?.limit.as_ref()?.as_ref().ok()?;
    Some(r.pages_per_sec / limit.pages_per_sec)
}

/// First-touch pages/s summed over the cases, tiermem against kernel swap.
pub fn first_touch(runs: &[CaseRun]) -> (Option<f64>, Option<f64>) {
    let total = |mode| -> Option<f64> {
        let (mut pages, mut secs) = (0.0, 0.0);
        for run in runs {
            let r = run.result(mode)?;
            pages += r.verify.pages_checked as f64;
            secs += r.first_touch_s?;
        }
        (secs > 0.0).then(|| pages / secs)
    };
    (total(Mode::Tiermem), total(Mode::KernelSwap))
}

/// The suite's table, its first-touch and miss-latency lines, and a line
/// on page verification.
pub fn render(base: &BenchPlan, runs: &[CaseRun]) -> String {
    let w = &base.workload;
    let mut out = format!(
        "tiermem bench --suite: working set {}, budget {}, page {}, {} page contents, \
         {}s (+{}s warm-up) per mode and case, policy {}, modes alternating\n\n",
        report::human_bytes(w.working_set_bytes),
        report::human_bytes(base.tiermem.dram_budget),
        report::human_bytes(w.page_size),
        w.data,
        w.duration_s,
        w.warmup_s,
        base.tiermem.policy,
    );
    out += &format!(
        "{:<34} {:>11} {:>11} {:>7} {:>22} {:>7} {:>15} {:>17} {:>17} {:>15}\n",
        "workload",
        "tiermem p/s",
        "kswap p/s",
        "ratio",
        "target",
        "",
        "hit ratio tm/ks",
        "miss p50 us tm/ks",
        "miss p99 us tm/ks",
        "of limit tm/ks"
    );
    for run in runs {
        let tm = run.result(Mode::Tiermem);
        let ks = run.result(Mode::KernelSwap);
        let speed = |r: Option<&ModeResult>| {
            r.map_or_else(|| "-".into(), |r| format!("{:.0}", r.pages_per_sec))
        };
        out += &format!(
            "{:<34} {:>11} {:>11} {:>7} {:>22} {:>7} {:>15} {:>17} {:>17} {:>15}\n",
            run.case.name,
            speed(tm),
            speed(ks),
            or_dash(run.speedup(), ratio),
            run.case.target.describe(),
            verdict(run.met()),
            format!(
                "{}/{}",
                or_dash(run.hit_ratio(Mode::Tiermem), share_percent),
                or_dash(run.hit_ratio(Mode::KernelSwap), share_percent)
            ),
            format!("{}/{}", miss_us(tm, 0.5), miss_us(ks, 0.5)),
            format!("{}/{}", miss_us(tm, 0.99), miss_us(ks, 0.99)),
            format!(
                "{}/{}",
                or_dash(of_limit(run, Mode::Tiermem), share_percent),
                or_dash(of_limit(run, Mode::KernelSwap), share_percent)
            ),
        );
    }
    let (tm_ft, ks_ft) = first_touch(runs);
    let ft_ratio = tm_ft.zip(ks_ft).map(|(t, k)| t / k);
    out += &format!(
        "\nfirst touch of the working set (every case): tiermem {} p/s, kernel swap {} p/s, \
         {} (target >= {FIRST_TOUCH_TARGET:.1}x: {})\n",
        tm_ft.map_or_else(|| "-".into(), |v| format!("{v:.0}")),
        ks_ft.map_or_else(|| "-".into(), |v| format!("{v:.0}")),
        or_dash(ft_ratio, ratio),
        verdict(ft_ratio.map(|r| r >= FIRST_TOUCH_TARGET)),
    );
    let random: Vec<(bool, bool)> = runs
        .iter()
        .filter(|r| r.is_random_access())
        .filter_map(CaseRun::miss_latency_met)
        .collect();
    out += &format!(
        "miss latency (random-access cases): p50 <= kernel swap's + 5 us in {}/{}, \
         p99 <= 1.5x kernel swap's in {}/{}\n",
        random.iter().filter(|m| m.0).count(),
        random.len(),
        random.iter().filter(|m| m.1).count(),
        random.len(),
    );
    let (checked, bad): (u64, u64) =
        runs.iter()
            .flat_map(|r| &r.results)
            .fold((0, 0), |(c, b), r| {
                (
                    c + r.verify.pages_checked,
                    b + r.verify.lost + r.verify.corrupted,
                )
            });
    out += &format!(
        "verification: {checked} pages checked word by word, {bad} lost or corrupted{}\n",
        if bad == 0 { "" } else { "  <-- DATA LOSS" }
    );
    for run in runs {
        for r in &run.results {
            for note in &r.notes {
                out += &format!("note ({}, {}): {note}\n", run.case.name, r.mode.name());
            }
        }
    }
    out
}

/// The suite as JSON: each case with its target, verdict and both modes'
/// summaries, and the first-touch figures.
pub fn to_json(base: &BenchPlan, runs: &[CaseRun]) -> serde_json::Value {
    let cases: Vec<serde_json::Value> = runs
        .iter()
        .map(|run| {
            let latency = run.miss_latency_met();
            serde_json::json!({
                "case": run.case.name,
                "pattern": run.case.pattern,
                "threads": run.case.threads,
                "read_percent": run.case.read_percent,
                "target": run.case.target.describe(),
                "ratio_to_kernel_swap": run.speedup(),
                "met": run.met(),
                "miss_p50_met": latency.map(|l| l.0),
                "miss_p99_met": latency.map(|l| l.1),
                "device_qd1_read_ns": run.device.as_ref().and_then(|d| d.qd1_read_latency_us).map(|us| (us * 1e3).round() as u64),
                "device_seq_read_mb_s": run.device.as_ref().and_then(|d| d.seq_read_mb_s),
                "summary": run.results.iter().map(|r| json_summary(r, run.device.as_ref())).collect::<Vec<_>>(),
                "results": run.results,
            })
        })
        .collect();
    let (tm_ft, ks_ft) = first_touch(runs);
    serde_json::json!({
        "suite": cases,
        "working_set_bytes": base.workload.working_set_bytes,
        "budget_bytes": base.tiermem.dram_budget,
        "page_size": base.workload.page_size,
        "data": base.workload.data,
        "duration_s": base.workload.duration_s,
        "first_touch_pages_per_sec": { "tiermem": tm_ft, "kernel_swap": ks_ft,
            "ratio": tm_ft.zip(ks_ft).map(|(t, k)| t / k) },
    })
}

/// How long the suite takes, roughly, for the help and a first message.
pub fn estimate(base: &BenchPlan, modes: usize, rounds: usize) -> Duration {
    // First touch and verification together run at about 50K pages/s under
    // paging (kernel swap verifies at its sequential swap-in rate); the
    // device check takes about 6 s a case.
    let pages = (base.workload.working_set_bytes / base.workload.page_size.max(1)) as f64;
    let per_mode = base.workload.duration_s + base.workload.warmup_s + pages / 50_000.0 + 2.0;
    Duration::from_secs_f64(rounds as f64 * CASES.len() as f64 * (modes as f64 * per_mode + 6.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_alternate_which_mode_runs_first() {
        assert_eq!(case_modes(&[], 0), vec![Mode::Tiermem, Mode::KernelSwap]);
        assert_eq!(case_modes(&[], 1), vec![Mode::KernelSwap, Mode::Tiermem]);
        assert_eq!(case_modes(&[Mode::Tiermem], 3), vec![Mode::Tiermem]);
    }

    #[test]
    fn targets_name_their_threshold() {
        assert_eq!(Target::Speedup(1.2).describe(), ">= 1.2x");
        assert!(Target::DeviceSeqShare(0.7).describe().contains("70%"));
    }
}
