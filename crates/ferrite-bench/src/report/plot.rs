//! SVG plots of a report, drawn with `plotters`.

use std::path::Path;

use plotters::prelude::*;

use super::BenchReport;
use crate::error::{BenchError, Result};
use crate::workload::OpKind;

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

fn stores(r: &BenchReport) -> Vec<String> {
    r.stores.iter().map(|t| t.name.clone()).collect()
}

/// Grouped bars: throughput per workload, one bar per store.
pub fn plot_throughput(r: &BenchReport, title: &str, path: &Path) -> Result<()> {
    ensure_dir(path)?;
    let err = plot_err(path);
    let workloads = r.workloads();
    let stores = stores(r);
    let max = r
        .results
        .iter()
        .map(|x| x.ops_per_sec / 1000.0)
        .fold(1.0, f64::max)
        * 1.35;
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..workloads.len() as f64, 0f64..max)
        .map_err(|e| err(&e))?;
    let names = workloads.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(workloads.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.01 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("throughput (kops/s)")
        .draw()
        .map_err(|e| err(&e))?;
    let width = 0.8 / stores.len().max(1) as f64;
    for (si, store) in stores.iter().enumerate() {
        let color = Palette99::pick(si).mix(0.9);
        let bars: Vec<_> = workloads
            .iter()
            .enumerate()
            .filter_map(|(wi, w)| {
                let y = r.row(store, w)?.ops_per_sec / 1000.0;
                let x0 = wi as f64 + 0.1 + si as f64 * width;
                Some(Rectangle::new([(x0, 0.0), (x0 + width, y)], color.filled()))
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|e| err(&e))?
            .label(store.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// Latency CDF of one operation kind on one workload, one line per store.
pub fn plot_latency_cdf(r: &BenchReport, workload: &str, op: OpKind, path: &Path) -> Result<()> {
    ensure_dir(path)?;
    let err = plot_err(path);
    let rows: Vec<_> = r
        .results
        .iter()
        .filter(|x| x.workload == workload)
        .filter_map(|x| Some((x.store.clone(), x.latency_of(op)?.cdf.clone())))
        .collect();
    let lo = rows
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.0))
        .fold(f64::MAX, f64::min)
        .max(0.01);
    let hi = rows
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.0))
        .fold(0.0, f64::max)
        .max(lo * 10.0);
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{} latency CDF, workload {workload}", op.name()),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..1f64)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("latency (µs, log scale)")
        .y_desc("fraction of operations")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (store, cdf)) in rows.into_iter().enumerate() {
        let color = Palette99::pick(i);
        chart
            .draw_series(LineSeries::new(
                cdf.into_iter().map(|(x, q)| (x.max(lo), q)),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(store)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// Throughput over time during one workload, one line per store.
pub fn plot_timeline(r: &BenchReport, workload: &str, path: &Path) -> Result<()> {
    ensure_dir(path)?;
    let err = plot_err(path);
    let rows: Vec<_> = r
        .results
        .iter()
        .filter(|x| x.workload == workload)
        .collect();
    let tmax = rows
        .iter()
        .flat_map(|x| x.timeline.iter().map(|p| p.0))
        .fold(0.1, f64::max);
    let ymax = rows
        .iter()
        .flat_map(|x| x.timeline.iter().map(|p| p.1 / 1000.0))
        .fold(1.0, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (800, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("throughput over time, workload {workload}"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..tmax, 0f64..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("kops/s")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, row) in rows.into_iter().enumerate() {
        let color = Palette99::pick(i);
        chart
            .draw_series(LineSeries::new(
                row.timeline.iter().map(|&(t, v)| (t, v / 1000.0)),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(row.store.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
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
    let root = SVGBackend::new(path, (1060, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    // The legend gets its own column so it never hides a bar.
    let (root, legend) = root.split_horizontally(900);
    for (si, (name, _)) in series.iter().enumerate() {
        let color = Palette99::pick(si).mix(0.9);
        let y = 60 + si as i32 * 22;
        legend
            .draw(&Rectangle::new([(8, y - 6), (20, y + 6)], color.filled()))
            .map_err(|e| err(&e))?;
        legend
            .draw(&Text::new(name.clone(), (26, y - 8), ("sans-serif", 14)))
            .map_err(|e| err(&e))?;
    }
    let names = groups.to_vec();
    let label = move |x: &f64| {
        let i = x.floor() as usize;
        if (x - i as f64 - 0.5).abs() < 0.01 {
            names.get(i).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let width = 0.8 / series.len().max(1) as f64;
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
                        let x0 = gi as f64 + 0.1 + si as f64 * width;
                        Some(Rectangle::new(
                            [(x0, floor), (x0 + width, y.max(floor))],
                            color.filled(),
                        ))
                    })
                    .collect();
                chart.draw_series(bars).map_err(|e| err(&e))?;
            }
        }};
    }
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(72);
    if log_y {
        draw!(builder
            .build_cartesian_2d(0f64..n as f64, (floor..max).log_scale())
            .map_err(|e| err(&e))?);
    } else {
        draw!(builder
            .build_cartesian_2d(0f64..n as f64, floor..max)
            .map_err(|e| err(&e))?);
    }
    root.present().map_err(|e| err(&e))
}

/// Lines from plain numbers: one line per series over the points' index
/// (1-based), for per-interval measurements such as timelines.
pub fn plot_lines(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<f64>)],
    path: &Path,
) -> Result<()> {
    ensure_dir(path)?;
    let err = plot_err(path);
    let n = series
        .iter()
        .map(|(_, v)| v.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let ymax = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite())
        .fold(1e-9, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (800, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(1f64..n as f64, 0f64..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, vals)) in series.iter().enumerate() {
        let color = Palette99::pick(i);
        chart
            .draw_series(LineSeries::new(
                vals.iter()
                    .enumerate()
                    .filter(|(_, v)| v.is_finite())
                    .map(|(x, &v)| (x as f64 + 1.0, v)),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
