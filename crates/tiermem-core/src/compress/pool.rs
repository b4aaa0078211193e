//! The compressed pool: objects packed end to end in DRAM segments.
//!
//! One reservation, lazily committed, cut into segments. The evictor
//! appends objects to the head segment, back to back, 8-byte aligned, so a
//! page that compresses to a quarter takes a quarter of a frame and no
//! size class rounds it up. A full head is sealed and a fresh segment
//! taken. Freeing an object only subtracts its size from its segment's
//! live count (an atomic, so a fault frees without a lock); a sealed
//! segment whose count reaches zero goes back to the kernel. Holes left by
//! freed objects are closed by moving the live objects of the sparsest
//! segment to the head (the evictor's compaction), the way zsmalloc
//! compacts its zspages.
//!
//! An object is a 12-byte header (page, sequence number, length, whose
//! top two bits mark a block compressed with a dictionary and name its
//! slot) and its bytes. The handle of an object is its offset in 8-byte units, so a u32
//! handle addresses 32 GiB of pool.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::Result;
use crate::page_table::PageNo;
use crate::sys::mem::{zap, Mapping};

const HEADER: usize = 12;
const ALIGN: usize = 8;
/// The length field of a same-filled page's object, whose body is the word.
const SAME_FILLED: u32 = u32::MAX;
/// Set in the length field of an object compressed with a dictionary (a
/// length is at most a page, far below these bits)...
const WITH_DICTIONARY: u32 = 1 << 31;
/// ...and the dictionary's slot, 0 or 1.
const DICTIONARY_SLOT: u32 = 1 << 30;
/// Largest pool the u32 handles address.
pub const MAX_POOL_BYTES: u64 = (u32::MAX as u64 + 1) * ALIGN as u64;
/// The fullest segment worth compacting: moving 90% of a segment to free
/// it gains a tenth of one, for a memcpy of under 60 KiB.
const COMPACTABLE_PERCENT: usize = 90;
/// The smallest segment: small enough that a segment empties out in a
/// working set's lifetime, large enough to hold many objects.
const MIN_SEGMENT: usize = 64 << 10;

/// An object's content.
#[derive(Clone, Copy)]
pub enum Body<'a> {
    SameFilled(u64),
    Lz4(&'a [u8]),
    /// An LZ4 block that decodes only with the dictionary in this slot.
    Lz4WithDictionary(&'a [u8], u8),
}

impl Body<'_> {
    pub fn len(&self) -> usize {
        match self {
            Body::SameFilled(_) => 8,
            Body::Lz4(b) | Body::Lz4WithDictionary(b, _) => b.len(),
        }
    }
}

/// An object as read back.
pub struct Object<'a> {
    pub page: PageNo,
    pub seq: u32,
    pub body: Body<'a>,
    /// Bytes it takes in its segment, header and alignment included.
    pub size: usize,
}

/// What an append did.
pub enum Appended {
    /// Stored at `handle`; `new_segments` segments were committed for it.
    At { handle: u32, new_segments: u32 },
    /// No segment is left under the cap.
    Full,
}

/// The segments' bookkeeping, kept by the evictor (appends, sealing,
/// reclaim and compaction all happen on its thread).
struct Log {
    /// The segment objects are appended to, and its bytes used so far.
    head: Option<(u32, usize)>,
    /// Bytes used in each segment ever taken (what a walk of it covers).
    used: Vec<u32>,
    /// Returned segments (zapped, uncommitted), reused first.
    free: Vec<u32>,
    /// Full segments, roughly oldest first.
    sealed: Vec<u32>,
}

pub struct Pool {
    memory: Mapping,
    segment_bytes: usize,
    capacity: u32,
    /// Live bytes of each segment: added by the evictor's appends,
    /// subtracted by whoever frees an object.
    live: Box<[AtomicU32]>,
    live_bytes: AtomicU64,
    objects: AtomicU64,
    /// Segments taken and not returned: the pool's DRAM.
    committed: AtomicU64,
    log: Mutex<Log>,
}

impl Pool {
    /// A pool of at most `max_bytes` for pages of `page_size`.
    pub fn new(max_bytes: u64, page_size: usize) -> Result<Pool> {
        let segment_bytes = MIN_SEGMENT.max(4 * page_size);
        let capacity = (max_bytes.min(MAX_POOL_BYTES) / segment_bytes as u64).max(2) as u32;
        let memory = Mapping::reserve_aligned(
            capacity as usize * segment_bytes,
            segment_bytes,
            "reserving the compressed pool",
        )?;
        Ok(Pool {
            memory,
            segment_bytes,
            capacity,
            live: (0..capacity).map(|_| AtomicU32::new(0)).collect(),
            live_bytes: AtomicU64::new(0),
            objects: AtomicU64::new(0),
            committed: AtomicU64::new(0),
            log: Mutex::new(Log {
                head: None,
                used: Vec::new(),
                free: Vec::new(),
                sealed: Vec::new(),
            }),
        })
    }

    pub fn segment_bytes(&self) -> usize {
        self.segment_bytes
    }
    pub fn committed_segments(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }
    pub fn committed_bytes(&self) -> u64 {
        self.committed_segments() * self.segment_bytes as u64
    }
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes.load(Ordering::Relaxed)
    }
    pub fn objects(&self) -> u64 {
        self.objects.load(Ordering::Relaxed)
    }

    /// Largest object an append takes.
    pub fn object_size(body_len: usize) -> usize {
        (HEADER + body_len).next_multiple_of(ALIGN)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether an object of `size` bytes fits without committing beyond
    /// `cap` segments.
    pub fn has_room(&self, size: usize, cap: u64) -> bool {
        let log = self.lock();
        log.head
            .is_some_and(|(_, used)| used + size <= self.segment_bytes)
            || self.committed_segments() < cap.min(self.capacity as u64)
    }

    /// Whether an object of `size` bytes fits in the head segment, so that
    /// appending it commits no new segment.
    pub fn head_fits(&self, size: usize) -> bool {
        self.lock()
            .head
            .is_some_and(|(_, used)| used + size <= self.segment_bytes)
    }

    /// Appends an object, committing a fresh head if the current one is
    /// full and fewer than `cap` segments are committed.
    pub fn append(&self, page: PageNo, seq: u32, body: Body<'_>, cap: u64) -> Appended {
        let size = Self::object_size(body.len());
        assert!(size <= self.segment_bytes, "object larger than a segment");
        let mut log = self.lock();
        let mut new_segments = 0;
        let (seg, used) = match log.head {
            Some((seg, used)) if used + size <= self.segment_bytes => (seg, used),
            _ => {
                if self.committed_segments() >= cap.min(self.capacity as u64) {
                    return Appended::Full;
                }
                let Some(seg) = self.take_segment(&mut log) else {
                    return Appended::Full;
                };
                new_segments = 1;
                (seg, 0)
            }
        };
        let offset = seg as usize * self.segment_bytes + used;
        // SAFETY: `offset + size` lies inside segment `seg`, which only the
        // head holds and no object covers yet; the pool's memory is ours.
        unsafe { self.write_object(offset, page, seq, body) };
        log.head = Some((seg, used + size));
        log.used[seg as usize] = (used + size) as u32;
        self.live[seg as usize].fetch_add(size as u32, Ordering::AcqRel);
        self.live_bytes.fetch_add(size as u64, Ordering::Relaxed);
        self.objects.fetch_add(1, Ordering::Relaxed);
        Appended::At {
            handle: (offset / ALIGN) as u32,
            new_segments,
        }
    }

    /// Seals the head and takes a segment: a returned one, or a new one.
    fn take_segment(&self, log: &mut Log) -> Option<u32> {
        let seg = match log.free.pop() {
            Some(seg) => seg,
            None if (log.used.len() as u32) < self.capacity => {
                log.used.push(0);
                log.used.len() as u32 - 1
            }
            None => return None,
        };
        if let Some((old, _)) = log.head.take() {
            log.sealed.push(old);
        }
        log.used[seg as usize] = 0;
        self.committed.fetch_add(1, Ordering::AcqRel);
        Some(seg)
    }

    /// # Safety
    /// `offset..offset + object_size(body)` must be pool memory no live
    /// object covers and no one else writes.
    unsafe fn write_object(&self, offset: usize, page: PageNo, seq: u32, body: Body<'_>) {
        let (len, bytes): (u32, &[u8]) = match &body {
            Body::SameFilled(w) => (SAME_FILLED, &w.to_ne_bytes()[..]),
            Body::Lz4(b) => (b.len() as u32, b),
            Body::Lz4WithDictionary(b, slot) => {
                let slot = if *slot == 0 { 0 } else { DICTIONARY_SLOT };
                (b.len() as u32 | WITH_DICTIONARY | slot, b)
            }
        };
        // SAFETY: the caller's guarantee; `bytes` may lie in the pool
        // (compaction moves an object), but never in the range written.
        unsafe {
            let at = self.memory.as_ptr().add(offset);
            let mut header = [0u8; HEADER];
            header[0..4].copy_from_slice(&page.to_ne_bytes());
            header[4..8].copy_from_slice(&seq.to_ne_bytes());
            header[8..12].copy_from_slice(&len.to_ne_bytes());
            std::ptr::copy_nonoverlapping(header.as_ptr(), at, HEADER);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at.add(HEADER), bytes.len());
        }
    }

    /// The object at `handle`.
    ///
    /// # Safety
    /// `handle` must name a live object whose page the caller owns (or the
    /// pool's own walk of a segment, on the evictor's thread), so that no
    /// one frees and reuses its bytes meanwhile.
    pub unsafe fn object(&self, handle: u32) -> Object<'_> {
        let offset = handle as usize * ALIGN;
        assert!(
            offset + HEADER <= self.memory.len(),
            "pool handle out of range"
        );
        // SAFETY: in range (checked); the caller keeps the object alive,
        // and its writer published it before the page's state said so.
        unsafe {
            let at = self.memory.as_ptr().add(offset);
            let word = |i: usize| {
                let mut w = [0u8; 4];
                std::ptr::copy_nonoverlapping(at.add(i), w.as_mut_ptr(), 4);
                u32::from_ne_bytes(w)
            };
            let (page, seq, len) = (word(0), word(4), word(8));
            let body = if len == SAME_FILLED {
                let mut w = [0u8; 8];
                std::ptr::copy_nonoverlapping(at.add(HEADER), w.as_mut_ptr(), 8);
                Body::SameFilled(u64::from_ne_bytes(w))
            } else {
                let bytes = (len & !(WITH_DICTIONARY | DICTIONARY_SLOT)) as usize;
                assert!(
                    offset + HEADER + bytes <= self.memory.len(),
                    "pool object overruns the pool"
                );
                let block = std::slice::from_raw_parts(at.add(HEADER), bytes);
                match (len & WITH_DICTIONARY, len & DICTIONARY_SLOT) {
                    (0, _) => Body::Lz4(block),
                    (_, 0) => Body::Lz4WithDictionary(block, 0),
                    _ => Body::Lz4WithDictionary(block, 1),
                }
            };
            Object {
                page,
                seq,
                size: Self::object_size(body.len()),
                body,
            }
        }
    }

    /// Frees the object at `handle`, of `size` bytes. Lock-free: a fault
    /// that installed the page calls it.
    pub fn release(&self, handle: u32, size: usize) {
        let seg = handle as usize * ALIGN / self.segment_bytes;
        self.live[seg].fetch_sub(size as u32, Ordering::AcqRel);
        self.live_bytes.fetch_sub(size as u64, Ordering::Relaxed);
        self.objects.fetch_sub(1, Ordering::Relaxed);
    }

    /// Returns sealed segments with nothing live to the kernel. Returns how
    /// many went back.
    pub fn reclaim_empty(&self) -> u64 {
        let mut log = self.lock();
        let mut returned = Vec::new();
        log.sealed.retain(|&seg| {
            let empty = self.live[seg as usize].load(Ordering::Acquire) == 0;
            if empty {
                returned.push(seg);
            }
            !empty
        });
        for &seg in &returned {
            let addr = self.memory.addr() + seg as usize * self.segment_bytes;
            // Failing to give DRAM back loses nothing: the segment is
            // simply reused as it is.
            let _ = zap(addr, self.segment_bytes);
            log.used[seg as usize] = 0;
            log.free.push(seg);
        }
        let n = returned.len() as u64;
        self.committed.fetch_sub(n, Ordering::AcqRel);
        n
    }

    /// The sealed segment with the fewest live bytes, if at most
    /// [`COMPACTABLE_PERCENT`] full: moving its objects out frees a
    /// segment for at most that much copying.
    pub fn sparsest_sealed(&self) -> Option<u32> {
        let log = self.lock();
        let (seg, live) = log
            .sealed
            .iter()
            .map(|&s| (s, self.live[s as usize].load(Ordering::Acquire)))
            .min_by_key(|&(_, live)| live)?;
        (live as usize * 100 <= self.segment_bytes * COMPACTABLE_PERCENT).then_some(seg)
    }

    /// The handles of every object ever appended to `seg` (live or not).
    pub fn handles_in(&self, seg: u32, out: &mut Vec<u32>) {
        out.clear();
        let used = self.lock().used[seg as usize] as usize;
        let start = seg as usize * self.segment_bytes;
        let mut at = 0;
        while at < used {
            let handle = ((start + at) / ALIGN) as u32;
            out.push(handle);
            // SAFETY: `at < used`, so an object was written here; its
            // header stays readable whether or not it is live (segments in
            // use are never zapped).
            at += unsafe { self.object(handle) }.size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(a: Appended) -> u32 {
        match a {
            Appended::At { handle, .. } => handle,
            Appended::Full => panic!("pool full"),
        }
    }

    #[test]
    fn objects_pack_end_to_end_and_read_back() {
        let pool = Pool::new(1 << 20, 4096).unwrap();
        let a = handle(pool.append(7, 1, Body::Lz4(&[1, 2, 3]), 4));
        let b = handle(pool.append(8, 2, Body::SameFilled(0xfeed), 4));
        let c = handle(pool.append(9, 3, Body::Lz4WithDictionary(&[4, 5], 1), 4));
        let d = handle(pool.append(9, 4, Body::Lz4WithDictionary(&[6], 0), 4));
        assert_eq!((b - a) as usize * ALIGN, Pool::object_size(3), "no gap");
        // SAFETY: the objects are live and the test owns their pages.
        let (oa, ob, oc, od) = unsafe {
            (
                pool.object(a),
                pool.object(b),
                pool.object(c),
                pool.object(d),
            )
        };
        assert!(matches!(oa.body, Body::Lz4(&[1, 2, 3])) && oa.page == 7 && oa.seq == 1);
        assert!(matches!(ob.body, Body::SameFilled(0xfeed)) && ob.page == 8);
        assert!(matches!(oc.body, Body::Lz4WithDictionary(&[4, 5], 1)) && oc.size == 16);
        assert!(matches!(od.body, Body::Lz4WithDictionary(&[6], 0)));
        assert_eq!(pool.objects(), 4);
        assert_eq!(pool.committed_segments(), 1);
    }

    #[test]
    fn the_cap_holds_and_empty_segments_go_back() {
        let pool = Pool::new(1 << 20, 4096).unwrap();
        let big = vec![9u8; 3000];
        let per_segment = pool.segment_bytes() / Pool::object_size(big.len());
        let mut handles = Vec::new();
        while let Appended::At { handle, .. } = pool.append(1, 0, Body::Lz4(&big), 2) {
            handles.push(handle);
        }
        assert_eq!(handles.len(), 2 * per_segment, "two segments' worth");
        assert_eq!(pool.committed_segments(), 2);
        for &h in &handles[..per_segment] {
            pool.release(h, Pool::object_size(big.len()));
        }
        // The first segment is sealed (the head moved on), so it goes back.
        assert_eq!(pool.reclaim_empty(), 1);
        assert_eq!(pool.committed_segments(), 1);
        assert!(pool.has_room(Pool::object_size(big.len()), 2));
        let mut walked = Vec::new();
        pool.handles_in(
            handles[per_segment] * ALIGN as u32 / pool.segment_bytes() as u32,
            &mut walked,
        );
        assert_eq!(walked, handles[per_segment..].to_vec());
    }

    #[test]
    fn the_sparsest_sealed_segment_is_found_once_a_tenth_is_free() {
        let pool = Pool::new(1 << 20, 4096).unwrap();
        let obj = vec![5u8; 1000];
        let size = Pool::object_size(obj.len());
        let per_segment = pool.segment_bytes() / size;
        let handles: Vec<u32> = (0..per_segment + 1)
            .map(|_| handle(pool.append(1, 0, Body::Lz4(&obj), 8)))
            .collect();
        assert_eq!(pool.sparsest_sealed(), None, "the sealed segment is full");
        for &h in &handles[..per_segment / 10 + 1] {
            pool.release(h, size);
        }
        assert_eq!(pool.sparsest_sealed(), Some(0));
    }
}
