//! The slots faulting threads read pages with under signal delivery: a
//! buffer for a miss and its read-ahead window, the list of pages claimed
//! for it, and a small io_uring, handed out without a lock.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

use io_uring::IoUring;

use super::read_ahead::ReadAheadRequests;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::fault::page_read::PageRead;
use crate::fault::readahead::Window;
use crate::fault::uring::cooperative_ring;
use crate::io_config::IoEngine;
use crate::page_table::PageNo;
use crate::sys::backoff;
use crate::sys::mem::Mapping;

/// What a faulting thread reads pages with: a buffer of `pages_per_slot`
/// direct-I/O aligned pages (the miss, and the pages a fixed prefetch
/// degree reads with it), the list of
/// pages claimed for it, and with the io_uring engine a small ring of its
/// own. Taken and given back without a lock (a bit per slot).
pub(crate) struct SignalSlots {
    memory: Mapping,
    page_size: usize,
    pub pages_per_slot: usize,
    /// One per slot, or none: pread.
    rings: Vec<UnsafeCell<IoUring>>,
    /// Entries of each ring's queue.
    ring_entries: u32,
    /// The rings say when a completion waits as task work
    /// (`IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG`, Linux 5.19).
    pub taskrun_flag: bool,
    /// One per slot, with room for `pages_per_slot` reads (never grows).
    reads: Vec<UnsafeCell<Vec<PageRead>>>,
    free: AtomicU64,
    /// Streams seen among misses, and the windows they ask the read-ahead
    /// thread for (adaptive read-ahead with io_uring).
    pub read_ahead: Option<ReadAheadRequests>,
    /// A fixed prefetch degree instead (part of a cache organization).
    prefetch: Option<u32>,
    /// CPUs the process may run on, when the slots were made.
    pub cpus: usize,
    /// How pages are read, for the stats.
    pub engine: &'static str,
    /// Why io_uring was wanted but not used.
    pub fallback: Option<String>,
}

// SAFETY: a slot's ring and read list are only used by the thread holding
// its bit in `free`, so no two threads ever touch them at once.
unsafe impl Sync for SignalSlots {}

/// A slot a faulting thread holds until it is dropped.
pub(super) struct Claimed<'a> {
    pub slots: &'a SignalSlots,
    index: u32,
    /// `slots.pages_per_slot` pages, one per read in `reads`, in order.
    pub buffer: *mut u8,
    pub ring: Option<&'a mut IoUring>,
    /// The demand read first, then the prefetched pages claimed with it.
    pub reads: &'a mut Vec<PageRead>,
}

impl SignalSlots {
    /// As many slots as threads likely to miss at once (at most 64), with
    /// a ring each under the io_uring engine, pread if rings cannot be made.
    pub fn new(config: &Config) -> Result<SignalSlots> {
        let cpus = crate::sys::thread::allowed_cpus().len().max(1);
        let count = (4 * cpus).clamp(8, 64);
        let page_size = config.page_size;
        let prefetch = config.organization.prefetch;
        // Adaptive windows are read by the read-ahead thread, an io_uring
        // handler; a fixed degree is read with the miss, in its slot.
        let adaptive =
            prefetch.is_none() && config.io.readahead && config.io.engine == IoEngine::IoUring;
        let pages_per_slot = 1 + prefetch.unwrap_or(0) as usize;
        let ring_entries = (pages_per_slot as u32).next_power_of_two().min(32_768);
        let (rings, engine, fallback) = match config.io.engine {
            IoEngine::Psync => (
                Vec::new(),
                "pread in the faulting thread (SIGBUS delivery, TIERMEM_IO_ENGINE=psync)",
                None,
            ),
            IoEngine::IoUring => match (0..count).map(|_| cooperative_ring(ring_entries)).collect()
            {
                Ok(rings) => (
                    rings,
                    "io_uring, polled, in the faulting thread (SIGBUS delivery)",
                    None,
                ),
                Err(e) => (
                    Vec::new(),
                    "pread in the faulting thread (SIGBUS delivery, io_uring unavailable)",
                    Some(format!("io_uring_setup: {e}")),
                ),
            },
        };
        let taskrun_flag = rings.iter().all(|(_, flag)| *flag);
        let rings = rings.into_iter().map(|(ring, _)| UnsafeCell::new(ring));
        Ok(SignalSlots {
            memory: Mapping::reserve_aligned(
                count * pages_per_slot * page_size,
                page_size,
                "allocating buffers for faulting threads",
            )?,
            page_size,
            pages_per_slot,
            rings: rings.collect(),
            ring_entries,
            taskrun_flag,
            reads: (0..count)
                .map(|_| UnsafeCell::new(Vec::with_capacity(pages_per_slot)))
                .collect(),
            free: AtomicU64::new(if count == 64 {
                u64::MAX
            } else {
                (1 << count) - 1
            }),
            // The read-ahead thread needs io_uring as much as the slots do.
            read_ahead: (adaptive && fallback.is_none()).then(|| ReadAheadRequests::new(page_size)),
            prefetch,
            cpus,
            engine,
            fallback,
        })
    }

    /// In a freshly forked child: a new ring for every slot. The inherited
    /// ones are the parent's, whose faulting threads still submit to them
    /// and reap from them; a child using them too would take the parent's
    /// completions and lose its own. Dropping one here unmaps and closes
    /// the child's references only.
    ///
    /// # Safety
    /// Only in the child's fork handler, on its only thread: no slot is
    /// claimed (the fork gate let no fault be in flight at the fork).
    pub(crate) unsafe fn replace_rings_in_child(&self) -> Result<()> {
        for cell in &self.rings {
            let (ring, _) = cooperative_ring(self.ring_entries)
                .map_err(Error::os("setting up a forked child's fault rings"))?;
            // SAFETY: no thread holds a slot (see above), so no reference
            // to this ring exists.
            unsafe { *cell.get() = ring };
        }
        Ok(())
    }

    /// Bytes of the slots' buffers (reserved; DRAM once used).
    pub fn buffer_bytes(&self) -> u64 {
        self.memory.len() as u64
    }

    /// What to read with a demand miss at `page`, in its slot: the fixed
    /// prefetch degree's pages.
    pub(super) fn window_after(&self, page: PageNo) -> Option<Window> {
        match self.prefetch? {
            0 => None,
            degree => Some(Window::next_pages(page, degree)),
        }
    }

    /// Takes a free slot, waiting (rarely: there are more slots than CPUs)
    /// for one to come back.
    pub(super) fn claim(&self) -> Claimed<'_> {
        loop {
            let free = self.free.load(Ordering::Acquire);
            if free == 0 {
                backoff();
                continue;
            }
            let index = free.trailing_zeros();
            let taken = free & !(1 << index);
            if self
                .free
                .compare_exchange_weak(free, taken, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                let i = index as usize;
                // SAFETY: `i` < count, so the offset stays inside the
                // mapping; the slot's bit is ours, so its ring and read
                // list are ours alone until the bit is given back on drop.
                let (buffer, ring, reads) = unsafe {
                    (
                        self.memory
                            .as_ptr()
                            .add(i * self.pages_per_slot * self.page_size),
                        self.rings.get(i).map(|r| &mut *r.get()),
                        &mut *self.reads[i].get(),
                    )
                };
                reads.clear();
                return Claimed {
                    slots: self,
                    index,
                    buffer,
                    ring,
                    reads,
                };
            }
        }
    }
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        self.slots.free.fetch_or(1 << self.index, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io_config::IoSettings;

    fn config(engine: IoEngine, readahead: bool) -> Config {
        Config::builder()
            .dram_budget(64 << 20)
            .io(IoSettings {
                engine,
                readahead,
                ..IoSettings::default()
            })
            .build()
            .expect("config")
    }

    fn kernel_at_least(major: u32, minor: u32) -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let mut next = || {
            parts
                .next()
                .and_then(|p| p.parse::<u32>().ok())
                .unwrap_or(0)
        };
        (next(), next()) >= (major, minor)
    }

    #[test]
    fn slots_are_handed_out_once_until_given_back() {
        for engine in [IoEngine::IoUring, IoEngine::Psync] {
            let slots = SignalSlots::new(&config(engine, true)).expect("slots");
            let count = slots.free.load(Ordering::Relaxed).count_ones();
            let held: Vec<_> = (0..count).map(|_| slots.claim()).collect();
            let mut buffers: Vec<_> = held.iter().map(|c| c.buffer as usize).collect();
            buffers.sort_unstable();
            buffers.dedup();
            assert_eq!(buffers.len(), count as usize, "each buffer once");
            assert!(
                buffers.iter().all(|p| p % 4096 == 0),
                "aligned for direct I/O"
            );
            assert!(
                buffers
                    .windows(2)
                    .all(|w| w[1] - w[0] >= slots.pages_per_slot * 4096),
                "buffers do not overlap"
            );
            assert_eq!(slots.free.load(Ordering::Relaxed), 0);
            let rings = held.iter().filter(|c| c.ring.is_some()).count();
            // No rings where io_uring cannot be set up (the fallback says why).
            let ringless = engine == IoEngine::Psync || slots.fallback.is_some();
            assert_eq!(rings, if ringless { 0 } else { count as usize });
            if rings > 0 && kernel_at_least(5, 19) {
                assert!(slots.taskrun_flag, "rings flag waiting task work");
            }
            drop(held);
            assert_eq!(slots.free.load(Ordering::Relaxed).count_ones(), count);
        }
    }

    #[test]
    fn a_slot_holds_the_miss_and_its_fixed_prefetch_degree() {
        let adaptive = SignalSlots::new(&config(IoEngine::IoUring, true)).expect("slots");
        assert_eq!(
            adaptive.pages_per_slot, 1,
            "windows go to the read-ahead thread"
        );
        assert!(adaptive.window_after(100).is_none());
        assert!(adaptive.read_ahead.is_some());
        let fixed = Config::builder()
            .dram_budget(64 << 20)
            .prefetch(3)
            .build()
            .expect("config");
        let fixed = SignalSlots::new(&fixed).expect("slots");
        assert_eq!(fixed.pages_per_slot, 4);
        assert!(
            fixed.read_ahead.is_none(),
            "a fixed degree replaces read-ahead"
        );
        let window = fixed.window_after(12).expect("the next three pages");
        assert_eq!((window.start, window.stride, window.count), (13, 1, 3));
    }

    #[test]
    fn no_read_ahead_thread_is_asked_for_without_io_uring_or_read_ahead() {
        for (engine, readahead) in [(IoEngine::Psync, true), (IoEngine::IoUring, false)] {
            let slots = SignalSlots::new(&config(engine, readahead)).expect("slots");
            assert!(
                slots.read_ahead.is_none(),
                "{engine:?}, read-ahead {readahead}"
            );
            assert_eq!(slots.pages_per_slot, 1);
        }
    }
}
