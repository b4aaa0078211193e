//! A page read the fault path has claimed: what the resolve stage hands the
//! read and install stages, and what read-ahead claims in bulk.

use crate::page_table::PageNo;

/// A page read the fault path has claimed (`Loading`) and must finish.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PageRead {
    pub page: PageNo,
    pub slot: u64,
    /// Install writable and dirty: the fault was a write, or one is predicted.
    pub write: bool,
    /// The fault itself was a read (a predicted write is no reference yet).
    pub predicted: bool,
    /// Read ahead of demand: install without waking anyone.
    pub prefetch: bool,
    /// Part of a fixed-degree prefetch group spread over several requests:
    /// the demand page whose waiter is woken once the whole group is in,
    /// so the lines fetched with a miss arrive together, as in a cache.
    pub group: Option<PageNo>,
    /// The read-ahead marker of its window (as Linux's `PG_readahead`):
    /// parked uninstalled ([`park_marker`](super::markers::park_marker)),
    /// so that the program's arrival there shows as a fault and starts the
    /// next window before this one runs out.
    pub marker: bool,
    /// Read with the miss on the page before it (see
    /// [`neighbours`](super::neighbours)): mapped at once, unless it is a
    /// parked sample (`marker` set too).
    pub neighbour: bool,
    pub started_ns: u64,
}

impl PageRead {
    /// A real write fault is a reference in itself: the page will never
    /// write-fault to report one.
    pub(super) fn enters_referenced(&self) -> bool {
        self.write && !self.predicted
    }
}
