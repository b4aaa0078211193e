//! Progress events a worker prints, one JSON object per line on stdout,
//! for the parent to follow.

use serde::{Deserialize, Serialize};

use crate::result::ModeResult;

/// Progress events a worker prints (one JSON object per line on stdout).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum WorkerEvent {
    Progress { phase: String, done: f64 },
    Result(Box<ModeResult>),
    Failed { message: String },
}

pub fn emit(event: &WorkerEvent) {
    if let Ok(line) = serde_json::to_string(event) {
        println!("{line}");
    }
}
