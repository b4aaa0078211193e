//! A claimed page read with pread into a runtime-owned buffer and
//! installed: the synchronous loop's read ([`sync`](super::sync)), and the
//! fork window's ([`fork_window`](super::fork_window)), which must leave
//! nothing in flight.

use super::install::finish_read;
use super::page_read::PageRead;
use super::read_error::read_and_check;
use crate::shared::Shared;
use crate::sys::mem::Mapping;

/// Reads a claimed page into the handler's buffer and installs it, unless
/// the read failed for good ([`read_and_check`]).
pub(super) fn read_and_install(rt: &Shared, read: &PageRead, io_buffer: &Mapping) {
    let submitted = crate::sys::now_ns();
    let good = read_and_check(rt, read, io_buffer.as_ptr());
    if !read.prefetch {
        rt.read_latency
            .record(crate::sys::now_ns().saturating_sub(submitted));
    }
    if good {
        finish_read(rt, read, io_buffer.as_ptr());
    }
}
