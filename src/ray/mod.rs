//! Client for Ray's Jobs REST API, served by the Ray dashboard (default port 8265).
//!
//! Reference: Ray's Jobs REST API documentation,
//! <https://docs.ray.io/en/latest/cluster/running-applications/job-submission/rest.html>,
//! and the measured behaviour of Ray 2.60 in `docs/ray.md`. Endpoints used:
//!
//! | call | endpoint | notes |
//! |---|---|---|
//! | [`RayClient::submit`] | `POST /api/jobs/` | a duplicate `submission_id` is a **500** whose text says "already exists" |
//! | [`RayClient::get_job`] | `GET /api/jobs/{id}` | 404 when Ray does not know the job |
//! | [`RayClient::list_jobs`] | `GET /api/jobs/` | every job, in no fixed order, including driver jobs without a `submission_id` |
//! | [`RayClient::stop_job`] | `POST /api/jobs/{id}/stop` | `{"stopped": bool}` |
//! | [`RayClient::job_logs`] | `GET /api/jobs/{id}/logs` | `{"logs": "..."}` |
//! | [`RayClient::cluster_usage`] | `GET /api/cluster_status` | `data.clusterStatus.loadMetricsReport.usage` |
//! | [`RayClient::job_details`] | `GET /api/jobs/{id}` | undecoded, for `/api/` to pass through |
//! | [`RayClient::delete_job`] | `DELETE /api/jobs/{id}` | finished jobs only |
//! | [`RayClient::package_exists`], [`RayClient::upload_package`] | `GET`/`PUT /api/packages/{protocol}/{name}` | [`packages`] |
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

use serde::Deserialize;

pub mod auth;
mod client;
mod error;
pub mod notify;
pub mod packages;
pub mod state;
mod submit;
#[cfg(test)]
mod tests;

pub use client::RayClient;
pub use error::{error_chain, RayError};
#[cfg(test)]
use error::{summarize, truncate_tail};
pub use submit::{submit_idempotent, DispatchOutcome, RetryBudget};

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

/// An amount of each resource the scheduler tracks: the policy's [`Resources`] (CPU
/// in cores, GPU in devices, memory in bytes — Ray's `memory` resource, not the
/// object store), one type from the policy to Ray.
///
/// [`Resources`]: crate::policy::Resources
pub use crate::policy::Resources as RayResources;

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
    /// Nodes Ray's autoscaler is adding: launches asked for and nodes started but not
    /// yet counted (`autoscalerReport.pendingLaunches` counts plus `pendingNodes`
    /// entries; docs/ray.md, "Autoscaling clusters"). 0 without an autoscaler.
    pub nodes_starting: u32,
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
    /// What the entrypoint reserves: cores (`entrypoint_num_cpus`), GPUs
    /// (`entrypoint_num_gpus`) and bytes (`entrypoint_memory`, sent as a whole
    /// number); each omitted when 0, which is Ray's default.
    pub resources: RayResources,
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
    /// The driver's Ray job id (hex, e.g. `02000000`) once the driver has connected:
    /// the `job_id` its tasks and actors carry in Ray's State API.
    pub job_id: Option<String>,
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
    job_id: Option<String>,
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
            job_id: raw.job_id,
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
