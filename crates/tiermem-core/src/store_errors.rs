//! What a failed store I/O does, outside the fault path's own decisions.
//!
//! - A read is checked against its checksum ([`crate::integrity`]); an I/O
//!   error, a short read and a mismatch are all a [`ReadFailure`], which the
//!   fault path retries once and then gives up on (`fault::read_error`).
//! - A failed write loses nothing: its pages stay in DRAM, its slots are
//!   quarantined (never handed out again), and the pages go to fresh slots
//!   on the next try. Writes that keep failing for the error policy's
//!   deadline stop the program with a diagnostic, instead of leaving its
//!   threads waiting for DRAM forever.
//! - A fault that waits long for DRAM is reported, with what it waits on.
//!
//! Every diagnostic names the backing path and the byte offset, so that an
//! operator can find the bad block.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::error_policy::Injector;
use crate::page_table::PageNo;
use crate::runtime::Shared;
use crate::stats::Counters;
use crate::sys::mem::Mapping;
use crate::sys::now_ns;

/// Why a page read cannot be installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadFailure {
    /// An errno.
    Io(i32),
    Short {
        got: usize,
        want: usize,
    },
    /// The bytes read are not the bytes written there for this page.
    Checksum,
}

impl ReadFailure {
    /// From an io_uring completion's result for a request of `want` bytes;
    /// `None` if it read them all.
    pub fn from_completion(result: i32, want: usize) -> Option<ReadFailure> {
        match result {
            r if r < 0 => Some(ReadFailure::Io(-r)),
            r if r as usize != want => Some(ReadFailure::Short {
                got: r as usize,
                want,
            }),
            _ => None,
        }
    }
}

impl From<io::Error> for ReadFailure {
    /// A store's short read has no errno.
    fn from(e: io::Error) -> ReadFailure {
        match e.raw_os_error() {
            Some(errno) => ReadFailure::Io(errno),
            None => ReadFailure::Short { got: 0, want: 0 },
        }
    }
}

impl std::fmt::Display for ReadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFailure::Io(errno) => write!(f, "{}", io::Error::from_raw_os_error(*errno)),
            ReadFailure::Short { want: 0, .. } => f.write_str("short read"),
            ReadFailure::Short { got, want } => write!(f, "short read: {got} of {want} bytes"),
            ReadFailure::Checksum => f.write_str(
                "checksum mismatch: the bytes in the store are not the ones written there \
                 for this page (corrupted, or overwritten by someone else)",
            ),
        }
    }
}

/// The store's error state, shared by every thread of a runtime.
#[derive(Default)]
pub(crate) struct StoreErrors {
    /// When writes started failing without a success since (0: they work).
    write_failing_since_ns: AtomicU64,
    write_reported: AtomicBool,
}

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
        let since = match self.store_errors.write_failing_since_ns.compare_exchange(
            0,
            now,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => now,
            Err(since) => since,
        };
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
        if !self
            .store_errors
            .write_reported
            .swap(true, Ordering::Relaxed)
        {
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
        if self
            .store_errors
            .write_failing_since_ns
            .load(Ordering::Relaxed)
            != 0
        {
            self.store_errors
                .write_failing_since_ns
                .store(0, Ordering::Release);
        }
    }

    /// A fault has waited `waited` for DRAM. Says so, and on what.
    pub fn report_stall(&self, waited: Duration) {
        Counters::add(&self.counters.stalls, 1);
        let failing = self
            .store_errors
            .write_failing_since_ns
            .load(Ordering::Acquire);
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
}
