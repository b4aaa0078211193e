//! `tiermem cost`: the relative memory cost of a tiered server against a
//! DRAM-only one.

use clap::Args;

/// Compares the memory cost of server B (less DRAM plus a fast device) with
/// server A (DRAM only).
#[derive(Args, Debug)]
pub struct CostArgs {}

/// Runs `tiermem cost`; returns the process exit code.
pub fn run(_args: &CostArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not built yet")
}
