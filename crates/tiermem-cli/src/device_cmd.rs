//! `tiermem device [PATH]`: measure the backing device (latency, IOPS,
//! bandwidth and CPU cost per submission engine) and cache the result for
//! `tiermem bench`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tiermem_device::{cache_path_for, parse_engines, DeviceConfig, Engine, Progress};

const LONG_ABOUT: &str = "\
Measure the device that backs tiermem's far memory, the way fio does, and
remember the result.

A page fault served from the backing file costs at least one device read,
so the device's latency is the floor under tiermem's fault latency, and its
IOPS and bandwidth are the ceiling of its paging rate. Latency at queue
depth 1 is mostly physics (media, bus, interrupt delivery); what software
chooses is how much CPU it spends to get close to it: polling the
submission queue (SQPOLL) or the completions (IOPOLL, hybrid polling)
trades CPU for microseconds. This command shows that trade on your machine.

Jobs, for each engine:
  randread   4 KiB  QD1 and QD N  random reads over the whole file
  read       1 MiB  QD4           sequential reads
  randwrite  4 KiB  QD1 and QD N  random writes
  write      1 MiB  QD4           sequential writes (for a directory: the
                                  fill of the test file, run once)

Engines:
  psync            pread/pwrite; QD N = N threads at QD1 each
  io_uring         one ring, N requests in flight, registered buffers
  io_uring-spin    one ring, the caller spins for each completion instead
                   of sleeping; needs no poll queues, costs one CPU per job
  io_uring-sqpoll  a kernel thread polls the submission queue (SQPOLL)
  io_uring-iopoll  busy-polled completions (IOPOLL); needs O_DIRECT and a
                   device with poll queues
  io_uring-hybrid  sleep about half the expected latency, then poll
                   (IORING_SETUP_HYBRID_IOPOLL, Linux 6.13+)
A mode the kernel, filesystem or device does not support is reported as
\"unsupported: <reason>\" instead of failing the run.

Per job: IOPS, MB/s, per-I/O latency from submission to completion (mean,
p50, p99, p99.9 in µs), and the CPU the process used: user+sys over wall
time, 100% = one CPU, including io_uring's kernel threads (kthr% is their
share).

PATH may be:
  a directory     a private 0600 test file is created there with O_TMPFILE
                  (no name; it vanishes on exit, even on kill -9), filled
                  with random data by sequential 1 MiB writes (ext4 returns
                  zeros for unwritten extents without touching the device),
                  then measured
  a regular file  measured in place; read-only unless --allow-write
  a block device  measured in place; read-only unless --allow-write
                  (never written by default)

I/O uses O_DIRECT. If the filesystem refuses it, buffered I/O is used and
the report says loudly that it measured the page cache; tmpfs is flagged
as memory.

Unless --no-cache, the report is saved to
$XDG_CACHE_HOME/tiermem/device-<major>-<minor>.json (default
~/.cache/tiermem/), keyed by the device number of the filesystem holding
PATH. `tiermem bench` quotes it beside its own measurement of the device,
made at the start of each run (QD1 read latency; sequential read bandwidth
for a scan, with this command's sequential job), against which it gives
the miss latency and the scan's share of the device limit.";

const EXAMPLES: &str = "\
Examples:
  tiermem device                      measure the filesystem of $TIERMEM_BACKING (or /var/tmp)
  tiermem device /mnt/nvme --quick    a 256 MiB file and 0.5 s per job (about 15 s)
  tiermem device /srv --size 4G --duration 10 --qd 64
  tiermem device --engines psync,io_uring --json > device.json
  tiermem device /dev/nvme0n1         read-only tests on a raw device
  tiermem device /dev/nvme1n1 --allow-write   also write (DESTROYS its data; refused if mounted)";

/// Arguments of `tiermem device`.
#[derive(Debug, Clone, Args)]
#[command(
    about = "Measure the backing device: latency, IOPS, bandwidth and CPU per I/O engine",
    long_about = LONG_ABOUT,
    after_long_help = EXAMPLES
)]
pub struct DeviceArgs {
    /// Directory (a private test file is created there), existing regular
    /// file, or block device to measure.
    #[arg(
        value_name = "PATH",
        env = "TIERMEM_BACKING",
        default_value = "/var/tmp"
    )]
    pub path: PathBuf,

    /// Size of the test file created in a directory, e.g. 256M, 1G, 4GiB
    /// [default: 1G, or 256M with --quick].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub size: Option<u64>,

    /// Seconds per job, e.g. 3, 0.5, 500ms [default: 3, or 0.5 with --quick].
    #[arg(long, value_name = "SECS", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Queue depth of the "QD N" random jobs (psync: N threads).
    #[arg(long, value_name = "N", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub qd: u32,

    /// Comma-separated engines: psync, io_uring, io_uring-spin,
    /// io_uring-sqpoll, io_uring-iopoll, io_uring-hybrid, or all.
    #[arg(long, value_name = "LIST", default_value = "all", value_parser = parse_engine_list)]
    pub engines: EngineList,

    /// Also run write tests on a block device or existing file. This
    /// OVERWRITES ITS DATA. A block device is then opened O_EXCL, which
    /// fails if it is mounted.
    #[arg(long)]
    pub allow_write: bool,

    /// Short run: 256 MiB test file, 0.5 s per job.
    #[arg(long)]
    pub quick: bool,

    /// Print the report as JSON on stdout (and nothing else there).
    #[arg(long)]
    pub json: bool,

    /// Do not save the report to the cache.
    #[arg(long)]
    pub no_cache: bool,
}

/// A parsed `--engines` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineList(pub Vec<Engine>);

fn parse_engine_list(s: &str) -> Result<EngineList, String> {
    parse_engines(s).map(EngineList).map_err(|e| e.to_string())
}

/// `256M`, `1G`, `4GiB`, `1.5g`, `65536` → bytes, by the rules every size
/// in tiermem follows ([`tiermem_core::parse_size`]); a share of RAM means
/// nothing for a test file.
fn parse_size(s: &str) -> Result<u64, String> {
    match tiermem_core::parse_size("--size", s).map_err(|e| e.to_string())? {
        tiermem_core::SizeSpec::Bytes(0) => Err(format!("--size {s:?} must be more than 0")),
        tiermem_core::SizeSpec::Bytes(bytes) => Ok(bytes),
        tiermem_core::SizeSpec::PercentOfRam(_) => Err(format!(
            "--size {s:?}: a test file takes bytes (256M, 1G), not a share of RAM"
        )),
    }
}

/// `3`, `0.5`, `3s`, `500ms` → duration, by the rules every duration in
/// tiermem follows ([`tiermem_core::parse_duration`]), up to an hour.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = tiermem_core::units::duration_from_text(s)
        .map_err(|why| format!("duration {s:?} {why} (examples: 3, 0.5, 500ms)"))?;
    if d.is_zero() || d > Duration::from_secs(3600) {
        return Err(format!("duration {s:?} must be between 0 and 3600 seconds"));
    }
    Ok(d)
}

fn config(args: &DeviceArgs) -> DeviceConfig {
    let mut cfg = if args.quick {
        DeviceConfig::quick(&args.path)
    } else {
        DeviceConfig::new(&args.path)
    };
    if let Some(size) = args.size {
        cfg.file_size = size;
    }
    if let Some(d) = args.duration {
        cfg.duration_per_job = d;
    }
    cfg.qd = args.qd;
    cfg.engines = args.engines.0.clone();
    cfg.allow_write = args.allow_write;
    cfg
}

/// Run `tiermem device`.
pub fn run(args: &DeviceArgs) -> Result<()> {
    let cfg = config(args);
    cfg.validate()?;
    if !cfg.path.exists() {
        bail!(
            "{} does not exist (give a directory, a file or a block device)",
            cfg.path.display()
        );
    }
    if cfg.allow_write {
        eprintln!(
            "warning: --allow-write: write tests will overwrite data if {} is a block device \
             or an existing file",
            cfg.path.display()
        );
    }
    let jobs_secs = 5.0 * cfg.duration_per_job.as_secs_f64() * cfg.engines.len() as f64;
    let fill = if cfg.path.is_dir() {
        format!(", after filling a {} MiB test file", cfg.file_size >> 20)
    } else {
        String::new()
    };
    eprintln!(
        "measuring {} with {} (about {jobs_secs:.0} s of jobs{fill})…",
        cfg.path.display(),
        cfg.engines
            .iter()
            .map(|e| e.name())
            .collect::<Vec<_>>()
            .join(", "),
    );

    let bar = std::io::stderr().is_terminal().then(|| {
        let pb = ProgressBar::with_draw_target(Some(1000), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {percent:>3}% eta {eta} {msg}",
        )
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        pb.set_style(style);
        pb
    });
    let mut on_progress = |p: Progress| {
        if let Some(pb) = &bar {
            pb.set_message(format!("[{}/{}] {}", p.job_index + 1, p.job_count, p.label));
            pb.set_position((p.overall_fraction * 1000.0).round() as u64);
        }
    };
    let result = tiermem_device::run(&cfg, &mut on_progress);
    if let Some(pb) = &bar {
        pb.finish_and_clear();
    }
    let mut report = result.with_context(|| format!("measuring {}", cfg.path.display()))?;
    if let Ok((cpus, device)) = tiermem_core::cpus::device_irq_cpus(&cfg.path) {
        report.notes.push(format!(
            "the interrupts of {device} go to CPU(s) {}: `--cpus irq` runs a \
             single-threaded program there, where a miss wakes no other CPU",
            tiermem_core::cpus::format_cpu_list(&cpus)
        ));
    }
    if let Some(note) = tiermem_core::cpuidle::IdleWait::read().note() {
        // Interrupt-completed QD1 figures include a halted vCPU's wake-up.
        report.notes.push(note);
    }

    if args.json {
        let body = serde_json::to_value(&report).context("serialising the device report")?;
        let out = tiermem_host::wrap("tiermem.device/1", body);
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", report.render_table());
    }
    if !args.no_cache {
        let cache = cache_path_for(&cfg.path);
        match report.save(&cache) {
            Ok(()) => eprintln!("saved to {}", cache.display()),
            // The measurement itself succeeded; a read-only home should not
            // turn it into a failure.
            Err(e) => eprintln!("warning: could not save the report: {e:#}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("25%").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn args_to_config() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: DeviceArgs,
        }
        let cli = Cli::try_parse_from([
            "tiermem",
            "/srv",
            "--quick",
            "--size",
            "512M",
            "--engines",
            "psync,io_uring",
            "--qd",
            "8",
        ])
        .expect("parse");
        let cfg = config(&cli.args);
        assert_eq!(cfg.path, PathBuf::from("/srv"));
        assert_eq!(cfg.file_size, 512 << 20);
        assert_eq!(cfg.duration_per_job, Duration::from_millis(500));
        assert_eq!(cfg.qd, 8);
        assert_eq!(cfg.engines, vec![Engine::Psync, Engine::IoUring]);
        assert!(!cfg.allow_write);
        assert!(Cli::try_parse_from(["tiermem", "--qd", "0"]).is_err());
        assert!(Cli::try_parse_from(["tiermem", "--engines", "spdk"]).is_err());
    }

    #[test]
    fn help_names_every_engine() {
        use clap::CommandFactory;
        let mut cli = crate::Cli::command();
        let device = cli
            .find_subcommand_mut("device")
            .expect("tiermem has a device subcommand");
        let help = device.render_long_help().to_string();
        let engines_option = help
            .split("--engines <LIST>")
            .nth(1)
            .expect("--help documents --engines");
        for engine in Engine::ALL {
            let listed = format!("\n  {:<17}", engine.name());
            assert!(help.contains(&listed), "--help does not describe {engine}");
            assert!(
                engines_option.contains(engine.name()),
                "--engines does not name {engine}"
            );
        }
    }
}
