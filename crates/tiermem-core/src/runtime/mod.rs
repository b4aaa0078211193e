//! The runtime: one registered arena, its page table, the store, the policy,
//! handler threads and the evictor, behind a small allocation API.
//!
//! The state all of them share is [`Shared`]; this module is the API over
//! it, one concern to a file:
//! - this file: starting and stopping, the budget, the stats;
//! - [`alloc`]: allocating, freeing and resizing tiered memory;
//! - [`pinning`]: pages kept in DRAM (`mlock`, pins for I/O) and
//!   `mprotect`.

mod alloc;
mod pinning;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, MIN_BUDGET_PAGES};
use crate::error::{Error, Result};
use crate::fault::{handler_buffer_bytes, signal};
use crate::frames::BATCH;
use crate::shared::Shared;
use crate::stats::Stats;
use crate::sys::thread::Thread;
use crate::threads::start_threads;
pub use pinning::PinnedIo;

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
        let shared = Arc::new(Shared::new(config)?);
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

    /// The configuration the runtime started with; [`Runtime::dram_budget`]
    /// gives the budget now.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The unit of paging, in bytes.
    pub fn page_size(&self) -> usize {
        self.shared.page_size
    }

    /// Whether `addr` lies in this runtime's tiered arena.
    pub fn contains(&self, addr: usize) -> bool {
        self.shared.page_of(addr).is_some()
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

    /// Runs `f` with a handle on `shared` that stops nothing when done: for
    /// the fork handlers, which reach a runtime's shared state but not the
    /// program's handle on it.
    pub(crate) fn borrowed<T>(shared: &Arc<Shared>, f: impl FnOnce(&Runtime) -> T) -> T {
        let handle = std::mem::ManuallyDrop::new(Runtime {
            shared: Arc::clone(shared),
            threads: Vec::new(),
        });
        let out = f(&handle);
        // SAFETY: `handle` is never used again. Reading its `Arc` out drops
        // the one reference it took without running `Runtime`'s `drop`,
        // which would stop the runtime; its `threads` is empty and owns no
        // allocation, so nothing else leaks.
        drop(unsafe { std::ptr::read(&handle.shared) });
        out
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
        let regions = rt.table.regions().counts();
        s.huge_regions_kept = regions.kept;
        s.huge_regions_formed = regions.formed;
        s.huge_regions_proven = regions.proven;
        s.huge_regions_dropped = regions.dropped;
        s.huge_regions_displaced = regions.displaced;
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
        // Foreign mappings hold allocated pages that are not tiered.
        s.allocated_bytes = allocated_pages.saturating_sub(self.foreign_pages()) * page;
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
            + rt.frames
                .materialised_bytes()
                .saturating_sub(s.resident_bytes)
            + io_buffer_bytes(rt);
        s.page_size = page;
        s.fault_latency = rt.fault_latency.summary();
        s.page_in_latency = rt.page_in_latency.summary();
        s.read_latency = rt.read_latency.summary();
        s.policy = rt.policy.kind().name();
        s.organization = rt.config.organization.describe();
        let info = rt.store().info();
        s.io_engine = rt.io_engine();
        s.write_engine = rt.write_engine();
        s.backing_path = info.path.display().to_string();
        s.backing_is_block_device = info.block_device;
        s.direct_io = info.direct_io;
        s.encrypted = rt.cipher.is_some();
        s.locked_bytes = rt.locked_pages.load(Ordering::Relaxed) * page;
        s.compression = rt.config.compress.codec.name();
        if let Some(tier) = &rt.compressed {
            s.compressed_pages = tier.pool.objects();
            s.compressed_bytes = tier.pool.live_bytes();
            s.pool_bytes = tier.dram_bytes(rt.page_size);
            s.compress_dictionary_bytes = tier.dictionary.charged_bytes(rt.page_size);
            s.dictionaries_gathered = tier.dictionary.published();
            s.compress_share_percent = tier.split.percent();
        }
        s.compressed_hit_latency = rt.compressed_hit_latency.summary();
        s
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let rt = &self.shared;
        crate::fork::unregister(rt);
        if rt.signal_slots.is_some() {
            signal::unregister(rt);
        }
        rt.request_stop();
        rt.stop_event.signal();
        rt.kick_evictor();
        for t in self.threads.drain(..) {
            t.join();
        }
        // Span by span: a foreign file mapping in a range refuses it whole.
        for span in rt.tiered_spans() {
            rt.uffd.unregister(span.start, span.end - span.start);
        }
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
