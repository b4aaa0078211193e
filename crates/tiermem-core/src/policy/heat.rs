//! Per-page heat: how often a page has been seen in use, and how many more
//! turns of the CLOCK hand it may survive unreferenced.
//!
//! Accesses to mapped pages do not trap, so a pager learns of a page's use
//! only from the events that do: a miss, a write fault on a clean page, a
//! probation hit. One bit ("referenced since the hand last passed") forgets
//! everything older than one turn of the hand, which makes CLOCK an LRU
//! approximation. Under skewed access (zipf) the pages on the edge of the
//! budget are the warm ones that keep missing: each miss is evidence the
//! one bit throws away. The heat byte keeps it, for every page of the
//! arena, resident or not, so a page that comes back for the fifth time is
//! known as warm, which a ghost list of recent victims would have forgotten.
//!
//! Encoding (one `AtomicU8` per page, in [`PageTable`]):
//! - low nibble: credits, the extra turns of the hand the page survives
//!   without a new reference. A page the hand finds referenced already gets
//!   one turn for that (the bit is cleared, the page stays); on top of it, a
//!   reference grants one credit per use before this one. A page seen once
//!   (a scan, a one-off lookup, a single write miss) so gets exactly the one
//!   turn plain CLOCK gives it;
//! - high nibble: observed uses, saturating at [`MAX_USES`].
//!
//! No aging: the uses never decay. Halving them every eight rings' worth of
//! victims (as TinyLFU ages its counts) was built and measured, and it did
//! not pay: 0.1–0.3 points fewer hits in every simulation
//! (`docs/sim/clock_heat.py`, with a steady and with a drifting zipf) and
//! the same hit ratio in a 90 s bench run. A page that has gone cold keeps
//! its count but earns credits only when it is referenced again.

use std::sync::atomic::Ordering;

use crate::page_table::{PageNo, PageTable};

/// Saturation of the use count.
pub const MAX_USES: u8 = 15;

const USES_SHIFT: u32 = 4;
const CREDITS_MASK: u8 = 0x0f;

fn uses(heat: u8) -> u8 {
    heat >> USES_SHIFT
}

fn credits(heat: u8) -> u8 {
    heat & CREDITS_MASK
}

fn pack(uses: u8, credits: u8) -> u8 {
    (uses.min(MAX_USES) << USES_SHIFT) | credits.min(CREDITS_MASK)
}

/// The page missed and is coming back: one more use, no credit. Called on
/// the fault path; one atomic read-modify-write, no lock.
pub fn on_miss(table: &PageTable, page: PageNo) {
    update(table, page, |h| pack(uses(h).saturating_add(1), 0));
}

/// The hand found the page referenced: one more use, and a credit for each
/// use before this one.
pub fn on_reference(table: &PageTable, page: PageNo) {
    update(table, page, |h| {
        let uses = uses(h).saturating_add(1).min(MAX_USES);
        pack(uses, uses - 1)
    });
}

/// The hand found the page unreferenced: if it has credits left, spends up
/// to `cost` of them and returns true (the page stays for another turn).
pub fn spend_credits(table: &PageTable, page: PageNo, cost: u8) -> bool {
    let before = update(table, page, |h| {
        pack(uses(h), credits(h).saturating_sub(cost))
    });
    credits(before) > 0
}

/// Observed uses so far (for tests and diagnostics).
pub fn uses_of(table: &PageTable, page: PageNo) -> u8 {
    uses(table.heat(page).load(Ordering::Relaxed))
}

/// Returns the heat before the update. Relaxed: heat only steers the
/// choice of victims; no other memory is published through it.
fn update(table: &PageTable, page: PageNo, f: impl Fn(u8) -> u8) -> u8 {
    let cell = table.heat(page);
    let mut cur = cell.load(Ordering::Relaxed);
    loop {
        match cell.compare_exchange_weak(cur, f(cur), Ordering::Relaxed, Ordering::Relaxed) {
            Ok(before) => return before,
            Err(actual) => cur = actual,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_miss_counts_a_use_and_grants_no_credit() {
        let t = PageTable::new(8).unwrap();
        on_miss(&t, 3);
        on_miss(&t, 3);
        assert_eq!(uses_of(&t, 3), 2);
        assert!(!spend_credits(&t, 3, 1));
        assert_eq!(uses_of(&t, 4), 0, "neighbours are untouched");
    }

    #[test]
    fn a_reference_grants_a_credit_per_earlier_use() {
        let t = PageTable::new(8).unwrap();
        on_miss(&t, 1);
        on_miss(&t, 1);
        on_reference(&t, 1);
        assert_eq!(uses_of(&t, 1), 3);
        for turn in 0..2 {
            assert!(spend_credits(&t, 1, 1), "turn {turn} should be paid");
        }
        assert!(!spend_credits(&t, 1, 1));
        assert_eq!(uses_of(&t, 1), 3, "spending credits keeps the uses");
    }

    #[test]
    fn a_page_referenced_once_gets_no_credit() {
        let t = PageTable::new(8).unwrap();
        on_reference(&t, 3);
        assert_eq!(uses_of(&t, 3), 1);
        assert!(!spend_credits(&t, 3, 1));
    }

    #[test]
    fn uses_and_credits_saturate() {
        let t = PageTable::new(8).unwrap();
        for _ in 0..100 {
            on_miss(&t, 0);
        }
        assert_eq!(uses_of(&t, 0), MAX_USES);
        on_reference(&t, 0);
        assert_eq!(uses_of(&t, 0), MAX_USES);
        let paid = (0..100).take_while(|_| spend_credits(&t, 0, 1)).count();
        assert_eq!(paid, MAX_USES as usize - 1);
    }

    #[test]
    fn a_miss_cancels_credits_left_from_an_earlier_stay() {
        let t = PageTable::new(8).unwrap();
        on_reference(&t, 2);
        on_reference(&t, 2);
        on_miss(&t, 2);
        assert!(!spend_credits(&t, 2, 1));
        assert_eq!(uses_of(&t, 2), 3);
    }

    #[test]
    fn spending_more_than_is_left_empties_the_credits() {
        let t = PageTable::new(8).unwrap();
        for _ in 0..4 {
            on_miss(&t, 5);
        }
        on_reference(&t, 5);
        assert!(spend_credits(&t, 5, 16), "four credits: one more turn");
        assert!(!spend_credits(&t, 5, 1));
    }
}
