//! One guest, booted and watched: the QEMU command line, the lines the
//! in-guest walker prints on the serial console, QEMU's resident memory
//! sampled while it runs, and how the guest ended.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use super::initramfs::GuestImage;
use crate::redis_bench::process::{describe, die_with_parent, tail};

/// How QEMU runs the guest's CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Hardware virtualization: guest accesses fault through the host's
    /// page tables, which userfaultfd serves as it serves QEMU's own.
    Kvm,
    /// QEMU's translator: guest memory is accessed by QEMU's own loads
    /// and stores.
    Tcg,
}

impl Accel {
    /// The name QEMU's `-accel` takes.
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// The order in which the walker visits pages on each checking pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// A random permutation of its own on each pass: the distance between
    /// two visits of a page is random, up to two passes, and no prefetcher
    /// can guess the next page.
    Shuffle,
    /// The same random permutation on every pass: a loop over memory larger
    /// than the cache, each page back exactly one pass later.
    Loop,
    /// A constant stride modulo the pages, a new one on each pass: scrambled
    /// to a cache, but a stride prefetcher can follow it whenever most
    /// steps do not wrap around.
    Stride,
    /// As many visits a pass as pages, each to a page drawn at random with
    /// replacement: uniform random access, in which every policy keeps
    /// the same share of visits in DRAM (its share of the memory).
    Uniform,
}

impl Order {
    /// The name the walker and `--order` take.
    pub fn name(self) -> &'static str {
        match self {
            Order::Shuffle => "shuffle",
            Order::Loop => "loop",
            Order::Stride => "stride",
            Order::Uniform => "uniform",
        }
    }
}

/// Where QEMU keeps guest RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GuestRam {
    /// QEMU's default: private anonymous memory.
    Anonymous,
    /// `memory-backend-memfd,share=on`: a memfd mapped shared, as for a
    /// vhost-user device (none is attached here).
    Memfd,
}

impl GuestRam {
    /// The name `--ram` takes.
    pub fn name(self) -> &'static str {
        match self {
            GuestRam::Anonymous => "anonymous",
            GuestRam::Memfd => "memfd",
        }
    }
}

/// What to boot.
#[derive(Clone, Debug, Serialize)]
pub struct GuestSpec {
    /// Guest RAM (`-m`).
    pub mem_bytes: u64,
    /// Memory the walker owns inside the guest.
    pub walker_bytes: u64,
    /// Verifying passes after the stamping one.
    pub passes: u32,
    /// The walker's order of visits.
    pub order: Order,
    /// KVM or TCG.
    pub accel: Accel,
    /// Where guest RAM lives.
    pub ram: GuestRam,
}

/// The QEMU command line for `spec`: no devices but the serial console
/// on stdout, the kernel and initramfs of `image`, and no reboot, so the
/// guest's power-off ends QEMU.
pub fn qemu_command(qemu: &Path, image: &GuestImage, spec: &GuestSpec) -> Command {
    let mut cmd = Command::new(qemu);
    cmd.args(["-accel", spec.accel.name()])
        .args(["-m", &format!("{}M", spec.mem_bytes >> 20)])
        .args(["-smp", "1", "-nodefaults", "-no-reboot", "-display", "none"])
        .args(["-serial", "stdio"])
        .arg("-kernel")
        .arg(&image.kernel)
        .arg("-initrd")
        .arg(&image.initramfs)
        .arg("-append")
        .arg(format!(
            "console=ttyS0 quiet panic=-1 tm_mib={} tm_passes={} tm_order={}",
            spec.walker_bytes >> 20,
            spec.passes,
            spec.order.name()
        ));
    if spec.ram == GuestRam::Memfd {
        let size = spec.mem_bytes >> 20;
        cmd.args([
            "-object",
            &format!("memory-backend-memfd,id=ram0,size={size}M,share=on"),
        ])
        .args(["-machine", "memory-backend=ram0"]);
    }
    cmd
}

/// Whether a small guest boots with KVM and its walker finishes within
/// `within`: `Ok(())`, or why not. Nested guests can hang at boot, so
/// only a guest that booted proves KVM usable.
pub fn kvm_boots(
    qemu: &Path,
    image: &GuestImage,
    within: Duration,
) -> anyhow::Result<Result<(), String>> {
    let kvm = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm");
    if let Err(e) = kvm {
        return Ok(Err(format!("/dev/kvm cannot be opened ({e})")));
    }
    let probe = GuestSpec {
        mem_bytes: 256 << 20,
        walker_bytes: 1 << 20,
        passes: 0,
        order: Order::Shuffle,
        accel: Accel::Kvm,
        ram: GuestRam::Anonymous,
    };
    let run = run(qemu_command(qemu, image, &probe), within, |_, _| {})?;
    Ok(match run.verified() {
        true => Ok(()),
        false => Err(format!(
            "a probe guest did not boot with KVM within {} s ({}; nested virtualization?)",
            within.as_secs(),
            run.exit
        )),
    })
}

/// One pass of the walker over its memory.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Pass {
    /// 0 stamps every page; later passes check and restamp.
    pub index: u32,
    /// Pages visited.
    pub pages: u64,
    /// Seconds the pass took, by the guest's clock.
    pub seconds: f64,
    /// Median time to check and stamp one page, nanoseconds.
    pub p50_ns: u64,
    /// 99th percentile of the same.
    pub p99_ns: u64,
    /// Words that differed from what the walker wrote.
    pub errors: u64,
}

impl Pass {
    /// Pages per second over the pass.
    pub fn pages_per_second(&self) -> f64 {
        match self.seconds > 0.0 {
            true => self.pages as f64 / self.seconds,
            false => 0.0,
        }
    }
}

/// What the guest said on its console.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// QEMU was started (its pid comes with every event).
    Started,
    /// `/init` started (seconds since the guest kernel booted).
    Booted(f64),
    /// The walker mapped its memory.
    Ready,
    /// A pass finished.
    Pass(Pass),
    /// The walker finished: pages checked and words wrong.
    Done { checked: u64, errors: u64 },
    /// A word that differed, as the walker described it.
    WalkerError(String),
}

/// Reads an event from a console line. Escape sequences from the firmware
/// may precede it on the same line.
pub fn parse_line(line: &str) -> Option<Event> {
    if let Some(rest) = after(line, "guest: booted ") {
        return rest.trim().parse().ok().map(Event::Booted);
    }
    let rest = after(line, "walker: ")?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    let num = |key: &str| -> Option<u64> {
        let at = words.iter().position(|w| *w == key)?;
        words.get(at + 1)?.parse().ok()
    };
    match words.first().copied()? {
        "ready" => Some(Event::Ready),
        "pass" => Some(Event::Pass(Pass {
            index: num("pass")? as u32,
            pages: num("pages")?,
            seconds: num("ns")? as f64 / 1e9,
            p50_ns: num("p50_ns")?,
            p99_ns: num("p99_ns")?,
            errors: num("errors")?,
        })),
        "done" => Some(Event::Done {
            checked: num("pages_checked")?,
            errors: num("errors")?,
        }),
        "error" => Some(Event::WalkerError(rest.to_string())),
        _ => None,
    }
}

fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|at| &line[at + marker.len()..])
}

/// How a guest ran.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GuestRun {
    /// QEMU's pid.
    pub pid: u32,
    /// Seconds from starting QEMU to the walker's `ready`.
    pub boot_seconds: Option<f64>,
    /// Every pass, the stamping one first.
    pub passes: Vec<Pass>,
    /// Pages the walker checked, and words it found wrong (`None`: it did
    /// not finish).
    pub pages_checked: u64,
    /// Words found wrong over every pass.
    pub errors: Option<u64>,
    /// The walker's first error lines.
    pub error_lines: Vec<String>,
    /// The guest powered itself off (QEMU exited with status 0).
    pub clean_exit: bool,
    /// How QEMU ended.
    pub exit: String,
    /// The most QEMU had resident when sampled (every 50 ms), bytes.
    pub max_rss_bytes: u64,
    /// The kernel's peak of the same (`VmHWM`), bytes.
    pub peak_rss_bytes: u64,
    /// Seconds from start to exit.
    pub seconds: f64,
    /// What tiermem said on QEMU's stderr (an untiered mapping, say).
    pub notes: Vec<String>,
    /// The end of QEMU's output, for error messages.
    #[serde(skip)]
    pub output_tail: String,
}

impl GuestRun {
    /// Mean pages per second over the checking passes.
    pub fn pages_per_second(&self) -> Option<f64> {
        let checking: Vec<&Pass> = self.passes.iter().filter(|p| p.index > 0).collect();
        let seconds: f64 = checking.iter().map(|p| p.seconds).sum();
        let pages: u64 = checking.iter().map(|p| p.pages).sum();
        (seconds > 0.0).then(|| pages as f64 / seconds)
    }

    /// The walker finished, every word matched, and the guest powered off.
    pub fn verified(&self) -> bool {
        self.errors == Some(0) && self.clean_exit
    }
}

/// Starts `cmd` (a QEMU command line, prepared for its mode) and watches
/// it until it exits or `timeout` passes, when it is killed. `on_event`
/// sees each event with QEMU's pid, as it happens (to change a budget
/// live, say).
pub fn run(
    mut cmd: Command,
    timeout: Duration,
    mut on_event: impl FnMut(u32, &Event),
) -> anyhow::Result<GuestRun> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    die_with_parent(&mut cmd);
    let start = Instant::now();
    let mut child = cmd.spawn().context("starting qemu-system-x86_64")?;
    let mut out = GuestRun {
        pid: child.id(),
        ..GuestRun::default()
    };
    on_event(out.pid, &Event::Started);
    let lines = read_lines(&mut child);
    let deadline = start + timeout;
    let mut text = String::new();
    let status = loop {
        match lines.recv_timeout(Duration::from_millis(50)) {
            Ok(line) => {
                text.push_str(&line);
                text.push('\n');
                if line.starts_with("tiermem: ") && out.notes.len() < 20 {
                    out.notes.push(line.clone());
                }
                if let Some(event) = parse_line(&line) {
                    record(&mut out, &event, start);
                    on_event(out.pid, &event);
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => sample_rss(&mut out),
            Err(mpsc::RecvTimeoutError::Disconnected) => {}
        }
        if let Some(status) = child.try_wait().context("waiting for qemu")? {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
    };
    out.seconds = start.elapsed().as_secs_f64();
    out.clean_exit = status.is_some_and(|s| s.success());
    out.exit = match status {
        Some(s) => describe(s),
        None => format!("killed after the {} s timeout", timeout.as_secs()),
    };
    out.output_tail = tail(&text, 4000);
    Ok(out)
}

fn record(out: &mut GuestRun, event: &Event, start: Instant) {
    match event {
        Event::Ready => out.boot_seconds = Some(start.elapsed().as_secs_f64()),
        Event::Pass(p) => out.passes.push(p.clone()),
        Event::Done { checked, errors } => {
            out.pages_checked = *checked;
            out.errors = Some(*errors);
        }
        Event::WalkerError(e) if out.error_lines.len() < 20 => out.error_lines.push(e.clone()),
        _ => {}
    }
}

/// QEMU's stdout and stderr, line by line, from reader threads (QEMU's
/// own complaints go to stderr and belong in the error messages too).
fn read_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stdout = child
        .stdout
        .take()
        .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>);
    let stderr = child
        .stderr
        .take()
        .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>);
    for stream in [stdout, stderr].into_iter().flatten() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).split(b'\n').map_while(Result::ok) {
                if tx
                    .send(String::from_utf8_lossy(&line).into_owned())
                    .is_err()
                {
                    break;
                }
            }
        });
    }
    rx
}

fn sample_rss(out: &mut GuestRun) {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", out.pid)) else {
        return;
    };
    let field = |key: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    out.max_rss_bytes = out.max_rss_bytes.max(field("VmRSS:").unwrap_or(0));
    out.peak_rss_bytes = out.peak_rss_bytes.max(field("VmHWM:").unwrap_or(0));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_walkers_lines() {
        assert_eq!(
            parse_line("Booting from ROM..c\x1b[?7l\x1b[2Jguest: booted 2.44"),
            Some(Event::Booted(2.44))
        );
        assert_eq!(parse_line("walker: ready"), Some(Event::Ready));
        assert_eq!(
            parse_line(
                "walker: pass 1 pages 98304 ns 9325306850 p50_ns 98304 p99_ns 524288 errors 0"
            ),
            Some(Event::Pass(Pass {
                index: 1,
                pages: 98304,
                seconds: 9.32530685,
                p50_ns: 98304,
                p99_ns: 524288,
                errors: 0
            }))
        );
        assert_eq!(
            parse_line("walker: done pages_checked 196608 errors 0"),
            Some(Event::Done {
                checked: 196608,
                errors: 0
            })
        );
        assert!(matches!(
            parse_line("walker: error page 3 word 5 is 0, expected 1 (generation 0)"),
            Some(Event::WalkerError(_))
        ));
        assert_eq!(parse_line("[    4.744483] reboot: Power down"), None);
        assert_eq!(parse_line("walker: pass x"), None);
    }
}
