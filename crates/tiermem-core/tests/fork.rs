//! fork through the Rust API: runtimes made with `Runtime::new` (no C API,
//! no preload) are served by the fork handlers too. A child sees every
//! byte as it was at the fork, for every runtime of the process, and the
//! parent keeps its own. Without the handlers the child reads evicted
//! pages as zeros.

mod common;

use std::time::Duration;

use common::{hang_guard, runtime};
use tiermem_core::PolicyKind;

const PAGE: usize = 4096;
const BUDGET: u64 = 8 << 20;
const REGION: usize = 32 << 20;
const HANG_LIMIT: Duration = Duration::from_secs(120);

fn byte_at(offset: usize, generation: u8) -> u8 {
    ((offset / PAGE).wrapping_mul(131) ^ offset.wrapping_mul(7) ^ (offset >> 9)) as u8 ^ generation
}

fn fill(region: &mut [u8], generation: u8) {
    for (i, b) in region.iter_mut().enumerate() {
        *b = byte_at(i, generation);
    }
}

fn differing(region: &[u8], generation: u8) -> usize {
    region
        .iter()
        .enumerate()
        .filter(|(i, b)| **b != byte_at(*i, generation))
        .count()
}

/// The child's side: check, rewrite, check; its exit code says how it went
/// (0 good, 1 wrong bytes at the fork, 2 wrong after its own writes, 3 a
/// panic). It never returns into the test harness.
fn in_child(regions: &mut [&mut [u8]]) -> ! {
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for (n, region) in regions.iter_mut().enumerate() {
            if differing(region, n as u8 + 1) != 0 {
                return 1;
            }
            fill(region, n as u8 + 100);
        }
        for (n, region) in regions.iter().enumerate() {
            if differing(region, n as u8 + 100) != 0 {
                return 2;
            }
        }
        0
    }))
    .unwrap_or(3);
    // SAFETY: leaves the forked child without running the harness.
    unsafe { libc::_exit(code) }
}

#[test]
fn a_forked_child_of_two_rust_runtimes_sees_every_evicted_byte() {
    let _guard = hang_guard(
        "a_forked_child_of_two_rust_runtimes_sees_every_evicted_byte",
        HANG_LIMIT,
    );
    let first = runtime(BUDGET, PAGE, PolicyKind::Clock);
    let second = runtime(BUDGET, PAGE, PolicyKind::Fifo);
    let mut regions: Vec<&mut [u8]> = [&first, &second]
        .iter()
        .map(|rt| {
            let p = rt.alloc(REGION).expect("alloc").as_ptr();
            // SAFETY: a fresh allocation of REGION bytes, used only here.
            unsafe { std::slice::from_raw_parts_mut(p, REGION) }
        })
        .collect();
    for (n, region) in regions.iter_mut().enumerate() {
        fill(region, n as u8 + 1);
    }
    for rt in [&first, &second] {
        assert!(rt.stats().page_outs > 0, "nothing was evicted");
    }
    // SAFETY: the child only touches tiered memory, then _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        in_child(&mut regions);
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed: status {status:#x} (exit 1: wrong bytes at the fork, \
         2: after its writes, 3: a panic)"
    );
    for (n, region) in regions.iter().enumerate() {
        assert_eq!(
            differing(region, n as u8 + 1),
            0,
            "the parent's runtime {n} lost bytes"
        );
    }
}
