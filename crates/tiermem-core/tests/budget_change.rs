//! The budget moves 128 MiB -> 16 MiB -> 64 MiB while threads hammer the
//! region. Resident memory follows it, and every page survives.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{mapped_over, runtime, Rng, Stamped};
use tiermem_core::PolicyKind;

const REGION: usize = 256 << 20;
const MIB: u64 = 1 << 20;

#[test]
fn budget_shrinks_and_grows_under_load() {
    let rt = runtime(128 * MIB, 4096, PolicyKind::Clock);
    let base = rt.alloc(REGION).unwrap().as_ptr();
    let stamped = Stamped::stamp(base, REGION);
    let stop = AtomicBool::new(false);
    let lost = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (stamped, stop, lost) = (&stamped, &stop, &lost);
            s.spawn(move || {
                let mut rng = Rng(0xfeed + t);
                while !stop.load(Ordering::Relaxed) {
                    let unit = rng.below(stamped.units);
                    if rng.next().is_multiple_of(2) {
                        stamped.write(unit);
                    } else if !stamped.read_ok(unit) {
                        lost.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        for budget in [128 * MIB, 16 * MIB, 64 * MIB] {
            rt.set_dram_budget(budget).expect("set budget");
            assert_eq!(rt.dram_budget(), budget);
            let settled = rt.stats();
            assert!(
                settled.resident_bytes <= budget,
                "after set_dram_budget({budget}): {} resident",
                settled.resident_bytes
            );
            let until = Instant::now() + Duration::from_millis(1500);
            while Instant::now() < until {
                let resident = rt.stats().resident_bytes;
                let mapped = mapped_over(base, REGION, budget);
                assert!(resident <= budget, "budget {budget}: accounted {resident}");
                assert_eq!(mapped, None, "budget {budget}: bytes mapped");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(lost.into_inner(), 0);
    stamped.verify().unwrap();
    assert!(
        rt.set_dram_budget(4096).is_err(),
        "a budget below 16 pages is refused"
    );
}
