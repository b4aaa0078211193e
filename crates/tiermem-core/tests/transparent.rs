//! The operations transparent mode builds on, checked page by page after
//! heavy paging: lazily committed regions, discard (MADV_DONTNEED), partial
//! unmap (munmap), and remap (mremap grow in place, move, shrink).

mod common;

use common::{hang_guard, runtime, Stamped, UNIT};
use tiermem_core::PolicyKind;

const MIB: usize = 1 << 20;

fn read_word(addr: usize) -> u64 {
    // SAFETY: the tests only read words of live tiered memory they own.
    unsafe { std::ptr::read_volatile(addr as *const u64) }
}

#[test]
fn lazy_region_pages_out_discards_and_unmaps_exactly() {
    let rt = runtime(4 * MIB as u64, 4096, PolicyKind::Clock);
    let len = 64 * MIB;
    let base = rt.alloc_lazy(len).unwrap().as_ptr();
    assert!(rt.is_lazy_addr(base as usize));
    let s = Stamped::stamp(base, len);
    s.verify().unwrap();
    assert!(rt.stats().page_outs > 0, "16x the budget must page out");

    // DONTNEED on units 100..200: zeros there, the rest intact.
    // SAFETY: the range is ours.
    unsafe { rt.discard(base as usize + 100 * UNIT, 100 * UNIT, true) };
    for u in 0..s.units {
        let first = read_word(base as usize + u * UNIT);
        if (100..200).contains(&u) {
            assert_eq!(first, 0, "discarded unit {u} must read as zero");
        } else {
            assert_eq!(
                first,
                common::tag(u),
                "unit {u} lost by a discard elsewhere"
            );
        }
    }
    let stored_before = rt.stats().stored_bytes;

    // munmap of the second half returns its slots.
    rt.unmap(base as usize + len / 2, len / 2);
    let st = rt.stats();
    assert!(
        st.stored_bytes < stored_before,
        "unmapping must free slots ({} -> {})",
        stored_before,
        st.stored_bytes
    );
    for u in (0..s.units / 2).filter(|u| !(100..200).contains(u)) {
        assert_eq!(read_word(base as usize + u * UNIT), common::tag(u));
    }
}

#[test]
fn remap_grows_in_place_moves_and_shrinks_keeping_contents() {
    let rt = runtime(2 * MIB as u64, 4096, PolicyKind::Clock);
    let len = 16 * MIB;
    let a = rt.alloc_lazy(len).unwrap().as_ptr() as usize;
    let s = Stamped::stamp(a as *mut u8, len);
    // Grow in place: the pages after a fresh lazy region are free.
    // SAFETY: `a` is ours; the old range is not used after a move.
    let grown = unsafe { rt.remap(a, len, 2 * len, true) }.unwrap();
    assert_eq!(grown, a, "the pages after the region were free");
    s.verify().unwrap();
    for u in (len / UNIT..2 * len / UNIT).step_by(97) {
        assert_eq!(read_word(a + u * UNIT), 0, "grown tail must be zero");
    }
    // Block in-place growth, then grow again: the contents must move.
    let blocker = rt.alloc_lazy(UNIT).unwrap().as_ptr() as usize;
    assert_eq!(blocker, a + 2 * len);
    // SAFETY: as above.
    let moved = unsafe { rt.remap(a, 2 * len, 3 * len, true) }.unwrap();
    assert_ne!(moved, a);
    let s2 = Stamped {
        base: moved as *mut u8,
        units: s.units,
        expected: s.expected,
    };
    s2.verify().unwrap();
    // First fit put the moved region right after the blocker, so the
    // blocker cannot grow in place, and without MAYMOVE that fails.
    assert_eq!(moved, blocker + UNIT);
    // SAFETY: as above.
    assert!(unsafe { rt.remap(blocker, UNIT, 2 * UNIT, false) }.is_err());
    // Shrink keeps the head.
    // SAFETY: as above.
    let shrunk = unsafe { rt.remap(moved, 3 * len, len / 2, true) }.unwrap();
    assert_eq!(shrunk, moved);
    for u in 0..len / 2 / UNIT {
        assert_eq!(read_word(moved + u * UNIT), common::tag(u));
    }
}

#[test]
fn map_fixed_zeroes_and_reclaims_a_range() {
    let rt = runtime(2 * MIB as u64, 4096, PolicyKind::Fifo);
    let len = 8 * MIB;
    let a = rt.alloc_lazy(len).unwrap().as_ptr() as usize;
    let s = Stamped::stamp(a as *mut u8, len);
    s.verify().unwrap();
    // SAFETY: the range is ours.
    unsafe { rt.map_fixed_zero(a + MIB, MIB) };
    for u in 0..s.units {
        let w = read_word(a + u * UNIT);
        if (MIB / UNIT..2 * MIB / UNIT).contains(&u) {
            assert_eq!(w, 0);
        } else {
            assert_eq!(w, common::tag(u));
        }
    }
}

/// A file mapped with `MAP_FIXED` over lazily committed memory the runtime
/// gave up (`tiermem run` does this for QEMU's memfd guest RAM): first
/// touches of the tiered pages before it, whose zero fills run ahead of
/// them, and heavy paging on both sides leave every byte of the file as it
/// was written; the range counts as allocated no more; taken back, it
/// reads zeros and is tiered like the rest.
#[test]
fn a_foreign_mapping_is_left_alone_and_taken_back() {
    let _guard = hang_guard(
        "a_foreign_mapping_is_left_alone_and_taken_back",
        std::time::Duration::from_secs(120),
    );
    let rt = runtime(2 * MIB as u64, 4096, PolicyKind::Clock);
    let len = 8 * MIB;
    let a = rt.alloc_lazy(3 * len).unwrap().as_ptr() as usize;
    let middle = a + len;
    let file = tempfile::tempfile_in("/var/tmp").expect("temp file");
    let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
    std::os::unix::fs::FileExt::write_all_at(&file, &bytes, 0).expect("writing the file");
    // SAFETY: the range is ours, and nothing touches it while it changes hands.
    unsafe { rt.cede_to_foreign(middle, len) };
    // SAFETY: mapping our own file over the range the runtime gave up.
    let mapped = unsafe {
        libc::mmap(
            middle as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    assert_eq!(mapped as usize, middle);
    assert_eq!(rt.foreign_parts(a, 3 * len), vec![middle..middle + len]);

    // Every page before the file first-touched in order, so zero fills run
    // ahead right up to it; then both sides paged heavily.
    let before = Stamped::stamp(a as *mut u8, len);
    let after = Stamped::stamp((middle + len) as *mut u8, len);
    before.verify().unwrap();
    after.verify().unwrap();
    // SAFETY: the file's mapping is ours and `len` bytes long.
    let seen = unsafe { std::slice::from_raw_parts(middle as *const u8, len) };
    assert!(seen == &bytes[..], "the file's bytes changed under tiermem");
    let allocated = rt.stats().allocated_bytes;
    assert_eq!(
        allocated,
        2 * len as u64,
        "the file's range is not tiered memory"
    );

    // SAFETY: the file's mapping is no longer used.
    unsafe { rt.take_back_foreign(middle, len) }.expect("taking the range back");
    assert!(rt.foreign_parts(a, 3 * len).is_empty());
    assert!((0..len).step_by(512).all(|o| read_word(middle + o) == 0));
    let taken = Stamped::stamp(middle as *mut u8, len);
    before.verify().unwrap();
    taken.verify().unwrap();
    after.verify().unwrap();
    assert!(rt.stats().page_outs > 0, "the test must page");
}
