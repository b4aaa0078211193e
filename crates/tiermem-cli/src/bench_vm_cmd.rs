//! `tiermem bench-vm`: its flags and the call into the harness, which
//! lives in the bench crate ([`tiermem_bench::vm`]).

use std::path::PathBuf;
use std::time::Duration;
use tiermem_core::settings;

use anyhow::{anyhow, Context};
use clap::{Args, ValueEnum};
use tiermem_bench::result::Mode;
use tiermem_bench::vm::guest::{GuestRam, Order};
use tiermem_bench::vm::{self, AccelChoice, Class, Settings};

/// Virtual machines by class of memory: Gold, Silver and Bronze guests
/// under tiermem and under kernel swap.
///
/// A Gold guest has all of its RAM backed by DRAM, a Silver guest half and
/// a Bronze guest a quarter; the rest lives on the backing device. Each
/// class boots a real guest with QEMU (Debian's packaged kernel, the
/// newest /boot/vmlinuz-*, and an initramfs built now from a static
/// busybox and the project's page walker), once per mode:
///   tiermem      qemu-system-x86_64 with libtiermem.so preloaded, its DRAM
///                budget the class's share of guest RAM (guest RAM is
///                tiered like any memory of the program);
///   kernel-swap  qemu-system-x86_64 in a cgroup-v1 memory cgroup limited
///                to the same DRAM, with a swapfile on the backing
///                directory's filesystem (needs root; removed on every exit
///                path, Ctrl-C included).
/// One guest runs at a time, the mode order alternating from class to
/// class. Inside the guest the walker stamps --walker-mem of memory, then
/// on each checking pass visits every page in a scrambled order, checks
/// all 4096 bytes against what it wrote and stamps it again. --order
/// shuffle (the default) gives each pass a random permutation of its own,
/// so a page's next visit comes at a random distance of up to two passes
/// and no read-ahead can guess it (a recency order keeps fewer of such
/// visits than a fixed set of pages would); --order loop repeats one random
/// permutation every pass, a loop over memory larger than the cache, where
/// a page comes back exactly one pass later (the worst case for a CLOCK
/// policy); --order stride steps through memory by a constant stride
/// modulo its size, a new stride each pass, which looks random to a cache
/// but which a stride prefetcher follows when most steps do not wrap
/// around; --order uniform visits as many pages a pass, each drawn at
/// random with replacement (uniform random access, where every policy
/// keeps the same share of visits in DRAM, so the cost of a miss decides),
/// and checks every page once more at the end.
///
/// The table names tiermem's policy, compression and I/O engine (TIERMEM_*
/// variables in the environment reach QEMU's tiermem: TIERMEM_POLICY=s3fifo
/// tiermem bench-vm, say), then gives per class and mode: boot time (QEMU
/// started to walker ready), pages/s over the checking passes, the walker's
/// p50 and p99 time per page, QEMU's peak resident memory, the ratio to
/// kernel swap; then, over the checking passes alone, in the same terms
/// for both modes: pages read from the device with their read-ahead (dev
/// reads: tiermem's page-ins; kernel swap's swap-ins, pswpin of
/// /proc/vmstat, its read-around of 2^vm.page-cluster slots included), the
/// accesses that waited for the device (dev waits: tiermem's page-ins not
/// read ahead; the cgroup's major faults) and the faults (tiermem's, each a
/// round trip through a handler; the cgroup's, each resolved in the
/// kernel); then pages checked and wrong words. With --live-change (the default), a Bronze
/// guest under tiermem is made Gold with `tiermem ctl PID budget` after
/// its first checking pass, and the time until the new budget is in
/// effect and page-outs stop is reported. Then each target is checked:
/// zero lost pages, QEMU resident within budget + 64 MiB, Silver and Bronze
/// at least as fast as under kernel swap, Bronze boot within 2x Gold's,
/// the live change within 1 s.
///
/// The accelerator: with --accel auto, KVM is used when /dev/kvm opens and
/// a small probe guest boots with it within 20 s, TCG otherwise; the
/// report says which and why.
///
/// Needs qemu-system-x86 (qemu-system-x86_64), linux-image-amd64,
/// busybox-static and a C compiler with the static C library
/// (build-essential) to build the walker. A guest that does not finish
/// and power off has QEMU's last lines (tiermem's own messages included)
/// printed under its progress line. Exit status: 0; 1 when a guest failed
/// to run or to power off; 3 when a walker found a wrong byte.
///
/// Examples:
///   tiermem bench-vm                              (1 GiB guests, all classes)
///   tiermem bench-vm --guest-mem 512M --classes bronze --modes tiermem
///   tiermem bench-vm --accel tcg --json > vm.json
///   tiermem bench-vm --order loop
///   tiermem bench-vm --ram memfd --classes silver,bronze
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct BenchVmArgs {
    /// RAM of each guest (512M, 1G).
    #[arg(long, default_value = "1G")]
    guest_mem: String,
    /// Memory the in-guest walker owns (default: three quarters of the
    /// guest's RAM); at least 64 MiB must remain for the guest kernel.
    #[arg(long)]
    walker_mem: Option<String>,
    /// Checking passes after the stamping pass.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    passes: u32,
    /// The walker's order of visits: shuffle (a new random permutation each
    /// pass), loop (the same permutation every pass), stride (a constant
    /// stride modulo the memory, a new one each pass) or uniform (pages
    /// drawn at random with replacement).
    #[arg(long, value_enum, default_value = "shuffle")]
    order: OrderArg,
    /// Where QEMU keeps guest RAM: anonymous (QEMU's default, private
    /// memory) or memfd (`-object memory-backend-memfd,share=on`, as for
    /// a vhost-user device; none is attached). Under tiermem a memfd that
    /// QEMU keeps to itself is tiered like anonymous RAM; under kernel swap
    /// it is shared memory, swapped from the same cgroup.
    #[arg(long, value_enum, default_value = "anonymous")]
    ram: RamArg,
    /// Comma-separated classes, in the order run: gold, silver, bronze.
    #[arg(long, value_delimiter = ',', default_value = "gold,silver,bronze")]
    classes: Vec<String>,
    /// Comma-separated modes: tiermem, kernel-swap.
    #[arg(long, value_delimiter = ',', default_value = "tiermem,kernel-swap")]
    modes: Vec<Mode>,
    /// Accelerator: auto (KVM if a probe guest boots with it), kvm or tcg.
    #[arg(long, value_enum, default_value = "auto")]
    accel: AccelArg,
    /// Guest kernel (default: the newest /boot/vmlinuz-*).
    #[arg(long, value_name = "PATH")]
    kernel: Option<PathBuf>,
    /// QEMU binary.
    #[arg(long, value_name = "PATH", default_value = "qemu-system-x86_64")]
    qemu: PathBuf,
    /// Directory for tiermem's backing file and kernel swap's swapfile.
    #[arg(long, default_value = settings::known("TIERMEM_BACKING").value, env = "TIERMEM_BACKING")]
    backing: PathBuf,
    /// Skip the live Bronze -> Gold change.
    #[arg(long)]
    no_live_change: bool,
    /// Longest one guest may run, in seconds, before it is killed.
    #[arg(long, value_name = "SECS", default_value = "600", value_parser = timeout_seconds)]
    timeout: u64,
    /// Print the results as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OrderArg {
    Shuffle,
    Loop,
    Stride,
    Uniform,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum RamArg {
    Anonymous,
    Memfd,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum AccelArg {
    Auto,
    Kvm,
    Tcg,
}

/// Runs the benchmark; returns the exit status.
pub fn run(args: &BenchVmArgs) -> anyhow::Result<i32> {
    let size = |what: &'static str, text: &str| -> anyhow::Result<u64> {
        Ok(tiermem_core::parse_size(what, text)
            .map_err(|e| anyhow!("{e}"))?
            .resolve())
    };
    let guest_mem = size("--guest-mem", &args.guest_mem)?;
    let walker_mem = match &args.walker_mem {
        Some(w) => size("--walker-mem", w)?,
        None => guest_mem / 4 * 3,
    };
    let classes = args
        .classes
        .iter()
        .map(|c| Class::parse(c).map_err(|e| anyhow!("--classes: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let library = match args.modes.contains(&Mode::Tiermem) {
        true => Some(tiermem_core::preload_library::find().context(
            "tiermem mode preloads libtiermem.so into QEMU (or leave tiermem out of --modes)",
        )?),
        false => None,
    };
    vm::run(Settings {
        guest_mem,
        walker_mem,
        passes: args.passes,
        order: match args.order {
            OrderArg::Shuffle => Order::Shuffle,
            OrderArg::Loop => Order::Loop,
            OrderArg::Stride => Order::Stride,
            OrderArg::Uniform => Order::Uniform,
        },
        ram: match args.ram {
            RamArg::Anonymous => GuestRam::Anonymous,
            RamArg::Memfd => GuestRam::Memfd,
        },
        classes,
        modes: args.modes.clone(),
        accel: match args.accel {
            AccelArg::Auto => AccelChoice::Auto,
            AccelArg::Kvm => AccelChoice::Kvm,
            AccelArg::Tcg => AccelChoice::Tcg,
        },
        kernel: args.kernel.clone(),
        qemu: args.qemu.clone(),
        backing: args.backing.clone(),
        library,
        tiermem: std::env::current_exe().context("finding the tiermem binary for tiermem ctl")?,
        live_change: !args.no_live_change,
        timeout: Duration::from_secs(args.timeout),
        json: args.json,
    })
}

/// `--timeout`: whole seconds, at least 10 (a guest boots in a few).
fn timeout_seconds(s: &str) -> Result<u64, String> {
    let secs = crate::duration_args::whole_seconds(s)?;
    if secs < 10 {
        return Err(format!("{secs} is not in 10..{}", u64::MAX));
    }
    Ok(secs)
}
