//! Transparent mode: libtiermem.so preloaded into an unmodified program
//! (`tiermem run`, which sets `TIERMEM_PRELOAD=1` and `LD_PRELOAD`).
//!
//! - `malloc` and friends are served by mimalloc from one lazily committed
//!   tiered region (mimalloc may not take object memory from the OS);
//! - large private anonymous `mmap`s become tiered regions, and `munmap`,
//!   `mremap` and `madvise` on them keep their kernel semantics;
//! - `fork` gives the child its own pager over an exact copy of the memory;
//! - a Go program is warned when its runtime would count on zeros tiermem
//!   cannot give ([`go_runtime`]).
//!
//! Without `TIERMEM_PRELOAD=1` (a program linking `-ltiermem` for the API)
//! every interposed function forwards to glibc or the kernel unchanged.

/// glibc's definition of a function tiermem shadows, with the C type
/// `$ty`, its address cached in `$cache` (looked up when the library loads,
/// so that no lookup, which allocates, happens later in a signal handler);
/// ENOSYS and -1 from the calling function when glibc has none.
macro_rules! glibc_fn {
    ($cache:ident, $name:literal, $ty:ty) => {{
        match $crate::preload::next_symbol($name, &$cache) {
            // SAFETY: glibc's function of that name has this signature.
            Some(f) => unsafe { std::mem::transmute::<usize, $ty>(f) },
            None => {
                $crate::preload::set_errno(libc::ENOSYS);
                return -1 as _;
            }
        }
    }};
}

pub(crate) mod control;
mod exit_stats;
mod fd_escapes;
pub(crate) mod fork;
mod go_runtime;
mod guard;
#[cfg(target_arch = "x86_64")]
mod ioctl;
pub mod libc_heap;
mod malloc;
mod memfd;
mod mlock;
mod mmap;
mod pinned_io;
mod syscall;

use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};

use tiermem_core::{global, parse_size, Config, Runtime, DEFAULT_BACKING_DIR};

pub use guard::Guard;

/// Environment switches read by the preloaded library.
pub const ENV_PRELOAD: &str = "TIERMEM_PRELOAD";
pub const ENV_STATS: &str = "TIERMEM_STATS";
/// Where to write the exit statistics as JSON (`%p`: the pid).
pub const ENV_STATS_FILE: &str = "TIERMEM_STATS_FILE";
pub const ENV_MMAP_THRESHOLD: &str = "TIERMEM_MMAP_THRESHOLD";
pub const ENV_NO_INHERIT: &str = "TIERMEM_NO_INHERIT";

/// Anonymous mappings at least this large are tiered (glibc's own default
/// mmap threshold, which catches allocator arenas and big buffers).
const DEFAULT_MMAP_THRESHOLD: usize = 128 << 10;
/// mimalloc v2 arenas are made of 32 MiB segments aligned to 32 MiB.
const MIMALLOC_SEGMENT: usize = 32 << 20;
/// Address space given to mimalloc, whatever the backing store's size: it
/// is only reserved, and pages cost backing space once touched.
const MALLOC_ARENA_MIN: usize = 64 << 30;
const MALLOC_ARENA_MAX: usize = 4 << 40;

const UNINIT: u8 = 0;
const OFF: u8 = 1;
const ACTIVE: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
static MALLOC_ARENA_START: AtomicUsize = AtomicUsize::new(0);
static MALLOC_ARENA_LEN: AtomicUsize = AtomicUsize::new(0);
static MMAP_THRESHOLD: AtomicUsize = AtomicUsize::new(DEFAULT_MMAP_THRESHOLD);

/// Runs when the library is loaded, after glibc is initialised: the
/// earliest point where threads and files may be created. Allocations made
/// before it (by the loader and libc's own start-up) come from glibc and
/// stay valid: `free` and `realloc` tell the two heaps apart by address.
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = on_load;

extern "C" fn on_load() {
    // Before anything can call them from a signal handler (the C API's
    // signal delivery reads the store from inside SIGBUS handlers).
    pinned_io::resolve();
    fd_escapes::resolve();
    if env(ENV_PRELOAD).as_deref() != Some("1") {
        STATE.store(OFF, Ordering::Release);
        return;
    }
    if let Err(e) = start() {
        // tiermem run checked all of this before starting the program; a
        // failure here is unexpected, and running untiered would be silent.
        eprintln!(
            "tiermem: cannot start in {} (pid {}): {e}",
            program_name(),
            std::process::id()
        );
        // SAFETY: _exit ends the process without running anything else.
        unsafe { libc::_exit(1) };
    }
}

fn start() -> Result<(), String> {
    let _inside = Guard::enter();
    tiermem_core::set_thread_start_hook(guard::mark_runtime_thread);
    if let Some(t) = env(ENV_MMAP_THRESHOLD) {
        let bytes = parse_size("mmap threshold", &t)
            .map_err(|e| e.to_string())?
            .resolve();
        MMAP_THRESHOLD.store(bytes.max(4096) as usize, Ordering::Relaxed);
    }
    let config = Config::from_env()
        .and_then(|c| c.check_transparent().map(|()| c))
        .map_err(|e| e.to_string())?;
    let rt = global::init_with_fallback(config, private_file_if_store_in_use)
        .map_err(|e| e.to_string())?;
    give_mimalloc_its_arena(rt)?;
    RUNTIME.store(rt as *const Runtime as *mut Runtime, Ordering::Release);
    fork::install();
    if env(ENV_NO_INHERIT).as_deref() == Some("1") {
        // Programs this one execs start untiered.
        for var in [c"LD_PRELOAD", c"TIERMEM_PRELOAD"] {
            // SAFETY: unsetenv with a NUL-terminated name, before any other thread of the program exists.
            unsafe { libc::unsetenv(var.as_ptr()) };
        }
    }
    control::start_once(rt);
    go_runtime::warn_if_go_counts_on_zeros(&program_name());
    if env(ENV_STATS).as_deref() == Some("1") {
        exit_stats::register();
    }
    if let Some(template) = env(ENV_STATS_FILE).filter(|t| !t.is_empty()) {
        exit_stats::register_file(template);
    }
    STATE.store(ACTIVE, Ordering::Release);
    Ok(())
}

/// A backing file or device serves one process. The first process of a
/// run takes it, and keeps it across its own exec (the descriptor closes,
/// the next image opens it again): a wrapper that execs the real program,
/// such as a pyenv shim, hands the store on. A process started while
/// another one of the run holds it (a forked child that execs) pages to a
/// private file in the default directory instead, and says so at exit if
/// it paged anything.
fn private_file_if_store_in_use(e: &tiermem_core::Error) -> Option<Config> {
    if !e.is_store_in_use() {
        return None;
    }
    let mut config = Config::from_env().ok()?;
    exit_stats::note_spill(config.backing.clone());
    config.backing = DEFAULT_BACKING_DIR.into();
    Some(config)
}

/// Reserves the malloc arena in the lazily committed zone and hands it to
/// mimalloc, which from then on may not take object memory from the OS.
fn give_mimalloc_its_arena(rt: &'static Runtime) -> Result<(), String> {
    let capacity = rt.stats().backing_capacity_bytes as usize;
    let room = (rt.lazy_zone_bytes() / 2) as usize;
    let len = capacity
        .saturating_mul(2)
        .clamp(MALLOC_ARENA_MIN, MALLOC_ARENA_MAX)
        .min(room)
        / MIMALLOC_SEGMENT
        * MIMALLOC_SEGMENT;
    let region = rt
        .alloc_lazy(len + MIMALLOC_SEGMENT)
        .map_err(|e| format!("reserving the malloc arena: {e}"))?;
    let start = (region.as_ptr() as usize).next_multiple_of(MIMALLOC_SEGMENT);
    let mut arena_id: libmimalloc_sys::mi_arena_id_t = 0;
    // SAFETY: plain option setting; then the region is ours, reserved,
    // readable and writable, zero, and lives as long as the process.
    // `is_committed = false` lets mimalloc purge freed memory (MADV_DONTNEED,
    // which the pager sees); its "commit" is an mprotect to read-write.
    let managed = unsafe {
        libmimalloc_sys::mi_option_set(libmimalloc_sys::mi_option_limit_os_alloc, 1);
        libmimalloc_sys::mi_manage_os_memory_ex(
            start as *const libc::c_void,
            len,
            false,
            false,
            true,
            -1,
            false,
            &mut arena_id,
        )
    };
    if !managed {
        return Err("mimalloc refused the malloc arena".into());
    }
    MALLOC_ARENA_START.store(start, Ordering::Release);
    MALLOC_ARENA_LEN.store(len, Ordering::Release);
    Ok(())
}

/// Whether tiering is on in this process.
#[inline]
pub fn active() -> bool {
    STATE.load(Ordering::Acquire) == ACTIVE
}

/// The runtime; only call when [`active`].
#[inline]
pub fn runtime() -> &'static Runtime {
    let rt = RUNTIME.load(Ordering::Acquire);
    debug_assert!(!rt.is_null());
    // SAFETY: set once in `start` from a &'static Runtime before ACTIVE.
    unsafe { &*rt }
}

/// The runtime whose memory the program's calls may touch: the preload's,
/// or the one the C API started. None inside tiermem itself.
pub fn program_runtime() -> Option<&'static Runtime> {
    if guard::inside() {
        return None;
    }
    match active() {
        true => Some(runtime()),
        false => global::running(),
    }
}

/// Whether `p` was handed out by mimalloc from the malloc arena.
#[inline]
pub fn in_malloc_arena(p: usize) -> bool {
    p.wrapping_sub(MALLOC_ARENA_START.load(Ordering::Relaxed))
        < MALLOC_ARENA_LEN.load(Ordering::Relaxed)
}

pub fn mmap_threshold() -> usize {
    MMAP_THRESHOLD.load(Ordering::Relaxed)
}

/// An environment variable, read without allocating from tiered memory.
fn env(name: &str) -> Option<String> {
    let _inside = Guard::enter();
    std::env::var(name).ok()
}

fn program_name() -> String {
    extern "C" {
        static program_invocation_short_name: *const c_char;
    }
    // SAFETY: glibc sets this NUL-terminated string before any constructor.
    unsafe {
        if program_invocation_short_name.is_null() {
            return "?".into();
        }
        CStr::from_ptr(program_invocation_short_name)
            .to_string_lossy()
            .into_owned()
    }
}

/// The next definition of `name` after ours (glibc's), looked up once and
/// kept in `cache`.
fn next_symbol(name: &'static CStr, cache: &AtomicUsize) -> Option<usize> {
    let mut f = cache.load(Ordering::Acquire);
    if f == 0 {
        let _inside = Guard::enter();
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        cache.store(f, Ordering::Release);
    }
    (f != 0).then_some(f)
}

fn set_errno(code: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = code };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_threshold_is_the_settings_table() {
        let row = tiermem_core::settings::known(ENV_MMAP_THRESHOLD);
        let bytes = parse_size(ENV_MMAP_THRESHOLD, row.value).unwrap().resolve();
        assert_eq!(bytes, DEFAULT_MMAP_THRESHOLD as u64);
    }
}
