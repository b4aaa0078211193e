//! What a block device holds before tiermem takes it, as `mkswap` and
//! `swapon` check: a filesystem, a partition table, a swap area or another
//! volume format is refused by name, other data is refused too, and a
//! device that is all zeros, or that carries tiermem's own header, is
//! taken. The header (written by `tiermem format-store DEV`, or when a
//! blank device is first taken) fills the first [`DATA_START`] bytes, so
//! the store's slots begin after it and a later run recognises the device.
//! A regular file formatted with `tiermem format-store FILE` carries the
//! same header.

use std::io;
use std::os::fd::AsRawFd;

use crate::sys::mem::Mapping;

/// The header's first bytes.
const MAGIC: &[u8; 16] = b"TIERMEM-STORE\0v1";
/// Slots start here: the header, and room for every page size's alignment.
pub const DATA_START: u64 = 1 << 20;
/// How much of the device is inspected: every signature below lies in it.
const INSPECTED: usize = 128 << 10;

/// What the start of a device holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Label {
    /// tiermem's header.
    Ours,
    /// Nothing: every inspected byte is zero.
    Blank,
    /// A format tiermem knows by its signature.
    Known(&'static str),
    /// Bytes that are neither zero nor a known format.
    Unknown,
}

/// Signatures: (name, byte offset, bytes).
const SIGNATURES: &[(&str, usize, &[u8])] = &[
    ("an ext2/3/4 filesystem", 1080, &[0x53, 0xEF]),
    ("an XFS filesystem", 0, b"XFSB"),
    ("a Btrfs filesystem", 65600, b"_BHRfS_M"),
    ("a swap area (mkswap)", 4086, b"SWAPSPACE2"),
    ("a swap area (mkswap)", 4086, b"SWAP-SPACE"),
    ("a LUKS encrypted volume", 0, b"LUKS\xba\xbe"),
    ("an LVM physical volume", 512, b"LABELONE"),
    ("a GPT partition table", 512, b"EFI PART"),
    ("a FAT filesystem", 82, b"FAT32   "),
    ("a FAT filesystem", 54, b"FAT16   "),
    ("a FAT filesystem", 54, b"FAT12   "),
    ("an ISO 9660 filesystem", 32769, b"CD001"),
    ("an NTFS filesystem", 3, b"NTFS    "),
    ("a bcache device", 4120, b"\xc6\x85\x73\xf6\x4e\x1a\x45\xca"),
    ("a ZFS pool member", 16384 + 8, &[0x0c, 0xb1, 0xba, 0x00]),
];

/// Reads the start of `dev` and says what it holds.
pub fn inspect(dev: &std::fs::File) -> io::Result<Label> {
    let buf = read_start(dev)?;
    if buf.starts_with(MAGIC) {
        return Ok(Label::Ours);
    }
    if let Some((name, _, _)) = SIGNATURES
        .iter()
        .find(|(_, at, sig)| buf.get(*at..*at + sig.len()) == Some(*sig))
    {
        return Ok(Label::Known(name));
    }
    // A DOS partition table (or a boot sector) ends its first sector so.
    if buf[510..512] == [0x55, 0xAA] {
        return Ok(Label::Known(
            "a partition table or boot sector (0x55AA at byte 510)",
        ));
    }
    Ok(match buf.iter().all(|b| *b == 0) {
        true => Label::Blank,
        false => Label::Unknown,
    })
}

/// Writes tiermem's header at the start of `dev` and makes it durable.
pub fn write_header(dev: &std::fs::File) -> io::Result<()> {
    let buf = aligned(4096)?;
    // SAFETY: the mapping is ours, 4096 bytes, and nothing else uses it.
    let page = unsafe { std::slice::from_raw_parts_mut(buf.as_ptr(), 4096) };
    page[..MAGIC.len()].copy_from_slice(MAGIC);
    let note = b"\nA tiermem backing store: pages of a running process, not a filesystem.\n";
    page[MAGIC.len()..MAGIC.len() + note.len()].copy_from_slice(note);
    // SAFETY: `page` is valid for 4096 bytes; the fd is ours.
    let n = unsafe { libc::pwrite(dev.as_raw_fd(), page.as_ptr().cast(), 4096, 0) };
    if n != 4096 {
        return Err(match n {
            n if n < 0 => io::Error::last_os_error(),
            _ => io::Error::other("short write of the header"),
        });
    }
    dev.sync_data()
}

fn read_start(dev: &std::fs::File) -> io::Result<Vec<u8>> {
    // Aligned, so the read also works on a descriptor opened O_DIRECT.
    let buf = aligned(INSPECTED)?;
    let mut done = 0;
    while done < INSPECTED {
        // SAFETY: `buf` is ours and valid for INSPECTED bytes.
        let n = unsafe {
            libc::pread(
                dev.as_raw_fd(),
                buf.as_ptr().add(done).cast(),
                INSPECTED - done,
                done as i64,
            )
        };
        match n {
            n if n < 0 => return Err(io::Error::last_os_error()),
            0 => break, // a device smaller than what is inspected
            n => done += n as usize,
        }
    }
    // SAFETY: `done` bytes of the mapping were just read.
    let mut bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr(), done) }.to_vec();
    bytes.resize(INSPECTED, 0);
    Ok(bytes)
}

fn aligned(len: usize) -> io::Result<Mapping> {
    Mapping::reserve(len, "a buffer for the device label").map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn file_with(at: u64, bytes: &[u8]) -> std::fs::File {
        let f = tempfile::tempfile().unwrap();
        f.set_len(256 << 10).unwrap();
        f.write_all_at(bytes, at).unwrap();
        f
    }

    #[test]
    fn formats_are_named_and_blank_or_ours_is_taken() {
        assert_eq!(
            inspect(&file_with(1080, &[0x53, 0xEF])).unwrap(),
            Label::Known("an ext2/3/4 filesystem")
        );
        assert_eq!(
            inspect(&file_with(4086, b"SWAPSPACE2")).unwrap(),
            Label::Known("a swap area (mkswap)")
        );
        assert!(matches!(
            inspect(&file_with(510, &[0x55, 0xAA])).unwrap(),
            Label::Known(_)
        ));
        assert_eq!(inspect(&file_with(9000, b"data")).unwrap(), Label::Unknown);
        assert_eq!(inspect(&file_with(0, &[0])).unwrap(), Label::Blank);
        let f = file_with(0, &[0]);
        write_header(&f).unwrap();
        assert_eq!(inspect(&f).unwrap(), Label::Ours);
    }
}
