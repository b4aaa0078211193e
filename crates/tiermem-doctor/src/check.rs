//! One check's outcome: a status, what was found, and how to fix it.

use serde::Serialize;

/// How a check came out. Only `Fail` changes the exit code: a warning is
/// something tiermem works around, at a cost the detail names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

impl Status {
    /// The word the human report starts its line with.
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// A short identifier, the same in the text and the JSON.
    pub name: &'static str,
    pub status: Status,
    /// What was found, on one line.
    pub detail: String,
    /// The one-line fix of a warning or failure; `None` for a pass.
    pub fix: Option<String>,
}

impl Check {
    pub fn pass(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Pass,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

pub use tiermem_host::format::human_bytes_brief as human_bytes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_serialise_in_lower_case() {
        let json = serde_json::to_string(&Check::warn("x", "d", "f")).expect("serialises");
        assert!(json.contains("\"status\":\"warn\""), "{json}");
        let json = serde_json::to_string(&Check::pass("x", "d")).expect("serialises");
        assert!(json.contains("\"fix\":null"), "{json}");
    }
}
