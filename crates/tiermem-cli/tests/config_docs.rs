//! Every `TIERMEM_*` variable the code reads is documented where users look
//! for it: a row of the README's Configuration table, and, for those the
//! library reads (tiermem-core and tiermem-capi), the list at the top of
//! `include/tiermem.h`. A variable added without its documentation fails
//! here; so does one only tiermem itself sets, unless it is listed below
//! as internal, with why.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Variables no user sets, and why.
const INTERNAL: [(&str, &str); 5] = [
    (
        "TIERMEM_PRELOAD",
        "tiermem run tells the preloaded library to interpose",
    ),
    (
        "TIERMEM_STATS_OWNER",
        "tiermem run names the process whose --stats-file it is",
    ),
    (
        "TIERMEM_TEST_DENY_UFFD",
        "a test hook that pretends userfaultfd is refused",
    ),
    (
        "TIERMEM_BENCH_MEMORY_STAT",
        "tiermem bench tells its kernel-swap worker its cgroup",
    ),
    (
        "TIERMEM_PROBE_DUMP",
        "a debugging dump of the probe's raw evidence",
    ),
];

/// Read by the command line only, never by the library.
const COMMAND_LINE_ONLY: [&str; 1] = ["TIERMEM_LIB"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir)
        .expect("a source directory")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `TIERMEM_*` names in `text`.
fn names(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("TIERMEM_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].trim_end_matches('_');
        if name.len() > "TIERMEM_".len() {
            found.insert(name.to_string());
        }
        rest = &tail[end.max(1)..];
    }
    found
}

/// The names the code of `crates` reads: string literals `"TIERMEM_..."`
/// in their `src` trees.
fn read_by(crates: &[&str]) -> BTreeSet<String> {
    let mut files = Vec::new();
    for krate in crates {
        rust_files(&repo().join("crates").join(krate).join("src"), &mut files);
    }
    let mut found = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a source file");
        for literal in text.split('"').skip(1).step_by(2) {
            if literal.starts_with("TIERMEM_") && names(literal).len() == 1 {
                found.extend(names(literal));
            }
        }
    }
    found
}

/// The README's Configuration section, up to the next section.
fn readme_configuration_section() -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## Configuration")
        .nth(1)
        .expect("a Configuration section");
    section.split("\n## ").next().unwrap_or(section).to_string()
}

fn readme_configuration_table() -> BTreeSet<String> {
    let section = readme_configuration_section();
    let section = section.as_str();
    let rows: String = section
        .lines()
        .filter(|l| l.starts_with('|'))
        .collect::<Vec<_>>()
        .join("\n");
    names(&rows)
}

fn header_list() -> BTreeSet<String> {
    let header = std::fs::read_to_string(repo().join("include/tiermem.h")).expect("tiermem.h");
    let opening = header.split("*/").next().unwrap_or("");
    names(opening)
}

fn internal() -> BTreeSet<String> {
    INTERNAL.iter().map(|(n, _)| n.to_string()).collect()
}

#[test]
fn every_variable_is_in_the_readme_configuration_table() {
    let all: BTreeSet<String> = read_by(&[
        "tiermem-core",
        "tiermem-capi",
        "tiermem-cli",
        "tiermem-bench",
        "tiermem-probe",
        "tiermem-doctor",
    ]);
    assert!(all.len() > 20, "too few variables found: {all:?}");
    let documented = readme_configuration_table();
    let internal = internal();
    let missing: Vec<&String> = all
        .difference(&internal)
        .filter(|n| !documented.contains(*n))
        .collect();
    assert!(
        missing.is_empty(),
        "not in the README's Configuration table: {missing:?}"
    );
}

#[test]
fn every_variable_the_library_reads_is_in_the_header() {
    let library = read_by(&["tiermem-core", "tiermem-capi"]);
    let listed = header_list();
    let internal = internal();
    let missing: Vec<&String> = library
        .difference(&internal)
        .filter(|n| !COMMAND_LINE_ONLY.contains(&n.as_str()) && !listed.contains(*n))
        .collect();
    assert!(
        missing.is_empty(),
        "not listed at the top of include/tiermem.h: {missing:?}"
    );
}

#[test]
fn internal_variables_are_really_read() {
    let all = read_by(&[
        "tiermem-core",
        "tiermem-capi",
        "tiermem-cli",
        "tiermem-bench",
        "tiermem-probe",
    ]);
    for (name, why) in INTERNAL {
        assert!(
            all.contains(name),
            "{name} ({why}) is no longer read: drop it from the list"
        );
    }
}

/// The README's Configuration table, row by row, is the settings table of
/// `tiermem_core::settings`: same variables, flags, defaults and words, in
/// the same order.
#[test]
fn the_readme_table_is_the_settings_table() {
    let section = readme_configuration_section();
    let section = section.as_str();
    let rows: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .collect();
    let table: Vec<String> = tiermem_core::settings::SETTINGS
        .iter()
        .map(|s| s.readme_row())
        .collect();
    for (i, (readme_row, table_row)) in rows.iter().zip(&table).enumerate() {
        assert_eq!(
            *readme_row, table_row,
            "row {i} of the README's Configuration table differs from tiermem_core::settings"
        );
    }
    assert_eq!(
        rows.len(),
        table.len(),
        "the README's Configuration table and tiermem_core::settings have different lengths"
    );
}

/// The header lists exactly the settings the library reads.
#[test]
fn the_header_lists_the_settings_the_library_reads() {
    let from_table: BTreeSet<String> = tiermem_core::settings::SETTINGS
        .iter()
        .filter(|s| s.read_by_library)
        .map(|s| s.env.to_string())
        .collect();
    assert_eq!(header_list(), from_table);
}
