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
//! operator can find the bad block. The runtime's side of it (checked reads,
//! sealed writes, the diagnostics) is `shared::store_io`.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

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

impl StoreErrors {
    /// A write failed at `now`: when writes started failing, `now` if
    /// they worked until this one.
    pub fn write_failed_at(&self, now: u64) -> u64 {
        match self.write_failing_since_ns.compare_exchange(
            0,
            now,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => now,
            Err(since) => since,
        }
    }

    /// True the first time only: a failing write is reported once.
    pub fn first_write_report(&self) -> bool {
        !self.write_reported.swap(true, Ordering::Relaxed)
    }

    /// A write reached the store: writes work again.
    #[inline]
    pub fn write_succeeded(&self) {
        if self.write_failing_since_ns.load(Ordering::Relaxed) != 0 {
            self.write_failing_since_ns.store(0, Ordering::Release);
        }
    }

    /// When writes started failing without a success since (0: they work).
    pub fn write_failing_since(&self) -> u64 {
        self.write_failing_since_ns.load(Ordering::Acquire)
    }
}

/// How long the evictor waits before it writes pages again after a failed
/// write: long enough not to flood a failing device, short enough that
/// one bad block costs the program little.
pub(crate) const WRITE_RETRY: Duration = Duration::from_millis(100);
