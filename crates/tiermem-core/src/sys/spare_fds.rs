//! Descriptors held in reserve for forks.
//!
//! A forked child starts a pager of its own (see `fork`), and that opens
//! descriptors: replacements for the event descriptors, its own backing
//! file, rings, a pidfd, and in the parent the lease pipe. A program that
//! has opened every descriptor its limit allows and then forks (stress-ng's
//! `forkheavy` does) would leave the child none, and a child without a
//! pager cannot read its evicted memory back. So the runtime keeps a few
//! descriptors open; the fork handlers close them where descriptors are
//! needed (the parent before the lease pipe, the child first thing) and
//! open them again after, as far as the limit lets them.
//!
//! Every spare is a duplicate of one memfd of tiermem's own, and a spare is
//! closed only while its number still names that file: a program that
//! closed the number and opened something else there keeps what it opened.
//! When the last runtime of the process stops, the spares are closed.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::file_identity as identity;

/// Enough for a child's pager (six descriptors and one more for a moment
/// while it replaces one) and a grandchild's after it.
const SPARES: usize = 16;

/// The spare descriptors, and the file they all name.
pub struct Reserve {
    fds: Vec<OwnedFd>,
    /// `(st_dev, st_ino)` of the file every spare names.
    file: Option<(u64, u64)>,
}

static RESERVE: Mutex<Reserve> = Mutex::new(Reserve {
    fds: Vec::new(),
    file: None,
});

/// The reserve, locked. The fork handlers hold it across a fork, so that
/// no thread that does not exist in the child holds it there.
pub fn reserve() -> std::sync::MutexGuard<'static, Reserve> {
    RESERVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fresh close-on-exec descriptor for the spares' file: a duplicate of
/// `of`, or a new memfd.
fn open_spare(of: Option<i32>) -> Option<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC and memfd_create return a new descriptor or -1;
    // the name is a NUL-terminated string.
    let fd = unsafe {
        match of {
            Some(fd) => libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0),
            None => libc::memfd_create(c"tiermem-spare-fd".as_ptr(), libc::MFD_CLOEXEC),
        }
    };
    // SAFETY: `fd` is a fresh descriptor that we now own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Reserve {
    /// Opens spares up to the reserve's size, as far as the descriptor
    /// limit allows.
    pub fn refill(&mut self) {
        while self.fds.len() < SPARES {
            let Some(fd) = open_spare(self.fds.first().map(|fd| fd.as_raw_fd())) else {
                break;
            };
            if self.fds.is_empty() {
                self.file = identity(fd.as_raw_fd());
            }
            self.fds.push(fd);
        }
    }

    /// Closes up to `count` spares (all of them with `usize::MAX`); a
    /// number that no longer names the spares' file is forgotten, not
    /// closed.
    pub fn release(&mut self, count: usize) {
        let keep = self.fds.len().saturating_sub(count);
        for fd in self.fds.drain(keep..) {
            match identity(fd.as_raw_fd()) {
                Some(file) if Some(file) == self.file => drop(fd),
                _ => std::mem::forget(fd),
            }
        }
    }
}

/// Runtime threads still opening their descriptors; the spares are topped
/// up when the last is done, so that they never take a descriptor a
/// starting thread needs.
static SETUPS_PENDING: AtomicUsize = AtomicUsize::new(0);

/// Whether a runtime runs in this process, so that spares are wanted: a
/// thread of a stopping runtime that finishes its setup late refills
/// nothing.
static WANTED: AtomicBool = AtomicBool::new(false);

/// `threads` runtime threads are starting; each calls [`setup_done`] once
/// it has opened what it needs.
pub fn expect_setups(threads: usize) {
    WANTED.store(true, Ordering::Release);
    SETUPS_PENDING.fetch_add(threads, Ordering::AcqRel);
}

/// The last runtime of the process has stopped: the spares are closed and
/// not opened again until a runtime starts.
pub fn retire() {
    WANTED.store(false, Ordering::Release);
    reserve().release(usize::MAX);
}

/// A runtime thread has opened its descriptors (or failed to); the last of
/// them tops the spares up.
pub fn setup_done() {
    if SETUPS_PENDING.fetch_sub(1, Ordering::AcqRel) == 1 {
        refill();
    }
}

/// Opens spares up to the reserve's size, as far as the descriptor limit
/// allows.
pub fn refill() {
    if WANTED.load(Ordering::Acquire) {
        reserve().refill();
    }
}

/// Closes up to `count` spares (all of them with `usize::MAX`), so that
/// as many descriptors can be opened. A number that no longer names the
/// spares' file is forgotten, not closed.
pub fn release(count: usize) {
    reserve().release(count);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spares_are_held_released_and_never_close_another_file() {
        let mut r = Reserve {
            fds: Vec::new(),
            file: None,
        };
        r.refill();
        assert_eq!(r.fds.len(), SPARES);
        r.release(2);
        assert_eq!(r.fds.len(), SPARES - 2);

        // A number reused for another file is left open.
        let last = r.fds.last().map(|fd| fd.as_raw_fd()).unwrap();
        let other = std::fs::File::open("/dev/null").unwrap();
        // SAFETY: dup2 over a descriptor the reserve holds, for the test.
        assert_eq!(unsafe { libc::dup2(other.as_raw_fd(), last) }, last);
        r.release(1);
        assert_eq!(
            identity(last),
            identity(other.as_raw_fd()),
            "closed the other file"
        );
        // SAFETY: the test's own duplicate, closed once.
        unsafe { libc::close(last) };

        r.release(usize::MAX);
        assert!(r.fds.is_empty());
        r.refill();
        assert_eq!(r.fds.len(), SPARES);
    }
}
