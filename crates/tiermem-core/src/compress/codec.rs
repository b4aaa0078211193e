//! What an evicted page becomes in the pool: one word if every word of it
//! is the same, LZ4 if that saves at least a quarter, nothing otherwise.

use super::dictionary::Active;
use super::lz4::{self, Compressor, Level};
use super::settings::Codec;

/// A page kept as less than a quarter saved costs a pool object and a
/// decompression on every hit for little DRAM: such pages go to the store
/// (as zswap's rejections of poorly compressing pages).
pub fn worth_keeping(compressed: usize, page_size: usize) -> bool {
    compressed <= page_size * 3 / 4
}

/// The page's content as the pool stores it.
pub enum Encoded<'a> {
    /// Every word of the page is this one (zero pages never get here: the
    /// evictor drops them to `Zero`).
    SameFilled(u64),
    /// LZ4 block bytes.
    Lz4(&'a [u8]),
    /// LZ4 block bytes that decode only with the dictionary in this slot.
    Lz4WithDictionary(&'a [u8], u8),
    /// Saves less than a quarter: to the store.
    Incompressible,
}

/// Every this many pages compressed while a dictionary is loaded, one is
/// compressed both ways, to see whether the dictionary still pays.
const CHECK_EVERY: u32 = 32;
/// Checks that make one verdict.
const CHECKS_PER_VERDICT: u32 = 64;
/// The dictionary is used while it saves at least this share of the bytes
/// that pages compress to alone, in percent. With a dictionary, LZ4HC's
/// mid level searches 64 KiB more history: on real text (man pages, Perl
/// sources) that took 1.6–1.9x the time for 14–23% smaller pages, and on
/// program binaries and a Python heap 2.1x and 1.5x the time for 2–3%. So
/// data whose pages the dictionary barely helps is compressed alone.
const MIN_SAVING_PERCENT: u64 = 8;

/// Whether the dictionary pays on the data at hand, from pages sampled
/// both ways.
#[derive(Default)]
struct DictionaryVerdict {
    pays: bool,
    pages: u32,
    checks: u32,
    bytes_with: u64,
    bytes_alone: u64,
    /// Verdicts in a row that found the dictionary not paying.
    failures: u32,
    /// A failing verdict asks for a new dictionary after 1, 2, 4, 8...
    /// failures in a row: a dictionary gathered from the pages leaving
    /// now may fit the data where the old one does not, but if none does,
    /// the tries thin out.
    wants_new: bool,
}

impl DictionaryVerdict {
    /// A fresh verdict for a new dictionary, which is used until checks
    /// find otherwise; the failures of the one before are kept.
    fn restart(&mut self) {
        *self = DictionaryVerdict {
            pays: true,
            failures: self.failures,
            ..DictionaryVerdict::default()
        };
    }

    /// Records one page's sizes both ways (a page that does not fit counts
    /// as a whole page) and, after a full window, decides.
    fn record(&mut self, with: usize, alone: usize) {
        self.bytes_with += with as u64;
        self.bytes_alone += alone as u64;
        self.checks += 1;
        if self.checks < CHECKS_PER_VERDICT {
            return;
        }
        self.pays = self.bytes_with * 100 <= self.bytes_alone * (100 - MIN_SAVING_PERCENT);
        self.failures = if self.pays { 0 } else { self.failures + 1 };
        self.wants_new = !self.pays && self.failures.is_power_of_two();
        (self.checks, self.bytes_with, self.bytes_alone) = (0, 0, 0);
    }
}

/// The compressor and scratch space for one compression: LZ4 needs room
/// for its worst case even when the result is small.
pub struct Encoder {
    compressor: Compressor,
    out: Vec<u8>,
    /// A check's second compression.
    other: Vec<u8>,
    verdict: DictionaryVerdict,
    /// The loaded dictionary's generation and slot (generation 0: none).
    loaded: (u32, u8),
}

impl Encoder {
    /// An encoder for `codec`, which must be on.
    pub fn new(page_size: usize, codec: Codec) -> Encoder {
        let level = match codec {
            Codec::Lz4Fast => Level::Fast,
            Codec::Lz4 | Codec::Off => Level::Mid,
        };
        Encoder {
            compressor: Compressor::new(level),
            out: vec![0; lz4::compress_bound(page_size)],
            other: vec![0; lz4::compress_bound(page_size)],
            verdict: DictionaryVerdict::default(),
            loaded: (0, 0),
        }
    }

    /// Whether the dictionary stopped paying and a new one should be
    /// gathered; the request is handed out once.
    pub fn take_request_for_new_dictionary(&mut self) -> bool {
        std::mem::take(&mut self.verdict.wants_new)
    }

    /// Whether pages are compressed with the dictionary now.
    pub fn uses_dictionary(&self) -> bool {
        self.compressor.has_dictionary() && self.verdict.pays
    }

    /// Encodes `page`, with `dictionary` (the tier's active one) where it
    /// pays. A dictionary of a new generation replaces the loaded one.
    pub fn encode<'a>(&'a mut self, page: &[u8], dictionary: Option<Active<'_>>) -> Encoded<'a> {
        if let Some(word) = same_filled(page) {
            return Encoded::SameFilled(word);
        }
        if let Some(d) = dictionary.filter(|d| d.generation != self.loaded.0) {
            self.compressor.load_dictionary(d.bytes);
            self.loaded = (d.generation, d.slot);
            self.verdict.restart();
        }
        let with = self.uses_dictionary();
        let mut n = self.compressor.compress(page, &mut self.out, with);
        let mut used = with;
        if self.checks_now() {
            let other = self.compressor.compress(page, &mut self.other, !with);
            let whole = |n: Option<usize>| n.unwrap_or(page.len());
            let (n_with, n_alone) = if with { (n, other) } else { (other, n) };
            // Pages that stay incompressible either way say nothing about
            // the dictionary; counted, they would hide its saving.
            let kept = |n: Option<usize>| n.is_some_and(|n| worth_keeping(n, page.len()));
            if kept(n_with) || kept(n_alone) {
                self.verdict.record(whole(n_with), whole(n_alone));
            }
            // This page takes the smaller of its two encodings.
            if whole(other) < whole(n) {
                std::mem::swap(&mut self.out, &mut self.other);
                (n, used) = (other, !with);
            }
        }
        match n {
            Some(n) if worth_keeping(n, page.len()) => match used {
                true => Encoded::Lz4WithDictionary(&self.out[..n], self.loaded.1),
                false => Encoded::Lz4(&self.out[..n]),
            },
            _ => Encoded::Incompressible,
        }
    }

    /// Whether this page is one compressed both ways.
    fn checks_now(&mut self) -> bool {
        if !self.compressor.has_dictionary() {
            return false;
        }
        self.verdict.pages = self.verdict.pages.wrapping_add(1);
        self.verdict.pages.is_multiple_of(CHECK_EVERY)
    }
}

/// The repeated word of a page whose words are all equal.
pub fn same_filled(page: &[u8]) -> Option<u64> {
    let mut words = page.chunks_exact(8).map(word_at);
    let first = words.next()?;
    words.all(|w| w == first).then_some(first)
}

fn word_at(chunk: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(chunk);
    u64::from_ne_bytes(w)
}

/// Fills `page` with `word`.
pub fn fill_same(page: &mut [u8], word: u64) {
    for chunk in page.chunks_exact_mut(8) {
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
}

/// Decompresses LZ4 `bytes` into `page`; false unless exactly a page came
/// out (the pool is the runtime's own memory, so this means a bug).
pub fn decode_lz4(bytes: &[u8], page: &mut [u8]) -> bool {
    lz4::decompress(bytes, page) == Some(page.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_page() -> Vec<u8> {
        let words = ["memory", "tier", "page", "the", "of", "cache", "fault"];
        let mut page = Vec::with_capacity(4096);
        let mut i = 0usize;
        while page.len() < 4096 {
            page.extend_from_slice(words[(i * 7 + i / 3) % words.len()].as_bytes());
            page.push(b' ');
            i += 1;
        }
        page.truncate(4096);
        page
    }

    #[test]
    fn each_kind_of_page_is_encoded_as_it_should_be() {
        let mut enc = Encoder::new(4096, Codec::Lz4);
        let same = vec![0xabu8; 4096];
        assert!(
            matches!(enc.encode(&same, None), Encoded::SameFilled(w) if w == u64::from_ne_bytes([0xab; 8]))
        );
        let text = text_page();
        let Encoded::Lz4(bytes) = enc.encode(&text, None) else {
            panic!("text must compress");
        };
        assert!(
            bytes.len() < 1024,
            "text compressed to {} bytes",
            bytes.len()
        );
        let bytes = bytes.to_vec();
        let mut back = vec![0u8; 4096];
        assert!(decode_lz4(&bytes, &mut back));
        assert_eq!(back, text);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let random: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(matches!(enc.encode(&random, None), Encoded::Incompressible));
    }

    #[test]
    fn a_truncated_block_does_not_decode_to_a_page() {
        let mut enc = Encoder::new(4096, Codec::Lz4Fast);
        let Encoded::Lz4(bytes) = enc.encode(&text_page(), None) else {
            panic!("text must compress");
        };
        let short = bytes[..bytes.len() / 2].to_vec();
        let mut back = vec![0u8; 4096];
        assert!(!decode_lz4(&short, &mut back));
    }

    fn active(generation: u32, slot: u8, bytes: &[u8]) -> Option<Active<'_>> {
        Some(Active {
            slot,
            generation,
            bytes,
        })
    }

    #[test]
    fn the_encoder_uses_the_dictionary_it_is_given_and_a_newer_one_replaces_it() {
        let mut enc = Encoder::new(4096, Codec::Lz4);
        let dictionary: Vec<u8> = text_page().repeat(16);
        let page = text_page();
        let Encoded::Lz4(alone) = enc.encode(&page, None) else {
            panic!("text must compress");
        };
        let alone = alone.len();
        for (generation, slot) in [(1, 0), (1, 0), (2, 1)] {
            let Encoded::Lz4WithDictionary(bytes, got) =
                enc.encode(&page, active(generation, slot, &dictionary))
            else {
                panic!("text must compress with the dictionary");
            };
            assert_eq!(got, slot, "the block names the slot of its dictionary");
            assert!(bytes.len() < alone, "{} against {alone}", bytes.len());
            let bytes = bytes.to_vec();
            let mut back = vec![0u8; 4096];
            assert_eq!(
                lz4::decompress_with_dictionary(&bytes, &mut back, &dictionary),
                Some(4096)
            );
            assert_eq!(back, page);
        }
        assert!(matches!(
            enc.encode(&vec![3u8; 4096], None),
            Encoded::SameFilled(_)
        ));
    }

    #[test]
    fn a_dictionary_that_does_not_pay_is_set_aside_and_a_new_one_asked_for() {
        let mut enc = Encoder::new(4096, Codec::Lz4);
        // A dictionary of bytes no text page holds saves nothing.
        let useless = vec![0xffu8; 64 << 10];
        let page = text_page();
        let window = CHECK_EVERY * CHECKS_PER_VERDICT;
        let mut asked = Vec::new();
        let mut used = Vec::new();
        for i in 0..4 * window {
            let e = enc.encode(&page, active(1, 0, &useless));
            used.push(matches!(e, Encoded::Lz4WithDictionary(..)));
            if enc.take_request_for_new_dictionary() {
                asked.push(i + 1);
            }
        }
        assert!(used[0], "the dictionary is tried first");
        assert!(!enc.uses_dictionary() && !used[used.len() - 1]);
        // After 1, 2 and 4 failing verdicts in a row, not after 3.
        assert_eq!(asked, vec![window, 2 * window, 4 * window]);
        // A dictionary that helps, once given, passes its checks.
        let helpful: Vec<u8> = page.repeat(16);
        for _ in 0..window {
            let _ = enc.encode(&page, active(2, 1, &helpful));
        }
        assert!(enc.uses_dictionary(), "checks find that the new one pays");
        assert!(!enc.take_request_for_new_dictionary());
    }

    #[test]
    fn same_filled_round_trips() {
        let mut page = vec![0u8; 4096];
        fill_same(&mut page, 0x0102_0304_0506_0708);
        assert_eq!(same_filled(&page), Some(0x0102_0304_0506_0708));
        page[4095] ^= 1;
        assert_eq!(same_filled(&page), None);
    }
}
