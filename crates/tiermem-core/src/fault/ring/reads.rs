//! Submitting page reads: each claimed run of pages in adjacent slots is
//! one request into adjacent buffers of the handler's registered area,
//! demand reads ahead of read-ahead when buffers or queue slots run short.

use io_uring::{opcode, squeue, types};

use super::{Io, RingHandler};
use crate::fault::page_read::PageRead;
use crate::stats::Counters;
use crate::sys::now_ns;

impl RingHandler<'_> {
    /// Submits a run if the queue and buffers allow, else queues it.
    pub(super) fn start(&mut self, run: Vec<PageRead>) {
        if self.waiting.is_empty() || !run[0].prefetch {
            if let Some(first) = self.free_buffers(run.len()) {
                if self.in_flight < self.depth {
                    self.submit(first, run);
                    return;
                }
            }
        }
        if run[0].prefetch {
            self.waiting.push_back(run);
        } else {
            self.waiting.push_front(run);
        }
    }

    pub(super) fn start_waiting(&mut self) {
        while self.in_flight < self.depth {
            let Some(run) = self.waiting.front() else {
                return;
            };
            let Some(first) = self.free_buffers(run.len()) else {
                return;
            };
            let run = self.waiting.pop_front().unwrap_or_default();
            self.submit(first, run);
        }
    }

    /// The first of `n` adjacent free buffers.
    pub(super) fn free_buffers(&self, n: usize) -> Option<usize> {
        let mut start = 0;
        while start + n <= self.buffer_used.len() {
            match self.buffer_used[start..start + n].iter().rposition(|u| *u) {
                None => return Some(start),
                Some(used) => start += used + 1,
            }
        }
        None
    }

    pub(super) fn submit(&mut self, first: usize, reads: Vec<PageRead>) {
        let (fd, offset) = self.rt.store().read_target(reads[0].slot);
        let len = (reads.len() * self.rt.page_size) as u32;
        let ptr = self.buffer(first);
        let sqe = if self.registered {
            opcode::ReadFixed::new(types::Fd(fd), ptr, len, 0)
                .offset(offset)
                .build()
        } else {
            opcode::Read::new(types::Fd(fd), ptr, len)
                .offset(offset)
                .build()
        }
        .user_data(first as u64);
        for used in &mut self.buffer_used[first..first + reads.len()] {
            *used = true;
        }
        if is_awaited(&reads) {
            self.awaited_in_flight += 1;
        }
        self.ios[first] = Some(Io {
            reads,
            submitted_ns: now_ns(),
        });
        self.in_flight += 1;
        Counters::max(&self.rt.counters.max_in_flight, self.in_flight as u64);
        self.push(&sqe);
    }

    pub(super) fn push(&mut self, sqe: &squeue::Entry) {
        loop {
            // SAFETY: every buffer an entry points at is runtime-owned and
            // outlives the ring; the polled fds live as long as the runtime.
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return;
            }
            self.flush();
        }
    }

    pub(super) fn flush(&mut self) {
        if self.ring.submission().is_empty() {
            return;
        }
        match self.ring.submit() {
            Ok(n) if n > 0 => Counters::add(&self.rt.counters.io_batches, 1),
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
            Err(e) => self.rt.fatal(&format!("submitting page reads failed: {e}")),
        }
    }

    pub(super) fn buffer(&self, i: usize) -> *mut u8 {
        // SAFETY: `i` is a buffer index, so the offset stays inside the area.
        unsafe { self.buffers.as_ptr().add(i * self.rt.page_size) }
    }
}

/// Whether a thread waits for this request: it holds a demand read or
/// part of a prefetch group.
pub(super) fn is_awaited(reads: &[PageRead]) -> bool {
    reads.iter().any(|r| !r.prefetch || r.group.is_some())
}
