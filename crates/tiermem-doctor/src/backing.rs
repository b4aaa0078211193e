//! The backing store: what the path is, the filesystem under it, O_DIRECT
//! and free space; for a block device, whether it is in use and its size.
//!
//! The path is the one tiermem would use: `--backing`, else
//! `TIERMEM_BACKING`, else `/var/tmp`. Under a fake root it is looked up in
//! the fake tree, and the O_DIRECT probe is derived from the filesystem
//! type instead of run.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::check::{human_bytes, Check};
use crate::direct_io::{self, Probe};
use crate::fs::{self, FsClass, Space};
use crate::tree::{self, Identity, Mount, Tree};

const NAME_STORE: &str = "backing_store";
const NAME_DIRECT: &str = "o_direct";
const NAME_SPACE: &str = "free_space";

/// Below this much free space a warning: the default `tiermem bench`
/// (1 GiB working set) writes up to 1 GiB to the store and as much again
/// to the kernel-swap baseline's swapfile on the same filesystem.
pub const LOW_SPACE: u64 = 2 << 30;
/// Below this much a failure: a program stops as soon as it must page
/// out more than the store holds; 64 MiB is also the margin the
/// kernel-swap baseline leaves free after its swapfile.
pub const NO_SPACE: u64 = 64 << 20;

/// Where the path came from, for the detail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Flag,
    Env,
    Default,
}

/// The store path, as the user sees it and where it is in the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub shown: PathBuf,
    pub path: PathBuf,
    pub origin: Origin,
}

impl Target {
    pub fn resolve(tree: &Tree, flag: Option<&Path>) -> Target {
        let env = std::env::var_os(tiermem_core::config::ENV_BACKING).filter(|v| !v.is_empty());
        let (shown, origin) = match (flag, env) {
            (Some(p), _) => (p.to_path_buf(), Origin::Flag),
            (None, Some(v)) => (PathBuf::from(v), Origin::Env),
            (None, None) => (
                PathBuf::from(tiermem_core::DEFAULT_BACKING_DIR),
                Origin::Default,
            ),
        };
        Target {
            path: tree.path(&shown),
            shown,
            origin,
        }
    }

    /// `/var/tmp (the default)`, for details.
    pub fn describe(&self) -> String {
        let from = match self.origin {
            Origin::Flag => "",
            Origin::Env => " (from TIERMEM_BACKING)",
            Origin::Default => " (the default)",
        };
        format!("{}{from}", self.shown.display())
    }
}

/// What the path is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Directory {
        writable: bool,
    },
    File {
        symlink: bool,
        uid: u32,
        mode: u32,
        len: u64,
    },
    BlockDevice {
        major: u32,
        minor: u32,
    },
    /// It does not exist; tiermem creates a file there if the directory
    /// above it exists and takes files.
    Missing {
        parent_writable: bool,
    },
    /// It exists but is none of the above, or cannot be inspected.
    Unusable(String),
}

/// A block device's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockFacts {
    pub mounted_at: Option<String>,
    pub swap: bool,
    pub size: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackingFacts {
    pub target: Target,
    pub kind: Kind,
    pub euid: Option<u32>,
    /// The device number of the filesystem (or of the device) under the
    /// store, for the device-queue check.
    pub dev: Option<(u32, u32)>,
    /// The mount holding the store, from the tree's mount table.
    pub mount: Option<Mount>,
    pub space: Option<Result<Space, String>>,
    pub block: Option<BlockFacts>,
    /// The O_DIRECT probe; `None` under a fake root.
    pub direct: Option<Probe>,
}

impl BackingFacts {
    pub fn gather(tree: &Tree, target: Target, identity: &Identity) -> BackingFacts {
        let kind = kind_of(&target.path);
        let stat_path = match &kind {
            Kind::Missing { .. } => target.path.parent().map(Path::to_path_buf),
            Kind::Unusable(_) => None,
            _ => Some(target.path.clone()),
        };
        let meta = stat_path.as_ref().and_then(|p| std::fs::metadata(p).ok());
        let dev = match &kind {
            Kind::BlockDevice { major, minor } => Some((*major, *minor)),
            _ => meta
                .as_ref()
                .map(|m| (libc::major(m.dev()), libc::minor(m.dev()))),
        };
        let on_filesystem = !matches!(kind, Kind::BlockDevice { .. } | Kind::Unusable(_));
        let mounts = tree::mounts(tree);
        BackingFacts {
            mount: on_filesystem
                .then(|| find_mount(&mounts, dev, &target.shown))
                .flatten(),
            space: on_filesystem
                .then(|| {
                    stat_path
                        .as_ref()
                        .map(|p| fs::space(p).map_err(|e| e.to_string()))
                })
                .flatten(),
            block: match &kind {
                Kind::BlockDevice { major, minor } => {
                    Some(block_facts(tree, &mounts, *major, *minor, &target.shown))
                }
                _ => None,
            },
            direct: tree.is_live().then(|| probe(&kind, &target.path)),
            euid: identity.euid,
            dev,
            kind,
            target,
        }
    }

    /// The filesystem type's name: the mount table's, else `statfs`'s.
    pub fn fs_name(&self) -> Option<String> {
        if let Some(m) = &self.mount {
            return Some(m.fs_type.clone());
        }
        let magic = self.space.as_ref()?.as_ref().ok()?.magic;
        Some(fs::magic_name(magic).map_or(format!("type {magic:#x}"), str::to_string))
    }
}

fn kind_of(path: &Path) -> Kind {
    let link = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let parent = path.parent().unwrap_or(Path::new("/"));
            return Kind::Missing {
                parent_writable: parent.is_dir() && writable(parent),
            };
        }
        Err(e) => return Kind::Unusable(format!("cannot inspect it: {e}")),
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return Kind::Unusable(format!("a dangling symbolic link ({e})")),
    };
    let ft = meta.file_type();
    if ft.is_dir() {
        Kind::Directory {
            writable: writable(path),
        }
    } else if ft.is_file() {
        Kind::File {
            symlink: link.file_type().is_symlink(),
            uid: meta.uid(),
            mode: meta.mode() & 0o7777,
            len: meta.len(),
        }
    } else if ft.is_block_device() {
        Kind::BlockDevice {
            major: libc::major(meta.rdev()),
            minor: libc::minor(meta.rdev()),
        }
    } else {
        Kind::Unusable("not a directory, regular file or block device".to_string())
    }
}

/// Whether this process may create files in `dir` (write and search).
fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path; access only reads it.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// The mount with the store's device number (the longest mount point
/// that holds the path among several), else the longest that holds it.
fn find_mount(mounts: &[Mount], dev: Option<(u32, u32)>, shown: &Path) -> Option<Mount> {
    let holds = |m: &&Mount| shown.starts_with(&m.mount_point);
    let longest = |it: Vec<&Mount>| it.into_iter().max_by_key(|m| m.mount_point.len()).cloned();
    let same_dev: Vec<&Mount> = mounts
        .iter()
        .filter(|m| Some((m.major, m.minor)) == dev)
        .collect();
    let first = same_dev.first().copied().cloned();
    longest(same_dev.into_iter().filter(holds).collect())
        .or(first)
        .or_else(|| longest(mounts.iter().filter(holds).collect()))
}

fn block_facts(tree: &Tree, mounts: &[Mount], major: u32, minor: u32, shown: &Path) -> BlockFacts {
    let swaps = tree.read("/proc/swaps").unwrap_or_default();
    BlockFacts {
        mounted_at: mounts
            .iter()
            .find(|m| (m.major, m.minor) == (major, minor))
            .map(|m| m.mount_point.clone()),
        swap: swaps
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .any(|name| Path::new(&tree::unescape(name)) == shown),
        size: tree
            .read_num::<u64>(&format!("/sys/dev/block/{major}:{minor}/size"))
            .map(|sectors| sectors * 512),
    }
}

fn probe(kind: &Kind, path: &Path) -> Probe {
    match kind {
        Kind::Directory { .. } => direct_io::probe_dir(path),
        Kind::Missing { .. } => direct_io::probe_dir(path.parent().unwrap_or(Path::new("/"))),
        Kind::File { len, .. } => direct_io::probe_existing(path, *len),
        Kind::BlockDevice { .. } => direct_io::probe_existing(path, 4096),
        Kind::Unusable(why) => Probe::NotProbed(why.clone()),
    }
}

/// The store check (pure): what the path is and the filesystem under it.
pub fn store(facts: &BackingFacts) -> Check {
    let at = facts.target.describe();
    match &facts.kind {
        Kind::Unusable(why) => Check::fail(
            NAME_STORE,
            format!("{at}: {why}"),
            "give --backing a directory, a file or a block device",
        ),
        Kind::Missing {
            parent_writable: false,
        } => Check::fail(
            NAME_STORE,
            format!("{at} does not exist, and this user cannot create it"),
            format!(
                "create it (mkdir -p {}) or give --backing an existing directory",
                facts.target.shown.display()
            ),
        ),
        Kind::Directory { writable: false } => Check::fail(
            NAME_STORE,
            format!("{at}: this user cannot create files there"),
            "give --backing a directory this user may write, on the fastest local disk",
        ),
        Kind::File { .. } => file_store(facts, &at),
        Kind::BlockDevice { .. } => device_store(facts, &at),
        Kind::Missing { .. } => {
            filesystem(facts, &format!("{at} (not there yet: tiermem creates it)"))
        }
        Kind::Directory { writable: true } => filesystem(facts, &at),
    }
}

/// A named file: refused by tiermem unless it is the user's own, private,
/// and not a link (as `swapon` checks a swap file).
fn file_store(facts: &BackingFacts, at: &str) -> Check {
    let Kind::File {
        symlink, uid, mode, ..
    } = facts.kind
    else {
        return filesystem(facts, at);
    };
    let fail = |why: String, fix: &str| Check::fail(NAME_STORE, format!("{at}: {why}"), fix);
    if symlink {
        return fail(
            "a symbolic link to a file, which tiermem refuses".into(),
            "give the file itself, or a directory",
        );
    }
    if facts.euid.is_some_and(|me| me != uid) {
        return fail(
            format!("owned by uid {uid}, not by this user, which tiermem refuses"),
            "give a file of your own, or a directory",
        );
    }
    if mode & 0o077 != 0 {
        return fail(
            format!("accessible to other users (mode {mode:o}), which tiermem refuses"),
            "chmod 600 the file, or give a directory",
        );
    }
    filesystem(facts, at)
}

fn device_store(facts: &BackingFacts, at: &str) -> Check {
    let Some(block) = &facts.block else {
        return Check::pass(NAME_STORE, format!("{at}: a block device"));
    };
    if let Some(mp) = &block.mounted_at {
        return Check::fail(
            NAME_STORE,
            format!("{at}: a block device mounted at {mp}; tiermem refuses a device in use"),
            "unmount it, or give another device or a directory",
        );
    }
    if block.swap {
        return Check::fail(
            NAME_STORE,
            format!("{at}: an active swap area; tiermem refuses a device in use"),
            format!(
                "swapoff {}, or give another device",
                facts.target.shown.display()
            ),
        );
    }
    Check::pass(
        NAME_STORE,
        format!("{at}: a block device, not mounted and not swap (tiermem also refuses one that carries a filesystem; `tiermem format-store` gives it over)"),
    )
}

/// The filesystem under a directory or file store.
fn filesystem(facts: &BackingFacts, at: &str) -> Check {
    let Some(name) = facts.fs_name() else {
        return Check::warn(
            NAME_STORE,
            format!("{at}: the filesystem type is unknown"),
            "check that the path is on a local disk (ext4, xfs)",
        );
    };
    let on = match &facts.mount {
        Some(m) => format!("{name} on {} at {}", m.source, m.mount_point),
        None => name.clone(),
    };
    let warn = |why: &str, fix: &str| Check::warn(NAME_STORE, format!("{at}: {on}: {why}"), fix);
    const LOCAL: &str =
        "give --backing a directory on a local ext4 or xfs filesystem, or a block device";
    match fs::classify(&name) {
        FsClass::Plain => Check::pass(NAME_STORE, format!("{at}: {on}")),
        FsClass::Pseudo => Check::fail(
            NAME_STORE,
            format!("{at}: {on}: a kernel pseudo-filesystem, which holds no files"),
            LOCAL,
        ),
        FsClass::Unknown => Check::pass(
            NAME_STORE,
            format!("{at}: {on} (no advice for this type)"),
        ),
        FsClass::InMemory => warn("a RAM filesystem: evicted pages stay in RAM, so tiering frees none", LOCAL),
        FsClass::CopyOnWrite => warn(
            "copy-on-write (and maybe compressing): every page write allocates new blocks and the store fragments",
            "give --backing a directory on ext4 or xfs, or a block device (on btrfs, at least chattr +C the directory)",
        ),
        FsClass::Layered => warn("overlayfs (a container's root?): every page goes through a second filesystem", "give --backing a volume or bind mount of a host disk"),
        FsClass::Fuse => warn("FUSE: every page goes through a user-space server", LOCAL),
        FsClass::Remote => warn("a network or host-shared filesystem: every miss crosses the network or the VM host", LOCAL),
    }
}

/// The O_DIRECT check (pure).
pub fn direct(facts: &BackingFacts) -> Check {
    let at = facts.target.shown.display();
    const BUFFERED: &str = "tiermem then uses buffered I/O, syncing every batch (fdatasync) and dropping it from the page cache, which pages slower";
    const LOCAL: &str = "give --backing a directory on ext4 or xfs, or a block device";
    match &facts.direct {
        None => derived_direct(facts),
        Some(Probe::Works { alignment }) => {
            let align = alignment.map_or(String::new(), |a| format!(", direct I/O alignment {a} bytes"));
            let what = match facts.kind {
                Kind::Directory { .. } => format!("a 4 KiB O_DIRECT write and read-back of an unnamed file in {at}"),
                Kind::Missing { .. } => {
                    let parent = facts.target.shown.parent().unwrap_or(Path::new("/"));
                    format!("a 4 KiB O_DIRECT write and read-back of an unnamed file in {}", parent.display())
                }
                _ => format!("an O_DIRECT open and 4 KiB read of {at} (nothing written)"),
            };
            Check::pass(NAME_DIRECT, format!("{what} worked{align}"))
        }
        Some(Probe::Refused) => Check::warn(NAME_DIRECT, format!("{at}: the filesystem refuses O_DIRECT; {BUFFERED}"), LOCAL),
        Some(Probe::ServedFromCache) => Check::warn(
            NAME_DIRECT,
            format!("{at}: O_DIRECT is accepted but served from the page cache (statx gives no direct I/O alignment, as with ext4 data=journal); {BUFFERED}"),
            "remount without data=journal, or give --backing another filesystem",
        ),
        Some(Probe::NotProbed(e)) => Check::warn(
            NAME_DIRECT,
            format!("{at}: not probed: {e}"),
            "fix the backing_store check first",
        ),
        Some(Probe::IoFailed(e)) => Check::warn(
            NAME_DIRECT,
            format!("{at}: O_DIRECT opened, but {e}"),
            "look for device errors (dmesg), or give --backing another filesystem",
        ),
        Some(Probe::Mismatch) => Check::fail(
            NAME_DIRECT,
            format!("{at}: the 4 KiB read back with O_DIRECT differs from what was written"),
            "do not page to this device: look for device errors (dmesg) and give --backing another one",
        ),
    }
}

/// Under a fake root: what the filesystem type implies.
fn derived_direct(facts: &BackingFacts) -> Check {
    let at = facts.target.shown.display();
    let name = match &facts.kind {
        Kind::BlockDevice { .. } => "a block device".to_string(),
        _ => facts
            .fs_name()
            .unwrap_or_else(|| "an unknown filesystem".to_string()),
    };
    let class = fs::classify(&name);
    let derived = format!("derived from the type ({name}), not probed under a fake root");
    match class {
        FsClass::Fuse | FsClass::Remote => Check::warn(
            NAME_DIRECT,
            format!("{at}: {name} serves O_DIRECT only where the server allows it ({derived})"),
            "give --backing a directory on ext4 or xfs, or a block device",
        ),
        _ => Check::pass(
            NAME_DIRECT,
            format!("{at}: O_DIRECT expected to work ({derived})"),
        ),
    }
}

/// The free-space check (pure); for a block device, its size.
pub fn space(facts: &BackingFacts) -> Check {
    let at = facts.target.shown.display();
    if let Some(block) = &facts.block {
        return match block.size {
            Some(0) => Check::fail(
                NAME_SPACE,
                format!("{at}: the device is empty (0 bytes)"),
                "give a device with room for the pages",
            ),
            Some(b) => Check::pass(
                NAME_SPACE,
                format!(
                    "{at}: a block device of {}, all of it for the store",
                    human_bytes(b)
                ),
            ),
            None => Check::warn(
                NAME_SPACE,
                format!("{at}: the device's size is unknown (no /sys/dev/block entry)"),
                "check the device (lsblk)",
            ),
        };
    }
    let space = match &facts.space {
        Some(Ok(s)) => *s,
        Some(Err(e)) => {
            return Check::warn(
                NAME_SPACE,
                format!("{at}: statvfs failed ({e})"),
                "fix the backing_store check first",
            )
        }
        None => {
            return Check::warn(
                NAME_SPACE,
                format!("{at}: not checked"),
                "fix the backing_store check first",
            )
        }
    };
    let on = facts
        .mount
        .as_ref()
        .map_or(String::new(), |m| format!(" on {}", m.mount_point));
    let free = format!(
        "{} free of {}{on}",
        human_bytes(space.available),
        human_bytes(space.total)
    );
    const FIX: &str = "free space there, or give --backing a directory on a larger filesystem (TIERMEM_BACKING_SIZE caps the store)";
    if space.available < NO_SPACE {
        Check::fail(
            NAME_SPACE,
            format!("{at}: {free}: a program stops once it must page out more than that"),
            FIX,
        )
    } else if space.available < LOW_SPACE {
        Check::warn(NAME_SPACE, format!("{at}: {free}, under {}: a default tiermem bench needs up to 1 GiB for the store and as much for kernel swap", human_bytes(LOW_SPACE)), FIX)
    } else {
        Check::pass(NAME_SPACE, format!("{at}: {free}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Status;

    fn target() -> Target {
        Target {
            shown: PathBuf::from("/var/tmp"),
            path: PathBuf::from("/var/tmp"),
            origin: Origin::Default,
        }
    }

    fn mount(fs_type: &str) -> Mount {
        Mount {
            major: 254,
            minor: 0,
            mount_point: "/".into(),
            fs_type: fs_type.into(),
            source: "/dev/vda".into(),
        }
    }

    fn dir_facts(fs_type: &str, available: u64) -> BackingFacts {
        BackingFacts {
            target: target(),
            kind: Kind::Directory { writable: true },
            euid: Some(1000),
            dev: Some((254, 0)),
            mount: Some(mount(fs_type)),
            space: Some(Ok(Space {
                magic: 0xEF53,
                available,
                total: 100 << 30,
            })),
            block: None,
            direct: None,
        }
    }

    #[test]
    fn a_directory_on_ext4_passes() {
        let c = store(&dir_facts("ext4", 50 << 30));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(
            c.detail
                .contains("/var/tmp (the default): ext4 on /dev/vda"),
            "{c:?}"
        );
    }

    #[test]
    fn tmpfs_cow_overlay_and_fuse_warn() {
        for fs_type in [
            "tmpfs",
            "btrfs",
            "zfs",
            "bcachefs",
            "overlay",
            "fuse.sshfs",
            "nfs4",
        ] {
            let c = store(&dir_facts(fs_type, 50 << 30));
            assert_eq!(c.status, Status::Warn, "{fs_type}: {c:?}");
            assert!(c.fix.is_some());
        }
        let c = store(&dir_facts("tmpfs", 50 << 30));
        assert!(c.detail.contains("stay in RAM"), "{c:?}");
    }

    #[test]
    fn the_magic_names_the_type_without_a_mount_entry() {
        let mut f = dir_facts("ext4", 50 << 30);
        f.mount = None;
        f.space = Some(Ok(Space {
            magic: 0x0102_1994,
            available: 50 << 30,
            total: 100 << 30,
        }));
        assert_eq!(store(&f).status, Status::Warn);
    }

    #[test]
    fn an_unusable_path_fails() {
        let mut f = dir_facts("ext4", 50 << 30);
        f.kind = Kind::Directory { writable: false };
        assert_eq!(store(&f).status, Status::Fail);
        f.kind = Kind::Missing {
            parent_writable: false,
        };
        assert_eq!(store(&f).status, Status::Fail);
        f.kind = Kind::Missing {
            parent_writable: true,
        };
        assert_eq!(store(&f).status, Status::Pass);
        f.kind = Kind::Unusable("not a directory, regular file or block device".into());
        assert_eq!(store(&f).status, Status::Fail);
    }

    #[test]
    fn a_named_file_is_checked_as_tiermem_checks_it() {
        let mut f = dir_facts("ext4", 50 << 30);
        let file = |symlink, uid, mode| Kind::File {
            symlink,
            uid,
            mode,
            len: 0,
        };
        f.kind = file(false, 1000, 0o600);
        assert_eq!(store(&f).status, Status::Pass);
        f.kind = file(true, 1000, 0o600);
        assert_eq!(store(&f).status, Status::Fail);
        f.kind = file(false, 0, 0o600);
        assert_eq!(store(&f).status, Status::Fail);
        f.kind = file(false, 1000, 0o644);
        let c = store(&f);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.expect("a fix").contains("chmod 600"));
    }

    fn device_facts(block: BlockFacts) -> BackingFacts {
        BackingFacts {
            target: Target {
                shown: PathBuf::from("/dev/vdb"),
                path: PathBuf::from("/dev/vdb"),
                origin: Origin::Flag,
            },
            kind: Kind::BlockDevice {
                major: 254,
                minor: 16,
            },
            euid: Some(0),
            dev: Some((254, 16)),
            mount: None,
            space: None,
            block: Some(block),
            direct: None,
        }
    }

    #[test]
    fn a_mounted_or_swapping_device_fails() {
        let free = BlockFacts {
            mounted_at: None,
            swap: false,
            size: Some(8 << 30),
        };
        assert_eq!(store(&device_facts(free.clone())).status, Status::Pass);
        let c = space(&device_facts(free.clone()));
        assert_eq!(c.status, Status::Pass);
        assert!(c.detail.contains("8 GiB"), "{c:?}");
        let mounted = BlockFacts {
            mounted_at: Some("/mnt".into()),
            ..free.clone()
        };
        assert_eq!(store(&device_facts(mounted)).status, Status::Fail);
        let swap = BlockFacts {
            swap: true,
            ..free.clone()
        };
        assert_eq!(store(&device_facts(swap)).status, Status::Fail);
        let empty = BlockFacts {
            size: Some(0),
            ..free
        };
        assert_eq!(space(&device_facts(empty)).status, Status::Fail);
    }

    #[test]
    fn free_space_has_two_thresholds() {
        let c = space(&dir_facts("ext4", 50 << 30));
        assert_eq!(c.status, Status::Pass);
        assert!(c.detail.contains("50 GiB free of 100 GiB on /"), "{c:?}");
        let c = space(&dir_facts("ext4", 1 << 30));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.detail.contains("1 GiB free"), "{c:?}");
        assert_eq!(space(&dir_facts("ext4", 10 << 20)).status, Status::Fail);
    }

    #[test]
    fn o_direct_outcomes() {
        let mut f = dir_facts("ext4", 50 << 30);
        assert_eq!(direct(&f).status, Status::Pass, "derived on ext4");
        f.mount = Some(mount("fuse.sshfs"));
        assert_eq!(direct(&f).status, Status::Warn, "derived on FUSE");
        let cases = [
            (
                Probe::Works {
                    alignment: Some(512),
                },
                Status::Pass,
            ),
            (Probe::Refused, Status::Warn),
            (Probe::ServedFromCache, Status::Warn),
            (Probe::NotProbed("EACCES".into()), Status::Warn),
            (Probe::IoFailed("EIO".into()), Status::Warn),
            (Probe::Mismatch, Status::Fail),
        ];
        for (probe, status) in cases {
            f.direct = Some(probe.clone());
            assert_eq!(direct(&f).status, status, "{probe:?}");
        }
    }

    #[test]
    fn the_mount_of_the_store_is_found_by_device_then_path() {
        let mounts = vec![
            mount("ext4"),
            Mount {
                major: 0,
                minor: 40,
                mount_point: "/var/tmp".into(),
                fs_type: "tmpfs".into(),
                source: "tmpfs".into(),
            },
        ];
        let found = find_mount(&mounts, Some((254, 0)), Path::new("/var/tmp")).expect("found");
        assert_eq!(found.fs_type, "ext4");
        let found = find_mount(&mounts, Some((9, 9)), Path::new("/var/tmp/x")).expect("found");
        assert_eq!(found.fs_type, "tmpfs");
    }

    #[test]
    fn the_target_says_where_it_came_from() {
        let t = target();
        assert_eq!(t.describe(), "/var/tmp (the default)");
    }
}
