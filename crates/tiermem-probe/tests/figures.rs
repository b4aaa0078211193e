//! `--plot DIR` writes the figures as SVG with their text, even on a machine
//! without any font: the probe runs with /usr/share/fonts hidden behind an
//! empty tmpfs in a private mount namespace (where it may: root, `unshare`),
//! as a figure drawn with a font file read at run time would lose every
//! title and label there.

use std::path::Path;
use std::process::Command;

/// Every figure and some of the text it must carry.
const FIGURES: [(&str, &[&str]); 9] = [
    (
        "4.1-line-first-read.svg",
        &["line test: first read (log10 ns)", "forwards", "reverse"],
    ),
    (
        "4.2-line-second-read.svg",
        &[
            "line test: second read, reverse order",
            "log2 delta (bytes)",
            "log10 ns",
        ],
    ),
    (
        "4.3-cache-size.svg",
        &[
            "cache size test: re-read latency by block size",
            "log2 block (bytes)",
        ],
    ),
    (
        "4.3b-cache-size-hit-ratio.svg",
        &["cache size test: hit ratio of the re-read", "hit ratio"],
    ),
    (
        "4.4-prefetch-first-access.svg",
        &[
            "prefetch test: first access of each walk (log10 ns)",
            "first access",
        ],
    ),
    (
        "4.4b-prefetch-walk.svg",
        &["prefetch test: sequential walk", "line in walk"],
    ),
    (
        "4.x-associativity.svg",
        &[
            "associativity test: evictions by ways tried",
            "share evicted",
        ],
    ),
    (
        "4.5-write.svg",
        &["write test: writes over twice the cache", "offset (MiB)"],
    ),
    (
        "4.5b-write-histogram.svg",
        &[
            "write test: latency distribution (log10 ns)",
            "writes",
            "write hits",
            "read hits",
        ],
    ),
];

/// The contents of every `<text>` element of an SVG document, trimmed.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = t.split_once('>')?.1;
            Some(body.split_once("</text>")?.0.trim().to_string())
        })
        .collect()
}

/// Whether fonts can be hidden here: a private mount namespace needs root.
fn can_hide_fonts() -> bool {
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .status()
        .is_ok_and(|s| s.success())
        && Path::new("/usr/share/fonts").is_dir()
}

/// `tiermem-probe --target dram --plot DIR`, with the system's fonts
/// hidden when that is possible.
fn probe_command(dir: &Path) -> Command {
    let probe = env!("CARGO_BIN_EXE_tiermem-probe");
    let args = ["--target", "dram", "--plot"];
    if !can_hide_fonts() {
        eprintln!("cannot hide /usr/share/fonts here: the figures are drawn with them in place");
        let mut cmd = Command::new(probe);
        cmd.args(args).arg(dir);
        return cmd;
    }
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs tmpfs /usr/share/fonts && exec \"$@\"")
        .arg("sh")
        .arg(probe)
        .args(args)
        .arg(dir);
    cmd
}

#[test]
fn figures_are_svg_and_keep_their_text_without_fonts() {
    let dir = tempfile::tempdir().expect("a directory");
    let figures = dir.path().join("figs");
    let out = probe_command(&figures)
        .output()
        .expect("running tiermem-probe");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "probe failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = std::fs::read_dir(&figures)
        .expect("the figure directory")
        .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    let mut expected: Vec<&str> = FIGURES.iter().map(|f| f.0).collect();
    expected.sort();
    assert_eq!(names, expected, "no PNG, and every figure");
    for (name, wanted) in FIGURES {
        let svg = std::fs::read_to_string(figures.join(name)).expect("a figure");
        assert!(svg.starts_with("<svg"), "{name} is not SVG");
        let text = texts(&svg);
        for label in wanted {
            assert!(
                text.iter().any(|t| t == label),
                "{name}: no <text> {label:?} in {text:?}"
            );
        }
        // Tick labels too: numbers along the axes.
        let numbers = text.iter().filter(|t| t.parse::<f64>().is_ok()).count();
        assert!(numbers >= 4, "{name}: {numbers} tick labels in {text:?}");
    }
}

#[test]
fn a_plot_directory_that_cannot_be_made_fails_with_its_name() {
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").expect("a file");
    let figures = file.join("figs");
    let out = Command::new(env!("CARGO_BIN_EXE_tiermem-probe"))
        .args(["--target", "dram", "--plot"])
        .arg(&figures)
        .output()
        .expect("running tiermem-probe");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("a-file/figs"), "{stderr}");
}
