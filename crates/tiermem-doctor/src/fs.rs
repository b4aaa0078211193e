//! The filesystem under the backing store: its type, as `statfs` and the
//! mount table give it, what that type means for a store, and its space.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What a filesystem type means for a backing store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsClass {
    /// ext4, xfs, f2fs: pages go to the disk, with O_DIRECT.
    Plain,
    /// tmpfs, ramfs: the "store" is RAM, so evicted pages never leave it.
    InMemory,
    /// btrfs, zfs, bcachefs: copy-on-write (and often compressing), so
    /// every page write allocates new blocks and the store fragments.
    CopyOnWrite,
    /// overlayfs: a container's root; writes go through a second layer.
    Layered,
    /// FUSE: every page goes through a user-space server.
    Fuse,
    /// NFS, SMB, Ceph, 9p, virtiofs: every page crosses a network or the
    /// VM host.
    Remote,
    /// proc, sysfs, cgroup: kernel interfaces, not places for files.
    Pseudo,
    /// A type doctor has no advice for.
    Unknown,
}

/// The class of a filesystem type name (as `/proc/self/mountinfo` says it).
pub fn classify(name: &str) -> FsClass {
    match name {
        "ext2" | "ext3" | "ext4" | "xfs" | "f2fs" | "jfs" => FsClass::Plain,
        "tmpfs" | "ramfs" | "devtmpfs" => FsClass::InMemory,
        "btrfs" | "zfs" | "bcachefs" => FsClass::CopyOnWrite,
        "overlay" | "aufs" => FsClass::Layered,
        "nfs" | "nfs4" | "cifs" | "smb3" | "ceph" | "9p" | "virtiofs" | "glusterfs" => {
            FsClass::Remote
        }
        "proc" | "sysfs" | "cgroup" | "cgroup2" | "devpts" | "debugfs" | "tracefs"
        | "securityfs" | "bpf" | "configfs" | "pstore" | "mqueue" => FsClass::Pseudo,
        n if n == "fuse" || n == "fuseblk" || n.starts_with("fuse.") => FsClass::Fuse,
        _ => FsClass::Unknown,
    }
}

/// The name of a `statfs` magic number, for where the mount table has no
/// entry for the store's device.
pub fn magic_name(magic: u64) -> Option<&'static str> {
    Some(match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0xF2F5_2010 => "f2fs",
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        0x9123_683E => "btrfs",
        0x2fc1_2fc1 => "zfs",
        0xca45_1a4e => "bcachefs",
        0x794c_7630 => "overlay",
        0x6573_5546 => "fuse",
        0x6969 => "nfs",
        0xFF53_4D42 => "cifs",
        0xFE53_4D42 => "smb3",
        0x00c3_6400 => "ceph",
        0x0102_1997 => "9p",
        _ => return None,
    })
}

/// What `statfs` and `statvfs` say about the filesystem holding a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    pub magic: u64,
    /// Bytes this user may still write (`f_bavail`).
    pub available: u64,
    pub total: u64,
}

/// `statfs` and `statvfs` of `path`.
pub fn space(path: &Path) -> io::Result<Space> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path holds a NUL byte"))?;
    // SAFETY: an all-zero statfs is a valid value for the kernel to overwrite.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `fs` a writable statfs.
    if unsafe { libc::statfs(c.as_ptr(), &mut fs) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above, for statvfs.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `vfs` a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut vfs) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let frsize = vfs.f_frsize;
    Ok(Space {
        // f_type is a signed word on some targets; the magic is its bits.
        magic: fs.f_type as u64 & 0xffff_ffff,
        available: vfs.f_bavail.saturating_mul(frsize),
        total: vfs.f_blocks.saturating_mul(frsize),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_fall_into_their_classes() {
        assert_eq!(classify("ext4"), FsClass::Plain);
        assert_eq!(classify("tmpfs"), FsClass::InMemory);
        assert_eq!(classify("btrfs"), FsClass::CopyOnWrite);
        assert_eq!(classify("overlay"), FsClass::Layered);
        assert_eq!(classify("fuse.sshfs"), FsClass::Fuse);
        assert_eq!(classify("nfs4"), FsClass::Remote);
        assert_eq!(classify("proc"), FsClass::Pseudo);
        assert_eq!(classify("reiserfs"), FsClass::Unknown);
    }

    #[test]
    fn magic_numbers_have_names() {
        assert_eq!(magic_name(0xEF53), Some("ext4"));
        assert_eq!(magic_name(0x0102_1994), Some("tmpfs"));
        assert_eq!(magic_name(1), None);
    }

    #[test]
    fn the_space_of_a_real_directory_is_known() {
        let s = space(Path::new("/")).expect("statfs of /");
        assert!(s.total > 0 && s.available <= s.total, "{s:?}");
    }
}
