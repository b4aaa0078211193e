//! The flags of the compressed kernel modes (kernel-zswap, kernel-zram),
//! shared by `tiermem bench` and `tiermem bench-redis`.

use clap::Args;
use tiermem_bench::compressed::CompressedOptions;
use tiermem_bench::zram::ZramOptions;
use tiermem_bench::zswap::ZswapOptions;

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
        })
    }
}
