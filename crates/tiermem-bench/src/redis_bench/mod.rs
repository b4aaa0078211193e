//! `tiermem bench-redis`: an unmodified redis-server on plain DRAM, under
//! tiermem (libtiermem.so preloaded) and under Linux kernel swap (a memory
//! cgroup limited to the budget, with a swapfile), side by side.
//!
//! Each mode gets a fresh server. The dataset is loaded deterministically
//! with our own pipelined RESP client (keys in the format redis-benchmark
//! generates, so its random GETs hit loaded data), every key is read back
//! and byte-compared, then `redis-benchmark` measures GET and SET, and
//! finally `DBSIZE` checks that no key disappeared.
//!
//! The files, each one concern: `plan` (the settings resolved before the
//! first server starts), `resp` (a minimal pipelining RESP client),
//! `process` (child processes: unlinked log files, death with the parent,
//! timeouts), `server` (one redis-server from start to shutdown),
//! `dataset` (the deterministic keys and values, loaded and verified),
//! `benchmark` (redis-benchmark and its CSV), `session` (one mode: its
//! sandbox, its server, its measurements) and `report` (the results, as a
//! table or JSON). This module runs the modes in order and reports them.

mod benchmark;
mod dataset;
mod plan;
pub(crate) mod process;
mod report;
mod resp;
mod server;
mod session;

use std::io::IsTerminal;

use self::plan::{find_library, make_plan};
use self::report::{fill_ratios, one_line, print_human, JsonOut, Status};
use self::server::remove_stale_work_dirs;
use self::session::run_mode;
use crate::kernel_swap;
use crate::report::human_bytes;
use crate::result::Mode;

pub use self::plan::Settings;

/// Exit status when keys were lost or corrupted.
const EXIT_DATA_LOSS: i32 = 3;

/// Runs `tiermem bench-redis` as `settings` say: prints the table (or the
/// JSON with `settings.json`) on stdout and progress on stderr, and returns
/// the exit status (0; 1 when a mode failed; 3 when keys were lost).
pub fn run(settings: Settings) -> anyhow::Result<i32> {
    let json = settings.json;
    let plan = make_plan(settings)?;
    // Ctrl-C, SIGTERM and SIGHUP remove a live kernel-swap sandbox; servers
    // die with us through PR_SET_PDEATHSIG.
    if let Err(e) = kernel_swap::install_signal_cleanup() {
        if plan.modes.iter().any(|m| m.is_kernel_swap()) {
            return Err(e);
        }
    }
    let library = if plan.modes.contains(&Mode::Tiermem) {
        Some(find_library()?)
    } else {
        None
    };
    if plan.dram_bytes >= plan.dataset_bytes {
        eprintln!(
            "tiermem bench-redis: note: the dataset ({}) fits in the DRAM budget ({}), so little or nothing will be paged",
            human_bytes(plan.dataset_bytes),
            human_bytes(plan.dram_bytes)
        );
    }
    remove_stale_work_dirs();
    let show_bars = std::io::stderr().is_terminal();
    let mut reports = Vec::new();
    for &mode in &plan.modes {
        let report = run_mode(&plan, mode, library.as_deref(), show_bars);
        eprintln!("tiermem bench-redis: {}", one_line(&report));
        reports.push(report);
    }
    fill_ratios(&mut reports);
    let data_loss = reports
        .iter()
        .any(|r| r.run.as_ref().is_some_and(|x| x.damaged_keys() > 0));
    let failed = reports.iter().any(|r| r.status == Status::Failed);
    let code = if data_loss {
        EXIT_DATA_LOSS
    } else if failed {
        1
    } else {
        0
    };
    if json {
        let out = JsonOut {
            plan: &plan,
            modes: &reports,
            data_loss,
            exit_status: code,
        };
        let out = tiermem_host::wrap("tiermem.bench-redis/1", serde_json::to_value(&out)?);
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_human(&plan, &reports);
    }
    if data_loss {
        for r in &reports {
            if let Some(x) = r.run.as_ref().filter(|x| x.damaged_keys() > 0) {
                eprintln!(
                    "tiermem bench-redis: DATA LOSS in {} mode: {} key(s) missing and {} corrupt before the benchmark, {} missing after it (of {})",
                    r.mode.name(),
                    x.lost_keys,
                    x.corrupt_keys,
                    x.missing_after,
                    plan.keys
                );
            }
        }
    }
    Ok(code)
}
