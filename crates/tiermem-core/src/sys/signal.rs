//! SIGBUS from userfaultfd (`UFFD_FEATURE_SIGBUS`): the process-wide signal
//! handler, and what a fault looked like to the CPU.
//!
//! With that feature the kernel sends the faulting thread SIGBUS instead of
//! queueing a fault message, and the thread resolves its own fault inside
//! the signal handler. One handler serves every runtime in the process; a
//! SIGBUS it does not claim goes to whatever handler was installed before,
//! or kills the process as SIGBUS always did.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// A SIGBUS raised by an access to a user address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusFault {
    /// The address whose access raised the SIGBUS (`si_addr`).
    pub address: usize,
    /// The access was a write (known on x86-64 from the page-fault error
    /// code; elsewhere assumed a read, which costs a second fault at worst).
    pub write: bool,
    /// The page was present: a write to a write-protected page.
    pub protection: bool,
}

/// Resolves a fault; false if the address is not the callee's.
pub type BusFaultHandler = fn(&BusFault) -> bool;

type SigAction = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

static HANDLER: AtomicUsize = AtomicUsize::new(0);
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static INSTALL: Mutex<()> = Mutex::new(());

/// Installs the process's SIGBUS handler (once), which gives every SIGBUS
/// raised by a faulting access to `handler` first.
pub fn install_bus_handler(handler: BusFaultHandler) -> io::Result<()> {
    let _once = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    HANDLER.store(handler as *const () as usize, Ordering::Release);
    if PREVIOUS.get().is_some() {
        return Ok(());
    }
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value;
    // we fill in the handler and flags before passing it to the kernel.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_sigbus as SigAction as usize;
    // No SA_ONSTACK: the fault path runs on the thread's own stack, not on
    // an alternate signal stack (Rust gives every thread a small one for
    // its stack-overflow report). No SA_NODEFER: a SIGBUS inside the
    // handler (the runtime touching tiered memory, which it never does)
    // kills the process.
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // Every other signal waits until the fault is resolved: a program's
    // handler that touched tiered memory meanwhile would raise SIGBUS while
    // it is blocked, which the kernel answers by killing the process.
    // SAFETY: `sa_mask` is a valid sigset_t inside `action`.
    unsafe { libc::sigfillset(&mut action.sa_mask) };
    // The handler to forward to is known before ours can run.
    // SAFETY: a zeroed sigaction is valid for the kernel to fill in.
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the current one into `previous`.
    if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let _ = PREVIOUS.set(previous);
    // SAFETY: `action` is a valid sigaction; the old one is not needed.
    if unsafe { libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: errno is thread-local; the handler must leave it as it found it.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo and ucontext to an
    // SA_SIGINFO handler.
    let fault = unsafe { decode(info, context) };
    let handler = HANDLER.load(Ordering::Acquire);
    let handled = match (fault, handler) {
        (Some(fault), h) if h != 0 => {
            // SAFETY: HANDLER only ever holds a `BusFaultHandler`.
            let handler: BusFaultHandler = unsafe { std::mem::transmute::<usize, _>(h) };
            handler(&fault)
        }
        _ => false,
    };
    if !handled {
        // SAFETY: forwarding the signal exactly as the kernel gave it.
        unsafe { forward(sig, info, context) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// The faulting address and access of a SIGBUS raised by a memory access,
/// `None` for one sent by `kill` or raised otherwise.
///
/// # Safety
/// `info` and `context` are what the kernel passed to an SA_SIGINFO handler.
unsafe fn decode(info: *mut libc::siginfo_t, context: *mut libc::c_void) -> Option<BusFault> {
    /// The code userfaultfd's SIGBUS carries (`BUS_ADRERR`, not in libc's
    /// Linux bindings). Others (machine checks, sent signals) are not ours.
    const BUS_ADRERR: libc::c_int = 2;
    let info = &*info;
    if info.si_code != BUS_ADRERR {
        return None;
    }
    let (write, protection) = access_of(context);
    Some(BusFault {
        address: info.si_addr() as usize,
        write,
        protection,
    })
}

/// x86-64 saves the page-fault error code in the signal frame: bit 0 says
/// the page was present, bit 1 that the access was a write.
#[cfg(target_arch = "x86_64")]
unsafe fn access_of(context: *mut libc::c_void) -> (bool, bool) {
    const PF_PROT: i64 = 1 << 0;
    const PF_WRITE: i64 = 1 << 1;
    let context = &*(context as *const libc::ucontext_t);
    let error_code = context.uc_mcontext.gregs[libc::REG_ERR as usize];
    (error_code & PF_WRITE != 0, error_code & PF_PROT != 0)
}

/// Elsewhere the access kind is not decoded, and without it a write to a
/// write-protected page would look like a duplicate missing fault forever:
/// the configuration refuses signal delivery off x86-64, so this is never
/// called.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn access_of(_context: *mut libc::c_void) -> (bool, bool) {
    (false, false)
}

/// Passes a SIGBUS that is not ours to the handler installed before ours.
/// With none, the default action is restored, and the faulting access, run
/// again on return, raises it once more and kills the process as usual.
///
/// # Safety
/// The arguments are what the kernel passed to our handler.
unsafe fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let previous = PREVIOUS.get();
    let target = previous.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    let raised = (*info).si_code > 0;
    if target == libc::SIG_IGN && !raised {
        return;
    }
    // A SIGBUS raised by an access kills the process even when ignored:
    // returning would run the access, and raise it, forever.
    if target == libc::SIG_DFL || target == libc::SIG_IGN {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        if !raised {
            // Sent, not raised by an access: nothing will raise it again.
            libc::raise(libc::SIGBUS);
        }
        return;
    }
    let siginfo = previous.is_some_and(|p| p.sa_flags & libc::SA_SIGINFO != 0);
    if siginfo {
        let f: SigAction = std::mem::transmute(target);
        f(sig, info, context);
    } else {
        let f: extern "C" fn(libc::c_int) = std::mem::transmute(target);
        f(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sigbus_not_ours_still_reaches_the_previous_handler() {
        static SEEN: AtomicUsize = AtomicUsize::new(0);
        extern "C" fn previous(_: libc::c_int) {
            SEEN.fetch_add(1, Ordering::SeqCst);
        }
        fn never_ours(_: &BusFault) -> bool {
            false
        }
        // No other unit test installs a SIGBUS handler (signal-delivery
        // runtimes are tested in tests/), so ours goes in after this one.
        // SAFETY: installing a plain handler for SIGBUS.
        unsafe {
            libc::signal(
                libc::SIGBUS,
                previous as extern "C" fn(libc::c_int) as usize,
            )
        };
        install_bus_handler(never_ours).expect("installing the SIGBUS handler");
        assert_eq!(
            PREVIOUS.get().map(|p| p.sa_sigaction),
            Some(previous as extern "C" fn(libc::c_int) as usize),
            "ours chains to the handler installed before it"
        );
        // SAFETY: raising a signal whose handler we just installed.
        unsafe { libc::raise(libc::SIGBUS) };
        assert_eq!(SEEN.load(Ordering::SeqCst), 1);
    }
}
