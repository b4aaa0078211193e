//! userfaultfd: whether this user may open a full one, and which of the
//! features tiermem uses the kernel offers.
//!
//! A full userfaultfd (not the user-mode-only variant, with which `read(2)`
//! into a missing page fails with EFAULT) opens through the syscall for a
//! process with `CAP_SYS_PTRACE` or where `vm.unprivileged_userfaultfd=1`,
//! and through `/dev/userfaultfd` (Linux 6.1+) for anyone who may read and
//! write that node. On the live machine both ways are tried; under a fake
//! root the answer is derived from the tree's files.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use linux_raw_sys::general as uapi;

use crate::check::Check;
use crate::tree::{Identity, Kernel, Tree, CAP_SYS_PTRACE};

const NAME_PERMISSION: &str = "userfaultfd";
const NAME_FEATURES: &str = "uffd_features";

/// The fix of a refused userfaultfd: the sysctl first, as
/// the README's Permissions section puts it.
const PERMISSION_FIX: &str = "as root: sysctl -w vm.unprivileged_userfaultfd=1 \
     (persist it in /etc/sysctl.d/), or give this user read-write access to /dev/userfaultfd \
     (setfacl -m u:$USER:rw /dev/userfaultfd), or run with CAP_SYS_PTRACE";

/// Whether this user may open `/dev/userfaultfd` for reading and writing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceAccess {
    /// No such node (kernels before 6.1, or a container without it).
    Missing,
    Usable,
    /// It exists and this user may not open it; why.
    Denied(String),
}

/// What decides the permission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PermissionFacts {
    pub identity: Identity,
    /// `vm.unprivileged_userfaultfd`; `None` where the sysctl is missing.
    pub unprivileged: Option<u32>,
    pub device: DeviceAccess,
    /// The live `userfaultfd(2)` call's outcome; `None` under a fake root.
    pub syscall: Option<Result<(), String>>,
    pub kernel: Option<Kernel>,
}

impl PermissionFacts {
    pub fn gather(tree: &Tree, identity: &Identity) -> PermissionFacts {
        PermissionFacts {
            identity: identity.clone(),
            unprivileged: tree.read_num("/proc/sys/vm/unprivileged_userfaultfd"),
            device: device_access(tree, identity),
            syscall: tree
                .is_live()
                .then(|| open_syscall().map(drop).map_err(|e| e.to_string())),
            kernel: Kernel::read(tree),
        }
    }

    /// Whether the syscall opens a full userfaultfd, as the kernel decides
    /// it: the sysctl, else `CAP_SYS_PTRACE` (root without a `CapEff:`
    /// line is taken to have it). Kernels before 5.2 have no sysctl and
    /// allow everyone.
    fn syscall_allowed_by_files(&self) -> bool {
        let ptrace = match self.identity.has_cap(CAP_SYS_PTRACE) {
            Some(has) => has,
            None => self.identity.is_root(),
        };
        let sysctl = match self.unprivileged {
            Some(v) => v != 0,
            None => self.kernel.as_ref().is_some_and(|k| !k.at_least(5, 2)),
        };
        ptrace || sysctl
    }

    /// Why the syscall is allowed, in words.
    fn syscall_reason(&self) -> &'static str {
        if self.identity.has_cap(CAP_SYS_PTRACE) == Some(true) {
            if self.identity.is_root() {
                "root, with CAP_SYS_PTRACE"
            } else {
                "CAP_SYS_PTRACE"
            }
        } else if self.unprivileged.is_some_and(|v| v != 0) {
            "vm.unprivileged_userfaultfd=1"
        } else if self.identity.is_root() {
            "root"
        } else {
            "a kernel without the sysctl"
        }
    }

    /// The inputs, for every outcome's detail.
    fn inputs(&self) -> String {
        let sysctl = match self.unprivileged {
            Some(v) => format!("vm.unprivileged_userfaultfd={v}"),
            None => "no vm.unprivileged_userfaultfd sysctl".to_string(),
        };
        let ptrace = match self.identity.has_cap(CAP_SYS_PTRACE) {
            Some(true) => "CAP_SYS_PTRACE",
            Some(false) => "no CAP_SYS_PTRACE",
            None => "CAP_SYS_PTRACE unknown",
        };
        let device = match &self.device {
            DeviceAccess::Missing => "no /dev/userfaultfd".to_string(),
            DeviceAccess::Usable => "/dev/userfaultfd usable".to_string(),
            DeviceAccess::Denied(why) => format!("/dev/userfaultfd {why}"),
        };
        format!("{}: {sysctl}, {ptrace}, {device}", self.identity.who())
    }
}

/// The permission check (pure: every input is in `facts`).
pub fn permission(facts: &PermissionFacts) -> Check {
    let inputs = facts.inputs();
    let device_ok = facts.device == DeviceAccess::Usable;
    match &facts.syscall {
        Some(Ok(())) => Check::pass(
            NAME_PERMISSION,
            format!(
                "userfaultfd(2) opens a full userfaultfd ({}); {inputs}",
                facts.syscall_reason()
            ),
        ),
        Some(Err(e)) if device_ok => Check::pass(
            NAME_PERMISSION,
            format!("userfaultfd(2) refused ({e}), but /dev/userfaultfd opens, which tiermem falls back to; {inputs}"),
        ),
        Some(Err(e)) => Check::fail(
            NAME_PERMISSION,
            format!("this user may not use userfaultfd: userfaultfd(2) refused ({e}); {inputs}"),
            PERMISSION_FIX,
        ),
        None => derived_permission(facts, &inputs, device_ok),
    }
}

fn derived_permission(facts: &PermissionFacts, inputs: &str, device_ok: bool) -> Check {
    const DERIVED: &str = "(derived from the files, not opened)";
    if facts.syscall_allowed_by_files() {
        Check::pass(
            NAME_PERMISSION,
            format!(
                "userfaultfd(2) is allowed ({}) {DERIVED}; {inputs}",
                facts.syscall_reason()
            ),
        )
    } else if device_ok {
        Check::pass(
            NAME_PERMISSION,
            format!(
                "userfaultfd(2) is refused, but /dev/userfaultfd is usable {DERIVED}; {inputs}"
            ),
        )
    } else {
        Check::fail(
            NAME_PERMISSION,
            format!("this user may not use userfaultfd {DERIVED}; {inputs}"),
            PERMISSION_FIX,
        )
    }
}

/// Whether this user may open `/dev/userfaultfd`: tried on the live
/// machine, read from the node's mode and owner under a fake root.
fn device_access(tree: &Tree, identity: &Identity) -> DeviceAccess {
    let path = tree.path("/dev/userfaultfd");
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return DeviceAccess::Missing,
        Err(e) => return DeviceAccess::Denied(format!("cannot be inspected ({e})")),
    };
    if tree.is_live() {
        return match tiermem_core::sys::uffd::Uffd::open_device(libc::O_CLOEXEC, false) {
            Ok(_) => DeviceAccess::Usable,
            Err(e) => DeviceAccess::Denied(format!(
                "refused ({e}; mode {:04o}, owner uid {})",
                meta.mode() & 0o7777,
                meta.uid()
            )),
        };
    }
    match mode_allows_rw(meta.mode(), meta.uid(), meta.gid(), identity) {
        true => DeviceAccess::Usable,
        false => DeviceAccess::Denied(format!(
            "not readable and writable by {} (mode {:04o})",
            identity.who(),
            meta.mode() & 0o7777
        )),
    }
}

/// Whether the permission bits let `identity` read and write a node
/// owned by `uid`:`gid`; root may always.
pub fn mode_allows_rw(mode: u32, uid: u32, gid: u32, identity: &Identity) -> bool {
    if identity.is_root() {
        return true;
    }
    let in_group = identity.egid == Some(gid) || identity.groups.contains(&gid);
    let bits = if identity.euid == Some(uid) {
        mode >> 6
    } else if in_group {
        mode >> 3
    } else {
        mode
    };
    bits & 0o6 == 0o6
}

/// A full userfaultfd through the syscall.
fn open_syscall() -> io::Result<OwnedFd> {
    // SAFETY: the userfaultfd syscall takes only an integer flag word.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Where the feature bits come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FeatureSource {
    /// `UFFDIO_API` with no features asked answered with these.
    Probed(u64),
    /// No userfaultfd could be opened (or the root is fake): the bits the
    /// kernel version implies, and why they were not probed.
    Derived(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureFacts {
    pub kernel: Option<Kernel>,
    pub source: FeatureSource,
}

impl FeatureFacts {
    pub fn gather(tree: &Tree) -> FeatureFacts {
        let kernel = Kernel::read(tree);
        let source = if !tree.is_live() {
            FeatureSource::Derived("not probed under a fake root".to_string())
        } else {
            match probe_features() {
                Ok(bits) => FeatureSource::Probed(bits),
                Err(e) => FeatureSource::Derived(format!("not probed: {e}")),
            }
        };
        FeatureFacts { kernel, source }
    }
}

/// The features the kernel offers, asked as the runtime asks them.
fn probe_features() -> Result<u64, String> {
    tiermem_core::sys::uffd::Uffd::probe_features().map_err(|e| e.to_string())
}

/// One feature: its bit(s), its name, the kernel that brought it, and
/// what tiermem uses it for.
struct Feature {
    bits: u32,
    name: &'static str,
    since: (u32, u32),
    role: Role,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// tiermem stops without it.
    Required,
    /// tiermem runs without it, less well: the consequence.
    Wanted(&'static str),
    /// Reported; this build does not use it.
    Reported,
}

const FEATURES: [Feature; 6] = [
    Feature {
        bits: uapi::UFFD_FEATURE_PAGEFAULT_FLAG_WP,
        name: "WP",
        since: (5, 7),
        role: Role::Required,
    },
    Feature {
        bits: uapi::UFFD_FEATURE_THREAD_ID,
        name: "THREAD_ID",
        since: (4, 14),
        role: Role::Required,
    },
    Feature {
        bits: uapi::UFFD_FEATURE_SIGBUS,
        name: "SIGBUS",
        since: (4, 14),
        role: Role::Wanted("signal delivery (TIERMEM_FAULTS=signal) cannot run"),
    },
    Feature {
        bits: uapi::UFFD_FEATURE_POISON,
        name: "POISON",
        since: (6, 6),
        role: Role::Wanted(
            "a page lost to a read error stops the program instead of raising SIGBUS where it is touched",
        ),
    },
    Feature {
        bits: uapi::UFFD_FEATURE_MOVE,
        name: "MOVE",
        since: (6, 8),
        role: Role::Wanted(
            "pages under asynchronous I/O (io_uring, AIO) may be evicted mid-I/O and lose its bytes",
        ),
    },
    Feature {
        bits: uapi::UFFD_FEATURE_MINOR_HUGETLBFS | uapi::UFFD_FEATURE_MINOR_SHMEM,
        name: "MINOR",
        since: (5, 14),
        role: Role::Reported,
    },
];

/// The feature bits a kernel version implies, on x86-64.
pub fn features_of_kernel(kernel: &Kernel) -> u64 {
    FEATURES
        .iter()
        .filter(|f| kernel.at_least(f.since.0, f.since.1))
        .fold(0u64, |acc, f| acc | u64::from(f.bits))
}

/// The features check (pure).
pub fn features(facts: &FeatureFacts) -> Check {
    let (bits, how) = match (&facts.source, &facts.kernel) {
        (FeatureSource::Probed(bits), _) => (*bits, "probed with UFFDIO_API".to_string()),
        (FeatureSource::Derived(why), Some(k)) => (
            features_of_kernel(k),
            format!("derived from the kernel version ({why})"),
        ),
        (FeatureSource::Derived(why), None) => {
            return Check::warn(
                NAME_FEATURES,
                format!("the kernel version is unknown (/proc/sys/kernel/osrelease) and the features were {why}"),
                "run doctor on the machine itself, with /proc mounted",
            )
        }
    };
    let kernel = facts
        .kernel
        .as_ref()
        .map_or("kernel unknown".to_string(), |k| {
            format!("kernel {}", k.release)
        });
    let has = |f: &Feature| u64::from(f.bits) & bits != 0;
    let listed: Vec<String> = FEATURES
        .iter()
        .map(|f| match (has(f), f.role) {
            (true, Role::Reported) => format!("{} (not used by this build)", f.name),
            (true, _) => f.name.to_string(),
            (false, _) => format!("no {}", f.name),
        })
        .collect();
    let detail = format!(
        "{kernel}; userfaultfd features {how}: {}",
        listed.join(", ")
    );
    worst_feature_outcome(detail, |f| has(f))
}

/// The check for the first missing required feature, else the first
/// missing wanted one, else a pass.
fn worst_feature_outcome(detail: String, has: impl Fn(&Feature) -> bool) -> Check {
    let upgrade = |f: &Feature| {
        format!(
            "run Linux {}.{} or newer (6.8 has every feature tiermem uses)",
            f.since.0, f.since.1
        )
    };
    if let Some(f) = FEATURES
        .iter()
        .find(|f| f.role == Role::Required && !has(f))
    {
        return Check::fail(
            NAME_FEATURES,
            format!(
                "{detail}: tiermem needs {} for dirty tracking and fault reports",
                f.name
            ),
            upgrade(f),
        );
    }
    let wanted = FEATURES.iter().find_map(|f| match f.role {
        Role::Wanted(cost) if !has(f) => Some((f, cost)),
        _ => None,
    });
    if let Some((f, cost)) = wanted {
        return Check::warn(
            NAME_FEATURES,
            format!("{detail}: without {}, {cost}", f.name),
            upgrade(f),
        );
    }
    Check::pass(NAME_FEATURES, detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Status;

    fn identity(uid: u32, caps: u64) -> Identity {
        Identity {
            euid: Some(uid),
            egid: Some(uid),
            groups: vec![],
            cap_eff: Some(caps),
        }
    }

    fn facts(uid: u32, caps: u64, sysctl: Option<u32>, device: DeviceAccess) -> PermissionFacts {
        PermissionFacts {
            identity: identity(uid, caps),
            unprivileged: sysctl,
            device,
            syscall: None,
            kernel: Kernel::parse("6.18.0"),
        }
    }

    const PTRACE: u64 = 1 << CAP_SYS_PTRACE;

    #[test]
    fn root_with_its_capabilities_passes() {
        let c = permission(&facts(0, 0x1ff_ffff_ffff, Some(0), DeviceAccess::Missing));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(c.detail.contains("root, with CAP_SYS_PTRACE"), "{c:?}");
    }

    #[test]
    fn cap_sys_ptrace_alone_passes() {
        let c = permission(&facts(1000, PTRACE, Some(0), DeviceAccess::Missing));
        assert_eq!(c.status, Status::Pass, "{c:?}");
    }

    #[test]
    fn the_sysctl_lets_anyone_in() {
        let c = permission(&facts(1000, 0, Some(1), DeviceAccess::Missing));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(c.detail.contains("vm.unprivileged_userfaultfd=1"), "{c:?}");
    }

    #[test]
    fn a_usable_device_passes_where_the_syscall_is_refused() {
        let c = permission(&facts(1000, 0, Some(0), DeviceAccess::Usable));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(c.detail.contains("/dev/userfaultfd"), "{c:?}");
    }

    #[test]
    fn an_unprivileged_user_fails_and_is_told_the_sysctl() {
        let denied = DeviceAccess::Denied("not readable and writable".into());
        for device in [DeviceAccess::Missing, denied] {
            let c = permission(&facts(65534, 0, Some(0), device));
            assert_eq!(c.status, Status::Fail, "{c:?}");
            let fix = c.fix.expect("a fix");
            assert!(fix.contains("vm.unprivileged_userfaultfd"), "{fix}");
            assert!(c.detail.contains("uid 65534"), "{}", c.detail);
        }
    }

    #[test]
    fn the_live_probe_wins_over_the_files() {
        let mut f = facts(1000, PTRACE, Some(1), DeviceAccess::Missing);
        f.syscall = Some(Err("Operation not permitted (os error 1)".into()));
        let c = permission(&f);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        f.device = DeviceAccess::Usable;
        assert_eq!(permission(&f).status, Status::Pass);
        let mut f = facts(1000, 0, Some(0), DeviceAccess::Missing);
        f.syscall = Some(Ok(()));
        assert_eq!(permission(&f).status, Status::Pass);
    }

    #[test]
    fn old_kernels_without_the_sysctl_allow_everyone() {
        let mut f = facts(1000, 0, None, DeviceAccess::Missing);
        f.kernel = Kernel::parse("5.1.0");
        assert_eq!(permission(&f).status, Status::Pass);
        f.kernel = Kernel::parse("6.1.0");
        assert_eq!(permission(&f).status, Status::Fail);
    }

    #[test]
    fn device_modes_are_read_as_the_kernel_does() {
        let user = Identity {
            euid: Some(1000),
            egid: Some(1000),
            groups: vec![27],
            cap_eff: Some(0),
        };
        assert!(!mode_allows_rw(0o600, 0, 0, &user));
        assert!(mode_allows_rw(0o600, 1000, 0, &user));
        assert!(mode_allows_rw(0o660, 0, 27, &user));
        assert!(!mode_allows_rw(0o640, 0, 27, &user));
        assert!(mode_allows_rw(0o666, 0, 0, &user));
        assert!(mode_allows_rw(0o600, 0, 0, &identity(0, 0)));
    }

    fn kernel_facts(release: &str) -> FeatureFacts {
        FeatureFacts {
            kernel: Kernel::parse(release),
            source: FeatureSource::Derived("not probed under a fake root".into()),
        }
    }

    #[test]
    fn a_new_kernel_has_every_feature() {
        let c = features(&kernel_facts("6.18.44-fc-v595"));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(
            c.detail.contains("MOVE") && c.detail.contains("POISON"),
            "{c:?}"
        );
        assert!(c.detail.contains("derived"), "{c:?}");
    }

    #[test]
    fn a_kernel_without_move_warns_and_names_the_version() {
        let c = features(&kernel_facts("6.6.30"));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.detail.contains("without MOVE"), "{c:?}");
        assert!(c.fix.expect("a fix").contains("6.8"));
        let c = features(&kernel_facts("6.1.0"));
        assert!(c.detail.contains("without POISON"), "{c:?}");
    }

    #[test]
    fn a_kernel_without_write_protect_fails() {
        let c = features(&kernel_facts("5.4.0"));
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.fix.expect("a fix").contains("5.7"));
    }

    #[test]
    fn probed_bits_are_taken_as_they_are() {
        let all = features_of_kernel(&Kernel::parse("6.8").expect("parses"));
        let mut f = kernel_facts("6.8.0");
        f.source = FeatureSource::Probed(all & !u64::from(uapi::UFFD_FEATURE_PAGEFAULT_FLAG_WP));
        let c = features(&f);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.detail.contains("probed"), "{c:?}");
        f.source = FeatureSource::Probed(all & !u64::from(uapi::UFFD_FEATURE_MINOR_SHMEM));
        assert_eq!(features(&f).status, Status::Pass);
    }

    #[test]
    fn an_unknown_kernel_without_a_probe_warns() {
        let f = FeatureFacts {
            kernel: None,
            source: FeatureSource::Derived("not probed under a fake root".into()),
        };
        assert_eq!(features(&f).status, Status::Warn);
    }
}
