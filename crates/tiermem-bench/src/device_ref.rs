//! A quick reference measurement of the backing device: 4 KiB random reads
//! at QD1 with O_DIRECT, the latency a page-in cannot beat.

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::{Rng, SeedableRng};

use crate::report::DeviceRef;

const FILE_BYTES: u64 = 256 << 20;

/// Writes a private test file in `dir`, then times QD1 4 KiB random reads.
pub fn measure_qd1_read(dir: &Path, duration: Duration) -> anyhow::Result<DeviceRef> {
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
    let buf = tiermem_core::sys::mem::Mapping::reserve_aligned(1 << 20, 4096, "device buffer")?;
    // SAFETY: the buffer is 1 MiB, owned here.
    unsafe { std::ptr::write_bytes(buf.as_ptr(), 0x5A, 1 << 20) };
    // Real data: reads of unwritten extents would never reach the device.
    for off in (0..FILE_BYTES).step_by(1 << 20) {
        // SAFETY: writing from our aligned 1 MiB buffer.
        let n = unsafe { libc::pwrite(file.as_raw_fd(), buf.as_ptr().cast(), 1 << 20, off as i64) };
        anyhow::ensure!(
            n == 1 << 20,
            "filling the device test file: {}",
            std::io::Error::last_os_error()
        );
    }
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let (mut total, mut count) = (Duration::ZERO, 0u32);
    let started = Instant::now();
    while started.elapsed() < duration {
        let off = rng.gen_range(0..FILE_BYTES / 4096) * 4096;
        let t0 = Instant::now();
        // SAFETY: reading 4 KiB into our aligned buffer.
        let n = unsafe { libc::pread(file.as_raw_fd(), buf.as_ptr().cast(), 4096, off as i64) };
        anyhow::ensure!(
            n == 4096,
            "device read: {}",
            std::io::Error::last_os_error()
        );
        total += t0.elapsed();
        count += 1;
    }
    Ok(DeviceRef {
        qd1_read_latency_us: Some(total.as_secs_f64() * 1e6 / count.max(1) as f64),
        seq_read_mb_s: None,
        source: format!(
            "measured in this run: {count} O_DIRECT 4K random preads at QD1 in {}",
            dir.display()
        ),
    })
}
