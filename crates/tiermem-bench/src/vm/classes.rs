//! The run: the accelerator chosen, each class under each mode, and the
//! live change of a running Bronze guest to Gold with `tiermem ctl`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::guest::{self, Accel, Event, GuestRun, GuestSpec};
use super::initramfs::GuestImage;
use super::outcome::{CheckingCounters, ClassRun, LiveChange, Outcome};
use super::plan::{AccelChoice, Class, Settings};
use super::report;
use crate::kernel_swap::{self, SandboxSpec, SwapSandbox};
use crate::result::Mode;

/// Exit status when a guest found a wrong byte or did not finish.
const EXIT_DATA_LOSS: i32 = 3;

/// Runs `tiermem bench-vm`; the exit status (0; 1 when a guest failed to
/// run; 3 when a guest's walker found a wrong byte).
pub fn run(settings: Settings) -> anyhow::Result<i32> {
    validate(&settings)?;
    if settings.modes.contains(&Mode::KernelSwap) {
        kernel_swap::install_signal_cleanup()?;
        SwapSandbox::availability().map_err(|why| anyhow::anyhow!("kernel-swap mode: {why}"))?;
    }
    let image = GuestImage::build(settings.kernel.as_deref(), &std::env::temp_dir())?;
    let (accel, accel_note) = choose_accel(&settings, &image)?;
    progress(&format!("accelerator {}: {accel_note}", accel.name()));
    let spec = GuestSpec {
        mem_bytes: settings.guest_mem,
        walker_bytes: settings.walker_mem,
        passes: settings.passes,
        order: settings.order,
        accel,
        ram: settings.ram,
    };
    let mut runs = Vec::new();
    for (i, &class) in settings.classes.iter().enumerate() {
        let mut modes = settings.modes.clone();
        if i % 2 == 1 {
            modes.reverse();
        }
        for mode in modes {
            runs.push(run_class(&settings, &image, &spec, class, mode));
        }
    }
    let live_change = (settings.live_change && settings.modes.contains(&Mode::Tiermem))
        .then(|| live_change(&settings, &image, &spec));
    let outcome = Outcome {
        spec,
        kernel: image.kernel.clone(),
        accel_note,
        runs,
        live_change,
    };
    report::print(&settings, &outcome)?;
    Ok(exit_status(&outcome))
}

fn validate(s: &Settings) -> anyhow::Result<()> {
    if s.walker_mem + (64 << 20) > s.guest_mem {
        bail!(
            "--walker-mem ({} MiB) must leave at least 64 MiB of the {} MiB guest to its kernel",
            s.walker_mem >> 20,
            s.guest_mem >> 20
        );
    }
    if let Some(m) = s
        .modes
        .iter()
        .find(|m| !matches!(m, Mode::Tiermem | Mode::KernelSwap))
    {
        bail!("bench-vm runs tiermem and kernel-swap, not {}", m.name());
    }
    if s.modes.contains(&Mode::Tiermem) && s.library.is_none() {
        bail!("tiermem mode needs libtiermem.so");
    }
    if !s.backing.is_dir() {
        bail!(
            "--backing {} must be a directory (tiermem's file and the swapfile go there)",
            s.backing.display()
        );
    }
    Ok(())
}

fn exit_status(o: &Outcome) -> i32 {
    let guests = o
        .runs
        .iter()
        .map(|r| &r.guest)
        .chain(o.live_change.iter().map(|l| &l.guest));
    let mut code = 0;
    for g in guests {
        match g {
            Some(g) if g.errors.is_some_and(|e| e > 0) => return EXIT_DATA_LOSS,
            Some(g) if g.verified() => {}
            _ => code = 1,
        }
    }
    code
}

pub(super) fn progress(what: &str) {
    eprintln!("tiermem bench-vm: {what}");
}

/// KVM when asked for or when a small probe guest reaches its walker
/// with it within 20 s; TCG otherwise.
fn choose_accel(s: &Settings, image: &GuestImage) -> anyhow::Result<(Accel, String)> {
    match s.accel {
        AccelChoice::Tcg => return Ok((Accel::Tcg, "asked for (--accel tcg)".into())),
        AccelChoice::Kvm => return Ok((Accel::Kvm, "asked for (--accel kvm)".into())),
        AccelChoice::Auto => {}
    }
    Ok(
        match guest::kvm_boots(&s.qemu, image, Duration::from_secs(20))? {
            Ok(()) => (Accel::Kvm, "a probe guest booted with KVM".into()),
            Err(why) => (Accel::Tcg, why),
        },
    )
}

fn run_class(
    s: &Settings,
    image: &GuestImage,
    spec: &GuestSpec,
    class: Class,
    mode: Mode,
) -> ClassRun {
    let budget = class.budget(s.guest_mem);
    progress(&format!(
        "{} ({} MiB of DRAM) under {}: booting",
        class.name(),
        budget >> 20,
        mode.name()
    ));
    let mut out = ClassRun {
        class,
        mode: mode.name(),
        budget_bytes: budget,
        guest: None,
        error: None,
        tiermem_stats: None,
        cgroup: None,
        checking: None,
    };
    let result = match mode {
        Mode::KernelSwap => under_kernel_swap(s, image, spec, budget, &mut out),
        _ => under_tiermem(s, image, spec, budget, &mut out),
    };
    match result {
        Ok(g) => {
            progress(&format!(
                "{} under {}: {}",
                class.name(),
                mode.name(),
                report::one_line(&g)
            ));
            for line in report::failure_lines(&g) {
                progress(&format!("  | {line}"));
            }
            out.guest = Some(g);
        }
        Err(e) => {
            progress(&format!(
                "{} under {} failed: {e:#}",
                class.name(),
                mode.name()
            ));
            out.error = Some(format!("{e:#}"));
        }
    }
    out
}

fn show_pass(_pid: u32, event: &Event) {
    if let Event::Pass(p) = event {
        progress(&format!(
            "  pass {}: {:.0} pages/s, {} errors",
            p.index,
            p.pages_per_second(),
            p.errors
        ));
    }
}

fn under_tiermem(
    s: &Settings,
    image: &GuestImage,
    spec: &GuestSpec,
    budget: u64,
    out: &mut ClassRun,
) -> anyhow::Result<GuestRun> {
    let stats = StatsFile::new(&s.backing);
    let cmd = tiered_qemu(s, image, spec, budget, &stats.path)?;
    let mut stamped = None;
    let run = guest::run(cmd, s.timeout, |pid, event| {
        show_pass(pid, event);
        if matches!(event, Event::Pass(p) if p.index == 0) {
            stamped = ctl_stats(&s.tiermem, pid);
        }
    })?;
    out.tiermem_stats = stats.read();
    out.checking = match (&stamped, &out.tiermem_stats) {
        (Some(at), Some(end)) => CheckingCounters::of_tiermem(&at["stats"], &end["stats"]),
        _ => None,
    };
    Ok(run)
}

fn tiered_qemu(
    s: &Settings,
    image: &GuestImage,
    spec: &GuestSpec,
    budget: u64,
    stats: &Path,
) -> anyhow::Result<Command> {
    let library = s
        .library
        .as_ref()
        .context("tiermem mode needs libtiermem.so")?;
    let mut cmd = guest::qemu_command(&s.qemu, image, spec);
    cmd.env("LD_PRELOAD", library)
        .env("TIERMEM_PRELOAD", "1")
        .env("TIERMEM_DRAM", budget.to_string())
        .env("TIERMEM_BACKING", &s.backing)
        .env("TIERMEM_STATS_FILE", stats);
    Ok(cmd)
}

fn under_kernel_swap(
    s: &Settings,
    image: &GuestImage,
    spec: &GuestSpec,
    budget: u64,
    out: &mut ClassRun,
) -> anyhow::Result<GuestRun> {
    let mut sandbox = SwapSandbox::create(&SandboxSpec {
        memory_limit_bytes: budget,
        swap_bytes: s.guest_mem + (256 << 20),
        swap_dir: s.backing.clone(),
        swap_device: None,
        overflow_swapfile_bytes: None,
    })
    .context("setting up kernel swap")?;
    let mut cmd = guest::qemu_command(&s.qemu, image, spec);
    sandbox.configure_command(&mut cmd);
    let mut stamped = None;
    let run = guest::run(cmd, s.timeout, |pid, event| {
        if *event == Event::Started {
            sandbox.adopt_child(pid as i32);
        }
        show_pass(pid, event);
        if matches!(event, Event::Pass(p) if p.index == 0) {
            stamped = sandbox.stats().ok();
        }
    });
    out.cgroup = sandbox.stats().ok();
    out.checking = match (&stamped, &out.cgroup) {
        (Some(at), Some(end)) => CheckingCounters::of_kernel_swap(at, end),
        _ => None,
    };
    sandbox
        .cleanup()
        .context("removing the kernel-swap sandbox")?;
    run
}

/// The process's statistics now, through `tiermem ctl PID stats --json`.
fn ctl_stats(tiermem: &Path, pid: u32) -> Option<serde_json::Value> {
    let out = Command::new(tiermem)
        .args(["ctl", &pid.to_string(), "stats", "--json"])
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// A file for tiermem's statistics at exit, removed on drop.
struct StatsFile {
    path: PathBuf,
}

impl StatsFile {
    fn new(dir: &Path) -> StatsFile {
        StatsFile {
            path: dir.join(format!(
                "tiermem-bench-vm-{}.stats.json",
                std::process::id()
            )),
        }
    }

    fn read(&self) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        serde_json::from_str(&text).ok()
    }
}

impl Drop for StatsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A Bronze guest runs its first checking pass, then `tiermem ctl` makes
/// it Gold; the rest of its passes run as Gold.
fn live_change(s: &Settings, image: &GuestImage, spec: &GuestSpec) -> LiveChange {
    let mut spec = spec.clone();
    spec.passes = spec.passes.max(3);
    let bronze = Class::Bronze.budget(s.guest_mem);
    let gold = Class::Gold.budget(s.guest_mem);
    progress("live change: a bronze guest under tiermem, made gold after its first checking pass");
    let mut change = LiveChange::default();
    let stats = StatsFile::new(&s.backing);
    let cmd = match tiered_qemu(s, image, &spec, bronze, &stats.path) {
        Ok(c) => c,
        Err(e) => {
            change.error = Some(format!("{e:#}"));
            return change;
        }
    };
    let mut timings = None;
    let run = guest::run(cmd, s.timeout, |pid, event| {
        show_pass(pid, event);
        if matches!(event, Event::Pass(p) if p.index == 1) && timings.is_none() {
            timings = Some(make_gold(&s.tiermem, pid, gold));
        }
    });
    match timings {
        Some(Ok(t)) => {
            (
                change.ctl_ms,
                change.budget_in_effect_ms,
                change.evictions_stopped_ms,
            ) = t;
        }
        Some(Err(e)) => change.error = Some(format!("{e:#}")),
        None => change.error = Some("the guest never finished its first checking pass".into()),
    }
    match run {
        Ok(g) => change.guest = Some(g),
        Err(e) => change.error = Some(format!("{e:#}")),
    }
    change
}

type ChangeTimes = (Option<f64>, Option<f64>, Option<f64>);

/// `tiermem ctl PID budget GOLD`, then polls the process's statistics
/// until it reports the Gold budget and its page-outs stop.
fn make_gold(tiermem: &Path, pid: u32, gold: u64) -> anyhow::Result<ChangeTimes> {
    let start = Instant::now();
    let out = Command::new(tiermem)
        .args(["ctl", &pid.to_string(), "budget", &gold.to_string()])
        .output()
        .context("running tiermem ctl")?;
    if !out.status.success() {
        bail!(
            "tiermem ctl failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let ms = |t: Instant| t.duration_since(start).as_secs_f64() * 1e3;
    let ctl = Some(ms(Instant::now()));
    let (mut in_effect, mut stopped) = (None, None);
    let mut last_outs = (u64::MAX, Instant::now());
    while start.elapsed() < Duration::from_secs(10) && stopped.is_none() {
        let Some((budget, outs)) = budget_and_page_outs(tiermem, pid) else {
            break;
        };
        let now = Instant::now();
        if budget == gold && in_effect.is_none() {
            in_effect = Some(ms(now));
        }
        if outs != last_outs.0 {
            last_outs = (outs, now);
        } else if in_effect.is_some()
            && now.duration_since(last_outs.1) >= Duration::from_millis(200)
        {
            stopped = Some(ms(last_outs.1));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((ctl, in_effect, stopped))
}

fn budget_and_page_outs(tiermem: &Path, pid: u32) -> Option<(u64, u64)> {
    let v = ctl_stats(tiermem, pid)?;
    let stats = &v["stats"];
    Some((
        stats["budget_bytes"].as_u64()?,
        stats["page_outs"].as_u64()?,
    ))
}
