//! Live replay of a Standard Workload Format trace against a running fairshare service
//! (`fairshare replay`): the simulator's input, but real jobs on a real Ray cluster.
//!
//! # What is submitted
//!
//! Jobs `[skip, skip + limit)` of the trace (in submit order, see [`super::swf`]) are
//! posted to `POST /v1/jobs`, each at its scaled submit time: `(submit − submit of the
//! first selected job) / time_scale` real seconds after the replay starts. Each job is
//!
//! - `user`: the trace's user id (`"u62"`);
//! - `entrypoint`: `sleep <s>` with `s = max(run / time_scale, min_runtime_s)` seconds,
//!   three decimals ([`entrypoint`]);
//! - `resources.cpu`: `clamp(processors × cpu_scale, min_cpu, max_cpu)` cores, rounded
//!   to Ray's resource precision of 0.0001 ([`scale_cpu`]);
//! - `external_id`: `"<trace file stem>-<job number>"` (stem without `.gz` / `.swf`), so
//!   a rerun against the same database re-attaches to the jobs it submitted before
//!   (the service answers 200 with the existing job) instead of submitting them twice;
//! - `metadata`: `trace` (the stem) and `trace_job` (the job number).
//!
//! At most [`MAX_IN_FLIGHT_SUBMITS`] submissions are in flight at once; jobs whose
//! scaled submit instants coincide may be committed in any order. 429, 408 and 5xx
//! answers and connection errors are retried with exponential backoff (honouring
//! `Retry-After`); 400, 413, 422 and other 4xx answers are never retried: they are
//! counted as rejected and reported. 401, 403, 404 and 405 mean the replay cannot work
//! at all (bad token, wrong server address) and end it with an error.
//!
//! # Following the jobs
//!
//! About once a second the replay pages through `GET /v1/jobs?limit=1000` (newest first)
//! down to the oldest of its jobs that is not finished yet, so one poll costs
//! `⌈jobs submitted since then / 1000⌉` requests (one for a few hundred jobs); the next
//! poll waits longer when a poll needed many pages, keeping the load at a few requests a
//! second. A job missing from the listing is fetched by id. The progress bar
//! (`indicatif`, on stderr) shows submitted, queued, starting (DISPATCHING or PENDING),
//! running and finished counts.
//!
//! The replay ends when every submitted job is terminal (SUCCEEDED, FAILED or STOPPED),
//! or at the overall timeout ([`overall_timeout`]): three times the scaled length of
//! the replay plus 5 minutes. Jobs still unfinished then are counted in
//! [`ReplaySummary::unfinished`], not an error.
//!
//! # The report
//!
//! All times are real seconds (multiply by `time_scale` for trace seconds).
//!
//! - **Wait**: `started_at − submitted_at` (or `dispatched_at − submitted_at` when Ray
//!   never reported the job running): the time in the service's queue plus dispatch.
//! - **Run**: `finished_at − started_at`. Ray reports a job RUNNING within tens of
//!   milliseconds of the submission, so its start-up (1–4 s on a busy 2-core machine)
//!   and the service noticing the end fall in the run, not the wait: a `sleep 1.000`
//!   job typically shows a run of 3–5 s.
//! - **p95**: nearest rank, the `⌈0.95·n⌉`-th smallest value.
//! - **Bounded slowdown**: `max(1, (wait + run) / max(run, 10 s))`, over jobs with a
//!   start and a finish time (the simulator's definition, `report::BSLD_BOUND_S`).
//! - **Makespan**: last `finished_at` − first `submitted_at` over the replay's jobs.
//! - **Share table** ([`render_share_table`]): each user's time-averaged actual share
//!   of the capacity (cores held from dispatch to finish) against its time-averaged
//!   fair share (weighted, demand-capped water-filling), and the run's fairness error
//!   over contended time, with the simulator's definitions (`report`). The capacity
//!   is the healthy clusters' cores and the weights the users' (`GET /v1/scheduler`,
//!   `GET /v1/users`), read at the end of the run.
//!
//! # Layout
//!
//! `plan` (what is submitted), `client` (HTTP with retries), `driver`
//! (submitting on schedule and following the jobs), `output` (records and the
//! table); the statistics are [`super::stats`], shared with the simulator.

use std::path::PathBuf;

use anyhow::bail;

mod client;
mod driver;
mod output;
mod plan;
#[cfg(test)]
mod tests;

pub use super::stats::{bounded_slowdown, mean, p95, BSLD_BOUND_S};
use client::*;
pub use driver::*;
pub use output::*;
pub use plan::*;

/// Default floor on a job's cores ([`ReplayArgs::min_cpu`]).
pub const DEFAULT_MIN_CPU: f64 = 0.1;
/// Default floor on a job's scaled run time, seconds ([`ReplayArgs::min_runtime_s`]).
pub const DEFAULT_MIN_RUNTIME_S: f64 = 1.0;
/// Submissions in flight at once.
pub const MAX_IN_FLIGHT_SUBMITS: usize = 4;
/// Page size of the `GET /v1/jobs` polls (the API's largest).
pub const POLL_PAGE: usize = 1000;
/// What Ray adds to each job's time on the cluster (start-up), seconds; used only to
/// size the overall timeout.
pub const RAY_START_OVERHEAD_S: f64 = 2.0;
/// Longest replay accepted: submit offset plus sleep, real seconds (a year).
pub const MAX_REPLAY_S: f64 = 31_536_000.0;
/// Smallest resource step Ray accepts, cores.
pub(super) const RAY_RESOURCE_UNIT: f64 = 1e-4;
/// Most external id characters taken from the trace's file name.
pub(super) const MAX_STEM_CHARS: usize = 200;
/// Rejection messages quoted in the report.
pub(super) const QUOTED_REJECTIONS: usize = 5;

/// Arguments of `fairshare replay`.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayArgs {
    /// The SWF trace, plain or gzip-compressed.
    pub trace: PathBuf,
    /// Base URL of the fairshare service, e.g. `http://127.0.0.1:8080`.
    pub server: String,
    /// Bearer token (role submitter or admin), if the service requires one.
    pub token: Option<String>,
    /// Trace seconds per real second (> 0): 1000 means 1000 trace seconds pass per
    /// real second. Scales both submit times and run times.
    pub time_scale: f64,
    /// Cores per trace processor (> 0), e.g. 0.01.
    pub cpu_scale: f64,
    /// Replay at most this many jobs; `None` = all after `skip`.
    pub limit: Option<usize>,
    /// Jobs to skip at the start of the trace (in submit order).
    pub skip: usize,
    /// Floor on a job's cores (> 0; default [`DEFAULT_MIN_CPU`]).
    pub min_cpu: f64,
    /// Cap on a job's cores, e.g. the cluster's size; `None` = no cap.
    pub max_cpu: Option<f64>,
    /// Floor on a job's scaled run time, seconds (≥ 0; default
    /// [`DEFAULT_MIN_RUNTIME_S`]).
    pub min_runtime_s: f64,
    /// Show the progress bar on stderr.
    pub progress: bool,
}

impl ReplayArgs {
    /// Arguments for `trace` against `server` with the defaults: real time
    /// (`time_scale` 1), one core per processor, the whole trace, cores at least
    /// [`DEFAULT_MIN_CPU`] and uncapped, sleeps at least [`DEFAULT_MIN_RUNTIME_S`],
    /// no token, progress bar on.
    #[must_use]
    pub fn new(trace: PathBuf, server: String) -> ReplayArgs {
        ReplayArgs {
            trace,
            server,
            token: None,
            time_scale: 1.0,
            cpu_scale: 1.0,
            limit: None,
            skip: 0,
            min_cpu: DEFAULT_MIN_CPU,
            max_cpu: None,
            min_runtime_s: DEFAULT_MIN_RUNTIME_S,
            progress: true,
        }
    }

    /// Checks the numeric arguments; the error names the flag.
    pub fn validate(&self) -> anyhow::Result<()> {
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            bail!("--time-scale must be a number > 0, got {}", self.time_scale);
        }
        if !(self.cpu_scale.is_finite() && self.cpu_scale > 0.0) {
            bail!("--cpu-scale must be a number > 0, got {}", self.cpu_scale);
        }
        if !(self.min_cpu.is_finite() && self.min_cpu >= RAY_RESOURCE_UNIT) {
            bail!(
                "--min-cpu must be a number >= {RAY_RESOURCE_UNIT}, got {}",
                self.min_cpu
            );
        }
        if let Some(max) = self.max_cpu {
            if !(max.is_finite() && max >= self.min_cpu) {
                bail!(
                    "--max-cpu must be a number >= --min-cpu ({}), got {max}",
                    self.min_cpu
                );
            }
        }
        if !(self.min_runtime_s.is_finite() && (0.0..=MAX_REPLAY_S).contains(&self.min_runtime_s)) {
            bail!(
                "--min-runtime must be a number of seconds from 0 to {MAX_REPLAY_S}, got {:?}",
                self.min_runtime_s
            );
        }
        if self.limit == Some(0) {
            bail!("--limit must be at least 1");
        }
        Ok(())
    }
}

/// How a replay went.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplaySummary {
    /// Jobs the replay followed: created now or already there from an earlier run.
    pub jobs: usize,
    /// Of those, SUCCEEDED.
    pub succeeded: usize,
    /// Of those, FAILED.
    pub failed: usize,
    /// Of those, STOPPED.
    pub stopped: usize,
    /// Not terminal when the replay ended (overall timeout), or gone from the service.
    pub unfinished: usize,
    /// Refused by the service for good (400, 413, 422, other 4xx); never retried.
    pub rejected: usize,
    /// Of [`Self::jobs`], answered 200: submitted by an earlier run (same external id).
    pub already_submitted: usize,
    /// Given up after the retry budget (429, 5xx or connection errors throughout).
    pub unsubmitted: usize,
    /// Wall time of the replay, seconds.
    pub wall_s: f64,
    /// The report: a header line, the per-user table and the overall line.
    pub table: String,
}

impl ReplaySummary {
    /// Every selected job was submitted and SUCCEEDED.
    #[must_use]
    pub fn all_succeeded(&self) -> bool {
        self.succeeded == self.jobs && self.rejected == 0 && self.unsubmitted == 0
    }
}
