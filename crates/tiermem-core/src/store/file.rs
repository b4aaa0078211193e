//! A store on a private file (or a block device), with O_DIRECT where the
//! filesystem allows it and pread/pwrite for I/O.
//!
//! The file is created with O_TMPFILE (or unlinked right after creation) and
//! mode 0600: nobody else can open it, and it disappears with the process.
//!
//! A file the user names is checked as `swapon` checks a swap file, since
//! every page written there overwrites what the file held: it must belong to
//! this user, be private (0600), not be reached through a symbolic link, and
//! be empty or marked as tiermem's own (the `user.tiermem.store` extended
//! attribute, set when tiermem first takes an empty file).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::device_label::{self, Label, DATA_START};
use super::{SlotWrite, Store, StoreInfo};
use crate::error::{Error, Result};

/// The file grows by at least this much at a time, to keep fallocate calls
/// (and extent fragmentation) rare.
const GROW_CHUNK: u64 = 64 << 20;
/// Most iovecs per pwritev.
const MAX_IOV: usize = 1024;

pub struct FileStore {
    file: File,
    path: PathBuf,
    page_size: usize,
    capacity_slots: u64,
    /// Slots backed by preallocated space; read on the fault path (lazily
    /// committed pages), so the common case is one atomic load.
    backed_slots: AtomicU64,
    grow_lock: Mutex<()>,
    direct_io: bool,
    block_device: bool,
    /// Where slot 0 starts: after tiermem's header on a block device.
    data_start: u64,
    warned: AtomicBool,
}

impl FileStore {
    /// Opens the store described by `path` (see the module docs).
    /// `size_limit` caps the capacity; otherwise the free space decides.
    pub fn open(path: &Path, page_size: usize, size_limit: Option<u64>) -> Result<FileStore> {
        refuse_link_to_file(path)?;
        let meta = std::fs::metadata(path);
        let (file, direct_io, block_device) = match &meta {
            Ok(m) if m.is_dir() => open_private_file_in(path)?,
            Ok(m) if m.file_type().is_block_device() => {
                let opened = open_existing(path, true)?;
                take_device(&opened.0, path)?;
                opened
            }
            Ok(m) if m.is_file() => {
                let opened = open_existing(path, false)?;
                check_named_file(&opened.0, path)?;
                opened
            }
            Ok(_) => {
                return Err(backing_err(
                    path,
                    "not a directory, regular file or block device",
                    io::ErrorKind::InvalidInput.into(),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => create_private_file(path)?,
            Err(e) => {
                return Err(backing_err(
                    path,
                    "cannot inspect the backing path",
                    clone_err(e),
                ))
            }
        };
        let data_start = if block_device { DATA_START } else { 0 };
        let room = available_bytes(&file, block_device, path)?.saturating_sub(data_start);
        // A limit above the free space is allowed: allocation fails with ENOMEM
        // once the space really runs out, never a page later.
        let capacity_bytes = size_limit.unwrap_or(room);
        let capacity_slots = capacity_bytes / page_size as u64;
        if capacity_slots == 0 {
            return Err(backing_err(
                path,
                "no space for even one page",
                io::Error::from_raw_os_error(libc::ENOSPC),
            ));
        }
        let backed = if block_device { capacity_slots } else { 0 };
        Ok(FileStore {
            file,
            path: path.to_path_buf(),
            page_size,
            capacity_slots,
            backed_slots: AtomicU64::new(backed),
            grow_lock: Mutex::new(()),
            direct_io,
            block_device,
            data_start,
            warned: AtomicBool::new(false),
        })
    }

    fn fd(&self) -> i32 {
        self.file.as_raw_fd()
    }

    fn offset(&self, slot: u64) -> i64 {
        (self.data_start + slot * self.page_size as u64) as i64
    }

    /// Without O_DIRECT, written and read pages would pile up in the page
    /// cache and push application memory out (seed 003); drop them.
    fn drop_cached(&self, offset: i64, len: usize) {
        if !self.direct_io {
            // SAFETY: fadvise on our own fd with a valid range.
            unsafe {
                libc::posix_fadvise(self.fd(), offset, len as i64, libc::POSIX_FADV_DONTNEED)
            };
        }
    }

    fn grow_to(&self, bytes: u64) -> io::Result<()> {
        let current = self.file.metadata()?.len();
        if bytes <= current {
            return Ok(());
        }
        // SAFETY: fallocate on our own fd with a valid range.
        let rc = unsafe { libc::fallocate(self.fd(), 0, current as i64, (bytes - current) as i64) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(err);
        }
        self.grow_by_writing_zeros(current, bytes)
    }

    /// For filesystems without fallocate: real zero blocks reserve the space.
    fn grow_by_writing_zeros(&self, from: u64, to: u64) -> io::Result<()> {
        let chunk = crate::sys::mem::Mapping::reserve(1 << 20, "allocating a zero buffer")
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut at = from;
        while at < to {
            let len = (to - at).min(1 << 20) as usize;
            // SAFETY: `chunk` is a readable 1 MiB buffer of zeros.
            let n = unsafe { libc::pwrite(self.fd(), chunk.as_ptr().cast(), len, at as i64) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            at += n as u64;
        }
        Ok(())
    }

    fn write_run(&self, first_slot: u64, bufs: &[*const u8]) -> io::Result<()> {
        let page = self.page_size;
        let iov: Vec<libc::iovec> = bufs
            .iter()
            .map(|b| libc::iovec {
                iov_base: *b as *mut libc::c_void,
                iov_len: page,
            })
            .collect();
        let total = page * bufs.len();
        let mut done = 0usize;
        while done < total {
            let (skip_iov, skip_bytes) = (done / page, done % page);
            let mut rest: Vec<libc::iovec> = iov[skip_iov..].to_vec();
            rest[0].iov_base = (rest[0].iov_base as usize + skip_bytes) as *mut libc::c_void;
            rest[0].iov_len -= skip_bytes;
            // SAFETY: every iovec points at a page-sized runtime buffer the
            // caller keeps alive for this call.
            let n = unsafe {
                libc::pwritev(
                    self.fd(),
                    rest.as_ptr(),
                    rest.len() as i32,
                    self.offset(first_slot) + done as i64,
                )
            };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "backing store accepted no bytes",
                ));
            }
            done += n as usize;
        }
        self.drop_cached(self.offset(first_slot), total);
        Ok(())
    }

    /// Warns once that O_DIRECT is unavailable.
    pub fn warn_if_buffered(&self) {
        if !self.direct_io && !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!(
                "tiermem: warning: {} does not support O_DIRECT; using buffered I/O and dropping the page cache after each transfer",
                self.path.display()
            );
        }
    }
}

impl Store for FileStore {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn capacity_slots(&self) -> u64 {
        self.capacity_slots
    }

    fn ensure_backed(&self, slots: u64) -> Result<()> {
        if slots <= self.backed_slots.load(Ordering::Acquire) {
            return Ok(());
        }
        let _grow = self.grow_lock.lock().unwrap_or_else(|p| p.into_inner());
        if slots <= self.backed_slots.load(Ordering::Acquire) {
            return Ok(());
        }
        let page = self.page_size as u64;
        let want = (slots * page).div_ceil(GROW_CHUNK) * GROW_CHUNK;
        let want = want.min(self.capacity_slots * page).max(slots * page);
        self.grow_to(want)
            .map_err(|e| backing_err(&self.path, "growing the backing file", e))?;
        self.backed_slots.store(want / page, Ordering::Release);
        Ok(())
    }

    fn backed_slots(&self) -> u64 {
        self.backed_slots.load(Ordering::Acquire)
    }

    fn allocated_bytes(&self) -> u64 {
        self.file.metadata().map_or(0, |m| m.blocks() * 512)
    }

    fn read(&self, slot: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut done = 0usize;
        while done < buf.len() {
            // SAFETY: `buf[done..]` is writable for the requested length.
            let n = unsafe {
                libc::pread(
                    self.fd(),
                    buf[done..].as_mut_ptr().cast(),
                    buf.len() - done,
                    self.offset(slot) + done as i64,
                )
            };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("slot {slot} is beyond the end of the backing file"),
                ));
            }
            done += n as usize;
        }
        self.drop_cached(self.offset(slot), buf.len());
        Ok(())
    }

    fn read_target(&self, slot: u64) -> (i32, u64) {
        (self.fd(), self.offset(slot) as u64)
    }

    fn read_done(&self, slot: u64) {
        self.drop_cached(self.offset(slot), self.page_size);
    }

    fn write_done(&self, first: u64, count: usize) {
        self.drop_cached(self.offset(first), count * self.page_size);
    }

    fn write_batch(&self, writes: &[SlotWrite]) -> io::Result<()> {
        let mut run_start = 0;
        while run_start < writes.len() {
            let mut run_end = run_start + 1;
            while run_end < writes.len()
                && run_end - run_start < MAX_IOV
                && writes[run_end].slot == writes[run_end - 1].slot + 1
            {
                run_end += 1;
            }
            let bufs: Vec<*const u8> = writes[run_start..run_end].iter().map(|w| w.src).collect();
            self.write_run(writes[run_start].slot, &bufs)?;
            run_start = run_end;
        }
        Ok(())
    }

    fn info(&self) -> StoreInfo {
        StoreInfo {
            path: self.path.clone(),
            direct_io: self.direct_io,
            block_device: self.block_device,
        }
    }
}

fn backing_err(path: &Path, what: &str, source: io::Error) -> Error {
    Error::Backing {
        path: path.to_path_buf(),
        what: what.to_string(),
        source,
    }
}

fn clone_err(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

fn cstring(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        backing_err(
            path,
            "path contains a NUL byte",
            io::ErrorKind::InvalidInput.into(),
        )
    })
}

/// open(2) with O_DIRECT, retrying without it where the filesystem refuses.
fn open_maybe_direct(path: &CString, flags: i32, mode: u32) -> io::Result<(File, bool)> {
    for direct in [true, false] {
        let f = flags | libc::O_CLOEXEC | if direct { libc::O_DIRECT } else { 0 };
        // SAFETY: `path` is a valid NUL-terminated string.
        let fd = unsafe { libc::open(path.as_ptr(), f, mode) };
        if fd >= 0 {
            // SAFETY: `fd` is a fresh descriptor that we now own.
            return Ok((unsafe { File::from_raw_fd(fd) }, direct));
        }
        let err = io::Error::last_os_error();
        if !(direct && err.raw_os_error() == Some(libc::EINVAL)) {
            return Err(err);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

fn open_private_file_in(dir: &Path) -> Result<(File, bool, bool)> {
    let c = cstring(dir)?;
    match open_maybe_direct(&c, libc::O_TMPFILE | libc::O_RDWR, 0o600) {
        Ok((f, direct)) => Ok((f, direct, false)),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::EISDIR)
            ) =>
        {
            let name = dir.join(format!(
                ".tiermem-{}-{}",
                std::process::id(),
                crate::sys::now_ns()
            ));
            create_private_file(&name)
        }
        Err(e) => Err(backing_err(
            dir,
            "cannot create a private backing file in this directory",
            e,
        )),
    }
}

/// Creates `path` 0600 and unlinks it at once, so only this process holds it.
fn create_private_file(path: &Path) -> Result<(File, bool, bool)> {
    let c = cstring(path)?;
    let (f, direct) = open_maybe_direct(&c, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600)
        .map_err(|e| backing_err(path, "cannot create the backing file", e))?;
    std::fs::remove_file(path)
        .map_err(|e| backing_err(path, "cannot unlink the new backing file", e))?;
    Ok((f, direct, false))
}

fn open_existing(path: &Path, block_device: bool) -> Result<(File, bool, bool)> {
    let c = cstring(path)?;
    // A regular file is opened without following a link swapped in after
    // the checks; device paths (/dev/disk/by-id/...) are links by design.
    // O_EXCL on a block device fails while it is mounted or held by
    // another exclusive user (a swap area, a device-mapper target).
    let flags = match block_device {
        true => libc::O_RDWR | libc::O_EXCL,
        false => libc::O_RDWR | libc::O_NOFOLLOW,
    };
    let (f, direct) = open_maybe_direct(&c, flags, 0).map_err(|e| match e.raw_os_error() {
        Some(libc::EBUSY) => backing_err(
            path,
            "is in use: mounted, an active swap area, or held by another program (opening it exclusively failed)",
            e,
        ),
        _ => backing_err(path, "cannot open for reading and writing", e),
    })?;
    claim_exclusively(&f, path)?;
    Ok((f, direct, block_device))
}

/// A block device is taken only if it is blank or already tiermem's, as
/// `mkswap` and `swapon` check: a filesystem or other data on it is refused
/// by name. A blank device gets tiermem's header, so the next run knows it.
fn take_device(f: &File, path: &Path) -> Result<()> {
    let label = device_label::inspect(f)
        .map_err(|e| backing_err(path, "cannot read the start of the device", e))?;
    let refusal = match label {
        Label::Ours => return Ok(()),
        Label::Blank => {
            return device_label::write_header(f)
                .map_err(|e| backing_err(path, "cannot write tiermem's header", e))
        }
        Label::Known(what) => format!("carries {what}"),
        Label::Unknown => "holds data that tiermem did not write".to_string(),
    };
    Err(backing_err(
        path,
        &format!(
            "{refusal}, which the store would overwrite; if it may be overwritten, \
             run `tiermem format-store {}` first",
            path.display()
        ),
        io::Error::from_raw_os_error(libc::EEXIST),
    ))
}

/// `tiermem format-store`: writes tiermem's header on the block device at
/// `path`, so that the store takes it. A device that is mounted or in use
/// is refused; one with a filesystem or other data only with `force`.
/// Returns what the device held before.
pub fn format_device(path: &Path, force: bool) -> Result<Label> {
    let meta =
        std::fs::metadata(path).map_err(|e| backing_err(path, "cannot inspect the path", e))?;
    if !meta.file_type().is_block_device() {
        return Err(backing_err(
            path,
            "is not a block device (a file or a directory needs no formatting)",
            io::Error::from_raw_os_error(libc::ENOTBLK),
        ));
    }
    let (f, _, _) = open_existing(path, true)?;
    let label = device_label::inspect(&f)
        .map_err(|e| backing_err(path, "cannot read the start of the device", e))?;
    let occupied = match &label {
        Label::Known(what) => Some(format!("carries {what}")),
        Label::Unknown => Some("holds data that tiermem did not write".to_string()),
        Label::Ours | Label::Blank => None,
    };
    if let (Some(occupied), false) = (occupied, force) {
        return Err(backing_err(
            path,
            &format!("{occupied}; add --force to overwrite it"),
            io::Error::from_raw_os_error(libc::EEXIST),
        ));
    }
    device_label::write_header(&f)
        .map_err(|e| backing_err(path, "cannot write tiermem's header", e))?;
    Ok(label)
}

/// A backing file or device holds one process's pages at fixed offsets: a
/// second process using it would overwrite them. The lock lasts as long as
/// the open file (a forked child shares it, which is safe: it only reads
/// the parent's slots).
fn claim_exclusively(f: &File, path: &Path) -> Result<()> {
    // SAFETY: flock on our own open descriptor.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(());
    }
    Err(backing_err(
        path,
        "is in use by another tiermem process (a backing file or device serves one process; give a directory to let each process create its own file)",
        io::Error::last_os_error(),
    ))
}

/// The extended attribute that marks a file as tiermem's backing store.
const OURS_XATTR: &std::ffi::CStr = c"user.tiermem.store";

/// A symbolic link to a regular file is refused: the link could point at
/// any file the user can write, which the store would overwrite. Links to
/// directories and block devices are followed.
fn refuse_link_to_file(path: &Path) -> Result<()> {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if is_link && std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return Err(backing_err(
            path,
            "is a symbolic link to a regular file; give the file itself (or a directory)",
            io::Error::from_raw_os_error(libc::ELOOP),
        ));
    }
    Ok(())
}

/// The checks on a regular file the user named, made on the file opened
/// (not on the path, which could be replaced between a check and the open).
fn check_named_file(f: &File, path: &Path) -> Result<()> {
    let meta = f
        .metadata()
        .map_err(|e| backing_err(path, "cannot inspect the opened backing file", e))?;
    refuse_if_shared(path, meta.mode())?;
    refuse_if_not_owner(path, meta.uid())?;
    take_if_empty_or_ours(f, path, meta.len())
}

/// Someone else's file is not ours to overwrite, even where we may write it.
fn refuse_if_not_owner(path: &Path, owner: u32) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if owner != me {
        return Err(backing_err(
            path,
            &format!("the file is owned by uid {owner}, not by this user (uid {me}); give a file of your own or a directory"),
            io::Error::from_raw_os_error(libc::EPERM),
        ));
    }
    Ok(())
}

/// Takes an empty file (marking it ours for the next run) or one already
/// marked ours; refuses a file holding anything else, which the store would
/// overwrite.
fn take_if_empty_or_ours(f: &File, path: &Path, len: u64) -> Result<()> {
    let mut mark = [0u8; 1];
    // SAFETY: reads at most one byte of the attribute into `mark`.
    let marked = unsafe {
        libc::fgetxattr(
            f.as_raw_fd(),
            OURS_XATTR.as_ptr(),
            mark.as_mut_ptr().cast(),
            1,
        )
    } == 1;
    if marked {
        return Ok(());
    }
    if len > 0 {
        return Err(backing_err(
            path,
            &format!("the file holds {len} bytes that tiermem did not write, and the store would overwrite them; give an empty file (truncate -s 0 FILE) or a directory"),
            io::Error::from_raw_os_error(libc::EEXIST),
        ));
    }
    // SAFETY: sets a one-byte attribute from a valid buffer. Where the
    // filesystem keeps no extended attributes the next run finds the file
    // non-empty and unmarked, and says so.
    unsafe {
        libc::fsetxattr(
            f.as_raw_fd(),
            OURS_XATTR.as_ptr(),
            c"1".as_ptr().cast(),
            1,
            0,
        )
    };
    Ok(())
}

/// An existing file that others can read would expose evicted memory.
fn refuse_if_shared(path: &Path, mode: u32) -> Result<()> {
    if mode & 0o077 != 0 {
        return Err(backing_err(
            path,
            &format!("the file is accessible to other users (mode {:o}); run chmod 600 on it or give a directory", mode & 0o777),
            io::Error::from_raw_os_error(libc::EACCES),
        ));
    }
    Ok(())
}

fn available_bytes(file: &File, block_device: bool, path: &Path) -> Result<u64> {
    if block_device {
        let mut size: u64 = 0;
        // BLKGETSIZE64 = _IOR(0x12, 114, size_t)
        const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
        // SAFETY: BLKGETSIZE64 writes one u64 to the pointer we pass.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size) };
        if rc != 0 {
            return Err(backing_err(
                path,
                "cannot read the block device's size",
                io::Error::last_os_error(),
            ));
        }
        return Ok(size);
    }
    // SAFETY: statvfs is plain data; all-zero is a valid value to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatvfs writes into `st`, a valid statvfs.
    let rc = unsafe { libc::fstatvfs(file.as_raw_fd(), &mut st) };
    if rc != 0 {
        return Err(backing_err(
            path,
            "cannot read the free space",
            io::Error::last_os_error(),
        ));
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}
