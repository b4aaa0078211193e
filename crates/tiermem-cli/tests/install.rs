//! `make install` into a temporary prefix, then the installed tree used as a
//! user would: a C client built with `cc $(pkg-config --cflags --libs
//! tiermem)` pages through the API, `tiermem run` finds the installed
//! library with no `TIERMEM_LIB`, and the SONAME, symlinks, man pages and
//! completions are where packagers and shells look for them.
//!
//! The Makefile installs what `cargo test` already built (the `tiermem` of
//! this profile and the libtiermem.so the test support builds), and is told
//! `CARGO=false` so it can never start a cargo of its own. A tool that is
//! not installed (make, pkg-config, python3) fails the test when `CI` is set
//! (.ci/run installs them) and skips it, saying why, otherwise.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../../../tests/support/libtiermem.rs"]
mod support;
use support::{libtiermem, repo_root};

/// The crate's version, which the Makefile reads from the workspace too.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A fresh prefix under /var/tmp (a filesystem a backing file can live on),
/// removed on drop.
fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("tiermem-install-{tag}-"))
        .tempdir_in("/var/tmp")
        .expect("cannot create a scratch directory in /var/tmp")
}

/// Whether `program` is on PATH; when it is not, says so, and fails under CI.
fn have(program: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", "command -v \"$1\" >/dev/null", "sh", program])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{program} is not installed (.ci/run installs it)"
        );
        eprintln!("skipped: {program} is not installed");
    }
    found
}

/// `timeout -k 10 300 PROGRAM` with no tiermem setting, preload or library
/// path inherited from the test's environment: a hang fails instead of
/// stalling the suite, and the installed tree must work on its own.
fn timed(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "10", "300"]).arg(program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TIERMEM_") {
            cmd.env_remove(name);
        }
    }
    for name in ["LD_PRELOAD", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH"] {
        cmd.env_remove(name);
    }
    cmd
}

/// Runs `cmd`, which must exit 0 within its timeout; returns its output.
fn run(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(124),
        "{what} hung:\n{stdout}{stderr}"
    );
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}{stderr}",
        out.status
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `make -C <repo> TARGET VARS...` installing this profile's build, never
/// building: the test's `cargo test` holds the build, and a nested one would
/// wait on it.
fn make(target: &str, vars: &[String]) -> Output {
    let lib = libtiermem();
    let build_dir = lib.parent().expect("the library's directory");
    let bin = Path::new(env!("CARGO_BIN_EXE_tiermem"));
    assert_eq!(
        bin.parent(),
        Some(build_dir),
        "tiermem and libtiermem.so are built in different directories"
    );
    let mut cmd = timed("make");
    cmd.arg("-C")
        .arg(repo_root())
        .arg(target)
        .arg(format!("BUILD_DIR={}", build_dir.display()))
        .arg("CARGO=false")
        .args(vars)
        // A `make` running this test must not hand its jobserver or flags down.
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .env_remove("MAKELEVEL");
    run(&mut cmd, &format!("make {target} {}", vars.join(" ")))
}

/// Installs into `prefix`; false (the test skipped) when make is missing.
fn install(prefix: &Path) -> bool {
    if !have("make") {
        return false;
    }
    make("install", &[format!("PREFIX={}", prefix.display())]);
    true
}

/// The library files and their links, with the SONAME readelf reports.
#[test]
fn the_library_is_installed_with_its_soname_and_links() {
    let dir = scratch("lib");
    let prefix = dir.path();
    if !install(prefix) {
        return;
    }
    let lib = prefix.join("lib");
    let real = format!("libtiermem.so.{VERSION}");
    assert!(lib.join(&real).is_file(), "lib/{real} not installed");
    let link = |name: &str| std::fs::read_link(lib.join(name)).ok();
    assert_eq!(link("libtiermem.so.0"), Some(PathBuf::from(&real)));
    assert_eq!(
        link("libtiermem.so"),
        Some(PathBuf::from("libtiermem.so.0"))
    );
    let header = std::fs::read_to_string(prefix.join("include/tiermem.h"))
        .expect("include/tiermem.h installed");
    assert!(
        header.contains(&format!("#define TIERMEM_VERSION \"{VERSION}\"")),
        "the installed header has no TIERMEM_VERSION {VERSION}"
    );
    match Command::new("readelf")
        .arg("-d")
        .arg(lib.join(&real))
        .output()
    {
        Ok(out) => {
            let dynamic = stdout(&out);
            assert!(
                dynamic.contains("Library soname: [libtiermem.so.0]"),
                "no SONAME libtiermem.so.0 in:\n{dynamic}"
            );
        }
        Err(e) => eprintln!("SONAME not checked: readelf is not runnable: {e}"),
    }
}

/// A C client built only from the installed tree (header and library found
/// through pkg-config) pages 32 MiB through an 8 MiB budget and runs against
/// the installed library.
#[test]
fn a_c_client_builds_with_pkg_config_and_runs() {
    let dir = scratch("c");
    let prefix = dir.path();
    if !install(prefix) || !have("pkg-config") {
        return;
    }
    let pc_path = prefix.join("lib/pkgconfig");
    let version = run(
        timed("pkg-config")
            .args(["--modversion", "tiermem"])
            .env("PKG_CONFIG_PATH", &pc_path),
        "pkg-config --modversion tiermem",
    );
    assert_eq!(stdout(&version).trim(), VERSION);

    let exe = prefix.join("install_client");
    let source = repo_root().join("tests/c/install_client.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    run(
        timed("sh")
            .arg("-c")
            .arg(
                "\"$0\" -std=c11 -Wall -Wextra -Werror -O1 \"$1\" -o \"$2\" \
                 $(pkg-config --cflags --libs tiermem)",
            )
            .arg(&cc)
            .arg(&source)
            .arg(&exe)
            .env("PKG_CONFIG_PATH", &pc_path),
        "cc install_client.c $(pkg-config --cflags --libs tiermem)",
    );

    let backing = prefix.join("backing");
    std::fs::create_dir(&backing).expect("creating the backing directory");
    let out = run(
        timed(&exe)
            .arg(&backing)
            .env("LD_LIBRARY_PATH", prefix.join("lib")),
        "install_client",
    );
    let text = stdout(&out);
    assert!(text.ends_with("install_client: ok\n"), "{text}");
    assert!(
        text.contains(&format!("version {VERSION} header {VERSION}\n")),
        "{text}"
    );
    let loaded = format!("library {}/", prefix.join("lib").display());
    assert!(text.contains(&loaded), "not the installed library: {text}");
}

/// The installed `tiermem run`, with no TIERMEM_LIB, preloads the installed
/// library into a Python program that pages 48 MiB of random bytes through
/// a 16 MiB budget: its output is the output of the same program run
/// untiered, and `--stats` shows pages written to the store.
#[test]
fn the_installed_tiermem_run_finds_the_installed_library() {
    let dir = scratch("run");
    let prefix = dir.path();
    if !install(prefix) || !have("python3") {
        return;
    }
    let backing = prefix.join("backing");
    std::fs::create_dir(&backing).expect("creating the backing directory");
    let program = "import hashlib, random\n\
                   random.seed(24)\n\
                   b = bytearray(random.randbytes(48 << 20))\n\
                   first = hashlib.sha256(b).hexdigest()\n\
                   print(first, hashlib.sha256(b).hexdigest() == first)\n\
                   print(sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libtiermem' in l}))\n";
    let untiered = run(
        timed("python3").args(["-c", program]),
        "python3 without tiermem",
    );
    let out = run(
        timed(prefix.join("bin/tiermem"))
            .args(["run", "--dram", "16M", "--stats", "--backing"])
            .arg(&backing)
            .args(["--", "python3", "-c", program]),
        "tiermem run -- python3",
    );
    let (text, plain) = (stdout(&out), stdout(&untiered));
    let (hash, maps) = text.split_once('\n').expect("two lines");
    assert_eq!(
        Some(hash),
        plain.lines().next(),
        "tiered and untiered differ"
    );
    assert!(hash.ends_with(" True"), "{text}");
    let real = prefix.join(format!("lib/libtiermem.so.{VERSION}"));
    assert_eq!(maps.trim_end(), format!("['{}']", real.display()), "{text}");
    // One report per tiered process: a launcher script (pyenv's) has its own.
    let stats = String::from_utf8_lossy(&out.stderr);
    let page_outs = stats
        .lines()
        .filter_map(|l| l.strip_prefix("page-outs"))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .max();
    assert!(
        page_outs.is_some_and(|n| n > 0),
        "nothing paged out:\n{stats}"
    );
}

/// A lib64 LIBDIR (a distribution's layout) is still found by `tiermem run`,
/// and the pkg-config file names it.
#[test]
fn a_lib64_libdir_is_found() {
    let dir = scratch("lib64");
    let prefix = dir.path();
    if !have("make") {
        return;
    }
    make(
        "install",
        &[
            format!("PREFIX={}", prefix.display()),
            format!("LIBDIR={}/lib64", prefix.display()),
        ],
    );
    let pc = std::fs::read_to_string(prefix.join("lib64/pkgconfig/tiermem.pc"))
        .expect("lib64/pkgconfig/tiermem.pc installed");
    assert!(pc.contains("libdir=${prefix}/lib64\n"), "{pc}");
    let out = run(
        timed(prefix.join("bin/tiermem"))
            .args(["run", "--dram", "16M", "--backing"])
            .arg(prefix)
            .args(["--", "cat", "/proc/self/maps"]),
        "tiermem run -- cat /proc/self/maps",
    );
    let real = prefix.join(format!("lib64/libtiermem.so.{VERSION}"));
    assert!(
        stdout(&out).contains(&real.display().to_string()),
        "{} not mapped",
        real.display()
    );
}

/// tiermem(1) and a page per visible subcommand, and a completion script per
/// shell where the shell looks for it; `tiermem completions` prints them
/// and refuses other shells.
#[test]
fn man_pages_and_completions_are_installed() {
    let dir = scratch("docs");
    let prefix = dir.path();
    if !install(prefix) {
        return;
    }
    let man1 = prefix.join("share/man/man1");
    for page in [
        "tiermem",
        "tiermem-run",
        "tiermem-bench",
        "tiermem-completions",
    ] {
        let text = std::fs::read_to_string(man1.join(format!("{page}.1")))
            .unwrap_or_else(|e| panic!("share/man/man1/{page}.1: {e}"));
        assert!(text.contains(".TH"), "{page}.1 is not a man page:\n{text}");
    }
    let names: Vec<String> = std::fs::read_dir(&man1)
        .expect("share/man/man1")
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| n.contains("__") || n == "tiermem-help.1"),
        "a page for an internal command: {names:?}"
    );
    for file in [
        "share/bash-completion/completions/tiermem",
        "share/zsh/site-functions/_tiermem",
        "share/fish/vendor_completions.d/tiermem.fish",
    ] {
        let len = std::fs::metadata(prefix.join(file)).map_or(0, |m| m.len());
        assert!(len > 0, "{file} missing or empty");
    }
    run(
        timed("bash")
            .arg("-n")
            .arg(prefix.join("share/bash-completion/completions/tiermem")),
        "bash -n on the bash completions",
    );

    let tiermem = prefix.join("bin/tiermem");
    let bash = stdout(&run(
        timed(&tiermem).args(["completions", "bash"]),
        "tiermem completions bash",
    ));
    for sub in ["bench-redis", "run", "probe", "completions", "format-store"] {
        assert!(bash.contains(sub), "no {sub} in the bash completions");
    }
    let other = timed(&tiermem)
        .args(["completions", "powershell"])
        .output()
        .expect("running tiermem completions powershell");
    let err = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(2), "{err}");
    assert!(err.contains("[possible values: bash, zsh, fish]"), "{err}");
}

/// A staged install (`DESTDIR`) puts everything under the stage with the
/// real prefix in the pkg-config file, and `make uninstall` with the same
/// variables removes every file it put there.
#[test]
fn a_staged_install_uninstalls_cleanly() {
    let dir = scratch("stage");
    let stage = dir.path();
    if !have("make") {
        return;
    }
    let vars = [
        format!("DESTDIR={}", stage.display()),
        "PREFIX=/usr".to_owned(),
    ];
    make("install", &vars);
    let usr = stage.join("usr");
    assert!(usr.join("bin/tiermem").is_file());
    let pc = std::fs::read_to_string(usr.join("lib/pkgconfig/tiermem.pc"))
        .expect("lib/pkgconfig/tiermem.pc staged");
    assert!(
        pc.starts_with("# ") && pc.contains("\nprefix=/usr\n"),
        "{pc}"
    );
    assert!(pc.contains("\nLibs: -L${libdir} -ltiermem\n"), "{pc}");
    assert!(pc.contains("\nCflags: -I${includedir}\n"), "{pc}");

    make("uninstall", &vars);
    let left = files_under(stage);
    assert!(left.is_empty(), "left after uninstall: {left:?}");
}

/// Every file and symlink under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.expect("a directory entry");
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}
