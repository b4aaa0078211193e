//! Anonymous mappings, zapping, and the small fd helpers the threads need.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use super::raw;
use crate::error::{Error, Result};

/// An owned anonymous private mapping, unmapped on drop.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is a plain range of address space; all access to its
// contents goes through raw pointers whose synchronisation is the caller's.
unsafe impl Send for Mapping {}
// SAFETY: as above; the struct itself is immutable.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Reserves `len` bytes of read-write address space without committing
    /// memory or swap for it (`MAP_NORESERVE`). Pages materialise on touch.
    pub fn reserve(len: usize, what: &'static str) -> Result<Mapping> {
        Self::map(len, what)
    }

    /// Like [`Mapping::reserve`], aligned to `align` (a power of two), so
    /// large tiermem pages start on their natural boundary.
    pub fn reserve_aligned(len: usize, align: usize, what: &'static str) -> Result<Mapping> {
        let over = len.checked_add(align).ok_or(Error::Os {
            what,
            source: io::Error::from_raw_os_error(libc::ENOMEM),
        })?;
        let raw = Self::map(over, what)?;
        let start = raw.addr();
        let aligned = (start + align - 1) & !(align - 1);
        let head = aligned - start;
        let tail = over - head - len;
        // Hand the unaligned ends back; `raw` must not unmap the whole span.
        let raw = std::mem::ManuallyDrop::new(raw);
        // SAFETY: both trimmed pieces lie inside the mapping we just created
        // and nothing else refers to them.
        unsafe {
            if head > 0 {
                let _ = raw::munmap(start, head);
            }
            if tail > 0 {
                let _ = raw::munmap(aligned + len, tail);
            }
        }
        let _ = raw;
        Ok(Mapping {
            // SAFETY: `aligned` is inside a successful mapping, hence non-null.
            ptr: unsafe { NonNull::new_unchecked(aligned as *mut u8) },
            len,
        })
    }

    /// Like [`Mapping::reserve`], but shared with the children this process
    /// forks: what either side writes, the other reads.
    pub fn shared(len: usize, what: &'static str) -> Result<Mapping> {
        Self::map_with(len, libc::MAP_SHARED | libc::MAP_ANONYMOUS, what)
    }

    fn map(len: usize, what: &'static str) -> Result<Mapping> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        Self::map_with(len, flags, what)
    }

    fn map_with(len: usize, flags: i32, what: &'static str) -> Result<Mapping> {
        // SAFETY: an anonymous mapping at a kernel-chosen address has no
        // preconditions; the result is checked below.
        let p = unsafe { raw::mmap(0, len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) }
            .map_err(|source| Error::Os { what, source })?;
        Ok(Mapping {
            // SAFETY: mmap succeeded, so `p` is non-null.
            ptr: unsafe { NonNull::new_unchecked(p as *mut u8) },
            len,
        })
    }

    /// The start address of the mapping.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }
    /// The first byte of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    /// The length of the mapping, in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the mapping has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this mapping and nothing uses it after drop.
        let _ = unsafe { raw::munmap(self.addr(), self.len) };
    }
}

/// Drops the pages of `[addr, addr+len)`; the next access faults.
///
/// The kernel refuses `MADV_DONTNEED` (`EINVAL`) on memory it holds
/// locked. The runtime keeps in DRAM every page it knows to be locked and
/// never zaps one, so a kernel lock here is one it did not see: an `mlock`
/// made by a raw system call, or one that lost a race with the program's
/// own `munlock`, `madvise` or `free` of the same page in another thread.
/// Such a lock must not stop the runtime from dropping a page whose
/// contents it saved or released, so the range is dropped with
/// `MADV_DONTNEED_LOCKED` (Linux 5.18) instead; the kernel's lock on the
/// range stays, as that advice leaves it.
pub fn zap(addr: usize, len: usize) -> io::Result<()> {
    // SAFETY: MADV_DONTNEED on a private anonymous range we own only discards
    // its contents, which the caller has saved or no longer needs.
    match unsafe { raw::madvise(addr, len, libc::MADV_DONTNEED) } {
        Err(refused) if refused.raw_os_error() == Some(libc::EINVAL) => {
            // SAFETY: as above; the advice differs only in taking locked
            // memory too.
            unsafe { raw::madvise(addr, len, libc::MADV_DONTNEED_LOCKED) }.map_err(|_| refused)
        }
        done => done,
    }
}

/// Batches zaps. Every MADV_DONTNEED costs a TLB shootdown, so ranges are
/// collected and dropped with one `process_madvise` call (one flush) where the
/// kernel allows it on the own process, else with one madvise per range.
pub struct Zapper {
    /// Before `pidfd`, so the record goes before the pidfd closes.
    _recorded: Option<super::thread_fds::Recorded>,
    pidfd: Option<OwnedFd>,
    ranges: Vec<libc::iovec>,
}

// SAFETY: the iovecs only hold addresses (never dereferenced by us).
unsafe impl Send for Zapper {}

/// The kernel's limit on iovecs per call (UIO_MAXIOV).
const MAX_IOV: usize = 1024;

impl Zapper {
    /// An empty batch, sent with `process_madvise` where the kernel allows it
    /// on the own process.
    pub fn new() -> Zapper {
        let pidfd = Self::own_pidfd_if_batching_works();
        Zapper {
            _recorded: pidfd
                .as_ref()
                .map(|fd| super::thread_fds::record(fd.as_raw_fd())),
            pidfd,
            ranges: Vec::with_capacity(MAX_IOV),
        }
    }

    fn own_pidfd_if_batching_works() -> Option<OwnedFd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` is a fresh descriptor that we now own.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // Probe: an empty vector is accepted only where process_madvise
        // knows MADV_DONTNEED on the own process (Linux 6.13+).
        let probe: [libc::iovec; 0] = [];
        // SAFETY: a zero-length iovec array is valid; nothing is touched.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                pidfd.as_raw_fd(),
                probe.as_ptr(),
                0usize,
                libc::MADV_DONTNEED,
                0u32,
            )
        };
        (rc == 0).then_some(pidfd)
    }

    /// Queues `[addr, addr+len)`, merging with the previous range when adjacent.
    pub fn push(&mut self, addr: usize, len: usize) -> io::Result<()> {
        if let Some(last) = self.ranges.last_mut() {
            if last.iov_base as usize + last.iov_len == addr {
                last.iov_len += len;
                return Ok(());
            }
        }
        if self.ranges.len() == MAX_IOV {
            self.flush()?;
        }
        self.ranges.push(libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        });
        Ok(())
    }

    /// Drops every queued range now.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.ranges.is_empty() {
            return Ok(());
        }
        let result = match &self.pidfd {
            Some(pidfd) => self.flush_batched(pidfd.as_raw_fd()),
            None => self.flush_one_by_one(),
        };
        self.ranges.clear();
        result
    }

    fn flush_batched(&self, pidfd: i32) -> io::Result<()> {
        let total: usize = self.ranges.iter().map(|r| r.iov_len).sum();
        // SAFETY: the iovecs describe private anonymous ranges of this process
        // whose contents the caller has saved; process_madvise only reads them.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                pidfd,
                self.ranges.as_ptr(),
                self.ranges.len(),
                libc::MADV_DONTNEED,
                0u32,
            )
        };
        if rc < 0 {
            let refused = io::Error::last_os_error();
            // A locked range among them (see `zap`): one by one, each with
            // its own way past the lock.
            return match refused.raw_os_error() {
                Some(libc::EINVAL) => self.flush_one_by_one(),
                _ => Err(refused),
            };
        }
        if (rc as usize) < total {
            // A partial advise (e.g. a concurrent munmap, or a locked range
            // after the first): finish one by one.
            return self.flush_one_by_one();
        }
        Ok(())
    }

    fn flush_one_by_one(&self) -> io::Result<()> {
        for r in &self.ranges {
            zap(r.iov_base as usize, r.iov_len)?;
        }
        Ok(())
    }

    /// Whether a flush is one `process_madvise` call rather than one madvise
    /// per range.
    pub fn batches_syscalls(&self) -> bool {
        self.pidfd.is_some()
    }
}

impl Default for Zapper {
    fn default() -> Self {
        Self::new()
    }
}

/// An eventfd used to tell blocked threads to stop.
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A non-blocking, close-on-exec eventfd whose counter starts at zero.
    pub fn new() -> Result<EventFd> {
        // SAFETY: eventfd takes an initial value and flags.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(Error::Os {
                what: "creating an eventfd",
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: `fd` is a fresh descriptor that we now own.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds one to the counter, which makes the eventfd readable until
    /// [`EventFd::drain`].
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a valid u64 to an eventfd.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter, so polls block again.
    pub fn drain(&self) {
        let mut value: u64 = 0;
        // SAFETY: reading 8 bytes into a valid u64 from a non-blocking eventfd.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut value as *mut u64).cast(), 8) };
    }

    /// In a forked child: a fresh eventfd under the same number.
    pub fn replace_in_child(&self) -> Result<()> {
        let fresh = EventFd::new()?;
        replace_fd(self.raw(), fresh.0).map_err(|source| Error::Os {
            what: "replacing an eventfd after fork",
            source,
        })
    }

    /// The descriptor, for poll(2).
    pub fn raw(&self) -> i32 {
        self.0.as_raw_fd()
    }
}

/// Why a runtime thread woke up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// The watched fd is readable.
    Ready,
    /// The runtime is stopping.
    Stop,
    /// The runtime is being paused (around a fork).
    Pause,
}

/// Blocks until `fd` is readable, or `stop` or `pause` is signalled.
pub fn wait_readable(fd: i32, stop: &EventFd, pause: &EventFd) -> Wake {
    let mut fds = [fd, stop.raw(), pause.raw()].map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    loop {
        // SAFETY: `fds` is a valid array of three pollfds.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 3, -1) };
        if rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return if fds[1].revents != 0 {
            Wake::Stop
        } else if fds[2].revents != 0 {
            Wake::Pause
        } else {
            Wake::Ready
        };
    }
}

/// Puts a fresh open file in place of `fd`'s, under the same number, so
/// every holder of the number now uses the new one. A forked child uses it
/// to stop sharing its parent's userfaultfd and eventfds.
pub fn replace_fd(fd: i32, fresh: OwnedFd) -> io::Result<()> {
    // SAFETY: dup3 onto a descriptor number we own; the old open file it
    // referred to is the parent's and stays open there.
    let rc = unsafe { libc::dup3(fresh.as_raw_fd(), fd, libc::O_CLOEXEC) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
