//! The compressed tier: every kind of page (zero, same-filled, text,
//! random) survives heavy paging through the pool and the store, checked
//! on every byte; compressed pages are written back when the pool is full
//! and come back; the pool follows budget changes; a forked child sees the
//! pages the parent held compressed; and `TIERMEM_COMPRESS=off` keeps the
//! tier out of the way.

mod common;

use std::time::Duration;

use common::hang_guard;
use tiermem_core::{Codec, CompressSettings, Config, PolicyKind, Runtime, Stats};

const PAGE: usize = 4096;
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// What kind of content page `p` holds.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Zero,
    Same,
    Text,
    Random,
}

fn kind_of(page: usize) -> Kind {
    match page % 4 {
        0 => Kind::Zero,
        1 => Kind::Same,
        2 => Kind::Text,
        _ => Kind::Random,
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const WORDS: [&str; 16] = [
    "memory ", "the ", "page ", "of ", "cache ", "tier ", "and ", "fault ", "store ", "a ",
    "device ", "to ", "budget ", "in ", "evicted ", "read ",
];

/// Fills `out` with the content of page `page` at `version`.
fn content(page: usize, version: u64, out: &mut [u8]) {
    let seed = (page as u64) << 20 ^ version;
    match kind_of(page) {
        Kind::Zero => out.fill(0),
        Kind::Same => {
            let word = mix(seed) | 1;
            for c in out.chunks_exact_mut(8) {
                c.copy_from_slice(&word.to_ne_bytes());
            }
        }
        Kind::Text => {
            let mut at = 0;
            let mut i = 0u64;
            while at < out.len() {
                let w = WORDS[(mix(seed ^ i) % WORDS.len() as u64) as usize].as_bytes();
                let n = w.len().min(out.len() - at);
                out[at..at + n].copy_from_slice(&w[..n]);
                at += n;
                i += 1;
            }
        }
        Kind::Random => {
            for (i, c) in out.chunks_exact_mut(8).enumerate() {
                c.copy_from_slice(&mix(seed ^ (i as u64) << 40).to_ne_bytes());
            }
        }
    }
}

struct Region<'a> {
    bytes: &'a mut [u8],
    versions: Vec<u64>,
    scratch: Vec<u8>,
}

impl<'a> Region<'a> {
    fn new(rt: &Runtime, pages: usize) -> Region<'a> {
        let p = rt.alloc(pages * PAGE).expect("alloc").as_ptr();
        // SAFETY: a fresh allocation of `pages` pages, used only here,
        // which outlives the test's use of it (the runtime is not dropped
        // before the region).
        let bytes = unsafe { std::slice::from_raw_parts_mut(p, pages * PAGE) };
        let mut r = Region {
            bytes,
            versions: vec![0; pages],
            scratch: vec![0; PAGE],
        };
        for page in 0..pages {
            r.write(page);
        }
        r
    }

    fn write(&mut self, page: usize) {
        self.versions[page] += 1;
        content(page, self.versions[page], &mut self.scratch);
        self.bytes[page * PAGE..(page + 1) * PAGE].copy_from_slice(&self.scratch);
    }

    /// Pages whose bytes are not what was last written.
    fn wrong_pages(&mut self) -> Vec<usize> {
        let mut wrong = Vec::new();
        for page in 0..self.versions.len() {
            content(page, self.versions[page], &mut self.scratch);
            if self.bytes[page * PAGE..(page + 1) * PAGE] != self.scratch[..] {
                wrong.push(page);
            }
        }
        wrong
    }

    /// Random reads and writes over the region, a quarter of them writes.
    fn churn(&mut self, accesses: usize, seed: u64) -> u64 {
        let pages = self.versions.len() as u64;
        let mut sum = 0u64;
        for i in 0..accesses as u64 {
            let r = mix(seed ^ i);
            let page = (r % pages) as usize;
            if r >> 62 == 0 {
                self.write(page);
            } else {
                sum = sum.wrapping_add(self.bytes[page * PAGE + (r as usize >> 8) % PAGE] as u64);
            }
        }
        sum
    }
}

fn runtime(budget: u64, compress: CompressSettings) -> Runtime {
    let config = Config::builder()
        .dram_budget(budget)
        .page_size(PAGE)
        .policy(PolicyKind::Clock)
        .backing(std::env::temp_dir())
        .handler_threads(2)
        .compress(compress)
        .build()
        .expect("valid test config");
    Runtime::new(config).expect("tiermem runtime (needs userfaultfd: run as root)")
}

/// A set share: these tests check the pool against it.
fn lz4(share_percent: u32) -> CompressSettings {
    CompressSettings {
        codec: Codec::Lz4,
        share_percent,
        adapt_share: false,
        dictionary: true,
    }
}

fn lz4_fast(share_percent: u32) -> CompressSettings {
    CompressSettings {
        codec: Codec::Lz4Fast,
        ..lz4(share_percent)
    }
}

fn lz4_alone(share_percent: u32) -> CompressSettings {
    CompressSettings {
        dictionary: false,
        ..lz4(share_percent)
    }
}

/// The dictionary's size once gathered and in use.
const DICTIONARY: u64 = 64 << 10;

fn assert_intact(region: &mut Region<'_>, when: &str) {
    let wrong = region.wrong_pages();
    assert!(
        wrong.is_empty(),
        "{when}: {} page(s) wrong, first {:?} (kinds {:?})",
        wrong.len(),
        &wrong[..wrong.len().min(5)],
        wrong
            .iter()
            .take(5)
            .map(|&p| kind_of(p))
            .collect::<Vec<_>>()
    );
}

fn summary(s: &Stats) -> String {
    format!(
        "stores {} same {} rejected {} passed {} hits {} written back {} moved {} pool {} KiB \
         (dictionary {} KiB), {} pages, page-ins {} page-outs {} zero drops {}",
        s.compressed_stores,
        s.same_filled_pages,
        s.compress_rejected,
        s.compress_bypassed,
        s.compressed_hits,
        s.compressed_writebacks,
        s.compaction_moves,
        s.pool_bytes >> 10,
        s.compress_dictionary_bytes >> 10,
        s.compressed_pages,
        s.page_ins,
        s.page_outs,
        s.zero_drops
    )
}

#[test]
fn every_kind_of_page_survives_the_pool_and_the_store_byte_for_byte() {
    let _guard = hang_guard(
        "every_kind_of_page_survives_the_pool_and_the_store_byte_for_byte",
        HANG_LIMIT,
    );
    every_kind_of_page_survives(lz4(20));
}

#[test]
fn every_kind_of_page_survives_with_lz4_fast_mode() {
    let _guard = hang_guard("every_kind_of_page_survives_with_lz4_fast_mode", HANG_LIMIT);
    every_kind_of_page_survives(lz4_fast(20));
}

#[test]
fn every_kind_of_page_survives_without_a_dictionary() {
    let _guard = hang_guard(
        "every_kind_of_page_survives_without_a_dictionary",
        HANG_LIMIT,
    );
    every_kind_of_page_survives(lz4_alone(20));
}

fn every_kind_of_page_survives(settings: CompressSettings) {
    // 32 MiB in an 8 MiB budget, the pool at most a fifth of it: the
    // text and same-filled pages (16 MiB, about 4 MiB compressed)
    // overflow the pool, so it writes back to the store.
    let rt = runtime(8 << 20, settings);
    let mut region = Region::new(&rt, 8192);
    assert_intact(&mut region, "after the first fill");
    for round in 0..3 {
        region.churn(40_000, round);
        assert_intact(&mut region, &format!("after churn round {round}"));
    }
    let s = rt.stats();
    let what = summary(&s);
    // The dictionary is gathered from the first 16 text pages, charged
    // as pool DRAM, and used for the rest: every check above read pages
    // compressed both before and after it. On these pages (16 words, which
    // each page repeats) it saves close to the 8% it must save to be used,
    // so a verdict may find it not paying and gather a second one; the old
    // stays charged while objects use it. Every dictionary gathered and
    // still used is charged, and no more.
    let charged_slots = s.compress_dictionary_bytes / DICTIONARY;
    assert_eq!(s.compress_dictionary_bytes % DICTIONARY, 0, "{what}");
    match settings.dictionary {
        true => assert!(
            (1..=2).contains(&charged_slots) && charged_slots <= s.dictionaries_gathered,
            "{charged_slots} dictionaries charged, {} gathered; {what}",
            s.dictionaries_gathered
        ),
        false => assert_eq!(charged_slots, 0, "{what}"),
    }
    assert_eq!(
        s.dictionary_pages > 100,
        settings.dictionary,
        "pages compressed with the dictionary: {}; {what}",
        s.dictionary_pages
    );
    assert!(s.compressed_stores > 1000, "{what}");
    assert!(s.same_filled_pages > 100, "{what}");
    assert!(
        s.compress_rejected > 100,
        "random pages must be rejected: {what}"
    );
    assert!(s.zero_drops > 100, "zero pages leave as Zero: {what}");
    assert!(s.compressed_hits > 1000, "{what}");
    assert!(
        s.compressed_writebacks > 100,
        "the full pool writes back: {what}"
    );
    assert!(
        s.page_ins > 100,
        "written-back pages come back from the store: {what}"
    );
    let share = s.budget_bytes / 5;
    assert!(
        s.pool_bytes <= share + (256 << 10),
        "the pool ({} KiB) exceeds its share ({} KiB): {what}",
        s.pool_bytes >> 10,
        share >> 10
    );
    assert!(
        s.compression_ratio() > 2.0,
        "text and same-filled pages pack densely: ratio {:.2}, {what}",
        s.compression_ratio()
    );
}

#[test]
fn the_pool_shrinks_and_grows_with_the_budget_while_it_holds_pages() {
    let _guard = hang_guard(
        "the_pool_shrinks_and_grows_with_the_budget_while_it_holds_pages",
        HANG_LIMIT,
    );
    let rt = runtime(16 << 20, lz4(60));
    let mut region = Region::new(&rt, 8192);
    region.churn(20_000, 7);
    let before = rt.stats();
    assert!(before.compressed_pages > 500, "{}", summary(&before));
    rt.set_dram_budget(4 << 20).expect("shrink");
    region.churn(20_000, 8);
    assert_intact(&mut region, "after the shrink");
    // The evictor brings the pool under its new share within moments.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut s = rt.stats();
    while s.pool_bytes > (4 << 20) * 60 / 100 + (128 << 10) && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
        s = rt.stats();
    }
    assert!(
        s.pool_bytes <= (4 << 20) * 60 / 100 + (128 << 10),
        "the pool stays at {} KiB after the budget fell to 4 MiB: {}",
        s.pool_bytes >> 10,
        summary(&s)
    );
    assert!(
        s.resident_bytes <= (4 << 20) + (256 << 10),
        "{}",
        summary(&s)
    );
    rt.set_dram_budget(24 << 20).expect("grow");
    region.churn(20_000, 9);
    assert_intact(&mut region, "after the budget grew again");
    assert!(rt.stats().compressed_pages > 0);
}

#[test]
fn a_forked_child_reads_the_pages_its_parent_held_compressed() {
    let _guard = hang_guard(
        "a_forked_child_reads_the_pages_its_parent_held_compressed",
        HANG_LIMIT,
    );
    let rt = runtime(8 << 20, lz4(50));
    let mut region = Region::new(&rt, 4096);
    region.churn(10_000, 3);
    let s = rt.stats();
    assert!(
        s.compressed_pages > 200 && s.compress_dictionary_bytes == DICTIONARY,
        "the child must inherit pages compressed with the dictionary: {}",
        summary(&s)
    );
    // SAFETY: the child only touches tiered memory and its own heap
    // copies, then _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if !region.wrong_pages().is_empty() {
                return 1;
            }
            region.churn(10_000, 11);
            if !region.wrong_pages().is_empty() {
                return 2;
            }
            0
        }))
        .unwrap_or(3);
        // SAFETY: leaves the forked child without running the harness.
        unsafe { libc::_exit(code) }
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed: status {status:#x} (exit 1: wrong bytes at the fork, \
         2: after its own paging, 3: a panic)"
    );
    assert_intact(&mut region, "the parent after the child's run");
    region.churn(10_000, 12);
    assert_intact(&mut region, "the parent after more paging");
}

#[test]
fn with_compression_off_no_page_enters_the_pool() {
    let _guard = hang_guard("with_compression_off_no_page_enters_the_pool", HANG_LIMIT);
    let rt = runtime(8 << 20, CompressSettings::off());
    let mut region = Region::new(&rt, 4096);
    region.churn(10_000, 5);
    assert_intact(&mut region, "with the tier off");
    let s = rt.stats();
    assert_eq!(
        (s.compressed_stores, s.pool_bytes, s.compression),
        (0, 0, "off"),
        "{}",
        summary(&s)
    );
    assert!(s.page_outs > 0);
}

#[test]
fn a_full_pool_without_hits_lets_pages_pass_and_hits_take_it_back() {
    let _guard = hang_guard(
        "a_full_pool_without_hits_lets_pages_pass_and_hits_take_it_back",
        HANG_LIMIT,
    );
    // 64 MiB filled in order in an 8 MiB budget, the pool at most a fifth
    // of it: the pool is full long before the fill ends, and nothing
    // faults a compressed page back while it runs.
    let rt = runtime(8 << 20, lz4(20));
    let mut region = Region::new(&rt, 16_384);
    let filled = rt.stats();
    assert!(
        filled.compress_bypassed > 1000,
        "a first fill must pass a full, unused pool by: {}",
        summary(&filled)
    );
    assert_intact(&mut region, "after the first fill");
    // Uniform access faults compressed pages back: the pool is used, and
    // takes pages again (while passing by, it takes one in 16).
    let checked = rt.stats();
    region.churn(60_000, 7);
    let churned = rt.stats();
    let stored = churned.compressed_stores - checked.compressed_stores;
    let passed = churned.compress_bypassed - checked.compress_bypassed;
    assert!(
        churned.compressed_hits > checked.compressed_hits + 1000 && stored > 2 * passed,
        "hits must turn the pool back on: {stored} stored against {passed} passed by; {}",
        summary(&churned)
    );
    assert_intact(&mut region, "after the churn");
}

/// Text of 64 recurring phrases of random letters, drawn from one of two
/// vocabularies: a page holds each phrase about twice, so compressed alone
/// it stores most phrases literally, and a dictionary of the same
/// vocabulary saves most of that; one of the other vocabulary saves nothing.
fn phrase_text(vocabulary: u64, page: usize, version: u64, out: &mut [u8]) {
    let mut at = 0;
    let mut i = 0u64;
    while at < out.len() {
        let phrase = mix((page as u64) << 24 ^ version << 8 ^ i) % 64;
        let seed = mix(vocabulary << 32 ^ phrase);
        let len = 20 + (seed % 20) as usize;
        for k in 0..len.min(out.len() - at) {
            out[at + k] = b'a' + (mix(seed ^ k as u64) % 26) as u8;
        }
        at += len.min(out.len() - at);
        if at < out.len() {
            out[at] = b' ';
            at += 1;
        }
        i += 1;
    }
}

#[test]
fn a_dictionary_that_stops_paying_is_replaced_and_every_page_survives() {
    let _guard = hang_guard(
        "a_dictionary_that_stops_paying_is_replaced_and_every_page_survives",
        HANG_LIMIT,
    );
    let rt = runtime(8 << 20, lz4(50));
    let pages = 8192;
    let p = rt.alloc(pages * PAGE).expect("alloc").as_ptr();
    // SAFETY: a fresh allocation of `pages` pages, used only here, while
    // the runtime lives.
    let bytes = unsafe { std::slice::from_raw_parts_mut(p, pages * PAGE) };
    let mut scratch = vec![0u8; PAGE];
    let mut versions = vec![(0u64, 0u64); pages];
    let mut write =
        |bytes: &mut [u8], page: usize, vocabulary: u64, versions: &mut [(u64, u64)]| {
            let version = versions[page].1 + 1;
            versions[page] = (vocabulary, version);
            phrase_text(vocabulary, page, version, &mut scratch);
            bytes[page * PAGE..(page + 1) * PAGE].copy_from_slice(&scratch);
        };
    let check = |bytes: &[u8], versions: &[(u64, u64)], when: &str| {
        let mut expected = vec![0u8; PAGE];
        let wrong: Vec<usize> = (0..pages)
            .filter(|&page| {
                let (vocabulary, version) = versions[page];
                phrase_text(vocabulary, page, version, &mut expected);
                bytes[page * PAGE..(page + 1) * PAGE] != expected[..]
            })
            .collect();
        assert!(
            wrong.is_empty(),
            "{when}: {} page(s) wrong, first {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
    };
    // Vocabulary 1 everywhere, then paged: the first dictionary fits it.
    for round in 0..3 {
        for page in 0..pages {
            write(bytes, page, 1, &mut versions);
        }
        check(bytes, &versions, &format!("vocabulary 1, round {round}"));
    }
    let first = rt.stats();
    assert_eq!(first.dictionaries_gathered, 1, "{}", summary(&first));
    // Vocabulary 2 everywhere: the first dictionary saves nothing on it,
    // the checks find that, and a dictionary of vocabulary 2 replaces it.
    for round in 0..8 {
        for page in 0..pages {
            write(bytes, page, 2, &mut versions);
        }
        check(bytes, &versions, &format!("vocabulary 2, round {round}"));
    }
    let s = rt.stats();
    let what = summary(&s);
    assert!(
        s.dictionaries_gathered >= 2,
        "the dictionary was not replaced: {what}"
    );
    let late = s.dictionary_pages - first.dictionary_pages;
    assert!(
        late > 1000,
        "pages compressed with the new dictionary: {late}; {what}"
    );
    assert!(
        s.compress_dictionary_bytes <= 2 * DICTIONARY,
        "at most two dictionaries are held: {what}"
    );
}

/// Reads pages of a text region, `hot_percent` of them from its first
/// `hot_pages` pages (the rest uniform over all), until `done` says so or
/// `limit` passes; returns the stats at the end.
fn read_until(
    rt: &Runtime,
    bytes: &[u8],
    hot_pages: usize,
    hot_percent: u64,
    limit: Duration,
    done: impl Fn(&Stats) -> bool,
) -> Stats {
    let pages = bytes.len() / PAGE;
    let deadline = std::time::Instant::now() + limit;
    let mut sum = 0u64;
    let mut i = 0u64;
    loop {
        for _ in 0..10_000 {
            let r = mix(i);
            i += 1;
            let page = match r % 100 < hot_percent {
                true => (r >> 8) as usize % hot_pages,
                false => (r >> 8) as usize % pages,
            };
            sum = sum.wrapping_add(bytes[page * PAGE + (r >> 40) as usize % PAGE] as u64);
        }
        let s = rt.stats();
        if done(&s) || std::time::Instant::now() > deadline {
            std::hint::black_box(sum);
            return s;
        }
    }
}

#[test]
fn an_adapting_split_grows_the_pool_for_uniform_reads_and_shrinks_it_for_a_hot_set() {
    let _guard = hang_guard(
        "an_adapting_split_grows_the_pool_for_uniform_reads_and_shrinks_it_for_a_hot_set",
        HANG_LIMIT,
    );
    let settings = CompressSettings {
        adapt_share: true,
        ..lz4(50)
    };
    // 48 MiB of phrase text in 8 MiB: at a ratio near 3, even the whole
    // budget as pool holds about half, so uniform reads keep hitting the
    // pool's old end.
    let rt = runtime(8 << 20, settings);
    let pages = 12_288;
    let p = rt.alloc(pages * PAGE).expect("alloc").as_ptr();
    // SAFETY: a fresh allocation of `pages` pages, used only here, while
    // the runtime lives.
    let bytes = unsafe { std::slice::from_raw_parts_mut(p, pages * PAGE) };
    for page in 0..pages {
        phrase_text(1, page, 1, &mut bytes[page * PAGE..(page + 1) * PAGE]);
    }
    let limit = Duration::from_secs(30);
    let s = read_until(&rt, bytes, 1, 0, limit, |s| s.compress_share_percent >= 65);
    assert!(
        s.compress_share_percent >= 65,
        "uniform reads left the share at {}% after {} move(s): {}",
        s.compress_share_percent,
        s.compress_share_moves,
        summary(&s)
    );
    // A hot set of 1,500 pages (6 MiB) taking 95% of the reads: it fits
    // in the budget only if little of it goes to the pool.
    let s = read_until(&rt, bytes, 1_500, 95, limit, |s| {
        s.compress_share_percent <= 35
    });
    assert!(
        s.compress_share_percent <= 35,
        "a hot set left the share at {}% after {} move(s): {}",
        s.compress_share_percent,
        s.compress_share_moves,
        summary(&s)
    );
    let mut expected = vec![0u8; PAGE];
    for page in 0..pages {
        phrase_text(1, page, 1, &mut expected);
        assert!(
            bytes[page * PAGE..(page + 1) * PAGE] == expected[..],
            "page {page} changed"
        );
    }
    assert!(
        s.resident_bytes <= (8 << 20) + (256 << 10),
        "the budget holds while the split moves: {}",
        summary(&s)
    );
}
