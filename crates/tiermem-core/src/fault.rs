//! The fault path, top to bottom.
//!
//! A handler thread waits on the userfaultfd, reads faults in batches, and
//! resolves each one:
//!
//! - **missing**, page `Zero`: install zeros (charged against the budget);
//! - **missing**, page `Stored`: read its slot, install it write-protected
//!   (so the first write is seen and the page can later be dropped clean);
//! - **missing**, page in `Probation`: install it from its DRAM frame, no
//!   I/O, and mark it referenced;
//! - **missing**, page already `Resident`: a duplicate fault another thread
//!   resolved; wake the waiter;
//! - **write-protect**, page `Resident` and clean: mark it dirty, drop its
//!   now-stale slot, and lift the protection (which wakes the writer);
//! - page busy (`Loading`, `Evicting`): its owner finishes shortly; retry.
//!
//! Budget charging happens before a page is claimed, so no page is held
//! while waiting for the evictor. No locks are taken: every step is a
//! compare-and-swap on the page's state word. Handler threads never touch
//! tiered memory themselves; I/O goes through a runtime-owned buffer.

use std::io;

use crate::page_table::{Kind, PageNo, PageState};
use crate::runtime::Shared;
use crate::stats::Counters;
use crate::sys::mem::{wait_readable, Mapping, Wake};
use crate::sys::now_ns;
use crate::sys::uffd::{message_buffer, Copied, Fault};

/// Faults read per read(2).
const FAULT_BATCH: usize = 64;

pub(crate) fn handler_loop(rt: &Shared) {
    let mut raw = message_buffer(FAULT_BATCH);
    let mut faults = Vec::with_capacity(FAULT_BATCH);
    let io_buffer = match Mapping::reserve_aligned(
        rt.page_size,
        rt.page_size,
        "allocating a handler I/O buffer",
    ) {
        Ok(m) => m,
        Err(e) => rt.fatal(&format!("{e}")),
    };
    while !rt.stopping() {
        match wait_readable(rt.uffd.raw(), &rt.stop_event, &rt.pause.event) {
            Wake::Stop => break,
            Wake::Pause => {
                if rt.pause.requested() {
                    rt.pause.park();
                }
                continue;
            }
            Wake::Ready => {}
        }
        match rt.uffd.read_faults(&mut raw, &mut faults) {
            Ok(()) => {}
            // Another handler thread took these faults.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => rt.fatal(&format!("reading userfaultfd events failed: {e}")),
        }
        for fault in &faults {
            serve(rt, fault, &io_buffer);
        }
    }
}

fn serve(rt: &Shared, fault: &Fault, io_buffer: &Mapping) {
    let started = now_ns();
    Counters::add(&rt.counters.faults, 1);
    let Some(page) = rt.page_of(fault.address) else {
        rt.uffd
            .wake(fault.address & !(rt.base_page - 1), rt.base_page);
        return;
    };
    if fault.write_protect {
        Counters::add(&rt.counters.wp_faults, 1);
        resolve_write_to_clean(rt, page);
    } else {
        Counters::add(&rt.counters.missing_faults, 1);
        resolve_missing(rt, page, fault, io_buffer);
    }
    rt.fault_latency.record(now_ns().saturating_sub(started));
}

fn resolve_missing(rt: &Shared, page: PageNo, fault: &Fault, io_buffer: &Mapping) {
    loop {
        let state = rt.table.load(page);
        // The lazily committed zone is not pre-marked (it can span terabytes):
        // there, a page outside any allocation reads as zeros.
        let kind = match state.kind() {
            Kind::Free if rt.is_lazy(page) => Kind::Zero,
            kind => kind,
        };
        match kind {
            Kind::Zero | Kind::Stored => {
                rt.charge_one_page();
                if !rt
                    .table
                    .transition(page, state, state.with_kind(Kind::Loading))
                {
                    rt.budget.uncharge(1);
                    continue;
                }
                if kind == Kind::Zero {
                    if rt.is_lazy(page) {
                        rt.commit_lazy_page(page);
                    }
                    install_zeros(rt, page);
                } else {
                    page_in(rt, page, state, fault.write, io_buffer);
                }
                return;
            }
            Kind::Probation => {
                if rt
                    .table
                    .transition(page, state, state.with_kind(Kind::Loading))
                {
                    rescue_from_probation(rt, page, state, fault.write);
                    return;
                }
            }
            Kind::Resident => {
                Counters::add(&rt.counters.duplicate_faults, 1);
                rt.uffd.wake(rt.page_addr(page), rt.page_size);
                return;
            }
            Kind::Loading | Kind::Evicting => backoff(),
            Kind::Free => {
                rt.report_bad_access(fault);
                return;
            }
        }
    }
}

/// First touch of a never-written page. Installed writable: it has no slot,
/// so it counts as dirty until eviction finds it still all-zero.
fn install_zeros(rt: &Shared, page: PageNo) {
    install(rt, page, rt.zero_page.as_ptr(), false);
    Counters::add(&rt.counters.zero_fills, 1);
    finish_resident(rt, page, PageState::FREE.with_dirty(true), false);
}

fn page_in(rt: &Shared, page: PageNo, state: PageState, write: bool, io_buffer: &Mapping) {
    let Some(slot) = state.slot() else {
        rt.fatal(&format!(
            "page {page} is stored but has no slot ({state:?})"
        ));
    };
    // SAFETY: the handler owns `io_buffer` (page-sized); no one else uses it.
    let buf = unsafe { std::slice::from_raw_parts_mut(io_buffer.as_ptr(), rt.page_size) };
    if let Err(e) = rt.store().read(slot, buf) {
        rt.fatal(&format!(
            "reading page {page} from backing slot {slot} failed: {e}"
        ));
    }
    Counters::add(&rt.counters.page_ins, 1);
    Counters::add(&rt.counters.bytes_read, rt.page_size as u64);
    // A read fault installs the page write-protected: it stays clean, and its
    // slot copy stays valid, until the first write. A write fault dirties it
    // at once, which saves a second fault.
    install(rt, page, io_buffer.as_ptr(), !write);
    let new = if write {
        rt.slots().free(slot);
        PageState::FREE.with_dirty(true)
    } else {
        PageState::FREE.with_slot(Some(slot))
    };
    finish_resident(rt, page, new, write);
}

fn rescue_from_probation(rt: &Shared, page: PageNo, state: PageState, write: bool) {
    let frame = rt.table.frame(page);
    let dirty = state.is_dirty() || write;
    install(rt, page, rt.frames.ptr(frame), !dirty);
    rt.frames.release(frame);
    Counters::add(&rt.counters.probation_hits, 1);
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

/// First write to a clean page: its store copy goes stale.
fn resolve_write_to_clean(rt: &Shared, page: PageNo) {
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
                if let Err(e) = rt.uffd.write_protect(addr, rt.page_size, false) {
                    rt.fatal(&format!(
                        "lifting write protection of page {page} failed: {e}"
                    ));
                }
                if let Some(stale) = state.slot() {
                    rt.slots().free(stale);
                }
                finish_resident(rt, page, PageState::FREE.with_dirty(true), true);
                return;
            }
            Kind::Loading | Kind::Evicting => backoff(),
            // Evicted meanwhile: the writer retries and takes a missing fault.
            _ => {
                rt.uffd.wake(addr, rt.page_size);
                return;
            }
        }
    }
}

/// UFFDIO_COPY one page, handling the cases the kernel reports.
fn install(rt: &Shared, page: PageNo, src: *const u8, write_protect: bool) {
    let addr = rt.page_addr(page);
    loop {
        // SAFETY: `src` is a runtime-owned buffer of `page_size` bytes, and
        // `addr` is a page-aligned page of the registered arena.
        match unsafe { rt.uffd.copy(addr, src, rt.page_size, write_protect) } {
            Ok(Copied::Done) => return,
            Ok(Copied::AlreadyPresent) => {
                // Mapped behind our back: keep what is there, assume it was
                // written, and wake the waiters.
                Counters::add(&rt.counters.unexpected_present, 1);
                rt.uffd.wake(addr, rt.page_size);
                return;
            }
            Ok(Copied::Retry(_)) => std::thread::yield_now(),
            Err(e) => rt.fatal(&format!(
                "installing page {page} with UFFDIO_COPY failed: {e}"
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
    rt.policy.admit(&rt.table, page);
    rt.kick_evictor_if_low();
}

/// Waits for another thread to finish with a busy page.
pub(crate) fn backoff() {
    std::hint::spin_loop();
    std::thread::yield_now();
}
