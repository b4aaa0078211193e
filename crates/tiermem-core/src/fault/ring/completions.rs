//! Completed reads: each request's pages are checked and installed the
//! moment it completes, a run of read-ahead pages with one call, and a
//! window's marker parked instead of installed.

use super::reads::is_awaited;
use super::{ParkedMarker, RingHandler};
use crate::fault::install::{finish_read, finish_read_ahead_run};
use crate::fault::markers::park_marker;
use crate::fault::page_read::PageRead;
use crate::fault::read_error::{first_bad_page, settle, BadRead};
use crate::store_errors::ReadFailure;
use crate::sys::now_ns;

impl RingHandler<'_> {
    /// A read finished: install its pages.
    pub(super) fn complete(&mut self, first: usize, result: i32) {
        let Some(io) = self.ios[first].take() else {
            return;
        };
        self.in_flight -= 1;
        if is_awaited(&io.reads) {
            self.awaited_in_flight -= 1;
        }
        let len = io.reads.len() * self.rt.page_size;
        if result == -libc::EINTR || result == -libc::EAGAIN {
            self.submit(first, io.reads);
            return;
        }
        let failure = match self.rt.injector().read() {
            Some(e) => Some(ReadFailure::from(e)),
            None => ReadFailure::from_completion(result, len),
        };
        let took = now_ns().saturating_sub(io.submitted_ns);
        for read in &io.reads {
            self.rt.store().read_done(read.slot);
            if !read.prefetch {
                self.rt.read_latency.record(took);
            }
        }
        for used in &mut self.buffer_used[first..first + io.reads.len()] {
            *used = false;
        }
        let bad = match failure {
            Some(failure) => Some(BadRead::Request { at: None, failure }),
            None => first_bad_page(self.rt, &io.reads, |i| self.buffer(first + i)),
        };
        match bad {
            None => self.install_completed(first, &io.reads),
            Some(bad) => self.install_recovered(first, &io.reads, bad),
        }
        if let Some(group) = io.reads[0].group {
            self.group_request_done(group);
        }
    }

    /// A request failed, or one of its pages failed its check: page by
    /// page, each good page is installed and each bad one retried or given
    /// up (see [`settle`]).
    pub(super) fn install_recovered(&self, first: usize, reads: &[PageRead], bad: BadRead) {
        for (i, read) in reads.iter().enumerate() {
            let buf = self.buffer(first + i);
            if settle(self.rt, i, read, buf, bad) {
                finish_read(self.rt, read, buf);
            }
        }
    }

    /// Installs the pages of a completed request. Runs of read-ahead pages
    /// go in with one call each; a window's marker is parked instead.
    pub(super) fn install_completed(&mut self, first: usize, reads: &[PageRead]) {
        let mut run_start = 0;
        for i in 0..=reads.len() {
            let extends_run = reads.get(i).is_some_and(|r| {
                let prev = &reads[i.max(1) - 1];
                i > run_start
                    && is_plain_read_ahead(r)
                    && r.page == prev.page + 1
                    && r.write == prev.write
            });
            if extends_run {
                continue;
            }
            self.install_run(first + run_start, &reads[run_start..i]);
            run_start = i;
            if let Some(marker) = reads.get(i).filter(|r| r.marker) {
                if park_marker(self.rt, marker, self.buffer(first + i)) {
                    self.markers.push(ParkedMarker {
                        page: marker.page,
                        since_ns: now_ns(),
                        neighbour: marker.neighbour,
                    });
                } else {
                    finish_read(self.rt, marker, self.buffer(first + i));
                }
                run_start = i + 1;
            }
        }
    }

    /// Installs `reads` from the buffers starting at `first`.
    pub(super) fn install_run(&self, first: usize, reads: &[PageRead]) {
        match reads {
            [] => {}
            [read] => finish_read(self.rt, read, self.buffer(first)),
            [first_read, ..]
                if reads
                    .iter()
                    .all(|r| is_plain_read_ahead(r) && r.write == first_read.write) =>
            {
                finish_read_ahead_run(self.rt, reads, self.buffer(first))
            }
            _ => {
                for (i, read) in reads.iter().enumerate() {
                    finish_read(self.rt, read, self.buffer(first + i));
                }
            }
        }
    }
}

/// A read-ahead page that can be installed with its neighbours in one call
/// (those of a run share their protection: a window goes in writable or
/// protected as a whole).
fn is_plain_read_ahead(read: &PageRead) -> bool {
    read.prefetch && !read.marker && read.group.is_none()
}
