//! `tiermem doctor`: checks that a host is set up for tiermem, one line
//! per check, each PASS, WARN or FAIL with a one-line fix.
//!
//! Each check is a pure function over values read from the machine (its
//! `*Facts`), so the unit tests cover every outcome without the machine's
//! help. The values come through a [`tree::Tree`]: `/` on a real run, a
//! fake tree of `proc`, `sys` and `dev` under the hidden `--root` in the
//! tests, where the probes that only the live machine can answer (opening
//! a userfaultfd, setting up an io_uring, O_DIRECT) are derived from the
//! files instead and say so.

mod backing;
mod check;
mod direct_io;
mod fs;
mod idle;
mod io_uring;
mod library;
mod limits;
mod queue;
mod render;
mod swap;
mod tree;
mod uffd;

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

pub use check::{Check, Status};
pub use render::SCHEMA;

use tree::{Identity, Tree};

const LONG_ABOUT: &str = "\
Check that this host is set up for tiermem: one line per check, each PASS,
WARN or FAIL, with a one-line fix after every WARN and FAIL, then a summary.
The exit code is 1 when any check fails, else 0: a FAIL is something tiermem
cannot run without, a WARN something it works around at a cost the line
names. Nothing is changed: the probes use throwaway descriptors and an
unnamed file that vanishes with them.

The checks, in order:

  userfaultfd     Whether this user may open a full userfaultfd (tiermem
                  never uses the user-mode-only kind, with which read(2)
                  into a missing page fails). The syscall is allowed with
                  CAP_SYS_PTRACE (CapEff in /proc/self/status, bit 19) or
                  vm.unprivileged_userfaultfd=1; /dev/userfaultfd (Linux
                  6.1+) is allowed to whoever may read and write it. Both
                  are tried. FAIL when neither works; the fix names the
                  sysctl and the device.
  uffd_features   The kernel (/proc/sys/kernel/osrelease) and the
                  userfaultfd features, read with UFFDIO_API from a
                  throwaway userfaultfd, or derived from the version when
                  none can be opened. FAIL without WP (5.7; dirty
                  tracking) or THREAD_ID; WARN without SIGBUS (signal
                  delivery), POISON (6.6; a page lost to a read error
                  gets SIGBUS) or MOVE (6.8; eviction that respects
                  asynchronous I/O). MINOR is reported.
  io_uring        Whether a 2-entry io_uring can be set up, and
                  kernel.io_uring_disabled. WARN when not: tiermem then
                  reads pages with pread, one at a time per handler.
  memlock         RLIMIT_MEMLOCK (/proc/self/limits) against what a run
                  locks: each handler thread's io_uring read buffers
                  (2 MiB at 4 KiB pages, one handler per CPU) and
                  --encrypt's keys (64 KiB). CAP_IPC_LOCK lifts the limit.
                  WARN below that: handlers read into unregistered
                  buffers, and under 64 KiB --encrypt refuses to start.
  max_map_count   vm.max_map_count. WARN below the kernel default, 65530:
                  every tiered region is a mapping of its own, so a
                  program may run out of mappings under tiermem.
  backing_store   The backing store: --backing, else TIERMEM_BACKING, else
                  /var/tmp. FAIL when tiermem would refuse it (cannot
                  create files there; a file that is a link, another
                  user's or readable by others; a block device that is
                  mounted or swap). WARN on tmpfs (evicted pages stay in
                  RAM), copy-on-write or compressing filesystems (btrfs,
                  zfs, bcachefs), overlayfs, FUSE and network filesystems.
  o_direct        One aligned 4 KiB O_DIRECT write and read-back of an
                  unnamed file in the store's directory (a named file or
                  device is only read). WARN where the filesystem refuses
                  O_DIRECT or serves it from the page cache (statx gives
                  no direct I/O alignment, as ext4 data=journal does):
                  tiermem then syncs every batch it writes.
  free_space      Free space under the store (statvfs): WARN under 2 GiB
                  (a default tiermem bench writes up to 1 GiB to the store
                  and as much to kernel swap's swapfile), FAIL under
                  64 MiB. For a block device, its size.
  device_queue    The queue of the disk under the store (st_dev ->
                  /sys/dev/block/MAJ:MIN, a partition's parent): scheduler,
                  nr_requests, io_poll, and nvme's or virtio_blk's
                  poll_queues. Polling trades CPU for microseconds of
                  latency and is optional, so a disk without poll queues
                  passes. WARN when TIERMEM_IO_POLL=iopoll|hybrid meets a
                  queue without poll queues, on bfq for a non-rotational
                  disk, or when nr_requests is below TIERMEM_IO_DEPTH.
  idle_halt       On a VM guest (the hypervisor CPU flag, or the DMI
                  vendor): the cpuidle driver, and with haltpoll,
                  guest_halt_poll_ns. WARN when it is 0: idle vCPUs halt at
                  once, so every wake-up goes through the host (about
                  25 us on the test VM). tiermem's idle spin
                  (TIERMEM_IDLE_SPIN_US, 200 us) keeps its handlers awake
                  while a program pages; halt polling fixes it for all.
  swap_settings   THP, vm.swappiness and zswap: reported, as the
                  kernel-swap baseline of tiermem bench runs with them.
                  WARN only where the kernel has no swap at all.
  cgroup          The memory cgroup the kernel-swap baseline uses, found as
                  it finds it: a v1 memory hierarchy where one is mounted,
                  else cgroup2 whose cgroup.controllers lists memory. WARN
                  without either (the baseline cannot run; tiermem can).
  libtiermem      Where libtiermem.so is, by the lookup every command uses
                  (TIERMEM_LIB, next to the binary, ../lib). WARN when it
                  is missing: tiermem run, probe --target tiermem and
                  bench-redis preload it.

The settings tiermem reads from the environment (TIERMEM_BACKING,
TIERMEM_IO_POLL, TIERMEM_IO_DEPTH, TIERMEM_IDLE_SPIN_US,
TIERMEM_HANDLER_THREADS, TIERMEM_LIB) are taken into account, so run doctor
in the environment the program will run in.";

const EXAMPLES: &str = "\
Examples:
  tiermem doctor
  tiermem doctor --backing /mnt/nvme
  tiermem doctor --json | jq '.checks[] | select(.status != \"pass\")'";

/// Arguments of `tiermem doctor`.
#[derive(Args, Debug)]
#[command(
    about = "Check that this host is set up for tiermem: one line per check, with fixes",
    long_about = LONG_ABOUT,
    after_long_help = EXAMPLES
)]
pub struct DoctorArgs {
    /// The backing store to check: a directory, a file or a block device.
    /// [default: TIERMEM_BACKING, else /var/tmp]
    #[arg(long, value_name = "PATH")]
    pub backing: Option<PathBuf>,

    /// Print one JSON object on stdout (schema tiermem.doctor/1): the
    /// envelope, every check as {name, status, detail, fix}, and counts.
    #[arg(long)]
    pub json: bool,

    /// Read /proc, /sys and /dev under this directory instead of / (for
    /// tests); the probes that need the live machine are derived instead.
    #[arg(long, value_name = "DIR", default_value = "/", hide = true)]
    pub root: PathBuf,
}

/// Runs `tiermem doctor`; returns the process exit code.
pub fn run(args: &DoctorArgs) -> anyhow::Result<i32> {
    if !args.root.is_dir() {
        anyhow::bail!("--root {} is not a directory", args.root.display());
    }
    let tree = Tree::new(&args.root);
    let target = backing::Target::resolve(&tree, args.backing.as_deref());
    let backing_shown = target.shown.display().to_string();
    let checks = collect(&tree, target);
    let counts = render::Counts::of(&checks);
    if args.json {
        let root = args.root.display().to_string();
        let report =
            render::json(&checks, &root, &backing_shown).context("writing the report as JSON")?;
        let text = serde_json::to_string_pretty(&report).context("writing the report as JSON")?;
        println!("{text}");
    } else {
        let root = args.root.display().to_string();
        let derived = (!tree.is_live()).then_some(root.as_str());
        print!("{}", render::text(&checks, derived));
    }
    Ok(counts.exit_code())
}

/// Every check, in the order of the report.
fn collect(tree: &Tree, target: backing::Target) -> Vec<Check> {
    let identity = Identity::read(tree);
    let store = backing::BackingFacts::gather(tree, target, &identity);
    let queue = queue::QueueFacts::gather(tree, store.dev, store.mount.as_ref());
    vec![
        uffd::permission(&uffd::PermissionFacts::gather(tree, &identity)),
        uffd::features(&uffd::FeatureFacts::gather(tree)),
        io_uring::check(&io_uring::IoUringFacts::gather(tree, &identity)),
        limits::memlock(&limits::MemlockFacts::gather(tree, &identity)),
        limits::map_count(tree.read_num("/proc/sys/vm/max_map_count")),
        backing::store(&store),
        backing::direct(&store),
        backing::space(&store),
        queue::check(&queue),
        idle::check(&idle::IdleFacts::gather(tree)),
        swap::settings(&swap::SwapFacts::gather(tree)),
        swap::cgroup(&swap::CgroupFacts::gather(tree)),
        library::check(&tiermem_core::preload_library::find()),
    ]
}
