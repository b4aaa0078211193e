//! DRAM frames owned by the runtime: where pages wait in probation and where
//! write-back is staged. They are page-aligned (fit for O_DIRECT) and never
//! part of the tiered region, so I/O on them can never fault into tiermem.

use std::sync::Mutex;

use crate::error::Result;
use crate::sys::mem::{zap, Mapping};

pub type FrameNo = u32;

/// Pages per demotion or write batch: the evictor stages up to this many
/// pages in frames at a time.
pub const BATCH: usize = 64;

pub struct FramePool {
    memory: Mapping,
    frame_size: usize,
    /// LIFO, so recently used (already materialised) frames are reused first.
    free: Mutex<Vec<FrameNo>>,
    /// Frames never handed out yet, above which the pool is untouched.
    high_water: Mutex<FrameNo>,
    capacity: FrameNo,
}

impl FramePool {
    pub fn new(capacity: u32, frame_size: usize) -> Result<FramePool> {
        let memory = Mapping::reserve_aligned(
            capacity as usize * frame_size,
            frame_size,
            "reserving runtime frames",
        )?;
        Ok(FramePool {
            memory,
            frame_size,
            free: Mutex::new(Vec::new()),
            high_water: Mutex::new(0),
            capacity,
        })
    }

    pub fn alloc(&self) -> Option<FrameNo> {
        if let Some(f) = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            return Some(f);
        }
        let mut hw = self.high_water.lock().unwrap_or_else(|p| p.into_inner());
        if *hw < self.capacity {
            *hw += 1;
            return Some(*hw - 1);
        }
        None
    }

    pub fn release(&self, frame: FrameNo) {
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(frame);
    }

    /// Copies a page into `frame` with non-temporal stores, which skip
    /// reading the frame's cache lines first: the evictor fills a frame per
    /// page it demotes, mostly for the frame to be dropped or written out
    /// by the device, not read by a CPU. The stores are fenced, so the copy
    /// is complete for any thread that sees the frame published afterwards.
    ///
    /// # Safety
    /// `src` must be readable for a frame's size and not change meanwhile,
    /// and `frame` must be the caller's.
    pub unsafe fn fill(&self, frame: FrameNo, src: *const u8) {
        let dst = self.ptr(frame);
        // SAFETY: the caller's guarantees on `src` and `frame`; `dst` is a
        // whole frame inside the mapping.
        unsafe { copy_streaming(src, dst, self.frame_size) }
    }

    pub fn ptr(&self, frame: FrameNo) -> *mut u8 {
        assert!(frame < self.capacity);
        // SAFETY: `frame < capacity`, so the offset stays inside the mapping.
        unsafe { self.memory.as_ptr().add(frame as usize * self.frame_size) }
    }

    /// Returns the DRAM of idle frames to the kernel (after a budget
    /// shrink). The frames stay allocatable and materialise again on use.
    pub fn trim(&self, keep_idle: usize) {
        let free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let excess = free.len().saturating_sub(keep_idle);
        // The bottom of the LIFO stack holds the longest-idle frames.
        for &f in &free[..excess] {
            let _ = zap(self.ptr(f) as usize, self.frame_size);
        }
    }

    /// Bytes of frames ever touched (the pool's DRAM high-water mark).
    pub fn touched_bytes(&self) -> u64 {
        *self.high_water.lock().unwrap_or_else(|p| p.into_inner()) as u64 * self.frame_size as u64
    }
}

/// `len` bytes from `src` to `dst` with non-temporal stores, then a store
/// fence. `dst` must be 16-byte aligned and `len` a multiple of 16 (frames
/// are page-aligned and page-sized).
///
/// # Safety
/// `src` readable and `dst` writable for `len` bytes, not overlapping.
#[cfg(target_arch = "x86_64")]
unsafe fn copy_streaming(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    debug_assert!((dst as usize).is_multiple_of(16) && len.is_multiple_of(16));
    for i in (0..len).step_by(16) {
        // SAFETY: both ranges are valid for `len` bytes (the caller); SSE2
        // is part of x86_64; `dst + i` is 16-byte aligned.
        unsafe {
            let chunk = _mm_loadu_si128(src.add(i) as *const __m128i);
            _mm_stream_si128(dst.add(i) as *mut __m128i, chunk);
        }
    }
    // SAFETY: a store fence has no preconditions.
    unsafe { _mm_sfence() };
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn copy_streaming(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's guarantees.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
}

/// Whether a runtime frame (or page-sized buffer) holds only zeros.
pub fn frame_is_zero(ptr: *const u8, len: usize) -> bool {
    // SAFETY: `ptr` is a runtime frame of `len` bytes, 8-byte aligned.
    let words = unsafe { std::slice::from_raw_parts(ptr as *const u64, len / 8) };
    words.iter().all(|w| *w == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_frame_holds_the_page() {
        let pool = FramePool::new(4, 4096).expect("frames");
        let page: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        let frame = pool.alloc().expect("a frame");
        // SAFETY: `page` is 4096 readable bytes; the frame is ours.
        unsafe { pool.fill(frame, page.as_ptr()) };
        // SAFETY: the frame is 4096 bytes, filled above.
        let copied = unsafe { std::slice::from_raw_parts(pool.ptr(frame), 4096) };
        assert_eq!(copied, &page[..]);
    }
}
