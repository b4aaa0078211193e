//! Write prediction: once most pages a read fault brings in get written,
//! read faults install pages writable, and a read-modify-write miss takes
//! one fault instead of two. Pure reads never trigger it. Every page is
//! verified either way.

mod common;

use common::{runtime_io, Rng, Stamped, UNIT};
use tiermem_core::{IoSettings, PolicyKind, Stats};

const REGION: usize = 128 << 20;
const BUDGET: u64 = 16 << 20;
const ACCESSES: usize = 30_000;

/// Random accesses over a region eight times the budget: `write` bumps a
/// unit's version with an atomic max (a load, then a compare-and-swap: a
/// read fault, then a write), otherwise reads it. Returns the counters of
/// the accesses alone.
fn random_accesses(predict_writes: bool, write: bool) -> Stats {
    let io = IoSettings {
        predict_writes,
        ..IoSettings::default()
    };
    let rt = runtime_io(BUDGET, 4096, PolicyKind::Clock, io);
    let base = rt.alloc(REGION).expect("alloc").as_ptr();
    let stamped = Stamped::stamp(base, REGION);
    let before = rt.stats();
    let mut rng = Rng(0x5eed);
    for _ in 0..ACCESSES {
        let unit = rng.below(REGION / UNIT);
        if write {
            stamped.write(unit);
        } else {
            assert!(stamped.read_ok(unit), "unit {unit} lost");
        }
    }
    let after = rt.stats();
    stamped.verify().unwrap_or_else(|e| panic!("{e}"));
    Stats {
        page_ins: after.page_ins - before.page_ins,
        wp_faults: after.wp_faults - before.wp_faults,
        predicted_writes: after.predicted_writes - before.predicted_writes,
        page_outs: after.page_outs - before.page_outs,
        ..after
    }
}

#[test]
fn read_modify_write_misses_take_one_fault_once_predicted() {
    let off = random_accesses(false, true);
    let on = random_accesses(true, true);
    eprintln!(
        "off: {} page-ins, {} write faults; on: {} page-ins, {} write faults, {} predicted",
        off.page_ins, off.wp_faults, on.page_ins, on.wp_faults, on.predicted_writes
    );
    assert_eq!(off.predicted_writes, 0, "switched off: {off:?}");
    assert!(
        off.wp_faults * 10 > off.page_ins * 8,
        "without prediction nearly every miss takes a second, write fault: {off:?}"
    );
    assert!(
        on.predicted_writes * 10 > on.page_ins * 7,
        "most misses are installed writable: {on:?}"
    );
    assert!(
        on.wp_faults * 10 < on.page_ins * 3,
        "only the sampled misses take a second fault: {on:?}"
    );
}

#[test]
fn pure_reads_are_never_predicted_as_writes() {
    let reads = random_accesses(true, false);
    assert!(reads.page_ins > ACCESSES as u64 / 2, "{reads:?}");
    assert_eq!(reads.predicted_writes, 0, "{reads:?}");
    assert_eq!(reads.wp_faults, 0, "{reads:?}");
}

/// Pages read ahead take the same prediction, from a score of their own: a
/// scan that writes each page after reading it has its windows installed
/// writable (one fault per window instead of a write fault per page), and
/// a scan that only reads turns that off again. Every page is verified.
#[test]
fn read_ahead_windows_go_in_writable_while_their_pages_get_written() {
    let rt = runtime_io(BUDGET, 4096, PolicyKind::Clock, IoSettings::default());
    let base = rt.alloc(REGION).expect("alloc").as_ptr();
    let stamped = Stamped::stamp(base, REGION);
    let units = REGION / UNIT;
    let scan = |write: bool| {
        let before = rt.stats();
        for unit in 0..units {
            if write {
                stamped.write(unit);
            } else {
                assert!(stamped.read_ok(unit), "unit {unit} lost");
            }
        }
        let after = rt.stats();
        let page_ins = after.page_ins - before.page_ins;
        let prefetched = after.prefetch_issued - before.prefetch_issued;
        let wp = after.wp_faults - before.wp_faults;
        let predicted = after.predicted_writes - before.predicted_writes;
        eprintln!(
            "{} scan: {page_ins} page-ins ({prefetched} read ahead), {wp} write faults, \
             {predicted} installed writable",
            if write {
                "read-modify-write"
            } else {
                "read-only"
            }
        );
        assert!(
            prefetched * 10 > page_ins * 9,
            "a scan reads ahead: {after:?}"
        );
        (page_ins, wp, predicted)
    };
    // The first read-modify-write scan teaches the score; the second shows it.
    scan(true);
    let (page_ins, wp, predicted) = scan(true);
    assert!(
        wp * 10 < page_ins * 3,
        "{wp} write faults for {page_ins} pages read ahead and then written"
    );
    assert!(
        predicted * 2 > page_ins,
        "{predicted} of {page_ins} writable"
    );
    // Two scans that only read: by the second, windows go in protected.
    scan(false);
    let (page_ins, _, predicted) = scan(false);
    assert!(
        predicted * 10 < page_ins,
        "{predicted} of {page_ins} pages of a read-only scan installed writable"
    );
    stamped.verify().unwrap_or_else(|e| panic!("{e}"));
}
