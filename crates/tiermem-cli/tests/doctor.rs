//! `tiermem doctor` as a user runs it: against fake /proc and /sys trees
//! (`--root`, a copy of `tests/data/doctor-healthy` changed per case), on
//! this machine as root, and on this machine as user `nobody`, who may not
//! use userfaultfd here. Every run is under timeout(1).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TIERMEM: &str = env!("CARGO_BIN_EXE_tiermem");

/// Every check, in the order of the report.
const CHECKS: [&str; 13] = [
    "userfaultfd",
    "uffd_features",
    "io_uring",
    "memlock",
    "max_map_count",
    "backing_store",
    "o_direct",
    "free_space",
    "device_queue",
    "idle_halt",
    "swap_settings",
    "cgroup",
    "libtiermem",
];

/// The settings doctor reads from the environment: unset, so the test
/// environment cannot change the answers.
const SETTINGS: [&str; 6] = [
    "TIERMEM_BACKING",
    "TIERMEM_IO_POLL",
    "TIERMEM_IO_DEPTH",
    "TIERMEM_IDLE_SPIN_US",
    "TIERMEM_HANDLER_THREADS",
    "TIERMEM_LIB",
];

/// `cmd` under timeout(1), with the settings unset.
fn run(mut cmd: Command) -> Output {
    for var in SETTINGS {
        cmd.env_remove(var);
    }
    cmd.output()
        .expect("running tiermem doctor under timeout(1)")
}

fn doctor(args: &[&str]) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", "60", TIERMEM, "doctor"]).args(args);
    run(cmd)
}

fn doctor_in(root: &Path, extra: &[&str]) -> Output {
    let root = root.to_str().expect("a UTF-8 temp path");
    let mut args = vec!["--root", root];
    args.extend_from_slice(extra);
    doctor(&args)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn shown(out: &Output) -> String {
    format!(
        "{}\n{}{}",
        out.status,
        stdout(out),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The report's line for `check`.
fn line<'a>(text: &'a str, check: &str) -> &'a str {
    text.lines()
        .find(|l| {
            l.get(6..)
                .is_some_and(|rest| rest.split_whitespace().next() == Some(check))
        })
        .unwrap_or_else(|| panic!("no {check} line in:\n{text}"))
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("creating a directory of the fake tree");
    for entry in std::fs::read_dir(from).expect("reading the fixture") {
        let entry = entry.expect("a fixture entry");
        let dest = to.join(entry.file_name());
        if entry.file_type().expect("a file type").is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).expect("copying a fixture file");
        }
    }
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("creating directories");
    std::fs::write(path, text).expect("writing a fake file");
}

/// A copy of the healthy fixture, completed with what depends on where
/// it lies: the backing directory, and a mount table and sysfs link for
/// the device number of its filesystem, leading to the fake nvme0n1p1.
fn healthy_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temp dir");
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/doctor-healthy");
    copy_tree(&fixture, dir.path());
    let backing = dir.path().join("var/tmp");
    std::fs::create_dir_all(&backing).expect("the fake backing directory");
    let dev = std::fs::metadata(&backing).expect("stat").dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    write(
        dir.path(),
        "proc/self/mountinfo",
        &format!("25 1 {major}:{minor} / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw\n"),
    );
    let links = dir.path().join("sys/dev/block");
    std::fs::create_dir_all(&links).expect("sys/dev/block");
    std::os::unix::fs::symlink(
        "../../devices/pci0/nvme0n1/nvme0n1p1",
        links.join(format!("{major}:{minor}")),
    )
    .expect("the device link");
    dir
}

#[test]
fn an_unprivileged_user_without_the_sysctl_fails_and_is_told_the_fix() {
    let root = healthy_root();
    write(root.path(), "proc/sys/vm/unprivileged_userfaultfd", "0\n");
    let out = doctor_in(root.path(), &[]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    let uffd = line(&text, "userfaultfd");
    assert!(uffd.starts_with("FAIL"), "{uffd}");
    let (_, fix) = uffd.split_once(" — fix: ").expect("a fix on the line");
    assert!(
        fix.contains("sysctl -w vm.unprivileged_userfaultfd=1"),
        "{fix}"
    );
    assert!(
        uffd.contains("uid 54321") && uffd.contains("no CAP_SYS_PTRACE"),
        "{uffd}"
    );
    // A root-only device node does not help; one open to everyone does.
    std::fs::create_dir_all(root.path().join("dev")).expect("dev");
    let node = root.path().join("dev/userfaultfd");
    std::fs::write(&node, "").expect("a fake node");
    std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let out = doctor_in(root.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = doctor_in(root.path(), &[]);
    let text = stdout(&out);
    assert!(line(&text, "userfaultfd").starts_with("PASS"), "{text}");
}

#[test]
fn a_healthy_fake_host_exits_zero() {
    let root = healthy_root();
    let out = doctor_in(root.path(), &[]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    for check in CHECKS {
        assert!(!line(&text, check).starts_with("FAIL"), "{text}");
    }
    let uffd = line(&text, "userfaultfd");
    assert!(
        uffd.starts_with("PASS") && uffd.contains("vm.unprivileged_userfaultfd=1"),
        "{uffd}"
    );
    assert!(uffd.contains("derived"), "{uffd}");
    let features = line(&text, "uffd_features");
    assert!(
        features.starts_with("PASS") && features.contains("6.8.0-doctor-healthy"),
        "{features}"
    );
    let queue = line(&text, "device_queue");
    assert!(queue.starts_with("PASS"), "{queue}");
    assert!(
        queue.contains("nvme0n1 (partition nvme0n1p1): scheduler none, nr_requests 1023, io_poll 1, nvme.poll_queues=2"),
        "{queue}"
    );
    assert!(
        line(&text, "idle_halt").contains("polls 200000 ns"),
        "{text}"
    );
    assert!(line(&text, "cgroup").starts_with("PASS"), "{text}");
    assert!(
        line(&text, "backing_store").contains("ext4 on /dev/nvme0n1p1"),
        "{text}"
    );
    assert!(text.contains("live probes not run"), "{text}");
}

#[test]
fn a_fake_guest_that_halts_at_once_warns_and_still_exits_zero() {
    let root = healthy_root();
    write(
        root.path(),
        "sys/module/haltpoll/parameters/guest_halt_poll_ns",
        "0\n",
    );
    let out = doctor_in(root.path(), &[]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    let idle = line(&text, "idle_halt");
    assert!(
        idle.starts_with("WARN") && idle.contains("guest_halt_poll_ns"),
        "{idle}"
    );
}

#[test]
fn json_carries_the_envelope_and_every_check() {
    let root = healthy_root();
    write(root.path(), "proc/sys/vm/unprivileged_userfaultfd", "0\n");
    let out = doctor_in(root.path(), &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    let report: serde_json::Value =
        serde_json::from_str(&stdout(&out)).expect("--json prints JSON");
    assert_eq!(report["schema"], "tiermem.doctor/1");
    assert_eq!(report["tiermem_version"], env!("CARGO_PKG_VERSION"));
    // The envelope names the machine that ran doctor; the checks, the tree.
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    assert_eq!(report["kernel"], kernel.trim());
    assert!(report["host"].is_object(), "{report}");
    assert_eq!(report["root"], root.path().to_str().expect("UTF-8"));
    assert_eq!(report["backing"], "/var/tmp");
    let args: Vec<&str> = report["command_line"]
        .as_array()
        .expect("command_line")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(
        args.contains(&"doctor") && args.contains(&"--json"),
        "{args:?}"
    );
    let checks = report["checks"].as_array().expect("checks");
    let names: Vec<&str> = checks.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, CHECKS);
    for c in checks {
        let status = c["status"].as_str().expect("a status");
        assert!(["pass", "warn", "fail"].contains(&status), "{c}");
        assert!(c["detail"].is_string(), "{c}");
        assert_eq!(c["fix"].is_null(), status == "pass", "{c}");
    }
    assert_eq!(checks[0]["status"], "fail");
    let fix = checks[0]["fix"].as_str().expect("a fix");
    assert!(fix.contains("vm.unprivileged_userfaultfd"), "{fix}");
    let count = |s: &str| checks.iter().filter(|c| c["status"] == s).count() as u64;
    assert_eq!(report["failed"].as_u64(), Some(count("fail")));
    assert_eq!(report["warned"].as_u64(), Some(count("warn")));
}

/// The FAIL lines and the exit code agree, every check is printed, and
/// the summary counts them.
fn assert_consistent(out: &Output) {
    let text = stdout(out);
    for check in CHECKS {
        let l = line(&text, check);
        assert!(
            ["PASS  ", "WARN  ", "FAIL  "]
                .iter()
                .any(|s| l.starts_with(s)),
            "{l}"
        );
        assert_eq!(l.starts_with("PASS"), !l.contains(" — fix: "), "{l}");
    }
    let fails = text.lines().filter(|l| l.starts_with("FAIL")).count();
    assert_eq!(
        out.status.code(),
        Some(i32::from(fails > 0)),
        "{}",
        shown(out)
    );
    assert!(text.contains(&format!("warned, {fails} failed")), "{text}");
}

#[test]
fn this_machine_gets_every_check_and_a_consistent_exit_code() {
    let out = doctor(&["--root", "/"]);
    println!("{}", shown(&out));
    assert_consistent(&out);
    assert!(!stdout(&out).contains("live probes not run"));
}

/// How to run a command as `nobody` here, if this test may.
fn as_nobody() -> Result<Vec<&'static str>, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root, so it cannot switch to nobody".into());
    }
    let sysctl =
        std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd").unwrap_or_default();
    if sysctl.trim() != "0" {
        return Err(format!(
            "vm.unprivileged_userfaultfd is {:?}, not 0",
            sysctl.trim()
        ));
    }
    if let Ok(m) = std::fs::metadata("/dev/userfaultfd") {
        if m.mode() & 0o066 != 0 {
            return Err(format!(
                "/dev/userfaultfd is open to others (mode {:o})",
                m.mode() & 0o777
            ));
        }
    }
    let found = |tool: &str| {
        ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
            .iter()
            .any(|d| Path::new(d).join(tool).exists())
    };
    if found("setpriv") {
        Ok(vec![
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ])
    } else if found("runuser") {
        Ok(vec!["runuser", "-u", "nobody", "--"])
    } else {
        Err("neither setpriv nor runuser is installed".into())
    }
}

#[test]
fn nobody_on_this_machine_fails_and_is_told_the_sysctl() {
    let switch = match as_nobody() {
        Ok(s) => s,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    // target/ may be closed to nobody: a copy it can read and run.
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let bin = dir.path().join("tiermem");
    std::fs::copy(TIERMEM, &bin).expect("copying the binary");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", "60"])
        .args(&switch)
        .arg(&bin)
        .args(["doctor", "--backing", "/var/tmp"])
        .current_dir("/");
    let out = run(cmd);
    println!("{}", shown(&out));
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    let text = stdout(&out);
    let uffd = line(&text, "userfaultfd");
    assert!(
        uffd.starts_with("FAIL") && uffd.contains("uid 65534"),
        "{uffd}"
    );
    let (_, fix) = uffd.split_once(" — fix: ").expect("a fix on the line");
    assert!(fix.contains("vm.unprivileged_userfaultfd"), "{fix}");
    assert_consistent(&out);
}
