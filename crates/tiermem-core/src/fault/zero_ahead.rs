//! First touch of fresh memory, ahead of the program.
//!
//! A program that fills new memory in order (a loader, a stamping pass, an
//! array written front to back) takes one zero-fill fault per page, and each
//! is a userfaultfd round trip with two wake-ups: several microseconds a page
//! where the kernel's own anonymous fault costs about one. Once two
//! consecutive zero fills show a stream, a zero fill also installs zeros over
//! the pages after it that are still untouched, with one `UFFDIO_COPY`, and
//! the window doubles with every fault that lands where the last one ended,
//! as read-ahead does for stored pages.
//!
//! Only DRAM free right now is used (never a wait for the evictor), and a
//! page that is not untouched (or that someone owns) ends the window. The
//! pages go in writable and dirty, as a write fault would put them; one the
//! program never writes is found all-zero at eviction and dropped unwritten.

use super::install::{finish_resident, install_pages};
use crate::page_table::{Kind, PageNo, PageState};
use crate::shared::Shared;
use crate::stats::Counters;

/// First touch of a never-written page. Installed writable: it has no slot,
/// so it counts as dirty until eviction finds it still all-zero. Under
/// write-through a read installs it protected and clean instead, so that
/// only pages really written are copied out (eviction finds it all-zero).
///
/// A fill that continues a run of first touches in order brings the pages
/// after it in too, with the same call ([`claim_after`]).
pub(super) fn install_zeros(rt: &Shared, page: PageNo, write: bool) {
    let dirty = write || rt.written.is_none();
    let ahead = if dirty { claim_after(rt, page) } else { 0 };
    install_pages(rt, page, 1 + ahead, rt.zero_run.as_ptr(), !dirty, true);
    Counters::add(&rt.counters.zero_fills, 1 + ahead as u64);
    finish_resident(rt, page, PageState::FREE.with_dirty(dirty), false);
    finish_after(rt, page, ahead);
}

/// At the demand zero fill of `page`, claims the stream's window after it:
/// returns how many pages after `page` are claimed (`Loading`, charged), to
/// be installed together with it and then passed to [`finish_after`].
fn claim_after(rt: &Shared, page: PageNo) -> usize {
    // Set-associative placement and write-through decide page by page what
    // a first touch costs; they keep one fault per page.
    if rt.sets.is_some() || rt.written.is_some() {
        return 0;
    }
    let window = rt.zero_stream.next_window(page);
    let total = (rt.arena.len() / rt.page_size) as u64;
    let first = page + 1;
    let mut claimed = 0usize;
    while (claimed as u64) < window && (first as u64 + claimed as u64) < total {
        if !claim_untouched(rt, first + claimed as PageNo) {
            break;
        }
        claimed += 1;
    }
    claimed
}

/// Publishes the `count` pages after `page` installed with it.
fn finish_after(rt: &Shared, page: PageNo, count: usize) {
    if count == 0 {
        return;
    }
    Counters::add(&rt.counters.zero_fills_ahead, count as u64);
    for q in page + 1..=page + count as PageNo {
        finish_resident(rt, q, PageState::FREE.with_dirty(true), false);
    }
}

/// Claims an untouched page for a zero fill, charged against free DRAM;
/// false if it is not untouched, is busy, or no DRAM is free right now.
fn claim_untouched(rt: &Shared, page: PageNo) -> bool {
    let state = rt.table.load(page);
    let lazy = match state.kind() {
        Kind::Zero => false,
        Kind::Free if rt.is_lazy(page) => true,
        _ => return false,
    };
    if !rt.budget.try_charge() {
        return false;
    }
    if !rt
        .table
        .transition(page, state, state.with_kind(Kind::Loading))
    {
        rt.budget.uncharge(1);
        return false;
    }
    // A lazily committed page takes its slot commitment now; a full store
    // ends the window here (the demand fault of that page reports it).
    if lazy && rt.slots().commit(1, rt.store()).is_err() {
        rt.table.finish(page, state);
        rt.budget.uncharge(1);
        return false;
    }
    true
}
