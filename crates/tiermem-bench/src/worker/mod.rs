//! The measuring side of `tiermem bench`: runs in its own process, one mode
//! per process, so each mode starts from a clean slate (and kernel-swap mode
//! can be put in a cgroup before it allocates anything).
//!
//! Each access touches one 8-byte word of one page, as pmbench does, and is
//! timed. Every page carries a stamp: its identity in its first and last
//! words and a version that writes bump with an atomic max, so concurrent
//! writers agree on the final value. The words between hold the chosen
//! contents (`--data`, see `page_data`). At the end every word of every
//! page is verified.
//!
//! Misses are counted by the mode itself (see `hit_ratio`), read just before
//! the measured phase starts and just after it ends.
//!
//! One concern to a file: [`spec`] (what to run), [`sets`] (the mode's
//! memory and its counters), [`pages`] (stamping and verifying),
//! [`events`] (progress on stdout), [`pattern`] (the pattern workload);
//! this file picks the workload and runs a worker process. The
//! scan-resistance workload (`scan_resistance`) is built from the same
//! parts.

pub(crate) mod events;
pub(crate) mod pages;
mod pattern;
pub(crate) mod sets;
pub(crate) mod spec;

use anyhow::Context;

use crate::result::{Mode, ModeResult};
use crate::scan_resistance;
pub use events::{emit, WorkerEvent};
pub use sets::{AnonymousSet, TiermemSet, WorkingSet, SETTLE_LIMIT, SETTLE_QUIET};
pub use spec::{Workload, WorkloadSpec, SLOW_THRESHOLD_NS};

/// Runs the spec's workload on `set` and verifies every page afterwards.
pub fn run_workload(
    mode: Mode,
    spec: &WorkloadSpec,
    set: &dyn WorkingSet,
) -> anyhow::Result<ModeResult> {
    match spec.workload {
        Workload::Pattern => pattern::run_pattern_workload(mode, spec, set),
        Workload::ScanResistance(shape) => scan_resistance::run(mode, spec, &shape, set),
    }
}

/// The kernel-swap worker's `memory.stat`, which the parent names in the
/// environment (the worker was put in the cgroup before it started).
fn kernel_swap_memory_stat() -> anyhow::Result<std::path::PathBuf> {
    let path = std::env::var_os(crate::kernel_swap::MEMORY_STAT_ENV).with_context(|| {
        format!(
            "{} is not set: a kernel-swap worker is started by `tiermem bench` \
             inside its memory cgroup, which names the cgroup's memory.stat there",
            crate::kernel_swap::MEMORY_STAT_ENV
        )
    })?;
    Ok(path.into())
}

/// Entry point of a worker process: builds the mode's working set, runs,
/// and prints the result as a JSON event. Returns the exit code.
pub fn worker_main(mode: Mode, spec: &WorkloadSpec) -> i32 {
    let outcome = (|| -> anyhow::Result<ModeResult> {
        match mode {
            Mode::Dram => run_workload(
                mode,
                spec,
                &AnonymousSet::new(spec.working_set_bytes, None)?,
            ),
            Mode::KernelSwap | Mode::KernelZswap | Mode::KernelZram => {
                let memory_stat = kernel_swap_memory_stat()?;
                let set = AnonymousSet::new(spec.working_set_bytes, Some(memory_stat))?;
                run_workload(mode, spec, &set)
            }
            Mode::Tiermem => run_workload(mode, spec, &TiermemSet::new(spec.working_set_bytes)?),
        }
    })();
    match outcome {
        Ok(r) => {
            let clean = r.verify.is_clean();
            emit(&WorkerEvent::Result(Box::new(r)));
            if clean {
                0
            } else {
                3
            }
        }
        Err(e) => {
            emit(&WorkerEvent::Failed {
                message: format!("{e:#}"),
            });
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_data::PageData;

    /// Without the wait for a counted batch, a zero-length phase ends
    /// before any thread has looked at the recording flag: 0 accesses.
    #[test]
    fn every_thread_counts_a_batch_however_short_the_phase() {
        let spec = WorkloadSpec {
            working_set_bytes: 4 << 20,
            page_size: 4096,
            threads: 2,
            read_percent: 50,
            pattern: "uniform".into(),
            duration_s: 0.0,
            warmup_s: 0.0,
            seed: 7,
            workload: Workload::Pattern,
            data: PageData::Random,
        };
        let set = AnonymousSet::new(spec.working_set_bytes, None).unwrap();
        let result = run_workload(Mode::Dram, &spec, &set).unwrap();
        assert!(result.accesses >= 2 * 64, "{} accesses", result.accesses);
        assert_eq!(result.verify.lost + result.verify.corrupted, 0);
        assert!(result.first_touch_s.is_some_and(|s| s > 0.0));
    }
}
