//! A store on a private file (or a block device), with O_DIRECT where the
//! filesystem allows it and pread/pwrite for I/O.
//!
//! Where the filesystem refuses O_DIRECT (tmpfs, FUSE mounts such as
//! `nbdfuse`), I/O goes through the page cache, and a write that reached the
//! cache has not reached the device: its error would surface later, at an
//! fsync nobody makes, and the page would be reported as stored. So a
//! buffered store syncs every batch of writes (`fdatasync`) before its
//! pages count as stored, drops them from the cache so that later reads go
//! to the device, and turns off read-ahead on the file.
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

/// How a store lies on what it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// A file that grows as slots are needed, from byte 0: a private file
    /// in a directory, or an empty (or tiermem-marked) file the user named.
    Growing,
    /// A block device carrying tiermem's header: fixed size, slots after it.
    Device,
    /// A regular file carrying tiermem's header (`tiermem format-store
    /// FILE`), for files that cannot be truncated or grown, such as a FUSE
    /// export of a remote disk: fixed size, slots after the header.
    FormattedFile,
}

impl Layout {
    fn data_start(self) -> u64 {
        match self {
            Layout::Growing => 0,
            Layout::Device | Layout::FormattedFile => DATA_START,
        }
    }
}

pub struct FileStore {
    file: File,
    path: PathBuf,
    page_size: usize,
    capacity_slots: u64,
    /// Slots backed by preallocated space; read on the fault path (lazily
    /// committed pages), so the common case is one atomic load.
    backed_slots: AtomicU64,
    grow_lock: Mutex<()>,
    /// A block device or formatted file: every slot is there from the start.
    fixed_size: bool,
    direct_io: bool,
    /// Held from a buffered batch's first write to its `fdatasync`: the
    /// error that `fdatasync` reports belongs to the file description, so
    /// two batches syncing at once could each take the other's error.
    buffered_batch: Mutex<()>,
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
        let (file, direct_io, layout) = open_by_kind(path)?;
        if !direct_io {
            read_without_read_ahead(&file);
        }
        let data_start = layout.data_start();
        let room = match layout {
            Layout::Growing => available_bytes(&file, path)?,
            Layout::Device | Layout::FormattedFile => {
                fixed_size(&file, path)?.saturating_sub(data_start)
            }
        };
        // A limit above the free space is allowed: allocation fails with ENOMEM
        // once the space really runs out, never a page later.
        let capacity_bytes = match layout {
            Layout::Growing => size_limit.unwrap_or(room),
            _ => size_limit.map_or(room, |limit| limit.min(room)),
        };
        let capacity_slots = capacity_bytes / page_size as u64;
        if capacity_slots == 0 {
            return Err(backing_err(
                path,
                "no space for even one page",
                io::Error::from_raw_os_error(libc::ENOSPC),
            ));
        }
        let backed = match layout {
            Layout::Growing => 0,
            _ => capacity_slots,
        };
        Ok(FileStore {
            file,
            path: path.to_path_buf(),
            page_size,
            capacity_slots,
            backed_slots: AtomicU64::new(backed),
            grow_lock: Mutex::new(()),
            fixed_size: layout != Layout::Growing,
            direct_io,
            buffered_batch: Mutex::new(()),
            block_device: layout == Layout::Device,
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
    /// cache and push application memory out; drop them.
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
        Ok(())
    }

    /// Writes each run of adjacent slots with one `pwritev`.
    fn write_runs(&self, writes: &[SlotWrite]) -> io::Result<()> {
        for run in runs_of_adjacent_slots(writes) {
            let bufs: Vec<*const u8> = run.iter().map(|w| w.src).collect();
            self.write_run(run[0].slot, &bufs)?;
        }
        Ok(())
    }

    /// A buffered batch: written, synced, then dropped from the page cache,
    /// all under `buffered_batch` (see its field comment).
    fn write_buffered(&self, writes: &[SlotWrite]) -> io::Result<()> {
        let _batch = self
            .buffered_batch
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.write_runs(writes)?;
        self.file.sync_data()?;
        for run in runs_of_adjacent_slots(writes) {
            self.drop_cached(self.offset(run[0].slot), run.len() * self.page_size);
        }
        Ok(())
    }

    /// Warns once that O_DIRECT is unavailable.
    pub fn warn_if_buffered(&self) {
        if !self.direct_io && !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!(
                "tiermem: warning: {} does not support O_DIRECT; using buffered I/O: every batch of written pages is synced (fdatasync) and dropped from the page cache before it counts as stored, which makes paging slower",
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
        // A device or formatted file is all backed, and never grows: its
        // length is not where its slots end (a device's is 0), so growing
        // it would write zeros over the header and the slots.
        if self.fixed_size || slots <= self.backed_slots.load(Ordering::Acquire) {
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
        if self.direct_io {
            self.write_runs(writes)
        } else {
            self.write_buffered(writes)
        }
    }

    fn writes_are_durable_on_completion(&self) -> bool {
        self.direct_io
    }

    fn info(&self) -> StoreInfo {
        StoreInfo {
            path: self.path.clone(),
            direct_io: self.direct_io,
            block_device: self.block_device,
        }
    }
}

/// Runs of adjacent slots in `writes` (sorted by slot), each at most
/// `MAX_IOV` pages.
fn runs_of_adjacent_slots(writes: &[SlotWrite]) -> impl Iterator<Item = &[SlotWrite]> {
    writes
        .chunk_by(|a, b| b.slot == a.slot + 1)
        .flat_map(|run| run.chunks(MAX_IOV))
}

/// Slots are read one at a time in random order: read-ahead would fill the
/// page cache with neighbours nobody asked for.
fn read_without_read_ahead(file: &File) {
    // SAFETY: fadvise on a descriptor we own, over the whole file.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
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
/// Returns whether I/O really bypasses the page cache.
fn open_maybe_direct(path: &CString, flags: i32, mode: u32) -> io::Result<(File, bool)> {
    for direct in [true, false] {
        let f = flags | libc::O_CLOEXEC | if direct { libc::O_DIRECT } else { 0 };
        // SAFETY: `path` is a valid NUL-terminated string.
        let fd = unsafe { libc::open(path.as_ptr(), f, mode) };
        if fd >= 0 {
            // SAFETY: `fd` is a fresh descriptor that we now own.
            let file = unsafe { File::from_raw_fd(fd) };
            let bypasses = direct && !direct_io_falls_back_to_cache(&file);
            return Ok((file, bypasses));
        }
        let err = io::Error::last_os_error();
        if !(direct && err.raw_os_error() == Some(libc::EINVAL)) {
            return Err(err);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

/// Opens what `path` names, checked as its kind requires: the file, whether
/// it is open with O_DIRECT, and how the store lies on it.
fn open_by_kind(path: &Path) -> Result<(File, bool, Layout)> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let (f, direct) = create_private_file(path)?;
            return Ok((f, direct, Layout::Growing));
        }
        Err(e) => {
            return Err(backing_err(
                path,
                "cannot inspect the backing path",
                clone_err(&e),
            ))
        }
    };
    if meta.is_dir() {
        let (f, direct) = open_private_file_in(path)?;
        Ok((f, direct, Layout::Growing))
    } else if meta.file_type().is_block_device() {
        let (f, direct) = open_existing(path, true)?;
        take_device(&f, path)?;
        Ok((f, direct, Layout::Device))
    } else if meta.is_file() {
        let (f, direct) = open_existing(path, false)?;
        let layout = check_named_file(&f, path)?;
        Ok((f, direct, layout))
    } else {
        Err(backing_err(
            path,
            "not a directory, regular file or block device",
            io::ErrorKind::InvalidInput.into(),
        ))
    }
}

/// Some filesystems accept O_DIRECT and quietly serve it from the page
/// cache (ext4 mounted `data=journal`); statx says so with a direct I/O
/// alignment of zero. Where statx has no answer, the open is trusted.
fn direct_io_falls_back_to_cache(file: &File) -> bool {
    crate::sys::device::direct_io_alignment(file).is_some_and(|(_, offset)| offset == 0)
}

fn open_private_file_in(dir: &Path) -> Result<(File, bool)> {
    let c = cstring(dir)?;
    match open_maybe_direct(&c, libc::O_TMPFILE | libc::O_RDWR, 0o600) {
        Ok(opened) => Ok(opened),
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
fn create_private_file(path: &Path) -> Result<(File, bool)> {
    let c = cstring(path)?;
    let (f, direct) = open_maybe_direct(&c, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600)
        .map_err(|e| backing_err(path, "cannot create the backing file", e))?;
    std::fs::remove_file(path)
        .map_err(|e| backing_err(path, "cannot unlink the new backing file", e))?;
    Ok((f, direct))
}

fn open_existing(path: &Path, block_device: bool) -> Result<(File, bool)> {
    let c = cstring(path)?;
    if block_device {
        // A device another tiermem process holds is told apart from one
        // that is mounted: both refuse O_EXCL (EBUSY), but only the former
        // holds our lock, looked at first on a plain descriptor.
        let (probe, _) = open_maybe_direct(&c, libc::O_RDWR, 0)
            .map_err(|e| backing_err(path, "cannot open for reading and writing", e))?;
        claim_exclusively(&probe, path)?;
    }
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
    Ok((f, direct))
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

/// `tiermem format-store`: writes tiermem's header at the start of the
/// block device or regular file at `path`, so that the store takes it with
/// a fixed size. One that is mounted or in use is refused, and so is a file
/// that is not this user's own and private; one holding a filesystem or
/// other data is overwritten only with `force`. Returns what it held before.
pub fn format_store(path: &Path, force: bool) -> Result<Label> {
    refuse_link_to_file(path)?;
    let meta =
        std::fs::metadata(path).map_err(|e| backing_err(path, "cannot inspect the path", e))?;
    let f = if meta.file_type().is_block_device() {
        open_existing(path, true)?.0
    } else if meta.is_file() {
        open_file_to_format(path)?
    } else {
        return Err(backing_err(
            path,
            "is neither a block device nor a regular file (a directory needs no formatting)",
            io::Error::from_raw_os_error(libc::ENOTBLK),
        ));
    };
    let label =
        device_label::inspect(&f).map_err(|e| backing_err(path, "cannot read the start", e))?;
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
    // A file tiermem grew before carries the mark of a growing store, which
    // would win over the header.
    // SAFETY: removes an attribute of our own descriptor by its name.
    unsafe { libc::fremovexattr(f.as_raw_fd(), OURS_XATTR.as_ptr()) };
    Ok(label)
}

/// A regular file to format: this user's own, private, and large enough
/// for the header and at least one page after it.
fn open_file_to_format(path: &Path) -> Result<File> {
    let (f, _) = open_existing(path, false)?;
    let meta = f
        .metadata()
        .map_err(|e| backing_err(path, "cannot inspect the opened file", e))?;
    refuse_if_shared(path, meta.mode())?;
    refuse_if_not_owner(path, meta.uid())?;
    let least = DATA_START + (64 << 10);
    if meta.len() < least {
        return Err(backing_err(
            path,
            &format!(
                "holds {} bytes, and a formatted file needs at least {least} (1 MiB of header, then the pages); an empty file needs no formatting: tiermem grows it",
                meta.len()
            ),
            io::Error::from_raw_os_error(libc::EINVAL),
        ));
    }
    Ok(f)
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
fn check_named_file(f: &File, path: &Path) -> Result<Layout> {
    let meta = f
        .metadata()
        .map_err(|e| backing_err(path, "cannot inspect the opened backing file", e))?;
    refuse_if_shared(path, meta.mode())?;
    refuse_if_not_owner(path, meta.uid())?;
    if is_marked_ours(f) {
        return Ok(Layout::Growing);
    }
    if meta.len() > DATA_START && device_label::inspect(f).is_ok_and(|l| l == Label::Ours) {
        return Ok(Layout::FormattedFile);
    }
    take_if_empty(f, path, meta.len())?;
    Ok(Layout::Growing)
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

/// Whether a growing file carries the mark tiermem set when it first took it.
fn is_marked_ours(f: &File) -> bool {
    let mut mark = [0u8; 1];
    // SAFETY: reads at most one byte of the attribute into `mark`.
    let n = unsafe {
        libc::fgetxattr(
            f.as_raw_fd(),
            OURS_XATTR.as_ptr(),
            mark.as_mut_ptr().cast(),
            1,
        )
    };
    n == 1
}

/// Takes an empty file, marking it ours for the next run; refuses a file
/// holding anything, which the store would overwrite.
fn take_if_empty(f: &File, path: &Path, len: u64) -> Result<()> {
    if len > 0 {
        return Err(backing_err(
            path,
            &format!(
                "the file holds {len} bytes that tiermem did not write, and the store would \
                 overwrite them; give an empty file (truncate -s 0 FILE) or a directory, or, \
                 for a file that cannot be truncated, run `tiermem format-store {}` first",
                path.display()
            ),
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

/// The size of a device or formatted file: all of it is the store's.
fn fixed_size(file: &File, path: &Path) -> Result<u64> {
    let meta = file
        .metadata()
        .map_err(|e| backing_err(path, "cannot inspect the opened backing store", e))?;
    if !meta.file_type().is_block_device() {
        return Ok(meta.len());
    }
    {
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
        Ok(size)
    }
}

/// Free space on the filesystem of a growing file.
fn available_bytes(file: &File, path: &Path) -> Result<u64> {
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
