//! The runtime: one registered arena, its page table, the store, the policy,
//! handler threads and the evictor, behind a small allocation API.

use std::collections::VecDeque;

use crossbeam_queue::SegQueue;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use crate::budget::Budget;
use crate::compress::CompressedTier;
use crate::config::{Config, FaultDelivery, MIN_BUDGET_PAGES};
use crate::encryption::PageCipher;
use crate::error::{Error, Result};
use crate::error_policy::Injector;
use crate::evictor::{evictor_loop, BATCH};
use crate::fault::{
    backoff, handler_buffer_bytes, handler_loop, read_ahead_loop, signal, SignalSlots,
    WritePrediction,
};
use crate::frames::FramePool;
use crate::integrity::Checksums;
use crate::organization::WritePolicy;
use crate::page_table::{Kind, PageNo, PageState, PageTable, MAX_PAGES};
use crate::pause::Pause;
use crate::pins::Pins;
use crate::policy::{new_policy, Policy};
use crate::ranges::RangeAllocator;
use crate::replaceable::Replaceable;
use crate::sets::SetMap;
use crate::stats::{Counters, LatencyHistogram, Stats};
use crate::store::{FileStore, SlotAllocator, Store};
use crate::store_errors::StoreErrors;
use crate::sys::base_page_size;
use crate::sys::mem::{zap, EventFd, Mapping};
use crate::sys::thread::{self, Thread};
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
    pub frames: FramePool,
    /// What faulting threads read pages with, under signal delivery.
    pub signal_slots: Option<SignalSlots>,
    /// Zeros for a first touch and the pages filled ahead of it: never
    /// written, so it costs no memory.
    pub zero_run: Mapping,
    /// Where a run of first touches in order is going (`fault::zero_ahead`).
    pub zero_stream: crate::fault::ZeroStream,
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
    pub paging_until_ns: std::sync::atomic::AtomicU64,
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
    pub(crate) fork_in_flight: crate::fork::ForkCell<crate::fork::InFlight>,
    bad_access_reported: AtomicBool,
    /// The sum of every page in the store, checked when it is read back.
    pub checksums: Checksums,
    /// Encryption at rest, when on (it authenticates, so checksums are off).
    pub(crate) cipher: Option<PageCipher>,
    /// Pages the evictor must leave in DRAM: under I/O, or locked.
    pub(crate) pins: Pins,
    /// Pages locked now (mlock).
    locked_pages: AtomicU64,
    /// Pages pinned for I/O now, counted once per pin.
    pinned_for_io: AtomicU64,
    /// Every range locked since the last `munlockall` (a superset of what
    /// is locked now), so that it need not visit the whole arena.
    locked_ranges: Mutex<Vec<std::ops::Range<PageNo>>>,
    /// Reads and writes a test makes fail (`TIERMEM_INJECT_FAULTS`).
    pub(crate) injector: Injector,
    pub(crate) store_errors: StoreErrors,
    /// Evicted pages kept compressed in DRAM (`None`: `TIERMEM_COMPRESS=off`).
    pub(crate) compressed: Option<CompressedTier>,
    /// Faults served from the compressed tier: claim to install.
    pub compressed_hit_latency: LatencyHistogram,
}

impl Shared {
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
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

    /// Charges a page against the budget, waiting for the evictor if DRAM is full.
    pub fn charge_one_page(&self) {
        if self.pause.requested() {
            // The evictor is parked for a fork, and the forking thread's
            // faults must not wait for it: these few pages go past the
            // budget, and the evictor takes them back after the fork.
            self.budget.charge_past_limit();
            return;
        }
        if self
            .budget
            .charge(|| self.kick_evictor(), |waited| self.report_stall(waited))
        {
            Counters::add(&self.counters.budget_waits, 1);
        }
    }

    /// Free-page watermarks (low, high) for a budget of `limit` pages: the
    /// evictor starts below `low` free pages and stops at `high`.
    pub fn watermarks(&self, limit: u64) -> (u64, u64) {
        watermarks(limit, self.config.watermark_scale_factor)
    }

    /// How many pages the evictor should free now.
    pub fn pages_to_free(&self) -> u64 {
        let limit = self.budget.limit();
        if self.sets.as_ref().is_some_and(|s| s.capacity() <= limit) {
            // The sets evict on conflict and bound DRAM themselves.
            return 0;
        }
        let (low, high) = self.watermarks(limit);
        let excess = self.budget.excess();
        if excess > 0 {
            return excess + high;
        }
        let headroom = self.budget.headroom();
        if headroom >= low {
            return 0;
        }
        high - headroom
    }

    pub fn probation_target(&self) -> u64 {
        self.budget.limit() * self.policy.probation_share() as u64 / 256
    }

    pub fn kick_evictor(&self) {
        let (lock, cv) = &self.evictor_wake;
        let mut kicked = lock.lock().unwrap_or_else(|p| p.into_inner());
        *kicked = true;
        cv.notify_one();
    }

    pub fn kick_evictor_if_low(&self) {
        let (low, _) = self.watermarks(self.budget.limit());
        if self.budget.headroom() < low {
            self.kick_evictor();
        }
    }

    pub fn wait_until_eviction_needed(&self, timeout: Duration) {
        if self.pages_to_free() > 0 {
            return;
        }
        let (lock, cv) = &self.evictor_wake;
        let mut kicked = lock.lock().unwrap_or_else(|p| p.into_inner());
        if !*kicked {
            kicked = cv
                .wait_timeout(kicked, timeout)
                .map(|r| r.0)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        *kicked = false;
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

    /// A state the runtime cannot recover from without risking data: stop
    /// loudly rather than hand out wrong bytes.
    pub fn fatal(&self, msg: &str) -> ! {
        eprintln!("tiermem: fatal: {msg}");
        std::process::abort();
    }
}

/// Free-page watermarks (low, high) for a budget of `limit` pages and a
/// scale factor in ten-thousandths of it (`None`: 1/32, at most 4096 pages).
/// Never below 4 pages (a batch needs room) nor above half the budget.
fn watermarks(limit: u64, scale_factor: Option<u32>) -> (u64, u64) {
    let high = match scale_factor {
        Some(f) => limit * f as u64 / 10_000,
        None => (limit / 32).min(4096),
    };
    let high = high.max(4).min(limit / 2);
    (high / 2, high)
}

/// A tiermem instance: allocations from it are cached in a bounded amount of
/// DRAM and backed by its store.
pub struct Runtime {
    shared: Arc<Shared>,
    threads: Vec<Thread>,
}

impl Runtime {
    /// Opens the store, sets up userfaultfd and starts the threads. Errors
    /// come in this order: configuration, backing store, userfaultfd.
    pub fn new(config: Config) -> Result<Runtime> {
        let shared = Arc::new(Self::build_shared(config)?);
        if shared.signal_slots.is_some() {
            signal::register(&shared)?;
        }
        // Built before the threads start, so that a failure drops a
        // runtime that unregisters itself.
        let mut runtime = Runtime {
            shared,
            threads: Vec::new(),
        };
        runtime.threads = start_threads(&runtime.shared)?;
        crate::fork::register(&runtime.shared);
        Ok(runtime)
    }

    fn build_shared(config: Config) -> Result<Shared> {
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
        Ok(Shared {
            page_size,
            base_page: base_page_size(),
            table: if signals {
                PageTable::with_owner_waits(arena_pages)?
            } else {
                PageTable::new(arena_pages)?
            },
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
            frames,
            signal_slots: signals.then(|| SignalSlots::new(&config)).transpose()?,
            zero_run: Mapping::reserve_aligned(
                (crate::fault::ZERO_AHEAD_MAX as usize + 1) * page_size,
                page_size,
                "reserving zeros for first touches",
            )?,
            zero_stream: crate::fault::ZeroStream::new(),
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
            paging_until_ns: std::sync::atomic::AtomicU64::new(0),
            pause: Pause::new()?,
            probation_queue: Mutex::new(VecDeque::new()),
            io_engine: Mutex::new("pread"),
            write_engine: Mutex::new("pwritev"),
            io_fallback_reported: AtomicBool::new(false),
            evictor_wake: (Mutex::new(false), Condvar::new()),
            fork_in_flight: crate::fork::ForkCell::empty(),
            bad_access_reported: AtomicBool::new(false),
            checksums: Checksums::new(arena_pages, errors.checksums && !errors.encrypt)?,
            pins: Pins::new(arena_pages)?,
            locked_pages: AtomicU64::new(0),
            pinned_for_io: AtomicU64::new(0),
            locked_ranges: Mutex::new(Vec::new()),
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

    /// The configuration the runtime started with; [`Runtime::dram_budget`]
    /// gives the budget now.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The unit of paging, in bytes.
    pub fn page_size(&self) -> usize {
        self.shared.page_size
    }

    /// Allocates `len` bytes of zeroed, page-aligned tiered memory.
    pub fn alloc(&self, len: usize) -> Result<NonNull<u8>> {
        let rt = &self.shared;
        if len == 0 {
            return Err(Error::InvalidSetting {
                setting: "allocation size",
                value: "0".into(),
                expected: "at least 1 byte".into(),
            });
        }
        let pages = len.div_ceil(rt.page_size) as u64;
        rt.slots().commit(pages, rt.store())?;
        let start = rt
            .ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .alloc(pages);
        let Some(start) = start else {
            rt.slots().uncommit(pages);
            return Err(Error::OutOfBackingSpace {
                requested: pages * rt.page_size as u64,
                available: 0,
            });
        };
        self.mark_zero(start, pages);
        let ptr = rt.page_addr(start as PageNo) as *mut u8;
        // SAFETY: arena addresses are never null.
        Ok(unsafe { NonNull::new_unchecked(ptr) })
    }

    pub(crate) fn mark_zero(&self, start: u64, pages: u64) {
        for p in start..start + pages {
            self.shared.table.update(p as PageNo, |s| {
                PageState::FREE
                    .with_queued(s.is_queued())
                    .with_kind(Kind::Zero)
            });
        }
    }

    /// Frees an allocation: its DRAM and its slots come back.
    ///
    /// # Safety
    /// `ptr` must come from this runtime's `alloc`/`realloc`, and no one may
    /// use the memory afterwards.
    pub unsafe fn free(&self, ptr: NonNull<u8>) -> Result<()> {
        let rt = &self.shared;
        let start = self.start_page_of(ptr)?;
        let pages = rt
            .ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(start);
        let Some(pages) = pages else {
            return Err(Error::UnknownPointer(ptr.as_ptr() as usize));
        };
        self.release_pages(start, pages, Kind::Free);
        rt.ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .give_back(start, pages);
        rt.slots().uncommit(pages);
        Ok(())
    }

    fn start_page_of(&self, ptr: NonNull<u8>) -> Result<u64> {
        let addr = ptr.as_ptr() as usize;
        match self.shared.page_of(addr) {
            Some(p) if addr.is_multiple_of(self.shared.page_size) => Ok(p as u64),
            _ => Err(Error::UnknownPointer(addr)),
        }
    }

    /// Returns pages to `to` (`Free`, or `Zero` for a discard), releasing
    /// DRAM, frames and slots, then unmaps whatever was resident. Pages that
    /// are `Free` stay so. Returns how many pages held data (neither `Zero`
    /// nor `Free`): the commitments a lazily committed zone gives back.
    pub(crate) fn release_pages(&self, start: u64, pages: u64, to: Kind) -> u64 {
        let rt = &self.shared;
        // Memory freed while locked is unlocked first, as munmap does.
        let first = rt.page_addr(start as PageNo);
        self.unlock(first, pages as usize * rt.page_size);
        let mut held_data = 0;
        for p in start..start + pages {
            let page = p as PageNo;
            loop {
                let s = rt.table.load(page);
                let freed = PageState::FREE.with_queued(s.is_queued()).with_kind(to);
                match s.kind() {
                    Kind::Loading | Kind::Evicting => backoff(),
                    Kind::Free => break,
                    kind => {
                        if !rt.table.transition(page, s, freed) {
                            continue;
                        }
                        // Whatever is allocated here next is new memory.
                        rt.table.forget_heat(page);
                        if kind != Kind::Zero {
                            held_data += 1;
                        }
                        if matches!(kind, Kind::Resident | Kind::Probation) {
                            rt.budget.uncharge(1);
                        }
                        if kind == Kind::Probation {
                            rt.frames.release(rt.table.frame(page));
                        }
                        if kind == Kind::Compressed {
                            rt.release_compressed(page);
                        }
                        if let Some(slot) = s.slot() {
                            rt.slots().free(slot);
                        }
                        break;
                    }
                }
            }
        }
        let addr = rt.page_addr(start as PageNo);
        if let Err(e) = zap(addr, pages as usize * rt.page_size) {
            rt.fatal(&format!("unmapping freed tiered memory failed: {e}"));
        }
        held_data
    }

    /// Resizes an allocation, preserving its contents up to the smaller size.
    /// Grows in place when the pages after it are free.
    ///
    /// # Safety
    /// As for [`Runtime::free`]; on success the old pointer must no longer be
    /// used unless it equals the new one.
    pub unsafe fn realloc(&self, ptr: NonNull<u8>, len: usize) -> Result<NonNull<u8>> {
        let rt = &self.shared;
        let start = self.start_page_of(ptr)?;
        let old_pages = rt
            .ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len_of(start)
            .ok_or(Error::UnknownPointer(ptr.as_ptr() as usize))?;
        let new_pages = len.max(1).div_ceil(rt.page_size) as u64;
        if new_pages == old_pages {
            return Ok(ptr);
        }
        if new_pages < old_pages {
            self.shrink(start, old_pages, new_pages);
            return Ok(ptr);
        }
        let extra = new_pages - old_pages;
        rt.slots().commit(extra, rt.store())?;
        if rt
            .ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_grow(start, new_pages)
        {
            self.mark_zero(start + old_pages, extra);
            return Ok(ptr);
        }
        rt.slots().uncommit(extra);
        let new = self.alloc(len)?;
        // Pages fault in and out as needed: the copy works at any budget.
        std::ptr::copy_nonoverlapping(
            ptr.as_ptr(),
            new.as_ptr(),
            old_pages as usize * rt.page_size,
        );
        self.free(ptr)?;
        Ok(new)
    }

    fn shrink(&self, start: u64, old_pages: u64, new_pages: u64) {
        let rt = &self.shared;
        rt.ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .shrink(start, new_pages);
        let tail = old_pages - new_pages;
        self.release_pages(start + new_pages, tail, Kind::Free);
        rt.ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .give_back(start + new_pages, tail);
        rt.slots().uncommit(tail);
    }

    /// Whether `addr` lies in this runtime's tiered arena.
    pub fn contains(&self, addr: usize) -> bool {
        self.shared.page_of(addr).is_some()
    }

    /// Keeps the tiered pages of `[addr, addr + len)` in DRAM until the
    /// guard drops: I/O that may reach them by DMA (an `O_DIRECT` read) is
    /// about to start. Pins beyond the arena are ignored. The caller keeps
    /// a pinned span well within the budget (see [`Runtime::pin_span`]).
    pub fn pin_for_io(&self, addr: usize, len: usize) -> PinnedIo<'_> {
        let rt = &self.shared;
        let pages = rt.pages_in(addr, len);
        let n = (pages.end - pages.start) as u64;
        // All pins together stay within half the budget, less what is
        // locked, so that faults always find room: past that, wait.
        loop {
            let room = (rt.budget.limit() / 2)
                .saturating_sub(rt.locked_pages.load(Ordering::Relaxed))
                .max(n);
            let reserved =
                rt.pinned_for_io
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |cur| {
                        (cur + n <= room).then_some(cur + n)
                    });
            if reserved.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        rt.pins.pin_io(&rt.table, pages.clone());
        PinnedIo { rt: self, pages }
    }

    /// The most bytes one call should pin at once: an eighth of the budget
    /// in whole pages, so pinned pages never crowd out the pages the I/O
    /// itself faults in, and pieces of an `O_DIRECT` read stay aligned.
    pub fn pin_span(&self) -> usize {
        let page = self.shared.page_size as u64;
        (self.dram_budget() / 8 / page).max(1) as usize * page as usize
    }

    /// `mprotect` on tiered memory. The evictor copies a victim through its
    /// mapping, where a page without `PROT_READ` would fault (a crash, in
    /// the evictor); such pages are marked first, so that it reads them
    /// through `/proc/self/mem` instead, and marked readable again once
    /// the kernel has given the access back.
    pub fn protect(&self, addr: usize, len: usize, prot: i32) -> Result<()> {
        let rt = &self.shared;
        let pages = rt.pages_in(addr, len);
        let readable = prot & libc::PROT_READ != 0;
        if !readable {
            rt.pins.set_unreadable(&rt.table, pages.clone(), true);
        }
        // SAFETY: the caller's own mprotect(2) of its own memory.
        unsafe { crate::sys::raw::mprotect(addr, len, prot) }.map_err(|source| Error::Os {
            what: "changing the protection of tiered memory (mprotect)",
            source,
        })?;
        if readable {
            rt.pins.set_unreadable(&rt.table, pages, false);
        }
        Ok(())
    }

    /// `mlock`: the tiered pages of `[addr, addr + len)` stay in DRAM and
    /// never reach the store, until [`Runtime::unlock`] or their release.
    /// Refused (`EAGAIN`, as the kernel does past its limit) when locked
    /// pages would take more than half the budget.
    pub fn lock(&self, addr: usize, len: usize) -> Result<()> {
        let rt = &self.shared;
        let pages = rt.pages_in(addr, len);
        let most = (pages.end - pages.start) as u64;
        // Room for every page of the range is reserved first, so that two
        // calls at once cannot both pass the limit.
        let limit = rt.budget.limit() / 2;
        let reserved = rt
            .locked_pages
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n + most <= limit).then_some(n + most)
            });
        if reserved.is_err() {
            return Err(Error::Os {
                what: "locking tiered memory: locked pages may take at most half the DRAM budget",
                source: std::io::Error::from_raw_os_error(libc::EAGAIN),
            });
        }
        let changed = rt.pins.set_locked(&rt.table, pages.clone(), true);
        rt.locked_pages.fetch_sub(most - changed, Ordering::Relaxed);
        rt.locked_ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pages.clone());
        // The kernel's lock too, so the host's own swap never takes the
        // pages either; it faults them in (through the pager) as it locks.
        let span = self.span_of(&pages);
        if let Err(source) = crate::sys::raw::mlock(span.0, span.1, true) {
            self.unlock(addr, len);
            return Err(Error::Os {
                what: "locking tiered memory (mlock)",
                source,
            });
        }
        Ok(())
    }

    /// `munlock`: ends [`Runtime::lock`] on the tiered pages of the range.
    pub fn unlock(&self, addr: usize, len: usize) {
        let rt = &self.shared;
        if rt.locked_pages.load(Ordering::Relaxed) == 0 {
            return;
        }
        let pages = rt.pages_in(addr, len);
        let changed = rt.pins.set_locked(&rt.table, pages.clone(), false);
        if changed == 0 {
            return;
        }
        let span = self.span_of(&pages);
        // Unlocked memory may be zapped again (MADV_DONTNEED refuses locked
        // memory); munlock of a range never locked is harmless.
        let _ = crate::sys::raw::mlock(span.0, span.1, false);
        rt.locked_pages.fetch_sub(changed, Ordering::Relaxed);
    }

    /// `munlockall`: every tiered page unlocked (the ranges ever locked are
    /// visited, not the whole arena).
    pub fn unlock_all(&self) {
        let ranges = std::mem::take(
            &mut *self
                .shared
                .locked_ranges
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for pages in ranges {
            let (addr, len) = self.span_of(&pages);
            self.unlock(addr, len);
        }
    }

    /// Address and length of a run of pages.
    fn span_of(&self, pages: &std::ops::Range<PageNo>) -> (usize, usize) {
        let rt = &self.shared;
        (
            rt.page_addr(pages.start),
            (pages.end - pages.start) as usize * rt.page_size,
        )
    }

    /// The DRAM budget now, in bytes (whole pages).
    pub fn dram_budget(&self) -> u64 {
        self.shared.budget.limit() * self.shared.page_size as u64
    }

    /// Changes the DRAM budget. A shrink returns once resident memory is
    /// within the new budget; other threads keep running meanwhile.
    pub fn set_dram_budget(&self, bytes: u64) -> Result<()> {
        let rt = &self.shared;
        let pages = bytes / rt.page_size as u64;
        if pages < MIN_BUDGET_PAGES {
            return Err(Error::InvalidSetting {
                setting: "DRAM budget",
                value: bytes.to_string(),
                expected: format!(
                    "at least {} bytes ({MIN_BUDGET_PAGES} pages)",
                    MIN_BUDGET_PAGES * rt.page_size as u64
                ),
            });
        }
        rt.budget.set_limit(pages);
        while rt.budget.charged() > rt.budget.limit() {
            rt.kick_evictor();
            std::thread::sleep(Duration::from_micros(200));
        }
        rt.frames.trim(BATCH);
        Ok(())
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// How many times the page holding `addr` was seen in use, misses
    /// included, as CLOCK counts them (saturating at 15; see
    /// `policy::heat`). `None` outside the arena. For tests and diagnostics.
    #[doc(hidden)]
    pub fn observed_uses(&self, addr: *const u8) -> Option<u8> {
        let page = self.shared.page_of(addr as usize)?;
        Some(crate::policy::heat::uses_of(&self.shared.table, page))
    }

    /// A snapshot of everything the runtime counts, and of its memory use now.
    pub fn stats(&self) -> Stats {
        let rt = &self.shared;
        let page = rt.page_size as u64;
        let mut s = Stats::default();
        rt.counters.fill(&mut s);
        let allocated_pages = rt
            .ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .live_pages()
            + rt.lazy
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .live_pages();
        s.resident_bytes = rt.budget.charged() * page;
        s.peak_resident_bytes = rt.budget.peak() * page;
        s.budget_bytes = rt.budget.limit() * page;
        s.allocated_bytes = allocated_pages * page;
        s.backing_bytes = rt.store().allocated_bytes();
        s.stored_bytes = rt.slots().in_use() * page;
        s.parked_bytes = rt.slots().parked() * page;
        s.backing_capacity_bytes = rt.slots().capacity() * page;
        s.metadata_bytes = rt.table.committed_bytes(allocated_pages)
            + rt.checksums.committed_bytes(allocated_pages)
            + rt.pins.committed_bytes(allocated_pages)
            + rt.cipher
                .as_ref()
                .map_or(0, |c| c.committed_bytes(allocated_pages))
            + rt.slots().metadata_bytes()
            + rt.frames.touched_bytes().saturating_sub(s.resident_bytes)
            + io_buffer_bytes(rt);
        s.page_size = page;
        s.fault_latency = rt.fault_latency.summary();
        s.page_in_latency = rt.page_in_latency.summary();
        s.read_latency = rt.read_latency.summary();
        s.policy = rt.policy.kind().name();
        s.organization = rt.config.organization.describe();
        let info = rt.store().info();
        s.io_engine = *rt.io_engine.lock().unwrap_or_else(|p| p.into_inner());
        s.write_engine = *rt.write_engine.lock().unwrap_or_else(|p| p.into_inner());
        s.backing_path = info.path.display().to_string();
        s.backing_is_block_device = info.block_device;
        s.direct_io = info.direct_io;
        s.encrypted = rt.cipher.is_some();
        s.locked_bytes = rt.locked_pages.load(Ordering::Relaxed) * page;
        s.compression = rt.config.compress.codec.name();
        if let Some(tier) = &rt.compressed {
            s.compressed_pages = tier.pool.objects();
            s.compressed_bytes = tier.pool.live_bytes();
            s.pool_bytes = tier.pool.committed_bytes();
        }
        s.compressed_hit_latency = rt.compressed_hit_latency.summary();
        s
    }
}

/// Pages pinned for I/O by [`Runtime::pin_for_io`]; unpinned on drop.
pub struct PinnedIo<'a> {
    rt: &'a Runtime,
    pages: std::ops::Range<PageNo>,
}

impl Drop for PinnedIo<'_> {
    fn drop(&mut self) {
        let rt = &self.rt.shared;
        rt.pins.unpin_io(self.pages.clone());
        let n = (self.pages.end - self.pages.start) as u64;
        rt.pinned_for_io.fetch_sub(n, Ordering::Relaxed);
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let rt = &self.shared;
        crate::fork::unregister(rt);
        if rt.signal_slots.is_some() {
            signal::unregister(rt);
        }
        rt.stop.store(true, Ordering::Release);
        rt.stop_event.signal();
        rt.kick_evictor();
        for t in self.threads.drain(..) {
            t.join();
        }
        rt.uffd.unregister(rt.arena.addr(), rt.arena.len());
    }
}

/// The I/O buffers outside the budget: the fault handlers' read buffers,
/// or under signal delivery the faulting threads' slots and the read-ahead
/// thread's buffers; and the evictor's page.
fn io_buffer_bytes(rt: &Shared) -> u64 {
    let evictor = rt.page_size as u64;
    match &rt.signal_slots {
        Some(slots) => {
            let read_ahead = match slots.read_ahead {
                Some(_) => handler_buffer_bytes(rt),
                None => 0,
            };
            slots.buffer_bytes() + read_ahead + evictor
        }
        None => rt.config.handler_threads as u64 * handler_buffer_bytes(rt) + evictor,
    }
}

/// Starts the fault handlers and the evictor.
pub(crate) fn start_threads(shared: &Arc<Shared>) -> Result<Vec<Thread>> {
    let mut threads = Vec::new();
    let cpus = crate::sys::thread::allowed_cpus();
    let handlers = match &shared.signal_slots {
        None => shared.config.handler_threads,
        Some(slots) => {
            shared.note_io_engine(slots.engine);
            if let Some(reason) = &slots.fallback {
                eprintln!("tiermem: io_uring is unavailable ({reason}); faulting threads read their pages with pread");
            }
            if slots.read_ahead.is_some() {
                let s = Arc::clone(shared);
                threads.push(spawn("tiermem-ahead".into(), move || read_ahead_loop(&s))?);
            }
            0
        }
    };
    for i in 0..handlers {
        let s = Arc::clone(shared);
        let cpu = cpus.get(i % cpus.len().max(1)).copied();
        threads.push(spawn(format!("tiermem-fault{i}"), move || {
            // One handler per CPU, so that a handler runs wherever faults
            // happen. It does not make a miss local: a handler already
            // running elsewhere often reads the fault first, and the
            // scheduler moves a woken thread away from a busy handler's
            // CPU. Measured no worse than one unpinned handler
            // (docs/notebook/benchmarks-random-access-passes.md, "Issue #4,
            // third pass").
            if let Some(cpu) = cpu {
                // Best effort: placement is a matter of speed only.
                let _ = crate::sys::thread::pin_current_thread(cpu);
            }
            handler_loop(&s)
        })?);
    }
    let s = Arc::clone(shared);
    threads.push(spawn("tiermem-evict".into(), move || evictor_loop(&s))?);
    Ok(threads)
}

static THREAD_START_HOOK: OnceLock<fn()> = OnceLock::new();

/// Registers a function every runtime thread (fault handlers, evictor) runs
/// first. Transparent mode uses it to mark those threads so that anything
/// they allocate comes from plain memory, never from tiered memory they
/// would have to fault in themselves.
pub fn set_thread_start_hook(hook: fn()) {
    let _ = THREAD_START_HOOK.set(hook);
}

pub(crate) fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<Thread> {
    thread::spawn(
        name,
        256 << 10,
        THREAD_START_HOOK.get().copied(),
        Box::new(f),
    )
}

/// Frames for probation at the largest sensible budget (all of RAM) plus
/// write-back staging; only what is used ever materialises.
fn frame_capacity(page_size: usize, handler_threads: usize) -> u32 {
    let ram = crate::config::physical_ram_bytes();
    let probation = ram / 8 / page_size as u64;
    (probation + 4 * BATCH as u64 + handler_threads as u64).min(u32::MAX as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::watermarks;

    #[test]
    fn watermarks_follow_the_scale_factor_within_bounds() {
        assert_eq!(watermarks(262_144, None), (2048, 4096), "1/32, capped");
        assert_eq!(watermarks(4096, None), (64, 128), "1/32");
        assert_eq!(watermarks(262_144, Some(1000)), (13_107, 26_214), "10%");
        assert_eq!(watermarks(100, Some(1)), (2, 4), "at least 4 pages");
        assert_eq!(watermarks(100, Some(5000)), (25, 50), "at most half");
    }
}
