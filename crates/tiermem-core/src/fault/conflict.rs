//! Set conflicts: with set-associative placement a miss in a full set
//! evicts that set's victim on the spot, as a hardware cache does. The
//! fault pays for it: nothing if the victim is clean, a device write if it
//! is dirty (write-back), which is exactly what makes such a cache's misses
//! dearer after writes.

use crate::frames::frame_is_zero;
use crate::page_table::{Kind, PageNo, PageState};
use crate::shared::Shared;
use crate::stats::Counters;
use crate::store::SlotWrite;
use crate::store_errors::WRITE_RETRY;
use crate::sys::mem::zap;

/// Evicts `victim`, which the caller owns (`Evicting`; `state` is what it
/// was before). Returns false, with the victim back as it was, if its
/// content could not be written.
pub(crate) fn evict_for_conflict(rt: &Shared, victim: PageNo, state: PageState) -> bool {
    let resident = state.kind() == Kind::Resident;
    let addr = rt.page_addr(victim);
    if resident && state.is_dirty() {
        // A write between the copy and the zap would be lost.
        if let Err(e) = rt.uffd.write_protect(addr, rt.page_size, true) {
            rt.fatal(&format!(
                "write-protecting page {victim} for eviction failed: {e}"
            ));
        }
    }
    // A resident victim is read in place (mapped, protected, ours); one in
    // probation waits in its frame.
    let src = if resident {
        addr as *const u8
    } else {
        rt.frames.ptr(rt.table.frame(victim)) as *const u8
    };
    // (Under exclusive inclusion a resident page never has a slot.)
    let after = if !state.is_dirty() && state.slot().is_some() {
        Counters::add(&rt.counters.clean_drops, 1);
        PageState::FREE
            .with_kind(Kind::Stored)
            .with_slot(state.slot())
    } else if frame_is_zero(src, rt.page_size) {
        drop_zero(rt, victim, state)
    } else {
        match write_out(rt, victim, src, state) {
            Some(slot) => PageState::FREE
                .with_kind(Kind::Stored)
                .with_slot(Some(slot)),
            None => {
                if resident && state.is_dirty() {
                    let _ = rt.uffd.write_protect(addr, rt.page_size, false);
                }
                rt.table.finish(victim, state);
                return false;
            }
        }
    };
    if resident {
        if let Err(e) = zap(addr, rt.page_size) {
            rt.fatal(&format!("unmapping evicted page {victim} failed: {e}"));
        }
    } else {
        rt.frames.release(rt.table.frame(victim));
    }
    rt.count_if_wasted(state);
    rt.table.finish(victim, after);
    rt.budget.uncharge(1);
    Counters::add(&rt.counters.conflict_evictions, 1);
    true
}

/// An all-zero victim needs no slot: it becomes `Zero` again.
fn drop_zero(rt: &Shared, victim: PageNo, state: PageState) -> PageState {
    if let Some(slot) = state.slot() {
        rt.slots().free(slot);
    }
    if rt.is_lazy(victim) {
        rt.slots().uncommit(1);
    }
    Counters::add(&rt.counters.zero_drops, 1);
    PageState::FREE.with_kind(Kind::Zero)
}

/// Writes the victim's content to a fresh slot; frees its old one.
fn write_out(rt: &Shared, victim: PageNo, src: *const u8, state: PageState) -> Option<u64> {
    let mut slots = Vec::with_capacity(1);
    if !rt.take_fresh_slots(1, &mut slots) {
        return None;
    }
    let slot = slots[0];
    let scratch = rt.seal_scratch(1);
    let scratch_ptr = scratch
        .as_ref()
        .map_or(std::ptr::null_mut(), |m| m.as_ptr());
    let src = rt.seal(victim, slot, src, scratch_ptr);
    let written = match rt.injector().write() {
        Some(e) => Err(e),
        None => rt.store().write_batch(&[SlotWrite { slot, src }]),
    };
    if let Err(e) = written {
        rt.write_failed(&e, &[slot]);
        // The fault is retried at once: without a pause, a failing device
        // would have a slot quarantined per retry, as fast as the CPU goes.
        std::thread::sleep(WRITE_RETRY);
        return None;
    }
    rt.write_succeeded();
    if let Some(old) = state.slot() {
        rt.slots().free(old);
    }
    Counters::add(&rt.counters.page_outs, 1);
    Counters::add(&rt.counters.bytes_written, rt.page_size as u64);
    Counters::add(&rt.counters.write_batches, 1);
    Some(slot)
}
