//! The control socket of a tiered process: its name, and the one-line
//! protocol `tiermem ctl` and `tiermem top` speak to it.
//!
//! Each tiered process listens on an abstract Unix socket,
//! `@tiermem-ctl-<pid>`: it has no file, so nothing is left behind when
//! the process is killed, and `/proc/net/unix` lists every one on the
//! machine. Abstract sockets have no file permissions, so the server
//! checks each peer's credentials (`SO_PEERCRED`): only the process's own
//! user, or root, is served.
//!
//! A request is one line; the reply is one line, then the server closes:
//! - `stats` → the statistics as JSON (schema `tiermem.stats/1`, in the
//!   envelope every tiermem result carries);
//! - `budget BYTES` → `ok OLD NEW` (both in bytes) or `error MESSAGE`;
//! - `summary` → the one-screen summary `tiermem run --stats` prints at
//!   exit, as one JSON string (`tiermem run` takes it while the program
//!   runs, for a program that ends without running its exit handlers).

/// The abstract name's prefix (without the leading NUL).
pub const NAME_PREFIX: &str = "tiermem-ctl-";

/// The `schema` of a `stats` reply.
pub const STATS_SCHEMA: &str = "tiermem.stats/1";

/// The abstract socket name of process `pid`, without the leading NUL.
pub fn socket_name(pid: u32) -> String {
    format!("{NAME_PREFIX}{pid}")
}

/// The pids of every process with a control socket, from the text of
/// `/proc/net/unix` (abstract names show with a leading `@`).
pub fn listening_pids(proc_net_unix: &str) -> Vec<u32> {
    let mut pids: Vec<u32> = proc_net_unix
        .lines()
        .filter_map(|line| line.split_whitespace().nth(7))
        .filter_map(|path| path.strip_prefix('@')?.strip_prefix(NAME_PREFIX))
        .filter_map(|pid| pid.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_pids_come_from_abstract_names_only() {
        let text = "\
Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 31337 @tiermem-ctl-4242
0000000000000000: 00000002 00000000 00010000 0001 01 31338 /tmp/tiermem-ctl-7
0000000000000000: 00000002 00000000 00010000 0001 01 31339 @tiermem-ctl-17
0000000000000000: 00000003 00000000 00000000 0001 03 31340
0000000000000000: 00000002 00000000 00010000 0001 01 31341 @tiermem-ctl-x
";
        assert_eq!(listening_pids(text), vec![17, 4242]);
        assert_eq!(socket_name(5), "tiermem-ctl-5");
    }
}
