//! `tiermem probe`: infer a memory cache's organization from timing (see the
//! `tiermem-probe` crate). Workers are this binary re-executed with a hidden
//! argument, preloaded like `tiermem run` starts programs.

use tiermem_probe::{ProbeArgs, WORKER_ARG};

pub fn run(args: &ProbeArgs) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("tiermem probe: locating the tiermem binary: {e}");
            return 1;
        }
    };
    let mut worker = std::process::Command::new(exe);
    worker.arg(WORKER_ARG);
    match tiermem_probe::run(args, worker) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tiermem probe: {e:#}");
            1
        }
    }
}

/// The hidden `__probe-worker SPEC` subcommand.
pub fn worker(spec: &str) -> i32 {
    tiermem_probe::worker_main(spec)
}
