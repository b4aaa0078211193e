//! What the block device under a file can do, from sysfs and `statx`.

use std::os::fd::RawFd;
use std::path::PathBuf;

/// Whether the block device holding `fd` (a file on it, or the device
/// itself) has poll queues, which IORING_SETUP_IOPOLL needs. The error says
/// why not, in words fit for a note to the user.
pub fn has_poll_queues(fd: RawFd) -> Result<(), String> {
    let queue = queue_dir(fd)?;
    let path = queue.join("io_poll");
    let value = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if value.trim() == "1" {
        Ok(())
    } else {
        Err(format!(
            "the backing device has no poll queues ({} is {})",
            path.display(),
            value.trim()
        ))
    }
}

/// `/sys/dev/block/MAJ:MIN/queue` of the whole disk under `fd`.
fn queue_dir(fd: RawFd) -> Result<PathBuf, String> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is a writable stat buffer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(format!(
            "fstat of the backing store: {}",
            std::io::Error::last_os_error()
        ));
    }
    let dev = if st.st_mode & libc::S_IFMT == libc::S_IFBLK {
        st.st_rdev
    } else {
        st.st_dev
    };
    let node = PathBuf::from(format!(
        "/sys/dev/block/{}:{}",
        libc::major(dev),
        libc::minor(dev)
    ));
    // A partition's queue is its disk's.
    let disk = if node.join("partition").exists() {
        node.join("..")
    } else {
        node
    };
    Ok(disk.join("queue"))
}

/// `statx`'s direct I/O alignments of `file`, (memory, offset) in bytes:
/// `None` where the kernel or filesystem gives no answer. An offset
/// alignment of 0 means the filesystem serves O_DIRECT from the page cache
/// (ext4 mounted `data=journal`).
pub fn direct_io_alignment(file: &std::fs::File) -> Option<(u32, u32)> {
    use std::os::fd::AsRawFd;
    // SAFETY: statx is plain data; all-zero is a valid value to overwrite.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx on our own descriptor (empty path) writes into `st`.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut st,
        )
    };
    (rc == 0 && st.stx_mask & libc::STATX_DIOALIGN != 0)
        .then_some((st.stx_dio_mem_align, st.stx_dio_offset_align))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn the_answer_names_the_sysfs_file_or_why_it_is_missing() {
        let f = std::fs::File::open("/proc/self/exe").expect("open");
        match has_poll_queues(f.as_raw_fd()) {
            Ok(()) => {}
            Err(why) => assert!(
                why.contains("io_poll") || why.contains("/sys/dev/block"),
                "{why}"
            ),
        }
    }
}
