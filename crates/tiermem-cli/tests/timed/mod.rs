//! The tiermem binary under timeout(1), for the tests that run its
//! benchmarks: a run that hangs is killed (SIGTERM, then SIGKILL 10 s
//! later) and shows up as a failed exit status (124 or 137) instead of a
//! suite that never ends.

use std::process::Command;

/// `timeout -k 10 SECONDS tiermem`: add the subcommand and its arguments.
pub fn tiermem_within(seconds: u32) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args([
        "-k",
        "10",
        &seconds.to_string(),
        env!("CARGO_BIN_EXE_tiermem"),
    ]);
    cmd
}
