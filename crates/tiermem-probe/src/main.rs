//! `tiermem-probe`: the probe as a binary of its own (the same as
//! `tiermem probe`), so that its tests can run it.

use clap::Parser;
use tiermem_probe::{ProbeArgs, WORKER_ARG};

#[derive(Parser)]
#[command(name = "tiermem-probe", version)]
struct Cli {
    #[command(flatten)]
    args: ProbeArgs,
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(WORKER_ARG) {
        let code = tiermem_probe::worker_main(argv.get(2).map(String::as_str).unwrap_or(""));
        std::process::exit(code);
    }
    let cli = Cli::parse();
    let mut worker = std::process::Command::new(std::env::current_exe().expect("current exe"));
    worker.arg(WORKER_ARG);
    let code = match tiermem_probe::run(&cli.args, worker) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tiermem probe: {e:#}");
            1
        }
    };
    tiermem_bench::kernel_swap::wait_for_cleanup();
    std::process::exit(code);
}
