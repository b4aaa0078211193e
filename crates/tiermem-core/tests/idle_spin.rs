//! The handlers' idle spin (`TIERMEM_IDLE_SPIN_US`): while a program
//! pages, handlers find faults and completions polling instead of asleep;
//! once it stops, they go to sleep and the process uses no CPU; with the
//! spin off they never poll between faults. Every byte is checked after
//! the paging in each case.

mod common;

use std::time::{Duration, Instant};

use common::{hang_guard, runtime_io};
use tiermem_core::{IoSettings, PolicyKind, Runtime, Stats, TieredBuf};

const PAGE: usize = 4096;
const BUDGET: u64 = 8 << 20;
const REGION: usize = 32 << 20;
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// The tests measure this process's CPU time, so they run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn runtime_spinning(idle_spin_us: u32) -> Runtime {
    runtime_io(
        BUDGET,
        PAGE,
        PolicyKind::Clock,
        IoSettings {
            idle_spin_us,
            ..IoSettings::default()
        },
    )
}

fn word(page: usize, round: u64) -> u64 {
    (page as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round
}

/// Writes every page of a region four times the budget, then reads pages
/// back in a scattered order, checking every word of each: heavy paging,
/// most of it single misses.
fn page_through(rt: &Runtime) -> Stats {
    let mut buf = TieredBuf::new(rt, REGION).expect("a tiered region");
    let pages = REGION / PAGE;
    for p in 0..pages {
        let w = word(p, 1).to_ne_bytes();
        for chunk in buf[p * PAGE..(p + 1) * PAGE].chunks_exact_mut(8) {
            chunk.copy_from_slice(&w);
        }
    }
    for i in 0..pages {
        let p = (i * 7919) % pages;
        let expected = word(p, 1).to_ne_bytes();
        for (k, chunk) in buf[p * PAGE..(p + 1) * PAGE].chunks_exact(8).enumerate() {
            assert_eq!(chunk, expected, "page {p}, word {k}");
        }
    }
    rt.stats()
}

/// CPU time (user + system) this process used, in nanoseconds.
fn process_cpu_ns() -> u64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

#[test]
fn spinning_handlers_find_faults_awake_and_sleep_once_paging_stops() {
    let _guard = hang_guard(
        "spinning_handlers_find_faults_awake_and_sleep_once_paging_stops",
        HANG_LIMIT,
    );
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime_spinning(200);
    let stats = page_through(&rt);
    assert!(
        stats.spin_wakeups > 100,
        "handlers polling between faults found none: {} page-ins, {} spin wake-ups",
        stats.page_ins,
        stats.spin_wakeups
    );
    // The window is 200 us; after a pause far longer, the handlers and the
    // evictor must be asleep: no more than 5% of one CPU over a second.
    std::thread::sleep(Duration::from_millis(100));
    let (cpu0, wall0) = (process_cpu_ns(), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let used = process_cpu_ns() - cpu0;
    let share = used as f64 / wall0.elapsed().as_nanos() as f64;
    assert!(
        share < 0.05,
        "an idle process used {:.1}% of a CPU after paging stopped: a handler spins without faults",
        share * 100.0
    );
}

#[test]
fn with_the_idle_spin_off_handlers_never_poll_between_faults() {
    let _guard = hang_guard(
        "with_the_idle_spin_off_handlers_never_poll_between_faults",
        HANG_LIMIT,
    );
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime_spinning(0);
    let stats = page_through(&rt);
    assert!(stats.page_ins > 1000, "the region paged: {stats:?}");
    assert_eq!(stats.spin_wakeups, 0, "idle spin is off");
}
