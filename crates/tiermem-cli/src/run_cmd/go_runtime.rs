//! Go programs: their runtime must clear the memory it returns to the system.
//!
//! Go's runtime returns heap memory with `madvise(MADV_DONTNEED)`, a system
//! call of its own that the C library, and so libtiermem.so, never sees.
//! Since Go 1.26 (golang/go pull request 76063, "runtime: avoid zeroing
//! scavenged memory") it then skips clearing that memory when it reuses it,
//! counting on the kernel's promise that discarded memory reads as zeros.
//! tiermem cannot keep that promise for a page that is out of DRAM when the
//! program discards it: the kernel has nothing to drop, tiermem is not told,
//! and the page comes back with its old bytes. A fresh Go slice then holds
//! stale words, and Go's heap is corrupted.
//!
//! With `GODEBUG=madvdontneed=0` the runtime returns memory with `MADV_FREE`
//! instead, which makes no promise of zeros, so it clears such memory itself
//! before reuse. `tiermem run` sets it for the program and everything it
//! executes; the variable means nothing to a program not written in Go.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// The Go runtime's settings variable.
pub(super) const ENV_GODEBUG: &str = "GODEBUG";
/// The setting that makes Go clear the memory it returned before reusing it.
const CLEAR_RETURNED_MEMORY: &str = "madvdontneed=0";
const SETTING: &[u8] = b"madvdontneed=";

/// What `tiermem run` does with `GODEBUG`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum GoDebug {
    /// Give the program this value.
    Set(OsString),
    /// The user chose `madvdontneed=1`: keep it, and warn.
    UserChoseZeros,
    /// The user already chose `madvdontneed=0`.
    Kept,
}

/// The `GODEBUG` for the program, given the caller's.
pub(super) fn godebug(existing: Option<&OsStr>) -> GoDebug {
    let Some(existing) = existing.filter(|v| !v.is_empty()) else {
        return GoDebug::Set(CLEAR_RETURNED_MEMORY.into());
    };
    // Go applies the last of repeated settings.
    let chosen = existing
        .as_bytes()
        .split(|b| *b == b',')
        .filter_map(|s| s.trim_ascii().strip_prefix(SETTING))
        .next_back();
    match chosen {
        Some(b"0") => GoDebug::Kept,
        Some(_) => GoDebug::UserChoseZeros,
        None => {
            let mut value = existing.to_os_string();
            value.push(",");
            value.push(CLEAR_RETURNED_MEMORY);
            GoDebug::Set(value)
        }
    }
}

/// The warning for a user who chose `madvdontneed=1`.
pub(super) const ZEROS_WARNING: &str = "GODEBUG asks for madvdontneed=1: Go 1.26 \
     and later then count on memory they discard reading zeros, which tiermem \
     cannot give a page discarded while out of DRAM, so a Go program may find \
     old bytes in fresh memory (without that setting, tiermem run adds \
     madvdontneed=0)";

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &str) -> GoDebug {
        GoDebug::Set(v.into())
    }

    #[test]
    fn an_absent_or_empty_godebug_gets_the_setting() {
        assert_eq!(godebug(None), set("madvdontneed=0"));
        assert_eq!(godebug(Some(OsStr::new(""))), set("madvdontneed=0"));
    }

    #[test]
    fn other_settings_are_kept_before_it() {
        assert_eq!(
            godebug(Some(OsStr::new("gctrace=1"))),
            set("gctrace=1,madvdontneed=0")
        );
    }

    #[test]
    fn the_users_own_choice_is_kept_and_the_last_one_counts() {
        assert_eq!(godebug(Some(OsStr::new("madvdontneed=0"))), GoDebug::Kept);
        assert_eq!(
            godebug(Some(OsStr::new("gctrace=1, madvdontneed=1"))),
            GoDebug::UserChoseZeros
        );
        assert_eq!(
            godebug(Some(OsStr::new("madvdontneed=1,madvdontneed=0"))),
            GoDebug::Kept
        );
    }
}
