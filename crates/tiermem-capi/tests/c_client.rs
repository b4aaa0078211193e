//! Compiles `tests/c/api_client.c` against `include/tiermem.h`, links it
//! with the freshly built libtiermem.so, and runs it.

use std::path::Path;
use std::process::Command;

#[path = "../../../tests/support/c_program.rs"]
mod c_program;
use c_program::compile;

#[test]
fn c_client_runs_the_api() {
    let (exe, lib, out_dir) = compile("api_client");
    run_client(&exe, &lib, &["/var/tmp"], "api_client: ok");
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
        let out = Command::new("timeout")
            .args(["-k", "5", "120"])
            .arg(&exe)
            .args(["/var/tmp", how])
            .env("LD_LIBRARY_PATH", &lib)
            .output()
            .expect("running api_fork under timeout(1)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(
            out.status.code(),
            Some(124),
            "api_fork {how} hung: {stdout}{stderr}"
        );
        assert!(
            out.status.success() && stdout.contains("api_fork: ok"),
            "api_fork {how} failed ({}): {stdout}{stderr}",
            out.status
        );
    }
    let _ = std::fs::remove_dir_all(out_dir);
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
