//! Go programs: their runtime must clear the memory it returns to the
//! system before it reuses it ([`tiermem_host::go_runtime`] says why), so
//! `tiermem run` adds `madvdontneed=0` to `GODEBUG`. The variable means
//! nothing to a program not written in Go.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use tiermem_host::go_runtime::{clears_returned_memory, CLEAR_RETURNED_MEMORY};

/// The `GODEBUG` for the program, given the caller's: `None` to leave it
/// as it is, because it already sets `madvdontneed` (libtiermem.so warns a
/// Go program that it set to 1).
pub(super) fn godebug(existing: Option<&OsStr>) -> Option<OsString> {
    let Some(existing) = existing.filter(|v| !v.is_empty()) else {
        return Some(CLEAR_RETURNED_MEMORY.into());
    };
    if clears_returned_memory(existing.as_bytes()).is_some() {
        return None;
    }
    let mut value = existing.to_os_string();
    value.push(",");
    value.push(CLEAR_RETURNED_MEMORY);
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_or_empty_godebug_gets_the_setting() {
        assert_eq!(godebug(None), Some("madvdontneed=0".into()));
        assert_eq!(godebug(Some(OsStr::new(""))), Some("madvdontneed=0".into()));
    }

    #[test]
    fn other_settings_are_kept_before_it() {
        assert_eq!(
            godebug(Some(OsStr::new("gctrace=1"))),
            Some("gctrace=1,madvdontneed=0".into())
        );
    }

    #[test]
    fn the_users_own_choice_is_left_alone() {
        assert_eq!(godebug(Some(OsStr::new("madvdontneed=0"))), None);
        assert_eq!(godebug(Some(OsStr::new("gctrace=1,madvdontneed=1"))), None);
    }
}
