//! A minimal pipelining RESP client: commands encoded, replies parsed, and
//! a numeric field of `INFO`.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};

/// No reply from the server for this long is an error.
const IO_TIMEOUT: Duration = Duration::from_secs(300);

/// A RESP reply.
#[derive(Debug)]
pub(super) enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

/// For error messages: the reply, with long values shortened.
impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Simple(s) => write!(f, "+{s}"),
            Reply::Error(s) => write!(f, "error '{s}'"),
            Reply::Int(n) => write!(f, ":{n}"),
            Reply::Bulk(None) => f.write_str("nil"),
            Reply::Bulk(Some(v)) => {
                let shown = String::from_utf8_lossy(&v[..v.len().min(64)]);
                write!(f, "a {}-byte string {shown:?}", v.len())
            }
            Reply::Array(None) => f.write_str("a nil array"),
            Reply::Array(Some(items)) => write!(f, "an array of {}", items.len()),
        }
    }
}

pub(super) fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// A minimal pipelining RESP client.
pub(super) struct Conn {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    line: Vec<u8>,
}

impl Conn {
    pub(super) fn connect(port: u16) -> anyhow::Result<Conn> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .with_context(|| format!("connecting to redis-server on {addr}"))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        s.set_write_timeout(Some(IO_TIMEOUT))?;
        let r = s.try_clone().context("cloning a socket")?;
        Ok(Conn {
            writer: s,
            reader: BufReader::with_capacity(1 << 20, r),
            line: Vec::new(),
        })
    }

    pub(super) fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.writer
            .write_all(bytes)
            .map_err(|e| timeout_hint(e, "sending to redis-server"))
    }

    pub(super) fn command(&mut self, args: &[&[u8]]) -> anyhow::Result<Reply> {
        let mut out = Vec::new();
        encode(&mut out, args);
        self.send(&out)?;
        self.reply()
    }

    pub(super) fn reply(&mut self) -> anyhow::Result<Reply> {
        self.line.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.line)
            .map_err(|e| timeout_hint(e, "reading from redis-server"))?;
        if n == 0 {
            bail!("redis-server closed the connection");
        }
        if self.line.len() < 3 || !self.line.ends_with(b"\r\n") {
            bail!(
                "malformed reply from redis-server: {:?}",
                String::from_utf8_lossy(&self.line)
            );
        }
        let kind = self.line[0];
        let text = String::from_utf8_lossy(&self.line[1..self.line.len() - 2]).into_owned();
        let int = |t: &str| -> anyhow::Result<i64> {
            t.parse()
                .with_context(|| format!("malformed length or integer in a reply: {t:?}"))
        };
        Ok(match kind {
            b'+' => Reply::Simple(text),
            b'-' => Reply::Error(text),
            b':' => Reply::Int(int(&text)?),
            b'$' => {
                let len = int(&text)?;
                if len < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut v = vec![0u8; len as usize + 2];
                    self.reader
                        .read_exact(&mut v)
                        .map_err(|e| timeout_hint(e, "reading from redis-server"))?;
                    if !v.ends_with(b"\r\n") {
                        bail!("malformed bulk reply from redis-server");
                    }
                    v.truncate(len as usize);
                    Reply::Bulk(Some(v))
                }
            }
            b'*' => {
                let len = int(&text)?;
                if len < 0 {
                    Reply::Array(None)
                } else {
                    let mut items = Vec::new();
                    for _ in 0..len {
                        items.push(self.reply()?);
                    }
                    Reply::Array(Some(items))
                }
            }
            _ => bail!("unknown reply type from redis-server: {text:?}"),
        })
    }

    /// A numeric field of `INFO <section>`.
    pub(super) fn info_field(&mut self, section: &str, field: &str) -> anyhow::Result<Option<u64>> {
        match self.command(&[b"INFO", section.as_bytes()])? {
            Reply::Bulk(Some(v)) => {
                let text = String::from_utf8_lossy(&v);
                Ok(text.lines().find_map(|l| {
                    l.strip_prefix(field)?
                        .strip_prefix(':')?
                        .trim()
                        .parse()
                        .ok()
                }))
            }
            other => bail!("unexpected reply to INFO: {other}"),
        }
    }
}

fn timeout_hint(e: io::Error, what: &str) -> anyhow::Error {
    if matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) {
        anyhow!(
            "{what}: no progress in {} s (server hung?)",
            IO_TIMEOUT.as_secs()
        )
    } else {
        anyhow::Error::new(e).context(what.to_string())
    }
}
