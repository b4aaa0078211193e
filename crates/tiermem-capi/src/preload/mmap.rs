//! The mmap family. Large private anonymous read-write mappings made by the
//! program become tiered regions; `munmap`, `mremap` and `madvise` on tiered
//! memory keep their kernel semantics through the runtime. Everything else,
//! and every call made inside tiermem or mimalloc, goes straight to the
//! kernel.

use std::ffi::{c_int, c_void};
use std::io;

use tiermem_core::sys::raw;

use super::exit_stats::mib;
use super::guard::{inside, Guard};
use super::memfd;
use super::{active, mmap_threshold, program_name, program_runtime, runtime, set_errno};

const MAP_FAILED: *mut c_void = !0usize as *mut c_void;
const BASE_PAGE: usize = 4096;

/// The mapping-type bits: private, shared or shared-validate.
const MAP_TYPE: c_int = 0x0f;

/// Flags that make a mapping something other than plain anonymous memory.
const SPECIAL: c_int = libc::MAP_FIXED
    | libc::MAP_FIXED_NOREPLACE
    | libc::MAP_STACK
    | libc::MAP_GROWSDOWN
    | libc::MAP_HUGETLB
    | libc::MAP_32BIT
    // Locked memory must never reach the store (see mlock.rs).
    | libc::MAP_LOCKED;

/// Plain private anonymous memory of at least the threshold, read-write or
/// `PROT_NONE`. A `PROT_NONE` mapping is address space reserved for memory
/// the program commits later, by `mprotect` or by `MAP_FIXED` into it: a
/// VM's guest RAM (QEMU), a JIT's code cache, a managed heap. Reserved in
/// the arena, that memory is tiered once it is committed.
fn wants_tiering(len: usize, prot: c_int, flags: c_int) -> bool {
    flags & libc::MAP_ANONYMOUS != 0
        && flags & MAP_TYPE == libc::MAP_PRIVATE
        && flags & SPECIAL == 0
        && (prot == libc::PROT_READ | libc::PROT_WRITE || prot == libc::PROT_NONE)
        && len >= mmap_threshold()
}

/// A lazily committed tiered range for an interposed `mmap`, with the
/// protection asked for; `None` when the arena has no room left.
fn alloc_tiered(len: usize, prot: c_int) -> Option<*mut c_void> {
    let rt = runtime();
    let p = rt.alloc_lazy(len).ok()?.as_ptr() as usize;
    if prot != libc::PROT_READ | libc::PROT_WRITE && rt.protect(p, len, prot).is_err() {
        rt.unmap(p, len);
        return None;
    }
    Some(p as *mut c_void)
}

/// Whether `[addr, addr+len)` touches the tiered arena (only when active).
fn touches_arena(addr: usize, len: usize) -> bool {
    active() && {
        let rt = runtime();
        rt.contains(addr) || (len > 0 && rt.contains(addr.saturating_add(len - 1)))
    }
}

fn fail<T>(e: io::Error, value: T) -> T {
    set_errno(e.raw_os_error().unwrap_or(libc::EINVAL));
    value
}

/// # Safety
/// The C contract of mmap(2).
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    let fixed = flags & libc::MAP_FIXED != 0;
    let request = FileMap {
        addr: addr as usize,
        len,
        prot,
        flags,
        fd,
        offset,
    };
    let mut said = false;
    if active() && !inside() && flags & libc::MAP_ANONYMOUS == 0 && memfd::any() {
        match map_memfd(&request) {
            Memfd::Tiered(p) => return p,
            Memfd::Untiered { reason_said } => said = reason_said,
        }
    }
    if active() && !inside() && !fixed && wants_tiering(len, prot, flags) {
        let _inside = Guard::enter();
        if let Some(p) = alloc_tiered(len, prot) {
            return p;
        }
        // Out of tiered address space: an untiered mapping beats failing.
    }
    if fixed && touches_arena(addr as usize, len) {
        if !is_plain(flags) {
            return map_foreign_in_arena(&request, said);
        }
        return map_fixed_in_arena(addr as usize, len, prot, flags);
    }
    if flags & libc::MAP_FIXED_NOREPLACE != 0 && touches_arena(addr as usize, len) {
        return map_noreplace_in_arena(addr as usize, len, prot, flags);
    }
    match raw::mmap(addr as usize, len, prot, flags, fd, offset) {
        Ok(p) => {
            if !said {
                report_if_over_budget(len, prot, flags, fd);
            }
            p as *mut c_void
        }
        Err(e) => fail(e, MAP_FAILED),
    }
}

/// An `mmap` of a file, as the program asked for it.
#[derive(Clone, Copy)]
struct FileMap {
    addr: usize,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
}

impl FileMap {
    /// The mapping made by the kernel wherever it likes, to learn whether
    /// and how the kernel would refuse it.
    unsafe fn trial(&self) -> io::Result<usize> {
        let flags = self.flags & !libc::MAP_FIXED;
        raw::mmap(0, self.len, self.prot, flags, self.fd, self.offset)
    }
}

/// What became of a file mapping of a followed memfd (see `memfd`).
enum Memfd {
    Tiered(*mut c_void),
    /// The kernel maps it; whether why was said on stderr already.
    Untiered {
        reason_said: bool,
    },
}

/// A mapping of `fd` when memfds are followed: tiered memory standing for
/// the memfd when it may be, else the memfd is followed no more (its tiered
/// mapping drained first, if it has one) and the kernel maps it.
unsafe fn map_memfd(m: &FileMap) -> Memfd {
    let (len, fd) = (m.len, m.fd);
    match memfd::why_not_tiered(len, m.prot, m.flags, fd, m.offset) {
        Ok(()) => {
            if let Some(p) = tier_memfd(m) {
                return Memfd::Tiered(p);
            }
            memfd::on_escape(fd, "the memfd was mapped where tiermem cannot tier it");
            Memfd::Untiered { reason_said: false }
        }
        Err(why) => {
            memfd::on_escape(fd, "the memfd was mapped once more");
            let large = len as u64 >= runtime().dram_budget();
            if let (Some(why), true) = (why, large) {
                let _inside = Guard::enter();
                eprintln!(
                    "tiermem: {} (pid {}) mapped {} of a memfd that tiermem does not tier: {why}; it is outside the {} DRAM budget",
                    program_name(),
                    std::process::id(),
                    mib(len as u64),
                    mib(runtime().dram_budget()),
                );
            }
            Memfd::Untiered {
                reason_said: why.is_some() && large,
            }
        }
    }
}

/// Tiered memory standing for the memfd `fd`: at a fresh address, or at
/// `addr` (`MAP_FIXED`) in the lazily committed zone. The kernel maps the
/// file once first, so that a mapping it would refuse is refused with its
/// error. `None` where tiermem cannot place it.
unsafe fn tier_memfd(m: &FileMap) -> Option<*mut c_void> {
    let fixed = m.flags & libc::MAP_FIXED != 0;
    let span = m.len.next_multiple_of(BASE_PAGE);
    if fixed && (!m.addr.is_multiple_of(BASE_PAGE) || !runtime().is_lazy_range(m.addr, span)) {
        return None;
    }
    let trial = m.trial().ok()?;
    let _ = raw::munmap(trial, m.len);
    let _inside = Guard::enter();
    let rt = runtime();
    let at = match fixed {
        true => {
            rt.take_back_foreign(m.addr, span).ok()?;
            rt.map_fixed_zero(m.addr, span);
            rt.protect(m.addr, span, m.prot).ok()?;
            m.addr
        }
        false => alloc_tiered(span, m.prot)? as usize,
    };
    if !memfd::record(at, span, m.fd, m.offset) {
        if !fixed {
            rt.unmap(at, span);
        }
        return None;
    }
    Some(at as *mut c_void)
}

/// A mapping of the program's that stays untiered is memory the DRAM
/// budget does not cover. One at least as large as the budget is said on
/// stderr, with its size and why, so that a program never exceeds its
/// budget in silence (a VM's guest memory in shared memory, say).
fn report_if_over_budget(len: usize, prot: c_int, flags: c_int, fd: c_int) {
    if !active() || inside() {
        return;
    }
    let budget = runtime().dram_budget();
    if (len as u64) < budget {
        return;
    }
    let _inside = Guard::enter();
    let Some(reason) = untiered_reason(prot, flags, fd) else {
        return;
    };
    eprintln!(
        "tiermem: {} (pid {}) mapped {} that tiermem does not tier: {reason}; it is outside the {} DRAM budget",
        program_name(),
        std::process::id(),
        mib(len as u64),
        mib(budget),
    );
}

/// Why an untiered mapping is not tiered, for memory the budget is meant
/// to cover: anonymous memory, and shared memory (memfd, /dev/shm). Other
/// file mappings are page cache, which the kernel writes back and drops on
/// its own, and are not reported.
fn untiered_reason(prot: c_int, flags: c_int, fd: c_int) -> Option<&'static str> {
    let shared = flags & MAP_TYPE != libc::MAP_PRIVATE;
    if flags & libc::MAP_ANONYMOUS == 0 {
        if shared && is_shared_memory(fd) && !memfd::enabled() {
            return Some(
                "shared memory is not tiered (TIERMEM_MEMFD=off, tiermem run --untiered-memfd)",
            );
        }
        return (shared && is_shared_memory(fd))
            .then_some(
                "shared memory other processes can reach (a /dev/shm file, or a memfd that is not \
                 close-on-exec, whose descriptor was shared, or that is mapped more than once) is not \
                 tiered, as whoever else holds the file reads its pages directly",
            );
    }
    Some(if shared {
        "shared anonymous memory (MAP_SHARED) cannot be tiered by tiermem run"
    } else if flags & libc::MAP_HUGETLB != 0 {
        "huge pages (MAP_HUGETLB) are not tiered"
    } else if flags & libc::MAP_LOCKED != 0 {
        "locked memory (MAP_LOCKED) stays in DRAM"
    } else if flags & (libc::MAP_STACK | libc::MAP_GROWSDOWN) != 0 {
        "stacks are not tiered"
    } else if flags & libc::MAP_32BIT != 0 {
        "MAP_32BIT memory is not tiered"
    } else if flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE) != 0 {
        "memory at a fixed address outside tiermem's arena cannot be tiered"
    } else if prot != libc::PROT_READ | libc::PROT_WRITE {
        "only plain read-write memory is tiered"
    } else {
        "tiermem's address space for tiered mappings is used up"
    })
}

/// Whether `fd` is on tmpfs (a memfd, a /dev/shm file): memory, not a file
/// the kernel can write back.
fn is_shared_memory(fd: c_int) -> bool {
    // SAFETY: fstatfs writes into a statfs it owns; a bad fd gives -1.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid statfs to write.
    let ok = unsafe { libc::fstatfs(fd, &mut st) } == 0;
    ok && st.f_type == libc::TMPFS_MAGIC
}

/// # Safety
/// As for [`mmap`]; off_t is 64-bit on 64-bit Linux.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    mmap(addr, len, prot, flags, fd, offset)
}

/// Private anonymous memory, which tiered memory can stand for.
fn is_plain(flags: c_int) -> bool {
    flags & libc::MAP_ANONYMOUS != 0 && flags & MAP_TYPE == libc::MAP_PRIVATE
}

/// `MAP_FIXED` of private anonymous memory over tiered memory: it becomes
/// zeroed tiered memory with the protection asked for (allocators decommit
/// this way, and programs commit reserved `PROT_NONE` ranges), a foreign
/// mapping there included.
unsafe fn map_fixed_in_arena(addr: usize, len: usize, prot: c_int, flags: c_int) -> *mut c_void {
    if !addr.is_multiple_of(BASE_PAGE) || len == 0 {
        set_errno(libc::EINVAL);
        return MAP_FAILED;
    }
    debug_assert!(is_plain(flags));
    let _inside = Guard::enter();
    if let Err(e) = runtime().take_back_foreign(addr, len.next_multiple_of(BASE_PAGE)) {
        return fail(core_errno(&e), MAP_FAILED);
    }
    runtime().map_fixed_zero(addr, len);
    // Always: the range may have been reserved PROT_NONE, and a new
    // mapping takes the protection it asks for, as the kernel gives it.
    if let Err(e) = runtime().protect(addr, len, prot) {
        return fail(core_errno(&e), MAP_FAILED);
    }
    addr as *mut c_void
}

/// `MAP_FIXED` of a file or shared memory over tiered memory: QEMU maps
/// `memory-backend-memfd` guest RAM into a `PROT_NONE` reservation this
/// way. That memory is not tiered: the runtime lets the range go (see
/// tiermem-core's `transparent::foreign`), and a mapping as large as the
/// budget is said on stderr. Only the lazily committed zone, where
/// `tiermem run` places the program's mappings, can be given up; elsewhere
/// it is refused (`ENOMEM`).
///
/// The kernel maps it elsewhere first and then moves it into place, so a
/// mapping the kernel refuses (a bad descriptor, a read-only file mapped
/// writable) fails with its error and leaves the range as it was.
unsafe fn map_foreign_in_arena(m: &FileMap, said: bool) -> *mut c_void {
    let (addr, len) = (m.addr, m.len);
    let rt = runtime();
    let span = len.next_multiple_of(BASE_PAGE);
    if !addr.is_multiple_of(BASE_PAGE) || len == 0 {
        set_errno(libc::EINVAL);
        return MAP_FAILED;
    }
    if !rt.is_lazy_range(addr, span) {
        set_errno(libc::ENOMEM);
        return MAP_FAILED;
    }
    let trial = match m.trial() {
        Ok(p) => p,
        Err(e) => return fail(e, MAP_FAILED),
    };
    let mapped = {
        let _inside = Guard::enter();
        move_into_arena(trial, addr, span)
    };
    match mapped {
        Ok(p) => {
            if !said {
                report_if_over_budget(len, m.prot, m.flags, m.fd);
            }
            p as *mut c_void
        }
        Err(e) => fail(e, MAP_FAILED),
    }
}

/// Moves the foreign mapping at `trial` to `[addr, addr+span)` in the
/// arena, which the runtime gives up first; it is unmapped if that fails.
unsafe fn move_into_arena(trial: usize, addr: usize, span: usize) -> io::Result<usize> {
    let rt = runtime();
    let moved = match rt.take_back_foreign(addr, span) {
        Ok(()) => {
            rt.cede_to_foreign(addr, span);
            let flags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
            let moved = raw::mremap(trial, span, span, flags, addr);
            if moved.is_err() {
                // Tiered memory again, zero-filled: its contents went
                // when the runtime gave the range up.
                let _ = rt.take_back_foreign(addr, span);
            }
            moved
        }
        Err(e) => Err(core_errno(&e)),
    };
    if moved.is_err() {
        let _ = raw::munmap(trial, span);
    }
    moved
}

/// The parts of `[addr, addr+len)` that foreign mappings hold (none when
/// the runtime is not active).
fn foreign_parts(addr: usize, len: usize) -> Vec<std::ops::Range<usize>> {
    match active() {
        true => runtime().foreign_parts(addr, len),
        false => Vec::new(),
    }
}

/// `[addr, addr+len)` split at the edges of `parts` (sorted, inside it):
/// each piece with whether it is one of them.
pub(super) fn split_at(
    addr: usize,
    len: usize,
    parts: &[std::ops::Range<usize>],
) -> Vec<(std::ops::Range<usize>, bool)> {
    let mut pieces = Vec::with_capacity(parts.len() * 2 + 1);
    let mut at = addr;
    for p in parts {
        if p.start > at {
            pieces.push((at..p.start, false));
        }
        pieces.push((p.clone(), true));
        at = p.end;
    }
    if addr + len > at {
        pieces.push((at..addr + len, false));
    }
    pieces
}

/// The pieces of `[addr, addr+len)` that are tiered memory, foreign
/// mappings left out (for `mlock`).
pub(super) fn tiered_pieces(addr: usize, len: usize) -> Vec<std::ops::Range<usize>> {
    let parts = foreign_parts(addr, len);
    split_at(addr, len, &parts)
        .into_iter()
        .filter_map(|(piece, foreign)| (!foreign).then_some(piece))
        .collect()
}

/// `MAP_FIXED_NOREPLACE` over the arena: the kernel would refuse it
/// (`EEXIST`), as the arena stays mapped, so a hole the program unmapped
/// there becomes tiered memory again; a range with any page still in use
/// is refused as the kernel refuses it.
unsafe fn map_noreplace_in_arena(
    addr: usize,
    len: usize,
    prot: c_int,
    flags: c_int,
) -> *mut c_void {
    let plain = flags & libc::MAP_ANONYMOUS != 0 && flags & MAP_TYPE == libc::MAP_PRIVATE;
    let _inside = Guard::enter();
    if !plain || !runtime().map_fixed_noreplace(addr, len) {
        set_errno(libc::EEXIST);
        return MAP_FAILED;
    }
    if let Err(e) = runtime().protect(addr, len, prot) {
        runtime().unmap(addr, len);
        return fail(core_errno(&e), MAP_FAILED);
    }
    addr as *mut c_void
}

/// # Safety
/// The C contract of munmap(2).
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    let a = addr as usize;
    if !touches_arena(a, len) {
        return match raw::munmap(a, len) {
            Ok(()) => 0,
            Err(e) => fail(e, -1),
        };
    }
    if !a.is_multiple_of(BASE_PAGE) || len == 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    memfd::on_range_change(a, len, "the program unmapped it", true);
    let _inside = Guard::enter();
    for (from, to) in outside_arena(a, len) {
        if let Err(e) = raw::munmap(from, to - from) {
            return fail(e, -1);
        }
    }
    // A foreign mapping goes, and tiered memory takes its place again.
    if let Err(e) = runtime().take_back_foreign(a, len.next_multiple_of(BASE_PAGE)) {
        return fail(core_errno(&e), -1);
    }
    match release_to_arena(a, len) {
        Ok(()) => 0,
        Err(e) => fail(e, -1),
    }
}

/// Gives the arena part of `[addr, addr+len)` back to the runtime, read-
/// write again first: the next mapping there expects it so, and a
/// protection the program set (a guard page, a reservation) must not
/// outlive its mapping.
unsafe fn release_to_arena(addr: usize, len: usize) -> io::Result<()> {
    let rt = runtime();
    let (start, end) = rt.arena_bounds();
    let (from, to) = (addr.max(start), (addr + len).min(end));
    if to > from {
        raw::mprotect(from, to - from, libc::PROT_READ | libc::PROT_WRITE)?;
    }
    rt.unmap(addr, len);
    Ok(())
}

/// The parts of `[addr, addr+len)` that lie outside the arena.
fn outside_arena(addr: usize, len: usize) -> Vec<(usize, usize)> {
    let rt = runtime();
    let (start, end) = rt.arena_bounds();
    let stop = addr + len;
    let mut parts = Vec::new();
    if addr < start {
        parts.push((addr, stop.min(start)));
    }
    if stop > end {
        parts.push((addr.max(end), stop));
    }
    parts
}

/// # Safety
/// The C contract of mremap(2). The fifth argument is read only with
/// MREMAP_FIXED, as the kernel does; on x86-64 and aarch64 a variadic
/// caller passes it in the same register as a fixed parameter.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let o = old as usize;
    let target = if flags & libc::MREMAP_FIXED != 0 {
        new_addr as usize
    } else {
        0
    };
    if !touches_arena(o, old_len.max(1)) {
        if target != 0 && touches_arena(target, new_len) {
            // Moving foreign memory into the arena would cut its registration.
            set_errno(libc::EINVAL);
            return MAP_FAILED;
        }
        return match raw::mremap(o, old_len, new_len, flags, target) {
            Ok(p) => p as *mut c_void,
            Err(e) => fail(e, MAP_FAILED),
        };
    }
    memfd::on_range_change(o, old_len, "the program moved or resized it", false);
    if !foreign_parts(o, old_len).is_empty() {
        // Moving or resizing a foreign mapping inside the arena is not
        // supported: the kernel would move it over tiered memory.
        set_errno(libc::EINVAL);
        return MAP_FAILED;
    }
    let supported = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
    if !o.is_multiple_of(BASE_PAGE) || new_len == 0 || old_len == 0 || flags & !supported != 0 {
        set_errno(libc::EINVAL);
        return MAP_FAILED;
    }
    let _inside = Guard::enter();
    let rt = runtime();
    if target != 0 {
        return remap_to_fixed(o, old_len, new_len, target);
    }
    match rt.remap(o, old_len, new_len, flags & libc::MREMAP_MAYMOVE != 0) {
        Ok(p) => {
            // What went back to the arena is read-write again, as in munmap.
            let freed = match p == o {
                true => (o + new_len.next_multiple_of(BASE_PAGE), o + old_len),
                false => (o, o + old_len),
            };
            if freed.1 > freed.0 {
                let _ = raw::mprotect(
                    freed.0,
                    freed.1 - freed.0,
                    libc::PROT_READ | libc::PROT_WRITE,
                );
            }
            p as *mut c_void
        }
        Err(_) => {
            set_errno(libc::ENOMEM);
            MAP_FAILED
        }
    }
}

/// MREMAP_FIXED from tiered memory: the contents move to the address the
/// program chose, as a tiered region when that lies in the arena, else as
/// plain memory there.
unsafe fn remap_to_fixed(old: usize, old_len: usize, new_len: usize, target: usize) -> *mut c_void {
    let rt = runtime();
    if !target.is_multiple_of(BASE_PAGE) || ranges_overlap(old, old_len, target, new_len) {
        set_errno(libc::EINVAL);
        return MAP_FAILED;
    }
    if rt.contains(target) {
        rt.map_fixed_zero(target, new_len);
        // The target may be a PROT_NONE reservation: the moved memory is
        // read-write, as the kernel makes it.
        if let Err(e) = rt.protect(target, new_len, libc::PROT_READ | libc::PROT_WRITE) {
            return fail(core_errno(&e), MAP_FAILED);
        }
    } else if let Err(e) = raw::mmap(
        target,
        new_len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
        -1,
        0,
    ) {
        return fail(e, MAP_FAILED);
    }
    std::ptr::copy_nonoverlapping(old as *const u8, target as *mut u8, old_len.min(new_len));
    if let Err(e) = release_to_arena(old, old_len) {
        return fail(e, MAP_FAILED);
    }
    target as *mut c_void
}

fn ranges_overlap(a: usize, a_len: usize, b: usize, b_len: usize) -> bool {
    a < b + b_len && b < a + a_len
}

/// # Safety
/// The C contract of madvise(2).
#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int {
    let a = addr as usize;
    if !touches_arena(a, len) {
        return match raw::madvise(a, len, advice) {
            Ok(()) => 0,
            Err(e) => fail(e, -1),
        };
    }
    if !a.is_multiple_of(BASE_PAGE) {
        set_errno(libc::EINVAL);
        return -1;
    }
    let len = len.next_multiple_of(BASE_PAGE);
    let _inside = Guard::enter();
    for (from, to) in outside_arena(a, len) {
        if let Err(e) = raw::madvise(from, to - from, advice) {
            return fail(e, -1);
        }
    }
    let (start, end) = runtime().arena_bounds();
    let (from, to) = (a.max(start), (a + len).min(end));
    let parts = foreign_parts(from, to - from);
    for (piece, foreign) in split_at(from, to - from, &parts) {
        let rc = match foreign {
            // The kernel's own mapping: its advice, as the kernel takes it.
            true => match raw::madvise(piece.start, piece.end - piece.start, advice) {
                Ok(()) => 0,
                Err(e) => fail(e, -1),
            },
            false => advise_tiered(piece.start, piece.end - piece.start, advice),
        };
        if rc != 0 {
            return rc;
        }
    }
    0
}

unsafe fn advise_tiered(addr: usize, len: usize, advice: c_int) -> c_int {
    let rt = runtime();
    if memfd::is_tiered_memfd(addr, len) {
        return advise_memfd(addr, len, advice);
    }
    match advice {
        // The kernel refuses to discard locked memory, and MADV_REMOVE is
        // for shared memory only: private anonymous memory, locked or not,
        // gets EINVAL and keeps its bytes.
        libc::MADV_DONTNEED | libc::MADV_FREE if !rt.locked_runs(addr, len).is_empty() => {
            set_errno(libc::EINVAL);
            return -1;
        }
        libc::MADV_REMOVE => {
            set_errno(libc::EINVAL);
            return -1;
        }
        // Contents are discarded: the pager must know, or an evicted page
        // would come back with its old data instead of zeros.
        libc::MADV_DONTNEED => rt.discard(addr, len, true),
        // MADV_FREE may keep the data until reclaim; tiermem discards at once.
        libc::MADV_FREE => rt.discard(addr, len, false),
        // Discarded although locked, and still locked after: the pages read
        // back as zeros and stay in DRAM.
        libc::MADV_DONTNEED_LOCKED => {
            let locked = rt.locked_runs(addr, len);
            rt.discard(addr, len, true);
            for run in locked {
                if let Err(e) = rt.lock(run.start, run.end - run.start) {
                    return fail(core_errno(&e), -1);
                }
            }
        }
        // Harmless hints the kernel may take.
        libc::MADV_NORMAL
        | libc::MADV_RANDOM
        | libc::MADV_SEQUENTIAL
        | libc::MADV_WILLNEED
        | libc::MADV_DONTDUMP
        | libc::MADV_DODUMP => {
            if let Err(e) = raw::madvise(addr, len, advice) {
                return fail(e, -1);
            }
        }
        // The kernel's huge pages would map memory behind userfaultfd's
        // back; tiermem keeps advised memory resident by 2 MiB regions
        // instead, as the kernel keeps a huge page.
        libc::MADV_HUGEPAGE => rt.advise_huge(addr, len, true),
        libc::MADV_NOHUGEPAGE => rt.advise_huge(addr, len, false),
        // A forked child's pager would read the parent's evicted pages
        // back where the kernel gives the child zeros: tiermem wipes them.
        libc::MADV_WIPEONFORK => rt.wipe_on_fork(addr, len, true),
        libc::MADV_KEEPONFORK => rt.wipe_on_fork(addr, len, false),
        // MADV_DONTFORK: the child keeps a copy of that memory, which it
        // does not expect to touch (a tiered memfd mapping notes it: its
        // fork needs no drain).
        libc::MADV_DONTFORK => memfd::advise_fork(addr, len, true),
        libc::MADV_DOFORK => memfd::advise_fork(addr, len, false),
        // Kernel reclaim (COLD/PAGEOUT) would send tiered pages to kernel
        // swap: accepted and ignored.
        _ => {}
    }
    0
}

/// Advice over tiered memory that stands for a memfd: that of a shared
/// mapping. Discarding drops the mapping's pages but keeps the file's
/// bytes, so `MADV_DONTNEED` changes nothing here; `MADV_REMOVE` punches
/// the file (zeros from then on); advice only private memory takes is
/// refused as the kernel refuses it.
unsafe fn advise_memfd(addr: usize, len: usize, advice: c_int) -> c_int {
    match advice {
        libc::MADV_DONTNEED | libc::MADV_DONTNEED_LOCKED => 0,
        libc::MADV_REMOVE => {
            runtime().discard(addr, len, true);
            0
        }
        libc::MADV_FREE | libc::MADV_WIPEONFORK | libc::MADV_KEEPONFORK => {
            set_errno(libc::EINVAL);
            -1
        }
        libc::MADV_DONTFORK | libc::MADV_DOFORK => {
            memfd::advise_fork(addr, len, advice == libc::MADV_DONTFORK);
            0
        }
        // The hints, huge pages included, as for any tiered memory.
        _ => {
            let rt = runtime();
            match advice {
                libc::MADV_HUGEPAGE => rt.advise_huge(addr, len, true),
                libc::MADV_NOHUGEPAGE => rt.advise_huge(addr, len, false),
                _ => {}
            }
            0
        }
    }
}

/// # Safety
/// The C contract of mincore(2). Tiered memory that the program unmapped is
/// still mapped in the kernel (it went back to the arena), so the answer
/// for it is the kernel's for unmapped memory, `ENOMEM`; the rest goes to
/// the kernel, whose residency is tiermem's.
#[no_mangle]
pub unsafe extern "C" fn mincore(addr: *mut c_void, len: usize, vec: *mut u8) -> c_int {
    let a = addr as usize;
    if touches_arena(a, len) && a.is_multiple_of(BASE_PAGE) && !runtime().all_allocated(a, len) {
        set_errno(libc::ENOMEM);
        return -1;
    }
    // SAFETY: the caller's own call, straight to the kernel.
    unsafe { libc::syscall(libc::SYS_mincore, addr, len, vec) as c_int }
}

/// # Safety
/// The C contract of mprotect(2). Protection changes on tiered memory keep
/// its userfaultfd registration, so they go to the kernel unchanged.
#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int {
    memfd::on_range_change(
        addr as usize,
        len,
        "the program changed its protection",
        false,
    );
    let tiered = program_runtime().filter(|rt| rt.contains(addr as usize));
    let result = match tiered {
        Some(rt) => {
            let _inside = Guard::enter();
            rt.protect(addr as usize, len, prot)
                .map_err(|e| core_errno(&e))
        }
        None => raw::mprotect(addr as usize, len, prot),
    };
    match result {
        Ok(()) => 0,
        Err(e) => fail(e, -1),
    }
}

/// The errno of a runtime error, as an `io::Error` for [`fail`].
fn core_errno(e: &tiermem_core::Error) -> io::Error {
    io::Error::from_raw_os_error(e.errno())
}
