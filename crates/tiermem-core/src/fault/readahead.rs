//! Read-ahead: spotting sequential and strided streams among misses.
//!
//! Each handler keeps a few streams (like Linux's per-file readahead
//! state, with Leap's idea of a trend: a constant stride). A miss at the
//! page a stream predicts confirms it, and the window of pages read ahead
//! doubles, up to a maximum; a miss that matches nothing starts a candidate
//! that only reads ahead once a third miss confirms its stride. Two
//! adjacent misses are not enough: an object spanning two pages (a Redis
//! value, say) produces them without any stream behind it. Uniform
//! random misses almost never confirm a stream, so they cost a scan of a
//! few entries and no I/O.
//!
//! Prefetched pages are installed without waking anyone and carry a
//! `PREFETCHED` mark: a later fault on them, a write, or the stream moving
//! past them counts them as hits; eviction with the mark still set counts
//! them as waste.

use crate::page_table::PageNo;

const STREAMS: usize = 8;
/// The first window of a confirmed stream, in bytes (8 pages of 4 KiB).
const FIRST_WINDOW_BYTES: u64 = 32 << 10;
/// The largest window, in bytes: the reads of one window keep the
/// device's queue busy while the program consumes the previous one. A scan
/// behind 1 MiB windows keeps catching up with its read-ahead and faults on
/// pages still being read; 2 MiB windows cut those faults
/// (docs/notebook/2026-11-27-suite-rounds.md has the runs).
const MAX_WINDOW_BYTES: u64 = 2 << 20;
/// Windows of large pages still hold a few pages, so that a stream reads
/// ahead more than one page at a time.
const MIN_MAX_WINDOW_PAGES: u64 = 4;
/// Strides beyond this many pages are not streams, just far apart misses.
const MAX_STRIDE: i64 = 64;

#[derive(Clone, Copy, Default)]
struct Stream {
    /// Last demand miss.
    last: i64,
    stride: i64,
    /// Pages read ahead per miss; 0 while the stride is unconfirmed.
    window: u64,
    /// The next page not yet read ahead.
    ahead: i64,
    /// The next page whose use is not yet counted: the program passed
    /// every read-ahead page before it.
    credited: i64,
    used: u64,
}

/// Pages to read ahead: `start`, `start + stride`, ... (`count` of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: i64,
    pub stride: i64,
    pub count: u64,
    /// The program passed the read-ahead pages from here up to the page
    /// that produced this window: they were used.
    pub passed_from: i64,
}

impl Window {
    /// A fixed prefetch degree (`TIERMEM_PREFETCH`): the `degree` pages
    /// after a demand miss at `page`.
    pub fn next_pages(page: PageNo, degree: u32) -> Window {
        Window {
            start: page as i64 + 1,
            stride: 1,
            count: degree as u64,
            passed_from: page as i64,
        }
    }
}

/// The largest read-ahead window for `page_size`, in pages: windows are
/// sized in bytes, so large pages do not read ahead megabytes more.
pub fn max_window_pages(page_size: usize) -> u64 {
    (MAX_WINDOW_BYTES / page_size as u64).max(MIN_MAX_WINDOW_PAGES)
}

pub struct Readahead {
    streams: [Stream; STREAMS],
    clock: u64,
    first_window: u64,
    max_window: u64,
}

impl Readahead {
    pub fn new(page_size: usize) -> Readahead {
        Readahead {
            streams: [Stream::default(); STREAMS],
            clock: 0,
            first_window: (FIRST_WINDOW_BYTES / page_size as u64).max(1),
            max_window: max_window_pages(page_size),
        }
    }

    fn grow(&self, window: u64) -> u64 {
        (window * 2).clamp(self.first_window, self.max_window)
    }

    /// A demand miss at `page`; returns what to read ahead, if anything.
    pub fn on_miss(&mut self, page: PageNo) -> Option<Window> {
        self.clock += 1;
        let p = page as i64;
        let found = self.streams.iter().position(|s| s.confirms(p));
        match found {
            Some(i) => Some(self.advance(i, p)),
            None => {
                self.start_candidate(p);
                None
            }
        }
    }

    fn advance(&mut self, i: usize, p: i64) -> Window {
        let window = self.grow(self.streams[i].window);
        let s = &mut self.streams[i];
        s.used = self.clock;
        let passed_from = s.pass(p);
        s.last = p;
        s.window = window;
        // A demand miss means the stream has no read-ahead page here: none
        // was read yet, or it was evicted before use (or never claimed for
        // lack of DRAM). Either way the window starts right after it;
        // pages after it that are in DRAM or on their way are skipped.
        let start = p + s.stride;
        let count = s.window;
        s.ahead = start + s.stride * count as i64;
        Window {
            start,
            stride: s.stride,
            count,
            passed_from,
        }
    }

    /// A fault found `page` still being read ahead: the program has caught
    /// up with the stream. Read the next window now (Linux's asynchronous
    /// read-ahead), so the program does not stall at the window's end.
    pub fn on_catch_up(&mut self, page: PageNo) -> Option<Window> {
        let p = page as i64;
        let i = self.streams.iter().position(|s| {
            s.window > 0 && {
                let from_last = (p - s.last) * s.stride.signum();
                let to_ahead = (s.ahead - p) * s.stride.signum();
                from_last > 0 && to_ahead > 0
            }
        })?;
        // Two windows in flight ahead of the program keep the device busy;
        // more would only hold DRAM and buffers: then the window is empty,
        // but the pages passed are still counted.
        let s = &mut self.streams[i];
        if (s.ahead - p) / s.stride > 2 * self.max_window as i64 {
            return Some(Window {
                start: s.ahead,
                stride: s.stride,
                count: 0,
                passed_from: s.pass(p),
            });
        }
        self.clock += 1;
        let window = self.grow(self.streams[i].window);
        let s = &mut self.streams[i];
        s.used = self.clock;
        s.window = window;
        let start = s.ahead;
        s.ahead = start + s.stride * s.window as i64;
        Some(Window {
            start,
            stride: s.stride,
            count: s.window,
            passed_from: s.pass(p),
        })
    }

    /// No stream predicted `p`: the nearest recent miss becomes a candidate
    /// with the stride from it, or the least recently used entry restarts.
    fn start_candidate(&mut self, p: i64) {
        let clock = self.clock;
        let near = self
            .streams
            .iter_mut()
            .filter(|s| s.used > 0 && (p - s.last).abs() <= MAX_STRIDE && p != s.last)
            .max_by_key(|s| s.used);
        if let Some(s) = near {
            *s = Stream {
                last: p,
                stride: p - s.last,
                window: 0,
                ahead: p + (p - s.last),
                credited: p,
                used: clock,
            };
            return;
        }
        if let Some(s) = self.streams.iter_mut().min_by_key(|s| s.used) {
            *s = Stream {
                last: p,
                stride: 0,
                window: 0,
                ahead: p,
                credited: p,
                used: clock,
            };
        }
    }
}

impl Stream {
    /// The program is at `p`: returns where the pages it passed since the
    /// last call begin (`p` itself if none), and moves past `p`, whose own
    /// use its fault counts.
    fn pass(&mut self, p: i64) -> i64 {
        let from = if (p - self.credited) * self.stride.signum() > 0 {
            self.credited
        } else {
            p
        };
        self.credited = p + self.stride;
        from
    }

    /// Whether a miss at `p` follows this stream: the next step of an
    /// unconfirmed stride, or the first page past (or inside) the window
    /// already read ahead of a confirmed one.
    fn confirms(&self, p: i64) -> bool {
        if self.used == 0 || self.stride == 0 {
            return false;
        }
        let step = p - self.last;
        if step % self.stride != 0 || step.signum() != self.stride.signum() {
            return false;
        }
        let steps = step / self.stride;
        let window_steps = if self.window == 0 {
            1
        } else {
            (self.ahead - self.last) / self.stride + 1
        };
        steps >= 1 && steps <= window_steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST_WINDOW: u64 = 8;

    #[test]
    fn a_sequential_stream_is_confirmed_then_its_window_grows() {
        let mut ra = Readahead::new(4096);
        assert_eq!(ra.on_miss(100), None, "one miss is no stream");
        assert_eq!(
            ra.on_miss(101),
            None,
            "two adjacent misses are no stream either"
        );
        let w = ra.on_miss(102).expect("the third sequential miss confirms");
        assert_eq!((w.start, w.stride, w.count), (103, 1, FIRST_WINDOW));
        // The program reads the window without faulting, then misses just past it.
        let next = w.start + w.count as i64;
        let w2 = ra.on_miss(next as PageNo).expect("still the stream");
        assert_eq!(w2.start, next + 1);
        assert_eq!(w2.count, 2 * FIRST_WINDOW);
        assert_eq!(w2.passed_from, 103);
    }

    #[test]
    fn a_miss_inside_the_window_reads_again_from_there() {
        let mut ra = Readahead::new(4096);
        ra.on_miss(10);
        ra.on_miss(11);
        let w = ra.on_miss(12).unwrap();
        let far = ra.on_catch_up(w.start as PageNo + 1).unwrap();
        assert!(far.start > w.start + w.count as i64 - 1);
        // The pages read ahead were evicted before the program got there.
        let again = ra.on_miss(w.start as PageNo + 2).expect("still the stream");
        assert_eq!(again.start, w.start + 3);
        assert!(again.count > 0);
    }

    #[test]
    fn catching_up_with_a_window_reads_the_next_one() {
        let mut ra = Readahead::new(4096);
        ra.on_miss(10);
        ra.on_miss(11);
        let w = ra.on_miss(12).unwrap();
        assert_eq!(ra.on_catch_up(500), None, "outside every window");
        let next = ra
            .on_catch_up(w.start as PageNo + 2)
            .expect("inside the window");
        assert_eq!(next.start, w.start + w.count as i64);
        assert_eq!(next.count, 2 * FIRST_WINDOW);
    }

    #[test]
    fn strided_and_backward_streams_are_found() {
        let mut ra = Readahead::new(4096);
        ra.on_miss(1000);
        assert_eq!(
            ra.on_miss(1004),
            None,
            "a stride needs a second confirmation"
        );
        let w = ra.on_miss(1008).unwrap();
        assert_eq!((w.start, w.stride), (1012, 4));
        let mut back = Readahead::new(4096);
        back.on_miss(500);
        back.on_miss(499);
        let w = back.on_miss(498).unwrap();
        assert_eq!((w.start, w.stride), (497, -1));
    }

    #[test]
    fn windows_are_sized_in_bytes() {
        assert_eq!(max_window_pages(4096), 512);
        assert_eq!(max_window_pages(64 << 10), 32);
        assert_eq!(max_window_pages(2 << 20), MIN_MAX_WINDOW_PAGES);
        let mut ra = Readahead::new(64 << 10);
        ra.on_miss(0);
        ra.on_miss(1);
        let mut w = ra.on_miss(2).unwrap();
        assert_eq!(w.count, 1, "32 KiB is under one 64 KiB page: one page");
        for _ in 0..10 {
            let next = (w.start + w.count as i64) as PageNo;
            w = ra.on_miss(next).unwrap();
        }
        assert_eq!(w.count, 32, "2 MiB of 64 KiB pages at most");
    }

    #[test]
    fn random_misses_read_nothing_ahead() {
        let mut ra = Readahead::new(4096);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut windows = 0;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if ra.on_miss((x % 1_000_000) as PageNo).is_some() {
                windows += 1;
            }
        }
        assert!(windows < 100, "{windows} windows for random misses");
    }
}
