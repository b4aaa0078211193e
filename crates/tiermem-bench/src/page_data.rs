//! What fills the pages of the working set (`--data`).
//!
//! Every figure of a pager depends on the page contents: a pager or swap
//! tier that compresses, or that drops all-zero pages, is flattered by
//! zeros and not by random bytes. So the contents are chosen, stated in
//! every report, and checked: every word of every page is known, and
//! verification compares all of them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::mix::splitmix64;

/// The contents of a page, beyond its stamp words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PageData {
    /// All zero: what a freshly allocated, lightly used heap looks like.
    #[default]
    Zero,
    /// Pseudo-random bytes, incompressible (splitmix64 of page and word).
    Random,
    /// English-like text: Zipf-skewed words and recurring phrases from a
    /// fixed vocabulary of 800, with spaces and punctuation (see
    /// `page_text`); LZ4 compresses a 4 KiB page about 2.4x, as it does
    /// strings in a real heap.
    Text,
    /// A mix per page, drawn from the page number: 10% zero, 10%
    /// same-filled (one nonzero word repeated), 50% text, 30% random.
    Mixed,
}

/// What one page of `PageData::Mixed` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MixedKind {
    Zero,
    SameFilled,
    Text,
    Random,
}

impl MixedKind {
    /// The kind of `page`: its hash modulo 100 against the shares above.
    pub fn of(page: u64) -> MixedKind {
        match splitmix64(page ^ 0x006d_6978_6564) % 100 {
            0..=9 => MixedKind::Zero,
            10..=19 => MixedKind::SameFilled,
            20..=69 => MixedKind::Text,
            _ => MixedKind::Random,
        }
    }
}

impl PageData {
    pub const ALL: [PageData; 4] = [
        PageData::Zero,
        PageData::Random,
        PageData::Text,
        PageData::Mixed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PageData::Zero => "zero",
            PageData::Random => "random",
            PageData::Text => "text",
            PageData::Mixed => "mixed",
        }
    }

    /// The content of word `index` of `page`: a function of both alone, so
    /// verification can recompute every word.
    #[inline]
    pub fn word(self, page: u64, index: usize) -> u64 {
        match self {
            PageData::Zero => 0,
            PageData::Random => random_word(page, index),
            PageData::Text => crate::page_text::word(page, index),
            PageData::Mixed => match MixedKind::of(page) {
                MixedKind::Zero => 0,
                // Never zero, so that the page is not a zero page.
                MixedKind::SameFilled => splitmix64(page) | 1,
                MixedKind::Text => crate::page_text::word(page, index),
                MixedKind::Random => random_word(page, index),
            },
        }
    }
}

#[inline]
fn random_word(page: u64, index: usize) -> u64 {
    splitmix64(page.wrapping_mul(0x1_0000_0001) ^ index as u64)
}

impl fmt::Display for PageData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PageData {
    type Err = String;
    fn from_str(s: &str) -> Result<PageData, String> {
        PageData::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| {
                format!("unknown page contents '{s}': expected zero, random, text or mixed")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_names_are_refused() {
        for d in PageData::ALL {
            assert_eq!(d.name().parse::<PageData>(), Ok(d));
        }
        let err = "prose".parse::<PageData>().unwrap_err();
        assert!(
            err.contains("'prose'") && err.contains("expected zero, random, text or mixed"),
            "{err}"
        );
    }

    #[test]
    fn random_pages_differ_from_each_other_and_do_not_repeat_words() {
        let a: Vec<u64> = (0..512).map(|i| PageData::Random.word(7, i)).collect();
        let b: Vec<u64> = (0..512).map(|i| PageData::Random.word(8, i)).collect();
        assert_ne!(a, b);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 512, "a word repeats within a page");
        assert!(a.iter().all(|&w| w != 0));
        assert_eq!(PageData::Zero.word(7, 3), 0);
    }

    /// A 4 KiB page as the worker writes it, stamp words aside.
    fn page(data: PageData, page: u64) -> Vec<u8> {
        (0..512)
            .flat_map(|i| data.word(page, i).to_le_bytes())
            .collect()
    }

    fn lz4_ratio(bytes: &[u8]) -> f64 {
        bytes.len() as f64 / lz4_flex::block::compress(bytes).len() as f64
    }

    #[test]
    fn text_compresses_with_lz4_about_like_real_text() {
        let ratios: Vec<f64> = (0..200)
            .map(|p| lz4_ratio(&page(PageData::Text, p)))
            .collect();
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        eprintln!("LZ4 ratio of text pages: mean {mean:.2}");
        assert!((2.0..=4.0).contains(&mean), "mean LZ4 ratio {mean:.2}");
        for (p, r) in ratios.iter().enumerate() {
            assert!((1.6..=5.0).contains(r), "page {p}: LZ4 ratio {r:.2}");
        }
        // Random pages stay incompressible, zero pages all but vanish.
        assert!(lz4_ratio(&page(PageData::Random, 5)) < 1.01);
        assert!(lz4_ratio(&page(PageData::Zero, 5)) > 50.0);
    }

    #[test]
    fn text_pages_differ_from_each_other() {
        assert_ne!(page(PageData::Text, 1), page(PageData::Text, 2));
    }

    #[test]
    fn mixed_holds_each_kind_in_about_its_share() {
        let pages = 10_000u64;
        let mut counts = [0u64; 4];
        for p in 0..pages {
            let bytes = page(PageData::Mixed, p);
            let words: Vec<u64> = (0..512).map(|i| PageData::Mixed.word(p, i)).collect();
            let kind = MixedKind::of(p);
            match kind {
                MixedKind::Zero => assert!(words.iter().all(|&w| w == 0)),
                MixedKind::SameFilled => {
                    assert!(words[0] != 0 && words.iter().all(|&w| w == words[0]))
                }
                MixedKind::Text => assert_eq!(bytes, page(PageData::Text, p)),
                MixedKind::Random => assert_eq!(bytes, page(PageData::Random, p)),
            }
            counts[kind as usize] += 1;
        }
        let share = |k: MixedKind| counts[k as usize] as f64 / pages as f64;
        for (kind, expected) in [
            (MixedKind::Zero, 0.10),
            (MixedKind::SameFilled, 0.10),
            (MixedKind::Text, 0.50),
            (MixedKind::Random, 0.30),
        ] {
            let got = share(kind);
            assert!((got - expected).abs() < 0.02, "{kind:?}: {got:.3}");
        }
    }

    #[test]
    fn every_word_is_a_function_of_page_and_index() {
        for data in PageData::ALL {
            for p in [0u64, 1, 77, 1 << 40] {
                for i in [0usize, 1, 2, 255, 511, 4095, 262_143] {
                    assert_eq!(data.word(p, i), data.word(p, i), "{data} {p} {i}");
                }
            }
            // In any order, from a fresh start: the same page.
            let forward: Vec<u64> = (0..512).map(|i| data.word(9, i)).collect();
            let backward: Vec<u64> = (0..512).rev().map(|i| data.word(9, i)).collect();
            assert!(forward.iter().eq(backward.iter().rev()), "{data}");
        }
    }
}
