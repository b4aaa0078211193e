//! What `tiermem bench-vm` prints: a table of the classes under each mode
//! with their ratios to kernel swap, the live change, and a check of each
//! target; or all of it as JSON.

use serde_json::json;

use super::guest::GuestRun;
use super::outcome::{ClassRun, LiveChange, Outcome};
use super::plan::{Class, Settings};
use crate::report::human_bytes;

/// The most QEMU may have resident above its budget.
const RSS_OVERHEAD: u64 = 64 << 20;

/// One guest in a line, for progress.
pub(super) fn one_line(g: &GuestRun) -> String {
    format!(
        "boot {}, {} pages/s, {} pages checked, {}, peak resident {}, {}",
        g.boot_seconds.map_or("-".into(), |b| format!("{b:.1} s")),
        g.pages_per_second()
            .map_or("-".into(), |r| format!("{r:.0}")),
        g.pages_checked,
        match g.errors {
            Some(0) => "no wrong byte".to_string(),
            Some(e) => format!("{e} WRONG WORDS"),
            None => "walker did not finish".to_string(),
        },
        human_bytes(g.peak_rss_bytes),
        g.exit
    )
}

/// The last lines QEMU (and the tiermem preloaded into it) wrote, for a
/// guest that did not finish and power off: why it stopped is there (a
/// refused setting, QEMU's own error, a kernel panic), and nowhere else.
pub(super) fn failure_lines(g: &GuestRun) -> Vec<String> {
    const LINES: usize = 12;
    if g.verified() {
        return Vec::new();
    }
    let lines: Vec<&str> = g
        .output_tail
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(LINES)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

pub(super) fn print(s: &Settings, o: &Outcome) -> anyhow::Result<()> {
    if s.json {
        let body = json!({
            "spec": o.spec,
            "kernel": o.kernel,
            "accel_note": o.accel_note,
            "runs": o.runs,
            "ratios_to_kernel_swap": ratios(o),
            "live_change": o.live_change,
            "targets": targets(o),
        });
        let out = tiermem_host::wrap("tiermem.bench-vm/1", body);
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    print!("{}", table(s, o));
    Ok(())
}

fn table(s: &Settings, o: &Outcome) -> String {
    let mut t = format!(
        "guests: {} of {} RAM, walker {} with {} checking pass(es) in {} order, {} ({}), kernel {}\n\n",
        human_bytes(s.guest_mem),
        s.ram.name(),
        human_bytes(s.walker_mem),
        s.passes,
        s.order.name(),
        o.spec.accel.name(),
        o.accel_note,
        o.kernel.display()
    );
    if let Some(line) = tiermem_settings(o) {
        t += &line;
    }
    t += &format!(
        "{:<7} {:>10} {:<12} {:>7} {:>10} {:>8} {:>8} {:>11} {:>7} {:>9} {:>9} {:>9} {:>9} {:>7}\n",
        "class",
        "DRAM",
        "mode",
        "boot",
        "pages/s",
        "p50",
        "p99",
        "peak RSS",
        "vs ks",
        "dev reads",
        "dev waits",
        "faults",
        "checked",
        "wrong"
    );
    for r in &o.runs {
        t += &row(r, ratio_of(o, r));
    }
    if let Some(l) = &o.live_change {
        t += &live_text(l);
    }
    t += "\ntargets:\n";
    for (what, verdict) in targets(o) {
        t += &format!("  {what}: {verdict}\n");
    }
    t
}

fn row(r: &ClassRun, ratio: Option<f64>) -> String {
    let Some(g) = &r.guest else {
        return format!(
            "{:<7} {:>10} {:<12} failed: {}\n",
            r.class.name(),
            human_bytes(r.budget_bytes),
            r.mode,
            r.error.as_deref().unwrap_or("?")
        );
    };
    let checking = g.passes.iter().filter(|p| p.index > 0);
    let p50 = checking.clone().map(|p| p.p50_ns).max().unwrap_or(0);
    let p99 = checking.map(|p| p.p99_ns).max().unwrap_or(0);
    let [reads, waits, faults] = checking_columns(r);
    format!(
        "{:<7} {:>10} {:<12} {:>7} {:>10} {:>8} {:>8} {:>11} {:>7} {:>9} {:>9} {:>9} {:>9} {:>7}\n",
        r.class.name(),
        human_bytes(r.budget_bytes),
        r.mode,
        g.boot_seconds.map_or("-".into(), |b| format!("{b:.1}s")),
        g.pages_per_second()
            .map_or("-".into(), |p| format!("{p:.0}")),
        format!("{:.1}us", p50 as f64 / 1e3),
        format!("{:.1}us", p99 as f64 / 1e3),
        human_bytes(g.peak_rss_bytes),
        ratio.map_or("-".into(), |x| format!("{x:.2}x")),
        reads,
        waits,
        faults,
        g.pages_checked,
        g.errors.map_or("?".into(), |e| e.to_string()),
    )
}

/// The checking passes' pages read from the device, their waits for it
/// and their faults, in the same terms for both modes (see
/// [`CheckingCounters`](super::outcome::CheckingCounters)), or "-".
fn checking_columns(r: &ClassRun) -> [String; 3] {
    match &r.checking {
        Some(c) => [c.device_reads, c.device_waits, c.faults].map(|n| n.to_string()),
        None => ["-", "-", "-"].map(String::from),
    }
}

/// tiermem's policy, compression and I/O engine, from a tiermem run's
/// statistics: settings taken from the environment (`TIERMEM_POLICY`, say)
/// change the figures, so the table says which were in force.
fn tiermem_settings(o: &Outcome) -> Option<String> {
    let stats = o.runs.iter().find_map(|r| r.tiermem_stats.as_ref())?;
    let s = &stats["stats"];
    Some(format!(
        "tiermem: policy {}, compression {}, page reads {}\n",
        s["policy"].as_str().unwrap_or("?"),
        s["compression"].as_str().unwrap_or("?"),
        s["io_engine"].as_str().unwrap_or("?"),
    ))
}

fn live_text(l: &LiveChange) -> String {
    let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0} ms"));
    let mut t = format!(
        "\nlive bronze -> gold with tiermem ctl: reply in {}, gold budget in effect after {}, page-outs stopped after {}",
        ms(l.ctl_ms),
        ms(l.budget_in_effect_ms),
        ms(l.evictions_stopped_ms)
    );
    if let Some(g) = &l.guest {
        let rates: Vec<String> = g
            .passes
            .iter()
            .filter(|p| p.index > 0)
            .map(|p| format!("{:.0}", p.pages_per_second()))
            .collect();
        t += &format!("; pages/s by pass: {}", rates.join(", "));
    }
    if let Some(e) = &l.error {
        t += &format!("; FAILED: {e}");
    }
    t + "\n"
}

/// The run of `r`'s class under the other mode.
fn counterpart<'a>(o: &'a Outcome, r: &ClassRun, mode: &str) -> Option<&'a ClassRun> {
    o.runs.iter().find(|x| x.class == r.class && x.mode == mode)
}

/// tiermem's pages/s over kernel swap's, on tiermem's row.
fn ratio_of(o: &Outcome, r: &ClassRun) -> Option<f64> {
    if r.mode != "tiermem" {
        return None;
    }
    let ks = counterpart(o, r, "kernel-swap")?
        .guest
        .as_ref()?
        .pages_per_second()?;
    Some(r.guest.as_ref()?.pages_per_second()? / ks)
}

fn ratios(o: &Outcome) -> serde_json::Value {
    let pairs: serde_json::Map<String, serde_json::Value> = o
        .runs
        .iter()
        .filter_map(|r| Some((r.class.name().to_string(), ratio_of(o, r)?.into())))
        .collect();
    pairs.into()
}

/// Each target of the table with its verdict.
fn targets(o: &Outcome) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let guests: Vec<&GuestRun> = o
        .runs
        .iter()
        .filter_map(|r| r.guest.as_ref())
        .chain(o.live_change.iter().filter_map(|l| l.guest.as_ref()))
        .collect();
    let wrong: u64 = guests.iter().filter_map(|g| g.errors).sum();
    let unfinished = guests.iter().filter(|g| !g.verified()).count();
    out.push((
        "guest pages lost: 0".into(),
        format!(
            "{} ({wrong} wrong word(s), {unfinished} guest(s) that did not finish and power off)",
            verdict(wrong == 0 && unfinished == 0)
        ),
    ));
    for r in o.runs.iter().filter(|r| r.mode == "tiermem") {
        if let Some(g) = &r.guest {
            let limit = r.budget_bytes + RSS_OVERHEAD;
            out.push((
                format!(
                    "{}: QEMU's resident memory <= budget + 64 MiB",
                    r.class.name()
                ),
                format!(
                    "{} (peak {} against {})",
                    verdict(g.peak_rss_bytes <= limit),
                    human_bytes(g.peak_rss_bytes),
                    human_bytes(limit)
                ),
            ));
        }
    }
    for r in o
        .runs
        .iter()
        .filter(|r| r.mode == "tiermem" && r.class != Class::Gold)
    {
        if let Some(x) = ratio_of(o, r) {
            out.push((
                format!("{} >= 1.0x kernel swap", r.class.name()),
                format!("{} ({x:.2}x)", verdict(x >= 1.0)),
            ));
        }
    }
    let boot = |class: Class| {
        o.runs
            .iter()
            .find(|r| r.class == class && r.mode == "tiermem")
            .and_then(|r| r.guest.as_ref()?.boot_seconds)
    };
    if let (Some(b), Some(g)) = (boot(Class::Bronze), boot(Class::Gold)) {
        out.push((
            "bronze boot time <= 2x gold's (tiermem)".into(),
            format!("{} ({b:.1} s against {g:.1} s)", verdict(b <= 2.0 * g)),
        ));
    }
    if let Some(l) = &o.live_change {
        let t = l
            .budget_in_effect_ms
            .zip(l.evictions_stopped_ms)
            .map(|(a, b)| a.max(b));
        out.push((
            "a live bronze -> gold change takes effect within 1 s".into(),
            match t {
                Some(ms) => format!("{} ({ms:.0} ms)", verdict(ms <= 1000.0)),
                None => "missed (not measured)".into(),
            },
        ));
    }
    out
}

fn verdict(met: bool) -> &'static str {
    match met {
        true => "met",
        false => "MISSED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel_swap::CgroupStats;
    use crate::vm::guest::{Accel, GuestRam, GuestSpec, Order, Pass};
    use crate::vm::outcome::CheckingCounters;

    fn guest(pages_per_second: f64) -> GuestRun {
        GuestRun {
            passes: vec![Pass {
                index: 1,
                pages: pages_per_second as u64,
                seconds: 1.0,
                ..Pass::default()
            }],
            errors: Some(0),
            clean_exit: true,
            ..GuestRun::default()
        }
    }

    #[test]
    fn a_guest_that_did_not_finish_shows_the_end_of_its_output() {
        let mut failed = GuestRun {
            output_tail: (1..=20)
                .map(|i| format!("line {i}\n\n"))
                .collect::<String>()
                + "tiermem run: invalid TIERMEM_FAULTS 'signal'\n",
            ..GuestRun::default()
        };
        let lines = failure_lines(&failed);
        assert_eq!(lines.len(), 12, "{lines:?}");
        assert_eq!(lines[0], "line 10");
        assert_eq!(lines[11], "tiermem run: invalid TIERMEM_FAULTS 'signal'");
        failed.errors = Some(0);
        failed.clean_exit = true;
        assert!(
            failure_lines(&failed).is_empty(),
            "a verified guest says nothing more"
        );
    }

    fn outcome() -> Outcome {
        let tiermem = ClassRun {
            class: Class::Silver,
            mode: "tiermem",
            budget_bytes: 512 << 20,
            guest: Some(guest(900.0)),
            error: None,
            tiermem_stats: Some(json!({"stats": {"page_ins": 300, "policy": "clock",
                "compression": "lz4", "io_engine": "io_uring"}})),
            cgroup: None,
            checking: CheckingCounters::of_tiermem(
                &json!({"page_ins": 100, "prefetch_issued": 40, "faults": 150}),
                &json!({"page_ins": 400, "prefetch_issued": 160, "faults": 600}),
            ),
        };
        let kernel_swap = ClassRun {
            class: Class::Silver,
            mode: "kernel-swap",
            budget_bytes: 512 << 20,
            guest: Some(guest(1000.0)),
            error: None,
            tiermem_stats: None,
            cgroup: Some(CgroupStats {
                pgmajfault: 200,
                ..CgroupStats::default()
            }),
            checking: CheckingCounters::of_kernel_swap(
                &CgroupStats {
                    pgmajfault: 50,
                    pgfault: 70,
                    pswpin: Some(60),
                    ..CgroupStats::default()
                },
                &CgroupStats {
                    pgmajfault: 250,
                    pgfault: 330,
                    pswpin: Some(900),
                    ..CgroupStats::default()
                },
            ),
        };
        Outcome {
            spec: GuestSpec {
                mem_bytes: 1 << 30,
                walker_bytes: 768 << 20,
                passes: 1,
                order: Order::Shuffle,
                ram: GuestRam::Anonymous,
                accel: Accel::Tcg,
            },
            kernel: "/boot/vmlinuz".into(),
            accel_note: "asked for".into(),
            runs: vec![tiermem, kernel_swap],
            live_change: None,
        }
    }

    #[test]
    fn the_checking_passes_are_counted_alike_in_both_modes() {
        let o = outcome();
        // tiermem: page-ins, those not read ahead, faults.
        assert_eq!(checking_columns(&o.runs[0]), ["300", "180", "450"]);
        // Kernel swap: swap-ins, major faults, faults.
        assert_eq!(checking_columns(&o.runs[1]), ["840", "200", "260"]);
        let mut no_counters = o.runs.into_iter().next().expect("a run");
        no_counters.checking = None;
        assert_eq!(checking_columns(&no_counters), ["-", "-", "-"]);
        let o = outcome();
        assert_eq!(
            tiermem_settings(&o).as_deref(),
            Some("tiermem: policy clock, compression lz4, page reads io_uring\n")
        );
    }

    #[test]
    fn silver_below_kernel_swap_is_a_missed_target() {
        let o = outcome();
        let ratio = ratio_of(&o, &o.runs[0]).expect("a ratio on tiermem's row");
        assert!((ratio - 0.9).abs() < 1e-9, "{ratio}");
        let targets = targets(&o);
        let silver = targets
            .iter()
            .find(|(what, _)| what.starts_with("silver >= 1.0x"))
            .expect("the silver target");
        assert!(silver.1.starts_with("MISSED"), "{silver:?}");
        assert!(targets[0].1.starts_with("met"), "{:?}", targets[0]);
    }
}
