//! `tiermem bench-redis`: an unmodified redis-server on plain DRAM, under
//! tiermem (libtiermem.so preloaded) and under Linux kernel swap (a memory
//! cgroup limited to the budget, with a swapfile), side by side.
//!
//! Each mode gets a fresh server. The dataset is loaded deterministically
//! with our own pipelined RESP client (keys in the format redis-benchmark
//! generates, so its random GETs hit loaded data), every key is read back
//! and byte-compared, then `redis-benchmark` measures GET and SET, and
//! finally `DBSIZE` checks that no key disappeared.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tiermem_bench::compressed::{self, CompressedOptions, Sampler};
use tiermem_bench::kernel_swap::{self, CgroupStats, SandboxSpec, SwapSandbox};
use tiermem_bench::report::human_bytes;
use tiermem_bench::result::Mode;
use tiermem_core::parse_size;

use crate::compressed_args::CompressedArgs;

/// Where libtiermem.so is, overriding the search next to the binary.
/// Keys per pipelined batch when loading and verifying.
const BATCH_KEYS: u64 = 200;
/// Upper bound on the bytes of values in one batch.
const BATCH_BYTES: u64 = 8 << 20;
/// No reply from the server for this long is an error.
const IO_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a starting server may take to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `SHUTDOWN NOSAVE` may take before the server is killed.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long one redis-benchmark run may take before it is killed.
const BENCHMARK_TIMEOUT: Duration = Duration::from_secs(4 * 3600);
/// Largest value accepted (Redis' default proto-max-bulk-len is 512 MiB).
const MAX_VALUE_SIZE: u64 = 64 << 20;
/// Ports tried when another process takes the free port first.
const PORT_ATTEMPTS: usize = 5;
/// Exit status when keys were lost or corrupted.
const EXIT_DATA_LOSS: i32 = 3;
/// Name prefix of our directories and log files in the temporary directory.
const WORK_DIR_PREFIX: &str = "tiermem-bench-redis-";

static NEXT_LOG: AtomicU64 = AtomicU64::new(0);

/// Redis: DRAM vs tiermem vs kernel swap, side by side.
///
/// For each mode a fresh redis-server (with --save "" --appendonly no
/// --maxmemory 0, on a free port of 127.0.0.1) is started, then:
///   1. load: DATASET / VALUE_SIZE keys `key:<12-digit number>` (the format
///      redis-benchmark -r uses) with deterministic pseudo-random values,
///      over a pipelined connection;
///   2. verify: every key is read back and byte-compared;
///   3. measure: redis-benchmark -t get,set -r <keys> with the clients,
///      requests and value size given; it prints requests per second;
///   4. check: DBSIZE must still equal the number of keys loaded.
///
/// Modes:
///   dram         redis-server as is, no limit;
///   tiermem      redis-server with libtiermem.so preloaded, its memory
///                tiered with the DRAM budget over the backing store;
///   kernel-swap  redis-server in a cgroup-v1 memory cgroup limited to the
///                budget, with a swapfile on the backing store's filesystem
///                (needs root; removed on every exit path, Ctrl-C included);
///   kernel-zswap kernel-swap with zswap on for the run (--zswap-compressor,
///                --zswap-max-pool-percent);
///   kernel-zram  the same cgroup, swapping to /dev/zram0 instead of the
///                swapfile (--zram-compressor, --zram-size).
/// The compressed modes run only when named, as root, while no other swap
/// area is active and zram0 is unused; every setting they change is put
/// back on every exit path (see `tiermem bench --help`). Their JSON has
/// the tier's statistics at its fullest (`compressed`: zswap_* or zram_*
/// counters with the compression ratio), and a note says the same.
///
/// The table gives load time, GET and SET requests/s, their ratios to
/// kernel swap and to DRAM, and lost keys; below it come tiermem's own
/// statistics and the cgroup's counters. Lost or corrupted keys are
/// reported loudly and make the exit status 3; a mode that fails makes it 1.
///
/// libtiermem.so is looked for next to the tiermem binary, in ../lib and
/// ../lib/tiermem, or where TIERMEM_LIB says.
///
/// Examples:
///   tiermem bench-redis                     (1.25 GiB in 320 MiB, all modes)
///   tiermem bench-redis --dataset 4G --dram 1G --clients 16 --requests 1000000
///   tiermem bench-redis --modes tiermem,kernel-swap --backing /mnt/nvme --json
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct RedisBenchArgs {
    /// Bytes of values loaded (262144, 256K, 256M, 4G, 25%); Redis' own
    /// overhead comes on top.
    #[arg(long, default_value = "1280M")]
    dataset: String,
    /// DRAM budget for tiermem and the cgroup limit for kernel swap.
    #[arg(long, default_value = "320M", env = "TIERMEM_DRAM")]
    dram: String,
    /// Size of each value, also passed to redis-benchmark -d (4096, 4K).
    #[arg(long, default_value = "4096")]
    value_size: String,
    /// Parallel connections of redis-benchmark (-c).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10000))]
    clients: u32,
    /// Requests per test of redis-benchmark (-n), for GET and for SET.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    requests: u64,
    /// Backing store for tiermem: a directory (a private file is made
    /// there), a file or a block device. Kernel swap puts its swapfile on
    /// the same filesystem.
    #[arg(long, default_value = "/var/tmp", env = "TIERMEM_BACKING")]
    backing: PathBuf,
    /// Comma-separated modes, run in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "dram,tiermem,kernel-swap"
    )]
    modes: Vec<Mode>,
    /// Print the results as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// The redis-server to run (default: redis-server in PATH).
    #[arg(long, value_name = "PATH")]
    redis_server: Option<PathBuf>,
    /// The redis-benchmark to run (default: redis-benchmark in PATH).
    #[arg(long, value_name = "PATH")]
    redis_benchmark: Option<PathBuf>,
    #[command(flatten)]
    compressed: CompressedArgs,
}

/// Everything resolved before the first server starts.
#[derive(Debug, Serialize)]
struct Plan {
    dataset_bytes: u64,
    dram_bytes: u64,
    value_size: u64,
    keys: u64,
    clients: u32,
    requests: u64,
    backing: PathBuf,
    redis_server: PathBuf,
    redis_server_version: String,
    redis_benchmark: PathBuf,
    #[serde(skip)]
    modes: Vec<Mode>,
    #[serde(skip)]
    compressed: CompressedOptions,
}

#[derive(Debug, Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum Status {
    Ok,
    Skipped,
    Failed,
}

/// One row of redis-benchmark's CSV output.
#[derive(Debug, Serialize, Clone, Default)]
struct BenchRow {
    rps: f64,
    // redis-benchmark reports milliseconds; JSON times are nanoseconds.
    #[serde(rename = "avg_latency_ns", with = "tiermem_host::ns::opt_millis")]
    avg_latency_ms: Option<f64>,
    #[serde(rename = "p50_latency_ns", with = "tiermem_host::ns::opt_millis")]
    p50_latency_ms: Option<f64>,
    #[serde(rename = "p99_latency_ns", with = "tiermem_host::ns::opt_millis")]
    p99_latency_ms: Option<f64>,
    #[serde(rename = "max_latency_ns", with = "tiermem_host::ns::opt_millis")]
    max_latency_ms: Option<f64>,
}

#[derive(Debug, Serialize, Default)]
struct Ratios {
    get_vs_kernel_swap: Option<f64>,
    set_vs_kernel_swap: Option<f64>,
    get_vs_dram: Option<f64>,
    set_vs_dram: Option<f64>,
}

#[derive(Debug, Serialize)]
struct ModeReport {
    mode: Mode,
    status: Status,
    /// Why the mode was skipped or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run: Option<RunResult>,
    ratios: Ratios,
    notes: Vec<String>,
}

#[derive(Debug, Serialize, Default)]
struct RunResult {
    port: u16,
    #[serde(rename = "load_ns", with = "tiermem_host::ns::seconds")]
    load_seconds: f64,
    #[serde(rename = "verify_ns", with = "tiermem_host::ns::seconds")]
    verify_seconds: f64,
    keys_verified: u64,
    /// Keys that GET found missing before the benchmark.
    lost_keys: u64,
    /// Keys whose value differed from what was loaded.
    corrupt_keys: u64,
    /// DBSIZE after the benchmark.
    dbsize_after: u64,
    /// Keys missing after the benchmark (keys - DBSIZE, if positive).
    missing_after: u64,
    get: BenchRow,
    set: BenchRow,
    #[serde(rename = "benchmark_ns", with = "tiermem_host::ns::seconds")]
    benchmark_seconds: f64,
    /// INFO memory `used_memory` after loading.
    redis_used_memory: Option<u64>,
    /// Peak resident set of the server (VmHWM), read before shutdown.
    server_peak_rss_bytes: Option<u64>,
    /// How the server ended after SHUTDOWN NOSAVE.
    server_exit: String,
    /// tiermem's summary from the server's stderr (tiermem mode).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tiermem_stats: Vec<String>,
    /// The cgroup's counters before shutdown (kernel-swap mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    cgroup: Option<CgroupStats>,
    /// The compressed tier at its fullest (kernel-zswap, kernel-zram):
    /// zswap_* or zram_* counters, the compression ratio among them.
    #[serde(skip_serializing_if = "Option::is_none")]
    compressed: Option<BTreeMap<String, f64>>,
}

impl RunResult {
    fn damaged_keys(&self) -> u64 {
        self.lost_keys + self.corrupt_keys + self.missing_after
    }
}

#[derive(Serialize)]
struct JsonOut<'a> {
    plan: &'a Plan,
    modes: &'a [ModeReport],
    data_loss: bool,
    exit_status: i32,
}

pub fn run(args: &RedisBenchArgs) -> anyhow::Result<i32> {
    let plan = make_plan(args)?;
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
    if args.json {
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

fn make_plan(args: &RedisBenchArgs) -> anyhow::Result<Plan> {
    let size = |setting: &'static str, text: &str| -> anyhow::Result<u64> {
        Ok(parse_size(setting, text)?.resolve())
    };
    let dataset_bytes = size("--dataset", &args.dataset)?;
    let dram_bytes = size("--dram", &args.dram)?;
    let value_size = size("--value-size", &args.value_size)?;
    if value_size == 0 || value_size > MAX_VALUE_SIZE {
        bail!(
            "invalid --value-size '{}': expected 1 byte to {}",
            args.value_size,
            human_bytes(MAX_VALUE_SIZE)
        );
    }
    let keys = dataset_bytes / value_size;
    if keys == 0 {
        bail!(
            "--dataset {} is smaller than one value (--value-size {}): no key to load",
            args.dataset,
            args.value_size
        );
    }
    if keys >= 1_000_000_000_000 {
        bail!("--dataset / --value-size gives {keys} keys; at most 999999999999 fit redis-benchmark's key format");
    }
    if dram_bytes == 0 {
        bail!(
            "invalid --dram '{}': the budget must be more than 0 bytes",
            args.dram
        );
    }
    let mut modes = Vec::new();
    for m in &args.modes {
        if !modes.contains(m) {
            modes.push(*m);
        }
    }
    if modes.is_empty() {
        bail!(
            "--modes is empty: give some of dram, tiermem, kernel-swap, kernel-zswap, kernel-zram"
        );
    }
    let redis_server = find_tool(
        args.redis_server.as_deref(),
        "redis-server",
        "--redis-server",
    )?;
    let redis_benchmark = find_tool(
        args.redis_benchmark.as_deref(),
        "redis-benchmark",
        "--redis-benchmark",
    )?;
    let redis_server_version = Command::new(&redis_server)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} --version", redis_server.display()))
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())?;
    Ok(Plan {
        dataset_bytes,
        dram_bytes,
        value_size,
        keys,
        clients: args.clients,
        requests: args.requests,
        backing: args.backing.clone(),
        redis_server,
        redis_server_version,
        redis_benchmark,
        modes,
        compressed: args.compressed.options()?,
    })
}

/// `given` if set (it must exist), else `name` searched in PATH.
fn find_tool(given: Option<&Path>, name: &str, flag: &str) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        if !p.is_file() {
            bail!("{flag} {}: no such file", p.display());
        }
        return Ok(p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow!(
                "{name} was not found in PATH.\n\
                 Fix: install Redis (e.g. `apt-get install redis-server redis-tools`) or pass {flag} PATH."
            )
        })
}

/// The libtiermem.so to preload: found the way `tiermem run` finds it.
fn find_library() -> anyhow::Result<PathBuf> {
    tiermem_core::preload_library::find().context(
        "tiermem mode preloads libtiermem.so into redis-server (or leave tiermem out of --modes)",
    )
}

/// Runs one mode; errors become a `Failed` report, unavailability `Skipped`.
fn run_mode(plan: &Plan, mode: Mode, library: Option<&Path>, show_bars: bool) -> ModeReport {
    let mut report = ModeReport {
        mode,
        status: Status::Ok,
        reason: None,
        run: None,
        ratios: Ratios::default(),
        notes: Vec::new(),
    };
    let outcome = match mode {
        Mode::KernelSwap | Mode::KernelZswap | Mode::KernelZram => {
            if let Err(why) = SwapSandbox::availability() {
                report.status = Status::Skipped;
                report.reason = Some(why);
                return report;
            }
            run_kernel_swap(plan, mode, show_bars, &mut report.notes)
        }
        Mode::Tiermem => match library {
            Some(lib) => session(plan, mode, Launch::Tiermem(lib), show_bars),
            None => Err(anyhow!("libtiermem.so was not located")),
        },
        Mode::Dram => session(plan, mode, Launch::Plain, show_bars),
    };
    match outcome {
        Ok(run) => report.run = Some(run),
        Err(e) => {
            report.status = Status::Failed;
            report.reason = Some(format!("{e:#}").trim_end().to_string());
        }
    }
    report
}

/// Builds the sandbox, runs the session in it and removes the sandbox on
/// every path (a panic aborts, and the abort hook of `kernel_swap` removes
/// it then; signals are handled by its signal thread).
fn run_kernel_swap(
    plan: &Plan,
    mode: Mode,
    show_bars: bool,
    notes: &mut Vec<String>,
) -> anyhow::Result<RunResult> {
    let swap_dir = if plan.backing.is_dir() {
        plan.backing.clone()
    } else {
        plan.backing
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    };
    let spec = SandboxSpec {
        memory_limit_bytes: plan.dram_bytes,
        // The values, Redis' per-key overhead and allocator slack.
        swap_bytes: plan.dataset_bytes.saturating_mul(2) + (512 << 20),
        swap_dir,
        swap_device: None,
    };
    let (mut sandbox, tier) = if mode == Mode::KernelSwap {
        let sandbox = SwapSandbox::create(&spec).context("setting up kernel swap")?;
        (sandbox, None)
    } else {
        let built = compressed::create(mode, &spec, plan.dataset_bytes * 2, &plan.compressed)
            .with_context(|| format!("setting up {}", mode.name()))?;
        notes.extend(built.notes);
        (built.sandbox, Some(built.tier))
    };
    notes.extend(sandbox.warnings().iter().cloned());
    // Sampled while the server lives: its swapped pages go when it exits.
    let sampler = tier.map(Sampler::start);
    let mut result = session(plan, mode, Launch::Sandbox(&sandbox), show_bars);
    if let Some((counters, line)) = sampler.map(Sampler::finish) {
        notes.push(line);
        if let Ok(r) = &mut result {
            r.compressed = Some(counters);
        }
    }
    let cleaned = sandbox.cleanup();
    match (result, cleaned) {
        (Ok(r), Ok(())) => Ok(r),
        (Err(e), Ok(())) => Err(e),
        (Ok(_), Err(c)) => Err(c),
        (Err(e), Err(c)) => Err(anyhow!("{e:#}; and then: {c:#}")),
    }
}

/// How redis-server is started.
#[derive(Clone, Copy)]
enum Launch<'a> {
    Plain,
    Tiermem(&'a Path),
    Sandbox(&'a SwapSandbox),
}

/// One server from start to shutdown: load, verify, benchmark, check.
fn session(
    plan: &Plan,
    mode: Mode,
    launch: Launch<'_>,
    show_bars: bool,
) -> anyhow::Result<RunResult> {
    let dir = WorkDir::create(mode)?;
    let mut server = Server::start(plan, mode, launch, &dir)?;
    // The server's log files are already unlinked and it saves nothing: its
    // directory can go now, so that an interrupted run leaves nothing behind.
    drop(dir);
    let measured = measure(plan, mode, launch, &server, show_bars);
    let mut result = match measured {
        Ok(r) => r,
        Err(e) => return Err(server.explain(e)),
    };
    result.server_exit = server.shutdown()?;
    let stderr = server.stderr.read();
    if matches!(launch, Launch::Tiermem(_)) {
        result.tiermem_stats = tiermem_summary(&stderr);
        if result.tiermem_stats.is_empty() {
            bail!(
                "redis-server under tiermem printed no statistics at exit ({}); its stderr ends with:\n{}",
                result.server_exit,
                tail(&stderr, 2000)
            );
        }
    }
    Ok(result)
}

fn measure(
    plan: &Plan,
    mode: Mode,
    launch: Launch<'_>,
    server: &Server,
    show_bars: bool,
) -> anyhow::Result<RunResult> {
    let mut r = RunResult {
        port: server.port,
        ..RunResult::default()
    };
    let mut conn = Conn::connect(server.port)?;

    let bar = key_bar(show_bars, mode, "load", plan.keys);
    if !show_bars {
        eprintln!(
            "tiermem bench-redis: {}: loading {} keys of {} B",
            mode.name(),
            plan.keys,
            plan.value_size
        );
    }
    let started = Instant::now();
    load(&mut conn, plan, &bar).context("loading the dataset")?;
    r.load_seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    r.redis_used_memory = conn
        .info_field("memory", "used_memory")
        .context("INFO memory")?;

    let bar = key_bar(show_bars, mode, "verify", plan.keys);
    if !show_bars {
        eprintln!("tiermem bench-redis: {}: verifying every key", mode.name());
    }
    let started = Instant::now();
    let (lost, corrupt) = verify(&mut conn, plan, &bar).context("verifying the dataset")?;
    r.verify_seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    r.keys_verified = plan.keys;
    r.lost_keys = lost;
    r.corrupt_keys = corrupt;

    let spinner = spinner(show_bars, mode);
    if !show_bars {
        eprintln!(
            "tiermem bench-redis: {}: redis-benchmark, {} requests per test",
            mode.name(),
            plan.requests
        );
    }
    let started = Instant::now();
    let (get, set) = benchmark(plan, server.port)?;
    r.benchmark_seconds = started.elapsed().as_secs_f64();
    spinner.finish_and_clear();
    r.get = get;
    r.set = set;

    // redis-benchmark's connections may still be closing; a fresh one is
    // cheap and avoids depending on the old one's idle state.
    let mut conn = Conn::connect(server.port)?;
    r.dbsize_after = match conn.command(&[b"DBSIZE"])? {
        Reply::Int(n) if n >= 0 => n as u64,
        other => bail!("unexpected reply to DBSIZE: {other}"),
    };
    r.missing_after = plan.keys.saturating_sub(r.dbsize_after);
    r.server_peak_rss_bytes = peak_rss(server.pid());
    if let Launch::Sandbox(sb) = launch {
        r.cgroup = Some(sb.stats().context("reading the cgroup's counters")?);
    }
    Ok(r)
}

/// The key redis-benchmark -r generates for `i`.
fn key(i: u64) -> String {
    format!("key:{i:012}")
}

/// The value of key `i`: xorshift64 seeded from `i`.
fn fill_value(i: u64, buf: &mut [u8]) {
    // splitmix64 of i gives a well-mixed, non-zero xorshift state.
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    let mut x = (z ^ (z >> 31)) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

fn batch_keys(value_size: u64) -> u64 {
    (BATCH_BYTES / value_size).clamp(1, BATCH_KEYS)
}

fn load(conn: &mut Conn, plan: &Plan, bar: &ProgressBar) -> anyhow::Result<()> {
    let vs = plan.value_size as usize;
    let batch = batch_keys(plan.value_size);
    let mut value = vec![0u8; vs];
    let mut out = Vec::with_capacity(batch as usize * (vs + 64));
    let mut first = 0;
    while first < plan.keys {
        let last = (first + batch).min(plan.keys);
        out.clear();
        for i in first..last {
            fill_value(i, &mut value);
            encode(&mut out, &[b"SET", key(i).as_bytes(), &value]);
        }
        conn.send(&out)?;
        for i in first..last {
            match conn.reply()? {
                Reply::Simple(s) if s == "OK" => {}
                other => bail!("SET {} answered {other}", key(i)),
            }
        }
        bar.set_position(last);
        first = last;
    }
    Ok(())
}

/// Returns (missing keys, keys with a wrong value).
fn verify(conn: &mut Conn, plan: &Plan, bar: &ProgressBar) -> anyhow::Result<(u64, u64)> {
    let batch = batch_keys(plan.value_size);
    let mut expected = vec![0u8; plan.value_size as usize];
    let mut out = Vec::new();
    let (mut lost, mut corrupt) = (0, 0);
    let mut first = 0;
    while first < plan.keys {
        let last = (first + batch).min(plan.keys);
        out.clear();
        for i in first..last {
            encode(&mut out, &[b"GET", key(i).as_bytes()]);
        }
        conn.send(&out)?;
        for i in first..last {
            match conn.reply()? {
                Reply::Bulk(None) => lost += 1,
                Reply::Bulk(Some(v)) => {
                    fill_value(i, &mut expected);
                    if v != expected {
                        corrupt += 1;
                    }
                }
                other => bail!("GET {} answered {other}", key(i)),
            }
        }
        bar.set_position(last);
        first = last;
    }
    Ok((lost, corrupt))
}

/// Runs redis-benchmark and returns its (GET, SET) rows.
fn benchmark(plan: &Plan, port: u16) -> anyhow::Result<(BenchRow, BenchRow)> {
    let tmp = std::env::temp_dir();
    let out = Log::create(&tmp, "redis-benchmark-csv")?;
    let err = Log::create(&tmp, "redis-benchmark-err")?;
    let mut cmd = Command::new(&plan.redis_benchmark);
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &plan.clients.to_string()])
        .args(["-n", &plan.requests.to_string()])
        .args(["-d", &plan.value_size.to_string()])
        .args(["-r", &plan.keys.to_string()])
        .args(["-t", "get,set", "--csv"])
        .stdin(Stdio::null())
        .stdout(out.stdio()?)
        .stderr(err.stdio()?);
    die_with_parent(&mut cmd);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", plan.redis_benchmark.display()))?;
    let status = match wait_timeout(&mut child, BENCHMARK_TIMEOUT)? {
        Some(s) => s,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "redis-benchmark did not finish in {} s and was killed",
                BENCHMARK_TIMEOUT.as_secs()
            );
        }
    };
    let csv = out.read();
    let err = err.read();
    if !status.success() {
        bail!(
            "redis-benchmark failed ({}); its output ends with:\n{}{}",
            describe(status),
            tail(&csv, 1000),
            tail(&err, 1000)
        );
    }
    parse_csv(&csv).with_context(|| {
        format!(
            "reading redis-benchmark's CSV output:\n{}{}",
            tail(&csv, 1000),
            tail(&err, 1000)
        )
    })
}

fn parse_csv(csv: &str) -> anyhow::Result<(BenchRow, BenchRow)> {
    let fields = |line: &str| -> Vec<String> {
        line.split(',')
            .map(|f| f.trim().trim_matches('"').to_string())
            .collect()
    };
    let mut lines = csv.lines().filter(|l| !l.trim().is_empty());
    let header = fields(lines.next().context("no output")?);
    let col = |name: &str| header.iter().position(|h| h == name);
    let test_col = col("test").context("no \"test\" column")?;
    let rps_col = col("rps").context("no \"rps\" column")?;
    let (mut get, mut set) = (None, None);
    for line in lines {
        let f = fields(line);
        let num = |c: Option<usize>| c.and_then(|c| f.get(c)).and_then(|v| v.parse::<f64>().ok());
        let Some(rps) = num(Some(rps_col)) else {
            continue;
        };
        let row = BenchRow {
            rps,
            avg_latency_ms: num(col("avg_latency_ms")),
            p50_latency_ms: num(col("p50_latency_ms")),
            p99_latency_ms: num(col("p99_latency_ms")),
            max_latency_ms: num(col("max_latency_ms")),
        };
        match f.get(test_col).map(String::as_str) {
            Some("GET") => get = Some(row),
            Some("SET") => set = Some(row),
            _ => {}
        }
    }
    Ok((get.context("no GET result")?, set.context("no SET result")?))
}

/// Lines of tiermem's exit summary in a server's stderr.
fn tiermem_summary(stderr: &str) -> Vec<String> {
    let mut lines = stderr.lines();
    let mut out = Vec::new();
    for line in lines.by_ref() {
        if line.starts_with("── tiermem:") {
            out.push(line.to_string());
            break;
        }
    }
    for line in lines {
        if line.trim().is_empty() {
            break;
        }
        out.push(line.to_string());
    }
    out
}

/// VmHWM of `pid`, in bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// A private directory for the server's files and logs, removed on drop.
struct WorkDir {
    path: PathBuf,
}

impl WorkDir {
    fn create(mode: Mode) -> anyhow::Result<WorkDir> {
        let path = std::env::temp_dir().join(format!(
            "{WORK_DIR_PREFIX}{}-{}",
            std::process::id(),
            mode.name()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(WorkDir { path })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Removes the directories of earlier runs that were killed.
fn remove_stale_work_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(WORK_DIR_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A file a child writes to, unlinked as soon as it is made: it vanishes
/// with the last descriptor, even if we are killed.
struct Log {
    file: File,
}

impl Log {
    fn create(dir: &Path, what: &str) -> anyhow::Result<Log> {
        let path = dir.join(format!(
            "{WORK_DIR_PREFIX}{}-{what}-{}",
            std::process::id(),
            NEXT_LOG.fetch_add(1, Ordering::Relaxed)
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        std::fs::remove_file(&path).with_context(|| format!("unlinking {}", path.display()))?;
        Ok(Log { file })
    }

    fn stdio(&self) -> anyhow::Result<Stdio> {
        Ok(self
            .file
            .try_clone()
            .context("duplicating a log file")?
            .into())
    }

    /// Everything written so far. Reads with pread, so the offset the
    /// child shares with us is left alone.
    fn read(&self) -> String {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match self.file.read_at(&mut buf, out.len() as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// Makes the child get SIGKILL when we die, so a server never outlives an
/// interrupted benchmark.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: getpid has no preconditions and cannot fail.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and only
    // makes the async-signal-safe system calls prctl and getppid, and builds
    // io::Error from a raw error code (no allocation); it touches no lock,
    // allocator or other shared state.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died before prctl took effect.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// A running redis-server, killed and reaped on drop if still running.
struct Server {
    child: Option<Child>,
    port: u16,
    stdout: Log,
    stderr: Log,
}

impl Server {
    fn start(plan: &Plan, mode: Mode, launch: Launch<'_>, dir: &WorkDir) -> anyhow::Result<Server> {
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let mut server = Server::spawn(plan, launch, dir, port)?;
            match server.wait_ready() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    let log = server.stdout.read();
                    drop(server);
                    if log.contains("Address already in use") {
                        last_err = Some(e);
                        continue;
                    }
                    return Err(
                        e.context(format!("starting redis-server for {} mode", mode.name()))
                    );
                }
            }
        }
        Err(last_err
            .unwrap_or_else(|| anyhow!("no attempt made"))
            .context(format!(
                "no free port for redis-server after {PORT_ATTEMPTS} attempts"
            )))
    }

    fn spawn(plan: &Plan, launch: Launch<'_>, dir: &WorkDir, port: u16) -> anyhow::Result<Server> {
        let stdout = Log::create(&dir.path, "stdout")?;
        let stderr = Log::create(&dir.path, "stderr")?;
        let mut cmd = Command::new(&plan.redis_server);
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--maxmemory", "0"])
            .args(["--daemonize", "no", "--logfile", ""])
            .arg("--dir")
            .arg(&dir.path)
            .current_dir(&dir.path)
            .stdin(Stdio::null())
            .stdout(stdout.stdio()?)
            .stderr(stderr.stdio()?)
            .env_remove("TIERMEM_PRELOAD");
        die_with_parent(&mut cmd);
        match launch {
            Launch::Plain => {}
            Launch::Tiermem(lib) => {
                cmd.env("LD_PRELOAD", lib)
                    .env("TIERMEM_PRELOAD", "1")
                    .env("TIERMEM_DRAM", plan.dram_bytes.to_string())
                    .env("TIERMEM_BACKING", &plan.backing)
                    .env("TIERMEM_STATS", "1");
            }
            Launch::Sandbox(sb) => sb.configure_command(&mut cmd),
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", plan.redis_server.display()))?;
        if let Launch::Sandbox(sb) = launch {
            sb.adopt_child(child.id() as i32);
        }
        Ok(Server {
            child: Some(child),
            port,
            stdout,
            stderr,
        })
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits until the server answers PING.
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.try_wait()? {
                bail!(
                    "redis-server exited at start ({}); its output ends with:\n{}",
                    describe(status),
                    self.logs_tail()
                );
            }
            if let Ok(mut conn) = Conn::connect(self.port) {
                if let Ok(Reply::Simple(s)) = conn.command(&[b"PING"]) {
                    if s == "PONG" {
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "redis-server did not answer PING on port {} within {} s; its output ends with:\n{}",
                    self.port,
                    START_TIMEOUT.as_secs(),
                    self.logs_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn try_wait(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => Ok(c.try_wait().context("waiting for redis-server")?),
            None => bail!("redis-server was already reaped"),
        }
    }

    fn logs_tail(&self) -> String {
        let out = self.stdout.read();
        let err = self.stderr.read();
        format!("{}{}", tail(&out, 1500), tail(&err, 1500))
    }

    /// Adds the server's fate to an error that happened while it ran.
    fn explain(&mut self, e: anyhow::Error) -> anyhow::Error {
        // Give a dying server a moment to be reaped.
        std::thread::sleep(Duration::from_millis(200));
        match self.try_wait() {
            Ok(Some(status)) => e.context(format!(
                "redis-server died ({}); its output ends with:\n{}",
                describe(status),
                self.logs_tail()
            )),
            _ => e,
        }
    }

    /// SHUTDOWN NOSAVE, then SIGKILL after a timeout. Returns how it ended.
    fn shutdown(&mut self) -> anyhow::Result<String> {
        // The server closes the connection without a reply when it exits.
        if let Ok(mut conn) = Conn::connect(self.port) {
            let _ = conn.command(&[b"SHUTDOWN", b"NOSAVE"]);
        }
        let Some(mut child) = self.child.take() else {
            bail!("redis-server was already reaped");
        };
        match wait_timeout(&mut child, SHUTDOWN_TIMEOUT)? {
            Some(status) => Ok(describe(status)),
            None => {
                let _ = child.kill();
                let status = child.wait().context("reaping redis-server")?;
                Ok(format!(
                    "did not exit within {} s of SHUTDOWN NOSAVE; killed ({})",
                    SHUTDOWN_TIMEOUT.as_secs(),
                    describe(status)
                ))
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free TCP port")?;
    Ok(l.local_addr().context("finding a free TCP port")?.port())
}

/// Polls `child` until it exits or `timeout` passes (`None`).
fn wait_timeout(child: &mut Child, timeout: Duration) -> anyhow::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait().context("waiting for a child process")? {
            return Ok(Some(s));
        }
        if Instant::now() > deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => status.to_string(),
    }
}

/// The last `max` bytes of `text` (on a char boundary), newline-terminated.
fn tail(text: &str, max: usize) -> String {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let mut t = text[start..].to_string();
    if !t.is_empty() && !t.ends_with('\n') {
        t.push('\n');
    }
    t
}

/// A RESP reply.
#[derive(Debug)]
enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

/// For error messages: the reply, with long values shortened.
impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Simple(s) => write!(f, "+{s}"),
            Reply::Error(s) => write!(f, "error '{s}'"),
            Reply::Int(n) => write!(f, ":{n}"),
            Reply::Bulk(None) => f.write_str("nil"),
            Reply::Bulk(Some(v)) => {
                let shown = String::from_utf8_lossy(&v[..v.len().min(64)]);
                write!(f, "a {}-byte string {shown:?}", v.len())
            }
            Reply::Array(None) => f.write_str("a nil array"),
            Reply::Array(Some(items)) => write!(f, "an array of {}", items.len()),
        }
    }
}

fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// A minimal pipelining RESP client.
struct Conn {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    line: Vec<u8>,
}

impl Conn {
    fn connect(port: u16) -> anyhow::Result<Conn> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .with_context(|| format!("connecting to redis-server on {addr}"))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        s.set_write_timeout(Some(IO_TIMEOUT))?;
        let r = s.try_clone().context("cloning a socket")?;
        Ok(Conn {
            writer: s,
            reader: BufReader::with_capacity(1 << 20, r),
            line: Vec::new(),
        })
    }

    fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.writer
            .write_all(bytes)
            .map_err(|e| timeout_hint(e, "sending to redis-server"))
    }

    fn command(&mut self, args: &[&[u8]]) -> anyhow::Result<Reply> {
        let mut out = Vec::new();
        encode(&mut out, args);
        self.send(&out)?;
        self.reply()
    }

    fn reply(&mut self) -> anyhow::Result<Reply> {
        self.line.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.line)
            .map_err(|e| timeout_hint(e, "reading from redis-server"))?;
        if n == 0 {
            bail!("redis-server closed the connection");
        }
        if self.line.len() < 3 || !self.line.ends_with(b"\r\n") {
            bail!(
                "malformed reply from redis-server: {:?}",
                String::from_utf8_lossy(&self.line)
            );
        }
        let kind = self.line[0];
        let text = String::from_utf8_lossy(&self.line[1..self.line.len() - 2]).into_owned();
        let int = |t: &str| -> anyhow::Result<i64> {
            t.parse()
                .with_context(|| format!("malformed length or integer in a reply: {t:?}"))
        };
        Ok(match kind {
            b'+' => Reply::Simple(text),
            b'-' => Reply::Error(text),
            b':' => Reply::Int(int(&text)?),
            b'$' => {
                let len = int(&text)?;
                if len < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut v = vec![0u8; len as usize + 2];
                    self.reader
                        .read_exact(&mut v)
                        .map_err(|e| timeout_hint(e, "reading from redis-server"))?;
                    if !v.ends_with(b"\r\n") {
                        bail!("malformed bulk reply from redis-server");
                    }
                    v.truncate(len as usize);
                    Reply::Bulk(Some(v))
                }
            }
            b'*' => {
                let len = int(&text)?;
                if len < 0 {
                    Reply::Array(None)
                } else {
                    let mut items = Vec::new();
                    for _ in 0..len {
                        items.push(self.reply()?);
                    }
                    Reply::Array(Some(items))
                }
            }
            _ => bail!("unknown reply type from redis-server: {text:?}"),
        })
    }

    /// A numeric field of `INFO <section>`.
    fn info_field(&mut self, section: &str, field: &str) -> anyhow::Result<Option<u64>> {
        match self.command(&[b"INFO", section.as_bytes()])? {
            Reply::Bulk(Some(v)) => {
                let text = String::from_utf8_lossy(&v);
                Ok(text.lines().find_map(|l| {
                    l.strip_prefix(field)?
                        .strip_prefix(':')?
                        .trim()
                        .parse()
                        .ok()
                }))
            }
            other => bail!("unexpected reply to INFO: {other}"),
        }
    }
}

fn timeout_hint(e: io::Error, what: &str) -> anyhow::Error {
    if matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) {
        anyhow!(
            "{what}: no progress in {} s (server hung?)",
            IO_TIMEOUT.as_secs()
        )
    } else {
        anyhow::Error::new(e).context(what.to_string())
    }
}

fn key_bar(show: bool, mode: Mode, phase: &str, len: u64) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix:<11} {msg:<6} [{bar:40}] {pos}/{len} keys, {per_sec}, eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(mode.name());
    bar.set_message(phase.to_string());
    bar
}

fn spinner(show: bool, mode: Mode) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{prefix:<11} {spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_prefix(mode.name());
    bar.set_message("redis-benchmark -t get,set");
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

fn fill_ratios(reports: &mut [ModeReport]) {
    let rates = |mode: Mode, reports: &[ModeReport]| {
        reports
            .iter()
            .find(|r| r.mode == mode)
            .and_then(|r| r.run.as_ref())
            .map(|x| (x.get.rps, x.set.rps))
    };
    let swap = rates(Mode::KernelSwap, reports);
    let dram = rates(Mode::Dram, reports);
    let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
    for r in reports.iter_mut() {
        let Some(x) = &r.run else { continue };
        let (g, s) = (x.get.rps, x.set.rps);
        if let Some((sg, ss)) = swap {
            r.ratios.get_vs_kernel_swap = ratio(g, sg);
            r.ratios.set_vs_kernel_swap = ratio(s, ss);
        }
        if let Some((dg, ds)) = dram {
            r.ratios.get_vs_dram = ratio(g, dg);
            r.ratios.set_vs_dram = ratio(s, ds);
        }
    }
}

fn one_line(r: &ModeReport) -> String {
    match (&r.run, r.status) {
        (Some(x), _) => format!(
            "{}: loaded in {:.1} s, verified in {:.1} s, GET {:.0} rps, SET {:.0} rps, {} damaged key(s)",
            r.mode.name(),
            x.load_seconds,
            x.verify_seconds,
            x.get.rps,
            x.set.rps,
            x.damaged_keys()
        ),
        (None, Status::Skipped) => format!(
            "{}: skipped: {}",
            r.mode.name(),
            r.reason.as_deref().unwrap_or("?")
        ),
        (None, _) => format!(
            "{}: FAILED: {}",
            r.mode.name(),
            r.reason.as_deref().unwrap_or("?")
        ),
    }
}

fn print_human(plan: &Plan, reports: &[ModeReport]) {
    println!(
        "tiermem bench-redis: {} keys x {} B values (dataset {}), DRAM budget {}, backing {}",
        plan.keys,
        plan.value_size,
        human_bytes(plan.keys * plan.value_size),
        human_bytes(plan.dram_bytes),
        plan.backing.display()
    );
    println!(
        "redis-benchmark: {} clients, {} requests per test, -d {} -r {} -t get,set; {}",
        plan.clients, plan.requests, plan.value_size, plan.keys, plan.redis_server_version
    );
    println!();
    let ratio = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}x"));
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let header = [
        "mode",
        "load",
        "verify",
        "GET rps",
        "SET rps",
        "GET/swap",
        "SET/swap",
        "GET/DRAM",
        "SET/DRAM",
        "GET p99 ms",
        "SET p99 ms",
        "peak RSS",
        "lost keys",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    for r in reports {
        let Some(x) = &r.run else { continue };
        let damaged = x.damaged_keys();
        rows.push(vec![
            r.mode.name().to_string(),
            format!("{:.1} s", x.load_seconds),
            format!("{:.1} s", x.verify_seconds),
            format!("{:.0}", x.get.rps),
            format!("{:.0}", x.set.rps),
            ratio(r.ratios.get_vs_kernel_swap),
            ratio(r.ratios.set_vs_kernel_swap),
            ratio(r.ratios.get_vs_dram),
            ratio(r.ratios.set_vs_dram),
            ms(x.get.p99_latency_ms),
            ms(x.set.p99_latency_ms),
            x.server_peak_rss_bytes.map_or("-".into(), human_bytes),
            if damaged == 0 {
                "0".to_string()
            } else {
                format!("{damaged} LOST!")
            },
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c == 0 {
                    format!("{v:<w$}", w = widths[c])
                } else {
                    format!("{v:>w$}", w = widths[c])
                }
            })
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
    for r in reports.iter().filter(|r| r.run.is_none()) {
        let what = if r.status == Status::Skipped {
            "skipped"
        } else {
            "FAILED"
        };
        println!(
            "{:<w$}  {what}: {}",
            r.mode.name(),
            r.reason.as_deref().unwrap_or("?"),
            w = widths[0]
        );
    }
    println!();
    println!("load: SETs of all keys, pipelined 200 at a time; verify: GET and byte-compare of all keys;");
    println!("x/swap and x/DRAM: requests/s relative to kernel swap and to DRAM; peak RSS: the server's VmHWM;");
    println!("lost keys: missing or corrupt at verify, plus keys missing from DBSIZE after the benchmark.");
    for r in reports {
        let Some(x) = &r.run else { continue };
        if x.damaged_keys() > 0 {
            println!();
            println!(
                "!!! DATA LOSS in {} mode: {} key(s) missing and {} corrupt at verify, {} missing after the benchmark (DBSIZE {} of {})",
                r.mode.name(),
                x.lost_keys,
                x.corrupt_keys,
                x.missing_after,
                x.dbsize_after,
                plan.keys
            );
        }
        if !x.tiermem_stats.is_empty() {
            for l in &x.tiermem_stats {
                println!("{l}");
            }
        }
        if let Some(c) = &x.cgroup {
            println!();
            println!(
                "── kernel swap: cgroup limit {} ──",
                human_bytes(plan.dram_bytes)
            );
            println!(
                "faults          {} (major {}), limit hit {} times, peak usage {}, {} in swap before shutdown",
                c.pgfault,
                c.pgmajfault,
                c.failcnt,
                human_bytes(c.max_usage_bytes),
                human_bytes(c.swap_bytes)
            );
            let pages = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
            println!(
                "swap (system)   {} pages in, {} pages out since the swapfile was enabled",
                pages(c.pswpin),
                pages(c.pswpout)
            );
        }
        if x.server_exit != "exit status 0" {
            println!(
                "{}: redis-server ended with {}",
                r.mode.name(),
                x.server_exit
            );
        }
        for n in &r.notes {
            println!("{}: note: {n}", r.mode.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_redis_benchmark_format() {
        assert_eq!(key(0), "key:000000000000");
        assert_eq!(key(12345), "key:000000012345");
    }

    #[test]
    fn values_are_deterministic_and_distinct() {
        let (mut a, mut b, mut c) = (vec![0u8; 4099], vec![0u8; 4099], vec![0u8; 4099]);
        fill_value(7, &mut a);
        fill_value(7, &mut b);
        fill_value(8, &mut c);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.iter().any(|&x| x != 0));
    }

    #[test]
    fn parses_redis_benchmark_csv() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                   \"SET\",\"35714.29\",\"0.079\",\"0.024\",\"0.063\",\"0.167\",\"0.247\",\"2.543\"\n\
                   \"GET\",\"34482.76\",\"0.082\",\"0.016\",\"0.079\",\"0.127\",\"0.183\",\"3.911\"\n";
        let (get, set) = parse_csv(csv).unwrap();
        assert_eq!(get.rps, 34482.76);
        assert_eq!(set.rps, 35714.29);
        assert_eq!(get.p99_latency_ms, Some(0.183));
        assert!(parse_csv("\"test\",\"rps\"\n\"SET\",\"1\"\n").is_err());
    }

    #[test]
    fn extracts_tiermem_summary() {
        let err = "noise\n\n── tiermem: redis-server (pid 1) ──\nbudget  1\nfaults  2\n\nafter\n";
        assert_eq!(
            tiermem_summary(err),
            vec![
                "── tiermem: redis-server (pid 1) ──",
                "budget  1",
                "faults  2"
            ]
        );
    }
}
