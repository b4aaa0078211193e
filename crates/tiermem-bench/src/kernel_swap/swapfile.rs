//! The swap area: the checks that a filesystem can hold a swapfile, the
//! swapfile itself (created, its blocks allocated), swapon errors explained,
//! swapoff, the active areas of /proc/swaps and the system's swap counters
//! in /proc/vmstat; and the small system helpers the sandbox shares.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use tiermem_host::mounts::unescape_octal;

use crate::cgroup::read_stat_field;

/// Free space left over on the filesystem after the swapfile is allocated.
const FREE_SPACE_MARGIN: u64 = 64 << 20;

const TMPFS_MAGIC: u32 = 0x0102_1994;
const RAMFS_MAGIC: u32 = 0x8584_58f6;
const OVERLAYFS_MAGIC: u32 = 0x794c_7630;
const ZFS_MAGIC: u32 = 0x2fc1_2fc1;
const FUSE_MAGIC: u32 = 0x6573_5546;
const BTRFS_MAGIC: u32 = 0x9123_683e;

fn fs_name(magic: u32) -> String {
    match magic {
        TMPFS_MAGIC => "tmpfs".into(),
        RAMFS_MAGIC => "ramfs".into(),
        OVERLAYFS_MAGIC => "overlayfs".into(),
        ZFS_MAGIC => "zfs".into(),
        FUSE_MAGIC => "fuse".into(),
        BTRFS_MAGIC => "btrfs".into(),
        0xef53 => "ext2/3/4".into(),
        0x5846_5342 => "xfs".into(),
        0xf2f5_2010 => "f2fs".into(),
        0x6969 => "nfs".into(),
        other => format!("filesystem type {other:#x}"),
    }
}

/// Refuses filesystems that cannot hold swapfiles and checks free space.
/// Returns the filesystem magic.
pub(super) fn check_swap_filesystem(dir: &Path, swap_bytes: u64) -> anyhow::Result<u32> {
    let c_dir = path_cstring(dir)?;
    // SAFETY: statfs is plain data for which all-zeroes is valid.
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c_dir is a valid NUL-terminated path and sfs a writable statfs.
    if unsafe { libc::statfs(c_dir.as_ptr(), &mut sfs) } != 0 {
        let err = io::Error::last_os_error();
        return Err(err).with_context(|| format!("statfs {}", dir.display()));
    }
    // f_type is a signed word whose width varies; the magic is its low 32 bits.
    #[allow(clippy::unnecessary_cast)]
    let magic = sfs.f_type as u32;
    if matches!(
        magic,
        TMPFS_MAGIC | RAMFS_MAGIC | OVERLAYFS_MAGIC | ZFS_MAGIC | FUSE_MAGIC
    ) {
        bail!(
            "{} is on {}, which cannot hold a swapfile; put the backing file \
             (and so the swapfile) on a disk filesystem such as ext4 or xfs",
            dir.display(),
            fs_name(magic)
        );
    }

    // SAFETY: statvfs is plain data for which all-zeroes is valid.
    let mut svfs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c_dir is a valid NUL-terminated path and svfs a writable statvfs.
    if unsafe { libc::statvfs(c_dir.as_ptr(), &mut svfs) } != 0 {
        let err = io::Error::last_os_error();
        return Err(err).with_context(|| format!("statvfs {}", dir.display()));
    }
    #[allow(clippy::unnecessary_cast)]
    let available = (svfs.f_bavail as u64).saturating_mul(svfs.f_frsize as u64);
    let needed = swap_bytes.saturating_add(FREE_SPACE_MARGIN);
    if available < needed {
        bail!(
            "not enough free space in {} for a {} MiB swapfile: {} MiB available, \
             {} MiB needed (including a {} MiB margin)",
            dir.display(),
            swap_bytes >> 20,
            available >> 20,
            needed >> 20,
            FREE_SPACE_MARGIN >> 20
        );
    }
    Ok(magic)
}

/// Sets the btrfs no-copy-on-write flag on an empty file (best effort).
fn set_nocow(file: &File) {
    const FS_NOCOW_FL: libc::c_int = 0x0080_0000;
    let mut flags: libc::c_int = 0;
    // SAFETY: the fd is open for the duration of the call and the ioctl
    // writes one int into `flags`.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) } == 0 {
        flags |= FS_NOCOW_FL;
        // SAFETY: as above; the ioctl reads one int from `flags`.
        unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) };
    }
}

/// Gives the file `len` bytes of real blocks: fallocate, or zeros where the
/// filesystem does not support it.
fn allocate(file: &File, len: u64, path: &Path) -> anyhow::Result<()> {
    let off_len =
        libc::off_t::try_from(len).with_context(|| format!("swapfile size {len} is too large"))?;
    // SAFETY: the fd is open for writing; fallocate only acts on it.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, off_len) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {}
        Some(libc::ENOSPC) => bail!(
            "not enough free space for the {} MiB swapfile {}",
            len >> 20,
            path.display()
        ),
        _ => {
            return Err(err)
                .with_context(|| format!("allocating {len} bytes for swapfile {}", path.display()))
        }
    }
    // No fallocate on this filesystem: write zeros in large chunks.
    let chunk = vec![0u8; 8 << 20];
    let mut left = len;
    let mut writer = file;
    while left > 0 {
        let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
        writer
            .write_all(&chunk[..n])
            .with_context(|| format!("writing zeros to swapfile {}", path.display()))?;
        left -= n as u64;
    }
    file.sync_all()
        .with_context(|| format!("syncing swapfile {}", path.display()))
}

pub(super) fn swapon_error(path: &Path, err: &io::Error, fs_type: u32) -> String {
    let why = match err.raw_os_error() {
        Some(libc::EINVAL) => format!(
            "the kernel does not accept it as swap: {} may not support swapfiles \
             (btrfs needs a single-device, uncompressed filesystem; tmpfs, overlayfs, \
             zfs and fuse cannot), or the file has holes",
            fs_name(fs_type)
        ),
        Some(libc::EPERM) => "operation not permitted: the maximum number of swap areas \
                              is in use, or this environment (container?) forbids swapon"
            .to_string(),
        Some(libc::EBUSY) => "it is already in use as swap".to_string(),
        Some(libc::ENOSYS) => "the kernel was built without swap support".to_string(),
        _ => "swapon failed".to_string(),
    };
    format!("swapon {}: {err}: {why}", path.display())
}

/// swapoff, treating "not active (any more)" as success.
pub(super) fn swap_off(path: &Path) -> Result<(), String> {
    let c_path = path_cstring(path).map_err(|e| format!("{e:#}"))?;
    let mut attempts = 0;
    loop {
        // SAFETY: c_path is a valid NUL-terminated path that outlives the call.
        if unsafe { libc::swapoff(c_path.as_ptr()) } == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        attempts += 1;
        // swapoff gives up with EINTR when a signal arrives while it pages in.
        if err.raw_os_error() == Some(libc::EINTR) && attempts < 10 {
            continue;
        }
        let still_active = read_proc_swaps()
            .map(|swaps| swaps.iter().any(|s| s.path == path))
            .unwrap_or(true);
        if !still_active {
            return Ok(());
        }
        return Err(format!("swapoff {}: {err}", path.display()));
    }
}

/// The swap areas active now (files and devices, from /proc/swaps).
pub fn active_swaps() -> io::Result<Vec<PathBuf>> {
    Ok(read_proc_swaps()?.into_iter().map(|s| s.path).collect())
}

/// swapoff `path` if it is an active swap area; nothing otherwise.
pub(crate) fn swap_off_if_active(path: &Path) -> Result<(), String> {
    let active = read_proc_swaps()
        .map_err(|e| format!("reading /proc/swaps: {e}"))?
        .iter()
        .any(|s| s.path == path);
    if active {
        swap_off(path)
    } else {
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub(super) struct SwapArea {
    pub(super) path: PathBuf,
    pub(super) priority: i64,
}

pub(super) fn read_proc_swaps() -> io::Result<Vec<SwapArea>> {
    let text = std::fs::read_to_string("/proc/swaps")?;
    Ok(text
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let path = PathBuf::from(unescape_octal(fields.first()?));
            let priority = fields.get(4).and_then(|p| p.parse().ok()).unwrap_or(0);
            Some(SwapArea { path, priority })
        })
        .collect())
}

pub(super) fn vmstat(key: &str) -> Option<u64> {
    read_stat_field(Path::new("/proc/vmstat"), key).ok()
}

/// Pages swapped in since boot, read-ahead included, by the whole system
/// (`pswpin` in `/proc/vmstat`; the kernel does not count it per cgroup).
pub fn read_swap_ins() -> anyhow::Result<u64> {
    read_stat_field(Path::new("/proc/vmstat"), "pswpin")
}

/// Creates the swapfile (mode 0600, its blocks allocated), recording it in
/// `created` (the sandbox's state) as soon as it exists so that teardown
/// deletes it.
pub(super) fn create_swapfile(
    path: &Path,
    swap_bytes: u64,
    fs_type: u32,
    created: &mut bool,
) -> anyhow::Result<()> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("creating swapfile {}", path.display()))?;
    *created = true;
    // Whatever the umask: swap must not be readable by other users.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("setting mode 0600 on {}", path.display()))?;
    if fs_type == BTRFS_MAGIC {
        // btrfs only takes swapfiles that are not copy-on-write; the flag
        // must be set while the file is empty. Failure shows up at swapon.
        set_nocow(&file);
    }
    allocate(&file, swap_bytes, path)
}

// ---------------------------------------------------------------------------
// Small helpers

/// Looks for a system tool in PATH, then in /usr/sbin and /sbin.
pub(super) fn find_tool(name: &str) -> Option<PathBuf> {
    let path_dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    path_dirs
        .into_iter()
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

pub(super) fn path_cstring(path: &Path) -> anyhow::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("path {} contains a NUL byte", path.display()))
}

pub(super) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn swap_ins_are_read_from_proc_vmstat() {
        // Every kernel with swap support has the line, 0 or more.
        if Path::new("/proc/swaps").exists() {
            read_swap_ins().expect("pswpin in /proc/vmstat");
        }
    }

    #[test]
    fn unescapes_proc_paths() {
        assert_eq!(unescape_octal("/a\\040b"), "/a b");
        assert_eq!(unescape_octal("/a\\011b\\134"), "/a\tb\\");
        assert_eq!(unescape_octal("/plain"), "/plain");
        assert_eq!(unescape_octal("/x\\04"), "/x\\04");
    }
}
