//! Page-aligned I/O buffers (O_DIRECT needs aligned memory), filled with
//! random bytes so written data is real and not trivially compressible.

use std::io;
use std::ptr::NonNull;

use rand::RngCore;

/// An anonymous, page-aligned mapping split into `slots` buffers of
/// `slot_size` bytes each.
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    slot_size: usize,
}

// SAFETY: the mapping is owned exclusively by this value; moving it to
// another thread moves that ownership. Concurrent access goes through raw
// pointers handed to the kernel, whose lifetime the engines manage.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// Map `slots * slot_size` bytes and fill them with random data.
    pub fn new(slots: usize, slot_size: usize) -> io::Result<Self> {
        let len = slots
            .checked_mul(slot_size)
            .filter(|&l| l > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad buffer size"))?;
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; the result is checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        let mut buf = AlignedBuf {
            ptr,
            len,
            slot_size,
        };
        rand::thread_rng().fill_bytes(buf.as_mut_slice());
        Ok(buf)
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `len` bytes of our own read-write mapping,
        // and `&mut self` guarantees no other reference to it exists.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Start of slot `i`.
    pub fn slot_ptr(&self, i: usize) -> *mut u8 {
        assert!(i < self.slots(), "slot index out of range");
        // SAFETY: `i * slot_size < len`, so the result stays inside the mapping.
        unsafe { self.ptr.as_ptr().add(i * self.slot_size) }
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.len / self.slot_size
    }

    /// Write `tag` into the first 8 bytes of every 4 KiB block of slot `i`,
    /// so consecutive writes of the same buffer carry different data (no
    /// deduplication below us can short-cut them).
    pub fn stamp(&mut self, i: usize, tag: u64) {
        let size = self.slot_size;
        let slot = &mut self.as_mut_slice()[i * size..(i + 1) * size];
        for (n, block) in slot.chunks_mut(4096).enumerate() {
            if block.len() >= 8 {
                block[..8].copy_from_slice(&(tag ^ n as u64).to_le_bytes());
            }
        }
    }

    /// iovecs of every slot, for `io_uring_register_buffers`.
    pub fn iovecs(&self) -> Vec<libc::iovec> {
        (0..self.slots())
            .map(|i| libc::iovec {
                iov_base: self.slot_ptr(i).cast(),
                iov_len: self.slot_size,
            })
            .collect()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping created in `new` and not
        // unmapped elsewhere; nothing borrows it once we are dropped.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_random_and_stamped() {
        let mut b = AlignedBuf::new(3, 8192).unwrap();
        assert_eq!(b.slots(), 3);
        for i in 0..3 {
            assert_eq!(b.slot_ptr(i) as usize % 4096, 0);
        }
        assert!(b.as_mut_slice().iter().any(|&x| x != 0));
        b.stamp(1, 42);
        let s = b.as_mut_slice();
        assert_eq!(&s[8192..8200], &42u64.to_le_bytes());
        assert_eq!(&s[8192 + 4096..8192 + 4104], &43u64.to_le_bytes());
        assert_eq!(b.iovecs().len(), 3);
    }
}
