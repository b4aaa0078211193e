//! What `tiermem bench` prints: the progress bar, the human-readable report
//! and the JSON document.

use indicatif::{ProgressBar, ProgressStyle};
use tiermem_bench::report::{self, DeviceRef};
use tiermem_bench::result::{Mode, ModeResult};
use tiermem_bench::runner::BenchPlan;
use tiermem_bench::worker::Workload;
use tiermem_core::cpuidle::{Halting, IdleWait};
use tiermem_core::cpus::format_cpu_list;
use tiermem_core::FaultDelivery;

pub(crate) fn progress_bar(show: bool) -> Option<ProgressBar> {
    if !show {
        return None;
    }
    let bar = ProgressBar::new(1000);
    let style = ProgressStyle::with_template("{msg:24} [{bar:40}] {percent:>3}%").ok()?;
    bar.set_style(style.progress_chars("=> "));
    Some(bar)
}

pub(super) fn print_human(
    plan: &BenchPlan,
    results: &[ModeResult],
    device: Option<&DeviceRef>,
    histograms: bool,
) {
    println!("{}", headline(plan));
    println!();
    print!("{}", report::render_table(results, device));
    let touches: Vec<String> = results
        .iter()
        .filter_map(|r| {
            Some(format!(
                "{} {:.0}",
                r.mode.name(),
                r.first_touch_pages_per_sec()?
            ))
        })
        .collect();
    if !touches.is_empty() {
        println!(
            "first touch (pages/s, one thread, in order): {}",
            touches.join(", ")
        );
    }
    if let Some(note) = IdleWait::read().note() {
        println!("\nnote: {note}");
    }
    if histograms {
        println!();
        print!("{}", report::render_histograms(results));
    }
}

/// One line saying what ran.
fn headline(plan: &BenchPlan) -> String {
    match &plan.cpus {
        Some(p) => format!(
            "{}\nevery mode on CPU(s) {} ({})",
            workload_line(plan),
            format_cpu_list(&p.cpus),
            p.why
        ),
        None => workload_line(plan),
    }
}

fn workload_line(plan: &BenchPlan) -> String {
    let w = &plan.workload;
    let budget = report::human_bytes(plan.tiermem.dram_budget);
    let page = report::human_bytes(w.page_size);
    let policy = plan.tiermem.policy;
    match w.workload {
        Workload::Pattern => format!(
            "tiermem bench: working set {}, budget {budget}, page {page} of {} bytes, {} thread(s), \
             {}% reads, {}, {}s (+{}s warm-up), policy {policy}{}",
            report::human_bytes(w.working_set_bytes),
            w.data,
            w.threads,
            w.read_percent,
            w.pattern,
            w.duration_s,
            w.warmup_s,
            faults_note(plan),
        ),
        Workload::ScanResistance(shape) => format!(
            "tiermem bench: scan resistance, budget {budget}, page {page}: hot set {} \
             read after every {} of a {} sequential scan ({} passes), policy {policy}",
            report::human_bytes(shape.hot_pages * w.page_size),
            report::human_bytes(shape.chunk_pages * w.page_size),
            report::human_bytes(shape.scan_pages * w.page_size),
            shape.passes(),
        ),
    }
}

fn faults_note(plan: &BenchPlan) -> &'static str {
    match plan.tiermem.faults {
        FaultDelivery::Handler => "",
        FaultDelivery::Signal => ", tiermem faults by signal",
    }
}

/// The per-mode JSON summary: speed, latency, hit ratios and the raw
/// counts behind them.
pub(crate) fn json_summary(r: &ModeResult, device: Option<&DeviceRef>) -> serde_json::Value {
    let hit = r.hit_ratio.as_ref();
    let scan = r.scan_resistance.as_ref();
    let device_seq = device.and_then(|d| d.seq_read_mb_s);
    serde_json::json!({
        "mode": r.mode.name(),
        "pages_per_sec": r.pages_per_sec,
        "first_touch_pages_per_sec": r.first_touch_pages_per_sec(),
        "mb_per_sec": r.mb_per_sec(),
        "of_device_limit": device
            .and_then(|d| d.limit.as_ref())
            .and_then(|limit| limit.as_ref().ok())
            .filter(|_| r.mode != Mode::Dram && r.pages_per_sec > 0.0)
            .map(|limit| r.pages_per_sec / limit.pages_per_sec),
        "of_device_seq_read": r.mb_per_sec().zip(device_seq).filter(|_| r.mode != Mode::Dram).map(|(mb_s, dev)| mb_s / dev),
        "hit_ratio": hit.map(|h| h.ratio),
        "hit_ratio_read_ahead_as_miss": hit.and_then(|h| h.ratio_read_ahead_as_miss),
        "misses": hit.map(|h| h.misses),
        "device_reads": hit.and_then(|h| h.device_reads),
        "accesses": r.accesses,
        "miss_source": hit.map(|h| h.source.as_str()),
        "miss_counters": hit.map(|h| &h.counters),
        "hot_hit_ratio_during_scan": scan.map(|s| s.hot_during_scan.ratio),
        "hot_hit_ratio_during_scan_read_ahead_as_miss":
            scan.and_then(|s| s.hot_during_scan.ratio_read_ahead_as_miss),
        "hot_hit_ratio_after_scan": scan.map(|s| s.hot_after_scan.ratio),
        "scan_hit_ratio": scan.map(|s| s.scan.ratio),
        "mean_ns": r.latency.mean_ns(),
        "p50_ns": r.latency.quantile(0.5),
        "p90_ns": r.latency.quantile(0.9),
        "p99_ns": r.latency.quantile(0.99),
        "p999_ns": r.latency.quantile(0.999),
        "slow_fraction": r.latency.count_at_least(r.slow_threshold_ns) as f64 / r.latency.count().max(1) as f64,
        "miss_p50_ns": r.latency.quantile_at_least(r.slow_threshold_ns, 0.5),
        "miss_p99_ns": r.latency.quantile_at_least(r.slow_threshold_ns, 0.99),
    })
}

/// How idle vCPUs wait, which the miss latencies depend on.
fn idle_wait_json(idle: &IdleWait) -> serde_json::Value {
    serde_json::json!({
        "guest": idle.guest,
        "cpuidle_driver": idle.driver,
        "cpuidle_governor": idle.governor,
        "guest_halt_poll_ns": idle.guest_halt_poll_ns,
        "idle_option": idle.idle_option,
        "mwait": idle.mwait,
        "halts_at_once": idle.halts_at_once(),
        "halting": idle.halting().map(|h| match h {
            Halting::PollingOff => "haltpoll with guest_halt_poll_ns=0",
            Halting::PlainHalt => "no cpuidle driver: HLT",
        }),
        "note": idle.note(),
    })
}

pub(super) fn print_json(
    plan: &BenchPlan,
    results: &[ModeResult],
    device: Option<&DeviceRef>,
) -> anyhow::Result<()> {
    let ratios: serde_json::Map<String, serde_json::Value> = report::ratio_summary(results)
        .into_iter()
        .map(|(k, v)| (k, v.into()))
        .collect();
    let summary: Vec<serde_json::Value> = results.iter().map(|r| json_summary(r, device)).collect();
    let out = serde_json::json!({
        "workload": plan.workload,
        "budget_bytes": plan.tiermem.dram_budget,
        "policy": plan.tiermem.policy.name(),
        "faults": plan.tiermem.faults.name(),
        "backing": plan.tiermem.backing,
        "device_qd1_read_ns": device.and_then(|d| d.qd1_read_latency_us).map(|us| (us * 1e3).round() as u64),
        "device_seq_read_mb_s": device.and_then(|d| d.seq_read_mb_s),
        "device_page_reads": device.map(|d| &d.page_reads),
        "device_limit": device.and_then(|d| d.limit.as_ref()).and_then(|l| l.as_ref().ok()),
        "device_limit_none": device.and_then(|d| d.limit.as_ref()).and_then(|l| l.as_ref().err()),
        "device_source": device.map(|d| d.source.as_str()),
        "idle_wait": idle_wait_json(&IdleWait::read()),
        "cpus": plan.cpus.as_ref().map(|p| serde_json::json!({
            "list": p.cpus,
            "why": p.why,
        })),
        "summary": summary,
        "ratios": ratios,
        "results": results,
    });
    let out = tiermem_host::wrap("tiermem.bench/2", out);
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
