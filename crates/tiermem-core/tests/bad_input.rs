//! Bad input gets a clear error, never a crash or a silent failure.

mod common;

use std::process::Command;

use common::{hang_guard, runtime};
use tiermem_core::{CompressSettings, Config, Error, PolicyKind, Runtime};

const MIB: u64 = 1 << 20;

#[test]
fn zero_and_absurd_sizes() {
    let rt = runtime(16 * MIB, 4096, PolicyKind::Clock);
    let zero = rt.alloc(0).unwrap_err();
    assert_eq!(zero.errno(), libc::EINVAL, "{zero}");
    let absurd = rt.alloc(1 << 62).unwrap_err();
    assert!(
        matches!(absurd, Error::OutOfBackingSpace { .. }),
        "{absurd}"
    );
    assert_eq!(absurd.errno(), libc::ENOMEM);
    assert!(
        absurd.to_string().contains("out of backing space"),
        "{absurd}"
    );
    let max = rt.alloc(usize::MAX).unwrap_err();
    assert_eq!(max.errno(), libc::ENOMEM, "{max}");
    // The runtime still works afterwards.
    let p = rt.alloc(4096).unwrap();
    // SAFETY: live allocation.
    unsafe { rt.free(p).unwrap() };
}

#[test]
fn allocation_larger_than_the_backing_store() {
    let config = Config::builder()
        .dram_budget(16 * MIB)
        .backing("/var/tmp")
        .backing_size(64 * MIB)
        .build()
        .unwrap();
    let rt = Runtime::new(config).unwrap();
    let err = rt.alloc(128 << 20).unwrap_err();
    assert_eq!(err.errno(), libc::ENOMEM, "{err}");
    let first = rt.alloc(40 << 20).expect("fits");
    let second = rt.alloc(40 << 20).unwrap_err();
    assert_eq!(
        second.errno(),
        libc::ENOMEM,
        "committed space must be honoured: {second}"
    );
    // SAFETY: live allocation.
    unsafe { rt.free(first).unwrap() };
    let again = rt.alloc(40 << 20).expect("space comes back after free");
    // SAFETY: live allocation.
    unsafe { rt.free(again).unwrap() };
}

#[test]
fn invalid_environment_values_name_the_variable() {
    for (name, value) in [
        ("TIERMEM_DRAM", "lots"),
        ("TIERMEM_PAGE_SIZE", "5000"),
        ("TIERMEM_POLICY", "random"),
    ] {
        let err = Config::from_lookup(|k| (k == name).then(|| value.to_string())).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(name) && msg.contains(value), "{msg}");
        assert!(
            msg.contains("expected"),
            "the accepted form must be stated: {msg}"
        );
    }
}

fn start_with_backing(path: &str) -> Error {
    let config = Config::builder()
        .dram_budget(16 * MIB)
        .backing(path)
        .build()
        .unwrap();
    match Runtime::new(config) {
        Ok(_) => panic!("backing {path} should have been refused"),
        Err(e) => e,
    }
}

#[test]
fn unusable_backing_paths() {
    let missing = start_with_backing("/nonexistent-tiermem-dir/sub/file");
    assert!(
        missing.to_string().contains("/nonexistent-tiermem-dir"),
        "{missing}"
    );
    // procfs refuses file creation, even for root.
    let proc_dir = start_with_backing("/proc/self");
    assert!(matches!(proc_dir, Error::Backing { .. }), "{proc_dir}");
    assert!(proc_dir.to_string().contains("/proc/self"), "{proc_dir}");
    // A backing file other users can read is refused.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let shared = dir.path().join("shared");
    std::fs::write(&shared, b"").unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let e = start_with_backing(shared.to_str().unwrap());
    assert!(e.to_string().contains("chmod 600"), "{e}");
}

/// A private 0600 file at `path` holding `content`.
fn private_file(path: &std::path::Path, content: &[u8]) {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    std::io::Write::write_all(&mut f, content).unwrap();
}

/// A file that holds data tiermem did not write is refused, and left as it
/// was: the store would overwrite it.
#[test]
fn a_backing_file_with_foreign_data_is_refused_and_kept() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("data");
    let content: Vec<u8> = (0..8192u32).map(|i| (i * 37 % 251) as u8).collect();
    private_file(&path, &content);
    let e = start_with_backing(path.to_str().unwrap());
    let msg = e.to_string();
    assert!(
        msg.contains("8192 bytes that tiermem did not write"),
        "{msg}"
    );
    assert!(msg.contains("truncate -s 0"), "the fix is named: {msg}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        content,
        "the file was changed"
    );
}

/// An empty file becomes tiermem's: after a run has filled it, the next run
/// takes it again.
#[test]
fn a_backing_file_tiermem_used_is_taken_again() {
    let _guard = hang_guard(
        "a_backing_file_tiermem_used_is_taken_again",
        std::time::Duration::from_secs(120),
    );
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("store");
    private_file(&path, b"");
    let config = || {
        Config::builder()
            .dram_budget(4 * MIB)
            .backing(&path)
            .backing_size(64 * MIB)
            // Pages must reach the file: the pool would keep them all.
            .compress(CompressSettings::off())
            .build()
            .unwrap()
    };
    let rt = Runtime::new(config()).expect("an empty file is taken");
    let buf = rt.alloc(32 * MIB as usize).expect("alloc");
    // SAFETY: the allocation is 32 MiB; every page gets a byte.
    unsafe {
        for i in (0..32 * MIB as usize).step_by(4096) {
            buf.as_ptr().add(i).write_volatile(7);
        }
    }
    assert!(rt.stats().page_outs > 0, "nothing reached the file");
    drop(rt);
    assert!(
        std::fs::metadata(&path).unwrap().len() > 0,
        "the file stayed empty"
    );
    Runtime::new(config()).expect("the file tiermem wrote is taken again");
}

/// A regular file that holds data can be given to tiermem on purpose with
/// `format_store` (`tiermem format-store FILE`), for files that cannot be
/// emptied, such as a FUSE export of a disk: the store then keeps the
/// file's size, its pages after the 1 MiB header. A file too small for the
/// header is refused, and one holding data only with `force`.
#[test]
fn a_formatted_file_keeps_its_size() {
    let _guard = hang_guard(
        "a_formatted_file_keeps_its_size",
        std::time::Duration::from_secs(120),
    );
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let small = dir.path().join("small");
    private_file(&small, &[1u8; 4096]);
    let e = tiermem_core::format_store(&small, true).unwrap_err();
    assert!(e.to_string().contains("needs at least"), "{e}");

    let path = dir.path().join("disk");
    private_file(&path, &[9u8; 9 << 20]);
    let e = tiermem_core::format_store(&path, false).unwrap_err();
    assert!(e.to_string().contains("add --force"), "{e}");
    let before = tiermem_core::format_store(&path, true).expect("formatting with force");
    assert_eq!(before, tiermem_core::StoreLabel::Unknown);

    let rt = Runtime::new(
        Config::builder()
            .dram_budget(4 * MIB)
            .backing(&path)
            // Pages must reach the file: the pool would keep them all.
            .compress(CompressSettings::off())
            .build()
            .unwrap(),
    )
    .expect("a formatted file is taken");
    assert_eq!(
        rt.stats().backing_capacity_bytes,
        8 << 20,
        "the size after the header"
    );
    let buf = rt.alloc(6 * MIB as usize).expect("alloc");
    // SAFETY: the allocation is 6 MiB; every byte is written, then read.
    unsafe {
        for i in 0..6 * MIB as usize {
            buf.as_ptr().add(i).write_volatile((i % 253) as u8);
        }
        for i in 0..6 * MIB as usize {
            assert_eq!(
                buf.as_ptr().add(i).read_volatile(),
                (i % 253) as u8,
                "byte {i}"
            );
        }
    }
    assert!(rt.stats().page_outs > 0, "nothing reached the file");
    drop(rt);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        9 << 20,
        "the file's size changed"
    );
}

/// A symbolic link to a regular file is refused (it could point anywhere);
/// so is a file owned by another user.
#[test]
fn a_link_to_a_file_and_someone_elses_file_are_refused() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let target = dir.path().join("target");
    private_file(&target, b"");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = start_with_backing(link.to_str().unwrap());
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = dir.path().join("theirs");
        private_file(&theirs, b"");
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let e = start_with_backing(theirs.to_str().unwrap());
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
    }
}

/// Runs one `child_*` test of this binary in a fresh process.
fn run_child(test: &str, env: &[(&str, &str)], uid: Option<u32>) -> std::process::Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--include-ignored"]);
    cmd.env("TIERMEM_CHILD_TEST", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(uid) = uid {
        std::os::unix::process::CommandExt::uid(&mut cmd, uid);
        std::os::unix::process::CommandExt::gid(&mut cmd, uid);
    }
    cmd.output().unwrap()
}

/// The child side: prints the error of starting a runtime in /tmp.
#[test]
#[ignore = "run by the parent tests in a separate process"]
fn child_start_runtime() {
    if std::env::var_os("TIERMEM_CHILD_TEST").is_none() {
        return;
    }
    let config = Config::builder()
        .dram_budget(16 * MIB)
        .backing(std::env::var("CHILD_BACKING").unwrap_or("/tmp".into()))
        .build()
        .unwrap();
    match Runtime::new(config) {
        Ok(_) => println!("CHILD-RESULT: started"),
        Err(e) => println!("CHILD-RESULT: {e}"),
    }
}

fn child_result(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .split("CHILD-RESULT: ")
        .nth(1)
        .map(|s| s.split("\ntest ").next().unwrap_or(s).to_string())
        .unwrap_or_else(|| {
            panic!(
                "child printed no result: {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

fn assert_uffd_fix_is_explained(msg: &str) {
    assert!(msg.contains("userfaultfd is not permitted"), "{msg}");
    assert!(msg.contains("vm.unprivileged_userfaultfd=1"), "{msg}");
    assert!(msg.contains("/dev/userfaultfd"), "{msg}");
}

#[test]
fn userfaultfd_denied_injected() {
    let out = run_child(
        "child_start_runtime",
        &[("TIERMEM_TEST_DENY_UFFD", "1")],
        None,
    );
    assert_uffd_fix_is_explained(&child_result(&out));
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn unprivileged_uffd_allowed() -> bool {
    std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd").is_ok_and(|s| s.trim() == "1")
}

#[test]
fn userfaultfd_denied_for_a_real_unprivileged_user() {
    if !is_root() || unprivileged_uffd_allowed() {
        eprintln!("skipped: needs root to drop to nobody, and vm.unprivileged_userfaultfd=0");
        return;
    }
    let out = run_child(
        "child_start_runtime",
        &[("CHILD_BACKING", "/tmp")],
        Some(65534),
    );
    assert_uffd_fix_is_explained(&child_result(&out));
}

#[test]
fn unwritable_backing_directory_for_a_real_user() {
    if !is_root() {
        eprintln!("skipped: needs root to drop to nobody");
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = run_child(
        "child_start_runtime",
        &[("CHILD_BACKING", dir.path().to_str().unwrap())],
        Some(65534),
    );
    let msg = child_result(&out);
    assert!(
        msg.contains(dir.path().to_str().unwrap())
            && msg.to_lowercase().contains("permission denied"),
        "{msg}"
    );
}

#[test]
fn a_backing_file_serves_one_process_at_a_time() {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("backing");
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    let config = |p: &std::path::Path| {
        Config::builder()
            .dram_budget(16 * MIB)
            .backing(p)
            .backing_size(64 * MIB)
            .build()
            .unwrap()
    };
    let first = Runtime::new(config(&path)).expect("the first user gets the file");
    let err = Runtime::new(config(&path))
        .err()
        .expect("a second user is refused");
    let msg = err.to_string();
    assert!(msg.contains("in use by another tiermem process"), "{msg}");
    assert!(msg.contains("give a directory"), "the fix is named: {msg}");
    drop(first);
    Runtime::new(config(&path)).expect("free again once the first is gone");
}
