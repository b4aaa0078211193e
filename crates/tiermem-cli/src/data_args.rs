//! The `--data` flag of `tiermem bench` and `tiermem bench-redis`: what
//! fills the pages (or the values) whose paging is measured.

use clap::ValueEnum;
use tiermem_bench::page_data::PageData;

/// The `--data` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DataArg {
    /// Pseudo-random bytes: incompressible.
    Random,
    /// Zeros (beyond the bench's stamp words).
    Zero,
    /// English-like text, about 2.4x with LZ4.
    Text,
    /// 10% zero, 10% same-filled, 50% text, 30% random pages (values).
    Mixed,
}

impl From<DataArg> for PageData {
    fn from(d: DataArg) -> PageData {
        match d {
            DataArg::Random => PageData::Random,
            DataArg::Zero => PageData::Zero,
            DataArg::Text => PageData::Text,
            DataArg::Mixed => PageData::Mixed,
        }
    }
}
