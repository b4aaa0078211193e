//! The compressed tier's dictionary: 64 KiB of pages that compressed,
//! which every later compression may copy from.
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
//! The evictor (the only writer) gathers the first 16 pages that compress
//! into a slot, then publishes it once the budget has paid for it. A
//! published slot never changes while objects compressed with it live, so
//! a fault reads it without a lock. When the encoder finds that the
//! dictionary no longer pays (the data drifted, or the first pages were
//! not like the rest), a new one is gathered into the other slot from the
//! pages leaving now, and replaces it for new compressions; the old slot
//! is given back once its last object is gone. Each object names its slot.
//!
//! liblz4 decodes a block fastest when its dictionary lies just before
//! the output, as the data before it in a stream does (1.6 µs per text
//! page here, against 2.8 µs with the dictionary elsewhere). So decoding
//! borrows a *window*: a copy of the dictionary followed by a page of
//! room, decodes into it, and copies the page out. A few windows serve the
//! threads that decode at once (handlers and the evictor); when all are
//! taken, a decode reads the dictionary where it is. Windows are scratch
//! space, as the frames are, outside the budget; each slot in use is
//! charged.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::lz4::{decompress_with_dictionary, MAX_DICTIONARY};
use crate::error::Result;
use crate::sys::mem::{zap, Mapping};

/// Dictionaries that may be in use at once: the one compressions use and
/// the one it replaced, until the last page compressed with that is gone.
pub const SLOTS: usize = 2;
/// Decoding windows: more than the threads that decode at once with the
/// default settings (two handlers and the evictor).
const WINDOWS: usize = 8;
/// No slot.
const NONE: usize = usize::MAX;

/// The dictionary compressions use now.
#[derive(Clone, Copy)]
pub struct Active<'a> {
    pub slot: u8,
    /// Unique to this publication, so that a compressor holding an older
    /// dictionary of the same slot sees the change.
    pub generation: u32,
    pub bytes: &'a [u8],
}

struct Slot {
    memory: Mapping,
    /// Pool objects compressed with this slot's dictionary.
    live: AtomicU64,
    /// Of the slot's last publication; 0 before the first.
    generation: AtomicU32,
}

pub struct Dictionary {
    slots: [Slot; SLOTS],
    /// The slot compressions use, or NONE.
    active: AtomicUsize,
    /// The slot being gathered into, or NONE. Evictor only.
    gathering: AtomicUsize,
    /// Bytes gathered into it so far. Evictor only.
    gathered: AtomicUsize,
    /// Bit i: slot i is charged against the budget. Evictor only.
    charged: AtomicU32,
    /// The last generation handed out.
    generations: AtomicU32,
    /// `WINDOWS` windows of `window_bytes`, committed on first use; none
    /// for pages larger than the dictionary.
    windows: Option<Mapping>,
    window_bytes: usize,
    /// Bit i: window i is taken.
    taken: AtomicU32,
    /// The generation whose copy window i holds (set by the thread that
    /// holds the window, which alone writes it).
    primed: [AtomicU32; WINDOWS],
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
        let slot = || -> Result<Slot> {
            Ok(Slot {
                memory: Mapping::reserve(MAX_DICTIONARY, "reserving a compression dictionary")?,
                live: AtomicU64::new(0),
                generation: AtomicU32::new(0),
            })
        };
        Ok(Dictionary {
            slots: [slot()?, slot()?],
            active: AtomicUsize::new(NONE),
            gathering: AtomicUsize::new(NONE),
            gathered: AtomicUsize::new(0),
            charged: AtomicU32::new(0),
            generations: AtomicU32::new(0),
            windows,
            window_bytes,
            taken: AtomicU32::new(0),
            primed: std::array::from_fn(|_| AtomicU32::new(0)),
        })
    }

    /// The dictionary compressions use, once one is published.
    pub fn active(&self) -> Option<Active<'_>> {
        let slot = self.active.load(Ordering::Acquire);
        let s = self.slots.get(slot)?;
        Some(Active {
            slot: slot as u8,
            generation: s.generation.load(Ordering::Relaxed),
            bytes: self.bytes_of(slot),
        })
    }

    /// The published bytes of `slot`.
    fn bytes_of(&self, slot: usize) -> &[u8] {
        // SAFETY: the caller read `slot` from `active` (Acquire) or from an
        // object compressed with it, both published after all
        // MAX_DICTIONARY bytes were written; they do not change while the
        // slot is active or has live objects.
        unsafe { std::slice::from_raw_parts(self.slots[slot].memory.as_ptr(), MAX_DICTIONARY) }
    }

    /// Counts an object compressed with `slot` into the pool.
    pub fn object_stored(&self, slot: u8) {
        self.slots[slot as usize]
            .live
            .fetch_add(1, Ordering::AcqRel);
    }

    /// Counts an object compressed with `slot` freed from the pool.
    pub fn object_freed(&self, slot: u8) {
        self.slots[slot as usize]
            .live
            .fetch_sub(1, Ordering::AcqRel);
    }

    /// Starts gathering a dictionary into a slot that is neither active nor
    /// used by any object, unless one is being gathered. False if no slot
    /// is free. Evictor only.
    pub fn start_gathering(&self) -> bool {
        if self.gathering.load(Ordering::Relaxed) != NONE {
            return true;
        }
        let active = self.active.load(Ordering::Relaxed);
        let free =
            (0..SLOTS).find(|&i| i != active && self.slots[i].live.load(Ordering::Acquire) == 0);
        let Some(slot) = free else {
            return false;
        };
        self.gathered.store(0, Ordering::Relaxed);
        self.gathering.store(slot, Ordering::Relaxed);
        true
    }

    /// Whether a dictionary is being gathered and wants pages.
    pub fn gathering(&self) -> bool {
        self.gathering.load(Ordering::Relaxed) != NONE
            && self.gathered.load(Ordering::Relaxed) < MAX_DICTIONARY
    }

    /// Copies the start of `page` into the slot being gathered, as much as
    /// still fits. Evictor only. Returns whether that slot is now full.
    pub fn gather(&self, page: &[u8]) -> bool {
        let slot = self.gathering.load(Ordering::Relaxed);
        let Some(s) = self.slots.get(slot) else {
            return false;
        };
        let at = self.gathered.load(Ordering::Relaxed);
        let n = page.len().min(MAX_DICTIONARY - at);
        // SAFETY: `at + n <= MAX_DICTIONARY`, inside the slot; only the
        // evictor writes, and the slot is neither active nor used by any
        // object, so no one reads it.
        unsafe {
            std::ptr::copy_nonoverlapping(page.as_ptr(), s.memory.as_ptr().add(at), n);
        }
        self.gathered.store(at + n, Ordering::Relaxed);
        at + n == MAX_DICTIONARY
    }

    /// Budget pages the slot waiting for publication still needs charged
    /// (0 if it was charged before, or none waits).
    pub fn pages_to_charge(&self, page_size: usize) -> u64 {
        match self.waiting_slot() {
            Some(slot) if self.charged.load(Ordering::Relaxed) & (1 << slot) == 0 => {
                Self::budget_pages(page_size)
            }
            _ => 0,
        }
    }

    /// The slot that is full and waits for publication.
    fn waiting_slot(&self) -> Option<usize> {
        let slot = self.gathering.load(Ordering::Relaxed);
        (slot != NONE && self.gathered.load(Ordering::Relaxed) == MAX_DICTIONARY).then_some(slot)
    }

    /// Whether a full dictionary waits to be paid for and published.
    pub fn awaits_publication(&self) -> bool {
        self.waiting_slot().is_some()
    }

    /// Makes the full slot the one compressions use; the caller has paid
    /// [`Self::pages_to_charge`]. Evictor only.
    pub fn publish(&self) {
        let Some(slot) = self.waiting_slot() else {
            return;
        };
        self.charged.fetch_or(1 << slot, Ordering::Relaxed);
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        self.slots[slot]
            .generation
            .store(generation, Ordering::Relaxed);
        self.gathering.store(NONE, Ordering::Relaxed);
        self.active.store(slot, Ordering::Release);
    }

    /// Gives back the DRAM of charged slots that nothing uses any more
    /// (not active, not gathered into, no object); returns the budget
    /// pages to uncharge. Evictor only.
    pub fn release_unused(&self, page_size: usize) -> u64 {
        let mut pages = 0;
        for (i, s) in self.slots.iter().enumerate() {
            let charged = self.charged.load(Ordering::Relaxed) & (1 << i) != 0;
            let in_use = i == self.active.load(Ordering::Relaxed)
                || i == self.gathering.load(Ordering::Relaxed)
                || s.live.load(Ordering::Acquire) > 0;
            if charged && !in_use {
                // Failing to give DRAM back loses nothing: the slot is
                // overwritten when it is gathered into again.
                let _ = zap(s.memory.addr(), MAX_DICTIONARY);
                self.charged.fetch_and(!(1 << i), Ordering::Relaxed);
                pages += Self::budget_pages(page_size);
            }
        }
        pages
    }

    /// Dictionaries published so far.
    pub fn published(&self) -> u64 {
        self.generations.load(Ordering::Relaxed) as u64
    }

    /// Budget pages one dictionary is charged as.
    pub fn budget_pages(page_size: usize) -> u64 {
        MAX_DICTIONARY.div_ceil(page_size) as u64
    }

    /// Budget bytes the charged slots hold.
    pub fn charged_bytes(&self, page_size: usize) -> u64 {
        let slots = self.charged.load(Ordering::Relaxed).count_ones() as u64;
        slots * Self::budget_pages(page_size) * page_size as u64
    }

    /// Decodes `block`, compressed with the dictionary of `slot`, into
    /// `page`; false if a page does not come out. The caller holds an
    /// object compressed with that dictionary, which keeps it in place.
    pub fn decode(&self, slot: u8, block: &[u8], page: &mut [u8]) -> bool {
        let slot = slot as usize;
        let Some(s) = self.slots.get(slot) else {
            return false;
        };
        let dictionary = self.bytes_of(slot);
        let Some(window) = self.take_window(page.len()) else {
            return decompress_with_dictionary(block, page, dictionary) == Some(page.len());
        };
        let base = self.window_base(window);
        let generation = s.generation.load(Ordering::Acquire);
        if self.primed[window].load(Ordering::Relaxed) != generation {
            // SAFETY: the window is ours (taken) and holds
            // MAX_DICTIONARY + page.len() bytes from `base`.
            unsafe { std::ptr::copy_nonoverlapping(dictionary.as_ptr(), base, MAX_DICTIONARY) };
            self.primed[window].store(generation, Ordering::Relaxed);
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
}

#[cfg(test)]
mod tests {
    use super::super::lz4::{Compressor, Level};
    use super::*;

    /// Text made of a few words: what a dictionary of the same words helps.
    fn text(seed: u64, len: usize, words: &[&str]) -> Vec<u8> {
        let (mut out, mut x) = (Vec::with_capacity(len), seed);
        while out.len() < len {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            out.extend_from_slice(words[(x >> 61) as usize % words.len()].as_bytes());
        }
        out.truncate(len);
        out
    }

    const WORDS: [&str; 8] = [
        "memory ", "tier ", "page ", "the ", "of ", "cache ", "fault ", "a ",
    ];
    const OTHER: [&str; 8] = [
        "zebra ", "quilt ", "oxen ", "jumps ", "vex ", "glyph ", "wharf ", "kiwi ",
    ];

    fn gather_and_publish(d: &Dictionary, words: &[&str]) {
        assert!(d.start_gathering());
        for i in 0..MAX_DICTIONARY / 4096 {
            assert!(d.active().is_none() || d.gathering());
            assert_eq!(
                d.gather(&text(i as u64, 4096, words)),
                i + 1 == MAX_DICTIONARY / 4096
            );
        }
        assert!(d.awaits_publication() && !d.gathering());
        d.publish();
        assert!(!d.awaits_publication());
    }

    fn compress(d: &Dictionary, page: &[u8]) -> (u8, Vec<u8>) {
        let active = d.active().expect("published");
        let mut c = Compressor::new(Level::Mid);
        c.load_dictionary(active.bytes);
        let mut block = vec![0u8; 8192];
        let n = c.compress(page, &mut block, true).expect("fits");
        block.truncate(n);
        (active.slot, block)
    }

    #[test]
    fn a_slot_is_published_full_and_charged_once() {
        let d = Dictionary::new(4096).unwrap();
        assert!(d.active().is_none() && !d.gathering());
        assert!(d.start_gathering() && d.gathering());
        assert_eq!(d.pages_to_charge(4096), 0, "nothing waits yet");
        for i in 0..MAX_DICTIONARY / 4096 {
            d.gather(&vec![i as u8; 4096]);
        }
        assert_eq!(d.pages_to_charge(4096), 16);
        d.publish();
        let active = d.active().expect("published");
        assert_eq!((active.slot, active.generation), (0, 1));
        assert!(active
            .bytes
            .chunks(4096)
            .enumerate()
            .all(|(i, c)| c.iter().all(|&b| b == i as u8)));
        assert_eq!(d.charged_bytes(4096), MAX_DICTIONARY as u64);
        assert_eq!(d.release_unused(4096), 0, "the active slot stays");
    }

    #[test]
    fn a_page_larger_than_the_dictionary_fills_it_at_once() {
        let d = Dictionary::new(2 * MAX_DICTIONARY).unwrap();
        assert!(d.start_gathering());
        assert!(d.gather(&vec![7u8; 2 * MAX_DICTIONARY]));
        assert_eq!(Dictionary::budget_pages(2 << 20), 1);
    }

    #[test]
    fn a_new_dictionary_replaces_the_old_which_stays_until_its_last_object_goes() {
        let d = Dictionary::new(4096).unwrap();
        gather_and_publish(&d, &WORDS);
        let old_page = text(1000, 4096, &WORDS);
        let (old_slot, old_block) = compress(&d, &old_page);
        d.object_stored(old_slot);
        gather_and_publish(&d, &OTHER);
        let active = d.active().unwrap();
        assert_ne!(active.slot, old_slot);
        assert_eq!(active.generation, 2);
        assert_eq!(d.charged_bytes(4096), 2 * MAX_DICTIONARY as u64);
        assert!(
            !d.start_gathering(),
            "no slot is free while the old one has an object"
        );
        let mut page = vec![0u8; 4096];
        assert!(d.decode(old_slot, &old_block, &mut page));
        assert_eq!(
            page, old_page,
            "the old dictionary still decodes its objects"
        );
        let new_page = text(2000, 4096, &OTHER);
        let (new_slot, new_block) = compress(&d, &new_page);
        assert!(d.decode(new_slot, &new_block, &mut page));
        assert_eq!(page, new_page);
        assert_eq!(
            d.release_unused(4096),
            0,
            "an object still uses the old slot"
        );
        d.object_freed(old_slot);
        assert_eq!(d.release_unused(4096), 16);
        assert_eq!(d.charged_bytes(4096), MAX_DICTIONARY as u64);
        assert!(d.start_gathering(), "the old slot is free again");
    }

    #[test]
    fn blocks_decode_in_a_window_and_without_one() {
        let d = Dictionary::new(4096).unwrap();
        gather_and_publish(&d, &WORDS);
        let original = text(99, 4096, &WORDS);
        let (slot, block) = compress(&d, &original);
        let mut page = vec![0u8; 4096];
        // Every window taken but one, then all: both ways must decode.
        for taken in [(1u32 << (WINDOWS - 1)) - 1, (1u32 << WINDOWS) - 1] {
            d.taken.store(taken, Ordering::Relaxed);
            for _ in 0..2 {
                page.fill(0);
                assert!(d.decode(slot, &block, &mut page));
                assert_eq!(page, original);
            }
            assert_eq!(
                d.taken.load(Ordering::Relaxed),
                taken,
                "the window went back"
            );
        }
        d.taken.store(0, Ordering::Relaxed);
        assert!(
            !d.decode(slot, &block[..block.len() / 2], &mut page),
            "a cut block fails"
        );
    }
}
