//! A backing file the user names serves one process at a time. It follows
//! the run's program across exec, as through a wrapper that execs the real
//! program (`sh -c 'exec ...'`, a version manager's shim). A process
//! started while another one of the run holds it pages to a private file
//! in /var/tmp and says so at exit. Every run is under timeout(1) and
//! checks every byte the program wrote.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};

#[path = "../../../tests/support/c_program.rs"]
mod c_program;
#[path = "../../../tests/support/pager.rs"]
mod pager;
use pager::PAGER;

const TIERMEM: &str = env!("CARGO_BIN_EXE_tiermem");
/// An empty private file in a fresh directory under /var/tmp.
fn empty_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("tiermem-named-")
        .tempdir_in("/var/tmp")
        .expect("a scratch directory in /var/tmp");
    let file = dir.path().join("store");
    std::fs::write(&file, b"").expect("creating the backing file");
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod 600");
    (dir, file)
}

/// `tiermem run --dram DRAM --stats FLAGS --backing FILE -- COMMAND`,
/// with `env`, under timeout(1).
fn tiermem_run(
    dram: &str,
    flags: &[&str],
    file: &Path,
    command: &[&OsStr],
    env: &[(&str, &str)],
) -> Output {
    Command::new("timeout")
        .args(["-k", "10", "300", TIERMEM, "run", "--dram", dram, "--stats"])
        .args(flags)
        .arg("--backing")
        .arg(file)
        .arg("--")
        .args(command)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("running tiermem under timeout(1)")
}

/// `tiermem run --stats --backing FILE -- sh -c SCRIPT`, with the pager
/// in $PAGER_PROGRAM.
fn run_script(file: &Path, script: &str) -> Output {
    let command = ["sh".as_ref(), "-c".as_ref(), OsStr::new(script)];
    tiermem_run("16M", &[], file, &command, &[("PAGER_PROGRAM", PAGER)])
}

/// Copies of `marker` in the backing file.
fn copies_in(file: &Path, marker: &[u8]) -> usize {
    let stored = std::fs::read(file).expect("reading the backing file");
    stored
        .windows(marker.len())
        .filter(|w| *w == marker)
        .count()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The stats block of the process named `program`, from --stats output.
fn stats_of<'a>(stderr: &'a str, program: &str) -> &'a str {
    let head = format!("── tiermem: {program} (pid");
    let start = stderr
        .find(&head)
        .unwrap_or_else(|| panic!("no stats for {program}:\n{stderr}"));
    let block = &stderr[start..];
    let end = block[head.len()..]
        .find("── tiermem:")
        .map_or(block.len(), |e| e + head.len());
    &block[..end]
}

#[test]
fn an_exec_keeps_the_named_backing_store() {
    let (_dir, file) = empty_file();
    let out = run_script(&file, "exec python3 -c \"$PAGER_PROGRAM\"");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("same"), "{stdout}\n{stderr}");
    let python = stats_of(&stderr, "python3");
    let backing = format!("backing         {}", file.display());
    assert!(
        python.contains(&backing),
        "python3 paged elsewhere:\n{python}"
    );
    assert!(!stderr.contains("another tiermem process"), "{stderr}");
    let size = std::fs::metadata(&file).expect("the backing file").len();
    assert!(size >= 48 << 20, "the backing file holds {size} bytes");
}

#[test]
fn a_child_started_while_the_store_is_held_pages_elsewhere_and_says_so() {
    let (_dir, file) = empty_file();
    let out = run_script(&file, "python3 -c \"$PAGER_PROGRAM\"; echo after");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("same") && stdout.contains("after"),
        "{stdout}\n{stderr}"
    );
    let python = stats_of(&stderr, "python3");
    assert!(python.contains("backing         /var/tmp"), "{python}");
    let note = format!(
        "to a private file in /var/tmp, not to {}: another tiermem process (the one that started this one, or an earlier one) held that backing store when this one started",
        file.display()
    );
    assert!(stderr.contains(&note), "{stderr}");
    let said = stderr.matches("another tiermem process").count();
    assert_eq!(said, 1, "only the process that paged says so:\n{stderr}");
}

/// Fills 64 MiB with a recognisable text, pages it through the 16 MiB
/// budget, and checks every byte.
const MARKED_PAGER: &str = "import hashlib\n\
chunk = b''.join(b'TIERMEM-SECRET-%09d|' % i for i in range(4096))\n\
b = bytearray((chunk * ((64 << 20) // len(chunk) + 1))[:64 << 20])\n\
want = hashlib.sha256(b).digest()\n\
b[:] = b[::-1]\n\
b[:] = b[::-1]\n\
print('same' if hashlib.sha256(b).digest() == want else 'DIFFERENT', flush=True)";

/// Runs the marked pager with `flags`; returns its output and how many
/// times the marker is in the backing file afterwards.
fn run_marked(flags: &[&str]) -> (Output, usize) {
    let (_dir, file) = empty_file();
    let command = ["sh", "-c", "exec python3 -c \"$PAGER_PROGRAM\""].map(OsStr::new);
    let out = tiermem_run(
        "16M",
        flags,
        &file,
        &command,
        &[("PAGER_PROGRAM", MARKED_PAGER)],
    );
    (out, copies_in(&file, b"TIERMEM-SECRET-"))
}

/// With `--encrypt`, not one copy of the program's text reaches the store,
/// and every byte comes back. Without it the same run leaves the text in
/// the file: the check can fail.
#[test]
fn with_encrypt_the_store_never_holds_the_programs_bytes() {
    let (out, found) = run_marked(&["--encrypt"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("same"), "{stdout}\n{stderr}");
    assert!(
        stats_of(&stderr, "python3").contains("encrypted"),
        "{stderr}"
    );
    assert_eq!(found, 0, "the program's text is in the store");

    let (out, found) = run_marked(&[]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(
        found > 1000,
        "in the clear, the text should be stored: found {found}"
    );
}

/// Runs `tests/c/preload_mlock.c` in `mode` with a named backing file and
/// the compressed tier set by `compress`; returns its output and how many
/// copies of its secret the file holds.
fn run_mlock(exe: &Path, mode: &str, compress: &str) -> (Output, usize) {
    let (_dir, file) = empty_file();
    let command = [exe.as_os_str(), OsStr::new(mode)];
    let out = tiermem_run(
        "8M",
        &[],
        &file,
        &command,
        &[("TIERMEM_COMPRESS", compress)],
    );
    (out, copies_in(&file, b"TIERMEM-LOCKED-SECRET-"))
}

/// `mlock`ed tiered memory stays in DRAM while 64 MiB page through an
/// 8 MiB budget, and not one copy of it reaches the store, with the
/// compressed tier on (the default) and off; unlocked, the same secret is
/// found there (so the check can fail). The control runs with the tier
/// off: its compressible secret could otherwise stay in the pool, in DRAM,
/// for the whole run, and whether it does depends on timing. mlockall() is
/// refused, locking past half the budget fails with EAGAIN, and MAP_LOCKED
/// memory works (the C program checks those).
#[test]
fn locked_memory_never_reaches_the_store() {
    let (exe, _, scratch) = c_program::compile("preload_mlock");
    for compress in ["lz4", "off"] {
        let (out, found) = run_mlock(&exe, "lock", compress);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{compress}: {stdout}\n{stderr}");
        assert!(
            stdout.contains("OK locked"),
            "{compress}: {stdout}\n{stderr}"
        );
        assert!(stderr.contains("called mlockall()"), "{compress}: {stderr}");
        assert_eq!(found, 0, "{compress}: the locked secret reached the store");
    }

    let (out, found) = run_mlock(&exe, "nolock", "off");
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(
        found > 100,
        "unlocked, the secret should be stored: found {found}"
    );
    let _ = std::fs::remove_dir_all(scratch);
}
