//! The backing tier. A [`Store`] is a flat array of page-sized slots on a
//! file or block device; [`SlotAllocator`] decides which slot a page gets.
//!
//! I/O always goes through runtime-owned, aligned buffers: never straight
//! from or into the tiered region (O_DIRECT into a registered range would
//! fault inside the kernel on the handler's own behalf).

mod device_label;
mod file;
mod forked;
mod held;
mod ring_writer;
mod slots;

use std::io;
use std::os::fd::RawFd;
use std::path::PathBuf;

pub use device_label::Label;
pub use file::{format_store, FileStore};
pub use forked::ForkedStore;
pub use held::HeldSlots;
pub use ring_writer::RingWriter;
pub use slots::{ParentHold, SlotAllocator};

use crate::error::Result;

/// One page to write: its slot and the runtime-owned buffer holding it.
#[derive(Clone, Copy, Debug)]
pub struct SlotWrite {
    pub slot: u64,
    pub src: *const u8,
}

/// What a store is and how it does I/O, for stats and warnings.
#[derive(Clone, Debug)]
pub struct StoreInfo {
    pub path: PathBuf,
    pub direct_io: bool,
    pub block_device: bool,
}

/// Page-granular storage for evicted pages.
pub trait Store: Send + Sync {
    fn page_size(&self) -> usize;
    /// Most slots this store can ever hold (that a slot allocator hands out).
    fn capacity_slots(&self) -> u64;
    /// One past the highest slot number this store can read; a forked
    /// child numbers its own slots from here.
    fn slot_span(&self) -> u64 {
        self.capacity_slots()
    }
    /// Makes sure slots `0..slots` are backed by real space (preallocated),
    /// so a later write can never fail for lack of space.
    fn ensure_backed(&self, slots: u64) -> Result<()>;
    /// Slots currently backed by preallocated space.
    fn backed_slots(&self) -> u64;
    /// Bytes the store occupies on its device.
    fn allocated_bytes(&self) -> u64;
    /// Reads one slot into `buf` (page-sized, aligned for direct I/O).
    fn read(&self, slot: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Where an asynchronous read of `slot` goes: a file descriptor and a
    /// byte offset (the handler submits it to its own io_uring).
    fn read_target(&self, slot: u64) -> (RawFd, u64);
    /// Whether slot `next` directly follows slot `slot` on the same file, so
    /// one read can cover both.
    fn adjacent(&self, slot: u64, next: u64) -> bool {
        next == slot + 1
    }
    /// After an asynchronous read of `slot` completed (drops it from the
    /// page cache where the store cannot bypass it).
    fn read_done(&self, _slot: u64) {}
    /// Writes pages sorted by slot, merging runs of adjacent slots into one request.
    fn write_batch(&self, writes: &[SlotWrite]) -> io::Result<()>;
    /// Where an asynchronous write of `slot` goes (see [`RingWriter`]), or
    /// why it may not be written.
    fn write_target(&self, slot: u64) -> io::Result<(RawFd, u64)> {
        Ok(self.read_target(slot))
    }
    /// After an asynchronous write of `count` slots from `first` completed
    /// (drops them from the page cache where the store cannot bypass it).
    fn write_done(&self, _first: u64, _count: usize) {}
    /// Whether a completed write has reached the device (O_DIRECT). If not,
    /// writes must go through [`Store::write_batch`], which syncs them;
    /// a [`RingWriter`] must not be used.
    fn writes_are_durable_on_completion(&self) -> bool {
        true
    }
    fn info(&self) -> StoreInfo;
}
