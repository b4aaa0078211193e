//! The store of a forked child: its parent's slots, read-only, below
//! `boundary`, and a private file of its own for everything it writes.
//!
//! The child sees memory exactly as it was at fork: pages it has not touched
//! still name the parent's slots, which the parent does not reuse while the
//! child lives (see `SlotAllocator::start_deferring`). Its own writes never
//! land in the parent's file.

use std::io;
use std::os::fd::RawFd;

use super::{FileStore, SlotWrite, Store, StoreInfo};
use crate::error::Result;

pub struct ForkedStore {
    inherited: Box<dyn Store>,
    own: FileStore,
    boundary: u64,
}

impl ForkedStore {
    pub fn new(inherited: Box<dyn Store>, own: FileStore) -> ForkedStore {
        let boundary = inherited.slot_span();
        ForkedStore {
            inherited,
            own,
            boundary,
        }
    }
    /// The child's own numbering of `slot`; the parent's slots are read-only.
    fn own_slot(&self, slot: u64) -> io::Result<u64> {
        slot.checked_sub(self.boundary).ok_or_else(|| {
            io::Error::other(format!(
                "slot {slot} belongs to the parent process and is read-only"
            ))
        })
    }
}

impl Store for ForkedStore {
    fn page_size(&self) -> usize {
        self.own.page_size()
    }
    fn capacity_slots(&self) -> u64 {
        self.own.capacity_slots()
    }
    fn slot_span(&self) -> u64 {
        self.boundary + self.own.capacity_slots()
    }
    fn ensure_backed(&self, slots: u64) -> Result<()> {
        self.own.ensure_backed(slots)
    }
    fn backed_slots(&self) -> u64 {
        self.own.backed_slots()
    }
    fn allocated_bytes(&self) -> u64 {
        self.own.allocated_bytes()
    }
    fn read(&self, slot: u64, buf: &mut [u8]) -> io::Result<()> {
        match slot.checked_sub(self.boundary) {
            Some(own) => self.own.read(own, buf),
            None => self.inherited.read(slot, buf),
        }
    }
    fn read_target(&self, slot: u64) -> (RawFd, u64) {
        match slot.checked_sub(self.boundary) {
            Some(own) => self.own.read_target(own),
            None => self.inherited.read_target(slot),
        }
    }
    fn adjacent(&self, slot: u64, next: u64) -> bool {
        next == slot + 1 && (slot < self.boundary) == (next < self.boundary)
    }
    fn read_done(&self, slot: u64) {
        match slot.checked_sub(self.boundary) {
            Some(own) => self.own.read_done(own),
            None => self.inherited.read_done(slot),
        }
    }
    fn write_batch(&self, writes: &[SlotWrite]) -> io::Result<()> {
        let mut own = Vec::with_capacity(writes.len());
        for w in writes {
            own.push(SlotWrite {
                slot: self.own_slot(w.slot)?,
                src: w.src,
            });
        }
        self.own.write_batch(&own)
    }
    fn write_target(&self, slot: u64) -> io::Result<(RawFd, u64)> {
        self.own.write_target(self.own_slot(slot)?)
    }
    fn write_done(&self, first: u64, count: usize) {
        if let Ok(own) = self.own_slot(first) {
            self.own.write_done(own, count);
        }
    }
    fn writes_are_durable_on_completion(&self) -> bool {
        self.own.writes_are_durable_on_completion()
    }
    fn info(&self) -> StoreInfo {
        self.own.info()
    }
}
