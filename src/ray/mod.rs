//! Client for Ray's Jobs REST API, served by the Ray dashboard (default port 8265).
//!
//! Reference: Ray's Jobs REST API documentation,
//! <https://docs.ray.io/en/latest/cluster/running-applications/job-submission/rest.html>,
//! and the measured behaviour of Ray 2.60 in `RAY.md`. Endpoints used:
//!
//! | call | endpoint | notes |
//! |---|---|---|
//! | [`RayClient::submit`] | `POST /api/jobs/` | a duplicate `submission_id` is a **500** whose text says "already exists" |
//! | [`RayClient::get_job`] | `GET /api/jobs/{id}` | 404 when Ray does not know the job |
//! | [`RayClient::list_jobs`] | `GET /api/jobs/` | every job, in no fixed order, including driver jobs without a `submission_id` |
//! | [`RayClient::stop_job`] | `POST /api/jobs/{id}/stop` | `{"stopped": bool}` |
//! | [`RayClient::job_logs`] | `GET /api/jobs/{id}/logs` | `{"logs": "..."}` |
//! | [`RayClient::cluster_usage`] | `GET /api/cluster_status` | `data.clusterStatus.loadMetricsReport.usage` |
//!
//! Ray answers errors with `text/plain` bodies, often a whole Python traceback; this
//! module turns them into [`RayError`] with a short message (the exception line).
//!
//! [`submit_idempotent`] is the dispatcher's submit: it never submits a job twice and
//! resolves ambiguous failures (timeout, network error, 5xx) by asking Ray whether the
//! job exists (DESIGN §5).
//!
//! Units throughout: CPU and GPU in cores (`f64`, fractions allowed), memory in bytes,
//! timestamps in milliseconds since the Unix epoch (as Ray reports them).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};

#[cfg(test)]
mod tests;

/// Longest [`RayError::Client`] message kept, in characters. The message ends up in the
/// job's `message` column and in API answers; the useful part of a Ray error (the
/// exception line) is far shorter.
const MAX_MESSAGE_CHARS: usize = 1_000;

/// Longest [`RayError::Server`] body kept, in characters (the tail is kept: a Python
/// traceback puts the exception last). Enough for a log line, bounded so a proxy's
/// HTML error page cannot flood the logs.
const MAX_BODY_CHARS: usize = 4_000;

/// First line of every Python traceback, which is what Ray sends as an error body.
const TRACEBACK_HEADER: &str = "Traceback (most recent call last):";

// ---------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------

/// An amount of each resource the scheduler tracks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RayResources {
    /// CPU, in cores (fractions allowed).
    pub cpu: f64,
    /// GPU, in devices (fractions allowed).
    pub gpu: f64,
    /// Memory, in bytes (Ray's `memory` resource, not the object store).
    pub memory_bytes: f64,
}

/// Capacity and usage of a whole Ray cluster, as reported by `GET /api/cluster_status`.
///
/// Ray counts the reservation of a submitted job (`entrypoint_num_cpus`, ...) as used
/// from submission on, and the report lags by up to about 5 s (about 1 s with
/// `AUTOSCALER_UPDATE_INTERVAL_S=1`): callers add their own outstanding jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClusterUsage {
    /// Resources of all alive nodes (cores, devices, bytes). A resource Ray does not
    /// report (e.g. `GPU` on a cluster without GPUs) is 0.
    pub total: RayResources,
    /// Resources currently reserved by tasks, actors and job entrypoints (cores,
    /// devices, bytes). A resource Ray does not report is 0.
    pub used: RayResources,
}

/// A job to submit with `POST /api/jobs/`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SubmitJob {
    /// Ray's `submission_id`: this service's job id. Ray refuses a second job with the
    /// same id, which is what makes submission idempotent.
    pub submission_id: String,
    /// Shell command Ray runs as the job's driver. May carry secrets: never logged.
    pub entrypoint: String,
    /// Ray runtime environment (`working_dir`, `pip`, `env_vars`, ...), sent as is and
    /// omitted when `None`. May carry secrets: never logged.
    pub runtime_env: Option<serde_json::Value>,
    /// Ray job metadata (string values only, as Ray requires).
    pub metadata: BTreeMap<String, String>,
    /// CPU cores reserved for the entrypoint (`entrypoint_num_cpus`; omitted when 0,
    /// which is Ray's default).
    pub num_cpus: f64,
    /// GPUs reserved for the entrypoint (`entrypoint_num_gpus`; omitted when 0).
    pub num_gpus: f64,
    /// Memory reserved for the entrypoint, in bytes (`entrypoint_memory`; omitted
    /// when 0).
    pub memory_bytes: u64,
}

/// What [`RayClient::submit`] achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// Ray accepted the job just now.
    Submitted,
    /// Ray already has a job with this `submission_id` (a previous attempt got
    /// through): the job is submitted, do not submit it again.
    AlreadyExists,
}

/// Status of a Ray job, as Ray names it.
///
/// Decoding is lenient: a status this client does not know (a newer Ray, a proxy)
/// becomes [`RayJobStatus::Unknown`] with the original text instead of failing the
/// whole answer. `Unknown` is treated as not terminal, so a caller keeps polling.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RayJobStatus {
    /// Accepted, waiting for resources or for its driver to start (`PENDING`).
    Pending,
    /// The driver is running (`RUNNING`).
    Running,
    /// The driver exited with code 0 (`SUCCEEDED`).
    Succeeded,
    /// The driver failed or could not start; see `error_type` (`FAILED`).
    Failed,
    /// Stopped on request (`STOPPED`).
    Stopped,
    /// Any other status text, kept verbatim (empty when Ray sent none).
    Unknown(String),
}

impl RayJobStatus {
    /// Parses Ray's status text (exact, upper-case names); anything else is
    /// [`RayJobStatus::Unknown`].
    pub fn from_ray(status: &str) -> Self {
        match status {
            "PENDING" => Self::Pending,
            "RUNNING" => Self::Running,
            "SUCCEEDED" => Self::Succeeded,
            "FAILED" => Self::Failed,
            "STOPPED" => Self::Stopped,
            other => Self::Unknown(other.to_owned()),
        }
    }

    /// Whether the job has ended for good (`SUCCEEDED`, `FAILED` or `STOPPED`).
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Stopped)
    }

    /// Ray's name of the status (`"PENDING"`, ...); the original text for
    /// [`RayJobStatus::Unknown`].
    pub fn as_str(&self) -> &str {
        match self {
            Self::Pending => "PENDING",
            Self::Running => "RUNNING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::Stopped => "STOPPED",
            Self::Unknown(other) => other,
        }
    }
}

impl std::fmt::Display for RayJobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One job as Ray reports it (`GET /api/jobs/{id}` or an element of `GET /api/jobs/`).
///
/// Decoding is lenient: fields this client does not use are ignored, every field may
/// be missing or `null`, and numbers sent as floats are accepted.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(from = "RawJob")]
pub struct RayJob {
    /// The job's `submission_id`; `None` for driver jobs started outside the Jobs API
    /// (a plain `ray.init()` script), which `GET /api/jobs/` lists too.
    pub submission_id: Option<String>,
    /// Current status.
    pub status: RayJobStatus,
    /// Ray's human-readable status message (e.g. why it failed).
    pub message: Option<String>,
    /// Ray's failure category when `FAILED`, e.g. `JOB_ENTRYPOINT_COMMAND_ERROR` or
    /// `JOB_SUPERVISOR_ACTOR_START_TIMEOUT`.
    pub error_type: Option<String>,
    /// When Ray accepted the job, in milliseconds since the Unix epoch.
    pub start_time: Option<i64>,
    /// When the job reached a terminal status, in milliseconds since the Unix epoch.
    pub end_time: Option<i64>,
    /// Exit code of the entrypoint command, once it has exited.
    pub driver_exit_code: Option<i32>,
}

/// Wire shape of a job: everything optional, unknown fields ignored.
#[derive(Deserialize)]
struct RawJob {
    #[serde(default)]
    submission_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    error_type: Option<String>,
    #[serde(default)]
    start_time: Option<serde_json::Number>,
    #[serde(default)]
    end_time: Option<serde_json::Number>,
    #[serde(default)]
    driver_exit_code: Option<serde_json::Number>,
}

impl From<RawJob> for RayJob {
    fn from(raw: RawJob) -> Self {
        Self {
            submission_id: raw.submission_id,
            status: RayJobStatus::from_ray(raw.status.as_deref().unwrap_or_default()),
            message: raw.message,
            error_type: raw.error_type,
            start_time: raw.start_time.as_ref().and_then(number_to_i64),
            end_time: raw.end_time.as_ref().and_then(number_to_i64),
            driver_exit_code: raw
                .driver_exit_code
                .as_ref()
                .and_then(number_to_i64)
                .and_then(|code| i32::try_from(code).ok()),
        }
    }
}

/// An integer, or a finite float rounded to the nearest integer.
fn number_to_i64(n: &serde_json::Number) -> Option<i64> {
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    // `as` saturates; a finite float beyond i64 is nonsense either way.
    n.as_f64()
        .filter(|f| f.is_finite())
        .map(|f| f.round() as i64)
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Why a call to Ray failed.
///
/// `endpoint` fields name the request (`"GET /api/jobs/{id}"`) without the cluster's
/// address, which may carry credentials; the caller knows which cluster it asked.
#[derive(Debug, thiserror::Error)]
pub enum RayError {
    /// Ray could not be reached or the connection broke (refused, DNS, reset, TLS).
    /// Retryable.
    #[error("cannot reach Ray for {endpoint}")]
    Transport {
        /// The request, e.g. `"POST /api/jobs/"`.
        endpoint: String,
        /// The underlying error (its URL removed).
        #[source]
        source: reqwest::Error,
    },
    /// Ray did not answer within the client's request timeout. The request may still
    /// have had its effect. Retryable.
    #[error("Ray did not answer {endpoint} within {timeout_ms} ms")]
    Timeout {
        /// The request, e.g. `"POST /api/jobs/"`.
        endpoint: String,
        /// The client's request timeout, in milliseconds.
        timeout_ms: u64,
        /// The underlying error (its URL removed).
        #[source]
        source: reqwest::Error,
    },
    /// Ray (or a proxy in front of it) answered with a 5xx other than the
    /// duplicate-submission case, or with an unexpected non-2xx, non-4xx status.
    /// Retryable.
    #[error("Ray failed with HTTP {status}: {}", summarize(.body))]
    Server {
        /// HTTP status code.
        status: u16,
        /// The response body, trimmed and cut to its last 4000 characters.
        body: String,
    },
    /// Ray refused the request for good (HTTP 4xx), e.g. 400 for an invalid field.
    /// Not retryable, except 408 and 429 (which only a proxy sends).
    ///
    /// `status` is 0 only from [`RayClient::new`]: the address is unusable and no
    /// request was sent.
    #[error("Ray refused the request with HTTP {status}: {message}")]
    Client {
        /// HTTP status code (0: invalid address, nothing sent).
        status: u16,
        /// Ray's message: the exception line of its traceback, or its whole text,
        /// at most 1000 characters.
        message: String,
    },
    /// The route itself is not there (yet): 404, 405 or 501 on a collection route
    /// such as `POST /api/jobs/`. A dashboard that is still starting answers so while
    /// its other routes already work (KubeRay users meet it on every head restart).
    /// Means "cluster not ready", never "bad job". Retryable.
    #[error("Ray's {endpoint} route is not ready (HTTP {status}): {message}")]
    NotReady {
        /// The request, e.g. `"POST /api/jobs/"`.
        endpoint: String,
        /// HTTP status code.
        status: u16,
        /// Ray's text, summarized.
        message: String,
    },
    /// Ray answered 2xx with a body this client cannot use. Retryable (a truncated
    /// answer, a proxy's page, a cluster still starting).
    #[error("cannot decode Ray's answer to {endpoint}: {detail}")]
    Decode {
        /// The request, e.g. `"GET /api/jobs/"`.
        endpoint: String,
        /// What was wrong with the body.
        detail: String,
    },
}

impl RayError {
    /// Whether trying the same request again later may succeed: transport errors,
    /// timeouts, 5xx, undecodable answers, and 408/429. Other 4xx are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Transport { .. } | Self::Timeout { .. } | Self::Server { .. } => true,
            Self::NotReady { .. } => true,
            Self::Decode { .. } => true,
            Self::Client { status, .. } => matches!(*status, 408 | 429),
        }
    }

    /// Short, stable name of the variant for metrics labels: `"transport"`,
    /// `"timeout"`, `"server"`, `"client"` or `"decode"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Transport { .. } => "transport",
            Self::Timeout { .. } => "timeout",
            Self::Server { .. } => "server",
            Self::Client { .. } => "client",
            Self::NotReady { .. } => "not_ready",
            Self::Decode { .. } => "decode",
        }
    }
}

/// The error and all its sources, joined with `": "` (for logs and stored messages).
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // Some layers repeat their source's text; say it once.
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Ray's error text reduced to its message: the exception line(s) at the end of a
/// Python traceback, or the whole text; trimmed, at most [`MAX_MESSAGE_CHARS`].
fn summarize(body: &str) -> String {
    let body = body.trim();
    let message = if body.starts_with(TRACEBACK_HEADER) {
        // Frames are indented; the exception that ended the traceback is not. Nested
        // tracebacks (Ray's head quoting its agent) end the same way.
        let lines: Vec<&str> = body.lines().collect();
        match lines
            .iter()
            .rposition(|line| line.starts_with(' ') || line.starts_with('\t'))
        {
            Some(last_frame) if last_frame + 1 < lines.len() => lines[last_frame + 1..]
                .iter()
                .map(|line| line.trim())
                .filter(|line| !line.is_empty() && *line != ".")
                .collect::<Vec<_>>()
                .join(" "),
            _ => body.to_owned(),
        }
    } else {
        body.to_owned()
    };
    truncate_head(&message, MAX_MESSAGE_CHARS)
}

/// The first `max` characters of `text`, with `…` when cut.
fn truncate_head(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The last `max` characters of `text`, with `…` when cut.
fn truncate_tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    match text.char_indices().nth(count - max) {
        Some((cut, _)) => format!("…{}", &text[cut..]),
        None => text.to_owned(),
    }
}

// ---------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------

/// Client of one Ray cluster's Jobs REST API. Cheap to clone (shares one connection
/// pool). Every request, body included, is bounded by the timeout given to
/// [`RayClient::new`].
#[derive(Clone, Debug)]
pub struct RayClient {
    http: reqwest::Client,
    base: Url,
    address: String,
    timeout: Duration,
}

/// Body of `POST /api/jobs/` (field names are Ray's).
#[derive(Serialize)]
struct SubmitBody<'a> {
    entrypoint: &'a str,
    submission_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime_env: Option<&'a serde_json::Value>,
    metadata: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "is_zero_f64")]
    entrypoint_num_cpus: f64,
    #[serde(skip_serializing_if = "is_zero_f64")]
    entrypoint_num_gpus: f64,
    #[serde(skip_serializing_if = "is_zero_u64")]
    entrypoint_memory: u64,
}

fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

/// Answer to `POST /api/jobs/` (`{"job_id", "submission_id"}`); decoded to check that
/// Ray (not some proxy page) answered, `submission_id` logged at debug level.
#[derive(Deserialize)]
struct SubmitAnswer {
    #[serde(default)]
    submission_id: Option<String>,
}

/// Answer to `POST /api/jobs/{id}/stop`.
#[derive(Deserialize)]
struct StopAnswer {
    stopped: bool,
}

/// Answer to `GET /api/jobs/{id}/logs`.
#[derive(Deserialize)]
struct LogsAnswer {
    #[serde(default)]
    logs: Option<String>,
}

impl RayClient {
    /// A client for the Ray dashboard at `address` (base URL, e.g.
    /// `"http://127.0.0.1:8265"`; a trailing slash and a path prefix are allowed).
    /// `request_timeout` bounds each request from connect to the end of the body.
    ///
    /// Fails with [`RayError::Client`] (status 0) when `address` is not an `http://`
    /// or `https://` URL, and with [`RayError::Transport`] when the HTTP client cannot
    /// be built (TLS initialisation). No request is sent.
    pub fn new(address: &str, request_timeout: Duration) -> Result<Self, RayError> {
        let address = address.trim().trim_end_matches('/');
        let invalid = |reason: String| RayError::Client {
            status: 0,
            message: format!("invalid Ray address {address:?}: {reason}"),
        };
        let base = Url::parse(address).map_err(|e| invalid(e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(invalid("expected an http:// or https:// URL".to_owned()));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(invalid("a query or fragment is not allowed".to_owned()));
        }
        let http = reqwest::Client::builder()
            .timeout(request_timeout)
            .build()
            .map_err(|source| RayError::Transport {
                endpoint: "client setup".to_owned(),
                source: source.without_url(),
            })?;
        Ok(Self {
            http,
            base,
            address: address.to_owned(),
            timeout: request_timeout,
        })
    }

    /// The dashboard base URL this client talks to, without a trailing slash.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Submits `job` with `POST /api/jobs/`.
    ///
    /// A 500 whose text says "already exists" (Ray's answer to a duplicate
    /// `submission_id`) is `Ok(SubmitOutcome::AlreadyExists)`. Does not retry; see
    /// [`submit_idempotent`].
    pub async fn submit(&self, job: &SubmitJob) -> Result<SubmitOutcome, RayError> {
        let body = SubmitBody {
            entrypoint: &job.entrypoint,
            submission_id: &job.submission_id,
            runtime_env: job.runtime_env.as_ref(),
            metadata: &job.metadata,
            entrypoint_num_cpus: job.num_cpus,
            entrypoint_num_gpus: job.num_gpus,
            entrypoint_memory: job.memory_bytes,
        };
        let endpoint = "POST /api/jobs/";
        let request = self.http.post(self.url(&["api", "jobs", ""])).json(&body);
        let (status, bytes) = self.execute(request, endpoint).await?;
        if status.is_success() {
            let answer: SubmitAnswer = decode(endpoint, &bytes)?;
            tracing::debug!(
                submission_id = %job.submission_id,
                ray_submission_id = answer.submission_id.as_deref().unwrap_or_default(),
                "Ray accepted the job"
            );
            return Ok(SubmitOutcome::Submitted);
        }
        let text = String::from_utf8_lossy(&bytes);
        if status == StatusCode::INTERNAL_SERVER_ERROR && text.contains("already exists") {
            return Ok(SubmitOutcome::AlreadyExists);
        }
        Err(classify(endpoint, status, &text))
    }

    /// The job with this `submission_id` (`GET /api/jobs/{id}`); `None` when Ray
    /// answers 404 (it does not know the job).
    pub async fn get_job(&self, submission_id: &str) -> Result<Option<RayJob>, RayError> {
        let endpoint = format!("GET /api/jobs/{submission_id}");
        let request = self.http.get(self.url(&["api", "jobs", submission_id]));
        let (status, bytes) = self.execute(request, &endpoint).await?;
        match status {
            s if s.is_success() => decode(&endpoint, &bytes).map(Some),
            StatusCode::NOT_FOUND => Ok(None),
            s => Err(status_error(s, &String::from_utf8_lossy(&bytes))),
        }
    }

    /// Every job Ray knows (`GET /api/jobs/`), in no particular order, including
    /// driver jobs without a `submission_id`.
    ///
    /// One malformed element fails the whole call with [`RayError::Decode`] rather than
    /// being skipped: a skipped job would look lost to the monitor. Unknown statuses
    /// and fields do not count as malformed.
    pub async fn list_jobs(&self) -> Result<Vec<RayJob>, RayError> {
        let endpoint = "GET /api/jobs/";
        let request = self.http.get(self.url(&["api", "jobs", ""]));
        let (status, bytes) = self.execute(request, endpoint).await?;
        if !status.is_success() {
            return Err(classify(endpoint, status, &String::from_utf8_lossy(&bytes)));
        }
        decode(endpoint, &bytes)
    }

    /// Asks Ray to stop the job (`POST /api/jobs/{id}/stop`). `Ok(true)` when Ray
    /// stopped it, `Ok(false)` when it was already terminal or Ray does not know it
    /// (404). A job still PENDING in Ray is only stopped once resources free up.
    pub async fn stop_job(&self, submission_id: &str) -> Result<bool, RayError> {
        let endpoint = format!("POST /api/jobs/{submission_id}/stop");
        let request = self
            .http
            .post(self.url(&["api", "jobs", submission_id, "stop"]));
        let (status, bytes) = self.execute(request, &endpoint).await?;
        match status {
            s if s.is_success() => decode::<StopAnswer>(&endpoint, &bytes).map(|a| a.stopped),
            StatusCode::NOT_FOUND => Ok(false),
            s => Err(status_error(s, &String::from_utf8_lossy(&bytes))),
        }
    }

    /// The job's whole driver log so far (`GET /api/jobs/{id}/logs`); `None` when Ray
    /// does not know the job (404). A `null` log is an empty string.
    pub async fn job_logs(&self, submission_id: &str) -> Result<Option<String>, RayError> {
        let endpoint = format!("GET /api/jobs/{submission_id}/logs");
        let request = self
            .http
            .get(self.url(&["api", "jobs", submission_id, "logs"]));
        let (status, bytes) = self.execute(request, &endpoint).await?;
        match status {
            s if s.is_success() => {
                decode::<LogsAnswer>(&endpoint, &bytes).map(|a| Some(a.logs.unwrap_or_default()))
            }
            StatusCode::NOT_FOUND => Ok(None),
            s => Err(status_error(s, &String::from_utf8_lossy(&bytes))),
        }
    }

    /// Capacity and usage of the cluster (`GET /api/cluster_status`), from
    /// `data.clusterStatus.loadMetricsReport.usage` = `{"CPU": [used, total], "GPU":
    /// [..], "memory": [..], ...}` (cores, devices, bytes). A resource absent from the
    /// report is 0.
    ///
    /// Right after the head starts, Ray reports `clusterStatus: null` until its
    /// autoscaler has written a first report: that is a [`RayError::Decode`] (capacity
    /// unknown), not a cluster of size 0.
    pub async fn cluster_usage(&self) -> Result<ClusterUsage, RayError> {
        let endpoint = "GET /api/cluster_status";
        let request = self.http.get(self.url(&["api", "cluster_status"]));
        let (status, bytes) = self.execute(request, endpoint).await?;
        if !status.is_success() {
            return Err(status_error(status, &String::from_utf8_lossy(&bytes)));
        }
        let answer: serde_json::Value = decode(endpoint, &bytes)?;
        let usage = answer
            .pointer("/data/clusterStatus/loadMetricsReport/usage")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| RayError::Decode {
                endpoint: endpoint.to_owned(),
                detail: "no data.clusterStatus.loadMetricsReport.usage object (the \
                         autoscaler has not reported yet?)"
                    .to_owned(),
            })?;
        let pair = |key: &str| -> Result<(f64, f64), RayError> {
            let Some(value) = usage.get(key) else {
                return Ok((0.0, 0.0));
            };
            match value.as_array().map(Vec::as_slice) {
                Some([used, total]) => match (used.as_f64(), total.as_f64()) {
                    (Some(used), Some(total)) => Ok((used, total)),
                    _ => Err(bad_usage(endpoint, key, value)),
                },
                _ => Err(bad_usage(endpoint, key, value)),
            }
        };
        let (cpu_used, cpu_total) = pair("CPU")?;
        let (gpu_used, gpu_total) = pair("GPU")?;
        let (mem_used, mem_total) = pair("memory")?;
        Ok(ClusterUsage {
            total: RayResources {
                cpu: cpu_total,
                gpu: gpu_total,
                memory_bytes: mem_total,
            },
            used: RayResources {
                cpu: cpu_used,
                gpu: gpu_used,
                memory_bytes: mem_used,
            },
        })
    }

    /// `base` + the given path segments, each percent-encoded. An empty last segment
    /// gives a trailing slash (Ray's routes `/api/jobs/` need it).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        // `new` rejected cannot-be-a-base URLs, so this always succeeds.
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// Sends `request` and reads the whole body. Only transport errors and timeouts
    /// are errors here; the caller interprets the status.
    async fn execute(
        &self,
        request: reqwest::RequestBuilder,
        endpoint: &str,
    ) -> Result<(StatusCode, Vec<u8>), RayError> {
        let started = Instant::now();
        let result = async {
            let response = request.send().await?;
            let status = response.status();
            let bytes = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, bytes.to_vec()))
        }
        .await;
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match result {
            Ok((status, bytes)) => {
                tracing::debug!(
                    endpoint,
                    status = status.as_u16(),
                    elapsed_ms,
                    "Ray answered"
                );
                Ok((status, bytes))
            }
            Err(err) => {
                let err = self.request_error(endpoint, err);
                tracing::debug!(endpoint, elapsed_ms, error = %error_chain(&err), "Ray request failed");
                Err(err)
            }
        }
    }

    fn request_error(&self, endpoint: &str, err: reqwest::Error) -> RayError {
        let endpoint = endpoint.to_owned();
        if err.is_timeout() {
            RayError::Timeout {
                endpoint,
                timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
                source: err.without_url(),
            }
        } else {
            RayError::Transport {
                endpoint,
                source: err.without_url(),
            }
        }
    }
}

/// Every non-2xx answer of Ray is classified here (DESIGN §5 lists the classes):
///
/// | answer | class | the job |
/// |---|---|---|
/// | 2xx | success | — |
/// | 500 "already exists" on submit | duplicate (handled by [`RayClient::submit`]) | submitted |
/// | 404 on `GET`/stop/logs of one job | that job is unknown (handled by the caller) | — |
/// | 404, 405, 501 on `POST /api/jobs/` (the route itself) | [`RayError::NotReady`] | back to QUEUED, cluster backs off |
/// | 408, 429 | [`RayError::Client`], retryable | back to QUEUED after the budget |
/// | other 4xx (400, 413, 422, …) | [`RayError::Client`], final | FAILED with Ray's message |
/// | other 5xx | [`RayError::Server`], retryable | back to QUEUED after the budget |
///
/// Transport errors, timeouts and undecodable 2xx bodies are retryable too.
pub fn classify(endpoint: &str, status: StatusCode, body: &str) -> RayError {
    let route_missing = matches!(status.as_u16(), 404 | 405 | 501);
    if route_missing && endpoint.ends_with('/') {
        return RayError::NotReady {
            endpoint: endpoint.to_owned(),
            status: status.as_u16(),
            message: summarize(body),
        };
    }
    status_error(status, body)
}

/// The error for a non-2xx status that the endpoint gives no special meaning to.
fn status_error(status: StatusCode, body: &str) -> RayError {
    if status.is_client_error() {
        RayError::Client {
            status: status.as_u16(),
            message: summarize(body),
        }
    } else {
        RayError::Server {
            status: status.as_u16(),
            body: truncate_tail(body.trim(), MAX_BODY_CHARS),
        }
    }
}

fn decode<T: serde::de::DeserializeOwned>(endpoint: &str, bytes: &[u8]) -> Result<T, RayError> {
    serde_json::from_slice(bytes).map_err(|e| RayError::Decode {
        endpoint: endpoint.to_owned(),
        detail: e.to_string(),
    })
}

fn bad_usage(endpoint: &str, key: &str, value: &serde_json::Value) -> RayError {
    RayError::Decode {
        endpoint: endpoint.to_owned(),
        detail: format!("usage.{key} is not [used, total]: {value}"),
    }
}

// ---------------------------------------------------------------------------
// Idempotent submission (DESIGN §5)
// ---------------------------------------------------------------------------

/// How hard [`submit_idempotent`] tries before giving up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBudget {
    /// POST attempts in total, the first one included (0 counts as 1).
    pub attempts: u32,
    /// Wait before the second attempt; doubles after each further attempt.
    pub initial_backoff: Duration,
    /// Longest wait between two attempts.
    pub max_backoff: Duration,
}

impl Default for RetryBudget {
    /// 5 attempts, waits of 200 ms, 400 ms, 800 ms, 1.6 s (capped at 5 s): about 3 s
    /// of waiting plus request time before a job goes back to its queue, so a Ray
    /// restart of a few seconds does not cost the job its turn.
    fn default() -> Self {
        Self {
            attempts: 5,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// What [`submit_idempotent`] achieved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DispatchOutcome {
    /// Ray has the job. `already_existed`: Ray already had it when we asked (an earlier
    /// attempt, or a POST whose answer was lost, got through) rather than accepting it
    /// on a clean 2xx. `attempts`: POSTs sent (1 or more).
    Submitted {
        /// Ray already had the job (duplicate `submission_id`, or found by `GET` after
        /// an ambiguous failure).
        already_existed: bool,
        /// Number of POST attempts made, the successful one included.
        attempts: u32,
    },
    /// Ray refused the job for good (HTTP 4xx other than 408/429); the job should be
    /// FAILED with this message. The refusal is not retried.
    Rejected {
        /// Ray's message (the exception line of its traceback), at most 1000 chars.
        message: String,
    },
    /// Every attempt failed ambiguously and Ray does not know the job: the job goes
    /// back to its queue and the cluster is suspect.
    GaveUp {
        /// The last attempt's error, with its causes, and what the lookup found.
        last_error: String,
        /// Number of POST attempts made.
        attempts: u32,
    },
}

/// Why one submit attempt did not end with Ray holding the job.
#[derive(Debug)]
enum AttemptError {
    /// Ray refused the job for good (a non-retryable 4xx).
    Rejected(RayError),
    /// The POST failed ambiguously and the lookup did not find the job.
    Unresolved {
        submit: RayError,
        /// `None`: Ray answered 404 to the lookup. `Some`: the lookup failed too.
        lookup: Option<RayError>,
    },
}

impl std::fmt::Display for AttemptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Rejected(err) => f.write_str(&error_chain(err)),
            Self::Unresolved {
                submit,
                lookup: None,
            } => write!(f, "{}; GET found no such job", error_chain(submit)),
            Self::Unresolved {
                submit,
                lookup: Some(lookup),
            } => write!(
                f,
                "{}; GET to check failed too: {}",
                error_chain(submit),
                error_chain(lookup)
            ),
        }
    }
}

/// One attempt: POST; on an ambiguous failure, `GET /api/jobs/{id}` decides.
/// `Ok(already_existed)` when Ray holds the job.
async fn submit_attempt(client: &RayClient, job: &SubmitJob) -> Result<bool, AttemptError> {
    match client.submit(job).await {
        Ok(SubmitOutcome::Submitted) => Ok(false),
        Ok(SubmitOutcome::AlreadyExists) => Ok(true),
        Err(err) if !err.is_retryable() => Err(AttemptError::Rejected(err)),
        Err(submit) => match client.get_job(&job.submission_id).await {
            Ok(Some(_)) => Ok(true),
            Ok(None) => Err(AttemptError::Unresolved {
                submit,
                lookup: None,
            }),
            Err(lookup) => Err(AttemptError::Unresolved {
                submit,
                lookup: Some(lookup),
            }),
        },
    }
}

/// Submits `job` so that Ray ends up with it at most once (DESIGN §5).
///
/// Each attempt POSTs the job. A clean 2xx is `Submitted{already_existed: false}`;
/// Ray's duplicate-`submission_id` 500 is `Submitted{already_existed: true}`; a 4xx
/// (other than 408/429) is `Rejected` at once. Any other failure (network error,
/// timeout, other 5xx, undecodable answer) is settled by `GET /api/jobs/{id}`: if
/// Ray has the job it is `Submitted{already_existed: true}`; if not (404 or the GET
/// failed) the POST is retried after an exponential backoff (backon's
/// `ExponentialBuilder`, no jitter, delays from `budget`). Once any answer shows the
/// job exists, nothing is POSTed again. After `budget.attempts` POSTs it is `GaveUp`.
///
/// Each retry is logged at `warn` with `submission_id`, `attempt` and `error`; the
/// entrypoint and runtime_env are never logged.
#[tracing::instrument(level = "debug", skip_all, fields(submission_id = %job.submission_id))]
pub async fn submit_idempotent(
    client: &RayClient,
    job: &SubmitJob,
    budget: &RetryBudget,
) -> DispatchOutcome {
    let attempts = AtomicU32::new(0);
    let retries = usize::try_from(budget.attempts.max(1) - 1).unwrap_or(usize::MAX);
    let backoff = ExponentialBuilder::default()
        .with_min_delay(budget.initial_backoff)
        .with_max_delay(budget.max_backoff)
        .with_max_times(retries);
    let result = (|| {
        attempts.fetch_add(1, Ordering::Relaxed);
        submit_attempt(client, job)
    })
    .retry(backoff)
    .when(|err| matches!(err, AttemptError::Unresolved { .. }))
    .notify(|err, delay| {
        tracing::warn!(
            submission_id = %job.submission_id,
            attempt = attempts.load(Ordering::Relaxed),
            error = %err,
            retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            "submitting the job to Ray failed; retrying"
        );
    })
    .await;
    let attempts = attempts.load(Ordering::Relaxed);
    match result {
        Ok(already_existed) => DispatchOutcome::Submitted {
            already_existed,
            attempts,
        },
        Err(AttemptError::Rejected(err)) => DispatchOutcome::Rejected {
            message: match err {
                RayError::Client { message, .. } => message,
                other => error_chain(&other),
            },
        },
        Err(err @ AttemptError::Unresolved { .. }) => DispatchOutcome::GaveUp {
            last_error: err.to_string(),
            attempts,
        },
    }
}
