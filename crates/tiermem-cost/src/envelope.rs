//! The envelope every `--json` result carries (issue #24, part 5): which
//! schema it follows, which tiermem wrote it, on which kernel, and the
//! command line that asked for it, so that a saved result says where it
//! came from.

use serde_json::{Map, Value};

/// The envelope's fields, at the top level of the object the command
/// fills in with its results.
pub fn envelope(schema: &str) -> Map<String, Value> {
    let command_line: Vec<Value> = std::env::args_os()
        .map(|a| Value::String(a.to_string_lossy().into_owned()))
        .collect();
    let mut out = Map::new();
    out.insert("schema".into(), schema.into());
    out.insert("tiermem_version".into(), env!("CARGO_PKG_VERSION").into());
    out.insert(
        "kernel".into(),
        kernel_release().map_or(Value::Null, Value::from),
    );
    out.insert("command_line".into(), Value::Array(command_line));
    out
}

/// The running kernel's release, as `uname -r` prints it; `None` where
/// /proc is not mounted, which should not fail a cost report.
fn kernel_release() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    Some(text.trim().to_string()).filter(|r| !r.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_names_schema_version_kernel_and_command_line() {
        let env = envelope("tiermem.test/1");
        assert_eq!(env["schema"], "tiermem.test/1");
        assert_eq!(env["tiermem_version"], env!("CARGO_PKG_VERSION"));
        let args = env["command_line"].as_array().expect("an array");
        assert!(!args.is_empty());
        // The test host has /proc: the kernel is known there.
        let kernel = env["kernel"].as_str().expect("a kernel release");
        assert!(
            kernel.chars().next().is_some_and(|c| c.is_ascii_digit()),
            "{kernel}"
        );
    }
}
