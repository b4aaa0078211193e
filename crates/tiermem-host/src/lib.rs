//! Facts about the host that every tiermem result records, and the JSON
//! envelope that carries them.
//!
//! A saved `--json` result must say where it came from: which schema it
//! follows, which tiermem and kernel wrote it, the command line that asked
//! for it, and the host settings that change paging figures (the cgroup
//! version the kernel-swap baseline uses, zswap, transparent huge pages,
//! swappiness). Every command builds its JSON inside [`envelope`].

pub mod cgroup;
pub mod control;
pub mod format;
pub mod go_runtime;
pub mod histogram;
pub mod mounts;
pub mod ns;
pub mod stats_file;

use serde_json::{Map, Value};

/// The envelope's fields, at the top level of the object a command fills
/// in with its results: `schema`, `tiermem_version`, `kernel`,
/// `command_line` and `host`.
pub fn envelope(schema: &str) -> Map<String, Value> {
    let command_line: Vec<Value> = std::env::args_os()
        .map(|a| Value::String(a.to_string_lossy().into_owned()))
        .collect();
    let mut out = Map::new();
    out.insert("schema".into(), schema.into());
    out.insert("tiermem_version".into(), env!("CARGO_PKG_VERSION").into());
    out.insert("kernel".into(), read_trimmed("/proc/sys/kernel/osrelease"));
    out.insert("command_line".into(), Value::Array(command_line));
    out.insert(
        "host".into(),
        host_facts(&|p| std::fs::read_to_string(p).ok()),
    );
    out
}

/// `body`'s fields inside the envelope: an object's fields join the
/// envelope's at the top level (the envelope's names win); anything else
/// becomes the `result` field.
pub fn wrap(schema: &str, body: Value) -> Value {
    let mut out = envelope(schema);
    match body {
        Value::Object(fields) => {
            for (k, v) in fields {
                out.entry(k).or_insert(v);
            }
        }
        other => {
            out.insert("result".into(), other);
        }
    }
    Value::Object(out)
}

/// The host settings that change paging figures, read with `read` (the
/// real files, or a fake tree in tests). A setting that cannot be read is
/// `null`.
pub fn host_facts(read: &dyn Fn(&str) -> Option<String>) -> Value {
    let cgroup = read("/proc/self/mounts").and_then(|m| {
        cgroup::root_from_mounts(&m, &|p| read(&p.to_string_lossy()))
            .map(|root| root.version.name())
    });
    let selected = |text: String| {
        // "always [madvise] never": the bracketed word is the setting.
        text.split_whitespace()
            .find(|w| w.starts_with('['))
            .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_string())
            .unwrap_or_else(|| text.trim().to_string())
    };
    let trimmed = |p: &str| read(p).map(|t| t.trim().to_string());
    serde_json::json!({
        "cgroup": cgroup.unwrap_or("none"),
        "zswap_enabled": trimmed("/sys/module/zswap/parameters/enabled").map(|v| v == "Y"),
        "zswap_compressor": trimmed("/sys/module/zswap/parameters/compressor"),
        "thp": read("/sys/kernel/mm/transparent_hugepage/enabled").map(selected),
        "swappiness": trimmed("/proc/sys/vm/swappiness").and_then(|v| v.parse::<u64>().ok()),
    })
}

fn read_trimmed(path: &str) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .map_or(Value::Null, Value::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn the_envelope_names_schema_version_kernel_command_line_and_host() {
        let env = envelope("tiermem.test/1");
        assert_eq!(env["schema"], "tiermem.test/1");
        assert_eq!(env["tiermem_version"], env!("CARGO_PKG_VERSION"));
        assert!(!env["command_line"].as_array().expect("an array").is_empty());
        let kernel = env["kernel"].as_str().expect("a kernel release");
        assert!(kernel.starts_with(|c: char| c.is_ascii_digit()), "{kernel}");
        for key in ["cgroup", "zswap_enabled", "thp", "swappiness"] {
            assert!(
                env["host"].get(key).is_some(),
                "host lacks {key}: {}",
                env["host"]
            );
        }
    }

    #[test]
    fn wrap_puts_the_results_beside_the_envelope() {
        let v = wrap(
            "tiermem.test/1",
            serde_json::json!({"pages_per_sec": 5, "schema": "x"}),
        );
        assert_eq!(v["pages_per_sec"], 5);
        assert_eq!(v["schema"], "tiermem.test/1", "the envelope's names win");
        let v = wrap("tiermem.test/1", serde_json::json!([1, 2]));
        assert_eq!(v["result"], serde_json::json!([1, 2]));
    }

    #[test]
    fn host_facts_read_a_fake_tree() {
        let files: HashMap<&str, &str> = [
            (
                "/proc/self/mounts",
                "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n",
            ),
            ("/sys/fs/cgroup/cgroup.controllers", "cpu memory pids\n"),
            ("/sys/module/zswap/parameters/enabled", "Y\n"),
            ("/sys/module/zswap/parameters/compressor", "lzo-rle\n"),
            (
                "/sys/kernel/mm/transparent_hugepage/enabled",
                "always [madvise] never\n",
            ),
            ("/proc/sys/vm/swappiness", "60\n"),
        ]
        .into_iter()
        .collect();
        let facts = host_facts(&|p| files.get(p).map(|s| s.to_string()));
        assert_eq!(
            facts,
            serde_json::json!({
                "cgroup": "v2",
                "zswap_enabled": true,
                "zswap_compressor": "lzo-rle",
                "thp": "madvise",
                "swappiness": 60,
            })
        );
        let nothing = host_facts(&|_| None);
        assert_eq!(nothing["cgroup"], "none");
        assert_eq!(nothing["swappiness"], Value::Null);
    }
}
