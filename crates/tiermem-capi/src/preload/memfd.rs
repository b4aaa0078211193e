//! Shared memory tiered while nobody else can see it: a memfd the program
//! created and maps `MAP_SHARED` and read-write, as QEMU maps
//! `memory-backend-memfd` guest RAM.
//!
//! A memfd's pages are reachable through its descriptors and its mappings
//! only. tiermem follows each memfd the program creates close-on-exec
//! (`memfd_create` with `MFD_CLOEXEC`) from its creation. While its one
//! descriptor has never left the program's hands and the file has no other
//! mapping, nobody but that one mapping reads or writes the file, so the
//! mapping can be tiered anonymous memory, and the file stays empty.
//!
//! The moment the descriptor could show the file to anyone, tiermem first
//! drains the range into the file (`Runtime::drain_into_file`) and maps the
//! file there: from then on the mapping is the kernel's shared memory,
//! untiered, and said on stderr. Each such moment is an interposed call
//! (`fd_escapes`, the `mmap` family, `fork`):
//! - the descriptor read, written, resized, allocated, spliced, sent
//!   (`sendmsg` with `SCM_RIGHTS`), duplicated, or made inheritable (a hole
//!   punched in the file is zeros in the mapping: no drain, see [`punch`]);
//! - the file mapped once more;
//! - the range unmapped, moved or reprotected while a descriptor is open;
//! - a fork whose child gets the range (no `MADV_DONTFORK` over it).
//!
//! A memfd that escapes before it is mapped is no longer followed, and its
//! mapping stays the kernel's. Beyond reach, as for any interposer: a raw
//! system call, an io_uring request on the descriptor, a child that uses
//! the close-on-exec descriptor before its exec, and another process that
//! takes the descriptor through `pidfd_getfd` or `/proc/PID/fd`.
//! `TIERMEM_MEMFD=off` (`tiermem run --untiered-memfd`) leaves every memfd
//! to the kernel.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::exit_stats::mib;
use super::guard::{inside, Guard};
use super::{active, env, mmap_threshold, program_name, runtime};

/// Turns substitution off (`off`).
pub const ENV_MEMFD: &str = "TIERMEM_MEMFD";

/// A memfd the program created close-on-exec, whose descriptor has not
/// escaped.
#[derive(Clone, Copy, Debug)]
struct Memfd {
    /// The program's descriptor; -1 once the program closed it.
    fd: c_int,
    /// Where it is tiered memory, once mapped.
    mapping: Option<Mapping>,
}

#[derive(Clone, Copy, Debug)]
struct Mapping {
    addr: usize,
    len: usize,
    offset: i64,
    /// tiermem's own duplicate of the descriptor, close-on-exec, to drain
    /// into when the program's is gone.
    own_fd: c_int,
    /// The program advised `MADV_DONTFORK` over all of it.
    dontfork: bool,
}

impl Mapping {
    fn overlaps(&self, addr: usize, len: usize) -> bool {
        addr < self.addr + self.len && self.addr < addr.saturating_add(len)
    }

    fn within(&self, addr: usize, len: usize) -> bool {
        addr <= self.addr && self.addr + self.len <= addr.saturating_add(len)
    }
}

/// How many memfds are followed: every escape point looks no further while
/// it is 0, which it stays in a program that creates no memfd.
static FOLLOWED: AtomicUsize = AtomicUsize::new(0);
static TABLE: Mutex<Vec<Memfd>> = Mutex::new(Vec::new());

/// The program's descriptors of the first followed memfds, readable
/// without the table's lock: a `write` or `close` on any other descriptor
/// (from a signal handler, say, which may have interrupted this thread
/// while it held the lock) never takes it. `ALL_IN_VIEW` is false when
/// more memfds are followed than there are slots.
const VIEW_SLOTS: usize = 8;
static VIEW: [AtomicI32; VIEW_SLOTS] = [const { AtomicI32::new(-1) }; VIEW_SLOTS];
static ALL_IN_VIEW: AtomicBool = AtomicBool::new(true);

fn table() -> std::sync::MutexGuard<'static, Vec<Memfd>> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes `all`, the table as it now stands (its lock held), the one the
/// lock-free checks see.
fn publish(all: &[Memfd]) {
    let mut open = all.iter().map(|m| m.fd).filter(|&fd| fd >= 0);
    for slot in &VIEW {
        slot.store(open.next().unwrap_or(-1), Ordering::Release);
    }
    ALL_IN_VIEW.store(open.next().is_none(), Ordering::Release);
    FOLLOWED.store(all.len(), Ordering::Release);
}

/// Whether any memfd is followed (one atomic load).
#[inline]
pub(super) fn any() -> bool {
    FOLLOWED.load(Ordering::Acquire) != 0
}

/// Whether `fd` may be a followed memfd's descriptor, without the lock.
fn may_be_followed(fd: c_int) -> bool {
    fd >= 0
        && any()
        && (!ALL_IN_VIEW.load(Ordering::Acquire)
            || VIEW.iter().any(|slot| slot.load(Ordering::Acquire) == fd))
}

const UNKNOWN: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;
static ENABLED: AtomicU8 = AtomicU8::new(UNKNOWN);

pub(super) fn enabled() -> bool {
    match ENABLED.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            let on = env(ENV_MEMFD).as_deref() != Some("off");
            ENABLED.store(if on { ON } else { OFF }, Ordering::Relaxed);
            on
        }
    }
}

/// The program created `fd` with `memfd_create(..., flags)`: followed if
/// close-on-exec.
pub(super) fn on_create(fd: c_int, flags: u32) {
    if fd < 0 || flags & libc::MFD_CLOEXEC == 0 || !active() || inside() || !enabled() {
        return;
    }
    let _inside = Guard::enter();
    let mut all = table();
    // A descriptor number the kernel hands out again was closed before.
    all.retain(|m| m.fd != fd || m.mapping.is_some());
    all.push(Memfd { fd, mapping: None });
    publish(&all);
}

/// Whether a `mmap` of `fd` is one to tier: shared, read-write, large
/// enough, of a followed memfd with no mapping yet, wholly inside the file,
/// which holds no data. Returns why not for a followed memfd.
pub(super) fn why_not_tiered(
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: i64,
) -> Result<(), Option<&'static str>> {
    if !any() || fd < 0 {
        return Err(None);
    }
    let _inside = Guard::enter();
    if !table().iter().any(|m| m.fd == fd && m.mapping.is_none()) {
        return Err(None);
    }
    const MAP_TYPE: c_int = 0x0f;
    let shared = matches!(
        flags & MAP_TYPE,
        libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE
    );
    let plain = flags & !(MAP_TYPE | libc::MAP_FIXED | libc::MAP_NORESERVE) == 0;
    if !shared || !plain || prot != libc::PROT_READ | libc::PROT_WRITE {
        return Err(Some(
            "only a plain read-write MAP_SHARED mapping of a memfd is tiered",
        ));
    }
    if len < mmap_threshold() || offset < 0 || offset % 4096 != 0 {
        return Err(Some("the mapping is small or not page-aligned in the file"));
    }
    // SAFETY: fstat writes into a stat it owns.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid stat to write.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(Some("its descriptor cannot be examined"));
    }
    if st.st_blocks != 0 {
        return Err(Some("the memfd holds data already"));
    }
    if (offset as u64).saturating_add(len as u64) > st.st_size as u64 {
        return Err(Some("the mapping reaches past the end of the memfd"));
    }
    Ok(())
}

/// Records that `[addr, addr+len)`, tiered memory of the program's, stands
/// for the followed memfd `fd` at `offset`. Fails (the caller maps the
/// file instead) when no duplicate of the descriptor can be made.
pub(super) fn record(addr: usize, len: usize, fd: c_int, offset: i64) -> bool {
    let _inside = Guard::enter();
    // SAFETY: duplicates a descriptor the program passed to mmap.
    let own_fd = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if own_fd < 0 {
        return false;
    }
    let mapping = Mapping {
        addr,
        len,
        offset,
        own_fd,
        dontfork: false,
    };
    let mut all = table();
    match all.iter_mut().find(|m| m.fd == fd && m.mapping.is_none()) {
        Some(m) => {
            m.mapping = Some(mapping);
            true
        }
        None => {
            drop(all);
            close_own(&mapping);
            false
        }
    }
}

/// The descriptor `fd` is about to leave the program's hands, or to become
/// one of several (`why`: the call): a followed memfd is followed no more,
/// and its tiered mapping is drained into the file first.
pub(super) fn on_escape(fd: c_int, why: &str) {
    // The calls tiermem makes itself (on its store, say) never count.
    if !may_be_followed(fd) || inside() {
        return;
    }
    let _inside = Guard::enter();
    let gone = take_where(|m| m.fd == fd);
    drain_all(gone, why);
}

/// The file behind `fd` is about to be read or written through it (`why`:
/// the call). A tiered mapping of a followed memfd is drained first, and
/// the file is the kernel's from then on. A memfd not mapped yet stays
/// followed: what the call may write makes the file hold data, which a
/// later mapping sees (`st_blocks`), and is then left to the kernel.
pub(super) fn on_file_access(fd: c_int, why: &str) {
    if !may_be_followed(fd) || inside() {
        return;
    }
    let _inside = Guard::enter();
    let gone = take_where(|m| m.fd == fd && m.mapping.is_some());
    drain_all(gone, why);
}

/// A hole punched in `fd` over `[at, at+len)`: when `fd` is a tiered memfd,
/// the matching part of its mapping reads zeros from now on (partial pages
/// zeroed in part, as the kernel zeroes them) and the call needs no drain.
/// False for any other descriptor, or a range that does not fit the file.
pub(super) fn punch(fd: c_int, at: i64, len: i64) -> bool {
    if !may_be_followed(fd) || inside() || at < 0 || len <= 0 {
        return false;
    }
    let _inside = Guard::enter();
    let Some(p) = table().iter().find(|m| m.fd == fd).and_then(|m| m.mapping) else {
        return false;
    };
    // The part of [at, at+len) the mapping shows; the rest of the file
    // beyond it is holes already, and stays so.
    let (from, to) = (
        at.max(p.offset),
        at.saturating_add(len).min(p.offset + p.len as i64),
    );
    if from < to {
        let addr = p.addr + (from - p.offset) as usize;
        // SAFETY: the program's own tiered memory, standing for the file.
        unsafe { runtime().discard(addr, (to - from) as usize, true) };
    }
    true
}

/// `[addr, addr+len)` is unmapped, moved or reprotected: a tiered memfd
/// mapping there is drained first, as the file's bytes outlive it. When
/// unmapped whole with no descriptor of the program's left, the file goes
/// with it, and the mapping is only forgotten.
pub(super) fn on_range_change(addr: usize, len: usize, why: &str, unmapping: bool) {
    if !any() {
        return;
    }
    let _inside = Guard::enter();
    let gone = take_where(|m| m.mapping.is_some_and(|p| p.overlaps(addr, len)));
    let (forget, drain): (Vec<_>, Vec<_>) = gone
        .into_iter()
        .partition(|m| unmapping && m.fd < 0 && m.mapping.is_some_and(|p| p.within(addr, len)));
    for m in forget.iter().filter_map(|m| m.mapping.as_ref()) {
        close_own(m);
    }
    drain_all(drain, why);
}

/// The program closes `fd`. A mapped memfd stays tiered, reachable through
/// its mapping only; an unmapped one is gone.
pub(super) fn on_close(fd: c_int) {
    if !may_be_followed(fd) || inside() {
        return;
    }
    let _inside = Guard::enter();
    let mut all = table();
    all.retain(|m| m.fd != fd || m.mapping.is_some());
    for m in all.iter_mut().filter(|m| m.fd == fd) {
        m.fd = -1;
    }
    publish(&all);
}

/// The program closed every descriptor in `[first, last]`.
pub(super) fn on_close_range(first: u32, last: u32) {
    let _inside = Guard::enter();
    let closed: Vec<c_int> = table()
        .iter()
        .map(|m| m.fd)
        .filter(|&fd| fd >= 0 && (first..=last).contains(&(fd as u32)))
        .collect();
    drop(_inside);
    for fd in closed {
        on_close(fd);
    }
}

/// In a forked child: the memfds and their mappings are the parent's to
/// follow. The child's copy of a mapping stays its own tiered memory, and
/// tiermem's duplicates of the descriptors close.
pub(super) fn forget_in_child() {
    let _inside = Guard::enter();
    let mut all = table();
    for p in all.iter().filter_map(|m| m.mapping.as_ref()) {
        close_own(p);
    }
    all.clear();
    publish(&all);
}

/// `MADV_DONTFORK` (`dontfork`) or `MADV_DOFORK` over `[addr, addr+len)`.
pub(super) fn advise_fork(addr: usize, len: usize, dontfork: bool) {
    if !any() {
        return;
    }
    let _inside = Guard::enter();
    for p in table().iter_mut().filter_map(|m| m.mapping.as_mut()) {
        if p.overlaps(addr, len) {
            // Only advice over all of it counts: a child would get the rest.
            p.dontfork = dontfork && (p.within(addr, len) || p.dontfork);
        }
    }
}

/// Whether `[addr, addr+len)` touches a tiered memfd mapping.
pub(super) fn is_tiered_memfd(addr: usize, len: usize) -> bool {
    any() && {
        let _inside = Guard::enter();
        table()
            .iter()
            .filter_map(|m| m.mapping.as_ref())
            .any(|p| p.overlaps(addr, len))
    }
}

/// A fork is about to copy the memory. A child that gets a tiered memfd
/// mapping must share its pages with the parent, which only the kernel's
/// shared mapping does; and a child that gets an unmapped memfd's
/// descriptor can write the file behind a later mapping's back.
pub(super) fn before_fork() {
    if !any() {
        return;
    }
    let _inside = Guard::enter();
    let gone = take_where(|m| m.mapping.is_none_or(|p| !p.dontfork));
    drain_all(gone, "the program forked a child that shares it");
}

fn take_where(mut pick: impl FnMut(&Memfd) -> bool) -> Vec<Memfd> {
    let mut all = table();
    let (taken, kept): (Vec<_>, Vec<_>) = all.drain(..).partition(|m| pick(m));
    *all = kept;
    publish(&all);
    taken
}

fn close_own(p: &Mapping) {
    // SAFETY: tiermem's own duplicate, closed once.
    unsafe { libc::close(p.own_fd) };
}

fn drain_all(gone: Vec<Memfd>, why: &str) {
    for p in gone.iter().filter_map(|m| m.mapping.as_ref()) {
        drain(p, why);
        close_own(p);
    }
}

/// Moves the mapping's bytes into its file, and says so.
fn drain(p: &Mapping, why: &str) {
    let rt = runtime();
    let started = std::time::Instant::now();
    // SAFETY: the range is the program's tiered memory standing for the
    // file, which is still empty: every way to write it goes through here.
    let drained = unsafe { rt.drain_into_file(p.addr, p.len, p.own_fd, p.offset) };
    let took_ms = started.elapsed().as_secs_f64() * 1e3;
    let who = format!("{} (pid {})", program_name(), std::process::id());
    match drained {
        Ok(d) => {
            eprintln!(
                "tiermem: {who}: {} of memfd memory left tiering ({why}): {} pages moved into the file in {took_ms:.0} ms; it is the kernel's shared memory now, outside the {} DRAM budget",
                mib(p.len as u64),
                d.pages_written,
                mib(rt.dram_budget()),
            );
            if d.pages_lost > 0 {
                eprintln!(
                    "tiermem: {who}: {} pages of it had been lost to read errors before, and read as zeros in the file",
                    d.pages_lost
                );
            }
        }
        Err(e) => eprintln!(
            "tiermem: {who}: {} of memfd memory could not move into its file ({why}): {e}; its bytes stay in the mapping, which the file no longer shares",
            mib(p.len as u64),
        ),
    }
}
