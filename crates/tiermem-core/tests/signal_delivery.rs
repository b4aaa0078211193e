//! Signal delivery (`TIERMEM_FAULTS=signal`): the faulting thread resolves
//! its own faults through SIGBUS. Every runtime in this file uses it, so no
//! handler thread may exist in this process.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use common::{budget_watch, random_reads_and_writes, resident_bytes, Stamped};
use tiermem_core::{CompressSettings, Config, FaultDelivery, Organization, PolicyKind, Runtime};

const REGION: usize = 256 << 20;
const BUDGET: u64 = 32 << 20;

/// The store path under signal delivery (the compressed tier off, as the
/// stamped pages would all fit in its pool); `compressed_pages_are_served_
/// in_the_faulting_thread` covers the tier.
fn signal_runtime(budget: u64, page_size: usize, policy: PolicyKind) -> Runtime {
    signal_runtime_with(budget, page_size, policy, Organization::default())
}

fn signal_runtime_with(
    budget: u64,
    page_size: usize,
    policy: PolicyKind,
    organization: Organization,
) -> Runtime {
    signal_runtime_compressing(
        budget,
        page_size,
        policy,
        organization,
        CompressSettings::off(),
    )
}

fn signal_runtime_compressing(
    budget: u64,
    page_size: usize,
    policy: PolicyKind,
    organization: Organization,
    compress: CompressSettings,
) -> Runtime {
    let config = Config::builder()
        .compress(compress)
        .dram_budget(budget)
        .page_size(page_size)
        .policy(policy)
        .backing(std::env::temp_dir())
        .organization(organization)
        .faults(FaultDelivery::Signal)
        .build()
        .expect("valid test config");
    Runtime::new(config).expect(
        "tiermem runtime (needs userfaultfd: run as root or set vm.unprivileged_userfaultfd=1)",
    )
}

/// The compressed tier under signal delivery: faulting threads decompress
/// their own pages, and every page keeps its identity.
#[test]
fn compressed_pages_are_served_in_the_faulting_thread() {
    let rt = signal_runtime_compressing(
        BUDGET,
        4096,
        PolicyKind::Clock,
        Organization::default(),
        CompressSettings::default(),
    );
    let base = rt.alloc(REGION).expect("alloc").as_ptr();
    let stamped = Stamped::stamp(base, REGION);
    let watch = budget_watch(&rt, base, REGION, BUDGET);
    let (lost_reads, over_budget) =
        random_reads_and_writes(&stamped, 3, Duration::from_secs(3), 0x5167_0b06, watch);
    assert_eq!(over_budget, None, "over budget");
    assert_eq!(lost_reads, 0, "reads saw a page without its identity");
    stamped
        .verify()
        .unwrap_or_else(|e| panic!("signal delivery through the pool: {e}"));
    let stats = rt.stats();
    assert!(
        stats.compressed_stores > 0 && stats.compressed_hits > 0,
        "{stats:?}"
    );
    assert_eq!(handler_threads(), 0, "signal delivery starts no handler");
}

fn hammer(page_size: usize, policy: PolicyKind, threads: usize) {
    let rt = signal_runtime(BUDGET, page_size, policy);
    let base = rt.alloc(REGION).expect("alloc").as_ptr();
    let stamped = Stamped::stamp(base, REGION);
    let watch = budget_watch(&rt, base, REGION, BUDGET);
    let (lost_reads, over_budget) = random_reads_and_writes(
        &stamped,
        threads,
        Duration::from_secs(3),
        0x5167_0b05,
        watch,
    );
    assert_eq!(over_budget, None, "over budget");
    assert_eq!(lost_reads, 0, "reads saw a page without its identity");
    stamped
        .verify()
        .unwrap_or_else(|e| panic!("signal delivery, {policy:?}/{page_size}: {e}"));
    let stats = rt.stats();
    assert!(
        stats.page_outs > 0 && stats.page_ins > 0 && stats.wp_faults > 0,
        "paging and write-protect faults must both happen: {stats:?}"
    );
    assert!(stats.io_engine.contains("SIGBUS"), "{}", stats.io_engine);
    assert_eq!(handler_threads(), 0, "signal delivery starts no handler");
}

/// Fault handler threads of this process (the runtime names them).
fn handler_threads() -> usize {
    threads_named("tiermem-fault")
}

fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with(prefix))
        .count()
}

#[test]
fn every_page_survives_heavy_paging_4k() {
    hammer(4096, PolicyKind::Clock, 3);
}

#[test]
fn every_page_survives_heavy_paging_64k_s3fifo() {
    hammer(64 << 10, PolicyKind::S3Fifo, 3);
}

#[test]
fn sequential_passes_are_read_ahead_by_the_read_ahead_thread() {
    let rt = signal_runtime(BUDGET, 4096, PolicyKind::Clock);
    // The thread names itself once it runs.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while threads_named("tiermem-ahead") == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        threads_named("tiermem-ahead") >= 1,
        "adaptive read-ahead under signal delivery runs a read-ahead thread"
    );
    let base = rt.alloc(REGION / 2).expect("alloc").as_ptr();
    let stamped = Stamped::stamp(base, REGION / 2);
    let mut over_budget = budget_watch(&rt, base, REGION / 2, BUDGET);
    // A read pass, then a write pass that takes write faults on pages the
    // read-ahead installed protected, then a read pass backwards.
    let before = rt.stats();
    for unit in 0..stamped.units {
        assert!(stamped.read_ok(unit), "unit {unit} lost its identity");
    }
    let read_pass = rt.stats();
    assert_eq!(over_budget(), None, "after the read pass");
    for unit in 0..stamped.units {
        stamped.write(unit);
    }
    assert_eq!(over_budget(), None, "after the write pass");
    for unit in (0..stamped.units).rev() {
        assert!(stamped.read_ok(unit), "unit {unit} lost its identity");
    }
    assert_eq!(over_budget(), None, "after the backward pass");
    stamped
        .verify()
        .expect("every page intact after read-ahead");
    let ins = read_pass.page_ins - before.page_ins;
    let prefetched = read_pass.prefetch_issued - before.prefetch_issued;
    let hits = read_pass.prefetch_hits - before.prefetch_hits;
    assert!(
        prefetched * 10 > ins * 8,
        "a sequential pass should be read ahead: {prefetched} of {ins} page-ins"
    );
    assert!(
        hits * 10 > prefetched * 8,
        "the pass should use what it read ahead: {hits} of {prefetched}"
    );
    let after = rt.stats();
    assert!(
        after.prefetch_issued - read_pass.prefetch_issued
            > (after.page_ins - read_pass.page_ins) / 2,
        "backward and write passes are streams too: {after:?}"
    );
}

#[test]
fn a_fixed_prefetch_degree_reads_the_following_pages_too() {
    let organization = Organization {
        prefetch: Some(3),
        ..Organization::default()
    };
    let rt = signal_runtime_with(BUDGET, 4096, PolicyKind::Fifo, organization);
    let base = rt.alloc(REGION / 2).expect("alloc").as_ptr();
    let stamped = Stamped::stamp(base, REGION / 2);
    let before = rt.stats();
    // A second pass over all of it: every miss brings three more pages.
    for unit in 0..stamped.units {
        assert!(stamped.read_ok(unit), "unit {unit} lost its identity");
    }
    let stats = rt.stats();
    let ins = stats.page_ins - before.page_ins;
    let prefetched = stats.prefetch_issued - before.prefetch_issued;
    assert!(
        prefetched * 2 > ins,
        "most page-ins should be prefetches: {prefetched} of {ins}"
    );
    stamped.verify().expect("every page intact");
}

#[test]
fn two_runtimes_keep_their_faults_apart_and_one_can_go_first() {
    let first = signal_runtime(8 << 20, 4096, PolicyKind::Clock);
    let second = signal_runtime(8 << 20, 4096, PolicyKind::Fifo);
    let len = 64 << 20;
    let a = Stamped::stamp(first.alloc(len).expect("alloc").as_ptr(), len);
    let b = Stamped::stamp(second.alloc(len).expect("alloc").as_ptr(), len);
    a.verify().expect("first runtime's pages");
    b.verify().expect("second runtime's pages");
    drop(a);
    drop(first);
    let (lost, _) = random_reads_and_writes(&b, 2, Duration::from_secs(1), 7, || None);
    assert_eq!(lost, 0);
    b.verify()
        .expect("second runtime's pages after the first stopped");
    assert!(second.stats().page_ins > 0, "the second runtime paged");
}

/// The price of signal delivery, documented in `FaultDelivery::Signal`: the
/// kernel does not wait for a page that is not resident.
#[test]
fn a_system_call_given_evicted_tiered_memory_fails_with_efault() {
    let rt = signal_runtime(4 << 20, 4096, PolicyKind::Clock);
    let len = 1 << 20;
    let buf = rt.alloc(len).expect("alloc").as_ptr();
    // SAFETY: `buf` is a live allocation of `len` bytes.
    unsafe { std::ptr::write_bytes(buf, 0x5a, len) };
    // Push it out with a flood four times the budget.
    let flood_len = 16 << 20;
    let flood = rt.alloc(flood_len).expect("alloc").as_ptr();
    for off in (0..flood_len).step_by(4096) {
        // SAFETY: inside the live flood allocation.
        unsafe { flood.add(off).write(1) };
    }
    assert_eq!(resident_bytes(buf, 4096), 0, "its first page was evicted");
    let (rc, errno) = pipe_write(buf, 4096);
    assert_eq!((rc, errno), (-1, Some(libc::EFAULT)), "evicted page");
    // SAFETY: a load from the live allocation brings the page in.
    assert_eq!(unsafe { buf.read_volatile() }, 0x5a);
    let (rc, _) = pipe_write(buf, 4096);
    assert_eq!(rc, 4096, "a resident page is written in full");
}

/// write(2) of `len` bytes at `ptr` into a pipe, which copies them.
fn pipe_write(ptr: *const u8, len: usize) -> (isize, Option<i32>) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the range is inside a live allocation; the kernel only reads it.
    let rc = unsafe { libc::write(fds[1], ptr.cast(), len) };
    let errno = std::io::Error::last_os_error().raw_os_error();
    // SAFETY: closing the two descriptors just made.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    (rc, errno)
}

const CHILD: &str = "TIERMEM_TEST_SIGBUS_CHILD";

/// A SIGBUS that is not tiermem's (here: a load beyond the end of a
/// truncated file mapping) still kills the process, as it would without
/// tiermem, instead of being swallowed or raised forever: whether the
/// SIGBUS handler before tiermem's was Rust's own (the test binary's), the
/// default action, or "ignore" (which the kernel overrides for a SIGBUS
/// raised by an access). And when the file is mapped inside the arena, over
/// memory the runtime let go (`arena`: `tiermem run` does this for a
/// `MAP_FIXED` file mapping in a reservation): the handler resolved such a
/// fault as its own, and the access raised it again forever.
#[test]
fn a_foreign_sigbus_still_kills_the_process() {
    if let Some(before) = std::env::var_os(CHILD) {
        return foreign_sigbus_child(&before.to_string_lossy());
    }
    for before in ["rust", "default", "ignore", "arena"] {
        let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "a_foreign_sigbus_still_kills_the_process",
                "--nocapture",
            ])
            .env(CHILD, before)
            .spawn()
            .expect("running the child");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().expect("waiting for the child") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("with a {before} handler before ours, the child hung");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(
            status.signal(),
            Some(libc::SIGBUS),
            "with a {before} handler before ours, the child must die of SIGBUS: {status:?}"
        );
    }
}

/// Moves the one-page mapping at `map` into lazily committed tiered
/// memory that the runtime gives up for it, as `tiermem run` places a
/// `MAP_FIXED` file mapping in a reservation.
fn into_the_arena(rt: &Runtime, map: usize) -> *mut libc::c_void {
    let at = rt.alloc_lazy(4096).expect("alloc_lazy").as_ptr() as usize;
    // SAFETY: the page is ours, and nothing uses it while it changes hands.
    unsafe { rt.cede_to_foreign(at, 4096) };
    // SAFETY: moving our own one-page mapping over the page just given up.
    let moved = unsafe {
        libc::mremap(
            map as *mut libc::c_void,
            4096,
            4096,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            at as *mut libc::c_void,
        )
    };
    assert_eq!(moved as usize, at, "mremap into the arena");
    assert_eq!(rt.foreign_parts(at, 4096), vec![at..at + 4096]);
    moved
}

fn foreign_sigbus_child(before: &str) {
    let disposition = match before {
        "default" => Some(libc::SIG_DFL),
        "ignore" => Some(libc::SIG_IGN),
        _ => None,
    };
    if let Some(disposition) = disposition {
        // SAFETY: setting SIGBUS's disposition before any handler of ours.
        unsafe { libc::signal(libc::SIGBUS, disposition) };
    }
    let rt = signal_runtime(4 << 20, 4096, PolicyKind::Clock);
    let tiered = Stamped::stamp(rt.alloc(16 << 20).expect("alloc").as_ptr(), 16 << 20);
    tiered.verify().expect("tiered memory works");
    assert!(
        rt.stats().page_ins > 0,
        "tiermem served SIGBUS faults first"
    );
    let file = tempfile::tempfile_in("/var/tmp").expect("temp file");
    file.set_len(4096).expect("set_len");
    // SAFETY: a fresh shared mapping of our own file.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    let map = match before {
        "arena" => into_the_arena(&rt, map as usize),
        _ => map,
    };
    file.set_len(0).expect("truncate");
    // SAFETY: deliberately touching a page past the end of the file, which
    // raises SIGBUS; the test expects this process to die of it.
    let byte = unsafe { (map as *const u8).read_volatile() };
    eprintln!("read {byte} past the end of a file without SIGBUS");
    std::process::exit(0);
}
