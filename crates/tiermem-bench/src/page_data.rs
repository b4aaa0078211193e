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

/// The contents of a page, beyond its stamp words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PageData {
    /// All zero: what a freshly allocated, lightly used heap looks like.
    #[default]
    Zero,
    /// Pseudo-random bytes, incompressible (splitmix64 of page and word).
    Random,
}

impl PageData {
    pub const ALL: [PageData; 2] = [PageData::Zero, PageData::Random];

    pub fn name(self) -> &'static str {
        match self {
            PageData::Zero => "zero",
            PageData::Random => "random",
        }
    }

    /// The content of word `index` of `page`.
    #[inline]
    pub fn word(self, page: u64, index: usize) -> u64 {
        match self {
            PageData::Zero => 0,
            PageData::Random => splitmix64(page.wrapping_mul(0x1_0000_0001) ^ index as u64),
        }
    }
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
            .ok_or_else(|| format!("unknown page contents '{s}': expected zero or random"))
    }
}

/// A bijective mixer: distinct inputs give distinct, uniform-looking words.
#[inline]
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_names_are_refused() {
        for d in PageData::ALL {
            assert_eq!(d.name().parse::<PageData>(), Ok(d));
        }
        let err = "text".parse::<PageData>().unwrap_err();
        assert!(err.contains("expected zero or random"), "{err}");
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
}
