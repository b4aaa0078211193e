//! `tiermem bench --suite --rounds N`: the matrix N times, summed up.
//!
//! On a shared machine one round's ratio moves by ±15% from one run to the
//! next, so a single round decides no target. Each case's verdict here is
//! the median of its rounds, beside every round's own figure and how many
//! rounds met the target, so that a reader sees the spread as well as the
//! verdict.

use tiermem_host::format::{or_dash, ratio, share_percent};

use super::{first_touch, verdict, CaseRun, Target, CASES, FIRST_TOUCH_TARGET};

/// One case's figures in one round, as its target reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RoundFigures {
    /// The figure the target is held to (see [`CaseRun::figure`]).
    pub figure: Option<f64>,
    /// tiermem's hit ratio minus kernel swap's.
    pub hit_margin: Option<f64>,
    /// (p50 met, p99 met) of the miss latency, for random-access cases.
    pub miss_latency: Option<(bool, bool)>,
}

impl RoundFigures {
    fn of(run: &CaseRun) -> RoundFigures {
        RoundFigures {
            figure: run.figure(),
            hit_margin: run.hit_margin(),
            miss_latency: run
                .is_random_access()
                .then(|| run.miss_latency_met())
                .flatten(),
        }
    }
}

/// A case over every round.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseSummary {
    pub name: &'static str,
    pub target: Target,
    pub rounds: Vec<RoundFigures>,
}

impl CaseSummary {
    pub fn median_figure(&self) -> Option<f64> {
        median(self.rounds.iter().filter_map(|r| r.figure))
    }

    pub fn median_hit_margin(&self) -> Option<f64> {
        median(self.rounds.iter().filter_map(|r| r.hit_margin))
    }

    /// The verdict: the target applied to the medians.
    pub fn met(&self) -> Option<bool> {
        self.target
            .is_met(self.median_figure(), self.median_hit_margin())
    }

    /// (rounds that met the target, rounds with a verdict).
    pub fn rounds_met(&self) -> (usize, usize) {
        let verdicts: Vec<bool> = self
            .rounds
            .iter()
            .filter_map(|r| self.target.is_met(r.figure, r.hit_margin))
            .collect();
        (verdicts.iter().filter(|&&m| m).count(), verdicts.len())
    }
}

/// The median of the values given; the mean of the middle two for an even
/// count; `None` for none.
pub fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(match v.len() % 2 {
        1 => v[mid],
        _ => (v[mid - 1] + v[mid]) / 2.0,
    })
}

/// Every case of the matrix over `rounds` (one `Vec<CaseRun>` per round).
pub fn summarize(rounds: &[Vec<CaseRun>]) -> Vec<CaseSummary> {
    CASES
        .iter()
        .map(|case| CaseSummary {
            name: case.name,
            target: case.target,
            rounds: rounds
                .iter()
                .filter_map(|round| round.iter().find(|r| r.case.name == case.name))
                .map(RoundFigures::of)
                .collect(),
        })
        .collect()
}

/// Each round's first-touch ratio, tiermem's pages/s over kernel swap's.
fn first_touch_ratios(rounds: &[Vec<CaseRun>]) -> Vec<Option<f64>> {
    rounds
        .iter()
        .map(|round| {
            let (tm, ks) = first_touch(round);
            tm.zip(ks).map(|(t, k)| t / k)
        })
        .collect()
}

fn figure_text(target: Target, figure: Option<f64>) -> String {
    match target {
        Target::DeviceSeqShare(_) => or_dash(figure, share_percent),
        _ => or_dash(figure, ratio),
    }
}

/// The summary table under the rounds' own tables.
pub fn render(rounds: &[Vec<CaseRun>]) -> String {
    let summaries = summarize(rounds);
    let mut out = format!(
        "\nsummary of {} rounds: each case's verdict is the target applied to the median of \
         its rounds (ratio against kernel swap; the scan: share of the device's sequential \
         read)\n\n",
        rounds.len()
    );
    out += &row(
        "workload",
        "target",
        "median",
        "met in",
        "verdict",
        "each round",
    );
    for s in &summaries {
        let (met, of) = s.rounds_met();
        let each: Vec<String> = s
            .rounds
            .iter()
            .map(|r| figure_text(s.target, r.figure))
            .collect();
        out += &row(
            s.name,
            &s.target.describe(),
            &figure_text(s.target, s.median_figure()),
            &format!("{met}/{of}"),
            verdict(s.met()),
            &each.join(" "),
        );
        if matches!(s.target, Target::SpeedupAndHitRatio(_)) {
            let margins: Vec<String> = s
                .rounds
                .iter()
                .map(|r| or_dash(r.hit_margin, points))
                .collect();
            out += &row(
                "  hit ratio, tiermem - kernel swap",
                ">= 0",
                &or_dash(s.median_hit_margin(), points),
                "",
                "",
                &margins.join(" "),
            );
        }
    }
    let ft = first_touch_ratios(rounds);
    let ft_median = median(ft.iter().flatten().copied());
    let ft_met = ft
        .iter()
        .flatten()
        .filter(|&&r| r >= FIRST_TOUCH_TARGET)
        .count();
    out += &row(
        "first touch (every case)",
        &format!(">= {FIRST_TOUCH_TARGET:.1}x"),
        &or_dash(ft_median, ratio),
        &format!("{ft_met}/{}", ft.iter().flatten().count()),
        verdict(ft_median.map(|r| r >= FIRST_TOUCH_TARGET)),
        &ft.iter()
            .map(|r| or_dash(*r, ratio))
            .collect::<Vec<_>>()
            .join(" "),
    );
    let latency: Vec<(bool, bool)> = summaries
        .iter()
        .flat_map(|s| s.rounds.iter().filter_map(|r| r.miss_latency))
        .collect();
    out += &format!(
        "miss latency over every round's random-access cases: p50 <= kernel swap's + 5 us \
         in {}/{}, p99 <= 1.5x kernel swap's in {}/{}\n",
        latency.iter().filter(|m| m.0).count(),
        latency.len(),
        latency.iter().filter(|m| m.1).count(),
        latency.len(),
    );
    let (checked, bad) =
        rounds
            .iter()
            .flatten()
            .flat_map(|r| &r.results)
            .fold((0u64, 0u64), |(c, b), r| {
                (
                    c + r.verify.pages_checked,
                    b + r.verify.lost + r.verify.corrupted,
                )
            });
    out += &format!(
        "verification over every round: {checked} pages checked word by word, {bad} lost or \
         corrupted{}\n",
        if bad == 0 { "" } else { "  <-- DATA LOSS" }
    );
    out
}

/// One line of the summary table: its columns, then each round's figure.
fn row(name: &str, target: &str, median: &str, met_in: &str, verdict: &str, each: &str) -> String {
    format!("{name:<34} {target:>22} {median:>8} {met_in:>9} {verdict:>7}   {each}\n")
}

/// A hit-ratio difference in percentage points, signed.
fn points(share: f64) -> String {
    format!("{:+.1} pt", share * 100.0)
}

/// The summary as JSON, beside the rounds' own objects.
pub fn to_json(rounds: &[Vec<CaseRun>]) -> serde_json::Value {
    let cases: Vec<serde_json::Value> = summarize(rounds)
        .iter()
        .map(|s| {
            let (met, of) = s.rounds_met();
            serde_json::json!({
                "case": s.name,
                "target": s.target.describe(),
                "median": s.median_figure(),
                "median_hit_margin": s.median_hit_margin(),
                "met": s.met(),
                "rounds_met": met,
                "rounds_with_figures": of,
                "each_round": s.rounds.iter().map(|r| r.figure).collect::<Vec<_>>(),
                "each_round_hit_margin": s.rounds.iter().map(|r| r.hit_margin).collect::<Vec<_>>(),
            })
        })
        .collect();
    let ft = first_touch_ratios(rounds);
    serde_json::json!({
        "cases": cases,
        "first_touch": {
            "median": median(ft.iter().flatten().copied()),
            "each_round": ft,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(figure: f64, margin: f64) -> RoundFigures {
        RoundFigures {
            figure: Some(figure),
            hit_margin: Some(margin),
            miss_latency: Some((true, true)),
        }
    }

    #[test]
    fn the_median_takes_the_middle_value_or_the_mean_of_the_middle_two() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), Some(2.0));
        assert_eq!(median([4.0, 1.0, 2.0, 3.0].into_iter()), Some(2.5));
        assert_eq!(median([f64::NAN, 5.0].into_iter()), Some(5.0));
        assert_eq!(median(std::iter::empty()), None);
    }

    #[test]
    fn a_case_is_judged_on_its_median_and_counts_the_rounds_that_met() {
        let s = CaseSummary {
            name: "uniform",
            target: Target::Speedup(1.0),
            rounds: vec![figures(1.11, 0.0), figures(0.99, 0.0), figures(1.01, 0.0)],
        };
        assert_eq!(s.median_figure(), Some(1.01));
        assert_eq!(s.met(), Some(true));
        assert_eq!(s.rounds_met(), (2, 3));
    }

    #[test]
    fn a_hit_ratio_target_needs_the_median_margin_too() {
        let s = CaseSummary {
            name: "zipf",
            target: Target::SpeedupAndHitRatio(1.2),
            rounds: vec![
                figures(1.30, -0.002),
                figures(1.25, -0.001),
                figures(1.21, 0.004),
            ],
        };
        assert_eq!(s.median_figure(), Some(1.25));
        assert_eq!(s.met(), Some(false), "the median margin is below zero");
        assert_eq!(s.rounds_met(), (1, 3));
    }

    #[test]
    fn a_round_without_figures_is_left_out_of_the_count() {
        let s = CaseSummary {
            name: "scan",
            target: Target::DeviceSeqShare(0.7),
            rounds: vec![figures(0.9, 0.0), RoundFigures::default()],
        };
        assert_eq!(s.rounds_met(), (1, 1));
        assert_eq!(s.met(), Some(true));
        assert_eq!(figure_text(s.target, Some(0.9)), share_percent(0.9));
    }

    #[test]
    fn the_summary_names_every_case_in_aligned_columns() {
        let text = render(&[Vec::new(), Vec::new()]);
        assert!(text.contains("summary of 2 rounds"), "{text}");
        let header = text
            .lines()
            .find(|l| l.starts_with("workload"))
            .unwrap_or_else(|| panic!("no header in {text}"));
        let each_at = header
            .find("each round")
            .unwrap_or_else(|| panic!("no `each round` column in {header:?}"));
        // With no figures a row is its columns alone, ending where the
        // rounds' figures start.
        for case in CASES {
            let row = text
                .lines()
                .find(|l| l.starts_with(case.name))
                .unwrap_or_else(|| panic!("no row for {} in {text}", case.name));
            assert_eq!(row.len(), each_at, "{row:?} against {header:?}");
        }
        assert!(text.contains("first touch (every case)"), "{text}");
    }
}
