//! `tiermem run`: an unmodified program with its memory tiered.
//!
//! The command checks everything it can before the program starts (the
//! settings, libtiermem.so, the program itself, the backing store and
//! userfaultfd, the last two by starting and stopping a runtime here), then
//! starts the program with libtiermem.so preloaded and the resolved
//! configuration in `TIERMEM_*` variables, forwards signals to it, and exits
//! with its status. `tiermem run` never loads libtiermem.so itself.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use signal_hook::iterator::exfiltrator::WithRawSiginfo;
use signal_hook::iterator::SignalsInfo;
use tiermem_core::config::{
    ENV_BACKING, ENV_DRAM, ENV_HANDLER_THREADS, ENV_PAGE_SIZE, ENV_POLICY, MAX_PAGE_SIZE,
    MIN_BUDGET_PAGES, MIN_PAGE_SIZE,
};
use tiermem_core::cpus::{restrict_command, CpuChoice};
use tiermem_core::error_policy::ENV_ENCRYPT;
use tiermem_core::organization::OrganizationArgs;
use tiermem_core::preload_library::{self, LIB_NAME, LIB_SONAME};
use tiermem_core::{parse_size, Config, Error as CoreError, Runtime};

/// Tells libtiermem.so that it was preloaded and must interpose.
const ENV_PRELOAD: &str = "TIERMEM_PRELOAD";
const ENV_STATS: &str = "TIERMEM_STATS";
const ENV_STATS_FILE: &str = "TIERMEM_STATS_FILE";
/// Tells the library which process `tiermem run` started (see `--stats-file`).
const ENV_STATS_OWNER: &str = "TIERMEM_STATS_OWNER";
const ENV_MMAP_THRESHOLD: &str = "TIERMEM_MMAP_THRESHOLD";
const ENV_NO_INHERIT: &str = "TIERMEM_NO_INHERIT";

/// Below this a program spends its time paging its own working set in and out.
const MIN_RUN_BUDGET: u64 = 1 << 20;

/// Signals sent to `tiermem run` that the program receives too.
const FORWARDED: [libc::c_int; 9] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
    libc::SIGCONT,
    libc::SIGALRM,
];

/// Run a program with its memory tiered: a DRAM budget caches a backing store.
///
/// tiermem run starts CMD with libtiermem.so preloaded (LD_PRELOAD). The
/// library serves the program's malloc family from tiered memory, and turns
/// its large private anonymous mappings (mmap of at least the mmap
/// threshold) into tiered memory too: at most the DRAM budget of it is
/// resident, the rest lives in the backing store (an SSD file or a block
/// device) and is paged in on access through userfaultfd. The program needs
/// no change and no rebuild.
///
/// Before the program starts, tiermem run checks the settings, finds
/// libtiermem.so, finds CMD, and starts (and stops) a tiermem runtime with
/// the resolved settings, which opens the backing store and userfaultfd.
/// If anything is wrong it prints one message with the fix and does not
/// start the program, so a program is never left failing halfway.
///
/// Settings come from the flags below, then from the TIERMEM_* environment
/// variables, then from the defaults; the program receives every resolved
/// value explicitly in its environment.
///
/// Examples:
///   tiermem run --dram 2G --backing /mnt/nvme -- redis-server
///   tiermem run --dram 512M --stats -- python3 train.py --epochs 3
///   TIERMEM_DRAM=25% tiermem run -- ./analytics big.csv
#[derive(Args, Debug)]
#[command(
    verbatim_doc_comment,
    override_usage = "tiermem run [OPTIONS] [--] CMD [ARGS]...",
    after_help = "Run `tiermem run --help` for the environment variables, child processes, exit status and permissions.",
    after_long_help = AFTER_LONG_HELP
)]
pub struct RunArgs {
    /// DRAM budget: the most memory of the program's tiered allocations that
    /// is resident at once (262144, 256K, 256M, 4G, 1.5G or 25% of physical
    /// RAM). At least 1 MiB and 16 pages. [default: TIERMEM_DRAM, else 25% of
    /// physical RAM]
    #[arg(long, value_name = "SIZE")]
    dram: Option<String>,

    /// Backing store: a directory (a private, already unlinked file is
    /// created there), a regular file of mode 0600 that is empty or
    /// tiermem's, or a block device that is blank or tiermem's (see
    /// `tiermem format-store`). A file or device serves one process at a
    /// time; programs a process starts while holding it page to /var/tmp.
    /// [default: TIERMEM_BACKING, else /var/tmp]
    #[arg(long, value_name = "PATH")]
    backing: Option<String>,

    /// Page size, the unit of paging: a power of two from 4K to 2M.
    /// [default: TIERMEM_PAGE_SIZE, else 4K]
    #[arg(long, value_name = "SIZE")]
    page_size: Option<String>,

    /// Replacement policy: clock (second chance with reference detection,
    /// more turns for pages seen in use often), fifo, or s3fifo
    /// (scan-resistant). [default: TIERMEM_POLICY, else clock]
    #[arg(long, value_name = "clock|fifo|s3fifo")]
    policy: Option<String>,

    /// userfaultfd handler threads, 1 to 64, each pinned to a CPU.
    /// [default: TIERMEM_HANDLER_THREADS, else one per CPU]
    #[arg(long, value_name = "N")]
    handler_threads: Option<String>,

    /// Smallest private anonymous mmap that becomes tiered memory; smaller
    /// mappings go straight to the kernel. (The malloc family is tiered
    /// whatever the size.) [default: TIERMEM_MMAP_THRESHOLD, else 128K]
    #[arg(long, value_name = "SIZE")]
    mmap_threshold: Option<String>,

    /// Print the runtime's statistics (faults, page-ins and page-outs, clean
    /// drops, fault latency) to stderr when the program exits. Sets
    /// TIERMEM_STATS=1.
    #[arg(long)]
    stats: bool,

    /// Write the same statistics as JSON to PATH when the program exits:
    /// the envelope every tiermem result carries (schema
    /// "tiermem.run-stats/1", tiermem version, kernel, command line, host
    /// settings), the program and its pid, and every counter (times in
    /// nanoseconds, sizes in bytes). The file holds the program tiermem
    /// run started (after any exec: a wrapper script's final program).
    /// With `%p` in PATH (replaced by the pid), every other process of the
    /// run that paged writes a file of its own too. The directory must
    /// exist. Sets TIERMEM_STATS_FILE.
    #[arg(long, value_name = "PATH")]
    stats_file: Option<PathBuf>,

    /// Tier only CMD itself: programs it executes run untiered. Sets
    /// TIERMEM_NO_INHERIT=1.
    #[arg(long)]
    no_inherit: bool,

    /// Encrypt every page on its way to the backing store (AES-256-GCM,
    /// with a random key per process, locked in DRAM and never written
    /// anywhere), so the store never holds the program's memory in the
    /// clear. The tag also authenticates each page, in place of the
    /// checksum. Sets TIERMEM_ENCRYPT=on.
    #[arg(long)]
    encrypt: bool,

    /// Run CMD (and tiermem's threads) on these CPUs only, as `taskset`
    /// would: a CPU list (1, 0,2-3) or `irq`, the CPUs that take the
    /// interrupts of the backing store's device. A single-threaded program
    /// pages fastest there on a small VM: a miss then wakes no other CPU.
    /// [default: wherever the scheduler puts it]
    #[arg(long, value_name = "LIST|irq")]
    cpus: Option<CpuChoice>,

    #[command(flatten)]
    organization: OrganizationArgs,

    /// The program to run and its arguments (put them after `--`).
    #[arg(
        value_name = "CMD",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

const AFTER_LONG_HELP: &str = "\
Environment:
  TIERMEM_DRAM            DRAM budget, as --dram.
  TIERMEM_BACKING         backing store, as --backing.
  TIERMEM_BACKING_SIZE    cap on the backing store (default: its free space).
  TIERMEM_PAGE_SIZE       page size, as --page-size.
  TIERMEM_POLICY          replacement policy, as --policy.
  TIERMEM_HANDLER_THREADS handler threads, as --handler-threads.
  TIERMEM_STATS           1: print statistics at exit, as --stats.
  TIERMEM_STATS_FILE      PATH: write them as JSON at exit, as --stats-file.
  TIERMEM_MMAP_THRESHOLD  smallest tiered anonymous mmap, as --mmap-threshold.
  TIERMEM_PRESET          organization preset, as --preset.
  TIERMEM_ASSOCIATIVITY   ways per set, as --associativity.
  TIERMEM_PREFETCH        fixed prefetch degree, as --prefetch.
  TIERMEM_WRITE_POLICY    write-back or write-through, as --write-policy.
  TIERMEM_INCLUSION       inclusive or exclusive, as --inclusion.
  TIERMEM_READAHEAD       on/off: the adaptive read-ahead (when no --prefetch).
  TIERMEM_PREDICT_WRITES  on/off: once most pages read in get written, read
                          faults install pages writable (default on).
  TIERMEM_ENCRYPT         on/off: encryption at rest, as --encrypt (default off).
  TIERMEM_CHECKSUMS       on/off: a crc32c of every page, checked when it is
                          read back (default on; encryption replaces it).
  TIERMEM_IO_DEADLINE     seconds writes to the store may keep failing before
                          the program is stopped (default 60).
  TIERMEM_IO_ENGINE       io_uring (default) or psync.
  TIERMEM_IO_DEPTH        page reads in flight per handler thread (default 32).
  TIERMEM_IO_POLL         none (default), sqpoll, iopoll or hybrid (device polling
                          needs poll queues; otherwise a note and interrupts).
  TIERMEM_IDLE_SPIN_US    microseconds a fault handler keeps polling for the
                          next fault or completion before it sleeps (default
                          200; 0 sleeps at once). While the program pages, the
                          handlers keep the CPUs awake, which spares each miss
                          the wake-up of a halted CPU; they yield to any other
                          runnable thread.
  TIERMEM_WATERMARK_SCALE_FACTOR
                          free DRAM the evictor keeps, in 1/10000 of the budget.
  TIERMEM_FAULTS          handler only. signal (the faulting thread resolves its
                          own fault through SIGBUS) is refused here: the kernel
                          would not wait for evicted pages, and the program's
                          read(2) into its own memory would fail with EFAULT.
  TIERMEM_LIB             path of libtiermem.so. Default: next to the tiermem
                          binary, then ../lib/ and ../lib/tiermem/ from it.
  A flag overrides its variable. The program is started with TIERMEM_PRELOAD=1,
  every resolved TIERMEM_* setting (sizes in bytes), and libtiermem.so first in
  LD_PRELOAD (other LD_PRELOAD entries are kept after it).

Child processes:
  exec      By default a program CMD executes inherits LD_PRELOAD and the
            TIERMEM_* settings, so every executed process (a shell's commands,
            a server's workers started by exec) gets its own tiermem runtime,
            its own DRAM budget of the same size (N processes may hold up to
            N budgets of DRAM) and, with a directory as backing store, its own
            backing file. With --no-inherit, libtiermem.so removes
            LD_PRELOAD and TIERMEM_PRELOAD from CMD's environment at start, and
            what CMD executes runs untiered.
  fork      A child forked without exec gets its own pager and its own DRAM
            budget, and sees its memory exactly as it was at fork time; later
            writes in either process are invisible to the other, as with
            ordinary memory.
  setuid    The dynamic loader ignores LD_PRELOAD for setuid and setgid
            programs; they run untiered.

Signals:
  SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT and
  SIGALRM sent to tiermem run are passed on to the program. Signals the
  terminal sends to the whole foreground process group (Ctrl-C, Ctrl-\\, a
  window resize, a hang-up) reach the program directly and are not sent twice.

Exit status:
  The program's exit status; 128+N if a signal N killed it (as a shell
  reports it). 1 if tiermem run stopped before starting the program because of
  a bad setting, a missing libtiermem.so, a backing store it cannot use,
  userfaultfd not being permitted, or a budget too small; 126 if CMD is found
  but cannot be executed; 127 if CMD is not found.

Permissions:
  tiermem needs full userfaultfd (not the user-mode-only kind). That works as
  root, with CAP_SYS_PTRACE, after `sudo sysctl -w vm.unprivileged_userfaultfd=1`,
  or with read/write access to /dev/userfaultfd
  (e.g. `sudo setfacl -m u:$USER:rw /dev/userfaultfd`). When none holds,
  tiermem run says so before starting the program.";

/// Why `tiermem run` stops without a program status: the message and our
/// exit status.
#[derive(Debug)]
struct Stop {
    code: i32,
    message: String,
}

impl Stop {
    fn new(code: i32, message: impl Into<String>) -> Stop {
        Stop {
            code,
            message: message.into(),
        }
    }
}

impl From<anyhow::Error> for Stop {
    fn from(e: anyhow::Error) -> Stop {
        Stop::new(1, format!("{e:#}"))
    }
}

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
    if let Some(path) = &args.stats_file {
        cmd.env(ENV_STATS_FILE, stats_file_template(path)?);
        cmd.env(ENV_STATS_OWNER, std::process::id().to_string());
    }
    if let Some(t) = mmap_threshold {
        cmd.env(ENV_MMAP_THRESHOLD, t);
    }
    if args.no_inherit {
        cmd.env(ENV_NO_INHERIT, "1");
    }
    if let Some(choice) = &args.cpus {
        let (cpus, _) = choice
            .resolve(&config.backing)
            .map_err(|e| Stop::new(2, format!("--cpus: {e}")))?;
        restrict_command(&mut cmd, &cpus);
    }
    spawn_and_wait(cmd, argv0)
}

/// Where a setting's value came from, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Flag(&'static str),
    Env(&'static str),
    Default,
}

impl Source {
    fn describe(self, value: &str) -> String {
        match self {
            Source::Flag(flag) => format!("{flag} {value}"),
            Source::Env(var) => format!("{var}={value}"),
            Source::Default => "the default".to_string(),
        }
    }
}

/// The flag that sets each core setting.
fn flag_for(args: &RunArgs, var: &str) -> Option<(&'static str, String)> {
    let (flag, value) = match var {
        ENV_DRAM => ("--dram", &args.dram),
        ENV_BACKING => ("--backing", &args.backing),
        ENV_PAGE_SIZE => ("--page-size", &args.page_size),
        ENV_POLICY => ("--policy", &args.policy),
        ENV_HANDLER_THREADS => ("--handler-threads", &args.handler_threads),
        ENV_MMAP_THRESHOLD => ("--mmap-threshold", &args.mmap_threshold),
        ENV_ENCRYPT if args.encrypt => return Some(("--encrypt", "on".to_string())),
        _ => return args.organization.flag_for(var),
    };
    value.clone().map(|v| (flag, v))
}

/// A setting's value and its source: the flag, else the environment.
fn lookup(
    args: &RunArgs,
    env: &dyn Fn(&str) -> Option<String>,
    var: &'static str,
) -> Option<(String, Source)> {
    if let Some((flag, value)) = flag_for(args, var) {
        return Some((value, Source::Flag(flag)));
    }
    env(var).map(|v| (v, Source::Env(var)))
}

fn source_of(args: &RunArgs, env: &dyn Fn(&str) -> Option<String>, var: &'static str) -> Source {
    lookup(args, env, var).map_or(Source::Default, |(_, s)| s)
}

/// The configuration the program will run with: flags over `TIERMEM_*`
/// variables over defaults, with the core's checks and ours.
fn resolve_config(args: &RunArgs, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, Stop> {
    let get = |var: &str| flag_for(args, var).map(|(_, v)| v).or_else(|| env(var));
    // A budget below our floor gets our message (with the floor), even when
    // the core would also refuse it for holding fewer than 16 pages.
    precheck_budget(args, env)?;
    let invalid_setting = |e| match e {
        CoreError::InvalidSetting {
            setting,
            value,
            expected,
        } => match flag_for(args, setting) {
            Some((flag, _)) => Stop::new(
                1,
                format!("invalid {setting} '{value}' (from {flag}): {expected}"),
            ),
            None => Stop::new(1, format!("invalid {setting} '{value}': {expected}")),
        },
        other => Stop::new(1, other.to_string()),
    };
    let config = Config::from_lookup(get)
        .and_then(|c| c.check_transparent().map(|()| c))
        .map_err(invalid_setting)?;
    let source = source_of(args, env, ENV_DRAM);
    let shown = lookup(args, env, ENV_DRAM).map_or_else(String::new, |(v, _)| v);
    check_budget(config.dram_budget, config.page_size as u64, source, &shown)?;
    Ok(config)
}

/// The smallest budget `tiermem run` accepts at this page size.
fn budget_floor(page_size: u64) -> u64 {
    MIN_RUN_BUDGET.max(page_size.saturating_mul(MIN_BUDGET_PAGES))
}

fn check_budget(budget: u64, page_size: u64, source: Source, text: &str) -> Result<(), Stop> {
    let floor = budget_floor(page_size);
    if budget >= floor {
        return Ok(());
    }
    Err(Stop::new(
        1,
        format!(
            "a DRAM budget of {} ({}) is too small for a program to make progress: \
             the minimum is {} (at least 1 MiB and {MIN_BUDGET_PAGES} pages of {}).\n\
             Fix: give --dram {} or more, e.g. --dram 256M (or set TIERMEM_DRAM).",
            exact_size(budget),
            source.describe(text),
            exact_size(floor),
            exact_size(page_size),
            short_size(floor),
        ),
    ))
}

/// `bytes` in the largest binary unit that divides it: 8 KiB, 1 MiB, 1000 B.
fn exact_size(bytes: u64) -> String {
    let (value, unit) = split_unit(bytes);
    format!("{value} {}", ["B", "KiB", "MiB", "GiB"][unit])
}

/// A size as a --dram value: 1M, 32M, 640K.
fn short_size(bytes: u64) -> String {
    let (value, unit) = split_unit(bytes);
    format!("{value}{}", ["", "K", "M", "G"][unit])
}

/// `bytes` as value and unit index (0 = B .. 3 = GiB), exactly.
fn split_unit(bytes: u64) -> (u64, usize) {
    if bytes == 0 {
        return (0, 0);
    }
    let unit = (bytes.trailing_zeros() / 10).min(3) as usize;
    (bytes >> (unit * 10), unit)
}

/// The budget check on the values as written, before the core sees them. A
/// value the core would reject for its syntax is left to the core.
fn precheck_budget(args: &RunArgs, env: &dyn Fn(&str) -> Option<String>) -> Result<(), Stop> {
    let Some((text, source)) = lookup(args, env, ENV_DRAM) else {
        return Ok(());
    };
    let Ok(budget) = parse_size(ENV_DRAM, &text) else {
        return Ok(());
    };
    let page_size = match lookup(args, env, ENV_PAGE_SIZE) {
        None => MIN_PAGE_SIZE as u64,
        Some((p, _)) => match parse_size(ENV_PAGE_SIZE, &p) {
            Ok(p) => p.resolve(),
            Err(_) => return Ok(()),
        },
    };
    let page_ok = page_size.is_power_of_two()
        && (MIN_PAGE_SIZE as u64..=MAX_PAGE_SIZE as u64).contains(&page_size);
    if !page_ok {
        return Ok(());
    }
    check_budget(budget.resolve(), page_size, source, &text)
}

/// The mmap threshold to give the program, if the flag was given; a value
/// from the environment is checked too (the program inherits it as is).
fn resolve_mmap_threshold(
    args: &RunArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, Stop> {
    let Some((text, source)) = lookup(args, env, ENV_MMAP_THRESHOLD) else {
        return Ok(None);
    };
    if let Err(e) = parse_size(ENV_MMAP_THRESHOLD, &text) {
        let msg = match (e, source) {
            (
                CoreError::InvalidSetting {
                    setting,
                    value,
                    expected,
                },
                Source::Flag(flag),
            ) => format!("invalid {setting} '{value}' (from {flag}): {expected}"),
            (e, _) => e.to_string(),
        };
        return Err(Stop::new(1, msg));
    }
    Ok(matches!(source, Source::Flag(_)).then_some(text))
}

/// Finds CMD as a shell would: a name with a slash as is, else along PATH.
fn resolve_command(cmd: &OsStr, path_var: Option<OsString>) -> Result<PathBuf, Stop> {
    let shown = cmd.to_string_lossy();
    if cmd.is_empty() {
        return Err(Stop::new(127, format!("{shown}: command not found")));
    }
    if cmd.as_bytes().contains(&b'/') {
        let path = PathBuf::from(cmd);
        return match std::fs::metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Stop::new(
                127,
                format!("{shown}: No such file or directory"),
            )),
            Err(e) => Err(Stop::new(126, format!("{shown}: {e}"))),
            Ok(m) if m.is_dir() => Err(Stop::new(126, format!("{shown}: Is a directory"))),
            Ok(_) if !is_executable(&path) => {
                Err(Stop::new(126, format!("{shown}: Permission denied")))
            }
            Ok(_) => Ok(path),
        };
    }
    // execvp's default search path when PATH is unset.
    let path_var = path_var.unwrap_or_else(|| OsString::from("/bin:/usr/bin"));
    let mut denied = None;
    for dir in path_var.as_bytes().split(|b| *b == b':') {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(OsStr::from_bytes(dir))
        };
        let candidate = dir.join(cmd);
        match std::fs::metadata(&candidate) {
            Ok(m) if m.is_file() => {
                if is_executable(&candidate) {
                    return Ok(candidate);
                }
                denied.get_or_insert(candidate);
            }
            _ => {}
        }
    }
    match denied {
        Some(p) => Err(Stop::new(
            126,
            format!("{}: Permission denied", p.display()),
        )),
        None => Err(Stop::new(127, format!("{shown}: command not found"))),
    }
}

fn is_executable(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path; access only reads it.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
}

/// The `--stats-file` path as the library gets it: absolute (the program
/// may change directory before it exits), in a directory that exists.
fn stats_file_template(path: &Path) -> Result<OsString, Stop> {
    let bad = |why: String| Stop::new(2, format!("--stats-file {}: {why}", path.display()));
    if path.as_os_str().is_empty() || path.file_name().is_none() {
        return Err(bad("names no file".into()));
    }
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("."),
    };
    let dir = dir.canonicalize().map_err(|e| {
        bad(format!(
            "its directory {} is not usable: {e}",
            dir.display()
        ))
    })?;
    if !dir.is_dir() {
        return Err(bad(format!("{} is not a directory", dir.display())));
    }
    let name = path.file_name().unwrap_or_default();
    Ok(dir.join(name).into_os_string())
}

/// LD_PRELOAD for the program: `lib` first, then the existing entries minus
/// any other libtiermem.so (two interposers in one process cannot work).
fn ld_preload(lib: &Path, existing: Option<&OsStr>) -> OsString {
    let mut out = lib.as_os_str().as_bytes().to_vec();
    if let Some(existing) = existing {
        for entry in existing
            .as_bytes()
            .split(|b| matches!(b, b':' | b' ' | b'\t' | b'\n'))
            .filter(|e| !e.is_empty())
        {
            let name = Path::new(OsStr::from_bytes(entry)).file_name();
            if name == Some(OsStr::new(LIB_NAME)) || name == Some(OsStr::new(LIB_SONAME)) {
                continue;
            }
            out.push(b':');
            out.extend_from_slice(entry);
        }
    }
    OsString::from_vec(out)
}

/// Refuses a backing path whose directory does not exist, before the core
/// would try to create a file there.
fn check_backing_path(backing: &Path, from_flag: bool) -> Result<(), Stop> {
    let how = if from_flag {
        "--backing"
    } else {
        "--backing (or TIERMEM_BACKING)"
    };
    match std::fs::metadata(backing) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        _ => return Ok(()),
    }
    let parent = match backing.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if parent.is_dir() {
        return Ok(());
    }
    Err(Stop::new(
        1,
        format!(
            "backing store {}: neither it nor its directory {} exists.\n\
             Fix: create the directory (mkdir -p {}) or give {how} an existing directory, \
             a file of mode 0600 or a block device.",
            backing.display(),
            parent.display(),
            backing.display(),
        ),
    ))
}

/// Starts and stops a runtime with `config`: opens the backing store and
/// userfaultfd exactly as the program's runtime will.
fn preflight_runtime(config: &Config) -> Result<(), Stop> {
    // The program's own runtime repeats any warning (e.g. no O_DIRECT on the
    // backing filesystem); keep this trial run from printing it twice.
    let started = with_stderr_silenced(|| Runtime::new(config.clone()).map(drop));
    started.map_err(|e| {
        let msg = match &e {
            CoreError::Backing { .. } => format!(
                "{e}\nFix: give --backing (or TIERMEM_BACKING) a directory this user can write, \
                 a file of its own of mode 0600 that is empty or that tiermem wrote before (not a symbolic link), or a block device that is blank, or given to tiermem with `tiermem format-store DEV`."
            ),
            CoreError::OutOfBackingSpace { .. } => format!(
                "{e}\nFix: free space on the backing store, or give --backing a larger one."
            ),
            CoreError::UffdNotPermitted { .. } | CoreError::UffdFeatureMissing { .. } => {
                e.to_string()
            }
            _ => format!("cannot start tiermem with these settings: {e}"),
        };
        Stop::new(1, msg)
    })
}

/// Runs `f` with fd 2 pointed at /dev/null. A panic inside `f` gets stderr
/// back before its message is printed.
fn with_stderr_silenced<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: dup of a descriptor number; failure is reported as -1.
    let saved = unsafe { libc::dup(2) };
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null");
    let (Ok(null), true) = (null, saved >= 0) else {
        if saved >= 0 {
            // SAFETY: `saved` is our own descriptor from dup above.
            unsafe { libc::close(saved) };
        }
        return f();
    };
    let restore = move || {
        // SAFETY: `saved` stays open until after the last restore; dup2 onto
        // fd 2 only replaces our own redirection.
        unsafe { libc::dup2(saved, 2) };
    };
    let previous = Arc::new(std::panic::take_hook());
    let hook_previous = Arc::clone(&previous);
    std::panic::set_hook(Box::new(move |info| {
        restore();
        hook_previous(info);
    }));
    // SAFETY: both are open descriptors owned by this function.
    unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 2) };
    let out = f();
    restore();
    let _ = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| previous(info)));
    // SAFETY: `saved` is our own descriptor; fd 2 no longer refers to it.
    unsafe { libc::close(saved) };
    out
}

/// Starts the program, forwards signals to it until it exits, and returns
/// its exit status as a shell reports it.
fn spawn_and_wait(mut cmd: Command, argv0: &OsStr) -> Result<i32, Stop> {
    // Registered before the program starts, so that no signal meant for it
    // can kill tiermem run first and leave the program running alone.
    let mut signals =
        SignalsInfo::<WithRawSiginfo>::new(FORWARDED.iter().copied().chain([libc::SIGCHLD]))
            .context("installing the signal handlers")?;
    let mut child = cmd.spawn().map_err(|e| {
        let shown = argv0.to_string_lossy();
        match e.kind() {
            io::ErrorKind::NotFound => Stop::new(127, format!("{shown}: {e}")),
            _ => Stop::new(126, format!("{shown}: cannot execute: {e}")),
        }
    })?;
    let pid = child.id() as libc::pid_t;
    loop {
        // Only this thread reaps the child, and it signals the child only
        // before reaping it: the pid cannot have been reused.
        if let Some(status) = child.try_wait().context("waiting for the program")? {
            return Ok(shell_status(status));
        }
        for info in signals.wait() {
            if info.si_signo == libc::SIGCHLD {
                continue;
            }
            let sender = sender_pid(&info);
            // SAFETY: getpgid/getpgrp only read process attributes; `pid`
            // is our unreaped child.
            let same_group = unsafe { libc::getpgid(pid) == libc::getpgrp() };
            if should_forward(info.si_code, sender, pid, same_group) {
                // SAFETY: `pid` is our child, not yet reaped (see above).
                unsafe { libc::kill(pid, info.si_signo) };
            }
        }
    }
}

/// The sending process of a signal sent by kill(2), sigqueue(3) or tgkill(2).
fn sender_pid(info: &libc::siginfo_t) -> Option<libc::pid_t> {
    if matches!(
        info.si_code,
        libc::SI_USER | libc::SI_QUEUE | libc::SI_TKILL
    ) {
        // SAFETY: for these codes the kernel fills in the sender's pid.
        Some(unsafe { info.si_pid() })
    } else {
        None
    }
}

/// Whether a signal tiermem run received should go to the program.
///
/// The kernel sends terminal signals (Ctrl-C, Ctrl-\, SIGWINCH, hang-up) to
/// the whole foreground process group with a positive si_code (SI_KERNEL):
/// the program already has it if it is in our group. A signal from the
/// program itself (kill(0, ...) reaches us too) is not echoed back to it.
fn should_forward(
    si_code: libc::c_int,
    sender: Option<libc::pid_t>,
    child: libc::pid_t,
    child_in_our_group: bool,
) -> bool {
    if si_code > 0 {
        return !child_in_our_group;
    }
    sender != Some(child)
}

fn shell_status(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn args(flags: &[(&str, &str)]) -> RunArgs {
        let get = |name: &str| {
            flags
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        RunArgs {
            dram: get("dram"),
            backing: get("backing"),
            page_size: get("page-size"),
            policy: get("policy"),
            handler_threads: get("handler-threads"),
            mmap_threshold: get("mmap-threshold"),
            stats: false,
            stats_file: None,
            no_inherit: false,
            encrypt: false,
            cpus: None,
            organization: OrganizationArgs {
                preset: get("preset"),
                associativity: get("associativity"),
                prefetch: get("prefetch"),
                write_policy: get("write-policy"),
                inclusion: get("inclusion"),
            },
            command: vec!["true".into()],
        }
    }

    #[test]
    fn organization_flags_override_the_preset_and_the_environment() {
        use tiermem_core::{Inclusion, WritePolicy};
        let c = config(
            &[("preset", "memory-mode"), ("associativity", "4")],
            &[
                ("TIERMEM_WRITE_POLICY", "write-through"),
                ("TIERMEM_PREFETCH", "2"),
            ],
        )
        .unwrap();
        let o = c.organization;
        assert_eq!(o.associativity, 4, "the flag beats the preset");
        assert_eq!(o.prefetch, Some(2), "the variable beats the preset");
        assert_eq!(o.write_policy, WritePolicy::WriteThrough);
        assert_eq!(o.inclusion, Inclusion::Inclusive);
        let env = c.to_env();
        assert!(env.contains(&("TIERMEM_ASSOCIATIVITY", "4".to_string())));
        let e = config(&[("associativity", "many")], &[]).unwrap_err();
        assert!(
            e.message
                .contains("TIERMEM_ASSOCIATIVITY 'many' (from --associativity)"),
            "{}",
            e.message
        );
        let e = config(&[("inclusion", "exclusive"), ("write-policy", "wt")], &[]).unwrap_err();
        assert!(e.message.contains("inclusive"), "{}", e.message);
    }

    fn config(flags: &[(&str, &str)], env: &[(&str, &str)]) -> Result<Config, Stop> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve_config(&args(flags), &|k| env.get(k).cloned())
    }

    #[test]
    fn flags_override_environment() {
        let c = config(
            &[("dram", "64M"), ("policy", "fifo")],
            &[
                (ENV_DRAM, "32M"),
                (ENV_PAGE_SIZE, "8K"),
                (ENV_POLICY, "clock"),
            ],
        )
        .unwrap();
        assert_eq!(c.dram_budget, 64 << 20);
        assert_eq!(c.page_size, 8 << 10);
        assert_eq!(c.policy, tiermem_core::PolicyKind::Fifo);
    }

    #[test]
    fn bad_values_name_the_flag_and_the_form() {
        let e = config(&[("dram", "lots")], &[]).unwrap_err();
        assert_eq!(e.code, 1);
        assert!(
            e.message.contains("TIERMEM_DRAM 'lots' (from --dram)"),
            "{}",
            e.message
        );
        assert!(e.message.contains("256M"), "{}", e.message);
        let e = config(&[], &[(ENV_POLICY, "lru")]).unwrap_err();
        assert!(
            e.message.contains("invalid TIERMEM_POLICY 'lru'"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("from --"), "{}", e.message);
    }

    #[test]
    fn budget_floor_is_one_mib_and_sixteen_pages() {
        for dram in ["8K", "512K", "1048575"] {
            let e = config(&[("dram", dram)], &[]).unwrap_err();
            assert!(e.message.contains("too small"), "{}", e.message);
            assert!(
                e.message.contains("1.00 MiB") || e.message.contains("1 MiB"),
                "{}",
                e.message
            );
            assert!(e.message.contains("--dram 1M"), "{}", e.message);
        }
        assert!(config(&[("dram", "1M")], &[]).is_ok());
        let e = config(&[("dram", "16M"), ("page-size", "2M")], &[]).unwrap_err();
        assert!(e.message.contains("--dram 32M"), "{}", e.message);
        let e = config(&[], &[(ENV_DRAM, "100K")]).unwrap_err();
        assert!(e.message.contains("TIERMEM_DRAM=100K"), "{}", e.message);
    }

    #[test]
    fn sizes_are_shown_exactly() {
        assert_eq!(exact_size(8192), "8 KiB");
        assert_eq!(exact_size(1 << 20), "1 MiB");
        assert_eq!(exact_size(100_000), "100000 B");
        assert_eq!(exact_size(3 << 30), "3 GiB");
        assert_eq!(short_size(32 << 20), "32M");
        assert_eq!(short_size(640 << 10), "640K");
        assert_eq!(short_size(1 << 40), "1024G");
    }

    #[test]
    fn mmap_threshold_is_checked_and_passed_only_from_the_flag() {
        let none = |_: &str| None;
        assert_eq!(
            resolve_mmap_threshold(&args(&[("mmap-threshold", "64K")]), &none).unwrap(),
            Some("64K".to_string())
        );
        let e = resolve_mmap_threshold(&args(&[("mmap-threshold", "big")]), &none).unwrap_err();
        assert!(e
            .message
            .contains("TIERMEM_MMAP_THRESHOLD 'big' (from --mmap-threshold)"));
        let env = |k: &str| (k == ENV_MMAP_THRESHOLD).then(|| "1M".to_string());
        assert_eq!(resolve_mmap_threshold(&args(&[]), &env).unwrap(), None);
    }

    #[test]
    fn ld_preload_puts_ours_first_and_drops_other_copies() {
        let lib = Path::new("/opt/tm/libtiermem.so");
        assert_eq!(ld_preload(lib, None), "/opt/tm/libtiermem.so");
        assert_eq!(
            ld_preload(
                lib,
                Some(OsStr::new("/a/liba.so /old/libtiermem.so::/b/libb.so"))
            ),
            "/opt/tm/libtiermem.so:/a/liba.so:/b/libb.so"
        );
    }

    #[test]
    fn commands_resolve_like_a_shell() {
        let path = Some(OsString::from("/nonexistent:/bin:/usr/bin"));
        assert!(resolve_command(OsStr::new("sh"), path.clone()).is_ok());
        let e = resolve_command(OsStr::new("no-such-cmd-xyz"), path.clone()).unwrap_err();
        assert_eq!(e.code, 127);
        assert_eq!(e.message, "no-such-cmd-xyz: command not found");
        assert_eq!(
            resolve_command(OsStr::new("/"), path.clone())
                .unwrap_err()
                .code,
            126
        );
        assert_eq!(
            resolve_command(OsStr::new("./nope/x"), path)
                .unwrap_err()
                .code,
            127
        );
    }

    #[test]
    fn terminal_signals_are_not_sent_twice() {
        const SI_KERNEL: i32 = 0x80;
        assert!(!should_forward(SI_KERNEL, None, 100, true));
        assert!(should_forward(SI_KERNEL, None, 100, false));
        assert!(should_forward(libc::SI_USER, Some(7), 100, true));
        assert!(!should_forward(libc::SI_USER, Some(100), 100, true));
    }
}
