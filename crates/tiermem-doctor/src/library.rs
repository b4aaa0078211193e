//! Whether `libtiermem.so` is found, by the one lookup every command uses
//! (`tiermem_core::preload_library`). `tiermem run`, `probe --target
//! tiermem` and `bench-redis` preload it; the Rust API and `tiermem bench`
//! do not need it, so a missing library is a warning.

use std::path::PathBuf;

use tiermem_core::preload_library::LookupError;

use crate::check::Check;

const NAME: &str = "libtiermem";

/// The library check (pure over the lookup's answer).
pub fn check(found: &Result<PathBuf, LookupError>) -> Check {
    match found {
        Ok(path) => Check::pass(
            NAME,
            format!("{} (what tiermem run preloads)", path.display()),
        ),
        Err(e) => {
            let (why, fix) = split_fix(&e.to_string());
            Check::warn(
                NAME,
                format!("{why}; tiermem run, probe --target tiermem and bench-redis need it"),
                fix,
            )
        }
    }
}

/// The lookup's text on one line, and the fix it ends with.
fn split_fix(text: &str) -> (String, String) {
    let (why, fix) = match text.split_once("Fix:") {
        Some((why, fix)) => (why, fix.trim()),
        None => (
            text,
            "build it with `cargo build --release -p tiermem-capi`, or set TIERMEM_LIB to its path",
        ),
    };
    let one_line = |s: &str| {
        s.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    };
    (one_line(why), one_line(fix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Status;
    use std::path::Path;

    #[test]
    fn a_found_library_passes_with_its_path() {
        let c = check(&Ok(PathBuf::from("/opt/tiermem/lib/libtiermem.so.0")));
        assert_eq!(c.status, Status::Pass);
        assert!(
            c.detail.starts_with("/opt/tiermem/lib/libtiermem.so.0"),
            "{c:?}"
        );
    }

    #[test]
    fn a_missing_library_warns_with_the_lookup_s_fix_on_one_line() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let err = tiermem_core::preload_library::find_from(None, &dir.path().join("bin/tiermem"));
        let c = check(&err);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            !c.detail.contains('\n') && c.detail.contains("Searched:"),
            "{c:?}"
        );
        let fix = c.fix.expect("a fix");
        assert!(!fix.contains('\n') && fix.contains("cargo build"), "{fix}");
        let env = tiermem_core::preload_library::find_from(
            Some("/nonexistent/libtiermem.so".into()),
            Path::new("/usr/bin/tiermem"),
        );
        assert!(check(&env).detail.contains("TIERMEM_LIB=/nonexistent"));
    }
}
