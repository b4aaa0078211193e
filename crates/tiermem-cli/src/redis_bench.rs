//! `tiermem bench-redis`: its flags and the call into the harness, which
//! lives in the bench crate ([`tiermem_bench::redis_bench`]).

use std::path::PathBuf;
use tiermem_core::settings;

use clap::Args;
use tiermem_bench::compressed::CompressedOptions;
use tiermem_bench::redis_bench::{self, Settings};
use tiermem_bench::result::Mode;
use tiermem_core::compress::settings::ENV_COMPRESS_SHARE;
use tiermem_core::parse_size;

use crate::compressed_args::CompressedArgs;
use crate::data_args::DataArg;

/// Redis: DRAM vs tiermem vs kernel swap, side by side.
///
/// For each mode a fresh redis-server (with --save "" --appendonly no
/// --maxmemory 0, on a free port of 127.0.0.1) is started, then:
///   1. load: DATASET / VALUE_SIZE keys `key:<12-digit number>` (the format
///      redis-benchmark -r uses) with deterministic values of the kind
///      --data names, over a pipelined connection;
///   2. verify: every key is read back and byte-compared;
///   3. measure: redis-benchmark -t get,set -r <keys> with the clients,
///      requests and value size given; it prints requests per second
///      (its SETs write values of its own: runs of 'x');
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
///                --zswap-max-pool-percent; --pool-in-budget counts its
///                pool against --dram, as tiermem's is);
///   kernel-zram  the same cgroup, swapping to /dev/zram0 instead of the
///                swapfile (--zram-compressor, --zram-size).
/// The compressed modes run only when named, as root, while no other swap
/// area is active and zram0 is unused, with swap readahead off
/// (vm.page-cluster 0, --page-cluster: at the kernel's default of 3,
/// readahead from zswap filled the cgroup with swap cache until its OOM
/// killer ended redis-server); every setting they change is put back on
/// every exit path (see `tiermem bench --help`). Their JSON has
/// the tier's statistics at its fullest (`compressed`: zswap_* or zram_*
/// counters with the compression ratio), and a note says the same.
///
/// Values (--data), each a function of its key's number, as the pages of
/// `tiermem bench --data` are of the page number:
///   random  pseudo-random bytes, incompressible (the default);
///   zero    zero bytes;
///   text    English-like text, about 2.4x with LZ4 (the words of the
///           page of the same number in `tiermem bench --data text`);
///   mixed   by key: 10% zero, 10% same-filled, 50% text, 30% random.
/// Compressed tiers (tiermem's, zswap, zram) gain only on compressible
/// values, so every report names them.
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
///   tiermem bench-redis --data text --modes tiermem,kernel-swap,kernel-zswap
///   tiermem bench-redis --data text --modes tiermem,kernel-zswap --pool-in-budget
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
    /// What the loaded values hold: random (incompressible), zero, text
    /// (about 2.4x with LZ4) or mixed; see above.
    #[arg(long, value_enum, default_value_t = DataArg::Random)]
    data: DataArg,
    /// Parallel connections of redis-benchmark (-c).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10000))]
    clients: u32,
    /// Requests per test of redis-benchmark (-n), for GET and for SET.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    requests: u64,
    /// Backing store for tiermem: a directory (a private file is made
    /// there), a file or a block device. Kernel swap puts its swapfile on
    /// the same filesystem.
    #[arg(long, default_value = settings::known("TIERMEM_BACKING").value, env = "TIERMEM_BACKING")]
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

/// Runs the benchmark; returns the exit status.
pub fn run(args: &RedisBenchArgs) -> anyhow::Result<i32> {
    redis_bench::run(Settings {
        dataset: args.dataset.clone(),
        dram: args.dram.clone(),
        value_size: args.value_size.clone(),
        data: args.data.into(),
        clients: args.clients,
        requests: args.requests,
        backing: args.backing.clone(),
        modes: args.modes.clone(),
        json: args.json,
        redis_server: args.redis_server.clone(),
        redis_benchmark: args.redis_benchmark.clone(),
        // Checked by the harness after the other settings.
        compressed: compressed_options(args),
    })
}

/// The compressed modes' options, with `--pool-in-budget`'s split of the
/// budget against the share tiermem's pool takes under `tiermem run`
/// (TIERMEM_COMPRESS_SHARE, or its default).
fn compressed_options(args: &RedisBenchArgs) -> anyhow::Result<CompressedOptions> {
    let options = args.compressed.options()?;
    let budget = parse_size("--dram", &args.dram)?.resolve();
    let share = std::env::var(ENV_COMPRESS_SHARE)
        .unwrap_or_else(|_| settings::known(ENV_COMPRESS_SHARE).value.to_string());
    Ok(CompressedOptions {
        pool_in_budget: args
            .compressed
            .pool_in_budget(&args.modes, &share, budget, false)?,
        ..options
    })
}
