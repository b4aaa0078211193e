//! The command line of `tiermem run`: its flags and help text.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;
use tiermem_core::cpus::CpuChoice;
use tiermem_core::organization::OrganizationArgs;

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
    pub(super) dram: Option<String>,

    /// Backing store: a directory (a private, already unlinked file is
    /// created there), a regular file of mode 0600 that is empty or
    /// tiermem's, or a block device that is blank or tiermem's (see
    /// `tiermem format-store`). A file or device serves one process at a
    /// time; programs a process starts while holding it page to /var/tmp.
    /// [default: TIERMEM_BACKING, else /var/tmp]
    #[arg(long, value_name = "PATH")]
    pub(super) backing: Option<String>,

    /// Page size, the unit of paging: a power of two from 4K to 2M.
    /// [default: TIERMEM_PAGE_SIZE, else 4K]
    #[arg(long, value_name = "SIZE")]
    pub(super) page_size: Option<String>,

    /// Replacement policy: clock (second chance with reference detection,
    /// more turns for pages seen in use often), fifo, or s3fifo
    /// (scan-resistant). [default: TIERMEM_POLICY, else clock]
    #[arg(long, value_name = "clock|fifo|s3fifo")]
    pub(super) policy: Option<String>,

    /// userfaultfd handler threads, 1 to 64, each pinned to a CPU.
    /// [default: TIERMEM_HANDLER_THREADS, else one per CPU]
    #[arg(long, value_name = "N")]
    pub(super) handler_threads: Option<String>,

    /// Smallest private anonymous mmap that becomes tiered memory; smaller
    /// mappings go straight to the kernel. (The malloc family is tiered
    /// whatever the size.) [default: TIERMEM_MMAP_THRESHOLD, else 128K]
    #[arg(long, value_name = "SIZE")]
    pub(super) mmap_threshold: Option<String>,

    /// Print the runtime's statistics (faults, page-ins and page-outs, clean
    /// drops, fault latency) to stderr when the program exits. Sets
    /// TIERMEM_STATS=1.
    #[arg(long)]
    pub(super) stats: bool,

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
    pub(super) stats_file: Option<PathBuf>,

    /// Tier only CMD itself: programs it executes run untiered. Sets
    /// TIERMEM_NO_INHERIT=1.
    #[arg(long)]
    pub(super) no_inherit: bool,

    /// Leave every memfd to the kernel. By default a memfd CMD creates
    /// close-on-exec and maps shared and read-write (QEMU's
    /// memory-backend-memfd guest RAM) is tiered while its descriptor
    /// stays in CMD's hands, and moves into the file, untiered, the moment
    /// the descriptor is read, written, duplicated or sent, the file is
    /// mapped again, or a child forks with the mapping (said on stderr).
    /// Sets TIERMEM_MEMFD=off.
    #[arg(long)]
    pub(super) untiered_memfd: bool,

    /// Encrypt every page on its way to the backing store (AES-256-GCM,
    /// with a random key per process, locked in DRAM and never written
    /// anywhere), so the store never holds the program's memory in the
    /// clear. The tag also authenticates each page, in place of the
    /// checksum. Sets TIERMEM_ENCRYPT=on.
    #[arg(long)]
    pub(super) encrypt: bool,

    /// Run CMD (and tiermem's threads) on these CPUs only, as `taskset`
    /// would: a CPU list (1, 0,2-3) or `irq`, the CPUs that take the
    /// interrupts of the backing store's device. A single-threaded program
    /// pages fastest there on a small VM: a miss then wakes no other CPU.
    /// [default: wherever the scheduler puts it]
    #[arg(long, value_name = "LIST|irq")]
    pub(super) cpus: Option<CpuChoice>,

    #[command(flatten)]
    pub(super) organization: OrganizationArgs,

    /// The program to run and its arguments (put them after `--`).
    #[arg(
        value_name = "CMD",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub(super) command: Vec<OsString>,
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
                          faults (and, on a score of their own, read-ahead
                          windows) install pages writable (default on).
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
  every resolved TIERMEM_* setting (sizes in bytes), libtiermem.so first in
  LD_PRELOAD (other LD_PRELOAD entries are kept after it), and madvdontneed=0
  added to GODEBUG (see Go programs).

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

Go programs:
  A Go program is tiered when it is built with cgo (its runtime then maps its
  heap through the C library); one built without cgo is statically linked,
  and tiermem run refuses it (exit status 126). CGO_ENABLED=1 and an
  `import _ \"runtime/cgo\"` make a pure Go program one built with cgo.
  Go's runtime returns memory with madvise system calls of its own, which
  tiermem does not see, and from Go 1.26 it skips clearing that memory when
  it reuses it, counting on the kernel's zeros, which tiermem cannot give a
  page that was out of DRAM. tiermem run therefore adds madvdontneed=0 to
  GODEBUG (other settings are kept): Go then returns memory with MADV_FREE
  and clears it itself. A GODEBUG that already sets madvdontneed is left as
  it is; libtiermem.so warns on stderr when a Go program starts without
  madvdontneed=0. Programs that are not written in Go ignore the variable.

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
