//! Private futexes: sleeping on a 32-bit word until another thread of the
//! process changes it and wakes the sleepers. Both calls are plain system
//! calls, safe in a signal handler.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, until woken or `timeout` passes.
/// Returns at once if the word already differs. Spurious returns are
/// possible: callers re-check what they wait for.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned 32-bit atomic for the whole call and
    // `ts` a valid relative timeout; FUTEX_WAIT only reads both. Its result
    // (woken, timed out, EAGAIN for a changed word, EINTR) is re-checked by
    // every caller, so it is not needed here.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every thread sleeping on `word`.
pub fn wake_all(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address of `word` as a key; it reads
    // and writes no memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_changed_word_returns_at_once() {
        let word = AtomicU32::new(1);
        let started = Instant::now();
        wait(&word, 0, Duration::from_secs(5));
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_sleeper_times_out() {
        let word = AtomicU32::new(0);
        let started = Instant::now();
        wait(&word, 0, Duration::from_millis(20));
        assert!(started.elapsed() >= Duration::from_millis(15));
    }

    #[test]
    fn a_sleeper_is_woken() {
        let word = Arc::new(AtomicU32::new(0));
        let sleeper = {
            let word = Arc::clone(&word);
            std::thread::spawn(move || {
                let started = Instant::now();
                while word.load(Ordering::SeqCst) == 0 {
                    wait(&word, 0, Duration::from_secs(10));
                }
                started.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        word.store(1, Ordering::SeqCst);
        wake_all(&word);
        let slept = sleeper.join().expect("the sleeper");
        assert!(slept < Duration::from_secs(5), "slept {slept:?}");
    }
}
