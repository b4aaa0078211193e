//! Reading faults off the userfaultfd and resolving each: what needs no
//! I/O is served at once; a page that must come from the store is claimed
//! and its read started; a page someone else owns right now is set aside
//! and retried after the next completion.

use std::io;

use super::RingHandler;
use crate::fault::markers::is_parked_read_ahead;
use crate::fault::readahead::Window;
use crate::fault::resolve::{begin_fault, resolve_fault, Missing};
use crate::fault::FAULT_BATCH;
use crate::page_table::PageNo;
use crate::sys::uffd::Fault;

impl RingHandler<'_> {
    pub(super) fn read_faults(&mut self) {
        loop {
            match self.rt.uffd.read_faults(&mut self.raw, &mut self.faults) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.uffd_ready = false;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => self
                    .rt
                    .fatal(&format!("reading userfaultfd events failed: {e}")),
            }
            if !self.faults.is_empty() {
                self.note_activity();
            }
            for i in 0..self.faults.len() {
                let fault = self.faults[i];
                if let Some(page) = begin_fault(self.rt, &fault) {
                    self.resolve(page, &fault);
                }
            }
            if self.faults.len() < FAULT_BATCH {
                return;
            }
        }
    }

    pub(super) fn resolve(&mut self, page: PageNo, fault: &Fault) {
        let parked = !fault.write_protect && is_parked_read_ahead(self.rt, page);
        match resolve_fault(self.rt, page, fault) {
            Missing::Resolved if parked => self.marker_reached(page),
            Missing::Resolved => {}
            Missing::Busy => {
                self.deferred.push((page, *fault));
                if !fault.write_protect {
                    self.continue_stream(page);
                }
            }
            Missing::Read(read) => match self.rt.config.organization.prefetch {
                // A fixed degree reads the next pages with the missing one,
                // in one request where their slots are adjacent.
                Some(degree) => self.read_run(vec![read], Window::next_pages(page, degree)),
                None => self.read_missing(read),
            },
        }
    }

    pub(super) fn retry_deferred(&mut self) {
        let deferred = std::mem::take(&mut self.deferred);
        for (page, fault) in deferred {
            self.resolve(page, &fault);
        }
    }
}
