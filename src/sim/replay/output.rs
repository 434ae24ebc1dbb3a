//! The replay's report: job records as the service lists them and the per-user table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

use super::*;
use crate::sim::stats::{time_averaged_shares, ShareJob};

/// A job as `GET /v1/jobs` shows it (the fields the replay reads).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct JobRecord {
    /// The service's job id.
    pub id: Uuid,
    /// The user id.
    pub user: String,
    /// QUEUED, DISPATCHING, PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED.
    pub status: String,
    /// When the service committed it.
    pub submitted_at: DateTime<Utc>,
    /// When it was submitted to Ray.
    #[serde(default)]
    pub dispatched_at: Option<DateTime<Utc>>,
    /// When Ray reported it running.
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    #[serde(default)]
    pub finished_at: Option<DateTime<Utc>>,
    /// Why it ended, or what Ray said.
    #[serde(default)]
    pub message: Option<String>,
    /// What it requested (the share table reads the cores).
    #[serde(default)]
    pub resources: Option<RecordResources>,
}

/// `resources` of a listed job, as far as the replay reads it.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
pub struct RecordResources {
    /// Cores.
    #[serde(default)]
    pub cpu: f64,
}

/// What the share table needs besides the jobs: the cores of the service's
/// healthy clusters (`GET /v1/scheduler` at the end of the run) and the users'
/// weights (`GET /v1/users`; users not listed have weight 1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShareContext {
    /// Capacity, cores.
    pub capacity_cpu: f64,
    /// Weight per user id.
    pub weights: BTreeMap<String, f64>,
    /// The service's policy knobs as `GET /v1/scheduler` shows them (half-life,
    /// guard, `starvation_runs`, backfill), for the simulated fairshare line of
    /// [`render_alternatives`]; `None`: the defaults.
    pub knobs: Option<ServiceKnobs>,
}

/// The policy knobs `GET /v1/scheduler` shows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServiceKnobs {
    /// `usage_half_life_seconds`.
    pub usage_half_life_s: f64,
    /// `starvation_guard_seconds` (`None`: off).
    pub starvation_guard_s: Option<f64>,
    /// `starvation_runs`.
    pub starvation_runs: f64,
    /// `backfill`.
    pub backfill: bool,
}

impl JobRecord {
    /// SUCCEEDED, FAILED or STOPPED.
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        is_terminal(&self.status)
    }

    /// `started_at − submitted_at` (else `dispatched_at − submitted_at`), seconds.
    #[must_use]
    pub fn wait_s(&self) -> Option<f64> {
        let start = self.started_at.or(self.dispatched_at)?;
        Some(seconds_between(self.submitted_at, start))
    }

    /// `finished_at − started_at`, seconds.
    #[must_use]
    pub fn run_s(&self) -> Option<f64> {
        Some(seconds_between(self.started_at?, self.finished_at?))
    }
}

pub(super) fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    ((to - from).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6).max(0.0)
}

pub(super) fn is_terminal(status: &str) -> bool {
    matches!(status, "SUCCEEDED" | "FAILED" | "STOPPED")
}

/// Statistics of a set of jobs (one user's, or all).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Stats {
    pub(super) jobs: usize,
    pub(super) succeeded: usize,
    pub(super) failed: usize,
    pub(super) stopped: usize,
    pub(super) waits: Vec<f64>,
    pub(super) bslds: Vec<f64>,
}

impl Stats {
    pub(super) fn add(&mut self, job: &JobRecord) {
        self.jobs += 1;
        match job.status.as_str() {
            "SUCCEEDED" => self.succeeded += 1,
            "FAILED" => self.failed += 1,
            "STOPPED" => self.stopped += 1,
            _ => {}
        }
        if let Some(wait) = job.wait_s() {
            self.waits.push(wait);
            if let Some(run) = job.run_s() {
                self.bslds.push(bounded_slowdown(wait, run));
            }
        }
    }

    pub(super) fn row(&self, name: &str) -> String {
        format!(
            "{name:<12} {:>6} {:>9} {:>6} {:>7} {:>11.1} {:>10.1} {:>9.2}",
            self.jobs,
            self.succeeded,
            self.failed,
            self.stopped,
            mean(self.waits.iter().copied()),
            p95(&self.waits),
            mean(self.bslds.iter().copied()),
        )
    }
}

/// The share table: per user (same order as [`render_table`]), its weight, its
/// time-averaged actual share of the capacity (`actual_%`: cores it held from
/// dispatch to finish / capacity) and its time-averaged fair share (`fair_%`:
/// the weighted, demand-capped water-filling share of the simulator's report,
/// demand = cores of its jobs submitted and not finished), over the run from
/// the first submit to the last event; then the run's fairness error (time
/// average over contended time of `Σ_u max(0, fair_u − actual_u)`), split into
/// idle capacity and what users held beyond their fair share, and its
/// contended time. Definitions as in [`crate::sim::report`]; computed by
/// [`crate::sim::stats::time_averaged_shares`]. A user far below its fair share
/// while contended is one the run treated unfairly.
#[must_use]
pub fn render_share_table(jobs: &[JobRecord], context: &ShareContext) -> String {
    let mut users: Vec<&str> = jobs.iter().map(|j| j.user.as_str()).collect();
    users.sort_unstable();
    users.dedup();
    let index: BTreeMap<&str, usize> = users.iter().enumerate().map(|(i, u)| (*u, i)).collect();
    let weights: Vec<f64> = users
        .iter()
        .map(|u| context.weights.get(*u).copied().unwrap_or(1.0))
        .collect();
    let Some(origin) = jobs.iter().map(|j| j.submitted_at).min() else {
        return String::new();
    };
    let secs = |t: DateTime<Utc>| (t - origin).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
    let share_jobs: Vec<ShareJob> = jobs
        .iter()
        .map(|j| ShareJob {
            user: index[j.user.as_str()],
            cpu: j.resources.map_or(0.0, |r| r.cpu),
            submit: secs(j.submitted_at),
            start: j.dispatched_at.or(j.started_at).map(secs),
            end: j.finished_at.map(secs),
        })
        .collect();
    let horizon = share_jobs
        .iter()
        .flat_map(|j| [Some(j.submit), j.start, j.end])
        .flatten()
        .fold(0.0, f64::max);
    let summary = time_averaged_shares(&share_jobs, &weights, context.capacity_cpu, horizon);
    let mut counts: Vec<(usize, &str)> = users
        .iter()
        .map(|u| (jobs.iter().filter(|j| j.user == *u).count(), *u))
        .collect();
    counts.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:>6} {:>9} {:>7} {:>10}",
        "user", "weight", "actual_%", "fair_%", "starved_%"
    );
    for (_, user) in counts {
        let u = index[user];
        let _ = writeln!(
            out,
            "{user:<12} {:>6} {:>9.1} {:>7.1} {:>10.1}",
            weights[u],
            100.0 * summary.actual[u],
            100.0 * summary.fair[u],
            100.0 * summary.starved[u]
        );
    }
    let _ = writeln!(
        out,
        "fairness error {:.4} (idle capacity {:.4} + held beyond fair share {:.4}; time average \
         over {:.1} s contended of {:.1} s; capacity {} cores)",
        summary.fairness_error,
        summary.fairness_error_idle,
        summary.fairness_error - summary.fairness_error_idle,
        summary.contended_s,
        summary.span_s,
        context.capacity_cpu
    );
    let _ = writeln!(
        out,
        "starved_%: share of the contended time a user had jobs queued and held nothing"
    );
    out
}

/// Milli-cores per core in [`render_alternatives`]' simulations (the simulator
/// counts whole cores; the replay's jobs ask fractions such as 0.25).
const MILLI: f64 = 1000.0;

/// What the share table's fairness error means against the alternatives: the same
/// jobs (submit times and the time each held its cores, as measured in this run)
/// simulated under FIFO, the gateway's old loop and fairshare's policy (the service's
/// defaults; capacity and weights as read from the service), each with its fairness
/// error by [`time_averaged_shares`] (the share table's definition). Labelled as
/// simulated: no Ray start-up between jobs there, so each figure compares policies,
/// not this run's timing. Jobs that never started or ended are left out; empty when
/// none is left or the capacity is unknown.
#[must_use]
pub fn render_alternatives(jobs: &[JobRecord], context: &ShareContext) -> String {
    use crate::sim::simulate::{simulate, SimConfig, SimPolicy};
    use crate::sim::swf::TraceJob;
    let capacity = (context.capacity_cpu * MILLI).round();
    if !(capacity >= 1.0 && capacity <= f64::from(u32::MAX)) {
        return String::new();
    }
    let Some(origin) = jobs.iter().map(|j| j.submitted_at).min() else {
        return String::new();
    };
    let secs = |t: DateTime<Utc>| (t - origin).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
    let mut trace: Vec<TraceJob> = jobs
        .iter()
        .enumerate()
        .filter_map(|(n, j)| {
            let start = secs(j.dispatched_at.or(j.started_at)?);
            let end = secs(j.finished_at?);
            let cpus = (j.resources.map_or(0.0, |r| r.cpu) * MILLI)
                .round()
                .max(1.0);
            Some(TraceJob::new(
                n as u64 + 1,
                secs(j.submitted_at),
                (end - start).max(0.0),
                cpus.min(capacity) as u32,
                &j.user,
            ))
        })
        .collect();
    if trace.is_empty() {
        return String::new();
    }
    trace.sort_by(|a, b| a.submit.total_cmp(&b.submit).then(a.number.cmp(&b.number)));
    let mut out = String::new();
    let knobs = if context.knobs.is_some() {
        "fairshare with the service's half-life, guard, starvation_runs and backfill"
    } else {
        "fairshare with the default settings"
    };
    let _ = writeln!(
        out,
        "the same {} jobs simulated (as measured here: submit times, time each held its cores; \
         {} cores, no Ray start-up between jobs; {knobs}):",
        trace.len(),
        context.capacity_cpu
    );
    for policy in [
        SimPolicy::Fifo,
        SimPolicy::GatewayLoop,
        SimPolicy::FairShare,
    ] {
        let mut config = SimConfig {
            weights: context.weights.clone(),
            ..SimConfig::new(policy, capacity as u32)
        };
        if let Some(k) = context.knobs {
            config.half_life_s = k.usage_half_life_s;
            config.starvation_guard_s = k.starvation_guard_s.unwrap_or(f64::INFINITY);
            config.starvation_runs = k.starvation_runs;
            config.backfill = k.backfill;
        }
        let outcome = simulate(&trace, &config);
        let weights: Vec<f64> = outcome
            .users
            .iter()
            .map(|u| context.weights.get(u).copied().unwrap_or(1.0))
            .collect();
        let share_jobs: Vec<ShareJob> = outcome
            .jobs
            .iter()
            .map(|j| ShareJob {
                user: j.user,
                cpu: f64::from(j.cpus) / MILLI,
                submit: j.submit,
                start: Some(j.start),
                end: Some(j.start + j.run),
            })
            .collect();
        let horizon = share_jobs.iter().filter_map(|j| j.end).fold(0.0, f64::max);
        let s = time_averaged_shares(&share_jobs, &weights, context.capacity_cpu, horizon);
        let worst = s.starved.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "  {:<13} fairness error {:.4}; most starved user {:.1} % of contended time (simulated)",
            policy.to_string(),
            s.fairness_error,
            100.0 * worst
        );
    }
    out
}

/// The per-user table (users by jobs, most first, then by id), an `all` row and the
/// overall line with the makespan, for the jobs `jobs` (the replay's, in any order).
#[must_use]
pub fn render_table(jobs: &[JobRecord]) -> String {
    let mut per_user: BTreeMap<&str, Stats> = BTreeMap::new();
    let mut all = Stats::default();
    for job in jobs {
        per_user.entry(job.user.as_str()).or_default().add(job);
        all.add(job);
    }
    let mut users: Vec<(&str, Stats)> = per_user.into_iter().collect();
    users.sort_by(|a, b| b.1.jobs.cmp(&a.1.jobs).then(a.0.cmp(b.0)));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:>6} {:>9} {:>6} {:>7} {:>11} {:>10} {:>9}",
        "user", "jobs", "succeeded", "failed", "stopped", "wait_mean_s", "wait_p95_s", "bsld_mean"
    );
    for (user, stats) in &users {
        let _ = writeln!(out, "{}", stats.row(user));
    }
    let _ = writeln!(out, "{}", all.row("all"));
    let first_submit = jobs.iter().map(|j| j.submitted_at).min();
    let last_finish = jobs.iter().filter_map(|j| j.finished_at).max();
    let makespan = match (first_submit, last_finish) {
        (Some(a), Some(b)) => seconds_between(a, b),
        _ => 0.0,
    };
    let _ = writeln!(
        out,
        "overall: {} jobs, {} succeeded, {} failed, {} stopped; makespan {:.1} s; \
         wait mean {:.1} s, p95 {:.1} s; bounded slowdown mean {:.2}",
        all.jobs,
        all.succeeded,
        all.failed,
        all.stopped,
        makespan,
        mean(all.waits.iter().copied()),
        p95(&all.waits),
        mean(all.bslds.iter().copied()),
    );
    out
}
