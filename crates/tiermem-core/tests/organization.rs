//! The cache organization knobs: every page survives heavy paging under each
//! organization, and each knob does what it says, seen in the runtime's own
//! counters.

mod common;

use std::time::{Duration, Instant};

use common::{mapped_over, random_reads_and_writes, Stamped, UNIT};
use tiermem_core::{
    CompressSettings, Config, Inclusion, IoEngine, IoSettings, Organization, PolicyKind, Preset,
    Runtime, WritePolicy,
};

const REGION: usize = 128 << 20;
const BUDGET: u64 = 16 << 20;
const THREADS: usize = 3;
const HAMMER: Duration = Duration::from_secs(2);

fn runtime(org: Organization, page_size: usize, io: IoSettings) -> Runtime {
    let config = Config::builder()
        .dram_budget(BUDGET)
        .page_size(page_size)
        .policy(PolicyKind::Clock)
        .backing(std::env::temp_dir())
        .handler_threads(2)
        .io(io)
        .organization(org)
        // The organization is the store cache's: pages must reach it.
        .compress(CompressSettings::off())
        .build()
        .expect("valid test config");
    Runtime::new(config).expect(
        "tiermem runtime (needs userfaultfd: run as root or set vm.unprivileged_userfaultfd=1)",
    )
}

fn org(associativity: u32, prefetch: Option<u32>, wp: WritePolicy, inc: Inclusion) -> Organization {
    Organization {
        associativity,
        prefetch,
        write_policy: wp,
        inclusion: inc,
    }
}

/// Random reads and writes from several threads over eight budgets of
/// stamped pages, then every page verified. Returns the runtime's stats.
fn hammer(org: Organization, page_size: usize, io: IoSettings) -> tiermem_core::Stats {
    let rt = runtime(org, page_size, io);
    let base = rt.alloc(REGION).expect("alloc").as_ptr();
    let stamped = Stamped::stamp(base, REGION);
    // Set-associative caches run full, with no free headroom: allow one
    // page in flight per handler thread on top of the budget in the
    // kernel's page tables; the runtime's own charge must never exceed it.
    let slack = 2 * page_size as u64;
    let (lost_reads, over_budget) =
        random_reads_and_writes(&stamped, THREADS, HAMMER, 0x5EED_0000, || {
            let mapped = mapped_over(base, REGION, BUDGET + slack);
            let charged = rt.stats().resident_bytes;
            (mapped.is_some() || charged > BUDGET)
                .then(|| format!("mapped {mapped:?}, charged {charged}, budget {BUDGET}"))
        });
    assert_eq!(over_budget, None, "over budget");
    assert_eq!(lost_reads, 0, "a read missed a page's identity");
    stamped
        .verify()
        .unwrap_or_else(|e| panic!("{} / {page_size}: {e}", org.describe()));
    let stats = rt.stats();
    assert!(stats.peak_resident_bytes <= BUDGET, "{stats:?}");
    assert!(
        stats.page_ins > 0 && stats.page_outs > 0,
        "no paging: {stats:?}"
    );
    eprintln!(
        "{} / {}K: {} page-ins, {} page-outs, {} conflict evictions, {} write-throughs",
        stats.organization,
        page_size / 1024,
        stats.page_ins,
        stats.page_outs,
        stats.conflict_evictions,
        stats.write_throughs
    );
    stats
}

fn psync() -> IoSettings {
    IoSettings {
        engine: IoEngine::Psync,
        ..IoSettings::default()
    }
}

#[test]
fn direct_mapped_keeps_every_page_and_evicts_on_conflict() {
    let s = hammer(
        Preset::MemoryMode.organization(),
        4096,
        IoSettings::default(),
    );
    assert!(s.conflict_evictions > 0, "{s:?}");
    assert_eq!(s.prefetch_issued, 0, "memory mode does not prefetch");
}

#[test]
fn four_way_16k_pages_with_pread() {
    let s = hammer(
        org(4, None, WritePolicy::WriteBack, Inclusion::Inclusive),
        16 << 10,
        psync(),
    );
    assert!(s.conflict_evictions > 0, "{s:?}");
}

#[test]
fn two_way_64k_pages_with_prefetch() {
    let s = hammer(
        org(2, Some(2), WritePolicy::WriteBack, Inclusion::Inclusive),
        64 << 10,
        IoSettings::default(),
    );
    assert!(s.conflict_evictions > 0 && s.prefetch_issued > 0, "{s:?}");
}

#[test]
fn exclusive_keeps_every_page() {
    hammer(
        org(0, None, WritePolicy::WriteBack, Inclusion::Exclusive),
        4096,
        IoSettings::default(),
    );
}

#[test]
fn write_through_keeps_every_page() {
    let s = hammer(
        org(0, None, WritePolicy::WriteThrough, Inclusion::Inclusive),
        4096,
        IoSettings::default(),
    );
    assert!(s.write_throughs > 0, "{s:?}");
}

#[test]
fn write_through_direct_mapped_with_pread_keeps_every_page() {
    let s = hammer(
        org(1, Some(1), WritePolicy::WriteThrough, Inclusion::Inclusive),
        4096,
        psync(),
    );
    assert!(s.write_throughs > 0 && s.conflict_evictions > 0, "{s:?}");
}

/// Writes every page of `len` bytes at `base` (one word per 4 KiB).
fn write_all(base: *mut u8, len: usize, value: u64) {
    for off in (0..len).step_by(UNIT) {
        // SAFETY: inside the allocation, 8-byte aligned.
        unsafe { std::ptr::write_volatile(base.add(off) as *mut u64, value + off as u64) };
    }
}

fn read_all(base: *mut u8, len: usize, value: u64) {
    for off in (0..len).step_by(UNIT) {
        // SAFETY: inside the allocation, 8-byte aligned.
        let v = unsafe { std::ptr::read_volatile(base.add(off) as *const u64) };
        assert_eq!(v, value + off as u64, "offset {off}");
    }
}

fn read_zeros(base: *mut u8, len: usize) {
    for off in (0..len).step_by(UNIT) {
        // SAFETY: inside the allocation, 8-byte aligned.
        let v = unsafe { std::ptr::read_volatile(base.add(off) as *const u64) };
        assert_eq!(v, 0, "offset {off}");
    }
}

/// Write-through: written pages reach the store within milliseconds, so
/// evicting them later writes nothing.
#[test]
fn write_through_copies_written_pages_out_and_evicts_them_clean() {
    let rt = runtime(
        org(0, Some(0), WritePolicy::WriteThrough, Inclusion::Inclusive),
        4096,
        IoSettings::default(),
    );
    let hot = (BUDGET / 2) as usize;
    let a = rt.alloc(hot).expect("alloc").as_ptr();
    write_all(a, hot, 1);
    let pages = (hot / UNIT) as u64;
    let deadline = Instant::now() + Duration::from_secs(10);
    while rt.stats().write_throughs < pages {
        assert!(
            Instant::now() < deadline,
            "written pages not copied out: {:?}",
            rt.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Push them out with reads of zero pages (which need no write either).
    let before = rt.stats().page_outs;
    let b = rt.alloc(4 * BUDGET as usize).expect("alloc").as_ptr();
    read_zeros(b, 4 * BUDGET as usize);
    let s = rt.stats();
    assert!(s.clean_drops >= pages / 2, "{s:?}");
    assert_eq!(s.page_outs, before, "an eviction wrote: {s:?}");
    read_all(a, hot, 1);
}

/// Exclusive: reading a page back gives up its slot, so evicting it again
/// writes it even though it was never modified. Inclusive drops it clean.
#[test]
fn exclusive_writes_unmodified_pages_back_and_inclusive_does_not() {
    for inclusion in [Inclusion::Inclusive, Inclusion::Exclusive] {
        let rt = runtime(
            org(0, Some(0), WritePolicy::WriteBack, inclusion),
            4096,
            IoSettings::default(),
        );
        let len = 4 * BUDGET as usize;
        let a = rt.alloc(len).expect("alloc").as_ptr();
        write_all(a, len, 7);
        read_all(a, len, 7);
        let before = rt.stats();
        // Read-only passes: every page comes in and is evicted again.
        read_all(a, len, 7);
        read_all(a, len, 7);
        let after = rt.stats();
        let outs = after.page_outs - before.page_outs;
        let ins = after.page_ins - before.page_ins;
        assert!(ins > (len / UNIT) as u64, "{after:?}");
        match inclusion {
            Inclusion::Inclusive => assert_eq!(outs, 0, "clean pages written: {after:?}"),
            Inclusion::Exclusive => {
                assert!(outs >= ins / 2, "{outs} writes for {ins} reads: {after:?}");
                let stored = after.stored_bytes / UNIT as u64;
                assert!(
                    stored <= (len / UNIT) as u64,
                    "DRAM and store must hold disjoint pages: {after:?}"
                );
            }
        }
    }
}

/// Exclusive with adaptive read-ahead: a window's marker, parked in DRAM
/// and then installed when the program stops short of it, holds no slot
/// either; DRAM and store stay disjoint.
#[test]
fn exclusive_read_ahead_markers_hold_no_slot() {
    let rt = runtime(
        org(0, None, WritePolicy::WriteBack, Inclusion::Exclusive),
        4096,
        IoSettings::default(),
    );
    let len = 4 * BUDGET as usize;
    let a = rt.alloc(len).expect("alloc").as_ptr();
    write_all(a, len, 5);
    // A scan that stops mid-window, then a pause long enough for parked
    // markers to be installed.
    read_all(a, len / 2, 5);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let s = rt.stats();
    assert!(s.prefetch_issued > 0, "the scan must be read ahead: {s:?}");
    let (stored, resident) = (s.stored_bytes / UNIT as u64, s.resident_bytes / UNIT as u64);
    assert!(
        stored + resident <= (len / UNIT) as u64,
        "{stored} pages stored and {resident} in DRAM, of {}: {s:?}",
        len / UNIT
    );
    read_all(a, len, 5);
}

/// A fixed prefetch degree reads that many pages after each miss, and 0
/// turns prefetching off (the adaptive read-ahead would read ahead here).
#[test]
fn prefetch_degree_is_exact() {
    for (degree, engine) in [
        (0, IoEngine::IoUring),
        (4, IoEngine::IoUring),
        (4, IoEngine::Psync),
    ] {
        let io = IoSettings {
            engine,
            ..IoSettings::default()
        };
        let rt = runtime(
            org(
                0,
                Some(degree),
                WritePolicy::WriteBack,
                Inclusion::Inclusive,
            ),
            4096,
            io,
        );
        let len = 4 * BUDGET as usize;
        let a = rt.alloc(len).expect("alloc").as_ptr();
        write_all(a, len, 3);
        let before = rt.stats();
        // One page in 32: each is a miss, followed by the pages it prefetched.
        let mut misses = 0;
        for start in (0..len / 2).step_by(32 * UNIT) {
            for i in 0..=degree as usize {
                // SAFETY: inside the allocation.
                let v = unsafe { std::ptr::read_volatile(a.add(start + i * UNIT) as *const u64) };
                assert_eq!(v, 3 + (start + i * UNIT) as u64);
            }
            misses += 1;
        }
        let after = rt.stats();
        let issued = after.prefetch_issued - before.prefetch_issued;
        let demand = after.page_ins - before.page_ins - issued;
        // A prefetched page may rarely be evicted before its read (its miss
        // then prefetches again), or still wait in probation when its
        // neighbour misses (no read needed): 2% slack either way.
        let slack = misses / 50;
        assert!(
            (misses..=misses + slack).contains(&demand),
            "{engine:?}: {demand} demand reads for {misses} misses: {after:?}"
        );
        let want = degree as u64 * misses;
        let spread = degree as u64 * slack;
        assert!(
            (want - spread..=want + spread).contains(&issued),
            "{engine:?}: {issued} prefetched for {misses} misses: {after:?}"
        );
    }
}

#[test]
fn set_associativity_bounds_each_set() {
    let org = Preset::MemoryMode.organization();
    let rt = runtime(org, 4096, IoSettings::default());
    let len = 4 * BUDGET as usize;
    let a = rt.alloc(len).expect("alloc").as_ptr();
    write_all(a, len, 9);
    let (sets, ways, _) = org.sets(BUDGET / UNIT as u64).expect("set-associative");
    assert_eq!(ways, 1);
    let span = sets as usize * UNIT;
    // Pages `sets` apart share a set, so touching two of them in turn always
    // misses. (The pause keeps the victim buffer out: it only takes a page
    // when two pages have evicted each other in turn within milliseconds.)
    let before = rt.stats();
    for _ in 0..50 {
        read_all(a, UNIT, 9);
        std::thread::sleep(Duration::from_millis(3));
        // SAFETY: inside the allocation.
        let v = unsafe { std::ptr::read_volatile(a.add(span) as *const u64) };
        assert_eq!(v, 9 + span as u64);
        std::thread::sleep(Duration::from_millis(3));
    }
    let after = rt.stats();
    assert!(
        after.page_ins - before.page_ins >= 99,
        "two pages of one set must evict each other: {after:?}"
    );
    // Pages in different sets do not: a small working set stays.
    let before = rt.stats();
    for _ in 0..50 {
        read_all(a, 64 * UNIT, 9);
    }
    assert!(rt.stats().page_ins - before.page_ins <= 64);
}

/// One instruction that needs two pages of one set (a `rep movsb` copy
/// between buffers a multiple of the sets' span apart) completes: the
/// victim buffer holds the second page instead of thrashing forever.
#[test]
fn a_copy_between_pages_of_one_set_completes() {
    let org = Preset::MemoryMode.organization();
    let rt = runtime(org, 4096, IoSettings::default());
    let (sets, _, _) = org.sets(BUDGET / UNIT as u64).expect("set-associative");
    let span = sets as usize * UNIT;
    let len = 2 * span + (1 << 20);
    let a = rt.alloc(len).expect("alloc").as_ptr();
    for round in 0..20u8 {
        let (src, dst) = if round % 2 == 0 { (0, span) } else { (span, 0) };
        // SAFETY: both ranges lie inside the allocation and do not overlap.
        unsafe {
            std::ptr::write_bytes(a.add(src), round + 1, 1 << 20);
            std::ptr::copy_nonoverlapping(a.add(src), a.add(dst), 1 << 20);
        }
        for off in (0..1 << 20).step_by(UNIT) {
            // SAFETY: inside the allocation.
            let v = unsafe { std::ptr::read_volatile(a.add(dst + off)) };
            assert_eq!(v, round + 1, "round {round}, offset {off}");
        }
    }
}
