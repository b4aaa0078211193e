//! The flags of the compressed kernel modes (kernel-zswap, kernel-zram),
//! shared by `tiermem bench` and `tiermem bench-redis`.

use clap::Args;
use tiermem_bench::compressed::CompressedOptions;
use tiermem_bench::result::Mode;
use tiermem_bench::swap_readahead;
use tiermem_bench::zram::ZramOptions;
use tiermem_bench::zswap::{PoolInBudget, ZswapOptions};
use tiermem_core::compress::settings::ENV_COMPRESS_SHARE;
use tiermem_core::CompressSettings;

#[derive(Args, Debug, Clone)]
pub struct CompressedArgs {
    /// kernel-zswap: zswap's compressor for the run. Must be one the
    /// kernel's crypto API offers now (the `compression`, `acomp` and
    /// `scomp` entries of /proc/crypto, e.g. lzo-rle, lzo, deflate); the
    /// machine's own is put back afterwards.
    #[arg(long, value_name = "NAME", default_value = "lzo-rle")]
    zswap_compressor: String,
    /// kernel-zswap: the most DRAM zswap's pool may take, in percent of
    /// the machine's memory (1-100); beyond it, pages are written back to
    /// the swapfile. Default: the machine's setting, left as it is.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u32).range(1..=100))]
    zswap_max_pool_percent: Option<u32>,
    /// kernel-zram: zram0's compressor for the run, one of those
    /// /sys/block/zram0/comp_algorithm lists (e.g. lzo-rle, lzo, lz4);
    /// the device's own is put back afterwards.
    #[arg(long, value_name = "NAME", default_value = "lz4")]
    zram_compressor: String,
    /// kernel-zram: zram0's size, the most it stores uncompressed (256M,
    /// 2G). Default: the working set (bench-redis: twice the dataset) plus
    /// 25%, so that it holds all of it.
    #[arg(long, value_name = "SIZE")]
    zram_size: Option<String>,
    /// kernel-zswap and kernel-zram: the kernel's vm.page-cluster for the
    /// run (the machine's is put back afterwards), or keep. The kernel
    /// reads 2^N swap slots around each swap-in; from a compressed tier
    /// every one is decompressed into the swap cache, charged to the
    /// memory cgroup, and at the kernel's default of 3 that swap cache
    /// filled the cgroup until its OOM killer ended the program
    /// (bench-redis with zswap, in every run). kernel-swap always keeps
    /// the machine's setting.
    #[arg(long, value_name = "N|keep", default_value = "0")]
    page_cluster: String,
    /// kernel-zswap: count zswap's pool against --dram, as tiermem's pool
    /// is. Under the cgroup v1 memory controller zswap's pool is charged to
    /// no cgroup, so by default kernel-zswap has the whole budget for
    /// resident pages plus its pool. With this flag the pool is capped at
    /// tiermem's share of the budget (TIERMEM_COMPRESS_SHARE; for bench
    /// also --compress-share) and the cgroup's limit is the rest; zswap
    /// caps its pool in whole percents of the machine's memory, so the cap
    /// is the percent nearest the share, and tiermem's share follows it
    /// (the report says both). Needs kernel-zswap in --modes; conflicts
    /// with --zswap-max-pool-percent.
    #[arg(long, conflicts_with = "zswap_max_pool_percent")]
    pub pool_in_budget: bool,
}

impl CompressedArgs {
    pub fn options(&self) -> anyhow::Result<CompressedOptions> {
        let disksize = match &self.zram_size {
            Some(text) => Some(tiermem_core::parse_size("--zram-size", text)?.resolve()),
            None => None,
        };
        Ok(CompressedOptions {
            zswap: ZswapOptions {
                compressor: self.zswap_compressor.clone(),
                max_pool_percent: self.zswap_max_pool_percent,
            },
            zram: ZramOptions {
                compressor: self.zram_compressor.clone(),
                disksize,
            },
            pool_in_budget: None,
            page_cluster: swap_readahead::parse(&self.page_cluster)?,
        })
    }

    /// `--pool-in-budget`'s split of `budget`, checked against `modes`;
    /// `share` is tiermem's pool share as asked (a percent or auto).
    pub fn pool_in_budget(
        &self,
        modes: &[Mode],
        share: &str,
        budget: u64,
    ) -> anyhow::Result<Option<PoolInBudget>> {
        if !self.pool_in_budget {
            return Ok(None);
        }
        anyhow::ensure!(
            modes.contains(&Mode::KernelZswap),
            "--pool-in-budget applies to kernel-zswap: add it to --modes"
        );
        anyhow::ensure!(
            !modes.contains(&Mode::KernelZram),
            "--pool-in-budget does not apply to kernel-zram: zram's only cap on its memory \
             (mem_limit) fails the swap-outs beyond it instead of passing them to a slower swap \
             area, so its pool cannot be held to a share of the budget; run kernel-zram alone"
        );
        // zswap's pool cap is fixed, so tiermem's share is too: the share
        // asked for, or where an adapting one starts.
        let asked = CompressSettings::from_lookup(&|var| {
            (var == ENV_COMPRESS_SHARE).then(|| share.to_string())
        })?;
        let split = tiermem_bench::zswap::pool_in_budget(
            budget,
            asked.share_percent,
            tiermem_core::sys::physical_ram_bytes(),
            1..=tiermem_core::compress::settings::MAX_SHARE_PERCENT,
        )?;
        Ok(Some(split))
    }
}
