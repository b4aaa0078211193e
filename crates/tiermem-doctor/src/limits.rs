//! The locked-memory limit and `vm.max_map_count`.
//!
//! tiermem locks little memory of its own, but what it locks counts:
//! - each handler thread registers its read buffers with its io_uring
//!   (2 MiB at 4 KiB pages, `fault/ring.rs`), which the kernel charges to
//!   `RLIMIT_MEMLOCK` per user, unless the process has `CAP_IPC_LOCK`; a
//!   handler whose registration is refused reads into unregistered
//!   buffers, and every read then pins its pages itself;
//! - `--encrypt` locks its keys (64 KiB) and refuses to start without.
//!
//! Locked tiered memory (a program's own `mlock`) counts against the same
//! limit as it would without tiermem, so it sets no extra need here.

use crate::check::{human_bytes, Check};
use crate::tree::{Identity, Tree, CAP_IPC_LOCK};

const NAME_MEMLOCK: &str = "memlock";
const NAME_MAP_COUNT: &str = "max_map_count";

/// Read buffers one handler thread registers with its ring, at the
/// default 4 KiB page size, as the core sizes them.
pub fn ring_buffer_bytes() -> u64 {
    tiermem_core::ring_buffer_bytes(4096)
}
/// What `--encrypt` locks for its keys (`encryption.rs` asks for 64 KiB).
pub const KEY_BYTES: u64 = 64 << 10;
/// The kernel's default `vm.max_map_count` (`DEFAULT_MAX_MAP_COUNT`).
/// Below it a program that runs fine without tiermem may run out of
/// mappings under it: every tiered region (each anonymous `mmap` from
/// 128 KiB under `tiermem run`) is a mapping of its own, and `mlock` or
/// `mprotect` on part of one splits it.
pub const MIN_MAP_COUNT: u64 = 65530;

/// A resource limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Unlimited,
    Bytes(u64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemlockFacts {
    /// The soft `RLIMIT_MEMLOCK`, from `/proc/self/limits`.
    pub soft: Option<Limit>,
    pub cap_ipc_lock: Option<bool>,
    /// How many handler threads a run starts (one per CPU by default).
    pub handler_threads: usize,
}

impl MemlockFacts {
    pub fn gather(tree: &Tree, identity: &Identity) -> MemlockFacts {
        MemlockFacts {
            soft: tree
                .read("/proc/self/limits")
                .ok()
                .and_then(|t| parse_memlock(&t)),
            cap_ipc_lock: identity.has_cap(CAP_IPC_LOCK),
            handler_threads: handler_threads(tree),
        }
    }

    /// Locked memory a default run with `--encrypt` uses.
    pub fn need(&self) -> u64 {
        self.handler_threads as u64 * ring_buffer_bytes() + KEY_BYTES
    }
}

/// The soft limit of the `Max locked memory` line of `/proc/self/limits`.
pub fn parse_memlock(limits: &str) -> Option<Limit> {
    let rest = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max locked memory"))?;
    match rest.split_whitespace().next()? {
        "unlimited" => Some(Limit::Unlimited),
        v => v.parse().ok().map(Limit::Bytes),
    }
}

/// `TIERMEM_HANDLER_THREADS`, else one per CPU: the CPUs this process
/// may run on where live, the online CPUs of the tree otherwise.
fn handler_threads(tree: &Tree) -> usize {
    let configured = std::env::var(tiermem_core::config::ENV_HANDLER_THREADS)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| *n > 0);
    if let Some(n) = configured {
        return n;
    }
    if tree.is_live() {
        return std::thread::available_parallelism().map_or(1, |n| n.get());
    }
    tree.read_trim("/sys/devices/system/cpu/online")
        .and_then(|list| count_cpu_list(&list))
        .unwrap_or(1)
}

/// How many CPUs a list like `0-3,6` names.
pub fn count_cpu_list(list: &str) -> Option<usize> {
    let mut n = 0;
    for part in list.split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().ok()?.checked_sub(a.parse().ok()?)? + 1,
            None => part.parse::<usize>().map(|_| 1).ok()?,
        };
    }
    Some(n)
}

/// The memlock check (pure).
pub fn memlock(facts: &MemlockFacts) -> Check {
    let threads = facts.handler_threads;
    let need = facts.need();
    let uses = format!(
        "a run needs {} locked: the io_uring read buffers of {threads} handler thread(s) \
         ({} each) and --encrypt's keys ({})",
        human_bytes(need),
        human_bytes(ring_buffer_bytes()),
        human_bytes(KEY_BYTES)
    );
    let fix = format!(
        "raise RLIMIT_MEMLOCK to at least {} (ulimit -l {}; LimitMEMLOCK= in a systemd unit; memlock in /etc/security/limits.conf)",
        human_bytes(need),
        need.div_ceil(1024)
    );
    if facts.cap_ipc_lock == Some(true) {
        let limit = match facts.soft {
            Some(Limit::Bytes(b)) => format!(" by RLIMIT_MEMLOCK ({})", human_bytes(b)),
            _ => String::new(),
        };
        return Check::pass(
            NAME_MEMLOCK,
            format!("CAP_IPC_LOCK: locked memory is not limited{limit}; {uses}"),
        );
    }
    match facts.soft {
        None => Check::warn(
            NAME_MEMLOCK,
            format!("cannot read RLIMIT_MEMLOCK from /proc/self/limits; {uses}"),
            fix,
        ),
        Some(Limit::Unlimited) => Check::pass(NAME_MEMLOCK, format!("RLIMIT_MEMLOCK unlimited; {uses}")),
        Some(Limit::Bytes(b)) if b < KEY_BYTES => Check::warn(
            NAME_MEMLOCK,
            format!("RLIMIT_MEMLOCK {}: --encrypt cannot lock its keys and refuses to start, and handlers read into unregistered buffers; {uses}", human_bytes(b)),
            fix,
        ),
        Some(Limit::Bytes(b)) if b < need => Check::warn(
            NAME_MEMLOCK,
            format!("RLIMIT_MEMLOCK {}: not every handler can register its read buffers (those read a little slower, pinning pages per read); {uses}", human_bytes(b)),
            fix,
        ),
        Some(Limit::Bytes(b)) => Check::pass(
            NAME_MEMLOCK,
            format!("RLIMIT_MEMLOCK {}; {uses}", human_bytes(b)),
        ),
    }
}

/// The `vm.max_map_count` check (pure).
pub fn map_count(value: Option<u64>) -> Check {
    match value {
        None => Check::warn(
            NAME_MAP_COUNT,
            "cannot read /proc/sys/vm/max_map_count",
            "run doctor with /proc mounted",
        ),
        Some(v) if v < MIN_MAP_COUNT => Check::warn(
            NAME_MAP_COUNT,
            format!("vm.max_map_count={v}, below the kernel default {MIN_MAP_COUNT}: every tiered region is a mapping of its own, so a program may run out of mappings (mmap fails with ENOMEM) under tiermem"),
            format!("as root: sysctl -w vm.max_map_count={MIN_MAP_COUNT} (or more; 262144 is common for databases)"),
        ),
        Some(v) => Check::pass(
            NAME_MAP_COUNT,
            format!("vm.max_map_count={v} (at least the kernel default {MIN_MAP_COUNT})"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Status;

    fn facts(soft: Option<Limit>, cap: bool) -> MemlockFacts {
        MemlockFacts {
            soft,
            cap_ipc_lock: Some(cap),
            handler_threads: 2,
        }
    }

    #[test]
    fn the_limits_file_parses() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max locked memory         8388608              8388608              bytes     \n";
        assert_eq!(parse_memlock(text), Some(Limit::Bytes(8 << 20)));
        let text = "Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(parse_memlock(text), Some(Limit::Unlimited));
        assert_eq!(parse_memlock("nothing"), None);
    }

    #[test]
    fn cap_ipc_lock_or_no_limit_passes() {
        assert_eq!(
            memlock(&facts(Some(Limit::Bytes(0)), true)).status,
            Status::Pass
        );
        assert_eq!(
            memlock(&facts(Some(Limit::Unlimited), false)).status,
            Status::Pass
        );
    }

    #[test]
    fn a_limit_that_holds_the_buffers_passes() {
        let c = memlock(&facts(Some(Limit::Bytes(8 << 20)), false));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(c.detail.contains("8 MiB"), "{c:?}");
    }

    #[test]
    fn a_limit_below_the_buffers_warns_with_the_size_needed() {
        let c = memlock(&facts(Some(Limit::Bytes(1 << 20)), false));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.fix.expect("a fix").contains("4.1 MiB"));
    }

    #[test]
    fn a_limit_below_the_keys_names_encryption() {
        let c = memlock(&facts(Some(Limit::Bytes(32 << 10)), false));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.detail.contains("--encrypt cannot lock"), "{c:?}");
    }

    #[test]
    fn an_unreadable_limit_warns() {
        assert_eq!(memlock(&facts(None, false)).status, Status::Warn);
    }

    #[test]
    fn map_count_warns_below_the_kernel_default() {
        assert_eq!(map_count(Some(65530)).status, Status::Pass);
        let c = map_count(Some(16384));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.fix.expect("a fix").contains("vm.max_map_count=65530"));
        assert_eq!(map_count(None).status, Status::Warn);
    }

    #[test]
    fn cpu_lists_count() {
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0-3,6,8-9"), Some(7));
        assert_eq!(count_cpu_list("x"), None);
    }
}
