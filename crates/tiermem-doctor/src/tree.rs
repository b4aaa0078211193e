//! The files doctor reads, under a root prefix: `/` on a real run, a fake
//! tree of `proc`, `sys` and `dev` in the tests. Every file read goes
//! through [`Tree`], so a check sees the fake tree's values exactly as it
//! would see the machine's.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// `CAP_IPC_LOCK`: locks memory past `RLIMIT_MEMLOCK`.
pub const CAP_IPC_LOCK: u32 = 14;
/// `CAP_SYS_PTRACE`: opens a full userfaultfd whatever the sysctl says.
pub const CAP_SYS_PTRACE: u32 = 19;
/// `CAP_SYS_ADMIN`: sets up an io_uring where `io_uring_disabled=1`.
pub const CAP_SYS_ADMIN: u32 = 21;

/// A tree laid out like `/`.
#[derive(Clone, Debug)]
pub struct Tree {
    root: PathBuf,
    live: bool,
}

impl Tree {
    /// The tree at `root`; it is the live machine when `root` is `/`.
    pub fn new(root: &Path) -> Tree {
        let live = root
            .canonicalize()
            .is_ok_and(|r| r.as_os_str() == Path::new("/").as_os_str());
        Tree {
            root: root.to_path_buf(),
            live,
        }
    }

    /// Whether this is the running machine, where live probes (opening a
    /// userfaultfd, setting up an io_uring, O_DIRECT) mean something.
    pub fn is_live(&self) -> bool {
        self.live
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the absolute path `abs` lies in this tree.
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let abs = abs.as_ref();
        match abs.strip_prefix("/") {
            Ok(rel) => self.root.join(rel),
            Err(_) => self.root.join(abs),
        }
    }

    /// The text of `abs`, or why it cannot be read.
    pub fn read(&self, abs: &str) -> Result<String, ReadError> {
        let path = self.path(abs);
        std::fs::read_to_string(&path).map_err(|e| ReadError {
            path,
            error: e.to_string(),
        })
    }

    /// The trimmed text of `abs`, if it can be read and is not empty.
    pub fn read_trim(&self, abs: &str) -> Option<String> {
        let text = self.read(abs).ok()?;
        let text = text.trim();
        (!text.is_empty()).then(|| text.to_string())
    }

    /// The number in `abs`, if it holds one.
    pub fn read_num<T: FromStr>(&self, abs: &str) -> Option<T> {
        self.read_trim(abs)?.parse().ok()
    }

    pub fn exists(&self, abs: &str) -> bool {
        self.path(abs).exists()
    }
}

/// A file that could not be read, for a check's detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadError {
    pub path: PathBuf,
    pub error: String,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot read {}: {}", self.path.display(), self.error)
    }
}

/// Who this process is, from `/proc/self/status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The effective user id (the second field of `Uid:`).
    pub euid: Option<u32>,
    /// The effective group id.
    pub egid: Option<u32>,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// The effective capability set, `CapEff:`.
    pub cap_eff: Option<u64>,
}

impl Identity {
    pub fn read(tree: &Tree) -> Identity {
        tree.read("/proc/self/status")
            .map(|text| Identity::parse(&text))
            .unwrap_or_default()
    }

    pub fn parse(status: &str) -> Identity {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|rest| rest.split_whitespace().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        let second = |name: &str| field(name).get(1).and_then(|v| v.parse().ok());
        Identity {
            euid: second("Uid:"),
            egid: second("Gid:"),
            groups: field("Groups:")
                .iter()
                .filter_map(|g| g.parse().ok())
                .collect(),
            cap_eff: field("CapEff:")
                .first()
                .and_then(|v| u64::from_str_radix(v, 16).ok()),
        }
    }

    pub fn is_root(&self) -> bool {
        self.euid == Some(0)
    }

    /// Whether the capability numbered `bit` is effective; unknown when
    /// the status has no `CapEff:` line.
    pub fn has_cap(&self, bit: u32) -> Option<bool> {
        self.cap_eff.map(|caps| caps & (1u64 << bit) != 0)
    }

    /// Who this is, for a detail: `root` or `uid 65534`.
    pub fn who(&self) -> String {
        match self.euid {
            Some(0) => "root".to_string(),
            Some(uid) => format!("uid {uid}"),
            None => "this user".to_string(),
        }
    }
}

/// One line of `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub major: u32,
    pub minor: u32,
    pub mount_point: String,
    pub fs_type: String,
    pub source: String,
}

/// The mounts of `/proc/self/mountinfo` (none where it cannot be read).
pub fn mounts(tree: &Tree) -> Vec<Mount> {
    tree.read("/proc/self/mountinfo")
        .map(|text| text.lines().filter_map(parse_mountinfo_line).collect())
        .unwrap_or_default()
}

fn parse_mountinfo_line(line: &str) -> Option<Mount> {
    let fields: Vec<&str> = line.split(' ').collect();
    let sep = fields.iter().position(|f| *f == "-")?;
    if fields.len() < 5 || fields.len() < sep + 3 {
        return None;
    }
    let (major, minor) = fields[2].split_once(':')?;
    Some(Mount {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        mount_point: unescape(fields[4]),
        fs_type: fields[sep + 1].to_string(),
        source: unescape(fields[sep + 2]),
    })
}

/// Undoes the octal escapes of mount tables (`\040` for a space).
pub fn unescape(s: &str) -> String {
    tiermem_host::mounts::unescape_octal(s)
        .to_string_lossy()
        .into_owned()
}

/// The kernel release and its version numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// As `uname -r` prints it.
    pub release: String,
    pub major: u32,
    pub minor: u32,
}

impl Kernel {
    /// The kernel of `/proc/sys/kernel/osrelease`.
    pub fn read(tree: &Tree) -> Option<Kernel> {
        Kernel::parse(&tree.read_trim("/proc/sys/kernel/osrelease")?)
    }

    /// `6.18.44-fc-v595` → 6.18.
    pub fn parse(release: &str) -> Option<Kernel> {
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Kernel {
            release: release.to_string(),
            major,
            minor,
        })
    }

    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_file_gives_effective_ids_and_capabilities() {
        let id = Identity::parse(
            "Name:\tx\nUid:\t1000\t65534\t1000\t1000\nGid:\t100\t200\t100\t100\n\
             Groups:\t4 27 \nCapEff:\t0000000000080000\n",
        );
        assert_eq!(id.euid, Some(65534));
        assert_eq!(id.egid, Some(200));
        assert_eq!(id.groups, vec![4, 27]);
        assert_eq!(id.has_cap(CAP_SYS_PTRACE), Some(true));
        assert_eq!(id.has_cap(CAP_SYS_ADMIN), Some(false));
        assert!(!id.is_root());
        assert_eq!(Identity::parse("").has_cap(CAP_SYS_PTRACE), None);
    }

    #[test]
    fn kernel_releases_parse_with_any_suffix() {
        let k = Kernel::parse("6.18.44-fc-v595").expect("parses");
        assert_eq!((k.major, k.minor), (6, 18));
        assert!(k.at_least(6, 8) && !k.at_least(6, 19) && !k.at_least(7, 0));
        assert_eq!(Kernel::parse("5.4").map(|k| k.minor), Some(4));
        assert!(Kernel::parse("linux").is_none());
    }

    #[test]
    fn mountinfo_lines_give_device_type_and_source() {
        let m = parse_mountinfo_line(
            "30 1 254:0 / /var/my\\040tmp rw,relatime shared:1 - ext4 /dev/vda rw",
        )
        .expect("parses");
        assert_eq!((m.major, m.minor), (254, 0));
        assert_eq!(m.mount_point, "/var/my tmp");
        assert_eq!(m.fs_type, "ext4");
        assert_eq!(m.source, "/dev/vda");
        assert!(parse_mountinfo_line("garbage").is_none());
    }

    #[test]
    fn paths_land_under_the_root() {
        let tree = Tree::new(Path::new("/nonexistent/fake"));
        assert!(!tree.is_live());
        assert_eq!(
            tree.path("/proc/self/status"),
            Path::new("/nonexistent/fake/proc/self/status")
        );
        assert!(Tree::new(Path::new("/")).is_live());
    }
}
