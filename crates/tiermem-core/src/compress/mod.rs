//! The compressed tier: evicted pages wait in DRAM, compressed, before
//! they reach the store.
//!
//! A page that leaves probation is compressed into the [`pool`]: one word
//! if it is same-filled, LZ4 if that saves a quarter or more
//! ([`codec`]). A fault on it decompresses it in microseconds instead of
//! reading the store. The pool takes at most a share of the DRAM budget
//! (`TIERMEM_COMPRESS_SHARE`), and its segments are charged against the
//! budget like resident pages. When it is full, the pages compressed
//! longest ago leave first, in batches: a clean one (its slot still valid)
//! is just dropped, a dirty one written to the store. The order is the
//! order of compression, not the order of arrival in the store, so the
//! store gets the coldest pages; zram, by contrast, writes back whatever
//! arrives once it is full, and keeps the old pages in DRAM.
//!
//! The evictor does all compression, write-back and compaction; faults
//! only read and free objects (see `fault::compressed`).

pub(crate) mod codec;
pub(crate) mod dictionary;
pub(crate) mod lz4;
pub(crate) mod pool;
pub mod settings;
pub(crate) mod split;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::Result;
use crate::page_table::{Kind, PageNo, PageTable};
pub use settings::{Codec, CompressSettings};

use dictionary::Dictionary;
use pool::Pool;
use split::Split;

pub(crate) struct CompressedTier {
    pub settings: CompressSettings,
    pub pool: Pool,
    /// Gathered from pages that compress, unless
    /// `TIERMEM_COMPRESS_DICT=off`; charged against the pool's share.
    pub dictionary: Dictionary,
    /// The pool's share of the budget, set or adapted.
    pub split: Split,
    /// Compressed pages with the sequence number of their compression,
    /// oldest first: the write-back order. An entry whose page has since
    /// left the pool (or was compressed again) is stale and skipped.
    order: Mutex<VecDeque<(PageNo, u32)>>,
    next_seq: AtomicU32,
    /// Budget pages kept charged for the pool's next segment: a page that
    /// leaves DRAM for the pool hands its charge over here, up to a
    /// segment's worth, instead of back to the budget. Under load the
    /// budget has no free segment's worth of pages (faults take each page
    /// the evictor frees), so without it the pool could not grow without
    /// going past the limit.
    reserve_pages: AtomicU64,
}

impl CompressedTier {
    /// The tier for a runtime of `budget_bytes`, or `None` when off. The
    /// pool reserves room for the whole physical memory (the budget can
    /// grow at run time), which costs address space only.
    pub fn new(settings: CompressSettings, page_size: usize) -> Result<Option<CompressedTier>> {
        if !settings.is_on() {
            return Ok(None);
        }
        let ram = crate::sys::physical_ram_bytes();
        Ok(Some(CompressedTier {
            settings,
            pool: Pool::new(ram, page_size)?,
            dictionary: Dictionary::new(page_size)?,
            split: Split::new(
                settings.share_percent,
                settings.adapt_share,
                settings::MAX_SHARE_PERCENT,
            ),
            order: Mutex::new(VecDeque::new()),
            next_seq: AtomicU32::new(0),
            reserve_pages: AtomicU64::new(0),
        }))
    }

    /// Segments the pool may commit under a budget of `limit_pages`: its
    /// share, less the dictionary's DRAM.
    pub fn cap_segments(&self, limit_pages: u64, page_size: usize) -> u64 {
        let share = limit_pages * page_size as u64 * self.split.percent() as u64 / 100;
        let share = share.saturating_sub(self.dictionary.charged_bytes(page_size));
        share / self.pool.segment_bytes() as u64
    }

    /// The DRAM the tier holds: the pool's segments and the dictionary.
    pub fn dram_bytes(&self, page_size: usize) -> u64 {
        self.pool.committed_bytes() + self.dictionary.charged_bytes(page_size)
    }

    /// The dictionary compressions use, once one is published.
    pub fn active_dictionary(&self) -> Option<dictionary::Active<'_>> {
        self.dictionary.active()
    }

    /// Budget pages one segment is charged as.
    pub fn segment_pages(&self, page_size: usize) -> u64 {
        (self.pool.segment_bytes() / page_size) as u64
    }

    /// Keeps one page's charge for the next segment if the reserve is not
    /// full; false if the caller must give it back to the budget.
    pub fn keep_charge(&self, segment_pages: u64) -> bool {
        self.reserve_pages
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                (r < segment_pages).then_some(r + 1)
            })
            .is_ok()
    }

    /// Takes up to `pages` of the reserve; returns how many it took.
    pub fn take_reserve(&self, pages: u64) -> u64 {
        let taken = self
            .reserve_pages
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                Some(r - r.min(pages))
            })
            .unwrap_or(0);
        taken.min(pages)
    }

    /// Puts back pages taken from the reserve and not used.
    pub fn return_reserve(&self, pages: u64) {
        self.reserve_pages.fetch_add(pages, Ordering::AcqRel);
    }

    pub fn next_seq(&self) -> u32 {
        self.next_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// The sequence number the next compression gets.
    pub fn upcoming_seq(&self) -> u32 {
        self.next_seq.load(Ordering::Relaxed)
    }

    fn order(&self) -> std::sync::MutexGuard<'_, VecDeque<(PageNo, u32)>> {
        self.order.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a page just compressed. Stale entries are pruned once they
    /// outnumber live ones, so the queue stays proportional to the pool.
    pub fn push(&self, table: &PageTable, page: PageNo, seq: u32) {
        let mut order = self.order();
        order.push_back((page, seq));
        if order.len() as u64 > 2 * self.pool.objects() + 4096 {
            order.retain(|&(p, s)| self.is_current(table, p, s));
        }
    }

    /// Puts back entries taken by [`Self::pop_oldest`] and not written.
    pub fn push_front(&self, entries: impl DoubleEndedIterator<Item = (PageNo, u32)>) {
        let mut order = self.order();
        for e in entries.rev() {
            order.push_front(e);
        }
    }

    pub fn pop_oldest(&self) -> Option<(PageNo, u32)> {
        let oldest = self.order().pop_front();
        if let Some((_, seq)) = oldest {
            self.split.note_oldest(seq);
        }
        oldest
    }

    /// Whether `page` is still compressed from compression `seq`. A racy
    /// look, for pruning: owners check again.
    fn is_current(&self, table: &PageTable, page: PageNo, seq: u32) -> bool {
        table.load(page).kind() == Kind::Compressed
            // SAFETY: a compressed page's handle names a live object; the
            // evictor (the only one that frees segments) holds `order`.
            && unsafe { self.pool.object(table.pool_handle(page)) }.seq == seq
    }
}
