//! Locked memory stays in DRAM: `mlock`ed tiered pages are never evicted,
//! so never written to the store, which matters most for memory a program
//! locks to keep a secret off the disk (see tiermem-core's `pins`).
//!
//! - `mlock`, `mlock2` and `munlock` on tiered memory lock and unlock its
//!   pages in tiermem too, and in the kernel as usual. Locked pages may take
//!   at most half the budget; past that the call fails with `EAGAIN`, as
//!   the kernel's does past `RLIMIT_MEMLOCK`.
//! - `mlockall` would lock every tiered page in DRAM and end tiering: it
//!   is refused (`ENOMEM`), with a line on stderr. `munlockall` unlocks.
//! - A `MAP_LOCKED` mapping is not tiered at all (see `mmap.rs`).

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use super::{program_name, program_runtime, set_errno};

/// mlock2's flags, passed on; `MLOCK_ONFAULT` changes nothing for tiermem.
fn lock(addr: *const c_void, len: usize, flags: c_uint) -> c_int {
    let a = addr as usize;
    let tiered = program_runtime()
        .filter(|rt| len > 0 && (rt.contains(a) || rt.contains(a.saturating_add(len - 1))));
    // Foreign mappings in the arena (see mmap.rs) are the kernel's alone.
    let pieces = match tiered {
        Some(_) => super::mmap::tiered_pieces(a, len),
        None => Vec::new(),
    };
    if let Some(rt) = tiered {
        for (done, piece) in pieces.iter().enumerate() {
            if let Err(e) = rt.lock(piece.start, piece.end - piece.start) {
                for undo in &pieces[..done] {
                    rt.unlock(undo.start, undo.end - undo.start);
                }
                set_errno(e.errno());
                return -1;
            }
        }
    }
    // SAFETY: the caller's own call, straight to the kernel.
    let rc = unsafe { libc::syscall(libc::SYS_mlock2, a, len, flags) };
    if let (true, Some(rt)) = (rc != 0, tiered) {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOMEM);
        for piece in &pieces {
            rt.unlock(piece.start, piece.end - piece.start);
        }
        set_errno(errno);
    }
    rc as c_int
}

/// # Safety
/// The C contract of mlock(2).
#[no_mangle]
pub unsafe extern "C" fn mlock(addr: *const c_void, len: usize) -> c_int {
    lock(addr, len, 0)
}

/// # Safety
/// The C contract of mlock2(2).
#[no_mangle]
pub unsafe extern "C" fn mlock2(addr: *const c_void, len: usize, flags: c_uint) -> c_int {
    lock(addr, len, flags)
}

/// # Safety
/// The C contract of munlock(2).
#[no_mangle]
pub unsafe extern "C" fn munlock(addr: *const c_void, len: usize) -> c_int {
    if let Some(rt) = program_runtime() {
        rt.unlock(addr as usize, len);
    }
    // SAFETY: the caller's own call, straight to the kernel.
    unsafe { libc::syscall(libc::SYS_munlock, addr, len) as c_int }
}

/// # Safety
/// The C contract of mlockall(2).
#[no_mangle]
pub unsafe extern "C" fn mlockall(flags: c_int) -> c_int {
    if program_runtime().is_some() {
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            eprintln!(
                "tiermem: {} called mlockall(), which would lock all of its memory in DRAM and \
                 end tiering; refused (ENOMEM). Lock what must stay in DRAM with mlock(), or run \
                 the program without tiermem",
                program_name()
            );
        }
        set_errno(libc::ENOMEM);
        return -1;
    }
    // SAFETY: the caller's own call, straight to the kernel.
    unsafe { libc::syscall(libc::SYS_mlockall, flags) as c_int }
}

/// # Safety
/// The C contract of munlockall(2).
#[no_mangle]
pub unsafe extern "C" fn munlockall() -> c_int {
    if let Some(rt) = program_runtime() {
        rt.unlock_all();
    }
    // SAFETY: the caller's own call, straight to the kernel.
    unsafe { libc::syscall(libc::SYS_munlockall) as c_int }
}
