//! A real virtual machine under `tiermem run`: a 512 MiB QEMU guest in a
//! 128 MiB DRAM budget. Guest RAM must be tiered (QEMU's resident memory
//! stays within the budget plus a stated overhead), the in-guest walker
//! must find every byte of every page it wrote, a live budget change with
//! `tiermem ctl` must hold, and the guest must power off cleanly.
//!
//! KVM is used when a probe guest boots with it, TCG otherwise; the test
//! says which. QEMU runs in its own process group, killed when the test
//! ends, and the guest is killed after 150 s.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tiermem_bench::vm::guest::{self, Accel, Event, GuestRam, GuestSpec, Order};
use tiermem_bench::vm::initramfs::GuestImage;

#[path = "../../../tests/support/libtiermem.rs"]
mod support;

const TIERMEM: &str = env!("CARGO_BIN_EXE_tiermem");
const MIB: u64 = 1 << 20;
const BUDGET: u64 = 128 * MIB;
const LOWER_BUDGET: u64 = 96 * MIB;
/// QEMU's memory outside the budget: its binary, libraries and stacks,
/// tiermem's page table and rings, the kernel-side copies of the initramfs.
const OVERHEAD: u64 = 64 * MIB;

/// The pid of the first process under `root` (itself included) whose
/// name starts with `prefix`.
fn descendant_named(root: u32, prefix: &str) -> Option<u32> {
    // (pid, parent pid, name) of every process.
    let mut processes = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let Some((head, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let name = head.split_once(" (").map_or("", |(_, n)| n).to_string();
        let ppid: u32 = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        processes.push((pid, ppid, name));
    }
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        if processes
            .iter()
            .any(|(pid, _, name)| *pid == p && name.starts_with(prefix))
        {
            return Some(p);
        }
        frontier.extend(
            processes
                .iter()
                .filter(|(_, ppid, _)| *ppid == p)
                .map(|(pid, _, _)| *pid),
        );
    }
    None
}

fn status_field(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// Samples QEMU's peak resident memory (VmHWM) every 50 ms until `stop`.
fn sample_peak(pid: u32, stop: Arc<AtomicBool>, peak: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        if let Some(hwm) = status_field(pid, "VmHWM:") {
            peak.fetch_max(hwm, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Finds QEMU under `tiermem run` (`pid`) and samples its peak resident
/// memory into `peak` until `stop`; returns QEMU's pid.
fn start_sampling(pid: u32, stop: &Arc<AtomicBool>, peak: &Arc<AtomicU64>) -> u32 {
    let q = descendant_named(pid, "qemu-system").expect("QEMU under tiermem run");
    let (stop, peak) = (stop.clone(), peak.clone());
    std::thread::spawn(move || sample_peak(q, stop, peak));
    q
}

/// QEMU's sampled peak resident memory, which must be within `budget` plus
/// the overhead.
fn assert_peak_within(peak: &AtomicU64, budget: u64, context: &str) -> u64 {
    let peak = peak.load(Ordering::Relaxed);
    assert!(peak > 0, "QEMU's resident memory was never sampled");
    assert!(
        peak <= budget + OVERHEAD,
        "QEMU's peak resident memory {} MiB exceeds the {} MiB budget + {} MiB; {context}",
        peak / MIB,
        budget / MIB,
        OVERHEAD / MIB
    );
    peak
}

fn ctl(args: &[&str]) -> std::process::Output {
    Command::new("timeout")
        .args(["-k", "5", "30", TIERMEM, "ctl"])
        .args(args)
        .output()
        .expect("running tiermem ctl")
}

/// Kills the process group of `tiermem run` (QEMU included) on drop.
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        if self.0 > 0 {
            // SAFETY: kill(2) on the test's own child's process group.
            unsafe { libc::kill(-(self.0 as i32), libc::SIGKILL) };
        }
    }
}

/// The guest image, and KVM when a probe guest boots with it, else TCG.
fn guest_and_accelerator() -> (GuestImage, Accel) {
    let image = GuestImage::build(None, &std::env::temp_dir())
        .expect("building the guest (needs linux-image-amd64, busybox-static and build-essential)");
    let qemu = std::path::Path::new("qemu-system-x86_64");
    let accel = match guest::kvm_boots(qemu, &image, Duration::from_secs(10)) {
        Ok(Ok(())) => Accel::Kvm,
        Ok(Err(why)) => {
            eprintln!("vm_guest: using TCG: {why}");
            Accel::Tcg
        }
        Err(e) => panic!("running qemu-system-x86_64 (apt-get install qemu-system-x86): {e:#}"),
    };
    eprintln!("vm_guest: accelerator {}", accel.name());
    (image, accel)
}

#[test]
fn a_qemu_guest_runs_tiered_within_budget_and_every_page_survives() {
    let (image, accel) = guest_and_accelerator();
    let qemu = std::path::Path::new("qemu-system-x86_64");
    let spec = GuestSpec {
        mem_bytes: 512 * MIB,
        walker_bytes: 256 * MIB,
        passes: 3,
        order: Order::Shuffle,
        accel,
        ram: GuestRam::Anonymous,
    };
    let qemu_cmd = guest::qemu_command(qemu, &image, &spec);
    let mut cmd = Command::new(TIERMEM);
    cmd.args(["run", "--dram", &BUDGET.to_string(), "--"])
        .arg(qemu_cmd.get_program())
        .args(qemu_cmd.get_args())
        .env("TIERMEM_LIB", support::libtiermem())
        .process_group(0);

    let mut group = Group(0);
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let mut qemu_pid = None;
    let mut changed = None;
    let mut rss_after_change = None;
    let run = guest::run(cmd, Duration::from_secs(150), |pid, event| match event {
        Event::Started => group.0 = pid,
        Event::Ready => qemu_pid = Some(start_sampling(pid, &stop, &peak)),
        Event::Pass(p) if p.index == 1 => {
            let q = qemu_pid.expect("the walker was ready");
            changed = Some(ctl(&[&q.to_string(), "budget", &LOWER_BUDGET.to_string()]));
        }
        Event::Pass(p) if p.index == 3 => {
            rss_after_change = qemu_pid.and_then(|q| status_field(q, "VmRSS:"));
        }
        _ => {}
    })
    .expect("running the guest");
    stop.store(true, Ordering::Relaxed);
    let context = format!(
        "accelerator {}; the guest's output ends with:\n{}",
        accel.name(),
        run.output_tail
    );

    assert!(
        run.boot_seconds.is_some(),
        "the walker never started; {context}"
    );
    assert_eq!(run.passes.len(), 4, "the walker's passes; {context}");
    assert!(
        run.error_lines.is_empty(),
        "{:?}; {context}",
        run.error_lines
    );
    assert_eq!(
        run.errors,
        Some(0),
        "wrong words in guest memory; {context}"
    );
    assert_eq!(run.pages_checked, 3 * (256 * MIB / 4096), "{context}");
    assert!(
        run.clean_exit,
        "the guest did not power off cleanly ({}); {context}",
        run.exit
    );
    assert!(
        run.notes.iter().all(|n| !n.contains("does not tier")),
        "guest RAM must be tiered: {:?}",
        run.notes
    );

    let changed = changed.expect("the budget was changed");
    assert!(
        changed.status.success(),
        "tiermem ctl budget: {}",
        String::from_utf8_lossy(&changed.stderr)
    );
    let peak = assert_peak_within(&peak, BUDGET, &context);
    let after = rss_after_change.expect("QEMU's resident memory after the change");
    assert!(
        after <= LOWER_BUDGET + OVERHEAD,
        "after the live change to {} MiB QEMU had {} MiB resident; {context}",
        LOWER_BUDGET / MIB,
        after / MIB
    );
    eprintln!(
        "vm_guest: {}: boot {:.1} s, {:.0} pages/s, peak resident {} MiB, {} MiB after the change to {} MiB, {:.1} s in all",
        accel.name(),
        run.boot_seconds.unwrap_or(0.0),
        run.pages_per_second().unwrap_or(0.0),
        peak / MIB,
        after / MIB,
        LOWER_BUDGET / MIB,
        run.seconds
    );
}

/// Guest RAM in shared memory (`memory-backend-memfd`, `share=on`, which
/// QEMU maps with `MAP_FIXED` into a reservation) is tiered: the memfd's
/// descriptor never leaves QEMU, so tiermem stands for it with tiered
/// memory (see the preload's `memfd`). The walker writes more than twice
/// the budget and finds every byte, QEMU's peak resident memory stays
/// within the budget plus the stated overhead, nothing is said about
/// untiered memory or a drain, and the guest powers off cleanly. Before,
/// the RAM was the kernel's shared memory, outside the budget (said on
/// stderr), and before that QEMU could not start ("unable to map backing
/// store for guest RAM: Cannot allocate memory").
#[test]
fn a_qemu_guest_in_shared_memory_is_tiered_within_budget() {
    const MEMFD_BUDGET: u64 = 64 * MIB;
    let (image, accel) = guest_and_accelerator();
    let qemu = std::path::Path::new("qemu-system-x86_64");
    let spec = GuestSpec {
        mem_bytes: 256 * MIB,
        walker_bytes: 160 * MIB,
        passes: 1,
        order: Order::Shuffle,
        accel,
        ram: GuestRam::Memfd,
    };
    let qemu_cmd = guest::qemu_command(qemu, &image, &spec);
    let mut cmd = Command::new(TIERMEM);
    cmd.args(["run", "--dram", &MEMFD_BUDGET.to_string(), "--"])
        .arg(qemu_cmd.get_program())
        .args(qemu_cmd.get_args())
        .env("TIERMEM_LIB", support::libtiermem())
        .process_group(0);
    let mut group = Group(0);
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let run = guest::run(cmd, Duration::from_secs(150), |pid, event| match event {
        Event::Started => group.0 = pid,
        Event::Ready => {
            start_sampling(pid, &stop, &peak);
        }
        _ => {}
    })
    .expect("running the guest");
    stop.store(true, Ordering::Relaxed);
    let context = format!(
        "accelerator {}; tiermem said {:?}; the guest's output ends with:\n{}",
        accel.name(),
        run.notes,
        run.output_tail
    );
    assert_eq!(run.passes.len(), 2, "the walker's passes; {context}");
    assert_eq!(
        run.errors,
        Some(0),
        "wrong words in guest memory; {context}"
    );
    assert_eq!(run.pages_checked, 160 * MIB / 4096, "{context}");
    assert!(
        run.clean_exit,
        "the guest did not power off cleanly ({}); {context}",
        run.exit
    );
    assert!(
        run.notes
            .iter()
            .all(|n| !n.contains("does not tier") && !n.contains("left tiering")),
        "guest RAM in a memfd must be tiered from start to end; {context}"
    );
    let peak = assert_peak_within(&peak, MEMFD_BUDGET, &context);
    eprintln!(
        "vm_guest: memfd guest RAM, {}: peak resident {} MiB under a {} MiB budget, {:.0} pages/s, {:.1} s in all",
        accel.name(),
        peak / MIB,
        MEMFD_BUDGET / MIB,
        run.pages_per_second().unwrap_or(0.0),
        run.seconds
    );
}
