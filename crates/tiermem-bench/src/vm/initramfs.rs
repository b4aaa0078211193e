//! The guest's boot files, built at run time: Debian's packaged kernel as
//! it is, and an initramfs of busybox, the page walker (`walker.c`,
//! compiled here as a static program) and an `/init` script that runs the
//! walker and powers the guest off.

use std::fs;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context};

/// The walker's source, compiled on the host for the guest.
const WALKER_SOURCE: &str = include_str!("walker.c");

/// The guest's `/init`. Parameters on the kernel command line that the
/// kernel does not know reach init as environment variables.
const INIT_SCRIPT: &str = "#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
echo \"guest: booted $(/bin/busybox cut -d' ' -f1 /proc/uptime)\"
/walker \"${tm_mib:-64}\" \"${tm_passes:-1}\" \"${tm_order:-shuffle}\"
echo \"guest: walker exit $?\"
/bin/busybox poweroff -f
";

/// Where busybox may be; it must be statically linked, as the initramfs
/// has no C library.
const BUSYBOX_PATHS: [&str; 2] = ["/bin/busybox", "/usr/bin/busybox"];

/// A kernel and an initramfs in a private directory, removed on drop.
#[derive(Debug)]
pub struct GuestImage {
    /// The guest kernel (`-kernel`).
    pub kernel: PathBuf,
    /// The initramfs (`-initrd`), an uncompressed newc cpio archive.
    pub initramfs: PathBuf,
    dir: PathBuf,
}

impl Drop for GuestImage {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl GuestImage {
    /// Builds the initramfs in a new directory under `tmp`, for `kernel`
    /// (or the newest `/boot/vmlinuz-*`).
    pub fn build(kernel: Option<&Path>, tmp: &Path) -> anyhow::Result<GuestImage> {
        let kernel = match kernel {
            Some(k) => readable_file(k, "the guest kernel")?,
            None => newest_boot_kernel(Path::new("/boot"))?,
        };
        let busybox = static_busybox()?;
        remove_orphaned_dirs(tmp);
        let dir = private_dir(tmp)?;
        let image = GuestImage {
            kernel,
            initramfs: dir.join("initramfs.cpio"),
            dir,
        };
        let walker = compile_walker(&image.dir)?;
        let mut cpio = Cpio::default();
        for d in ["bin", "dev", "proc", "sys"] {
            cpio.dir(d);
        }
        cpio.char_device("dev/console", 5, 1);
        cpio.file("init", INIT_SCRIPT.as_bytes().to_vec());
        cpio.file("bin/busybox", read(&busybox)?);
        cpio.file("walker", read(&walker)?);
        fs::write(&image.initramfs, cpio.finish())
            .with_context(|| format!("writing {}", image.initramfs.display()))?;
        Ok(image)
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    fs::read(path).with_context(|| format!("reading {}", path.display()))
}

fn readable_file(path: &Path, what: &str) -> anyhow::Result<PathBuf> {
    fs::File::open(path).with_context(|| format!("opening {what} {}", path.display()))?;
    Ok(path.to_path_buf())
}

/// The newest `vmlinuz-*` in `boot` by modification time.
pub fn newest_boot_kernel(boot: &Path) -> anyhow::Result<PathBuf> {
    let missing = || {
        format!(
            "no guest kernel: no {}/vmlinuz-* (apt-get install linux-image-amd64, or pass --kernel)",
            boot.display()
        )
    };
    let entries = fs::read_dir(boot).with_context(missing)?;
    let newest = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("vmlinuz-"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max();
    match newest {
        Some((_, path)) => readable_file(&path, "the guest kernel"),
        None => bail!(missing()),
    }
}

fn static_busybox() -> anyhow::Result<PathBuf> {
    for candidate in BUSYBOX_PATHS.iter().map(Path::new) {
        let Ok(bytes) = fs::read(candidate) else {
            continue;
        };
        if is_static_elf(&bytes) {
            return Ok(candidate.to_path_buf());
        }
        bail!(
            "{} is dynamically linked; the guest needs a static busybox (apt-get install busybox-static)",
            candidate.display()
        );
    }
    bail!("no busybox for the guest in /bin or /usr/bin (apt-get install busybox-static)")
}

/// Whether `elf` is a 64-bit little-endian ELF with no program
/// interpreter, i.e. needs no dynamic loader.
pub fn is_static_elf(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        elf.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        elf.get(o..o + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    if elf.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    (0..phnum as usize).all(|i| {
        let at = phoff as usize + i * phentsize as usize;
        u32_at(at).is_some_and(|kind| kind != PT_INTERP)
    })
}

fn compile_walker(dir: &Path) -> anyhow::Result<PathBuf> {
    let source = dir.join("walker.c");
    let binary = dir.join("walker");
    fs::write(&source, WALKER_SOURCE).with_context(|| format!("writing {}", source.display()))?;
    let out = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .context("running cc to build the in-guest walker (apt-get install build-essential)")?;
    if !out.status.success() {
        bail!(
            "building the in-guest walker with `cc -static` failed (it needs a C compiler and the static C library: apt-get install build-essential):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(binary)
}

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// The prefix of every image directory; the creator's pid follows it.
const DIR_PREFIX: &str = "tiermem-vm-";

/// Removes the image directories under `tmp` whose creating process is
/// gone. `Drop` removes a directory on every return, but a bench ended by
/// a signal exits from its cleanup thread (which tears the kernel-swap
/// sandbox down first) and a killed one runs nothing, leaving 3–4 MiB of
/// kernel-sized initramfs behind each time. Best effort: a directory that
/// cannot be read or removed stays. A bench in another pid namespace that
/// shares this directory would read as gone; each namespace normally has
/// a temporary directory of its own.
fn remove_orphaned_dirs(tmp: &Path) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = creator_pid(&name.to_string_lossy()) else {
            continue;
        };
        let gone = !Path::new("/proc").join(pid.to_string()).exists();
        if gone && entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// The pid in an image directory's name, `tiermem-vm-<pid>-<n>`.
fn creator_pid(name: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix(DIR_PREFIX)?.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

fn private_dir(tmp: &Path) -> anyhow::Result<PathBuf> {
    let dir = tmp.join(format!(
        "{DIR_PREFIX}{}-{}",
        std::process::id(),
        NEXT_DIR.fetch_add(1, Ordering::Relaxed)
    ));
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// A newc ("070701") cpio archive, the format the kernel unpacks into its
/// initial root filesystem.
#[derive(Default)]
struct Cpio {
    out: Vec<u8>,
    next_inode: u32,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFCHR: u32 = 0o020000;

impl Cpio {
    fn dir(&mut self, name: &str) {
        self.entry(name, S_IFDIR | 0o755, (0, 0), &[]);
    }

    fn file(&mut self, name: &str, data: Vec<u8>) {
        self.entry(name, S_IFREG | 0o755, (0, 0), &data);
    }

    fn char_device(&mut self, name: &str, major: u32, minor: u32) {
        self.entry(name, S_IFCHR | 0o600, (major, minor), &[]);
    }

    fn entry(&mut self, name: &str, mode: u32, (major, minor): (u32, u32), data: &[u8]) {
        self.next_inode += 1;
        let name_size = name.len() as u32 + 1;
        let fields = [
            self.next_inode,
            mode,
            0, // uid
            0, // gid
            1, // nlink
            0, // mtime
            data.len() as u32,
            0, // dev major
            0, // dev minor
            major,
            minor,
            name_size,
            0, // check
        ];
        let _ = write!(self.out, "070701");
        for f in fields {
            let _ = write!(self.out, "{f:08x}");
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpio_entries_are_aligned_and_end_with_the_trailer() {
        let mut c = Cpio::default();
        c.dir("bin");
        c.file("init", b"#!/bin/sh\n".to_vec());
        let bytes = c.finish();
        assert!(bytes.starts_with(b"070701"));
        assert_eq!(bytes.len() % 4, 0);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("init\0"));
        assert!(text.contains("#!/bin/sh\n"));
        assert!(text.contains("TRAILER!!!\0"));
        // The file's size field (the 7th) is 10 bytes.
        let init = text.find("init\0").unwrap_or(0);
        let header = &text[init - 110..init];
        assert_eq!(&header[6 + 6 * 8..6 + 7 * 8], "0000000a");
    }

    #[test]
    fn static_elf_has_no_interpreter() {
        let mut elf = vec![0u8; 0x40 + 56];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        elf[0x40..0x44].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
        assert!(is_static_elf(&elf));
        elf[0x40..0x44].copy_from_slice(&3u32.to_le_bytes()); // PT_INTERP
        assert!(!is_static_elf(&elf));
        assert!(!is_static_elf(b"#!/bin/sh"));
    }

    /// Every permutation order visits every page exactly once per checking
    /// pass: a page a pass skipped would still hold the generation before,
    /// and the next pass's check would count its words wrong. The uniform
    /// order checks each page it draws, then every page at the end. Run
    /// natively, the walker being a plain static program.
    #[test]
    fn every_order_of_the_walker_checks_every_page() {
        let dir = private_dir(&std::env::temp_dir()).expect("a private directory");
        let walker = compile_walker(&dir).expect("the walker builds");
        let run = |args: &[&str]| {
            let out = Command::new("timeout")
                .arg("60")
                .arg(&walker)
                .args(args)
                .output()
                .expect("the walker runs");
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            (out.status.code(), text)
        };
        for order in ["shuffle", "loop", "stride"] {
            // 8 MiB: 2,048 pages, three checking passes.
            let (code, text) = run(&["8", "3", order]);
            assert_eq!(code, Some(0), "{order}: {text}");
            assert!(
                text.contains("walker: done pages_checked 6144 errors 0"),
                "{order}: {text}"
            );
        }
        // Uniform: 3 x 2,048 random visits, then every page once more.
        let (code, text) = run(&["8", "3", "uniform"]);
        assert_eq!(code, Some(0), "uniform: {text}");
        assert!(
            text.contains("walker: done pages_checked 8192 errors 0"),
            "uniform: {text}"
        );
        let (code, text) = run(&["8", "1", "zigzag"]);
        assert_eq!(code, Some(2), "{text}");
        assert!(text.contains("unknown order 'zigzag'"), "{text}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn directories_of_dead_processes_are_removed_and_others_kept() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        // Above any pid_max the kernel allows (2^22), so never a live pid.
        let dead = tmp.path().join(format!("{DIR_PREFIX}4294967295-0"));
        let live = tmp
            .path()
            .join(format!("{DIR_PREFIX}{}-3", std::process::id()));
        let unrelated = tmp.path().join(format!("{DIR_PREFIX}boot-4294967295"));
        for d in [&dead, &live, &unrelated] {
            fs::create_dir(d).expect("a dir");
            fs::write(d.join("initramfs.cpio"), b"x").expect("a file");
        }
        remove_orphaned_dirs(tmp.path());
        assert!(!dead.exists(), "the dead process's directory stayed");
        assert!(live.exists(), "a running process's directory was removed");
        assert!(
            unrelated.exists(),
            "a directory of another shape was removed"
        );
        assert_eq!(creator_pid("tiermem-vm-17-2"), Some(17));
        assert_eq!(creator_pid("tiermem-vm-17"), None);
        assert_eq!(creator_pid("tiermem-vm-boot-17"), None);
    }

    #[test]
    fn no_kernel_is_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("tiermem-vm-boot-{}", std::process::id()));
        let _ = fs::create_dir_all(&dir);
        let e = newest_boot_kernel(&dir).expect_err("an empty /boot");
        assert!(format!("{e:#}").contains("linux-image-amd64"), "{e:#}");
        let _ = fs::remove_dir_all(&dir);
    }
}
