//! The control socket of a tiered process (`tiermem ctl`, `tiermem top`;
//! the protocol is in `tiermem_host::control`): a thread that answers
//! `stats` and `budget BYTES` requests from the process's own user or
//! root, so an operator can watch a running program and move its DRAM
//! budget (a VM between Gold, Silver and Bronze) without restarting it.
//!
//! Started once per process, for `tiermem run` and the C API alike, unless
//! `TIERMEM_CONTROL=off`. A forked child has no control thread (fork keeps
//! only the calling thread); the socket lives in its parent.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};

use tiermem_core::Runtime;
use tiermem_host::control::socket_name;

use super::{exit_stats, guard, program_name};

/// A switch turned off (`off`, `0`, `no`, `false`) disables the control
/// socket.
pub const ENV_CONTROL: &str = "TIERMEM_CONTROL";

static STARTED: AtomicBool = AtomicBool::new(false);

/// Starts the control thread for `rt`, once per process.
pub fn start_once(rt: &'static Runtime) {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    // Only a switch turned off disables it: the socket is how `tiermem ctl`
    // finds the process, so any other value keeps it.
    let off = |v: String| tiermem_core::units::switch_from_text(&v) == Some(false);
    if std::env::var(ENV_CONTROL).is_ok_and(off) {
        return;
    }
    let listener = match bind() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tiermem: no control socket for this process ({e}); tiermem ctl and top will not see it");
            return;
        }
    };
    // A runtime thread: signals meant for the program never land on it
    // (a shell's trap would go unanswered), and what it allocates is not
    // tiered.
    let spawned = tiermem_core::sys::thread::spawn(
        "tiermem-ctl".into(),
        128 << 10,
        Some(guard::mark_runtime_thread),
        Box::new(move || serve(rt, &listener)),
    );
    if let Err(e) = spawned {
        eprintln!("tiermem: no control thread for this process ({e})");
    }
}

fn bind() -> std::io::Result<UnixListener> {
    let addr = SocketAddr::from_abstract_name(socket_name(std::process::id()))?;
    UnixListener::bind_addr(&addr)
}

fn serve(rt: &'static Runtime, listener: &UnixListener) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if !peer_may_control(&stream) {
            continue; // dropped unanswered: the client says it was refused
        }
        let _ = answer(rt, stream);
    }
}

/// The peer runs as this process's user, or as root.
fn peer_may_control(stream: &UnixStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a ucred of `len` bytes on a connected Unix
    // socket we own.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    rc == 0 && (cred.uid == me || cred.uid == 0)
}

fn answer(rt: &'static Runtime, stream: UnixStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let mut line = String::new();
    BufReader::new(stream.try_clone()?)
        .take(256)
        .read_line(&mut line)?;
    let reply = reply_to(rt, line.trim());
    (&stream).write_all(reply.as_bytes())
}

/// The one-line reply to one request.
fn reply_to(rt: &'static Runtime, request: &str) -> String {
    let mut words = request.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("stats"), None, None) => {
            let json = exit_stats::stats_json_with_schema(
                tiermem_host::control::STATS_SCHEMA,
                &program_name(),
                std::process::id(),
                &rt.stats(),
            );
            json.to_string() + "\n"
        }
        (Some("summary"), None, None) => {
            let text = exit_stats::summary(&program_name(), std::process::id(), &rt.stats());
            serde_json::Value::String(text).to_string() + "\n"
        }
        (Some("budget"), Some(bytes), None) => match bytes.parse::<u64>() {
            Ok(new) => {
                let old = rt.dram_budget();
                match rt.set_dram_budget(new) {
                    Ok(()) => format!("ok {old} {}\n", rt.dram_budget()),
                    Err(e) => format!("error {}\n", one_line(&e.to_string())),
                }
            }
            Err(_) => format!("error budget {bytes:?} is not a number of bytes\n"),
        },
        _ => format!(
            "error unknown request {:?}: expected `stats`, `summary` or `budget BYTES`\n",
            one_line(request)
        ),
    }
}

fn one_line(text: &str) -> String {
    text.replace('\n', " ")
}
