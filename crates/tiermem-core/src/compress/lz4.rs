//! A thin wrapper over liblz4's block API, which `lz4-sys` builds from
//! source and links statically.
//!
//! liblz4 rather than a pure-Rust LZ4: only it has the HC "mid" level,
//! which packs text pages about 8% tighter than the fast mode at 1.4x its
//! compression time, and its decoder takes 1.3 µs per text page where
//! `lz4_flex`'s took 1.9–2.2 µs (measured on this project's text pages:
//! `docs/notebook/2026-11-27-lz4-mid.md`).
//!
//! Each [`Compressor`] keeps its own state, initialized once, so a
//! compression allocates nothing (the evictor may not allocate from
//! tiered memory) and does not clear a 256 KiB state per 4 KiB page.
//!
//! A compressor may also hold a dictionary: up to 64 KiB of earlier data
//! that each block may copy from, as if it preceded the page. A lone 4 KiB
//! page gives LZ4 only its own bytes to find repeats in; with 64 KiB of
//! text before it, the same mid level packs this project's text pages
//! 4.3x instead of 2.6x at the same compression time. Such a block decodes
//! only with the same dictionary ([`decompress_with_dictionary`]).

use std::os::raw::{c_char, c_int, c_void};

// Linked for the symbols declared below, which lz4-sys's bindings omit
// (the `_extState` functions, dictionary attachment and the `_fast`
// resets are the static-linking API of lz4.h and lz4hc.h; lz4-sys always
// links statically).
use lz4_sys as _;

extern "C" {
    fn LZ4_sizeofState() -> c_int;
    fn LZ4_initStream(buffer: *mut c_void, size: usize) -> *mut c_void;
    fn LZ4_compress_fast_extState_fastReset(
        state: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        acceleration: c_int,
    ) -> c_int;
    fn LZ4_sizeofStateHC() -> c_int;
    fn LZ4_initStreamHC(buffer: *mut c_void, size: usize) -> *mut c_void;
    fn LZ4_compress_HC_extStateHC_fastReset(
        state: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        level: c_int,
    ) -> c_int;
    fn LZ4_resetStream_fast(stream: *mut c_void);
    fn LZ4_loadDict(stream: *mut c_void, dict: *const c_char, dict_size: c_int) -> c_int;
    fn LZ4_attach_dictionary(working: *mut c_void, dictionary: *const c_void);
    fn LZ4_compress_fast_continue(
        stream: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        acceleration: c_int,
    ) -> c_int;
    fn LZ4_resetStreamHC_fast(stream: *mut c_void, level: c_int);
    fn LZ4_loadDictHC(stream: *mut c_void, dict: *const c_char, dict_size: c_int) -> c_int;
    fn LZ4_attach_HC_dictionary(working: *mut c_void, dictionary: *const c_void);
    fn LZ4_compress_HC_continue(
        stream: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
    ) -> c_int;
    fn LZ4_decompress_safe_usingDict(
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        dict: *const c_char,
        dict_size: c_int,
    ) -> c_int;
}

/// The most history an LZ4 block can refer to: its window.
pub const MAX_DICTIONARY: usize = 64 << 10;

/// LZ4HC's level 2, the "mid" strategy (liblz4 1.10): two hash tables
/// and no chain search.
const MID_LEVEL: c_int = 2;

/// How hard the compressor searches for matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// LZ4's fast mode (acceleration 1).
    Fast,
    /// LZ4HC's mid level.
    Mid,
}

/// One compression context; not shared between threads.
pub struct Compressor {
    level: Level,
    /// The state, 8-byte aligned as liblz4 requires.
    state: Vec<u64>,
    /// A second state holding the dictionary's tables, which each
    /// compression attaches to `state` rather than hashing 64 KiB again.
    dictionary_state: Vec<u64>,
    /// The dictionary's bytes: the dictionary state points into them, so
    /// the compressor keeps its own copy, which never moves or changes.
    dictionary: Vec<u8>,
    has_dictionary: bool,
}

impl Compressor {
    /// A compressor without a dictionary. Room for one is allocated here,
    /// so that loading it later allocates nothing.
    pub fn new(level: Level) -> Compressor {
        Compressor {
            level,
            state: new_state(level),
            dictionary_state: new_state(level),
            dictionary: Vec::with_capacity(MAX_DICTIONARY),
            has_dictionary: false,
        }
    }

    /// Makes every later compression use `bytes` (at most
    /// [`MAX_DICTIONARY`]; the last 64 KiB otherwise) as its dictionary.
    pub fn load_dictionary(&mut self, bytes: &[u8]) {
        let bytes = &bytes[bytes.len().saturating_sub(MAX_DICTIONARY)..];
        self.dictionary.clear();
        self.dictionary.extend_from_slice(bytes);
        let state = self.dictionary_state.as_mut_ptr().cast::<c_void>();
        let (d, len) = (
            self.dictionary.as_ptr().cast::<c_char>(),
            self.dictionary.len() as c_int,
        );
        // SAFETY: the state was initialized by `new_state` for this level;
        // `d` is valid for `len` bytes (at most 64 KiB), which the
        // compressor keeps unchanged, where they are, while the state
        // refers to them (until the next load, which replaces both).
        unsafe {
            match self.level {
                Level::Fast => {
                    LZ4_resetStream_fast(state);
                    LZ4_loadDict(state, d, len);
                }
                Level::Mid => {
                    // The level first: it decides which tables the
                    // dictionary fills.
                    LZ4_resetStreamHC_fast(state, MID_LEVEL);
                    LZ4_loadDictHC(state, d, len);
                }
            }
        }
        self.has_dictionary = true;
    }

    /// Whether compressions use a dictionary.
    pub fn has_dictionary(&self) -> bool {
        self.has_dictionary
    }

    /// Compresses `src` into `dst`, with the dictionary only if
    /// `use_dictionary` (and one is loaded); the compressed length, or
    /// `None` if it does not fit in `dst`. A block compressed with the
    /// dictionary decodes only with [`decompress_with_dictionary`] and the
    /// same bytes.
    pub fn compress(&mut self, src: &[u8], dst: &mut [u8], use_dictionary: bool) -> Option<usize> {
        let state = self.state.as_mut_ptr().cast::<c_void>();
        let dictionary = self.dictionary_state.as_ptr().cast::<c_void>();
        let (src_len, dst_len) = (c_len(src.len())?, c_len(dst.len())?);
        let (s, d) = (
            src.as_ptr().cast::<c_char>(),
            dst.as_mut_ptr().cast::<c_char>(),
        );
        // SAFETY: both states were initialized by `new_state` for this
        // level, and the dictionary state loaded (it and the bytes it
        // refers to outlive the call); `s` and `d` are valid for `src_len`
        // and `dst_len` bytes; liblz4 writes at most `dst_len` bytes.
        let n = unsafe {
            match (self.level, self.has_dictionary && use_dictionary) {
                (Level::Fast, false) => {
                    LZ4_compress_fast_extState_fastReset(state, s, d, src_len, dst_len, 1)
                }
                (Level::Mid, false) => {
                    LZ4_compress_HC_extStateHC_fastReset(state, s, d, src_len, dst_len, MID_LEVEL)
                }
                (Level::Fast, true) => {
                    LZ4_resetStream_fast(state);
                    LZ4_attach_dictionary(state, dictionary);
                    LZ4_compress_fast_continue(state, s, d, src_len, dst_len, 1)
                }
                (Level::Mid, true) => {
                    LZ4_resetStreamHC_fast(state, MID_LEVEL);
                    LZ4_attach_HC_dictionary(state, dictionary);
                    LZ4_compress_HC_continue(state, s, d, src_len, dst_len)
                }
            }
        };
        (n > 0).then_some(n as usize)
    }
}

/// A state for `level`, initialized, 8-byte aligned as liblz4 requires.
fn new_state(level: Level) -> Vec<u64> {
    // SAFETY: both only return a constant.
    let bytes = unsafe {
        match level {
            Level::Fast => LZ4_sizeofState(),
            Level::Mid => LZ4_sizeofStateHC(),
        }
    } as usize;
    let mut state = vec![0u64; bytes.div_ceil(8)];
    let ptr = state.as_mut_ptr().cast::<c_void>();
    let len = state.len() * 8;
    // SAFETY: `ptr` points to `len` writable, 8-byte aligned bytes, at
    // least the size liblz4 asked for.
    let init = unsafe {
        match level {
            Level::Fast => LZ4_initStream(ptr, len),
            Level::Mid => LZ4_initStreamHC(ptr, len),
        }
    };
    assert!(!init.is_null(), "liblz4 refused a state of its own size");
    state
}

/// The most bytes compressing `len` bytes can take.
pub fn compress_bound(len: usize) -> usize {
    let len = c_len(len).unwrap_or(0);
    // SAFETY: a pure function of its argument.
    unsafe { lz4_sys::LZ4_compressBound(len) }.max(0) as usize
}

/// Decompresses the LZ4 block `src` into `dst`; the decompressed length,
/// or `None` if `src` is not a valid block or does not fit.
pub fn decompress(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    let (src_len, dst_len) = (c_len(src.len())?, c_len(dst.len())?);
    // SAFETY: LZ4_decompress_safe reads at most `src_len` bytes and writes
    // at most `dst_len`, whatever `src` holds.
    let n = unsafe {
        lz4_sys::LZ4_decompress_safe(
            src.as_ptr().cast::<c_char>(),
            dst.as_mut_ptr().cast::<c_char>(),
            src_len,
            dst_len,
        )
    };
    (n >= 0).then_some(n as usize)
}

/// Decompresses `src`, compressed with `dictionary`, into `dst`; the
/// decompressed length, or `None` if `src` is not a valid block or does
/// not fit.
pub fn decompress_with_dictionary(src: &[u8], dst: &mut [u8], dictionary: &[u8]) -> Option<usize> {
    let (src_len, dst_len) = (c_len(src.len())?, c_len(dst.len())?);
    let dict_len = c_len(dictionary.len())?;
    // SAFETY: liblz4 reads at most `src_len` bytes of `src` and
    // `dict_len` of `dictionary`, and writes at most `dst_len`, whatever
    // `src` holds.
    let n = unsafe {
        LZ4_decompress_safe_usingDict(
            src.as_ptr().cast::<c_char>(),
            dst.as_mut_ptr().cast::<c_char>(),
            src_len,
            dst_len,
            dictionary.as_ptr().cast::<c_char>(),
            dict_len,
        )
    };
    (n >= 0).then_some(n as usize)
}

fn c_len(len: usize) -> Option<c_int> {
    c_int::try_from(len).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(len: usize) -> Vec<u8> {
        let words = ["memory", "tier", "page", "the", "of", "cache", "fault", "a"];
        let mut out = Vec::with_capacity(len);
        let mut x = 7u64;
        while out.len() < len {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            out.extend_from_slice(words[(x >> 61) as usize].as_bytes());
            out.push(b' ');
        }
        out.truncate(len);
        out
    }

    #[test]
    fn both_levels_round_trip_and_mid_packs_tighter() {
        let page = text(4096);
        let mut sizes = Vec::new();
        for level in [Level::Fast, Level::Mid] {
            let mut c = Compressor::new(level);
            let mut out = vec![0u8; compress_bound(page.len())];
            // Twice: the reused state must not leak the first page into the second.
            for _ in 0..2 {
                let n = c.compress(&page, &mut out, true).expect("fits its bound");
                let mut back = vec![0u8; 4096];
                assert_eq!(decompress(&out[..n], &mut back), Some(4096), "{level:?}");
                assert_eq!(back, page, "{level:?}");
                sizes.push(n);
            }
        }
        assert_eq!(sizes[0], sizes[1], "same input, same output");
        assert!(
            sizes[2] < sizes[0],
            "mid {} against fast {}",
            sizes[2],
            sizes[0]
        );
    }

    #[test]
    fn a_dictionary_packs_tighter_and_its_blocks_need_it() {
        let dictionary = text(MAX_DICTIONARY);
        let page = text(4096 + 777)[777..].to_vec();
        for level in [Level::Fast, Level::Mid] {
            let mut plain = Compressor::new(level);
            let mut with = Compressor::new(level);
            with.load_dictionary(&dictionary);
            assert!(with.has_dictionary() && !plain.has_dictionary());
            let mut out = vec![0u8; compress_bound(4096)];
            let alone = plain
                .compress(&page, &mut out, true)
                .expect("fits its bound");
            // Twice: attaching the dictionary again must give the same block.
            let mut blocks = Vec::new();
            for _ in 0..2 {
                let n = with
                    .compress(&page, &mut out, true)
                    .expect("fits its bound");
                blocks.push(out[..n].to_vec());
            }
            assert_eq!(blocks[0], blocks[1], "{level:?}");
            let block = &blocks[0];
            assert!(
                block.len() < alone,
                "{level:?}: {} against {alone}",
                block.len()
            );
            let mut back = vec![0u8; 4096];
            assert_eq!(
                decompress_with_dictionary(block, &mut back, &dictionary),
                Some(4096)
            );
            assert_eq!(back, page, "{level:?}");
            assert_ne!(
                decompress(block, &mut back).map(|_| back.clone()),
                Some(page.clone()),
                "{level:?}: a block that refers to the dictionary decodes without it"
            );
        }
    }

    #[test]
    fn a_destination_too_small_or_a_damaged_block_is_refused() {
        let page = text(4096);
        let mut c = Compressor::new(Level::Mid);
        assert_eq!(c.compress(&page, &mut [0u8; 16], true), None);
        let mut out = vec![0u8; compress_bound(4096)];
        let n = c.compress(&page, &mut out, true).unwrap();
        let mut back = vec![0u8; 4096];
        assert_eq!(decompress(&out[..n / 2], &mut back), None);
        assert_eq!(decompress(&out[..n], &mut back[..100]), None);
    }
}
