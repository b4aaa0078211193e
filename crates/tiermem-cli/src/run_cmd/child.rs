//! Running the program: spawning it, forwarding signals, and its exit status.

use std::ffi::OsStr;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};

use anyhow::Context;
use signal_hook::iterator::exfiltrator::WithRawSiginfo;
use signal_hook::iterator::SignalsInfo;

use super::last_stats::LastStats;
use super::stop::Stop;

/// Signals sent to `tiermem run` that the program receives too.
const FORWARDED: [libc::c_int; 9] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
    libc::SIGCONT,
    libc::SIGALRM,
];

/// Starts the program, forwards signals to it until it exits, and returns
/// its exit status as a shell reports it. With `last_stats`, reports for a
/// program that ended without reporting itself.
pub(super) fn spawn_and_wait(
    mut cmd: Command,
    argv0: &OsStr,
    mut last_stats: Option<LastStats>,
) -> Result<i32, Stop> {
    // Registered before the program starts, so that no signal meant for it
    // can kill tiermem run first and leave the program running alone.
    let mut signals =
        SignalsInfo::<WithRawSiginfo>::new(FORWARDED.iter().copied().chain([libc::SIGCHLD]))
            .context("installing the signal handlers")?;
    let mut child = cmd.spawn().map_err(|e| {
        let shown = argv0.to_string_lossy();
        match e.kind() {
            io::ErrorKind::NotFound => Stop::new(127, format!("{shown}: {e}")),
            _ => Stop::new(126, format!("{shown}: cannot execute: {e}")),
        }
    })?;
    let pid = child.id() as libc::pid_t;
    if let Some(watch) = &mut last_stats {
        watch.watch(pid as u32);
    }
    loop {
        // Only this thread reaps the child, and it signals the child only
        // before reaping it: the pid cannot have been reused.
        if let Some(status) = child.try_wait().context("waiting for the program")? {
            if let Some(watch) = last_stats {
                watch.finish(pid as u32, status, &argv0.to_string_lossy());
            }
            return Ok(shell_status(status));
        }
        for info in signals.wait() {
            if info.si_signo == libc::SIGCHLD {
                continue;
            }
            let sender = sender_pid(&info);
            // SAFETY: getpgid/getpgrp only read process attributes; `pid`
            // is our unreaped child.
            let same_group = unsafe { libc::getpgid(pid) == libc::getpgrp() };
            if should_forward(info.si_code, sender, pid, same_group) {
                // SAFETY: `pid` is our child, not yet reaped (see above).
                unsafe { libc::kill(pid, info.si_signo) };
            }
        }
    }
}

/// The sending process of a signal sent by kill(2), sigqueue(3) or tgkill(2).
fn sender_pid(info: &libc::siginfo_t) -> Option<libc::pid_t> {
    if matches!(
        info.si_code,
        libc::SI_USER | libc::SI_QUEUE | libc::SI_TKILL
    ) {
        // SAFETY: for these codes the kernel fills in the sender's pid.
        Some(unsafe { info.si_pid() })
    } else {
        None
    }
}

/// Whether a signal tiermem run received should go to the program.
///
/// The kernel sends terminal signals (Ctrl-C, Ctrl-\, SIGWINCH, hang-up) to
/// the whole foreground process group with a positive si_code (SI_KERNEL):
/// the program already has it if it is in our group. A signal from the
/// program itself (kill(0, ...) reaches us too) is not echoed back to it.
fn should_forward(
    si_code: libc::c_int,
    sender: Option<libc::pid_t>,
    child: libc::pid_t,
    child_in_our_group: bool,
) -> bool {
    if si_code > 0 {
        return !child_in_our_group;
    }
    sender != Some(child)
}

fn shell_status(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_signals_are_not_sent_twice() {
        const SI_KERNEL: i32 = 0x80;
        assert!(!should_forward(SI_KERNEL, None, 100, true));
        assert!(should_forward(SI_KERNEL, None, 100, false));
        assert!(should_forward(libc::SI_USER, Some(7), 100, true));
        assert!(!should_forward(libc::SI_USER, Some(100), 100, true));
    }
}
