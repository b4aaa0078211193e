//! The io_uring pieces both ring users share: the handler threads' ring
//! ([`ring`](super::ring)) and the faulting threads' slots under signal
//! delivery ([`signal`](super::signal)). Setting up a ring that flags
//! waiting task work, and polling one for completions.

use std::io;

use io_uring::IoUring;

use crate::sys::now_ns;

/// The end of a thread's polling (a limit from its start), checked every
/// few spins only: reading the clock costs as much as a look at the ring.
pub(super) struct PollClock {
    deadline: u64,
    spins: u32,
    expired: bool,
}

impl PollClock {
    const SPINS_PER_CHECK: u32 = 32;
    const SPINS_PER_ENTRY: u32 = 128;

    pub fn start(limit_ns: u64) -> PollClock {
        PollClock {
            deadline: now_ns() + limit_ns,
            spins: 0,
            expired: false,
        }
    }

    /// Every so many spins, enter the kernel whatever the TASKRUN flag
    /// says: the kernel does not flag a ring whose completion joins task
    /// work the thread already has pending (another ring of the program's,
    /// say), and a look costs one system call per few microseconds.
    pub fn due_for_entry(&self) -> bool {
        self.spins.is_multiple_of(Self::SPINS_PER_ENTRY)
    }

    pub fn polling(&mut self) -> bool {
        self.spins += 1;
        if !self.expired && self.spins.is_multiple_of(Self::SPINS_PER_CHECK) {
            self.expired = now_ns() > self.deadline;
        }
        !self.expired
    }
}

/// A ring that flags waiting task work (`IORING_SETUP_COOP_TASKRUN |
/// IORING_SETUP_TASKRUN_FLAG`, Linux 5.19), and whether it got the flags: a
/// plain ring where the kernel refuses them. A read completes as task work
/// of the thread that submitted it; with the flags, the kernel runs it when
/// that thread next enters instead of interrupting it with an IPI, and
/// says in the ring that it should enter.
pub(super) fn cooperative_ring(entries: u32) -> io::Result<(IoUring, bool)> {
    crate::pins::own_ring(|| {
        let cooperative = IoUring::builder()
            .setup_coop_taskrun()
            .setup_taskrun_flag()
            .build(entries);
        match cooperative {
            Ok(ring) => Ok((ring, true)),
            Err(_) => IoUring::new(entries).map(|ring| (ring, false)),
        }
    })
}

/// Whether a polling thread must enter the kernel to see its completions:
/// without the TASKRUN flag on every look; with it, when the kernel says
/// task work waits, or when a refused submission is still queued.
pub(super) fn must_enter(ring: &mut IoUring, taskrun_flag: bool) -> bool {
    let queue = ring.submission();
    !taskrun_flag || queue.taskrun() || !queue.is_empty()
}
