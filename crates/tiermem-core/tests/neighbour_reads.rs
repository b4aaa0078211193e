//! Neighbour reads: objects spanning two pages, read at random over 8x
//! the budget, cost one device wait each instead of two; random single
//! pages read no neighbours; a scan after pairs still reads ahead. Every
//! word of every page is checked after the paging, and a hung fault path
//! aborts the binary instead of stalling the suite.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{hang_guard, runtime, HangGuard, Rng, UNIT};
use tiermem_core::{PolicyKind, Runtime, Stats};

const BUDGET: u64 = 16 << 20;
const REGION: usize = 128 << 20;
const WORDS: usize = UNIT / 8;
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// What each test starts from: the hang guard, a runtime, its region
/// written once (8x the budget, so most of it is in the store), and a
/// generator.
fn paged_region(test: &'static str, seed: u64) -> (HangGuard, Runtime, Pages, Rng) {
    let guard = hang_guard(test, HANG_LIMIT);
    let rt = runtime(BUDGET, UNIT, PolicyKind::Clock);
    let pages = Pages::new(&rt);
    (guard, rt, pages, Rng(seed))
}

/// A region whose every word is a function of its page, its index and the
/// page's version, so that any lost, stale or misplaced byte shows.
struct Pages {
    base: *mut u8,
    versions: Vec<u64>,
}

fn word_value(page: usize, index: usize, version: u64) -> u64 {
    (page as u64) << 40 ^ (index as u64) << 20 ^ version.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Pages {
    fn new(rt: &Runtime) -> Pages {
        let base = rt.alloc(REGION).expect("alloc").as_ptr();
        let mut pages = Pages {
            base,
            versions: vec![0; REGION / UNIT],
        };
        for page in 0..pages.versions.len() {
            pages.write(page);
        }
        pages
    }

    fn word(&self, page: usize, index: usize) -> &AtomicU64 {
        assert!(page < self.versions.len() && index < WORDS);
        // SAFETY: the word lies inside the allocated region, 8-byte aligned.
        unsafe { &*(self.base.add(page * UNIT + index * 8) as *const AtomicU64) }
    }

    fn write(&mut self, page: usize) {
        self.versions[page] += 1;
        let version = self.versions[page];
        for i in 0..WORDS {
            self.word(page, i)
                .store(word_value(page, i, version), Ordering::Relaxed);
        }
    }

    /// Reads the whole page, as a program copying an object out would.
    fn read(&self, page: usize) {
        let version = self.versions[page];
        for i in 0..WORDS {
            let got = self.word(page, i).load(Ordering::Relaxed);
            assert_eq!(
                got,
                word_value(page, i, version),
                "page {page} word {i}: {got:#x}"
            );
        }
    }

    fn verify_all(&self) {
        for page in 0..self.versions.len() {
            self.read(page);
        }
    }
}

/// Objects of two pages at random even page numbers; every fourth is
/// overwritten, the rest read.
fn use_objects(pages: &mut Pages, rng: &mut Rng, objects: usize) {
    let count = pages.versions.len() / 2;
    for n in 0..objects {
        let first = 2 * rng.below(count);
        if n % 4 == 0 {
            pages.write(first);
            pages.write(first + 1);
        } else {
            pages.read(first);
            pages.read(first + 1);
        }
    }
}

fn demand_reads(before: &Stats, after: &Stats) -> u64 {
    (after.page_ins - before.page_ins) - (after.prefetch_issued - before.prefetch_issued)
}

#[test]
fn objects_spanning_two_pages_cost_one_device_wait() {
    let (_guard, rt, mut pages, mut rng) = paged_region(
        "objects_spanning_two_pages_cost_one_device_wait",
        0x2545_F491_4F6C_DD1D,
    );
    // A few epochs of misses teach the detector the pairs.
    use_objects(&mut pages, &mut rng, 2000);
    let before = rt.stats();
    let objects = 20_000;
    use_objects(&mut pages, &mut rng, objects);
    let st = rt.stats();
    let demand = demand_reads(&before, &st);
    let neighbours = st.neighbour_reads - before.neighbour_reads;
    let sampled = st.neighbour_samples - before.neighbour_samples;
    let used = st.neighbour_used - before.neighbour_used;
    eprintln!(
        "{objects} objects: {demand} demand reads, {neighbours} neighbour reads, \
         {used} of {sampled} sampled used"
    );
    // An eighth of the region fits: without neighbour reads about 1.75
    // pages of each object miss; with them, about one.
    assert!(
        demand * 10 < objects as u64 * 12,
        "{demand} demand reads for {objects} objects: {st:?}"
    );
    assert!(neighbours > objects as u64 / 2, "{st:?}");
    assert!(sampled > 0 && used * 10 >= sampled * 9, "{st:?}");
    pages.verify_all();
}

#[test]
fn random_single_pages_read_no_neighbours() {
    let (_guard, rt, mut pages, mut rng) = paged_region(
        "random_single_pages_read_no_neighbours",
        0x9E37_79B9_7F4A_7C15,
    );
    let n = pages.versions.len();
    let mut touch = |pages: &mut Pages, count: usize| {
        for k in 0..count {
            let page = rng.below(n);
            if k % 2 == 0 {
                pages.write(page);
            } else {
                pages.read(page);
            }
        }
    };
    touch(&mut pages, 2000);
    let before = rt.stats();
    touch(&mut pages, 20_000);
    let st = rt.stats();
    assert!(
        demand_reads(&before, &st) > 10_000,
        "the pages must miss: {st:?}"
    );
    assert_eq!(
        st.neighbour_reads, before.neighbour_reads,
        "random pages have no neighbours worth reading: {st:?}"
    );
    pages.verify_all();
}

/// With neighbour reads on, a scan reads its odd pages as neighbours at
/// first; the streams must still see a stride of one and read ahead.
#[test]
fn a_scan_after_pairs_still_reads_ahead() {
    let (_guard, rt, mut pages, mut rng) = paged_region(
        "a_scan_after_pairs_still_reads_ahead",
        0x1234_5678_9ABC_DEF1,
    );
    use_objects(&mut pages, &mut rng, 4000);
    let before = rt.stats();
    assert!(
        before.neighbour_reads > 0,
        "pairs must turn neighbour reads on"
    );
    for page in 0..pages.versions.len() {
        pages.read(page);
    }
    let st = rt.stats();
    let page_ins = st.page_ins - before.page_ins;
    let demand = demand_reads(&before, &st);
    eprintln!("scan: {page_ins} page-ins, {demand} on demand");
    assert!(
        demand * 20 < page_ins,
        "{demand} of {page_ins} pages read on demand: {st:?}"
    );
    pages.verify_all();
}
