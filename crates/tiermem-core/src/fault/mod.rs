//! The fault path, top to bottom.
//!
//! A handler thread waits on the userfaultfd, reads faults in batches, and
//! resolves each one:
//!
//! - **missing**, page `Zero`: install zeros (charged against the budget);
//! - **missing**, page `Stored`: read its slot, install it write-protected
//!   (so the first write is seen and the page can later be dropped clean),
//!   or writable and dirty if the fault was a write or one is predicted
//!   ([`write_prediction`]);
//! - **missing**, page in `Probation`: install it from its DRAM frame, no
//!   I/O, and mark it referenced;
//! - **missing**, page `Compressed`: decompress it from the compressed
//!   pool, no I/O ([`compressed`]);
//! - **missing**, page already `Resident`: a duplicate fault another thread
//!   resolved; wake the waiter;
//! - **write-protect**, page `Resident` and clean: mark it dirty, drop its
//!   now-stale slot, and lift the protection (which wakes the writer);
//! - page busy (`Loading`, `Evicting`): its owner finishes shortly; retry.
//!
//! Budget charging happens before a page is claimed, so no page is held
//! while waiting for the evictor. No locks are taken: every step is a
//! compare-and-swap on the page's state word. Handler threads never touch
//! tiered memory themselves; I/O goes through runtime-owned buffers.
//!
//! This module decides *what* a fault needs; two loops drive it:
//! - [`ring`]: io_uring with registered buffers. One handler keeps many page
//!   reads in flight, installs each as it completes, and reads ahead of
//!   sequential and strided streams ([`readahead`]). A fault on a page that
//!   is busy (being read or written back) is set aside and retried after the
//!   next completion, never waited for in place.
//! - [`sync`]: pread, one read at a time per handler; the fallback where
//!   io_uring is unavailable or `TIERMEM_IO_ENGINE=psync`.
//!
//! Or, under signal delivery ([`signal`]), no handler thread at all: the
//! faulting thread gets SIGBUS and resolves its own fault the same way,
//! and one ring handler, fed by the faulting threads, only reads ahead.

mod compressed;
mod conflict;
mod fork_window;
mod read_error;
mod readahead;
mod ring;
pub(crate) mod signal;
mod sync;
mod write_prediction;
mod zero_ahead;

pub(crate) use compressed::decompress;
pub(crate) use fork_window::park_serving;
pub(crate) use read_error::{first_bad_page, read_and_check, settle, BadRead};
pub(crate) use signal::SignalSlots;
pub(crate) use write_prediction::WritePrediction;
pub(crate) use zero_ahead::{ZeroStream, MAX_WINDOW as ZERO_AHEAD_MAX};

use crate::io_config::IoEngine;
use crate::organization::Inclusion;
use crate::page_table::{Kind, PageNo, PageState};
use crate::runtime::Shared;
use crate::sets::Placement;
use crate::stats::Counters;
use crate::sys::now_ns;
use crate::sys::uffd::{Copied, Fault};

/// Faults read per read(2).
const FAULT_BATCH: usize = 64;

pub(crate) fn handler_loop(rt: &Shared) {
    if rt.config.io.engine == IoEngine::IoUring {
        match ring::RingHandler::new(rt) {
            Ok(mut handler) => {
                rt.note_io_engine(handler.engine_name());
                return handler.run();
            }
            Err(reason) => rt.note_io_fallback(&reason),
        }
    } else {
        rt.note_io_engine("pread (TIERMEM_IO_ENGINE=psync)");
    }
    sync::run(rt);
}

/// Bytes of read buffers one fault handler holds, outside the budget.
pub(crate) fn handler_buffer_bytes(rt: &Shared) -> u64 {
    match rt.config.io.engine {
        IoEngine::IoUring => ring::buffer_bytes(rt),
        IoEngine::Psync => rt.page_size as u64,
    }
}

/// Under signal delivery, the read-ahead thread: an io_uring handler that
/// reads the windows faulting threads ask for ([`signal`]'s
/// `read_ahead`). Without a ring it says why and leaves read-ahead off.
pub(crate) fn read_ahead_loop(rt: &Shared) {
    let Some(requests) = rt.signal_slots.as_ref().and_then(|s| s.read_ahead.as_ref()) else {
        return;
    };
    match ring::RingHandler::new(rt) {
        Ok(mut handler) => {
            requests.set_serving(true);
            handler.run();
            requests.set_serving(false);
        }
        Err(reason) => {
            eprintln!(
                "tiermem: the read-ahead thread has no io_uring ({reason}); read-ahead is off"
            )
        }
    }
}

/// A page read the fault path has claimed (`Loading`) and must finish.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PageRead {
    pub page: PageNo,
    pub slot: u64,
    /// Install writable and dirty: the fault was a write, or one is predicted.
    pub write: bool,
    /// The fault itself was a read (a predicted write is no reference yet).
    pub predicted: bool,
    /// Read ahead of demand: install without waking anyone.
    pub prefetch: bool,
    /// Part of a fixed-degree prefetch group spread over several requests:
    /// the demand page whose waiter is woken once the whole group is in,
    /// so the lines fetched with a miss arrive together, as in a cache.
    pub group: Option<PageNo>,
    /// The read-ahead marker of its window (as Linux's `PG_readahead`):
    /// parked uninstalled ([`park_marker`]), so that the program's arrival
    /// there shows as a fault and starts the next window before this one
    /// runs out.
    pub marker: bool,
    pub started_ns: u64,
}

impl PageRead {
    /// A real write fault is a reference in itself: the page will never
    /// write-fault to report one.
    fn enters_referenced(&self) -> bool {
        self.write && !self.predicted
    }
}

/// What a missing fault needs once its cheap cases are handled.
pub(crate) enum Missing {
    /// Served without I/O (zeros, probation, duplicate, bad access).
    Resolved,
    /// The page is claimed; its slot must be read, then [`finish_read`].
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
                install_zeros(rt, page, fault.write);
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
            Kind::Resident => {
                // Another fault (or read-ahead) installed it first.
                if state.is_prefetched() {
                    prefetch_used(rt, page);
                } else {
                    Counters::add(&rt.counters.duplicate_faults, 1);
                }
                rt.uffd.wake(rt.page_addr(page), rt.page_size);
                true
            }
            Kind::Loading | Kind::Evicting => return Missing::Busy,
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

/// Parks a read-ahead marker whose read completed into `buf`: its content
/// goes to a runtime frame and the page waits in probation, unmapped, where
/// any handler's fault serves it without I/O ([`rescue_from_probation`]).
/// The handler that read it watches it ([`park_state`]). False if no frame
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

/// Installs a page whose slot was read into `buf` and publishes it.
pub(crate) fn finish_read(rt: &Shared, read: &PageRead, buf: *const u8) {
    // Read-ahead wakes no one: nobody waits for it (a fault that arrived
    // meanwhile is retried and finds the page resident).
    let wake = !read.prefetch && read.group.is_none();
    count_page_ins(rt, 1);
    if !read.prefetch && !read.enters_referenced() {
        // Before the wake-up, as the count: a woken thread sees its miss. A
        // write miss enters referenced, and the policy counts it from that.
        rt.policy.note_miss(&rt.table, read.page);
    }
    install_with(rt, read.page, buf, !owns_store_copy(rt, read), wake);
    publish_read(rt, read);
}

/// Read-ahead of consecutive pages that landed in consecutive buffers at
/// `buf`: one UFFDIO_COPY installs them all (a sequential scan installs a
/// request's worth of pages with one call instead of one call per page).
pub(crate) fn finish_read_ahead_run(rt: &Shared, reads: &[PageRead], buf: *const u8) {
    let Some(first) = reads.first() else {
        return;
    };
    debug_assert!(reads.iter().enumerate().all(|(i, r)| r.prefetch
        && !r.write
        && r.group.is_none()
        && r.page == first.page + i as PageNo));
    count_page_ins(rt, reads.len() as u64);
    install_pages(
        rt,
        first.page,
        reads.len(),
        buf,
        !owns_store_copy(rt, first),
        false,
    );
    for read in reads {
        publish_read(rt, read);
    }
}

/// A read fault installs the page write-protected: it stays clean, and its
/// slot copy stays valid, until the first write. A write fault (or a
/// predicted one) dirties it at once, which saves a second fault. An
/// exclusive cache gives the slot up as the page comes in: the page is the
/// only copy, so it is dirty and needs no write protection.
fn owns_store_copy(rt: &Shared, read: &PageRead) -> bool {
    read.write || rt.config.organization.inclusion == Inclusion::Exclusive
}

/// Counted before the install wakes anyone, so a woken thread that reads
/// the stats sees its own page-in.
fn count_page_ins(rt: &Shared, pages: u64) {
    Counters::add(&rt.counters.page_ins, pages);
    Counters::add(&rt.counters.bytes_read, pages * rt.page_size as u64);
}

/// The state of a page just read from its slot: clean with the slot, or
/// dirty with the slot given up if DRAM holds the only copy now.
fn read_in_state(rt: &Shared, read: &PageRead) -> PageState {
    if owns_store_copy(rt, read) {
        rt.slots().free(read.slot);
        PageState::FREE.with_dirty(true)
    } else {
        PageState::FREE.with_slot(Some(read.slot))
    }
}

/// The bookkeeping of a page read that is now installed.
fn publish_read(rt: &Shared, read: &PageRead) {
    let new = read_in_state(rt, read);
    if read.prefetch {
        Counters::add(&rt.counters.prefetch_issued, 1);
        finish_resident(rt, read.page, new.with_prefetched(true), false);
    } else {
        finish_resident(rt, read.page, new, read.enters_referenced());
        let took = now_ns().saturating_sub(read.started_ns);
        rt.fault_latency.record(took);
        rt.page_in_latency.record(took);
    }
}

/// First touch of a never-written page. Installed writable: it has no slot,
/// so it counts as dirty until eviction finds it still all-zero. Under
/// write-through a read installs it protected and clean instead, so that
/// only pages really written are copied out (eviction finds it all-zero).
///
/// A fill that continues a run of first touches in order brings the pages
/// after it in too, with the same call ([`zero_ahead`]).
fn install_zeros(rt: &Shared, page: PageNo, write: bool) {
    let dirty = write || rt.written.is_none();
    let ahead = if dirty {
        zero_ahead::claim_after(rt, page)
    } else {
        0
    };
    install_pages(rt, page, 1 + ahead, rt.zero_run.as_ptr(), !dirty, true);
    Counters::add(&rt.counters.zero_fills, 1 + ahead as u64);
    finish_resident(rt, page, PageState::FREE.with_dirty(dirty), false);
    zero_ahead::finish_after(rt, page, ahead);
}

fn rescue_from_probation(rt: &Shared, page: PageNo, state: PageState, write: bool) {
    let frame = rt.table.frame(page);
    let exclusive = rt.config.organization.inclusion == Inclusion::Exclusive;
    let dirty = state.is_dirty() || write || exclusive;
    install(rt, page, rt.frames.ptr(frame), !dirty);
    rt.frames.release(frame);
    Counters::add(&rt.counters.probation_hits, 1);
    if state.is_prefetched() {
        Counters::add(&rt.counters.prefetch_hits, 1);
    }
    let slot = match (dirty, state.slot()) {
        (true, Some(old)) => {
            rt.slots().free(old);
            None
        }
        (_, slot) => slot,
    };
    // The page was charged all along; a touch in probation is a reference.
    finish_resident(
        rt,
        page,
        PageState::FREE.with_dirty(dirty).with_slot(slot),
        true,
    );
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
                let lifted = if fork_window::installs_wake() {
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

fn install(rt: &Shared, page: PageNo, src: *const u8, write_protect: bool) {
    install_with(rt, page, src, write_protect, true);
}

/// UFFDIO_COPY one page, handling the cases the kernel reports.
fn install_with(rt: &Shared, page: PageNo, src: *const u8, write_protect: bool, wake: bool) {
    install_pages(rt, page, 1, src, write_protect, wake);
}

/// UFFDIO_COPY `count` consecutive pages from consecutive buffers at `src`
/// with as few calls as the kernel allows, handling what it reports.
fn install_pages(
    rt: &Shared,
    first: PageNo,
    count: usize,
    src: *const u8,
    write_protect: bool,
    wake: bool,
) {
    let addr = rt.page_addr(first);
    let len = count * rt.page_size;
    let wake = wake && fork_window::installs_wake();
    let mut done = 0;
    while done < len {
        // SAFETY: `src` holds `len` bytes of runtime-owned buffers, and
        // `addr..addr + len` are whole pages of the registered arena.
        let copied = unsafe {
            rt.uffd
                .copy(addr + done, src.add(done), len - done, write_protect, wake)
        };
        match copied {
            Ok(Copied::Done) => return,
            Ok(Copied::AlreadyPresent { installed }) => {
                // Mapped behind our back: keep what is there, assume it was
                // written, wake the waiters, and go on after that page.
                Counters::add(&rt.counters.unexpected_present, 1);
                let present = (done + installed) / rt.page_size * rt.page_size;
                rt.uffd.wake(addr + present, rt.page_size);
                done = present + rt.page_size;
            }
            Ok(Copied::Retry(installed)) => {
                done += installed;
                std::thread::yield_now();
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && len - done > rt.page_size => {
                // One copy must stay within one mapping, and the program's
                // mlock or mprotect split the arena's: page by page.
                for at in (done..len).step_by(rt.page_size) {
                    let page = first + (at / rt.page_size) as PageNo;
                    // SAFETY: `at` < `len`, inside the caller's buffers.
                    install_pages(rt, page, 1, unsafe { src.add(at) }, write_protect, wake);
                }
                return;
            }
            Err(e) => rt.fatal(&format!(
                "installing {count} page(s) from page {first} with UFFDIO_COPY failed: {e}"
            )),
        }
    }
}

/// Publishes a page the handler owns as resident and hands it to the policy.
fn finish_resident(rt: &Shared, page: PageNo, state: PageState, referenced: bool) {
    rt.table.finish(
        page,
        state.with_kind(Kind::Resident).with_referenced(referenced),
    );
    if state.is_dirty() {
        if let Some(queue) = &rt.written {
            // Write-through: the evictor copies it out within milliseconds.
            queue.push(page);
        }
    }
    rt.policy.admit(&rt.table, page);
    rt.kick_evictor_if_low();
}

/// Waits for another thread to finish with a busy page.
pub(crate) fn backoff() {
    std::hint::spin_loop();
    std::thread::yield_now();
}
