//! Read-ahead: the windows a stream will want next, claimed and read in
//! large requests, and the markers parked in them. The middle page of each
//! window is parked as a marker: the program's fault on it, on any
//! handler, starts the next window.

use super::{ParkedMarker, RingHandler};
use crate::fault::markers::{park_state, prefetch_used, unpark_marker, Parked};
use crate::fault::neighbours::Neighbour;
use crate::fault::page_read::PageRead;
use crate::fault::readahead::{Readahead, Window};
use crate::fault::resolve::claim_for_prefetch;
use crate::fault::signal::read_ahead::{ReadAheadRequests, Request};
use crate::page_table::PageNo;
use crate::shared::Shared;
use crate::stats::Counters;
use crate::sys::now_ns;

/// Longest a read-ahead marker is held back for the program to reach it;
/// after that it is installed like the rest of its window.
const MARKER_HOLD_NS: u64 = 20_000_000;
/// Largest read-ahead request: big enough for the device's sequential
/// bandwidth, small enough that the first pages arrive soon and several
/// requests overlap.
const MAX_RUN_BYTES: usize = 128 << 10;

/// Where a handler's read-ahead finds streams.
pub(super) enum Streams<'a> {
    /// Read-ahead is off, or a fixed prefetch degree replaces it.
    Off,
    /// The handler's own detector, fed by the faults it reads (boxed: it
    /// holds a few streams, and the other kinds hold nothing).
    Own(Box<Readahead>),
    /// Under signal delivery, the read-ahead thread's: faulting threads
    /// feed the detector and queue the windows it finds.
    Shared(&'a ReadAheadRequests),
}

impl<'a> Streams<'a> {
    pub(super) fn of(rt: &'a Shared) -> Streams<'a> {
        if let Some(requests) = rt.signal_slots.as_ref().and_then(|s| s.read_ahead.as_ref()) {
            return Streams::Shared(requests);
        }
        if rt.config.io.readahead && rt.config.organization.prefetch.is_none() {
            return Streams::Own(Box::new(Readahead::new(rt.page_size)));
        }
        Streams::Off
    }

    fn adaptive(&self) -> bool {
        !matches!(self, Streams::Off)
    }

    fn on_miss(&mut self, page: PageNo) -> Option<Window> {
        match self {
            Streams::Off => None,
            Streams::Own(streams) => streams.on_miss(page),
            Streams::Shared(requests) => requests.streams().on_miss(page),
        }
    }

    fn on_catch_up(&mut self, page: PageNo) -> Option<Window> {
        match self {
            Streams::Off => None,
            Streams::Own(streams) => streams.on_catch_up(page),
            Streams::Shared(requests) => requests.streams().on_catch_up(page),
        }
    }
}

impl RingHandler<'_> {
    /// Starts a demand read, with the window of the stream its page
    /// continues, or else with the next page while misses come in pairs.
    pub(super) fn read_missing(&mut self, read: PageRead) {
        let page = read.page;
        let window = self.streams.on_miss(page);
        let next = match window.is_none() && self.streams.adaptive() {
            true => self.claim_neighbour(&read, self.rt.neighbours.on_miss(page)),
            false => None,
        };
        // The demand read goes first, to the device and to the buffers.
        match next {
            Some(next) if self.rt.store().adjacent(read.slot, next.slot) => {
                self.start(vec![read, next])
            }
            Some(next) => {
                self.start(vec![read]);
                self.start(vec![next]);
            }
            None => self.start(vec![read]),
        }
        if let Some(window) = window {
            self.count_passed(&window, page);
            self.prefetch(window);
        }
        if next.is_some() {
            // The program will be at the neighbour without a miss there: a
            // scan whose every other page comes in as a neighbour must
            // still look like a stride of one to the streams.
            self.read_ahead(page + 1);
        }
    }

    /// Claims the page after `demand`'s as a neighbour read, if it is
    /// stored. A write to the first page of a pair predicts one to the
    /// second (a value being overwritten): installed writable, it saves
    /// the write-protect fault.
    fn claim_neighbour(&self, demand: &PageRead, how: Neighbour) -> Option<PageRead> {
        let next = demand.page + 1;
        if how == Neighbour::Skip || next as usize >= self.rt.arena.len() / self.rt.page_size {
            return None;
        }
        let mut read = claim_for_prefetch(self.rt, next)?;
        read.marker = how == Neighbour::Park;
        read.neighbour = true;
        read.write = demand.write;
        read.predicted = demand.write;
        Counters::add(&self.rt.counters.neighbour_reads, 1);
        if read.marker {
            Counters::add(&self.rt.counters.neighbour_samples, 1);
        }
        Some(read)
    }

    /// Reads ahead of the stream `page` belongs to, if it is one: claims the
    /// window's stored pages and reads runs of adjacent slots together.
    pub(super) fn read_ahead(&mut self, page: PageNo) {
        let Some(window) = self.streams.on_miss(page) else {
            return;
        };
        self.count_passed(&window, page);
        self.prefetch(window);
    }

    pub(super) fn prefetch(&mut self, window: Window) {
        self.read_run(Vec::new(), window);
    }

    /// Claims the window's stored pages and reads them after `run` (empty,
    /// or a demand read), joining requests where slots are adjacent.
    pub(super) fn read_run(&mut self, mut run: Vec<PageRead>, window: Window) {
        let pages = (self.rt.arena.len() / self.rt.page_size) as i64;
        let max_run = (MAX_RUN_BYTES / self.rt.page_size).clamp(1, self.buffer_used.len() / 2);
        let writable = self.rt.read_ahead_writes.predicts_write();
        let mut runs = Vec::new();
        for k in 0..window.count as i64 {
            let q = window.start + k * window.stride;
            if !(0..pages).contains(&q) {
                break;
            }
            let Some(mut read) = claim_for_prefetch(self.rt, q as PageNo) else {
                continue;
            };
            predict_window_write(self.rt, &mut read, writable);
            let joins = run.last().is_some_and(|last| {
                run.len() < max_run && self.rt.store().adjacent(last.slot, read.slot)
            });
            if !joins && !run.is_empty() {
                runs.push(std::mem::take(&mut run));
            }
            run.push(read);
        }
        if !run.is_empty() {
            runs.push(run);
        }
        if self.streams.adaptive() {
            mark_middle(&mut runs);
        }
        self.group_with_demand(&mut runs);
        for run in runs {
            self.start(run);
        }
    }

    /// A demand read with a fixed prefetch degree whose pages need more
    /// than one request: its waiter is woken when all of them are in.
    pub(super) fn group_with_demand(&mut self, runs: &mut [Vec<PageRead>]) {
        let fixed = self.rt.config.organization.prefetch.is_some();
        let Some(demand) = runs.first().and_then(|r| r.first()).filter(|r| !r.prefetch) else {
            return;
        };
        if !fixed || runs.len() < 2 {
            return;
        }
        let group = demand.page;
        for read in runs.iter_mut().flatten() {
            read.group = Some(group);
        }
        self.groups.push((group, runs.len()));
    }

    /// One request of a prefetch group is in: wake the group's waiter once
    /// the last one is.
    pub(super) fn group_request_done(&mut self, group: PageNo) {
        let Some(i) = self.groups.iter().position(|&(g, _)| g == group) else {
            return;
        };
        self.groups[i].1 -= 1;
        if self.groups[i].1 == 0 {
            self.groups.swap_remove(i);
            self.rt
                .uffd
                .wake(self.rt.page_addr(group), self.rt.page_size);
        }
    }

    /// Under signal delivery: read the windows faulting threads asked for.
    pub(super) fn take_requested_windows(&mut self) {
        let Streams::Shared(requests) = self.streams else {
            return;
        };
        while let Some(Request { page, window }) = requests.take() {
            self.count_passed(&window, page);
            self.prefetch(window);
        }
    }

    /// The program reached `page` inside a stream's window: read the next.
    pub(super) fn continue_stream(&mut self, page: PageNo) {
        let window = self.streams.on_catch_up(page);
        if let Some(window) = window {
            self.count_passed(&window, page);
            self.prefetch(window);
        }
    }

    /// The read-ahead pages the program passed on its way to `page` were
    /// used without a fault: count them as hits.
    pub(super) fn count_passed(&self, window: &Window, page: PageNo) {
        let pages = (self.rt.arena.len() / self.rt.page_size) as i64;
        let mut q = window.passed_from;
        while (page as i64 - q) * window.stride.signum() > 0 && (0..pages).contains(&q) {
            prefetch_used(self.rt, q as PageNo);
            q += window.stride;
        }
    }

    /// Follows the markers this handler parked: one the program reached
    /// (on any handler) starts the stream's next window; one left alone
    /// too long is installed like the rest of its window.
    pub(super) fn check_markers(&mut self) {
        let now = now_ns();
        let mut i = 0;
        while i < self.markers.len() {
            let marker = &self.markers[i];
            let page = marker.page;
            match park_state(self.rt, page) {
                Parked::Reached => {
                    let marker = self.markers.swap_remove(i);
                    self.reached(marker);
                }
                Parked::Waiting if now.saturating_sub(marker.since_ns) > MARKER_HOLD_NS => {
                    self.markers.swap_remove(i);
                    unpark_marker(self.rt, page, false);
                }
                Parked::Waiting => i += 1,
            }
        }
    }

    /// A fault took a parked read-ahead page. If this handler parked it,
    /// its stream continues here; otherwise the handler that did is told.
    pub(super) fn marker_reached(&mut self, page: PageNo) {
        match self.markers.iter().position(|m| m.page == page) {
            Some(i) => {
                let marker = self.markers.swap_remove(i);
                self.reached(marker);
            }
            None => self.rt.read_ahead_event.signal(),
        }
    }

    /// The program reached a page this handler parked: a window's marker
    /// starts the stream's next window; a neighbour was used.
    fn reached(&mut self, marker: ParkedMarker) {
        if marker.neighbour {
            self.rt.neighbours.on_used();
            Counters::add(&self.rt.counters.neighbour_used, 1);
        } else {
            self.continue_stream(marker.page);
        }
    }
}

/// A program that writes each page after reading it (a guest's memory
/// being checked and restamped, a buffer updated in place) would take a
/// write fault on every page read ahead for it, as a read fault's page
/// does without write prediction. So windows go in writable and dirty
/// while most pages read ahead and installed protected are written while
/// resident ([`Shared::read_ahead_writes`], its own score: a scan that only
/// reads turns it off within a few windows, whatever the demand faults
/// do). While on, one window in eight still goes in protected, so the
/// score follows the program.
fn predict_window_write(rt: &Shared, read: &mut PageRead, writable: bool) {
    if writable {
        read.write = true;
        read.predicted = true;
        Counters::add(&rt.counters.predicted_writes, 1);
    } else {
        rt.read_ahead_writes.installed_protected();
    }
}

/// Makes the middle page of a read-ahead window its marker. A window of
/// one page has none: the program's next miss past it continues the stream.
fn mark_middle(runs: &mut [Vec<PageRead>]) {
    let total: usize = runs.iter().map(Vec::len).sum();
    if total < 2 {
        return;
    }
    let mut index = total / 2;
    for run in runs {
        if index < run.len() {
            if run[index].prefetch {
                run[index].marker = true;
            }
            return;
        }
        index -= run.len();
    }
}
