//! The program and its environment: finding CMD along PATH, the stats file
//! template and LD_PRELOAD.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use tiermem_core::preload_library::{LIB_NAME, LIB_SONAME};

use super::stop::Stop;

/// Finds CMD as a shell would: a name with a slash as is, else along PATH.
pub(super) fn resolve_command(cmd: &OsStr, path_var: Option<OsString>) -> Result<PathBuf, Stop> {
    let shown = cmd.to_string_lossy();
    if cmd.is_empty() {
        return Err(Stop::new(127, format!("{shown}: command not found")));
    }
    if cmd.as_bytes().contains(&b'/') {
        let path = PathBuf::from(cmd);
        return match std::fs::metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Stop::new(
                127,
                format!("{shown}: No such file or directory"),
            )),
            Err(e) => Err(Stop::new(126, format!("{shown}: {e}"))),
            Ok(m) if m.is_dir() => Err(Stop::new(126, format!("{shown}: Is a directory"))),
            Ok(_) if !is_executable(&path) => {
                Err(Stop::new(126, format!("{shown}: Permission denied")))
            }
            Ok(_) => Ok(path),
        };
    }
    // execvp's default search path when PATH is unset.
    let path_var = path_var.unwrap_or_else(|| OsString::from("/bin:/usr/bin"));
    let mut denied = None;
    for dir in path_var.as_bytes().split(|b| *b == b':') {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(OsStr::from_bytes(dir))
        };
        let candidate = dir.join(cmd);
        match std::fs::metadata(&candidate) {
            Ok(m) if m.is_file() => {
                if is_executable(&candidate) {
                    return Ok(candidate);
                }
                denied.get_or_insert(candidate);
            }
            _ => {}
        }
    }
    match denied {
        Some(p) => Err(Stop::new(
            126,
            format!("{}: Permission denied", p.display()),
        )),
        None => Err(Stop::new(127, format!("{shown}: command not found"))),
    }
}

fn is_executable(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path; access only reads it.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
}

/// The `--stats-file` path as the library gets it: absolute (the program
/// may change directory before it exits), in a directory that exists.
pub(super) fn stats_file_template(path: &Path) -> Result<OsString, Stop> {
    let bad = |why: String| Stop::new(2, format!("--stats-file {}: {why}", path.display()));
    if path.as_os_str().is_empty() || path.file_name().is_none() {
        return Err(bad("names no file".into()));
    }
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("."),
    };
    let dir = dir.canonicalize().map_err(|e| {
        bad(format!(
            "its directory {} is not usable: {e}",
            dir.display()
        ))
    })?;
    if !dir.is_dir() {
        return Err(bad(format!("{} is not a directory", dir.display())));
    }
    let name = path.file_name().unwrap_or_default();
    Ok(dir.join(name).into_os_string())
}

/// LD_PRELOAD for the program: `lib` first, then the existing entries minus
/// any other libtiermem.so (two interposers in one process cannot work).
pub(super) fn ld_preload(lib: &Path, existing: Option<&OsStr>) -> OsString {
    let mut out = lib.as_os_str().as_bytes().to_vec();
    if let Some(existing) = existing {
        for entry in existing
            .as_bytes()
            .split(|b| matches!(b, b':' | b' ' | b'\t' | b'\n'))
            .filter(|e| !e.is_empty())
        {
            let name = Path::new(OsStr::from_bytes(entry)).file_name();
            if name == Some(OsStr::new(LIB_NAME)) || name == Some(OsStr::new(LIB_SONAME)) {
                continue;
            }
            out.push(b':');
            out.extend_from_slice(entry);
        }
    }
    OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ld_preload_puts_ours_first_and_drops_other_copies() {
        let lib = Path::new("/opt/tm/libtiermem.so");
        assert_eq!(ld_preload(lib, None), "/opt/tm/libtiermem.so");
        assert_eq!(
            ld_preload(
                lib,
                Some(OsStr::new("/a/liba.so /old/libtiermem.so::/b/libb.so"))
            ),
            "/opt/tm/libtiermem.so:/a/liba.so:/b/libb.so"
        );
    }

    #[test]
    fn commands_resolve_like_a_shell() {
        let path = Some(OsString::from("/nonexistent:/bin:/usr/bin"));
        assert!(resolve_command(OsStr::new("sh"), path.clone()).is_ok());
        let e = resolve_command(OsStr::new("no-such-cmd-xyz"), path.clone()).unwrap_err();
        assert_eq!(e.code, 127);
        assert_eq!(e.message, "no-such-cmd-xyz: command not found");
        assert_eq!(
            resolve_command(OsStr::new("/"), path.clone())
                .unwrap_err()
                .code,
            126
        );
        assert_eq!(
            resolve_command(OsStr::new("./nope/x"), path)
                .unwrap_err()
                .code,
            127
        );
    }
}
