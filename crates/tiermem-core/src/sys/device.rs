//! What the block device under a file can do, from sysfs.

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
