//! No crate's modules import each other in a cycle: every crate under
//! `crates/*/src` has a file-level import graph with an order, lower files
//! first, that a reader can follow (see `import_graph` for what counts as an
//! import). A cycle fails the test, which lists the files and the lines that
//! make it.

mod import_graph;
mod source_files;

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, as a path relative to `root` with `/`.
fn sources_under(root: &Path, dir: &Path, into: &mut Vec<(String, String)>) {
    for path in source_files::rust_files(dir) {
        let relative = path.strip_prefix(root).expect("under the root");
        let name = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        into.push((name, text));
    }
}

fn files(tree: &[(&str, &str)]) -> Vec<(String, String)> {
    tree.iter()
        .map(|(f, s)| (f.to_string(), s.to_string()))
        .collect()
}

#[test]
fn no_crate_has_an_import_cycle() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut report = String::new();
    let mut checked = 0;
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates)
        .expect("the crates directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let src = dir.join("src");
        let mut sources = Vec::new();
        sources_under(&src, &src, &mut sources);
        let name = format!(
            "crates/{}/src",
            dir.file_name().expect("a name").to_string_lossy()
        );
        report += &import_graph::describe(&name, &import_graph::cycles(&sources));
        checked += 1;
    }
    assert!(checked >= 9, "found only {checked} crates under {crates:?}");
    assert!(
        report.is_empty(),
        "modules import each other in a cycle; move what both need to a lower module:\n{report}"
    );
}

#[test]
fn a_cycle_is_found_with_its_files_and_lines() {
    let tree = files(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::b::Two;\npub struct One;\n"),
        (
            "b.rs",
            "pub struct Two;\nfn f() -> crate::a::One { crate::a::One }\n",
        ),
        ("c/mod.rs", "mod d;\npub struct Three(crate::c::d::Four);\n"),
        ("c/d.rs", "use super::Three;\npub struct Four;\n"),
    ]);
    let cycles = import_graph::cycles(&tree);
    let found: Vec<Vec<String>> = cycles.iter().map(|c| c.files.clone()).collect();
    assert_eq!(found, [vec!["a.rs", "b.rs"], vec!["c/d.rs", "c/mod.rs"]]);
    let report = import_graph::describe("synthetic", &cycles);
    for line in [
        "a.rs:1: use crate::b::Two;    [crate::b::Two]",
        "b.rs:2: fn f() -> crate::a::One { crate::a::One }    [crate::a::One]",
        "c/d.rs:1: use super::Three;    [super::Three]",
        "c/mod.rs:2: pub struct Three(crate::c::d::Four);    [crate::c::d::Four]",
    ] {
        assert!(report.contains(line), "{line:?} missing from:\n{report}");
    }
}

#[test]
fn comments_literals_tests_and_declarations_are_not_imports() {
    let tree = files(&[
        ("lib.rs", "mod a;\nmod b;\npub use a::One;\n"),
        (
            "a.rs",
            "use crate::b::Two;\n\
             pub struct One;\n\
             #[cfg(test)]\n\
             mod tests;\n",
        ),
        ("a/tests.rs", "use crate::b::Two;\nuse super::One;\n"),
        (
            "b.rs",
            "//! Not `crate::a::One`.\n\
             /* nor /* crate::a::One */ here */\n\
             pub struct Two;\n\
             const S: &str = \"crate::a::One\";\n\
             const R: &str = r#\"\" crate::a::One\"#;\n\
             const Q: char = '\"';\n\
             fn f<'a>(x: &'a str) -> &'a str { x }\n\
             #[cfg(test)]\n\
             mod tests {\n    use crate::a::One;\n}\n",
        ),
    ]);
    let cycles = import_graph::cycles(&tree);
    assert!(
        cycles.is_empty(),
        "{}",
        import_graph::describe("synthetic", &cycles)
    );
}

#[test]
fn use_groups_and_inline_modules_resolve() {
    let tree = files(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::{b::{self, Two}, c::Three as C};\n"),
        (
            "b.rs",
            "mod inner {\n    use super::Two;\n}\npub struct Two;\n",
        ),
        ("c.rs", "pub struct Three;\nuse crate::a;\n"),
    ]);
    let cycles = import_graph::cycles(&tree);
    let found: Vec<Vec<String>> = cycles.iter().map(|c| c.files.clone()).collect();
    // `super` inside `b`'s inline module is `b` itself: no edge to the root.
    assert_eq!(found, [vec!["a.rs", "c.rs"]]);
}
