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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context as _};
use backon::{ExponentialBuilder, Retryable};
use chrono::{DateTime, Utc};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio::time::Instant;
use uuid::Uuid;

use super::swf::{read_trace, Trace};

/// Default floor on a job's cores ([`ReplayArgs::min_cpu`]).
pub const DEFAULT_MIN_CPU: f64 = 0.1;
/// Default floor on a job's scaled run time, seconds ([`ReplayArgs::min_runtime_s`]).
pub const DEFAULT_MIN_RUNTIME_S: f64 = 1.0;
/// The bound `τ` of the bounded slowdown, seconds (as in the simulator's report).
pub const BSLD_BOUND_S: f64 = 10.0;
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
const RAY_RESOURCE_UNIT: f64 = 1e-4;
/// Most external id characters taken from the trace's file name.
const MAX_STEM_CHARS: usize = 200;
/// Rejection messages quoted in the report.
const QUOTED_REJECTIONS: usize = 5;

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
        if !(self.min_runtime_s.is_finite() && self.min_runtime_s >= 0.0) {
            bail!(
                "--min-runtime must be a number of seconds >= 0, got {}",
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

/// One job as the replay will submit it.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedJob {
    /// The trace's job number.
    pub number: u64,
    /// The trace's user id.
    pub user: String,
    /// `"<stem>-<number>"` (a repeated number gets `.2`, `.3`, ...).
    pub external_id: String,
    /// When to submit it: real seconds after the replay starts.
    pub at_s: f64,
    /// The scaled run time: the `sleep` duration, seconds.
    pub sleep_s: f64,
    /// Cores requested.
    pub cpu: f64,
}

impl PlannedJob {
    /// The job's entrypoint, `sleep <sleep_s>`.
    #[must_use]
    pub fn entrypoint(&self) -> String {
        entrypoint(self.sleep_s)
    }
}

/// Cores for a job of `processors` trace processors: `processors × cpu_scale`,
/// clamped to `[min_cpu, max_cpu]` and rounded to Ray's step of 0.0001 core (never
/// below `min_cpu`). `args` must be valid ([`ReplayArgs::validate`]).
#[must_use]
pub fn scale_cpu(processors: u32, args: &ReplayArgs) -> f64 {
    let raw = f64::from(processors) * args.cpu_scale;
    let capped = match args.max_cpu {
        Some(max) => raw.min(max),
        None => raw,
    };
    let rounded = (capped.max(args.min_cpu) / RAY_RESOURCE_UNIT).round() * RAY_RESOURCE_UNIT;
    // Round to at most 4 decimals without binary noise (0.8800000000000001 → 0.88).
    let clean = (rounded * 1e4).round() / 1e4;
    if clean < args.min_cpu {
        args.min_cpu
    } else {
        clean
    }
}

/// The scaled run time of a job that ran `run_s` trace seconds: `run_s / time_scale`,
/// at least `min_runtime_s`, in real seconds.
#[must_use]
pub fn scale_run(run_s: f64, args: &ReplayArgs) -> f64 {
    (run_s / args.time_scale).max(args.min_runtime_s)
}

/// The entrypoint of a job that sleeps `seconds`: `sleep 1.234` (three decimals,
/// rounded up so a job never sleeps less than its floor).
#[must_use]
pub fn entrypoint(seconds: f64) -> String {
    let millis = (seconds.max(0.0) * 1000.0 - 1e-6).ceil().max(0.0);
    format!("sleep {:.3}", millis / 1000.0)
}

/// The trace's file name without `.gz` and `.swf`, for external ids
/// (`coare-saliksik-2020.swf.gz` → `coare-saliksik-2020`).
#[must_use]
pub fn trace_stem(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".to_string());
    let mut stem = name.as_str();
    for suffix in [".gz", ".swf"] {
        if stem.len() > suffix.len() && stem.to_ascii_lowercase().ends_with(suffix) {
            stem = &stem[..stem.len() - suffix.len()];
        }
    }
    stem.chars().take(MAX_STEM_CHARS).collect()
}

/// The jobs `[skip, skip + limit)` of `trace` as they will be submitted, in submit
/// order. `args` must be valid ([`ReplayArgs::validate`]).
#[must_use]
pub fn plan(trace: &Trace, stem: &str, args: &ReplayArgs) -> Vec<PlannedJob> {
    let selected = trace
        .jobs
        .iter()
        .skip(args.skip)
        .take(args.limit.unwrap_or(usize::MAX));
    let mut origin = None;
    let mut seen: HashMap<u64, usize> = HashMap::new();
    selected
        .map(|job| {
            let first = *origin.get_or_insert(job.submit);
            let count = seen.entry(job.number).or_insert(0);
            *count += 1;
            let external_id = if *count == 1 {
                format!("{stem}-{}", job.number)
            } else {
                format!("{stem}-{}.{count}", job.number)
            };
            PlannedJob {
                number: job.number,
                user: job.user.clone(),
                external_id,
                at_s: ((job.submit - first) / args.time_scale).max(0.0),
                sleep_s: scale_run(job.run, args),
                cpu: scale_cpu(job.cpus, args),
            }
        })
        .collect()
}

/// How long the replay may take before it stops waiting, real seconds:
/// `3 × L + 300`, where `L` is the scaled length of the replay — the latest
/// `at_s + sleep_s + RAY_START_OVERHEAD_S`, or, when `max_cpu` gives the cluster's
/// size, the time to run all the work one after the other at full use,
/// `Σ cpu × (sleep_s + RAY_START_OVERHEAD_S) / max_cpu`, whichever is longer.
#[must_use]
pub fn overall_timeout(plan: &[PlannedJob], max_cpu: Option<f64>) -> Duration {
    let span = plan
        .iter()
        .map(|j| j.at_s + j.sleep_s + RAY_START_OVERHEAD_S)
        .fold(0.0, f64::max);
    let work = match max_cpu {
        Some(cap) if cap > 0.0 => {
            plan.iter()
                .map(|j| j.cpu * (j.sleep_s + RAY_START_OVERHEAD_S))
                .sum::<f64>()
                / cap
        }
        _ => 0.0,
    };
    Duration::try_from_secs_f64(3.0 * span.max(work) + 300.0).unwrap_or(Duration::MAX)
}

/// Nearest-rank 95th percentile: the `⌈0.95·n⌉`-th smallest of `values`; 0 for none.
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

/// Bounded slowdown `max(1, (wait + run) / max(run, BSLD_BOUND_S))`, seconds in.
#[must_use]
pub fn bounded_slowdown(wait_s: f64, run_s: f64) -> f64 {
    ((wait_s + run_s) / run_s.max(BSLD_BOUND_S)).max(1.0)
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

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

fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    ((to - from).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6).max(0.0)
}

fn is_terminal(status: &str) -> bool {
    matches!(status, "SUCCEEDED" | "FAILED" | "STOPPED")
}

/// Statistics of a set of jobs (one user's, or all).
#[derive(Clone, Debug, Default, PartialEq)]
struct Stats {
    jobs: usize,
    succeeded: usize,
    failed: usize,
    stopped: usize,
    waits: Vec<f64>,
    bslds: Vec<f64>,
}

impl Stats {
    fn add(&mut self, job: &JobRecord) {
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

    fn row(&self, name: &str) -> String {
        format!(
            "{name:<12} {:>6} {:>9} {:>6} {:>7} {:>11.1} {:>10.1} {:>9.2}",
            self.jobs,
            self.succeeded,
            self.failed,
            self.stopped,
            mean(&self.waits),
            p95(&self.waits),
            mean(&self.bslds),
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
        mean(&all.waits),
        p95(&all.waits),
        mean(&all.bslds),
    );
    out
}

/// `POST /v1/jobs` body.
#[derive(Serialize)]
struct SubmitBody<'a> {
    user: &'a str,
    entrypoint: String,
    resources: Resources,
    external_id: &'a str,
    metadata: BTreeMap<&'static str, String>,
}

#[derive(Serialize)]
struct Resources {
    cpu: f64,
}

#[derive(Deserialize)]
struct JobPage {
    jobs: Vec<JobRecord>,
    next_after: Option<Uuid>,
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// What became of one submission.
#[derive(Debug)]
enum Submitted {
    /// 201.
    Created(JobRecord),
    /// 200: the same (user, external_id) was submitted before.
    Existing(JobRecord),
    /// A definitive 4xx.
    Rejected { status: u16, message: String },
    /// The retry budget ran out.
    GaveUp(String),
}

/// One failed attempt.
#[derive(Debug)]
enum AttemptError {
    /// 408, 429, 5xx or a transport error: try again.
    Retryable {
        message: String,
        retry_after: Option<Duration>,
        /// No answer at all: the service may have committed the job anyway.
        transport: bool,
    },
    /// The replay cannot work (401, 403, 404, 405, unreadable 2xx body).
    Fatal(String),
}

impl AttemptError {
    fn is_retryable(&self) -> bool {
        matches!(self, AttemptError::Retryable { .. })
    }
}

/// How an HTTP status of `POST /v1/jobs` is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Disposition {
    Created,
    Existing,
    Retry,
    Reject,
    Fatal,
}

fn disposition(status: u16) -> Disposition {
    match status {
        201 => Disposition::Created,
        200 => Disposition::Existing,
        408 | 429 | 500..=599 => Disposition::Retry,
        401 | 403 | 404 | 405 => Disposition::Fatal,
        _ => Disposition::Reject,
    }
}

/// Tuning of the network side (tests shorten it).
#[derive(Clone, Debug)]
struct Tuning {
    poll_interval: Duration,
    request_timeout: Duration,
    backoff_min: Duration,
    backoff_max: Duration,
    backoff_times: usize,
    /// Give up when no poll has succeeded for this long.
    unreachable_after: Duration,
    /// Largest `Retry-After` honoured.
    max_retry_after: Duration,
    /// Jobs fetched one by one per poll when missing from the listing.
    max_single_gets: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            poll_interval: Duration::from_secs(1),
            request_timeout: Duration::from_secs(30),
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(5),
            backoff_times: 10,
            unreachable_after: Duration::from_secs(120),
            max_retry_after: Duration::from_secs(30),
            max_single_gets: 10,
        }
    }
}

/// The HTTP side: base URL, token, client.
#[derive(Clone)]
struct Api {
    client: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Api {
    fn new(server: &str, token: Option<String>, tuning: &Tuning) -> anyhow::Result<Api> {
        let base = server.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!("--server must be an http:// or https:// URL, got {server:?}");
        }
        let client = reqwest::Client::builder()
            .timeout(tuning.request_timeout)
            .user_agent(concat!("fairshare-replay/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Api {
            client,
            base,
            token,
        })
    }

    /// Fails fast, with the cause, when nothing answers at the address or what answers
    /// is not a fairshare service (`GET /healthz` must say `{"status": "ok"}`).
    async fn preflight(&self) -> anyhow::Result<()> {
        let url = format!("{}/healthz", self.base);
        let resp = self
            .client
            .get(&url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot reach the fairshare service at {}: {e}; is it running?",
                    self.base
                )
            })?;
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        if body["status"] != "ok" {
            bail!("{} does not look like a fairshare service: GET /healthz did not answer {{\"status\": \"ok\"}}", self.base);
        }
        Ok(())
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// One `POST /v1/jobs` attempt.
    async fn post_once(&self, body: &serde_json::Value) -> Result<Submitted, AttemptError> {
        let resp = self
            .request(reqwest::Method::POST, "/v1/jobs")
            .json(body)
            .send()
            .await
            .map_err(|e| AttemptError::Retryable {
                message: format!("POST /v1/jobs: {}", error_chain(&e)),
                retry_after: None,
                transport: true,
            })?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        match disposition(status) {
            Disposition::Created | Disposition::Existing => {
                let job: JobRecord = resp.json().await.map_err(|e| {
                    AttemptError::Fatal(format!(
                        "POST /v1/jobs answered {status} with a body that is not a job: {}",
                        error_chain(&e)
                    ))
                })?;
                Ok(if status == 201 {
                    Submitted::Created(job)
                } else {
                    Submitted::Existing(job)
                })
            }
            Disposition::Retry => Err(AttemptError::Retryable {
                message: format!("POST /v1/jobs: {status} {}", error_text(resp).await),
                retry_after,
                transport: false,
            }),
            Disposition::Fatal => Err(AttemptError::Fatal(format!(
                "POST {}/v1/jobs answered {status} {} (is --server the fairshare service, \
                 and --token a submitter token?)",
                self.base,
                error_text(resp).await
            ))),
            Disposition::Reject => Ok(Submitted::Rejected {
                status,
                message: error_text(resp).await,
            }),
        }
    }

    /// Submits with retries; `Err` only for a fatal answer. A 200 after an attempt that
    /// got no answer counts as created: most likely that attempt committed the job.
    async fn submit(&self, body: serde_json::Value, tuning: &Tuning) -> anyhow::Result<Submitted> {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(tuning.backoff_min)
            .with_max_delay(tuning.backoff_max)
            .with_max_times(tuning.backoff_times)
            .with_jitter();
        let max_retry_after = tuning.max_retry_after;
        let unanswered = AtomicBool::new(false);
        let result = (|| self.post_once(&body))
            .retry(backoff)
            .when(AttemptError::is_retryable)
            .notify(|err, _| {
                if let AttemptError::Retryable {
                    transport: true, ..
                } = err
                {
                    unanswered.store(true, Ordering::Relaxed);
                }
            })
            .adjust(move |err, delay| match (err, delay) {
                (
                    AttemptError::Retryable {
                        retry_after: Some(after),
                        ..
                    },
                    Some(_),
                ) => Some((*after).min(max_retry_after)),
                _ => delay,
            })
            .await;
        match result {
            Ok(Submitted::Existing(job)) if unanswered.load(Ordering::Relaxed) => {
                Ok(Submitted::Created(job))
            }
            Ok(s) => Ok(s),
            Err(AttemptError::Retryable { message, .. }) => Ok(Submitted::GaveUp(message)),
            Err(AttemptError::Fatal(message)) => Err(anyhow::anyhow!(message)),
        }
    }

    /// One `GET` of a JSON document; a non-2xx answer is an error with its text.
    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> anyhow::Result<Result<T, u16>> {
        let resp = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("GET {path}: {}", error_chain(&e)))?;
        let status = resp.status();
        if !status.is_success() {
            if matches!(status.as_u16(), 401 | 403) {
                bail!("GET {path}: {} {}", status.as_u16(), error_text(resp).await);
            }
            return Ok(Err(status.as_u16()));
        }
        let value = resp
            .json::<T>()
            .await
            .map_err(|e| anyhow::anyhow!("GET {path}: unreadable answer: {}", error_chain(&e)))?;
        Ok(Ok(value))
    }
}

/// The error's message and its sources, `: `-joined.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let _ = write!(text, ": {s}");
        source = s.source();
    }
    text
}

/// The service's error message (`{"error": {"code", "message"}}`), else the body text.
async fn error_text(resp: reqwest::Response) -> String {
    let text = resp.text().await.unwrap_or_default();
    match serde_json::from_str::<ErrorEnvelope>(&text) {
        Ok(ErrorEnvelope { error }) => match (error.code, error.message) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (None, Some(message)) => message,
            (Some(code), None) => code,
            (None, None) => text,
        },
        Err(_) => text.chars().take(300).collect(),
    }
}

/// Counts shown by the progress bar.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Progress {
    queued: usize,
    starting: usize,
    running: usize,
    finished: usize,
    not_ok: usize,
}

/// The replay's view of its jobs.
#[derive(Default)]
struct Tracker {
    jobs: HashMap<Uuid, JobRecord>,
}

impl Tracker {
    fn track(&mut self, job: JobRecord) {
        // A poll may already have seen a newer state of it.
        let newer = match self.jobs.get(&job.id) {
            Some(old) => old.is_terminal() && !job.is_terminal(),
            None => false,
        };
        if !newer {
            self.jobs.insert(job.id, job);
        }
    }

    fn update(&mut self, job: JobRecord) -> bool {
        match self.jobs.get_mut(&job.id) {
            Some(slot) => {
                if !slot.is_terminal() {
                    *slot = job;
                }
                true
            }
            None => false,
        }
    }

    fn oldest_open(&self) -> Option<DateTime<Utc>> {
        self.jobs
            .values()
            .filter(|j| !j.is_terminal())
            .map(|j| j.submitted_at)
            .min()
    }

    fn open_ids(&self) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = self
            .jobs
            .values()
            .filter(|j| !j.is_terminal())
            .map(|j| j.id)
            .collect();
        ids.sort();
        ids
    }

    fn progress(&self) -> Progress {
        let mut p = Progress::default();
        for job in self.jobs.values() {
            match job.status.as_str() {
                "QUEUED" => p.queued += 1,
                "DISPATCHING" | "PENDING" => p.starting += 1,
                "RUNNING" => p.running += 1,
                "SUCCEEDED" => p.finished += 1,
                _ if job.is_terminal() => {
                    p.finished += 1;
                    p.not_ok += 1;
                }
                _ => {}
            }
        }
        p
    }

    /// Brings the open jobs up to date: pages through `GET /v1/jobs` (newest first)
    /// down to the oldest open job, then fetches open jobs missing from it one by one.
    /// Returns the number of requests made.
    async fn poll(&mut self, api: &Api, tuning: &Tuning) -> anyhow::Result<usize> {
        let Some(oldest) = self.oldest_open() else {
            return Ok(0);
        };
        let mut requests = 0;
        let mut seen: HashSet<Uuid> = HashSet::new();
        let mut after: Option<Uuid> = None;
        loop {
            let path = match after {
                Some(a) => format!("/v1/jobs?limit={POLL_PAGE}&after={a}"),
                None => format!("/v1/jobs?limit={POLL_PAGE}"),
            };
            requests += 1;
            let page: JobPage = match api.get_json(&path).await? {
                Ok(page) => page,
                Err(status) => bail!("GET {path}: {status}"),
            };
            let last = page.jobs.last().map(|j| j.submitted_at);
            for job in page.jobs {
                let id = job.id;
                if self.update(job) {
                    seen.insert(id);
                }
            }
            match (page.next_after, last) {
                (Some(next), Some(last)) if last >= oldest => after = Some(next),
                _ => break,
            }
        }
        let missing: Vec<Uuid> = self
            .open_ids()
            .into_iter()
            .filter(|id| !seen.contains(id))
            .take(tuning.max_single_gets)
            .collect();
        for id in missing {
            requests += 1;
            match api.get_json::<JobRecord>(&format!("/v1/jobs/{id}")).await? {
                Ok(job) => {
                    self.update(job);
                }
                Err(404) => {
                    if let Some(job) = self.jobs.get_mut(&id) {
                        job.status = "LOST".to_string();
                        job.message = Some("the service no longer knows this job".into());
                    }
                }
                Err(_) => {}
            }
        }
        Ok(requests)
    }
}

/// Replays the trace described by `args` against the service and waits for its jobs.
///
/// Errors: invalid arguments, an unreadable trace, a service that refuses the token or
/// is not a fairshare service (401/403/404/405), or one that stays unreachable for
/// 2 minutes. Jobs that fail, are rejected or do not finish in time are counted in the
/// summary, not errors.
pub async fn replay(args: &ReplayArgs) -> anyhow::Result<ReplaySummary> {
    replay_tuned(args, &Tuning::default()).await
}

/// [`replay`], then prints the report to stdout and returns it.
pub async fn run_replay(args: &ReplayArgs) -> anyhow::Result<String> {
    let summary = replay(args).await?;
    print!("{}", summary.table);
    Ok(summary.table)
}

fn new_bar(args: &ReplayArgs, total: usize) -> ProgressBar {
    if !args.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total as u64);
    // The message first and a bar that takes what is left: one line in 80 columns.
    let style = ProgressStyle::with_template(
        "{elapsed_precise} {pos}/{len} done, {msg} [{wide_bar:.cyan/blue}]",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar
}

fn describe(p: &Progress, submitted: usize, planned: usize) -> String {
    let mut text = format!(
        "sent {submitted}/{planned}, queued {}, starting {}, running {}",
        p.queued, p.starting, p.running
    );
    if p.not_ok > 0 {
        let _ = write!(text, ", {} not succeeded", p.not_ok);
    }
    text
}

async fn replay_tuned(args: &ReplayArgs, tuning: &Tuning) -> anyhow::Result<ReplaySummary> {
    args.validate()?;
    let api = Api::new(&args.server, args.token.clone(), tuning)?;
    let trace = read_trace(&args.trace)?;
    let stem = trace_stem(&args.trace);
    let plan = plan(&trace, &stem, args);
    let too_long = |j: &&PlannedJob| {
        let end = j.at_s + j.sleep_s;
        !end.is_finite() || end > MAX_REPLAY_S
    };
    if let Some(job) = plan.iter().find(too_long) {
        bail!(
            "--time-scale {} is too small: trace job {} would be submitted after {:.0} s and \
             sleep {:.0} s (at most {MAX_REPLAY_S} s in all)",
            args.time_scale,
            job.number,
            job.at_s,
            job.sleep_s
        );
    }
    if plan.is_empty() {
        bail!(
            "nothing to replay: the trace {} has {} jobs and --skip is {}",
            args.trace.display(),
            trace.jobs.len(),
            args.skip
        );
    }
    api.preflight().await?;
    let timeout = overall_timeout(&plan, args.max_cpu);
    let bar = new_bar(args, plan.len());
    let quiet_progress = args.progress && bar.is_hidden();

    let started = Instant::now();
    // A year past the longest accepted replay if the timeout is out of range.
    let deadline = started
        .checked_add(timeout)
        .unwrap_or(started + Duration::from_secs_f64(2.0 * MAX_REPLAY_S));
    let mut tracker = Tracker::default();
    let mut next = 0usize;
    let mut inflight: JoinSet<anyhow::Result<(usize, Submitted)>> = JoinSet::new();
    let mut summary = ReplaySummary::default();
    let mut rejections: Vec<String> = Vec::new();
    let mut max_lag_s: f64 = 0.0;
    let mut next_poll = started + tuning.poll_interval;
    let mut last_good_poll = started;
    let mut last_line = started;
    let mut timed_out = false;

    loop {
        let submit_at = plan
            .get(next)
            .filter(|_| inflight.len() < MAX_IN_FLIGHT_SUBMITS)
            .map(|j| started + Duration::from_secs_f64(j.at_s));
        tokio::select! {
            biased;
            Some(joined) = inflight.join_next(), if !inflight.is_empty() => {
                let (index, outcome) = joined.context("a submission task failed")??;
                let job = &plan[index];
                match outcome {
                    Submitted::Created(record) => tracker.track(record),
                    Submitted::Existing(record) => {
                        summary.already_submitted += 1;
                        tracker.track(record);
                    }
                    Submitted::Rejected { status, message } => {
                        summary.rejected += 1;
                        if rejections.len() < QUOTED_REJECTIONS {
                            rejections.push(format!(
                                "{} (trace job {}, user {}, {} cores): {status} {message}",
                                job.external_id, job.number, job.user, job.cpu
                            ));
                        }
                    }
                    Submitted::GaveUp(message) => {
                        summary.unsubmitted += 1;
                        bar.println(format!(
                            "replay: gave up submitting {}: {message}",
                            job.external_id
                        ));
                    }
                }
            }
            _ = tokio::time::sleep_until(submit_at.unwrap_or(next_poll)), if submit_at.is_some() => {
                let index = next;
                next += 1;
                let job = &plan[index];
                max_lag_s = max_lag_s.max(
                    Instant::now().duration_since(started).as_secs_f64() - job.at_s,
                );
                let body = serde_json::to_value(SubmitBody {
                    user: &job.user,
                    entrypoint: job.entrypoint(),
                    resources: Resources { cpu: job.cpu },
                    external_id: &job.external_id,
                    metadata: BTreeMap::from([
                        ("trace", stem.clone()),
                        ("trace_job", job.number.to_string()),
                    ]),
                })?;
                let api = api.clone();
                let tuning = tuning.clone();
                inflight.spawn(async move {
                    let outcome = api.submit(body, &tuning).await?;
                    Ok((index, outcome))
                });
            }
            _ = tokio::time::sleep_until(next_poll) => {
                let now = Instant::now();
                match tracker.poll(&api, tuning).await {
                    Ok(requests) => {
                        last_good_poll = Instant::now();
                        // About POLL_PAGE jobs per request: keep to ~4 requests a second.
                        let pause = tuning
                            .poll_interval
                            .max(Duration::from_millis(250) * requests as u32);
                        next_poll = Instant::now() + pause;
                    }
                    Err(e) => {
                        if now.duration_since(last_good_poll) > tuning.unreachable_after {
                            bar.abandon();
                            return Err(e.context(format!(
                                "the service at {} did not answer for {} s",
                                args.server,
                                tuning.unreachable_after.as_secs()
                            )));
                        }
                        bar.println(format!("replay: poll failed (will retry): {e:#}"));
                        next_poll = Instant::now() + tuning.poll_interval;
                    }
                }
                let progress = tracker.progress();
                bar.set_position(progress.finished as u64);
                bar.set_message(describe(&progress, next, plan.len()));
                if quiet_progress && now.duration_since(last_line) >= Duration::from_secs(10) {
                    last_line = now;
                    eprintln!(
                        "replay: {:.0} s: {}/{} done, {}",
                        now.duration_since(started).as_secs_f64(),
                        progress.finished,
                        plan.len(),
                        describe(&progress, next, plan.len())
                    );
                }
                if Instant::now() >= deadline {
                    timed_out = true;
                }
            }
        }
        let all_sent = next == plan.len() && inflight.is_empty();
        if (all_sent && tracker.oldest_open().is_none()) || timed_out {
            break;
        }
    }
    bar.finish_and_clear();
    inflight.abort_all();

    let records: Vec<JobRecord> = tracker.jobs.into_values().collect();
    summary.jobs = records.len();
    for job in &records {
        match job.status.as_str() {
            "SUCCEEDED" => summary.succeeded += 1,
            "FAILED" => summary.failed += 1,
            "STOPPED" => summary.stopped += 1,
            _ => summary.unfinished += 1,
        }
    }
    summary.unsubmitted += plan.len().saturating_sub(next);
    summary.wall_s = started.elapsed().as_secs_f64();

    let mut text = String::new();
    let _ = writeln!(
        text,
        "replay of {} jobs [{}, {}): time scale {} trace s per real s, cpu scale {} cores \
         per processor",
        args.trace.display(),
        args.skip,
        args.skip + plan.len(),
        args.time_scale,
        args.cpu_scale,
    );
    let _ = writeln!(
        text,
        "{} jobs followed ({} submitted by an earlier run), {} rejected, {} not submitted; \
         wall time {:.1} s; submissions at most {:.1} s behind schedule",
        summary.jobs,
        summary.already_submitted,
        summary.rejected,
        summary.unsubmitted,
        summary.wall_s,
        max_lag_s.max(0.0),
    );
    for r in &rejections {
        let _ = writeln!(text, "  rejected: {r}");
    }
    if summary.rejected > rejections.len() {
        let _ = writeln!(
            text,
            "  ... and {} more rejected",
            summary.rejected - rejections.len()
        );
    }
    if timed_out {
        let _ = writeln!(
            text,
            "timed out after {:.0} s with {} jobs unfinished",
            timeout.as_secs_f64(),
            summary.unfinished
        );
    }
    text.push_str(&render_table(&records));
    let _ = writeln!(
        text,
        "(times are real seconds; × {} for trace seconds)",
        args.time_scale
    );
    summary.table = text;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::super::swf::TraceJob;
    use super::*;

    fn args() -> ReplayArgs {
        let mut a = ReplayArgs::new(PathBuf::from("t.swf.gz"), "http://127.0.0.1:1".into());
        a.time_scale = 100.0;
        a.cpu_scale = 0.01;
        a.progress = false;
        a
    }

    fn tj(number: u64, submit: f64, run: f64, cpus: u32, user: &str) -> TraceJob {
        TraceJob::new(number, submit, run, cpus, user)
    }

    #[test]
    fn cpu_is_scaled_clamped_and_rounded() {
        let mut a = args();
        assert_eq!(scale_cpu(88, &a), 0.88);
        assert_eq!(scale_cpu(2, &a), 0.1, "floor min_cpu");
        a.max_cpu = Some(0.5);
        assert_eq!(scale_cpu(88, &a), 0.5, "cap max_cpu");
        a.cpu_scale = 1.0 / 3.0;
        a.max_cpu = None;
        assert_eq!(scale_cpu(1, &a), 0.3333, "Ray's 0.0001 step");
        a.min_cpu = 0.00015;
        a.cpu_scale = 0.0001;
        assert_eq!(scale_cpu(1, &a), 0.00015, "never below the floor");
    }

    #[test]
    fn run_is_scaled_with_a_floor_and_entrypoint_has_three_decimals() {
        let a = args();
        assert_eq!(scale_run(250.0, &a), 2.5);
        assert_eq!(scale_run(30.0, &a), 1.0, "floor min_runtime_s");
        assert_eq!(entrypoint(2.5), "sleep 2.500");
        assert_eq!(entrypoint(1.0), "sleep 1.000");
        assert_eq!(entrypoint(0.0001), "sleep 0.001", "rounded up");
        assert_eq!(entrypoint(2592.28), "sleep 2592.280");
        assert_eq!(entrypoint(1.23449), "sleep 1.235");
    }

    #[test]
    fn stem_drops_gz_and_swf() {
        assert_eq!(
            trace_stem(Path::new("examples/traces/coare-saliksik-2020.swf.gz")),
            "coare-saliksik-2020"
        );
        assert_eq!(trace_stem(Path::new("/x/NASA.swf")), "NASA");
        assert_eq!(trace_stem(Path::new("plain")), "plain");
        assert_eq!(trace_stem(Path::new(".gz")), ".gz");
    }

    #[test]
    fn plan_selects_offsets_and_names_jobs() {
        let trace = Trace {
            jobs: vec![
                tj(1, 100.0, 50.0, 88, "u62"),
                tj(2, 1100.0, 500.0, 2, "u7"),
                tj(3, 2100.0, 5.0, 16, "u7"),
                tj(3, 2200.0, 5.0, 16, "u7"),
            ],
            max_procs: Some(128),
            skipped: 0,
        };
        let mut a = args();
        a.skip = 1;
        let p = plan(&trace, "t", &a);
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].at_s, 0.0, "relative to the first selected job");
        assert_eq!(p[1].at_s, 10.0);
        assert_eq!(p[0].external_id, "t-2");
        assert_eq!(p[0].entrypoint(), "sleep 5.000");
        assert_eq!(p[0].cpu, 0.1);
        assert_eq!(p[1].cpu, 0.16);
        assert_eq!(p[2].external_id, "t-3.2", "repeated numbers stay distinct");
        a.skip = 0;
        a.limit = Some(2);
        let p = plan(&trace, "t", &a);
        assert_eq!(p.iter().map(|j| j.number).collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn validate_names_the_flag() {
        let mut a = args();
        assert!(a.validate().is_ok());
        a.min_cpu = 1.0;
        a.max_cpu = Some(0.5);
        let e = a.validate().unwrap_err().to_string();
        assert!(e.contains("--max-cpu"), "{e}");
        let mut a = args();
        a.time_scale = 0.0;
        assert!(a
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--time-scale"));
        let mut a = args();
        a.cpu_scale = f64::NAN;
        assert!(a
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--cpu-scale"));
        let mut a = args();
        a.min_runtime_s = -1.0;
        assert!(a
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--min-runtime"));
    }

    #[test]
    fn timeout_is_three_times_the_longer_of_span_and_work_plus_five_minutes() {
        let job = |at_s, sleep_s, cpu| PlannedJob {
            number: 0,
            user: "u".into(),
            external_id: "x".into(),
            at_s,
            sleep_s,
            cpu,
        };
        let p = vec![job(0.0, 8.0, 1.0), job(10.0, 8.0, 1.0)];
        assert_eq!(overall_timeout(&p, None), Duration::from_secs(3 * 20 + 300));
        let p = vec![job(0.0, 8.0, 2.0); 10];
        assert_eq!(
            overall_timeout(&p, Some(2.0)),
            Duration::from_secs(3 * 100 + 300)
        );
    }

    #[test]
    fn percentile_and_slowdown() {
        assert_eq!(p95(&[]), 0.0);
        assert_eq!(p95(&[3.0]), 3.0);
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(p95(&v), 95.0);
        assert_eq!(p95(&[1.0, 2.0, 3.0]), 3.0);
        assert_eq!(bounded_slowdown(0.0, 1.0), 1.0);
        assert_eq!(bounded_slowdown(20.0, 2.0), 2.2);
        assert_eq!(bounded_slowdown(20.0, 20.0), 2.0);
    }

    #[test]
    fn status_codes_are_classified() {
        assert_eq!(disposition(201), Disposition::Created);
        assert_eq!(disposition(200), Disposition::Existing);
        assert_eq!(disposition(429), Disposition::Retry);
        assert_eq!(disposition(503), Disposition::Retry);
        assert_eq!(disposition(422), Disposition::Reject);
        assert_eq!(disposition(413), Disposition::Reject);
        assert_eq!(disposition(401), Disposition::Fatal);
        assert_eq!(disposition(404), Disposition::Fatal);
    }

    fn record(user: &str, status: &str, times: [Option<f64>; 4]) -> JobRecord {
        let base = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        let at =
            |s: Option<f64>| s.map(|s| base + chrono::Duration::milliseconds((s * 1e3) as i64));
        JobRecord {
            id: Uuid::new_v4(),
            user: user.into(),
            status: status.into(),
            submitted_at: at(times[0]).unwrap(),
            dispatched_at: at(times[1]),
            started_at: at(times[2]),
            finished_at: at(times[3]),
            message: None,
        }
    }

    #[test]
    fn table_has_users_by_jobs_an_all_row_and_the_overall_line() {
        let jobs = vec![
            // wait 2, run 20: bsld 1.1
            record(
                "u7",
                "SUCCEEDED",
                [Some(0.0), Some(1.0), Some(2.0), Some(22.0)],
            ),
            // wait 10 (dispatched only), no run
            record("u62", "FAILED", [Some(5.0), Some(15.0), None, Some(16.0)]),
            // wait 4, run 1: bsld (4 + 1) / 10 → 1
            record(
                "u62",
                "SUCCEEDED",
                [Some(6.0), Some(8.0), Some(10.0), Some(11.0)],
            ),
            // never started
            record("u62", "STOPPED", [Some(7.0), None, None, Some(8.0)]),
        ];
        let t = render_table(&jobs);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("user"), "{t}");
        assert!(lines[1].starts_with("u62 "), "most jobs first: {t}");
        let cols: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            cols,
            ["u62", "3", "1", "1", "1", "7.0", "10.0", "1.00"],
            "{t}"
        );
        let cols: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            cols,
            ["u7", "1", "1", "0", "0", "2.0", "2.0", "1.10"],
            "{t}"
        );
        let cols: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            cols,
            ["all", "4", "2", "1", "1", "5.3", "10.0", "1.05"],
            "{t}"
        );
        assert!(
            lines[4].contains("4 jobs, 2 succeeded, 1 failed, 1 stopped; makespan 22.0 s"),
            "{t}"
        );
    }

    /// A fake service: POST creates (or finds) a job, 422 beyond 4 cores, one 429 for
    /// the first POST of user u2; GET lists every job as SUCCEEDED.
    fn fake_service() -> (
        impl Fn(&wiremock::Request) -> wiremock::ResponseTemplate,
        impl Fn(&wiremock::Request) -> wiremock::ResponseTemplate,
    ) {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let jobs: Arc<Mutex<Vec<(String, serde_json::Value)>>> = Arc::default();
        let throttled = Arc::new(AtomicBool::new(false));
        let store = jobs.clone();
        let post = move |req: &wiremock::Request| {
            let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
            if body["resources"]["cpu"].as_f64().unwrap() > 4.0 {
                return wiremock::ResponseTemplate::new(422).set_body_json(serde_json::json!(
                    {"error": {"code": "invalid", "message": "resources.cpu: exceeds every cluster"}}
                ));
            }
            if body["user"] == "u2" && !throttled.swap(true, Ordering::SeqCst) {
                return wiremock::ResponseTemplate::new(429).insert_header("Retry-After", "0");
            }
            let ext = body["external_id"].as_str().unwrap().to_string();
            let mut jobs = store.lock().unwrap();
            if let Some((_, j)) = jobs.iter().find(|(e, _)| *e == ext) {
                return wiremock::ResponseTemplate::new(200).set_body_json(j.clone());
            }
            let now = Utc::now();
            let job = serde_json::json!({
                "id": Uuid::from_u128(jobs.len() as u128 + 1), "user": body["user"],
                "status": "QUEUED", "submitted_at": now, "dispatched_at": null,
                "started_at": null, "finished_at": null, "entrypoint": body["entrypoint"],
            });
            jobs.push((ext, job.clone()));
            wiremock::ResponseTemplate::new(201).set_body_json(job)
        };
        let list = move |_: &wiremock::Request| {
            let jobs = jobs.lock().unwrap();
            let mut page: Vec<serde_json::Value> = jobs.iter().map(|(_, j)| j.clone()).collect();
            page.reverse();
            for j in &mut page {
                let at: DateTime<Utc> = serde_json::from_value(j["submitted_at"].clone()).unwrap();
                j["status"] = "SUCCEEDED".into();
                j["dispatched_at"] = serde_json::json!(at + chrono::Duration::seconds(1));
                j["started_at"] = serde_json::json!(at + chrono::Duration::seconds(2));
                j["finished_at"] = serde_json::json!(at + chrono::Duration::seconds(12));
            }
            wiremock::ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"jobs": page, "next_after": null}))
        };
        (post, list)
    }

    fn fast() -> Tuning {
        Tuning {
            poll_interval: Duration::from_millis(20),
            backoff_min: Duration::from_millis(5),
            backoff_max: Duration::from_millis(20),
            unreachable_after: Duration::from_millis(500),
            ..Tuning::default()
        }
    }

    fn mini_trace(dir: &Path) -> PathBuf {
        let path = dir.join("mini.swf");
        let line = |n: u32, submit: u32, run: u32, procs: u32, user: u32| {
            format!("{n} {submit} 0 {run} {procs} -1 -1 {procs} -1 -1 1 {user} -1 -1 -1 -1 -1 -1\n")
        };
        let text = [
            "; MaxProcs: 400\n".to_string(),
            line(1, 0, 10, 88, 1),
            line(2, 5, 20, 2, 2),
            line(3, 5, 10, 500, 3),
            line(4, 10, 10, 16, 1),
        ]
        .concat();
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Answers `GET /healthz` as the service does.
    async fn healthy(server: &wiremock::MockServer) {
        wiremock::Mock::given(wiremock::matchers::path("/healthz"))
            .respond_with(
                wiremock::ResponseTemplate::new(200)
                    .set_body_json(serde_json::json!({"status": "ok"})),
            )
            .with_priority(1)
            .mount(server)
            .await;
    }

    #[tokio::test]
    async fn replays_against_a_fake_service_and_reruns_idempotently() {
        use wiremock::matchers::{method, path};
        let server = wiremock::MockServer::start().await;
        healthy(&server).await;
        let (post, list) = fake_service();
        wiremock::Mock::given(method("POST"))
            .and(path("/v1/jobs"))
            .respond_with(post)
            .mount(&server)
            .await;
        wiremock::Mock::given(method("GET"))
            .and(path("/v1/jobs"))
            .respond_with(list)
            .mount(&server)
            .await;
        let dir = tempfile::tempdir().unwrap();
        let mut a = args();
        a.trace = mini_trace(dir.path());
        a.server = format!("{}/", server.uri());
        a.time_scale = 100.0;
        a.min_runtime_s = 0.0;
        let s = replay_tuned(&a, &fast()).await.unwrap();
        assert_eq!(
            (
                s.jobs,
                s.succeeded,
                s.rejected,
                s.already_submitted,
                s.unsubmitted
            ),
            (3, 3, 1, 0, 0),
            "{}",
            s.table
        );
        assert!(!s.all_succeeded());
        assert!(s.table.contains("rejected: mini-3 (trace job 3, user u3, 5 cores): 422 invalid: resources.cpu: exceeds every cluster"), "{}", s.table);
        assert!(
            s.table.contains(
                "all               3         3      0       0         2.0        2.0      1.20"
            ),
            "{}",
            s.table
        );
        let again = replay_tuned(&a, &fast()).await.unwrap();
        assert_eq!(
            (again.jobs, again.already_submitted, again.succeeded),
            (3, 3, 3)
        );
        let posts = server
            .received_requests()
            .await
            .unwrap()
            .iter()
            .filter(|r| r.method == wiremock::http::Method::POST)
            .count();
        assert_eq!(posts, 4 + 1 + 4, "4 jobs, one 429 retry, 4 again");
        let requests = server.received_requests().await.unwrap();
        let first_post = requests
            .iter()
            .find(|r| r.method == wiremock::http::Method::POST)
            .unwrap();
        let sent: serde_json::Value = serde_json::from_slice(&first_post.body).unwrap();
        assert_eq!(
            sent,
            serde_json::json!({"user": "u1", "entrypoint": "sleep 0.100",
                "resources": {"cpu": 0.88}, "external_id": "mini-1",
                "metadata": {"trace": "mini", "trace_job": "1"}})
        );
    }

    #[tokio::test]
    async fn a_tiny_time_scale_is_refused_before_anything_is_sent() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = args();
        a.trace = mini_trace(dir.path());
        a.time_scale = 1e-300;
        let e = replay_tuned(&a, &fast()).await.unwrap_err().to_string();
        assert!(
            e.contains("--time-scale 0.000") || e.contains("--time-scale 1e-300"),
            "{e}"
        );
        assert!(e.contains("too small"), "{e}");
    }

    #[tokio::test]
    async fn a_refused_token_ends_the_replay() {
        let server = wiremock::MockServer::start().await;
        healthy(&server).await;
        wiremock::Mock::given(wiremock::matchers::any())
            .respond_with(wiremock::ResponseTemplate::new(401).set_body_json(
                serde_json::json!({"error": {"code": "unauthorized", "message": "bad token"}}),
            ))
            .mount(&server)
            .await;
        let dir = tempfile::tempdir().unwrap();
        let mut a = args();
        a.trace = mini_trace(dir.path());
        a.server = server.uri();
        let e = replay_tuned(&a, &fast()).await.unwrap_err();
        assert!(
            format!("{e:#}").contains("401 unauthorized: bad token"),
            "{e:#}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_service_ends_the_replay() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = args();
        a.trace = mini_trace(dir.path());
        a.server = "http://127.0.0.1:9".into();
        let tuning = Tuning {
            backoff_times: 1,
            ..fast()
        };
        // Nothing answers: it says so at once instead of retrying every submission.
        let e = replay_tuned(&a, &tuning).await.unwrap_err().to_string();
        assert!(
            e.contains("cannot reach the fairshare service at http://127.0.0.1:9"),
            "{e}"
        );
    }

    #[test]
    fn tracker_counts_and_never_reopens_a_finished_job() {
        let mut t = Tracker::default();
        let mut done = record("u", "SUCCEEDED", [Some(0.0), None, None, Some(1.0)]);
        t.track(done.clone());
        let mut stale = done.clone();
        stale.status = "RUNNING".into();
        assert!(t.update(stale.clone()));
        t.track(stale);
        assert_eq!(t.progress().finished, 1);
        assert_eq!(t.oldest_open(), None);
        done.id = Uuid::new_v4();
        done.status = "QUEUED".into();
        t.track(done.clone());
        assert_eq!(t.oldest_open(), Some(done.submitted_at));
        let p = t.progress();
        assert_eq!((p.queued, p.finished, p.not_ok), (1, 1, 0));
        assert!(!t.update(record("u", "FAILED", [Some(0.0), None, None, None])));
    }
}
