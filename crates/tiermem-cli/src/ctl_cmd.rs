//! `tiermem ctl` and `tiermem top`: the control socket of running tiered
//! processes, from the command line (the protocol is in
//! `tiermem_host::control`).

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use clap::{Args, Subcommand};
use serde_json::Value;
use tiermem_bench::report::human_bytes;
use tiermem_host::control::listening_pids;

use crate::control_client::{ask, stats_of};

/// Watch or steer a running tiered process: its statistics, and its DRAM
/// budget, changed live (how an operator moves a VM between Gold, Silver
/// and Bronze without restarting it).
///
/// Every process that runs under `tiermem run` or uses the C API listens
/// on a control socket (the abstract Unix socket `@tiermem-ctl-PID`, unless
/// started with TIERMEM_CONTROL=off). Only the process's own user and root
/// are answered.
///
/// Examples:
///
///   tiermem ctl 4242 stats
///   tiermem ctl 4242 stats --json
///   tiermem ctl 4242 budget 512M
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct CtlArgs {
    /// The tiered process.
    #[arg(value_name = "PID")]
    pid: u32,
    #[command(subcommand)]
    request: CtlRequest,
}

#[derive(Subcommand, Debug)]
enum CtlRequest {
    /// Print the process's statistics: budget, resident memory, faults,
    /// page-ins and page-outs, store use, fault latency.
    Stats {
        /// One JSON object (schema "tiermem.stats/1", in the envelope every
        /// tiermem result carries; times in nanoseconds, sizes in bytes).
        #[arg(long)]
        json: bool,
    },
    /// Set the process's DRAM budget (e.g. 512M, 2G). A smaller budget
    /// takes effect as the evictor writes pages out; the command returns at
    /// once.
    Budget {
        #[arg(value_name = "SIZE")]
        size: String,
    },
}

/// A live view of every tiered process on this machine that answers you
/// (yours; all of them as root): budget, resident memory, faults/s, the
/// share of faults served without a device read, and store use.
///
/// Examples:
///
///   tiermem top                  # refreshes every second until Ctrl-C
///   tiermem top --once --json    # one sample, for scripts
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct TopArgs {
    /// Seconds between samples (rates are over this interval).
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = crate::duration_args::seconds)]
    interval: f64,
    /// Print one sample and exit.
    #[arg(long)]
    once: bool,
    /// With --once: one JSON object (schema "tiermem.top/1") with a row per
    /// process.
    #[arg(long, requires = "once")]
    json: bool,
}

/// Runs `tiermem ctl`; the exit code.
pub fn run(args: &CtlArgs) -> anyhow::Result<i32> {
    match &args.request {
        CtlRequest::Stats { json } => {
            let stats = stats_of(args.pid)?;
            match json {
                true => println!("{}", serde_json::to_string_pretty(&stats)?),
                false => print!("{}", human_stats(&stats)),
            }
        }
        CtlRequest::Budget { size } => {
            let bytes = tiermem_core::parse_size("budget", size)
                .map_err(|e| anyhow!("{e}"))?
                .resolve();
            let reply = ask(args.pid, &format!("budget {bytes}"))?;
            let mut words = reply.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some("ok"), Some(old), Some(new)) => println!(
                    "process {}: DRAM budget {} (was {})",
                    args.pid,
                    human_bytes(new.parse().unwrap_or(0)),
                    human_bytes(old.parse().unwrap_or(0)),
                ),
                _ => bail!(
                    "process {}: {}",
                    args.pid,
                    reply.strip_prefix("error ").unwrap_or(&reply)
                ),
            }
        }
    }
    Ok(0)
}

fn field(stats: &Value, key: &str) -> u64 {
    stats["stats"][key].as_u64().unwrap_or(0)
}

fn human_stats(v: &Value) -> String {
    let served = served_from_dram(v);
    format!(
        "process {} ({})\n\
         budget          {}\n\
         resident        {} (peak {})\n\
         faults          {} ({} served from DRAM)\n\
         page-ins        {}   page-outs {}\n\
         store           {} in use\n\
         fault latency   p50 {:.1} us, p99 {:.1} us\n",
        v["pid"],
        v["program"].as_str().unwrap_or("?"),
        human_bytes(field(v, "budget_bytes")),
        human_bytes(field(v, "resident_bytes")),
        human_bytes(field(v, "peak_resident_bytes")),
        field(v, "faults"),
        served.map_or("-".into(), |s| format!("{:.1}%", 100.0 * s)),
        field(v, "page_ins"),
        field(v, "page_outs"),
        human_bytes(field(v, "stored_bytes")),
        v["stats"]["fault_latency"]["p50_ns"]
            .as_f64()
            .unwrap_or(0.0)
            / 1e3,
        v["stats"]["fault_latency"]["p99_ns"]
            .as_f64()
            .unwrap_or(0.0)
            / 1e3,
    )
}

/// The share of faults that needed no device read, as `--stats` counts it.
fn served_from_dram(v: &Value) -> Option<f64> {
    let faults = field(v, "faults");
    // Read-ahead pages (neighbours included) are page-ins no fault waited
    // for: the demand reads are the rest, as the exit summary counts them.
    let reads = field(v, "page_ins").saturating_sub(field(v, "prefetch_issued"));
    (faults > 0).then(|| 1.0 - (reads.min(faults) as f64 / faults as f64))
}

/// One process's row in `tiermem top`.
struct Row {
    pid: u32,
    program: String,
    budget: u64,
    resident: u64,
    faults_per_sec: f64,
    page_ins_per_sec: f64,
    served: Option<f64>,
    store: u64,
}

fn sample() -> Vec<(u32, Value)> {
    let text = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    listening_pids(&text)
        .into_iter()
        .filter_map(|pid| stats_of(pid).ok().map(|s| (pid, s)))
        .collect()
}

fn rows(before: &[(u32, Value)], after: &[(u32, Value)], secs: f64) -> Vec<Row> {
    after
        .iter()
        .map(|(pid, now)| {
            let then = before.iter().find(|(p, _)| p == pid).map(|(_, s)| s);
            let rate = |key: &str| {
                let old = then.map_or(field(now, key), |t| field(t, key));
                field(now, key).saturating_sub(old) as f64 / secs
            };
            Row {
                pid: *pid,
                program: now["program"].as_str().unwrap_or("?").to_string(),
                budget: field(now, "budget_bytes"),
                resident: field(now, "resident_bytes"),
                faults_per_sec: rate("faults"),
                page_ins_per_sec: rate("page_ins"),
                served: served_from_dram(now),
                store: field(now, "stored_bytes"),
            }
        })
        .collect()
}

fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:>8}  {:<16} {:>10} {:>10} {:>10} {:>10} {:>8} {:>10}\n",
        "PID", "PROGRAM", "BUDGET", "RESIDENT", "FAULTS/S", "READS/S", "DRAM%", "STORE"
    );
    for r in rows {
        out += &format!(
            "{:>8}  {:<16} {:>10} {:>10} {:>10.0} {:>10.0} {:>8} {:>10}\n",
            r.pid,
            r.program.chars().take(16).collect::<String>(),
            human_bytes(r.budget),
            human_bytes(r.resident),
            r.faults_per_sec,
            r.page_ins_per_sec,
            r.served
                .map_or("-".into(), |s| format!("{:.1}%", 100.0 * s)),
            human_bytes(r.store),
        );
    }
    if rows.is_empty() {
        out += "(no tiered process answers: none running, or none of yours)\n";
    }
    out
}

fn top_json(rows: &[Row], secs: f64) -> Value {
    let list: Vec<Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "pid": r.pid,
                "program": r.program,
                "budget_bytes": r.budget,
                "resident_bytes": r.resident,
                "faults_per_sec": r.faults_per_sec,
                "page_ins_per_sec": r.page_ins_per_sec,
                "served_from_dram": r.served,
                "stored_bytes": r.store,
            })
        })
        .collect();
    tiermem_host::wrap(
        "tiermem.top/1",
        serde_json::json!({ "interval_ns": (secs * 1e9) as u64, "processes": list }),
    )
}

/// Runs `tiermem top`; the exit code.
pub fn top(args: &TopArgs) -> anyhow::Result<i32> {
    if !(args.interval.is_finite() && (0.05..=3600.0).contains(&args.interval)) {
        bail!(
            "--interval {}: expected seconds from 0.05 to 3600",
            args.interval
        );
    }
    let mut before = sample();
    let mut taken = Instant::now();
    loop {
        std::thread::sleep(Duration::from_secs_f64(args.interval));
        let after = sample();
        let secs = taken.elapsed().as_secs_f64();
        taken = Instant::now();
        let rows = rows(&before, &after, secs);
        if args.once {
            match args.json {
                true => println!("{}", serde_json::to_string_pretty(&top_json(&rows, secs))?),
                false => print!("{}", table(&rows)),
            }
            return Ok(0);
        }
        // Clear the screen and go home, as top(1) does on a terminal.
        print!("\x1b[H\x1b[2J{}", table(&rows));
        std::io::stdout().flush()?;
        before = after;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read-ahead a fault waited for is none, used or not: 100 faults, 60
    /// page-ins of which 40 read ahead (neighbours among them) leave 20
    /// demand reads, so 80% of the faults were served from DRAM.
    #[test]
    fn served_from_dram_counts_only_demand_reads_as_misses() {
        let v = serde_json::json!({ "stats": {
            "faults": 100, "page_ins": 60, "prefetch_issued": 40, "prefetch_hits": 10,
        }});
        let served = served_from_dram(&v).expect("faults were counted");
        assert!((served - 0.8).abs() < 1e-9, "{served}");
        assert_eq!(served_from_dram(&serde_json::json!({ "stats": {} })), None);
    }
}
