//! The evictor keeps free DRAM between two watermarks, off the fault path.
//!
//! Eviction has two steps:
//! 1. **Demote**: the policy picks resident victims. Each is taken over
//!    (`Evicting`), write-protected if dirty so no write can slip past the
//!    copy, copied into a runtime frame when its content must be kept, and
//!    unmapped. Zaps are batched: one TLB shootdown per batch, not per page;
//!    so are write protections of adjacent dirty victims (a scan's).
//!    A clean page whose slot copy is valid needs no frame at all under FIFO.
//! 2. **Evict from probation**: pages that sat in probation untouched leave
//!    DRAM. Clean ones are dropped (their slot is valid), all-zero ones
//!    become `Zero` again, and dirty ones are written in one batch to fresh,
//!    ascending slots, so adjacent slots merge into large writes.
//!
//! Policies without probation send demoted pages straight through step 2.
//!
//! Once the program uses asynchronous I/O, step 1 moves dirty victims out
//! before it copies them, so that the kernel can keep pages that I/O has
//! pinned ([`move_first`]).
//!
//! With the compressed tier on, step 2 first compresses each page into the
//! pool ([`compressed`]); only pages that do not compress, or that the
//! full pool writes back, reach the store.

mod compressed;
mod move_first;

use std::collections::VecDeque;
use std::time::Duration;

use crate::frames::{frame_is_zero, FrameNo, BATCH, IDLE_FRAMES_KEPT};
use crate::io_config::IoEngine;
use crate::page_table::{Kind, PageNo, PageState};
use crate::shared::Shared;
use crate::stats::Counters;
use crate::store::{RingWriter, SlotWrite};
use crate::store_errors::WRITE_RETRY;
use crate::sys::mem::{Mapping, Zapper};
use move_first::{Source, Staging};

pub(crate) fn evictor_loop(rt: &Shared) {
    keep_off_the_fault_path();
    rt.set_evictor_thread();
    let mut ev = Evictor::new(rt);
    crate::sys::spare_fds::setup_done();
    while !rt.stopping() {
        if rt.pause.requested() && rt.pause.parked() >= rt.fault_threads() {
            ev.park();
        }
        rt.wait_until_eviction_needed(Duration::from_millis(5));
        ev.run();
        rt.frames.trim(IDLE_FRAMES_KEPT);
        ev.compact_some(compressed::COMPACTIONS_PER_BATCH);
        ev.copy_out_written();
        rt.slots().review_children();
    }
    ev.hand_back_probation();
}

/// A fault kicks the evictor from the faulting thread's CPU, and a normal
/// thread there is at times woken right away, preempting the faulting
/// thread while it polls for its read: one batch (write-protect, copy, zap,
/// submit) is about 150 µs of CPU, added to that miss (49 of 1,039 misses
/// over 200 µs in a 2 s trace, 15 of 916 with a batch evictor). As a batch
/// thread it waits for a slice instead, or runs on an idle CPU; the
/// free-page watermarks hold far more than a slice's worth of faults.
fn keep_off_the_fault_path() {
    if let Err(e) = crate::sys::thread::run_as_batch_if_default() {
        eprintln!("tiermem: the evictor stays a normal thread (SCHED_BATCH refused: {e})");
    }
}

struct Demoted {
    page: PageNo,
    state: PageState,
    frame: Option<FrameNo>,
}

struct Evictor<'a> {
    rt: &'a Shared,
    probation: VecDeque<PageNo>,
    victims: Vec<PageNo>,
    /// Victims taken over, with their state before.
    owned: Vec<(PageNo, PageState)>,
    /// Where each owned victim's bytes are (index for index with `owned`).
    sources: Vec<Source>,
    /// Staging pages for dirty victims moved out first; made on first use.
    staging: Option<Staging>,
    /// `move_first` cannot work on this kernel (said once).
    staging_unavailable: bool,
    /// /proc/self/mem, for victims the program made unreadable (opened on
    /// first use: the file is bound to the process that opens it, so a
    /// forked child's evictor opens its own).
    self_mem: Option<std::fs::File>,
    /// Dirty victims, sorted, to write-protect in ranges.
    dirty: Vec<PageNo>,
    demoted: Vec<Demoted>,
    zapper: Zapper,
    slots: Vec<u64>,
    writes: Vec<SlotWrite>,
    to_write: Vec<(PageNo, PageState, FrameNo)>,
    /// Write-through: written pages being copied out.
    written: Vec<(PageNo, PageState)>,
    /// Writes through io_uring; `None`: the store's synchronous writes.
    ring: Option<RingWriter>,
    /// A batch of ciphertext, with encryption at rest.
    sealed: Option<Mapping>,
    /// The compressed tier's scratch space and write-back state.
    pool: compressed::PoolWork,
}

impl<'a> Evictor<'a> {
    fn new(rt: &'a Shared) -> Self {
        Evictor {
            rt,
            probation: rt.take_probation_queue(),
            victims: Vec::with_capacity(BATCH),
            owned: Vec::with_capacity(BATCH),
            sources: Vec::with_capacity(BATCH),
            staging: None,
            staging_unavailable: false,
            self_mem: None,
            dirty: Vec::with_capacity(BATCH),
            demoted: Vec::with_capacity(BATCH),
            zapper: Zapper::new(),
            slots: Vec::with_capacity(BATCH),
            writes: Vec::with_capacity(BATCH),
            to_write: Vec::with_capacity(BATCH),
            written: Vec::with_capacity(BATCH),
            ring: write_ring(rt),
            sealed: rt.seal_scratch(BATCH),
            pool: compressed::PoolWork::new(rt.page_size, rt.config.compress.codec),
        }
    }

    /// Ciphertext buffer `i` of the batch (null without encryption, where
    /// [`Shared::seal`] does not use it).
    fn scratch(&self, i: usize) -> *mut u8 {
        self.sealed.as_ref().map_or(std::ptr::null_mut(), |m| {
            m.as_ptr().wrapping_add(i * self.rt.page_size)
        })
    }

    /// Writes `self.writes` to the store.
    fn write_pages(&mut self) -> std::io::Result<()> {
        if let Some(e) = self.rt.injector().write() {
            return Err(e);
        }
        let store = self.rt.store();
        let Some(ring) = self.ring.as_mut() else {
            return store.write_batch(&self.writes);
        };
        let result = ring.write_batch(store, &self.writes);
        if !ring.is_usable() {
            self.ring = None;
            self.rt.note_write_engine("pwritev (io_uring failed)");
        }
        result
    }

    /// Parks for a fork. The probation queue is handed to `Shared` first, so
    /// a forked child's new evictor finds the pages waiting there.
    fn park(&mut self) {
        self.hand_back_probation();
        self.rt.pause.park();
        self.probation = self.rt.take_probation_queue();
    }

    fn hand_back_probation(&mut self) {
        self.rt
            .return_probation_queue(std::mem::take(&mut self.probation));
    }

    /// Frees pages until the watermark is restored or nothing can move.
    fn run(&mut self) {
        self.fit_pool_to_share();
        let mapped = self
            .page_budget()
            .saturating_sub(self.rt.probation_target());
        self.rt.table.regions().settle(mapped);
        loop {
            let need = self.rt.pages_to_free();
            if need == 0 || self.rt.stopping() {
                return;
            }
            let n = (need as usize).min(BATCH);
            let (demoted, dropped) = self.fill_probation(n);
            let freed = dropped + self.evict_from_probation(n.saturating_sub(dropped));
            self.compact_some(compressed::COMPACTIONS_PER_BATCH);
            if demoted == 0 && freed == 0 {
                // Nothing evictable right now (pages busy or none resident).
                std::thread::sleep(Duration::from_micros(200));
                return;
            }
        }
    }

    /// The budget's pages that pages may use: the compressed pool's DRAM
    /// counts in the budget too.
    fn page_budget(&self) -> u64 {
        let rt = self.rt;
        let pool = self.tier().map_or(0, |tier| {
            tier.dram_bytes(rt.page_size) / rt.page_size as u64
        });
        rt.budget.limit().saturating_sub(pool)
    }

    /// Demotes until probation holds its target plus the `n` pages about to
    /// leave, so that it keeps its size while pages flow through it. Clean
    /// pages that a policy without probation drops at once leave DRAM right
    /// here and count towards `n`. Returns (demoted, dropped).
    fn fill_probation(&mut self, n: usize) -> (usize, usize) {
        let target = self.rt.probation_target() as usize;
        let (mut demoted, mut dropped) = (0, 0);
        while self.probation.len() + dropped < target + n {
            let batch = (target + n - self.probation.len() - dropped).min(BATCH);
            let (got, gone) = self.demote(batch);
            if got == 0 {
                break;
            }
            demoted += got;
            dropped += gone;
        }
        (demoted, dropped)
    }

    /// Step 1. Returns how many pages were demoted, and how many of them left
    /// DRAM at once (clean, with a valid slot, and no probation to keep them).
    fn demote(&mut self, want: usize) -> (usize, usize) {
        if want == 0 {
            return (0, 0);
        }
        let mut dropped = 0;
        let rt = self.rt;
        self.victims.clear();
        rt.policy.pick_victims(&rt.table, want, &mut self.victims);
        let keep_in_dram = rt.policy.probation_share() > 0;
        self.take_over_victims();
        self.move_out_dirty_victims();
        self.protect_dirty_victims();
        self.demoted.clear();
        for i in 0..self.owned.len() {
            let (page, state) = self.owned[i];
            let source = self.sources[i];
            if let Some(d) = self.save(page, state, keep_in_dram, source) {
                if source == Source::Mapped {
                    if let Err(e) = self.zapper.push(rt.page_addr(page), rt.page_size) {
                        rt.fatal(&format!("unmapping evicted pages failed: {e}"));
                    }
                }
                self.demoted.push(d);
            }
        }
        if let Err(e) = self.zapper.flush() {
            rt.fatal(&format!("unmapping evicted pages failed: {e}"));
        }
        if let Some(staging) = self.staging.as_mut() {
            staging.clear(rt);
        }
        let taken = self.demoted.len();
        for d in self.demoted.drain(..) {
            match d.frame {
                Some(frame) => {
                    rt.table.set_frame(d.page, frame);
                    rt.table.finish(
                        d.page,
                        d.state.with_kind(Kind::Probation).with_referenced(false),
                    );
                    self.probation.push_back(d.page);
                }
                None => {
                    rt.table.regions().on_leave(d.page);
                    rt.count_if_wasted(d.state);
                    rt.table.finish(
                        d.page,
                        d.state
                            .with_kind(Kind::Stored)
                            .with_referenced(false)
                            .with_prefetched(false),
                    );
                    rt.budget.uncharge(1);
                    Counters::add(&rt.counters.clean_drops, 1);
                    dropped += 1;
                }
            }
        }
        // Pages taken, not picked: when every victim is pinned, the caller
        // must see that nothing moved, and sleep rather than spin.
        (taken, dropped)
    }

    /// Owns the victims that are still resident (busy or gone ones are
    /// skipped: whoever owns them re-admits them if they stay resident;
    /// pinned or locked ones are given back).
    fn take_over_victims(&mut self) {
        let rt = self.rt;
        self.owned.clear();
        for &page in &self.victims {
            loop {
                let s = rt.table.load(page);
                if s.kind() != Kind::Resident {
                    break;
                }
                if !rt.table.transition(page, s, s.with_kind(Kind::Evicting)) {
                    continue;
                }
                if rt.pins.keeps_in_dram(page) {
                    // Under I/O or locked: back to the policy, resident.
                    Counters::add(&rt.counters.pinned_skips, 1);
                    rt.table.finish(page, s);
                    rt.policy.admit(&rt.table, page);
                } else {
                    self.owned.push((page, s));
                }
                break;
            }
        }
    }

    /// With asynchronous I/O in the program, moves dirty victims out of
    /// the tiered region before anything reads them; the kernel refuses
    /// pinned ones, which go back to the policy, resident. Sets `sources`
    /// for every owned victim.
    fn move_out_dirty_victims(&mut self) {
        let rt = self.rt;
        self.sources.clear();
        self.sources.resize(self.owned.len(), Source::Mapped);
        if !move_first::wanted(rt) || self.staging_unavailable {
            return;
        }
        if self.staging.is_none() {
            self.staging = Staging::new(rt);
            self.staging_unavailable = self.staging.is_none();
        }
        let Some(staging) = self.staging.as_mut() else {
            return;
        };
        let mut kept = 0;
        for i in 0..self.owned.len() {
            let (page, state) = self.owned[i];
            let source = match state.is_dirty() {
                true => staging.take(rt, rt.page_addr(page)),
                false => Some(Source::Mapped),
            };
            let Some(source) = source else {
                // Pinned: back to the policy, resident, as in
                // take_over_victims.
                Counters::add(&rt.counters.pinned_skips, 1);
                rt.table.finish(page, state);
                rt.policy.admit(&rt.table, page);
                continue;
            };
            if matches!(source, Source::Staged(_)) {
                Counters::add(&rt.counters.moved_out, 1);
            }
            self.owned[kept] = (page, state);
            self.sources[kept] = source;
            kept += 1;
        }
        self.owned.truncate(kept);
        self.sources.truncate(kept);
    }

    /// Clean pages are already write-protected; dirty ones must be, or a
    /// write between copy and zap would be lost (unless moved out already).
    /// Adjacent ones share one call, and so one TLB shootdown.
    fn protect_dirty_victims(&mut self) {
        let rt = self.rt;
        self.dirty.clear();
        self.dirty.extend(
            self.owned
                .iter()
                .zip(&self.sources)
                .filter(|((_, s), source)| s.is_dirty() && **source == Source::Mapped)
                .map(|(&(page, _), _)| page),
        );
        self.dirty.sort_unstable();
        for run in self.dirty.chunk_by(|a, b| b == &(a + 1)) {
            let (first, len) = (run[0], run.len() * rt.page_size);
            if let Err(e) = rt.uffd.write_protect(rt.page_addr(first), len, true) {
                rt.fatal(&format!(
                    "write-protecting {} page(s) from page {first} for eviction failed: {e}",
                    run.len()
                ));
            }
        }
    }

    /// Saves an owned victim's content, protected or moved out, where it
    /// must be kept.
    fn save(
        &mut self,
        page: PageNo,
        state: PageState,
        keep_in_dram: bool,
        source: Source,
    ) -> Option<Demoted> {
        let rt = self.rt;
        let addr = rt.page_addr(page);
        let src = match source {
            Source::Mapped => addr,
            Source::Staged(staged) => staged,
        };
        // A clean page is worth compressing too: the pool serves it in
        // microseconds where its slot costs a device read.
        let needs_copy =
            keep_in_dram || state.is_dirty() || state.slot().is_none() || rt.compressed.is_some();
        if !needs_copy {
            return Some(Demoted {
                page,
                state,
                frame: None,
            });
        }
        let Some(frame) = rt.frames.alloc() else {
            // Out of frames: leave the page where it is.
            match source {
                Source::Staged(staged) => self.put_back(staged, addr),
                Source::Mapped if state.is_dirty() => {
                    let _ = rt.uffd.write_protect(addr, rt.page_size, false);
                }
                Source::Mapped => {}
            }
            rt.table.finish(page, state);
            rt.policy.admit(&rt.table, page);
            return None;
        };
        let through_self_mem = source == Source::Mapped && rt.pins.unreadable(page);
        self.copy_victim(frame, src, source == Source::Mapped, through_self_mem);
        Some(Demoted {
            page,
            state,
            frame: Some(frame),
        })
    }

    /// Copies the victim at `src` into `frame`. A mapped page the program
    /// discarded behind our back faults here, and reads zeros from then
    /// on (`fault::discarded`): the watch lets a handler waiting for DRAM
    /// unblock the copy, and a copy that zeros went into partway is made
    /// again, so that it never holds bytes from both sides of a discard.
    ///
    /// A page the program made unreadable is read through /proc/self/mem.
    fn copy_victim(&mut self, frame: FrameNo, src: usize, mapped: bool, through_self_mem: bool) {
        let rt = self.rt;
        loop {
            if mapped {
                rt.copy_watch.begin(src);
            }
            if through_self_mem {
                self.fill_through_self_mem(frame, src);
            } else {
                // SAFETY: the page is resident and write-protected, or moved
                // out to staging, and we own it; the program has not taken
                // read access away (`unreadable` is set before it does), so
                // it is readable for a page, and stable but for a discard,
                // after which it reads zeros; the frame is ours.
                unsafe { rt.frames.fill(frame, src as *const u8) };
            }
            if !mapped || rt.copy_watch.end(src) {
                return;
            }
        }
    }

    /// Copies the page at `addr`, which the program made unreadable, into
    /// `frame` through /proc/self/mem, which ignores protections.
    fn fill_through_self_mem(&mut self, frame: FrameNo, addr: usize) {
        use std::os::unix::fs::FileExt;
        let rt = self.rt;
        if self.self_mem.is_none() {
            match std::fs::File::open("/proc/self/mem") {
                Ok(f) => self.self_mem = Some(f),
                Err(e) => rt.fatal(&format!("opening /proc/self/mem: {e}")),
            }
        }
        // SAFETY: the frame is ours and `page_size` bytes long; nothing else
        // touches it while the evictor fills it.
        let into = unsafe { std::slice::from_raw_parts_mut(rt.frames.ptr(frame), rt.page_size) };
        if let Some(mem) = &self.self_mem {
            if let Err(e) = mem.read_exact_at(into, addr as u64) {
                rt.fatal(&format!(
                    "reading the unreadable page at {addr:#x} through /proc/self/mem: {e}"
                ));
            }
        }
    }

    fn put_back(&self, staged: usize, addr: usize) {
        if let Some(staging) = self.staging.as_ref() {
            staging.put_back(self.rt, staged, addr);
        }
    }

    /// Step 2. Returns how many pages left DRAM.
    fn evict_from_probation(&mut self, want: usize) -> usize {
        let rt = self.rt;
        let mut freed = 0;
        self.to_write.clear();
        while freed + self.to_write.len() < want {
            let Some(page) = self.probation.pop_front() else {
                break;
            };
            let Some(state) = self.own_probation_page(page) else {
                continue;
            };
            rt.table.regions().on_leave(page);
            let frame = rt.table.frame(page);
            let clean = !state.is_dirty() && state.slot().is_some();
            if !clean && frame_is_zero(rt.frames.ptr(frame), rt.page_size) {
                self.drop_zero(page, state, frame);
                freed += 1;
            } else if self.compress(page, state, frame) {
                freed += 1;
            } else if clean {
                self.drop_clean(page, state, frame);
                freed += 1;
            } else {
                self.to_write.push((page, state, frame));
            }
        }
        freed + self.write_back()
    }

    fn own_probation_page(&self, page: PageNo) -> Option<PageState> {
        loop {
            let s = self.rt.table.load(page);
            if s.kind() != Kind::Probation {
                return None; // rescued by a fault, or freed
            }
            if self
                .rt
                .table
                .transition(page, s, s.with_kind(Kind::Evicting))
            {
                return Some(s);
            }
        }
    }

    fn drop_clean(&self, page: PageNo, state: PageState, frame: FrameNo) {
        let rt = self.rt;
        rt.count_if_wasted(state);
        rt.table
            .finish(page, state.with_kind(Kind::Stored).with_prefetched(false));
        rt.frames.release(frame);
        rt.budget.uncharge(1);
        Counters::add(&rt.counters.clean_drops, 1);
    }

    fn drop_zero(&self, page: PageNo, state: PageState, frame: FrameNo) {
        let rt = self.rt;
        if let Some(slot) = state.slot() {
            rt.slots().free(slot);
        }
        rt.table.finish(page, PageState::FREE.with_kind(Kind::Zero));
        rt.frames.release(frame);
        rt.budget.uncharge(1);
        if rt.is_lazy(page) {
            rt.slots().uncommit(1);
        }
        Counters::add(&rt.counters.zero_drops, 1);
    }

    /// Writes the dirty pages of `to_write` to fresh ascending slots.
    fn write_back(&mut self) -> usize {
        let rt = self.rt;
        if self.to_write.is_empty() {
            return 0;
        }
        if let Err(pause) = self.write_staged() {
            // Nothing is lost: the pages stay in their frames. Put them back
            // in probation and try again later, to other slots.
            self.put_back_unwritten();
            std::thread::sleep(pause);
            return 0;
        }
        let n = self.to_write.len();
        for (i, &(page, state, frame)) in self.to_write.iter().enumerate() {
            if let Some(old) = state.slot() {
                rt.slots().free(old);
            }
            let stored = state
                .with_kind(Kind::Stored)
                .with_dirty(false)
                .with_slot(Some(self.slots[i]));
            rt.table.finish(page, stored);
            rt.frames.release(frame);
        }
        rt.budget.uncharge(n as u64);
        Counters::add(&rt.counters.page_outs, n as u64);
        Counters::add(&rt.counters.bytes_written, (n * rt.page_size) as u64);
        Counters::add(&rt.counters.write_batches, 1);
        n
    }
}

/// Write-through: pages written since they were last copied out go to the
/// store in batches, every few milliseconds, and are protected again so the
/// next write is seen. They stay mapped throughout; a write to one while it
/// is being copied waits (its fault finds the page owned) until the copy is
/// in the store.
impl Evictor<'_> {
    fn copy_out_written(&mut self) {
        let Some(queue) = self.rt.written.as_ref() else {
            return;
        };
        loop {
            self.written.clear();
            while self.written.len() < BATCH {
                let Some(page) = queue.pop() else { break };
                if let Some(state) = self.own_written(page) {
                    self.written.push((page, state));
                }
            }
            if self.written.is_empty() {
                return;
            }
            if !self.write_through_batch() {
                return;
            }
        }
    }

    /// Owns a page that is still resident and dirty (a page queued twice,
    /// or evicted since, is skipped).
    fn own_written(&self, page: PageNo) -> Option<PageState> {
        let rt = self.rt;
        loop {
            let s = rt.table.load(page);
            if s.kind() != Kind::Resident || !s.is_dirty() {
                return None;
            }
            if !rt.table.transition(page, s, s.with_kind(Kind::Evicting)) {
                continue;
            }
            if rt.pins.keeps_in_dram(page) || move_first::wanted(rt) || rt.pins.unreadable(page) {
                // Locked: never to the store. Under I/O (a pin of ours, or
                // asynchronous I/O that only the kernel knows of): a DMA
                // may still change it behind the write protection;
                // eviction writes it later, once the I/O is over.
                // Unreadable: the store cannot read it through the mapping;
                // eviction copies it through /proc/self/mem.
                Counters::add(&rt.counters.pinned_skips, 1);
                rt.table.finish(page, s);
                return None;
            }
            return Some(s);
        }
    }

    /// Protects, writes and publishes clean the pages of `written`. Returns
    /// false if the write failed (the pages stay dirty and queued).
    fn write_through_batch(&mut self) -> bool {
        let rt = self.rt;
        for &(page, _) in &self.written {
            if let Err(e) = rt
                .uffd
                .write_protect(rt.page_addr(page), rt.page_size, true)
            {
                rt.fatal(&format!(
                    "write-protecting page {page} for write-through failed: {e}"
                ));
            }
        }
        if !rt.take_fresh_slots(self.written.len(), &mut self.slots) {
            self.unprotect_written();
            return false;
        }
        self.writes.clear();
        for (i, &(page, _)) in self.written.iter().enumerate() {
            self.writes.push(SlotWrite {
                slot: self.slots[i],
                src: rt.page_addr(page) as *const u8,
            });
        }
        for (i, &(page, _)) in self.written.iter().enumerate() {
            self.writes[i].src = rt.seal(page, self.slots[i], self.writes[i].src, self.scratch(i));
        }
        if let Err(e) = self.write_pages() {
            rt.write_failed(&e, &self.slots);
            self.unprotect_written();
            return false;
        }
        rt.write_succeeded();
        for (i, &(page, state)) in self.written.iter().enumerate() {
            if let Some(old) = state.slot() {
                rt.slots().free(old);
            }
            let clean = state.with_dirty(false).with_slot(Some(self.slots[i]));
            rt.table.finish(page, clean);
        }
        let n = self.written.len() as u64;
        Counters::add(&rt.counters.write_throughs, n);
        Counters::add(&rt.counters.page_outs, n);
        Counters::add(&rt.counters.bytes_written, n * rt.page_size as u64);
        Counters::add(&rt.counters.write_batches, 1);
        true
    }

    /// Gives the pages of `written` back dirty and writable, queued again.
    fn unprotect_written(&mut self) {
        let rt = self.rt;
        for &(page, state) in &self.written {
            let _ = rt
                .uffd
                .write_protect(rt.page_addr(page), rt.page_size, false);
            rt.table.finish(page, state);
            if let Some(queue) = &rt.written {
                queue.push(page);
            }
        }
    }
}

impl Evictor<'_> {
    /// Writes the frames of `to_write` to fresh slots (`self.slots`, in
    /// order). On failure, returns how long to wait before trying again:
    /// briefly when parked slots of a forked child's memory fill the store
    /// (they come back as the child lets them go), longer after a failed
    /// write, so as not to flood a failing device.
    fn write_staged(&mut self) -> Result<(), Duration> {
        let rt = self.rt;
        if !rt.take_fresh_slots(self.to_write.len(), &mut self.slots) {
            return Err(Duration::from_millis(1));
        }
        self.writes.clear();
        for (i, &(page, _, frame)) in self.to_write.iter().enumerate() {
            let src = rt.frames.ptr(frame);
            let src = rt.seal(page, self.slots[i], src, self.scratch(i));
            self.writes.push(SlotWrite {
                slot: self.slots[i],
                src,
            });
        }
        if let Err(e) = self.write_pages() {
            rt.write_failed(&e, &self.slots);
            return Err(WRITE_RETRY);
        }
        rt.write_succeeded();
        Ok(())
    }

    /// Returns the pages of `to_write` to probation, unwritten.
    fn put_back_unwritten(&mut self) {
        for &(page, state, _) in &self.to_write {
            self.rt.table.finish(page, state);
            self.probation.push_front(page);
        }
    }
}

/// The evictor writes through its own io_uring when the fault path uses
/// io_uring, and says so in the stats; otherwise, or where the ring cannot
/// be set up, with the store's pwritev. A buffered store is always written
/// with pwritev, which syncs each batch before it counts as stored.
fn write_ring(rt: &Shared) -> Option<RingWriter> {
    if !rt.store().writes_are_durable_on_completion() {
        rt.note_write_engine("pwritev + fdatasync (buffered store)");
        return None;
    }
    if rt.config.io.engine != IoEngine::IoUring {
        rt.note_write_engine("pwritev (TIERMEM_IO_ENGINE=psync)");
        return None;
    }
    match RingWriter::new() {
        Ok(ring) => {
            rt.note_write_engine("io_uring");
            Some(ring)
        }
        Err(e) => {
            rt.note_write_engine("pwritev (io_uring unavailable)");
            eprintln!("tiermem: io_uring is unavailable for write-back ({e}); using pwritev");
            None
        }
    }
}
