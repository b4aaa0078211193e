//! Write-back through io_uring: the evictor's batches of dirty pages go to
//! the store as one vectored write per run of adjacent slots, every run of
//! a batch submitted with one `io_uring_enter` and in flight together, so
//! a batch whose slots are scattered uses the device's parallelism instead
//! of writing one run after another.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use io_uring::{opcode, types, IoUring};

use super::{SlotWrite, Store};
use crate::sys::thread_fds::{self, Recorded};

/// Runs in flight per batch at most (a batch holds at most this many
/// pages, so at most this many runs).
const ENTRIES: u32 = 64;

pub struct RingWriter {
    /// Before `ring`, so the record goes before the ring closes.
    _recorded: Recorded,
    ring: IoUring,
    /// One per page of the batch being written; the kernel reads them
    /// until the batch completes.
    iovecs: Vec<libc::iovec>,
    /// Runs of the batch: first page's index in `writes`, page count, and
    /// where the run goes (file descriptor, byte offset).
    runs: Vec<(usize, usize, RawFd, u64)>,
    /// Completions reaped: run index, result.
    done: Vec<(u64, i32)>,
    /// A failed batch left entries queued that must never be submitted.
    unusable: bool,
}

impl RingWriter {
    pub fn new() -> io::Result<RingWriter> {
        let ring = crate::pins::own_ring(|| IoUring::new(ENTRIES))?;
        Ok(RingWriter {
            _recorded: thread_fds::record(ring.as_raw_fd()),
            ring,
            iovecs: Vec::with_capacity(ENTRIES as usize),
            runs: Vec::with_capacity(ENTRIES as usize),
            done: Vec::with_capacity(ENTRIES as usize),
            unusable: false,
        })
    }

    /// Writes `writes` (sorted by slot) and returns once all are on the
    /// store. A run the ring could not finish in one go (a short write, or
    /// an interrupted one) is finished with the store's own synchronous
    /// writes, so the outcome is the same as [`Store::write_batch`]'s.
    pub fn write_batch(&mut self, store: &dyn Store, writes: &[SlotWrite]) -> io::Result<()> {
        let result = self.write_runs(store, writes);
        if result.is_err() && !self.ring.submission().is_empty() {
            // Their buffers are the caller's again: this ring is done.
            self.unusable = true;
        }
        result
    }

    /// Whether the ring can take another batch; if not, write synchronously.
    pub fn is_usable(&self) -> bool {
        !self.unusable
    }

    fn write_runs(&mut self, store: &dyn Store, writes: &[SlotWrite]) -> io::Result<()> {
        let page = store.page_size();
        // Every target is known before anything is queued: an error leaves
        // no entry behind for a later batch to submit.
        self.split_into_runs(store, writes)?;
        self.iovecs.clear();
        self.iovecs.extend(writes.iter().map(|w| libc::iovec {
            iov_base: w.src as *mut libc::c_void,
            iov_len: page,
        }));
        for start in (0..self.runs.len()).step_by(ENTRIES as usize) {
            let end = (start + ENTRIES as usize).min(self.runs.len());
            for run in start..end {
                self.push_run(run)?;
            }
            self.complete(store, writes, end - start)?;
        }
        Ok(())
    }

    fn split_into_runs(&mut self, store: &dyn Store, writes: &[SlotWrite]) -> io::Result<()> {
        self.runs.clear();
        let mut start = 0;
        for i in 1..=writes.len() {
            if i == writes.len() || !store.adjacent(writes[i - 1].slot, writes[i].slot) {
                let (fd, offset) = store.write_target(writes[start].slot)?;
                self.runs.push((start, i - start, fd, offset));
                start = i;
            }
        }
        Ok(())
    }

    fn push_run(&mut self, run: usize) -> io::Result<()> {
        let (first, count, fd, offset) = self.runs[run];
        let sqe = opcode::Writev::new(types::Fd(fd), self.iovecs[first..].as_ptr(), count as u32)
            .offset(offset)
            .build()
            .user_data(run as u64);
        // SAFETY: the iovecs and the pages they point at stay alive and
        // unchanged until `complete` has reaped this entry.
        unsafe { self.ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("the write-back ring's submission queue is full"))
    }

    /// Submits what was pushed and reaps `n` completions.
    fn complete(&mut self, store: &dyn Store, writes: &[SlotWrite], n: usize) -> io::Result<()> {
        let (mut reaped, mut submitted) = (0, false);
        let mut first_error = None;
        while reaped < n {
            match self.ring.submit_and_wait(n - reaped) {
                Ok(_) => submitted = true,
                // Interrupted, or completions must be reaped first: wait again.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)
                    ) => {}
                // Nothing went to the device: the caller keeps the pages.
                Err(e) if !submitted => return Err(e),
                // Writes in flight must be reaped before their pages and
                // slots can be reused, whatever the wait says.
                Err(_) => std::thread::yield_now(),
            }
            self.done.clear();
            self.done.extend(
                self.ring
                    .completion()
                    .map(|cqe| (cqe.user_data(), cqe.result())),
            );
            for &(run, result) in &self.done {
                reaped += 1;
                let (first, count, _, _) = self.runs[run as usize];
                let run_writes = &writes[first..first + count];
                let outcome = if result == (count * store.page_size()) as i32 {
                    store.write_done(run_writes[0].slot, count);
                    Ok(())
                } else if result < 0 && result != -libc::EINTR && result != -libc::EAGAIN {
                    Err(io::Error::from_raw_os_error(-result))
                } else {
                    // Short or interrupted: the synchronous path finishes it.
                    store.write_batch(run_writes)
                };
                if let Err(e) = outcome {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::RawFd;

    use super::*;
    use crate::error::Result;
    use crate::store::{FileStore, StoreInfo};
    use crate::sys::mem::Mapping;

    const PAGE: usize = 4096;

    /// A file store whose slot `refused` may not be written.
    struct Refusing {
        file: FileStore,
        refused: u64,
    }

    impl Store for Refusing {
        fn page_size(&self) -> usize {
            self.file.page_size()
        }
        fn capacity_slots(&self) -> u64 {
            self.file.capacity_slots()
        }
        fn ensure_backed(&self, slots: u64) -> Result<()> {
            self.file.ensure_backed(slots)
        }
        fn backed_slots(&self) -> u64 {
            self.file.backed_slots()
        }
        fn allocated_bytes(&self) -> u64 {
            self.file.allocated_bytes()
        }
        fn read(&self, slot: u64, buf: &mut [u8]) -> io::Result<()> {
            self.file.read(slot, buf)
        }
        fn read_target(&self, slot: u64) -> (RawFd, u64) {
            self.file.read_target(slot)
        }
        fn write_batch(&self, writes: &[SlotWrite]) -> io::Result<()> {
            self.file.write_batch(writes)
        }
        fn write_target(&self, slot: u64) -> io::Result<(RawFd, u64)> {
            match slot == self.refused {
                true => Err(io::Error::other("refused")),
                false => self.file.write_target(slot),
            }
        }
        fn info(&self) -> StoreInfo {
            self.file.info()
        }
    }

    fn store(refused: u64) -> Refusing {
        let file = FileStore::open(&std::env::temp_dir(), PAGE, Some(64 * PAGE as u64))
            .expect("a store in the temp directory");
        file.ensure_backed(64).expect("backed");
        Refusing { file, refused }
    }

    /// Pages stamped with their slot number, in an aligned buffer.
    fn pages(slots: &[u64]) -> (Mapping, Vec<SlotWrite>) {
        let buf = Mapping::reserve_aligned(slots.len() * PAGE, PAGE, "test pages").unwrap();
        let writes = slots
            .iter()
            .enumerate()
            .map(|(i, &slot)| {
                // SAFETY: page `i` of the buffer, which is ours and writable.
                let page = unsafe { buf.as_ptr().add(i * PAGE) };
                // SAFETY: as above; the page holds PAGE bytes.
                unsafe { std::ptr::write_bytes(page, slot as u8 + 1, PAGE) };
                SlotWrite { slot, src: page }
            })
            .collect();
        (buf, writes)
    }

    fn slot_holds(store: &Refusing, slot: u64) -> bool {
        let buf = Mapping::reserve_aligned(PAGE, PAGE, "read back").unwrap();
        // SAFETY: the mapping is ours, PAGE bytes long.
        let bytes = unsafe { std::slice::from_raw_parts_mut(buf.as_ptr(), PAGE) };
        store.read(slot, bytes).unwrap();
        bytes.iter().all(|b| *b == slot as u8 + 1)
    }

    #[test]
    fn runs_of_adjacent_and_scattered_slots_all_land() {
        let store = store(u64::MAX);
        let mut ring = RingWriter::new().unwrap();
        let slots = [1, 2, 3, 7, 9, 10, 20];
        let (_buf, writes) = pages(&slots);
        ring.write_batch(&store, &writes).unwrap();
        for slot in slots {
            assert!(slot_holds(&store, slot), "slot {slot}");
        }
        assert!(ring.is_usable());
    }

    #[test]
    fn a_refused_slot_fails_the_batch_before_anything_is_queued() {
        let store = store(9);
        let mut ring = RingWriter::new().unwrap();
        let (_buf, writes) = pages(&[1, 2, 9, 12]);
        assert!(ring.write_batch(&store, &writes).is_err());
        assert!(ring.is_usable(), "nothing may stay queued");
        assert!(!slot_holds(&store, 1), "no run of the batch was written");
        // The next batch goes through, without the failed one's entries.
        let (_buf, writes) = pages(&[30, 31]);
        ring.write_batch(&store, &writes).unwrap();
        assert!(slot_holds(&store, 30) && slot_holds(&store, 31));
        assert!(!slot_holds(&store, 1));
    }
}
