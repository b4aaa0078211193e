//! `syscall(2)`, interposed: the system calls a program can make through
//! it that tiermem must see (forks, asynchronous I/O setup).

use std::ffi::c_long;

use super::{fork, guard, memfd, set_errno};

/// `syscall(2)`. Two kinds of call need tiermem:
/// - the forks it can make that run no atfork handlers: `SYS_fork`, and
///   `SYS_clone` or `SYS_clone3` when the child gets a copy of the memory
///   (no `CLONE_VM`) and goes on from the caller's stack. Those run the
///   fork handlers around the real call ([`fork`]);
/// - the setup of asynchronous I/O, `SYS_io_uring_setup` (liburing and the
///   io-uring crate come here) and `SYS_io_setup` (libaio): from then on,
///   eviction asks the kernel which pages such I/O has pinned
///   (`tiermem_core::expect_async_io`). tiermem's own rings are made
///   inside tiermem and do not count.
///
/// Every call goes straight to the kernel, as glibc's `syscall()` does,
/// without a symbol lookup (the runtime's own raw system calls come here
/// too, some from signal handlers).
///
/// The C declaration is variadic, which stable Rust cannot define. On
/// x86-64 a variadic call passes integer arguments exactly as a call with
/// fixed ones: six registers, the seventh on the stack, which glibc's own
/// `syscall()` reads whatever the call passed. So seven `long`s serve
/// every caller; elsewhere glibc's `syscall()` is left alone.
///
/// # Safety
/// As for `syscall(2)`: the call must be a valid system call.
#[cfg(target_arch = "x86_64")]
#[no_mangle]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    let call = || {
        // SAFETY: the caller's own system call, made as it asked.
        unsafe { kernel_syscall(n, [a1, a2, a3, a4, a5, a6]) }
    };
    if matches!(n, libc::SYS_io_uring_setup | libc::SYS_io_setup) && !guard::inside() {
        tiermem_core::expect_async_io();
    }
    if n == libc::SYS_memfd_create {
        let fd = call();
        memfd::on_create(fd as std::ffi::c_int, a2 as u32);
        return fd;
    }
    match fork::copies_memory(n, a1, a2) {
        true => fork::with_fork_handlers(call),
        false => call(),
    }
}

/// A system call straight to the kernel, with glibc's convention: the
/// result, or -1 and errno.
///
/// # Safety
/// The call must be a valid system call with these arguments.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn kernel_syscall(n: c_long, a: [c_long; 6]) -> c_long {
    let ret: c_long;
    // SAFETY: the x86-64 system call convention; the kernel clobbers rcx
    // and r11 and reads or writes memory the arguments name.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        );
    }
    if (-4095..0).contains(&ret) {
        set_errno(-ret as i32);
        return -1;
    }
    ret
}
