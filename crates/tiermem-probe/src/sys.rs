//! The measuring instruments: serialized TSC timing, the timer-interrupt
//! counter, memory that tiermem does not tier, and a small RNG.
//!
//! Everything here is allocation-free once set up. Inside a `--target
//! tiermem` worker every `malloc` is served from tiered memory, so the
//! probe's own buffers come from raw `mmap` system calls (which the
//! interposer never sees) and the interrupt counter parses
//! `/proc/interrupts` in place.

use std::time::{Duration, Instant};

#[cfg(target_arch = "x86_64")]
mod arch {
    use core::arch::x86_64::{__rdtscp, _mm_clflush, _mm_lfence, _mm_mfence, _rdtsc};

    /// Timestamp before the measured access: earlier memory operations are
    /// complete (mfence) and the counter is read before the access issues
    /// (lfence on both sides).
    #[inline(always)]
    pub fn begin() -> u64 {
        // SAFETY: fences and rdtsc have no preconditions on x86-64.
        unsafe {
            _mm_mfence();
            _mm_lfence();
            let t = _rdtsc();
            _mm_lfence();
            t
        }
    }

    /// Timestamp after the measured access: rdtscp waits for the access to
    /// finish, lfence keeps later instructions from starting before it.
    #[inline(always)]
    pub fn end() -> u64 {
        // SAFETY: as above.
        unsafe {
            let mut aux = 0u32;
            let t = __rdtscp(&mut aux);
            _mm_lfence();
            t
        }
    }

    #[inline(always)]
    pub fn fence() {
        // SAFETY: as above.
        unsafe { _mm_mfence() }
    }

    /// Evicts the CPU cache line holding `p` from every level.
    #[inline(always)]
    pub(crate) fn clflush(p: *const u8) {
        // SAFETY: clflush of a mapped address has no other precondition.
        unsafe {
            _mm_mfence();
            _mm_clflush(p);
            _mm_mfence();
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod arch {
    //! Portable fallback: the monotonic clock in nanoseconds, no flush.
    pub fn begin() -> u64 {
        now()
    }
    pub fn end() -> u64 {
        now()
    }
    pub fn fence() {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
    pub(crate) fn clflush(_p: *const u8) {}
    fn now() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into `ts`.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

pub(crate) use arch::clflush;

/// Cycles taken by one read of the byte at `p`; the value read goes to
/// `sink` so the load cannot be optimised away.
#[inline(never)]
pub(crate) fn time_read(p: *const u8, sink: &mut u8) -> u64 {
    let t0 = arch::begin();
    // SAFETY: callers pass addresses inside a live mapping.
    let v = unsafe { std::ptr::read_volatile(p) };
    let t1 = arch::end();
    *sink = sink.wrapping_add(v);
    t1.wrapping_sub(t0)
}

/// Cycles taken by one write of `v` to `p`, until the store is globally
/// visible (the mfence drains the store buffer before the clock is read).
#[inline(never)]
pub(crate) fn time_write(p: *mut u8, v: u8) -> u64 {
    let t0 = arch::begin();
    // SAFETY: callers pass addresses inside a live writable mapping.
    unsafe { std::ptr::write_volatile(p, v) };
    arch::fence();
    let t1 = arch::end();
    t1.wrapping_sub(t0)
}

/// An untimed read (for clearing and warming).
#[inline(always)]
pub(crate) fn touch(p: *const u8, sink: &mut u8) {
    // SAFETY: callers pass addresses inside a live mapping.
    *sink = sink.wrapping_add(unsafe { std::ptr::read_volatile(p) });
}

/// TSC ticks per nanosecond, measured against the monotonic clock.
pub fn ticks_per_ns() -> f64 {
    let mut best = f64::NAN;
    for _ in 0..3 {
        let t0 = Instant::now();
        let c0 = arch::end();
        std::thread::sleep(Duration::from_millis(30));
        let c1 = arch::end();
        let ns = t0.elapsed().as_nanos() as f64;
        let r = (c1.wrapping_sub(c0)) as f64 / ns;
        if best.is_nan() || r < best {
            best = r;
        }
    }
    if best.is_finite() && best > 0.0 {
        best
    } else {
        1.0
    }
}

/// Anonymous memory mapped with the raw system call: never seen by
/// libtiermem's interposer, so never tiered.
pub fn raw_map(len: usize) -> *mut u8 {
    // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            0usize,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1i32,
            0usize,
        )
    };
    assert!(
        p != -1 && p != 0,
        "mmap of {len} bytes failed: {}",
        std::io::Error::last_os_error()
    );
    p as *mut u8
}

pub(crate) fn raw_unmap(p: *mut u8, len: usize) {
    // SAFETY: `p`/`len` came from `raw_map`.
    unsafe { libc::syscall(libc::SYS_munmap, p as usize, len) };
}

/// A fixed-capacity vector in untiered memory.
pub struct RawVec<T: Copy> {
    ptr: *mut T,
    len: usize,
    cap: usize,
}

impl<T: Copy> RawVec<T> {
    pub fn with_capacity(cap: usize) -> Self {
        let cap = cap.max(1);
        let bytes = (cap * std::mem::size_of::<T>()).next_multiple_of(4096);
        RawVec {
            ptr: raw_map(bytes) as *mut T,
            len: 0,
            cap,
        }
    }
    /// Appends, or drops the value when full (capacity is sized generously).
    pub fn push(&mut self, v: T) {
        if self.len < self.cap {
            // SAFETY: in bounds of the mapping.
            unsafe { self.ptr.add(self.len).write(v) };
            self.len += 1;
        }
    }
    pub fn clear(&mut self) {
        self.len = 0;
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: the first `len` elements were written.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as above, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T: Copy> Drop for RawVec<T> {
    fn drop(&mut self) {
        let bytes = (self.cap * std::mem::size_of::<T>()).next_multiple_of(4096);
        raw_unmap(self.ptr as *mut u8, bytes);
    }
}

/// The memory being probed: an ordinary anonymous `mmap` (tiered when
/// libtiermem.so is preloaded), aligned to 2 MiB.
pub struct Region {
    map: *mut u8,
    map_len: usize,
    pub base: *mut u8,
    pub len: usize,
}

pub const REGION_ALIGN: usize = 2 << 20;

impl Region {
    pub fn new(len: usize, huge: bool) -> anyhow::Result<Region> {
        let map_len = len + REGION_ALIGN;
        // SAFETY: a fresh private anonymous mapping. This goes through the
        // libc symbol on purpose: preloaded, libtiermem tiers it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            anyhow::bail!(
                "mapping the {} MiB probe region failed: {}",
                len >> 20,
                std::io::Error::last_os_error()
            );
        }
        let base = (p as usize).next_multiple_of(REGION_ALIGN) as *mut u8;
        let advice = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: advice on our own mapping; failure only loses a hint.
        unsafe { libc::madvise(base.cast(), len, advice) };
        Ok(Region {
            map: p as *mut u8,
            map_len,
            base,
            len,
        })
    }

    #[inline(always)]
    pub fn at(&self, off: usize) -> *mut u8 {
        debug_assert!(off < self.len);
        // SAFETY: in bounds.
        unsafe { self.base.add(off) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

/// Local timer interrupts of one CPU, read from `/proc/interrupts` (the `LOC`
/// line) without allocating, so that reading it between timed accesses does
/// not itself disturb them. The samples of a batch that took a timer
/// interrupt are discarded.
pub struct IrqCounter {
    fd: i32,
    column: usize,
    buf: RawVec<u8>,
}

const IRQ_BUF: usize = 256 << 10;

impl IrqCounter {
    pub fn open(cpu: usize) -> Option<IrqCounter> {
        // SAFETY: a NUL-terminated path; the descriptor is ours.
        let fd = unsafe {
            libc::open(
                c"/proc/interrupts".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        let mut c = IrqCounter {
            fd,
            column: 0,
            buf: RawVec::with_capacity(IRQ_BUF),
        };
        let text = c.fill()?;
        let header = text.split(|&b| b == b'\n').next()?;
        let want = format!("CPU{cpu}");
        c.column = header
            .split(|b| b.is_ascii_whitespace())
            .filter(|t| !t.is_empty())
            .position(|t| t == want.as_bytes())?;
        c.read()?;
        Some(c)
    }

    fn fill(&mut self) -> Option<&[u8]> {
        let mut total = 0usize;
        // SAFETY: the buffer has IRQ_BUF bytes of capacity.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.buf.ptr, IRQ_BUF) };
        loop {
            // SAFETY: reads into our buffer, within its capacity.
            let n = unsafe {
                libc::pread(
                    self.fd,
                    dst[total..].as_mut_ptr().cast(),
                    IRQ_BUF - total,
                    total as libc::off_t,
                )
            };
            if n < 0 {
                return None;
            }
            if n == 0 || total + n as usize >= IRQ_BUF {
                total += n as usize;
                break;
            }
            total += n as usize;
        }
        Some(&dst[..total])
    }

    /// The CPU's local timer interrupt count.
    pub fn read(&mut self) -> Option<u64> {
        let column = self.column;
        let text = self.fill()?;
        for line in text.split(|&b| b == b'\n') {
            let mut tokens = line
                .split(|b| b.is_ascii_whitespace())
                .filter(|t| !t.is_empty());
            if tokens.next() != Some(b"LOC:".as_slice()) {
                continue;
            }
            let tok = tokens.nth(column)?;
            let mut v = 0u64;
            for &d in tok {
                if !d.is_ascii_digit() {
                    return None;
                }
                v = v * 10 + (d - b'0') as u64;
            }
            return Some(v);
        }
        None
    }
}

impl Drop for IrqCounter {
    fn drop(&mut self) {
        // SAFETY: our descriptor.
        unsafe { libc::close(self.fd) };
    }
}

/// Pins the calling thread to the CPU it runs on; returns that CPU.
pub fn pin_to_current_cpu() -> usize {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() }.max(0) as usize;
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET stays within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
    cpu
}

/// xorshift64*.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}
