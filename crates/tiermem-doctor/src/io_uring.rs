//! io_uring: whether this process may set up a ring.
//!
//! tiermem's handlers read pages through an io_uring, many in flight at
//! once; where none can be set up (`kernel.io_uring_disabled`, a seccomp
//! filter, a kernel before 5.1) they fall back to `pread`, one read at a
//! time per handler, which is why this check warns and never fails.

use crate::check::Check;
use crate::tree::{Identity, Kernel, Tree, CAP_SYS_ADMIN};

const NAME: &str = "io_uring";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoUringFacts {
    pub kernel: Option<Kernel>,
    /// `kernel.io_uring_disabled`: 0 allowed, 1 root or
    /// `kernel.io_uring_group` only, 2 nobody; missing before 6.6.
    pub disabled: Option<u32>,
    pub identity: Identity,
    /// The live `io_uring_setup` of a 2-entry ring; `None` under a fake root.
    pub setup: Option<Result<(), String>>,
}

impl IoUringFacts {
    pub fn gather(tree: &Tree, identity: &Identity) -> IoUringFacts {
        IoUringFacts {
            kernel: Kernel::read(tree),
            disabled: tree.read_num("/proc/sys/kernel/io_uring_disabled"),
            identity: identity.clone(),
            setup: tree.is_live().then(|| {
                io_uring::IoUring::new(2)
                    .map(drop)
                    .map_err(|e| e.to_string())
            }),
        }
    }

    fn sysctl(&self) -> String {
        match self.disabled {
            Some(v) => format!("kernel.io_uring_disabled={v}"),
            None => "no kernel.io_uring_disabled sysctl".to_string(),
        }
    }

    /// Why the files say no ring can be set up, if they do.
    fn refused_by_files(&self) -> Option<String> {
        if self.kernel.as_ref().is_some_and(|k| !k.at_least(5, 1)) {
            return Some("the kernel predates io_uring (5.1)".to_string());
        }
        let admin = self
            .identity
            .has_cap(CAP_SYS_ADMIN)
            .unwrap_or(self.identity.is_root());
        match self.disabled {
            Some(2) => Some("io_uring is disabled for every process".to_string()),
            Some(1) if !admin => {
                Some("io_uring is limited to CAP_SYS_ADMIN and kernel.io_uring_group".to_string())
            }
            _ => None,
        }
    }
}

/// The io_uring check (pure).
pub fn check(facts: &IoUringFacts) -> Check {
    let sysctl = facts.sysctl();
    match &facts.setup {
        Some(Ok(())) => Check::pass(NAME, format!("a 2-entry io_uring was set up ({sysctl})")),
        Some(Err(e)) => Check::warn(
            NAME,
            format!("io_uring_setup failed ({e}; {sysctl}); tiermem reads pages with pread instead, one at a time per handler"),
            fix(facts),
        ),
        None => match facts.refused_by_files() {
            None => Check::pass(
                NAME,
                format!("io_uring is allowed ({sysctl}; derived from the files, not set up)"),
            ),
            Some(why) => Check::warn(
                NAME,
                format!("{why} ({sysctl}; derived from the files); tiermem reads pages with pread instead"),
                fix(facts),
            ),
        },
    }
}

fn fix(facts: &IoUringFacts) -> String {
    if facts.kernel.as_ref().is_some_and(|k| !k.at_least(5, 1)) {
        return "run Linux 5.1 or newer (5.19 for cooperative task running)".to_string();
    }
    match facts.disabled {
        Some(v) if v > 0 => "as root: sysctl -w kernel.io_uring_disabled=0 (or add this user to kernel.io_uring_group where it is 1)".to_string(),
        _ => "allow io_uring_setup, io_uring_enter and io_uring_register in the seccomp profile (container runtimes often block them)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Status;

    fn facts(disabled: Option<u32>, uid: u32, caps: u64) -> IoUringFacts {
        IoUringFacts {
            kernel: Kernel::parse("6.18.0"),
            disabled,
            identity: Identity {
                euid: Some(uid),
                cap_eff: Some(caps),
                ..Identity::default()
            },
            setup: None,
        }
    }

    #[test]
    fn an_enabled_kernel_passes() {
        assert_eq!(check(&facts(Some(0), 1000, 0)).status, Status::Pass);
        assert_eq!(check(&facts(None, 1000, 0)).status, Status::Pass);
    }

    #[test]
    fn disabled_for_all_warns_with_the_sysctl() {
        let c = check(&facts(Some(2), 0, u64::MAX));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.fix.expect("a fix").contains("io_uring_disabled=0"));
    }

    #[test]
    fn limited_to_admins_depends_on_cap_sys_admin() {
        assert_eq!(check(&facts(Some(1), 1000, 0)).status, Status::Warn);
        let admin = 1u64 << CAP_SYS_ADMIN;
        assert_eq!(check(&facts(Some(1), 1000, admin)).status, Status::Pass);
    }

    #[test]
    fn an_old_kernel_warns() {
        let mut f = facts(None, 0, u64::MAX);
        f.kernel = Kernel::parse("4.19.0");
        let c = check(&f);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.fix.expect("a fix").contains("5.1"));
    }

    #[test]
    fn the_live_setup_decides() {
        let mut f = facts(Some(0), 0, u64::MAX);
        f.setup = Some(Err("Operation not permitted (os error 1)".into()));
        let c = check(&f);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.fix.expect("a fix").contains("seccomp"));
        f.setup = Some(Ok(()));
        assert_eq!(check(&f).status, Status::Pass);
    }
}
