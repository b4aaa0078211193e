//! A checksum for every page in the store, checked on every read back.
//!
//! The sum is crc32c over the page's identity (its page number and slot)
//! followed by its bytes, kept in DRAM beside the page table. It catches a
//! flipped bit, a write the device dropped (the slot still holds an older
//! page), and a write or read that went to the wrong place (another page's
//! bytes, or the right bytes at the wrong slot). A mismatch is handled as a
//! read error: tiermem never installs bytes it cannot vouch for.
//!
//! One sum per page suffices: a page has at most one slot copy at a time,
//! and only the page's owner (`Loading` or `Evicting`) writes or checks it.
//! A forked child inherits the sums with the rest of the runtime's memory.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::Result;
use crate::page_table::PageNo;
use crate::sys::mem::Mapping;

pub(crate) struct Checksums {
    /// One u32 per page, lazily committed: an arena costs what is stored.
    sums: Option<Mapping>,
    pages: u64,
}

impl Checksums {
    /// Sums for `pages` pages, or none at all when checksums are off.
    pub fn new(pages: u64, enabled: bool) -> Result<Checksums> {
        let sums = match enabled {
            true => Some(Mapping::reserve(
                pages as usize * 4,
                "reserving the page checksum table",
            )?),
            false => None,
        };
        Ok(Checksums { sums, pages })
    }

    pub fn enabled(&self) -> bool {
        self.sums.is_some()
    }

    /// DRAM the sums of `touched_pages` pages take.
    pub fn committed_bytes(&self, touched_pages: u64) -> u64 {
        match self.enabled() {
            true => touched_pages * 4,
            false => 0,
        }
    }

    /// Records the sum of `data`, about to be written to `slot` for `page`.
    #[inline]
    pub fn seal(&self, page: PageNo, slot: u64, data: &[u8]) {
        if let Some(word) = self.word(page) {
            word.store(sum(page, slot, data), Ordering::Relaxed);
        }
    }

    /// Whether `data`, just read from `slot`, is what was written there for
    /// `page`. Always true when checksums are off.
    #[inline]
    pub fn verify(&self, page: PageNo, slot: u64, data: &[u8]) -> bool {
        self.word(page)
            .is_none_or(|word| word.load(Ordering::Relaxed) == sum(page, slot, data))
    }

    fn word(&self, page: PageNo) -> Option<&AtomicU32> {
        let sums = self.sums.as_ref()?;
        assert!((page as u64) < self.pages);
        // SAFETY: the mapping holds `pages` zero-initialised u32s, 4-byte
        // aligned (page-aligned base), and lives as long as `self`;
        // AtomicU32 has the same layout as u32.
        Some(unsafe { &*(sums.as_ptr() as *const AtomicU32).add(page as usize) })
    }
}

/// crc32c (hardware-accelerated where the CPU has it) of the identity, then
/// the bytes.
fn sum(page: PageNo, slot: u64, data: &[u8]) -> u32 {
    let mut identity = [0u8; 12];
    identity[..4].copy_from_slice(&page.to_le_bytes());
    identity[4..].copy_from_slice(&slot.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&identity), data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_page_verifies_and_every_kind_of_damage_is_caught() {
        let sums = Checksums::new(16, true).unwrap();
        let page: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        sums.seal(3, 40, &page);
        assert!(sums.verify(3, 40, &page));
        let mut flipped = page.clone();
        flipped[1000] ^= 0x10;
        assert!(!sums.verify(3, 40, &flipped), "a flipped bit");
        assert!(
            !sums.verify(3, 41, &page),
            "the right bytes from the wrong slot"
        );
        sums.seal(4, 41, &flipped);
        assert!(!sums.verify(3, 40, &flipped), "another page's bytes");
        let older: Vec<u8> = page.iter().map(|b| b.wrapping_add(1)).collect();
        assert!(
            !sums.verify(3, 40, &older),
            "a dropped write left older bytes"
        );
    }

    #[test]
    fn without_checksums_everything_verifies() {
        let sums = Checksums::new(16, false).unwrap();
        sums.seal(1, 1, &[1; 4096]);
        assert!(sums.verify(1, 2, &[2; 4096]));
        assert!(!sums.enabled());
    }
}
