//! The runtime's side of store I/O, for the fault path and the evictor
//! alike: reads checked against the page's checksum (or decrypted), writes
//! sealed, fresh slots for pages going out, and what a failed write or a
//! long wait for DRAM tells the operator (see `store_errors`).

use std::io;
use std::time::Duration;

use super::Shared;
use crate::error_policy::Injector;
use crate::frames::BATCH;
use crate::page_table::PageNo;
use crate::stats::Counters;
use crate::store_errors::ReadFailure;
use crate::sys::mem::Mapping;
use crate::sys::now_ns;

impl Shared {
    pub fn injector(&self) -> &Injector {
        &self.injector
    }

    /// Reads `slot` into `buf` (page-sized) and checks it is `page`'s.
    pub fn read_slot(&self, page: PageNo, slot: u64, buf: &mut [u8]) -> Result<(), ReadFailure> {
        if let Some(e) = self.injector.read() {
            return Err(ReadFailure::from(e));
        }
        self.store().read(slot, buf).map_err(ReadFailure::from)?;
        self.check_read(page, slot, buf)
    }

    /// Checks bytes read from `slot` against `page`'s checksum, or
    /// decrypts them in place and checks their tag.
    #[inline]
    pub fn check_read(&self, page: PageNo, slot: u64, buf: &mut [u8]) -> Result<(), ReadFailure> {
        let good = match &self.cipher {
            Some(cipher) => cipher.decrypt(page, slot, buf),
            None => self.checksums.verify(page, slot, buf),
        };
        if good {
            return Ok(());
        }
        Counters::add(&self.counters.checksum_errors, 1);
        Err(ReadFailure::Checksum)
    }

    /// Prepares `data`, about to be written to `slot` for `page`: records
    /// its checksum, or encrypts it into `scratch` (a page-sized buffer the
    /// caller owns). Returns what to write.
    #[inline]
    pub fn seal(&self, page: PageNo, slot: u64, data: *const u8, scratch: *mut u8) -> *const u8 {
        if let Some(cipher) = &self.cipher {
            // SAFETY: `scratch` is a page-sized buffer the caller owns and
            // does not use otherwise until the write is done.
            let dst = unsafe { std::slice::from_raw_parts_mut(scratch, self.page_size) };
            cipher.encrypt(page, slot, data, dst);
            return scratch;
        }
        if self.checksums.enabled() {
            // SAFETY: `data` is a page the caller owns (a runtime frame, or a
            // resident tiered page it holds `Evicting`), readable for
            // `page_size` bytes and not written while the caller owns it.
            let bytes = unsafe { std::slice::from_raw_parts(data, self.page_size) };
            self.checksums.seal(page, slot, bytes);
        }
        data
    }

    /// Scratch for [`Shared::seal`]: `pages` page-sized buffers where
    /// encryption needs them, none otherwise.
    pub fn seal_scratch(&self, pages: usize) -> Option<Mapping> {
        self.cipher.as_ref()?;
        match Mapping::reserve(pages * self.page_size, "reserving encryption buffers") {
            Ok(m) => Some(m),
            Err(e) => self.fatal(&format!("{e}")),
        }
    }

    /// The sentence an operator needs about a failed read of `page`.
    pub fn read_diagnostic(&self, page: PageNo, slot: u64, failure: &ReadFailure) -> String {
        format!(
            "reading the page at {:#x} from {} failed: {failure}",
            self.page_addr(page),
            self.store_location(slot),
        )
    }

    /// Where `slot` lives: the file or device, and the byte offset. A
    /// private file in a directory has no name; its descriptor is given.
    fn store_location(&self, slot: u64) -> String {
        let (fd, offset) = self.store().read_target(slot);
        let path = self.store().info().path;
        let store = match path.is_dir() {
            true => format!(
                "the unnamed backing file in {} (/proc/{}/fd/{fd})",
                path.display(),
                std::process::id()
            ),
            false => format!("the backing store {}", path.display()),
        };
        format!("{store} at byte offset {offset}")
    }

    /// A write of `slots` failed with `e`. The slots are quarantined; the
    /// caller keeps the pages in DRAM and tries fresh slots later. Stops
    /// the program once writes have failed for the whole deadline.
    pub fn write_failed(&self, e: &io::Error, slots: &[u64]) {
        Counters::add(&self.counters.write_errors, 1);
        Counters::add(&self.counters.quarantined_slots, slots.len() as u64);
        let now = now_ns();
        let since = self.store_errors.write_failed_at(now);
        let location = self.store_location(slots.first().copied().unwrap_or(0));
        let deadline = self.config.errors.io_deadline;
        if now.saturating_sub(since) >= deadline.as_nanos() as u64 {
            self.fatal(&format!(
                "writes to the backing store have failed for {} s (the last: {} page(s) to \
                 {location}: {e}); stopping the program rather than waiting forever for DRAM \
                 it cannot free (TIERMEM_IO_DEADLINE sets the deadline)",
                deadline.as_secs(),
                slots.len(),
            ));
        }
        if self.store_errors.first_write_report() {
            eprintln!(
                "tiermem: writing {} page(s) to {location} failed: {e}; the pages stay in DRAM \
                 and go to other slots, and the program is stopped if writes keep failing \
                 for {} s",
                slots.len(),
                deadline.as_secs(),
            );
        }
    }

    /// A write reached the store: writes work again.
    #[inline]
    pub fn write_succeeded(&self) {
        self.store_errors.write_succeeded();
    }

    /// A fault has waited `waited` for DRAM. Says so, and on what.
    pub fn report_stall(&self, waited: Duration) {
        Counters::add(&self.counters.stalls, 1);
        let failing = self.store_errors.write_failing_since();
        let cause = match failing {
            0 => "the evictor has freed none".to_string(),
            since => format!(
                "writes to the backing store have failed for {} s",
                now_ns().saturating_sub(since) / 1_000_000_000
            ),
        };
        eprintln!(
            "tiermem: a fault has waited {} s for DRAM ({} of {} pages in use); {cause}",
            waited.as_secs(),
            self.budget.charged(),
            self.budget.limit(),
        );
    }

    /// Takes `n` fresh slots into `out`. Committed pages always find one within
    /// the backed part of the store, except in a forked child (whose own file
    /// starts empty) and while forked children keep freed slots parked: then
    /// the store grows. Returns false if it cannot grow while slots are parked
    /// (they come back as the children let them go, or end).
    pub(crate) fn take_fresh_slots(&self, n: usize, out: &mut Vec<u64>) -> bool {
        for attempt in 0..2 {
            self.slots().alloc(n, self.store().backed_slots(), out);
            if out.len() == n {
                return true;
            }
            for &slot in out.iter() {
                self.slots().free(slot);
            }
            let want = self.slots().in_use() + (n + BATCH) as u64;
            if attempt == 0 && self.store().ensure_backed(want).is_ok() {
                continue;
            }
            if self.slots().has_children() {
                return false;
            }
        }
        self.fatal(
            "the backing store is full: no slot left for dirty pages; give tiermem a larger --backing",
        )
    }
}
