//! Statistics shared by the simulator's report ([`super::report`]) and the live
//! replay's ([`super::replay`]): percentiles, means, bounded slowdown, the
//! demand-capped fair share and Jain's index. Definitions in [`super::report`].

pub use crate::policy::{fair_shares, fill_in_order};

/// The bound `τ` of the bounded slowdown, seconds.
pub const BSLD_BOUND_S: f64 = 10.0;

/// Bounded slowdown `max(1, (wait + run) / max(run, τ))` with
/// `τ =` [`BSLD_BOUND_S`]; `wait` and `run` in seconds.
#[must_use]
pub fn bounded_slowdown(wait: f64, run: f64) -> f64 {
    ((wait + run) / run.max(BSLD_BOUND_S)).max(1.0)
}

/// Nearest-rank 95th percentile: the `⌈0.95·n⌉`-th smallest of `values`
/// (sorted in a copy; the input's order is kept); 0 for no values.
#[must_use]
pub fn p95(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (sorted.len() * 95).div_ceil(100);
    sorted[rank.saturating_sub(1)]
}

/// Arithmetic mean of `values`; 0 for none.
#[must_use]
pub fn mean(values: impl IntoIterator<Item = f64>) -> f64 {
    let (sum, n) = values
        .into_iter()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Jain's fairness index `(Σ x)² / (n · Σ x²)` of `values`; 1 for no values or
/// when all are 0.
#[must_use]
pub fn jain_index(values: &[f64]) -> f64 {
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|x| x * x).sum();
    if values.is_empty() || squares <= 0.0 {
        1.0
    } else {
        sum * sum / (values.len() as f64 * squares)
    }
}

/// Cores below which a user counts as holding nothing (sums of many starts and
/// ends leave rounding noise, not a job).
const HELD_NOTHING: f64 = 1e-9;

/// One job for [`time_averaged_shares`]: its user (an index), cores, and when
/// it was submitted, started holding its cores and ended, in seconds on any
/// common clock. `start` or `end` `None`: not yet (until the horizon).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShareJob {
    /// Index of its user (into the weights).
    pub user: usize,
    /// Cores it requests and holds while it runs.
    pub cpu: f64,
    /// Submitted at.
    pub submit: f64,
    /// Started holding its cores at (dispatch), if it did.
    pub start: Option<f64>,
    /// Ended at, if it did.
    pub end: Option<f64>,
}

/// Time-averaged shares of a run, per user and overall.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShareSummary {
    /// Per user: time average of `actual_u` (cores held / capacity) over the
    /// observed span.
    pub actual: Vec<f64>,
    /// Per user: time average of `fair_u` (weighted, demand-capped
    /// water-filling share, [`fair_shares`]) over the same span.
    pub fair: Vec<f64>,
    /// Time average over contended time of `Σ_u max(0, fair_u − actual_u)`.
    pub fairness_error: f64,
    /// Its idle part: time average over contended time of the capacity no
    /// replayed job holds (`1 − Σ_u actual_u`, floored at 0). The rest is what
    /// users hold beyond their fair share.
    pub fairness_error_idle: f64,
    /// Per user: the share of contended time during which it had jobs queued and
    /// held nothing (0 to 1): a user starved while others ran (issue 43 §6).
    pub starved: Vec<f64>,
    /// Seconds of contended time (some user backlogged and the demands, each
    /// capped at the capacity, sum to more than the capacity).
    pub contended_s: f64,
    /// The observed span, seconds: first submit to `horizon`.
    pub span_s: f64,
}

/// Replays `jobs` as a step function and integrates each user's actual and
/// fair share, and the fairness error over contended time, exactly (the
/// state only changes at submits, starts and ends), from the first submit to
/// `horizon`. The definitions are the simulator's ([`super::report`]).
/// `weights[u]` is user `u`'s weight; `capacity` in cores (> 0, else nothing
/// is computed).
#[must_use]
pub fn time_averaged_shares(
    jobs: &[ShareJob],
    weights: &[f64],
    capacity: f64,
    horizon: f64,
) -> ShareSummary {
    let users = weights.len();
    let mut summary = ShareSummary {
        actual: vec![0.0; users],
        fair: vec![0.0; users],
        starved: vec![0.0; users],
        ..ShareSummary::default()
    };
    if capacity <= 0.0 || jobs.is_empty() {
        return summary;
    }
    // Events: (time, user, Δdemand, Δheld, Δqueued).
    let mut events: Vec<(f64, usize, f64, f64, i64)> = Vec::new();
    for job in jobs.iter().filter(|j| j.user < users) {
        let end = job.end.unwrap_or(horizon).min(horizon);
        events.push((job.submit, job.user, job.cpu, 0.0, 1));
        events.push((end, job.user, -job.cpu, 0.0, 0));
        if let Some(start) = job.start.filter(|&s| s < end) {
            events.push((start, job.user, 0.0, job.cpu, -1));
            events.push((end, job.user, 0.0, -job.cpu, 0));
        } else {
            events.push((end, job.user, 0.0, 0.0, -1));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let first = events.first().map_or(0.0, |e| e.0);
    summary.span_s = (horizon - first).max(0.0);
    let (mut demand, mut held) = (vec![0.0; users], vec![0.0; users]);
    let mut queued = vec![0i64; users];
    let (mut fair, mut demands) = (Vec::new(), vec![0.0; users]);
    let mut error_integral = 0.0;
    let mut idle_integral = 0.0;
    let mut i = 0;
    while i < events.len() {
        let t = events[i].0;
        while i < events.len() && events[i].0 == t {
            let (_, u, dd, dh, dq) = events[i];
            demand[u] += dd;
            held[u] += dh;
            queued[u] += dq;
            i += 1;
        }
        let next = events.get(i).map_or(horizon, |e| e.0).min(horizon);
        let dt = next - t;
        if dt <= 0.0 {
            continue;
        }
        for u in 0..users {
            demands[u] = (demand[u] / capacity).max(0.0);
        }
        fair_shares(weights, &demands, &mut fair);
        let capped: f64 = demands.iter().map(|d| d.min(1.0)).sum();
        let backlogged = queued.iter().any(|&q| q > 0);
        let mut error = 0.0;
        let mut used = 0.0;
        for u in 0..users {
            let actual = (held[u] / capacity).max(0.0);
            summary.actual[u] += actual * dt;
            summary.fair[u] += fair[u] * dt;
            error += (fair[u] - actual).max(0.0);
            used += actual;
        }
        if backlogged && capped > 1.0 + 1e-12 {
            summary.contended_s += dt;
            error_integral += error * dt;
            idle_integral += (1.0 - used).max(0.0) * dt;
            for u in 0..users {
                if queued[u] > 0 && held[u] <= HELD_NOTHING {
                    summary.starved[u] += dt;
                }
            }
        }
    }
    if summary.span_s > 0.0 {
        for u in 0..users {
            summary.actual[u] /= summary.span_s;
            summary.fair[u] /= summary.span_s;
        }
    }
    if summary.contended_s > 0.0 {
        summary.fairness_error = error_integral / summary.contended_s;
        summary.fairness_error_idle = idle_integral / summary.contended_s;
        for s in &mut summary.starved {
            *s /= summary.contended_s;
        }
    }
    summary
}
