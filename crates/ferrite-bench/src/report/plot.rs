//! SVG plots, drawn with `plotters`, in one house style: a title sized to
//! fit the figure, axes that name their unit, and the legend in a column
//! of its own beside the plot, so it never covers the data.
//!
//! Latency distributions go on a percentile axis as HdrHistogram draws
//! them: the x position of percentile p is log10(1 / (1 − p)), so 50, 90,
//! 99 and 99.9 are evenly spaced and the tail gets the room it deserves.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::BenchReport;
use crate::error::{BenchError, Result};
use crate::workload::OpKind;

/// Width of the legend column, in pixels.
const LEGEND_WIDTH: u32 = 190;

fn plot_err(path: &Path) -> impl Fn(&dyn std::fmt::Display) -> BenchError + '_ {
    move |e| BenchError::Output {
        path: path.to_path_buf(),
        source: std::io::Error::other(e.to_string()),
    }
}

fn ensure_dir(path: &Path) -> Result<()> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).map_err(|source| BenchError::Output {
            path: path.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

/// The caption's font size: 20 px, smaller for a title that would not fit
/// `width` pixels (a sans-serif glyph is about 0.55 em wide).
fn title_size(title: &str, width: u32) -> u32 {
    let chars = title.chars().count().max(1) as f64;
    ((f64::from(width) - 24.0) / (0.55 * chars)).clamp(11.0, 20.0) as u32
}

/// How a legend entry is drawn.
#[derive(Clone, Copy)]
enum Marker {
    Bar,
    Line,
}

/// A white canvas with the title on top; returns the plot area and the
/// legend column.
fn canvas<'a>(
    path: &'a Path,
    size: (u32, u32),
    title: &str,
) -> Result<(
    DrawingArea<SVGBackend<'a>, Shift>,
    DrawingArea<SVGBackend<'a>, Shift>,
)> {
    let err = plot_err(path);
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", title_size(title, size.0)).into_font())
        .map_err(|e| err(&e))?;
    let (plot, legend) = root.split_horizontally(size.0 - LEGEND_WIDTH);
    Ok((plot, legend))
}

fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    names: &[String],
    marker: Marker,
    path: &Path,
) -> Result<()> {
    let err = plot_err(path);
    for (i, name) in names.iter().enumerate() {
        let color = Palette99::pick(i).mix(0.9);
        let y = 40 + i as i32 * 22;
        match marker {
            Marker::Bar => area
                .draw(&Rectangle::new([(8, y - 6), (20, y + 6)], color.filled()))
                .map_err(|e| err(&e))?,
            Marker::Line => area
                .draw(&PathElement::new(
                    vec![(4, y), (24, y)],
                    color.stroke_width(3),
                ))
                .map_err(|e| err(&e))?,
        }
        let label: String = name.chars().take(24).collect();
        area.draw(&Text::new(label, (30, y - 8), ("sans-serif", 14)))
            .map_err(|e| err(&e))?;
    }
    Ok(())
}

/// Grouped bars: throughput per workload, one bar per store.
pub fn plot_throughput(r: &BenchReport, title: &str, path: &Path) -> Result<()> {
    let workloads = r.workloads();
    let series: Vec<(String, Vec<Option<f64>>)> = r
        .stores
        .iter()
        .map(|t| {
            let vals = workloads
                .iter()
                .map(|w| r.row(&t.name, w).map(|x| x.ops_per_sec / 1000.0))
                .collect();
            (t.name.clone(), vals)
        })
        .collect();
    plot_grouped_bars(
        title,
        "throughput (kops/s)",
        &workloads,
        &series,
        false,
        path,
    )
}

/// Latency distribution of one operation kind on one workload, one line
/// per store, on the percentile axis.
pub fn plot_latency_cdf(r: &BenchReport, workload: &str, op: OpKind, path: &Path) -> Result<()> {
    let series: Vec<(String, Vec<(f64, f64)>)> = r
        .results
        .iter()
        .filter(|x| x.workload == workload)
        .filter_map(|x| {
            let cdf = &x.latency_of(op)?.cdf;
            Some((
                x.store.clone(),
                cdf.iter().map(|&(us, q)| (q, us)).collect(),
            ))
        })
        .collect();
    plot_percentiles(
        &format!("{} latency by percentile, workload {workload}", op.name()),
        "latency (µs, log scale)",
        &series,
        path,
    )
}

/// Throughput over time during one workload, one line per store.
pub fn plot_timeline(r: &BenchReport, workload: &str, path: &Path) -> Result<()> {
    let series: Vec<(String, Vec<(f64, f64)>)> = r
        .results
        .iter()
        .filter(|x| x.workload == workload)
        .map(|x| {
            let pts = x.timeline.iter().map(|&(t, v)| (t, v / 1000.0)).collect();
            (x.store.clone(), pts)
        })
        .collect();
    plot_xy(
        &format!("throughput over time, workload {workload}"),
        "time (s)",
        "throughput (kops/s)",
        &series,
        path,
    )
}

/// Grouped bars from plain numbers: one group per `groups` entry, one bar
/// per series (a missing value leaves a hole). With `log_y` the axis is
/// logarithmic, for quantities that span orders of magnitude.
pub fn plot_grouped_bars(
    title: &str,
    y_desc: &str,
    groups: &[String],
    series: &[(String, Vec<Option<f64>>)],
    log_y: bool,
    path: &Path,
) -> Result<()> {
    ensure_dir(path)?;
    let err = plot_err(path);
    let values = series.iter().flat_map(|(_, v)| v.iter().flatten().copied());
    let max = values.clone().fold(1e-9, f64::max) * if log_y { 3.0 } else { 1.15 };
    let min_pos = values.filter(|v| *v > 0.0).fold(f64::MAX, f64::min);
    let floor = if log_y {
        (min_pos / 2.0).min(max / 10.0)
    } else {
        0.0
    };
    let width = 200 + 110 * groups.len().max(1) as u32 + LEGEND_WIDTH;
    let (plot, legend) = canvas(path, (width.max(760), 500), title)?;
    let names: Vec<String> = series.iter().map(|(n, _)| n.clone()).collect();
    draw_legend(&legend, &names, Marker::Bar, path)?;
    let labels = groups.to_vec();
    let label = move |x: &f64| {
        let i = x.floor() as usize;
        if (x - i as f64 - 0.5).abs() < 0.01 {
            labels.get(i).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let bar_width = 0.8 / series.len().max(1) as f64;
    let n = groups.len();
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n * 2 + 1)
                .x_label_formatter(&label)
                .y_desc(y_desc)
                .draw()
                .map_err(|e| err(&e))?;
            for (si, (_, vals)) in series.iter().enumerate() {
                let color = Palette99::pick(si).mix(0.9);
                let bars: Vec<_> = vals
                    .iter()
                    .enumerate()
                    .filter_map(|(gi, v)| {
                        let y = (*v)?;
                        let x0 = gi as f64 + 0.1 + si as f64 * bar_width;
                        Some(Rectangle::new(
                            [(x0, floor), (x0 + bar_width, y.max(floor))],
                            color.filled(),
                        ))
                    })
                    .collect();
                chart.draw_series(bars).map_err(|e| err(&e))?;
            }
        }};
    }
    let mut builder = ChartBuilder::on(&plot);
    builder
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(80);
    if log_y {
        draw!(builder
            .build_cartesian_2d(0f64..n as f64, (floor..max).log_scale())
            .map_err(|e| err(&e))?);
    } else {
        draw!(builder
            .build_cartesian_2d(0f64..n as f64, floor..max)
            .map_err(|e| err(&e))?);
    }
    plot.present().map_err(|e| err(&e))
}

/// Lines over the points' index (1-based), for per-interval measurements
/// such as chunks of a run.
pub fn plot_lines(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<f64>)],
    path: &Path,
) -> Result<()> {
    let pts: Vec<(String, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(n, v)| {
            let p = v.iter().enumerate().map(|(i, &y)| (i as f64 + 1.0, y));
            (n.clone(), p.collect())
        })
        .collect();
    plot_xy(title, x_desc, y_desc, &pts, path)
}

/// A series' points that can be drawn (both coordinates finite).
fn finite(pts: &[(f64, f64)]) -> impl Iterator<Item = (f64, f64)> + '_ {
    pts.iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
}

/// The plot area of a line figure, with the series' legend beside it.
fn line_canvas<'a>(
    path: &'a Path,
    title: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<DrawingArea<SVGBackend<'a>, Shift>> {
    ensure_dir(path)?;
    let (plot, legend) = canvas(path, (900, 450), title)?;
    let names: Vec<String> = series.iter().map(|(n, _)| n.clone()).collect();
    draw_legend(&legend, &names, Marker::Line, path)?;
    Ok(plot)
}

/// Lines through (x, y) points, linear axes from zero.
pub fn plot_xy(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    path: &Path,
) -> Result<()> {
    let err = plot_err(path);
    let all = || series.iter().flat_map(|(_, v)| finite(v));
    let xmin = all().map(|p| p.0).fold(f64::MAX, f64::min).min(0.0);
    let xmax = all().map(|p| p.0).fold(1e-9, f64::max);
    let ymax = all().map(|p| p.1).fold(1e-9, f64::max) * 1.1;
    let plot = line_canvas(path, title, series)?;
    let mut chart = ChartBuilder::on(&plot)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(xmin..xmax.max(xmin + 1e-9), 0f64..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (_, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).mix(0.9);
        chart
            .draw_series(LineSeries::new(finite(pts), color.stroke_width(2)))
            .map_err(|e| err(&e))?;
    }
    plot.present().map_err(|e| err(&e))
}

/// The percentile axis: linear in `percentile_x`, its ticks only at the
/// given marks (50, 90, 99 ...), which plotters' own key points would
/// place evenly instead.
struct PercentileAxis {
    range: plotters::coord::types::RangedCoordf64,
    marks: Vec<f64>,
}

impl Ranged for PercentileAxis {
    type ValueType = f64;
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.range.map(value, limit)
    }

    fn key_points<H: plotters::coord::ranged1d::KeyPointHint>(&self, _: H) -> Vec<f64> {
        self.marks.clone()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.range.range()
    }
}

/// The x position of quantile `q` on the percentile axis.
fn percentile_x(q: f64) -> f64 {
    (1.0 / (1.0 - q.clamp(0.0, 0.99999))).log10()
}

/// The percentile a position on that axis stands for, as a label.
fn percentile_label(x: f64) -> String {
    let p = 100.0 * (1.0 - 10f64.powf(-x));
    let s = format!("{p:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Values by percentile, one line per series of (quantile, value) points:
/// x on the percentile axis (marked 50, 90, 99, 99.9 ... up to the data's
/// last percentile, where it ends), y on a log
/// scale (points at or below zero are left out).
pub fn plot_percentiles(
    title: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    path: &Path,
) -> Result<()> {
    let err = plot_err(path);
    let curve = |pts: &[(f64, f64)]| -> Vec<(f64, f64)> {
        let mut line: Vec<(f64, f64)> = finite(pts)
            .filter(|&(q, y)| y > 0.0 && q < 1.0)
            .map(|(q, y)| (percentile_x(q), y))
            .collect();
        line.sort_by(|a, b| a.0.total_cmp(&b.0));
        line
    };
    let curves: Vec<Vec<(f64, f64)>> = series.iter().map(|(_, v)| curve(v)).collect();
    let all = || curves.iter().flatten().copied();
    // The axis ends at the data's last percentile, marked at 50, 90, 99,
    // 99.9 ... as far as the data goes.
    let xmax = all().map(|p| p.0).fold(1.0, f64::max);
    let mut marks = vec![percentile_x(0.5)];
    marks.extend((1..=xmax.floor() as u32).map(f64::from));
    let ylo = all().map(|p| p.1).fold(f64::MAX, f64::min);
    let yhi = all().map(|p| p.1).fold(0.0, f64::max);
    let (ylo, yhi) = if ylo <= yhi {
        (ylo / 1.5, yhi * 1.5)
    } else {
        (0.1, 10.0)
    };
    let plot = line_canvas(path, title, series)?;
    let mut chart = ChartBuilder::on(&plot)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(
            PercentileAxis {
                range: (0f64..xmax).into(),
                marks,
            },
            (ylo..yhi).log_scale(),
        )
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_label_formatter(&|x| percentile_label(*x))
        .x_desc("percentile")
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, line) in curves.into_iter().enumerate() {
        let color = Palette99::pick(i).mix(0.9);
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(2)))
            .map_err(|e| err(&e))?;
    }
    plot.present().map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percentile_axis_spaces_nines_evenly() {
        assert!((percentile_x(0.5) - 2f64.log10()).abs() < 1e-12);
        assert!((percentile_x(0.9) - 1.0).abs() < 1e-9);
        assert!((percentile_x(0.99) - 2.0).abs() < 1e-9);
        assert!((percentile_x(0.999) - 3.0).abs() < 1e-9);
        assert_eq!(percentile_label(0.0), "0");
        assert_eq!(percentile_label(1.0), "90");
        assert_eq!(percentile_label(2.0), "99");
        assert_eq!(percentile_label(3.0), "99.9");
        assert_eq!(percentile_label(percentile_x(0.5)), "50");
    }

    #[test]
    fn long_titles_get_a_smaller_font() {
        assert_eq!(title_size("short", 900), 20);
        let long = "x".repeat(100);
        assert!(title_size(&long, 900) < 20);
        assert!(f64::from(title_size(&long, 900)) * 0.55 * 100.0 <= 900.0);
    }
}
