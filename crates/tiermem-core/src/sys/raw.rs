//! Memory-management system calls made directly, never through libc's
//! symbols.
//!
//! In transparent mode libtiermem.so interposes `mmap`, `munmap`, `mremap`,
//! `madvise` and `mprotect`. The runtime's own calls (its page table, frames,
//! zaps of evicted pages) must never take that detour: a zap of an evicted
//! page would otherwise be mistaken for the program discarding it. The
//! interposer also uses these to pass foreign calls straight to the kernel.
//!
//! Each returns the kernel's result, or `Err(errno)`.

use std::io;

fn check(rc: libc::c_long) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// # Safety
/// As for mmap(2): with `MAP_FIXED`, whatever was mapped at `addr` is gone.
pub unsafe fn mmap(
    addr: usize,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    offset: i64,
) -> io::Result<usize> {
    check(libc::syscall(
        libc::SYS_mmap,
        addr,
        len,
        prot as libc::c_long,
        flags as libc::c_long,
        fd as libc::c_long,
        offset,
    ))
}

/// # Safety
/// Nothing may use `[addr, addr+len)` afterwards.
pub unsafe fn munmap(addr: usize, len: usize) -> io::Result<()> {
    check(libc::syscall(libc::SYS_munmap, addr, len)).map(drop)
}

/// # Safety
/// As for madvise(2): destructive advice discards the range's contents.
pub unsafe fn madvise(addr: usize, len: usize, advice: i32) -> io::Result<()> {
    check(libc::syscall(
        libc::SYS_madvise,
        addr,
        len,
        advice as libc::c_long,
    ))
    .map(drop)
}

/// mlock(2), or munlock(2) with `lock` false: no memory is changed, but
/// locking faults every page of the range in.
pub fn mlock(addr: usize, len: usize, lock: bool) -> io::Result<()> {
    let nr = if lock {
        libc::SYS_mlock
    } else {
        libc::SYS_munlock
    };
    // SAFETY: (un)locking a range touches no memory the caller relies on.
    check(unsafe { libc::syscall(nr, addr, len) }).map(drop)
}

/// # Safety
/// As for mprotect(2): accesses the new protection forbids will fault.
pub unsafe fn mprotect(addr: usize, len: usize, prot: i32) -> io::Result<()> {
    check(libc::syscall(
        libc::SYS_mprotect,
        addr,
        len,
        prot as libc::c_long,
    ))
    .map(drop)
}

/// # Safety
/// As for mremap(2): the old range may be gone afterwards.
pub unsafe fn mremap(
    old: usize,
    old_len: usize,
    new_len: usize,
    flags: i32,
    new_addr: usize,
) -> io::Result<usize> {
    check(libc::syscall(
        libc::SYS_mremap,
        old,
        old_len,
        new_len,
        flags as libc::c_long,
        new_addr,
    ))
}
