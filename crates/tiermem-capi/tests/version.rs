//! The version a C program sees: `TIERMEM_VERSION` and its parts in
//! `include/tiermem.h` must be the crate's version, `tm_version()` must
//! return the same string, and libtiermem.so must carry the SONAME that an
//! install and `tiermem run`'s lookup use.

use std::process::Command;

#[path = "../../../tests/support/c_program.rs"]
mod c_program;
use c_program::{compile, libtiermem, repo_root};

/// The value of `#define NAME VALUE` in the header, quotes removed.
fn header_define(header: &str, name: &str) -> Option<String> {
    header.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next() != Some("#define") || words.next() != Some(name) {
            return None;
        }
        Some(words.next()?.trim_matches('"').to_owned())
    })
}

/// Bumping the version in the workspace Cargo.toml without the header (or
/// the other way round) fails here.
#[test]
fn the_header_version_is_the_crate_version() {
    let path = repo_root().join("include/tiermem.h");
    let header = std::fs::read_to_string(&path).expect("reading include/tiermem.h");
    let expect = [
        ("TIERMEM_VERSION", env!("CARGO_PKG_VERSION")),
        ("TIERMEM_VERSION_MAJOR", env!("CARGO_PKG_VERSION_MAJOR")),
        ("TIERMEM_VERSION_MINOR", env!("CARGO_PKG_VERSION_MINOR")),
        ("TIERMEM_VERSION_PATCH", env!("CARGO_PKG_VERSION_PATCH")),
    ];
    for (name, version) in expect {
        assert_eq!(
            header_define(&header, name).as_deref(),
            Some(version),
            "{name} in {} is not the crate version (Cargo.toml's [workspace.package] version)",
            path.display()
        );
    }
}

/// A C client compiled against the header compares `TIERMEM_VERSION` with
/// `tm_version()` of the library it runs with, which must print the crate's
/// version. A hang is killed after a minute.
#[test]
fn tm_version_is_the_header_version() {
    let (exe, lib, out_dir) = compile("version_client");
    let out = Command::new("timeout")
        .args(["-k", "5", "60"])
        .arg(&exe)
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .expect("running version_client under timeout(1)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "version_client failed: {stdout}{stderr}"
    );
    let want = format!("version_client: ok {}\n", env!("CARGO_PKG_VERSION"));
    assert_eq!(stdout, want, "{stderr}");
    let _ = std::fs::remove_dir_all(out_dir);
}

/// libtiermem.so's SONAME is the name `make install` links to the versioned
/// file and the name `tiermem run` searches for in an installed prefix.
/// Skipped, with the reason printed, where binutils' readelf is missing.
#[test]
fn the_soname_is_the_installed_name() {
    let lib = libtiermem();
    let out = match Command::new("readelf").arg("-d").arg(lib).output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipped: readelf (binutils) is not runnable: {e}");
            return;
        }
    };
    assert!(out.status.success(), "readelf -d {} failed", lib.display());
    let dynamic = String::from_utf8_lossy(&out.stdout);
    let want = format!(
        "Library soname: [{}]",
        tiermem_core::preload_library::LIB_SONAME
    );
    assert!(dynamic.contains(&want), "{want} not in:\n{dynamic}");
}
