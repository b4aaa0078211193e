//! The report: aligned lines and a summary for people, one JSON object
//! inside the envelope every tiermem command's JSON shares
//! (`tiermem_host::envelope`) for scripts.

use serde_json::Value;

use crate::check::{Check, Status};

/// The `schema` field of `tiermem doctor --json`.
pub const SCHEMA: &str = "tiermem.doctor/1";

/// How many checks came out each way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub passed: usize,
    pub warned: usize,
    pub failed: usize,
}

impl Counts {
    pub fn of(checks: &[Check]) -> Counts {
        let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
        Counts {
            passed: count(Status::Pass),
            warned: count(Status::Warn),
            failed: count(Status::Fail),
        }
    }

    /// The exit code: 1 when any check failed.
    pub fn exit_code(self) -> i32 {
        i32::from(self.failed > 0)
    }
}

/// One line per check, names aligned, then the summary. `derived_from`
/// names a fake root, whose live probes were derived instead of run.
pub fn text(checks: &[Check], derived_from: Option<&str>) -> String {
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in checks {
        let fix = c
            .fix
            .as_ref()
            .map_or(String::new(), |f| format!(" — fix: {f}"));
        out.push_str(&format!(
            "{}  {:<width$}  {}{fix}\n",
            c.status.label(),
            c.name,
            c.detail
        ));
    }
    out.push_str(&summary(Counts::of(checks), derived_from));
    out.push('\n');
    out
}

fn summary(n: Counts, derived_from: Option<&str>) -> String {
    let verdict = match (n.failed, n.warned) {
        (0, 0) => "this host is set up for tiermem".to_string(),
        (0, _) => "tiermem runs here; the warnings cost performance or features".to_string(),
        (f, _) => format!("fix the {f} failed check(s) before running tiermem"),
    };
    let derived = derived_from.map_or(String::new(), |root| {
        format!(" (files read under {root}; live probes not run, their results derived)")
    });
    format!(
        "{} passed, {} warned, {} failed: {verdict}{derived}",
        n.passed, n.warned, n.failed
    )
}

/// The report as one object: the envelope every tiermem `--json` result
/// carries (`tiermem_host::envelope`: schema, tiermem version, kernel,
/// command line, host settings), then the tree read, the backing store,
/// every check and the counts.
pub fn json(checks: &[Check], root: &str, backing: &str) -> serde_json::Result<Value> {
    let n = Counts::of(checks);
    let mut out = tiermem_host::envelope(SCHEMA);
    out.insert("root".into(), root.into());
    out.insert("backing".into(), backing.into());
    out.insert("checks".into(), serde_json::to_value(checks)?);
    out.insert("passed".into(), n.passed.into());
    out.insert("warned".into(), n.warned.into());
    out.insert("failed".into(), n.failed.into());
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks() -> Vec<Check> {
        vec![
            Check::pass("io_uring", "a 2-entry io_uring was set up"),
            Check::fail(
                "userfaultfd",
                "refused",
                "sysctl -w vm.unprivileged_userfaultfd=1",
            ),
            Check::warn("idle_halt", "halts at once", "echo 200000 > ..."),
        ]
    }

    #[test]
    fn lines_align_and_carry_their_fix() {
        let text = text(&checks(), None);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "PASS  io_uring     a 2-entry io_uring was set up");
        assert_eq!(
            lines[1],
            "FAIL  userfaultfd  refused — fix: sysctl -w vm.unprivileged_userfaultfd=1"
        );
        assert!(lines[3].starts_with("1 passed, 1 warned, 1 failed: fix the 1 failed"));
    }

    #[test]
    fn a_fake_root_is_named_in_the_summary() {
        let text = text(&checks()[..1], Some("/tmp/fake"));
        assert!(text.contains("this host is set up"), "{text}");
        assert!(text.contains("files read under /tmp/fake"), "{text}");
    }

    #[test]
    fn the_exit_code_follows_failures_only() {
        assert_eq!(Counts::of(&checks()).exit_code(), 1);
        assert_eq!(Counts::of(&checks()[2..]).exit_code(), 0);
    }

    #[test]
    fn json_has_the_envelope_and_counts() {
        let v = json(&checks(), "/", "/var/tmp").expect("serialises");
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["tiermem_version"], env!("CARGO_PKG_VERSION"));
        assert!(v["command_line"].is_array() && v["host"].is_object(), "{v}");
        assert_eq!(
            (v["root"].as_str(), v["backing"].as_str()),
            (Some("/"), Some("/var/tmp"))
        );
        assert_eq!(
            (v["failed"].as_u64(), v["warned"].as_u64()),
            (Some(1), Some(1))
        );
        assert_eq!(v["checks"][1]["status"], "fail");
        assert!(v["checks"][0]["fix"].is_null());
    }
}
