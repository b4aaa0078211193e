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
    /// kernel-zswap and kernel-zram: count the kernel's pool against
    /// --dram, as tiermem's pool is. Under the cgroup v1 memory controller
    /// zswap's and zram's pools are charged to no cgroup, so by default
    /// they have the whole budget for resident pages plus their pool. With
    /// this flag the pool is capped at tiermem's share of the budget
    /// (TIERMEM_COMPRESS_SHARE; for bench also --compress-share) and the
    /// cgroup's limit is the rest. zswap caps its pool in whole percents of
    /// the machine's memory, so the cap is the percent nearest the share,
    /// and tiermem's share follows it (the report says both). zram has no
    /// cap that passes pages on, so bench sizes the device for its pool to
    /// fill at the cap (from LZ4 on a sample of --data's pages) and puts a
    /// swapfile behind it at a lower priority, as zram is deployed in front
    /// of a disk; the report gives its pool's peak against the cap. Needs
    /// kernel-zswap or kernel-zram in --modes (bench-redis: kernel-zswap
    /// only); conflicts with --zswap-max-pool-percent, and with --zram-size
    /// when kernel-zram runs.
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
            page_data: None,
            page_cluster: swap_readahead::parse(&self.page_cluster)?,
        })
    }

    /// `--pool-in-budget`'s split of `budget`, checked against `modes`;
    /// `share` is tiermem's pool share as asked (a percent or auto).
    /// `zram_sizable`: whether the caller knows the page contents before
    /// the run, which sizing zram within the cap needs.
    pub fn pool_in_budget(
        &self,
        modes: &[Mode],
        share: &str,
        budget: u64,
        zram_sizable: bool,
    ) -> anyhow::Result<Option<PoolInBudget>> {
        if !self.pool_in_budget {
            return Ok(None);
        }
        anyhow::ensure!(
            modes.contains(&Mode::KernelZswap) || modes.contains(&Mode::KernelZram),
            "--pool-in-budget applies to kernel-zswap and kernel-zram: add one to --modes"
        );
        anyhow::ensure!(
            zram_sizable || !modes.contains(&Mode::KernelZram),
            "--pool-in-budget with kernel-zram: zram's only cap on its memory (mem_limit) \
             fails the swap-outs beyond it, so the bench sizes the device for its pool to fill \
             at the cap, which needs the page contents before the run; tiermem bench has them, \
             bench-redis does not: run kernel-zram here without --pool-in-budget"
        );
        anyhow::ensure!(
            self.zram_size.is_none() || !modes.contains(&Mode::KernelZram),
            "--pool-in-budget sizes zram itself: leave out --zram-size"
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
