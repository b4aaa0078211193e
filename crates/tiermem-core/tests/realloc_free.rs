//! Realloc keeps contents past the budget; alloc/free cycles reuse slots.

mod common;

use common::runtime;
use tiermem_core::PolicyKind;

const BUDGET: u64 = 16 << 20;

fn fill(p: *mut u8, from: usize, to: usize) {
    for i in (from..to).step_by(512) {
        // SAFETY: the caller passes a live allocation of at least `to` bytes.
        unsafe { (p.add(i) as *mut u64).write(i as u64 ^ 0x5a5a) };
    }
}

fn check(p: *mut u8, to: usize) {
    for i in (0..to).step_by(512) {
        // SAFETY: as for `fill`.
        let v = unsafe { (p.add(i) as *const u64).read() };
        assert_eq!(v, i as u64 ^ 0x5a5a, "offset {i}");
    }
}

#[test]
fn realloc_preserves_contents_growing_past_the_budget() {
    let rt = runtime(BUDGET, 4096, PolicyKind::Fifo);
    let small = 8 << 20;
    let p = rt.alloc(small).unwrap();
    fill(p.as_ptr(), 0, small);
    // A neighbour forces the next realloc to move instead of growing in place.
    let blocker = rt.alloc(4096).unwrap();
    let mut size = small;
    let mut p = p;
    for grown in [48 << 20, 96 << 20] {
        // SAFETY: `p` is live and not used after realloc except through the result.
        p = unsafe { rt.realloc(p, grown).unwrap() };
        check(p.as_ptr(), size);
        // SAFETY: `p` is a live allocation of `grown` bytes, so the byte at
        // `grown - 8` lies inside it.
        let tail = unsafe { p.as_ptr().add(grown - 8).read() };
        assert_eq!(tail, 0, "new tail must be zeroed");
        fill(p.as_ptr(), size, grown);
        size = grown;
    }
    check(p.as_ptr(), size);
    assert!(rt.stats().page_outs > 0, "the test must page");
    // Shrinking keeps the head.
    // SAFETY: as above.
    p = unsafe { rt.realloc(p, 1 << 20).unwrap() };
    check(p.as_ptr(), 1 << 20);
    // SAFETY: both are live allocations of this runtime.
    unsafe {
        rt.free(p).unwrap();
        rt.free(blocker).unwrap();
    }
}

#[test]
fn alloc_free_cycles_keep_the_backing_file_bounded() {
    let rt = runtime(BUDGET, 4096, PolicyKind::Clock);
    let len = 64 << 20;
    let mut high_water = 0;
    for round in 0..6 {
        let p = rt.alloc(len).unwrap();
        fill(p.as_ptr(), 0, len);
        check(p.as_ptr(), len);
        // SAFETY: live allocation, unused afterwards.
        unsafe { rt.free(p).unwrap() };
        let stats = rt.stats();
        assert_eq!(stats.allocated_bytes, 0);
        assert_eq!(stats.stored_bytes, 0, "slots not returned after free");
        assert_eq!(stats.resident_bytes, 0, "DRAM not returned after free");
        if round == 1 {
            high_water = stats.backing_bytes;
        }
        if round > 1 {
            assert!(
                stats.backing_bytes <= high_water,
                "backing file grew from {high_water} to {} across cycles",
                stats.backing_bytes
            );
        }
    }
    assert!(
        high_water <= (len as u64) + (64 << 20),
        "backing file {high_water} far larger than one allocation"
    );
}

#[test]
fn freeing_unknown_pointers_is_an_error_not_a_crash() {
    let rt = runtime(BUDGET, 4096, PolicyKind::Clock);
    let p = rt.alloc(8192).unwrap();
    // SAFETY: these calls only look the pointers up; they are rejected.
    unsafe {
        let inside = std::ptr::NonNull::new_unchecked(p.as_ptr().add(4096));
        assert!(rt.free(inside).is_err());
        let mut outside = 0u64;
        assert!(rt
            .free(std::ptr::NonNull::from(&mut outside).cast())
            .is_err());
        rt.free(p).unwrap();
        assert!(rt.free(p).is_err(), "double free must be refused");
    }
}
