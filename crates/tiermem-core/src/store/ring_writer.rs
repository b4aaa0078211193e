//! Write-back through io_uring: the evictor's batches of dirty pages go to
//! the store as one vectored write per run of adjacent slots, every run of
//! a batch submitted with one `io_uring_enter` and in flight together, so
//! a batch whose slots are scattered uses the device's parallelism instead
//! of writing one run after another.

use std::io;

use io_uring::{opcode, types, IoUring};

use super::{SlotWrite, Store};

/// Runs in flight per batch at most (a batch holds at most this many
/// pages, so at most this many runs).
const ENTRIES: u32 = 64;

pub struct RingWriter {
    ring: IoUring,
    /// One per page of the batch being written; the kernel reads them
    /// until the batch completes.
    iovecs: Vec<libc::iovec>,
    /// Runs of the batch: first page's index in `writes`, page count.
    runs: Vec<(usize, usize)>,
}

impl RingWriter {
    pub fn new() -> io::Result<RingWriter> {
        Ok(RingWriter {
            ring: IoUring::new(ENTRIES)?,
            iovecs: Vec::with_capacity(ENTRIES as usize),
            runs: Vec::with_capacity(ENTRIES as usize),
        })
    }

    /// Writes `writes` (sorted by slot) and returns once all are on the
    /// store. A run the ring could not finish in one go (a short write, or
    /// an interrupted one) is finished with the store's own synchronous
    /// writes, so the outcome is the same as [`Store::write_batch`]'s.
    pub fn write_batch(&mut self, store: &dyn Store, writes: &[SlotWrite]) -> io::Result<()> {
        let page = store.page_size();
        self.split_into_runs(store, writes);
        self.iovecs.clear();
        self.iovecs.extend(writes.iter().map(|w| libc::iovec {
            iov_base: w.src as *mut libc::c_void,
            iov_len: page,
        }));
        for start in (0..self.runs.len()).step_by(ENTRIES as usize) {
            let end = (start + ENTRIES as usize).min(self.runs.len());
            for run in start..end {
                self.push_run(store, writes, run)?;
            }
            self.complete(store, writes, end - start)?;
        }
        Ok(())
    }

    fn split_into_runs(&mut self, store: &dyn Store, writes: &[SlotWrite]) {
        self.runs.clear();
        let mut start = 0;
        for i in 1..=writes.len() {
            if i == writes.len() || !store.adjacent(writes[i - 1].slot, writes[i].slot) {
                self.runs.push((start, i - start));
                start = i;
            }
        }
    }

    fn push_run(&mut self, store: &dyn Store, writes: &[SlotWrite], run: usize) -> io::Result<()> {
        let (first, count) = self.runs[run];
        let (fd, offset) = store.write_target(writes[first].slot)?;
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
        let mut reaped = 0;
        let mut first_error = None;
        while reaped < n {
            match self.ring.submit_and_wait(n - reaped) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            let done: Vec<(u64, i32)> = self
                .ring
                .completion()
                .map(|cqe| (cqe.user_data(), cqe.result()))
                .collect();
            for (run, result) in done {
                reaped += 1;
                let (first, count) = self.runs[run as usize];
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
