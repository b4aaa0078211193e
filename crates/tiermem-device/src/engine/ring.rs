//! Building an io_uring in each mode: plain, SQPOLL, IOPOLL and hybrid
//! IOPOLL. The io-uring crate has no builder method for hybrid polling, so
//! that ring is set up with a raw `io_uring_setup(2)` and handed to the
//! crate with `IoUring::from_fd`.

use std::io;
use std::os::fd::RawFd;

use io_uring::IoUring;

use super::JobFailure;
use crate::config::Engine;

/// `IORING_SETUP_IOPOLL`.
const IORING_SETUP_IOPOLL: u32 = 1 << 0;
/// `IORING_SETUP_HYBRID_IOPOLL` (Linux 6.13+): sleep, then poll.
pub(crate) const IORING_SETUP_HYBRID_IOPOLL: u32 = 1 << 17;

/// Kernel `struct io_uring_params`. The offset structs at the end are
/// opaque here (the io-uring crate interprets them); they are 8-byte
/// aligned because they end in a `__u64`.
#[repr(C)]
#[derive(Default)]
struct RawParams {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: [u64; 5],
    cq_off: [u64; 5],
}

const _: () = assert!(std::mem::size_of::<RawParams>() == 120);
const _: () = assert!(std::mem::size_of::<io_uring::Parameters>() == 120);

/// Create the ring for `engine` with room for `entries` requests.
pub(crate) fn build(
    engine: Engine,
    entries: u32,
    sqpoll_idle_ms: u32,
) -> Result<IoUring, JobFailure> {
    let r = match engine {
        Engine::Psync | Engine::IoUring | Engine::IoUringSpin => IoUring::builder().build(entries),
        Engine::IoUringSqpoll => IoUring::builder()
            .setup_sqpoll(sqpoll_idle_ms)
            .build(entries),
        Engine::IoUringIopoll => IoUring::builder().setup_iopoll().build(entries),
        Engine::IoUringHybrid => {
            build_raw(entries, IORING_SETUP_IOPOLL | IORING_SETUP_HYBRID_IOPOLL)
        }
    };
    r.map_err(|e| setup_failure(engine, &e))
}

fn setup_failure(engine: Engine, e: &io::Error) -> JobFailure {
    let flag = match engine {
        Engine::IoUringSqpoll => "IORING_SETUP_SQPOLL",
        Engine::IoUringIopoll => "IORING_SETUP_IOPOLL",
        Engine::IoUringHybrid => "IORING_SETUP_HYBRID_IOPOLL",
        _ => "io_uring_setup",
    };
    match e.raw_os_error() {
        Some(libc::ENOSYS) => {
            JobFailure::Unsupported(format!("io_uring is not available in this kernel ({e})"))
        }
        Some(libc::EPERM) => JobFailure::Unsupported(format!(
            "io_uring is disabled or forbidden here ({e}; see sysctl kernel.io_uring_disabled \
             and seccomp policy)"
        )),
        Some(libc::EINVAL) if engine == Engine::IoUringHybrid => JobFailure::Unsupported(format!(
            "the kernel rejected {flag} ({e}); hybrid polling needs Linux 6.13 or newer"
        )),
        Some(libc::EINVAL | libc::EOPNOTSUPP) => {
            JobFailure::Unsupported(format!("the kernel rejected {flag} ({e})"))
        }
        _ => JobFailure::Failed(format!("io_uring_setup with {flag} failed: {e}")),
    }
}

fn build_raw(entries: u32, flags: u32) -> io::Result<IoUring> {
    let mut p = RawParams {
        flags,
        ..Default::default()
    };
    // SAFETY: io_uring_setup(2) reads and writes one `io_uring_params`
    // (120 bytes, layout mirrored by `RawParams`) through the pointer,
    // which is valid for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_io_uring_setup,
            entries as libc::c_long,
            &mut p as *mut RawParams,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd =
        RawFd::try_from(fd).map_err(|_| io::Error::other("io_uring_setup returned a bad fd"))?;
    // SAFETY: `io_uring::Parameters` is a `#[repr(transparent)]` wrapper of
    // the kernel's `io_uring_params`, which the crate documents may be
    // created from any properly laid-out, initialised representation;
    // `RawParams` has that layout (sizes checked above) and was filled in
    // by the kernel.
    let params: io_uring::Parameters = unsafe { std::mem::transmute::<RawParams, _>(p) };
    // SAFETY: `fd` is a fresh io_uring descriptor that we own and hand
    // over (the crate closes it, also on error), and `params` is what the
    // kernel returned for it.
    unsafe { IoUring::from_fd(fd, params) }
}
