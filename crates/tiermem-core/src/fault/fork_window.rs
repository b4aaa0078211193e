//! Faults served while the runtime is paused for a fork.
//!
//! glibc's `fork()` keeps running on the forking thread after the
//! `pthread_atfork` prepare handlers that pause the runtime: it locks the
//! NSS database, the stdio list and the malloc fork lock, forks, then
//! unlocks them again. The NSS database, like anything else the program
//! allocated, can live in tiered memory and be evicted. A fault there with
//! every handler parked never ends: the process hangs in `fork()`.
//!
//! So a parked handler keeps watching the userfaultfd, and serves the
//! **forking thread's** faults in full before waking it:
//! - the read is synchronous (pread into a buffer mapped before parking), so
//!   nothing is in flight when the forking thread runs on;
//! - the page's state word is final before the wake-up, so the fork, which
//!   only that thread can start, never copies a page half-way through a
//!   transition into the child;
//! - the evictor is parked, so DRAM is charged past the budget for these few
//!   pages ([`Shared::charge_one_page`]); it is given back after the fork;
//! - the window's own buffers are allocated before the handler counts as
//!   parked. Serving a fault may still allocate runtime memory from glibc's
//!   heap (the policy's queue grows in blocks): glibc takes its malloc
//!   fork lock last, right around the fork system call, and touches no
//!   tiered memory while it holds it, so no fault is served then.
//!
//! Faults of every other thread are taken off the queue and left waiting.
//! When the pause ends, one wake over the whole arena sends them back to
//! fault again, and the resumed handlers serve them as usual.

use std::io;

use super::install::set_quiet_installs;
use super::pread::read_and_install;
use super::resolve::{begin_fault, resolve_fault, Missing};
use super::FAULT_BATCH;
use crate::shared::Shared;
use crate::sys::mem::Mapping;
use crate::sys::uffd::{message_buffer, Fault};

/// How long one wait on the userfaultfd lasts before the pause is looked at
/// again: the resume after a fork is seen within this.
const POLL_MS: i32 = 1;
/// How long to wait before retrying a page someone else owns.
const BUSY_RETRY: std::time::Duration = std::time::Duration::from_micros(20);
/// Retries after which a page still owned by another thread is reported
/// (about five seconds): the fork cannot go on without it.
const BUSY_REPORT_AFTER: u32 = 250_000;

/// A fault handler's safe point during a fork: parks it, serving the
/// forking thread's faults until the pause ends.
pub(crate) fn park_serving(rt: &Shared) {
    // The window's buffers are allocated before the handler counts as
    // parked, while nothing of the fork holds glibc's locks yet.
    let mut window = match ForkWindow::new(rt) {
        Ok(window) => Some(window),
        Err(e) => {
            eprintln!("tiermem: a fault handler parks without serving the fork ({e})");
            None
        }
    };
    rt.pause.park_while(|| match &mut window {
        Some(window) => window.serve_once(),
        None => std::thread::sleep(std::time::Duration::from_millis(POLL_MS as u64)),
    });
    if let Some(window) = window {
        window.release_others();
    }
}

struct ForkWindow<'a> {
    rt: &'a Shared,
    raw: Vec<linux_raw_sys::general::uffd_msg>,
    faults: Vec<Fault>,
    io_buffer: Mapping,
    /// Faults of other threads were taken off the queue.
    others_waiting: bool,
}

impl<'a> ForkWindow<'a> {
    fn new(rt: &'a Shared) -> crate::error::Result<ForkWindow<'a>> {
        Ok(ForkWindow {
            rt,
            raw: message_buffer(FAULT_BATCH),
            faults: Vec::with_capacity(FAULT_BATCH),
            io_buffer: Mapping::reserve_aligned(
                rt.page_size,
                rt.page_size,
                "allocating the fork window's read buffer",
            )?,
            others_waiting: false,
        })
    }

    /// Waits up to `POLL_MS` for faults and serves the forking thread's.
    fn serve_once(&mut self) {
        let rt = self.rt;
        if !wait_for_faults(rt.uffd.raw()) {
            return;
        }
        match rt.uffd.read_faults(&mut self.raw, &mut self.faults) {
            Ok(()) => {}
            // Another parked handler took them.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return,
            Err(e) => rt.fatal(&format!("reading userfaultfd events failed: {e}")),
        }
        let forking = rt.pause.forking_thread();
        for i in 0..self.faults.len() {
            let fault = self.faults[i];
            if forking != 0 && fault.thread_id == forking {
                self.serve(&fault);
            } else {
                self.others_waiting = true;
            }
        }
    }

    /// Resolves one fault in full, then wakes the thread that took it.
    fn serve(&self, fault: &Fault) {
        let rt = self.rt;
        set_quiet_installs(true);
        if let Some(page) = begin_fault(rt, fault) {
            let mut retries = 0u32;
            loop {
                match resolve_fault(rt, page, fault) {
                    Missing::Resolved => break,
                    Missing::Read(read) => {
                        read_and_install(rt, &read, &self.io_buffer);
                        break;
                    }
                    Missing::Busy => {
                        retries += 1;
                        if retries == BUSY_REPORT_AFTER {
                            eprintln!(
                                "tiermem: fork stalls: the forking thread (tid {}) has waited \
                                 about 5 s for page {page} at {:#x}, which another thread owns",
                                fault.thread_id,
                                rt.page_addr(page)
                            );
                        }
                        std::thread::sleep(BUSY_RETRY);
                    }
                }
            }
        }
        set_quiet_installs(false);
        let base = fault.address & !(rt.base_page - 1);
        rt.uffd.wake(base, rt.base_page);
    }

    /// Sends the threads whose faults were set aside back to fault again.
    fn release_others(&self) {
        if self.others_waiting {
            self.rt.uffd.wake(self.rt.arena.addr(), self.rt.arena.len());
        }
    }
}

/// Polls `fd` for up to `POLL_MS`; true if it is readable.
fn wait_for_faults(fd: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd.
    let rc = unsafe { libc::poll(&mut pfd, 1, POLL_MS) };
    rc > 0 && pfd.revents & libc::POLLIN != 0
}
