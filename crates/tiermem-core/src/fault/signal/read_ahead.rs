//! Read-ahead under signal delivery: faulting threads spot streams, one
//! read-ahead thread reads them.
//!
//! A faulting thread that read a stream's window itself would wait for the
//! whole window before its program went on, and the device would idle
//! while the program consumed it: a scan gets 42–46% of the device's
//! bandwidth that way. So faulting threads only look for streams among
//! their misses, which costs no I/O and no wake-up for
//! random access, and hand each window a miss confirms to a read-ahead
//! thread. That thread is an ordinary io_uring handler (`fault::ring`): it
//! keeps windows in flight, installs them without waking anyone, and
//! parks a marker in each window whose fault starts the next one, so a
//! scan keeps the device busy as it does with handler threads.
//!
//! Everything here is safe to call from a signal handler: the detector is
//! only ever `try_lock`ed there, the queue is a fixed-size array, and the
//! doorbell is a `write(2)` to an eventfd.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use crossbeam_queue::ArrayQueue;

use crate::fault::readahead::{Readahead, Window};
use crate::page_table::PageNo;

/// Windows waiting for the read-ahead thread. A full queue drops the
/// request: read-ahead is a hint, and the thread is far behind anyway.
const QUEUED_WINDOWS: usize = 64;

/// Streams found among faulting threads' misses, and the windows they
/// asked the read-ahead thread for.
pub(crate) struct ReadAheadRequests {
    streams: Mutex<Readahead>,
    windows: ArrayQueue<Request>,
    /// The read-ahead thread is running: until it is (and if it could not
    /// start), nothing is asked of it.
    serving: AtomicBool,
}

/// A window to read, and the miss that asked for it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    pub page: PageNo,
    pub window: Window,
}

impl ReadAheadRequests {
    pub fn new(page_size: usize) -> ReadAheadRequests {
        ReadAheadRequests {
            streams: Mutex::new(Readahead::new(page_size)),
            windows: ArrayQueue::new(QUEUED_WINDOWS),
            serving: AtomicBool::new(false),
        }
    }

    /// From a faulting thread: a demand miss at `page`. True if it
    /// confirmed a stream and its window was queued.
    pub fn on_miss(&self, page: PageNo) -> bool {
        self.ask(page, Readahead::on_miss)
    }

    /// From a faulting thread: `page` is still on its way in (the program
    /// caught up with its stream), so the next window is due.
    pub fn on_catch_up(&self, page: PageNo) -> bool {
        self.ask(page, Readahead::on_catch_up)
    }

    fn ask(&self, page: PageNo, spot: fn(&mut Readahead, PageNo) -> Option<Window>) -> bool {
        if !self.serving.load(Ordering::Acquire) {
            return false;
        }
        // Another thread is looking at the streams: skip rather than wait
        // inside a signal handler.
        let Ok(mut streams) = self.streams.try_lock() else {
            return false;
        };
        let Some(window) = spot(&mut streams, page) else {
            return false;
        };
        drop(streams);
        self.windows.push(Request { page, window }).is_ok()
    }

    /// The detector, for the read-ahead thread (which may wait for it:
    /// faulting threads hold it only for a look at a few streams).
    pub fn streams(&self) -> MutexGuard<'_, Readahead> {
        self.streams.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next queued window, for the read-ahead thread.
    pub fn take(&self) -> Option<Request> {
        self.windows.pop()
    }

    /// The read-ahead thread starts (true) or stops (false) taking windows.
    pub fn set_serving(&self, serving: bool) {
        self.serving.store(serving, Ordering::Release);
        if !serving {
            while self.windows.pop().is_some() {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confirmed_stream_queues_its_window_once_served() {
        let requests = ReadAheadRequests::new(4096);
        for page in 10..13 {
            assert!(!requests.on_miss(page), "nobody serves yet");
        }
        assert!(requests.take().is_none());
        requests.set_serving(true);
        assert!(!requests.on_miss(100));
        assert!(!requests.on_miss(101));
        assert!(requests.on_miss(102), "the third miss confirms the stride");
        let request = requests.take().expect("a queued window");
        assert_eq!(request.page, 102);
        assert_eq!((request.window.start, request.window.stride), (103, 1));
        assert!(requests.take().is_none());
    }

    #[test]
    fn random_misses_queue_nothing() {
        let requests = ReadAheadRequests::new(4096);
        requests.set_serving(true);
        for page in [5_000, 17, 90_210, 333, 71_000, 2, 40_404] {
            assert!(!requests.on_miss(page));
        }
        assert!(requests.take().is_none());
    }

    #[test]
    fn a_busy_detector_is_skipped_not_waited_for() {
        let requests = ReadAheadRequests::new(4096);
        requests.set_serving(true);
        let held = requests.streams();
        for page in 0..8 {
            assert!(!requests.on_miss(page));
        }
        drop(held);
        assert!(requests.take().is_none());
    }

    #[test]
    fn stopping_drops_what_is_queued() {
        let requests = ReadAheadRequests::new(4096);
        requests.set_serving(true);
        for page in 0..3 {
            requests.on_miss(page);
        }
        requests.set_serving(false);
        assert!(requests.take().is_none());
        assert!(!requests.on_miss(3));
    }
}
