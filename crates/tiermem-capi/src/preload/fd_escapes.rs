//! The calls through which a descriptor shows its file to someone else,
//! interposed for tiered memfds (see `memfd`): each tells `memfd` first,
//! which drains a tiered mapping of the file before the call goes on, and
//! then makes the call as the program asked. While the program follows no
//! memfd, each costs one atomic load more than glibc's.
//!
//! The read family lives in `pinned_io`, which interposes it already.

use std::ffi::{c_int, c_long, c_uint, c_void};
use std::sync::atomic::AtomicUsize;

use super::memfd::{on_close, on_create, on_escape, on_file_access};
use super::next_symbol;

/// glibc's definitions of the functions here, looked up by [`resolve`]
/// when the library loads: `write` and `close` are called from signal
/// handlers, where a lookup (which allocates) must not happen.
static MEMFD_CREATE: AtomicUsize = AtomicUsize::new(0);
static CLOSE: AtomicUsize = AtomicUsize::new(0);
static CLOSE_RANGE: AtomicUsize = AtomicUsize::new(0);
static WRITE: AtomicUsize = AtomicUsize::new(0);
static PWRITE: AtomicUsize = AtomicUsize::new(0);
static WRITEV: AtomicUsize = AtomicUsize::new(0);
static PWRITEV2: AtomicUsize = AtomicUsize::new(0);
static FTRUNCATE: AtomicUsize = AtomicUsize::new(0);
static FALLOCATE: AtomicUsize = AtomicUsize::new(0);
static POSIX_FALLOCATE: AtomicUsize = AtomicUsize::new(0);
static DUP: AtomicUsize = AtomicUsize::new(0);
static DUP2: AtomicUsize = AtomicUsize::new(0);
static DUP3: AtomicUsize = AtomicUsize::new(0);
static FCNTL: AtomicUsize = AtomicUsize::new(0);
static SENDMSG: AtomicUsize = AtomicUsize::new(0);
static SENDMMSG: AtomicUsize = AtomicUsize::new(0);
static COPY_FILE_RANGE: AtomicUsize = AtomicUsize::new(0);
static SPLICE: AtomicUsize = AtomicUsize::new(0);
static SENDFILE: AtomicUsize = AtomicUsize::new(0);

pub fn resolve() {
    for (name, cache) in [
        (c"memfd_create", &MEMFD_CREATE),
        (c"close", &CLOSE),
        (c"close_range", &CLOSE_RANGE),
        (c"write", &WRITE),
        (c"pwrite", &PWRITE),
        (c"writev", &WRITEV),
        (c"pwritev2", &PWRITEV2),
        (c"ftruncate", &FTRUNCATE),
        (c"fallocate", &FALLOCATE),
        (c"posix_fallocate", &POSIX_FALLOCATE),
        (c"dup", &DUP),
        (c"dup2", &DUP2),
        (c"dup3", &DUP3),
        (c"fcntl", &FCNTL),
        (c"sendmsg", &SENDMSG),
        (c"sendmmsg", &SENDMMSG),
        (c"copy_file_range", &COPY_FILE_RANGE),
        (c"splice", &SPLICE),
        (c"sendfile", &SENDFILE),
    ] {
        next_symbol(name, cache);
    }
}

/// # Safety
/// The C contract of memfd_create(2).
#[no_mangle]
pub unsafe extern "C" fn memfd_create(name: *const libc::c_char, flags: c_uint) -> c_int {
    let real = glibc_fn!(
        MEMFD_CREATE,
        c"memfd_create",
        unsafe extern "C" fn(*const libc::c_char, c_uint) -> c_int
    );
    // SAFETY: the caller's own call.
    let fd = unsafe { real(name, flags) };
    on_create(fd, flags);
    fd
}

/// # Safety
/// The C contract of close(2).
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let real = glibc_fn!(CLOSE, c"close", unsafe extern "C" fn(c_int) -> c_int);
    on_close(fd);
    // SAFETY: the caller's own call.
    unsafe { real(fd) }
}

/// # Safety
/// The C contract of close_range(2).
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let real = glibc_fn!(
        CLOSE_RANGE,
        c"close_range",
        unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int
    );
    // SAFETY: the caller's own call.
    let rc = unsafe { real(first, last, flags) };
    // Marking the range close-on-exec closes nothing.
    if rc == 0 && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 && super::memfd::any() {
        super::memfd::on_close_range(first, last);
    }
    rc
}

/// # Safety
/// The C contract of write(2).
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    let real = glibc_fn!(
        WRITE,
        c"write",
        unsafe extern "C" fn(c_int, *const c_void, usize) -> isize
    );
    on_file_access(fd, "the program wrote the file through its descriptor");
    // SAFETY: the caller's own call.
    unsafe { real(fd, buf, n) }
}

/// # Safety
/// The C contract of pwrite(2).
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: usize, at: i64) -> isize {
    let real = glibc_fn!(
        PWRITE,
        c"pwrite",
        unsafe extern "C" fn(c_int, *const c_void, usize, i64) -> isize
    );
    on_file_access(fd, "the program wrote the file through its descriptor");
    // SAFETY: the caller's own call.
    unsafe { real(fd, buf, n, at) }
}

/// # Safety
/// As for [`pwrite`]; off_t is 64-bit on 64-bit Linux.
#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: usize, at: i64) -> isize {
    // SAFETY: the same contract.
    unsafe { pwrite(fd, buf, n, at) }
}

/// # Safety
/// The C contract of writev(2).
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, count: c_int) -> isize {
    let real = glibc_fn!(
        WRITEV,
        c"writev",
        unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> isize
    );
    on_file_access(fd, "the program wrote the file through its descriptor");
    // SAFETY: the caller's own call.
    unsafe { real(fd, iov, count) }
}

type PwritevFn = unsafe extern "C" fn(c_int, *const libc::iovec, c_int, i64, c_int) -> isize;

/// # Safety
/// The C contract of pwritev2(2).
#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const libc::iovec,
    count: c_int,
    at: i64,
    flags: c_int,
) -> isize {
    let real = glibc_fn!(PWRITEV2, c"pwritev2", PwritevFn);
    on_file_access(fd, "the program wrote the file through its descriptor");
    // SAFETY: the caller's own call.
    unsafe { real(fd, iov, count, at, flags) }
}

/// # Safety
/// The C contract of pwritev(2): pwritev2 without flags.
#[no_mangle]
pub unsafe extern "C" fn pwritev(
    fd: c_int,
    iov: *const libc::iovec,
    count: c_int,
    at: i64,
) -> isize {
    // SAFETY: the same contract.
    unsafe { pwritev2(fd, iov, count, at, 0) }
}

/// # Safety
/// As for [`pwritev`].
#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const libc::iovec,
    count: c_int,
    at: i64,
) -> isize {
    // SAFETY: the same contract.
    unsafe { pwritev2(fd, iov, count, at, 0) }
}

/// # Safety
/// As for [`pwritev2`].
#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const libc::iovec,
    count: c_int,
    at: i64,
    flags: c_int,
) -> isize {
    // SAFETY: the same contract.
    unsafe { pwritev2(fd, iov, count, at, flags) }
}

/// # Safety
/// The C contract of ftruncate(2).
#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: i64) -> c_int {
    let real = glibc_fn!(
        FTRUNCATE,
        c"ftruncate",
        unsafe extern "C" fn(c_int, i64) -> c_int
    );
    on_file_access(fd, "the program resized its file");
    // SAFETY: the caller's own call.
    unsafe { real(fd, len) }
}

/// # Safety
/// As for [`ftruncate`].
#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: i64) -> c_int {
    // SAFETY: the same contract.
    unsafe { ftruncate(fd, len) }
}

/// # Safety
/// The C contract of fallocate(2).
#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, at: i64, len: i64) -> c_int {
    let real = glibc_fn!(
        FALLOCATE,
        c"fallocate",
        unsafe extern "C" fn(c_int, c_int, i64, i64) -> c_int
    );
    // A hole punched in a tiered memfd is zeros in its mapping, which the
    // runtime gives without a drain (a balloon driver returns guest pages
    // so); anything else that can allocate writes the file.
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    if mode != punch || !super::memfd::punch(fd, at, len) {
        on_file_access(fd, "the program allocated its file");
    }
    // SAFETY: the caller's own call.
    unsafe { real(fd, mode, at, len) }
}

/// # Safety
/// As for [`fallocate`].
#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, at: i64, len: i64) -> c_int {
    // SAFETY: the same contract.
    unsafe { fallocate(fd, mode, at, len) }
}

/// # Safety
/// The C contract of posix_fallocate(3), which returns an error number.
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, at: i64, len: i64) -> c_int {
    let real = glibc_fn!(
        POSIX_FALLOCATE,
        c"posix_fallocate",
        unsafe extern "C" fn(c_int, i64, i64) -> c_int
    );
    on_file_access(fd, "the program allocated its file");
    // SAFETY: the caller's own call.
    unsafe { real(fd, at, len) }
}

/// # Safety
/// As for [`posix_fallocate`].
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, at: i64, len: i64) -> c_int {
    // SAFETY: the same contract.
    unsafe { posix_fallocate(fd, at, len) }
}

/// # Safety
/// The C contract of dup(2).
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let real = glibc_fn!(DUP, c"dup", unsafe extern "C" fn(c_int) -> c_int);
    on_escape(fd, "the program duplicated its descriptor");
    // SAFETY: the caller's own call.
    unsafe { real(fd) }
}

/// # Safety
/// The C contract of dup2(2): `new` is closed first, unless it is `old`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let real = glibc_fn!(DUP2, c"dup2", unsafe extern "C" fn(c_int, c_int) -> c_int);
    if old != new {
        on_escape(old, "the program duplicated its descriptor");
        on_close(new);
    }
    // SAFETY: the caller's own call.
    unsafe { real(old, new) }
}

/// # Safety
/// The C contract of dup3(2).
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let real = glibc_fn!(
        DUP3,
        c"dup3",
        unsafe extern "C" fn(c_int, c_int, c_int) -> c_int
    );
    if old != new {
        on_escape(old, "the program duplicated its descriptor");
        on_close(new);
    }
    // SAFETY: the caller's own call.
    unsafe { real(old, new, flags) }
}

/// # Safety
/// The C contract of fcntl(2). The C declaration is variadic; on x86-64
/// the third argument travels in a register whatever its type (see
/// `syscall.rs`), and glibc's `fcntl` reads it as the command wants.
#[cfg(target_arch = "x86_64")]
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    let real = glibc_fn!(
        FCNTL,
        c"fcntl",
        unsafe extern "C" fn(c_int, c_int, c_long) -> c_int
    );
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            on_escape(fd, "the program duplicated its descriptor")
        }
        libc::F_SETFD if arg & libc::FD_CLOEXEC as c_long == 0 => {
            on_escape(fd, "the program made its descriptor inheritable")
        }
        _ => {}
    }
    // SAFETY: the caller's own call.
    unsafe { real(fd, cmd, arg) }
}

/// # Safety
/// As for [`fcntl`].
#[cfg(target_arch = "x86_64")]
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    // SAFETY: the same contract.
    unsafe { fcntl(fd, cmd, arg) }
}

/// # Safety
/// The C contract of sendmsg(2).
#[no_mangle]
pub unsafe extern "C" fn sendmsg(sock: c_int, msg: *const libc::msghdr, flags: c_int) -> isize {
    let real = glibc_fn!(
        SENDMSG,
        c"sendmsg",
        unsafe extern "C" fn(c_int, *const libc::msghdr, c_int) -> isize
    );
    if super::memfd::any() && !msg.is_null() {
        // SAFETY: the caller passes a valid msghdr.
        unsafe { escape_passed_fds(&*msg) };
    }
    // SAFETY: the caller's own call.
    unsafe { real(sock, msg, flags) }
}

/// # Safety
/// The C contract of sendmmsg(2).
#[no_mangle]
pub unsafe extern "C" fn sendmmsg(
    sock: c_int,
    msgs: *mut libc::mmsghdr,
    count: c_uint,
    flags: c_int,
) -> c_int {
    let real = glibc_fn!(
        SENDMMSG,
        c"sendmmsg",
        unsafe extern "C" fn(c_int, *mut libc::mmsghdr, c_uint, c_int) -> c_int
    );
    if super::memfd::any() && !msgs.is_null() {
        for i in 0..count as usize {
            // SAFETY: the caller passes `count` valid mmsghdrs.
            unsafe { escape_passed_fds(&(*msgs.add(i)).msg_hdr) };
        }
    }
    // SAFETY: the caller's own call.
    unsafe { real(sock, msgs, count, flags) }
}

/// Every descriptor `msg` passes with `SCM_RIGHTS` escapes.
///
/// # Safety
/// `msg` is a valid msghdr whose control buffer, if any, is readable.
unsafe fn escape_passed_fds(msg: &libc::msghdr) {
    // SAFETY: the CMSG macros walk the caller's control buffer.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !cmsg.is_null() {
        // SAFETY: a header within the control buffer.
        let header = unsafe { &*cmsg };
        if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN(0) is a constant computation.
            let data_len = header.cmsg_len as usize - unsafe { libc::CMSG_LEN(0) } as usize;
            // SAFETY: the data follows the header, within the buffer.
            let data = unsafe { libc::CMSG_DATA(cmsg) } as *const c_int;
            for i in 0..data_len / size_of::<c_int>() {
                // SAFETY: within the descriptors the message carries.
                let fd = unsafe { data.add(i).read_unaligned() };
                on_escape(fd, "the program sent its descriptor to another process");
            }
        }
        // SAFETY: walks to the next header or null.
        cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
    }
}

/// `copy_file_range(2)` and `splice(2)`, which take the same arguments.
type CopyFn = unsafe extern "C" fn(c_int, *mut i64, c_int, *mut i64, usize, c_uint) -> isize;

/// A copy between two descriptors: both files are accessed.
///
/// # Safety
/// `real` is glibc's function, called with the caller's own arguments.
unsafe fn copy_between(
    real: CopyFn,
    why: [&str; 2],
    (fd_in, off_in): (c_int, *mut i64),
    (fd_out, off_out): (c_int, *mut i64),
    len: usize,
    flags: c_uint,
) -> isize {
    on_file_access(fd_in, why[0]);
    on_file_access(fd_out, why[1]);
    // SAFETY: as the caller promises.
    unsafe { real(fd_in, off_in, fd_out, off_out, len, flags) }
}

/// # Safety
/// The C contract of copy_file_range(2).
#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    len: usize,
    flags: c_uint,
) -> isize {
    let real = glibc_fn!(COPY_FILE_RANGE, c"copy_file_range", CopyFn);
    let why = [
        "the program copied its file",
        "the program copied into its file",
    ];
    // SAFETY: the caller's own call.
    unsafe { copy_between(real, why, (fd_in, off_in), (fd_out, off_out), len, flags) }
}

/// # Safety
/// The C contract of splice(2).
#[no_mangle]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    len: usize,
    flags: c_uint,
) -> isize {
    let real = glibc_fn!(SPLICE, c"splice", CopyFn);
    let why = [
        "the program spliced its file",
        "the program spliced into its file",
    ];
    // SAFETY: the caller's own call.
    unsafe { copy_between(real, why, (fd_in, off_in), (fd_out, off_out), len, flags) }
}

/// # Safety
/// The C contract of sendfile(2).
#[no_mangle]
pub unsafe extern "C" fn sendfile(out: c_int, fd_in: c_int, at: *mut i64, n: usize) -> isize {
    let real = glibc_fn!(
        SENDFILE,
        c"sendfile",
        unsafe extern "C" fn(c_int, c_int, *mut i64, usize) -> isize
    );
    on_file_access(fd_in, "the program sent its file");
    on_file_access(out, "the program sent into its file");
    // SAFETY: the caller's own call.
    unsafe { real(out, fd_in, at, n) }
}

/// # Safety
/// As for [`sendfile`].
#[no_mangle]
pub unsafe extern "C" fn sendfile64(out: c_int, fd_in: c_int, at: *mut i64, n: usize) -> isize {
    // SAFETY: the same contract.
    unsafe { sendfile(out, fd_in, at, n) }
}
