//! Handing tiered memory to a shared-memory file: the drain.
//!
//! `tiermem run` tiers a memfd the program maps shared and writable while
//! nothing else can see the file's pages (see the preload's `memfd`): the
//! range is tiered anonymous memory, and the file stays empty. When the
//! file is about to become visible elsewhere (its descriptor sent, read,
//! written, duplicated, mapped a second time, inherited), the range's bytes
//! must be in the file first, and the range must become the kernel's shared
//! mapping of it, without losing a write the program makes meanwhile.
//!
//! The stages, in order:
//! 1. **Gather**, while the program runs: every page whose bytes are
//!    elsewhere (the store, the compressed pool, a probation frame) is read
//!    back into place, and every page with bytes in place becomes `Foreign`
//!    (outside the budget, never evicted again) and writable without a
//!    fault. Pages without bytes (never touched, or zero) stay tiered.
//! 2. **Pause** the runtime's threads at their safe points, as for a fork:
//!    no handler is half-way through installing a page, and the evictor is
//!    still. Faults of the program's threads wait; the draining thread's own
//!    are still served. Forks wait too.
//! 3. **Finish** the gathering for what changed since stage 1; every page of
//!    the range is `Foreign` from here on.
//! 4. **Stash**: one `mremap(MREMAP_DONTUNMAP)` moves the range's page
//!    tables to an address only tiermem knows, under the kernel's mmap
//!    lock. The range stays mapped, empty and registered: a thread that
//!    touches it now faults, and its fault waits with the others.
//! 5. **Copy** the stash into the file (only pages that are not all zeros:
//!    the file is still empty, and its holes read as zeros).
//! 6. **Map** the file shared over the range, and resume: the waiting
//!    faults are woken and find the file's pages.
//!
//! Why a stash rather than copying the range in place: a program thread
//! may write any page at any time; after stage 4 no write can land
//! anywhere but the file.

use std::fs::File;
use std::mem::ManuallyDrop;
use std::ops::Range;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::fs::FileExt;

use super::foreign::cut_out;
use crate::error::{Error, Result};
use crate::frames::frame_is_zero;
use crate::page_table::{Kind, PageNo};
use crate::runtime::Runtime;
use crate::sys::raw;

/// The stash is copied and released this much at a time, so that the
/// drain holds at most this much DRAM beyond the range's own pages.
const COPY_CHUNK: usize = 1 << 20;

/// What a drain did, for the caller's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Pages written into the file (the rest were zeros: holes).
    pub pages_written: u64,
    /// Pages whose bytes were lost before the drain (a failed store read):
    /// they read as zeros in the file.
    pub pages_lost: u64,
}

impl Runtime {
    /// Moves the bytes of `[addr, addr+len)`, whole pages of the lazily
    /// committed zone, into the shared-memory file `fd` at `offset`, and
    /// maps the file there `MAP_SHARED` and read-write. The pages become
    /// `Foreign` (as with [`Runtime::cede_to_foreign`]): outside the budget,
    /// never tiered again until the program unmaps or maps over them.
    ///
    /// # Safety
    /// The caller owns the range, which is mapped read-write, and `fd` is a
    /// read-write descriptor of a file of at least `offset + len` bytes
    /// whose pages in that span are holes (nothing was written there).
    pub unsafe fn drain_into_file(
        &self,
        addr: usize,
        len: usize,
        fd: RawFd,
        offset: i64,
    ) -> Result<Drained> {
        let rt = self.shared();
        let pages = rt.pages_in(addr, len);
        // Stage 1, while the program runs.
        let mut lost = Vec::new();
        self.gather(pages.clone(), false, &mut lost)?;
        // Stage 2: forks and the runtime's threads wait.
        let forks_held = crate::fork::hold_off_forks();
        rt.pause
            .pause_all(rt.fault_threads() + 1, || rt.kick_evictor());
        let drained = self.drain_paused(addr, len, pages, fd, offset, &mut lost);
        rt.pause.resume();
        drop(forks_held);
        drained
    }

    /// Stages 3 to 6, with the runtime paused.
    unsafe fn drain_paused(
        &self,
        addr: usize,
        len: usize,
        pages: Range<PageNo>,
        fd: RawFd,
        offset: i64,
        lost: &mut Vec<PageNo>,
    ) -> Result<Drained> {
        let rt = self.shared();
        self.gather(pages.clone(), true, lost)?;
        // A lost page's poison marker moves with the page tables: reading
        // it in the stash would raise SIGBUS. It stays a hole (zeros).
        let mut skip: Vec<usize> = lost
            .iter()
            .flat_map(|&p| {
                let at = rt.page_addr(p) - addr;
                (0..rt.page_size).step_by(4096).map(move |k| at + k)
            })
            .collect();
        skip.sort_unstable();
        let drained = move_into_file(addr, len, fd, offset, &skip);
        if drained.is_err() {
            // The bytes stayed in the range (or went back there): it is the
            // program's memory now, untiered, and no fault of it may reach
            // the runtime, which would leave it waiting.
            rt.uffd.unregister(addr, len);
        }
        let mut foreign = rt.foreign_ranges();
        cut_out(&mut foreign, pages.clone());
        foreign.push(pages);
        drop(foreign);
        let written = drained?;
        Ok(Drained {
            pages_written: written,
            pages_lost: lost.len() as u64,
        })
    }

    /// Stage 1 (or 3, `paused`): every page of `pages` whose bytes are not
    /// in place is read back, and every page with bytes in place becomes
    /// `Foreign`, write protection lifted. Paused, pages without bytes
    /// become `Foreign` too. Pages lost already (to a failed store read)
    /// are added to `lost`.
    fn gather(&self, pages: Range<PageNo>, paused: bool, lost: &mut Vec<PageNo>) -> Result<()> {
        let rt = self.shared();
        for page in pages {
            let kind = rt.table.load(page).kind();
            match kind {
                Kind::Foreign => continue,
                Kind::Free | Kind::Zero if !paused => continue,
                _ => {}
            }
            if self.keep_in_place_as_foreign(page)? {
                lost.push(page);
                continue;
            }
            if matches!(kind, Kind::Free | Kind::Zero) {
                continue;
            }
            // A clean page is write-protected for dirty tracking; it is the
            // program's now, and its writes must not fault.
            let _ = rt.uffd.unprotect_quietly(rt.page_addr(page), rt.page_size);
        }
        Ok(())
    }
}

/// Stages 4 to 6 for a range whose pages are all `Foreign`: returns how
/// many pages were written into the file. On failure the bytes are back in
/// the range, which is then plain anonymous memory.
///
/// # Safety
/// As for [`Runtime::drain_into_file`], with the runtime paused.
unsafe fn move_into_file(
    addr: usize,
    len: usize,
    fd: RawFd,
    offset: i64,
    skip: &[usize],
) -> Result<u64> {
    let stash = stash_range(addr, len)?;
    let mut released = 0;
    let copied = copy_into_file(stash, len, fd, offset, skip, &mut released);
    match copied.and_then(|written| map_file_over(addr, len, fd, offset).map(|()| written)) {
        Ok(written) => {
            let _ = raw::munmap(stash, len);
            Ok(written)
        }
        Err(e) => {
            put_back(stash, addr, len, fd, offset, released);
            Err(e)
        }
    }
}

/// Stage 4: moves the page tables of `[addr, addr+len)` to a new address,
/// leaving the range mapped and empty. Returns the new address.
///
/// # Safety
/// The range is private anonymous memory the caller owns.
unsafe fn stash_range(addr: usize, len: usize) -> Result<usize> {
    let flags = libc::MREMAP_MAYMOVE | libc::MREMAP_DONTUNMAP;
    // `raw::mremap` passes the fifth argument (0) itself: glibc's wrapper
    // passes garbage there without MREMAP_FIXED, which Linux 6.18 refuses.
    raw::mremap(addr, len, len, flags, 0).map_err(|source| Error::Os {
        what: "moving shared memory's pages aside (mremap MREMAP_DONTUNMAP)",
        source,
    })
}

/// Stage 5: writes every page of the stash that is not all zeros into
/// `fd` at `offset` onwards, but the pages at the (ascending) offsets
/// `skip`, releasing the stash as it goes. Returns how
/// many pages were written; `released` tells how much of the stash (from
/// its start) is in the file only.
///
/// # Safety
/// `[stash, stash+len)` is the caller's stash, readable.
unsafe fn copy_into_file(
    stash: usize,
    len: usize,
    fd: RawFd,
    offset: i64,
    skip: &[usize],
    released: &mut usize,
) -> Result<u64> {
    const PAGE: usize = 4096;
    let file = borrowed_file(fd);
    let mut written = 0u64;
    for chunk in (0..len).step_by(COPY_CHUNK) {
        let end = (chunk + COPY_CHUNK).min(len);
        let mut run: Option<usize> = None;
        for at in (chunk..end).step_by(PAGE).chain(std::iter::once(end)) {
            // Every page of the stash but the skipped ones is mapped and
            // readable, and page-aligned.
            let zero = at == end
                || skip.binary_search(&at).is_ok()
                || frame_is_zero((stash + at) as *const u8, PAGE);
            match (run, zero) {
                (None, false) => run = Some(at),
                (Some(from), true) => {
                    // SAFETY: the stash is readable over [from, at).
                    let bytes = unsafe { stash_bytes(stash + from, at - from) };
                    file.write_all_at(bytes, offset as u64 + from as u64)
                        .map_err(|source| Error::Os {
                            what: "writing tiered memory into its shared-memory file",
                            source,
                        })?;
                    written += ((at - from) / PAGE) as u64;
                    run = None;
                }
                _ => {}
            }
        }
        let _ = raw::madvise(stash + chunk, end - chunk, libc::MADV_DONTNEED);
        *released = end;
    }
    Ok(written)
}

/// # Safety
/// `[addr, addr+len)` is mapped and readable for as long as the slice lives.
unsafe fn stash_bytes<'a>(addr: usize, len: usize) -> &'a [u8] {
    // SAFETY: as the caller promises.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
}

/// `fd` as a `File` for its positioned reads and writes, never closed here
/// (the descriptor is the caller's).
fn borrowed_file(fd: RawFd) -> ManuallyDrop<File> {
    // SAFETY: `fd` is open for as long as the caller uses the result, and
    // `ManuallyDrop` keeps it from being closed.
    ManuallyDrop::new(unsafe { File::from_raw_fd(fd) })
}

/// Stage 6: the file, mapped shared and read-write over the range.
///
/// # Safety
/// The caller owns the range; `fd` may be mapped there.
unsafe fn map_file_over(addr: usize, len: usize, fd: RawFd, offset: i64) -> Result<()> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_SHARED | libc::MAP_FIXED;
    raw::mmap(addr, len, prot, flags, fd, offset)
        .map(drop)
        .map_err(|source| Error::Os {
            what: "mapping shared memory over its tiered range",
            source,
        })
}

/// When the drain cannot finish: the stash goes back over the range, and
/// what of it was already released is read back from the file, so the
/// program keeps every byte, in memory that neither tiermem nor the file
/// holds from then on.
///
/// # Safety
/// `stash` is the range's stash, `[addr, addr+len)` the caller's range,
/// and the first `released` bytes of the stash are in `fd` at `offset`.
unsafe fn put_back(stash: usize, addr: usize, len: usize, fd: RawFd, offset: i64, released: usize) {
    let flags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
    if let Err(e) = raw::mremap(stash, len, len, flags, addr) {
        eprintln!(
            "tiermem: cannot put memory back at {addr:#x} after a failed drain ({e}); its bytes stay at {stash:#x} and in the file"
        );
        return;
    }
    // SAFETY: the range is the caller's, mapped read-write again.
    let range = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, released) };
    if let Err(e) = borrowed_file(fd).read_exact_at(range, offset as u64) {
        eprintln!(
            "tiermem: after a failed drain, the first {released} bytes at {addr:#x} could not be read back from the file ({e})"
        );
    }
}
