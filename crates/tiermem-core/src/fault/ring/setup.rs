//! The ring and its read buffers: how big, and how the ring is set up for
//! the configured polling mode.

use io_uring::IoUring;

use crate::fault::readahead::max_window_pages;
use crate::fault::uring::cooperative_ring;
use crate::io_config::PollMode;
use crate::shared::Shared;

/// Bytes of read buffer per handler, beyond one page per queue slot. The
/// buffers are registered with the ring, and the kernel charges them to
/// `RLIMIT_MEMLOCK` (8 MiB by default for an unprivileged user): 2 MiB per
/// handler keeps two handlers and `--encrypt`'s keys within it. A second
/// read-ahead window waits for buffers that the first one frees.
const BUFFER_BYTES: usize = 2 << 20;

/// Page-sized read buffers per ring handler: one per queue slot, and room
/// for read-ahead windows, `BUFFER_BYTES` in all (two windows at most; one
/// of the largest at 4 KiB pages).
pub(super) fn buffer_pages(rt: &Shared) -> usize {
    pages_for(rt.page_size, rt.config.io.depth)
}

fn pages_for(page_size: usize, depth: u32) -> usize {
    let max_window = max_window_pages(page_size) as usize;
    (depth as usize).max((BUFFER_BYTES / page_size).min(2 * max_window))
}

/// Bytes of read buffer one ring handler registers, and so locks, at
/// `page_size` with the default queue depth: what `tiermem doctor` checks
/// `RLIMIT_MEMLOCK` against.
pub fn default_buffer_bytes(page_size: usize) -> u64 {
    (pages_for(page_size, crate::io_config::DEFAULT_IO_DEPTH) * page_size) as u64
}

/// Bytes of read buffers a ring handler holds (outside the DRAM budget).
pub(crate) fn buffer_bytes(rt: &Shared) -> u64 {
    (buffer_pages(rt) * rt.page_size) as u64
}

/// The ring, its engine's name, and whether it flags waiting task work.
/// Without SQPOLL it is set up with `IORING_SETUP_COOP_TASKRUN |
/// IORING_SETUP_TASKRUN_FLAG` where the kernel has them (5.19): a read that
/// completes while the handler polls then costs no IPI from the interrupt
/// CPU, and the handler enters the kernel when the flag says so.
pub(super) fn build_ring(
    rt: &Shared,
    entries: u32,
) -> Result<(IoUring, &'static str, bool), String> {
    let poll = rt.config.io.poll;
    if matches!(poll, PollMode::Iopoll | PollMode::Hybrid) {
        note_no_device_polling(rt, poll);
    }
    if poll == PollMode::Sqpoll {
        match crate::pins::own_ring(|| IoUring::builder().setup_sqpoll(50).build(entries)) {
            Ok(ring) => return Ok((ring, "io_uring+sqpoll", false)),
            Err(e) => eprintln!(
                "tiermem: IORING_SETUP_SQPOLL refused ({e}); using interrupt-driven io_uring"
            ),
        }
    }
    cooperative_ring(entries)
        .map(|(ring, taskrun_flag)| (ring, "io_uring", taskrun_flag))
        .map_err(|e| format!("io_uring_setup: {e}"))
}

/// IOPOLL and hybrid polling take completions from the device's poll
/// queues, and a ring set up for them can carry nothing else (no polls on
/// the userfaultfd). Say once why page reads use interrupt-driven
/// completions instead; the handler still polls its ring for a completion
/// for up to `POLL_NS` while a thread waits for one of its reads.
fn note_no_device_polling(rt: &Shared, poll: PollMode) {
    static NOTED: std::sync::Once = std::sync::Once::new();
    let (fd, _) = rt.store().read_target(0);
    let why = match crate::sys::device::has_poll_queues(fd) {
        Err(why) => why,
        Ok(()) => "polled page reads need a ring of their own beside the one that watches the userfaultfd, which tiermem does not have yet".to_string(),
    };
    NOTED.call_once(|| {
        eprintln!(
            "tiermem: TIERMEM_IO_POLL={}: {why}; page reads use interrupt-driven completions",
            poll.name()
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unprivileged user's default `RLIMIT_MEMLOCK` (8 MiB) holds the
    /// registered buffers of two handlers (one per vCPU on a two-vCPU
    /// machine) and `--encrypt`'s locked keys, at 4 KiB pages.
    #[test]
    fn two_handlers_and_the_keys_fit_the_default_memlock_limit() {
        let two_handlers = 2 * default_buffer_bytes(4096);
        let keys = crate::encryption::keys_len() as u64;
        assert!(
            two_handlers + keys <= 8 << 20,
            "{two_handlers} bytes of buffers and {keys} of keys pass 8 MiB"
        );
        // At 4 KiB pages the cap, not two windows, sizes them: one window
        // of the largest size at a time.
        assert_eq!(default_buffer_bytes(4096), BUFFER_BYTES as u64);
        assert_eq!(BUFFER_BYTES as u64, max_window_pages(4096) * 4096);
    }
}
