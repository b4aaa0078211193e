//! The live O_DIRECT probe: one aligned 4 KiB write and read-back in the
//! backing directory, through a file that never gets a name (`O_TMPFILE`),
//! opened as the core opens its store (`store/file.rs`).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// The bytes of one probe: aligned as O_DIRECT wants its buffers.
#[repr(C, align(4096))]
struct Block([u8; 4096]);

/// What the probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// The write and the read went to the device; the direct I/O offset
    /// alignment `statx` gives, where it gives one.
    Works { alignment: Option<u32> },
    /// The filesystem refuses O_DIRECT (EINVAL at open).
    Refused,
    /// O_DIRECT is accepted but served from the page cache (`statx` gives
    /// a direct I/O alignment of 0, as ext4 `data=journal` does).
    ServedFromCache,
    /// The probe could not open its file (this user, a read-only
    /// filesystem, a device in use); why, in words.
    NotProbed(String),
    /// The open worked, the I/O did not.
    IoFailed(String),
    /// The bytes read back are not the ones written.
    Mismatch,
}

/// Probes a directory: creates an unnamed file with O_DIRECT, writes a
/// pattern, reads it back.
pub fn probe_dir(dir: &Path) -> Probe {
    match open_unnamed(dir) {
        Ok(file) => write_and_read(&file),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Probe::Refused,
        Err(e) => Probe::NotProbed(format!("cannot create a file there ({e})")),
    }
}

/// Probes an existing file or block device without writing to it: opens
/// it read-only with O_DIRECT and reads its first 4 KiB, if it has them.
pub fn probe_existing(path: &Path, len: u64) -> Probe {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Probe::Refused,
        Err(e) => return Probe::NotProbed(format!("cannot open it for reading ({e})")),
    };
    if served_from_cache(&file) {
        return Probe::ServedFromCache;
    }
    if len >= 4096 {
        let mut block = Box::new(Block([0; 4096]));
        if let Err(e) = read_exact_at(&file, &mut block.0) {
            return Probe::IoFailed(format!("reading 4 KiB: {e}"));
        }
    }
    Probe::Works {
        alignment: dio_alignment(&file),
    }
}

/// An unnamed file in `dir`, or a named one unlinked at once where the
/// filesystem has no `O_TMPFILE`.
fn open_unnamed(dir: &Path) -> io::Result<File> {
    let tmpfile = OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_DIRECT | libc::O_CLOEXEC)
        .open(dir);
    match tmpfile {
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::EISDIR)
            ) =>
        {
            let name = dir.join(format!(".tiermem-doctor-{}", std::process::id()));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
                .open(&name)?;
            // Nothing is left behind, whatever happens next.
            std::fs::remove_file(&name)?;
            Ok(file)
        }
        other => other,
    }
}

fn write_and_read(file: &File) -> Probe {
    if served_from_cache(file) {
        return Probe::ServedFromCache;
    }
    let mut out = Box::new(Block([0; 4096]));
    for (i, b) in out.0.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    match file.write_at(&out.0, 0) {
        Ok(4096) => {}
        Ok(n) => return Probe::IoFailed(format!("writing 4 KiB wrote {n} bytes")),
        Err(e) => return Probe::IoFailed(format!("writing 4 KiB: {e}")),
    }
    let mut back = Box::new(Block([0; 4096]));
    if let Err(e) = read_exact_at(file, &mut back.0) {
        return Probe::IoFailed(format!("reading 4 KiB back: {e}"));
    }
    if back.0 != out.0 {
        return Probe::Mismatch;
    }
    Probe::Works {
        alignment: dio_alignment(file),
    }
}

fn read_exact_at(file: &File, buf: &mut [u8]) -> io::Result<()> {
    match file.read_at(buf, 0)? {
        n if n == buf.len() => Ok(()),
        n => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("read {n} of {} bytes", buf.len()),
        )),
    }
}

/// `statx`'s direct I/O alignments, as the runtime reads them.
fn statx_dio(file: &File) -> Option<(u32, u32)> {
    tiermem_core::sys::device::direct_io_alignment(file)
}

/// The core's test: an offset alignment of 0 means no direct I/O.
fn served_from_cache(file: &File) -> bool {
    statx_dio(file).is_some_and(|(_, offset)| offset == 0)
}

fn dio_alignment(file: &File) -> Option<u32> {
    statx_dio(file).map(|(_, offset)| offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_directory_answers_without_leaving_a_file() {
        let dir = tempfile::tempdir_in("/var/tmp").expect("a scratch directory");
        let probe = probe_dir(dir.path());
        // ext4 and xfs work; tmpfs before 6.6 refuses; all are answers.
        assert!(
            matches!(
                probe,
                Probe::Works { .. } | Probe::Refused | Probe::ServedFromCache
            ),
            "{probe:?}"
        );
        let left = std::fs::read_dir(dir.path()).expect("readable").count();
        assert_eq!(left, 0);
    }

    #[test]
    fn a_missing_directory_cannot_be_probed() {
        let probe = probe_dir(Path::new("/nonexistent/tiermem-doctor"));
        assert!(matches!(probe, Probe::NotProbed(_)), "{probe:?}");
    }
}
