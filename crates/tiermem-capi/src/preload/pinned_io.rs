//! `O_DIRECT` reads into tiered memory keep their buffer in DRAM until
//! they return.
//!
//! Such a read reaches its buffer by DMA: the kernel pins the pages and the
//! device writes them with no page table entry involved, so a page tiermem
//! evicted meanwhile would lose the read's bytes (see tiermem-core's
//! `pins`). The `read` family pins the buffer's pages around the call when
//! the descriptor is `O_DIRECT` (one `fcntl` to tell). Other reads copy
//! through the page tables, which the pager sees, and are never pinned: a
//! socket read may wait for data indefinitely, and its buffer must stay
//! evictable meanwhile.
//!
//! A pinned page cannot make room for the pages the read faults in, so one
//! call pins at most [`Runtime::pin_span`] bytes (an eighth of the budget),
//! and the runtime caps all pins together. A longer read goes in pieces of
//! that size, one after another, as one call returns (an `O_DIRECT`
//! descriptor is a file or a block device, where a read goes on where the
//! last stopped). Asynchronous reads (io_uring, AIO) complete outside any
//! call and are not pinned.

use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicUsize;

use tiermem_core::Runtime;

use super::{next_symbol, program_runtime};

type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize;
type PreadFn = unsafe extern "C" fn(c_int, *mut c_void, usize, i64) -> isize;
type ReadvFn = unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> isize;
type PreadvFn = unsafe extern "C" fn(c_int, *const libc::iovec, c_int, i64, c_int) -> isize;

/// glibc's functions we shadow, looked up by [`resolve`] at start, so
/// that no lookup (which allocates) happens later, in a signal handler.
static READ: AtomicUsize = AtomicUsize::new(0);
static PREAD: AtomicUsize = AtomicUsize::new(0);
static READV: AtomicUsize = AtomicUsize::new(0);
static PREADV2: AtomicUsize = AtomicUsize::new(0);

pub fn resolve() {
    for (name, cache) in [
        (c"read", &READ),
        (c"pread", &PREAD),
        (c"readv", &READV),
        (c"preadv2", &PREADV2),
    ] {
        next_symbol(name, cache);
    }
}

/// The runtime, when `[buf, buf + len)` touches tiered memory and this
/// call is the program's (under `tiermem run`, or through the C API).
fn tiered(buf: *const c_void, len: usize) -> Option<&'static Runtime> {
    if len == 0 {
        return None;
    }
    let rt = program_runtime()?;
    let (start, last) = (buf as usize, (buf as usize).saturating_add(len - 1));
    (rt.contains(start) || rt.contains(last)).then_some(rt)
}

/// The runtime, when a read from `fd` into `[buf, buf + len)` must pin:
/// the buffer is tiered and the descriptor reads by DMA (`O_DIRECT`).
fn pinning(fd: c_int, buf: *const c_void, len: usize) -> Option<&'static Runtime> {
    let rt = tiered(buf, len)?;
    // SAFETY: F_GETFL reads the descriptor's flags; a bad fd gives -1, and
    // the read itself then fails as it would have.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    (flags != -1 && flags & libc::O_DIRECT != 0).then_some(rt)
}

/// Reads `len` bytes into `buf` with `call(piece, piece_len, done)`, each
/// piece pinned; see the module docs.
fn pinned_read(
    rt: &Runtime,
    buf: *mut c_void,
    len: usize,
    mut call: impl FnMut(*mut c_void, usize, usize) -> isize,
) -> isize {
    let span = rt.pin_span();
    if len <= span {
        let _pinned = rt.pin_for_io(buf as usize, len);
        return call(buf, len, 0);
    }
    let mut done = 0usize;
    while done < len {
        let piece = (len - done).min(span);
        let at = buf.wrapping_byte_add(done);
        let n = {
            let _pinned = rt.pin_for_io(at as usize, piece);
            call(at, piece, done)
        };
        if n < 0 {
            return if done > 0 { done as isize } else { n };
        }
        done += n as usize;
        if (n as usize) < piece {
            break;
        }
    }
    done as isize
}

/// # Safety
/// The C contract of read(2).
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: usize) -> isize {
    let real = glibc_fn!(READ, c"read", ReadFn);
    super::memfd::on_file_access(fd, "the program read the file through its descriptor");
    match pinning(fd, buf, count) {
        // SAFETY: the caller's own read.
        None => unsafe { real(fd, buf, count) },
        // SAFETY: each piece is part of the caller's buffer.
        Some(rt) => pinned_read(rt, buf, count, |b, n, _| unsafe { real(fd, b, n) }),
    }
}

/// # Safety
/// The C contract of pread(2).
#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize {
    let real = glibc_fn!(PREAD, c"pread", PreadFn);
    super::memfd::on_file_access(fd, "the program read the file through its descriptor");
    match pinning(fd, buf, count) {
        // SAFETY: the caller's own read.
        None => unsafe { real(fd, buf, count, offset) },
        Some(rt) => pinned_read(rt, buf, count, |b, n, done| {
            // SAFETY: each piece is part of the caller's buffer, read at its
            // own place in the file.
            unsafe { real(fd, b, n, offset + done as i64) }
        }),
    }
}

/// # Safety
/// As for [`pread`]; off_t is 64-bit on 64-bit Linux.
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize {
    // SAFETY: the same contract.
    unsafe { pread(fd, buf, count, offset) }
}

/// # Safety
/// The C contract of `__read_chk` (read with _FORTIFY_SOURCE).
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize) -> isize {
    if n > buflen {
        fortify_fail();
    }
    // SAFETY: the same contract, checked.
    unsafe { read(fd, buf, n) }
}

/// # Safety
/// The C contract of `__pread_chk`.
#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    offset: i64,
    buflen: usize,
) -> isize {
    if n > buflen {
        fortify_fail();
    }
    // SAFETY: the same contract, checked.
    unsafe { pread(fd, buf, n, offset) }
}

/// # Safety
/// The C contract of `__pread64_chk`.
#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    offset: i64,
    buflen: usize,
) -> isize {
    // SAFETY: the same contract.
    unsafe { __pread_chk(fd, buf, n, offset, buflen) }
}

/// What glibc does when a fortified call's buffer is too small.
fn fortify_fail() -> ! {
    extern "C" {
        fn __chk_fail() -> !;
    }
    // SAFETY: glibc's own abort with "buffer overflow detected".
    unsafe { __chk_fail() }
}

/// Vectored reads: all buffers pinned when they fit the pin span together;
/// otherwise buffer by buffer, as a run of single reads.
fn pinned_readv(
    fd: c_int,
    iov: *const libc::iovec,
    iovcnt: c_int,
    whole: impl FnOnce() -> isize,
    mut one: impl FnMut(*mut c_void, usize, usize) -> isize,
) -> isize {
    if iov.is_null() || iovcnt <= 0 {
        return whole();
    }
    // SAFETY: the caller passes `iovcnt` iovecs at `iov`.
    let iovs = unsafe { std::slice::from_raw_parts(iov, iovcnt as usize) };
    let Some(rt) = iovs.iter().find_map(|v| pinning(fd, v.iov_base, v.iov_len)) else {
        return whole();
    };
    let total: usize = iovs.iter().map(|v| v.iov_len).sum();
    if total <= rt.pin_span() {
        let _pins: Vec<_> = iovs
            .iter()
            .map(|v| rt.pin_for_io(v.iov_base as usize, v.iov_len))
            .collect();
        return whole();
    }
    let mut done = 0usize;
    for v in iovs.iter().filter(|v| v.iov_len > 0) {
        let before = done;
        let n = pinned_read(rt, v.iov_base, v.iov_len, |b, len, within| {
            one(b, len, before + within)
        });
        if n < 0 {
            return if done > 0 { done as isize } else { n };
        }
        done += n as usize;
        if (n as usize) < v.iov_len {
            break;
        }
    }
    done as isize
}

/// # Safety
/// The C contract of readv(2).
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, iovcnt: c_int) -> isize {
    let real = glibc_fn!(READV, c"readv", ReadvFn);
    super::memfd::on_file_access(fd, "the program read the file through its descriptor");
    let real_read = glibc_fn!(READ, c"read", ReadFn);
    pinned_readv(
        fd,
        iov,
        iovcnt,
        // SAFETY: the caller's own call.
        || unsafe { real(fd, iov, iovcnt) },
        // SAFETY: a part of one of the caller's buffers.
        |b, n, _| unsafe { real_read(fd, b, n) },
    )
}

/// # Safety
/// The C contract of preadv2(2).
#[no_mangle]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const libc::iovec,
    iovcnt: c_int,
    offset: i64,
    flags: c_int,
) -> isize {
    let real = glibc_fn!(PREADV2, c"preadv2", PreadvFn);
    super::memfd::on_file_access(fd, "the program read the file through its descriptor");
    // -1: the file's own position, as read(2).
    let at = |done: usize| {
        if offset == -1 {
            -1
        } else {
            offset + done as i64
        }
    };
    pinned_readv(
        fd,
        iov,
        iovcnt,
        // SAFETY: the caller's own call.
        || unsafe { real(fd, iov, iovcnt, offset, flags) },
        |b, n, done| {
            let one = libc::iovec {
                iov_base: b,
                iov_len: n,
            };
            // SAFETY: a part of one of the caller's buffers, at its place.
            unsafe { real(fd, &one, 1, at(done), flags) }
        },
    )
}

/// # Safety
/// The C contract of preadv(2).
#[no_mangle]
pub unsafe extern "C" fn preadv(
    fd: c_int,
    iov: *const libc::iovec,
    iovcnt: c_int,
    offset: i64,
) -> isize {
    // SAFETY: preadv is preadv2 without flags.
    unsafe { preadv2(fd, iov, iovcnt, offset, 0) }
}

/// # Safety
/// As for [`preadv`].
#[no_mangle]
pub unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const libc::iovec,
    iovcnt: c_int,
    offset: i64,
) -> isize {
    // SAFETY: the same contract.
    unsafe { preadv(fd, iov, iovcnt, offset) }
}

/// # Safety
/// As for [`preadv2`].
#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const libc::iovec,
    iovcnt: c_int,
    offset: i64,
    flags: c_int,
) -> isize {
    // SAFETY: the same contract.
    unsafe { preadv2(fd, iov, iovcnt, offset, flags) }
}
