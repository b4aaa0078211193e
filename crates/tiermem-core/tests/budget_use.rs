//! Every policy keeps as much as its budget allows: a block smaller than the
//! budget, read twice after a sweep of a larger region, is read from the
//! store only once. (FIFO once dropped every clean page it demoted in one
//! go, keeping a fraction of its budget.)

mod common;

use common::runtime_io;
use tiermem_core::{IoSettings, PolicyKind};

const MIB: usize = 1 << 20;
const PAGE: usize = 4096;

fn second_pass_misses(policy: PolicyKind, block_mib: usize) -> u64 {
    let io = IoSettings {
        readahead: false,
        ..IoSettings::default()
    };
    let rt = runtime_io(12 * MIB as u64, PAGE, policy, io);
    let len = 64 * MIB;
    let base = rt.alloc(len).expect("alloc").as_ptr();
    let touch = |p: usize, write: bool| {
        // SAFETY: `p` is a page of the live allocation.
        unsafe {
            let addr = base.add(p * PAGE);
            if write {
                std::ptr::write_volatile(addr, 1);
            } else {
                std::ptr::read_volatile(addr);
            }
        }
    };
    let pages = len / PAGE;
    (0..pages).for_each(|p| touch(p, true));
    (0..pages).for_each(|p| touch(p, false));
    let block = (20 * MIB / PAGE)..((20 + block_mib) * MIB / PAGE);
    // Sweep 24 MiB elsewhere, then read the block twice.
    (40 * MIB / PAGE..pages).for_each(|p| touch(p, false));
    block.clone().for_each(|p| touch(p, false));
    let before = rt.stats().page_ins;
    block.for_each(|p| touch(p, false));
    rt.stats().page_ins - before
}

#[test]
fn every_policy_keeps_a_block_that_fits_its_budget() {
    for policy in PolicyKind::ALL {
        for block_mib in [6, 10] {
            let misses = second_pass_misses(policy, block_mib);
            assert_eq!(
                misses, 0,
                "{policy:?}: a {block_mib} MiB block in a 12 MiB budget missed {misses} pages on its second pass"
            );
        }
    }
}
