//! Thin, typed wrappers over the system calls tiermem needs. Everything that
//! talks to the kernel lives here, so the rest of the crate reads as policy.

pub mod device;
pub mod futex;
pub mod mem;
pub mod raw;
pub mod signal;
pub mod spare_fds;
pub mod thread;
pub mod thread_fds;
pub mod uffd;

/// The file a descriptor names, as `(st_dev, st_ino)`, or `None` if it
/// names nothing: how tiermem tells that a descriptor number still names
/// the file it opened before closing it.
pub fn file_identity(fd: std::os::fd::RawFd) -> Option<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid value to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st`, which lives for the call.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// The kernel's base page size (4 KiB on x86-64).
pub fn base_page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as usize
    } else {
        4096
    }
}

/// Physical RAM of this machine, in bytes.
pub fn physical_ram_bytes() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages.max(0) as u64).saturating_mul(page.max(0) as u64)
}

/// Monotonic nanoseconds, for latency measurement.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Waits a moment for another thread to finish with something busy: a
/// page it owns, a slot or a frame it is about to give back.
pub fn backoff() {
    std::hint::spin_loop();
    std::thread::yield_now();
}

/// The calling thread's errno, as an `io::Error`.
pub fn last_os_error() -> std::io::Error {
    std::io::Error::last_os_error()
}
