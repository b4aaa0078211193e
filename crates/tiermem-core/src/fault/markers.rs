//! Read-ahead pages once read: the marker of each window, parked in
//! probation until the program reaches it, and the count of read-ahead
//! pages the program used.
//!
//! A marker is parked uninstalled, so the program's arrival there shows as
//! a fault; a fault on it (on any handler) is served from its frame, and
//! the handler that parked it starts the stream's next window.

use super::install::{count_page_ins, finish_resident, install_with, read_in_state};
use super::page_read::PageRead;
use crate::page_table::{Kind, PageNo};
use crate::shared::Shared;
use crate::stats::Counters;

/// Parks a read-ahead marker whose read completed into `buf`: its content
/// goes to a runtime frame and the page waits in probation, unmapped, where
/// any handler's fault serves it without I/O
/// ([`rescue_from_probation`](super::install::rescue_from_probation)). The
/// handler that read it watches it ([`park_state`]). False if no frame
/// is free: then install it like the rest of its window.
pub(crate) fn park_marker(rt: &Shared, read: &PageRead, buf: *const u8) -> bool {
    let Some(frame) = rt.frames.alloc() else {
        return false;
    };
    // SAFETY: `buf` holds the page just read, and the frame is ours; both
    // are runtime-owned and page-sized.
    unsafe { std::ptr::copy_nonoverlapping(buf, rt.frames.ptr(frame), rt.page_size) };
    count_page_ins(rt, 1);
    Counters::add(&rt.counters.prefetch_issued, 1);
    rt.table.set_frame(read.page, frame);
    let parked = read_in_state(rt, read)
        .with_kind(Kind::Probation)
        .with_prefetched(true);
    rt.table.finish(read.page, parked);
    true
}

/// What became of a parked marker.
pub(crate) enum Parked {
    /// Still waiting in probation.
    Waiting,
    /// A fault took it: the program reached it.
    Reached,
}

pub(crate) fn park_state(rt: &Shared, page: PageNo) -> Parked {
    match rt.table.load(page).kind() {
        Kind::Probation => Parked::Waiting,
        _ => Parked::Reached,
    }
}

/// Whether a fault on `page` would be served from a parked read-ahead page.
pub(crate) fn is_parked_read_ahead(rt: &Shared, page: PageNo) -> bool {
    let state = rt.table.load(page);
    state.kind() == Kind::Probation && state.is_prefetched()
}

/// Installs a parked marker the program has not reached in time, as the
/// rest of its window was: mapped, unused, waking only with `wake` (a
/// handler that stops). Does nothing if a fault took it meanwhile.
pub(crate) fn unpark_marker(rt: &Shared, page: PageNo, wake: bool) {
    let state = rt.table.load(page);
    if state.kind() != Kind::Probation
        || !rt
            .table
            .transition(page, state, state.with_kind(Kind::Loading))
    {
        return;
    }
    let frame = rt.table.frame(page);
    install_with(rt, page, rt.frames.ptr(frame), !state.is_dirty(), wake);
    rt.frames.release(frame);
    finish_resident(rt, page, state, false);
}

/// A read-ahead page turned out to be used. A page someone owns right now
/// is left alone: its owner counts it (a write fault as a hit, eviction as
/// waste), so no page counts twice.
pub(crate) fn prefetch_used(rt: &Shared, page: PageNo) {
    loop {
        let state = rt.table.load(page);
        if !state.is_prefetched() || !matches!(state.kind(), Kind::Resident | Kind::Probation) {
            return;
        }
        if rt
            .table
            .transition(page, state, state.with_prefetched(false))
        {
            Counters::add(&rt.counters.prefetch_hits, 1);
            return;
        }
    }
}
