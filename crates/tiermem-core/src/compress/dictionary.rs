//! The compressed tier's dictionary: the first 64 KiB of pages that
//! compressed, which every later compression may copy from.
//!
//! LZ4 finds repeats only inside what it is given, and a lone 4 KiB page
//! holds few: a word or a record layout seen once in the page is stored
//! literally. A program's pages share most of their vocabulary (field
//! names, common words, pointer patterns), so earlier pages make a good
//! dictionary: on this project's text pages, 64 KiB of them take LZ4HC's
//! mid level from 2.6x to 4.3x at the same compression time
//! (`docs/notebook/2026-11-27-lz4-dictionary.md`). zram offers the same
//! with a dictionary its operator trains beforehand; tiermem gathers it
//! from the program's own pages, as nothing is known of them in advance.
//!
//! The evictor gathers it (the only writer), then publishes it once the
//! budget has paid for it; from then on it never changes, so a fault reads
//! it without a lock. Objects compressed before that carry no dictionary
//! and decode as before.
//!
//! liblz4 decodes a block fastest when its dictionary lies just before
//! the output, as the data before it in a stream does (1.6 µs per text
//! page here, against 2.8 µs with the dictionary elsewhere). So decoding
//! borrows a *window*: a copy of the dictionary followed by a page of
//! room, decodes into it, and copies the page out. A few windows serve the
//! threads that decode at once (handlers and the evictor); when all are
//! taken, a decode reads the dictionary where it is. Windows are scratch
//! space, as the frames are, outside the budget; the dictionary itself is
//! charged once.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use super::lz4::{decompress_with_dictionary, MAX_DICTIONARY};
use crate::error::Result;
use crate::sys::mem::Mapping;

/// Decoding windows: more than the threads that decode at once with the
/// default settings (two handlers and the evictor).
const WINDOWS: usize = 8;

pub struct Dictionary {
    memory: Mapping,
    /// Bytes gathered so far; written by the evictor only.
    gathered: AtomicUsize,
    /// Set once, after the last byte is written and paid for.
    published: AtomicBool,
    /// `WINDOWS` windows of `window_bytes`, committed on first use; none
    /// for pages larger than the dictionary.
    windows: Option<Mapping>,
    window_bytes: usize,
    /// Bit i: window i is taken.
    taken: AtomicU32,
    /// Bit i: window i holds its copy of the dictionary (set by the
    /// thread that holds it, which alone writes the window).
    primed: AtomicU32,
}

impl Dictionary {
    /// A dictionary for pages of `page_size`, not yet gathered.
    pub fn new(page_size: usize) -> Result<Dictionary> {
        let window_bytes = MAX_DICTIONARY + page_size;
        let windows = match page_size <= MAX_DICTIONARY {
            true => Some(Mapping::reserve(
                WINDOWS * window_bytes,
                "reserving the dictionary's decoding windows",
            )?),
            false => None,
        };
        Ok(Dictionary {
            memory: Mapping::reserve(MAX_DICTIONARY, "reserving the compression dictionary")?,
            gathered: AtomicUsize::new(0),
            published: AtomicBool::new(false),
            windows,
            window_bytes,
            taken: AtomicU32::new(0),
            primed: AtomicU32::new(0),
        })
    }

    /// Decodes `block`, compressed with the published dictionary, into
    /// `page`; false if there is no dictionary or a page does not come out.
    pub fn decode(&self, block: &[u8], page: &mut [u8]) -> bool {
        let Some(dictionary) = self.bytes() else {
            return false;
        };
        let Some(window) = self.take_window(page.len()) else {
            return decompress_with_dictionary(block, page, dictionary) == Some(page.len());
        };
        let base = self.window_base(window);
        if self.primed.load(Ordering::Relaxed) & (1 << window) == 0 {
            // SAFETY: the window is ours (taken) and holds
            // MAX_DICTIONARY + page.len() bytes from `base`.
            unsafe { std::ptr::copy_nonoverlapping(dictionary.as_ptr(), base, MAX_DICTIONARY) };
            self.primed.fetch_or(1 << window, Ordering::Relaxed);
        }
        // SAFETY: as above; the dictionary copy and the room after it do
        // not overlap, and no one else touches the window until we give
        // it back.
        let (prefix, room) = unsafe {
            (
                std::slice::from_raw_parts(base, MAX_DICTIONARY),
                std::slice::from_raw_parts_mut(base.add(MAX_DICTIONARY), page.len()),
            )
        };
        let ok = decompress_with_dictionary(block, room, prefix) == Some(page.len());
        if ok {
            page.copy_from_slice(room);
        }
        self.taken.fetch_and(!(1 << window), Ordering::Release);
        ok
    }

    /// Takes a free window for a page of `len` bytes, if one is free.
    fn take_window(&self, len: usize) -> Option<usize> {
        if self.windows.is_none() || len + MAX_DICTIONARY > self.window_bytes {
            return None;
        }
        let mut taken = self.taken.load(Ordering::Relaxed);
        loop {
            let free = (!taken).trailing_zeros() as usize;
            if free >= WINDOWS {
                return None;
            }
            match self.taken.compare_exchange_weak(
                taken,
                taken | 1 << free,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(free),
                Err(now) => taken = now,
            }
        }
    }

    fn window_base(&self, window: usize) -> *mut u8 {
        let windows = self
            .windows
            .as_ref()
            .map_or(std::ptr::null_mut(), |m| m.as_ptr());
        windows.wrapping_add(window * self.window_bytes)
    }

    /// The dictionary, once published.
    pub fn bytes(&self) -> Option<&[u8]> {
        if !self.published.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: published, so all MAX_DICTIONARY bytes were written
        // before the Release store that the load above acquired, and
        // nothing writes them again.
        Some(unsafe { std::slice::from_raw_parts(self.memory.as_ptr(), MAX_DICTIONARY) })
    }

    /// Whether the dictionary still wants pages.
    pub fn gathering(&self) -> bool {
        self.gathered.load(Ordering::Relaxed) < MAX_DICTIONARY
    }

    /// Copies the start of `page` in, as much as still fits. Evictor only.
    /// Returns whether the dictionary is now full (ready to publish).
    pub fn gather(&self, page: &[u8]) -> bool {
        let at = self.gathered.load(Ordering::Relaxed);
        let n = page.len().min(MAX_DICTIONARY - at);
        // SAFETY: `at + n <= MAX_DICTIONARY`, inside the mapping; only the
        // evictor writes, and readers read nothing before publication.
        unsafe {
            std::ptr::copy_nonoverlapping(page.as_ptr(), self.memory.as_ptr().add(at), n);
        }
        self.gathered.store(at + n, Ordering::Relaxed);
        at + n == MAX_DICTIONARY
    }

    /// Whether it is full and waits for the budget to pay for it.
    pub fn awaits_publication(&self) -> bool {
        !self.gathering() && !self.published.load(Ordering::Relaxed)
    }

    /// Publishes a full dictionary, which the caller has charged for
    /// ([`Self::budget_pages`]).
    pub fn publish(&self) {
        debug_assert!(!self.gathering(), "publishing a partial dictionary");
        self.published.store(true, Ordering::Release);
    }

    /// Budget pages the dictionary is charged as.
    pub fn budget_pages(page_size: usize) -> u64 {
        MAX_DICTIONARY.div_ceil(page_size) as u64
    }

    /// Budget bytes it holds now: none until published.
    pub fn charged_bytes(&self, page_size: usize) -> u64 {
        match self.published.load(Ordering::Acquire) {
            true => Self::budget_pages(page_size) * page_size as u64,
            false => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_published_only_once_full_and_keeps_the_first_bytes() {
        let d = Dictionary::new(4096).unwrap();
        assert!(d.gathering() && d.bytes().is_none());
        let pages = MAX_DICTIONARY / 4096;
        for i in 0..pages {
            assert!(d.bytes().is_none() && !d.awaits_publication());
            assert_eq!(d.gather(&vec![i as u8; 4096]), i + 1 == pages);
        }
        assert!(!d.gathering() && d.awaits_publication());
        assert_eq!(d.charged_bytes(4096), 0);
        d.publish();
        let bytes = d.bytes().expect("published");
        assert_eq!(bytes.len(), MAX_DICTIONARY);
        assert!(bytes
            .chunks(4096)
            .enumerate()
            .all(|(i, c)| c.iter().all(|&b| b == i as u8)));
        assert_eq!(d.charged_bytes(4096), MAX_DICTIONARY as u64);
        assert!(!d.awaits_publication());
    }

    #[test]
    fn a_page_larger_than_the_dictionary_fills_it_at_once() {
        let d = Dictionary::new(2 * MAX_DICTIONARY).unwrap();
        assert!(d.gather(&vec![7u8; 2 * MAX_DICTIONARY]));
        assert_eq!(Dictionary::budget_pages(2 << 20), 1);
    }

    /// Text made of a few words: what a dictionary of the same words helps.
    fn text(seed: u64, len: usize) -> Vec<u8> {
        let words = [
            "memory ", "tier ", "page ", "the ", "of ", "cache ", "fault ", "a ",
        ];
        let (mut out, mut x) = (Vec::with_capacity(len), seed);
        while out.len() < len {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            out.extend_from_slice(words[(x >> 61) as usize].as_bytes());
        }
        out.truncate(len);
        out
    }

    #[test]
    fn blocks_decode_in_a_window_and_without_one() {
        let d = Dictionary::new(4096).unwrap();
        let mut page = vec![0u8; 4096];
        assert!(
            !d.decode(&[0u8; 8], &mut page),
            "nothing decodes before publication"
        );
        for i in 0..16 {
            d.gather(&text(i, 4096));
        }
        d.publish();
        let mut c = super::super::lz4::Compressor::new(super::super::lz4::Level::Mid);
        c.load_dictionary(d.bytes().unwrap());
        let original = text(99, 4096);
        let mut block = vec![0u8; 8192];
        let n = c.compress(&original, &mut block, true).unwrap();
        // Every window taken but one, then all: both ways must decode.
        for taken in [(1u32 << (WINDOWS - 1)) - 1, (1u32 << WINDOWS) - 1] {
            d.taken.store(taken, Ordering::Relaxed);
            for _ in 0..2 {
                page.fill(0);
                assert!(d.decode(&block[..n], &mut page));
                assert_eq!(page, original);
            }
            assert_eq!(
                d.taken.load(Ordering::Relaxed),
                taken,
                "the window went back"
            );
        }
        assert!(!d.decode(&block[..n / 2], &mut page), "a cut block fails");
    }
}
