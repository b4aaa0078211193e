//! Descriptors owned by a runtime's threads, which a forked child closes.
//!
//! A child inherits every descriptor of its parent but none of its threads.
//! The rings of the parent's handlers and evictor and the evictor's pidfd
//! stay open in the child, where nothing uses or closes them: four or more
//! descriptors a generation, and each ring kept open there keeps the
//! parent's ring alive, its locked buffers charged, after the parent exits.
//! So the threads record what they open here, and the child's fork handler
//! closes it, and unmaps the rings' queues, before it starts threads of its
//! own.
//!
//! The table is a fixed array of atomics: the child reads it on its only
//! thread, and a thread recording or dropping a descriptor at the moment of
//! a fork leaves an entry that is either whole or empty. A descriptor is
//! closed only while its number still names the file recorded (its device
//! and inode), so a number the program reused after a late close keeps its
//! file.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use super::file_identity as identity;

/// Entries for every thread of a few runtimes at once; past that, a
/// descriptor is not recorded and stays open in children, as before.
const CAPACITY: usize = 128;
const EMPTY: i32 = -1;
/// Taken by a thread that is writing the entry.
const CLAIMED: i32 = -2;

static FDS: [AtomicI32; CAPACITY] = [const { AtomicI32::new(EMPTY) }; CAPACITY];
static INODES: [AtomicU64; CAPACITY] = [const { AtomicU64::new(0) }; CAPACITY];
static DEVICES: [AtomicU64; CAPACITY] = [const { AtomicU64::new(0) }; CAPACITY];

/// A recorded descriptor; the record goes when this drops, which the owner
/// makes happen before the descriptor closes (declare it first).
#[derive(Debug)]
pub struct Recorded(Option<usize>);

impl Drop for Recorded {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            FDS[i].store(EMPTY, Ordering::Release);
        }
    }
}

/// Records `fd`, a descriptor of the calling runtime thread's own.
pub fn record(fd: RawFd) -> Recorded {
    let Some((device, inode)) = identity(fd) else {
        return Recorded(None);
    };
    for (i, slot) in FDS.iter().enumerate() {
        let claimed = slot.compare_exchange(EMPTY, CLAIMED, Ordering::AcqRel, Ordering::Relaxed);
        if claimed.is_ok() {
            INODES[i].store(inode, Ordering::Relaxed);
            DEVICES[i].store(device, Ordering::Relaxed);
            slot.store(fd, Ordering::Release);
            return Recorded(Some(i));
        }
    }
    Recorded(None)
}

/// In a freshly forked child, on its only thread, before any runtime thread
/// starts: closes the parent threads' descriptors and unmaps what the child
/// still maps of them (a ring's queues), and forgets them all.
pub fn close_in_child() {
    let mut closed = Vec::new();
    for (i, slot) in FDS.iter().enumerate() {
        let fd = slot.swap(EMPTY, Ordering::AcqRel);
        let inode = INODES[i].load(Ordering::Relaxed);
        let recorded = (DEVICES[i].load(Ordering::Relaxed), inode);
        if fd >= 0 && identity(fd) == Some(recorded) {
            // SAFETY: `fd` still names the file the parent's thread opened,
            // which no thread of this process uses.
            unsafe { libc::close(fd) };
            closed.push(inode);
        }
    }
    if !closed.is_empty() {
        unmap_rings(&closed);
    }
}

/// Unmaps every ring queue of this process whose ring is one of `inodes`
/// (each ring has an anonymous inode of its own).
fn unmap_rings(inodes: &[u64]) {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    for (start, end) in maps
        .lines()
        .filter_map(parse_map_line)
        .filter(|(_, _, inode, path)| *path == RING_PATH && inodes.contains(inode))
        .map(|(start, end, _, _)| (start, end))
    {
        // SAFETY: the mapping is a closed ring's queue, which nothing in
        // this process reads or writes any more.
        unsafe { libc::munmap(start as *mut libc::c_void, end - start) };
    }
}

/// How `/proc/self/maps` names a ring's queues.
const RING_PATH: &str = "anon_inode:[io_uring]";

/// `start-end perms offset dev inode path` → (start, end, inode, path).
fn parse_map_line(line: &str) -> Option<(usize, usize, u64, &str)> {
    let mut fields = line.split_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let inode = fields.nth(3)?.parse().ok()?;
    let path = fields.next().unwrap_or("");
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    Some((start, end, inode, path))
}

#[cfg(test)]
mod tests {
    use super::{parse_map_line, RING_PATH};

    #[test]
    fn a_maps_line_gives_its_range_and_inode() {
        let line = "7f1c2a000000-7f1c2a004000 rw-s 00000000 00:10 1340354                    anon_inode:[io_uring]";
        assert_eq!(
            parse_map_line(line),
            Some((0x7f1c_2a00_0000, 0x7f1c_2a00_4000, 1_340_354, RING_PATH))
        );
        assert_eq!(
            parse_map_line("7f00-7f10 r--p 00000000 00:00 0"),
            Some((0x7f00, 0x7f10, 0, ""))
        );
        assert_eq!(parse_map_line("garbage"), None);
    }
}
