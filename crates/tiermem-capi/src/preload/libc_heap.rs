//! glibc's own allocator, reached through its `__libc_*` entry points (never
//! `dlsym`, which allocates). Everything tiermem allocates for itself comes
//! from here, so runtime memory is never tiered memory.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;
use std::sync::atomic::AtomicUsize;

extern "C" {
    pub fn __libc_malloc(size: usize) -> *mut c_void;
    pub fn __libc_free(p: *mut c_void);
    pub fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    pub fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    pub fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
}

/// glibc's guaranteed alignment of `malloc` on x86-64 and aarch64.
const LIBC_MIN_ALIGN: usize = 16;

/// The Rust global allocator of libtiermem.so: glibc, directly.
pub struct LibcHeap;

// SAFETY: forwards to glibc's allocator, which is thread-safe and honours
// the requested alignment (memalign for anything above malloc's own).
unsafe impl GlobalAlloc for LibcHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= LIBC_MIN_ALIGN {
            __libc_malloc(layout.size()).cast()
        } else {
            __libc_memalign(layout.align(), layout.size()).cast()
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= LIBC_MIN_ALIGN {
            return __libc_calloc(1, layout.size()).cast();
        }
        let p = self.alloc(layout);
        if !p.is_null() {
            std::ptr::write_bytes(p, 0, layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        __libc_free(ptr.cast())
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= LIBC_MIN_ALIGN {
            return __libc_realloc(ptr.cast(), new_size).cast();
        }
        let new = self.alloc(Layout::from_size_align_unchecked(new_size, layout.align()));
        if !new.is_null() {
            std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        new
    }
}

/// glibc's `malloc_usable_size`, for blocks glibc allocated (before tiermem
/// started, or on tiermem's threads). Our own `malloc_usable_size` shadows
/// the symbol, so it is looked up once with `dlsym(RTLD_NEXT)`.
pub fn libc_usable_size(p: *mut c_void) -> usize {
    static FOUND: AtomicUsize = AtomicUsize::new(0);
    let Some(f) = super::next_symbol(c"malloc_usable_size", &FOUND) else {
        return 0;
    };
    // SAFETY: `f` is glibc's malloc_usable_size, whose signature this is.
    let usable: unsafe extern "C" fn(*mut c_void) -> usize = unsafe { std::mem::transmute(f) };
    // SAFETY: `p` is a live glibc block (the caller checked it is not ours).
    unsafe { usable(p) }
}
