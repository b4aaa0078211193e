//! Go programs and the memory their runtime returns to the system.
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
//! before reuse. `tiermem run` adds it to the program's environment, and
//! libtiermem.so warns when a Go program runs without it.

/// The Go runtime's settings variable.
pub const ENV_GODEBUG: &str = "GODEBUG";
/// The setting under which Go clears the memory it returned before reuse.
pub const CLEAR_RETURNED_MEMORY: &str = "madvdontneed=0";

const SETTING: &[u8] = b"madvdontneed=";

/// Whether a `GODEBUG` value has Go clear the memory it returned: `None`
/// when it does not set `madvdontneed` (the runtime's default, which does
/// not), else whether the setting that counts (Go applies the last of
/// repeated settings) is `0`.
pub fn clears_returned_memory(godebug: &[u8]) -> Option<bool> {
    godebug
        .split(|b| *b == b',')
        .filter_map(|s| s.trim_ascii().strip_prefix(SETTING))
        .next_back()
        .map(|value| value == b"0")
}

/// The warning libtiermem.so prints for a Go program whose runtime will
/// count on zeros.
pub const ZEROS_WARNING: &str = "its GODEBUG lacks madvdontneed=0: from Go 1.26 \
     the runtime then counts on memory it discards reading zeros, which tiermem \
     cannot give a page discarded while out of DRAM, so fresh Go memory may hold \
     old bytes (tiermem run adds the setting unless GODEBUG sets madvdontneed)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_madvdontneed_setting_counts() {
        assert_eq!(clears_returned_memory(b""), None);
        assert_eq!(clears_returned_memory(b"gctrace=1"), None);
        assert_eq!(clears_returned_memory(b"madvdontneed=0"), Some(true));
        assert_eq!(
            clears_returned_memory(b"gctrace=1, madvdontneed=1"),
            Some(false)
        );
        assert_eq!(
            clears_returned_memory(b"madvdontneed=1,madvdontneed=0"),
            Some(true)
        );
    }
}
