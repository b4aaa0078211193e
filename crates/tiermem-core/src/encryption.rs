//! Encryption at rest (`TIERMEM_ENCRYPT=on`, `tiermem run --encrypt`).
//!
//! Every page is encrypted with AES-256-GCM (the `ring` crate, with AES-NI
//! and carry-less multiplication: its cost is in BENCHMARKS.md) on its way
//! to the store and
//! decrypted when it comes back, so the backing file or device never holds
//! a program's memory in the clear: not while it runs, and not after a
//! crash leaves a device behind. The page number and slot are the
//! associated data, so the tag also catches a page read from the wrong
//! place, as the checksum does (encryption takes its place).
//!
//! - **Keys.** A random key per process (getrandom), held in a mapping of
//!   its own that is locked in DRAM (`mlock`: never swapped), left out of
//!   core dumps (`MADV_DONTDUMP`), never tiered, and zeroed when the
//!   runtime ends. A forked child inherits its ancestors' keys, to read the
//!   slots it shares with them, and makes a key of its own for what it
//!   writes.
//! - **Nonces.** A 64-bit counter per process; a key is only ever used for
//!   writing by the process that made it, so no nonce repeats under a key.
//! - **Per page, in DRAM:** the key's index, the counter and the 16-byte
//!   tag (32 bytes, lazily committed like the page table).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};

use crate::error::{Error, Result};
use crate::page_table::PageNo;
use crate::sys::mem::Mapping;

/// Keys one process holds: its own and those of the ancestors it forked
/// from. A child deeper than this keeps writing with its parent's key from
/// a random point of the counter.
const MAX_KEYS: usize = 16;
const KEY_BYTES: usize = 32;

/// What a page's slot copy was sealed with.
#[repr(C)]
#[derive(Clone, Copy)]
struct Seal {
    key: u32,
    _pad: u32,
    counter: u64,
    tag: [u8; 16],
}

pub(crate) struct PageCipher {
    /// `MAX_KEYS` ciphers, then room for one raw key while it is expanded;
    /// locked and left out of core dumps.
    keys: Mapping,
    /// Keys made so far; the last is this process's, for writing.
    key_count: AtomicUsize,
    counter: AtomicU64,
    /// One `Seal` per page of the arena, lazily committed.
    seals: Mapping,
    pages: u64,
}

impl PageCipher {
    /// A cipher with a fresh key, for an arena of `pages` pages.
    pub fn new(pages: u64) -> Result<PageCipher> {
        let keys = Mapping::reserve(keys_len(), "reserving the encryption keys")?;
        lock_in_dram(&keys)?;
        let seals = Mapping::reserve(
            pages as usize * size_of::<Seal>(),
            "reserving the page seal table",
        )?;
        let cipher = PageCipher {
            keys,
            key_count: AtomicUsize::new(0),
            counter: AtomicU64::new(0),
            seals,
            pages,
        };
        cipher.add_key()?;
        Ok(cipher)
    }

    /// In a forked child: a key of its own for what it writes from now on.
    /// The keys are locked again: locks are not inherited across fork.
    pub fn rekey_in_child(&self) -> Result<()> {
        lock_in_dram(&self.keys)?;
        if self.key_count.load(Ordering::Relaxed) < MAX_KEYS {
            return self.add_key();
        }
        let mut start = [0u8; 8];
        fill_random(&mut start)?;
        // The parent goes on counting from where the fork left it; 2^63
        // values away, on average, a collision would take longer than any run.
        self.counter
            .store(u64::from_le_bytes(start), Ordering::Relaxed);
        Ok(())
    }

    /// DRAM the keys and the seals of `touched_pages` pages take.
    pub fn committed_bytes(&self, touched_pages: u64) -> u64 {
        keys_len() as u64 + touched_pages * size_of::<Seal>() as u64
    }

    /// Encrypts `src` (one page, `dst.len()` bytes) into `dst` for `slot`,
    /// and records the seal of `page`.
    pub fn encrypt(&self, page: PageNo, slot: u64, src: *const u8, dst: &mut [u8]) {
        // SAFETY: `src` is a page the caller owns (a runtime frame, or a
        // resident page held `Evicting`), readable for `dst.len()` bytes,
        // and `dst` is the caller's own scratch page: they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        let key = self.key_count.load(Ordering::Relaxed) - 1;
        let counter = self.counter.fetch_add(1, Ordering::Relaxed);
        let tag = self
            .cipher(key)
            .seal_in_place_separate_tag(nonce(counter), Aad::from(identity(page, slot)), dst)
            .expect("AES-GCM encrypts any page-sized buffer");
        self.store_seal(
            page,
            Seal {
                key: key as u32,
                _pad: 0,
                counter,
                tag: tag.as_ref().try_into().expect("a 16-byte tag"),
            },
        );
    }

    /// Decrypts `buf`, just read from `slot`, in place; false if it is not
    /// what was written there for `page` (then `buf` holds garbage).
    pub fn decrypt(&self, page: PageNo, slot: u64, buf: &mut [u8]) -> bool {
        let seal = self.load_seal(page);
        let key = seal.key as usize;
        if key >= self.key_count.load(Ordering::Relaxed) {
            return false;
        }
        self.cipher(key)
            .open_in_place_separate_tag(
                nonce(seal.counter),
                Aad::from(identity(page, slot)),
                Tag::from(seal.tag),
                buf,
                0..,
            )
            .is_ok()
    }

    fn add_key(&self) -> Result<()> {
        let index = self.key_count.load(Ordering::Relaxed);
        // SAFETY: the raw key's room lies after the MAX_KEYS ciphers, inside
        // the mapping, and only this call uses it.
        let raw = unsafe { std::slice::from_raw_parts_mut(self.raw_key_room(), KEY_BYTES) };
        fill_random(raw)?;
        let cipher =
            LessSafeKey::new(UnboundKey::new(&AES_256_GCM, raw).map_err(|_| {
                Error::Unavailable("AES-256-GCM is not available on this CPU".into())
            })?);
        raw.fill(0);
        // SAFETY: slot `index` < MAX_KEYS is inside the mapping, suitably
        // aligned (page-aligned base, whole ciphers before it), and not yet
        // initialised; readers only look below `key_count`.
        unsafe {
            (self.keys.as_ptr() as *mut LessSafeKey)
                .add(index)
                .write(cipher)
        };
        self.key_count.store(index + 1, Ordering::Release);
        Ok(())
    }

    fn cipher(&self, index: usize) -> &LessSafeKey {
        // SAFETY: `index` < key_count, so the cipher there is initialised,
        // and it lives as long as `self`.
        unsafe { &*(self.keys.as_ptr() as *const LessSafeKey).add(index) }
    }

    fn raw_key_room(&self) -> *mut u8 {
        // SAFETY: the offset is inside the mapping (see `keys_len`).
        unsafe { self.keys.as_ptr().add(MAX_KEYS * size_of::<LessSafeKey>()) }
    }

    fn seal_ptr(&self, page: PageNo) -> *mut Seal {
        assert!((page as u64) < self.pages);
        // SAFETY: the table holds `pages` seals (page-aligned base).
        unsafe { (self.seals.as_ptr() as *mut Seal).add(page as usize) }
    }

    fn store_seal(&self, page: PageNo, seal: Seal) {
        // SAFETY: only the page's owner (`Evicting`) writes its seal, and
        // the page table's state change orders it before any read.
        unsafe { self.seal_ptr(page).write(seal) }
    }

    fn load_seal(&self, page: PageNo) -> Seal {
        // SAFETY: only the page's owner (`Loading`) reads its seal, after
        // the state change that followed the write.
        unsafe { self.seal_ptr(page).read() }
    }
}

impl Drop for PageCipher {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and no cipher is used any more.
        unsafe { std::ptr::write_bytes(self.keys.as_ptr(), 0, self.keys.len()) };
    }
}

pub(crate) fn keys_len() -> usize {
    (MAX_KEYS * size_of::<LessSafeKey>() + KEY_BYTES).next_multiple_of(4096)
}

/// The nonce of the `counter`-th page this process encrypts (unique under
/// its key, see the module docs).
fn nonce(counter: u64) -> Nonce {
    let mut bytes = [0u8; 12];
    bytes[..8].copy_from_slice(&counter.to_le_bytes());
    Nonce::assume_unique_for_key(bytes)
}

/// The associated data: which page, in which slot.
fn identity(page: PageNo, slot: u64) -> [u8; 12] {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&page.to_le_bytes());
    bytes[4..].copy_from_slice(&slot.to_le_bytes());
    bytes
}

/// Keys stay in DRAM and out of core dumps.
fn lock_in_dram(keys: &Mapping) -> Result<()> {
    // SAFETY: mlock and madvise on a mapping we own, over its whole length.
    let locked = unsafe { libc::mlock(keys.as_ptr().cast(), keys.len()) };
    if locked != 0 {
        return Err(Error::Os {
            what: "locking the encryption keys in DRAM (mlock; raise the locked-memory limit, ulimit -l, to at least 64 KiB)",
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: as above; a failure only means the keys could reach a core dump.
    unsafe { libc::madvise(keys.as_ptr().cast(), keys.len(), libc::MADV_DONTDUMP) };
    Ok(())
}

fn fill_random(buf: &mut [u8]) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: getrandom writes at most `len - done` bytes into `buf[done..]`.
        let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), buf.len() - done, 0) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::Os {
                what: "drawing a random encryption key (getrandom)",
                source: err,
            });
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(seed: u8) -> Vec<u8> {
        (0..4096u32).map(|i| (i as u8).wrapping_mul(seed)).collect()
    }

    #[test]
    fn a_page_comes_back_and_the_store_never_sees_it() {
        let c = PageCipher::new(16).unwrap();
        let plain = page(7);
        let mut stored = vec![0u8; 4096];
        c.encrypt(3, 40, plain.as_ptr(), &mut stored);
        let alike = stored.iter().zip(&plain).filter(|(s, p)| s == p).count();
        assert!(
            alike < 64,
            "{alike} of 4096 bytes went to the store as they were"
        );
        let mut back = stored.clone();
        assert!(c.decrypt(3, 40, &mut back));
        assert_eq!(back, plain);
    }

    #[test]
    fn damage_and_misplacement_are_caught() {
        let c = PageCipher::new(16).unwrap();
        let mut stored = vec![0u8; 4096];
        c.encrypt(3, 40, page(5).as_ptr(), &mut stored);
        let mut flipped = stored.clone();
        flipped[1000] ^= 1;
        assert!(!c.decrypt(3, 40, &mut flipped), "a flipped bit");
        assert!(!c.decrypt(3, 41, &mut stored.clone()), "the wrong slot");
        let mut other = vec![0u8; 4096];
        c.encrypt(4, 41, page(9).as_ptr(), &mut other);
        assert!(!c.decrypt(3, 40, &mut other), "another page's bytes");
    }

    #[test]
    fn the_same_page_written_twice_is_never_the_same_ciphertext() {
        let c = PageCipher::new(16).unwrap();
        let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
        c.encrypt(1, 1, page(3).as_ptr(), &mut a);
        c.encrypt(1, 1, page(3).as_ptr(), &mut b);
        assert_ne!(a, b, "a nonce was reused");
        assert!(c.decrypt(1, 1, &mut b));
    }

    #[test]
    fn a_child_reads_with_the_parents_key_and_writes_with_its_own() {
        let c = PageCipher::new(16).unwrap();
        let mut parents = vec![0u8; 4096];
        c.encrypt(2, 7, page(11).as_ptr(), &mut parents);
        c.rekey_in_child().unwrap();
        let mut childs = vec![0u8; 4096];
        c.encrypt(5, 9, page(13).as_ptr(), &mut childs);
        assert!(c.decrypt(2, 7, &mut parents));
        assert_eq!(parents, page(11));
        assert!(c.decrypt(5, 9, &mut childs));
        assert_eq!(childs, page(13));
        for _ in 0..MAX_KEYS {
            c.rekey_in_child().unwrap();
        }
        assert_eq!(c.key_count.load(Ordering::Relaxed), MAX_KEYS);
    }
}
