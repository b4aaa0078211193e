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

/// Idle frames kept materialised beyond what is in use: four batches, so
/// that the evictor's next demotions and the next write batch find warm
/// frames, while memory beyond them goes back to the kernel.
pub const IDLE_FRAMES_KEPT: usize = 4 * BATCH;

pub struct FramePool {
    memory: Mapping,
    frame_size: usize,
    idle: Mutex<IdleFrames>,
    /// Frames never handed out yet, above which the pool is untouched.
    high_water: Mutex<FrameNo>,
    capacity: FrameNo,
}

/// Frames no one holds. Their DRAM is not charged to the budget, so only a
/// few stay materialised: probation shrinks and grows with the workload,
/// and its frames would otherwise stay resident at their high-water mark,
/// beside the budget (17 MiB of a 512 MiB one, measured in a QEMU guest).
#[derive(Default)]
struct IdleFrames {
    /// Materialised, LIFO: the most recently used are reused first.
    warm: Vec<FrameNo>,
    /// Given back to the kernel by [`FramePool::trim`]; reused after the
    /// warm ones, each materialising again on first use. Kept apart so
    /// that a frame is given back once, not on every trim.
    cold: Vec<FrameNo>,
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
            idle: Mutex::new(IdleFrames::default()),
            high_water: Mutex::new(0),
            capacity,
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, IdleFrames> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn alloc(&self) -> Option<FrameNo> {
        {
            let mut idle = self.idle();
            if let Some(f) = idle.warm.pop().or_else(|| idle.cold.pop()) {
                return Some(f);
            }
        }
        let mut hw = self.high_water.lock().unwrap_or_else(|p| p.into_inner());
        if *hw < self.capacity {
            *hw += 1;
            return Some(*hw - 1);
        }
        None
    }

    pub fn release(&self, frame: FrameNo) {
        self.idle().warm.push(frame);
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

    /// Returns the DRAM of idle frames beyond the `keep_idle` most recently
    /// used to the kernel. The frames stay allocatable and materialise
    /// again on use. The lock is not held while they are given back, so
    /// faults that release or take frames meanwhile do not wait for it.
    pub fn trim(&self, keep_idle: usize) {
        let longest_idle: Vec<FrameNo> = {
            let mut idle = self.idle();
            let excess = idle.warm.len().saturating_sub(keep_idle);
            // The bottom of the LIFO stack holds the longest-idle frames.
            idle.warm.drain(..excess).collect()
        };
        if longest_idle.is_empty() {
            return;
        }
        for &f in &longest_idle {
            let _ = zap(self.ptr(f) as usize, self.frame_size);
        }
        self.idle().cold.extend(longest_idle);
    }

    /// Bytes of frames materialised now: ever touched and not given back.
    pub fn materialised_bytes(&self) -> u64 {
        let touched = *self.high_water.lock().unwrap_or_else(|p| p.into_inner()) as u64;
        let cold = self.idle().cold.len() as u64;
        touched.saturating_sub(cold) * self.frame_size as u64
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
    fn idle_frames_beyond_those_kept_go_back_and_are_reused_last() {
        let pool = FramePool::new(8, 4096).expect("frames");
        let frames: Vec<FrameNo> = (0..6).map(|_| pool.alloc().expect("a frame")).collect();
        let page = [7u8; 4096];
        for &f in &frames {
            // SAFETY: `page` is 4096 readable bytes; the frame is ours.
            unsafe { pool.fill(f, page.as_ptr()) };
            pool.release(f);
        }
        assert_eq!(pool.materialised_bytes(), 6 * 4096);
        pool.trim(2);
        assert_eq!(pool.materialised_bytes(), 2 * 4096, "four given back");
        pool.trim(2);
        assert_eq!(pool.materialised_bytes(), 2 * 4096, "given back once");
        // The two kept (the last released) come first, then the cold ones,
        // whose memory the kernel zero-fills again.
        assert_eq!(pool.alloc(), Some(frames[5]));
        assert_eq!(pool.alloc(), Some(frames[4]));
        let cold = pool.alloc().expect("a cold frame");
        assert!(frames[..4].contains(&cold));
        // SAFETY: the frame is ours and 4096 bytes long.
        let bytes = unsafe { std::slice::from_raw_parts(pool.ptr(cold), 4096) };
        assert!(
            bytes.iter().all(|&b| b == 0),
            "its old contents went back to the kernel"
        );
    }

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
