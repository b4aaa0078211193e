//! System calls on tiered buffers: the kernel reading into or writing from a
//! tiered buffer whose pages are evicted must simply wait for them. A
//! library such as stdio allocates a buffer and hands it straight to
//! `read(2)`, so a runtime that only makes pages present when the program
//! itself touches them breaks ordinary programs.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;

use common::runtime;
use tiermem_core::PolicyKind;

const BUDGET: u64 = 8 << 20;
const BUF: usize = 4 << 20;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

/// Pushes `victim` out of DRAM by writing a region four times the budget.
fn evict_everything(rt: &tiermem_core::Runtime) {
    let flood_len = 4 * BUDGET as usize;
    let flood = rt.alloc(flood_len).unwrap();
    for off in (0..flood_len).step_by(4096) {
        // SAFETY: inside the live flood allocation.
        unsafe { flood.as_ptr().add(off).write(1) };
    }
    // SAFETY: allocated above and no longer used.
    unsafe { rt.free(flood).unwrap() };
}

#[test]
fn read_into_and_write_from_evicted_tiered_buffers() {
    let rt = runtime(BUDGET, 4096, PolicyKind::Clock);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let input = dir.path().join("input");
    let want = pattern(BUF, 7);
    File::create(&input).unwrap().write_all(&want).unwrap();

    // read(2) into a buffer that has been written, evicted, and is not mapped.
    let buf = rt.alloc(BUF).unwrap().as_ptr();
    // SAFETY: `buf` is a live allocation of BUF bytes.
    unsafe { std::ptr::write_bytes(buf, 0xAB, BUF) };
    evict_everything(&rt);
    let before = rt.stats().page_ins;
    let f = File::open(&input).unwrap();
    let mut done = 0;
    while done < BUF {
        // SAFETY: reading into our live tiered buffer.
        let n = unsafe { libc::read(f.as_raw_fd(), buf.add(done).cast(), BUF - done) };
        assert!(
            n > 0,
            "read(2) into an evicted tiered buffer failed: {}",
            std::io::Error::last_os_error()
        );
        done += n as usize;
    }
    // SAFETY: BUF initialised bytes.
    let got = unsafe { std::slice::from_raw_parts(buf, BUF) };
    assert!(
        got == want.as_slice(),
        "read(2) put the wrong bytes into the tiered buffer"
    );
    assert!(
        rt.stats().page_ins > before,
        "the buffer was not paged back in: eviction never happened"
    );

    // write(2) from an evicted buffer.
    evict_everything(&rt);
    let output = dir.path().join("output");
    let out = File::create(&output).unwrap();
    // SAFETY: writing from our live tiered buffer.
    let n = unsafe { libc::write(out.as_raw_fd(), buf.cast(), BUF) };
    assert_eq!(
        n as usize,
        BUF,
        "write(2): {}",
        std::io::Error::last_os_error()
    );
    let mut written = Vec::new();
    File::open(&output)
        .unwrap()
        .read_to_end(&mut written)
        .unwrap();
    assert!(
        written == want,
        "write(2) from an evicted tiered buffer wrote the wrong bytes"
    );
}
