//! `--bench FILE`: the measured throughput of each mode, read from a
//! `tiermem bench --json` result, priced with the cost model.
//!
//! Two shapes are read: one run (`bench --json`: a `summary` array, one
//! entry per mode) and the suite (`bench --suite --json`: a `suite` array
//! of cases, each with its own `summary`). Only the fields named below are
//! read, so results that gain fields stay readable.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;

use crate::model::CostModel;
use crate::size;

/// The modes the cost report is about: DRAM only (server A), and the two
/// ways of paging to server B's device.
pub const EXPECTED_MODES: [&str; 3] = ["dram", "tiermem", "kernel-swap"];

/// What a `tiermem bench --json` result looks like, for error messages.
const EXPECTED_SHAPE: &str = "a `tiermem bench --json` result (an object with a `summary` \
                              array of modes) or a `tiermem bench --suite --json` one (an \
                              object with a `suite` array of cases)";

/// One mode's line of a `summary` array.
#[derive(Deserialize)]
struct SummaryLine {
    mode: String,
    /// `null` when the run produced no number (e.g. NaN).
    pages_per_sec: Option<f64>,
}

/// The parts of a full `results` entry that say whether to trust a mode.
#[derive(Deserialize)]
struct ResultLine {
    mode: String,
    #[serde(default)]
    notes: Vec<String>,
    #[serde(default)]
    verify: Option<Verify>,
}

#[derive(Deserialize)]
struct Verify {
    #[serde(default)]
    lost: u64,
    #[serde(default)]
    corrupted: u64,
}

/// One case of a suite.
#[derive(Deserialize)]
struct SuiteCase {
    case: String,
    summary: Vec<SummaryLine>,
    #[serde(default)]
    results: Vec<ResultLine>,
}

/// One measured mode.
#[derive(Clone, Debug, PartialEq)]
pub struct ModeRate {
    pub mode: String,
    pub pages_per_sec: f64,
}

/// One run: a plain bench, or one case of a suite.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchRun {
    /// The suite case's name; `None` for a plain run.
    pub case: Option<String>,
    /// The modes that ran, in the file's order.
    pub modes: Vec<ModeRate>,
    /// Of `EXPECTED_MODES`, those with no usable figure.
    pub missing: Vec<String>,
    /// Modes listed with no figure (skipped): their note says why.
    pub without_figure: Vec<String>,
    pub notes: Vec<String>,
}

/// What a bench file holds.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchFile {
    pub path: PathBuf,
    /// `bench` or `suite`.
    pub shape: &'static str,
    pub budget_bytes: Option<u64>,
    pub working_set_bytes: Option<u64>,
    pub runs: Vec<BenchRun>,
}

impl BenchFile {
    /// Reads and checks `path`; every error names it.
    pub fn read(path: &Path) -> Result<BenchFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--bench {}: cannot read it", path.display()))?;
        let value: Value = serde_json::from_str(&text).with_context(|| {
            format!(
                "--bench {}: not JSON; expected {EXPECTED_SHAPE}",
                path.display()
            )
        })?;
        BenchFile::from_json(path, &value).with_context(|| format!("--bench {}", path.display()))
    }

    /// Reads either shape out of `value`.
    pub fn from_json(path: &Path, value: &Value) -> Result<BenchFile> {
        let Some(object) = value.as_object() else {
            bail!("not an object; expected {EXPECTED_SHAPE}");
        };
        let (shape, runs) = if let Some(suite) = object.get("suite") {
            ("suite", suite_runs(suite)?)
        } else if let Some(summary) = object.get("summary") {
            let results = object.get("results").cloned().unwrap_or(Value::Null);
            ("bench", vec![plain_run(summary, &results)?])
        } else {
            bail!("{}expected {EXPECTED_SHAPE}", other_shape(object));
        };
        let working_set = object.get("working_set_bytes").or_else(|| {
            object
                .get("workload")
                .and_then(|w| w.get("working_set_bytes"))
        });
        Ok(BenchFile {
            path: path.to_path_buf(),
            shape,
            budget_bytes: object.get("budget_bytes").and_then(Value::as_u64),
            working_set_bytes: working_set.and_then(Value::as_u64),
            runs,
        })
    }

    /// The share of the working set the bench kept in DRAM, when known.
    pub fn dram_share(&self) -> Option<f64> {
        let budget = self.budget_bytes?;
        let working_set = self.working_set_bytes.filter(|&w| w > 0)?;
        Some((budget as f64 / working_set as f64).min(1.0))
    }
}

/// What the file looks like when it is neither shape, so that the error
/// can say which command wrote it.
fn other_shape(object: &serde_json::Map<String, Value>) -> &'static str {
    if object.contains_key("plan") && object.contains_key("modes") {
        "this looks like `tiermem bench-redis --json` (Redis operations per second), \
         which the cost report does not read; "
    } else if object.contains_key("rounds") {
        "this is a `tiermem bench --suite --rounds` result: pass one round, which has \
         the one-round shape (for example `jq '.rounds[0]' FILE > round.json`); "
    } else if object.contains_key("relative_cost") {
        "this is a `tiermem cost --json` result; "
    } else {
        "it has neither a `summary` nor a `suite` array; "
    }
}

/// The one run of a `bench --json` result.
fn plain_run(summary: &Value, results: &Value) -> Result<BenchRun> {
    let summary: Vec<SummaryLine> = Vec::deserialize(summary)
        .context("`summary` is not an array of {\"mode\", \"pages_per_sec\"} objects")?;
    // The full results only add notes; a file without them still prices.
    let results: Vec<ResultLine> = Vec::deserialize(results).unwrap_or_default();
    Ok(BenchRun::new(None, summary, &results))
}

/// Every case of a `bench --suite --json` result.
fn suite_runs(suite: &Value) -> Result<Vec<BenchRun>> {
    let cases: Vec<SuiteCase> = Vec::deserialize(suite).context(
        "`suite` is not an array of cases with `case` and a `summary` array of \
         {\"mode\", \"pages_per_sec\"} objects",
    )?;
    if cases.is_empty() {
        bail!("`suite` has no cases");
    }
    Ok(cases
        .into_iter()
        .map(|c| BenchRun::new(Some(c.case), c.summary, &c.results))
        .collect())
}

impl BenchRun {
    /// Keeps the modes with a usable figure, and says why the others have
    /// none and which results are not to be trusted.
    fn new(case: Option<String>, summary: Vec<SummaryLine>, results: &[ResultLine]) -> BenchRun {
        let mut notes = Vec::new();
        let mut modes = Vec::new();
        let mut without_figure = Vec::new();
        for line in summary {
            match line.pages_per_sec.filter(|p| p.is_finite() && *p > 0.0) {
                Some(pages_per_sec) => modes.push(ModeRate {
                    mode: line.mode,
                    pages_per_sec,
                }),
                None => {
                    notes.push(did_not_run(&line.mode, results));
                    without_figure.push(line.mode);
                }
            }
        }
        for result in results {
            if let Some(v) = result.verify.as_ref().filter(|v| v.lost + v.corrupted > 0) {
                notes.push(format!(
                    "{} lost {} and corrupted {} page(s) in this run: its figure is not to be \
                     trusted",
                    result.mode, v.lost, v.corrupted
                ));
            }
        }
        let missing: Vec<String> = EXPECTED_MODES
            .iter()
            .filter(|m| !modes.iter().any(|r| r.mode == **m))
            .map(|m| m.to_string())
            .collect();
        BenchRun {
            case,
            modes,
            missing,
            without_figure,
            notes,
        }
    }

    /// The DRAM mode's throughput: the baseline of every slowdown.
    pub fn dram_pages_per_sec(&self) -> Option<f64> {
        self.modes
            .iter()
            .find(|m| m.mode == "dram")
            .map(|m| m.pages_per_sec)
    }
}

/// Why a mode in the summary has no throughput: its own note if the
/// results carry one (`skipped: ...`).
fn did_not_run(mode: &str, results: &[ResultLine]) -> String {
    let why = results
        .iter()
        .find(|r| r.mode == mode)
        .and_then(|r| r.notes.first())
        .map(|n| format!(": {n}"))
        .unwrap_or_default();
    format!("{mode} has no throughput in this run, so no cost{why}")
}

/// Which server a mode runs on: A for DRAM only, B for everything that
/// pages to a device within a DRAM budget.
pub fn server_of(mode: &str) -> char {
    if mode == "dram" {
        'A'
    } else {
        'B'
    }
}

/// One mode, priced.
#[derive(Clone, Debug, PartialEq)]
pub struct ModeCost {
    pub mode: String,
    pub server: char,
    pub pages_per_sec: f64,
    /// pages/s over the DRAM mode's; `None` without a DRAM result.
    pub throughput_vs_dram: Option<f64>,
    /// The server's memory price over server A's: 1 for A, the relative
    /// cost for B.
    pub memory_cost: f64,
    /// memory_cost / throughput_vs_dram: the price of one unit of work
    /// against DRAM on server A (1).
    pub cost_per_throughput: Option<f64>,
    /// memory_cost per million pages/s, in server A's memory price: this
    /// needs no DRAM result, so the modes compare even without one.
    pub cost_per_million_pages_per_sec: f64,
}

/// Prices every mode of `run` with the model.
pub fn price(run: &BenchRun, model: &CostModel) -> Vec<ModeCost> {
    let dram = run.dram_pages_per_sec();
    let mut costs: Vec<ModeCost> = run
        .modes
        .iter()
        .map(|m| {
            let server = server_of(&m.mode);
            let memory_cost = if server == 'A' {
                1.0
            } else {
                model.relative_cost()
            };
            let throughput_vs_dram = dram.map(|d| m.pages_per_sec / d);
            ModeCost {
                mode: m.mode.clone(),
                server,
                pages_per_sec: m.pages_per_sec,
                throughput_vs_dram,
                memory_cost,
                cost_per_throughput: throughput_vs_dram.map(|t| memory_cost / t),
                cost_per_million_pages_per_sec: memory_cost / (m.pages_per_sec / 1e6),
            }
        })
        .collect();
    // Server A first, the reference; the rest in the file's order.
    costs.sort_by_key(|c| c.server);
    costs
}

/// Notes for a run's missing modes, saying what the report leaves out.
/// A mode listed but skipped already has its note, unless it is dram,
/// whose absence takes every slowdown with it.
pub fn missing_notes(run: &BenchRun) -> Vec<String> {
    run.missing
        .iter()
        .filter(|mode| *mode == "dram" || !run.without_figure.contains(mode))
        .map(|mode| {
            if mode == "dram" {
                "no dram result: without it there is no slowdown, so cost per throughput \
                 against DRAM on server A is left out; cost per million pages/s still \
                 compares the modes (add dram to the bench's --modes)"
                    .to_string()
            } else {
                format!("no {mode} result in the file: its cost is left out")
            }
        })
        .collect()
}

/// A note when the bench kept a different share of its memory in DRAM
/// than server B does: the slowdown measured is for the bench's share.
pub fn share_note(bench: &BenchFile, model: &CostModel) -> Option<String> {
    let bench_share = bench.dram_share()?;
    let b_share = model.dram_b as f64 / (model.dram_b + model.device_b) as f64;
    ((bench_share - b_share).abs() > 0.05).then(|| {
        format!(
            "the bench kept {:.0}% of its working set in DRAM ({} of {}), server B {:.0}% of \
             its memory ({} of {}): the slowdowns are for the bench's share; for a closer \
             figure, run the bench with --dram and --working-set in server B's proportion",
            bench_share * 100.0,
            size::human(bench.budget_bytes.unwrap_or(0)),
            size::human(bench.working_set_bytes.unwrap_or(0)),
            b_share * 100.0,
            size::human(model.dram_b),
            size::human(model.dram_b + model.device_b),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::size::GIB;
    use serde_json::json;

    fn model() -> CostModel {
        CostModel::new(384 * GIB, 192 * GIB, 200 * GIB, 5.0).unwrap()
    }

    fn line(mode: &str, pages_per_sec: f64) -> Value {
        json!({ "mode": mode, "pages_per_sec": pages_per_sec, "accesses": 1000 })
    }

    fn plain(summary: Vec<Value>) -> Value {
        json!({ "budget_bytes": 256u64 << 20,
                "workload": { "working_set_bytes": 1u64 << 30 },
                "summary": summary, "results": [] })
    }

    fn read(value: &Value) -> Result<BenchFile> {
        BenchFile::from_json(Path::new("b.json"), value)
    }

    #[test]
    fn a_plain_run_is_priced_against_dram_on_server_a() {
        let file = plain(vec![
            line("dram", 2_000_000.0),
            line("tiermem", 500_000.0),
            line("kernel-swap", 250_000.0),
        ]);
        let bench = read(&file).unwrap();
        assert_eq!(bench.shape, "bench");
        assert_eq!(bench.dram_share(), Some(0.25));
        let run = &bench.runs[0];
        assert!(run.missing.is_empty() && run.notes.is_empty(), "{run:?}");
        let costs = price(run, &model());
        let rel = 1160.0 / 1920.0;
        let got: Vec<(&str, char, f64, f64)> = costs
            .iter()
            .map(|c| {
                let t = c.throughput_vs_dram.unwrap();
                (c.mode.as_str(), c.server, t, c.cost_per_throughput.unwrap())
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("dram", 'A', 1.0, 1.0),
                ("tiermem", 'B', 0.25, rel / 0.25),
                ("kernel-swap", 'B', 0.125, rel / 0.125),
            ]
        );
        assert!((costs[0].cost_per_million_pages_per_sec - 0.5).abs() < 1e-12);
        assert!((costs[1].cost_per_million_pages_per_sec - rel * 2.0).abs() < 1e-12);
    }

    #[test]
    fn a_missing_or_skipped_mode_is_named_and_the_rest_still_priced() {
        let mut file = plain(vec![line("tiermem", 500_000.0), line("kernel-swap", 0.0)]);
        file["results"] = json!([
            { "mode": "kernel-swap", "notes": ["skipped: kernel-swap mode needs root"],
              "verify": { "lost": 0, "corrupted": 0 } },
            { "mode": "tiermem", "notes": [], "verify": { "lost": 2, "corrupted": 1 } }
        ]);
        let bench = read(&file).unwrap();
        let run = &bench.runs[0];
        assert_eq!(run.missing, vec!["dram", "kernel-swap"]);
        assert!(
            run.notes[0]
                == "kernel-swap has no throughput in this run, so no cost: skipped: \
                    kernel-swap mode needs root",
            "{:?}",
            run.notes
        );
        assert!(
            run.notes[1].contains("tiermem lost 2 and corrupted 1"),
            "{:?}",
            run.notes
        );
        let costs = price(run, &model());
        assert_eq!(costs.len(), 1);
        assert_eq!(costs[0].throughput_vs_dram, None);
        assert_eq!(costs[0].cost_per_throughput, None);
        // Skipped kernel-swap has its note already; absent dram gets one.
        let notes = missing_notes(run);
        assert!(
            notes.len() == 1 && notes[0].starts_with("no dram result"),
            "{notes:?}"
        );
        let absent = read(&plain(vec![line("dram", 1e6)])).unwrap();
        let notes = missing_notes(&absent.runs[0]);
        assert_eq!(
            notes,
            [
                "no tiermem result in the file: its cost is left out",
                "no kernel-swap result in the file: its cost is left out"
            ]
        );
    }

    #[test]
    fn a_suite_gives_one_run_per_case() {
        let file = json!({
            "working_set_bytes": 2u64 << 30, "budget_bytes": 512u64 << 20,
            "suite": [
                { "case": "uniform-50r-1t", "summary": [line("tiermem", 300_000.0), line("kernel-swap", 280_000.0)], "results": [] },
                { "case": "zipf-50r-1t", "summary": [line("kernel-swap", 400_000.0), line("tiermem", 450_000.0), line("dram", 3_000_000.0)] }
            ]
        });
        let bench = read(&file).unwrap();
        assert_eq!(bench.shape, "suite");
        assert_eq!(bench.dram_share(), Some(0.25));
        assert_eq!(bench.runs.len(), 2);
        assert_eq!(bench.runs[0].case.as_deref(), Some("uniform-50r-1t"));
        assert_eq!(bench.runs[0].missing, vec!["dram"]);
        assert!(bench.runs[1].missing.is_empty());
        let modes: Vec<String> = price(&bench.runs[1], &model())
            .into_iter()
            .map(|c| c.mode)
            .collect();
        assert_eq!(modes, vec!["dram", "kernel-swap", "tiermem"]);
    }

    #[test]
    fn other_shapes_are_refused_saying_what_was_expected() {
        let cases = [
            (json!([1, 2]), "not an object"),
            (json!({ "plan": {}, "modes": [] }), "bench-redis"),
            (json!({ "relative_cost": 0.6 }), "`tiermem cost --json`"),
            (json!({ "rounds": [], "medians": {} }), "jq '.rounds[0]'"),
            (
                json!({ "results": [] }),
                "neither a `summary` nor a `suite`",
            ),
            (
                json!({ "summary": {"dram": 1} }),
                "`summary` is not an array",
            ),
            (
                json!({ "summary": [{"pages_per_sec": 1.0}] }),
                "`summary` is not an array",
            ),
            (json!({ "suite": [] }), "`suite` has no cases"),
            (
                json!({ "suite": [{"case": "x"}] }),
                "`suite` is not an array of cases",
            ),
        ];
        for (value, expected) in cases {
            let err = format!("{:#}", read(&value).unwrap_err());
            assert!(err.contains(expected), "{value}: {err}");
        }
        let err = format!("{:#}", read(&json!({ "results": [] })).unwrap_err());
        assert!(err.contains("tiermem bench --json"), "{err}");
    }

    #[test]
    fn unreadable_and_malformed_files_name_the_path() {
        let dir = std::env::temp_dir().join(format!("tiermem-cost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("no-such.json");
        let err = format!("{:#}", BenchFile::read(&missing).unwrap_err());
        assert!(
            err.contains(&format!("--bench {}: cannot read it", missing.display())),
            "{err}"
        );
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{ not json").unwrap();
        let err = format!("{:#}", BenchFile::read(&bad).unwrap_err());
        assert!(
            err.contains(&format!("--bench {}: not JSON", bad.display())),
            "{err}"
        );
        let empty = dir.join("empty.json");
        std::fs::write(&empty, "{}").unwrap();
        let err = format!("{:#}", BenchFile::read(&empty).unwrap_err());
        assert!(
            err.starts_with(&format!("--bench {}: ", empty.display())),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bench_with_another_dram_share_than_server_b_is_noted() {
        let bench = read(&plain(vec![line("dram", 1.0)])).unwrap();
        let note = share_note(&bench, &model()).expect("25% against 49%");
        assert!(note.contains("25%") && note.contains("49%"), "{note}");
        let mut half = plain(vec![line("dram", 1.0)]);
        half["budget_bytes"] = json!(512u64 << 20);
        assert_eq!(share_note(&read(&half).unwrap(), &model()), None);
    }
}
