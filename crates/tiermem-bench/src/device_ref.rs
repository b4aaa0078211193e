//! A quick reference measurement of the backing device, taken at the start
//! of a run: random reads with O_DIRECT, the latency a page-in cannot beat.
//!
//! The QD1 4 KiB read (the figure a miss is compared with) is timed with
//! `pread`, a thread that sleeps until the interrupt, as kernel swap waits.
//! For the device limit, reads of the run's own page size with one read in
//! flight per program thread are timed both ways a pager can wait: asleep
//! in `pread`, and spinning on an io_uring completion, which keeps the CPU
//! out of idle (on a guest that halts idle vCPUs at once, that is worth
//! tens of microseconds). The faster of the two is what the device allows.
//!
//! The figures a run keeps about its device are here too ([`DeviceRef`]),
//! with the limit they put on the run ([`DeviceLimit`], which
//! `device_limit` works out).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use io_uring::{opcode, types, IoUring};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tiermem_core::sys::mem::Mapping;

use crate::report::format::human_bytes;

const FILE_BYTES: u64 = 256 << 20;
const FILL_CHUNK: usize = 1 << 20;

/// Reference numbers for the backing device, measured elsewhere (e.g. by
/// `tiermem-device` or fio), to show how much a fault costs on top of the
/// device itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceRef {
    pub qd1_read_latency_us: Option<f64>,
    pub seq_read_mb_s: Option<f64>,
    /// Reads of the run's page size at the run's queue depth, each way of
    /// waiting: the cost of a miss to a pager that cost nothing.
    #[serde(default)]
    pub page_reads: Vec<ReadLatency>,
    /// What the device allows this run, or why there is no such figure.
    #[serde(default)]
    pub limit: Option<Result<DeviceLimit, String>>,
    /// Where the numbers come from, printed with them.
    pub source: String,
}

/// The device limit of a run (see `device_limit`): the pages/s a pager
/// that cost nothing would reach.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceLimit {
    pub pages_per_sec: f64,
    /// The best hit ratio the budget allows (0 for a scan).
    pub best_hit_ratio: f64,
    /// The formula with this run's figures, printed under the table.
    pub basis: String,
}

/// How a reading thread waits for its read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Wait {
    /// `pread`: asleep until the completion interrupt wakes it.
    Sleep,
    /// An io_uring read whose completion the thread spins for.
    Spin,
}

/// Random reads of `block_bytes`, one in flight on each of `threads`
/// threads: queue depth `threads`, as that many faulting threads make it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadJob {
    pub block_bytes: u64,
    pub threads: usize,
    pub wait: Wait,
}

/// What one job measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadLatency {
    pub job: ReadJob,
    /// Mean time of one read, as the thread that issued it waited, in µs
    /// (JSON: `mean_ns`).
    #[serde(rename = "mean_ns", with = "tiermem_host::ns::micros")]
    pub mean_us: f64,
    pub reads: u64,
}

/// Measures QD1 4 KiB reads for `duration`, and for `page_reads` = (block
/// bytes, threads) reads of that size at that depth both ways, taking
/// turns every few milliseconds for another `duration`: the device drifts
/// (a host cache warms, write-back drains) within seconds, and turns
/// share that drift out evenly. Spinning that this system refuses
/// (io_uring under seccomp) is left out, and the source says so.
pub fn measure_device_ref(
    dir: &Path,
    duration: Duration,
    page_reads: Option<(u64, usize)>,
) -> anyhow::Result<DeviceRef> {
    let file = TestFile::create(dir)?;
    let qd1 = run_turns(file.fd(), 4096, 1, &[Wait::Sleep], duration)?.remove(0);
    let mut source = format!(
        "measured in this run: {} O_DIRECT 4K random preads at QD1 in {}",
        qd1.reads,
        dir.display()
    );
    let mut measured = Vec::new();
    if let Some((block_bytes, threads)) = page_reads {
        let both = run_turns(
            file.fd(),
            block_bytes,
            threads,
            &[Wait::Sleep, Wait::Spin],
            duration,
        );
        measured = match both {
            Ok(both) => both,
            Err(e) => {
                source = format!("{source}; reads with a spun-for completion left out: {e:#}");
                run_turns(file.fd(), block_bytes, threads, &[Wait::Sleep], duration)?
            }
        };
        let described: Vec<String> = measured.iter().map(describe).collect();
        source = format!("{source}; in turns: {}", described.join(", "));
    }
    Ok(DeviceRef {
        qd1_read_latency_us: Some(qd1.mean_us),
        page_reads: measured,
        source,
        ..DeviceRef::default()
    })
}

/// The QD1 4 KiB read alone.
pub fn measure_qd1_read(dir: &Path, duration: Duration) -> anyhow::Result<DeviceRef> {
    measure_device_ref(dir, duration, None)
}

fn describe(latency: &ReadLatency) -> String {
    let job = &latency.job;
    format!(
        "{} {} reads at QD{} ({} thread(s), {}): mean {:.1}us",
        latency.reads,
        human_bytes(job.block_bytes),
        job.threads,
        job.threads,
        match job.wait {
            Wait::Sleep => "pread",
            Wait::Spin => "io_uring, completion spun for",
        },
        latency.mean_us
    )
}

/// A private file of real data, unlinked at once.
struct TestFile(std::fs::File);

impl TestFile {
    fn create(dir: &Path) -> anyhow::Result<TestFile> {
        let path = dir.join(format!(".tiermem-devref-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        let _ = std::fs::remove_file(&path);
        fill(file.as_fd())?;
        Ok(TestFile(file))
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Real data: reads of unwritten extents would never reach the device.
fn fill(fd: BorrowedFd<'_>) -> anyhow::Result<()> {
    let buf = Mapping::reserve_aligned(FILL_CHUNK, 4096, "device buffer")?;
    // SAFETY: the buffer is FILL_CHUNK bytes, owned here.
    unsafe { std::ptr::write_bytes(buf.as_ptr(), 0x5A, FILL_CHUNK) };
    for off in (0..FILE_BYTES).step_by(FILL_CHUNK) {
        // SAFETY: writing from our aligned buffer of FILL_CHUNK bytes.
        let n =
            unsafe { libc::pwrite(fd.as_raw_fd(), buf.as_ptr().cast(), FILL_CHUNK, off as i64) };
        anyhow::ensure!(
            n == FILL_CHUNK as isize,
            "filling the device test file: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// How long each way of waiting keeps its turn.
const TURN: Duration = Duration::from_millis(20);

/// `threads` threads read blocks of `block` at once for `duration`, every
/// thread waiting the same way at the same time, the ways taking turns.
/// One result per way; each mean is over every read made that way.
fn run_turns(
    fd: BorrowedFd<'_>,
    block: u64,
    threads: usize,
    ways: &[Wait],
    duration: Duration,
) -> anyhow::Result<Vec<ReadLatency>> {
    anyhow::ensure!(
        threads >= 1 && block.is_power_of_two() && (4096..=FILE_BYTES / 16).contains(&block),
        "device reads of {block} bytes on {threads} thread(s): the block must be a power of \
         two from 4 KiB to {} MiB, with at least one thread",
        (FILE_BYTES / 16) >> 20
    );
    let started = Instant::now();
    let per_thread: Vec<anyhow::Result<Vec<Waited>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                scope.spawn(move || read_in_turns(fd, block, thread, ways, started, duration))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a device read thread panicked")))
            })
            .collect()
    });
    let mut totals = vec![Waited::default(); ways.len()];
    for result in per_thread {
        for (total, waited) in totals.iter_mut().zip(result?) {
            total.time += waited.time;
            total.reads += waited.reads;
        }
    }
    Ok(ways
        .iter()
        .zip(totals)
        .map(|(&wait, total)| ReadLatency {
            job: ReadJob {
                block_bytes: block,
                threads,
                wait,
            },
            mean_us: total.time.as_secs_f64() * 1e6 / total.reads.max(1) as f64,
            reads: total.reads,
        })
        .collect())
}

/// Time spent waiting for reads, and how many.
#[derive(Clone, Copy, Default)]
struct Waited {
    time: Duration,
    reads: u64,
}

/// One thread's reads, by way of waiting: the way is the turn's, counted
/// in `TURN`s from `started`, so all threads change ways together.
fn read_in_turns(
    fd: BorrowedFd<'_>,
    block: u64,
    thread: usize,
    ways: &[Wait],
    started: Instant,
    duration: Duration,
) -> anyhow::Result<Vec<Waited>> {
    let buf = Mapping::reserve_aligned(block as usize, 4096, "device buffer")?;
    let mut ring = match ways.contains(&Wait::Spin) {
        true => Some(IoUring::new(2).context("setting up an io_uring")?),
        false => None,
    };
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7 + thread as u64);
    let mut waited = vec![Waited::default(); ways.len()];
    loop {
        let elapsed = started.elapsed();
        if elapsed >= duration {
            return Ok(waited);
        }
        let turn = (elapsed.as_nanos() / TURN.as_nanos()) as usize % ways.len();
        let off = rng.gen_range(0..FILE_BYTES / block) * block;
        let t0 = Instant::now();
        let n = match (ways[turn], ring.as_mut()) {
            (Wait::Spin, Some(ring)) => spin_read(ring, fd, &buf, off)?,
            _ => pread(fd, &buf, off),
        };
        anyhow::ensure!(
            n == block as i64,
            "device read of {} at {off}: {}",
            human_bytes(block),
            if n < 0 {
                std::io::Error::from_raw_os_error(-n as i32).to_string()
            } else {
                format!("short read of {n} bytes")
            }
        );
        waited[turn].time += t0.elapsed();
        waited[turn].reads += 1;
    }
}

/// One `pread` of `buf.len()` bytes at `off`: the byte count, or -errno.
fn pread(fd: BorrowedFd<'_>, buf: &Mapping, off: u64) -> i64 {
    // SAFETY: reading into our aligned buffer of `buf.len()` bytes.
    let n = unsafe { libc::pread(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), off as i64) };
    if n < 0 {
        -i64::from(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    } else {
        n as i64
    }
}

/// One io_uring read, its completion spun for: the thread never sleeps, so
/// its CPU never idles. The completion comes as task work, which the kernel
/// runs when it interrupts the spinning thread.
fn spin_read(
    ring: &mut IoUring,
    fd: BorrowedFd<'_>,
    buf: &Mapping,
    off: u64,
) -> anyhow::Result<i64> {
    let read = opcode::Read::new(types::Fd(fd.as_raw_fd()), buf.as_ptr(), buf.len() as u32)
        .offset(off)
        .build();
    // SAFETY: the buffer outlives the read, which completes before this
    // function returns, and nothing else touches the buffer meanwhile.
    unsafe { ring.submission().push(&read) }
        .map_err(|_| anyhow::anyhow!("the device check's io_uring is full"))?;
    ring.submit().context("submitting a device read")?;
    loop {
        if let Some(cqe) = ring.completion().next() {
            return Ok(i64::from(cqe.result()));
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir_in("/var/tmp").expect("a directory")
    }

    #[test]
    fn page_reads_are_timed_asleep_and_spinning_at_the_threads_depth() {
        let dir = dir();
        let device = measure_device_ref(dir.path(), Duration::from_millis(300), Some((16384, 2)))
            .expect("the device check");
        let waits: Vec<Wait> = device.page_reads.iter().map(|r| r.job.wait).collect();
        assert_eq!(waits, [Wait::Sleep, Wait::Spin], "{device:?}");
        for read in &device.page_reads {
            assert_eq!((read.job.block_bytes, read.job.threads), (16384, 2));
            // Both ways had turns.
            assert!(read.reads >= 2 && read.mean_us > 0.0, "{read:?}");
        }
        assert!(device.qd1_read_latency_us.unwrap() > 0.0);
        let source = &device.source;
        assert!(
            source.contains("KiB reads at QD2 (2 thread(s), pread)"),
            "{source}"
        );
        assert!(
            source.contains("(2 thread(s), io_uring, completion spun for)"),
            "{source}"
        );
    }

    #[test]
    fn the_qd1_read_alone_has_no_page_reads() {
        let dir = dir();
        let alone = measure_qd1_read(dir.path(), Duration::from_millis(100)).unwrap();
        assert!(alone.qd1_read_latency_us.unwrap() > 0.0);
        assert!(alone.page_reads.is_empty(), "{alone:?}");
        assert!(!alone.source.contains("in turns"), "{}", alone.source);
    }

    #[test]
    fn blocks_the_file_cannot_hold_are_refused() {
        let dir = dir();
        let err =
            measure_device_ref(dir.path(), Duration::from_millis(10), Some((3000, 1))).unwrap_err();
        assert!(err.to_string().contains("power of two"), "{err}");
    }
}
