//! CLOCK (second chance) with real reference detection.
//!
//! Resident pages sit in a ring; the hand gives a page whose `REFERENCED`
//! bit is set another round (clearing the bit) and picks one whose bit is
//! clear. Accesses to mapped pages do not trap, so the bit is fed by events
//! that do:
//! - a write fault on a clean page (dirty tracking write-protects them);
//! - a probation hit: picked pages are first unmapped but kept in a DRAM
//!   frame (1/8 of the budget). A touch there costs a minor fault, no I/O,
//!   and brings the page back referenced. Only pages that stay untouched
//!   through probation are written out.
//!
//! Cost per page: one 4 KiB copy into a frame when demoted, and for pages
//! touched during probation one fault (a few microseconds) instead of a
//! device read.

use crossbeam_queue::SegQueue;

use super::{mark_queued, unmark_queued, Policy};
use crate::config::PolicyKind;
use crate::page_table::{Kind, PageNo, PageTable};

/// 32/256 = 1/8 of the budget.
const PROBATION_SHARE: u32 = 32;

#[derive(Default)]
pub struct Clock {
    ring: SegQueue<PageNo>,
}

impl Policy for Clock {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Clock
    }

    fn admit(&self, table: &PageTable, page: PageNo) {
        if mark_queued(table, page) {
            self.ring.push(page);
        }
    }

    fn pick_victims(&self, table: &PageTable, want: usize, out: &mut Vec<PageNo>) {
        // Every page is looked at most twice per call: once to clear its
        // bit, once to pick it.
        let mut budget = 2 * self.ring.len() + want;
        while out.len() < want && budget > 0 {
            budget -= 1;
            let Some(page) = self.ring.pop() else { break };
            let state = table.load(page);
            if state.kind() == Kind::Resident && state.is_referenced() {
                table.update(page, |s| s.with_referenced(false));
                self.ring.push(page);
                continue;
            }
            if unmark_queued(table, page).kind() == Kind::Resident {
                out.push(page);
            }
        }
    }

    fn probation_share(&self) -> u32 {
        PROBATION_SHARE
    }
}
