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

use std::sync::atomic::{AtomicU64, Ordering};

use crate::page_table::{Kind, PageNo, PageState};
use crate::runtime::Shared;
use crate::stats::Counters;

/// The first window once a stream is seen, and the largest.
const FIRST_WINDOW: u64 = 4;
pub(crate) const MAX_WINDOW: u64 = 64;
const WINDOW_BITS: u32 = 16;

/// Where the zero-fill stream expects its next fault, and its window; one
/// word for the whole runtime (a second stream elsewhere only resets it).
pub(crate) struct ZeroStream(AtomicU64);

impl ZeroStream {
    pub(crate) fn new() -> ZeroStream {
        ZeroStream(AtomicU64::new(u64::MAX))
    }

    /// A zero fill of `page`: how many pages after it to fill now (0: no
    /// stream yet). Remembers where the stream goes next.
    fn next_window(&self, page: PageNo) -> u64 {
        let packed = self.0.load(Ordering::Relaxed);
        let (expected, window) = (packed >> WINDOW_BITS, packed & ((1 << WINDOW_BITS) - 1));
        let window = if page as u64 == expected {
            (window * 2).clamp(FIRST_WINDOW, MAX_WINDOW)
        } else {
            0
        };
        let next = page as u64 + 1 + window;
        self.0
            .store(next << WINDOW_BITS | window, Ordering::Relaxed);
        window
    }
}

/// At the demand zero fill of `page`, claims the stream's window after it:
/// returns how many pages after `page` are claimed (`Loading`, charged), to
/// be installed together with it and then passed to [`finish_after`].
pub(crate) fn claim_after(rt: &Shared, page: PageNo) -> usize {
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
pub(crate) fn finish_after(rt: &Shared, page: PageNo, count: usize) {
    if count == 0 {
        return;
    }
    Counters::add(&rt.counters.zero_fills_ahead, count as u64);
    for q in page + 1..=page + count as PageNo {
        super::finish_resident(rt, q, PageState::FREE.with_dirty(true), false);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_seen_on_the_second_fault_and_its_window_doubles() {
        let s = ZeroStream::new();
        assert_eq!(s.next_window(10), 0);
        assert_eq!(s.next_window(11), FIRST_WINDOW);
        // The window filled 12..16; the program faults next at 16.
        assert_eq!(s.next_window(16), 2 * FIRST_WINDOW);
        let mut page = 16 + 1 + 2 * FIRST_WINDOW as PageNo;
        let mut last = 0;
        for _ in 0..10 {
            last = s.next_window(page);
            page += 1 + last as PageNo;
        }
        assert_eq!(last, MAX_WINDOW);
        // A fault elsewhere ends the stream.
        assert_eq!(s.next_window(5), 0);
    }
}
