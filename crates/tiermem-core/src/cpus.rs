//! Where a paging program runs: `--cpus LIST|irq` of `tiermem run` and
//! `tiermem bench`.
//!
//! A miss served through userfaultfd wakes two threads: the handler, then
//! the faulting thread. On a small VM each wake-up across vCPUs is an
//! inter-processor interrupt that costs the waker 10-15 µs, and the device's
//! completion interrupt lands on one vCPU. Running a single-threaded program
//! with its handlers on the CPU that takes the backing device's interrupts
//! keeps a miss on one CPU; on the 2-vCPU test machine that takes the miss
//! p50 from 108 µs to 62-68 µs. The scheduler will not find that placement by itself: it wakes a
//! thread on an idle CPU rather than beside a busy handler.
//!
//! This only restricts where the process may run, as `taskset` does. It is
//! opt-in: a program with several busy threads wants more than one CPU.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::sys::thread::{allowed_cpus, restrict_current_thread};

/// A `--cpus` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpuChoice {
    /// These CPUs.
    List(Vec<usize>),
    /// The CPUs that take the interrupts of the backing store's device.
    DeviceIrq,
}

/// What `--cpus` accepts, for error messages and help.
pub const CPUS_FORMS: &str =
    "a CPU list such as 1 or 0,2-3, or `irq` for the CPUs taking the backing device's interrupts";

impl std::str::FromStr for CpuChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<CpuChoice, String> {
        match s.trim() {
            "irq" => Ok(CpuChoice::DeviceIrq),
            list => parse_cpu_list(list).map(CpuChoice::List),
        }
    }
}

impl CpuChoice {
    /// The CPUs meant, with the reason for them, checked against the CPUs
    /// this process may use. `backing` locates the device for `irq`.
    pub fn resolve(&self, backing: &Path) -> Result<(Vec<usize>, String), String> {
        let allowed = allowed_cpus();
        let (cpus, why) = match self {
            CpuChoice::List(cpus) => {
                if let Some(bad) = cpus.iter().find(|c| !allowed.contains(c)) {
                    return Err(format!(
                        "CPU {bad} is not one this process may run on (allowed: {})",
                        format_cpu_list(&allowed)
                    ));
                }
                (cpus.clone(), "as asked".to_string())
            }
            CpuChoice::DeviceIrq => {
                let (irq_cpus, device) = device_irq_cpus(backing)?;
                let usable: Vec<usize> = irq_cpus
                    .iter()
                    .copied()
                    .filter(|c| allowed.contains(c))
                    .collect();
                if usable.is_empty() {
                    return Err(format!(
                        "the interrupts of {device} go to CPU(s) {}, none of which this \
                         process may run on (allowed: {})",
                        format_cpu_list(&irq_cpus),
                        format_cpu_list(&allowed)
                    ));
                }
                (
                    usable,
                    format!("the CPUs taking the interrupts of {device}"),
                )
            }
        };
        Ok((cpus, why))
    }
}

/// Parses a CPU list as the kernel writes them: `0`, `0,2`, `1-3,6`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let bad = |why: &str| format!("bad CPU list {s:?}: {why}; expected {CPUS_FORMS}");
    if s.trim().is_empty() {
        return Err(bad("it is empty"));
    }
    let mut cpus = Vec::new();
    for part in s.trim().split(',') {
        let number = |n: &str| {
            n.trim()
                .parse::<usize>()
                .map_err(|_| bad(&format!("{n:?} is not a CPU number")))
        };
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(part)?, number(part)?),
        };
        if first > last {
            return Err(bad(&format!("range {part} runs backwards")));
        }
        if last >= libc::CPU_SETSIZE as usize {
            return Err(bad(&format!(
                "CPU {last} is beyond {}",
                libc::CPU_SETSIZE - 1
            )));
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// `[0, 1, 2, 5]` as `0-2,5`.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(match i == j {
            true => cpus[i].to_string(),
            false => format!("{}-{}", cpus[i], cpus[j]),
        });
        i = j + 1;
    }
    parts.join(",")
}

/// The CPUs that take the I/O interrupts of the block device holding
/// `path`, and the device's name. Found through sysfs: the device's PCI
/// function, its MSI vectors (or its legacy interrupt), and each vector's
/// effective affinity. Vectors that carry no I/O completions (virtio's
/// configuration vector, an NVMe admin queue) are left out.
pub fn device_irq_cpus(path: &Path) -> Result<(Vec<usize>, String), String> {
    let device = block_device_of(path)?;
    let name = device
        .file_name()
        .map_or_else(|| "?".into(), |n| n.to_string_lossy().into_owned());
    if device.starts_with("/sys/devices/virtual") {
        return Err(format!(
            "{name} is a virtual block device (device-mapper, loop, zram...) with no \
             interrupts of its own; give --cpus a CPU list"
        ));
    }
    let function = device
        .ancestors()
        .find(|dir| is_pci_function(dir))
        .ok_or_else(|| format!("{name} is not behind a PCI function; give --cpus a CPU list"))?;
    let mut cpus = Vec::new();
    for irq in io_interrupts(function)? {
        let list = ["effective_affinity_list", "smp_affinity_list"]
            .iter()
            .find_map(|f| std::fs::read_to_string(format!("/proc/irq/{irq}/{f}")).ok());
        if let Some(list) = list.filter(|l| !l.trim().is_empty()) {
            cpus.extend(parse_cpu_list(&list)?);
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.is_empty() {
        return Err(format!(
            "the interrupts of {name} have no CPU affinity to read; give --cpus a CPU list"
        ));
    }
    Ok((cpus, name))
}

/// The sysfs directory of the block device holding `path`.
fn block_device_of(path: &Path) -> Result<PathBuf, String> {
    let existing = path
        .ancestors()
        .find(|p| p.exists())
        .ok_or_else(|| format!("{} does not exist", path.display()))?;
    let meta = std::fs::metadata(existing)
        .map_err(|e| format!("cannot stat {}: {e}", existing.display()))?;
    // A block device given as the backing store is the device itself.
    let dev = match meta.file_type().is_block_device() {
        true => meta.rdev(),
        false => meta.dev(),
    };
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major == 0 {
        // tmpfs, overlayfs and btrfs report anonymous device numbers.
        return Err(format!(
            "the filesystem of {} names no single block device; give --cpus a CPU list",
            existing.display()
        ));
    }
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    std::fs::canonicalize(&sys).map_err(|e| {
        format!(
            "{} is not on a block device tiermem can find ({}: {e}); give --cpus a CPU list",
            existing.display(),
            sys.display()
        )
    })
}

fn is_pci_function(dir: &Path) -> bool {
    std::fs::read_link(dir.join("subsystem"))
        .is_ok_and(|target| target.file_name().is_some_and(|n| n == "pci"))
}

/// The interrupt numbers of a PCI function that carry I/O completions.
fn io_interrupts(function: &Path) -> Result<Vec<String>, String> {
    let msi = function.join("msi_irqs");
    let Ok(entries) = std::fs::read_dir(&msi) else {
        // Legacy INTx: one line, shared by everything the function does.
        let irq = std::fs::read_to_string(function.join("irq")).map_err(|e| {
            format!(
                "{}: no MSI vectors and no irq ({e}); give --cpus a CPU list",
                function.display()
            )
        })?;
        return Ok(vec![irq.trim().to_string()]);
    };
    let all: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let io: Vec<String> = all
        .iter()
        .filter(|irq| !is_control_vector(&interrupt_name(irq)))
        .cloned()
        .collect();
    Ok(if io.is_empty() { all } else { io })
}

/// What the interrupt's handlers call it (`virtio1-req.0`, `nvme0q1`).
fn interrupt_name(irq: &str) -> String {
    std::fs::read_to_string(format!("/sys/kernel/irq/{irq}/actions")).unwrap_or_default()
}

/// Vectors that never signal a completed read or write.
fn is_control_vector(name: &str) -> bool {
    let name = name.trim();
    let nvme_admin =
        name.starts_with("nvme") && name.rsplit_once('q').is_some_and(|(_, q)| q == "0");
    name.ends_with("-config") || nvme_admin
}

/// Makes `cmd`'s process start restricted to `cpus` (as `taskset` does).
pub fn restrict_command(cmd: &mut Command, cpus: &[usize]) {
    let cpus = cpus.to_vec();
    // SAFETY: the closure runs in the child between fork and exec; it
    // allocates nothing and makes one system call, sched_setaffinity, which
    // is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || restrict_current_thread(&cpus));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("1"), Ok(vec![1]));
        assert_eq!(parse_cpu_list("0-2,5"), Ok(vec![0, 1, 2, 5]));
        assert_eq!(parse_cpu_list(" 3,1,1-2\n"), Ok(vec![1, 2, 3]));
        for bad in ["", "a", "3-1", "0,,1", "-1", "1-", "99999"] {
            let err = parse_cpu_list(bad).expect_err(bad);
            assert!(err.contains("bad CPU list"), "{bad}: {err}");
        }
        assert_eq!("irq".parse(), Ok(CpuChoice::DeviceIrq));
        assert_eq!("0,1".parse(), Ok(CpuChoice::List(vec![0, 1])));
    }

    #[test]
    fn cpu_lists_format_as_ranges() {
        assert_eq!(format_cpu_list(&[0, 1, 2, 5]), "0-2,5");
        assert_eq!(format_cpu_list(&[3]), "3");
        assert_eq!(format_cpu_list(&[]), "");
    }

    #[test]
    fn cpus_outside_the_allowed_set_are_refused() {
        let err = CpuChoice::List(vec![libc::CPU_SETSIZE as usize - 1])
            .resolve(Path::new("/"))
            .expect_err("no machine here has that CPU");
        assert!(err.contains("not one this process may run on"), "{err}");
    }

    #[test]
    fn the_device_interrupt_cpus_are_found_or_refused_with_a_reason() {
        let path = Path::new("/var/tmp/does-not-exist-yet");
        let on_pci = block_device_of(path).is_ok_and(|dev| {
            !dev.starts_with("/sys/devices/virtual") && dev.ancestors().any(is_pci_function)
        });
        match device_irq_cpus(path) {
            Ok((cpus, device)) => {
                assert!(on_pci, "found {cpus:?} for {device} without a PCI function");
                assert!(!device.is_empty());
                assert!(!cpus.is_empty());
            }
            Err(why) => {
                assert!(!on_pci, "a PCI block device must be found: {why}");
                assert!(why.contains("--cpus a CPU list"), "{why}");
            }
        }
        assert!(is_control_vector("virtio1-config\n"));
        assert!(is_control_vector("nvme0q0"));
        assert!(!is_control_vector("virtio1-req.0"));
        assert!(!is_control_vector("nvme0q1"));
        assert!(!is_control_vector("nvme0q10"));
    }

    #[test]
    fn a_block_device_path_names_that_device() {
        let Ok(dir) = block_device_of(Path::new("/var/tmp")) else {
            return; // not on a block device here: nothing to compare
        };
        let node = Path::new("/dev").join(dir.file_name().expect("a device name"));
        if node.exists() {
            assert_eq!(block_device_of(&node), Ok(dir));
        }
    }

    #[test]
    fn a_restricted_command_runs_on_those_cpus_only() {
        let cpu = *allowed_cpus().last().expect("some CPU");
        let mut cmd = Command::new("grep");
        cmd.args(["Cpus_allowed_list", "/proc/self/status"]);
        restrict_command(&mut cmd, &[cpu]);
        let out = cmd.output().expect("grep runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.split_whitespace().last(),
            Some(cpu.to_string().as_str()),
            "{text}"
        );
    }
}
