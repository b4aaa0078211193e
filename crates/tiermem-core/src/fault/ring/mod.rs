//! The io_uring fault loop: one handler thread keeps many page reads in
//! flight.
//!
//! The ring watches the userfaultfd and the stop and pause eventfds with
//! multishot polls, so one `io_uring_enter` waits for new faults and for
//! completed reads alike. Faults are read in batches; a page that must come
//! from the store is claimed and its read submitted at once. Read-ahead adds
//! the pages a stream will want next, and pages whose slots are adjacent
//! are read with one large request (a sequential scan becomes reads of
//! 128 KiB). Reads land in one runtime-owned area registered with the
//! ring, never in tiered memory. Each request's pages are installed the
//! moment it completes, a run of read-ahead pages with one call. The middle
//! page of each read-ahead window is parked as a marker: the program's
//! fault on it, on any handler, starts the next window. A fault on a page
//! someone else owns right now is set aside and retried after the next
//! completion.
//!
//! The handler's work, one concern to a file, in the order
//! [`RingHandler::run`] goes through it:
//! - [`events`]: wait for anything (faults, completions, the stop, pause
//!   and read-ahead eventfds), polling while a thread waits for a read;
//! - [`faults`]: read the faults and resolve each (the resolve stage);
//! - [`reads`]: submit the claimed reads, in adjacent buffers;
//! - [`completions`]: install the pages of each completed read (the
//!   install stage);
//! - [`streams`]: read ahead of streams, and follow the markers parked;
//! - [`setup`]: the ring and its buffers.

mod completions;
mod events;
mod faults;
mod reads;
mod setup;
mod streams;

use std::collections::VecDeque;
use std::os::fd::AsRawFd;

use io_uring::IoUring;

use super::fork_window::park_serving;
use super::markers::unpark_marker;
use super::page_read::PageRead;
use super::FAULT_BATCH;
use crate::page_table::PageNo;
use crate::shared::Shared;
use crate::sys::mem::Mapping;
use crate::sys::thread_fds::{self, Recorded};
use crate::sys::uffd::{message_buffer, Fault};
pub(crate) use setup::buffer_bytes;
pub use setup::default_buffer_bytes;
use setup::{buffer_pages, build_ring};
use streams::Streams;

/// A read-ahead marker this handler parked: it waits unmapped until the
/// program faults on it or it has waited long enough.
struct ParkedMarker {
    page: PageNo,
    since_ns: u64,
    /// A neighbour read (`fault::neighbours`), not a window's marker.
    neighbour: bool,
}

/// One read request: pages in adjacent slots, landing in adjacent buffers.
struct Io {
    reads: Vec<PageRead>,
    submitted_ns: u64,
}

pub(crate) struct RingHandler<'a> {
    rt: &'a Shared,
    /// Before `ring`, so the record goes before the ring closes.
    _recorded: Recorded,
    ring: IoUring,
    engine: &'static str,
    /// The ring flags waiting task work (see `build_ring`).
    taskrun_flag: bool,
    buffers: Mapping,
    registered: bool,
    /// One flag per page-sized buffer.
    buffer_used: Vec<bool>,
    /// In-flight requests, by their first buffer.
    ios: Vec<Option<Io>>,
    in_flight: usize,
    /// Requests in flight that a thread waits for: a demand read, or a
    /// prefetch group's (read-ahead alone is waited for by nobody).
    awaited_in_flight: usize,
    depth: usize,
    /// Claimed runs waiting for buffers or a queue slot: demand reads first.
    waiting: VecDeque<Vec<PageRead>>,
    /// Faults on busy pages, to retry.
    deferred: Vec<(PageNo, Fault)>,
    /// Prefetch groups in flight: demand page, requests still out.
    groups: Vec<(PageNo, usize)>,
    markers: Vec<ParkedMarker>,
    streams: Streams<'a>,
    raw: Vec<linux_raw_sys::general::uffd_msg>,
    faults: Vec<Fault>,
    completions: Vec<(u64, i32, u32)>,
    uffd_ready: bool,
}

impl<'a> RingHandler<'a> {
    /// Sets up the ring and its buffers; the error says why not, for the
    /// fallback note.
    pub fn new(rt: &'a Shared) -> Result<RingHandler<'a>, String> {
        let depth = rt.config.io.depth as usize;
        let pages = buffer_pages(rt);
        let entries = (depth * 2 + 8).next_power_of_two() as u32;
        let (ring, engine, taskrun_flag) = build_ring(rt, entries)?;
        let buffers = Mapping::reserve_aligned(
            pages * rt.page_size,
            rt.page_size,
            "allocating read buffers",
        )
        .map_err(|e| e.to_string())?;
        // A forked child starts handlers of its own: without the advice it
        // would get a copy of these pinned buffers at once, and keep it.
        // SAFETY: advice on the runtime's own fresh mapping, which changes
        // nothing in this process.
        let _ =
            unsafe { crate::sys::raw::madvise(buffers.addr(), buffers.len(), libc::MADV_DONTFORK) };
        let area = [libc::iovec {
            iov_base: buffers.as_ptr().cast(),
            iov_len: buffers.len(),
        }];
        // SAFETY: the area is runtime-owned, lives as long as the ring (both
        // belong to this handler), and is never tiered memory.
        let registered = unsafe { ring.submitter().register_buffers(&area) }.is_ok();
        let mut h = RingHandler {
            rt,
            _recorded: thread_fds::record(ring.as_raw_fd()),
            ring,
            engine: if registered {
                engine
            } else {
                "io_uring (unregistered buffers)"
            },
            taskrun_flag,
            buffers,
            registered,
            buffer_used: vec![false; pages],
            ios: (0..pages).map(|_| None).collect(),
            in_flight: 0,
            awaited_in_flight: 0,
            depth,
            waiting: VecDeque::new(),
            deferred: Vec::new(),
            groups: Vec::new(),
            markers: Vec::new(),
            streams: Streams::of(rt),
            raw: message_buffer(FAULT_BATCH),
            faults: Vec::with_capacity(FAULT_BATCH),
            completions: Vec::with_capacity(entries as usize),
            uffd_ready: false,
        };
        h.watch_events();
        h.ring
            .submit()
            .map_err(|e| format!("submitting polls: {e}"))?;
        Ok(h)
    }

    pub fn engine_name(&self) -> &'static str {
        self.engine
    }

    /// Serves faults until the runtime stops.
    pub fn run(&mut self) {
        loop {
            self.wait();
            let (stop, pause) = self.reap();
            if stop || self.rt.stopping() {
                self.drain();
                return;
            }
            if pause && self.rt.pause.requested() {
                // A forked child must not inherit a page mid-read.
                self.drain();
                park_serving(self.rt);
            }
            self.check_markers();
            self.take_requested_windows();
            self.retry_deferred();
            if self.uffd_ready {
                self.read_faults();
            }
            self.flush();
        }
    }

    /// Finishes every read this handler has claimed.
    fn drain(&mut self) {
        while self.in_flight > 0 || !self.waiting.is_empty() {
            self.start_waiting();
            self.flush();
            self.wait();
            let (_, _) = self.reap();
        }
        for marker in std::mem::take(&mut self.markers) {
            unpark_marker(self.rt, marker.page, true);
        }
    }
}
