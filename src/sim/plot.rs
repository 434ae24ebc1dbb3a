//! SVG plot of users' actual share against their fair share over time
//! (plotters' SVG backend).
//!
//! Each plotted user has one colour: its actual share (cores in use /
//! capacity) is a thin solid line, its fair share (weighted, demand-capped
//! water-filling, see [`super::report`]) a wide light band of the same colour
//! behind it. x is hours since the trace start, y the share of the cluster,
//! 0..1. The piecewise-constant series are averaged over equal time buckets
//! (exactly, not sampled), so the file stays small whatever the trace length.

use std::path::Path;

use plotters::prelude::*;

use super::simulate::{SharePoint, ShareSeries, SimOutcome};

/// Default number of time buckets (points per line).
pub const PLOT_BUCKETS: usize = 500;

/// How many users [`plot_shares`] draws at most (the caller chooses which, by
/// recording them: see [`super::simulate::SimConfig::record_shares_for`]).
pub const PLOT_USERS: usize = 5;

/// Why a plot could not be drawn or written.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw plot {path}: {message}")]
pub struct PlotError {
    /// The SVG file.
    pub path: String,
    /// What went wrong.
    pub message: String,
}

/// Colours of the plotted users (Tableau 10).
const COLOURS: [RGBColor; PLOT_USERS] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
];

/// Time-averaged `(bucket middle, actual, fair)` of a piecewise-constant
/// series over `buckets` equal buckets of `[t0, t1)` (seconds). Before its
/// first point a series is 0; its last point holds until `t1`.
#[must_use]
pub fn bucket_series(
    points: &[SharePoint],
    t0: f64,
    t1: f64,
    buckets: usize,
) -> Vec<(f64, f64, f64)> {
    if buckets == 0 || t1 <= t0 {
        return Vec::new();
    }
    let width = (t1 - t0) / buckets as f64;
    let mut actual = vec![0.0; buckets];
    let mut fair = vec![0.0; buckets];
    for (k, p) in points.iter().enumerate() {
        let start = p.t.max(t0);
        let end = points.get(k + 1).map_or(t1, |q| q.t).min(t1);
        if end <= start {
            continue;
        }
        let first = (((start - t0) / width) as usize).min(buckets - 1);
        let last = (((end - t0) / width) as usize).min(buckets - 1);
        for b in first..=last {
            let lo = t0 + b as f64 * width;
            let overlap = end.min(lo + width) - start.max(lo);
            if overlap > 0.0 {
                actual[b] += p.actual * overlap;
                fair[b] += p.fair * overlap;
            }
        }
    }
    (0..buckets)
        .map(|b| {
            let mid = t0 + (b as f64 + 0.5) * width;
            (mid, actual[b] / width, fair[b] / width)
        })
        .collect()
}

/// Draws the recorded [`SimOutcome::series`] (at most [`PLOT_USERS`]) to the
/// SVG file `path`, averaged over `buckets` time buckets between the first
/// submit and the last finish, titled with `trace` and the policy.
///
/// Errors: the file cannot be written, or plotters fails.
pub fn plot_shares(
    path: &Path,
    trace: &str,
    outcome: &SimOutcome,
    buckets: usize,
) -> Result<(), PlotError> {
    let fail = |message: String| PlotError {
        path: path.display().to_string(),
        message,
    };
    let t0 = outcome
        .jobs
        .iter()
        .map(|j| j.submit)
        .fold(f64::INFINITY, f64::min);
    let t1 = outcome
        .jobs
        .iter()
        .map(|j| j.finish())
        .fold(f64::NEG_INFINITY, f64::max);
    if !(t0.is_finite() && t1.is_finite()) || t1 <= t0 {
        return Err(fail("no job ran for any time: nothing to plot".to_owned()));
    }
    let series: Vec<&ShareSeries> = outcome.series.iter().take(PLOT_USERS).collect();
    let (h0, h1) = (t0 / 3600.0, t1 / 3600.0);

    // One panel per user, each with its own y range: five users' shares drawn on one
    // 0..1 axis hide each other and the fair share under the actual line.
    let height = 160 * series.len().max(1) as u32 + 60;
    let root = SVGBackend::new(path, (1200, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let title = format!(
        "{trace}, policy {}: share of {} cores over time, top {} users by core-seconds \
         (dark: actual, light: fair share)",
        outcome.policy,
        outcome.capacity,
        series.len()
    );
    let root = root
        .titled(&title, ("sans-serif", 20))
        .map_err(|e| fail(e.to_string()))?;
    let panels = root.split_evenly((series.len().max(1), 1));
    for (k, (s, panel)) in series.iter().zip(panels.iter()).enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let points = bucket_series(&s.points, t0, t1, buckets);
        let top = points
            .iter()
            .map(|&(_, actual, fair)| actual.max(fair))
            .fold(0.0_f64, f64::max);
        let y_max = if top > 0.0 {
            (top * 1.15).min(1.0)
        } else {
            1.0
        };
        let last = k + 1 == series.len();
        let mut chart = ChartBuilder::on(panel)
            .margin(8)
            .x_label_area_size(if last { 40 } else { 5 })
            .y_label_area_size(60)
            .build_cartesian_2d(h0..h1, 0.0..y_max)
            .map_err(|e| fail(e.to_string()))?;
        let mut mesh = chart.configure_mesh();
        mesh.light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .y_labels(4)
            .y_desc("share");
        if last {
            mesh.x_desc("hours since trace start");
        } else {
            mesh.x_labels(0);
        }
        mesh.draw().map_err(|e| fail(e.to_string()))?;
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|&(t, _, fair)| (t / 3600.0, fair)),
                colour.mix(0.35).stroke_width(4),
            ))
            .map_err(|e| fail(e.to_string()))?
            .label(format!("{} fair share", s.user))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.mix(0.35).stroke_width(4))
            });
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|&(t, actual, _)| (t / 3600.0, actual)),
                colour.stroke_width(1),
            ))
            .map_err(|e| fail(e.to_string()))?
            .label(format!("{} actual", s.user))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| fail(e.to_string()))?;
    }
    root.present().map_err(|e| fail(e.to_string()))?;
    Ok(())
}
