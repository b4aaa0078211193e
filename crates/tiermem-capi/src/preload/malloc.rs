//! The malloc family. In a tiered program's own threads, blocks come from
//! mimalloc's arena inside tiered memory; inside tiermem (and before it has
//! started) they come from glibc. `free`, `realloc` and
//! `malloc_usable_size` tell the two apart by address.

use std::ffi::{c_int, c_void};
use std::ptr;

use libmimalloc_sys as mi;

use super::guard::{inside, Guard};
use super::libc_heap::{
    __libc_calloc, __libc_free, __libc_malloc, __libc_memalign, __libc_realloc, libc_usable_size,
};
use super::{active, in_malloc_arena, set_errno};

const PAGE: usize = 4096;
const MIN_ALIGN: usize = 16;

/// Whether this call should be served from tiered memory.
#[inline]
fn tiered() -> bool {
    active() && !inside()
}

#[inline]
fn ours(p: *mut c_void) -> bool {
    in_malloc_arena(p as usize)
}

/// # Safety
/// The C contract of malloc(3).
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    if !tiered() {
        return __libc_malloc(size);
    }
    let _inside = Guard::enter();
    enomem_if_null(mi::mi_malloc(size))
}

/// mimalloc returns NULL without setting errno; C callers expect ENOMEM.
#[inline]
fn enomem_if_null(p: *mut c_void) -> *mut c_void {
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

/// # Safety
/// The C contract of free(3).
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    if ours(p) {
        let _inside = Guard::enter();
        mi::mi_free(p);
    } else {
        __libc_free(p);
    }
}

/// # Safety
/// The C contract of calloc(3).
#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    if !tiered() {
        return __libc_calloc(n, size);
    }
    let _inside = Guard::enter();
    enomem_if_null(mi::mi_calloc(n, size))
}

/// # Safety
/// The C contract of realloc(3).
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return malloc(size);
    }
    if size == 0 {
        // glibc frees and returns NULL; programs written for Linux expect it.
        free(p);
        return ptr::null_mut();
    }
    if ours(p) {
        let _inside = Guard::enter();
        return enomem_if_null(mi::mi_realloc(p, size));
    }
    if !tiered() {
        return __libc_realloc(p, size);
    }
    // A glibc block (from before tiermem started) moves into tiered memory.
    let new = malloc(size);
    if !new.is_null() {
        ptr::copy_nonoverlapping(
            p.cast::<u8>(),
            new.cast::<u8>(),
            libc_usable_size(p).min(size),
        );
        __libc_free(p);
    }
    new
}

/// # Safety
/// The C contract of reallocarray(3).
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        Some(total) => realloc(p, total),
        None => {
            set_errno(libc::ENOMEM);
            ptr::null_mut()
        }
    }
}

/// Aligned allocation; `align` must be a power of two.
unsafe fn aligned(align: usize, size: usize) -> *mut c_void {
    if !tiered() {
        return __libc_memalign(align, size);
    }
    let _inside = Guard::enter();
    enomem_if_null(mi::mi_malloc_aligned(size, align.max(MIN_ALIGN)))
}

/// # Safety
/// The C contract of posix_memalign(3).
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    let p = aligned(align, size);
    if p.is_null() {
        return libc::ENOMEM;
    }
    *out = p;
    0
}

/// # Safety
/// The C contract of aligned_alloc(3).
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    aligned(align, size)
}

/// # Safety
/// The C contract of memalign(3): glibc rounds other alignments up to a
/// power of two, and so do we.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    match align.max(1).checked_next_power_of_two() {
        Some(a) => aligned(a, size),
        None => {
            set_errno(libc::EINVAL);
            ptr::null_mut()
        }
    }
}

/// # Safety
/// The C contract of valloc(3).
#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    aligned(PAGE, size)
}

/// # Safety
/// The C contract of pvalloc(3): the size is rounded up to whole pages.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    match size.max(1).checked_next_multiple_of(PAGE) {
        Some(rounded) => aligned(PAGE, rounded),
        None => {
            set_errno(libc::ENOMEM);
            ptr::null_mut()
        }
    }
}

/// # Safety
/// The C contract of malloc_usable_size(3).
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        0
    } else if ours(p) {
        mi::mi_usable_size(p)
    } else {
        libc_usable_size(p)
    }
}
