//! fork without exec: tiermem-core registers the fork handlers (see its
//! `fork` module for the design) for every runtime; here they run with
//! the thread marked as inside tiermem, whether the preload or the C API
//! started the runtime.
//!
//! Forks that run no atfork handlers get them here: glibc's `_Fork()` and
//! the `syscall()` wrapper asked for `SYS_fork`, or for a memory-copying
//! `SYS_clone` or `SYS_clone3`, are wrapped. A fork made with a system call
//! instruction of the program's own is out of reach: its child reads
//! evicted pages as zeros.

use std::ffi::c_long;
use std::sync::atomic::AtomicUsize;

use tiermem_core::fork::{child_all, parent_all, prepare_all, set_wrapper};

use super::{memfd, next_symbol, set_errno, Guard};

/// Makes the fork handlers run inside tiermem: what they allocate comes
/// from plain memory, never from the tiered memory they are pausing.
pub fn install() {
    set_wrapper(|handler| {
        let _inside = Guard::enter();
        handler();
    });
    // Registered after tiermem-core's handlers, so that this prepare
    // handler runs before theirs (prepare handlers run in reverse order),
    // while the runtime is not paused yet, and this child handler after.
    // SAFETY: registers two plain extern "C" functions.
    let rc = unsafe { libc::pthread_atfork(Some(memfd_before_fork), None, Some(memfd_in_child)) };
    if rc != 0 {
        eprintln!(
            "tiermem: pthread_atfork failed ({rc}); a forked child could not share tiered memfds"
        );
    }
}

extern "C" fn memfd_before_fork() {
    memfd::before_fork();
}

extern "C" fn memfd_in_child() {
    memfd::forget_in_child();
}

/// Whether the call makes a child with a copy of the memory that goes on
/// from the caller's stack, as fork(2) does.
#[cfg(target_arch = "x86_64")]
pub(super) fn copies_memory(n: c_long, a1: c_long, a2: c_long) -> bool {
    // A child sharing the file table (CLONE_FILES) would replace the
    // parent's userfaultfd with its own: not a fork tiermem can serve.
    let no_vm = |flags: u64| flags & (libc::CLONE_VM | libc::CLONE_FILES) as u64 == 0;
    match n {
        libc::SYS_fork => true,
        // clone(flags, new stack, ...)
        libc::SYS_clone => no_vm(a1 as u64) && a2 == 0,
        // clone3(args, size): flags and stack are the first and sixth u64s.
        libc::SYS_clone3 if a1 != 0 && a2 >= 48 => {
            // SAFETY: the caller passes a clone_args of `a2` bytes at `a1`.
            let (flags, stack) = unsafe {
                let args = a1 as *const u64;
                (args.read_unaligned(), args.add(5).read_unaligned())
            };
            no_vm(flags) && stack == 0
        }
        _ => false,
    }
}

/// glibc's `_Fork()`: fork without the atfork handlers (glibc 2.34+). Ours
/// runs tiermem's, so the child keeps its evicted memory. Unlike glibc's,
/// it is not async-signal-safe (the child starts a pager: it allocates,
/// opens its backing file and starts threads): a `_Fork` from a signal
/// handler of a tiered program is not supported.
///
/// # Safety
/// As for `_Fork(3)`.
#[no_mangle]
pub unsafe extern "C" fn _Fork() -> libc::pid_t {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    let Some(real) = next_symbol(c"_Fork", &REAL) else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: `real` is glibc's _Fork, whose signature this is.
    let real: unsafe extern "C" fn() -> libc::pid_t = unsafe { std::mem::transmute(real) };
    // SAFETY: as the caller's contract.
    with_fork_handlers(|| c_long::from(unsafe { real() })) as libc::pid_t
}

/// Runs `fork` (which returns 0 in the child, as fork(2)) between the
/// prepare handler and the parent's or child's, keeping its errno.
pub(super) fn with_fork_handlers(fork: impl FnOnce() -> c_long) -> c_long {
    memfd::before_fork();
    prepare_all();
    let pid = fork();
    // SAFETY: __errno_location returns this thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    match pid {
        0 => {
            child_all();
            memfd::forget_in_child();
        }
        _ => parent_all(),
    }
    set_errno(errno);
    pid
}
