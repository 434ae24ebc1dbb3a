//! `/v1/jobs`: submit, read, list, cancel, logs.

use std::collections::BTreeMap;

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use entity::{job, JobStatus};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::body::{parse_json, parse_query, read_body};
use super::error::{ApiError, ErrorBody};
use super::AppState;
use crate::actors::{Cancelled, Scheduler};
use crate::config::Role;
use crate::store::{self, Intake, JobFilter, NewJob};

/// Longest accepted user id, in characters.
pub const MAX_USER_LEN: usize = 128;
/// Longest accepted entrypoint, in bytes (Ray passes it to a shell; 64 KiB is far more
/// than any real command line).
pub const MAX_ENTRYPOINT_BYTES: usize = 65_536;
/// Longest accepted external id, in characters.
pub const MAX_EXTERNAL_ID_LEN: usize = 256;
/// Accepted priority range (higher runs first within the user's queue).
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -1000..=1000;
/// Most metadata entries, and longest key and value, in characters.
pub const MAX_METADATA_ENTRIES: usize = 64;
pub const MAX_METADATA_KEY_LEN: usize = 128;
pub const MAX_METADATA_VALUE_LEN: usize = 4096;
/// Largest accepted runtime_env, serialized, in bytes.
pub const MAX_RUNTIME_ENV_BYTES: usize = 262_144;
/// Longest accepted max_runtime_s: one year, in seconds.
pub const MAX_RUNTIME_S: i64 = 31_536_000;
/// Largest accepted resource request per job: cores and GPUs (well past any cluster).
pub const MAX_CORES: f64 = 1.0e6;
/// Default and largest page size of `GET /v1/jobs`.
pub const DEFAULT_PAGE: u64 = 100;
pub const MAX_PAGE: u64 = 1000;

/// Resources a job asks for. Absent fields take their defaults.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourcesIn {
    /// Cores, finite, >= 0 (default 1).
    pub cpu: Option<f64>,
    /// GPUs, finite, >= 0 (default 0).
    pub gpu: Option<f64>,
    /// Bytes (default 0).
    pub memory_bytes: Option<u64>,
}

/// Resources as stored and shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct ResourcesOut {
    /// Cores.
    pub cpu: f64,
    /// GPUs.
    pub gpu: f64,
    /// Bytes.
    pub memory_bytes: u64,
}

/// `POST /v1/jobs` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// The gateway's user id: 1–128 characters, no whitespace or control characters.
    pub user: String,
    /// The command Ray runs, 1–65536 bytes.
    pub entrypoint: String,
    /// Ray runtime_env, passed through as is (a JSON object).
    #[schema(value_type = Option<Object>)]
    pub runtime_env: Option<serde_json::Value>,
    pub resources: Option<ResourcesIn>,
    /// -1000..=1000, default 0; higher runs first within the user's queue.
    pub priority: Option<i32>,
    /// String to string, passed to Ray as job metadata.
    pub metadata: Option<BTreeMap<String, String>>,
    /// The gateway's id for this job; a retry with the same (user, external_id) returns
    /// the existing job with 200.
    pub external_id: Option<String>,
    /// Seconds; the job is stopped when it runs longer (default: scheduler.default_max_runtime).
    pub max_runtime_s: Option<i64>,
}

/// A job as the API shows it. `runtime_env` is not shown: it may hold secrets.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobView {
    pub id: Uuid,
    pub user: String,
    pub external_id: Option<String>,
    /// QUEUED, DISPATCHING, PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED.
    #[schema(value_type = String)]
    pub status: JobStatus,
    pub priority: i32,
    pub entrypoint: String,
    pub resources: ResourcesOut,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
    pub max_runtime_s: Option<i64>,
    pub submitted_at: DateTime<Utc>,
    pub dispatched_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The Ray cluster it was dispatched to.
    pub cluster: Option<String>,
    /// Why it ended, or what Ray said.
    pub message: Option<String>,
    /// For a QUEUED job: why it is not running yet, from the last scheduling cycle.
    pub pending_reason: Option<String>,
    /// For a QUEUED job: 1-based position within its user's queue.
    pub queue_position: Option<u64>,
}

impl JobView {
    /// The view of `j` without the queue fields.
    pub fn from_model(j: job::Model) -> Self {
        JobView {
            id: j.id,
            user: j.user_id,
            external_id: j.external_id,
            status: j.status,
            priority: j.priority,
            entrypoint: j.entrypoint,
            resources: ResourcesOut {
                cpu: j.cpu,
                gpu: j.gpu,
                memory_bytes: j.memory_bytes.max(0) as u64,
            },
            metadata: j.metadata,
            max_runtime_s: j.max_runtime_s,
            submitted_at: j.submitted_at,
            dispatched_at: j.dispatched_at,
            started_at: j.started_at,
            finished_at: j.finished_at,
            cluster: j.cluster,
            message: j.message,
            pending_reason: None,
            queue_position: None,
        }
    }
}

/// A page of jobs.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobPage {
    pub jobs: Vec<JobView>,
    /// Pass as `after` to get the next page; null on the last page.
    pub next_after: Option<Uuid>,
}

/// A job's logs from Ray.
#[derive(Debug, Serialize, ToSchema)]
pub struct LogsView {
    pub id: Uuid,
    pub logs: String,
}

/// Zero-width and bidirectional-control characters: they would let two user ids that
/// look the same on screen be different users.
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}' | '\u{00AD}')
}

/// Checks a user id (also used by the users API).
pub fn validate_user_id(field: &str, user: &str) -> Result<(), ApiError> {
    if user.is_empty() {
        return Err(ApiError::invalid(field, "must not be empty"));
    }
    if user.chars().count() > MAX_USER_LEN {
        return Err(ApiError::invalid(
            field,
            format!("must be at most {MAX_USER_LEN} characters"),
        ));
    }
    if user
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || is_invisible(c))
    {
        return Err(ApiError::invalid(
            field,
            "must not contain whitespace, control or invisible (zero-width) characters",
        ));
    }
    Ok(())
}

/// Ray's resource granularity: fractional amounts have at most 4 decimal places
/// (Ray refuses `num_cpus` finer than 0.0001).
pub const RESOURCE_STEP: f64 = 0.0001;

/// Checks a resource amount: finite, >= 0, at most [`MAX_CORES`], a multiple of
/// [`RESOURCE_STEP`].
pub fn validate_amount(field: &str, v: f64) -> Result<(), ApiError> {
    if !v.is_finite() {
        return Err(ApiError::invalid(field, "must be a finite number"));
    }
    if v < 0.0 {
        return Err(ApiError::invalid(field, "must be >= 0"));
    }
    if v > MAX_CORES {
        return Err(ApiError::invalid(
            field,
            format!("must be at most {MAX_CORES}"),
        ));
    }
    let steps = v / RESOURCE_STEP;
    // Tolerance for binary floating point: 1e-6 of a step, relatively more for huge values.
    let off_grid = (steps - steps.round()).abs() > 1e-6_f64.max(steps.abs() * 1e-12);
    if off_grid || (v > 0.0 && steps.round() == 0.0) {
        return Err(ApiError::invalid(
            field,
            "must have at most 4 decimal places (Ray's resource precision is 0.0001)",
        ));
    }
    Ok(())
}

impl SubmitRequest {
    /// Validates every field and applies defaults. Errors name the field (422).
    pub fn into_new_job(self) -> Result<NewJob, ApiError> {
        validate_user_id("user", &self.user)?;
        if self.entrypoint.trim().is_empty() {
            return Err(ApiError::invalid("entrypoint", "must not be empty"));
        }
        if self.entrypoint.len() > MAX_ENTRYPOINT_BYTES {
            return Err(ApiError::invalid(
                "entrypoint",
                format!("must be at most {MAX_ENTRYPOINT_BYTES} bytes"),
            ));
        }
        if self.entrypoint.contains('\0') {
            return Err(ApiError::invalid(
                "entrypoint",
                "must not contain NUL characters",
            ));
        }
        let r = self.resources.unwrap_or_default();
        let cpu = r.cpu.unwrap_or(1.0);
        let gpu = r.gpu.unwrap_or(0.0);
        validate_amount("resources.cpu", cpu)?;
        validate_amount("resources.gpu", gpu)?;
        if cpu <= 0.0 && gpu <= 0.0 {
            return Err(ApiError::invalid(
                "resources.cpu",
                "a job needs cpu > 0 or gpu > 0",
            ));
        }
        let memory = r.memory_bytes.unwrap_or(0);
        let memory_bytes = i64::try_from(memory)
            .map_err(|_| ApiError::invalid("resources.memory_bytes", "is too large"))?;
        let priority = self.priority.unwrap_or(0);
        if !PRIORITY_RANGE.contains(&priority) {
            return Err(ApiError::invalid(
                "priority",
                format!(
                    "must be between {} and {}",
                    PRIORITY_RANGE.start(),
                    PRIORITY_RANGE.end()
                ),
            ));
        }
        if let Some(env) = &self.runtime_env {
            if !env.is_object() {
                return Err(ApiError::invalid("runtime_env", "must be a JSON object"));
            }
            if env.to_string().len() > MAX_RUNTIME_ENV_BYTES {
                return Err(ApiError::invalid(
                    "runtime_env",
                    format!("must be at most {MAX_RUNTIME_ENV_BYTES} bytes"),
                ));
            }
        }
        if let Some(md) = &self.metadata {
            if md.len() > MAX_METADATA_ENTRIES {
                return Err(ApiError::invalid(
                    "metadata",
                    format!("must have at most {MAX_METADATA_ENTRIES} entries"),
                ));
            }
            for (k, v) in md {
                if k.is_empty() || k.chars().count() > MAX_METADATA_KEY_LEN {
                    return Err(ApiError::invalid(
                        format!("metadata.{k}"),
                        format!("keys must be 1 to {MAX_METADATA_KEY_LEN} characters"),
                    ));
                }
                if v.chars().count() > MAX_METADATA_VALUE_LEN {
                    return Err(ApiError::invalid(
                        format!("metadata.{k}"),
                        format!("values must be at most {MAX_METADATA_VALUE_LEN} characters"),
                    ));
                }
            }
        }
        if let Some(ext) = &self.external_id {
            if ext.is_empty() || ext.chars().count() > MAX_EXTERNAL_ID_LEN {
                return Err(ApiError::invalid(
                    "external_id",
                    format!("must be 1 to {MAX_EXTERNAL_ID_LEN} characters"),
                ));
            }
        }
        if let Some(s) = self.max_runtime_s {
            if !(1..=MAX_RUNTIME_S).contains(&s) {
                return Err(ApiError::invalid(
                    "max_runtime_s",
                    format!("must be between 1 and {MAX_RUNTIME_S} seconds"),
                ));
            }
        }
        Ok(NewJob {
            user: self.user,
            external_id: self.external_id,
            priority,
            entrypoint: self.entrypoint,
            runtime_env: self.runtime_env,
            metadata: self
                .metadata
                .map(|m| serde_json::to_value(m).unwrap_or_default()),
            cpu,
            gpu,
            memory_bytes,
            max_runtime_s: self.max_runtime_s,
        })
    }
}

/// Parses a job id path segment; anything but a UUID cannot name a job (404).
fn parse_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw)
        .map_err(|_| ApiError::NotFound(format!("no job with id {raw:?} (job ids are UUIDs)")))
}

async fn load(state: &AppState, raw: &str) -> Result<job::Model, ApiError> {
    let id = parse_id(raw)?;
    store::get_job(&state.db, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no job with id {id}")))
}

/// Adds queue position and pending reason to a QUEUED job's view.
async fn view(state: &AppState, j: job::Model) -> Result<JobView, ApiError> {
    let queued = j.status == JobStatus::Queued;
    let position = if queued {
        Some(store::queue_position(&state.db, &j).await?)
    } else {
        None
    };
    let id = j.id;
    let mut v = JobView::from_model(j);
    v.queue_position = position;
    if queued {
        if let Some(s) = state.scheduler() {
            v.pending_reason = s.pending_reason(id).await;
        }
        if v.pending_reason.is_none() {
            if let Some(ahead) = position.filter(|p| *p > 1).map(|p| p - 1) {
                let jobs = if ahead == 1 { "job" } else { "jobs" };
                v.pending_reason = Some(format!(
                    "waiting behind {ahead} earlier {jobs} in this user's queue"
                ));
            }
        }
    }
    Ok(v)
}

/// `POST /v1/jobs`: 201 with the new job, or 200 with the existing one for a repeated
/// `(user, external_id)`. Answered only after the job is committed.
#[utoipa::path(post, path = "/v1/jobs", tag = "jobs", request_body = SubmitRequest,
    responses((status = 201, body = JobView, description = "created"),
              (status = 200, body = JobView, description = "same (user, external_id) seen before"),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(user, job_id))]
pub async fn submit(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    state.auth.require(&req, Role::Submitter, "submit jobs")?;
    let body = read_body(&req, payload, state.settings.server.max_body_bytes).await?;
    let request: SubmitRequest = parse_json(&body, false)?;
    let new = request.into_new_job()?;
    tracing::Span::current().record("user", new.user.as_str());
    if let Some(s) = state.scheduler() {
        let request = crate::policy::Resources {
            cpu: new.cpu,
            gpu: new.gpu,
            memory_bytes: new.memory_bytes.max(0) as f64,
        };
        if s.fits_some_cluster(request).await == Some(false) {
            return Err(ApiError::invalid(
                "resources",
                format!(
                    "no healthy cluster is large enough for cpu={}, gpu={}, memory_bytes={}; \
                     see GET /v1/scheduler for cluster capacity",
                    new.cpu, new.gpu, new.memory_bytes
                ),
            ));
        }
    }
    let default_limit = state.settings.scheduler.default_max_queued_jobs;
    match store::submit_job(&state.db, new, default_limit).await? {
        Intake::Created(j) => {
            tracing::Span::current().record("job_id", tracing::field::display(j.id));
            tracing::info!(
                cpu = j.cpu,
                gpu = j.gpu,
                memory_bytes = j.memory_bytes,
                "job queued"
            );
            crate::metrics::get().jobs_submitted.inc();
            // The leader queues it now; a follower hands it over (DESIGN §10).
            match state.scheduler() {
                Some(s) => s.job_submitted(&j).await,
                None => state.leadership.hand_over(&format!("job:{}", j.id)).await,
            }
            let v = view(&state, j).await?;
            Ok(HttpResponse::Created().json(v))
        }
        Intake::Existing(j) => {
            tracing::Span::current().record("job_id", tracing::field::display(j.id));
            let v = view(&state, j).await?;
            Ok(HttpResponse::Ok().json(v))
        }
    }
}

/// `GET /v1/jobs/{id}`.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs",
    params(("id" = Uuid, Path, description = "job id")),
    responses((status = 200, body = JobView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    state.auth.require(&req, Role::Submitter, "read jobs")?;
    let j = load(&state, &id).await?;
    Ok(HttpResponse::Ok().json(view(&state, j).await?))
}

/// Query of `GET /v1/jobs`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this user's jobs.
    pub user: Option<String>,
    /// Only jobs in this status.
    pub status: Option<String>,
    /// Page size, 1..=1000 (default 100).
    pub limit: Option<String>,
    /// The `next_after` of the previous page.
    pub after: Option<String>,
}

/// `GET /v1/jobs?user=&status=&limit=&after=`: newest first, cursor paging.
#[utoipa::path(get, path = "/v1/jobs", tag = "jobs", params(ListQuery),
    responses((status = 200, body = JobPage), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    state.auth.require(&req, Role::Submitter, "read jobs")?;
    let q: ListQuery = parse_query(req.query_string())?;
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(JobStatus::parse(&s.to_ascii_uppercase()).ok_or_else(|| {
            ApiError::invalid(
                "status",
                "must be one of QUEUED, DISPATCHING, PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED",
            )
        })?),
    };
    let limit = match q.limit.as_deref() {
        None => DEFAULT_PAGE,
        Some(s) => s
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| {
                ApiError::invalid("limit", format!("must be an integer from 1 to {MAX_PAGE}"))
            })?,
    };
    let after = match q.after.as_deref() {
        None | Some("") => None,
        Some(s) => Some(
            Uuid::parse_str(s)
                .map_err(|_| ApiError::invalid("after", "must be a job id (UUID)"))?,
        ),
    };
    if let Some(id) = after {
        if store::get_job(&state.db, id).await?.is_none() {
            return Err(ApiError::invalid(
                "after",
                "no job with this id; pass the next_after of the previous page",
            ));
        }
    }
    let filter = JobFilter {
        user: q.user,
        status,
        limit,
        after,
    };
    let jobs = store::list_jobs(&state.db, &filter).await?;
    let next_after = if jobs.len() as u64 == limit {
        jobs.last().map(|j| j.id)
    } else {
        None
    };
    Ok(HttpResponse::Ok().json(JobPage {
        jobs: jobs.into_iter().map(JobView::from_model).collect(),
        next_after,
    }))
}

/// `POST /v1/jobs/{id}/cancel`: a QUEUED job is STOPPED at once (200); an outstanding
/// one gets a stop sent to Ray and becomes STOPPED when Ray confirms (202); a finished
/// one is 409.
#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", tag = "jobs",
    params(("id" = Uuid, Path, description = "job id")),
    responses((status = 200, body = JobView, description = "stopped"),
              (status = 202, body = JobView, description = "stop sent to Ray"),
              (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(job_id = %id))]
pub async fn cancel(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    state.auth.require(&req, Role::Submitter, "cancel jobs")?;
    let id = parse_id(&id)?;
    // The lifecycle decides on the row as it is inside the write's transaction, so a
    // grant racing the cancel is settled there.
    let scheduler = state.scheduler();
    let cancelled = Scheduler::cancel(&state.db, scheduler.as_ref(), id).await?;
    if scheduler.is_none()
        && matches!(
            cancelled,
            Cancelled::Stopped(_) | Cancelled::StopRequested(_)
        )
    {
        // The leader's queues or monitor carry it out (DESIGN §10).
        state.leadership.hand_over(&format!("job:{id}")).await;
    }
    match cancelled {
        Cancelled::NotFound => Err(ApiError::NotFound(format!("no job with id {id}"))),
        Cancelled::AlreadyFinished(j) => Err(ApiError::Conflict(format!(
            "job {} already finished as {}",
            j.id, j.status
        ))),
        Cancelled::Stopped(j) => Ok(HttpResponse::Ok().json(JobView::from_model(j))),
        Cancelled::StopRequested(j) => Ok(HttpResponse::Accepted().json(JobView::from_model(j))),
    }
}

/// `GET /v1/jobs/{id}/logs`: the job's logs from Ray (empty before it was dispatched).
#[utoipa::path(get, path = "/v1/jobs/{id}/logs", tag = "jobs",
    params(("id" = Uuid, Path, description = "job id")),
    responses((status = 200, body = LogsView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "the job was never dispatched, or Ray no longer has its logs"),
              (status = 503, body = ErrorBody, description = "the job's Ray cluster does not answer")),
    security(("bearer" = [])))]
pub async fn logs(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    state.auth.require(&req, Role::Submitter, "read logs")?;
    let j = load(&state, &id).await?;
    if j.dispatched_at.is_none() && j.started_at.is_none() {
        return Err(ApiError::Conflict(format!(
            "job {} has no logs: it was never dispatched to Ray (status {})",
            j.id, j.status
        )));
    }
    let logs = match state.scheduler() {
        Some(s) => s.logs(&j).await,
        // A follower asks Ray itself.
        None => crate::actors::job_logs(&state.settings, &j).await,
    };
    let logs = match logs {
        Ok(Some(logs)) => logs,
        Ok(None) => {
            return Err(ApiError::Conflict(format!(
                "Ray does not have the logs of job {} (status {}): its cluster lost or never \
                 started it",
                j.id, j.status
            )))
        }
        Err(e) => {
            return Err(ApiError::Unavailable(format!(
                "cluster {}: {}",
                j.cluster.as_deref().unwrap_or_default(),
                crate::ray::error_chain(&e)
            )))
        }
    };
    Ok(HttpResponse::Ok().json(LogsView { id: j.id, logs }))
}
