//! The thing being measured: a private test file in a directory, an
//! existing regular file, or a block device — opened with O_DIRECT when the
//! filesystem allows it, and never writable unless writing is safe.
//!
//! Cleanup: the private test file is created with O_TMPFILE (or created and
//! unlinked at once where O_TMPFILE is unsupported), so it has no name and
//! disappears when its descriptor closes — on return, on error, on panic
//! and on SIGKILL alike.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::buffer::AlignedBuf;
use crate::config::DeviceConfig;

/// What kind of path is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// A directory: a private, unnamed test file is created in it.
    Directory,
    /// An existing regular file, measured in place.
    RegularFile,
    /// A block device, measured in place.
    BlockDevice,
}

/// Whether I/O bypasses the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoMode {
    /// O_DIRECT: every I/O reaches the device.
    Direct,
    /// Buffered: the filesystem refused O_DIRECT; results measure the page cache.
    Buffered,
}

/// An opened target, ready for jobs.
pub(crate) struct Target {
    file: File,
    pub kind: TargetKind,
    /// Bytes usable for I/O, from offset 0.
    pub size: u64,
    pub io_mode: IoMode,
    /// Opened for writing (write jobs allowed).
    pub writable: bool,
    /// A fresh private test file that must be filled before reads.
    pub needs_fill: bool,
    /// Notes for the report.
    pub notes: Vec<String>,
}

impl Target {
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// Directory, regular file or block device?
pub(crate) fn classify(path: &Path) -> Result<TargetKind> {
    let md = std::fs::metadata(path)
        .with_context(|| format!("cannot measure {}: stat failed", path.display()))?;
    let ft = md.file_type();
    if ft.is_dir() {
        Ok(TargetKind::Directory)
    } else if ft.is_file() {
        Ok(TargetKind::RegularFile)
    } else if ft.is_block_device() {
        Ok(TargetKind::BlockDevice)
    } else {
        bail!(
            "cannot measure {}: not a directory, regular file or block device",
            path.display()
        )
    }
}

/// The write guard. Our own private test file may always be written; an
/// existing file or a block device holds someone's data and is written
/// only when explicitly allowed.
pub(crate) fn may_write(kind: TargetKind, allow_write: bool) -> bool {
    match kind {
        TargetKind::Directory => true,
        TargetKind::RegularFile | TargetKind::BlockDevice => allow_write,
    }
}

/// open(2) flags for an existing file or block device (O_DIRECT and
/// O_CLOEXEC are added separately). A target that may not be written is
/// opened O_RDONLY, so not even a bug could write to it. A block device
/// opened for writing also gets O_EXCL, which fails if it is mounted.
pub(crate) fn existing_open_flags(kind: TargetKind, allow_write: bool) -> libc::c_int {
    if !may_write(kind, allow_write) {
        libc::O_RDONLY
    } else if kind == TargetKind::BlockDevice {
        libc::O_RDWR | libc::O_EXCL
    } else {
        libc::O_RDWR
    }
}

fn is_memory_fs(fs_type: Option<&str>, block_device: Option<&str>) -> bool {
    matches!(fs_type, Some("tmpfs" | "ramfs" | "devtmpfs" | "hugetlbfs"))
        || block_device.is_some_and(|b| b.starts_with("zram") || b.starts_with("ram"))
}

/// Open `cfg.path` for measurement.
pub(crate) fn open_target(
    cfg: &DeviceConfig,
    fs_type: Option<&str>,
    block_device: Option<&str>,
) -> Result<Target> {
    let path = cfg.path.as_path();
    let kind = classify(path)?;
    let writable = may_write(kind, cfg.allow_write);
    let mut notes = Vec::new();

    let (file, direct) = match kind {
        TargetKind::Directory => open_private_file(path)?,
        TargetKind::RegularFile | TargetKind::BlockDevice => {
            open_existing(path, existing_open_flags(kind, cfg.allow_write))?
        }
    };

    let size = match kind {
        TargetKind::Directory => prepare_private_file(&file, path, cfg)?,
        TargetKind::RegularFile => {
            let md = file
                .metadata()
                .with_context(|| format!("stat {}", path.display()))?;
            let size = md.len() / cfg.rand_block_size * cfg.rand_block_size;
            if md.blocks() * 512 < md.len() / 10 * 9 {
                notes.push(format!(
                    "{} is sparse ({} of {} bytes allocated): reads of holes return zeros \
                     without touching the device, so read results are optimistic",
                    path.display(),
                    md.blocks() * 512,
                    md.len()
                ));
            }
            size
        }
        TargetKind::BlockDevice => {
            let mut f = &file;
            let end = f
                .seek(SeekFrom::End(0))
                .with_context(|| format!("cannot find the size of {}", path.display()))?;
            end / cfg.rand_block_size * cfg.rand_block_size
        }
    };
    let min = 2 * cfg.seq_block_size.max(cfg.rand_block_size);
    if size < min {
        bail!(
            "{} is too small to measure: {} usable bytes, need at least {}",
            path.display(),
            size,
            min
        );
    }

    // Some filesystems accept O_DIRECT at open and refuse it per I/O.
    let mut io_mode = if direct {
        IoMode::Direct
    } else {
        IoMode::Buffered
    };
    if direct {
        if let Err(e) = probe_io(&file, writable && kind == TargetKind::Directory) {
            if e.raw_os_error() == Some(libc::EINVAL) {
                clear_o_direct(&file)
                    .with_context(|| format!("turning off O_DIRECT on {}", path.display()))?;
                io_mode = IoMode::Buffered;
            } else {
                return Err(e).with_context(|| format!("first I/O on {} failed", path.display()));
            }
        }
    }
    let fs_desc = fs_type.unwrap_or("this filesystem");
    if io_mode == IoMode::Buffered {
        notes.push(format!(
            "WARNING: {fs_desc} refused O_DIRECT (EINVAL); using buffered I/O. \
             RESULTS MEASURE THE PAGE CACHE, NOT THE DEVICE."
        ));
    }
    if is_memory_fs(fs_type, block_device) {
        notes.push(format!(
            "WARNING: {} is memory-backed ({}); results measure RAM and the kernel's copy \
             path, not a storage device.",
            path.display(),
            block_device
                .filter(|_| fs_type.is_none())
                .or(fs_type)
                .unwrap_or("ram")
        ));
    }
    match kind {
        TargetKind::Directory => notes.push(
            "the private test file was filled with random data by the sequential 1 MiB write \
             job before any read (unwritten extents would read as zeros without touching the \
             device); that fill is the sequential-write figure"
                .into(),
        ),
        _ if !writable => notes.push(format!(
            "write tests skipped: {} is {} and was opened read-only \
             (--allow-write overwrites its contents)",
            path.display(),
            if kind == TargetKind::BlockDevice {
                "a block device"
            } else {
                "an existing file"
            }
        )),
        _ => notes.push(format!(
            "--allow-write: write tests overwrote data in {}",
            path.display()
        )),
    }

    Ok(Target {
        file,
        kind,
        size,
        io_mode,
        writable,
        needs_fill: kind == TargetKind::Directory,
        notes,
    })
}

fn open_existing(path: &Path, flags: libc::c_int) -> Result<(File, bool)> {
    let open = |direct: bool| {
        let acc = flags & libc::O_ACCMODE;
        let mut o = OpenOptions::new();
        o.read(true)
            .write(acc == libc::O_RDWR)
            .custom_flags((flags & !libc::O_ACCMODE) | if direct { libc::O_DIRECT } else { 0 });
        o.open(path)
    };
    match open(true) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let f = open(false).with_context(|| format!("cannot open {}", path.display()))?;
            Ok((f, false))
        }
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(e).with_context(|| {
            format!(
                "cannot open {} for writing: it is in use (mounted?)",
                path.display()
            )
        }),
        Err(e) => Err(e).with_context(|| format!("cannot open {}", path.display())),
    }
}

/// Create an unnamed 0600 file in `dir`. Returns the file and whether
/// O_DIRECT was accepted.
fn open_private_file(dir: &Path) -> Result<(File, bool)> {
    match create_unnamed(dir, true) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let f = create_unnamed(dir, false)
                .with_context(|| format!("cannot create a test file in {}", dir.display()))?;
            Ok((f, false))
        }
        Err(e) => Err(e).with_context(|| format!("cannot create a test file in {}", dir.display())),
    }
}

fn create_unnamed(dir: &Path, direct: bool) -> io::Result<File> {
    let extra = if direct { libc::O_DIRECT } else { 0 };
    let tmp = OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | extra)
        .open(dir);
    match tmp {
        Ok(f) => return Ok(f),
        // Permission, space and path problems would recur below.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EACCES | libc::EPERM | libc::EROFS | libc::ENOSPC | libc::ENOENT)
            ) =>
        {
            return Err(e)
        }
        // O_TMPFILE unsupported (EOPNOTSUPP, EISDIR on old kernels, EINVAL
        // on some filesystems): fall through to a named, unlinked file.
        Err(_) => {}
    }
    for _ in 0..16 {
        let name: PathBuf = dir.join(format!(
            ".tiermem-device-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        let r = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(extra)
            .open(&name);
        match r {
            Ok(f) => {
                // Unlink at once: from here on no path can leak the file.
                if let Err(e) = std::fs::remove_file(&name) {
                    drop(f);
                    let _ = std::fs::remove_file(&name);
                    return Err(e);
                }
                return Ok(f);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                // O_DIRECT is checked after the file is created, so an
                // EINVAL can leave our (unique, random) name behind.
                let _ = std::fs::remove_file(&name);
                return Err(e);
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "could not pick an unused test file name",
    ))
}

/// Size the private file: check free space, reserve with fallocate.
fn prepare_private_file(file: &File, dir: &Path, cfg: &DeviceConfig) -> Result<u64> {
    let size = cfg.file_size / cfg.seq_block_size * cfg.seq_block_size;
    // SAFETY: `statvfs` is plain old data; all-zero is valid.
    let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is open and `sv` is valid and writable.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), &mut sv) } == 0 {
        let avail = sv.f_bavail as u64 * sv.f_frsize as u64;
        let margin = 64 << 20;
        if avail < size + margin {
            bail!(
                "not enough free space in {}: the test file needs {} MiB (+64 MiB margin), \
                 {} MiB available; use a smaller --size",
                dir.display(),
                size >> 20,
                avail >> 20
            );
        }
    }
    let len = libc::off_t::try_from(size).context("test file size too large")?;
    // SAFETY: plain syscall on an open descriptor.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOSPC) {
            return Err(e)
                .with_context(|| format!("no space for the test file in {}", dir.display()));
        }
        file.set_len(size)
            .with_context(|| format!("cannot size the test file in {}", dir.display()))?;
    }
    Ok(size)
}

/// One aligned 4 KiB I/O at offset 0 to see whether O_DIRECT really works.
fn probe_io(file: &File, write: bool) -> io::Result<()> {
    let buf = AlignedBuf::new(1, 4096)?;
    let fd = file.as_raw_fd();
    // SAFETY: the buffer is a live 4 KiB mapping owned by `buf` for the
    // duration of the call.
    let n = unsafe {
        if write {
            libc::pwrite(fd, buf.slot_ptr(0).cast(), 4096, 0)
        } else {
            libc::pread(fd, buf.slot_ptr(0).cast(), 4096, 0)
        }
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn clear_o_direct(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on an open descriptor with integer arguments.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_DIRECT) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_guard() {
        assert!(may_write(TargetKind::Directory, false));
        assert!(!may_write(TargetKind::BlockDevice, false));
        assert!(!may_write(TargetKind::RegularFile, false));
        assert!(may_write(TargetKind::BlockDevice, true));
        assert_eq!(
            existing_open_flags(TargetKind::BlockDevice, false) & libc::O_ACCMODE,
            libc::O_RDONLY
        );
        assert_eq!(
            existing_open_flags(TargetKind::RegularFile, false) & libc::O_ACCMODE,
            libc::O_RDONLY
        );
        let w = existing_open_flags(TargetKind::BlockDevice, true);
        assert_eq!(w & libc::O_ACCMODE, libc::O_RDWR);
        assert_ne!(
            w & libc::O_EXCL,
            0,
            "writable block devices are opened O_EXCL"
        );
    }

    #[test]
    fn existing_file_without_allow_write_is_read_only() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = dir.path().join("data");
        let content = vec![0xA5u8; 4 << 20];
        std::fs::write(&p, &content).unwrap();
        let mut cfg = DeviceConfig::quick(&p);
        cfg.allow_write = false;
        let t = open_target(&cfg, Some("ext4"), None).unwrap();
        assert!(!t.writable);
        assert!(!t.needs_fill);
        assert_eq!(t.size, 4 << 20);
        // The descriptor itself refuses writes.
        let buf = [0u8; 4096];
        // SAFETY: valid buffer and descriptor.
        let n = unsafe { libc::pwrite(t.fd(), buf.as_ptr().cast(), 4096, 0) };
        assert_eq!(n, -1);
        assert_eq!(std::fs::read(&p).unwrap(), content);
    }

    #[test]
    fn private_file_leaves_nothing_behind() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut cfg = DeviceConfig::quick(dir.path());
        cfg.file_size = 8 << 20;
        let t = open_target(&cfg, Some("ext4"), None).unwrap();
        assert!(t.writable && t.needs_fill);
        assert_eq!(t.size, 8 << 20);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        drop(t);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn too_big_file_is_refused() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut cfg = DeviceConfig::quick(dir.path());
        cfg.file_size = 1 << 60;
        let err = open_target(&cfg, None, None).err().unwrap();
        assert!(format!("{err:#}").contains("free space"), "{err:#}");
    }
}
