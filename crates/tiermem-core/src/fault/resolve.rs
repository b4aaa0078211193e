//! The resolve stage: what a fault needs, decided from its page's state.
//!
//! Every step is a compare-and-swap on the page's state word, no lock. The
//! kinds that need no I/O are served here in full: zeros for a first touch
//! ([`zero_ahead`](super::zero_ahead)), a probation hit from its frame, a
//! compressed page ([`compressed`](super::compressed)), a duplicate fault,
//! a write to a clean page. A page that must come from the store is claimed
//! (`Loading`), charged against the budget, and handed back as a
//! [`PageRead`] for the caller's read.

use super::compressed;
use super::conflict;
use super::discarded::{self, Served};
use super::install::{finish_resident, installs_wake, rescue_from_probation};
use super::markers::prefetch_used;
use super::page_read::PageRead;
use super::read_error;
use super::zero_ahead;
use crate::page_table::{Kind, PageNo, PageState};
use crate::sets::Placement;
use crate::shared::Shared;
use crate::stats::Counters;
use crate::sys::now_ns;
use crate::sys::uffd::Fault;

/// What a missing fault needs once its cheap cases are handled.
pub(crate) enum Missing {
    /// Served without I/O (zeros, probation, duplicate, bad access).
    Resolved,
    /// The page is claimed; its slot must be read, then installed
    /// ([`finish_read`](super::install::finish_read)).
    Read(PageRead),
    /// Another thread owns the page for now; try again later.
    Busy,
}

/// Counts a fault and serves the kinds that never need I/O. Returns the
/// page of a fault left open (a missing fault, or a write to a page someone
/// owns right now), which the caller resolves with [`resolve_fault`].
pub(crate) fn begin_fault(rt: &Shared, fault: &Fault) -> Option<PageNo> {
    Counters::add(&rt.counters.faults, 1);
    let Some(page) = rt.page_of(fault.address) else {
        rt.uffd
            .wake(fault.address & !(rt.base_page - 1), rt.base_page);
        return None;
    };
    if fault.write_protect {
        let started = now_ns();
        Counters::add(&rt.counters.wp_faults, 1);
        if !resolve_write_to_clean(rt, page) {
            return Some(page);
        }
        rt.fault_latency.record(now_ns().saturating_sub(started));
        return None;
    }
    Counters::add(&rt.counters.missing_faults, 1);
    Some(page)
}

/// Resolves a fault [`begin_fault`] left open, as far as it can without I/O.
pub(crate) fn resolve_fault(rt: &Shared, page: PageNo, fault: &Fault) -> Missing {
    if fault.write_protect {
        return match resolve_write_to_clean(rt, page) {
            true => Missing::Resolved,
            false => Missing::Busy,
        };
    }
    resolve_missing(rt, page, fault)
}

/// Resolves a missing fault on `page` as far as it can without I/O.
fn resolve_missing(rt: &Shared, page: PageNo, fault: &Fault) -> Missing {
    let started = now_ns();
    loop {
        let state = rt.table.load(page);
        // The lazily committed zone is not pre-marked (it can span terabytes):
        // there, a page outside any allocation reads as zeros.
        let kind = match state.kind() {
            Kind::Free if rt.is_lazy(page) => Kind::Zero,
            kind => kind,
        };
        let resolved = match kind {
            Kind::Zero | Kind::Stored => {
                match claim_for_load(rt, page, state, true) {
                    Claim::Claimed => {}
                    Claim::Changed => continue,
                    Claim::Busy => return Missing::Busy,
                }
                if kind == Kind::Stored {
                    let mut read = claimed_read(rt, page, state, fault.write, started);
                    predict_write(rt, &mut read);
                    return Missing::Read(read);
                }
                if rt.is_lazy(page) {
                    rt.commit_lazy_page(page);
                }
                zero_ahead::install_zeros(rt, page, fault.write);
                true
            }
            Kind::Probation => {
                rt.table
                    .transition(page, state, state.with_kind(Kind::Loading))
                    && {
                        rescue_from_probation(rt, page, state, fault.write);
                        true
                    }
            }
            Kind::Compressed => {
                match claim_for_load(rt, page, state, true) {
                    Claim::Claimed => {}
                    Claim::Changed => continue,
                    Claim::Busy => return Missing::Busy,
                }
                compressed::install_compressed(rt, page, state, fault.write, started);
                return Missing::Resolved;
            }
            // Another fault or the read-ahead installed it first, or the
            // program discarded it with a system call of its own.
            Kind::Resident => match discarded::serve_resident(rt, page, state, fault) {
                Served::Changed => continue,
                Served::Duplicate if state.is_prefetched() => {
                    prefetch_used(rt, page);
                    true
                }
                Served::Duplicate => {
                    Counters::add(&rt.counters.duplicate_faults, 1);
                    true
                }
                Served::Zeroed => true,
            },
            Kind::Evicting if discarded::zeros_for_the_evictor(rt, fault) => true,
            Kind::Loading | Kind::Evicting => return Missing::Busy,
            // The program is mapping something over this page with
            // `MAP_FIXED`, and the access came between the runtime letting
            // the page go and the kernel replacing the mapping: the thread
            // is woken to access it again, which finds the new mapping (or
            // faults once more).
            Kind::Foreign => {
                rt.uffd.wake(rt.page_addr(page), rt.page_size);
                true
            }
            // A lost page whose poison marker is no longer in the page
            // table: mark it again, so the access still gets SIGBUS.
            Kind::Poisoned => {
                read_error::poison_again(rt, page);
                true
            }
            Kind::Free => {
                rt.report_bad_access(fault);
                true
            }
        };
        if resolved {
            rt.fault_latency.record(now_ns().saturating_sub(started));
            return Missing::Resolved;
        }
    }
}

fn claimed_read(
    rt: &Shared,
    page: PageNo,
    state: PageState,
    write: bool,
    started: u64,
) -> PageRead {
    let Some(slot) = state.slot() else {
        rt.fatal(&format!(
            "page {page} is stored but has no slot ({state:?})"
        ));
    };
    PageRead {
        page,
        slot,
        write,
        predicted: false,
        prefetch: false,
        group: None,
        marker: false,
        neighbour: false,
        started_ns: started,
    }
}

/// A demand read fault: install writable if writes are predicted, and
/// keep score of the ones installed protected.
fn predict_write(rt: &Shared, read: &mut PageRead) {
    if read.write {
        return;
    }
    if rt.write_prediction.predicts_write() {
        read.write = true;
        read.predicted = true;
        Counters::add(&rt.counters.predicted_writes, 1);
    } else {
        rt.write_prediction.installed_protected();
    }
}

/// Claims `page` for read-ahead if it sits in the store. The adaptive
/// read-ahead only takes DRAM that is free right now; a fixed prefetch
/// degree is part of the cache's organization and waits for the evictor
/// like the miss itself.
pub(crate) fn claim_for_prefetch(rt: &Shared, page: PageNo) -> Option<PageRead> {
    claim_prefetch(rt, page, rt.config.organization.prefetch.is_some())
}

/// [`claim_for_prefetch`] that never waits for DRAM: for a faulting thread
/// that already holds pages (signal delivery), where waiting could leave
/// every charged page held by waiting threads.
pub(crate) fn claim_for_prefetch_if_free(rt: &Shared, page: PageNo) -> Option<PageRead> {
    claim_prefetch(rt, page, false)
}

fn claim_prefetch(rt: &Shared, page: PageNo, wait: bool) -> Option<PageRead> {
    let state = rt.table.load(page);
    if state.kind() != Kind::Stored {
        return None;
    }
    if !matches!(claim_for_load(rt, page, state, wait), Claim::Claimed) {
        return None;
    }
    let mut read = claimed_read(rt, page, state, false, now_ns());
    read.prefetch = true;
    Some(read)
}

enum Claim {
    /// The page is `Loading`, ours, and charged against the budget.
    Claimed,
    /// The page changed meanwhile; look again.
    Changed,
    /// No room now: its set's victim is busy, or DRAM is full and `wait`
    /// was false.
    Busy,
}

/// Claims a `Zero`, `Stored` or `Compressed` page (seen in `state`) for loading, and
/// charges it. With set-associative placement it takes a way of its set,
/// evicting the set's victim if the set is full; otherwise the budget
/// decides, and a demand fault (`wait`) waits for the evictor.
fn claim_for_load(rt: &Shared, page: PageNo, state: PageState, wait: bool) -> Claim {
    let Some(sets) = rt.sets.as_ref() else {
        if wait {
            rt.charge_one_page();
        } else if !rt.budget.try_charge() {
            return Claim::Busy;
        }
        if !rt
            .table
            .transition(page, state, state.with_kind(Kind::Loading))
        {
            rt.budget.uncharge(1);
            return Claim::Changed;
        }
        return Claim::Claimed;
    };
    let pinned = |victim| {
        let kept = rt.pins.keeps_in_dram(victim);
        if kept {
            Counters::add(&rt.counters.pinned_skips, 1);
        }
        kept
    };
    let victim = match sets.place(&rt.table, page, state, &pinned) {
        Placement::Placed(victim) => victim,
        Placement::Changed => return Claim::Changed,
        Placement::Busy => return Claim::Busy,
    };
    let evicted = victim.is_none_or(|(v, vs)| conflict::evict_for_conflict(rt, v, vs));
    // The sets bound DRAM, so the budget has room unless it shrank below
    // them; then the evictor makes room as usual.
    let charged = evicted
        && if wait {
            rt.charge_one_page();
            true
        } else {
            rt.budget.try_charge()
        };
    if !charged {
        rt.table.finish(page, state);
        return Claim::Busy;
    }
    Claim::Claimed
}

/// First write to a clean page: its store copy goes stale. Returns false if
/// the page is busy (being loaded, evicted or copied out): the caller
/// retries later rather than spinning while the owner needs the CPU.
fn resolve_write_to_clean(rt: &Shared, page: PageNo) -> bool {
    let addr = rt.page_addr(page);
    loop {
        let state = rt.table.load(page);
        match state.kind() {
            Kind::Resident => {
                // Own the page while lifting the protection, so the evictor
                // cannot write-protect and copy it halfway through.
                if !rt
                    .table
                    .transition(page, state, state.with_kind(Kind::Loading))
                {
                    continue;
                }
                let lifted = if installs_wake() {
                    rt.uffd.write_protect(addr, rt.page_size, false)
                } else {
                    rt.uffd.unprotect_quietly(addr, rt.page_size)
                };
                if let Err(e) = lifted {
                    rt.fatal(&format!(
                        "lifting write protection of page {page} failed: {e}"
                    ));
                }
                if let Some(stale) = state.slot() {
                    rt.slots().free(stale);
                    if !state.is_referenced() && !state.is_prefetched() {
                        // Clean, unreferenced, not read ahead: a read
                        // fault installed it.
                        rt.write_prediction.written_after_read();
                    }
                }
                if state.is_prefetched() {
                    Counters::add(&rt.counters.prefetch_hits, 1);
                    rt.read_ahead_writes.written_after_read();
                }
                finish_resident(rt, page, PageState::FREE.with_dirty(true), true);
                return true;
            }
            Kind::Loading | Kind::Evicting => return false,
            // Evicted meanwhile: the writer retries and takes a missing fault.
            _ => {
                rt.uffd.wake(addr, rt.page_size);
                return true;
            }
        }
    }
}
