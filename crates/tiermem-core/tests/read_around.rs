//! Read-around in eviction order: a program that walks its memory in the
//! same scrambled order pass after pass (a guest's page walker, a loop over
//! objects spread across a heap) gets most of each pass from pages read
//! around its misses, though no two of its consecutive pages are adjacent
//! in the address space; uniform random pages keep read-around off. Every
//! word of every page is checked after the paging, and a hung fault path
//! aborts the binary instead of stalling the suite.

mod common;

use std::time::Duration;

use common::{hang_guard, runtime, Pages, Rng};
use tiermem_core::{PolicyKind, Stats};

const BUDGET: u64 = 16 << 20;
const REGION: usize = 64 << 20;
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// A permutation of `0..n` from `rng`: an order with no address streams.
fn scrambled(n: usize, rng: &mut Rng) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.below(i + 1));
    }
    order
}

fn demand_reads(before: &Stats, after: &Stats) -> u64 {
    (after.page_ins - before.page_ins) - (after.prefetch_issued - before.prefetch_issued)
}

#[test]
fn a_loop_in_scrambled_order_is_read_around_its_misses() {
    let _guard = hang_guard(
        "a_loop_in_scrambled_order_is_read_around_its_misses",
        HANG_LIMIT,
    );
    let rt = runtime(BUDGET, common::UNIT, PolicyKind::Clock);
    let mut pages = Pages::new(&rt, REGION);
    let n = pages.versions.len();
    let order = scrambled(n, &mut Rng(0x5851_F42D_4C95_7F2D));
    // The first pass writes the pages in the loop's order, so they leave
    // DRAM, and take their slots, in that order.
    for &page in &order {
        pages.write(page);
    }
    // One pass teaches read-around that the pages around a miss are used.
    for &page in &order {
        pages.read(page);
    }
    let before = rt.stats();
    let passes = 3;
    for _ in 0..passes {
        for &page in &order {
            pages.read(page);
        }
    }
    let st = rt.stats();
    let visits = (passes * n) as u64;
    let demand = demand_reads(&before, &st);
    let around = st.read_around_reads - before.read_around_reads;
    let used = st.read_around_used - before.read_around_used;
    eprintln!(
        "{visits} visits: {demand} demand reads, {around} pages read around, {used} of them used"
    );
    // A quarter of the region fits, and a loop larger than DRAM misses on
    // nearly every visit of a recency order: read around blocks of eight
    // slots, about one visit in eight still waits for the device.
    assert!(demand * 4 < visits, "{demand} demand reads: {st:?}");
    assert!(used * 10 >= around * 8, "{used} of {around} used: {st:?}");
    pages.verify_all();
}

#[test]
fn uniform_random_pages_keep_read_around_off() {
    let _guard = hang_guard("uniform_random_pages_keep_read_around_off", HANG_LIMIT);
    let rt = runtime(BUDGET, common::UNIT, PolicyKind::Clock);
    let mut pages = Pages::new(&rt, REGION);
    let n = pages.versions.len();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut touch = |pages: &mut Pages, count: usize| {
        for k in 0..count {
            let page = rng.below(n);
            if k % 2 == 0 {
                pages.write(page);
            } else {
                pages.read(page);
            }
        }
    };
    touch(&mut pages, 4000);
    let before = rt.stats();
    touch(&mut pages, 40_000);
    let st = rt.stats();
    let demand = demand_reads(&before, &st);
    let around = st.read_around_reads - before.read_around_reads;
    let used = st.read_around_used - before.read_around_used;
    eprintln!("{demand} demand reads, {around} pages read around, {used} of them used");
    assert!(demand > 20_000, "the pages must miss: {st:?}");
    // Only probes read around: one miss in 64, at most seven pages each
    // (0.11 per demand read); turned on, it would read up to seven.
    assert!(around * 6 < demand, "{around} read around: {st:?}");
    pages.verify_all();
}
