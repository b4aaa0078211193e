//! `--plot DIR`: the samples behind each test's estimate as SVG files.
//! Each file name starts with the number of the matching figure in chapter
//! 4 of "An Analysis and Software Reimplementation of Intel Optane DC
//! Memory Mode", whose method the probe follows, so that the two can be
//! laid side by side.
//!
//! SVG text is `<text>` elements that the viewer renders with its own
//! fonts, so drawing a figure reads no font file and every figure keeps
//! its titles and axis labels on any machine.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use crate::report::Report;

type Res = Result<(), Box<dyn std::error::Error>>;
type Job<'a> = (&'static str, Box<dyn Fn(&Path) -> Res + 'a>);

/// Makes the figure directory `dir`, and its parents, unless they exist.
pub fn make_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("--plot: creating {}", dir.display()))
}

/// Writes every figure into `dir` (created if needed).
pub fn write_all(r: &Report, dir: &Path) -> anyhow::Result<()> {
    make_dir(dir)?;
    let e = &r.evidence;
    let lg =
        |v: &[f64]| -> Vec<f64> { v.iter().filter(|x| **x > 0.0).map(|x| x.log10()).collect() };
    let lgp = |v: &[(f64, f64)], logx: bool| -> Vec<(f64, f64)> {
        v.iter()
            .filter(|p| p.1 > 0.0 && (!logx || p.0 > 0.0))
            .map(|&(x, y)| (if logx { x.log2() } else { x }, y.log10()))
            .collect()
    };
    let jobs: Vec<Job> = vec![
        (
            "4.1-line-first-read.svg",
            Box::new(|p| {
                histograms(
                    p,
                    "line test: first read (log10 ns)",
                    &[
                        ("forwards", lg(&e.line_first_forward)),
                        ("reverse", lg(&e.line_first_reverse)),
                    ],
                )
            }),
        ),
        (
            "4.2-line-second-read.svg",
            Box::new(|p| {
                scatter(
                    p,
                    "line test: second read, reverse order",
                    "log2 delta (bytes)",
                    "log10 ns",
                    &lgp(&e.line_second, true),
                    true,
                )
            }),
        ),
        (
            "4.3-cache-size.svg",
            Box::new(|p| {
                scatter(
                    p,
                    "cache size test: re-read latency by block size",
                    "log2 block (bytes)",
                    "log10 ns",
                    &lgp(&e.size_points, true),
                    false,
                )
            }),
        ),
        (
            "4.3b-cache-size-hit-ratio.svg",
            Box::new(|p| {
                let pts: Vec<(f64, f64)> = e
                    .size_hit_ratio
                    .iter()
                    .filter(|q| q.0 > 0.0)
                    .map(|&(x, y)| (x.log2(), y))
                    .collect();
                scatter(
                    p,
                    "cache size test: hit ratio of the re-read",
                    "log2 block (bytes)",
                    "hit ratio",
                    &pts,
                    false,
                )
            }),
        ),
        (
            "4.4-prefetch-first-access.svg",
            Box::new(|p| {
                histograms(
                    p,
                    "prefetch test: first access of each walk (log10 ns)",
                    &[("first access", lg(&e.prefetch_first))],
                )
            }),
        ),
        (
            "4.4b-prefetch-walk.svg",
            Box::new(|p| {
                scatter(
                    p,
                    "prefetch test: sequential walk",
                    "line in walk",
                    "log10 ns",
                    &lgp(&e.prefetch_walk, false),
                    false,
                )
            }),
        ),
        (
            "4.x-associativity.svg",
            Box::new(|p| {
                let pts: Vec<(f64, f64)> =
                    e.assoc_points.iter().map(|&(w, c)| (w.log2(), c)).collect();
                scatter(
                    p,
                    "associativity test: evictions by ways tried",
                    "log2 ways",
                    "share evicted",
                    &pts,
                    false,
                )
            }),
        ),
        (
            "4.5-write.svg",
            Box::new(|p| {
                scatter(
                    p,
                    "write test: writes over twice the cache",
                    "offset (MiB)",
                    "log10 ns",
                    &e.write_points
                        .iter()
                        .filter(|q| q.1 > 0.0)
                        .map(|&(x, y)| (x / (1u64 << 20) as f64, y.log10()))
                        .collect::<Vec<_>>(),
                    false,
                )
            }),
        ),
        (
            "4.5b-write-histogram.svg",
            Box::new(|p| {
                let w: Vec<f64> = e.write_points.iter().map(|q| q.1).collect();
                histograms(
                    p,
                    "write test: latency distribution (log10 ns)",
                    &[
                        ("writes", lg(&w)),
                        ("write hits", lg(&e.write_hits)),
                        ("read hits", lg(&e.read_hits)),
                    ],
                )
            }),
        ),
    ];
    for (name, job) in jobs {
        job(&dir.join(name)).map_err(|err| anyhow::anyhow!("{name}: {err}"))?;
    }
    Ok(())
}

fn bounds(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for x in v {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-9 {
        return (lo - 0.5, hi + 0.5);
    }
    let pad = 0.05 * (hi - lo);
    (lo - pad, hi + pad)
}

/// Points, plus the mean and ±1 standard deviation per x when `means`
/// (the style of figure 4.2).
fn scatter(path: &Path, title: &str, xl: &str, yl: &str, pts: &[(f64, f64)], means: bool) -> Res {
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let (x0, x1) = bounds(pts.iter().map(|p| p.0));
    let (y0, y1) = bounds(pts.iter().map(|p| p.1));
    let mut chart = ChartBuilder::on(&root)
        .margin(15)
        .caption(title, ("sans-serif", 22))
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    chart.configure_mesh().x_desc(xl).y_desc(yl).draw()?;
    chart.draw_series(
        pts.iter()
            .map(|&(x, y)| Cross::new((x, y), 3, BLUE.mix(0.5).stroke_width(1))),
    )?;
    if means {
        let mut xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
        xs.sort_by(|a, b| a.total_cmp(b));
        xs.dedup();
        for x in xs {
            let ys: Vec<f64> = pts.iter().filter(|p| p.0 == x).map(|p| p.1).collect();
            let m = crate::stats::mean(&ys);
            let sd = crate::stats::variance(&ys).sqrt();
            chart.draw_series(LineSeries::new(
                [(x, m - sd), (x, m + sd)],
                RED.stroke_width(2),
            ))?;
            chart.draw_series(std::iter::once(TriangleMarker::new(
                (x, m),
                6,
                RED.filled(),
            )))?;
        }
    }
    root.present()?;
    Ok(())
}

/// One histogram panel per series, side by side (figures 4.1, 4.4, 4.5).
fn histograms(path: &Path, title: &str, series: &[(&str, Vec<f64>)]) -> Res {
    let root = SVGBackend::new(path, (450 * series.len().max(1) as u32, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let panels = root.split_evenly((1, series.len().max(1)));
    for (panel, (name, v)) in panels.iter().zip(series) {
        const BINS: usize = 40;
        let (lo, hi) = bounds(v.iter().copied());
        let width = (hi - lo) / BINS as f64;
        let mut counts = [0u32; BINS];
        for x in v {
            let i = (((x - lo) / width) as usize).min(BINS - 1);
            counts[i] += 1;
        }
        let top = counts.iter().copied().max().unwrap_or(1).max(1);
        let mut chart = ChartBuilder::on(panel)
            .margin(10)
            .caption(*name, ("sans-serif", 16))
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(0..BINS, 0..top + top / 10 + 1)?;
        let fmt = |i: &usize| format!("{:.1}", lo + *i as f64 * width);
        chart
            .configure_mesh()
            .x_label_formatter(&fmt)
            .x_labels(6)
            .draw()?;
        chart.draw_series(
            counts
                .iter()
                .enumerate()
                .map(|(i, &c)| Rectangle::new([(i, 0), (i + 1, c)], BLUE.mix(0.6).filled())),
        )?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report whose every series has a few made-up samples.
    fn report() -> Report {
        let mut r = Report::default();
        let e = &mut r.evidence;
        let latencies: Vec<f64> = (0..200).map(|i| 30.0 + f64::from(i % 7) * 20.0).collect();
        let points: Vec<(f64, f64)> = (1..=64)
            .map(|i| (f64::from(i) * 64.0, 40.0 + f64::from(i)))
            .collect();
        e.line_first_forward = latencies.clone();
        e.line_first_reverse = latencies.clone();
        e.line_second = points.clone();
        e.size_points = points.clone();
        e.size_hit_ratio = points.iter().map(|&(x, _)| (x, 0.5)).collect();
        e.prefetch_first = latencies.clone();
        e.prefetch_walk = points.clone();
        e.assoc_points = vec![(1.0, 0.9), (2.0, 0.5), (4.0, 0.1)];
        e.write_points = points;
        e.write_hits = latencies.clone();
        e.read_hits = latencies;
        r
    }

    #[test]
    fn every_figure_is_an_svg_with_its_title_as_text() {
        let dir = tempfile::tempdir().expect("a directory");
        let figures = dir.path().join("figs");
        write_all(&report(), &figures).expect("the figures");
        let mut names: Vec<String> = std::fs::read_dir(&figures)
            .expect("the figure directory")
            .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
            .collect();
        names.sort();
        assert_eq!(names.len(), 9, "{names:?}");
        assert!(names.iter().all(|n| n.ends_with(".svg")), "{names:?}");
        let scatter =
            std::fs::read_to_string(figures.join("4.2-line-second-read.svg")).expect("figure 4.2");
        for text in [
            ">line test: second read, reverse order<",
            ">log2 delta (bytes)<",
            ">log10 ns<",
        ] {
            let found = scatter.replace('\n', "").contains(text);
            assert!(found, "no {text} in figure 4.2");
        }
    }

    #[test]
    fn empty_evidence_still_draws_every_figure() {
        let dir = tempfile::tempdir().expect("a directory");
        write_all(&Report::default(), dir.path()).expect("the figures");
        assert_eq!(
            std::fs::read_dir(dir.path())
                .expect("the directory")
                .count(),
            9
        );
    }
}
