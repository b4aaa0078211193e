//! `tiermem doctor`: checks that a host is set up for tiermem.

use clap::Args;

/// Checks this host's setup for tiermem, one line per check.
#[derive(Args, Debug)]
pub struct DoctorArgs {}

/// Runs `tiermem doctor`; returns the process exit code.
pub fn run(_args: &DoctorArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not built yet")
}
