//! CLOCK's heat (issue #4, zipf): every demand miss of a page is counted in
//! the page's heat, across its stays in DRAM, whoever resolves the fault.
//! A page that is read back again and again must show each of those misses;
//! a page written once and never read back must show none.

mod common;

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

fn misses_are_counted(faults: FaultDelivery) {
    let rt = runtime(faults);
    let base = rt.alloc(REGION_PAGES * PAGE).expect("alloc").as_ptr();
    let at = |page: usize| {
        // SAFETY: `page` lies inside the allocation.
        unsafe { base.add(page * PAGE) }
    };
    for page in 0..REGION_PAGES {
        // SAFETY: inside the allocation.
        unsafe { std::ptr::write_volatile(at(page), stamp(page)) };
    }
    let read = |page: usize| {
        // SAFETY: inside the allocation.
        let v = unsafe { std::ptr::read_volatile(at(page)) };
        assert_eq!(v, stamp(page), "page {page} lost its content");
    };

    // About 1,000 evictions in all: within CLOCK's first aging period (at
    // least 4,096 victims), so no use has been halved yet.
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

    assert!(
        warm_misses >= 3,
        "the warm page should have missed after most sweeps, missed {warm_misses} times"
    );
    let warm = rt.observed_uses(at(WARM)).expect("inside the arena");
    assert!(
        warm as usize >= warm_misses,
        "{warm} uses counted for {warm_misses} misses"
    );
    assert_eq!(
        rt.observed_uses(at(COLD)),
        Some(0),
        "a page written once and never read back has no use to count"
    );
    assert_eq!(rt.observed_uses(std::ptr::null()), None);
    // SAFETY: from this runtime's `alloc`, not used afterwards.
    unsafe { rt.free(std::ptr::NonNull::new(base).expect("non-null")) }.expect("free");
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
