//! Real programs under `tiermem run` (transparent mode, issue 3), for real:
//! Python, Redis (with a BGSAVE fork and a reload by a plain server), GNU sort
//! and four C programs (stdio, threads, fork, mremap/madvise). Each runs once
//! without tiermem, to prove the program and the test are right, and once
//! under `tiermem run` with a DRAM budget several times smaller than its
//! data; the outputs must agree and tiermem's `--stats` must show paging.
//!
//! A program that is not installed fails the test when `CI` is set (.ci/run
//! installs them all) and skips it otherwise.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

#[path = "../../../tests/support/libtiermem.rs"]
mod support;
use support::{libtiermem, repo_root};

/// A run that takes longer than this has hung: kill it and fail.
const RUN_TIMEOUT: Duration = Duration::from_secs(240);

// ---------------------------------------------------------------------------
// Plumbing: the library, scratch directories, programs, runs with a timeout.
// ---------------------------------------------------------------------------

/// A fresh directory under /var/tmp (the backing file's filesystem), removed
/// on drop.
fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("tiermem-run-{tag}-"))
        .tempdir_in("/var/tmp")
        .expect("cannot create a scratch directory in /var/tmp")
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let p = PathBuf::from(name);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| executable(p))
}

/// The program's path; if it is missing, fail under CI and skip otherwise.
fn need(name: &str) -> Option<PathBuf> {
    match find_in_path(name) {
        Some(p) => Some(p),
        None if std::env::var_os("CI").is_some() => {
            panic!("{name} is not installed, and CI must have it (.ci/run installs it)")
        }
        None => {
            println!("skipped: {name} not installed");
            None
        }
    }
}

/// `tiermem run --dram DRAM --backing BACKING --stats -- PROGRAM`; add the
/// program's arguments to the result.
fn tiermem_run(dram: &str, backing: &Path, program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tiermem"));
    cmd.args(["run", "--dram", dram, "--backing"])
        .arg(backing)
        .args(["--stats", "--"])
        .arg(program)
        .env("TIERMEM_LIB", libtiermem());
    cmd
}

fn kill_group(pgid: u32) {
    // SAFETY: kill has no memory-safety preconditions; the group is one this
    // test created (process_group(0) on spawn).
    unsafe {
        libc::kill(-(pgid as libc::pid_t), libc::SIGKILL);
    }
}

struct Ran {
    what: String,
    status: ExitStatus,
    stdout: String,
    stderr: String,
    secs: f64,
}

impl Ran {
    fn last_line(&self) -> &str {
        self.stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
    }

    fn describe(&self) -> String {
        format!(
            "{}: {} after {:.1}s\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
            self.what,
            self.status,
            self.secs,
            tail(&self.stdout, 40),
            tail(&self.stderr, 60)
        )
    }

    /// Exit status 0 and a last line starting with "OK".
    fn assert_ok(&self) {
        assert!(
            self.status.success() && self.last_line().starts_with("OK"),
            "{} did not pass\n{}",
            self.what,
            self.describe()
        );
    }
}

fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs cmd in its own process group with stdin closed, collecting stdout and
/// stderr; kills the whole group and fails after RUN_TIMEOUT.
fn run(mut cmd: Command, what: &str) -> Ran {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    let pgid = child.id();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_t = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > RUN_TIMEOUT {
            kill_group(pgid);
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(20));
    };
    // Whatever the program left behind in its group goes too.
    kill_group(pgid);
    let stdout = String::from_utf8_lossy(&out_t.join().unwrap()).into_owned();
    let stderr = String::from_utf8_lossy(&err_t.join().unwrap()).into_owned();
    let secs = start.elapsed().as_secs_f64();
    match status {
        Some(status) => Ran {
            what: what.to_string(),
            status,
            stdout,
            stderr,
            secs,
        },
        None => panic!(
            "{what}: still running after {RUN_TIMEOUT:?} (hung?), killed\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
            tail(&stdout, 40),
            tail(&stderr, 60)
        ),
    }
}

// ---------------------------------------------------------------------------
// tiermem's --stats summary.
// ---------------------------------------------------------------------------

/// The first number in s (digits, with ',' or '_' allowed between digits).
fn first_number(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let start = b.iter().position(u8::is_ascii_digit)?;
    let mut digits = String::new();
    let mut i = start;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            digits.push(b[i] as char);
        } else if (b[i] == b',' || b[i] == b'_') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
            // a thousands separator
        } else {
            break;
        }
        i += 1;
    }
    digits.parse().ok()
}

/// The page-out count from `--stats` output: the number after "page-outs"
/// on its line (or else the first number on that line); the largest if the
/// summary appears more than once. None if no line has a number.
fn page_outs(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .filter_map(|line| {
            let lower = line.to_ascii_lowercase();
            let at = lower.find("page-outs")?;
            first_number(&lower[at + "page-outs".len()..]).or_else(|| first_number(&lower))
        })
        .max()
}

/// Checks that the `--stats` summary is there, and returns the page-outs.
fn check_stats(what: &str, stderr: &str) -> u64 {
    let lower = stderr.to_ascii_lowercase();
    assert!(
        lower.contains("page-outs") || lower.contains("peak resident"),
        "{what}: no --stats summary on stderr at all. (Programs may close fd 2 before exit: \
         coreutils' close_stdout does, so `sort` and `cat` lose a summary written to fd 2 at exit.)\n\
         --- stderr (tail) ---\n{}",
        tail(stderr, 60)
    );
    for word in ["faults", "page-ins", "page-outs", "peak resident"] {
        assert!(
            lower.contains(word),
            "{what}: the --stats summary has no '{word}'\n--- stderr (tail) ---\n{}",
            tail(stderr, 60)
        );
    }
    page_outs(stderr).unwrap_or_else(|| {
        panic!(
            "{what}: no number on the page-outs line of --stats\n--- stderr (tail) ---\n{}",
            tail(stderr, 60)
        )
    })
}

/// The pages the compressed tier took (`stored N` on the `compressed` line
/// of --stats), or `None` when the tier was off.
fn compressed_stores(stderr: &str) -> Option<u64> {
    stderr.lines().find_map(|line| {
        let lower = line.trim_start().to_ascii_lowercase();
        let rest = lower.strip_prefix("compressed")?;
        let at = rest.find("stored ")?;
        first_number(&rest[at + "stored ".len()..])
    })
}

/// Checks that pages left DRAM for the compressed tier, for a run that
/// turned it on to exercise it; returns how many.
fn assert_compressed(what: &str, stderr: &str) -> u64 {
    check_stats(what, stderr);
    let stored = compressed_stores(stderr).unwrap_or(0);
    assert!(
        stored > 0,
        "{what}: --stats shows no page stored in the compressed tier, so the run did not exercise it\n--- stderr (tail) ---\n{}",
        tail(stderr, 60)
    );
    stored
}

fn assert_paged(what: &str, stderr: &str) -> u64 {
    let outs = check_stats(what, stderr);
    assert!(
        outs > 0,
        "{what}: --stats shows no page-outs, so nothing was paged: the data should exceed the budget many times\n--- stderr (tail) ---\n{}",
        tail(stderr, 60)
    );
    outs
}

// ---------------------------------------------------------------------------
// The C programs (tests/c/preload_*.c).
// ---------------------------------------------------------------------------

fn compile_c(name: &str, dir: &Path) -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let cc = need(&cc)?;
    let src = repo_root().join(format!("tests/c/{name}.c"));
    let exe = dir.join(name);
    let out = Command::new(&cc)
        .args(["-O1", "-Wall", "-Wextra", "-Werror", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "compiling {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

/// Compiles tests/c/NAME.c, runs it without tiermem (it must pass: a failure
/// under tiermem is then tiermem's), then under `tiermem run --dram DRAM`.
/// `args` gets the run's own scratch directory.
fn c_program(name: &str, dram: &str, args: &dyn Fn(&Path) -> Vec<String>) {
    c_program_with(name, dram, &[], args);
}

/// As [`c_program`], with more `tiermem run` flags; returns the stats
/// printed at exit.
fn c_program_with(
    name: &str,
    dram: &str,
    flags: &[&str],
    args: &dyn Fn(&Path) -> Vec<String>,
) -> String {
    c_program_env(name, dram, flags, &[], args)
}

/// The variables for a run whose evicted pages must reach the store: the
/// compressed tier off. The C programs' stamps compress well, often well
/// enough for a whole region to stay in DRAM compressed, so a test about
/// the store, a fork's reads of it or the evictor's writes sets these.
const STORE_ONLY: &[(&str, &str)] = &[("TIERMEM_COMPRESS", "off")];

/// [`c_program_with`], with variables set for the tiered run.
fn c_program_env(
    name: &str,
    dram: &str,
    flags: &[&str],
    env: &[(&str, &str)],
    args: &dyn Fn(&Path) -> Vec<String>,
) -> String {
    let tmp = scratch(name);
    let Some(exe) = compile_c(name, tmp.path()) else {
        return String::new();
    };
    let native_dir = tmp.path().join("native");
    let tiered_dir = tmp.path().join("tiered");
    std::fs::create_dir(&native_dir).unwrap();
    std::fs::create_dir(&tiered_dir).unwrap();

    let mut cmd = Command::new(&exe);
    cmd.args(args(&native_dir));
    let native = run(cmd, &format!("{name} without tiermem"));
    native.assert_ok();

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tiermem"));
    cmd.args(["run", "--dram", dram, "--backing"])
        .arg(&tiered_dir)
        .args(flags)
        .args(["--stats", "--"])
        .arg(&exe)
        .env("TIERMEM_LIB", libtiermem())
        .envs(env.iter().copied())
        .args(args(&tiered_dir));
    let tiered = run(
        cmd,
        &format!("{name} under tiermem run --dram {dram} {}", flags.join(" ")),
    );
    tiered.assert_ok();
    // A run that asks for the compressed tier must have used it; any other
    // must have written to the store. Data that compresses well can live
    // in DRAM compressed under the default settings and never reach the
    // store, so a test about the store turns the tier off.
    let asked_for_compression = env
        .iter()
        .any(|&(key, value)| key == "TIERMEM_COMPRESS" && value != "off");
    let (outs, unit) = if asked_for_compression {
        (
            assert_compressed(&tiered.what, &tiered.stderr),
            "compressed",
        )
    } else {
        (assert_paged(&tiered.what, &tiered.stderr), "page-outs")
    };
    println!(
        "{name}: {} | without tiermem {:.2}s, under tiermem {:.2}s, {outs} {unit}",
        tiered.last_line(),
        native.secs,
        tiered.secs
    );
    tiered.stderr
}

/// fread, fscanf (through a fresh stdio buffer), read, pread and readv into
/// fresh malloc'd buffers that nothing touched before the syscall. 1M is the
/// smallest budget `tiermem run` accepts; the buffers are 2-11 MiB each.
#[test]
fn c_stdio_reads_into_untouched_tiered_buffers() {
    c_program("preload_stdio", "1M", &|dir| {
        vec![dir.join("data.txt").to_string_lossy().into_owned()]
    });
}

/// The whole malloc family from 4 threads with content stamps, blocks passed
/// between threads, and the edge cases (usable size, overflow, alignment,
/// calloc zeroing).
#[test]
fn c_threads_stress_the_malloc_family() {
    c_program("preload_threads", "8M", &|_| vec!["3000".into()]);
}

/// The same stress under the memory-mode preset (direct-mapped, write-back,
/// no prefetch) and under a 4-way write-through cache with a prefetch of 2:
/// the program's checks pass and the stats show the organization at work.
#[test]
fn c_threads_under_other_cache_organizations() {
    let stats = c_program_with(
        "preload_threads",
        "8M",
        &["--preset", "memory-mode"],
        &|_| vec!["3000".into()],
    );
    if !stats.is_empty() {
        assert!(
            stats.contains("direct-mapped, no prefetch, write-back"),
            "{stats}"
        );
        assert!(!stats.contains("conflict evictions 0,"), "{stats}");
    }
    let stats = c_program_with(
        "preload_threads",
        "8M",
        &[
            "--associativity",
            "4",
            "--write-policy",
            "write-through",
            "--prefetch",
            "2",
        ],
        &|_| vec!["3000".into()],
    );
    if !stats.is_empty() {
        assert!(
            stats.contains("4-way, prefetch 2, write-through"),
            "{stats}"
        );
        assert!(!stats.contains("write-throughs 0\n"), "{stats}");
    }
}

/// fork without exec over mostly evicted data: children and a grandchild see
/// exactly what their parent had, while the parent keeps writing, and use
/// new memory of their own. 48 MiB of malloc'd chunks and a 16 MiB mapping,
/// 8x the budget (64 + 32 MiB took 40-60 s under tiermem).
#[test]
fn c_fork_children_see_evicted_pages() {
    c_program("preload_fork", "8M", &|_| vec!["48".into(), "16".into()]);
}

/// O_DIRECT reads into tiered buffers while other threads page hard, every
/// byte of every read checked (the same on a slow disk, where a page
/// evicted mid-read would lose bytes, is in nbd_backing.rs).
#[test]
fn c_o_direct_reads_into_tiered_buffers() {
    let stderr = c_program_with("preload_direct_io", "8M", &[], &|dir| {
        vec![dir.to_string_lossy().into_owned(), "4".into()]
    });
    // tiermem's own io_uring rings are not the program's asynchronous I/O.
    assert!(!stderr.contains("moved out"), "{stderr}");
}

/// Asynchronous O_DIRECT reads into tiered buffers while other threads
/// page hard: io_uring, io_uring with registered buffers (pinned for the
/// ring's life) and Linux AIO, four reads in flight at a time, every byte
/// checked. The program sets its rings up through glibc's `syscall()`, so
/// dirty victims are moved out past the kernel's pin check. With
/// `TIERMEM_ASYNC_IO=off` each mode lost a read's bytes within seconds.
/// The compressed tier is off so that the paging threads' pages, which
/// compress well, leave DRAM for the store and not only for the pool.
#[test]
fn c_async_o_direct_reads_into_tiered_buffers() {
    for mode in ["uring", "uring-fixed", "aio"] {
        let stderr = c_program_env("preload_async_io", "8M", &[], STORE_ONLY, &|dir| {
            vec![mode.into(), dir.to_string_lossy().into_owned(), "4".into()]
        });
        if stderr.is_empty() {
            return; // no C compiler: compile_c said so
        }
        assert!(
            stderr.contains("moved out past the kernel's pin check"),
            "{mode}: the program's asynchronous I/O was not seen\n{stderr}"
        );
    }
}

/// Pages the program makes unreadable (PROT_NONE) while they are resident
/// and dirty are evicted through /proc/self/mem, with and without the
/// compressed tier, and read back right (`tests/c/preload_unreadable.c`
/// checks every byte). Before, the evictor's copy through the mapping
/// killed the process with SIGSEGV.
#[test]
fn c_unreadable_pages_are_evicted_and_come_back() {
    for compress in ["lz4", "off"] {
        c_program_env(
            "preload_unreadable",
            "16M",
            &[],
            &[("TIERMEM_COMPRESS", compress)],
            &|_| Vec::new(),
        );
    }
}

/// Memory reserved PROT_NONE and committed later with mprotect or
/// MAP_FIXED (a JVM's heap, QEMU's guest RAM) is tiered: it pages in a
/// 16 MiB budget, still-reserved pages fault, and every byte comes back
/// (`tests/c/preload_reserve.c`).
#[test]
fn c_reserved_then_committed_memory_is_tiered() {
    c_program("preload_reserve", "16M", &|_| Vec::new());
}

/// The number after `label` on the first `--stats` line that has it.
fn stat_after(stderr: &str, label: &str) -> Option<u64> {
    stderr
        .lines()
        .find_map(|line| first_number(&line[line.find(label)? + label.len()..]))
}

/// Random permutation passes over 64 MiB in a 32 MiB budget, as a guest
/// walks its RAM (`tests/c/preload_huge.c`, every byte checked in every
/// pass). Advised `MADV_HUGEPAGE`, the memory is kept by 2 MiB regions as
/// the kernel keeps huge pages: a fixed part stays resident, so the same
/// passes read fewer pages on demand than without the advice, where a
/// recency order loses each page just before its next visit. Simulated:
/// 17% of visits hit without regions, 33% with (`docs/sim/huge_regions.py
/// 16384 8192`); measured, 45.2k demand reads against 54.0k. The
/// compressed tier is off, so that the whole budget holds pages in both
/// runs.
#[test]
fn huge_page_advice_keeps_a_fixed_part_of_random_passes_resident() {
    let args = |mode: &'static str| move |_: &Path| vec![mode.into(), "64".into(), "4".into()];
    let plain = c_program_env("preload_huge", "32M", &[], STORE_ONLY, &args("plain"));
    if plain.is_empty() {
        return;
    }
    let advised = c_program_env("preload_huge", "32M", &[], STORE_ONLY, &args("advise"));
    assert!(
        !plain.contains("huge regions"),
        "no region forms without the advice:\n{}",
        tail(&plain, 20)
    );
    let regions = advised
        .lines()
        .find(|line| line.starts_with("huge regions"))
        .unwrap_or("");
    let formed = stat_after(regions, "formed").unwrap_or(0);
    let proven = stat_after(regions, "proven in use").unwrap_or(0);
    assert!(
        formed > 0 && proven > 0,
        "advised regions should form and prove themselves in use:\n{}",
        tail(&advised, 20)
    );
    // Page-ins less read-ahead: the final in-order check is read ahead in
    // both runs alike.
    let demand = |stats: &str| {
        let ins = stat_after(stats, "page-ins").expect("--stats shows page-ins");
        ins - stat_after(stats, "read ahead").expect("--stats shows read-ahead")
    };
    let (plain_reads, advised_reads) = (demand(&plain), demand(&advised));
    assert!(
        advised_reads * 10 <= plain_reads * 9,
        "kept regions should save at least a tenth of the demand reads: {advised_reads} advised against {plain_reads} plain\n{}",
        tail(&advised, 20)
    );
}

/// Forks that run no pthread_atfork handlers: glibc's `_Fork()`, and the
/// `syscall()` wrapper asked for `SYS_fork`, `SYS_clone` or `SYS_clone3`.
/// Their children see every evicted page too (without tiermem's wrappers
/// they read zeros).
#[test]
fn c_raw_fork_children_see_evicted_pages() {
    for how in ["_Fork", "sys_fork", "sys_clone", "sys_clone3"] {
        c_program("preload_fork", "8M", &|_| {
            vec!["24".into(), "8".into(), how.into()]
        });
    }
}

/// The same with encryption at rest: children read their parent's slots
/// with the parent's key and write their own with a key of their own.
#[test]
fn c_fork_children_see_evicted_pages_encrypted() {
    let stats = c_program_with("preload_fork", "8M", &["--encrypt"], &|_| {
        vec!["24".into(), "8".into()]
    });
    assert!(stats.is_empty() || stats.contains("encrypted"), "{stats}");
}

/// Mappings `tiermem run` does not tier are said on stderr when they are at
/// least as large as the budget, with their size and why: shared anonymous
/// memory, a memfd mapped shared that is not close-on-exec, and
/// private memory at a fixed address outside the arena. Plain private
/// memory, and a PROT_NONE reservation with memory mapped into it at a
/// fixed address (QEMU's default guest RAM), are tiered and not reported.
#[test]
fn untiered_mappings_over_the_budget_are_reported() {
    let stderr = c_program_env("preload_untiered", "16M", &[], STORE_ONLY, &|_| {
        vec!["32".into()]
    });
    if stderr.is_empty() {
        return; // no C compiler: compile_c said so
    }
    let reported = |what: &str| {
        stderr
            .lines()
            .filter(|l| {
                l.contains("mapped 32.0 MiB that tiermem does not tier") && l.contains(what)
            })
            .count()
    };
    assert_eq!(
        reported("shared anonymous memory (MAP_SHARED)"),
        1,
        "{stderr}"
    );
    assert_eq!(
        reported("shared memory other processes can reach"),
        1,
        "{stderr}"
    );
    assert_eq!(reported("PROT_NONE"), 0, "{stderr}");
    assert_eq!(
        reported("fixed address outside tiermem's arena"),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("outside the 16.0 MiB DRAM budget"),
        "{stderr}"
    );
    let all = stderr.matches("that tiermem does not tier").count();
    assert_eq!(
        all, 3,
        "the plain mapping and the reservation are tiered, not reported:\n{stderr}"
    );
}

/// A memfd mapped with `MAP_FIXED` into a reservation of tiered memory
/// (QEMU's `memory-backend-memfd`), whose descriptor the program then
/// reads: the program finds every byte through the mapping and the
/// descriptor, in a forked child too, with tiered memory paged right up to
/// its edges; unmapped, the range is tiered again
/// (`tests/c/preload_foreign.c`). Run twice:
/// - memfds tiered (the default): the mapping is tiered memory until the
///   first `pread` drains it into the file, which is said; the second
///   mapping of the file is the kernel's, and said;
/// - `TIERMEM_MEMFD=off`: both mappings are the kernel's from the start,
///   and said. It was refused with `ENOMEM` once, and QEMU could not start.
#[test]
fn shared_memory_mapped_into_a_reservation_keeps_every_byte_and_is_said() {
    let reached = "shared memory other processes can reach";
    let off = "shared memory is not tiered (TIERMEM_MEMFD=off";
    for (memfd, drains, untiered, why) in [("on", 1, 1, reached), ("off", 0, 2, off)] {
        let mut env = STORE_ONLY.to_vec();
        env.push(("TIERMEM_MEMFD", memfd));
        let stderr = c_program_env("preload_foreign", "16M", &[], &env, &|_| {
            vec!["32".into(), "16".into()]
        });
        if stderr.is_empty() {
            return; // no C compiler: compile_c said so
        }
        let count = |what: &str| stderr.lines().filter(|l| l.contains(what)).count();
        let drained = count(
            "32.0 MiB of memfd memory left tiering (the program read the file through its descriptor)",
        );
        assert_eq!(drained, drains, "TIERMEM_MEMFD={memfd}:\n{stderr}");
        let reports = count(&format!(
            "mapped 32.0 MiB that tiermem does not tier: {why}"
        ));
        assert_eq!(reports, untiered, "TIERMEM_MEMFD={memfd}:\n{stderr}");
        assert_eq!(
            stderr.matches("that tiermem does not tier").count(),
            untiered,
            "nothing else is reported (TIERMEM_MEMFD={memfd}):\n{stderr}"
        );
    }
}

/// A memfd created close-on-exec and mapped shared and read-write, as QEMU
/// maps `memory-backend-memfd` guest RAM, is tiered memory while nobody
/// else can see the file, and moves into the file the moment someone
/// could (`tests/c/preload_memfd.c`, 64 MiB under a 16 MiB budget, three
/// threads rewriting pages all along): every byte of every page reads its
/// last write afterwards, through the mapping and the descriptor, for each
/// way the file is shown (read, written, duplicated, sent over a socket,
/// shared by a forked child, mapped again, unmapped). A hole punched in
/// the file (`fallocate`, as a balloon driver returns guest pages) reads as
/// zeros with no drain. A mapping
/// nobody sees (also through a fork after `MADV_DONTFORK`, or after the
/// program closed its descriptor with `close` or `close_range`) stays
/// tiered and nothing is said. Pages
/// lost to read errors before a drain are holes in the file, said, and the
/// drain moves the rest. The store-only tier makes every run page the
/// mapping out.
#[test]
fn a_memfd_is_tiered_until_its_file_is_shown_and_keeps_every_byte() {
    let drained = [
        ("pread", "the program read the file through its descriptor"),
        (
            "pwrite",
            "the program wrote the file through its descriptor",
        ),
        ("dup", "the program duplicated its descriptor"),
        (
            "sendmsg",
            "the program sent its descriptor to another process",
        ),
        ("fork", "the program forked a child that shares it"),
        ("mmap2", "the memfd was mapped once more"),
        // The hole is zeros in the tiered mapping: the file is drained
        // only when the program reads it back afterwards.
        ("punch", "the program read the file through its descriptor"),
        ("munmap", "the program unmapped it"),
    ];
    for (mode, why) in drained {
        let stderr = c_program_env("preload_memfd", "16M", &[], STORE_ONLY, &|_| {
            vec![mode.into()]
        });
        if stderr.is_empty() {
            return; // no C compiler: compile_c said so
        }
        let said = format!("64.0 MiB of memfd memory left tiering ({why}): ");
        assert_eq!(
            stderr.matches(&said).count(),
            1,
            "{mode}: the drain is said once:\n{stderr}"
        );
        assert!(!stderr.contains("could not move"), "{mode}:\n{stderr}");
    }
    // Every store read fails: the pages the program reads back are lost
    // (SIGBUS, which it catches); the drain leaves them holes, zeros in
    // the file and the mapping, and moves the rest.
    let mut failing = STORE_ONLY.to_vec();
    failing.push(("TIERMEM_INJECT_FAULTS", "read:1-"));
    let stderr = c_program_env("preload_memfd", "16M", &[], &failing, &|_| {
        vec!["lost".into()]
    });
    assert!(
        stderr.contains(
            "pages of it had been lost to read errors before, and read as zeros in the file"
        ),
        "lost: the lost pages are said:\n{}",
        stderr
            .lines()
            .filter(|l| !l.contains("reading the page at"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for mode in [
        "none",
        "fork-dontfork",
        "close-munmap",
        "close_range-munmap",
    ] {
        let stderr = c_program_env("preload_memfd", "16M", &[], STORE_ONLY, &|_| {
            vec![mode.into()]
        });
        assert!(
            !stderr.contains("left tiering") && !stderr.contains("does not tier"),
            "{mode}: the mapping stays tiered, and nothing is said:\n{stderr}"
        );
    }
}

/// A program that ends without running its exit handlers (a direct
/// `exit_group`, as every Go program ends, or SIGKILL) still gets its
/// statistics: `tiermem run` took them from the control socket while it
/// ran, and prints the last summary and writes the last JSON, saying how
/// they ended and how old the figures are. One that exits normally reports
/// itself, once, with no such note. Before, both printed nothing.
#[test]
fn a_program_that_skips_its_exit_handlers_still_gets_its_statistics() {
    let tmp = scratch("raw-exit");
    let Some(exe) = compile_c("preload_raw_exit", tmp.path()) else {
        return;
    };
    for (how, note) in [
        (
            "exit_group",
            Some("ended without running its exit handlers"),
        ),
        ("kill", Some("was killed by signal 9")),
        ("exit", None),
    ] {
        let json = tmp.path().join(format!("{how}.json"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tiermem"));
        cmd.args(["run", "--dram", "16M", "--backing"])
            .arg(tmp.path())
            .arg("--stats")
            .arg("--stats-file")
            .arg(&json)
            .arg("--")
            .arg(&exe)
            .args(["64", how])
            .env("TIERMEM_LIB", libtiermem());
        let ran = run(cmd, &format!("preload_raw_exit ending by {how}"));
        assert!(
            ran.stdout.starts_with("OK: 64 MiB"),
            "{how}: {}",
            ran.stdout
        );
        let summaries = ran
            .stderr
            .matches("── tiermem: preload_raw_exit (pid")
            .count();
        assert_eq!(summaries, 1, "{how}: one summary:\n{}", ran.stderr);
        let stats: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{how}: no stats file: {e}")),
        )
        .unwrap_or_else(|e| panic!("{how}: the stats file: {e}"));
        assert_eq!(stats["schema"], "tiermem.run-stats/1", "{how}: {stats}");
        assert!(
            stats["stats"]["page_outs"].as_u64().unwrap_or(0) > 0,
            "{how}: the program paged: {stats}"
        );
        match note {
            Some(note) => {
                assert!(ran.stderr.contains(note), "{how}:\n{}", ran.stderr);
                assert!(
                    ran.stderr.contains("its statistics as of"),
                    "{}",
                    ran.stderr
                );
                assert!(stats["taken_before_exit_ms"].is_u64(), "{how}: {stats}");
            }
            None => {
                assert!(ran.status.success(), "{}", ran.stderr);
                assert!(!ran.stderr.contains("exit handlers"), "{}", ran.stderr);
                assert!(stats.get("taken_before_exit_ms").is_none(), "{stats}");
            }
        }
    }
}

/// Discards made with the program's own `madvise` system call (the
/// syscall instruction, as Go's runtime makes them), which no interposer
/// sees, while the evictor copies those very pages: the program neither
/// hangs (a discarded page faulted forever as a duplicate, and the
/// evictor's copy of one waited for itself) nor reads a page that is
/// neither its bytes nor zeros (`tests/c/preload_raw_discard.c`). Once
/// with the compressed tier and once with the store alone: the program's
/// pages compress well enough to stay in DRAM, compressed.
#[test]
fn discards_by_the_program_s_own_system_calls_neither_hang_nor_tear_pages() {
    for compress in ["lz4", "off"] {
        let env = [("TIERMEM_COMPRESS", compress)];
        let stderr = c_program_env("preload_raw_discard", "16M", &[], &env, &|_| {
            vec!["24".into()]
        });
        if stderr.is_empty() {
            return; // no C compiler: compile_c said so
        }
        assert!(
            stderr.contains("by the program's own madvise system calls"),
            "the summary counts the discards:\n{stderr}"
        );
    }
}

/// madvise and mlock on tiered memory answer as the kernel's do (a locked
/// page refuses MADV_DONTNEED and MADV_FREE with EINVAL and keeps its
/// bytes, MADV_DONTNEED_LOCKED zeroes it and keeps it locked, MADV_REMOVE
/// on private memory fails), a kernel lock made by the syscall instruction
/// behind tiermem's back neither stops the evictor nor the free of its
/// range (both aborted the program with "unmapping ... failed: Invalid
/// argument"), and threads racing mlock, munlock and MADV_DONTNEED on the
/// same pages while a region pages through the budget tear no byte
/// (`tests/c/preload_madvise_locks.c`). Once with the compressed tier and
/// once with the store alone, as the region compresses well enough to stay
/// in DRAM.
#[test]
fn madvise_and_mlock_answer_as_the_kernel_s_and_a_hidden_lock_stops_no_paging() {
    for compress in ["lz4", "off"] {
        let env = [("TIERMEM_COMPRESS", compress)];
        c_program_env("preload_madvise_locks", "16M", &[], &env, &|_| Vec::new());
    }
}

/// A program that has opened every descriptor its limit allows forks a
/// child, which forks a grandchild: both start their pagers on the spare
/// descriptors tiermem holds for forks and read every byte of their
/// evicted memory back (`tests/c/preload_fork_fds.c`). Without the
/// spares the child could not create its event descriptors and exited.
/// The compressed tier is off: the program's stamp compresses 50 to 1, so
/// with it on the whole region could stay in DRAM, compressed, and the
/// children would never read the store through their rings.
#[test]
fn a_program_out_of_descriptors_forks_children_that_page() {
    c_program_env("preload_fork_fds", "8M", &[], STORE_ONLY, &|_| {
        vec!["24".into()]
    });
}

/// A chain of four forked generations, each checking every byte of a
/// region three times the budget: each holds as many io_uring and pidfd
/// descriptors and ring mappings as the first process
/// (`tests/c/preload_fork_leaks.c`). Each generation kept the parent
/// threads' three rings and pidfd before. The compressed tier is off, so
/// that each generation reads its evicted pages through its rings.
#[test]
fn forked_children_close_what_the_parent_s_pager_threads_held() {
    c_program_env("preload_fork_leaks", "16M", &[], STORE_ONLY, &|_| {
        Vec::new()
    });
}

/// A program registers part of its memory, most of it evicted, with a
/// userfaultfd of its own and serves faults there (as QEMU's postcopy
/// migration and CRIU's lazy pages do): the registration succeeds, every
/// byte is kept, its own pager serves one fault per discarded page, and the
/// range is tiered memory again once unmapped and mapped anew
/// (`tests/c/preload_own_userfaultfd.c`, the compressed tier off so that
/// evicted pages are in the store). The kernel refused the registration
/// (`EBUSY`) before: tiermem's userfaultfd handled the range.
#[test]
fn a_program_pages_part_of_its_memory_with_its_own_userfaultfd() {
    let stderr = c_program_env("preload_own_userfaultfd", "16M", &[], STORE_ONLY, &|_| {
        Vec::new()
    });
    if stderr.is_empty() {
        return; // no C compiler: compile_c said so
    }
    assert!(
        stderr.contains("with a userfaultfd of its own"),
        "16 MiB handed over under a 16 MiB budget are said on stderr:\n{stderr}"
    );
}

/// `MADV_WIPEONFORK` gives a forked child, and its own child, zeros where
/// the parent's pages were evicted or resident, `MADV_KEEPONFORK`,
/// `MAP_FIXED` and `munmap` end the advice, `mremap` carries it, moved or
/// grown in place, and the parent keeps every byte
/// (`tests/c/preload_wipe_on_fork.c`). Before, the child read the parent's
/// bytes there. The compressed tier is off, so that the pages evicted
/// before the fork are in the store, where the child reads them.
#[test]
fn memory_advised_wipe_on_fork_reads_as_zeros_in_a_forked_child() {
    c_program_env("preload_wipe_on_fork", "16M", &[], STORE_ONLY, &|_| {
        Vec::new()
    });
}

/// The Go toolchain: `go` on PATH, or where the official tarball puts it.
fn go_toolchain() -> Option<PathBuf> {
    find_in_path("go")
        .or_else(|| Some(PathBuf::from("/usr/local/go/bin/go")).filter(|p| p.exists()))
        .or_else(|| need("go"))
}

/// A Go program built with cgo (`tests/programs/go_heap`): its heap is
/// tiered, it returns memory with its own `madvise` system calls, and it
/// ends with a direct `exit_group`. It hung before. Then fresh slices held
/// old bytes in every run (67 million of 100 million words), since Go 1.26
/// skips clearing memory it discarded and tiermem cannot see a discard of
/// a page out of DRAM; Go's own heap words went wrong with them ("name
/// offset out of range"). `tiermem run` now has Go clear such memory
/// itself (`GODEBUG=madvdontneed=0`): every word of every fresh slice is
/// zero and every word written is read back.
#[test]
fn a_go_program_with_cgo_is_tiered_and_reported() {
    let tmp = scratch("go");
    let Some(exe) = build_go_program("go_heap", tmp.path()) else {
        return;
    };
    let ran = run(
        tiermem_run("64M", tmp.path(), &exe),
        "go_heap under tiermem run --dram 64M",
    );
    ran.assert_ok();
    assert!(
        ran.stderr
            .contains("ended without running its exit handlers"),
        "{}",
        ran.stderr
    );
    let outs = assert_paged(&ran.what, &ran.stderr);
    println!("go: {:.2}s under tiermem, {outs} page-outs", ran.secs);
}

/// Go maps, strings and sorting on four goroutines (`tests/programs/go_maps`),
/// 110 MiB of resident memory untiered, under `--dram 24M`: the digest of every key and
/// value of every goroutine matches an untiered run's. (A larger run of it
/// against kernel swap is in `docs/notebook/2026-11-28-go-zeros.md`.)
#[test]
fn go_maps_on_four_goroutines_hash_the_same_as_untiered() {
    let tmp = scratch("go-maps");
    let Some(exe) = build_go_program("go_maps", tmp.path()) else {
        return;
    };
    let digests = |ran: &Ran| -> Vec<String> {
        ran.stdout
            .lines()
            .filter(|l| l.starts_with("goroutine "))
            .map(str::to_string)
            .collect()
    };
    let mut cmd = Command::new(&exe);
    cmd.args(["30000", "2"]);
    let native = run(cmd, "go_maps without tiermem");
    assert!(native.status.success(), "{}", native.describe());
    assert_eq!(digests(&native).len(), 4, "{}", native.describe());
    let mut cmd = tiermem_run("24M", tmp.path(), &exe);
    cmd.args(["30000", "2"]);
    let tiered = run(cmd, "go_maps under tiermem run --dram 24M");
    assert!(tiered.status.success(), "{}", tiered.describe());
    assert_eq!(digests(&tiered), digests(&native), "{}", tiered.describe());
    assert!(!tiered.stderr.contains("warning"), "{}", tiered.describe());
    let outs = assert_paged(&tiered.what, &tiered.stderr);
    println!(
        "go maps: without tiermem {:.2}s, under tiermem {:.2}s, {outs} page-outs",
        native.secs, tiered.secs
    );
    // A user who asks Go for MADV_DONTNEED keeps it, and is warned.
    let mut cmd = tiermem_run("24M", tmp.path(), &exe);
    cmd.args(["1000", "1"]).env("GODEBUG", "madvdontneed=1");
    let warned = run(cmd, "go_maps under tiermem run, GODEBUG=madvdontneed=1");
    assert!(warned.status.success(), "{}", warned.describe());
    assert!(
        warned
            .stderr
            .contains("is a Go program, and its GODEBUG lacks madvdontneed=0"),
        "{}",
        warned.describe()
    );
}

/// Builds the Go program in `tests/programs/NAME` with cgo into `dir`;
/// `None` (the test skips) when no Go toolchain is installed outside CI.
fn build_go_program(name: &str, dir: &Path) -> Option<PathBuf> {
    let go = go_toolchain()?;
    let exe = dir.join(name);
    let built = Command::new(&go)
        .args(["build", "-o"])
        .arg(&exe)
        .arg(".")
        .current_dir(repo_root().join("tests/programs").join(name))
        .env("CGO_ENABLED", "1")
        .env("GOFLAGS", "-mod=mod")
        .env("GOTOOLCHAIN", "local")
        .env("GOCACHE", dir.join("gocache"))
        .output()
        .expect("running go build");
    assert!(
        built.status.success(),
        "go build {name}: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    Some(exe)
}

/// A statically linked program never loads tiermem's library (the dynamic
/// loader reads `LD_PRELOAD`, and it has none), so none of its memory
/// would be tiered: `tiermem run` refuses it, and a script run by one,
/// before either starts. It ran untiered and silent before.
#[test]
fn a_statically_linked_program_is_refused_before_it_runs() {
    let Some(cc) = need("cc") else {
        return;
    };
    let tmp = scratch("static");
    let src = tmp.path().join("marks.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(int c, char **v) { FILE *f = fopen(v[c - 1], \"w\"); return f ? 0 : 1; }\n",
    )
    .unwrap();
    let exe = tmp.path().join("marks");
    let built = Command::new(cc)
        .arg("-static")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "cc -static: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let script = tmp.path().join("script");
    std::fs::write(&script, format!("#!{}\n", exe.display())).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for (program, said) in [
        (&exe, "is statically linked"),
        (&script, "is a script whose interpreter"),
    ] {
        let marker = tmp.path().join("ran");
        let out = Command::new(env!("CARGO_BIN_EXE_tiermem"))
            .args(["run", "--dram", "16M", "--"])
            .arg(program)
            .arg(&marker)
            .env("TIERMEM_LIB", libtiermem())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(126), "{stderr}");
        assert!(
            stderr.contains(said)
                && stderr.contains("nothing was run")
                && stderr.contains("`import _ \"runtime/cgo\"`"),
            "{stderr}"
        );
        assert!(!marker.exists(), "{} ran", program.display());
    }
    // The same program runs without tiermem: the test's program works.
    let marker = tmp.path().join("ran");
    assert!(Command::new(&exe).arg(&marker).status().unwrap().success());
    assert!(marker.exists());
}

/// Memory whose protection the program changed (a guard page) and then
/// unmapped comes back read-write when the arena hands it out again (it
/// kept the old protection, and the next mapping's first write crashed).
#[test]
fn unmapped_memory_does_not_keep_its_protection() {
    c_program("preload_protect", "1M", &|_| Vec::new());
}

/// mremap (grow, shrink, regrow, move), MADV_DONTNEED, MADV_FREE, munmap of
/// a middle part, mincore of unmapped memory (ENOMEM) and mprotect on a
/// tiered mapping.
#[test]
fn c_mremap_madvise_munmap_mprotect() {
    c_program("preload_remap", "1M", &|_| Vec::new());
}

// ---------------------------------------------------------------------------
// Java.
// ---------------------------------------------------------------------------

/// A JVM whose 384 MiB heap lives in a 64 MiB budget: 256 MiB of long-lived
/// arrays checked word by word twice, around a gigabyte of garbage and a
/// full collection that copies and compacts them through tiered memory
/// (`tests/programs/HeapCheck.java`). The JVM reserves its heap `PROT_NONE`
/// and commits it with `MAP_FIXED`, and maps its class-data archive into a
/// reservation with `MAP_FIXED` too.
#[test]
fn a_jvm_heap_four_times_the_budget_survives_collections() {
    let (Some(javac), Some(java)) = (need("javac"), need("java")) else {
        return;
    };
    let tmp = scratch("java");
    let classes = tmp.path().join("classes");
    let compiled = Command::new(&javac)
        .arg("-d")
        .arg(&classes)
        .arg(repo_root().join("tests/programs/HeapCheck.java"))
        .output()
        .expect("running javac");
    assert!(
        compiled.status.success(),
        "javac: {}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    let jvm_args = |cmd: &mut Command| {
        cmd.args(["-Xms384m", "-Xmx384m", "-Xshare:auto", "-cp"])
            .arg(&classes)
            .args(["HeapCheck", "256"]);
    };
    let mut cmd = Command::new(&java);
    jvm_args(&mut cmd);
    let native = run(cmd, "HeapCheck without tiermem");
    native.assert_ok();

    let mut cmd = tiermem_run("64M", tmp.path(), &java);
    jvm_args(&mut cmd);
    let tiered = run(cmd, "HeapCheck under tiermem run --dram 64M");
    tiered.assert_ok();
    assert_eq!(
        native.stdout, tiered.stdout,
        "HeapCheck printed otherwise under tiermem"
    );
    assert!(
        tiered.stdout.starts_with("OK: 256 MiB"),
        "{}",
        tiered.stdout
    );
    let outs = assert_paged(&tiered.what, &tiered.stderr);
    assert!(
        !tiered.stderr.contains("does not tier"),
        "the heap must be tiered:\n{}",
        tiered.stderr
    );
    println!(
        "java: without tiermem {:.2}s, under tiermem {:.2}s, {outs} page-outs",
        native.secs, tiered.secs
    );
}

/// The JVM maps its class-data archive with `MAP_FIXED` into address space
/// it reserved, which `tiermem run` places in tiered memory. That mapping
/// was refused, so `-Xshare:on` stopped the JVM ("Unable to map shared
/// spaces") and the default quietly started without the archive, 1.4x
/// slower to start.
#[test]
fn a_jvm_maps_its_class_data_archive() {
    let Some(java) = need("java") else {
        return;
    };
    let tmp = scratch("java-cds");
    let mut cmd = tiermem_run("64M", tmp.path(), &java);
    cmd.args(["-Xshare:on", "-version"]);
    let out = cmd.output().expect("running java under tiermem run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "java -Xshare:on -version:\n{stderr}");
    assert!(
        stderr.contains(", sharing)"),
        "the archive is not in use:\n{stderr}"
    );
}

// ---------------------------------------------------------------------------
// Python.
// ---------------------------------------------------------------------------

/// python3 from PATH, resolved to the real interpreter (not a pyenv shim);
/// if it lacks numpy and /usr/bin/python3 (where Debian's python3-numpy goes)
/// has it, that one instead.
fn pick_python() -> Option<PathBuf> {
    let path_python = need("python3")?;
    let probe = |py: &Path| -> Option<(PathBuf, bool)> {
        let out = Command::new(py)
            .args([
                "-c",
                "import sys, importlib.util; print(sys.executable); print(importlib.util.find_spec('numpy') is not None)",
            ])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = text.lines();
        let exe = PathBuf::from(lines.next()?.trim());
        let numpy = lines.next()? == "True";
        (out.status.success() && find_in_path(exe.to_str()?).is_some()).then_some((exe, numpy))
    };
    let first = probe(&path_python)?;
    if first.1 {
        return Some(first.0);
    }
    if let Some(system) = probe(Path::new("/usr/bin/python3")).filter(|s| s.1) {
        println!(
            "python: {} has no numpy; using {}",
            first.0.display(),
            system.0.display()
        );
        return Some(system.0);
    }
    println!("python: no interpreter with numpy; the numpy part is skipped");
    Some(first.0)
}

#[test]
fn python_checksums_agree_without_and_with_tiermem() {
    // Each of the three data sets is 4x the 16M budget. (32M and 128 MiB
    // took 70-80 s under tiermem: Python dirties every object it reads, by
    // reference counting, so each pass writes the list back.)
    const MIB: &str = "64";
    let Some(python) = pick_python() else {
        return;
    };
    let script = repo_root().join("tests/programs/checksums.py");
    let tmp = scratch("python");

    let mut cmd = Command::new(&python);
    cmd.arg(&script).arg(MIB);
    let native = run(cmd, "checksums.py without tiermem");
    native.assert_ok();

    let mut cmd = tiermem_run("16M", tmp.path(), &python);
    cmd.arg(&script).arg(MIB);
    let tiered = run(cmd, "checksums.py under tiermem run --dram 16M");
    tiered.assert_ok();
    assert_eq!(
        native.stdout, tiered.stdout,
        "checksums.py printed different checksums under tiermem"
    );
    let outs = assert_paged(&tiered.what, &tiered.stderr);
    println!(
        "python ({}): without tiermem {:.2}s, under tiermem {:.2}s, {outs} page-outs\n{}",
        python.display(),
        native.secs,
        tiered.secs,
        native.stdout.trim_end()
    );
}

// ---------------------------------------------------------------------------
// GNU sort.
// ---------------------------------------------------------------------------

struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// About `bytes` of text lines, deterministic: half of them start with one of
/// 64 shared prefixes of up to 3000 bytes (so comparisons read deep into
/// lines and across pages), lengths vary widely, and 1% are duplicates.
fn write_sort_input(path: &Path, bytes: u64) -> u64 {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789 ";
    let mut rng = Prng(0x5041_5254);
    let word = |rng: &mut Prng, len: u64| -> Vec<u8> {
        (0..len)
            .map(|_| ALPHABET[rng.below(ALPHABET.len() as u64) as usize])
            .collect()
    };
    let prefixes: Vec<Vec<u8>> = (0..64)
        .map(|_| {
            let len = rng.below(3000);
            word(&mut rng, len)
        })
        .collect();
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path).unwrap());
    let mut written = 0u64;
    let mut lines = 0u64;
    let mut line = Vec::new();
    while written < bytes {
        if rng.below(100) != 0 || line.is_empty() {
            line.clear();
            if rng.below(2) == 0 {
                line.extend_from_slice(&prefixes[rng.below(64) as usize]);
            }
            let len = 1 + rng.below(1200);
            line.extend(word(&mut rng, len));
            line.push(b'\n');
        }
        out.write_all(&line).unwrap();
        written += line.len() as u64;
        lines += 1;
    }
    out.flush().unwrap();
    lines
}

/// Byte-for-byte comparison of two files; Err says where they differ.
fn compare_files(a: &Path, b: &Path) -> Result<u64, String> {
    let (la, lb) = (
        std::fs::metadata(a).unwrap().len(),
        std::fs::metadata(b).unwrap().len(),
    );
    if la != lb {
        return Err(format!("sizes differ: {la} and {lb} bytes"));
    }
    let mut ra = BufReader::with_capacity(1 << 20, File::open(a).unwrap());
    let mut rb = BufReader::with_capacity(1 << 20, File::open(b).unwrap());
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut off = 0u64;
    while off < la {
        let n = ((la - off) as usize).min(ba.len());
        ra.read_exact(&mut ba[..n]).unwrap();
        rb.read_exact(&mut bb[..n]).unwrap();
        if let Some(i) = (0..n).find(|&i| ba[i] != bb[i]) {
            return Err(format!("first difference at byte {}", off + i as u64));
        }
        off += n as u64;
    }
    Ok(la)
}

fn assert_sorted(path: &Path) {
    let mut prev: Option<Vec<u8>> = None;
    for (i, line) in BufReader::with_capacity(1 << 20, File::open(path).unwrap())
        .split(b'\n')
        .enumerate()
    {
        let line = line.unwrap();
        if let Some(p) = &prev {
            assert!(p <= &line, "sort output is not sorted at line {}", i + 1);
        }
        prev = Some(line);
    }
}

#[test]
fn sort_output_is_identical_without_and_with_tiermem() {
    let Some(sort) = need("sort") else {
        return;
    };
    let tmp = scratch("sort");
    let input = tmp.path().join("input.txt");
    let lines = write_sort_input(&input, 96 << 20); // 6x the 16M budget
    let sort_cmd = |mut cmd: Command, out: &Path| {
        cmd.args(["-S", "200M", "--parallel=1", "-T"])
            .arg(tmp.path())
            .arg("-o")
            .arg(out)
            .arg(&input)
            .env("LC_ALL", "C");
        cmd
    };

    let out_native = tmp.path().join("sorted-native.txt");
    let native = run(
        sort_cmd(Command::new(&sort), &out_native),
        "sort without tiermem",
    );
    assert!(native.status.success(), "{}", native.describe());
    assert_sorted(&out_native);

    let out_tiered = tmp.path().join("sorted-tiermem.txt");
    let backing = tmp.path().join("backing");
    std::fs::create_dir(&backing).unwrap();
    let tiered = run(
        sort_cmd(tiermem_run("16M", &backing, &sort), &out_tiered),
        "sort under tiermem run --dram 16M",
    );
    assert!(tiered.status.success(), "{}", tiered.describe());
    let bytes = compare_files(&out_native, &out_tiered)
        .unwrap_or_else(|e| panic!("sort output differs under tiermem: {e}"));
    assert_eq!(bytes, std::fs::metadata(&input).unwrap().len());
    let outs = assert_paged(&tiered.what, &tiered.stderr);
    println!(
        "sort: {lines} lines, {bytes} bytes | without tiermem {:.2}s, under tiermem {:.2}s, {outs} page-outs",
        native.secs, tiered.secs
    );
}

// ---------------------------------------------------------------------------
// Redis.
// ---------------------------------------------------------------------------

#[derive(Debug, PartialEq)]
enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

/// A minimal RESP2 client: commands go out as arrays of bulk strings.
struct Resp {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Resp {
    fn connect(port: u16) -> io::Result<Resp> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        stream.set_nodelay(true)?;
        let reader = BufReader::with_capacity(1 << 16, stream.try_clone()?);
        Ok(Resp { stream, reader })
    }

    fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
    }

    fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        self.stream.write_all(buf)
    }

    fn line(&mut self) -> io::Result<String> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line)?;
        if !line.ends_with(b"\r\n") {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed mid-reply",
            ));
        }
        line.truncate(line.len() - 2);
        String::from_utf8(line).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    fn read(&mut self) -> io::Result<Reply> {
        let line = self.line()?;
        let bad =
            |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {line:?}"));
        let (kind, rest) = line.split_at(line.len().min(1));
        let num = || rest.parse::<i64>().map_err(|_| bad("bad number"));
        match kind {
            "+" => Ok(Reply::Status(rest.to_string())),
            "-" => Ok(Reply::Error(rest.to_string())),
            ":" => Ok(Reply::Int(num()?)),
            "$" => {
                let n = num()?;
                if n < 0 {
                    return Ok(Reply::Bulk(None));
                }
                let mut buf = vec![0u8; n as usize + 2];
                self.reader.read_exact(&mut buf)?;
                if !buf.ends_with(b"\r\n") {
                    return Err(bad("bulk string without CRLF"));
                }
                buf.truncate(n as usize);
                Ok(Reply::Bulk(Some(buf)))
            }
            "*" => {
                let n = num()?;
                if n < 0 {
                    return Ok(Reply::Array(None));
                }
                let items = (0..n).map(|_| self.read()).collect::<io::Result<_>>()?;
                Ok(Reply::Array(Some(items)))
            }
            _ => Err(bad("unknown reply type")),
        }
    }

    fn cmd(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        let mut buf = Vec::new();
        Self::encode(&mut buf, args);
        self.send(&buf)?;
        self.read()
    }

    /// One field of INFO SECTION.
    fn info_field(&mut self, section: &str, key: &str) -> io::Result<Option<String>> {
        match self.cmd(&[b"INFO", section.as_bytes()])? {
            Reply::Bulk(Some(text)) => Ok(String::from_utf8_lossy(&text)
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.trim().to_string())),
            other => Err(io::Error::other(format!(
                "INFO {section}: unexpected reply {other:?}"
            ))),
        }
    }
}

const KEYS: u32 = 40_000;
const VALUE_LEN: usize = 4096; // 40,000 x 4 KiB = 160 MiB, 5x the 32M budget
const BATCH: u32 = 100;

fn key(i: u32) -> Vec<u8> {
    format!("key:{i}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    let mut rng = Prng(0xDA7A_0000_0000 + u64::from(i));
    let mut v = Vec::with_capacity(VALUE_LEN);
    while v.len() < VALUE_LEN {
        v.extend_from_slice(&rng.next().to_le_bytes());
    }
    v.truncate(VALUE_LEN);
    v
}

fn load_keys(conn: &mut Resp) -> io::Result<()> {
    let mut buf = Vec::with_capacity(BATCH as usize * (VALUE_LEN + 64));
    for start in (0..KEYS).step_by(BATCH as usize) {
        let end = (start + BATCH).min(KEYS);
        buf.clear();
        for i in start..end {
            Resp::encode(&mut buf, &[b"SET", &key(i), &value(i)]);
        }
        conn.send(&buf)?;
        for i in start..end {
            let r = conn.read()?;
            if r != Reply::Status("OK".into()) {
                return Err(io::Error::other(format!("SET key:{i}: {r:?}")));
            }
        }
    }
    Ok(())
}

/// GETs every key (pipelined) and compares it byte for byte; returns
/// (lost, corrupt, a description of the first problem).
fn check_keys(conn: &mut Resp) -> io::Result<(u32, u32, Option<String>)> {
    let (mut lost, mut corrupt, mut first) = (0, 0, None);
    let mut buf = Vec::new();
    for start in (0..KEYS).step_by(BATCH as usize) {
        let end = (start + BATCH).min(KEYS);
        buf.clear();
        for i in start..end {
            Resp::encode(&mut buf, &[b"GET", &key(i)]);
        }
        conn.send(&buf)?;
        for i in start..end {
            match conn.read()? {
                Reply::Bulk(Some(v)) if v == value(i) => {}
                Reply::Bulk(Some(v)) => {
                    corrupt += 1;
                    let want = value(i);
                    let at = (0..v.len().min(want.len())).find(|&j| v[j] != want[j]);
                    first.get_or_insert_with(|| {
                        format!(
                            "key:{i} corrupt: {} bytes, first difference at {at:?}",
                            v.len()
                        )
                    });
                }
                other => {
                    lost += 1;
                    first.get_or_insert_with(|| format!("key:{i} lost: {other:?}"));
                }
            }
        }
    }
    Ok((lost, corrupt, first))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A redis-server (possibly under `tiermem run`) in its own process group;
/// killed, with everything it forked, on every exit path.
struct Server {
    name: &'static str,
    child: Child,
    port: u16,
    stdout_log: PathBuf,
    stderr_log: PathBuf,
    redis_pid: Option<i32>,
    reaped: Option<ExitStatus>,
}

impl Server {
    fn start(name: &'static str, mut cmd: Command, port: u16, logs: &Path) -> Server {
        let stdout_log = logs.join(format!("{name}.stdout"));
        let stderr_log = logs.join(format!("{name}.stderr"));
        cmd.stdin(Stdio::null())
            .stdout(File::create(&stdout_log).unwrap())
            .stderr(File::create(&stderr_log).unwrap())
            .process_group(0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: cannot start {cmd:?}: {e}"));
        Server {
            name,
            child,
            port,
            stdout_log,
            stderr_log,
            redis_pid: None,
            reaped: None,
        }
    }

    /// The server's log (its stdout): warnings, crash headers and the tail;
    /// and tiermem's stderr.
    fn logs(&self) -> String {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let log = read(&self.stdout_log);
        let notable: Vec<&str> = log
            .lines()
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                [
                    "warning",
                    "crash",
                    "signal",
                    "error",
                    "fail",
                    "tiermem",
                    "bug report",
                ]
                .iter()
                .any(|w| l.contains(w))
            })
            .take(30)
            .collect();
        format!(
            "--- {} log: notable lines ---\n{}\n--- {} log (tail) ---\n{}\n--- {} stderr (tail) ---\n{}",
            self.name,
            notable.join("\n"),
            self.name,
            tail(&log, 20),
            self.name,
            tail(&read(&self.stderr_log), 60)
        )
    }

    /// The value of a request to the server, or a failure with its logs.
    fn ok<T>(&self, r: io::Result<T>, what: &str) -> T {
        r.unwrap_or_else(|e| panic!("{}: {what}: {e}\n{}", self.name, self.logs()))
    }

    /// Waits until the server answers PING (not -LOADING), then connects.
    fn wait_ready(&mut self, timeout: Duration) -> Resp {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.reaped = Some(status);
                panic!(
                    "{} exited before answering PING: {status}\n{}",
                    self.name,
                    self.logs()
                );
            }
            if let Ok(mut conn) = Resp::connect(self.port) {
                match conn.cmd(&[b"PING"]) {
                    Ok(Reply::Status(s)) if s == "PONG" => {
                        self.redis_pid = conn
                            .info_field("server", "process_id")
                            .ok()
                            .flatten()
                            .and_then(|p| p.parse().ok());
                        return conn;
                    }
                    Ok(Reply::Error(e)) if e.starts_with("LOADING") => {}
                    Ok(other) => panic!("{}: PING answered {other:?}", self.name),
                    Err(_) => {}
                }
            }
            assert!(
                start.elapsed() < timeout,
                "{} did not answer PING within {timeout:?}\n{}",
                self.name,
                self.logs()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// SHUTDOWN NOSAVE and wait for the process (tiermem run, if any) to exit.
    fn shutdown(&mut self, conn: &mut Resp) -> ExitStatus {
        // The server closes the connection instead of answering.
        let _ = conn.cmd(&[b"SHUTDOWN", b"NOSAVE"]);
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.reaped = Some(status);
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{} did not exit within 60 s of SHUTDOWN NOSAVE\n{}",
                self.name,
                self.logs()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.reaped.is_none() {
            kill_group(self.child.id());
            if let Some(pid) = self.redis_pid {
                // SAFETY: kill has no memory-safety preconditions; pid is the
                // live server this test started (our child still holds it).
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn redis_args(cmd: &mut Command, port: u16, dir: &Path) {
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(dir)
        .args(["--dbfilename", "dump.rdb", "--daemonize", "no"]);
}

#[test]
fn redis_keeps_every_key_through_paging_and_a_bgsave_fork() {
    let Some(redis) = need("redis-server") else {
        return;
    };
    let tmp = scratch("redis");
    let data = tmp.path().join("data");
    let backing = tmp.path().join("backing");
    std::fs::create_dir(&data).unwrap();
    std::fs::create_dir(&backing).unwrap();
    let t0 = Instant::now();

    // 1. A tiered server: load 5x the budget, read everything back.
    let port = free_port();
    let mut cmd = tiermem_run("32M", &backing, &redis);
    redis_args(&mut cmd, port, &data);
    let mut tiered = Server::start(
        "redis-server under tiermem run --dram 32M",
        cmd,
        port,
        tmp.path(),
    );
    let mut conn = tiered.wait_ready(Duration::from_secs(60));
    tiered.ok(load_keys(&mut conn), "loading the keys");
    let t_load = t0.elapsed();
    let (lost, corrupt, first) = tiered.ok(check_keys(&mut conn), "reading the keys back");
    assert!(
        lost == 0 && corrupt == 0,
        "redis under tiermem: {lost} keys lost, {corrupt} corrupt of {KEYS}; first: {}\n{}",
        first.unwrap_or_default(),
        tiered.logs()
    );
    assert_eq!(
        tiered.ok(conn.cmd(&[b"DBSIZE"]), "DBSIZE"),
        Reply::Int(i64::from(KEYS))
    );

    // 2. BGSAVE forks the server: the child must see every (evicted) page.
    match tiered.ok(conn.cmd(&[b"BGSAVE"]), "BGSAVE") {
        Reply::Status(_) => {}
        other => panic!("BGSAVE: {other:?}\n{}", tiered.logs()),
    }
    let start = Instant::now();
    loop {
        let in_progress = tiered.ok(
            conn.info_field("persistence", "rdb_bgsave_in_progress"),
            "INFO persistence",
        );
        if in_progress.as_deref() == Some("0") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "BGSAVE still running after 180 s\n{}",
            tiered.logs()
        );
        thread::sleep(Duration::from_millis(100));
    }
    let status = tiered.ok(
        conn.info_field("persistence", "rdb_last_bgsave_status"),
        "INFO persistence",
    );
    assert_eq!(
        status.as_deref(),
        Some("ok"),
        "BGSAVE under tiermem failed\n{}",
        tiered.logs()
    );
    let t_save = t0.elapsed();
    let exit = tiered.shutdown(&mut conn);
    assert!(
        exit.success(),
        "redis under tiermem exited with {exit} after SHUTDOWN\n{}",
        tiered.logs()
    );
    let stderr = std::fs::read_to_string(&tiered.stderr_log).unwrap();
    let outs = assert_paged(tiered.name, &stderr);
    drop(tiered);

    // 3. A plain server loads the dump the forked child wrote.
    let port = free_port();
    let mut cmd = Command::new(&redis);
    redis_args(&mut cmd, port, &data);
    let mut plain = Server::start("redis-server without tiermem", cmd, port, tmp.path());
    let mut conn = plain.wait_ready(Duration::from_secs(120));
    assert_eq!(
        plain.ok(conn.cmd(&[b"DBSIZE"]), "DBSIZE"),
        Reply::Int(i64::from(KEYS)),
        "the dump written by the BGSAVE child under tiermem"
    );
    let (lost, corrupt, first) = plain.ok(check_keys(&mut conn), "reading the keys back");
    assert!(
        lost == 0 && corrupt == 0,
        "the dump written by the BGSAVE child under tiermem: {lost} keys lost, {corrupt} corrupt of {KEYS}; first: {}",
        first.unwrap_or_default()
    );
    plain.shutdown(&mut conn);
    println!(
        "redis: {KEYS} keys x {VALUE_LEN} B | loaded {:.1}s, checked and saved {:.1}s, reloaded and checked {:.1}s | {outs} page-outs",
        t_load.as_secs_f64(),
        (t_save - t_load).as_secs_f64(),
        (t0.elapsed() - t_save).as_secs_f64()
    );
}

// ---------------------------------------------------------------------------
// stress-ng: forks from forked children.
// ---------------------------------------------------------------------------

/// The largest resident set, in KiB, of the processes named `comm` seen so
/// far; sampled every 50 ms until `done` is set.
fn sample_peak_rss(
    comm: &'static str,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let mut peak = 0u64;
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let dir = entry.path();
                let named =
                    std::fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim_end() == comm);
                if !named {
                    continue;
                }
                let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
                let rss = status
                    .lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(first_number)
                    .unwrap_or(0);
                peak = peak.max(rss);
            }
            thread::sleep(Duration::from_millis(50));
        }
        peak
    })
}

/// stress-ng's vm workers are forked from forked children, and glibc's
/// `fork()` touches heap memory (the NSS database) after the atfork prepare
/// handlers that park tiermem's fault handlers. That hung every run; now the
/// run ends in its run time, every worker verifies what it wrote, and each
/// worker's resident set stays well under its 256 MiB (so it was tiered).
#[test]
fn stress_ng_vm_workers_fork_from_forked_children() {
    let Some(stress) = need("stress-ng") else {
        return;
    };
    let tmp = scratch("stress-ng");
    let mut cmd = tiermem_run("128M", tmp.path(), &stress);
    cmd.args([
        "--vm",
        "2",
        "--vm-bytes",
        "256M",
        "--vm-method",
        "all",
        "--verify",
        "--timeout",
        "10s",
        "--metrics-brief",
    ]);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = sample_peak_rss("stress-ng-vm", done.clone());
    let ran = run(
        cmd,
        "stress-ng --vm 2 --vm-bytes 256M --verify under tiermem run --dram 128M",
    );
    done.store(true, std::sync::atomic::Ordering::Release);
    let peak_kib = sampler.join().expect("the RSS sampler panicked");
    let all = format!("{}\n{}", ran.stdout, ran.stderr);
    assert!(
        ran.status.success() && all.contains("successful run completed"),
        "{}",
        ran.describe()
    );
    let lower = all.to_ascii_lowercase();
    assert!(
        !lower.contains("fail:") && !lower.contains("bit error"),
        "stress-ng reported a verification failure\n{}",
        ran.describe()
    );
    assert!(
        ran.secs < 60.0,
        "a 10 s stress-ng run took {:.1}s\n{}",
        ran.secs,
        ran.describe()
    );
    assert!(
        peak_kib > 0 && peak_kib < 200 << 10,
        "a vm worker's peak resident set was {peak_kib} KiB: 0 means none was seen, \
         over 200 MiB means its 256 MiB were not tiered under a 128 MiB budget\n{}",
        ran.describe()
    );
    println!(
        "stress-ng: {:.1}s, vm worker peak RSS {} MiB",
        ran.secs,
        peak_kib >> 10
    );
}

/// stress-ng's `userfaultfd` stressor registers memory it mapped with a
/// userfaultfd of its own and serves its faults: the kernel refused the
/// registration over tiered memory (`EBUSY`) and the stressor failed. Now
/// tiermem hands the range over and the run succeeds.
#[test]
fn stress_ng_pages_its_memory_with_its_own_userfaultfd() {
    let Some(stress) = need("stress-ng") else {
        return;
    };
    let tmp = scratch("stress-ng-uffd");
    let mut cmd = tiermem_run("64M", tmp.path(), &stress);
    cmd.args([
        "--userfaultfd",
        "2",
        "--verify",
        "--timeout",
        "5s",
        "--metrics-brief",
    ]);
    let ran = run(
        cmd,
        "stress-ng --userfaultfd 2 --verify under tiermem run --dram 64M",
    );
    let all = format!("{}\n{}", ran.stdout, ran.stderr);
    assert!(
        ran.status.success() && all.contains("successful run completed"),
        "{}",
        ran.describe()
    );
}
