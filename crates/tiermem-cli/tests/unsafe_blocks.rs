//! Every `unsafe` block in the workspace's sources says why it is sound in a
//! `// SAFETY:` comment, as clippy's `undocumented_unsafe_blocks` asks. The
//! lint only runs where someone runs clippy; this test runs with the suite,
//! so CI enforces the rule too. A block passes when a `SAFETY:` comment sits
//! in the comment lines just above the statement that holds it (the lines
//! between that statement's first line and the block are part of it).

mod source_files;

use std::path::Path;

/// Whether `line` opens an unsafe block (not an `unsafe fn`, an `unsafe
/// impl` or an `unsafe extern`, and not inside a comment or a string).
fn opens_unsafe_block(line: &str) -> bool {
    let code = line.split("//").next().unwrap_or("");
    if code.matches('"').count() >= 2 {
        // A string on the line could hold the words; look outside it only.
        let outside: String = code.split('"').step_by(2).collect::<Vec<_>>().join(" ");
        return outside.contains("unsafe {");
    }
    code.contains("unsafe {")
}

/// Whether a statement continues from `line` onto the next one: a line that
/// ends a statement or opens or closes a block does not.
fn continues(line: &str) -> bool {
    let code = line.split("//").next().unwrap_or("").trim_end();
    !(code.is_empty()
        || code.ends_with(';')
        || code.ends_with('{')
        || code.ends_with('}')
        || code.ends_with("},")
        || code.ends_with(','))
}

/// The 1-based numbers of the lines of `text` with an unsafe block and no
/// `SAFETY:` comment above its statement.
fn undocumented(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut missing = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !opens_unsafe_block(line) || line.contains("SAFETY:") {
            continue;
        }
        // Up to the statement's first line.
        let mut first = i;
        while first > 0 && continues(lines[first - 1]) && !is_comment(lines[first - 1]) {
            first -= 1;
        }
        // Then over the comments and attributes just above it.
        let mut above = first;
        let mut documented = false;
        while above > 0 {
            let prev = lines[above - 1].trim_start();
            if !(is_comment(prev) || prev.starts_with("#[")) {
                break;
            }
            documented |= prev.contains("SAFETY:");
            above -= 1;
        }
        if !documented {
            missing.push(i + 1);
        }
    }
    missing
}

fn is_comment(line: &str) -> bool {
    line.trim_start().starts_with("//")
}

#[test]
fn every_unsafe_block_in_the_workspace_says_why_it_is_sound() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the crates directory");
    let mut files = source_files::rust_files(&crates);
    files.retain(|f| !f.components().any(|c| c.as_os_str() == "target"));
    assert!(files.len() > 100, "found only {} sources", files.len());
    let mut report = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        for line in undocumented(&text) {
            report.push(format!("{}:{line}", file.display()));
        }
    }
    assert!(
        report.is_empty(),
        "unsafe blocks with no `// SAFETY:` comment saying why they are sound:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_check_finds_an_undocumented_block_and_accepts_documented_ones() {
    // The fixture spells the block as UNSAFE_BLOCK, so that this file's own
    // lines hold no undocumented block.
    let text = "\
fn a() {
    // SAFETY: the pointer is valid.
    let x = UNSAFE_BLOCK *p };
    // SAFETY: both are valid for the call.
    let rc = f(
        UNSAFE_BLOCK g() },
    );
    let y = UNSAFE_BLOCK *q };
    // not a reason
    UNSAFE_BLOCK h() };
    let s = \"UNSAFE_BLOCK in a string }\";
}
"
    .replace("UNSAFE_BLOCK", concat!("un", "safe {"));
    let text = text.as_str();
    assert_eq!(undocumented(text), vec![8, 10]);
}
