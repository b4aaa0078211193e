//! CLOCK's heat, which keeps a skewed (zipf) workload's hot pages in DRAM:
//! every demand miss of a page is counted in the page's heat, across its
//! stays in DRAM, whoever resolves the fault. A page that is read back again
//! and again must show each of those misses; a page written once and never
//! read back must show none; memory freed and allocated again starts cold.

use tiermem_core::{Config, FaultDelivery, PolicyKind, Runtime};

const PAGE: usize = 4096;
const BUDGET_PAGES: usize = 16;
const REGION_PAGES: usize = 256;
/// The page read back after every sweep, and the page never read back.
const WARM: usize = 0;
const COLD: usize = REGION_PAGES - 1;

fn runtime(faults: FaultDelivery) -> Runtime {
    let config = Config::builder()
        .dram_budget((BUDGET_PAGES * PAGE) as u64)
        .page_size(PAGE)
        .policy(PolicyKind::Clock)
        .backing(std::env::temp_dir())
        .handler_threads(1)
        .faults(faults)
        // No read-ahead: every page-in below is a demand miss.
        .prefetch(0)
        .build()
        .expect("valid test config");
    Runtime::new(config).expect(
        "tiermem runtime (needs userfaultfd: run as root or set vm.unprivileged_userfaultfd=1)",
    )
}

fn stamp(page: usize) -> u8 {
    (page % 251) as u8 + 1
}

/// Writes every page of a fresh allocation, then reads the warm page back
/// after each of four sweeps over the others. Returns the base and how many
/// of those reads missed.
fn allocate_and_warm(rt: &Runtime) -> (*mut u8, usize) {
    let base = rt.alloc(REGION_PAGES * PAGE).expect("alloc").as_ptr();
    for page in 0..REGION_PAGES {
        // SAFETY: inside the allocation.
        unsafe { std::ptr::write_volatile(at(base, page), stamp(page)) };
    }
    let read = |page: usize| {
        // SAFETY: inside the allocation.
        let v = unsafe { std::ptr::read_volatile(at(base, page)) };
        assert_eq!(v, stamp(page), "page {page} lost its content");
    };
    let mut warm_misses = 0;
    for _ in 0..4 {
        // A sweep of 15 budgets pushes the warm page out to the store.
        (1..COLD).for_each(read);
        let before = rt.stats().page_ins;
        read(WARM);
        if rt.stats().page_ins > before {
            warm_misses += 1;
        }
    }
    (base, warm_misses)
}

fn at(base: *mut u8, page: usize) -> *mut u8 {
    // SAFETY: callers pass pages inside the allocation at `base`.
    unsafe { base.add(page * PAGE) }
}

fn misses_are_counted(faults: FaultDelivery) {
    let rt = runtime(faults);
    let (base, warm_misses) = allocate_and_warm(&rt);
    assert!(
        warm_misses >= 3,
        "the warm page should have missed after most sweeps, missed {warm_misses} times"
    );
    let warm = rt.observed_uses(at(base, WARM)).expect("inside the arena");
    assert!(
        warm as usize >= warm_misses,
        "{warm} uses counted for {warm_misses} misses"
    );
    assert_eq!(
        rt.observed_uses(at(base, COLD)),
        Some(0),
        "a page written once and never read back has no use to count"
    );
    assert_eq!(rt.observed_uses(std::ptr::null()), None);
}

#[test]
fn demand_misses_warm_a_page_with_handler_threads() {
    misses_are_counted(FaultDelivery::Handler);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn demand_misses_warm_a_page_with_signal_delivery() {
    misses_are_counted(FaultDelivery::Signal);
}

#[test]
fn freed_memory_starts_cold() {
    let rt = runtime(FaultDelivery::Handler);
    let (base, _) = allocate_and_warm(&rt);
    assert!(rt.observed_uses(at(base, WARM)) > Some(0));
    // SAFETY: from this runtime's `alloc`, not used afterwards.
    unsafe { rt.free(std::ptr::NonNull::new(base).expect("non-null")) }.expect("free");
    let again = rt.alloc(REGION_PAGES * PAGE).expect("alloc").as_ptr();
    assert_eq!(again, base, "first fit hands the same pages out again");
    for page in 0..REGION_PAGES {
        assert_eq!(
            rt.observed_uses(at(again, page)),
            Some(0),
            "page {page} kept the heat of the freed allocation"
        );
    }
}
