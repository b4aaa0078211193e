//! libtiermem.so: the C API declared in `include/tiermem.h`.
//!
//! Every function starts the process-wide runtime lazily from the
//! environment, turns errors into errno plus a thread-local message
//! (`tm_last_error`), and never unwinds across the C boundary (the crate is
//! built with `panic = "abort"`).

#![warn(missing_docs)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};

use tiermem_core::{global, settings, Config, Error, Runtime, Stats};

mod preload;

/// Everything the library allocates for itself comes from glibc directly,
/// never through the (possibly interposed) `malloc` symbol.
#[global_allocator]
static LIBC_HEAP: preload::libc_heap::LibcHeap = preload::libc_heap::LibcHeap;

/// Explicit configuration, `struct tm_config` in `include/tiermem.h`. Zero or
/// NULL fields keep the value from the environment, or the default when the
/// environment does not set it.
#[repr(C)]
pub struct TmConfig {
    /// DRAM for tiered pages, in bytes.
    pub dram_budget: u64,
    /// A directory, file or block device (NUL-terminated path).
    pub backing_path: *const c_char,
    /// Cap on the backing store, in bytes.
    pub backing_size: u64,
    /// Unit of paging, in bytes: a power of two from 4096 to 2097152.
    pub page_size: u64,
    /// Replacement policy: `"clock"` (the default), `"fifo"` or `"s3fifo"`.
    pub policy: *const c_char,
    /// Userfaultfd handler threads.
    pub handler_threads: u32,
    /// Unused and ignored: it fills the padding after `handler_threads`, so the
    /// layout has no hidden bytes. Leave it zero.
    pub reserved0: u32,
    /// Ways per set, as `TIERMEM_ASSOCIATIVITY`: `"0"` fully associative, `"1"`
    /// direct-mapped, `"N"` N-way.
    pub associativity: *const c_char,
    /// Pages read after each miss, as `TIERMEM_PREFETCH` (`"0"`: none); NULL
    /// keeps the environment's, by default the adaptive read-ahead.
    pub prefetch: *const c_char,
    /// `"write-back"` (the default) or `"write-through"`, as
    /// `TIERMEM_WRITE_POLICY`.
    pub write_policy: *const c_char,
    /// `"inclusive"` (the default) or `"exclusive"`, as `TIERMEM_INCLUSION`.
    pub inclusion: *const c_char,
    /// A named set of the knobs above, as `TIERMEM_PRESET`: `"memory-mode"`
    /// (direct-mapped, write-back, inclusive, no prefetch); the knobs set here
    /// override it.
    pub preset: *const c_char,
    /// Who resolves a fault, as `TIERMEM_FAULTS`: `"handler"` (the default) or
    /// `"signal"`.
    pub faults: *const c_char,
}

/// Fault latency percentiles, `struct tm_latency` in `include/tiermem.h`, each
/// within about 1.6% (half the width of the runtime's histogram buckets).
#[repr(C)]
#[derive(Default)]
pub struct TmLatency {
    /// Faults recorded.
    pub count: u64,
    /// Mean, in nanoseconds (exact, not bucketed).
    pub mean_ns: u64,
    /// Median, in nanoseconds.
    pub p50_ns: u64,
    /// 90th percentile, in nanoseconds.
    pub p90_ns: u64,
    /// 99th percentile, in nanoseconds.
    pub p99_ns: u64,
    /// 99.9th percentile, in nanoseconds.
    pub p999_ns: u64,
    /// Slowest fault, in nanoseconds (exact).
    pub max_ns: u64,
}

/// The runtime's counters and sizes, `struct tm_stats` in `include/tiermem.h`,
/// as [`tm_stats`] fills it in.
#[repr(C)]
#[derive(Default)]
pub struct TmStats {
    /// Userfaultfd faults served: missing plus write-protect.
    pub faults: u64,
    /// Faults on pages not mapped in DRAM.
    pub missing_faults: u64,
    /// First writes to clean pages (dirty tracking).
    pub wp_faults: u64,
    /// First touches of never-written pages.
    pub zero_fills: u64,
    /// Pages read from the backing store.
    pub page_ins: u64,
    /// Pages written to the backing store.
    pub page_outs: u64,
    /// Clean pages dropped without a write: their store copy was still valid.
    pub clean_drops: u64,
    /// All-zero pages dropped without a write.
    pub zero_drops: u64,
    /// Re-references caught in probation, served without I/O.
    pub probation_hits: u64,
    /// Bytes of pages read from the backing store.
    pub bytes_read: u64,
    /// Bytes of pages written to the backing store.
    pub bytes_written: u64,
    /// DRAM held by tiered pages now, in bytes.
    pub resident_bytes: u64,
    /// Most DRAM tiered pages have held at once, in bytes.
    pub peak_resident_bytes: u64,
    /// The DRAM budget now, in bytes.
    pub budget_bytes: u64,
    /// Live `tm_alloc`'d memory, in bytes rounded up to whole pages.
    pub allocated_bytes: u64,
    /// Bytes the backing file occupies on disk.
    pub backing_bytes: u64,
    /// DRAM the runtime uses for itself (page table, bitmaps, buffers), in
    /// bytes.
    pub metadata_bytes: u64,
    /// The unit of paging, in bytes.
    pub page_size: u64,
    /// Time from reading a fault to resolving it, as the handler threads see it.
    pub fault_latency: TmLatency,
    /// Pages read ahead of demand.
    pub prefetch_issued: u64,
    /// Read-ahead pages later used.
    pub prefetch_hits: u64,
    /// Read-ahead pages evicted unused.
    pub prefetch_wasted: u64,
    /// Pages a miss evicted from its full set (set-associative placement).
    pub conflict_evictions: u64,
    /// Written pages copied to the store by write-through.
    pub write_throughs: u64,
    /// Read faults installed writable because a write was predicted.
    pub predicted_writes: u64,
    /// Failed or corrupt page reads, and failed write requests.
    pub io_errors: u64,
    /// Pages lost to a read that failed twice: their access gets SIGBUS.
    pub poisoned_pages: u64,
    /// Store space freed but kept while forked children may read it.
    pub parked_bytes: u64,
    /// Pages held compressed in DRAM now.
    pub compressed_pages: u64,
    /// DRAM the compressed pool holds (part of `resident_bytes`).
    pub pool_bytes: u64,
    /// Pages that entered the compressed tier.
    pub compressed_stores: u64,
    /// Of those, pages kept as one repeated word.
    pub same_filled_pages: u64,
    /// Pages that saved less than a quarter, sent to the store.
    pub compress_rejected: u64,
    /// Compressed pages that left for the store.
    pub compressed_writebacks: u64,
    /// Faults served by decompressing.
    pub compressed_hits: u64,
    /// Pages read with a miss on the page before them (part of
    /// `prefetch_issued`).
    pub neighbour_reads: u64,
    /// Of those, the ones parked to sample their use.
    pub neighbour_samples: u64,
    /// Sampled neighbours the program used.
    pub neighbour_used: u64,
    /// Pages a full compressed pool that served no hits sent to the store
    /// uncompressed.
    pub compress_bypassed: u64,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

static START_FAILURE_PRINTED: AtomicBool = AtomicBool::new(false);

fn set_errno(code: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = code };
}

/// Records `e` for `tm_last_error` and errno.
fn fail(e: &Error) {
    let msg = CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|m| *m.borrow_mut() = msg);
    set_errno(e.errno());
}

/// The runtime, started from the environment if needed. A failed lazy start
/// is printed once, so a bare NULL from tm_alloc is never a mystery.
fn runtime() -> Option<&'static Runtime> {
    match global::get() {
        Ok(rt) => {
            // A forked child must see the evicted memory too.
            preload::fork::install();
            preload::control::start_once(rt);
            Some(rt)
        }
        Err(e) => {
            if !START_FAILURE_PRINTED.swap(true, Ordering::Relaxed) {
                eprintln!("tiermem: {e}");
            }
            fail(&e);
            None
        }
    }
}

/// # Safety
/// `p` must be NULL or a valid NUL-terminated string.
unsafe fn opt_str(p: *const c_char) -> Option<String> {
    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
}

/// The value `cfg` gives the setting of variable `var`, as text for the
/// setting's parser: a non-zero number or a non-NULL string; zero and NULL
/// give nothing.
///
/// # Safety
/// `cfg`'s strings must be NULL or NUL-terminated.
unsafe fn field_for(cfg: &TmConfig, var: &str) -> Option<String> {
    use tiermem_core::config::{
        ENV_BACKING, ENV_BACKING_SIZE, ENV_DRAM, ENV_FAULTS, ENV_HANDLER_THREADS, ENV_PAGE_SIZE,
        ENV_POLICY,
    };
    use tiermem_core::organization::{
        ENV_ASSOCIATIVITY, ENV_INCLUSION, ENV_PREFETCH, ENV_PRESET, ENV_WRITE_POLICY,
    };
    let number = |n: u64| (n != 0).then(|| n.to_string());
    match var {
        ENV_DRAM => number(cfg.dram_budget),
        ENV_BACKING => opt_str(cfg.backing_path),
        ENV_BACKING_SIZE => number(cfg.backing_size),
        ENV_PAGE_SIZE => number(cfg.page_size),
        ENV_POLICY => opt_str(cfg.policy),
        ENV_HANDLER_THREADS => number(u64::from(cfg.handler_threads)),
        ENV_PRESET => opt_str(cfg.preset),
        ENV_ASSOCIATIVITY => opt_str(cfg.associativity),
        ENV_PREFETCH => opt_str(cfg.prefetch),
        ENV_WRITE_POLICY => opt_str(cfg.write_policy),
        ENV_INCLUSION => opt_str(cfg.inclusion),
        ENV_FAULTS => opt_str(cfg.faults),
        _ => None,
    }
}

/// The configuration of `cfg` over the environment's: each setting is
/// resolved by `tiermem_core::settings`, a field of `cfg` taking the place of
/// a command-line flag (it wins over the variable), and the core fills in
/// the defaults from the same table.
///
/// # Safety
/// `cfg` must point to a valid `tm_config` whose strings are NUL-terminated.
unsafe fn config_from(cfg: &TmConfig) -> Result<Config, Error> {
    config_over(cfg, &|name| std::env::var(name).ok())
}

/// [`config_from`] over the environment `env`.
///
/// # Safety
/// As [`config_from`].
unsafe fn config_over(
    cfg: &TmConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, Error> {
    Config::from_lookup(|var| {
        let setting = settings::setting(var)?;
        // SAFETY: the caller vouches for `cfg` and its strings.
        let field = unsafe { field_for(cfg, var) };
        settings::given(setting, field, env).map(|resolved| resolved.value)
    })
}

/// Starts tiermem with the fields of `cfg` over the environment's settings
/// (NULL: the environment only). Returns 0, or -1 with errno: EBUSY if it
/// has started already, EINVAL for a bad setting, EPERM when userfaultfd is
/// not permitted, or the backing store's error.
///
/// # Safety
/// `cfg` must be NULL or point to a valid `struct tm_config`.
#[no_mangle]
pub unsafe extern "C" fn tm_init(cfg: *const TmConfig) -> c_int {
    let config = match cfg.as_ref() {
        Some(c) => config_from(c),
        None => Config::from_env(),
    };
    let result = config.and_then(global::init);
    match result {
        Ok(_) => {
            preload::fork::install();
            0
        }
        Err(e) => {
            let busy = global::running().is_some();
            fail(&e);
            if busy {
                set_errno(libc::EBUSY);
            }
            -1
        }
    }
}

/// Allocates `len` bytes of zeroed, page-aligned tiered memory; NULL with
/// errno on failure (EINVAL for a zero `len`, ENOMEM when the backing store
/// cannot hold it).
#[no_mangle]
pub extern "C" fn tm_alloc(len: usize) -> *mut c_void {
    let Some(rt) = runtime() else {
        return ptr::null_mut();
    };
    match rt.alloc(len) {
        Ok(p) => p.as_ptr().cast(),
        Err(e) => {
            fail(&e);
            ptr::null_mut()
        }
    }
}

/// Frees tiered memory; its DRAM and backing slots are reused. NULL is a
/// no-op.
///
/// # Safety
/// `p` must be NULL or a live pointer from `tm_alloc`/`tm_realloc`.
#[no_mangle]
pub unsafe extern "C" fn tm_free(p: *mut c_void) {
    let Some(p) = NonNull::new(p.cast::<u8>()) else {
        return;
    };
    let Some(rt) = runtime() else { return };
    if let Err(e) = rt.free(p) {
        eprintln!("tiermem: tm_free: {e}");
        fail(&e);
    }
}

/// Resizes `p` to `len` bytes, keeping its contents. A NULL `p` allocates; a
/// zero `len` frees `p` and returns NULL. On failure returns NULL and leaves
/// `p` intact.
///
/// # Safety
/// `p` must be NULL or a live pointer from `tm_alloc`/`tm_realloc`.
#[no_mangle]
pub unsafe extern "C" fn tm_realloc(p: *mut c_void, len: usize) -> *mut c_void {
    let Some(old) = NonNull::new(p.cast::<u8>()) else {
        return tm_alloc(len);
    };
    if len == 0 {
        tm_free(p);
        return ptr::null_mut();
    }
    let Some(rt) = runtime() else {
        return ptr::null_mut();
    };
    match rt.realloc(old, len) {
        Ok(new) => new.as_ptr().cast(),
        Err(e) => {
            fail(&e);
            ptr::null_mut()
        }
    }
}

/// Sets the DRAM budget to `bytes`; a shrink returns once resident memory
/// fits. Returns 0, or -1 with errno.
#[no_mangle]
pub extern "C" fn tm_set_dram_budget(bytes: usize) -> c_int {
    let Some(rt) = runtime() else { return -1 };
    match rt.set_dram_budget(bytes as u64) {
        Ok(()) => 0,
        Err(e) => {
            fail(&e);
            -1
        }
    }
}

/// The DRAM budget now, in bytes; 0 if the runtime cannot start.
#[no_mangle]
pub extern "C" fn tm_get_dram_budget() -> usize {
    runtime().map_or(0, |rt| rt.dram_budget() as usize)
}

/// Writes the runtime's counters and sizes to `out`. Returns 0, or -1 with
/// errno: EINVAL for a NULL `out`, or why the runtime could not start.
///
/// # Safety
/// `out` must be NULL or point to writable memory for a `struct tm_stats`.
#[no_mangle]
pub unsafe extern "C" fn tm_stats(out: *mut TmStats) -> c_int {
    if out.is_null() {
        fail(&Error::InvalidSetting {
            setting: "tm_stats argument",
            value: "NULL".into(),
            expected: "a pointer to struct tm_stats".into(),
        });
        return -1;
    }
    let Some(rt) = runtime() else { return -1 };
    out.write(to_c(&rt.stats()));
    0
}

fn to_c(s: &Stats) -> TmStats {
    let l = &s.fault_latency;
    TmStats {
        faults: s.faults,
        missing_faults: s.missing_faults,
        wp_faults: s.wp_faults,
        zero_fills: s.zero_fills,
        page_ins: s.page_ins,
        page_outs: s.page_outs,
        clean_drops: s.clean_drops,
        zero_drops: s.zero_drops,
        probation_hits: s.probation_hits,
        bytes_read: s.bytes_read,
        bytes_written: s.bytes_written,
        resident_bytes: s.resident_bytes,
        peak_resident_bytes: s.peak_resident_bytes,
        budget_bytes: s.budget_bytes,
        allocated_bytes: s.allocated_bytes,
        backing_bytes: s.backing_bytes,
        metadata_bytes: s.metadata_bytes,
        page_size: s.page_size,
        fault_latency: TmLatency {
            count: l.count,
            mean_ns: l.mean_ns,
            p50_ns: l.p50_ns,
            p90_ns: l.p90_ns,
            p99_ns: l.p99_ns,
            p999_ns: l.p999_ns,
            max_ns: l.max_ns,
        },
        prefetch_issued: s.prefetch_issued,
        prefetch_hits: s.prefetch_hits,
        prefetch_wasted: s.prefetch_wasted,
        conflict_evictions: s.conflict_evictions,
        write_throughs: s.write_throughs,
        predicted_writes: s.predicted_writes,
        io_errors: s.read_errors + s.write_errors,
        poisoned_pages: s.poisoned_pages,
        parked_bytes: s.parked_bytes,
        compressed_pages: s.compressed_pages,
        pool_bytes: s.pool_bytes,
        compressed_stores: s.compressed_stores,
        same_filled_pages: s.same_filled_pages,
        compress_rejected: s.compress_rejected,
        compressed_writebacks: s.compressed_writebacks,
        compressed_hits: s.compressed_hits,
        neighbour_reads: s.neighbour_reads,
        neighbour_samples: s.neighbour_samples,
        neighbour_used: s.neighbour_used,
        compress_bypassed: s.compress_bypassed,
    }
}

/// The calling thread's last error message, or `""` if none; valid until
/// the thread's next failing call.
#[no_mangle]
pub extern "C" fn tm_last_error() -> *const c_char {
    LAST_ERROR.with(|m| m.borrow().as_ptr())
}

/// The library's version, NUL-terminated, for `tm_version`; the header's
/// `TIERMEM_VERSION` is checked against the same crate version by a test.
static VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => panic!("the crate version contains a NUL byte"),
    };

/// The library's version, a static string: it starts no runtime, so a
/// program can check it before anything else.
#[no_mangle]
pub extern "C" fn tm_version() -> *const c_char {
    VERSION.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> TmConfig {
        TmConfig {
            dram_budget: 0,
            backing_path: ptr::null(),
            backing_size: 0,
            page_size: 0,
            policy: ptr::null(),
            handler_threads: 0,
            reserved0: 0,
            associativity: ptr::null(),
            prefetch: ptr::null(),
            write_policy: ptr::null(),
            inclusion: ptr::null(),
            preset: ptr::null(),
            faults: ptr::null(),
        }
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_field_wins_over_the_environment() {
        let env = env_of(&[
            ("TIERMEM_DRAM", "64M"),
            ("TIERMEM_POLICY", "fifo"),
            ("TIERMEM_HANDLER_THREADS", "3"),
        ]);
        let mut cfg = empty();
        cfg.dram_budget = 32 << 20;
        cfg.policy = c"s3fifo".as_ptr();
        // SAFETY: `cfg`'s strings are NULL or static C strings.
        let config = unsafe { config_over(&cfg, &env) }.expect("a valid configuration");
        assert_eq!(config.dram_budget, 32 << 20);
        assert_eq!(config.policy.name(), "s3fifo");
        assert_eq!(config.handler_threads, 3, "a zero field keeps the variable");
    }

    #[test]
    fn unset_fields_and_variables_take_the_defaults() {
        let cfg = empty();
        // SAFETY: every string of `cfg` is NULL.
        let config = unsafe { config_over(&cfg, &|_| None) }.expect("the defaults");
        assert_eq!(
            config.dram_budget,
            Config::from_lookup(|_| None).unwrap().dram_budget
        );
        assert_eq!(config.policy.name(), "clock");
    }

    #[test]
    fn a_bad_field_is_refused_with_the_variables_name() {
        let mut cfg = empty();
        cfg.write_policy = c"write-sideways".as_ptr();
        // SAFETY: `cfg`'s strings are NULL or static C strings.
        let error = unsafe { config_over(&cfg, &|_| None) }.unwrap_err();
        assert!(
            error.to_string().contains("TIERMEM_WRITE_POLICY"),
            "{error}"
        );
    }
}
