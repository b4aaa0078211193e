//! Runtime threads, started with pthread_create directly.
//!
//! std's thread start-up runs code of its own (spawn hooks registering
//! thread-local destructors, which calls `calloc`) before the thread's
//! closure. In transparent mode that `calloc` would be served from tiered
//! memory before the thread could mark itself as a runtime thread, and a
//! fault handler faulting on tiered memory deadlocks. Here the start hook
//! runs first, before any other code of the thread.

use std::io;

use crate::error::{Error, Result};

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Start {
    hook: Option<fn()>,
    name: String,
    job: Job,
}

/// A started thread; join it with [`Thread::join`].
pub struct Thread(libc::pthread_t);

// SAFETY: a pthread_t is an opaque id that any thread may join.
unsafe impl Send for Thread {}

impl Thread {
    /// Waits for the thread to finish.
    pub fn join(self) {
        // SAFETY: `self.0` is a joinable thread we started and join once.
        unsafe { libc::pthread_join(self.0, std::ptr::null_mut()) };
    }
}

/// Starts `job` on a new thread named `name` with a `stack`-byte stack,
/// running `hook` first.
pub fn spawn(name: String, stack: usize, hook: Option<fn()>, job: Job) -> Result<Thread> {
    let start = Box::into_raw(Box::new(Start { hook, name, job }));
    // SAFETY: attr is initialised before use and destroyed after.
    let mut attr: libc::pthread_attr_t = unsafe { std::mem::zeroed() };
    let mut thread: libc::pthread_t = 0;
    // SAFETY: `trampoline` takes ownership of `start` exactly once; on
    // failure we take it back.
    let rc = unsafe {
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setstacksize(&mut attr, stack.max(libc::PTHREAD_STACK_MIN));
        let rc = libc::pthread_create(&mut thread, &attr, trampoline, start.cast());
        libc::pthread_attr_destroy(&mut attr);
        rc
    };
    if rc != 0 {
        // SAFETY: the thread was not created, so `start` is still ours.
        drop(unsafe { Box::from_raw(start) });
        return Err(Error::os("starting a tiermem thread")(
            io::Error::from_raw_os_error(rc),
        ));
    }
    Ok(Thread(thread))
}

extern "C" fn trampoline(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `arg` is the Box<Start> leaked by `spawn`, handed over once.
    let start = unsafe { Box::from_raw(arg.cast::<Start>()) };
    block_all_signals();
    if let Some(hook) = start.hook {
        hook();
    }
    set_name(&start.name);
    (start.job)();
    std::ptr::null_mut()
}

/// Signals meant for the program must reach the program's threads: a
/// process-directed signal delivered to a runtime thread would be handled
/// there, in the middle of whatever the program's handler assumes (dash, for
/// one, drops a SIGTERM that arrives while its own threads block signals).
fn block_all_signals() {
    // SAFETY: a sigset_t filled by sigfillset, applied to this thread only.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

fn set_name(name: &str) {
    // Linux limits thread names to 15 bytes plus the NUL.
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: `buf` is NUL-terminated; naming our own thread.
    unsafe { libc::pthread_setname_np(libc::pthread_self(), buf.as_ptr().cast()) };
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size we pass.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET reads the set we own.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Restricts the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    restrict_current_thread(&[cpu])
}

/// Restricts the calling thread to `cpus`. Allocates nothing, so it may run
/// between fork and exec.
pub fn restrict_current_thread(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: `cpu` is below CPU_SETSIZE, so CPU_SET writes inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size we pass; this sets the
    // calling thread's own affinity.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes the calling thread a batch thread (`SCHED_BATCH`) if it runs
/// under the default policy: it keeps its fair share of CPU, but waking it
/// never preempts the thread running on the CPU it is woken on; it waits
/// for that thread's time slice, or for an idle CPU to pull it. A thread
/// under a real-time or idle policy keeps it. Returns whether it changed.
pub fn run_as_batch_if_default() -> io::Result<bool> {
    // SAFETY: sched_getscheduler reads the calling thread's own policy.
    if unsafe { libc::sched_getscheduler(0) } != libc::SCHED_OTHER {
        return Ok(false);
    }
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sets the calling thread's own policy; `param` is valid.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}

/// Thread cancellation held off until dropped (`pthread_setcancelstate`,
/// which the libc crate does not bind).
pub struct CancellationHeld(libc::c_int);

extern "C" {
    fn pthread_setcancelstate(state: libc::c_int, old: *mut libc::c_int) -> libc::c_int;
}

/// glibc's `PTHREAD_CANCEL_DISABLE`.
const PTHREAD_CANCEL_DISABLE: libc::c_int = 1;

impl CancellationHeld {
    /// Disables cancellation of the calling thread until the result is dropped.
    pub fn hold() -> CancellationHeld {
        let mut previous = 0;
        // SAFETY: sets this thread's cancel state; `previous` receives the old one.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut previous) };
        CancellationHeld(previous)
    }
}

impl Drop for CancellationHeld {
    fn drop(&mut self) {
        let mut ignored = 0;
        // SAFETY: restores the state saved by `hold` on this same thread.
        unsafe { pthread_setcancelstate(self.0, &mut ignored) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_thread_becomes_a_batch_thread() {
        let policy = std::thread::spawn(|| {
            let changed = run_as_batch_if_default().expect("SCHED_BATCH is unprivileged");
            // SAFETY: reads this thread's own policy.
            (changed, unsafe { libc::sched_getscheduler(0) })
        })
        .join()
        .expect("the batch thread");
        assert_eq!(policy, (true, libc::SCHED_BATCH));
    }

    #[test]
    fn a_pinned_thread_runs_on_its_cpu() {
        let cpus = allowed_cpus();
        let last = *cpus.last().expect("this process may run somewhere");
        let ran_on = std::thread::spawn(move || {
            pin_current_thread(last).expect("pinning to an allowed CPU");
            // SAFETY: sched_getcpu has no preconditions.
            unsafe { libc::sched_getcpu() }
        })
        .join()
        .expect("the pinned thread");
        assert_eq!(ran_on, last as i32);
        let absent = libc::CPU_SETSIZE as usize - 1;
        if !cpus.contains(&absent) {
            let refused = std::thread::spawn(move || pin_current_thread(absent).is_err());
            assert!(
                refused.join().expect("the refused thread"),
                "pinned to CPU {absent}"
            );
        }
    }
}
