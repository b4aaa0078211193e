//! CLOCK (second chance) with real reference detection, and with credits
//! for pages that keep being used.
//!
//! Resident pages sit in a ring. The hand takes a page whose `REFERENCED`
//! bit is set, clears the bit and puts it back; one whose bit is clear is
//! picked, unless it still has credits (see below). Accesses to mapped
//! pages do not trap, so the bit is fed by events that do:
//! - a write fault on a clean page (dirty tracking write-protects them);
//! - a probation hit: picked pages are first unmapped but kept in a DRAM
//!   frame (1/4 of the budget). A touch there costs a minor fault, no I/O,
//!   and brings the page back referenced. Only pages that stay untouched
//!   through probation are written out.
//!
//! **Credits.** Each page's heat byte (`policy::heat`) counts the events
//! seen for it, misses included, across its stays in DRAM. When the hand
//! finds a page referenced it clears the bit, as plain CLOCK does, and also
//! grants a credit per earlier use: an extra turn of the hand the page
//! survives without a new reference. A page that has missed and been
//! referenced many times (the warm edge of a skewed working set) so
//! outlasts one seen once, where one bit would treat them alike; a page
//! seen once is treated exactly as before. Uses saturate at 15, which
//! bounds how long a page that has gone cold can stay: 15 turns of the
//! hand after its last reference.
//!
//! **Bounded work.** Within one call of the evictor each further turn of
//! the hand spends credits twice as fast, so the evictor never waits out
//! those turns when the whole working set changes at once: a call ends
//! within seven turns (one clearing bits, at most five spending credits,
//! one picking), against three for plain CLOCK. That worst case, about
//! 1.6 million visits for a 1 GiB budget of 4 KiB pages, costs tens of
//! milliseconds once per change of working set; in steady state victims
//! turn up within the first turn.
//!
//! **Kept huge regions.** In memory advised `MADV_HUGEPAGE`, the hand
//! passes over pages of kept 2 MiB regions in its first turn of a call
//! (`policy::huge_regions`); from the second turn on it takes them like any
//! other, so kept regions can slow a call down but never leave it without
//! victims.
//!
//! Cost per page: one 4 KiB copy into a frame when demoted, and for pages
//! touched during probation one fault (a few microseconds) instead of a
//! device read.

use crossbeam_queue::SegQueue;

use super::heat;
use super::{mark_queued, unmark_queued, Policy};
use crate::config::PolicyKind;
use crate::page_table::{Kind, PageNo, PageTable};

/// 64/256 = 1/4 of the budget. Under zipf(0.99), 2 GiB in 512 MiB, a
/// quarter serves 56-63K pages/s against 46-55K for an eighth, in rounds
/// that alternate the two, with 0.6-0.8 points more hits; uniform access
/// shows no difference.
const PROBATION_SHARE: u32 = 64;

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

    fn note_miss(&self, table: &PageTable, page: PageNo) {
        heat::on_miss(table, page);
    }

    fn pick_victims(&self, table: &PageTable, want: usize, out: &mut Vec<PageNo>) {
        // Each visit spends one credit in the first turn of the hand of this
        // call, two in the second, four in the third...: when every page is
        // warm (as after a change of working set) a call still ends within
        // seven turns instead of waiting out 15 turns of credits, and pages
        // with fewer credits still leave first.
        let ring_len = self.ring.len().max(1);
        for looked in 0..7 * ring_len + want {
            if out.len() >= want {
                break;
            }
            let cost = 1u8 << (looked / ring_len).min(4);
            let Some(page) = self.ring.pop() else { break };
            let state = table.load(page);
            if state.kind() == Kind::Resident && state.is_referenced() {
                table.update(page, |s| s.with_referenced(false));
                heat::on_reference(table, page);
                self.ring.push(page);
                continue;
            }
            if state.kind() == Kind::Resident && heat::spend_credits(table, page, cost) {
                self.ring.push(page);
                continue;
            }
            // Kept huge regions shield their pages in the hand's first turn
            // of a call only: whatever the regions hold, a call that finds
            // too few victims in one turn takes them in the next.
            if looked < ring_len && state.kind() == Kind::Resident && table.regions().shields(page)
            {
                self.ring.push(page);
                continue;
            }
            if unmark_queued(table, page).kind() == Kind::Resident {
                out.push(page);
            }
        }
        table.regions().count_demoted(out.len());
    }

    fn probation_share(&self) -> u32 {
        PROBATION_SHARE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_table::PageState;
    use crate::policy::huge_regions;

    fn resident(table: &PageTable, page: PageNo, referenced: bool) {
        table.update_unchecked(page, |s| {
            s.with_kind(Kind::Resident).with_referenced(referenced)
        });
    }

    #[test]
    fn an_unreferenced_page_seen_once_goes_first() {
        let t = PageTable::new(16).unwrap();
        let clock = Clock::default();
        for page in 0..4 {
            resident(&t, page, page != 2);
            clock.note_miss(&t, page);
            clock.admit(&t, page);
        }
        let mut out = Vec::new();
        clock.pick_victims(&t, 1, &mut out);
        assert_eq!(out, [2]);
    }

    #[test]
    fn a_page_that_keeps_missing_outlasts_one_seen_once() {
        let t = PageTable::new(16).unwrap();
        let clock = Clock::default();
        // Page 7 has missed five times before; page 8 is new. Both were
        // referenced once during this stay.
        for _ in 0..5 {
            clock.note_miss(&t, 7);
        }
        for page in [7, 8] {
            resident(&t, page, true);
            clock.admit(&t, page);
        }
        let mut out = Vec::new();
        clock.pick_victims(&t, 1, &mut out);
        assert_eq!(out, [8], "the page with one use leaves first");
        out.clear();
        clock.pick_victims(&t, 1, &mut out);
        assert_eq!(out, [7], "credits run out without new references");
        assert_eq!(t.load(7).kind(), Kind::Resident);
        assert!(!t.load(7).is_queued());
    }

    /// Eight resident pages in the ring, each missed often enough to
    /// saturate its uses.
    fn eight_warm_pages(referenced: bool) -> (PageTable, Clock) {
        let t = PageTable::new(16).unwrap();
        let clock = Clock::default();
        for page in 0..8 {
            for _ in 0..20 {
                clock.note_miss(&t, page);
            }
            resident(&t, page, referenced);
            if !referenced {
                heat::on_reference(&t, page);
            }
            clock.admit(&t, page);
        }
        (t, clock)
    }

    #[test]
    fn the_hand_ends_when_every_page_is_referenced_again() {
        let (t, clock) = eight_warm_pages(true);
        let mut out = Vec::new();
        clock.pick_victims(&t, 3, &mut out);
        assert_eq!(out.len(), 3, "credits delay victims, they never hide them");
    }

    #[test]
    fn a_call_that_finds_no_victims_spends_credits_faster() {
        // Unreferenced, with the credits of an earlier reference.
        let (t, clock) = eight_warm_pages(false);
        // 14 credits each: 1 + 2 + 4 + 8 spent in four turns, picked in the
        // fifth, within one call.
        let mut out = Vec::new();
        clock.pick_victims(&t, 2, &mut out);
        assert_eq!(out, [0, 1]);
        assert!(!heat::spend_credits(&t, 2, 1), "page 2 is next");
    }

    #[test]
    fn kept_huge_regions_never_hide_every_victim() {
        // One advised 2 MiB region, resident, kept and proven, is all the
        // ring holds: its samples leave in the first turn, the rest in the
        // second.
        let t = PageTable::new(1024).unwrap();
        let clock = Clock::default();
        t.regions().advise(0, 512, true);
        for page in 0..512 {
            resident(&t, page, false);
            t.regions().on_resident(page, true);
            clock.admit(&t, page);
        }
        t.regions().settle(3072);
        t.regions().on_resident(0, true);
        let mut out = Vec::new();
        clock.pick_victims(&t, 64, &mut out);
        assert_eq!(out.len(), 64, "a call still finds what it asks for");
        assert_eq!(
            &out[..huge_regions::SAMPLES as usize],
            &(0..huge_regions::SAMPLES).collect::<Vec<_>>()[..],
            "the region's samples go first"
        );
    }

    #[test]
    fn pages_no_longer_resident_are_skipped() {
        let t = PageTable::new(16).unwrap();
        let clock = Clock::default();
        resident(&t, 1, false);
        clock.admit(&t, 1);
        resident(&t, 2, false);
        clock.admit(&t, 2);
        t.update_unchecked(1, |_| PageState::FREE.with_kind(Kind::Stored));
        let mut out = Vec::new();
        clock.pick_victims(&t, 2, &mut out);
        assert_eq!(out, [2]);
    }
}
