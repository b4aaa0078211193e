//! First touches in order are filled ahead of the program (`zero_ahead`):
//! every byte written survives paging, untouched pages read as zeros, the
//! budget holds, and touches out of order fill nothing ahead.

mod common;

use std::time::Duration;

use common::{hang_guard, resident_bytes, runtime};
use tiermem_core::PolicyKind;

const PAGE: usize = 4096;
const BUDGET: u64 = 16 << 20;
/// Each test takes well under a second; a hung fault path aborts it.
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// The byte at `offset` of page `page`: differs from page to page and
/// within a page, so a page installed at the wrong place is caught.
fn byte_at(page: usize, offset: usize) -> u8 {
    (page.wrapping_mul(131) ^ offset.wrapping_mul(7) ^ (offset >> 8)) as u8
}

#[test]
fn pages_written_in_order_are_filled_ahead_and_keep_every_byte() {
    let _guard = hang_guard(
        "pages_written_in_order_are_filled_ahead_and_keep_every_byte",
        HANG_LIMIT,
    );
    let rt = runtime(BUDGET, PAGE, PolicyKind::Clock);
    let region = 128 << 20;
    let base = rt.alloc(region).expect("alloc").as_ptr();
    let pages = region / PAGE;
    for page in 0..pages {
        // SAFETY: the page lies inside the allocation.
        let bytes = unsafe { std::slice::from_raw_parts_mut(base.add(page * PAGE), PAGE) };
        for (offset, b) in bytes.iter_mut().enumerate() {
            *b = byte_at(page, offset);
        }
    }
    let mut bad = 0;
    for page in 0..pages {
        // SAFETY: as above.
        let bytes = unsafe { std::slice::from_raw_parts(base.add(page * PAGE), PAGE) };
        bad += bytes
            .iter()
            .enumerate()
            .filter(|(offset, b)| **b != byte_at(page, *offset))
            .count();
    }
    let stats = rt.stats();
    assert_eq!(bad, 0, "{bad} bytes differ after paging: {stats:?}");
    assert!(
        stats.zero_fills_ahead > pages as u64 / 2,
        "a first touch in order filled only {} of {pages} pages ahead: {stats:?}",
        stats.zero_fills_ahead
    );
    assert!(stats.page_outs > 0, "nothing was paged out: {stats:?}");
    assert!(
        stats.peak_resident_bytes <= BUDGET,
        "peak {} over the budget {BUDGET}",
        stats.peak_resident_bytes
    );
}

#[test]
fn pages_filled_ahead_but_only_read_are_all_zero() {
    let _guard = hang_guard("pages_filled_ahead_but_only_read_are_all_zero", HANG_LIMIT);
    let rt = runtime(BUDGET, PAGE, PolicyKind::Clock);
    let region = 64 << 20;
    let base = rt.alloc(region).expect("alloc").as_ptr();
    let mut nonzero = 0usize;
    for page in 0..region / PAGE {
        // SAFETY: the page lies inside the allocation.
        let bytes = unsafe { std::slice::from_raw_parts(base.add(page * PAGE), PAGE) };
        nonzero += bytes.iter().filter(|b| **b != 0).count();
    }
    let stats = rt.stats();
    assert_eq!(nonzero, 0, "fresh memory read back non-zero bytes");
    assert!(
        stats.zero_fills_ahead > 0,
        "nothing was filled ahead: {stats:?}"
    );
}

#[test]
fn touches_out_of_order_fill_nothing_ahead() {
    let _guard = hang_guard("touches_out_of_order_fill_nothing_ahead", HANG_LIMIT);
    let rt = runtime(BUDGET, PAGE, PolicyKind::Clock);
    let region = 8 << 20;
    let base = rt.alloc(region).expect("alloc").as_ptr();
    // Every other page: no two touches are neighbours.
    for page in (0..region / PAGE).step_by(2) {
        // SAFETY: the page lies inside the allocation.
        unsafe { base.add(page * PAGE).write_volatile(1) };
    }
    let stats = rt.stats();
    assert_eq!(stats.zero_fills_ahead, 0, "{stats:?}");
    assert_eq!(
        resident_bytes(base, region),
        region / 2,
        "pages between the touched ones were mapped"
    );
}
