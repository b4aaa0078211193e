//! A block device as the backing store, checked as `swapon` checks one: a
//! device holding a filesystem is refused and left intact, a mounted one is
//! refused by `tiermem format-store`, and a device given to tiermem with
//! `format-store` (or blank) serves a real program that checks its data.
//! Runs on a loop device over a file in /var/tmp, detached and deleted
//! afterwards even when the test fails. Needs root, losetup and mkfs.ext4;
//! every command runs under timeout(1).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TIERMEM: &str = env!("CARGO_BIN_EXE_tiermem");
/// A program that pages 64 MiB through a 16 MiB budget and checks it.
const PAGER: &str = "b = bytearray(64 << 20)\n\
for i in range(0, len(b), 4096): b[i] = (i >> 12) % 251\n\
bad = sum(1 for i in range(0, len(b), 4096) if b[i] != (i >> 12) % 251)\n\
print('bad pages', bad)";

/// A loop device over a sparse file; detached and deleted on drop.
struct LoopDevice {
    image: PathBuf,
    device: PathBuf,
    mount: Option<PathBuf>,
}

impl LoopDevice {
    fn new(tag: &str) -> LoopDevice {
        let image = PathBuf::from(format!(
            "/var/tmp/tiermem-loop-{tag}-{}.img",
            std::process::id()
        ));
        let status = Command::new("truncate")
            .args(["-s", "256M"])
            .arg(&image)
            .status()
            .expect("truncate");
        assert!(status.success());
        let out = run_ok(Command::new("losetup").args(["-f", "--show"]).arg(&image));
        let device = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        LoopDevice {
            image,
            device,
            mount: None,
        }
    }

    fn mkfs_ext4(&self) {
        run_ok(Command::new("mkfs.ext4").arg("-q").arg(&self.device));
    }

    fn mount(&mut self) {
        let dir = PathBuf::from(format!("{}.mnt", self.image.display()));
        std::fs::create_dir_all(&dir).expect("mount point");
        run_ok(Command::new("mount").arg(&self.device).arg(&dir));
        self.mount = Some(dir);
    }

    fn unmount(&mut self) {
        if let Some(dir) = self.mount.take() {
            let _ = Command::new("umount").arg(&dir).status();
            let _ = std::fs::remove_dir(&dir);
        }
    }

    /// The first 128 KiB, where a filesystem keeps its superblock.
    fn head(&self) -> Vec<u8> {
        let mut bytes = std::fs::read(&self.image).expect("reading the image");
        bytes.truncate(128 << 10);
        bytes
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        self.unmount();
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
        let _ = std::fs::remove_file(&self.image);
    }
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("starting a command");
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn tiermem(args: &[&str], device: &Path) -> Output {
    Command::new("timeout")
        .args(["-k", "5", "120", TIERMEM])
        .args(args)
        .arg(device)
        .env_remove("TIERMEM_BACKING")
        .env_remove("TIERMEM_DRAM")
        .output()
        .expect("running tiermem under timeout(1)")
}

fn run_pager(device: &Path) -> Output {
    Command::new("timeout")
        .args([
            "-k",
            "5",
            "120",
            TIERMEM,
            "run",
            "--dram",
            "16M",
            "--backing",
        ])
        .arg(device)
        .args(["--", "python3", "-c", PAGER])
        .env_remove("TIERMEM_BACKING")
        .output()
        .expect("running tiermem under timeout(1)")
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn can_use_loop_devices() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let tools = ["losetup", "mkfs.ext4"]
        .iter()
        .all(|t| Command::new(t).arg("-V").output().is_ok());
    if !(root && tools) {
        eprintln!("skipped: needs root, losetup and mkfs.ext4");
    }
    root && tools
}

/// An ext4 filesystem on the device is refused by name before the program
/// starts, and not one byte of the device changes.
#[test]
fn a_device_with_a_filesystem_is_refused_and_left_intact() {
    if !can_use_loop_devices() {
        return;
    }
    let dev = LoopDevice::new("fs");
    dev.mkfs_ext4();
    let before = dev.head();
    let out = run_pager(&dev.device);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("carries an ext2/3/4 filesystem"), "{all}");
    assert!(all.contains("tiermem format-store"), "{all}");
    assert!(!all.contains("bad pages"), "the program ran: {all}");
    assert!(dev.head() == before, "the device changed");
}

/// `format-store` refuses a mounted device, refuses a filesystem without
/// --force, and with it gives the device to tiermem: a program then pages
/// through it and finds every page right.
#[test]
fn format_store_gives_a_device_to_tiermem() {
    if !can_use_loop_devices() {
        return;
    }
    let mut dev = LoopDevice::new("format");
    dev.mkfs_ext4();
    dev.mount();
    let out = tiermem(&["format-store", "--force"], &dev.device);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("is in use"), "{}", text(&out));
    dev.unmount();

    let out = tiermem(&["format-store"], &dev.device);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("add --force"), "{}", text(&out));

    let out = tiermem(&["format-store", "--force"], &dev.device);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("it carried an ext2/3/4 filesystem"));

    let out = run_pager(&dev.device);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("bad pages 0"), "{}", text(&out));
}

/// A blank device is taken as it is, and marked so the next run knows it.
#[test]
fn a_blank_device_is_taken_and_marked() {
    if !can_use_loop_devices() {
        return;
    }
    let dev = LoopDevice::new("blank");
    let out = run_pager(&dev.device);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("bad pages 0"), "{}", text(&out));
    assert!(
        dev.head().starts_with(b"TIERMEM-STORE"),
        "no header written"
    );
    let out = run_pager(&dev.device);
    assert!(out.status.success(), "second run: {}", text(&out));
}
