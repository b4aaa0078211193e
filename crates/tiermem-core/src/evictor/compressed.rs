//! The evictor's side of the compressed tier: compress pages leaving
//! probation, write the oldest compressed pages back when the pool is
//! full, close the pool's holes, and shrink it with the budget.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Evictor;
use crate::compress::codec::{Encoded, Encoder};
use crate::compress::pool::{Appended, Body, Pool};
use crate::compress::{Codec, CompressedTier};
use crate::frames::{FrameNo, BATCH};
use crate::page_table::{Kind, PageNo, PageState};
use crate::shared::Shared;
use crate::stats::Counters;

/// After this many rejections in a row, only every [`SAMPLE_EVERY`]th page
/// is tried: incompressible data (already compressed, encrypted, random)
/// then costs the evictor a sixteenth of the compression work, and one
/// success turns every page back on.
const REJECT_STREAK: u32 = 64;
const SAMPLE_EVERY: u32 = 16;

/// Pages offered to a full pool with no compressed hit anywhere meanwhile,
/// after which a full pool takes only every [`SAMPLE_EVERY`]th page. A
/// full pool makes room by writing its oldest pages back, so a page it
/// takes costs a compression, and often a decompression and a write,
/// where sending the page to the store costs the write alone: worth it
/// only if compressed pages are faulted back. They are not while a
/// program fills its memory for the first time (the bench's first touch
/// of text ran at 56k pages/s through the pool, 148k without it), and
/// then a pool of old pages only delays the store. On uniform text, where
/// the pool pays, a hit comes every ten or so stores; the sampled pages
/// bring the hits back that turn the pool on again.
const STORES_WITHOUT_HIT: u32 = 1024;

/// Holes the pool tolerates before it compacts, in percent of its DRAM.
/// Faults free objects all over the pool; moving the live rest of a
/// segment is a memcpy of at most 64 KiB (microseconds), cheaper than the
/// compression of the pages a hole-ridden pool would turn away, so the
/// pool is kept nearly as dense as its objects.
const HOLES_PERCENT: u64 = 8;

/// Segments compacted between two eviction batches at most. Faults punch
/// holes at up to tens of MB/s (one per compressed hit), and compacting a
/// segment 90% full frees a tenth of one: a batch of 64 evictions is
/// followed by enough compaction to keep up.
pub(super) const COMPACTIONS_PER_BATCH: usize = 8;

/// Makes `make_room` give up rather than loop when nothing moves (every
/// compressed page busy, the store refusing writes).
const ROOM_TRIES: usize = 8;

/// How often an adapting split is reconsidered: long enough for a
/// thousand hits or more under load, short enough to follow a phase
/// change within seconds (a step is 5% of the budget).
const SPLIT_INTERVAL_NS: u64 = 500_000_000;

pub(super) struct PoolWork {
    encoder: Encoder,
    /// Object handles of a segment being compacted.
    handles: Vec<u32>,
    /// Write-back order entries taken for the batch in flight.
    entries: Vec<(PageNo, u32)>,
    /// Probation's pages waiting to be written while a pool write-back
    /// borrows the staging list (it runs in the middle of filling it).
    probation_batch: Vec<(PageNo, PageState, FrameNo)>,
    rejected_in_a_row: u32,
    skipped: u32,
    /// Pages offered to a full pool since the last compressed hit.
    full_stores_without_hit: u32,
    /// `compressed_hits` when last looked at.
    hits_seen: u64,
    /// Pages let by while passing by, to take every 16th.
    bypass_skipped: u32,
    /// When the split is reconsidered next (`now_ns`).
    next_split_ns: u64,
    /// What an encoding takes, a moving average (1/64 per page).
    encode_ns: u64,
}

impl PoolWork {
    pub fn new(page_size: usize, codec: Codec) -> PoolWork {
        PoolWork {
            encoder: Encoder::new(page_size, codec),
            handles: Vec::new(),
            entries: Vec::with_capacity(BATCH),
            probation_batch: Vec::with_capacity(BATCH),
            rejected_in_a_row: 0,
            skipped: 0,
            full_stores_without_hit: 0,
            hits_seen: 0,
            bypass_skipped: 0,
            next_split_ns: 0,
            encode_ns: 0,
        }
    }

    /// Whether a full pool should let this page go to the store: no
    /// compressed hit for [`STORES_WITHOUT_HIT`] pages offered while full,
    /// except every [`SAMPLE_EVERY`]th page.
    fn bypassing_full_pool(&mut self, hits: u64) -> bool {
        if hits != self.hits_seen {
            self.hits_seen = hits;
            self.full_stores_without_hit = 0;
            return false;
        }
        if self.full_stores_without_hit < STORES_WITHOUT_HIT {
            self.full_stores_without_hit += 1;
            return false;
        }
        self.bypass_skipped += 1;
        !self.bypass_skipped.is_multiple_of(SAMPLE_EVERY)
    }

    /// Whether to skip this page's compression (a long rejection streak).
    fn sampling_out(&mut self) -> bool {
        if self.rejected_in_a_row < REJECT_STREAK {
            return false;
        }
        self.skipped += 1;
        !self.skipped.is_multiple_of(SAMPLE_EVERY)
    }
}

impl<'a> Evictor<'a> {
    /// The tier, borrowed from `Shared` rather than from `self`, so that it
    /// stays usable while the evictor's own state changes.
    pub(super) fn tier(&self) -> Option<&'a CompressedTier> {
        let rt: &'a Shared = self.rt;
        rt.compressed.as_ref()
    }

    /// Moves an owned page leaving probation (its content in `frame`) into
    /// the pool. True if it left DRAM: the frame is released and the page
    /// uncharged. False if the tier is off, the page does not compress, or
    /// the pool has no room: the caller drops or writes it as before.
    pub(super) fn compress(&mut self, page: PageNo, state: PageState, frame: FrameNo) -> bool {
        let rt = self.rt;
        let Some(tier) = self.tier() else {
            return false;
        };
        if self.pool.sampling_out() {
            return false;
        }
        let cap = tier.cap_segments(rt.budget.limit(), rt.page_size);
        let size = Pool::object_size(rt.page_size * 3 / 4);
        // At its cap, every page the pool takes displaces an older one, even
        // while the last write-back's room lasts.
        if tier.pool.committed_segments() + 1 >= cap {
            let hits = rt.counters.compressed_hits.load(Ordering::Relaxed);
            if self.pool.bypassing_full_pool(hits) {
                Counters::add(&rt.counters.compress_bypassed, 1);
                return false;
            }
        }
        if !self.make_room(tier, size, cap) {
            return false;
        }
        // SAFETY: the frame is ours and holds the page.
        let data = unsafe { std::slice::from_raw_parts(rt.frames.ptr(frame), rt.page_size) };
        if self.pool.encoder.take_request_for_new_dictionary() && tier.settings.dictionary {
            tier.dictionary.start_gathering();
        }
        // Only an adapting split reads the compression time.
        let timed = tier.split.is_adaptive();
        let started = if timed { crate::sys::now_ns() } else { 0 };
        let encoded = self.pool.encoder.encode(data, tier.active_dictionary());
        if timed {
            let took = crate::sys::now_ns().saturating_sub(started);
            let average = &mut self.pool.encode_ns;
            *average = (*average * 63 + took) / 64;
        }
        let body = match encoded {
            Encoded::SameFilled(word) => Body::SameFilled(word),
            Encoded::Lz4(bytes) => Body::Lz4(bytes),
            Encoded::Lz4WithDictionary(bytes, slot) => Body::Lz4WithDictionary(bytes, slot),
            Encoded::Incompressible => {
                self.pool.rejected_in_a_row += 1;
                Counters::add(&rt.counters.compress_rejected, 1);
                return false;
            }
        };
        if matches!(body, Body::Lz4(_)) {
            gather_dictionary(rt, tier, data);
        }
        let same_filled = matches!(body, Body::SameFilled(_));
        let dictionary_slot = match body {
            Body::Lz4WithDictionary(_, slot) => Some(slot),
            _ => None,
        };
        let seq = tier.next_seq();
        let Some(handle) = append(rt, tier, page, seq, body, cap) else {
            return false;
        };
        self.pool.rejected_in_a_row = 0;
        Counters::add(&rt.counters.compressed_stores, 1);
        if same_filled {
            Counters::add(&rt.counters.same_filled_pages, 1);
        }
        if let Some(slot) = dictionary_slot {
            tier.dictionary.object_stored(slot);
            Counters::add(&rt.counters.dictionary_pages, 1);
        }
        rt.table.set_pool_handle(page, handle);
        // A dirty page's slot is stale: the pool holds the only copy. A
        // clean one keeps its slot, so writing it back costs nothing.
        let slot = match (state.is_dirty(), state.slot()) {
            (true, Some(old)) => {
                rt.slots().free(old);
                None
            }
            (_, slot) => slot,
        };
        rt.count_if_wasted(state);
        rt.table.finish(
            page,
            state
                .with_kind(Kind::Compressed)
                .with_slot(slot)
                .with_referenced(false)
                .with_prefetched(false),
        );
        rt.frames.release(frame);
        if !tier.keep_charge(tier.segment_pages(rt.page_size)) {
            rt.budget.uncharge(1);
        }
        tier.push(&rt.table, page, seq);
        true
    }

    /// Ensures an object of `size` bytes fits under `cap` segments:
    /// returns empty segments, closes holes, or writes the oldest pages
    /// back. False if none of that made room.
    fn make_room(&mut self, tier: &CompressedTier, size: usize, cap: u64) -> bool {
        for _ in 0..ROOM_TRIES {
            if tier.pool.has_room(size, cap) {
                return true;
            }
            if reclaim(self.rt, tier) > 0 || self.compact(tier) {
                continue;
            }
            if self.write_back_oldest(tier) == 0 {
                return false;
            }
        }
        tier.pool.has_room(size, cap)
    }

    /// Closes holes, at most `rounds` segments' worth. The evictor calls
    /// it between batches, not only when the pool is full: under a steady
    /// stream of faults it may evict without pause for seconds, while
    /// every compressed hit leaves a hole.
    pub(super) fn compact_some(&mut self, rounds: usize) {
        let Some(tier) = self.tier() else {
            return;
        };
        for _ in 0..rounds {
            if self.rt.stopping() || !self.compact(tier) {
                return;
            }
        }
    }

    /// After the budget shrank, brings the pool back under its share.
    pub(super) fn fit_pool_to_share(&mut self) {
        let rt = self.rt;
        let Some(tier) = self.tier() else {
            return;
        };
        release_unused_dictionaries(rt, tier);
        self.adapt_split(tier);
        let mut tries = 0;
        while tier.pool.committed_segments() > tier.cap_segments(rt.budget.limit(), rt.page_size)
            && !rt.stopping()
            && tries < 4 * ROOM_TRIES
        {
            tries += 1;
            if reclaim(rt, tier) > 0 || self.compact(tier) {
                continue;
            }
            if self.write_back_oldest(tier) == 0 {
                // Busy pages or a failing store: the next round retries.
                return;
            }
        }
    }

    /// Every half second, lets the split between resident pages and the
    /// pool move towards where hits save more (`compress::split`); a
    /// smaller share is then reached by the write-back that follows.
    fn adapt_split(&mut self, tier: &CompressedTier) {
        let rt = self.rt;
        let now = crate::sys::now_ns();
        if !tier.split.is_adaptive() || now < self.pool.next_split_ns {
            return;
        }
        self.pool.next_split_ns = now + SPLIT_INTERVAL_NS;
        let objects = tier.pool.objects();
        let committed = tier.pool.committed_bytes().max(1);
        let typical = |summary: crate::stats::LatencySummary, default: u64| match summary.p50_ns {
            0 => default,
            ns => ns,
        };
        let moved = tier.split.adapt(crate::compress::split::Inputs {
            objects,
            ratio: (objects * rt.page_size as u64) as f64 / committed as f64,
            budget_pages: rt.budget.limit(),
            hit_ns: typical(rt.compressed_hit_latency.summary(), 12_000),
            miss_ns: typical(rt.page_in_latency.summary(), 60_000),
            evict_ns: self.pool.encode_ns,
        });
        if moved.is_some() {
            Counters::add(&rt.counters.compress_share_moves, 1);
        }
    }

    /// Moves the live objects of the sparsest segment to the head once
    /// holes make up more than [`HOLES_PERCENT`] of the pool. True if a
    /// segment was freed or objects moved.
    fn compact(&mut self, tier: &CompressedTier) -> bool {
        let rt = self.rt;
        let pool = &tier.pool;
        if pool.live_bytes() * 100 >= pool.committed_bytes() * (100 - HOLES_PERCENT) {
            return false;
        }
        let Some(seg) = pool.sparsest_sealed() else {
            return false;
        };
        pool.handles_in(seg, &mut self.pool.handles);
        let mut moved = 0;
        for i in 0..self.pool.handles.len() {
            let handle = self.pool.handles[i];
            match move_object(rt, tier, handle) {
                Move::Moved => moved += 1,
                Move::Skipped => {}
                Move::Full => break,
            }
        }
        Counters::add(&rt.counters.compaction_moves, moved);
        reclaim(rt, tier) > 0 || moved > 0
    }

    /// Writes the oldest compressed pages back, a batch at a time: clean
    /// ones are dropped (their slot is valid), dirty ones decompressed and
    /// written. Returns how many left the pool.
    fn write_back_oldest(&mut self, tier: &CompressedTier) -> usize {
        std::mem::swap(&mut self.to_write, &mut self.pool.probation_batch);
        let n = self.write_back_oldest_staged(tier);
        std::mem::swap(&mut self.to_write, &mut self.pool.probation_batch);
        n
    }

    fn write_back_oldest_staged(&mut self, tier: &CompressedTier) -> usize {
        let rt = self.rt;
        self.to_write.clear();
        self.pool.entries.clear();
        let mut dropped = 0;
        while self.to_write.len() < BATCH {
            let Some((page, seq)) = tier.pop_oldest() else {
                break;
            };
            let Some(state) = own_compressed(rt, tier, page, seq) else {
                continue;
            };
            if !state.is_dirty() && state.slot().is_some() {
                rt.release_compressed(page);
                rt.table.finish(page, state.with_kind(Kind::Stored));
                dropped += 1;
                continue;
            }
            let Some(frame) = rt.frames.alloc() else {
                rt.table.finish(page, state);
                tier.push_front(std::iter::once((page, seq)));
                break;
            };
            let _ = rt.decompress(page, rt.frames.ptr(frame));
            self.to_write.push((page, state, frame));
            self.pool.entries.push((page, seq));
        }
        Counters::add(&rt.counters.compressed_writebacks, dropped as u64);
        Counters::add(&rt.counters.clean_drops, dropped as u64);
        dropped + self.write_back_decompressed(tier)
    }

    /// Writes the decompressed pages of `to_write`; they leave the pool
    /// once their slots hold them. On failure they stay compressed and
    /// first in line.
    fn write_back_decompressed(&mut self, tier: &CompressedTier) -> usize {
        let rt = self.rt;
        if self.to_write.is_empty() {
            return 0;
        }
        if let Err(pause) = self.write_staged() {
            for &(page, state, frame) in &self.to_write {
                rt.frames.release(frame);
                rt.table.finish(page, state);
            }
            tier.push_front(self.pool.entries.iter().copied());
            std::thread::sleep(pause.min(Duration::from_millis(100)));
            return 0;
        }
        let n = self.to_write.len();
        for (i, &(page, state, frame)) in self.to_write.iter().enumerate() {
            rt.release_compressed(page);
            let stored = state
                .with_kind(Kind::Stored)
                .with_dirty(false)
                .with_slot(Some(self.slots[i]));
            rt.table.finish(page, stored);
            rt.frames.release(frame);
        }
        Counters::add(&rt.counters.compressed_writebacks, n as u64);
        Counters::add(&rt.counters.page_outs, n as u64);
        Counters::add(&rt.counters.bytes_written, (n * rt.page_size) as u64);
        Counters::add(&rt.counters.write_batches, 1);
        n
    }
}

/// Appends an object. A new segment is paid for first ([`pay`]) and only
/// taken if that covers it: the pool never pushes DRAM past the budget.
/// `None`: no room.
fn append(
    rt: &Shared,
    tier: &CompressedTier,
    page: PageNo,
    seq: u32,
    body: Body<'_>,
    cap: u64,
) -> Option<u32> {
    let needs_segment = !tier.pool.head_fits(Pool::object_size(body.len()));
    let payment = match needs_segment {
        true => pay(rt, tier, tier.segment_pages(rt.page_size))?,
        false => Payment::default(),
    };
    match tier.pool.append(page, seq, body, cap) {
        Appended::At {
            handle,
            new_segments,
        } => {
            if needs_segment && new_segments == 0 {
                payment.refund(rt, tier);
            }
            Some(handle)
        }
        Appended::Full => {
            payment.refund(rt, tier);
            None
        }
    }
}

/// Budget pages paid for the tier's DRAM, and where they came from.
#[derive(Default)]
struct Payment {
    from_reserve: u64,
    from_budget: u64,
}

impl Payment {
    fn refund(self, rt: &Shared, tier: &CompressedTier) {
        tier.return_reserve(self.from_reserve);
        rt.budget.uncharge(self.from_budget);
    }
}

/// Pays for `pages` of the tier's DRAM: from the reserve of charges that
/// compressed pages handed over, then from the budget's headroom. `None`
/// (and nothing taken) if that does not cover it.
fn pay(rt: &Shared, tier: &CompressedTier, pages: u64) -> Option<Payment> {
    let from_reserve = tier.take_reserve(pages);
    if !rt.budget.try_charge_pages(pages - from_reserve) {
        tier.return_reserve(from_reserve);
        return None;
    }
    Some(Payment {
        from_reserve,
        from_budget: pages - from_reserve,
    })
}

/// Adds a page that compressed without a dictionary to the one being
/// gathered (the first, or a new one the encoder asked for), and
/// publishes it once full and paid for (a later page retries the
/// payment). A slot stays charged while compressions or objects use it.
fn gather_dictionary(rt: &Shared, tier: &CompressedTier, page: &[u8]) {
    if !tier.settings.dictionary {
        return;
    }
    if tier.active_dictionary().is_none() {
        tier.dictionary.start_gathering();
    }
    if tier.dictionary.gathering() {
        tier.dictionary.gather(page);
    }
    if tier.dictionary.awaits_publication() {
        let pages = tier.dictionary.pages_to_charge(rt.page_size);
        if pages == 0 || pay(rt, tier, pages).is_some() {
            tier.dictionary.publish();
        }
    }
}

/// Gives back the DRAM of dictionaries nothing uses any more.
fn release_unused_dictionaries(rt: &Shared, tier: &CompressedTier) {
    rt.budget
        .uncharge(tier.dictionary.release_unused(rt.page_size));
}

/// Returns empty segments and uncharges them. Returns how many.
fn reclaim(rt: &Shared, tier: &CompressedTier) -> u64 {
    let n = tier.pool.reclaim_empty();
    rt.budget.uncharge(n * tier.segment_pages(rt.page_size));
    n
}

/// Owns `page` if it is still compressed from compression `seq`.
fn own_compressed(rt: &Shared, tier: &CompressedTier, page: PageNo, seq: u32) -> Option<PageState> {
    loop {
        let s = rt.table.load(page);
        if s.kind() != Kind::Compressed {
            return None;
        }
        if !rt.table.transition(page, s, s.with_kind(Kind::Evicting)) {
            continue;
        }
        // SAFETY: the page is ours, so its object is live.
        if unsafe { tier.pool.object(rt.table.pool_handle(page)) }.seq != seq {
            // Compressed again since: a newer entry stands for it.
            rt.table.finish(page, s);
            return None;
        }
        return Some(s);
    }
}

enum Move {
    Moved,
    /// Dead, or busy: its page is being faulted in.
    Skipped,
    /// No room at the head.
    Full,
}

/// Moves the object at `handle` to the head, keeping its sequence number
/// (and so its place in the write-back order).
fn move_object(rt: &Shared, tier: &CompressedTier, handle: u32) -> Move {
    // SAFETY: the walk of a segment the evictor compacts: the header stays
    // readable, live or not (only the evictor returns segments).
    let page = unsafe { tier.pool.object(handle) }.page;
    if page as u64 >= rt.table.pages() {
        return Move::Skipped;
    }
    let s = rt.table.load(page);
    if s.kind() != Kind::Compressed || rt.table.pool_handle(page) != handle {
        return Move::Skipped;
    }
    if !rt.table.transition(page, s, s.with_kind(Kind::Evicting)) {
        return Move::Skipped;
    }
    if rt.table.pool_handle(page) != handle {
        rt.table.finish(page, s);
        return Move::Skipped;
    }
    // SAFETY: the page is ours, so its object is live.
    let object = unsafe { tier.pool.object(handle) };
    // Compaction may take one segment past the cap: it frees one for it.
    let cap = tier.pool.committed_segments() + 1;
    let Some(new) = append(rt, tier, page, object.seq, object.body, cap) else {
        rt.table.finish(page, s);
        return Move::Full;
    };
    rt.table.set_pool_handle(page, new);
    tier.pool.release(handle, object.size);
    rt.table.finish(page, s);
    Move::Moved
}
