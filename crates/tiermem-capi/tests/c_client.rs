//! Compiles `tests/c/api_client.c` against `include/tiermem.h`, links it
//! with the freshly built libtiermem.so, and runs it.

use std::path::PathBuf;
use std::process::Command;

#[path = "../../../tests/support/libtiermem.rs"]
mod support;
use support::{libtiermem, repo_root};

#[test]
fn c_client_runs_the_api() {
    let root = repo_root();
    let lib = libtiermem().parent().expect("a directory").to_path_buf();
    let out_dir = tempfile_dir();
    let exe = out_dir.join("api_client");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg(root.join("tests/c/api_client.c"))
        .arg("-I")
        .arg(root.join("include"))
        .arg("-L")
        .arg(&lib)
        .args(["-ltiermem", "-o"])
        .arg(&exe)
        .status()
        .expect("a C compiler (cc) is needed for this test");
    assert!(status.success(), "compiling the C client failed");
    let out = Command::new(&exe)
        .arg("/var/tmp")
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "C client failed: {stdout}{stderr}");
    assert!(stdout.contains("api_client: ok"), "{stdout}");
    let _ = std::fs::remove_dir_all(out_dir);
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tiermem-c-client-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
