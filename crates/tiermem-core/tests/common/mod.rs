//! Page stamping shared by the integration tests.
//!
//! Every 4 KiB unit of a region carries its own identity at both ends (so a
//! lost or misplaced page is caught) and a version word updated with an
//! atomic max (so concurrent writers agree on the final value, which the
//! side table `expected` knows).

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tiermem_core::{CompressSettings, Config, IoSettings, PolicyKind, Runtime};

pub const UNIT: usize = 4096;
const MAGIC: u64 = 0x7469_6572_6d65_6d00; // "tiermem\0"

pub fn tag(unit: usize) -> u64 {
    MAGIC ^ (unit as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

pub struct Stamped {
    pub base: *mut u8,
    pub units: usize,
    pub expected: Vec<AtomicU64>,
}

// SAFETY: all access to the region goes through atomics or per-unit words
// whose races are part of what the tests check.
unsafe impl Send for Stamped {}
// SAFETY: as above.
unsafe impl Sync for Stamped {}

impl Stamped {
    /// Writes every unit's identity and version 1.
    pub fn stamp(base: *mut u8, len: usize) -> Stamped {
        let units = len / UNIT;
        let s = Stamped {
            base,
            units,
            expected: (0..units).map(|_| AtomicU64::new(1)).collect(),
        };
        for u in 0..units {
            s.word(u, 0).store(tag(u), Ordering::Relaxed);
            s.word(u, 1).store(1, Ordering::Relaxed);
            s.word(u, UNIT / 8 - 1).store(tag(u), Ordering::Relaxed);
        }
        s
    }

    pub fn word(&self, unit: usize, index: usize) -> &AtomicU64 {
        assert!(unit < self.units && index < UNIT / 8);
        // SAFETY: the word lies inside the stamped region, 8-byte aligned.
        unsafe { &*(self.base.add(unit * UNIT + index * 8) as *const AtomicU64) }
    }

    /// A write access: bump the unit's version.
    pub fn write(&self, unit: usize) {
        let v = self.expected[unit].fetch_add(1, Ordering::Relaxed) + 1;
        self.word(unit, 1).fetch_max(v, Ordering::Relaxed);
    }

    /// A read access: the identity must be there.
    pub fn read_ok(&self, unit: usize) -> bool {
        self.word(unit, 0).load(Ordering::Relaxed) == tag(unit)
    }

    /// Checks every unit; returns a description of the first few failures.
    pub fn verify(&self) -> Result<(), String> {
        let mut bad = Vec::new();
        let mut count = 0;
        for u in 0..self.units {
            let head = self.word(u, 0).load(Ordering::Relaxed);
            let tail = self.word(u, UNIT / 8 - 1).load(Ordering::Relaxed);
            let version = self.word(u, 1).load(Ordering::Relaxed);
            let want = self.expected[u].load(Ordering::Relaxed);
            if head != tag(u) || tail != tag(u) || version != want {
                count += 1;
                if bad.len() < 5 {
                    bad.push(format!(
                        "unit {u}: head {head:#x} tail {tail:#x} version {version} (want {want})"
                    ));
                }
            }
        }
        if count == 0 {
            Ok(())
        } else {
            Err(format!(
                "{count} of {} units bad: {}",
                self.units,
                bad.join("; ")
            ))
        }
    }
}

pub fn runtime(budget: u64, page_size: usize, policy: PolicyKind) -> Runtime {
    runtime_io(budget, page_size, policy, IoSettings::default())
}

/// A runtime whose evicted pages go to the store: the compressed tier is
/// off, since these tests are about the store path (its reads, writes,
/// read-ahead and organization), and their mostly-zero stamped pages
/// would otherwise all fit in the pool. `tests/compressed.rs` covers the
/// tier, and [`runtime_compressed`] runs store-path tests through it.
pub fn runtime_io(budget: u64, page_size: usize, policy: PolicyKind, io: IoSettings) -> Runtime {
    runtime_with(budget, page_size, policy, io, CompressSettings::off())
}

/// A runtime with the compressed tier at its defaults.
pub fn runtime_compressed(budget: u64, page_size: usize, policy: PolicyKind) -> Runtime {
    runtime_with(
        budget,
        page_size,
        policy,
        IoSettings::default(),
        CompressSettings::default(),
    )
}

pub fn runtime_with(
    budget: u64,
    page_size: usize,
    policy: PolicyKind,
    io: IoSettings,
    compress: CompressSettings,
) -> Runtime {
    let config = Config::builder()
        .compress(compress)
        .dram_budget(budget)
        .page_size(page_size)
        .policy(policy)
        .backing(std::env::temp_dir())
        .handler_threads(2)
        .io(io)
        .build()
        .expect("valid test config");
    Runtime::new(config).expect(
        "tiermem runtime (needs userfaultfd: run as root or set vm.unprivileged_userfaultfd=1)",
    )
}

/// Resident pages of `[base, base+len)` as the kernel sees them.
pub fn resident_bytes(base: *mut u8, len: usize) -> usize {
    let page = 4096;
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: mincore reads the range's page tables and writes one byte per page into `vec`.
    let rc = unsafe { libc::mincore(base.cast(), len, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|b| **b & 1 != 0).count() * page
}

/// The bytes mapped in `[base, base+len)`, if more than `limit` on three
/// walks in a row. One walk is not atomic: while it runs, a page zapped
/// behind it and another installed ahead of it are both counted. A page
/// the runtime failed to unmap stays mapped and is seen by every walk.
pub fn mapped_over(base: *mut u8, len: usize, limit: u64) -> Option<u64> {
    let mut least = u64::MAX;
    for _ in 0..3 {
        least = least.min(resident_bytes(base, len) as u64);
        if least <= limit {
            return None;
        }
    }
    Some(least)
}

/// xorshift, good enough to pick pages.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Random reads and writes (half each) from `threads` threads over the
/// stamped units for `duration`, while `watch` looks at the runtime every
/// 50 ms. Returns the number of reads that missed a unit's identity and the
/// first complaint `watch` made. Nothing is asserted while the threads run:
/// a panic there would leave them running and the scope would never end.
pub fn random_reads_and_writes(
    stamped: &Stamped,
    threads: usize,
    duration: Duration,
    seed: u64,
    mut watch: impl FnMut() -> Option<String>,
) -> (u64, Option<String>) {
    let stop = AtomicBool::new(false);
    let lost_reads = AtomicU64::new(0);
    let mut complaint = None;
    std::thread::scope(|s| {
        for t in 0..threads {
            let (stop, lost_reads) = (&stop, &lost_reads);
            s.spawn(move || {
                let mut rng = Rng(seed + t as u64 * 7919);
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        let unit = rng.below(stamped.units);
                        if rng.next().is_multiple_of(2) {
                            stamped.write(unit);
                        } else if !stamped.read_ok(unit) {
                            lost_reads.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        let deadline = Instant::now() + duration;
        while Instant::now() < deadline && complaint.is_none() {
            complaint = watch();
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
    });
    (lost_reads.into_inner(), complaint)
}

/// A watch for [`random_reads_and_writes`]: complains when the runtime's
/// resident bytes, or the pages the kernel has mapped in `[base, base+len)`,
/// exceed `budget`.
pub fn budget_watch(
    rt: &Runtime,
    base: *mut u8,
    len: usize,
    budget: u64,
) -> impl FnMut() -> Option<String> + '_ {
    move || {
        let resident = rt.stats().resident_bytes;
        let mapped = mapped_over(base, len, budget);
        (resident > budget || mapped.is_some())
            .then(|| format!("resident {resident}, mapped {mapped:?}, budget {budget}"))
    }
}

/// Aborts the test process if it is still alive `limit` after the guard
/// was made and not dropped: a hung fault path fails the test binary
/// instead of stalling the suite.
pub struct HangGuard(std::sync::Arc<AtomicBool>);

pub fn hang_guard(what: &'static str, limit: Duration) -> HangGuard {
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let seen = done.clone();
    std::thread::spawn(move || {
        let started = Instant::now();
        while started.elapsed() < limit {
            if seen.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("{what}: still running after {limit:?}, taken as hung; aborting");
        std::process::abort();
    });
    HangGuard(done)
}

impl Drop for HangGuard {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}
