//! The install stage: a page's bytes go into the arena with `UFFDIO_COPY`
//! and its new state is published.
//!
//! A page read from the store ([`finish_read`]), a run of read-ahead pages
//! with one call ([`finish_read_ahead_run`]), a probation hit from its frame
//! ([`rescue_from_probation`]): each ends in [`finish_resident`], which
//! makes the page `Resident` and hands it to the policy.

use std::cell::Cell;

use super::page_read::PageRead;
use crate::organization::Inclusion;
use crate::page_table::{Kind, PageNo, PageState};
use crate::shared::Shared;
use crate::stats::Counters;
use crate::sys::now_ns;
use crate::sys::uffd::Copied;

thread_local! {
    /// Installs made by this thread leave the faulting thread asleep: the
    /// fork window wakes it only once the page's state is final.
    static QUIET_INSTALLS: Cell<bool> = const { Cell::new(false) };
}

/// Makes this thread's installs wake no one (the fork window's serving
/// thread, until the page's state is final), or wake as usual again.
pub(super) fn set_quiet_installs(quiet: bool) {
    QUIET_INSTALLS.with(|q| q.set(quiet));
}

/// Whether an install on this thread may wake the faulting thread now.
pub(super) fn installs_wake() -> bool {
    !QUIET_INSTALLS.with(Cell::get)
}

/// Installs a page whose slot was read into `buf` and publishes it.
pub(crate) fn finish_read(rt: &Shared, read: &PageRead, buf: *const u8) {
    // Read-ahead wakes no one: nobody waits for it (a fault that arrived
    // meanwhile is retried and finds the page resident).
    let wake = !read.prefetch && read.group.is_none();
    count_page_ins(rt, 1);
    if !read.prefetch && !read.enters_referenced() {
        // Before the wake-up, as the count: a woken thread sees its miss. A
        // write miss enters referenced, and the policy counts it from that.
        rt.policy.note_miss(&rt.table, read.page);
    }
    install_with(rt, read.page, buf, !owns_store_copy(rt, read), wake);
    publish_read(rt, read);
}

/// Read-ahead of consecutive pages that landed in consecutive buffers at
/// `buf`: one UFFDIO_COPY installs them all (a sequential scan installs a
/// request's worth of pages with one call instead of one call per page).
pub(crate) fn finish_read_ahead_run(rt: &Shared, reads: &[PageRead], buf: *const u8) {
    let Some(first) = reads.first() else {
        return;
    };
    debug_assert!(reads.iter().enumerate().all(|(i, r)| r.prefetch
        && r.write == first.write
        && r.group.is_none()
        && r.page == first.page + i as PageNo));
    count_page_ins(rt, reads.len() as u64);
    install_pages(
        rt,
        first.page,
        reads.len(),
        buf,
        !owns_store_copy(rt, first),
        false,
    );
    for read in reads {
        publish_read(rt, read);
    }
}

/// A read fault installs the page write-protected: it stays clean, and its
/// slot copy stays valid, until the first write. A write fault (or a
/// predicted one) dirties it at once, which saves a second fault. An
/// exclusive cache gives the slot up as the page comes in: the page is the
/// only copy, so it is dirty and needs no write protection.
fn owns_store_copy(rt: &Shared, read: &PageRead) -> bool {
    read.write || rt.config.organization.inclusion == Inclusion::Exclusive
}

/// Counted before the install wakes anyone, so a woken thread that reads
/// the stats sees its own page-in.
pub(super) fn count_page_ins(rt: &Shared, pages: u64) {
    Counters::add(&rt.counters.page_ins, pages);
    Counters::add(&rt.counters.bytes_read, pages * rt.page_size as u64);
}

/// The state of a page just read from its slot: clean with the slot, or
/// dirty with the slot given up if DRAM holds the only copy now.
pub(super) fn read_in_state(rt: &Shared, read: &PageRead) -> PageState {
    if owns_store_copy(rt, read) {
        rt.slots().free(read.slot);
        PageState::FREE.with_dirty(true)
    } else {
        PageState::FREE.with_slot(Some(read.slot))
    }
}

/// The bookkeeping of a page read that is now installed.
fn publish_read(rt: &Shared, read: &PageRead) {
    let new = read_in_state(rt, read);
    if read.prefetch {
        Counters::add(&rt.counters.prefetch_issued, 1);
        // A mapped neighbour's use is never seen (its sample's is), so it
        // carries no mark that eviction would count as waste.
        let marked = !read.neighbour;
        finish_resident(rt, read.page, new.with_prefetched(marked), false);
    } else {
        finish_resident(rt, read.page, new, read.enters_referenced());
        let took = now_ns().saturating_sub(read.started_ns);
        rt.fault_latency.record(took);
        rt.page_in_latency.record(took);
    }
}

pub(super) fn rescue_from_probation(rt: &Shared, page: PageNo, state: PageState, write: bool) {
    let frame = rt.table.frame(page);
    let exclusive = rt.config.organization.inclusion == Inclusion::Exclusive;
    let dirty = state.is_dirty() || write || exclusive;
    install(rt, page, rt.frames.ptr(frame), !dirty);
    rt.frames.release(frame);
    Counters::add(&rt.counters.probation_hits, 1);
    if state.is_prefetched() {
        Counters::add(&rt.counters.prefetch_hits, 1);
    }
    let slot = match (dirty, state.slot()) {
        (true, Some(old)) => {
            rt.slots().free(old);
            None
        }
        (_, slot) => slot,
    };
    // The page was charged all along; a touch in probation is a reference.
    finish_resident(
        rt,
        page,
        PageState::FREE.with_dirty(dirty).with_slot(slot),
        true,
    );
}

pub(super) fn install(rt: &Shared, page: PageNo, src: *const u8, write_protect: bool) {
    install_with(rt, page, src, write_protect, true);
}

/// UFFDIO_COPY one page, handling the cases the kernel reports.
pub(super) fn install_with(
    rt: &Shared,
    page: PageNo,
    src: *const u8,
    write_protect: bool,
    wake: bool,
) {
    install_pages(rt, page, 1, src, write_protect, wake);
}

/// UFFDIO_COPY `count` consecutive pages from consecutive buffers at `src`
/// with as few calls as the kernel allows, handling what it reports.
pub(super) fn install_pages(
    rt: &Shared,
    first: PageNo,
    count: usize,
    src: *const u8,
    write_protect: bool,
    wake: bool,
) {
    let addr = rt.page_addr(first);
    let len = count * rt.page_size;
    let wake = wake && installs_wake();
    let mut done = 0;
    while done < len {
        // SAFETY: `src` holds `len` bytes of runtime-owned buffers, and
        // `addr..addr + len` are whole pages of the registered arena.
        let copied = unsafe {
            rt.uffd
                .copy(addr + done, src.add(done), len - done, write_protect, wake)
        };
        match copied {
            Ok(Copied::Done) => return,
            Ok(Copied::AlreadyPresent { installed }) => {
                // Mapped behind our back: keep what is there, assume it was
                // written, wake the waiters, and go on after that page.
                Counters::add(&rt.counters.unexpected_present, 1);
                let present = (done + installed) / rt.page_size * rt.page_size;
                rt.uffd.wake(addr + present, rt.page_size);
                done = present + rt.page_size;
            }
            Ok(Copied::Retry(installed)) => {
                done += installed;
                std::thread::yield_now();
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && len - done > rt.page_size => {
                // One copy must stay within one mapping, and the program's
                // mlock or mprotect split the arena's: page by page.
                for at in (done..len).step_by(rt.page_size) {
                    let page = first + (at / rt.page_size) as PageNo;
                    // SAFETY: `at` < `len`, inside the caller's buffers.
                    install_pages(rt, page, 1, unsafe { src.add(at) }, write_protect, wake);
                }
                return;
            }
            Err(e) => rt.fatal(&format!(
                "installing {count} page(s) from page {first} with UFFDIO_COPY failed: {e}"
            )),
        }
    }
}

/// Publishes a page the handler owns as resident and hands it to the policy.
pub(super) fn finish_resident(rt: &Shared, page: PageNo, state: PageState, referenced: bool) {
    rt.table.finish(
        page,
        state.with_kind(Kind::Resident).with_referenced(referenced),
    );
    if state.is_dirty() {
        if let Some(queue) = &rt.written {
            // Write-through: the evictor copies it out within milliseconds.
            queue.push(page);
        }
    }
    rt.policy.admit(&rt.table, page);
    rt.table.regions().on_resident(page, !state.is_prefetched());
    rt.kick_evictor_if_low();
}
