//! One redis-server: its private directory, how it is launched (plain,
//! under tiermem, in the kernel-swap sandbox), started on a free port,
//! waited for, shut down and read for its peak RSS and tiermem's summary.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

use super::plan::Plan;
use super::process::{describe, die_with_parent, tail, wait_timeout, Log, WORK_DIR_PREFIX};
use super::resp::{Conn, Reply};
use crate::kernel_swap::SwapSandbox;
use crate::result::Mode;

/// How long a starting server may take to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `SHUTDOWN NOSAVE` may take before the server is killed.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(120);

/// Ports tried when another process takes the free port first.
const PORT_ATTEMPTS: usize = 5;

/// How redis-server is started.
#[derive(Clone, Copy)]
pub(super) enum Launch<'a> {
    Plain,
    Tiermem(&'a Path),
    Sandbox(&'a SwapSandbox),
}

/// A running redis-server, killed and reaped on drop if still running.
pub(super) struct Server {
    child: Option<Child>,
    pub(super) port: u16,
    stdout: Log,
    pub(super) stderr: Log,
}

impl Server {
    pub(super) fn start(
        plan: &Plan,
        mode: Mode,
        launch: Launch<'_>,
        dir: &WorkDir,
    ) -> anyhow::Result<Server> {
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let mut server = Server::spawn(plan, launch, dir, port)?;
            match server.wait_ready() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    let log = server.stdout.read();
                    drop(server);
                    if log.contains("Address already in use") {
                        last_err = Some(e);
                        continue;
                    }
                    return Err(
                        e.context(format!("starting redis-server for {} mode", mode.name()))
                    );
                }
            }
        }
        Err(last_err
            .unwrap_or_else(|| anyhow!("no attempt made"))
            .context(format!(
                "no free port for redis-server after {PORT_ATTEMPTS} attempts"
            )))
    }

    fn spawn(plan: &Plan, launch: Launch<'_>, dir: &WorkDir, port: u16) -> anyhow::Result<Server> {
        let stdout = Log::create(&dir.path, "stdout")?;
        let stderr = Log::create(&dir.path, "stderr")?;
        let mut cmd = Command::new(&plan.redis_server);
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--maxmemory", "0"])
            .args(["--daemonize", "no", "--logfile", ""])
            .arg("--dir")
            .arg(&dir.path)
            .current_dir(&dir.path)
            .stdin(Stdio::null())
            .stdout(stdout.stdio()?)
            .stderr(stderr.stdio()?)
            .env_remove("TIERMEM_PRELOAD");
        die_with_parent(&mut cmd);
        match launch {
            Launch::Plain => {}
            Launch::Tiermem(lib) => {
                cmd.env("LD_PRELOAD", lib)
                    .env("TIERMEM_PRELOAD", "1")
                    .env("TIERMEM_DRAM", plan.dram_bytes.to_string())
                    .env("TIERMEM_BACKING", &plan.backing)
                    .env("TIERMEM_STATS", "1");
                if let Some(split) = &plan.compressed.pool_in_budget {
                    // The share zswap's cap came to, for both to hold their
                    // pools in the same DRAM.
                    cmd.env(
                        tiermem_core::compress::settings::ENV_COMPRESS_SHARE,
                        split.tiermem_share_percent.to_string(),
                    );
                }
            }
            Launch::Sandbox(sb) => sb.configure_command(&mut cmd),
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", plan.redis_server.display()))?;
        if let Launch::Sandbox(sb) = launch {
            sb.adopt_child(child.id() as i32);
        }
        Ok(Server {
            child: Some(child),
            port,
            stdout,
            stderr,
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits until the server answers PING.
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.try_wait()? {
                bail!(
                    "redis-server exited at start ({}); its output ends with:\n{}",
                    describe(status),
                    self.logs_tail()
                );
            }
            if let Ok(mut conn) = Conn::connect(self.port) {
                if let Ok(Reply::Simple(s)) = conn.command(&[b"PING"]) {
                    if s == "PONG" {
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "redis-server did not answer PING on port {} within {} s; its output ends with:\n{}",
                    self.port,
                    START_TIMEOUT.as_secs(),
                    self.logs_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn try_wait(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => Ok(c.try_wait().context("waiting for redis-server")?),
            None => bail!("redis-server was already reaped"),
        }
    }

    fn logs_tail(&self) -> String {
        let out = self.stdout.read();
        let err = self.stderr.read();
        format!("{}{}", tail(&out, 1500), tail(&err, 1500))
    }

    /// Adds the server's fate to an error that happened while it ran.
    pub(super) fn explain(&mut self, e: anyhow::Error) -> anyhow::Error {
        // Give a dying server a moment to be reaped.
        std::thread::sleep(Duration::from_millis(200));
        match self.try_wait() {
            Ok(Some(status)) => e.context(format!(
                "redis-server died ({}); its output ends with:\n{}",
                describe(status),
                self.logs_tail()
            )),
            _ => e,
        }
    }

    /// SHUTDOWN NOSAVE, then SIGKILL after a timeout. Returns how it ended.
    pub(super) fn shutdown(&mut self) -> anyhow::Result<String> {
        // The server closes the connection without a reply when it exits.
        if let Ok(mut conn) = Conn::connect(self.port) {
            let _ = conn.command(&[b"SHUTDOWN", b"NOSAVE"]);
        }
        let Some(mut child) = self.child.take() else {
            bail!("redis-server was already reaped");
        };
        match wait_timeout(&mut child, SHUTDOWN_TIMEOUT)? {
            Some(status) => Ok(describe(status)),
            None => {
                let _ = child.kill();
                let status = child.wait().context("reaping redis-server")?;
                Ok(format!(
                    "did not exit within {} s of SHUTDOWN NOSAVE; killed ({})",
                    SHUTDOWN_TIMEOUT.as_secs(),
                    describe(status)
                ))
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free TCP port")?;
    Ok(l.local_addr().context("finding a free TCP port")?.port())
}

/// A private directory for the server's files and logs, removed on drop.
pub(super) struct WorkDir {
    path: PathBuf,
}

impl WorkDir {
    pub(super) fn create(mode: Mode) -> anyhow::Result<WorkDir> {
        let path = std::env::temp_dir().join(format!(
            "{WORK_DIR_PREFIX}{}-{}",
            std::process::id(),
            mode.name()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(WorkDir { path })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Removes the directories of earlier runs that were killed.
pub(super) fn remove_stale_work_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(WORK_DIR_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Lines of tiermem's exit summary in a server's stderr.
pub(super) fn tiermem_summary(stderr: &str) -> Vec<String> {
    let mut lines = stderr.lines();
    let mut out = Vec::new();
    for line in lines.by_ref() {
        if line.starts_with("── tiermem:") {
            out.push(line.to_string());
            break;
        }
    }
    for line in lines {
        if line.trim().is_empty() {
            break;
        }
        out.push(line.to_string());
    }
    out
}

/// VmHWM of `pid`, in bytes.
pub(super) fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_tiermem_summary() {
        let err = "noise\n\n── tiermem: redis-server (pid 1) ──\nbudget  1\nfaults  2\n\nafter\n";
        assert_eq!(
            tiermem_summary(err),
            vec![
                "── tiermem: redis-server (pid 1) ──",
                "budget  1",
                "faults  2"
            ]
        );
    }
}
