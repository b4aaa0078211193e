//! A page read that failed, or whose bytes failed their checksum.
//!
//! - **Read-ahead**: the page stays in the store, unread; a later fault on
//!   it reads it again. A failed read-ahead is never fatal.
//! - **A demand read** is tried once more, synchronously. If that fails
//!   too, the page is lost: it is poisoned (`UFFDIO_POISON`), so the access
//!   that needed it gets SIGBUS, as it would for a hardware memory error,
//!   and stderr says which address, which file, which byte offset and why.
//!   Under signal delivery the faulting thread is inside tiermem's own
//!   SIGBUS handler, so the process stops instead, with the same message.
//!
//! tiermem never installs bytes it could not read or could not verify.

use super::page_read::PageRead;
use crate::config::FaultDelivery;
use crate::page_table::{Kind, PageNo, PageState};
use crate::shared::Shared;
use crate::stats::Counters;
use crate::store_errors::ReadFailure;

/// How a multi-page read went wrong.
#[derive(Clone, Copy, Debug)]
pub(crate) enum BadRead {
    /// The request failed: for page `at` (`None`: for all of them), with
    /// `failure`; the other pages' buffers are not to be trusted.
    Request {
        at: Option<usize>,
        failure: ReadFailure,
    },
    /// Every byte arrived. The pages before `at` passed their check (and
    /// are decrypted, with encryption: checking is not repeatable); page
    /// `at` failed it; the pages after are unchecked.
    Page { at: usize, failure: ReadFailure },
}

/// Checks (or decrypts) the pages of a completed read in order; stops at
/// the first that fails. `buffer(i)` is page `i`'s buffer.
pub(crate) fn first_bad_page(
    rt: &Shared,
    reads: &[PageRead],
    buffer: impl Fn(usize) -> *mut u8,
) -> Option<BadRead> {
    reads.iter().enumerate().find_map(|(i, r)| {
        let failure = rt
            .check_read(r.page, r.slot, page_bytes(rt, buffer(i)))
            .err()?;
        Some(BadRead::Page { at: i, failure })
    })
}

/// Settles page `i` (`read`, its bytes in `buf`) of a read that went wrong
/// as `bad` says. True if `buf` holds the page's verified bytes, to install.
pub(crate) fn settle(rt: &Shared, i: usize, read: &PageRead, buf: *mut u8, bad: BadRead) -> bool {
    match bad {
        BadRead::Request {
            at: Some(at),
            failure,
        } if at == i => recover(rt, read, buf, failure),
        BadRead::Request { at: Some(_), .. } => read_and_check(rt, read, buf),
        BadRead::Request { at: None, failure } => recover(rt, read, buf, failure),
        BadRead::Page { at, .. } if i < at => true,
        BadRead::Page { at, failure } if i == at => recover(rt, read, buf, failure),
        BadRead::Page { .. } => match rt.check_read(read.page, read.slot, page_bytes(rt, buf)) {
            Ok(()) => true,
            Err(failure) => recover(rt, read, buf, failure),
        },
    }
}

/// Reads `read`'s slot into `buf` (a runtime-owned page buffer) and checks
/// it; on failure, [`recover`]s. True if `buf` holds the page, to install.
pub(crate) fn read_and_check(rt: &Shared, read: &PageRead, buf: *mut u8) -> bool {
    match rt.read_slot(read.page, read.slot, page_bytes(rt, buf)) {
        Ok(()) => true,
        Err(failure) => recover(rt, read, buf, failure),
    }
}

/// `read` (claimed, `Loading`) failed with `failure`. True if a retry put
/// the page's verified bytes in `buf`; false if the page was given up
/// (read-ahead dropped, or a demand page poisoned), and the claim with it.
pub(crate) fn recover(rt: &Shared, read: &PageRead, buf: *mut u8, failure: ReadFailure) -> bool {
    Counters::add(&rt.counters.read_errors, 1);
    if read.prefetch {
        drop_read_ahead(rt, read);
        return false;
    }
    Counters::add(&rt.counters.read_retries, 1);
    match rt.read_slot(read.page, read.slot, page_bytes(rt, buf)) {
        Ok(()) => true,
        Err(again) => {
            Counters::add(&rt.counters.read_errors, 1);
            give_up(rt, read, &failure, &again);
            false
        }
    }
}

/// A read-ahead page whose read failed goes back to the store, uncharged.
fn drop_read_ahead(rt: &Shared, read: &PageRead) {
    Counters::add(&rt.counters.read_ahead_dropped, 1);
    let stored = PageState::FREE
        .with_kind(Kind::Stored)
        .with_slot(Some(read.slot));
    rt.table.finish(read.page, stored);
    rt.budget.uncharge(1);
}

/// The demand page `read` cannot be read: poison it, or stop.
fn give_up(rt: &Shared, read: &PageRead, failure: &ReadFailure, again: &ReadFailure) {
    let first = rt.read_diagnostic(read.page, read.slot, failure);
    let diagnostic = match again == failure {
        true => format!("{first}; the retry failed the same way"),
        false => format!("{first}; the retry failed too: {again}"),
    };
    if rt.config.faults == FaultDelivery::Signal {
        rt.fatal(&diagnostic);
    }
    // Said before the poison: the woken thread's SIGBUS may end the
    // process at once.
    eprintln!("tiermem: {diagnostic}; the access gets SIGBUS, as for a memory error");
    if let Err(e) = rt.uffd.poison(rt.page_addr(read.page), rt.page_size) {
        rt.fatal(&format!(
            "marking the page at {:#x} lost failed ({e}), so the program stops",
            rt.page_addr(read.page)
        ));
    }
    Counters::add(&rt.counters.poisoned_pages, 1);
    // The slot may sit on a bad block: it is never handed out again.
    Counters::add(&rt.counters.quarantined_slots, 1);
    rt.table
        .finish(read.page, PageState::FREE.with_kind(Kind::Poisoned));
    rt.budget.uncharge(1);
}

/// A missing fault on a page already lost: poison its entry again.
pub(super) fn poison_again(rt: &Shared, page: PageNo) {
    if let Err(e) = rt.uffd.poison(rt.page_addr(page), rt.page_size) {
        rt.fatal(&format!(
            "the page at {:#x} was lost to a read error, and marking it lost again failed ({e})",
            rt.page_addr(page)
        ));
    }
}

fn page_bytes<'a>(rt: &Shared, buf: *mut u8) -> &'a mut [u8] {
    // SAFETY: every caller passes a runtime-owned buffer of one page that
    // only the calling thread uses until the page is installed.
    unsafe { std::slice::from_raw_parts_mut(buf, rt.page_size) }
}
