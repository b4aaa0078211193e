//! Compiles a C client of `tests/c/` against `include/tiermem.h` and the
//! freshly built libtiermem.so. Included with `#[path]`.

#![allow(dead_code)] // each test binary uses part of it

use std::path::PathBuf;
use std::process::Command;

#[path = "libtiermem.rs"]
mod libtiermem;
pub use libtiermem::{libtiermem, repo_root};

/// Compiles tests/c/NAME.c against the header and the fresh libtiermem.so.
/// Returns the executable, the library's directory and the scratch directory.
pub fn compile(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    compile_into(name, tempfile_dir(name))
}

/// [`compile`] into `out_dir`, for tests of one binary that run at once.
pub fn compile_into(name: &str, out_dir: PathBuf) -> (PathBuf, PathBuf, PathBuf) {
    let root = repo_root();
    let lib = libtiermem().parent().expect("a directory").to_path_buf();
    let exe = out_dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-pthread"])
        .arg(root.join(format!("tests/c/{name}.c")))
        .arg("-I")
        .arg(root.join("include"))
        .arg("-L")
        .arg(&lib)
        .args(["-ltiermem", "-o"])
        .arg(&exe)
        .status()
        .expect("a C compiler (cc) is needed for this test");
    assert!(status.success(), "compiling {name}.c failed");
    (exe, lib, out_dir)
}

pub fn tempfile_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tiermem-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
