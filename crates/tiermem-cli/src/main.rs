//! `tiermem`: the command-line front end.

mod bench_cmd;
mod bench_suite;
mod bench_vm_cmd;
mod compressed_args;
mod control_client;
mod ctl_cmd;
mod data_args;
mod device_cmd;
mod docs;
mod duration_args;
mod format_cmd;
mod probe_cmd;
mod redis_bench;
mod run_cmd;

use clap::{CommandFactory, Parser, Subcommand};

/// tiermem: a software Memory Mode for Linux.
///
/// A bounded amount of DRAM caches a larger, slower tier (an SSD file, a
/// block device), entirely in user space over userfaultfd.
#[derive(Parser)]
#[command(name = "tiermem", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Bench(bench_cmd::BenchArgs),
    BenchRedis(redis_bench::RedisBenchArgs),
    BenchVm(bench_vm_cmd::BenchVmArgs),
    Completions(docs::CompletionsArgs),
    Cost(tiermem_cost::CostArgs),
    Ctl(ctl_cmd::CtlArgs),
    Device(device_cmd::DeviceArgs),
    Doctor(tiermem_doctor::DoctorArgs),
    FormatStore(format_cmd::FormatArgs),
    Run(run_cmd::RunArgs),
    Probe(tiermem_probe::ProbeArgs),
    Top(ctl_cmd::TopArgs),
    /// Internal: one probe worker process (used by `tiermem probe`).
    #[command(name = "__probe-worker", hide = true)]
    ProbeWorker {
        spec: String,
    },
    /// Internal: writes the man pages into DIR (used by `make install`).
    #[command(name = "__man", hide = true)]
    Man {
        dir: std::path::PathBuf,
    },
    /// Internal: one benchmark worker process (used by `tiermem bench`).
    #[command(name = "__bench-worker", hide = true)]
    BenchWorker {
        mode: String,
        spec: String,
    },
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Bench(args) => match bench_cmd::run(&args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("tiermem bench: {e:#}");
                1
            }
        },
        Command::BenchRedis(args) => match redis_bench::run(&args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("tiermem bench-redis: {e:#}");
                1
            }
        },
        Command::BenchVm(args) => report_failure("bench-vm", bench_vm_cmd::run(&args)),
        Command::Completions(args) => {
            report_failure("completions", docs::completions(&args, Cli::command()))
        }
        Command::Cost(args) => report_failure("cost", tiermem_cost::run(&args)),
        Command::Ctl(args) => report_failure("ctl", ctl_cmd::run(&args)),
        Command::Top(args) => report_failure("top", ctl_cmd::top(&args)),
        Command::Doctor(args) => report_failure("doctor", tiermem_doctor::run(&args)),
        Command::FormatStore(args) => match format_cmd::run(&args) {
            Ok(()) => 0,
            Err(e) => {
                // The core's error already names its cause.
                eprintln!("tiermem format-store: {e}");
                1
            }
        },
        Command::Device(args) => match device_cmd::run(&args) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("tiermem device: {e:#}");
                1
            }
        },
        Command::Run(args) => run_cmd::run(&args),
        Command::Probe(args) => probe_cmd::run(&args),
        Command::Man { dir } => report_failure("__man", docs::man_pages(&dir, Cli::command())),
        Command::ProbeWorker { spec } => probe_cmd::worker(&spec),
        Command::BenchWorker { mode, spec } => bench_cmd::worker(&mode, &spec),
    };
    // A Ctrl-C may be tearing down kernel-swap mode right now: let it finish.
    tiermem_bench::kernel_swap::wait_for_cleanup();
    std::process::exit(code);
}

/// The exit code of a command that returns one, or 1 with its error on stderr.
fn report_failure(command: &str, result: anyhow::Result<i32>) -> i32 {
    result.unwrap_or_else(|e| {
        eprintln!("tiermem {command}: {e:#}");
        1
    })
}
