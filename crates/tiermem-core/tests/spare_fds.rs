//! A runtime holds spare descriptors for forks while it runs (see
//! `sys::spare_fds`), and gives every descriptor back when it stops. Alone
//! in its test binary, so that no other runtime's descriptors come and go.

mod common;

use std::time::{Duration, Instant};

use common::{hang_guard, runtime};
use tiermem_core::PolicyKind;

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("listing /proc/self/fd")
        .count()
}

#[test]
fn spares_are_held_while_a_runtime_runs_and_closed_when_it_stops() {
    let _guard = hang_guard("spare descriptors", Duration::from_secs(60));
    let before = open_descriptors();
    let rt = runtime(16 << 20, 4096, PolicyKind::Clock);
    // The spares are opened once the runtime's threads have set up.
    let started = Instant::now();
    let mut running = open_descriptors();
    while running < before + 16 && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
        running = open_descriptors();
    }
    assert!(
        running >= before + 16,
        "{running} descriptors open while running, {before} before: no spares"
    );
    drop(rt);
    let after = open_descriptors();
    assert_eq!(
        after, before,
        "descriptors left open after the runtime stopped"
    );
}
