//! Replacement policies: which resident pages leave DRAM first.
//!
//! A policy sees pages enter ([`Policy::admit`], on the fault path: it must
//! not block) and chooses victims for the evictor. Reference information
//! lives in the page-state word (`REFERENCED`), set by the fault path when a
//! write fault or a probation hit shows that a page is in use.

mod clock;
mod fifo;
pub(crate) mod heat;
pub mod huge_regions;
mod s3fifo;

pub use clock::Clock;
pub use fifo::Fifo;
pub use s3fifo::S3Fifo;

use crate::config::PolicyKind;
use crate::page_table::{PageNo, PageTable};

pub trait Policy: Send + Sync {
    fn kind(&self) -> PolicyKind;

    /// `page` became resident.
    fn admit(&self, table: &PageTable, page: PageNo);

    /// A read fault on `page` missed and the page was read back from the
    /// store on demand (not read ahead). A write miss is not reported here:
    /// it enters referenced, and the policy sees it that way. Called on the
    /// fault path before [`Policy::admit`]: it must not block or allocate.
    fn note_miss(&self, _table: &PageTable, _page: PageNo) {}

    /// Appends up to `want` resident pages to `out`, best victims first. The
    /// caller re-checks each page's state when it takes ownership.
    fn pick_victims(&self, table: &PageTable, want: usize, out: &mut Vec<PageNo>);

    /// Share of the budget (in 1/256ths) held as probation: pages unmapped
    /// but still in DRAM, so that a touch is seen as a reference without I/O.
    fn probation_share(&self) -> u32;
}

pub fn new_policy(kind: PolicyKind) -> Box<dyn Policy> {
    match kind {
        PolicyKind::Fifo => Box::new(Fifo::default()),
        PolicyKind::Clock => Box::new(Clock::default()),
        PolicyKind::S3Fifo => Box::new(S3Fifo::default()),
    }
}

/// Queue plumbing shared by the policies: at most one queue entry per page,
/// tracked by the `QUEUED` bit so duplicates never pile up.
pub(crate) fn mark_queued(table: &PageTable, page: PageNo) -> bool {
    let before = table.update_returning_old(page, |s| s.with_queued(true));
    !before.is_queued()
}

pub(crate) fn unmark_queued(table: &PageTable, page: PageNo) -> crate::page_table::PageState {
    table.update(page, |s| s.with_queued(false))
}
