//! Where `libtiermem.so` is: the one lookup every command uses (`run`,
//! `probe`, `bench-redis`, `doctor`), so they agree on which library a
//! program gets.
//!
//! The order: `TIERMEM_LIB`; else next to the running binary (a build tree's
//! `target/release/`); one directory up from cargo's `target/*/deps` (test
//! binaries);
//! `../lib`, `../lib64`, `../lib/<arch>-linux-gnu` and `../lib/tiermem` (an
//! installed prefix: `PREFIX/bin/tiermem` with `PREFIX/lib/libtiermem.so.0`,
//! or a `LIBDIR` of a distribution's lib64 or multiarch layout).

use std::ffi::OsString;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The environment variable that names the library explicitly.
pub const ENV_LIB: &str = "TIERMEM_LIB";
/// The development name (a build tree, the unversioned symlink of an install).
pub const LIB_NAME: &str = "libtiermem.so";
/// The name an install gives the library: its SONAME.
pub const LIB_SONAME: &str = "libtiermem.so.0";

/// Debian's multiarch directory name for this architecture (`make install
/// LIBDIR=PREFIX/lib/x86_64-linux-gnu`); right for x86_64, aarch64, riscv64
/// and s390x, the architectures whose Debian triple is `<arch>-linux-gnu`.
fn multiarch() -> String {
    format!("{}-linux-gnu", std::env::consts::ARCH)
}

/// Why no usable library was found; its text ends with a fix.
#[derive(Debug)]
pub struct LookupError(String);

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LookupError {}

/// The library for this process: `TIERMEM_LIB`, else found from the
/// running binary's path.
pub fn find() -> Result<PathBuf, LookupError> {
    let exe = std::env::current_exe()
        .map_err(|e| LookupError(format!("cannot locate the running binary: {e}")))?;
    find_from(std::env::var_os(ENV_LIB), &exe)
}

/// The library, as an absolute path LD_PRELOAD can carry, from an explicit
/// `TIERMEM_LIB` value or the binary's path.
pub fn find_from(env_lib: Option<OsString>, exe: &Path) -> Result<PathBuf, LookupError> {
    let found = match env_lib.filter(|v| !v.is_empty()) {
        Some(p) => named_by_env(PathBuf::from(p))?,
        None => next_to_binary(exe)?,
    };
    let abs = found
        .canonicalize()
        .map_err(|e| LookupError(format!("resolving the path of {}: {e}", found.display())))?;
    if abs
        .as_os_str()
        .as_bytes()
        .iter()
        .any(|b| matches!(b, b':' | b' ' | b'\t' | b'\n'))
    {
        return Err(LookupError(format!(
            "the path of {LIB_NAME}, {}, contains a colon or a space, which LD_PRELOAD cannot express.\n\
             Fix: copy {LIB_NAME} to a directory whose path has neither and set {ENV_LIB} to it.",
            abs.display()
        )));
    }
    Ok(abs)
}

/// Every place searched when `TIERMEM_LIB` is unset, in order.
pub fn candidates(exe: &Path) -> Vec<PathBuf> {
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let up = dir.parent().unwrap_or(dir);
    let lib_dir = up.join("lib");
    let mut dirs = vec![dir.to_path_buf()];
    // Cargo puts test binaries in target/<profile>/deps, one below the library.
    if dir.file_name().is_some_and(|n| n == "deps") {
        dirs.push(up.to_path_buf());
    }
    dirs.extend([
        lib_dir.clone(),
        up.join("lib64"),
        lib_dir.join(multiarch()),
        lib_dir.join("tiermem"),
    ]);
    let mut out = Vec::new();
    for d in dirs {
        out.push(d.join(LIB_NAME));
        out.push(d.join(LIB_SONAME));
    }
    out
}

fn named_by_env(p: PathBuf) -> Result<PathBuf, LookupError> {
    if p.is_file() {
        return Ok(p);
    }
    Err(LookupError(format!(
        "{ENV_LIB}={} does not name an existing file.\n\
         Fix: point {ENV_LIB} at libtiermem.so (build it with `cargo build --release -p tiermem-capi`; \
         it lands in target/release/), or unset {ENV_LIB} to use the one the tiermem binary finds.",
        p.display()
    )))
}

fn next_to_binary(exe: &Path) -> Result<PathBuf, LookupError> {
    let searched = candidates(exe);
    if let Some(c) = searched.iter().find(|c| c.is_file()) {
        return Ok(c.clone());
    }
    let list: Vec<String> = searched
        .iter()
        .map(|c| format!("  {}", c.display()))
        .collect();
    Err(LookupError(format!(
        "cannot find {LIB_NAME}, the library tiermem preloads into programs. Searched:\n{}\n\
         Fix: build it with `cargo build --release -p tiermem-capi` (it lands next to the tiermem binary \
         in target/release/), install tiermem with `make install`, or set {ENV_LIB} to its path.",
        list.join("\n")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installed_prefix_finds_the_soname_in_lib() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::create_dir_all(dir.path().join("lib")).unwrap();
        let lib = dir.path().join("lib").join(LIB_SONAME);
        std::fs::write(&lib, b"").unwrap();
        let found = find_from(None, &dir.path().join("bin/tiermem")).unwrap();
        assert_eq!(found, lib.canonicalize().unwrap());
    }

    #[test]
    fn a_lib64_or_multiarch_libdir_is_found() {
        for sub in ["lib64".to_owned(), format!("lib/{}", multiarch())] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("bin")).unwrap();
            std::fs::create_dir_all(dir.path().join(&sub)).unwrap();
            let lib = dir.path().join(&sub).join(LIB_SONAME);
            std::fs::write(&lib, b"").unwrap();
            let found = find_from(None, &dir.path().join("bin/tiermem")).unwrap();
            assert_eq!(found, lib.canonicalize().unwrap(), "{sub}");
        }
    }

    #[test]
    fn the_build_tree_copy_wins_over_lib() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::create_dir_all(dir.path().join("lib")).unwrap();
        std::fs::write(dir.path().join("lib").join(LIB_NAME), b"").unwrap();
        let beside = dir.path().join("bin").join(LIB_NAME);
        std::fs::write(&beside, b"").unwrap();
        let found = find_from(None, &dir.path().join("bin/tiermem")).unwrap();
        assert_eq!(found, beside.canonicalize().unwrap());
    }

    #[test]
    fn a_missing_library_lists_where_it_looked() {
        let dir = tempfile::tempdir().unwrap();
        let err = find_from(None, &dir.path().join("bin/tiermem")).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("Searched:"), "{text}");
        assert!(text.contains(LIB_SONAME), "{text}");
        assert!(text.contains("Fix:"), "{text}");
    }

    #[test]
    fn an_env_path_that_is_not_a_file_is_refused() {
        let err = find_from(
            Some("/nonexistent/libtiermem.so".into()),
            Path::new("/usr/bin/tiermem"),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("TIERMEM_LIB=/nonexistent"),
            "{err}"
        );
    }
}
