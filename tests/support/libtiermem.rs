//! For integration tests that need `libtiermem.so`: `cargo test` does not
//! build the cdylib of another package, so it is built here, once per test
//! binary, for the test's own profile. Included with `#[path]`.

#![allow(dead_code)] // each test binary uses part of it

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root (tests live two levels below it, in crates/<name>).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

/// target/<profile>/libtiermem.so, freshly built.
pub fn libtiermem() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        // target/<profile>/deps/<test> -> target/<profile>
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("tests run from target/<profile>/deps")
            .to_path_buf();
        let release = dir.file_name().is_some_and(|n| n == "release");
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "-p", "tiermem-capi"])
            .current_dir(repo_root());
        if release {
            cargo.arg("--release");
        }
        assert!(
            cargo.status().is_ok_and(|s| s.success()),
            "building libtiermem.so failed"
        );
        let lib = dir.join("libtiermem.so");
        assert!(lib.exists(), "libtiermem.so not built in {}", dir.display());
        link_soname(&dir);
        lib
    })
}

/// Programs linked with `-ltiermem` ask the loader for the SONAME,
/// libtiermem.so.0, which cargo does not create: a link beside the library
/// lets them run with LD_LIBRARY_PATH set to its directory (`make build`
/// makes the same link). Test binaries run at once: finding it made is fine.
fn link_soname(dir: &Path) {
    let link = dir.join("libtiermem.so.0");
    match std::os::unix::fs::symlink("libtiermem.so", &link) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("linking {} to libtiermem.so: {e}", link.display()),
    }
}
