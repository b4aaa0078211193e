//! `tiermem bench`: DRAM, tiermem and kernel swap side by side.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};
use tiermem_bench::compressed::CompressedOptions;
use tiermem_bench::plot;
use tiermem_bench::result::Mode;
use tiermem_bench::runner::{run_plan, BenchPlan, Placement};
use tiermem_bench::scan_resistance::ScanShape;
use tiermem_bench::worker::{worker_main, Workload, WorkloadSpec};
use tiermem_bench::zswap::PoolInBudget;
use tiermem_core::compress::settings::{ENV_COMPRESS, ENV_COMPRESS_DICT, ENV_COMPRESS_SHARE};
use tiermem_core::cpuidle::IdleWait;
use tiermem_core::cpus::CpuChoice;
use tiermem_core::settings;
use tiermem_core::{parse_size, CompressSettings, Config, FaultDelivery, PolicyKind};

use crate::bench_suite;
use crate::compressed_args::CompressedArgs;
use crate::data_args::DataArg;

pub(crate) mod device;
pub(crate) mod output;

use device::check_device;
use output::{print_human, print_json, progress_bar};

/// Working set of the pattern workload when `--working-set` is not given.
const DEFAULT_WORKING_SET: &str = "1G";
/// The suite's working set, as a multiple of the budget.
const SUITE_WORKING_SET_FACTOR: u64 = 4;

/// A pmbench-style paging benchmark.
///
/// Every mode runs the same workload in its own process, each access timed.
/// Modes:
///   dram         plain anonymous memory, no limit;
///   tiermem      tiermem with the DRAM budget and backing store given;
///   kernel-swap  plain memory in a cgroup-v1 memory cgroup limited to the
///                budget, with a swapfile on the backing store's filesystem
///                (needs root; removed on every exit path, Ctrl-C included).
///   kernel-zswap kernel-swap with zswap on for the run: pages the cgroup
///                swaps out are compressed into a DRAM pool first and
///                written to the swapfile only when the pool is full
///                (--zswap-compressor, --zswap-max-pool-percent).
///   kernel-zram  the same cgroup, swapping to /dev/zram0, compressed RAM,
///                instead of the swapfile (--zram-compressor, --zram-size);
///                with --pool-in-budget, zram sized for its pool to fill at
///                tiermem's share of the budget, a swapfile behind it.
/// The default is dram,tiermem,kernel-swap. The two compressed modes are
/// run only when named: they need root, change machine-wide settings for
/// the run, and refuse to run while another swap area is active or zram0
/// is in use. Both run with swap readahead off (vm.page-cluster 0,
/// --page-cluster): readahead from a compressed tier fills the cgroup with
/// swap cache until its OOM killer ends the program. Every setting they
/// change (zswap's enabled, compressor and max_pool_percent; zram0's
/// comp_algorithm, disksize and contents; vm.page-cluster; a debugfs they
/// mount for zswap's statistics) is saved first in
/// /run/tiermem-bench and put back on every exit path, Ctrl-C included;
/// after a run killed outright, the next run of any kernel mode puts it
/// back, with the killed run's swapfile and cgroup (and says so). They
/// report the tier at its fullest, read every 0.1 s while the worker runs:
/// zswap's stored pages, pool size, pages written back and rejected, and
/// ratio = stored pages x 4096 / pool bytes (from debugfs); zram's mm_stat
/// (orig_data_size, compr_data_size, mem_used_total) and ratio =
/// orig_data_size / mem_used_total. Use --data text or mixed with them:
/// random pages do not compress, zero pages cost nothing.
///
/// Workloads (--workload):
///   pattern          (default) threads access one word of pages drawn from
///                    --pattern for --duration seconds after --warmup seconds,
///                    --read-ratio percent of them reads.
///   scan-resistance  a hot set of half the budget is read again and again
///                    while one sequential scan of twice the budget passes:
///                    after every 1 MiB of scan, one pass over the hot set.
///                    One thread, reads only, a fixed amount of work (its
///                    sizes follow --dram; --working-set, --pattern,
///                    --read-ratio, --duration and --warmup do not apply).
///                    Reports the hot set's hit ratio during the scan and in
///                    one pass after it. Run it once per --policy to compare
///                    tiermem's policies with each other and with kernel swap.
///
/// The report gives pages/s, ratios between modes, MB/s, the CPU the
/// worker process used while measured ("CPU (process)", 100% = one CPU:
/// its access threads, and under tiermem its handlers and evictor, whose
/// polling keeps CPUs busy while the program pages; the kernel's own
/// threads, kswapd among them, are not counted), the hit ratio, latency
/// percentiles, the latency of slow accesses (faults, "misses"), and a log2
/// histogram with 16 sub-bins per power of two as pmbench prints.
///
/// The device is measured at the start of the run, in the backing store's
/// directory (else /var/tmp), unless --no-device-check: its QD1 4 KiB read
/// latency, which the miss latency is compared with ("slow p50 - dev QD1
/// read"), and, for --pattern sequential, its sequential read bandwidth as
/// `tiermem device` measures it (1 MiB reads, 4 in flight, 2 s over a 1 GiB
/// private file, written first: a few seconds and 1 GiB of free space),
/// which the scan is compared with ("of dev seq read"). When the working
/// set exceeds the budget it also times, for 2 s more, reads of one page
/// with one read in flight per --threads thread, the threads taking turns of
/// 20 ms asleep in pread and spinning for io_uring completions (so that the
/// device's drift falls on both alike). A noisy device is so compared with
/// itself, within the same run.
///
/// "of device limit" is each mode's pages/s as a share of what a pager that
/// cost nothing would reach on this device: threads / ((1 - best hit ratio)
/// x mean page read at QD threads, whichever way of waiting was faster),
/// where the best hit ratio is the probability of the budget's worth of
/// most probable pages (uniform: the budget's share of the working set;
/// zipf, pareto, normal: from the distribution), since every miss waits for
/// a read and hits are taken as free; for --pattern sequential it is the
/// sequential read bandwidth in pages. Write-back is left out, so no pager
/// reaches 100% with uniform or zipf draws (pareto and normal put hot pages
/// side by side, and a read ahead of one miss can bring in several). The
/// figures used are printed under the table ("device limit"; JSON:
/// device_limit, of_device_limit).
///
/// The hit ratio is 1 - misses / accesses over the measured phase only (not
/// stamping, warm-up or verification), with misses counted by each system
/// itself: tiermem's demand page-ins (page_ins - prefetch_issued: a
/// probation or read-ahead hit is a hit), the memory cgroup's pgmajfault
/// (memory.stat) for kernel swap, none for dram (1 by definition). Since
/// read-ahead hides misses, "RA = miss" rows give 1 - device reads /
/// accesses, every page read ahead counted as a miss: tiermem's page_ins,
/// the kernel's pswpin (/proc/vmstat, system-wide: exact while the bench's
/// swapfile is the only swap in use). The scan-resistance hot-set figures
/// count the same way, over the hot passes only; before each reading of the
/// counters every mode waits until its reads in flight are counted (tiermem
/// counts read-ahead when it completes), and the waits are not timed.
///
/// Every page is stamped before the run and verified after it: lost or
/// corrupted pages are reported, and the exit status is 3 if there are any.
///
/// Page contents (--data), beyond each page's stamp words (its first two and
/// last 8-byte words):
///   random  pseudo-random bytes, incompressible (the default);
///   zero    left zero;
///   text    English-like text: Zipf-skewed words and recurring phrases
///           from a fixed vocabulary of 800 words, with spaces and
///           punctuation; LZ4 compresses a 4 KiB page about 2.4x;
///   mixed   a fixed mix per page, drawn from the page number: 10% zero,
///           10% same-filled (one nonzero 8-byte word repeated), 50% text,
///           30% random.
/// Every word of every page is a function of the page number and the word's
/// place, and verification compares every word of every page. The contents
/// are named in every report: a pager that compresses or drops zero pages
/// is flattered by zeros and is measured fairly only on text or mixed.
///
/// First touch: filling the whole working set, in order, on one thread,
/// before the warm-up, is timed and reported as "first touch" pages/s.
///
/// --plot FILE.svg draws every mode's latency histogram, overlaid, as
/// pmbench does: latency per access on a log scale (10 ns to 1 ms, wider
/// if the data are), the share of accesses in each quarter of a power of
/// two on a log scale, one line per mode, so that hits and misses show as
/// separate humps. The title names the workload and the date (UTC). With
/// --suite the file holds one panel per case, one above the other. The
/// path is checked before anything runs: it must end in .svg, and its
/// directory must exist and be writable.
///
/// --suite runs the random-access matrix against kernel swap in one
/// command: uniform write-only (1 thread), uniform 50% reads (1 and 2
/// threads), zipf(0.99) 50% reads, and a sequential scan, each with tiermem
/// and kernel swap one after the other, the order alternating from case to
/// case, the device measured before each case. The working set is 4x the
/// budget unless --working-set says otherwise; --pattern, --threads,
/// --read-ratio and --workload are set by each case and refused. One table
/// gives pages/s, the ratio against kernel swap and its target, hit ratios,
/// miss latency p50/p99, each mode's share of the device limit, the first
/// touch and the verification of every page. With the default 10 s per mode
/// and --dram 512M it takes about 7 minutes (most of it filling and
/// verifying 2 GiB per mode and case). On a terminal a progress bar shows
/// where it is; otherwise (output to a file, or --json) a line on stderr
/// reports each case as it ends, with each mode's figure.
///
/// --rounds N (with --suite) runs the matrix N times. One round's ratio
/// moves by about 15% from one run to the next on a shared machine, so a
/// single round decides no target. Each round prints its own table; a
/// summary then gives, per case, every round's figure, how many rounds met
/// the target, and the verdict: the target applied to the median of the
/// rounds (for zipf, the median hit-ratio margin over kernel swap must not
/// be negative either). Which mode runs first alternates from case to case
/// and from round to round. With --json, `rounds` holds one object per
/// round, each shaped as a one-round suite, and `medians` the summary.
///
/// Examples:
///   tiermem bench                                   (1 GiB in 256 MiB, dram, tiermem, kernel-swap)
///   tiermem bench --suite --dram 512M               (2 GiB in 512 MiB, the matrix)
///   tiermem bench --suite --dram 512M --rounds 3    (the matrix three times, medians)
///   tiermem bench --working-set 4G --dram 1G --read-ratio 0 --duration 30
///   tiermem bench --pattern zipf:0.99 --threads 2 --modes tiermem,kernel-swap --json
///   tiermem bench --workload scan-resistance --dram 256M --policy s3fifo
///   tiermem bench --modes dram,tiermem --plot latency.svg
///   tiermem bench --modes kernel-swap,kernel-zswap,kernel-zram --data text \
///       --working-set 1G --dram 256M
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct BenchArgs {
    /// What the accesses do: pattern or scan-resistance (see above).
    #[arg(long, value_enum, default_value_t = WorkloadKind::Pattern)]
    workload: WorkloadKind,
    /// Size of the working set (262144, 256K, 256M, 4G, 25%) [default: 1G].
    /// Not with --workload scan-resistance, which uses 2.5 x --dram.
    #[arg(long)]
    working_set: Option<String>,
    /// DRAM budget for tiermem and the cgroup limit for kernel swap.
    #[arg(long, default_value = "256M", env = "TIERMEM_DRAM")]
    dram: String,
    /// Backing store: a directory (a private file is made there), a file or a
    /// block device. Kernel swap puts its swapfile on the same filesystem.
    #[arg(long, default_value = settings::known("TIERMEM_BACKING").value, env = "TIERMEM_BACKING")]
    backing: PathBuf,
    /// Page size: the unit of access and of tiermem paging (4K .. 2M).
    #[arg(long, default_value = settings::known("TIERMEM_PAGE_SIZE").value, env = "TIERMEM_PAGE_SIZE")]
    page_size: String,
    /// tiermem replacement policy: clock, fifo or s3fifo.
    #[arg(long, default_value = settings::known("TIERMEM_POLICY").value, env = "TIERMEM_POLICY")]
    policy: String,
    /// tiermem userfaultfd handler threads (default: by CPU count).
    #[arg(long, env = "TIERMEM_HANDLER_THREADS")]
    handler_threads: Option<usize>,
    /// Who resolves tiermem's faults: `handler` threads, or `signal`, the
    /// faulting thread itself through SIGBUS (no cross-CPU wake-ups; for
    /// programs that pass no tiered memory to system calls, as the bench
    /// worker does). See `tiermem run --help` on why transparent mode
    /// keeps handlers.
    #[arg(
        long,
        value_name = "handler|signal",
        default_value = settings::known("TIERMEM_FAULTS").value,
        env = "TIERMEM_FAULTS"
    )]
    faults: FaultDelivery,
    /// How long tiermem's fault handlers keep polling for the next fault
    /// or read completion before they sleep, in microseconds (0: sleep at
    /// once). Polling keeps the vCPUs awake while the program pages, so a
    /// miss pays no wake-up of a halted vCPU; a handler yields to any
    /// other runnable thread on its CPU.
    #[arg(
        long,
        value_name = "US",
        default_value_t = tiermem_core::io_config::DEFAULT_IDLE_SPIN_US,
        value_parser = |v: &str| tiermem_core::io_config::parse_idle_spin(v).map_err(|e| e.to_string()),
        env = "TIERMEM_IDLE_SPIN_US"
    )]
    idle_spin: u32,

    /// Evict dirty pages as for a program with asynchronous I/O (`on`:
    /// each is moved out with UFFDIO_MOVE past the kernel's pin check, one
    /// TLB shootdown per page), or not (`auto`, the default: the benchmark
    /// sets up no io_uring or AIO of its own). Measures what programs that
    /// use io_uring or AIO pay.
    #[arg(
        long,
        value_name = "auto|on|off",
        default_value = settings::known("TIERMEM_ASYNC_IO").value,
        value_parser = |v: &str| v.parse::<tiermem_core::AsyncIo>().map_err(|e| e.to_string()),
        env = "TIERMEM_ASYNC_IO"
    )]
    async_io: tiermem_core::AsyncIo,
    /// tiermem's compressed tier: `lz4` keeps evicted pages compressed in
    /// DRAM, within the budget, before the store (LZ4HC's mid level);
    /// `lz4-fast` does the same with LZ4's fast mode (about 8% larger on
    /// text, 30% less compression time); `off` sends them straight to the
    /// store. What it gains depends on --data.
    #[arg(
        long,
        value_name = "lz4|lz4-fast|off",
        default_value = settings::known("TIERMEM_COMPRESS").value,
        env = "TIERMEM_COMPRESS"
    )]
    compress: String,
    /// The most of the budget tiermem's compressed pool may take: a
    /// percent (1-90), or auto, which adapts it between 10% and 90% of the
    /// budget, from 50%, to where the pool's hits land. --pool-in-budget
    /// sets it to the kernel pools' cap.
    #[arg(
        long,
        value_name = "PERCENT|auto",
        default_value = settings::known("TIERMEM_COMPRESS_SHARE").value,
        env = "TIERMEM_COMPRESS_SHARE"
    )]
    compress_share: String,
    /// on: tiermem's compressed tier gathers a 64 KiB dictionary from the
    /// first pages that compress and compresses later pages with it while
    /// it saves 8% of the bytes (the bench's text packs 1.6x tighter, real
    /// text 14-23%), gathering a new one when it stops paying; off: each
    /// page is compressed alone.
    #[arg(
        long,
        value_name = "on|off",
        default_value = settings::known("TIERMEM_COMPRESS_DICT").value,
        env = "TIERMEM_COMPRESS_DICT"
    )]
    compress_dict: String,
    /// Application threads accessing the working set [default: 1]
    /// (scan-resistance: 1).
    #[arg(long)]
    threads: Option<usize>,
    /// Percentage of accesses that are reads (0 = write-only) [default: 50].
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=100))]
    read_ratio: Option<u32>,
    /// uniform, zipf[:THETA], sequential, normal[:SIGMA], pareto[:SHAPE]
    /// [default: uniform].
    #[arg(long)]
    pattern: Option<String>,
    /// Page contents: random (incompressible), zero, text (compresses
    /// about 2.4x with LZ4) or mixed (10% zero, 10% same-filled, 50% text,
    /// 30% random pages); see above.
    #[arg(long, value_enum, default_value_t = DataArg::Random)]
    data: DataArg,
    /// Run the random-access matrix against kernel swap (see above).
    #[arg(long)]
    suite: bool,
    /// With --suite: run the whole matrix this many times (1 to 20), the
    /// order of the modes alternating from round to round too, and judge
    /// each case on the median of its rounds (see above).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// Measured seconds per mode (a plain number is seconds; 500ms, 10s).
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = crate::duration_args::seconds)]
    duration: f64,
    /// Seconds of unmeasured accesses before measuring (after stamping).
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = crate::duration_args::seconds)]
    warmup: f64,
    /// Comma-separated modes: dram, tiermem, kernel-swap, kernel-zswap,
    /// kernel-zram [default: dram,tiermem,kernel-swap] (see above).
    #[arg(long, value_delimiter = ',')]
    modes: Vec<Mode>,
    #[command(flatten)]
    compressed: CompressedArgs,
    /// Skip the quick measurement of the backing device: its QD1 4 KiB read
    /// latency (every run) and, for --pattern sequential, its sequential
    /// read bandwidth.
    #[arg(long)]
    no_device_check: bool,
    /// Also print each mode's latency histogram.
    #[arg(long)]
    histograms: bool,
    /// Draw every mode's latency histogram, overlaid, into this SVG file
    /// (with --suite, one panel per case; see above).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Print the results as JSON on stdout (nothing else goes to stdout).
    #[arg(long)]
    json: bool,
    /// Run every mode's worker on these CPUs only, as `taskset` would: a CPU
    /// list (1, 0,2-3) or `irq`, the CPUs that take the interrupts of the
    /// backing store's device. The same for every mode, so ratios stay fair.
    /// The device check runs there too. Default: wherever the scheduler puts
    /// them.
    #[arg(long, value_name = "LIST|irq")]
    cpus: Option<CpuChoice>,
    /// Seed of the access pattern, identical in every mode.
    #[arg(long, default_value_t = 0x7469_6572)]
    seed: u64,
}

/// The `--workload` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum WorkloadKind {
    /// Timed accesses drawn from --pattern.
    Pattern,
    /// A hot set re-read while a sequential scan passes.
    ScanResistance,
}

fn size(setting: &'static str, text: &str) -> anyhow::Result<u64> {
    Ok(parse_size(setting, text)?.resolve())
}

fn plan(args: &BenchArgs) -> anyhow::Result<BenchPlan> {
    let page_size = size("--page-size", &args.page_size)?;
    let mut builder = Config::builder()
        .dram_budget(size("--dram", &args.dram)?)
        .backing(&args.backing)
        .page_size(page_size as usize)
        .policy(args.policy.parse::<PolicyKind>()?);
    if let Some(n) = args.handler_threads {
        builder = builder.handler_threads(n);
    }
    let pool_in_budget = pool_in_budget(args, size("--dram", &args.dram)?)?;
    let share = pool_in_budget.map_or(args.compress_share.clone(), |p| {
        p.tiermem_share_percent.to_string()
    });
    let compress = CompressSettings::from_lookup(&|var| match var {
        ENV_COMPRESS => Some(args.compress.clone()),
        ENV_COMPRESS_SHARE => Some(share.clone()),
        ENV_COMPRESS_DICT => Some(args.compress_dict.clone()),
        _ => None,
    })?;
    let io = tiermem_core::IoSettings {
        idle_spin_us: args.idle_spin,
        async_io: args.async_io,
        ..Default::default()
    };
    let tiermem = builder
        .faults(args.faults)
        .io(io)
        .compress(compress)
        .build()?;
    let (workload, working_set) = workload_and_working_set(args, &tiermem)?;
    anyhow::ensure!(
        working_set >= page_size,
        "--working-set must hold at least one page"
    );
    let threads = args.threads.unwrap_or(1);
    anyhow::ensure!(threads >= 1, "--threads must be at least 1");
    let pattern = args.pattern.clone().unwrap_or_else(|| "uniform".into());
    pattern
        .parse::<tiermem_bench::pattern::Pattern>()
        .map_err(anyhow::Error::msg)?;
    let modes = if args.modes.is_empty() {
        Mode::DEFAULT.to_vec()
    } else {
        args.modes.clone()
    };
    let compressed = CompressedOptions {
        pool_in_budget,
        page_data: Some(args.data.into()),
        ..args.compressed.options()?
    };
    let exe = std::env::current_exe().context("locating the tiermem binary")?;
    let cpus = match &args.cpus {
        Some(choice) => {
            let (cpus, why) = choice
                .resolve(&tiermem.backing)
                .map_err(|e| anyhow::anyhow!("--cpus: {e}"))?;
            Some(Placement { cpus, why })
        }
        None => None,
    };
    Ok(BenchPlan {
        workload: WorkloadSpec {
            working_set_bytes: working_set,
            page_size,
            threads,
            read_percent: args.read_ratio.unwrap_or(50),
            pattern,
            duration_s: args.duration,
            warmup_s: args.warmup,
            seed: args.seed,
            workload,
            data: args.data.into(),
        },
        modes,
        tiermem,
        worker: (exe, vec!["__bench-worker".into()]),
        cpus,
        compressed,
    })
}

/// `--pool-in-budget`'s split of the budget, checked against the modes.
fn pool_in_budget(args: &BenchArgs, budget: u64) -> anyhow::Result<Option<PoolInBudget>> {
    anyhow::ensure!(
        !(args.suite && args.compressed.pool_in_budget),
        "--pool-in-budget applies to kernel-zswap and kernel-zram, which --suite does not run"
    );
    args.compressed
        .pool_in_budget(&args.modes, &args.compress_share, budget, true)
}

/// The workload and its working-set size. Scan resistance derives its sizes
/// from the budget, so an explicit `--working-set` (or a second thread) is
/// refused rather than silently ignored.
fn workload_and_working_set(args: &BenchArgs, tiermem: &Config) -> anyhow::Result<(Workload, u64)> {
    match args.workload {
        WorkloadKind::Pattern if args.suite => {
            for (flag, given) in [
                ("--pattern", args.pattern.is_some()),
                ("--threads", args.threads.is_some()),
                ("--read-ratio", args.read_ratio.is_some()),
            ] {
                anyhow::ensure!(
                    !given,
                    "{flag} does not apply to --suite: each case of the matrix sets it"
                );
            }
            let working_set = match &args.working_set {
                Some(text) => size("--working-set", text)?,
                None => tiermem.dram_budget * SUITE_WORKING_SET_FACTOR,
            };
            Ok((Workload::Pattern, working_set))
        }
        WorkloadKind::Pattern => {
            let text = args.working_set.as_deref().unwrap_or(DEFAULT_WORKING_SET);
            Ok((Workload::Pattern, size("--working-set", text)?))
        }
        WorkloadKind::ScanResistance => {
            anyhow::ensure!(
                args.working_set.is_none(),
                "--working-set does not apply to --workload scan-resistance: its sizes \
                 follow --dram (hot set half of it, scan twice it)"
            );
            anyhow::ensure!(
                !args.suite,
                "--suite runs the pattern workloads; drop --workload scan-resistance"
            );
            anyhow::ensure!(
                args.threads.unwrap_or(1) == 1,
                "--workload scan-resistance runs one thread (a scan and a hot set read \
                 in turn); drop --threads"
            );
            let page_size = tiermem.page_size as u64;
            let shape = ScanShape::for_budget(tiermem.dram_budget, page_size)?;
            Ok((
                Workload::ScanResistance(shape),
                shape.total_pages() * page_size,
            ))
        }
    }
}

pub fn run(args: &BenchArgs) -> anyhow::Result<i32> {
    let plan = plan(args)?;
    if let Some(path) = &args.plot {
        plot::check_path(path)?;
    }
    if let Some(placement) = &plan.cpus {
        // The device check runs on this thread: measure where the workers run.
        tiermem_core::sys::thread::restrict_current_thread(&placement.cpus)
            .context("restricting the bench to --cpus")?;
    }
    anyhow::ensure!(
        args.suite || args.rounds == 1,
        "--rounds applies to --suite: a single run's modes are compared within one round; \
         add --suite, or repeat the command"
    );
    if args.suite {
        return run_suite(args, &plan);
    }
    let device = if args.no_device_check {
        None
    } else {
        check_device(&plan)
    };
    let bar = progress_bar(!args.json && std::io::stdout().is_terminal());
    let results = run_plan(&plan, &mut |mode, phase, done| {
        if let Some(b) = &bar {
            b.set_message(format!("{:<11} {phase}", mode.name()));
            b.set_position((done.clamp(0.0, 1.0) * 1000.0) as u64);
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let clean = results.iter().all(|r| r.verify.is_clean());
    if args.json {
        print_json(&plan, &results, device.as_ref())?;
    } else {
        print_human(&plan, &results, device.as_ref(), args.histograms);
    }
    if let Some(path) = &args.plot {
        let title = plot::workload_title(&plan.workload, plan.tiermem.dram_budget, unix_now());
        let panel = plot::Panel {
            caption: String::new(),
            results: &results,
        };
        write_plot(path, &title, &[panel], args.json)?;
    }
    Ok(if clean { 0 } else { 3 })
}

/// Writes the `--plot` figure and says where, unless stdout is JSON's.
fn write_plot(
    path: &Path,
    title: &str,
    panels: &[plot::Panel<'_>],
    json: bool,
) -> anyhow::Result<()> {
    plot::write_svg(path, title, panels)?;
    if !json {
        println!("latency plot: {}", path.display());
    }
    Ok(())
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `--suite`: every case of the matrix, one table (or one JSON object),
/// per round, and with more than one round a summary of their medians.
fn run_suite(args: &BenchArgs, plan: &BenchPlan) -> anyhow::Result<i32> {
    let bar = !args.json && std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
    let rounds = args.rounds as usize;
    if !args.json {
        let modes = if args.modes.is_empty() {
            2
        } else {
            args.modes.len()
        };
        eprintln!(
            "tiermem bench --suite: {} cases{}, about {:.0} minutes",
            bench_suite::CASES.len(),
            if rounds > 1 {
                format!(" x {rounds} rounds")
            } else {
                String::new()
            },
            bench_suite::estimate(plan, modes, rounds).as_secs_f64() / 60.0
        );
    }
    let all = bench_suite::run_suite(plan, &args.modes, args.no_device_check, rounds, bar);
    if args.json {
        print_suite_json(plan, &all)?;
    } else {
        for (i, runs) in all.iter().enumerate() {
            if rounds > 1 {
                println!(
                    "{}round {} of {rounds}",
                    if i > 0 { "\n" } else { "" },
                    i + 1
                );
            }
            print!("{}", bench_suite::render(plan, runs));
        }
        if rounds > 1 {
            print!("{}", bench_suite::rounds::render(&all));
        }
        if let Some(note) = IdleWait::read().note() {
            println!("\nnote: {note}");
        }
    }
    if let Some(path) = &args.plot {
        let title = plot::suite_title(&plan.workload, plan.tiermem.dram_budget, unix_now());
        let panels: Vec<plot::Panel> = all
            .iter()
            .enumerate()
            .flat_map(|(i, runs)| {
                runs.iter().map(move |run| plot::Panel {
                    caption: match rounds {
                        1 => run.case.name.to_string(),
                        _ => format!("round {}: {}", i + 1, run.case.name),
                    },
                    results: &run.results,
                })
            })
            .collect();
        write_plot(path, &title, &panels, args.json)?;
    }
    let clean = all
        .iter()
        .flatten()
        .flat_map(|r| &r.results)
        .all(|r| r.verify.is_clean());
    Ok(if clean { 0 } else { 3 })
}

/// One round: the one-round suite object, as before. More: each round's
/// object under `rounds`, and the medians under `medians`.
fn print_suite_json(plan: &BenchPlan, all: &[Vec<bench_suite::CaseRun>]) -> anyhow::Result<()> {
    let value = match all {
        [one] => tiermem_host::wrap("tiermem.bench-suite/2", bench_suite::to_json(plan, one)),
        _ => tiermem_host::wrap(
            "tiermem.bench-suite-rounds/1",
            serde_json::json!({
                "rounds": all.iter().map(|runs| bench_suite::to_json(plan, runs)).collect::<Vec<_>>(),
                "medians": bench_suite::rounds::to_json(all),
                "working_set_bytes": plan.workload.working_set_bytes,
                "budget_bytes": plan.tiermem.dram_budget,
            }),
        ),
    };
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}

pub fn worker(mode: &str, spec: &str) -> i32 {
    let parsed = mode
        .parse::<Mode>()
        .map_err(anyhow::Error::msg)
        .and_then(|m| Ok((m, serde_json::from_str::<WorkloadSpec>(spec)?)));
    match parsed {
        Ok((mode, spec)) => worker_main(mode, &spec),
        Err(e) => {
            eprintln!("tiermem __bench-worker: {e:#}");
            2
        }
    }
}
