//! DRAM frames owned by the runtime: where pages wait in probation and where
//! write-back is staged. They are page-aligned (fit for O_DIRECT) and never
//! part of the tiered region, so I/O on them can never fault into tiermem.

use std::sync::Mutex;

use crate::error::Result;
use crate::sys::mem::{zap, Mapping};

pub type FrameNo = u32;

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
