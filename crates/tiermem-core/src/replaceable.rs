//! A value read lock-free by every thread, replaced only in a forked child.
//!
//! After `fork` the child runs on one thread until tiermem restarts its own,
//! and it must swap in pieces of the runtime (its store and slot allocator)
//! that everything else reaches through `&Shared`. Readers pay one atomic
//! load; replacement is `unsafe` and documented for that single-threaded
//! moment only.

use std::sync::atomic::{AtomicPtr, Ordering};

pub struct Replaceable<T: ?Sized> {
    ptr: AtomicPtr<Box<T>>,
}

impl<T: ?Sized> Replaceable<T> {
    pub fn new(value: Box<T>) -> Self {
        Replaceable {
            ptr: AtomicPtr::new(Box::into_raw(Box::new(value))),
        }
    }

    #[inline]
    pub fn get(&self) -> &T {
        // SAFETY: the pointer always comes from Box::into_raw and is only
        // freed by `replace_in_child` (see its contract) or on drop.
        unsafe { &*self.ptr.load(Ordering::Acquire) }
    }

    /// Replaces the value with `make(old)`.
    ///
    /// # Safety
    /// Only in a freshly forked child before any other thread exists, with
    /// no reference from [`Replaceable::get`] alive anywhere.
    pub unsafe fn replace_in_child(&self, make: impl FnOnce(Box<T>) -> Box<T>) {
        let old = Box::from_raw(self.ptr.load(Ordering::Acquire));
        let new = make(*old);
        self.ptr
            .store(Box::into_raw(Box::new(new)), Ordering::Release);
    }
}

impl<T: ?Sized> Drop for Replaceable<T> {
    fn drop(&mut self) {
        // SAFETY: we are the sole owner at drop; the pointer came from Box::into_raw.
        drop(unsafe { Box::from_raw(*self.ptr.get_mut()) });
    }
}
