//! The synchronous fault loop: pread into one runtime-owned buffer per
//! handler thread. The fallback where io_uring is unavailable.

use std::io;

use super::{begin_fault, finish_read, resolve_missing, Missing, FAULT_BATCH};
use crate::runtime::Shared;
use crate::sys::mem::{wait_readable, Mapping, Wake};
use crate::sys::uffd::message_buffer;

pub(crate) fn run(rt: &Shared) {
    let mut raw = message_buffer(FAULT_BATCH);
    let mut faults = Vec::with_capacity(FAULT_BATCH);
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
                    rt.pause.park();
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
                match resolve_missing(rt, page, fault) {
                    Missing::Resolved => break,
                    Missing::Read(read) => {
                        // SAFETY: the handler owns `io_buffer` (page-sized).
                        let buf = unsafe {
                            std::slice::from_raw_parts_mut(io_buffer.as_ptr(), rt.page_size)
                        };
                        let submitted = crate::sys::now_ns();
                        let result = rt.store().read(read.slot, buf);
                        rt.read_latency
                            .record(crate::sys::now_ns().saturating_sub(submitted));
                        if let Err(e) = result {
                            rt.fatal(&format!(
                                "reading page {} from backing slot {} failed: {e}",
                                read.page, read.slot
                            ));
                        }
                        finish_read(rt, &read, io_buffer.as_ptr());
                        break;
                    }
                    // Nothing of ours is in flight: the owner finishes soon.
                    Missing::Busy => super::backoff(),
                }
            }
        }
    }
}
