//! userfaultfd: opening it, registering ranges, and resolving faults.
//!
//! Full userfaultfd only (never `UFFD_USER_MODE_ONLY`): a kernel access to a
//! missing page, such as `read(2)` into a tiered buffer, must wait for the
//! handler instead of failing with EFAULT.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use linux_raw_sys::general as uapi;
use linux_raw_sys::ioctl;

use crate::error::{Error, Result};

/// `USERFAULTFD_IOC_NEW` on /dev/userfaultfd: `_IO(0xAA, 0x00)`.
const USERFAULTFD_IOC_NEW: libc::c_ulong = 0xAA00;

/// `UFFDIO_WRITEPROTECT_MODE_WP` (missing from the bindings).
const WRITEPROTECT_MODE_WP: u64 = 1;
/// `UFFDIO_WRITEPROTECT_MODE_DONTWAKE`: clear without waking the writer.
const WRITEPROTECT_MODE_DONTWAKE: u64 = 2;

/// `UFFDIO_POISON`: `_IOWR(0xAA, 0x08, struct uffdio_poison)` (missing from
/// the bindings' ioctl list).
const UFFDIO_POISON: libc::c_ulong = 0xC020_AA08;

/// `UFFDIO_MOVE`: `_IOWR(0xAA, 0x05, struct uffdio_move)` (missing from
/// the bindings' ioctl list).
const UFFDIO_MOVE: libc::c_ulong = 0xC028_AA05;

/// Test hook: pretend userfaultfd is not permitted (see the bad-input tests).
pub const ENV_DENY_UFFD_FOR_TESTS: &str = "TIERMEM_TEST_DENY_UFFD";

/// A fault read from the userfaultfd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The address that faulted, as the kernel reports it.
    pub address: usize,
    /// The access was a write.
    pub write: bool,
    /// The page was present but write-protected (a dirty-tracking fault).
    pub write_protect: bool,
    /// The faulting thread, for diagnostics and signal delivery.
    pub thread_id: u32,
}

/// Outcome of an `UFFDIO_COPY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copied {
    /// All bytes were installed and waiters woken.
    Done,
    /// A page was already present (someone else resolved its fault) after
    /// `installed` bytes of the range were installed.
    AlreadyPresent {
        /// Bytes of the range installed before the present page.
        installed: usize,
    },
    /// A non-cooperative event is pending; nothing (or `n` bytes) was copied.
    Retry(usize),
}

/// Outcome of moving a page out of the tiered region ([`Uffd::move_page`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveOut {
    /// The page now lives at the destination; its old address is empty.
    Moved,
    /// The kernel keeps the page where it is: it is pinned (I/O in flight
    /// may still write it), or not exclusively the process's (shared with
    /// a forked child, or once shared and not written since).
    Busy,
    /// The range cannot move (e.g. `mprotect`ed read-only, or no
    /// `UFFDIO_MOVE` on this kernel); nothing changed.
    Unsupported,
}

/// An open userfaultfd, closed on drop.
pub struct Uffd {
    fd: OwnedFd,
    /// Faults raise SIGBUS in the faulting thread instead of queueing a
    /// message (`UFFD_FEATURE_SIGBUS`); kept for the replacement after fork.
    sigbus: bool,
    /// The handshake enabled `UFFDIO_MOVE` (Linux 6.8+).
    moves: std::sync::atomic::AtomicBool,
}

impl Uffd {
    /// Opens a userfaultfd through the syscall, falling back to
    /// /dev/userfaultfd, and says exactly how to fix it when neither works.
    pub fn open(sigbus: bool) -> Result<Uffd> {
        if std::env::var_os(ENV_DENY_UFFD_FOR_TESTS).is_some() {
            return Err(Error::UffdNotPermitted {
                syscall_error: io::Error::from_raw_os_error(libc::EPERM),
                device_error: io::Error::from_raw_os_error(libc::EACCES),
            });
        }
        // Non-blocking: handler threads poll the fd together with a stop event.
        let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
        // SAFETY: the userfaultfd syscall takes only an integer flag word.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
        if fd >= 0 {
            return Ok(Self::from_raw(fd as RawFd, sigbus));
        }
        let syscall_error = io::Error::last_os_error();
        match Self::open_device(flags, sigbus) {
            Ok(u) => Ok(u),
            Err(device_error) => Err(Error::UffdNotPermitted {
                syscall_error,
                device_error,
            }),
        }
    }

    /// A full userfaultfd through /dev/userfaultfd only (`tiermem doctor`
    /// tells this way from the syscall apart).
    pub fn open_device(flags: i32, sigbus: bool) -> io::Result<Uffd> {
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/userfaultfd")?;
        // SAFETY: USERFAULTFD_IOC_NEW takes the flags as its integer argument
        // and returns a new file descriptor.
        let fd = unsafe { libc::ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW, flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self::from_raw(fd, sigbus))
    }

    fn from_raw(fd: RawFd, sigbus: bool) -> Uffd {
        // SAFETY: both callers pass a descriptor the kernel has just returned
        // (they check it is not negative), so it is open and owned by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Uffd {
            fd,
            sigbus,
            moves: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Negotiates the API. Write-protect faults are required for dirty
    /// tracking; thread ids let a bad access be reported to its thread;
    /// SIGBUS delivery if the userfaultfd was opened for it; `UFFDIO_MOVE`
    /// where the kernel has it (eviction that respects pinned pages).
    pub fn handshake(&self) -> Result<()> {
        let mut wanted = uapi::UFFD_FEATURE_PAGEFAULT_FLAG_WP | uapi::UFFD_FEATURE_THREAD_ID;
        if self.sigbus {
            wanted |= uapi::UFFD_FEATURE_SIGBUS;
        }
        let moves = Self::supported_features() & uapi::UFFD_FEATURE_MOVE as u64 != 0;
        if moves {
            wanted |= uapi::UFFD_FEATURE_MOVE;
        }
        let mut api = uapi::uffdio_api {
            api: uapi::UFFD_API as u64,
            features: wanted as u64,
            ioctls: 0,
        };
        // SAFETY: `api` is a valid uffdio_api the kernel reads and writes.
        let rc = unsafe { libc::ioctl(self.raw(), ioctl::UFFDIO_API as _, &mut api) };
        if rc != 0 {
            let what = match self.sigbus {
                true => "write-protect faults and SIGBUS delivery",
                false => "write-protect faults",
            };
            return Err(Error::UffdFeatureMissing {
                missing: format!("{what} ({})", io::Error::last_os_error()),
            });
        }
        self.moves
            .store(moves, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// The features this kernel offers, asked of a throwaway userfaultfd:
    /// a handshake can be made once per descriptor, and asking for a
    /// feature the kernel lacks fails it.
    fn supported_features() -> u64 {
        Self::probe_features().unwrap_or(0)
    }

    /// The `UFFD_FEATURE_*` bits this kernel offers (a throwaway
    /// userfaultfd, opened as [`Uffd::open`] does, asked with `UFFDIO_API`
    /// and no features, which the kernel answers with all of them), or why
    /// none could be asked (`tiermem doctor` reports both).
    pub fn probe_features() -> Result<u64> {
        let probe = Uffd::open(false)?;
        let mut api = uapi::uffdio_api {
            api: uapi::UFFD_API as u64,
            features: 0,
            ioctls: 0,
        };
        // SAFETY: `api` is a valid uffdio_api the kernel reads and writes.
        let rc = unsafe { libc::ioctl(probe.raw(), ioctl::UFFDIO_API as _, &mut api) };
        if rc != 0 {
            return Err(Error::Os {
                what: "asking userfaultfd for its features (UFFDIO_API)",
                source: io::Error::last_os_error(),
            });
        }
        Ok(api.features)
    }

    /// Whether [`Uffd::move_page`] can work here.
    pub fn can_move(&self) -> bool {
        self.moves.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Moves the page at `src` to the empty page at `dst` (`UFFDIO_MOVE`),
    /// unless the kernel refuses. The kernel clears the page table entry
    /// and checks the pin count in one step, so no pin can start in
    /// between: after `Moved`, I/O that wants the page faults it back in.
    /// Both pages must lie in ranges registered with this userfaultfd.
    pub fn move_page(&self, dst: usize, src: usize, len: usize) -> io::Result<MoveOut> {
        if !self.can_move() {
            return Ok(MoveOut::Unsupported);
        }
        self.move_once(dst, src, len)
    }

    fn move_once(&self, dst: usize, src: usize, len: usize) -> io::Result<MoveOut> {
        loop {
            let mut arg = uapi::uffdio_move {
                dst: dst as u64,
                src: src as u64,
                len: len as u64,
                mode: 0,
                move_: 0,
            };
            // SAFETY: `arg` is a valid uffdio_move; the kernel checks that
            // both ranges are registered anonymous memory.
            let rc = unsafe { libc::ioctl(self.raw(), UFFDIO_MOVE as _, &mut arg) };
            if rc == 0 {
                return Ok(MoveOut::Moved);
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EAGAIN) => std::thread::yield_now(),
                Some(libc::EBUSY) => return Ok(MoveOut::Busy),
                Some(libc::EINVAL) => return Ok(MoveOut::Unsupported),
                _ => return Err(err),
            }
        }
    }

    /// Registers `[start, start+len)` for missing and write-protect faults.
    pub fn register(&self, start: usize, len: usize) -> Result<()> {
        let mut reg = uapi::uffdio_register {
            range: uapi::uffdio_range {
                start: start as u64,
                len: len as u64,
            },
            mode: (uapi::UFFDIO_REGISTER_MODE_MISSING | uapi::UFFDIO_REGISTER_MODE_WP) as u64,
            ioctls: 0,
        };
        // SAFETY: `reg` is a valid uffdio_register the kernel reads and writes.
        let rc = unsafe { libc::ioctl(self.raw(), ioctl::UFFDIO_REGISTER as _, &mut reg) };
        if rc != 0 {
            return Err(Error::Os {
                what: "registering the tiered region with userfaultfd",
                source: io::Error::last_os_error(),
            });
        }
        let needed = 1u64 << uapi::_UFFDIO_COPY | 1u64 << uapi::_UFFDIO_WRITEPROTECT;
        if reg.ioctls & needed != needed {
            return Err(Error::UffdFeatureMissing {
                missing: "UFFDIO_COPY or UFFDIO_WRITEPROTECT on anonymous memory".into(),
            });
        }
        Ok(())
    }

    /// Stops handling faults in `[start, start+len)`; a range that was not
    /// registered is left as it is.
    pub fn unregister(&self, start: usize, len: usize) {
        let mut range = uapi::uffdio_range {
            start: start as u64,
            len: len as u64,
        };
        // SAFETY: `range` is a valid uffdio_range; failure only means the
        // range was not registered, which is harmless at teardown.
        unsafe { libc::ioctl(self.raw(), ioctl::UFFDIO_UNREGISTER as _, &mut range) };
    }

    /// Reads up to `out.len()` faults; blocks until at least one is there.
    /// Non-fault events are skipped (none are enabled).
    pub fn read_faults(&self, raw: &mut [uapi::uffd_msg], out: &mut Vec<Fault>) -> io::Result<()> {
        out.clear();
        let bytes = std::mem::size_of_val(raw);
        // SAFETY: `raw` is a writable buffer of `bytes` bytes of plain-old-data messages.
        let n = unsafe { libc::read(self.raw(), raw.as_mut_ptr().cast(), bytes) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let count = n as usize / std::mem::size_of::<uapi::uffd_msg>();
        for msg in &raw[..count] {
            if msg.event as u32 != uapi::UFFD_EVENT_PAGEFAULT {
                continue;
            }
            // SAFETY: for UFFD_EVENT_PAGEFAULT the kernel fills the `pagefault` member.
            let pf = unsafe { msg.arg.pagefault };
            let flags = pf.flags as u32;
            out.push(Fault {
                address: pf.address as usize,
                write: flags & uapi::UFFD_PAGEFAULT_FLAG_WRITE != 0,
                write_protect: flags & uapi::UFFD_PAGEFAULT_FLAG_WP != 0,
                // SAFETY: with UFFD_FEATURE_THREAD_ID the `ptid` member is filled.
                thread_id: unsafe { pf.feat.ptid },
            });
        }
        Ok(())
    }

    /// Installs `len` bytes from `src` at `dst`, write-protected when
    /// `write_protect`, and (with `wake`) wakes the threads waiting on it.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes; `dst..dst+len` must lie in a
    /// registered range, aligned to the base page size.
    pub unsafe fn copy(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
        write_protect: bool,
        wake: bool,
    ) -> io::Result<Copied> {
        let mut done = 0usize;
        while done < len {
            let mut arg = uapi::uffdio_copy {
                dst: (dst + done) as u64,
                src: src.add(done) as u64,
                len: (len - done) as u64,
                mode: if write_protect {
                    uapi::UFFDIO_COPY_MODE_WP as u64
                } else {
                    0
                } | if wake {
                    0
                } else {
                    uapi::UFFDIO_COPY_MODE_DONTWAKE as u64
                },
                copy: 0,
            };
            // SAFETY: the caller guarantees `src` and `dst` cover `len` bytes;
            // `arg` is a valid uffdio_copy.
            let rc = libc::ioctl(self.raw(), ioctl::UFFDIO_COPY as _, &mut arg);
            if rc == 0 {
                return Ok(Copied::Done);
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EEXIST) => return Ok(Copied::AlreadyPresent { installed: done }),
                Some(libc::EAGAIN) => {
                    if arg.copy > 0 {
                        done += arg.copy as usize;
                        continue;
                    }
                    return Ok(Copied::Retry(done));
                }
                _ => return Err(err),
            }
        }
        Ok(Copied::Done)
    }

    /// Sets (`protect`) or clears write protection on a range. Clearing wakes
    /// the threads waiting on it.
    pub fn write_protect(&self, start: usize, len: usize, protect: bool) -> io::Result<()> {
        self.write_protect_mode(start, len, if protect { WRITEPROTECT_MODE_WP } else { 0 })
    }

    /// Clears write protection on a range without waking the threads
    /// waiting on it (the caller wakes them later).
    pub fn unprotect_quietly(&self, start: usize, len: usize) -> io::Result<()> {
        self.write_protect_mode(start, len, WRITEPROTECT_MODE_DONTWAKE)
    }

    fn write_protect_mode(&self, start: usize, len: usize, mode: u64) -> io::Result<()> {
        let mut arg = uapi::uffdio_writeprotect {
            range: uapi::uffdio_range {
                start: start as u64,
                len: len as u64,
            },
            mode,
        };
        self.ioctl_until_done(ioctl::UFFDIO_WRITEPROTECT as _, &mut arg)
    }

    /// A range ioctl, retried while the kernel says EAGAIN (the mm is
    /// changing under it, e.g. during a fork).
    fn ioctl_until_done<T>(&self, request: libc::c_ulong, arg: &mut T) -> io::Result<()> {
        loop {
            // SAFETY: every caller passes the argument struct `request`
            // expects, valid for the kernel to read and write.
            let rc = unsafe { libc::ioctl(self.raw(), request as _, arg as *mut T) };
            if rc == 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EAGAIN) {
                return Err(err);
            }
            std::thread::yield_now();
        }
    }

    /// Marks a missing page as lost (`UFFDIO_POISON`, Linux 6.6+): every
    /// access to it gets SIGBUS, as a page with a hardware memory error
    /// does, until it is unmapped or discarded. Wakes the threads waiting on
    /// it, which then take the SIGBUS.
    pub fn poison(&self, start: usize, len: usize) -> io::Result<()> {
        let mut arg = uapi::uffdio_poison {
            range: uapi::uffdio_range {
                start: start as u64,
                len: len as u64,
            },
            mode: 0,
            updated: 0,
        };
        self.ioctl_until_done(UFFDIO_POISON, &mut arg)
    }

    /// Wakes threads waiting on a range whose fault was resolved elsewhere.
    pub fn wake(&self, start: usize, len: usize) {
        let mut range = uapi::uffdio_range {
            start: start as u64,
            len: len as u64,
        };
        // SAFETY: `range` is a valid uffdio_range. A failed wake means nobody
        // was waiting, which is fine.
        unsafe { libc::ioctl(self.raw(), ioctl::UFFDIO_WAKE as _, &mut range) };
    }

    /// In a forked child: a fresh userfaultfd under the same number. The
    /// child's copy of the arena lost its registration at fork (there is no
    /// EVENT_FORK without CAP_SYS_PTRACE); the caller registers it again.
    pub fn replace_in_child(&self) -> Result<()> {
        let fresh = Uffd::open(self.sigbus)?;
        fresh.handshake()?;
        crate::sys::mem::replace_fd(self.raw(), fresh.fd).map_err(|source| Error::Os {
            what: "replacing the userfaultfd after fork",
            source,
        })
    }

    /// The descriptor, for poll(2).
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A zeroed message buffer for [`Uffd::read_faults`].
pub fn message_buffer(len: usize) -> Vec<uapi::uffd_msg> {
    // SAFETY: uffd_msg is plain old data; all-zero is a valid value.
    vec![unsafe { std::mem::zeroed::<uapi::uffd_msg>() }; len]
}
