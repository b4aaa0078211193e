//! Whether the program loads tiermem's library at all.
//!
//! `tiermem run` works through `LD_PRELOAD`, which the dynamic loader
//! reads. A statically linked program (a Go program without cgo, a
//! musl-static or busybox-static binary) has no program interpreter
//! (`PT_INTERP`): the loader never runs, and none of its memory would be
//! tiered. Such a program is refused before it starts, so that it never
//! runs past its budget in silence. A script is judged by its interpreter.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::stop::Stop;

/// `PT_INTERP`: the program header naming the dynamic loader.
const PT_INTERP: u32 = 3;
/// How many `#!` interpreters are followed (the kernel allows 4 levels).
const MAX_SCRIPT_DEPTH: usize = 4;

/// How the kernel starts an executable file.
#[derive(Debug, PartialEq, Eq)]
enum Start {
    /// An ELF file with a program interpreter: the dynamic loader runs.
    Dynamic,
    /// An ELF file without one.
    Static,
    /// A `#!` script, run by this interpreter.
    Script(PathBuf),
    /// Something else (a format registered with binfmt_misc, a truncated
    /// file): not ours to judge; the kernel decides.
    Unknown,
}

/// Refuses `program` if it, or the interpreter of the script it is, is
/// statically linked.
pub(super) fn check_loads_the_library(program: &Path, shown: &str) -> Result<(), Stop> {
    let mut path = program.to_path_buf();
    for _ in 0..MAX_SCRIPT_DEPTH {
        match how_it_starts(&path) {
            Start::Script(interpreter) => path = interpreter,
            Start::Static => return Err(refusal(shown, program, &path)),
            Start::Dynamic | Start::Unknown => return Ok(()),
        }
    }
    Ok(())
}

fn refusal(shown: &str, program: &Path, static_one: &Path) -> Stop {
    let what = match static_one == program {
        true => format!("{shown} is statically linked"),
        false => format!(
            "{shown} is a script whose interpreter {} is statically linked",
            static_one.display()
        ),
    };
    Stop::new(
        126,
        format!(
            "{what} (it has no program interpreter), so the dynamic loader never loads \
             tiermem's library into it and none of its memory would be tiered; nothing was run.\n\
             Fix: link it dynamically (a Go program: build it with CGO_ENABLED=1 and \
             `import _ \"runtime/cgo\"`, and its runtime maps memory through the C library), \
             or run it without tiermem."
        ),
    )
}

/// Reads enough of `path` to tell how the kernel starts it.
fn how_it_starts(path: &Path) -> Start {
    let Ok(mut file) = File::open(path) else {
        return Start::Unknown;
    };
    let mut head = vec![0u8; 4096];
    let Ok(n) = read_up_to(&mut file, &mut head) else {
        return Start::Unknown;
    };
    head.truncate(n);
    if let Some(line) = head.strip_prefix(b"#!") {
        return script_interpreter(line);
    }
    match elf_has_interpreter(&mut file, &head) {
        Some(true) => Start::Dynamic,
        Some(false) => Start::Static,
        None => Start::Unknown,
    }
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            got => n += got,
        }
    }
    Ok(n)
}

/// The interpreter a `#!` line names (its first word), as the kernel reads it.
fn script_interpreter(line: &[u8]) -> Start {
    let line = line.split(|b| *b == b'\n').next().unwrap_or_default();
    let text = String::from_utf8_lossy(line);
    match text.split_whitespace().next() {
        Some(word) => Start::Script(PathBuf::from(word)),
        None => Start::Unknown,
    }
}

/// Whether the ELF file whose first bytes are `head` has a `PT_INTERP`
/// program header; `None` if it is not an ELF file this can read.
fn elf_has_interpreter(file: &mut File, head: &[u8]) -> Option<bool> {
    if head.len() < 64 || &head[..4] != b"\x7fELF" || head[5] != 1 {
        return None; // not ELF, or big-endian
    }
    let (phoff, phentsize, phnum) = match head[4] {
        1 => (
            u32le(head, 0x1c)? as u64,
            u16le(head, 0x2a)?,
            u16le(head, 0x2c)?,
        ),
        2 => (u64le(head, 0x20)?, u16le(head, 0x36)?, u16le(head, 0x38)?),
        _ => return None,
    };
    let table_len = phentsize as usize * phnum as usize;
    let table = read_at(file, phoff, table_len)?;
    Some(
        table
            .chunks_exact(phentsize.max(4) as usize)
            .any(|entry| u32le(entry, 0) == Some(PT_INTERP)),
    )
}

fn read_at(file: &File, offset: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut buf, offset).ok()?;
    Some(buf)
}

fn u16le(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32le(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64le(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn starts(path: &str) -> Start {
        how_it_starts(Path::new(path))
    }

    #[test]
    fn dynamic_programs_and_scripts_are_told_apart() {
        assert_eq!(starts("/bin/sh"), Start::Dynamic);
        let this_test = std::env::current_exe().unwrap();
        assert_eq!(how_it_starts(&this_test), Start::Dynamic);
        assert_eq!(starts("/etc/hostname"), Start::Unknown);
        assert_eq!(starts("/nonexistent/program"), Start::Unknown);
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        std::fs::write(&script, "#!/usr/bin/env -S python3 -u\nprint(1)\n").unwrap();
        assert_eq!(
            how_it_starts(&script),
            Start::Script(PathBuf::from("/usr/bin/env"))
        );
    }

    #[test]
    fn a_truncated_elf_file_is_left_to_the_kernel() {
        let dir = tempfile::tempdir().unwrap();
        let cut = dir.path().join("cut");
        let whole = std::fs::read("/bin/sh").unwrap();
        std::fs::write(&cut, &whole[..100]).unwrap();
        assert_eq!(how_it_starts(&cut), Start::Unknown);
    }
}
