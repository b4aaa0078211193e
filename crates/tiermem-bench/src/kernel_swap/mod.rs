//! Kernel swap as a baseline: the benchmark worker runs inside a memory
//! cgroup whose limit is the DRAM budget (v1's `memory.limit_in_bytes`, or
//! v2's `memory.max` with `memory.swap.max` lifted; see [`crate::cgroup`]),
//! with a swapfile on the same filesystem as tiermem's backing file.
//!
//! The machine may be shared, so everything set up here is removed on every
//! exit path:
//!
//! * normal and error returns: [`SwapSandbox::cleanup`] or `Drop`;
//! * Ctrl-C, SIGTERM and SIGHUP of the parent: every live sandbox is kept in a
//!   process-global registry, and a signal thread (installed on first use)
//!   tears all of them down and then exits with status 128+signo. A Ctrl-C in
//!   the middle of a run therefore still removes the swapfile and the cgroup;
//! * crashes (SIGKILL, abort): nothing can run, so [`leftover_sandboxes`] and
//!   [`remove_leftovers`] find and remove what a dead process left behind,
//!   machine settings saved by `saved_settings` (zswap, zram) included.
//!
//! The compressed modes swap through the same sandbox: kernel-zswap on the
//! same swapfile with zswap on, kernel-zram on a zram device instead of a
//! file ([`SandboxSpec::swap_device`]); the settings they change are handed
//! to the sandbox ([`SwapSandbox::add_restore`]) and restored last.
//!
//! Teardown order matters: the worker is killed first (so `swapoff` does not
//! have to page its whole working set back in), then the swapfile is turned
//! off and deleted, then the cgroup is removed. Every step runs even if an
//! earlier one failed, and all failures are reported together, except that an
//! active swapfile is never deleted (a deleted swapfile that is still in use
//! can no longer be turned off by name).
//!
//! The files, each one concern, lowest first: [`crate::cgroup`] (the
//! cgroup's files, joining it, killing its tasks), `swapfile` (the swap
//! area), `teardown` (what a sandbox must undo, and the registry of live
//! sandboxes), `cleanup` (the signal thread and the leftovers of crashed
//! runs) and `sandbox` ([`SwapSandbox`] itself). This module only
//! re-exports their public parts.

mod cleanup;
mod sandbox;
// Crate-visible for the saved settings, which the teardown restores: they
// turn a zram device's swap off through it, not through this module.
pub(crate) mod swapfile;
mod teardown;

pub use self::cleanup::{
    install_signal_cleanup, leftover_sandboxes, remove_leftovers, wait_for_cleanup,
};
pub(crate) use self::sandbox::leftover_warning;
pub use self::sandbox::{CgroupStats, SandboxSpec, SwapSandbox, MEMORY_STAT_ENV};
pub use self::swapfile::{active_swaps, read_swap_ins};
pub use crate::cgroup::{read_major_faults, stat_field};
