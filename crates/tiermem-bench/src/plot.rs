//! `tiermem bench --plot FILE.svg`: every mode's latency histogram,
//! overlaid, as pmbench draws them.
//!
//! Latency runs along a log-scale x axis (ns to ms) and the share of
//! accesses along a log-scale y axis, one step line per mode, so a paging
//! mode's two humps (DRAM hits near 100 ns, faults tens of µs later) stand
//! apart from the single hump of plain DRAM. The y axis is logarithmic
//! because the misses are often a percent of the accesses or less and
//! would vanish on a linear one.
//!
//! The figure is SVG: its text is `<text>` elements that the viewer
//! renders, so drawing it reads no font file.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::Path;

use anyhow::Context;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::{human_bytes, human_ns};
use crate::result::{Mode, ModeResult};
use crate::worker::{Workload, WorkloadSpec};
use tiermem_host::format;
use tiermem_host::histogram::LatencyHistogram;

/// Steps per power of two, each holding whole bins of the histogram: fine
/// enough to separate a 9 µs fault from a 15 µs one and coarse enough that
/// a few thousand samples still draw a smooth outline.
const STEPS_PER_OCTAVE: u32 = 4;
/// The x axis spans at least 10 ns to 1 ms, widened to the data.
const X_MIN_NS: f64 = 10.0;
const X_MAX_NS: f64 = 1e6;
/// The y axis never reaches below this share, so one stray sample in a
/// billion does not squash the humps into the top of the figure.
const Y_FLOOR_MIN: f64 = 1e-8;
const Y_FLOOR_MAX: f64 = 1e-3;
const WIDTH: u32 = 1000;
/// Height of one chart, without its legend.
const CHART_HEIGHT: u32 = 440;
/// Width of the tick labels and the title of the y axis.
const Y_LABEL_AREA: u32 = 105;
/// The legend: one line per mode under each chart, from the y axis on.
const LEGEND_LINE_HEIGHT: u32 = 24;
const LEGEND_LEFT: i32 = 12 + Y_LABEL_AREA as i32;
/// Height of each line of the title.
const TITLE_LINE_HEIGHT: u32 = 30;

/// One chart of the figure: its caption (empty for none) and the results of
/// the modes it overlays.
pub struct Panel<'a> {
    pub caption: String,
    pub results: &'a [ModeResult],
}

/// Fails unless `path` names an SVG file that can be written: called
/// before the benchmark runs, so that a typo does not cost the run.
pub fn check_path(path: &Path) -> anyhow::Result<()> {
    let is_svg = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("svg"));
    anyhow::ensure!(
        is_svg,
        "--plot {}: the figure is SVG; name a file ending in .svg",
        path.display()
    );
    anyhow::ensure!(
        !path.is_dir(),
        "--plot {}: is a directory; name a file in it",
        path.display()
    );
    let existed = path.exists();
    OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .with_context(|| format!("--plot {}: cannot write the figure there", path.display()))?;
    if !existed {
        // Only the check made it: a run that fails leaves no empty figure.
        std::fs::remove_file(path)
            .with_context(|| format!("--plot {}: removing the test file", path.display()))?;
    }
    Ok(())
}

/// Draws `panels` one above the other under `title` (one or more lines,
/// the first larger) and writes the SVG to `path`.
pub fn write_svg(path: &Path, title: &str, panels: &[Panel<'_>]) -> anyhow::Result<()> {
    let svg = render_svg(title, panels)?;
    std::fs::write(path, svg)
        .with_context(|| format!("writing the latency plot {}", path.display()))
}

/// The SVG document of [`write_svg`].
pub fn render_svg(title: &str, panels: &[Panel<'_>]) -> anyhow::Result<String> {
    let mut svg = String::new();
    let height = figure_height(title, panels);
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut body = root.clone();
        for (i, line) in title.lines().enumerate() {
            let size = if i == 0 { 22 } else { 17 };
            body = body
                .titled(line, ("sans-serif", size))
                .map_err(plot_error)?;
        }
        let areas = body.split_evenly((panels.len().max(1), 1));
        let x_range = x_range_ns(panels);
        let series: Vec<Vec<Series>> = panels
            .iter()
            .map(|p| p.results.iter().map(series_of).collect())
            .collect();
        let floor = y_floor(series.iter().flatten());
        let legend_rows = series.iter().map(Vec::len).max().unwrap_or(0);
        for ((area, panel), series) in areas.iter().zip(panels).zip(&series) {
            draw_panel(area, &panel.caption, series, (x_range, floor), legend_rows)?;
        }
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// Pixels the title's lines and the panels take; every panel has room
/// for the longest legend, so that the charts line up.
fn figure_height(title: &str, panels: &[Panel<'_>]) -> u32 {
    let lines = title.lines().count() as u32;
    TITLE_LINE_HEIGHT * lines + panel_height(panels) * panels.len().max(1) as u32
}

fn panel_height(panels: &[Panel<'_>]) -> u32 {
    let modes = panels.iter().map(|p| p.results.len()).max().unwrap_or(0);
    CHART_HEIGHT + LEGEND_LINE_HEIGHT * modes as u32
}

/// The title of a run, in two lines: what and when, then the workload and
/// its budget.
pub fn workload_title(spec: &WorkloadSpec, budget_bytes: u64, unix_s: u64) -> String {
    let what = match spec.workload {
        Workload::Pattern => format!(
            "working set {}, budget {}, {}, {}% reads, {} pages, {} thread(s)",
            human_bytes(spec.working_set_bytes),
            human_bytes(budget_bytes),
            spec.pattern,
            spec.read_percent,
            spec.data,
            spec.threads,
        ),
        Workload::ScanResistance(_) => format!(
            "scan resistance, budget {}, {} pages",
            human_bytes(budget_bytes),
            spec.data
        ),
    };
    format!(
        "tiermem bench: latency per access, {}\n{what}",
        utc_date(unix_s)
    )
}

/// The title of a `--suite` run, whose cases set the pattern, the threads
/// and the read ratio (each panel's caption names them).
pub fn suite_title(spec: &WorkloadSpec, budget_bytes: u64, unix_s: u64) -> String {
    format!(
        "tiermem bench --suite: latency per access, {}\nworking set {}, budget {}, {} pages",
        utc_date(unix_s),
        human_bytes(spec.working_set_bytes),
        human_bytes(budget_bytes),
        spec.data,
    )
}

/// `YYYY-MM-DD HH:MM UTC` of a Unix time (the civil-from-days algorithm
/// of H. Hinnant's date library, valid for every date after 1970).
pub fn utc_date(unix_s: u64) -> String {
    let days = unix_s / 86_400;
    let secs = unix_s % 86_400;
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60
    )
}

fn plot_error<E: std::error::Error + Send + Sync + 'static>(
    e: DrawingAreaErrorKind<E>,
) -> anyhow::Error {
    anyhow::anyhow!("drawing the latency plot: {e}")
}

/// One mode's outline: the share of its accesses in each step it reaches.
struct Series {
    mode: Mode,
    label: String,
    shares: BTreeMap<u32, f64>,
}

fn series_of(result: &ModeResult) -> Series {
    let h = &result.latency;
    let label = if h.count() == 0 {
        format!("{}: no samples", result.mode.name())
    } else {
        format!(
            "{}: p50 {}, p99 {}, {} accesses",
            result.mode.name(),
            human_ns(h.quantile(0.5) as f64),
            human_ns(h.quantile(0.99) as f64),
            h.count()
        )
    };
    Series {
        mode: result.mode,
        label,
        shares: step_shares(h),
    }
}

/// Share of the samples in each step of [`STEPS_PER_OCTAVE`] per power of
/// two, by step index.
fn step_shares(h: &LatencyHistogram) -> BTreeMap<u32, f64> {
    let mut counts: BTreeMap<u32, u64> = BTreeMap::new();
    for (low, _high, count) in h.bins() {
        *counts.entry(step_of(low)).or_default() += count;
    }
    let total = h.count().max(1) as f64;
    counts
        .into_iter()
        .map(|(step, count)| (step, count as f64 / total))
        .collect()
}

/// The step holding `ns`: its power of two, then its place within it.
fn step_of(ns: u64) -> u32 {
    if ns < 2 {
        return 0;
    }
    let octave = 63 - ns.leading_zeros();
    let offset = u128::from(ns - (1u64 << octave));
    let place = (offset * u128::from(STEPS_PER_OCTAVE)) >> octave;
    octave * STEPS_PER_OCTAVE + place as u32
}

/// The latencies step `step` spans, in ns.
fn step_range_ns(step: u32) -> (f64, f64) {
    let octave = 2f64.powi((step / STEPS_PER_OCTAVE) as i32);
    let place = f64::from(step % STEPS_PER_OCTAVE);
    let per = f64::from(STEPS_PER_OCTAVE);
    (
        octave * (1.0 + place / per),
        octave * (1.0 + (place + 1.0) / per),
    )
}

/// The x axis of every panel (one scale makes panels comparable): whole
/// decades from at most 10 ns to at least 1 ms, wider where data is.
fn x_range_ns(panels: &[Panel<'_>]) -> (f64, f64) {
    let (mut lo, mut hi) = (X_MIN_NS, X_MAX_NS);
    for r in panels.iter().flat_map(|p| p.results) {
        if r.latency.count() > 0 {
            lo = lo.min(step_range_ns(step_of(r.latency.min_ns())).0);
            hi = hi.max(step_range_ns(step_of(r.latency.max_ns())).1);
        }
    }
    (
        10f64.powf(lo.max(1.0).log10().floor()),
        10f64.powf(hi.log10().ceil()),
    )
}

/// The bottom of the y axis of every panel: the decade below the smallest
/// share drawn, 0.1% at the highest, so that a miss hump of a few percent
/// stands well clear of it.
fn y_floor<'a>(series: impl Iterator<Item = &'a Series>) -> f64 {
    let smallest = series
        .flat_map(|s| s.shares.values())
        .fold(1.0f64, |lo, &v| lo.min(v));
    10f64
        .powf(smallest.log10().floor() - 1.0)
        .clamp(Y_FLOOR_MIN, Y_FLOOR_MAX)
}

/// The step outline of one series, dropping to `floor` before, after and
/// between its steps.
fn outline(shares: &BTreeMap<u32, f64>, floor: f64) -> Vec<(f64, f64)> {
    let (Some(&first), Some(&last)) = (shares.keys().next(), shares.keys().next_back()) else {
        return Vec::new();
    };
    let mut points = vec![(step_range_ns(first).0, floor)];
    for step in first..=last {
        let share = shares.get(&step).copied().unwrap_or(0.0).max(floor);
        let (lo, hi) = step_range_ns(step);
        points.push((lo, share));
        points.push((hi, share));
    }
    points.push((step_range_ns(last).1, floor));
    points
}

/// A color per mode, the same in every panel and every figure.
fn color_of(mode: Mode) -> RGBColor {
    match mode {
        Mode::Dram => RGBColor(0x1f, 0x77, 0xb4),
        Mode::Tiermem => RGBColor(0xd6, 0x27, 0x28),
        Mode::KernelSwap => RGBColor(0x2c, 0xa0, 0x2c),
        Mode::KernelZswap => RGBColor(0xff, 0x7f, 0x0e),
        Mode::KernelZram => RGBColor(0x94, 0x67, 0xbd),
    }
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    series: &[Series],
    ((x_lo, x_hi), floor): ((f64, f64), f64),
    legend_rows: usize,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let legend_height = LEGEND_LINE_HEIGHT * legend_rows as u32;
    let chart_height = area.dim_in_pixel().1.saturating_sub(legend_height);
    let (chart_area, legend_area) = area.split_vertically(chart_height);
    let mut builder = ChartBuilder::on(&chart_area);
    builder
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(Y_LABEL_AREA);
    if !caption.is_empty() {
        builder.caption(caption, ("sans-serif", 20));
    }
    let x_axis = (x_lo..x_hi).log_scale();
    // A hair below the floor, so that rounding in 10^k cannot drop its tick.
    let y_axis = (floor * 0.999..1.0).log_scale();
    let mut chart = builder
        .build_cartesian_2d(x_axis, y_axis)
        .map_err(plot_error)?;
    draw_mesh(&mut chart)?;
    for s in series {
        chart
            .draw_series(LineSeries::new(
                outline(&s.shares, floor),
                color_of(s.mode).stroke_width(2),
            ))
            .map_err(plot_error)?;
    }
    draw_legend(&legend_area, series)
}

/// One line per mode under the chart, where it can never hide a curve.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    series: &[Series],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let left = LEGEND_LEFT;
    let style =
        TextStyle::from(("sans-serif", 16).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (row, s) in series.iter().enumerate() {
        let y = (LEGEND_LINE_HEIGHT * row as u32 + LEGEND_LINE_HEIGHT / 2) as i32;
        let swatch = PathElement::new(
            [(left, y), (left + 28, y)],
            color_of(s.mode).stroke_width(3),
        );
        area.draw(&swatch).map_err(plot_error)?;
        area.draw(&Text::new(s.label.as_str(), (left + 36, y), style.clone()))
            .map_err(plot_error)?;
    }
    Ok(())
}

fn draw_mesh<DB, X, Y>(chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: plotters::coord::ranged1d::Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc("latency per access (log scale)")
        .y_desc("share of accesses per 1/4 power of two (log scale)")
        .x_label_formatter(&|ns| format::axis_ns(*ns))
        .y_label_formatter(&|share| format_share(*share))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(plot_error)
}

/// A share as a percentage, with as many digits as a small one needs.
fn format_share(share: f64) -> String {
    let pct = share * 100.0;
    if pct >= 1.0 {
        format!("{pct:.0}%")
    } else {
        let digits = (-pct.log10()).ceil().max(0.0) as usize;
        format!("{pct:.digits$}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::skipped;

    /// A result of `mode` whose accesses are `hits` near `hit_ns` and
    /// `misses` near `miss_ns`.
    fn result(mode: Mode, hits: u64, hit_ns: u64, misses: u64, miss_ns: u64) -> ModeResult {
        let mut r = skipped(mode, String::new());
        r.notes.clear();
        for i in 0..hits {
            r.latency.record(hit_ns + i % 40);
        }
        for i in 0..misses {
            r.latency.record(miss_ns + (i * 37) % (miss_ns / 2));
        }
        r.accesses = hits + misses;
        r
    }

    fn three_modes() -> Vec<ModeResult> {
        vec![
            result(Mode::Dram, 100_000, 80, 0, 0),
            result(Mode::Tiermem, 90_000, 120, 10_000, 20_000),
            result(Mode::KernelSwap, 85_000, 150, 15_000, 60_000),
        ]
    }

    /// The contents of every `<text>` element, trimmed.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = t.split_once('>')?.1;
                Some(body.split_once("</text>")?.0.trim().to_string())
            })
            .collect()
    }

    fn stroke(mode: Mode) -> String {
        let RGBColor(r, g, b) = color_of(mode);
        format!("stroke=\"#{r:02X}{g:02X}{b:02X}\"")
    }

    #[test]
    fn the_svg_names_every_mode_labels_its_axes_and_draws_a_line_per_mode() {
        let results = three_modes();
        let panels = [Panel {
            caption: String::new(),
            results: &results,
        }];
        let svg = render_svg("tiermem bench: a test\nthe workload", &panels).expect("a plot");
        assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
        let text = texts(&svg);
        for label in [
            "tiermem bench: a test",
            "the workload",
            "latency per access (log scale)",
            "share of accesses per 1/4 power of two (log scale)",
        ] {
            assert!(text.iter().any(|t| t == label), "no {label} in {text:?}");
        }
        for r in &results {
            let legend = format!("{}: p50 ", r.mode.name());
            assert!(
                text.iter().any(|t| t.starts_with(&legend)),
                "{legend}: {text:?}"
            );
            let lines = svg
                .lines()
                .filter(|l| l.contains("<polyline") && l.contains(&stroke(r.mode)))
                .collect::<Vec<_>>();
            // The series and its swatch in the legend.
            assert_eq!(lines.len(), 2, "{}: {lines:?}", r.mode.name());
            let longest = lines.iter().map(|l| l.matches(',').count()).max();
            assert!(longest >= Some(8), "{}: {lines:?}", r.mode.name());
        }
        for tick in ["10ns", "100ns", "10us", "1ms", "100%", "1%"] {
            assert!(text.iter().any(|t| t == tick), "no tick {tick} in {text:?}");
        }
    }

    #[test]
    fn a_suite_figure_has_one_panel_per_case_and_keeps_skipped_modes_in_the_legend() {
        let first = three_modes();
        let second = vec![
            result(Mode::Tiermem, 50_000, 100, 50_000, 9_000),
            skipped(Mode::KernelSwap, "needs root".into()),
        ];
        let panels = [
            Panel {
                caption: "uniform, 50% reads, 1 thread".into(),
                results: &first,
            },
            Panel {
                caption: "zipf(0.99), 50% reads, 1 thread".into(),
                results: &second,
            },
        ];
        let svg = render_svg("suite", &panels).expect("a plot");
        let text = texts(&svg);
        for label in [
            "uniform, 50% reads, 1 thread",
            "zipf(0.99), 50% reads, 1 thread",
            "kernel-swap: no samples",
        ] {
            assert!(text.iter().any(|t| t == label), "no {label} in {text:?}");
        }
        let x_labels = text
            .iter()
            .filter(|t| *t == "latency per access (log scale)");
        assert_eq!(x_labels.count(), 2);
        let panel = CHART_HEIGHT + 3 * LEGEND_LINE_HEIGHT;
        let height = format!("height=\"{}\"", TITLE_LINE_HEIGHT + 2 * panel);
        assert!(svg.lines().next().is_some_and(|l| l.contains(&height)));
    }

    #[test]
    fn steps_split_each_power_of_two_in_four() {
        assert_eq!(step_of(0), 0);
        assert_eq!(step_of(1), 0);
        assert_eq!(step_of(1024), 40);
        assert_eq!(step_of(1279), 40);
        assert_eq!(step_of(1280), 41);
        assert_eq!(step_of(2047), 43);
        assert_eq!(step_of(u64::MAX), 63 * 4 + 3);
        for ns in [5u64, 100, 1_000, 12_345, 9_999_999] {
            let (lo, hi) = step_range_ns(step_of(ns));
            assert!(
                lo <= ns as f64 && (ns as f64) < hi,
                "{ns} outside [{lo}, {hi})"
            );
        }
    }

    #[test]
    fn shares_sum_to_one_and_the_outline_starts_and_ends_on_the_floor() {
        let r = result(Mode::Tiermem, 9_000, 100, 1_000, 20_000);
        let shares = step_shares(&r.latency);
        let sum: f64 = shares.values().sum();
        assert!((sum - 1.0).abs() < 1e-9, "{sum}");
        let points = outline(&shares, 1e-6);
        assert_eq!(points.first().map(|p| p.1), Some(1e-6));
        assert_eq!(points.last().map(|p| p.1), Some(1e-6));
        // The gap between hits and misses drops to the floor.
        let gap = step_range_ns(step_of(2_000)).0;
        assert!(points.iter().any(|&(x, y)| x == gap && y == 1e-6));
        assert!(outline(&BTreeMap::new(), 1e-6).is_empty());
    }

    #[test]
    fn the_x_axis_covers_ns_to_ms_and_widens_to_the_data() {
        let results = three_modes();
        let panels = [Panel {
            caption: String::new(),
            results: &results,
        }];
        assert_eq!(x_range_ns(&panels), (10.0, 1e6));
        let slow = vec![result(Mode::KernelSwap, 10, 100, 10, 30_000_000)];
        let panels = [Panel {
            caption: String::new(),
            results: &slow,
        }];
        assert_eq!(x_range_ns(&panels), (10.0, 1e8));
    }

    #[test]
    fn titles_name_the_workload_and_the_date() {
        assert_eq!(utc_date(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_date(951_825_600), "2000-02-29 12:00 UTC");
        assert_eq!(utc_date(1_735_689_599), "2024-12-31 23:59 UTC");
        let spec = WorkloadSpec {
            working_set_bytes: 1 << 30,
            page_size: 4096,
            threads: 2,
            read_percent: 50,
            pattern: "zipf:0.99".into(),
            duration_s: 10.0,
            warmup_s: 2.0,
            seed: 1,
            workload: Workload::Pattern,
            data: crate::page_data::PageData::Text,
        };
        let suite = suite_title(&spec, 256 << 20, 0);
        assert!(
            suite.contains("--suite") && suite.contains("text pages"),
            "{suite}"
        );
        let title = workload_title(&spec, 256 << 20, 0);
        for part in [
            "working set 1.00 GiB",
            "budget 256 MiB",
            "zipf:0.99",
            "50% reads",
            "text pages",
            "2 thread(s)",
            "1970-01-01",
        ] {
            assert!(title.contains(part), "{part} not in {title}");
        }
    }

    #[test]
    fn bad_paths_fail_with_the_reason() {
        let dir = tempfile::tempdir().expect("a directory");
        let missing = dir.path().join("no-such-dir/x.svg");
        let err = format!("{:#}", check_path(&missing).unwrap_err());
        assert!(
            err.contains("cannot write") && err.contains("no-such-dir"),
            "{err}"
        );
        // Not writable even by root, unlike a directory without write permission.
        let err = format!(
            "{:#}",
            check_path(Path::new("/proc/tiermem-plot.svg")).unwrap_err()
        );
        assert!(err.contains("cannot write"), "{err}");
        let png = dir.path().join("x.png");
        let err = format!("{:#}", check_path(&png).unwrap_err());
        assert!(err.contains("ending in .svg"), "{err}");
        let subdir = dir.path().join("figures.svg");
        std::fs::create_dir(&subdir).expect("a subdirectory");
        let err = format!("{:#}", check_path(&subdir).unwrap_err());
        assert!(err.contains("is a directory"), "{err}");
        let good = dir.path().join("x.svg");
        check_path(&good).expect("a writable path");
        assert!(!good.exists(), "the check left a file behind");
        std::fs::write(&good, "old").expect("a file");
        check_path(&good).expect("an existing writable file");
        assert_eq!(std::fs::read_to_string(&good).expect("the file"), "old");
    }
}
