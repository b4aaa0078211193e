//! How idle CPUs wait, which decides what waking a sleeping thread costs.
//!
//! On a VM guest whose idle vCPUs halt at once, waking a sleeping thread
//! on another vCPU, or delivering an interrupt to one, goes through the
//! host: the vCPU gave up its time slice and must be scheduled again. Two
//! guest set-ups halt at once:
//! - the `haltpoll` cpuidle driver with `guest_halt_poll_ns=0`: the
//!   driver could poll for a while before halting, but the window is 0.
//!   On the test VM that added 12–27 µs to every interrupt-completed read
//!   (device QD1 4 KiB read 58–75 µs against 46–48 µs with polling on);
//! - no cpuidle driver at all (`none`): the kernel's default idle routine
//!   runs, a plain `HLT`, unless the kernel command line asks for
//!   `idle=poll` or the CPU offers `MWAIT`. No driver turns the host's own
//!   halt polling off (the `haltpoll` driver does), so the host resumes a
//!   halted vCPU quickly: on the test VM a thread
//!   woken by the disk's interrupt on its own vCPU ran 5 µs later, one woken
//!   from the other vCPU 11–25 µs later (docs/perf/wake_locality.bt). The
//!   test VM runs this way now (BENCHMARKS.md, "The machine and the
//!   method"); nothing at run time turns guest polling on there (the
//!   `haltpoll` driver needs the host's poll-control feature).
//!
//! Figures from such a guest are only comparable with figures from one set
//! the same way, so `tiermem bench` and `tiermem device` say when they run
//! on one.

use std::path::Path;

/// The idle-wait facts of this machine, as far as it exposes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdleWait {
    /// The CPU has the `hypervisor` flag: this is a VM guest.
    pub guest: bool,
    /// `/sys/devices/system/cpu/cpuidle/current_driver`.
    pub driver: Option<String>,
    /// `current_governor` beside it: the polling window below is the
    /// `haltpoll` governor's, and means nothing under another.
    pub governor: Option<String>,
    /// The `haltpoll` governor's polling window, `guest_halt_poll_ns`.
    pub guest_halt_poll_ns: Option<u64>,
    /// The kernel command line's `idle=` option (`poll`, `halt`,
    /// `nomwait`), which picks the idle routine when no driver does.
    pub idle_option: Option<String>,
    /// The CPU has the `monitor` flag (`MONITOR`/`MWAIT`): without a
    /// driver the kernel may then idle in `MWAIT` instead of `HLT`.
    pub mwait: bool,
}

/// How a guest's idle vCPUs come to halt at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Halting {
    /// The `haltpoll` driver with its polling window at 0.
    PollingOff,
    /// No cpuidle driver: the default idle routine, `HLT`.
    PlainHalt,
}

/// Where the haltpoll governor's window is set.
pub const HALT_POLL_PARAMETER: &str = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";

/// The words every note about halting vCPUs contains, for tests and
/// scripts that look for one.
pub const HALT_NOTE_MARK: &str = "idle vCPUs halt at once";

impl IdleWait {
    /// Reads this machine's facts.
    pub fn read() -> IdleWait {
        IdleWait::read_from(Path::new("/"))
    }

    /// Reads the facts from a tree laid out like `/` (tests use a copy).
    pub fn read_from(root: &Path) -> IdleWait {
        let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
        let has_flag = |info: &str, flag: &str| {
            info.lines()
                .filter(|l| l.starts_with("flags"))
                .any(|l| l.split_whitespace().any(|f| f == flag))
        };
        let cpuinfo = read("proc/cpuinfo").unwrap_or_default();
        IdleWait {
            guest: has_flag(&cpuinfo, "hypervisor"),
            driver: read("sys/devices/system/cpu/cpuidle/current_driver")
                .map(|d| d.trim().to_string()),
            governor: read("sys/devices/system/cpu/cpuidle/current_governor")
                .or_else(|| read("sys/devices/system/cpu/cpuidle/current_governor_ro"))
                .map(|g| g.trim().to_string()),
            guest_halt_poll_ns: read(HALT_POLL_PARAMETER.trim_start_matches('/'))
                .and_then(|v| v.trim().parse().ok()),
            idle_option: read("proc/cmdline").and_then(|line| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix("idle=").map(str::to_string))
            }),
            mwait: has_flag(&cpuinfo, "monitor"),
        }
    }

    /// How this VM guest's idle vCPUs halt without polling first, if they
    /// do. A guest that halts through `acpi_idle` or another driver reads
    /// as `None` too: `None` does not prove wake-ups cheap.
    pub fn halting(&self) -> Option<Halting> {
        if !self.guest {
            return None;
        }
        match self.driver.as_deref() {
            Some("haltpoll")
                if self.governor.as_deref() == Some("haltpoll")
                    && self.guest_halt_poll_ns == Some(0) =>
            {
                Some(Halting::PollingOff)
            }
            Some("none") if !self.mwait && self.idle_option.as_deref() != Some("poll") => {
                Some(Halting::PlainHalt)
            }
            _ => None,
        }
    }

    /// A VM guest whose idle vCPUs halt without polling first.
    pub fn halts_at_once(&self) -> bool {
        self.halting().is_some()
    }

    /// A one-paragraph note for reports, if waking a thread is costly here.
    pub fn note(&self) -> Option<String> {
        let (cause, effect, remedy) = match self.halting()? {
            Halting::PollingOff => (
                "cpuidle driver haltpoll, guest_halt_poll_ns=0",
                "the driver turns the host's own polling off, so the host resumes a halted \
                 vCPU slowly. That slows interrupt-completed reads (the device QD1 figure, \
                 kernel swap, tiermem's handler threads) more than polled ones (tiermem \
                 --faults signal)"
                    .to_string(),
                format!(
                    "Guest halt polling (as root: echo 200000 > {HALT_POLL_PARAMETER}) \
                     spends idle host CPU on shorter wake-ups, for every program on the guest"
                ),
            ),
            Halting::PlainHalt => (
                "no cpuidle driver: the default idle routine, HLT",
                "the host resumes a halted vCPU quickly (KVM's own halt polling, on by \
                 default, is left on where no driver turns it off), so a \
                 thread woken by an interrupt on its own vCPU runs within microseconds, but \
                 a wake-up sent to another vCPU is an interrupt between vCPUs that the host \
                 delivers. A pager whose faulting thread waits for its own read (kernel \
                 swap, tiermem --faults signal) pays for no such crossing; tiermem's handler \
                 threads pay for two per fault, one to reach a handler and one to wake the \
                 faulting thread"
                    .to_string(),
                "Nothing at run time turns guest polling on here: the haltpoll driver needs \
                 the host's poll-control feature, and idle=poll is a kernel command-line option"
                    .to_string(),
            ),
        };
        Some(format!(
            "{HALT_NOTE_MARK} on this VM ({cause}): every wake-up of a sleeping thread and \
             every interrupt that reaches an idle vCPU goes through the host, and {effect}. \
             Compare only with runs on a guest set the same way. {remedy}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(
        flags: &str,
        driver: Option<&str>,
        governor: &str,
        poll_ns: Option<&str>,
    ) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a temp dir");
        let write = |p: &str, text: &str| {
            let path = dir.path().join(p);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("dirs");
            std::fs::write(path, text).expect("a file");
        };
        write(
            "proc/cpuinfo",
            &format!("processor\t: 0\nflags\t\t: {flags}\n"),
        );
        if let Some(d) = driver {
            write(
                "sys/devices/system/cpu/cpuidle/current_driver",
                &format!("{d}\n"),
            );
            write(
                "sys/devices/system/cpu/cpuidle/current_governor",
                &format!("{governor}\n"),
            );
        }
        if let Some(ns) = poll_ns {
            write(
                "sys/module/haltpoll/parameters/guest_halt_poll_ns",
                &format!("{ns}\n"),
            );
        }
        dir
    }

    #[test]
    fn a_guest_with_halt_polling_off_gets_the_note() {
        let dir = tree(
            "fpu sse2 hypervisor avx2",
            Some("haltpoll"),
            "haltpoll",
            Some("0"),
        );
        let idle = IdleWait::read_from(dir.path());
        assert!(idle.guest);
        assert_eq!(idle.guest_halt_poll_ns, Some(0));
        assert!(idle.halts_at_once());
        let note = idle.note().expect("a note");
        assert!(note.contains("guest_halt_poll_ns=0"), "{note}");
        assert!(note.contains(HALT_POLL_PARAMETER), "{note}");
        assert!(note.contains(HALT_NOTE_MARK), "{note}");
        assert!(note.contains("resumes a halted vCPU slowly"), "{note}");
    }

    #[test]
    fn a_guest_without_a_cpuidle_driver_halts_in_hlt() {
        let dir = tree("fpu hypervisor", Some("none"), "menu", Some("200000"));
        let idle = IdleWait::read_from(dir.path());
        assert_eq!(idle.halting(), Some(Halting::PlainHalt), "{idle:?}");
        let note = idle.note().expect("a note");
        assert!(note.contains(HALT_NOTE_MARK), "{note}");
        assert!(note.contains("HLT"), "{note}");
        // Here wake-ups are quick on a vCPU and costly between vCPUs: the
        // note says which pagers pay for crossings, not that reads are slow.
        assert!(note.contains("resumes a halted vCPU quickly"), "{note}");
        assert!(note.contains("two per fault"), "{note}");
        assert!(!note.contains("slows interrupt-completed reads"), "{note}");
        // The haltpoll window means nothing without the driver: no advice to set it.
        assert!(!note.contains(HALT_POLL_PARAMETER), "{note}");
    }

    #[test]
    fn idle_poll_or_mwait_keeps_a_driverless_guest_off_the_list() {
        let dir = tree("fpu hypervisor", Some("none"), "menu", None);
        std::fs::write(dir.path().join("proc/cmdline"), "quiet idle=poll\n").expect("cmdline");
        let idle = IdleWait::read_from(dir.path());
        assert_eq!(idle.idle_option.as_deref(), Some("poll"));
        assert_eq!(idle.halting(), None, "{idle:?}");
        let dir = tree("fpu hypervisor monitor", Some("none"), "menu", None);
        let idle = IdleWait::read_from(dir.path());
        assert!(idle.mwait);
        assert_eq!(idle.halting(), None, "{idle:?}");
        // Bare metal without a driver is not a guest's concern.
        let dir = tree("fpu sse2", Some("none"), "menu", None);
        assert_eq!(IdleWait::read_from(dir.path()).halting(), None);
    }

    #[test]
    fn polling_guests_and_bare_metal_get_none() {
        for (flags, driver, governor, ns) in [
            (
                "fpu hypervisor",
                Some("haltpoll"),
                "haltpoll",
                Some("200000"),
            ),
            ("fpu hypervisor", Some("haltpoll"), "menu", Some("0")),
            ("fpu sse2", Some("intel_idle"), "menu", None),
            ("fpu hypervisor", None, "haltpoll", None),
            ("fpu sse2", Some("haltpoll"), "haltpoll", Some("0")),
        ] {
            let dir = tree(flags, driver, governor, ns);
            let idle = IdleWait::read_from(dir.path());
            assert_eq!(idle.note(), None, "{flags} {driver:?} {governor} {ns:?}");
        }
    }

    #[test]
    fn this_machine_is_read_from_the_real_paths() {
        let idle = IdleWait::read();
        let cpuidle = Path::new("/sys/devices/system/cpu/cpuidle");
        if cpuidle.join("current_driver").exists() {
            assert!(idle.driver.is_some(), "{idle:?}");
        }
        if cpuidle.join("current_governor").exists() || cpuidle.join("current_governor_ro").exists()
        {
            assert!(idle.governor.is_some(), "{idle:?}");
        }
        if Path::new(HALT_POLL_PARAMETER).exists() {
            assert!(idle.guest_halt_poll_ns.is_some(), "{idle:?}");
        }
    }
}
