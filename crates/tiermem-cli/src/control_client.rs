//! The client side of a tiered process's control socket (the protocol is
//! in `tiermem_host::control`), for `tiermem ctl`, `tiermem top` and
//! `tiermem run`.

use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde_json::Value;
use tiermem_host::control::socket_name;

/// Sends `request` to process `pid` and returns its one-line reply.
pub fn ask(pid: u32, request: &str) -> anyhow::Result<String> {
    let addr = SocketAddr::from_abstract_name(socket_name(pid))?;
    let mut stream = UnixStream::connect_addr(&addr).map_err(|e| {
        anyhow!(
            "process {pid} has no tiermem control socket ({e}): it is not running, is not \
             tiered (tiermem run, or the C API), or was started with TIERMEM_CONTROL=off"
        )
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let refused =
        || anyhow!("process {pid} refused the request: only its own user and root may control it");
    // A refused peer's connection is closed unread: the write or the read
    // then fails, or the reply is empty.
    let mut reply = String::new();
    let exchanged = stream
        .write_all(format!("{request}\n").as_bytes())
        .and_then(|()| BufReader::new(stream).read_line(&mut reply));
    match exchanged {
        Ok(_) if reply.is_empty() => Err(refused()),
        Ok(_) => Ok(reply.trim_end().to_string()),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            Err(refused())
        }
        Err(e) => Err(e).with_context(|| format!("asking process {pid}")),
    }
}

pub fn stats_of(pid: u32) -> anyhow::Result<Value> {
    let reply = ask(pid, "stats")?;
    if let Some(msg) = reply.strip_prefix("error ") {
        bail!("process {pid}: {msg}");
    }
    serde_json::from_str(&reply).with_context(|| format!("process {pid} sent unreadable stats"))
}

/// The process's one-screen summary, as `tiermem run --stats` prints it.
pub fn summary_of(pid: u32) -> anyhow::Result<String> {
    let reply = ask(pid, "summary")?;
    if let Some(msg) = reply.strip_prefix("error ") {
        bail!("process {pid}: {msg}");
    }
    serde_json::from_str(&reply)
        .with_context(|| format!("process {pid} sent an unreadable summary"))
}
