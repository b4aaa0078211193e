//! Which device a path lives on: st_dev (or st_rdev of a block device), the
//! block device's sysfs name, model and queue settings, the filesystem type,
//! and the running kernel.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Identity of the device behind a path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceIdentity {
    /// Major number of st_dev (filesystem) or st_rdev (block device path).
    pub major: u32,
    /// Minor number, as above.
    pub minor: u32,
    /// Kernel name of the block device or partition, e.g. `vda` or `nvme0n1p2`.
    pub block_device: Option<String>,
    /// Model string from sysfs, or the driver name when there is none
    /// (virtio_blk has no model).
    pub model: Option<String>,
    /// Filesystem type from /proc/self/mountinfo (`None` for a raw device).
    pub fs_type: Option<String>,
    /// Mount point holding the path.
    pub mount_point: Option<String>,
    /// `queue/rotational` of the whole disk.
    pub rotational: Option<bool>,
    /// `queue/io_poll`: whether the disk has poll queues for IOPOLL.
    pub io_poll: Option<bool>,
    /// Active I/O scheduler.
    pub scheduler: Option<String>,
    /// `queue/logical_block_size`.
    pub logical_block_size: Option<u64>,
}

impl DeviceIdentity {
    /// `major:minor`.
    pub fn dev_string(&self) -> String {
        format!("{}:{}", self.major, self.minor)
    }

    /// One-line description for the table header.
    pub fn describe(&self) -> String {
        let mut s = format!("dev {}", self.dev_string());
        if let Some(b) = &self.block_device {
            s.push_str(&format!(" ({b}"));
            if let Some(m) = &self.model {
                s.push_str(&format!(", {m}"));
            }
            s.push(')');
        }
        if let Some(fs) = &self.fs_type {
            s.push_str(&format!(", fs {fs}"));
        }
        if let Some(mp) = &self.mount_point {
            s.push_str(&format!(" on {mp}"));
        }
        if let Some(sched) = &self.scheduler {
            s.push_str(&format!(", scheduler {sched}"));
        }
        if let Some(p) = self.io_poll {
            s.push_str(if p {
                ", poll queues: yes"
            } else {
                ", poll queues: no"
            });
        }
        s
    }
}

/// Major/minor of the device holding `path`: st_rdev for a block device,
/// st_dev otherwise. A path that does not exist yet is looked up through
/// its nearest existing ancestor (a backing file about to be created).
pub(crate) fn dev_of(path: &Path) -> io::Result<(u32, u32)> {
    let mut p: PathBuf = path.to_path_buf();
    loop {
        match fs::metadata(&p) {
            Ok(m) => {
                let dev = if m.file_type().is_block_device() {
                    m.rdev()
                } else {
                    m.dev()
                };
                return Ok((libc::major(dev), libc::minor(dev)));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let parent = match p.parent() {
                    Some(par) if !par.as_os_str().is_empty() => par.to_path_buf(),
                    _ if p.is_relative() => PathBuf::from("."),
                    _ => return Err(e),
                };
                if parent == p {
                    return Err(e);
                }
                p = parent;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Everything we can find out about the device behind `path`.
pub(crate) fn identify(path: &Path, is_block_device: bool) -> io::Result<DeviceIdentity> {
    let (major, minor) = dev_of(path)?;
    let mut id = DeviceIdentity {
        major,
        minor,
        ..Default::default()
    };
    let mount = if is_block_device {
        None
    } else {
        find_mount(path, major, minor)
    };
    if let Some(m) = &mount {
        id.fs_type = Some(m.fs_type.clone());
        id.mount_point = Some(m.mount_point.clone());
    }
    // The sysfs node of the device; for filesystems with anonymous device
    // numbers (btrfs, overlayfs) try the mount source instead.
    let mut node = sysfs_node(major, minor);
    if node.is_none() {
        if let Some(src) = mount.as_ref().map(|m| m.source.as_str()) {
            if src.starts_with("/dev/") {
                if let Ok(md) = fs::metadata(src) {
                    if md.file_type().is_block_device() {
                        node = sysfs_node(libc::major(md.rdev()), libc::minor(md.rdev()));
                    }
                }
            }
        }
    }
    if let Some(node) = node {
        fill_from_sysfs(&mut id, &node);
    }
    Ok(id)
}

fn sysfs_node(major: u32, minor: u32) -> Option<PathBuf> {
    fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()
}

fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    let s = fs::read_to_string(p).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

fn fill_from_sysfs(id: &mut DeviceIdentity, node: &Path) {
    id.block_device = node.file_name().map(|n| n.to_string_lossy().into_owned());
    // A partition's attributes live on its parent disk.
    let disk = if node.join("partition").exists() {
        node.parent().unwrap_or(node).to_path_buf()
    } else {
        node.to_path_buf()
    };
    id.model = read_trim(disk.join("device/model"))
        .or_else(|| read_trim(disk.join("dm/name")).map(|n| format!("device-mapper {n}")))
        .or_else(|| read_trim(disk.join("loop/backing_file")).map(|f| format!("loop on {f}")))
        .or_else(|| {
            fs::read_link(disk.join("device/driver"))
                .ok()
                .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
        });
    let q = disk.join("queue");
    id.rotational = read_trim(q.join("rotational")).map(|v| v == "1");
    id.io_poll = read_trim(q.join("io_poll")).map(|v| v == "1");
    id.logical_block_size = read_trim(q.join("logical_block_size")).and_then(|v| v.parse().ok());
    id.scheduler = read_trim(q.join("scheduler")).and_then(|s| {
        // "none [mq-deadline] kyber" → "mq-deadline"
        let a = s.find('[')?;
        let b = s.find(']')?;
        (b > a).then(|| s[a + 1..b].to_string())
    });
}

struct Mount {
    mount_point: String,
    fs_type: String,
    source: String,
}

/// Undoes the octal escapes of mount tables (`\040` for a space).
fn unescape(s: &str) -> String {
    tiermem_host::mounts::unescape_octal(s)
        .to_string_lossy()
        .into_owned()
}

/// The mount with the longest mount point containing `path`, preferring
/// one whose device number matches.
fn find_mount(path: &Path, major: u32, minor: u32) -> Option<Mount> {
    let canon = canonical_existing(path);
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want_dev = format!("{major}:{minor}");
    let mut best: Option<(bool, usize, Mount)> = None;
    for line in info.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < 5 || fields.len() < sep + 3 {
            continue;
        }
        let mp = unescape(fields[4]);
        if !canon.starts_with(Path::new(&mp)) {
            continue;
        }
        let dev_match = fields[2] == want_dev;
        let key = (dev_match, mp.len());
        let better = match &best {
            None => true,
            Some((d, l, _)) => key > (*d, *l),
        };
        if better {
            best = Some((
                dev_match,
                mp.len(),
                Mount {
                    mount_point: mp,
                    fs_type: fields[sep + 1].to_string(),
                    source: unescape(fields[sep + 2]),
                },
            ));
        }
    }
    best.map(|(_, _, m)| m)
}

fn canonical_existing(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf();
    loop {
        if let Ok(c) = fs::canonicalize(&p) {
            return c;
        }
        match p.parent() {
            Some(par) if !par.as_os_str().is_empty() && par != p => p = par.to_path_buf(),
            _ => return PathBuf::from("/"),
        }
    }
}

/// The running kernel's release string, e.g. `6.18.4`.
pub fn kernel_version() -> String {
    // SAFETY: `utsname` is plain old data; all-zero is valid.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    // SAFETY: the kernel NUL-terminates `release`, which lives as long as `u`.
    let rel = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) };
    rel.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_octal() {
        assert_eq!(unescape("/mnt/my\\040disk"), "/mnt/my disk");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("trail\\04"), "trail\\04");
    }

    #[test]
    fn identify_var_tmp() {
        let id = identify(Path::new("/var/tmp"), false).unwrap();
        assert!(id.fs_type.is_some(), "{id:?}");
        assert!(!id.describe().is_empty());
        // A path that does not exist yet resolves through its ancestors.
        let (a, b) = dev_of(Path::new("/var/tmp/does/not/exist/yet")).unwrap();
        assert_eq!((a, b), (id.major, id.minor));
        assert!(!kernel_version().is_empty());
    }
}
