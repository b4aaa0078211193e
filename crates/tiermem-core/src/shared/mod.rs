//! The runtime's shared state: what the API, the fault handlers and the
//! evictor all reach, through one `Arc<Shared>`.
//!
//! It sits below the threads that use it: the fault stages (`fault`), the
//! evictor (`evictor`) and the runtime's API (`runtime`) all import it, and
//! it imports none of them. Its state types are declared where their
//! behaviour is (`fault::write_prediction`, `fault::signal::slots`, ...)
//! and carry no reference back to it. The operations on it that both sides
//! use are grouped by concern:
//! - [`dram`]: charging the budget and waking the evictor;
//! - [`store_io`]: checked reads, sealed writes, and what a failed store
//!   I/O does;
//! - [`compressed`]: the compressed tier's objects.

mod compressed;
mod dram;
mod store_io;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use crossbeam_queue::SegQueue;

use crate::budget::Budget;
use crate::compress::CompressedTier;
use crate::config::{Config, FaultDelivery};
use crate::encryption::PageCipher;
use crate::error::Result;
use crate::error_policy::Injector;
use crate::fault::neighbours::NeighbourReads;
use crate::fault::signal::slots::SignalSlots;
use crate::fault::write_prediction::WritePrediction;
use crate::fault::zero_stream::{ZeroStream, MAX_WINDOW as ZERO_AHEAD_MAX};
use crate::fork::cell::{ForkCell, InFlight};
use crate::frames::{FramePool, BATCH};
use crate::integrity::Checksums;
use crate::organization::WritePolicy;
use crate::page_table::{PageNo, PageState, PageTable, MAX_PAGES};
use crate::pause::Pause;
use crate::pins::Pins;
use crate::policy::{new_policy, Policy};
use crate::ranges::RangeAllocator;
use crate::replaceable::Replaceable;
use crate::sets::SetMap;
use crate::stats::{Counters, LatencyHistogram};
use crate::store::{FileStore, SlotAllocator, Store};
use crate::store_errors::StoreErrors;
use crate::sys::base_page_size;
use crate::sys::mem::{EventFd, Mapping};
use crate::sys::uffd::{Fault, Uffd};

/// Most address space one arena reserves (it costs page tables only when
/// used). x86-64 user space is 128 TiB, and a process may hold several
/// runtimes (tests do), so 4 TiB each.
const MAX_ARENA_BYTES: u64 = 4 << 40;

/// State shared by the API, the handler threads and the evictor.
pub(crate) struct Shared {
    pub config: Config,
    pub page_size: usize,
    pub base_page: usize,
    pub uffd: Uffd,
    pub arena: Mapping,
    pub table: PageTable,
    store: Replaceable<dyn Store>,
    slots: Replaceable<SlotAllocator>,
    pub policy: Box<dyn Policy>,
    pub budget: Budget,
    /// Set-associative placement, if configured (`None`: fully associative).
    pub sets: Option<SetMap>,
    /// Write-through: pages written since they were last copied out, for
    /// the evictor to copy out (`None`: write-back).
    pub written: Option<SegQueue<PageNo>>,
    /// Whether read faults should install their pages writable.
    pub write_prediction: WritePrediction,
    /// Whether read-ahead windows should go in writable: the same score,
    /// kept apart, of the pages read ahead and installed protected
    /// (`fault::ring::streams`).
    pub read_ahead_writes: WritePrediction,
    pub frames: FramePool,
    /// What faulting threads read pages with, under signal delivery.
    pub signal_slots: Option<SignalSlots>,
    /// Zeros for a first touch and the pages filled ahead of it: never
    /// written, so it costs no memory.
    pub zero_run: Mapping,
    /// Where a run of first touches in order is going (`fault::zero_ahead`).
    pub zero_stream: ZeroStream,
    /// Whether misses come in adjacent pairs (`fault::neighbours`).
    pub neighbours: NeighbourReads,
    pub counters: Counters,
    pub fault_latency: LatencyHistogram,
    /// Demand page-ins only: from reading the fault to installing the page.
    pub page_in_latency: LatencyHistogram,
    /// The device read of a demand page-in, as the handler sees it.
    pub read_latency: LatencyHistogram,
    pub ranges: Mutex<RangeAllocator>,
    /// The lazily committed zone at the top of the arena (transparent mode:
    /// the malloc arena and interposed mmaps). Its pages take a slot
    /// commitment on first touch, like the kernel's overcommit, instead of
    /// at allocation.
    pub lazy: Mutex<RangeAllocator>,
    pub lazy_start: PageNo,
    stop: AtomicBool,
    pub stop_event: EventFd,
    /// Read-ahead has news for a handler: a fault served a marker another
    /// handler parked, so the parking handler continues the stream (see
    /// `fault::ring`), or, under signal delivery, a faulting thread queued
    /// a window or reached a marker (see `fault::signal`).
    pub read_ahead_event: EventFd,
    /// Until when (`now_ns`) the fault handlers poll instead of sleeping:
    /// moved forward by every event any handler handles, so that a
    /// handler with nothing to do keeps its vCPU awake while another
    /// serves the faults (see `fault::ring`'s idle spin).
    pub paging_until_ns: AtomicU64,
    pub pause: Pause,
    /// Pages in probation, in order, while no evictor thread holds them
    /// (before it starts, while it is parked for a fork).
    probation_queue: Mutex<VecDeque<PageNo>>,
    /// How faults read pages, for the stats (set by the first handler).
    io_engine: Mutex<&'static str>,
    /// How the evictor writes pages, for the stats (set by the evictor).
    write_engine: Mutex<&'static str>,
    io_fallback_reported: AtomicBool,
    evictor_wake: (Mutex<bool>, Condvar),
    /// What the fork handlers hold between prepare and parent or child.
    pub(crate) fork_in_flight: ForkCell<InFlight>,
    bad_access_reported: AtomicBool,
    /// The sum of every page in the store, checked when it is read back.
    pub checksums: Checksums,
    /// Encryption at rest, when on (it authenticates, so checksums are off).
    pub(crate) cipher: Option<PageCipher>,
    /// Pages the evictor must leave in DRAM: under I/O, or locked.
    pub(crate) pins: Pins,
    /// Pages locked now (mlock).
    pub(crate) locked_pages: AtomicU64,
    /// Pages pinned for I/O now, counted once per pin.
    pub(crate) pinned_for_io: AtomicU64,
    /// Every range locked since the last `munlockall` (a superset of what
    /// is locked now), so that it need not visit the whole arena.
    pub(crate) locked_ranges: Mutex<Vec<std::ops::Range<PageNo>>>,
    /// Pages a forked child must read as zeros (`MADV_WIPEONFORK`; see
    /// `transparent::fork_advice`).
    pub(crate) wipe_on_fork: Mutex<rangemap::RangeSet<PageNo>>,
    /// Ranges of the arena where the program mapped memory tiermem does not
    /// tier (`transparent::foreign`); their pages are `Foreign`.
    foreign: Mutex<Vec<std::ops::Range<PageNo>>>,
    /// The evictor thread's id (0 before it starts), for faults it takes
    /// itself (`fault::discarded`).
    evictor_tid: AtomicU32,
    /// The page the evictor is copying (`fault::copy_watch`).
    pub(crate) copy_watch: crate::fault::copy_watch::CopyWatch,
    /// Reads and writes a test makes fail (`TIERMEM_INJECT_FAULTS`).
    pub(crate) injector: Injector,
    pub(crate) store_errors: StoreErrors,
    /// Evicted pages kept compressed in DRAM (`None`: `TIERMEM_COMPRESS=off`).
    pub(crate) compressed: Option<CompressedTier>,
    /// Faults served from the compressed tier: claim to install.
    pub compressed_hit_latency: LatencyHistogram,
}

impl Shared {
    /// Opens the store, sets up userfaultfd and reserves the arena and the
    /// runtime's own memory: everything but the threads.
    pub(crate) fn new(config: Config) -> Result<Shared> {
        let page_size = config.page_size;
        let store = FileStore::open(&config.backing, page_size, config.backing_size)?;
        store.warn_if_buffered();
        let signals = config.faults == FaultDelivery::Signal;
        let uffd = Uffd::open(signals)?;
        uffd.handshake()?;
        let capacity = store.capacity_slots();
        let arena_pages = MAX_PAGES.min(MAX_ARENA_BYTES / page_size as u64);
        let strict_pages = capacity.saturating_mul(2).min(arena_pages / 2);
        let lazy_pages = arena_pages - strict_pages;
        let arena_len = arena_pages as usize * page_size;
        let arena = Mapping::reserve_aligned(arena_len, page_size, "reserving the tiered arena")?;
        // Transparent huge pages would map memory behind userfaultfd's back.
        // SAFETY: advice on our own fresh mapping.
        let _ = unsafe { crate::sys::raw::madvise(arena.addr(), arena_len, libc::MADV_NOHUGEPAGE) };
        uffd.register(arena.addr(), arena_len)?;
        let budget_pages = config.budget_pages();
        let frames = FramePool::new(frame_capacity(page_size, config.handler_threads), page_size)?;
        let errors = config.errors;
        let table = if signals {
            PageTable::with_owner_waits(arena_pages, page_size)?
        } else {
            PageTable::with_page_size(arena_pages, page_size)?
        };
        Ok(Shared {
            page_size,
            base_page: base_page_size(),
            table,
            slots: Replaceable::new(Box::new(SlotAllocator::new(capacity)?)),
            policy: new_policy(config.policy),
            budget: Budget::new(budget_pages),
            sets: config
                .organization
                .sets(budget_pages)
                .map(|(sets, ways, victims)| SetMap::new(sets, ways, victims)),
            written: (config.organization.write_policy == WritePolicy::WriteThrough)
                .then(SegQueue::new),
            write_prediction: WritePrediction::for_config(&config),
            read_ahead_writes: WritePrediction::for_config(&config),
            frames,
            signal_slots: signals.then(|| SignalSlots::new(&config)).transpose()?,
            zero_run: Mapping::reserve_aligned(
                (ZERO_AHEAD_MAX as usize + 1) * page_size,
                page_size,
                "reserving zeros for first touches",
            )?,
            zero_stream: ZeroStream::new(),
            neighbours: NeighbourReads::default(),
            counters: Counters::default(),
            fault_latency: LatencyHistogram::default(),
            page_in_latency: LatencyHistogram::default(),
            read_latency: LatencyHistogram::default(),
            ranges: Mutex::new(RangeAllocator::new(strict_pages)),
            lazy: Mutex::new(RangeAllocator::zone(strict_pages, lazy_pages)),
            lazy_start: strict_pages as PageNo,
            stop: AtomicBool::new(false),
            stop_event: EventFd::new()?,
            read_ahead_event: EventFd::new()?,
            paging_until_ns: AtomicU64::new(0),
            pause: Pause::new()?,
            probation_queue: Mutex::new(VecDeque::new()),
            io_engine: Mutex::new("pread"),
            write_engine: Mutex::new("pwritev"),
            io_fallback_reported: AtomicBool::new(false),
            evictor_wake: (Mutex::new(false), Condvar::new()),
            fork_in_flight: ForkCell::empty(),
            bad_access_reported: AtomicBool::new(false),
            checksums: Checksums::new(arena_pages, errors.checksums && !errors.encrypt)?,
            pins: Pins::new(arena_pages)?,
            locked_pages: AtomicU64::new(0),
            pinned_for_io: AtomicU64::new(0),
            locked_ranges: Mutex::new(Vec::new()),
            wipe_on_fork: Mutex::new(rangemap::RangeSet::new()),
            foreign: Mutex::new(Vec::new()),
            evictor_tid: AtomicU32::new(0),
            copy_watch: crate::fault::copy_watch::CopyWatch::new(),
            cipher: match errors.encrypt {
                true => Some(PageCipher::new(arena_pages)?),
                false => None,
            },
            injector: Injector::new(errors.inject),
            store_errors: StoreErrors::default(),
            compressed: CompressedTier::new(config.compress, page_size)?,
            compressed_hit_latency: LatencyHistogram::default(),
            store: Replaceable::new(Box::new(store)),
            uffd,
            arena,
            config,
        })
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Tells every runtime thread to stop (they see it in [`Self::stopping`]).
    pub(crate) fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// The backing store (a forked child swaps in its own).
    #[inline]
    pub fn store(&self) -> &dyn Store {
        self.store.get()
    }

    /// In a forked child: pins and locks are the parent's (see
    /// `Pins::forget_all_in_child`).
    pub(crate) fn forget_pins_in_child(&self) {
        self.pins.forget_all_in_child();
        self.locked_pages.store(0, Ordering::Relaxed);
        self.pinned_for_io.store(0, Ordering::Relaxed);
        self.locked_ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// The list of locked ranges, for the fork handlers to hold across a
    /// fork: program threads take it in `mlock`, which the fork does not
    /// pause, and a child must not inherit it locked.
    pub(crate) fn locked_ranges_guard(
        &self,
    ) -> std::sync::MutexGuard<'_, Vec<std::ops::Range<PageNo>>> {
        self.locked_ranges.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The evictor thread's id, 0 before it starts.
    pub(crate) fn evictor_thread_id(&self) -> u32 {
        self.evictor_tid.load(Ordering::Relaxed)
    }

    /// Records the calling thread as the evictor.
    pub(crate) fn set_evictor_thread(&self) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        self.evictor_tid.store(tid, Ordering::Relaxed);
    }

    /// The ranges foreign mappings hold (see `transparent::foreign`).
    pub(crate) fn foreign_ranges(&self) -> std::sync::MutexGuard<'_, Vec<std::ops::Range<PageNo>>> {
        self.foreign.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The arena less the ranges foreign mappings hold: what is registered
    /// with userfaultfd, as address ranges in ascending order.
    pub(crate) fn tiered_spans(&self) -> Vec<std::ops::Range<usize>> {
        let mut foreign = self.foreign_ranges().clone();
        foreign.sort_by_key(|r| r.start);
        let mut spans = Vec::with_capacity(foreign.len() + 1);
        let mut at = self.arena.addr();
        for r in foreign {
            let (from, to) = (self.page_addr(r.start), self.page_addr(r.end));
            if from > at {
                spans.push(at..from);
            }
            at = at.max(to);
        }
        let end = self.arena.addr() + self.arena.len();
        if end > at {
            spans.push(at..end);
        }
        spans
    }

    pub(crate) fn store_cell(&self) -> &Replaceable<dyn Store> {
        &self.store
    }

    pub(crate) fn slots_cell(&self) -> &Replaceable<SlotAllocator> {
        &self.slots
    }

    /// Slot allocation for the store.
    #[inline]
    pub fn slots(&self) -> &SlotAllocator {
        self.slots.get()
    }

    #[inline]
    pub fn page_of(&self, addr: usize) -> Option<PageNo> {
        let offset = addr.checked_sub(self.arena.addr())?;
        (offset < self.arena.len()).then(|| (offset / self.page_size) as PageNo)
    }

    #[inline]
    pub fn page_addr(&self, page: PageNo) -> usize {
        self.arena.addr() + page as usize * self.page_size
    }

    /// The arena's pages that `[addr, addr + len)` touches.
    pub fn pages_in(&self, addr: usize, len: usize) -> std::ops::Range<PageNo> {
        let arena = (self.arena.addr(), self.arena.addr() + self.arena.len());
        let (from, to) = (addr.max(arena.0), addr.saturating_add(len).min(arena.1));
        if from >= to {
            return 0..0;
        }
        let first = ((from - arena.0) / self.page_size) as PageNo;
        let end = (to - arena.0).div_ceil(self.page_size) as PageNo;
        first..end
    }

    /// How faults read pages, for the stats.
    pub fn io_engine(&self) -> &'static str {
        *self.io_engine.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How the evictor writes pages, for the stats.
    pub fn write_engine(&self) -> &'static str {
        *self.write_engine.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn note_io_engine(&self, engine: &'static str) {
        *self.io_engine.lock().unwrap_or_else(|p| p.into_inner()) = engine;
    }

    pub fn note_write_engine(&self, engine: &'static str) {
        *self.write_engine.lock().unwrap_or_else(|p| p.into_inner()) = engine;
    }

    /// io_uring could not be set up: say why once, and read with pread.
    pub fn note_io_fallback(&self, reason: &str) {
        self.note_io_engine("pread (io_uring unavailable)");
        if !self.io_fallback_reported.swap(true, Ordering::Relaxed) {
            eprintln!("tiermem: io_uring is unavailable ({reason}); page reads use pread, one at a time per handler thread");
        }
    }

    pub fn take_probation_queue(&self) -> VecDeque<PageNo> {
        std::mem::take(
            &mut *self
                .probation_queue
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }

    pub fn return_probation_queue(&self, queue: VecDeque<PageNo>) {
        *self
            .probation_queue
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = queue;
    }

    /// Whether `page` lies in the lazily committed zone.
    #[inline]
    pub fn is_lazy(&self, page: PageNo) -> bool {
        page >= self.lazy_start
    }

    /// Commits a slot for the first touch of a lazily committed page. Running
    /// out here cannot be reported to the program, so it stops loudly.
    pub fn commit_lazy_page(&self, page: PageNo) {
        if let Err(e) = self.slots().commit(1, self.store()) {
            self.fatal(&format!(
                "page {page} was touched for the first time but the backing store is full ({e}); give tiermem a larger --backing"
            ));
        }
    }

    /// A fault on an address no allocation covers: a use after free or a
    /// wild pointer. The thread gets SIGSEGV, as it would without tiermem.
    pub fn report_bad_access(&self, fault: &Fault) {
        Counters::add(&self.counters.bad_accesses, 1);
        if !self.bad_access_reported.swap(true, Ordering::Relaxed) {
            eprintln!(
                "tiermem: thread {} accessed {:#x}, which is not part of any live tiermem allocation (use after free?)",
                fault.thread_id, fault.address
            );
        }
        // SAFETY: tgkill sends a signal to a thread of our own process.
        unsafe {
            libc::syscall(
                libc::SYS_tgkill,
                libc::getpid(),
                fault.thread_id as i32,
                libc::SIGSEGV,
            )
        };
    }

    /// A read-ahead page leaves DRAM without having been used.
    pub(crate) fn count_if_wasted(&self, state: PageState) {
        if state.is_prefetched() {
            Counters::add(&self.counters.prefetch_wasted, 1);
        }
    }

    /// A state the runtime cannot recover from without risking data: stop
    /// loudly rather than hand out wrong bytes.
    pub fn fatal(&self, msg: &str) -> ! {
        eprintln!("tiermem: fatal: {msg}");
        std::process::abort();
    }
}

/// Frames for probation at the largest sensible budget (all of RAM) plus
/// write-back staging; only what is used ever materialises.
fn frame_capacity(page_size: usize, handler_threads: usize) -> u32 {
    let ram = crate::sys::physical_ram_bytes();
    let probation = ram / 8 / page_size as u64;
    (probation + 4 * BATCH as u64 + handler_threads as u64).min(u32::MAX as u64) as u32
}
