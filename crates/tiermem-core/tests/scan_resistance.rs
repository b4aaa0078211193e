//! Scan resistance: a hot set of half the budget is read over and over while
//! one sequential scan of twice the budget passes through. The hot set's hit
//! ratio is the share of its page reads served without a device read,
//! counted with `page_ins` once the runtime is quiet (only the hot pass runs
//! while it is counted, so every page-in in that window is a hot-set miss,
//! read-ahead of hot pages included). A probation hit is a hit: the page
//! never left DRAM.

mod common;

use std::time::Instant;

use tiermem_core::{PolicyKind, TieredBuf};

const PAGE: usize = 4096;
const BUDGET: usize = 16 << 20;
const HOT_PAGES: usize = BUDGET / 2 / PAGE;
const SCAN_PAGES: usize = 2 * BUDGET / PAGE;
/// Scan pages read between two passes over the hot set (1 MiB).
const CHUNK_PAGES: usize = 256;

fn stamp(page: usize) -> u8 {
    (page % 251) as u8 + 1
}

struct Outcome {
    /// Hit ratio of the hot passes while the scan runs.
    during: f64,
    /// Hit ratio of one pass over the hot set after the scan.
    after: f64,
    scan_page_ins: u64,
    probation_hits: u64,
    secs: f64,
}

fn run(policy: PolicyKind) -> Outcome {
    let started = Instant::now();
    let rt = common::runtime(BUDGET as u64, PAGE, policy);
    let buf = TieredBuf::new(&rt, (HOT_PAGES + SCAN_PAGES) * PAGE).expect("allocation");
    let base = buf.as_ptr();
    // Hot set first, scan region after it.
    let hot = |p: usize| p;
    let scan = |p: usize| HOT_PAGES + p;
    let touch = |page: usize| {
        // SAFETY: `page` lies inside `buf`.
        let v = unsafe { std::ptr::read_volatile(base.add(page * PAGE)) };
        assert_eq!(
            v,
            stamp(page),
            "page {page} lost its content under {policy}"
        );
    };
    // Real data everywhere (all-zero pages would be dropped, not paged in):
    // the scan region first, then the hot set, which is then read twice.
    for p in 0..SCAN_PAGES {
        // SAFETY: inside `buf`.
        unsafe { std::ptr::write_volatile(base.add(scan(p) * PAGE), stamp(scan(p))) };
    }
    for p in 0..HOT_PAGES {
        // SAFETY: inside `buf`.
        unsafe { std::ptr::write_volatile(base.add(hot(p) * PAGE), stamp(hot(p))) };
    }
    for _ in 0..2 {
        (0..HOT_PAGES).for_each(|p| touch(hot(p)));
    }

    // Page-ins once the runtime is quiet: read-ahead of the scan that is
    // still in flight would otherwise complete during the next hot pass and
    // be counted as hot-set misses.
    let page_ins = || {
        let deadline = Instant::now() + std::time::Duration::from_millis(100);
        let mut last = rt.stats().page_ins;
        loop {
            std::thread::sleep(std::time::Duration::from_millis(2));
            let now = rt.stats().page_ins;
            if now == last || Instant::now() > deadline {
                return now;
            }
            last = now;
        }
    };
    let probation_before = rt.stats().probation_hits;
    let (mut hot_reads, mut hot_misses, mut scan_page_ins) = (0u64, 0u64, 0u64);
    for chunk in (0..SCAN_PAGES).step_by(CHUNK_PAGES) {
        let before = page_ins();
        (chunk..chunk + CHUNK_PAGES).for_each(|p| touch(scan(p)));
        let mid = page_ins();
        (0..HOT_PAGES).for_each(|p| touch(hot(p)));
        let after = page_ins();
        scan_page_ins += mid - before;
        hot_misses += after - mid;
        hot_reads += HOT_PAGES as u64;
    }
    let before = page_ins();
    (0..HOT_PAGES).for_each(|p| touch(hot(p)));
    let final_misses = page_ins() - before;
    let probation_hits = rt.stats().probation_hits - probation_before;
    drop(buf);
    Outcome {
        during: 1.0 - hot_misses as f64 / hot_reads as f64,
        after: 1.0 - final_misses as f64 / HOT_PAGES as f64,
        scan_page_ins,
        probation_hits,
        secs: started.elapsed().as_secs_f64(),
    }
}

#[test]
fn s3fifo_keeps_the_hot_set_through_a_scan() {
    println!(
        "hot set {} MiB, scan {} MiB, budget {} MiB, {} KiB pages",
        (HOT_PAGES * PAGE) >> 20,
        (SCAN_PAGES * PAGE) >> 20,
        BUDGET >> 20,
        PAGE >> 10
    );
    println!(
        "{:<8} {:>18} {:>18} {:>14} {:>15} {:>7}",
        "policy", "hot hits (scan)", "hot hits (after)", "scan page-ins", "probation hits", "secs"
    );
    let mut s3 = None;
    for policy in [PolicyKind::Fifo, PolicyKind::Clock, PolicyKind::S3Fifo] {
        let o = run(policy);
        println!(
            "{:<8} {:>17.1}% {:>17.1}% {:>14} {:>15} {:>7.2}",
            policy.name(),
            100.0 * o.during,
            100.0 * o.after,
            o.scan_page_ins,
            o.probation_hits,
            o.secs
        );
        // The scan really went to the device: it cannot fit in DRAM.
        assert!(
            o.scan_page_ins >= (SCAN_PAGES / 2) as u64,
            "{policy}: only {} scan page-ins; the scan did not miss",
            o.scan_page_ins
        );
        if policy == PolicyKind::S3Fifo {
            s3 = Some(o);
        }
    }
    let s3 = s3.unwrap();
    assert!(
        s3.during >= 0.90,
        "s3fifo hot-set hit ratio during the scan {:.1}% < 90%",
        100.0 * s3.during
    );
    assert!(
        s3.after >= 0.90,
        "s3fifo hot-set hit ratio after the scan {:.1}% < 90%",
        100.0 * s3.after
    );
}
