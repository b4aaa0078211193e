//! Compiles `tests/c/api_client.c` against `include/tiermem.h`, links it
//! with the freshly built libtiermem.so, and runs it.

use std::path::Path;
use std::process::Command;

#[path = "../../../tests/support/c_program.rs"]
mod c_program;
use c_program::{compile, compile_into, tempfile_dir};

/// The client's last check, that read-modify-write misses are predicted as
/// writes, is about pages read back from the store; its pages are
/// compressible, and the compressed tier would keep them dirty in DRAM
/// (installed writable, with nothing to predict), so it runs with the tier
/// off like the other store-path tests. A hang is killed after two minutes.
#[test]
fn c_client_runs_the_api() {
    let (exe, lib, out_dir) = compile("api_client");
    run_timed(
        &exe,
        &lib,
        &["/var/tmp"],
        &[("TIERMEM_COMPRESS", "off")],
        "api_client: ok",
    );
    let _ = std::fs::remove_dir_all(out_dir);
}

/// The organization fields of `tm_config`: a preset with an override, and a
/// malformed value refused with the variable's name.
#[test]
fn c_client_sets_the_cache_organization() {
    let (exe, lib, out_dir) = compile("organization_client");
    run_client(&exe, &lib, &["good", "/var/tmp"], "organization_client: ok");
    run_client(&exe, &lib, &["bad", "/var/tmp"], "organization_client: ok");
    let _ = std::fs::remove_dir_all(out_dir);
}

/// `tm_config.faults = "signal"`: two threads page through SIGBUS with every
/// page intact, the program's own SIGBUS handler still works, and a bad value
/// is refused with the variable's name.
#[test]
fn c_client_resolves_its_own_faults_by_signal() {
    let (exe, lib, out_dir) = compile("signal_client");
    run_client(&exe, &lib, &["good", "/var/tmp"], "signal_client: ok");
    run_client(&exe, &lib, &["bad", "/var/tmp"], "signal_client: ok");
    let _ = std::fs::remove_dir_all(out_dir);
}

/// fork through the C API (no preload): with the region four times the
/// budget, a child and a grandchild see every byte as it was at their fork,
/// while another thread of the parent faults during the fork, and the
/// parent keeps its own bytes. Without fork handlers for the API the child
/// reads evicted pages as zeros. A hang is killed after two minutes.
#[test]
fn c_client_forks_with_evicted_pages() {
    let (exe, lib, out_dir) = compile("api_fork");
    // glibc's fork(), then the two that run no atfork handlers.
    for how in ["fork", "_Fork", "sys_fork"] {
        run_timed(&exe, &lib, &["/var/tmp", how], &[], "api_fork: ok");
    }
    let _ = std::fs::remove_dir_all(out_dir);
}

/// The same under signal delivery (`TIERMEM_FAULTS=signal`), five rounds
/// of each way to fork. Every fork hung: the fork handlers waited for
/// handler threads that signal delivery does not start. Then a child hung
/// now and then, its evictor waiting on a push to the policy's queue that
/// the parent's toucher thread was making, in its own fault, at the fork.
#[test]
fn c_client_forks_under_signal_delivery() {
    // A directory of its own: the test above compiles api_fork too.
    let (exe, lib, out_dir) = compile_into("api_fork", tempfile_dir("api_fork-signal"));
    for _round in 0..5 {
        for how in ["fork", "_Fork", "sys_fork"] {
            run_timed(
                &exe,
                &lib,
                &["/var/tmp", how],
                &[("TIERMEM_FAULTS", "signal")],
                "api_fork: ok",
            );
        }
    }
    let _ = std::fs::remove_dir_all(out_dir);
}

/// Fork handlers of the program's own, registered before `tm_init`, read
/// every byte of a region four times the budget while tiermem's pager is
/// paused for the fork (`tests/c/api_fork_atfork.c`), with handler threads
/// and under signal delivery, where the forking thread waited forever at
/// the gate that holds other threads' faults back during a fork.
#[test]
fn fork_handlers_of_the_program_s_own_touch_tiered_memory() {
    run_with_both_deliveries("api_fork_atfork");
}

/// A parent and two forked children page through their copies of a region
/// four times the budget at the same time, every byte read four times,
/// with handler threads and under signal delivery
/// (`tests/c/api_fork_concurrent.c`). Under signal delivery the children
/// used the parent's rings: wrong bytes, hangs, and "the slot's ring is
/// smaller than its buffers".
#[test]
fn a_parent_and_its_children_page_at_the_same_time() {
    run_with_both_deliveries("api_fork_concurrent");
}

/// Compiles `tests/c/NAME.c` and runs it on /var/tmp with handler threads,
/// then under signal delivery; each run must print `NAME: ok`.
fn run_with_both_deliveries(name: &str) {
    let (exe, lib, out_dir) = compile(name);
    for faults in ["handler", "signal"] {
        let env = [("TIERMEM_FAULTS", faults)];
        run_timed(&exe, &lib, &["/var/tmp"], &env, &format!("{name}: ok"));
    }
    let _ = std::fs::remove_dir_all(out_dir);
}

/// A long-lived forked child holds only the parent's slots it can still
/// read (tests/c/api_fork_store.c): the parent rewrites a region twelve
/// times while the child lives, and its store stays within about twice the
/// region; parked space drops to zero once the child rewrote its copy.
/// Every byte is checked on both sides. A hang is killed after two minutes.
#[test]
fn a_long_lived_child_does_not_grow_the_parents_store() {
    let (exe, lib, out_dir) = compile("api_fork_store");
    run_timed(&exe, &lib, &["/var/tmp"], &[], "api_fork_store: ok");
    let _ = std::fs::remove_dir_all(out_dir);
}

/// The same with eviction as for a program with asynchronous I/O
/// (`TIERMEM_ASYNC_IO=on`): dirty victims are moved out past the kernel's
/// pin check, and the pages a fork shares with the child, which the kernel
/// refuses to move, are evicted anyway (unshared, or the usual way). This
/// hung when the evictor unshared a write-protected page it owned.
#[test]
fn forks_with_eviction_for_asynchronous_io() {
    // Directories of their own: the tests above compile both programs too.
    let (exe, lib, out_dir) = compile_into("api_fork_store", tempfile_dir("api_fork_store-async"));
    run_timed(
        &exe,
        &lib,
        &["/var/tmp"],
        &[("TIERMEM_ASYNC_IO", "on")],
        "api_fork_store: ok",
    );
    let _ = std::fs::remove_dir_all(out_dir);
    let (exe, lib, out_dir) = compile_into("api_fork", tempfile_dir("api_fork-async"));
    run_timed(
        &exe,
        &lib,
        &["/var/tmp"],
        &[("TIERMEM_ASYNC_IO", "on")],
        "api_fork: ok",
    );
    let _ = std::fs::remove_dir_all(out_dir);
}

/// Runs a C client under timeout(1) (two minutes, then killed: a hang
/// fails); it must exit 0 and print `ok`. Returns its stdout.
fn run_timed(exe: &Path, lib: &Path, args: &[&str], env: &[(&str, &str)], ok: &str) -> String {
    let out = Command::new("timeout")
        .args(["-k", "5", "120"])
        .arg(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib)
        .envs(env.iter().copied())
        .output()
        .expect("running a C client under timeout(1)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(124),
        "{args:?} hung: {stdout}{stderr}"
    );
    assert!(
        out.status.success() && stdout.contains(ok),
        "{args:?} failed ({}): {stdout}{stderr}",
        out.status
    );
    stdout
}

fn run_client(exe: &Path, lib: &Path, args: &[&str], ok: &str) {
    let out = Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "C client {args:?} failed: {stdout}{stderr}"
    );
    assert!(stdout.contains(ok), "{stdout}");
}

/// The soak (`tests/c/soak.c`) for 20 s: three threads check and rewrite
/// every byte of random pages of 96 MiB in a budget that moves between 12
/// and 48 MiB every second, the process forks every 2 s (every second
/// child through a grandchild) and each child checks every byte, while
/// single reads and writes fail. Any wrong byte, failed child, lost page
/// or hang fails the test. The 10-minute run is a benchmark (BENCHMARKS.md).
#[test]
fn soak_with_forks_budget_changes_and_faults() {
    let (exe, lib, out_dir) = compile("soak");
    let faults = "read:500,read:9000,read:40000,write:30,write:900,write:6000";
    let stdout = run_timed(
        &exe,
        &lib,
        &["20", "/var/tmp"],
        &[("TIERMEM_INJECT_FAULTS", faults)],
        "soak: ok",
    );
    assert!(stdout.contains(", 0 pages lost"), "{stdout}");
    let _ = std::fs::remove_dir_all(out_dir);
}
