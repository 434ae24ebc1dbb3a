//! The replay's report: job records as the service lists them and the per-user table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

use super::*;

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
