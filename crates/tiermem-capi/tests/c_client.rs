//! Compiles `tests/c/api_client.c` against `include/tiermem.h`, links it
//! with the freshly built libtiermem.so, and runs it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// target/<profile>/ holds libtiermem.so; this test runs from
/// target/<profile>/deps/. `cargo test` does not emit the cdylib itself, so
/// build it for the same profile first.
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let release = dir.file_name().is_some_and(|n| n == "release");
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "-p", "tiermem-capi"])
        .current_dir(repo_root());
    if release {
        cargo.arg("--release");
    }
    assert!(
        cargo.status().unwrap().success(),
        "building libtiermem.so failed"
    );
    assert!(
        dir.join("libtiermem.so").exists(),
        "libtiermem.so not built in {}",
        dir.display()
    );
    dir
}

#[test]
fn c_client_runs_the_api() {
    let root = repo_root();
    let lib = library_dir();
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
