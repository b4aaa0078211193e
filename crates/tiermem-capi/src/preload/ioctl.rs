//! `ioctl(2)`, interposed for one request: `UFFDIO_REGISTER` of a
//! userfaultfd of the program's own over tiered memory.
//!
//! The kernel lets one userfaultfd handle a range, and tiermem's handles all
//! tiered memory, so such a registration failed with `EBUSY`: stress-ng's
//! `userfaultfd` stressor, QEMU's postcopy migration (whose destination
//! registers guest RAM), CRIU's lazy pages. Before the call goes on,
//! tiermem gives the range to the program (`Runtime::hand_over_to_program`):
//! its bytes stay where they are, and it leaves the budget. A range as large
//! as the budget is said on stderr, as an untiered mapping is.

use std::ffi::{c_int, c_long, c_ulong};

use super::exit_stats::mib;
use super::guard::{inside, Guard};
use super::mmap::tiered_pieces;
use super::syscall::kernel_syscall;
use super::{active, program_name, runtime, set_errno};

/// `_IOWR(0xAA, 0x00, struct uffdio_register)`: the register request of
/// `<linux/userfaultfd.h>`, whose argument is 32 bytes.
const UFFDIO_REGISTER: c_ulong = 0xC020_AA00;

/// The range at the start of `struct uffdio_register`.
#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}

/// # Safety
/// The C contract of ioctl(2). The C declaration is variadic; on x86-64 the
/// third argument travels in a register whatever its type, as `syscall()`'s
/// do (see `syscall.rs`); the module is x86-64 only.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: c_long) -> c_int {
    if request == UFFDIO_REGISTER && arg != 0 && active() && !inside() {
        // SAFETY: the caller passes a `struct uffdio_register`, which
        // starts with its range, as the kernel reads it.
        let range = unsafe { std::ptr::read_unaligned(arg as *const UffdioRange) };
        if let Err(errno) = hand_over(range.start as usize, range.len as usize) {
            set_errno(errno);
            return -1;
        }
    }
    let args = [fd as c_long, request as c_long, arg, 0, 0, 0];
    // SAFETY: the caller's own request, made as it asked.
    let ret = unsafe { kernel_syscall(libc::SYS_ioctl, args) };
    ret as c_int
}

/// Gives the tiered parts of `[start, start + len)` to the program. Parts
/// tiermem cannot give (memory the C API or the malloc family handed out,
/// or a range not in whole pages) are left: the kernel answers for them.
fn hand_over(start: usize, len: usize) -> Result<(), c_int> {
    let rt = runtime();
    let (lo, hi) = rt.arena_bounds();
    let (from, to) = (start.max(lo), start.saturating_add(len).min(hi));
    if from >= to {
        return Ok(());
    }
    let _inside = Guard::enter();
    let mut given = 0;
    for piece in tiered_pieces(from, to - from) {
        let piece_len = piece.end - piece.start;
        if !rt.is_lazy_range(piece.start, piece_len) {
            continue;
        }
        // SAFETY: the program registers its own memory, which it owns.
        unsafe { rt.hand_over_to_program(piece.start, piece_len) }.map_err(|e| e.errno())?;
        given += piece_len;
    }
    let budget = rt.dram_budget();
    if given as u64 >= budget {
        eprintln!(
            "tiermem: {} (pid {}) registered {} of its memory with a userfaultfd of its own, which now pages it; tiermem no longer tiers it, and it is outside the {} DRAM budget",
            program_name(),
            std::process::id(),
            mib(given as u64),
            mib(budget),
        );
    }
    Ok(())
}
