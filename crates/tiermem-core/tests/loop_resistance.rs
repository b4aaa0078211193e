//! A loop larger than the budget, then a working set that fits: CLOCK's
//! insertion turns thrash-resistant for the first and back to recency for
//! the second (`policy::duel`).
//!
//! Phase 1 reads a region of 1.5× the budget in the same order pass after
//! pass. Recency insertion loses every page just before its next turn;
//! thrash-resistant insertion keeps a fixed part of the loop, which hits.
//! Phase 2 reads a second region of half the budget, written before the loop
//! and so paged out: it must become resident again, and hit. Every byte of
//! every page is checked on every pass; hits are counted with `page_ins`
//! (the compressed tier is off, so every miss is a device read). The
//! process's resident memory stays within the budget plus the runtime's own.

mod common;

use std::time::Duration;

use tiermem_core::{PolicyKind, TieredBuf};

const PAGE: usize = 4096;
const BUDGET: usize = 32 << 20;
const LOOP_PAGES: usize = 3 * BUDGET / 2 / PAGE;
const FIT_PAGES: usize = BUDGET / 2 / PAGE;
/// Prime, so coprime with both regions' page counts: k * STRIDE visits
/// every page once per pass.
const STRIDE: usize = 7919;

/// Byte `i` of page `page`: distinct per page and per offset, and not
/// compressible or same-filled, so the page is stored as is.
fn byte(page: usize, i: usize) -> u8 {
    let z = ((page * PAGE + i) as u64 / 8).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let z = (z ^ (z >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (z >> ((i % 8) * 8 + 3)) as u8
}

fn fill(base: *mut u8, first_page: usize, pages: usize) {
    for p in 0..pages {
        for i in 0..PAGE {
            // SAFETY: the caller's buffer holds `pages` pages at `base`.
            unsafe {
                base.add(p * PAGE + i)
                    .write_volatile(byte(first_page + p, i))
            };
        }
    }
}

/// Reads every byte of every page, in the same scrambled order on every
/// pass (pages [`STRIDE`] apart, so read-ahead sees no sequence and every
/// miss is a demand read); panics on a wrong byte.
fn check_pass(base: *const u8, first_page: usize, pages: usize, what: &str) {
    for k in 0..pages {
        let p = k * STRIDE % pages;
        for i in 0..PAGE {
            // SAFETY: the caller's buffer holds `pages` pages at `base`.
            let got = unsafe { base.add(p * PAGE + i).read_volatile() };
            let want = byte(first_page + p, i);
            assert_eq!(got, want, "{what}: page {p}, byte {i}");
        }
    }
}

/// Share of page reads served without a device read over `passes` runs of
/// `pass`, each reading `pages` pages.
fn hit_ratio(rt: &tiermem_core::Runtime, passes: usize, pages: usize, pass: impl Fn()) -> f64 {
    let before = rt.stats().page_ins;
    for _ in 0..passes {
        pass();
    }
    let misses = rt.stats().page_ins - before;
    1.0 - misses as f64 / (passes * pages) as f64
}

/// The process's resident memory, counted page by page
/// (`/proc/self/smaps_rollup`; VmRSS in `status` lags by per-CPU batches of
/// several MiB).
fn rss_bytes() -> usize {
    let rollup =
        std::fs::read_to_string("/proc/self/smaps_rollup").expect("/proc/self/smaps_rollup");
    let kib = rollup
        .lines()
        .find_map(|l| l.strip_prefix("Rss:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<usize>().ok())
        .expect("Rss in /proc/self/smaps_rollup");
    kib << 10
}

#[test]
fn a_loop_keeps_a_fixed_part_and_a_later_working_set_fits() {
    let _guard = common::hang_guard("loop_resistance", Duration::from_secs(240));
    let rt = common::runtime(BUDGET as u64, PAGE, PolicyKind::Clock);
    let looped = TieredBuf::new(&rt, LOOP_PAGES * PAGE).expect("loop region");
    let fits = TieredBuf::new(&rt, FIT_PAGES * PAGE).expect("fitting region");
    let (l, f) = (looped.as_ptr(), fits.as_ptr());
    let rss_before = rss_bytes();
    fill(f, LOOP_PAGES, FIT_PAGES);
    fill(l, 0, LOOP_PAGES);

    let loop_pass = || check_pass(l, 0, LOOP_PAGES, "loop");
    hit_ratio(&rt, 8, LOOP_PAGES, loop_pass);
    let looped_hits = hit_ratio(&rt, 4, LOOP_PAGES, loop_pass);
    let grown = rss_bytes().saturating_sub(rss_before);
    println!(
        "resident memory grew by {:.1} MiB for a {} MiB budget",
        grown as f64 / (1 << 20) as f64,
        BUDGET >> 20
    );
    // Whatever the insertion, mapped pages and probation frames together
    // stay within the budget; the runtime's own memory (page table, I/O
    // buffers) comes on top, and 1 MiB for the test's own.
    let own = rt.stats().metadata_bytes as usize + (1 << 20);
    assert!(
        grown <= BUDGET + own,
        "resident memory grew by {grown} bytes for a budget of {BUDGET} and {own} of the runtime's own"
    );
    let insertion = rt.stats().insertion;
    println!(
        "loop of {LOOP_PAGES} pages in {} pages: {:.1}% hits, {insertion} insertion",
        BUDGET / PAGE,
        100.0 * looped_hits
    );
    assert_eq!(insertion, "thrash-resistant");
    assert!(
        looped_hits > 0.3,
        "a loop of 1.5x the budget hit in {:.1}% of page reads: no fixed part stayed",
        100.0 * looped_hits
    );

    let fit_pass = || check_pass(f, LOOP_PAGES, FIT_PAGES, "fitting set");
    hit_ratio(&rt, 16, FIT_PAGES, fit_pass);
    let fit_hits = hit_ratio(&rt, 3, FIT_PAGES, fit_pass);
    let insertion = rt.stats().insertion;
    println!(
        "then {FIT_PAGES} pages: {:.1}% hits, {insertion} insertion",
        100.0 * fit_hits
    );
    assert!(
        fit_hits > 0.95,
        "a working set of half the budget hit in {:.1}% of page reads after the loop",
        100.0 * fit_hits
    );
}
