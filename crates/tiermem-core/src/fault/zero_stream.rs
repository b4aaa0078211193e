//! Where a run of first touches in order is going: the state that zero
//! fill ahead of the program ([`zero_ahead`](super::zero_ahead)) keeps in
//! the runtime.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::page_table::PageNo;

/// The first window once a stream is seen, and the largest.
const FIRST_WINDOW: u64 = 4;
pub(crate) const MAX_WINDOW: u64 = 64;
const WINDOW_BITS: u32 = 16;

/// Where the zero-fill stream expects its next fault, and its window; one
/// word for the whole runtime (a second stream elsewhere only resets it).
pub(crate) struct ZeroStream(AtomicU64);

impl ZeroStream {
    pub(crate) fn new() -> ZeroStream {
        ZeroStream(AtomicU64::new(u64::MAX))
    }

    /// A zero fill of `page`: how many pages after it to fill now (0: no
    /// stream yet). Remembers where the stream goes next.
    pub(super) fn next_window(&self, page: PageNo) -> u64 {
        let packed = self.0.load(Ordering::Relaxed);
        let (expected, window) = (packed >> WINDOW_BITS, packed & ((1 << WINDOW_BITS) - 1));
        let window = if page as u64 == expected {
            (window * 2).clamp(FIRST_WINDOW, MAX_WINDOW)
        } else {
            0
        };
        let next = page as u64 + 1 + window;
        self.0
            .store(next << WINDOW_BITS | window, Ordering::Relaxed);
        window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_seen_on_the_second_fault_and_its_window_doubles() {
        let s = ZeroStream::new();
        assert_eq!(s.next_window(10), 0);
        assert_eq!(s.next_window(11), FIRST_WINDOW);
        // The window filled 12..16; the program faults next at 16.
        assert_eq!(s.next_window(16), 2 * FIRST_WINDOW);
        let mut page = 16 + 1 + 2 * FIRST_WINDOW as PageNo;
        let mut last = 0;
        for _ in 0..10 {
            last = s.next_window(page);
            page += 1 + last as PageNo;
        }
        assert_eq!(last, MAX_WINDOW);
        // A fault elsewhere ends the stream.
        assert_eq!(s.next_window(5), 0);
    }
}
