//! The results: each mode's report with its ratios to kernel swap and to
//! DRAM, one line per mode on stderr, and the table or the JSON on stdout.

use std::collections::BTreeMap;

use serde::Serialize;

use super::plan::Plan;
use crate::kernel_swap::CgroupStats;
use crate::report::human_bytes;
use crate::result::Mode;

#[derive(Debug, Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Status {
    Ok,
    Skipped,
    Failed,
}

/// One row of redis-benchmark's CSV output.
#[derive(Debug, Serialize, Clone, Default)]
pub(super) struct BenchRow {
    pub(super) rps: f64,
    // redis-benchmark reports milliseconds; JSON times are nanoseconds.
    #[serde(rename = "avg_latency_ns", with = "tiermem_host::ns::opt_millis")]
    pub(super) avg_latency_ms: Option<f64>,
    #[serde(rename = "p50_latency_ns", with = "tiermem_host::ns::opt_millis")]
    pub(super) p50_latency_ms: Option<f64>,
    #[serde(rename = "p99_latency_ns", with = "tiermem_host::ns::opt_millis")]
    pub(super) p99_latency_ms: Option<f64>,
    #[serde(rename = "max_latency_ns", with = "tiermem_host::ns::opt_millis")]
    pub(super) max_latency_ms: Option<f64>,
}

#[derive(Debug, Serialize, Default)]
pub(super) struct Ratios {
    pub(super) get_vs_kernel_swap: Option<f64>,
    pub(super) set_vs_kernel_swap: Option<f64>,
    pub(super) get_vs_dram: Option<f64>,
    pub(super) set_vs_dram: Option<f64>,
}

#[derive(Debug, Serialize)]
pub(super) struct ModeReport {
    pub(super) mode: Mode,
    pub(super) status: Status,
    /// Why the mode was skipped or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) run: Option<RunResult>,
    pub(super) ratios: Ratios,
    pub(super) notes: Vec<String>,
}

#[derive(Debug, Serialize, Default)]
pub(super) struct RunResult {
    pub(super) port: u16,
    #[serde(rename = "load_ns", with = "tiermem_host::ns::seconds")]
    pub(super) load_seconds: f64,
    #[serde(rename = "verify_ns", with = "tiermem_host::ns::seconds")]
    pub(super) verify_seconds: f64,
    pub(super) keys_verified: u64,
    /// Keys that GET found missing before the benchmark.
    pub(super) lost_keys: u64,
    /// Keys whose value differed from what was loaded.
    pub(super) corrupt_keys: u64,
    /// DBSIZE after the benchmark.
    pub(super) dbsize_after: u64,
    /// Keys missing after the benchmark (keys - DBSIZE, if positive).
    pub(super) missing_after: u64,
    pub(super) get: BenchRow,
    pub(super) set: BenchRow,
    #[serde(rename = "benchmark_ns", with = "tiermem_host::ns::seconds")]
    pub(super) benchmark_seconds: f64,
    /// INFO memory `used_memory` after loading.
    pub(super) redis_used_memory: Option<u64>,
    /// Peak resident set of the server (VmHWM), read before shutdown.
    pub(super) server_peak_rss_bytes: Option<u64>,
    /// How the server ended after SHUTDOWN NOSAVE.
    pub(super) server_exit: String,
    /// tiermem's summary from the server's stderr (tiermem mode).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) tiermem_stats: Vec<String>,
    /// The cgroup's counters before shutdown (kernel-swap mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cgroup: Option<CgroupStats>,
    /// The compressed tier at its fullest (kernel-zswap, kernel-zram):
    /// zswap_* or zram_* counters, the compression ratio among them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) compressed: Option<BTreeMap<String, f64>>,
}

impl RunResult {
    pub(super) fn damaged_keys(&self) -> u64 {
        self.lost_keys + self.corrupt_keys + self.missing_after
    }
}

#[derive(Serialize)]
pub(super) struct JsonOut<'a> {
    pub(super) plan: &'a Plan,
    pub(super) modes: &'a [ModeReport],
    pub(super) data_loss: bool,
    pub(super) exit_status: i32,
}

pub(super) fn fill_ratios(reports: &mut [ModeReport]) {
    let rates = |mode: Mode, reports: &[ModeReport]| {
        reports
            .iter()
            .find(|r| r.mode == mode)
            .and_then(|r| r.run.as_ref())
            .map(|x| (x.get.rps, x.set.rps))
    };
    let swap = rates(Mode::KernelSwap, reports);
    let dram = rates(Mode::Dram, reports);
    let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
    for r in reports.iter_mut() {
        let Some(x) = &r.run else { continue };
        let (g, s) = (x.get.rps, x.set.rps);
        if let Some((sg, ss)) = swap {
            r.ratios.get_vs_kernel_swap = ratio(g, sg);
            r.ratios.set_vs_kernel_swap = ratio(s, ss);
        }
        if let Some((dg, ds)) = dram {
            r.ratios.get_vs_dram = ratio(g, dg);
            r.ratios.set_vs_dram = ratio(s, ds);
        }
    }
}

pub(super) fn one_line(r: &ModeReport) -> String {
    match (&r.run, r.status) {
        (Some(x), _) => format!(
            "{}: loaded in {:.1} s, verified in {:.1} s, GET {:.0} rps, SET {:.0} rps, {} damaged key(s)",
            r.mode.name(),
            x.load_seconds,
            x.verify_seconds,
            x.get.rps,
            x.set.rps,
            x.damaged_keys()
        ),
        (None, Status::Skipped) => format!(
            "{}: skipped: {}",
            r.mode.name(),
            r.reason.as_deref().unwrap_or("?")
        ),
        (None, _) => format!(
            "{}: FAILED: {}",
            r.mode.name(),
            r.reason.as_deref().unwrap_or("?")
        ),
    }
}

pub(super) fn print_human(plan: &Plan, reports: &[ModeReport]) {
    println!(
        "tiermem bench-redis: {} keys x {} B {} values (dataset {}), DRAM budget {}, backing {}",
        plan.keys,
        plan.value_size,
        plan.data,
        human_bytes(plan.keys * plan.value_size),
        human_bytes(plan.dram_bytes),
        plan.backing.display()
    );
    println!(
        "redis-benchmark: {} clients, {} requests per test, -d {} -r {} -t get,set; {}",
        plan.clients, plan.requests, plan.value_size, plan.keys, plan.redis_server_version
    );
    println!();
    let ratio = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}x"));
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let header = [
        "mode",
        "load",
        "verify",
        "GET rps",
        "SET rps",
        "GET/swap",
        "SET/swap",
        "GET/DRAM",
        "SET/DRAM",
        "GET p99 ms",
        "SET p99 ms",
        "peak RSS",
        "lost keys",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    for r in reports {
        let Some(x) = &r.run else { continue };
        let damaged = x.damaged_keys();
        rows.push(vec![
            r.mode.name().to_string(),
            format!("{:.1} s", x.load_seconds),
            format!("{:.1} s", x.verify_seconds),
            format!("{:.0}", x.get.rps),
            format!("{:.0}", x.set.rps),
            ratio(r.ratios.get_vs_kernel_swap),
            ratio(r.ratios.set_vs_kernel_swap),
            ratio(r.ratios.get_vs_dram),
            ratio(r.ratios.set_vs_dram),
            ms(x.get.p99_latency_ms),
            ms(x.set.p99_latency_ms),
            x.server_peak_rss_bytes.map_or("-".into(), human_bytes),
            if damaged == 0 {
                "0".to_string()
            } else {
                format!("{damaged} LOST!")
            },
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c == 0 {
                    format!("{v:<w$}", w = widths[c])
                } else {
                    format!("{v:>w$}", w = widths[c])
                }
            })
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
    for r in reports.iter().filter(|r| r.run.is_none()) {
        let what = if r.status == Status::Skipped {
            "skipped"
        } else {
            "FAILED"
        };
        println!(
            "{:<w$}  {what}: {}",
            r.mode.name(),
            r.reason.as_deref().unwrap_or("?"),
            w = widths[0]
        );
    }
    println!();
    println!("load: SETs of all keys, pipelined 200 at a time; verify: GET and byte-compare of all keys;");
    println!("x/swap and x/DRAM: requests/s relative to kernel swap and to DRAM; peak RSS: the server's VmHWM;");
    println!("lost keys: missing or corrupt at verify, plus keys missing from DBSIZE after the benchmark.");
    for r in reports {
        let Some(x) = &r.run else { continue };
        if x.damaged_keys() > 0 {
            println!();
            println!(
                "!!! DATA LOSS in {} mode: {} key(s) missing and {} corrupt at verify, {} missing after the benchmark (DBSIZE {} of {})",
                r.mode.name(),
                x.lost_keys,
                x.corrupt_keys,
                x.missing_after,
                x.dbsize_after,
                plan.keys
            );
        }
        if !x.tiermem_stats.is_empty() {
            for l in &x.tiermem_stats {
                println!("{l}");
            }
        }
        if let Some(c) = &x.cgroup {
            println!();
            println!(
                "── kernel swap: cgroup limit {} ──",
                human_bytes(plan.dram_bytes)
            );
            println!(
                "faults          {} (major {}), limit hit {} times, peak usage {}, {} in swap before shutdown",
                c.pgfault,
                c.pgmajfault,
                c.failcnt,
                human_bytes(c.max_usage_bytes),
                human_bytes(c.swap_bytes)
            );
            if c.oom_kills > 0 {
                println!("OOM kills       {} by the cgroup's OOM killer", c.oom_kills);
            }
            let pages = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
            println!(
                "swap (system)   {} pages in, {} pages out since the swapfile was enabled",
                pages(c.pswpin),
                pages(c.pswpout)
            );
        }
        if x.server_exit != "exit status 0" {
            println!(
                "{}: redis-server ended with {}",
                r.mode.name(),
                x.server_exit
            );
        }
        for n in &r.notes {
            println!("{}: note: {n}", r.mode.name());
        }
    }
}
