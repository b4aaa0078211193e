//! Faults resolved by the faulting thread itself ([`FaultDelivery::Signal`]).
//!
//! The userfaultfd raises SIGBUS in the thread that touched a missing or
//! write-protected page, and the signal handler runs the fault path of this
//! module's parent, as a handler thread would: claim the page, read it into
//! a runtime-owned buffer through a small io_uring of the thread's slot,
//! polling for the completion, and install it. When the handler returns,
//! the access runs again and finds its page. A miss that confirms a stream
//! hands its window to the read-ahead thread ([`read_ahead`]) before its
//! own read, so the window is in flight by the time the program wants it.
//!
//! Why: with handler threads a miss wakes two threads, the handler when the
//! fault arrives and the faulting thread when its page is in, and on a VM
//! each wake-up of a thread on another vCPU costs about 15 µs. Here no
//! other thread takes part.
//!
//! The price: the kernel's own accesses to tiered memory (a `read(2)` into
//! it) fail with EFAULT instead of waiting, so this is opt-in and refused
//! in transparent mode.
//!
//! Signal-handler rules: this path runs where the program touched tiered
//! memory, never inside tiermem (runtime code does not touch tiered
//! memory), so the locks it takes (the budget's, the evictor's) are never
//! held by the code it interrupted. It can allocate (the policy's queues
//! grow in blocks), so tiered memory must not be touched from a program's
//! *asynchronous* signal handler that may interrupt `malloc`; README,
//! "Signal delivery". Every other signal is blocked while it runs,
//! thread cancellation is held off, and errno is restored by
//! `sys::signal`.
//!
//! [`FaultDelivery::Signal`]: crate::config::FaultDelivery::Signal

pub(crate) mod fork_gate;
pub(crate) mod read_ahead;
pub(crate) mod slots;

use std::io;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use io_uring::{opcode, squeue, types, IoUring};

use super::install::{finish_read, finish_read_ahead_run};
use super::markers::{is_parked_read_ahead, prefetch_used};
use super::page_read::PageRead;
use super::read_error::{first_bad_page, settle, BadRead};
use super::readahead::Window;
use super::resolve::{begin_fault, claim_for_prefetch_if_free, resolve_fault, Missing};
use super::uring::{must_enter, PollClock};
use crate::error::{Error, Result};
use crate::page_table::{Kind, PageNo};
use crate::shared::Shared;
use crate::store_errors::ReadFailure;
use crate::sys::signal::{install_bus_handler, BusFault};
use crate::sys::thread::CancellationHeld;
use crate::sys::uffd::Fault;
use crate::sys::{backoff, now_ns};
use slots::Claimed;

/// Longest a faulting thread polls for its reads before it sleeps. Longer
/// than a handler's poll: the thread has nothing else to do, and a read
/// slowed by write-back or by the host can take 200–500 µs, after which a
/// sleeping thread still pays its wake-up. Other threads still get the
/// CPU: see [`cpus_to_spare`].
const POLL_NS: u64 = 1_000_000;

/// How long a thread waiting for another thread's page spins before it
/// sleeps (see `owner_waits`): about what an install or a batch of
/// write-protections takes, so a short wait stays a spin.
const BUSY_SPIN_NS: u64 = 20_000;
/// The longest single sleep of that wait: the bound on a missed wake-up.
const BUSY_SLEEP: std::time::Duration = std::time::Duration::from_micros(500);
/// After this long the access is retried (faulting again if need be).
const BUSY_LIMIT_NS: u64 = 5_000_000;

/// Runtimes with signal delivery that one process may hold at once.
const MAX_RUNTIMES: usize = 64;

/// The runtimes the signal handler serves. A handler announces itself in
/// the slot's [`USERS`] count before it reads the slot's pointer, and
/// [`unregister`] clears the pointer before it waits for that count to
/// drop, so a runtime outlives every handler that may have seen it, and
/// waits only for its own faults.
static RUNTIMES: [AtomicPtr<Shared>; MAX_RUNTIMES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_RUNTIMES];
static USERS: [AtomicUsize; MAX_RUNTIMES] = [const { AtomicUsize::new(0) }; MAX_RUNTIMES];

/// Makes the signal handler serve `rt`'s arena. `rt` must stay alive until
/// [`unregister`].
pub(crate) fn register(rt: &Shared) -> Result<()> {
    install_bus_handler(on_bus_fault).map_err(Error::os("installing the SIGBUS handler"))?;
    let ptr = rt as *const Shared as *mut Shared;
    for slot in &RUNTIMES {
        let taken = slot.compare_exchange(
            std::ptr::null_mut(),
            ptr,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        if taken.is_ok() {
            return Ok(());
        }
    }
    Err(Error::Unavailable(format!(
        "at most {MAX_RUNTIMES} runtimes with signal fault delivery may run at once"
    )))
}

/// Stops serving `rt`, and returns once no signal handler can still use it.
pub(crate) fn unregister(rt: &Shared) {
    let ptr = rt as *const Shared as *mut Shared;
    for (slot, users) in RUNTIMES.iter().zip(&USERS) {
        let cleared = slot.compare_exchange(
            ptr,
            std::ptr::null_mut(),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        if cleared.is_ok() {
            while users.load(Ordering::SeqCst) != 0 {
                std::thread::yield_now();
            }
        }
    }
}

/// The process's SIGBUS handler: false if the address is in no arena of ours.
fn on_bus_fault(bus: &BusFault) -> bool {
    RUNTIMES.iter().zip(&USERS).any(|(slot, users)| {
        if slot.load(Ordering::Relaxed).is_null() {
            return false;
        }
        users.fetch_add(1, Ordering::SeqCst);
        let ptr = slot.load(Ordering::SeqCst);
        // SAFETY: a registered runtime lives until `unregister` has cleared
        // its slot and then seen its users at zero; we count as one.
        let ours = unsafe { ptr.as_ref() }.is_some_and(|rt| {
            is_tiered(rt, bus.address) && {
                resolve_without_cancellation(rt, bus);
                true
            }
        });
        users.fetch_sub(1, Ordering::SeqCst);
        ours
    })
}

/// Whether `addr` is tiered memory of `rt`. A foreign mapping in the arena
/// (a file the program mapped there with `MAP_FIXED`) raises SIGBUS of its
/// own, past the end of its file say, which the program's handler or the
/// default action must get: resolving it would retry the access forever.
fn is_tiered(rt: &Shared, addr: usize) -> bool {
    rt.page_of(addr)
        .is_some_and(|page| rt.table.load(page).kind() != Kind::Foreign)
}

/// [`resolve`] with thread cancellation held off: a cancellation acted on
/// in a read would unwind out of a signal handler and leave the page
/// claimed.
fn resolve_without_cancellation(rt: &Shared, bus: &BusFault) {
    let _held = CancellationHeld::hold();
    let _in_flight = fork_gate::enter();
    resolve(rt, bus);
}

/// The fork's child handler: the threads counted as using a runtime, or as
/// resolving a fault, are the parent's, which the child does not have; then
/// faults may begin again (see [`fork_gate`]).
pub(crate) fn open_in_child() {
    for users in &USERS {
        users.store(0, Ordering::SeqCst);
    }
    fork_gate::open_after_fork(true);
}

/// Resolves the fault, or leaves it for the access to raise again when the
/// page is busy (another thread is reading or writing it out).
fn resolve(rt: &Shared, bus: &BusFault) {
    let fault = Fault {
        address: bus.address,
        write: bus.write || bus.protection,
        write_protect: bus.protection,
        thread_id: current_thread_id(),
    };
    let Some(page) = begin_fault(rt, &fault) else {
        return;
    };
    let Some(slots) = &rt.signal_slots else {
        rt.fatal("a runtime without signal delivery took a SIGBUS fault");
    };
    let marker = !fault.write_protect && is_parked_read_ahead(rt, page);
    match resolve_fault(rt, page, &fault) {
        // The program reached a window's marker: the read-ahead thread
        // that parked it reads the stream's next window.
        Missing::Resolved if marker => rt.read_ahead_event.signal(),
        Missing::Resolved => {}
        Missing::Read(read) => {
            if slots.read_ahead.as_ref().is_some_and(|ra| ra.on_miss(page)) {
                rt.read_ahead_event.signal();
            }
            let mut slot = slots.claim();
            slot.reads.push(read);
            if let Some(window) = slots.window_after(page) {
                claim_window(rt, &window, page, &mut slot);
            }
            read_and_install(rt, &mut slot);
        }
        Missing::Busy => {
            let caught_up = !fault.write_protect
                && slots
                    .read_ahead
                    .as_ref()
                    .is_some_and(|ra| ra.on_catch_up(page));
            if caught_up {
                rt.read_ahead_event.signal();
            }
            wait_while_busy(rt, page);
        }
    }
}

/// Waits, here rather than by faulting again and again, until the thread
/// that owns the page (reading it in or writing it out) is done with it,
/// for at most a few milliseconds; then the access runs again.
fn wait_while_busy(rt: &Shared, page: PageNo) {
    let started = now_ns();
    loop {
        let waited = now_ns().saturating_sub(started);
        if waited < BUSY_SPIN_NS {
            backoff();
        } else {
            rt.table.sleep_while_owned(page, BUSY_SLEEP);
        }
        let done = !rt.table.load(page).is_owned();
        if done || now_ns().saturating_sub(started) > BUSY_LIMIT_NS {
            return;
        }
    }
}

/// Claims the pages of a fixed prefetch degree's `window` that sit in the
/// store, as many as the slot holds, after the demand read already in it;
/// counts the prefetched pages the program passed on its way to `page` as
/// used.
fn claim_window(rt: &Shared, window: &Window, page: PageNo, slot: &mut Claimed<'_>) {
    let pages = (rt.arena.len() / rt.page_size) as i64;
    let mut q = window.passed_from;
    while (page as i64 - q) * window.stride.signum() > 0 && (0..pages).contains(&q) {
        prefetch_used(rt, q as PageNo);
        q += window.stride;
    }
    let capacity = slot.slots.pages_per_slot;
    let reads = &mut *slot.reads;
    for k in 0..window.count as i64 {
        let q = window.start + k * window.stride;
        if !(0..pages).contains(&q) || reads.len() >= capacity {
            break;
        }
        reads.extend(claim_for_prefetch_if_free(rt, q as PageNo));
    }
}

/// Reads every page claimed in the slot into its buffers, then installs
/// them: the demand page first, prefetched pages in runs of consecutive
/// pages with one UFFDIO_COPY each.
fn read_and_install(rt: &Shared, slot: &mut Claimed<'_>) {
    let started = now_ns();
    let result = match &mut slot.ring {
        Some(ring) => ring_read_all(
            rt,
            ring,
            slot.slots.taskrun_flag,
            slot.buffer,
            slot.reads,
            slot.slots.cpus,
        ),
        None => pread_all(rt, slot.buffer, slot.reads),
    };
    let reads = &mut *slot.reads;
    rt.read_latency.record(now_ns().saturating_sub(started));
    match result {
        Ok(()) => match first_bad_page(rt, reads, |i| slot.buffer.wrapping_add(i * rt.page_size)) {
            None => install_all(rt, reads, slot.buffer),
            Some(bad) => install_recovered(rt, reads, slot.buffer, bad),
        },
        Err(ReadError::InFlight(e)) => {
            // Reads may still be in flight into the buffers: the slot
            // cannot be reused, and the page cannot be served.
            rt.fatal(&format!("submitting page reads failed: {e}"))
        }
        Err(ReadError::Failed(i, failure)) => {
            let bad = BadRead::Request {
                at: Some(i),
                failure,
            };
            install_recovered(rt, reads, slot.buffer, bad)
        }
    }
    reads.clear();
}

/// Installs the demand page, then the read-ahead pages in runs of one call.
fn install_all(rt: &Shared, reads: &[PageRead], buffer: *mut u8) {
    let buffer = |i: usize| buffer.wrapping_add(i * rt.page_size);
    finish_read(rt, &reads[0], buffer(0));
    let mut run = 1;
    while run < reads.len() {
        let mut end = run + 1;
        while end < reads.len() && reads[end].page == reads[end - 1].page + 1 {
            end += 1;
        }
        finish_read_ahead_run(rt, &reads[run..end], buffer(run));
        run = end;
    }
}

/// A read failed (`failed`: which one and why; the others may have failed
/// unseen), or a page failed its checksum: page by page, each good page is
/// installed and each bad one retried or given up ([`recover`]).
fn install_recovered(rt: &Shared, reads: &[PageRead], buffer: *mut u8, bad: BadRead) {
    for (i, read) in reads.iter().enumerate() {
        let buf = buffer.wrapping_add(i * rt.page_size);
        if settle(rt, i, read, buf, bad) {
            finish_read(rt, read, buf);
        }
    }
}

/// pread of each claimed page into its buffer; the failing read's index.
fn pread_all(rt: &Shared, buffer: *mut u8, reads: &[PageRead]) -> ReadResult {
    for (i, read) in reads.iter().enumerate() {
        // SAFETY: the slot holds a page-sized buffer per read, ours alone.
        let buf =
            unsafe { std::slice::from_raw_parts_mut(buffer.add(i * rt.page_size), rt.page_size) };
        if let Some(e) = rt.injector().read() {
            return Err(ReadError::Failed(i, ReadFailure::from(e)));
        }
        rt.store()
            .read(read.slot, buf)
            .map_err(|e| ReadError::Failed(i, ReadFailure::from(e)))?;
    }
    Ok(())
}

/// How reading a slot's pages went wrong.
enum ReadError {
    /// The reads could not be submitted, and some may still be in flight.
    InFlight(io::Error),
    /// The read of page `.0` failed.
    Failed(usize, ReadFailure),
}

type ReadResult = std::result::Result<(), ReadError>;

/// Submits a read per claimed page to the slot's ring at once and waits
/// for all of them by polling the ring for up to `POLL_NS`, then asleep.
/// The faulting thread keeps its CPU meanwhile, so the completion needs no
/// wake-up of a sleeping thread on another CPU.
fn ring_read_all(
    rt: &Shared,
    ring: &mut IoUring,
    taskrun_flag: bool,
    buffer: *mut u8,
    reads: &[PageRead],
    cpus: usize,
) -> ReadResult {
    for i in 0..reads.len() {
        // SAFETY: each buffer stays valid and untouched until its
        // completion is reaped below, before this function returns.
        if unsafe { ring.submission().push(&read_entry(rt, buffer, reads, i)) }.is_err() {
            let full = io::Error::other("the slot's ring is smaller than its buffers");
            return Err(ReadError::InFlight(full));
        }
    }
    let mut pending = reads.len();
    let mut failed = None;
    let mut poll_clock = PollClock::start(POLL_NS);
    let mut submitted = false;
    while pending > 0 {
        let poll = poll_clock.polling() && cpus_to_spare(cpus);
        let enter = !submitted || !poll || poll_clock.due_for_entry();
        if enter || must_enter(ring, taskrun_flag) {
            let want = if submitted && !poll { pending } else { 0 };
            // Entering the kernel submits what is queued, then runs the
            // completions' task work.
            match ring.submit_and_wait(want) {
                Ok(_) => submitted = true,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
                // Reads may still be in flight into the buffers: the caller
                // stops the process.
                Err(e) => return Err(ReadError::InFlight(e)),
            }
        }
        let (_, mut queue, completions) = ring.split();
        for cqe in completions {
            let i = cqe.user_data() as usize;
            let error = match cqe.result() {
                n if n == rt.page_size as i32 => {
                    pending -= 1;
                    rt.store().read_done(reads[i].slot);
                    if let Some(e) = rt.injector().read() {
                        failed.get_or_insert(ReadError::Failed(i, ReadFailure::from(e)));
                    }
                    continue;
                }
                // Transient, as the handler threads' ring treats them: the
                // read goes back in the queue (which has room for every
                // read of the slot, and is empty once submitted).
                n if n == -libc::EAGAIN || n == -libc::EINTR => {
                    // SAFETY: as above; the buffer is still ours.
                    if unsafe { queue.push(&read_entry(rt, buffer, reads, i)) }.is_ok() {
                        submitted = false;
                        continue;
                    }
                    ReadFailure::Io(-n)
                }
                n => ReadFailure::from_completion(n, rt.page_size)
                    .unwrap_or(ReadFailure::Io(libc::EIO)),
            };
            pending -= 1;
            failed.get_or_insert(ReadError::Failed(i, error));
        }
        drop(queue);
        std::hint::spin_loop();
    }
    failed.map_or(Ok(()), Err)
}

/// The read of `reads[i]` into the slot's `i`-th page buffer.
fn read_entry(rt: &Shared, buffer: *mut u8, reads: &[PageRead], i: usize) -> squeue::Entry {
    let (fd, offset) = rt.store().read_target(reads[i].slot);
    let into = buffer.wrapping_add(i * rt.page_size);
    opcode::Read::new(types::Fd(fd), into, rt.page_size as u32)
        .offset(offset)
        .build()
        .user_data(i as u64)
}

/// Whether a faulting thread may poll: only while no more threads are
/// resolving faults than the process has CPUs, so that a thread that
/// misses while every CPU polls sleeps, and all of them do, rather than
/// queue behind the pollers. Two threads missing at once on two CPUs both
/// poll: a thread waiting for the device leaves its CPU mostly idle, and
/// polling there beats sleeping by about 12% in pages/s; the evictor
/// still gets its turn, as the scheduler shares a CPU between a poller and
/// a runnable thread, and a poll lasts at most `POLL_NS`. With a single
/// CPU a poller would hold up the read-ahead thread and the evictor it may
/// need, so it never polls.
fn cpus_to_spare(cpus: usize) -> bool {
    let faulting = fork_gate::faulting();
    faulting < cpus || (cpus > 1 && faulting == cpus)
}

fn current_thread_id() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}
