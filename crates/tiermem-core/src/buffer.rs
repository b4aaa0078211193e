//! `TieredBuf`: an owned, zeroed byte buffer in tiered memory, freed on drop.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::error::Result;
use crate::runtime::Runtime;

/// An owned byte buffer in tiered memory, zeroed when allocated and freed on
/// drop; it dereferences to `[u8]`.
pub struct TieredBuf<'rt> {
    rt: &'rt Runtime,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer exclusively owns its allocation; the runtime is Sync.
unsafe impl Send for TieredBuf<'_> {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for TieredBuf<'_> {}

impl<'rt> TieredBuf<'rt> {
    /// Allocates `len` zeroed bytes of tiered memory from `rt`.
    pub fn new(rt: &'rt Runtime, len: usize) -> Result<TieredBuf<'rt>> {
        Ok(TieredBuf {
            rt,
            ptr: rt.alloc(len)?,
            len,
        })
    }

    /// Grows or shrinks the buffer, keeping its contents.
    pub fn resize(&mut self, len: usize) -> Result<()> {
        // SAFETY: `ptr` is our live allocation and `&mut self` excludes other users.
        self.ptr = unsafe { self.rt.realloc(self.ptr, len)? };
        self.len = len;
        Ok(())
    }

    /// The address of the first byte; [`TieredBuf::resize`] may move it.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Deref for TieredBuf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` covers `len` initialised (zeroed or written) bytes for
        // as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for TieredBuf<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`, and `&mut self` guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for TieredBuf<'_> {
    fn drop(&mut self) {
        // SAFETY: the allocation is ours and nobody can use it after drop.
        if let Err(e) = unsafe { self.rt.free(self.ptr) } {
            eprintln!("tiermem: freeing a TieredBuf failed: {e}");
        }
    }
}
