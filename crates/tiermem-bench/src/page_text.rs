//! English-like text for `--data text`: what strings in a real heap look
//! like to a compressor.
//!
//! A fixed corpus of 1 MiB is built once, deterministically: tokens drawn
//! with a Zipf-like skew (rank r has weight 1/(r+1)), 70% of them one of 64
//! recurring phrases of 2 to 5 words, the rest single words, all from a
//! fixed vocabulary of 800 (common English words followed by syllable-built
//! ones), separated by spaces, commas, full stops (the next word
//! capitalised) and now and then a line break. LZ4 compresses a 4 KiB page
//! of it about 2.4x on average; single words alone gave under 1.6x, as a
//! byte compressor finds little in isolated words and most in repeated
//! phrases. A page is a window of the corpus that starts
//! at an offset drawn from the page number, so every byte of every page is
//! a function of (page, byte index) alone and costs one lookup to check.

use std::sync::OnceLock;

use crate::mix::splitmix64;

/// Corpus length: a power of two, so offsets wrap with a mask.
const CORPUS_LEN: usize = 1 << 20;
/// Phrases that recur.
const PHRASES: usize = 64;
/// Share of tokens that are a whole phrase rather than one word, percent.
const PHRASE_PERCENT: u64 = 70;
/// Words in the vocabulary.
const VOCABULARY_LEN: usize = 800;
/// The most frequent words, in rank order; the rest are built from syllables.
const COMMON: &[&str] = &[
    "the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
    "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "about", "out",
    "into", "than", "them", "only", "other", "new", "some", "could", "these", "two", "may",
    "first", "then", "do", "any", "like", "my", "now", "over", "such", "our", "man", "me", "even",
    "most", "made", "after", "also", "did", "many", "before", "must", "through", "back", "years",
    "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those",
    "people", "how", "too", "little", "state", "good", "very", "make", "world", "still", "own",
    "see", "men", "work", "long", "get", "here", "between", "both", "life", "being", "under",
    "never", "day", "same", "another", "know", "while", "last", "might", "us", "great", "old",
    "year", "off", "come", "since", "against", "go", "came", "right", "used", "take", "three",
    "memory", "page", "server", "request", "value", "error", "user", "data", "file", "system",
];
const ONSETS: &[&str] = &[
    "b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "v", "w", "br", "ch", "cl",
    "cr", "dr", "fl", "gr", "pl", "pr", "sh", "st", "str", "th", "tr", "",
];
const VOWELS: &[&str] = &["a", "e", "i", "o", "u", "ea", "ou", "io", "ai", "ee"];
const CODAS: &[&str] = &[
    "", "", "n", "r", "s", "t", "l", "nd", "st", "ng", "ck", "rt", "tion", "ment", "ing", "ed",
    "er", "ly",
];

/// The 8 bytes of `page`'s text at word `index` (little-endian, so the
/// bytes in memory read as the text).
#[inline]
pub fn word(page: u64, index: usize) -> u64 {
    let text = corpus();
    let start = splitmix64(page ^ 0x7465_7874) as usize;
    let at = start.wrapping_add(index.wrapping_mul(8)) & (CORPUS_LEN - 1);
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&text[at..at + 8]);
    u64::from_le_bytes(bytes)
}

/// The corpus, with its first 8 bytes repeated at the end so that a word
/// starting near the end needs no second lookup.
fn corpus() -> &'static [u8] {
    static CORPUS: OnceLock<Vec<u8>> = OnceLock::new();
    CORPUS.get_or_init(build_corpus)
}

fn build_corpus() -> Vec<u8> {
    let vocabulary = vocabulary();
    let words = Zipf::new(vocabulary.len());
    // Phrases of 2 to 5 words: real text and heap strings repeat whole
    // phrases (idioms, field names, log formats), which is most of what a
    // byte-level compressor finds in them.
    let mut state = 0x7068_7261_7365u64;
    let mut next = || {
        state = state.wrapping_add(1);
        splitmix64(state)
    };
    let phrases: Vec<Vec<usize>> = (0..PHRASES)
        .map(|_| {
            let len = 2 + (next() % 4) as usize;
            (0..len).map(|_| words.draw(next())).collect()
        })
        .collect();
    let phrase_ranks = Zipf::new(PHRASES);
    let mut text = Vec::with_capacity(CORPUS_LEN + 64);
    let mut capital = true;
    while text.len() < CORPUS_LEN {
        let draw = next();
        let token: Vec<usize> = if draw % 100 < PHRASE_PERCENT {
            phrases[phrase_ranks.draw(next())].clone()
        } else {
            vec![words.draw(next())]
        };
        for (i, &rank) in token.iter().enumerate() {
            let word = vocabulary[rank].as_bytes();
            if capital {
                text.push(word[0].to_ascii_uppercase());
                text.extend_from_slice(&word[1..]);
                capital = false;
            } else {
                text.extend_from_slice(word);
            }
            if i + 1 < token.len() {
                text.push(b' ');
            }
        }
        // Bits of the same draw pick the separator after the token.
        match (draw >> 8) & 0xff {
            0..=15 => text.extend_from_slice(b", "),
            16..=31 => {
                text.extend_from_slice(b". ");
                capital = true;
            }
            32..=35 => {
                text.extend_from_slice(b".\n");
                capital = true;
            }
            _ => text.push(b' '),
        }
    }
    text.truncate(CORPUS_LEN);
    let head: Vec<u8> = text[..8].to_vec();
    text.extend_from_slice(&head);
    text
}

/// Ranks drawn with weight 1/(rank+1): Zipf's law with exponent 1.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(len: usize) -> Zipf {
        let mut total = 0.0;
        let cumulative = (0..len)
            .map(|rank| {
                total += 1.0 / (rank as f64 + 1.0);
                total
            })
            .collect();
        Zipf { cumulative }
    }

    /// The rank a uniform 64-bit `draw` falls on.
    fn draw(&self, draw: u64) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let u = (draw >> 11) as f64 / (1u64 << 53) as f64 * total;
        self.cumulative
            .partition_point(|&c| c < u)
            .min(self.cumulative.len().saturating_sub(1))
    }
}

/// The common words, then syllable-built ones up to `VOCABULARY_LEN`,
/// without duplicates.
fn vocabulary() -> Vec<String> {
    let mut words: Vec<String> = COMMON.iter().map(|w| w.to_string()).collect();
    let mut seen: std::collections::HashSet<String> = words.iter().cloned().collect();
    let mut state = 0x0076_6f63_6162_u64;
    while words.len() < VOCABULARY_LEN {
        state = state.wrapping_add(1);
        let mut draw = splitmix64(state);
        let syllables = 1 + (draw % 3) as usize;
        draw /= 3;
        let mut word = String::new();
        for _ in 0..syllables {
            word.push_str(ONSETS[(draw % ONSETS.len() as u64) as usize]);
            draw /= ONSETS.len() as u64;
            word.push_str(VOWELS[(draw % VOWELS.len() as u64) as usize]);
            draw /= VOWELS.len() as u64;
        }
        word.push_str(CODAS[(draw % CODAS.len() as u64) as usize]);
        if seen.insert(word.clone()) {
            words.push(word);
        }
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vocabulary_is_fixed_and_distinct() {
        let words = vocabulary();
        assert_eq!(words.len(), VOCABULARY_LEN);
        assert_eq!(words, vocabulary());
        assert!(words.iter().all(|w| !w.is_empty() && w.is_ascii()));
    }

    #[test]
    fn pages_are_printable_words() {
        let bytes: Vec<u8> = (0..512).flat_map(|i| word(3, i).to_le_bytes()).collect();
        let text = String::from_utf8(bytes).expect("ASCII text");
        assert!(text
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || b" ,.\n".contains(&b)));
        assert!(text.contains(" the "), "{text}");
    }
}
