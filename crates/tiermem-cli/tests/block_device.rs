//! A block device as the backing store, checked as `swapon` checks one: a
//! device holding a filesystem is refused and left intact, a mounted one is
//! refused by `tiermem format-store`, and a device given to tiermem with
//! `format-store` (or blank) serves a real program that checks its data.
//! Runs on a loop device over a file in /var/tmp, detached and deleted
//! afterwards even when the test fails. Needs root, losetup and mkfs.ext4;
//! every command runs under timeout(1).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../../../tests/support/pager.rs"]
mod pager;
use pager::PAGER;

const TIERMEM: &str = env!("CARGO_BIN_EXE_tiermem");
/// A loop device over a sparse file; detached and deleted on drop.
struct LoopDevice {
    image: PathBuf,
    device: PathBuf,
    mount: Option<PathBuf>,
}

impl LoopDevice {
    fn new(tag: &str) -> LoopDevice {
        LoopDevice::with_size(tag, "256M")
    }

    fn with_size(tag: &str, size: &str) -> LoopDevice {
        let image = PathBuf::from(format!(
            "/var/tmp/tiermem-loop-{tag}-{}.img",
            std::process::id()
        ));
        let status = Command::new("truncate")
            .args(["-s", size])
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
        self.mount_with("defaults");
    }

    /// Mounts the device with `options`; returns the mount point.
    fn mount_with(&mut self, options: &str) -> PathBuf {
        let dir = PathBuf::from(format!("{}.mnt", self.image.display()));
        std::fs::create_dir_all(&dir).expect("mount point");
        run_ok(
            Command::new("mount")
                .args(["-o", options])
                .arg(&self.device)
                .arg(&dir),
        );
        self.mount = Some(dir.clone());
        dir
    }

    /// Unmounts, retrying for two seconds while a process of the test
    /// that is still exiting holds a file there (a pager stopped by a full
    /// store), then detaching lazily: no mount outlives the test (one did,
    /// once, when a single `umount` found the filesystem busy).
    fn unmount(&mut self) {
        if let Some(dir) = self.mount.take() {
            let unmounted = (0..20).any(|_| {
                let done = Command::new("umount")
                    .arg(&dir)
                    .status()
                    .is_ok_and(|s| s.success());
                if !done {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                done
            });
            if !unmounted {
                let _ = Command::new("umount").arg("-l").arg(&dir).status();
            }
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
    run_pager_with("python3", device)
}

/// The pager under `tiermem run --stats --dram 16M --backing BACKING`.
fn run_pager_with(python: &str, backing: &Path) -> Output {
    Command::new("timeout")
        .args([
            "-k",
            "5",
            "120",
            TIERMEM,
            "run",
            "--dram",
            "16M",
            "--stats",
            "--backing",
        ])
        .arg(backing)
        .args(["--", python, "-c", PAGER])
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

/// The program's own verdict ("same" or "DIFFERENT"), which only its
/// stdout carries: stderr has tiermem's summary, whose "same-filled" would
/// match too.
fn verdict(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
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
    assert!(!all.contains("filled"), "the program ran: {all}");
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
    assert!(verdict(&out).contains("same"), "{}", text(&out));
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
    assert!(verdict(&out).contains("same"), "{}", text(&out));
    assert!(
        dev.head().starts_with(b"TIERMEM-STORE"),
        "no header written"
    );
    let out = run_pager(&dev.device);
    assert!(out.status.success(), "second run: {}", text(&out));
}

/// The pager run with `--stats` in `dir`, under python3 itself (not a
/// version manager's shim, whose helper processes would take the small
/// filesystem's space first).
fn run_pager_in(dir: &Path) -> Output {
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("python3");
    run_pager_with(python, dir)
}

/// ext4 mounted `data=journal` accepts O_DIRECT and serves it from the page
/// cache, where a write's error would surface only at a later fsync. The
/// store sees it (statx gives no direct I/O alignment), says so, and syncs
/// every batch of writes before its pages count as stored.
#[test]
fn a_filesystem_that_buffers_o_direct_gets_synced_writes() {
    if !can_use_loop_devices() {
        return;
    }
    let mut dev = LoopDevice::new("journal");
    dev.mkfs_ext4();
    let dir = dev.mount_with("data=journal");
    let out = run_pager_in(&dir);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(verdict(&out).contains("same"), "{all}");
    assert!(all.contains("does not support O_DIRECT"), "{all}");
    assert!(
        all.contains("writes: pwritev + fdatasync (buffered store)"),
        "{all}"
    );
}

/// A backing filesystem that fills up stops the program with a message
/// that says so, at the first page it cannot store: no wrong data, no
/// hang, and nothing left on the filesystem.
#[test]
fn a_full_backing_filesystem_stops_the_program_with_a_message() {
    if !can_use_loop_devices() {
        return;
    }
    let mut dev = LoopDevice::with_size("full", "32M");
    dev.mkfs_ext4();
    let dir = dev.mount_with("defaults");
    let out = run_pager_in(&dir);
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    let verdict = verdict(&out);
    assert!(
        !verdict.contains("same") && !verdict.contains("DIFFERENT"),
        "{all}"
    );
    assert!(all.contains("the backing store is full"), "{all}");
    assert!(all.contains("give tiermem a larger --backing"), "{all}");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("listing the filesystem")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name() != "lost+found")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
