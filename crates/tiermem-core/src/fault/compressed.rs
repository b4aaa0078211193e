//! A fault on a compressed page: decompress, install, free the object.
//!
//! No I/O, so the fault is served in place like a probation hit; the cost
//! is the decompression (a few microseconds for a 4 KiB page) and the
//! install. The page comes back as it went in: clean with its slot still
//! valid and write-protected, or dirty and writable.

use super::install::{finish_resident, install};
use crate::organization::Inclusion;
use crate::page_table::{PageNo, PageState};
use crate::shared::Shared;
use crate::stats::Counters;
use crate::sys::now_ns;

/// Installs `page`, which the caller claimed (`Loading`) and charged,
/// from its compressed copy. `state` is its state when claimed; the
/// fault was read at `started`.
pub(crate) fn install_compressed(
    rt: &Shared,
    page: PageNo,
    state: PageState,
    write: bool,
    started: u64,
) {
    let frame = take_frame(rt);
    let buf = rt.frames.ptr(frame);
    let seq = rt.decompress(page, buf);
    let tier = rt.compressed_tier();
    tier.split.note_hit(seq, tier.upcoming_seq());
    let exclusive = rt.config.organization.inclusion == Inclusion::Exclusive;
    let dirty = state.is_dirty() || write || exclusive;
    stage_2_install(rt, page, buf, dirty);
    rt.frames.release(frame);
    rt.release_compressed(page);
    stage_3_publish(rt, page, state, dirty, write);
    let took = now_ns().saturating_sub(started);
    rt.fault_latency.record(took);
    rt.compressed_hit_latency.record(took);
}

/// A staging frame outside the budget. The pool holds as many frames as
/// an eighth of physical memory, and they are handed back within
/// microseconds, so a wait here is a formality.
fn take_frame(rt: &Shared) -> crate::frames::FrameNo {
    loop {
        if let Some(frame) = rt.frames.alloc() {
            return frame;
        }
        crate::sys::backoff();
    }
}

fn stage_2_install(rt: &Shared, page: PageNo, buf: *mut u8, dirty: bool) {
    install(rt, page, buf, !dirty);
}

/// A dirty page's stale slot goes (an exclusive cache's too); the fault
/// counts as a miss for the policy, as a store read does.
fn stage_3_publish(rt: &Shared, page: PageNo, state: PageState, dirty: bool, write: bool) {
    let slot = match (dirty, state.slot()) {
        (true, Some(old)) => {
            rt.slots().free(old);
            None
        }
        (_, slot) => slot,
    };
    Counters::add(&rt.counters.compressed_hits, 1);
    if !write {
        rt.policy.note_miss(&rt.table, page);
    }
    finish_resident(
        rt,
        page,
        PageState::FREE.with_dirty(dirty).with_slot(slot),
        write,
    );
}
