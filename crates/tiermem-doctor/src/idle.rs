//! How idle vCPUs wait: on a VM guest whose cpuidle driver is `haltpoll`
//! with `guest_halt_poll_ns=0`, or that has no cpuidle driver and idles in
//! `HLT`, an idle vCPU halts at once, so waking a thread there (a fault
//! handler, a task whose read completed) goes through the host: slowly
//! under `haltpoll`, which turns the host's own polling off; quickly on its
//! own vCPU without a driver, where a wake-up sent to the other vCPU is
//! what costs. tiermem's idle spin (`TIERMEM_IDLE_SPIN_US`, 200 µs by default)
//! keeps its handlers off the halt while a program pages; guest halt
//! polling, where the driver exists, fixes it for every program (README,
//! "On a VM: idle vCPUs that halt at once").

use tiermem_core::cpuidle::{Halting, IdleWait, HALT_POLL_PARAMETER};
use tiermem_core::io_config::{DEFAULT_IDLE_SPIN_US, ENV_IDLE_SPIN};

use crate::check::Check;
use crate::tree::Tree;

const NAME: &str = "idle_halt";

/// `sys_vendor` values of hypervisors, for guests whose CPU flags hide
/// the `hypervisor` bit.
const VM_VENDORS: [&str; 8] = [
    "QEMU",
    "KVM",
    "VMware, Inc.",
    "Microsoft Corporation",
    "Xen",
    "innotek GmbH",
    "Amazon EC2",
    "Google",
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleFacts {
    pub wait: IdleWait,
    /// `/sys/class/dmi/id/sys_vendor`.
    pub vendor: Option<String>,
    /// `TIERMEM_IDLE_SPIN_US` as a run would take it.
    pub idle_spin_us: u32,
}

impl IdleFacts {
    pub fn gather(tree: &Tree) -> IdleFacts {
        IdleFacts {
            wait: IdleWait::read_from(tree.root()),
            vendor: tree.read_trim("/sys/class/dmi/id/sys_vendor"),
            idle_spin_us: std::env::var(ENV_IDLE_SPIN)
                .ok()
                .and_then(|v| tiermem_core::io_config::parse_idle_spin(&v).ok())
                .unwrap_or(DEFAULT_IDLE_SPIN_US),
        }
    }

    /// A VM guest: the CPU's `hypervisor` flag or a hypervisor's vendor.
    fn guest(&self) -> bool {
        self.wait.guest
            || self
                .vendor
                .as_deref()
                .is_some_and(|v| VM_VENDORS.contains(&v))
    }
}

/// The idle-halting check (pure).
pub fn check(facts: &IdleFacts) -> Check {
    if !facts.guest() {
        return Check::pass(
            NAME,
            "not a VM guest (no hypervisor CPU flag or vendor): wake-ups stay on this machine",
        );
    }
    let driver = facts.wait.driver.as_deref().unwrap_or("none");
    let spin = match facts.idle_spin_us {
        0 => "TIERMEM_IDLE_SPIN_US=0 turns tiermem's idle spin off, so its handlers halt too"
            .to_string(),
        us => {
            format!("tiermem's idle spin ({us} µs) keeps its handlers awake while a program pages")
        }
    };
    let halting = facts.wait.halting().or_else(|| {
        // A guest known by its vendor only still halts as its driver says.
        (driver == "haltpoll" && facts.wait.guest_halt_poll_ns == Some(0))
            .then_some(Halting::PollingOff)
    });
    match halting {
        Some(Halting::PollingOff) => return Check::warn(
            NAME,
            format!("a VM guest whose idle vCPUs halt at once (cpuidle driver haltpoll, guest_halt_poll_ns=0): every wake-up of a sleeping thread and every interrupt to an idle vCPU goes through the host (about 25 µs on the test VM); {spin}"),
            format!("as root: echo 200000 > {HALT_POLL_PARAMETER} (halt polling for the whole guest), or keep TIERMEM_IDLE_SPIN_US at its default {DEFAULT_IDLE_SPIN_US}"),
        ),
        Some(Halting::PlainHalt) => return Check::warn(
            NAME,
            format!("a VM guest whose idle vCPUs halt at once (no cpuidle driver: the default idle routine, HLT): the host resumes a halted vCPU quickly, but a wake-up sent to another vCPU goes through it, and tiermem's handler threads send two per fault (to reach a handler, and to wake the faulting thread) where kernel swap sends none; {spin}"),
            format!("keep TIERMEM_IDLE_SPIN_US at its default {DEFAULT_IDLE_SPIN_US}, or give programs that pass no tiered memory to system calls signal delivery (TIERMEM_FAULTS=signal: no hand-offs between threads); nothing at run time turns halt polling on here: the haltpoll driver needs the host's poll-control feature, and idle=poll is a kernel command-line option"),
        ),
        None => {}
    }
    match (driver, facts.wait.guest_halt_poll_ns) {
        ("haltpoll", Some(ns)) => Check::pass(
            NAME,
            format!("a VM guest that polls {ns} ns before halting an idle vCPU (cpuidle driver haltpoll); {spin}"),
        ),
        _ => Check::pass(
            NAME,
            format!("a VM guest, cpuidle driver {driver}: doctor cannot tell how long its idle vCPUs poll before they halt; {spin}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Status;

    fn facts(guest: bool, driver: Option<&str>, ns: Option<u64>, spin: u32) -> IdleFacts {
        IdleFacts {
            wait: IdleWait {
                guest,
                driver: driver.map(str::to_string),
                governor: driver.map(str::to_string),
                guest_halt_poll_ns: ns,
                idle_option: None,
                mwait: false,
            },
            vendor: None,
            idle_spin_us: spin,
        }
    }

    #[test]
    fn bare_metal_passes() {
        let c = check(&facts(false, Some("intel_idle"), None, 200));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(c.detail.contains("not a VM guest"), "{c:?}");
    }

    #[test]
    fn a_guest_that_halts_at_once_warns_with_both_fixes() {
        let c = check(&facts(true, Some("haltpoll"), Some(0), 200));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        let fix = c.fix.expect("a fix");
        assert!(
            fix.contains("guest_halt_poll_ns") && fix.contains("200000"),
            "{fix}"
        );
        assert!(fix.contains("TIERMEM_IDLE_SPIN_US"), "{fix}");
        let c = check(&facts(true, Some("haltpoll"), Some(0), 0));
        assert!(c.detail.contains("TIERMEM_IDLE_SPIN_US=0"), "{c:?}");
    }

    #[test]
    fn a_guest_that_polls_passes() {
        let c = check(&facts(true, Some("haltpoll"), Some(200_000), 200));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(c.detail.contains("200000 ns"), "{c:?}");
    }

    #[test]
    fn another_driver_passes_with_a_caveat() {
        let c = check(&facts(true, Some("acpi_idle"), None, 200));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(c.detail.contains("cannot tell"), "{c:?}");
    }

    #[test]
    fn a_guest_without_a_driver_warns_without_the_haltpoll_knob() {
        let c = check(&facts(true, Some("none"), Some(200_000), 200));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.detail.contains("HLT"), "{c:?}");
        assert!(c.detail.contains("another vCPU"), "{c:?}");
        let fix = c.fix.expect("a fix");
        assert!(!fix.contains(HALT_POLL_PARAMETER), "{fix}");
        assert!(fix.contains("TIERMEM_IDLE_SPIN_US"), "{fix}");
    }

    #[test]
    fn the_vendor_marks_a_guest_too() {
        let mut f = facts(false, Some("haltpoll"), Some(0), 200);
        f.vendor = Some("QEMU".into());
        assert_eq!(check(&f).status, Status::Warn);
    }
}
