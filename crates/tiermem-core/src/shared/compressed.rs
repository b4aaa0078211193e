//! The compressed tier as the runtime's threads reach it: a fault that
//! finds its page compressed and the evictor writing the pool back both
//! decompress an object, and whoever takes a page out of `Compressed`
//! frees its object.

use super::Shared;
use crate::page_table::PageNo;

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
        let object = unsafe { tier.pool.object(handle) };
        if let crate::compress::pool::Body::Lz4WithDictionary(_, slot) = object.body {
            tier.dictionary.object_freed(slot);
        }
        tier.pool.release(handle, object.size);
    }

    /// Decompresses the object of `page`, which the caller owns, into the
    /// page-sized runtime buffer `buf`; returns the object's sequence
    /// number (its place in the pool's order).
    pub(crate) fn decompress(&self, page: PageNo, buf: *mut u8) -> u32 {
        let tier = self.compressed_tier();
        // SAFETY: the frame is ours and page-sized.
        let out = unsafe { std::slice::from_raw_parts_mut(buf, self.page_size) };
        // SAFETY: the page is ours (`Loading`), so its object stays live.
        let object = unsafe { tier.pool.object(self.table.pool_handle(page)) };
        if object.page != page {
            self.fatal(&format!(
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
                    self.fatal(&format!(
                        "the compressed copy of page {page} does not decompress to a page"
                    ));
                }
            }
            crate::compress::pool::Body::Lz4WithDictionary(bytes, slot) => {
                if !tier.dictionary.decode(slot, bytes, out) {
                    self.fatal(&format!(
                        "the compressed copy of page {page} does not decompress to a page \
                         with the dictionary in slot {slot}"
                    ));
                }
            }
        }
        object.seq
    }
}
