//! A fault on a compressed page: decompress, install, free the object.
//!
//! No I/O, so the fault is served in place like a probation hit; the cost
//! is the decompression (a few microseconds for a 4 KiB page) and the
//! install. The page comes back as it went in: clean with its slot still
//! valid and write-protected, or dirty and writable.

use super::{finish_resident, install};
use crate::organization::Inclusion;
use crate::page_table::{PageNo, PageState};
use crate::runtime::Shared;
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
    decompress(rt, page, buf);
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
        super::backoff();
    }
}

/// Decompresses the object of `page`, which the caller owns, into the
/// page-sized runtime buffer `buf`.
pub(crate) fn decompress(rt: &Shared, page: PageNo, buf: *mut u8) {
    let tier = rt.compressed_tier();
    // SAFETY: the frame is ours and page-sized.
    let out = unsafe { std::slice::from_raw_parts_mut(buf, rt.page_size) };
    // SAFETY: the page is ours (`Loading`), so its object stays live.
    let object = unsafe { tier.pool.object(rt.table.pool_handle(page)) };
    if object.page != page {
        rt.fatal(&format!(
            "the compressed copy of page {page} names page {}",
            object.page
        ));
    }
    match object.body {
        crate::compress::pool::Body::SameFilled(word) => {
            crate::compress::codec::fill_same(out, word)
        }
        crate::compress::pool::Body::Lz4(bytes) => {
            if !crate::compress::codec::decode_lz4(bytes, out) {
                rt.fatal(&format!(
                    "the compressed copy of page {page} does not decompress to a page"
                ));
            }
        }
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

impl Shared {
    /// The compressed tier, which a page can only be in when it is on.
    pub(crate) fn compressed_tier(&self) -> &crate::compress::CompressedTier {
        match &self.compressed {
            Some(tier) => tier,
            None => self.fatal("a page is compressed but the compressed tier is off"),
        }
    }

    /// Frees the compressed copy of a page the caller took out of
    /// `Compressed` (by owning it, or by freeing it).
    pub(crate) fn release_compressed(&self, page: PageNo) {
        let tier = self.compressed_tier();
        let handle = self.table.pool_handle(page);
        // SAFETY: the page left `Compressed` through the caller, so its
        // object is live until this release, and no one else frees it.
        let size = unsafe { tier.pool.object(handle) }.size;
        tier.pool.release(handle, size);
    }
}
