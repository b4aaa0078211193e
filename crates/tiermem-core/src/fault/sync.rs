//! The synchronous fault loop: pread into one runtime-owned buffer per
//! handler thread. The fallback where io_uring is unavailable.

use std::io;

use super::fork_window::park_serving;
use super::page_read::PageRead;
use super::pread::read_and_install;
use super::resolve::{begin_fault, claim_for_prefetch, resolve_fault, Missing};
use super::FAULT_BATCH;
use crate::page_table::PageNo;
use crate::shared::Shared;
use crate::sys::mem::{wait_readable, Mapping, Wake};
use crate::sys::uffd::message_buffer;

/// How long to wait before retrying a fault on a page someone else owns.
const BUSY_RETRY: std::time::Duration = std::time::Duration::from_micros(20);

pub(crate) fn run(rt: &Shared) {
    let mut raw = message_buffer(FAULT_BATCH);
    let mut faults = Vec::with_capacity(FAULT_BATCH);
    let mut group = Vec::new();
    let io_buffer = match Mapping::reserve_aligned(
        rt.page_size,
        rt.page_size,
        "allocating a handler I/O buffer",
    ) {
        Ok(m) => m,
        Err(e) => rt.fatal(&format!("{e}")),
    };
    while !rt.stopping() {
        match wait_readable(rt.uffd.raw(), &rt.stop_event, &rt.pause.event) {
            Wake::Stop => break,
            Wake::Pause => {
                if rt.pause.requested() {
                    park_serving(rt);
                }
                continue;
            }
            Wake::Ready => {}
        }
        match rt.uffd.read_faults(&mut raw, &mut faults) {
            Ok(()) => {}
            // Another handler thread took these faults.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => rt.fatal(&format!("reading userfaultfd events failed: {e}")),
        }
        for fault in &faults {
            let Some(page) = begin_fault(rt, fault) else {
                continue;
            };
            loop {
                match resolve_fault(rt, page, fault) {
                    Missing::Resolved => break,
                    Missing::Read(read) => {
                        // The prefetched pages are claimed before the miss is
                        // served, so a fault on one waits for it rather than
                        // reading it a second time.
                        claim_prefetch_group(rt, page, &mut group);
                        read_and_install(rt, &read, &io_buffer);
                        for read in &group {
                            read_and_install(rt, read, &io_buffer);
                        }
                        break;
                    }
                    // Nothing of ours is in flight: the owner (which may be
                    // writing the page out) finishes soon; leave it the CPU.
                    Missing::Busy => std::thread::sleep(BUSY_RETRY),
                }
            }
        }
    }
}

/// A fixed prefetch degree (`TIERMEM_PREFETCH`) reads the pages after a
/// demand miss too, one at a time here (the adaptive read-ahead needs the
/// io_uring loop's asynchronous reads). Claims them into `group`.
fn claim_prefetch_group(rt: &Shared, page: PageNo, group: &mut Vec<PageRead>) {
    group.clear();
    let Some(degree) = rt.config.organization.prefetch else {
        return;
    };
    let pages = (rt.arena.len() / rt.page_size) as u64;
    let next = page as u64 + 1;
    for q in (next..=page as u64 + degree as u64).take_while(|q| *q < pages) {
        group.extend(claim_for_prefetch(rt, q as PageNo));
    }
}
