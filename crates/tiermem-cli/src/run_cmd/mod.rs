//! `tiermem run`: an unmodified program with its memory tiered.
//!
//! The command checks everything it can before the program starts (the
//! settings, libtiermem.so, the program itself, the backing store and
//! userfaultfd, the last two by starting and stopping a runtime here), then
//! starts the program with libtiermem.so preloaded and the resolved
//! configuration in `TIERMEM_*` variables (and, for Go programs, a `GODEBUG`
//! setting: [`go_runtime`]), forwards signals to it, and exits with its
//! status. `tiermem run` never loads libtiermem.so itself.

use std::os::unix::process::CommandExt;
use std::process::Command;

use tiermem_core::cpus::restrict_command;
use tiermem_core::preload_library;
use tiermem_host::go_runtime::ENV_GODEBUG;

/// Tells libtiermem.so that it was preloaded and must interpose.
const ENV_PRELOAD: &str = "TIERMEM_PRELOAD";
const ENV_STATS: &str = "TIERMEM_STATS";
const ENV_STATS_FILE: &str = "TIERMEM_STATS_FILE";
/// Tells the library which process `tiermem run` started (see `--stats-file`).
const ENV_STATS_OWNER: &str = "TIERMEM_STATS_OWNER";
const ENV_NO_INHERIT: &str = "TIERMEM_NO_INHERIT";
const ENV_MEMFD: &str = "TIERMEM_MEMFD";

mod args;
mod child;
mod command;
mod config;
mod go_runtime;
mod last_stats;
mod linkage;
mod preflight;
mod stop;

pub use args::RunArgs;

use child::spawn_and_wait;
use command::{ld_preload, resolve_command, stats_file_template};
use config::{resolve_config, resolve_mmap_threshold, ENV_MMAP_THRESHOLD};
use go_runtime::godebug;
use last_stats::LastStats;
use linkage::check_loads_the_library;
use preflight::{check_backing_path, preflight_runtime};
use stop::Stop;

/// Runs `tiermem run`; returns the exit status for the process.
pub fn run(args: &RunArgs) -> i32 {
    match run_inner(args) {
        Ok(code) => code,
        Err(stop) => {
            eprintln!("tiermem run: {}", stop.message);
            stop.code
        }
    }
}

fn run_inner(args: &RunArgs) -> Result<i32, Stop> {
    let env = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
    let config = resolve_config(args, &env)?;
    let (program, argv0, rest) = match args.command.split_first() {
        Some((first, rest)) => (
            resolve_command(first, std::env::var_os("PATH"))?,
            first,
            rest,
        ),
        None => {
            return Err(Stop::new(
                2,
                "no program given: tiermem run [OPTIONS] -- CMD [ARGS...]",
            ))
        }
    };
    check_loads_the_library(&program, &argv0.to_string_lossy())?;
    let lib = preload_library::find().map_err(anyhow::Error::from)?;
    let mmap_threshold = resolve_mmap_threshold(args, &env)?;
    check_backing_path(&config.backing, args.backing.is_some())?;
    preflight_runtime(&config)?;

    let mut cmd = Command::new(&program);
    cmd.arg0(argv0).args(rest);
    cmd.envs(config.to_env());
    cmd.env(ENV_PRELOAD, "1");
    cmd.env(
        "LD_PRELOAD",
        ld_preload(&lib, std::env::var_os("LD_PRELOAD").as_deref()),
    );
    if args.stats {
        cmd.env(ENV_STATS, "1");
    }
    let stats_file = args
        .stats_file
        .as_deref()
        .map(stats_file_template)
        .transpose()?;
    if let Some(template) = &stats_file {
        cmd.env(ENV_STATS_FILE, template);
        cmd.env(ENV_STATS_OWNER, std::process::id().to_string());
    }
    let last_stats = LastStats::prepare(
        &mut cmd,
        args.stats,
        stats_file.map(|t| t.to_string_lossy().into_owned()),
    )
    .map_err(|e| Stop::new(1, format!("setting up the statistics pipe: {e}")))?;
    if let Some(t) = mmap_threshold {
        cmd.env(ENV_MMAP_THRESHOLD, t);
    }
    if args.no_inherit {
        cmd.env(ENV_NO_INHERIT, "1");
    }
    if args.untiered_memfd {
        cmd.env(ENV_MEMFD, "off");
    }
    if let Some(value) = godebug(std::env::var_os(ENV_GODEBUG).as_deref()) {
        cmd.env(ENV_GODEBUG, value);
    }
    if let Some(choice) = &args.cpus {
        let (cpus, _) = choice
            .resolve(&config.backing)
            .map_err(|e| Stop::new(2, format!("--cpus: {e}")))?;
        restrict_command(&mut cmd, &cpus);
    }
    spawn_and_wait(cmd, argv0, last_stats)
}
