//! Ray's job routes under `/api/` (see the module map in [`super`]): submit, list, get,
//! stop, delete, logs and the version check, over the same queue, idempotency and
//! cancel as `/v1` (`api::jobs::accept`, `api::jobs::cancel_job`).
//!
//! A job reads as Ray's `JobDetails`: while it waits here (QUEUED, DISPATCHING) its
//! `status` is Ray's `PENDING` and its `message` says why it waits (the
//! `pending_reason`); once Ray has it, Ray's own `status`, `message`, `error_type`,
//! `driver_info`, `job_id` and `end_time` come through (`GET /api/jobs/{id}` asks the
//! cluster; the list answers from the database). `start_time`/`end_time` are ms since
//! the epoch; `start_time` is when fairshare accepted the job. The object also carries
//! `fairshare: {id, user, status, cluster, attempt, pending_reason, queue_position}`,
//! which Ray's client ignores.

use std::collections::BTreeMap;

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use entity::{job, JobStatus};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::{JOBS_API_VERSION, RAY_VERSION};
use crate::actors::Cancelled;
use crate::api::auth::Identity;
use crate::api::body::{parse_json, read_body, whole};
use crate::api::jobs::{accept, cancel_job, view, ResourcesIn, SubmitRequest};
use crate::api::{ApiError, AppState};
use crate::config::Role;
use crate::ray::RayClient;
use crate::store::{self, JobFilter};

/// The metadata key naming the user a job is for, when the token acts for many users.
pub const USER_KEY: &str = "fairshare.user";

/// Most jobs `GET /api/jobs/` returns (the newest). Ray returns every job it knows;
/// fairshare keeps every job ever submitted, so the list is bounded.
pub const LIST_LIMIT: u64 = 1000;

/// Ray's `JobSubmitRequest`, field for field (Ray 2.60). Ray's client drops fields
/// that are `None`, so absent and `null` mean the same.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RaySubmitRequest {
    /// Shell command Ray runs.
    pub entrypoint: String,
    /// The client's id for the job: the idempotency key per user (`external_id`).
    pub submission_id: Option<String>,
    /// Ray's deprecated name of `submission_id`.
    pub job_id: Option<String>,
    /// Passed to Ray as is; `working_dir`/`py_modules` URIs of uploaded packages are
    /// sent to the cluster before the submit.
    pub runtime_env: Option<Value>,
    /// String to string; `fairshare.user` names the user (see [`user_of`]).
    pub metadata: Option<BTreeMap<String, String>>,
    /// Cores (Ray's default 0; see [`RaySubmitRequest::into_submit`]).
    pub entrypoint_num_cpus: Option<f64>,
    /// GPUs.
    pub entrypoint_num_gpus: Option<f64>,
    /// Bytes.
    #[serde(default, deserialize_with = "whole::opt")]
    pub entrypoint_memory: Option<u64>,
    /// Only `CPU`, `GPU` and `memory` are accepted (they map onto the three above);
    /// custom resources are refused (422): fair share counts cpu, gpu and memory.
    pub entrypoint_resources: Option<BTreeMap<String, f64>>,
    /// Refused unless empty (422): fairshare places jobs on clusters, not nodes.
    pub entrypoint_label_selector: Option<BTreeMap<String, String>>,
}

/// The user a request acts for: the token's own `user`, else
/// `metadata["fairshare.user"]` (a token acting for many users, as a gateway's does, or
/// no token configured). A token with a user may repeat it there but not name another.
///
/// Errors: 422 on `metadata.fairshare.user` when no user is named, or another than the
/// token's.
pub fn user_of(
    who: &Identity,
    metadata: Option<&BTreeMap<String, String>>,
) -> Result<String, ApiError> {
    let named = metadata.and_then(|m| m.get(USER_KEY));
    let field = format!("metadata.{USER_KEY}");
    match (&who.user, named) {
        (Some(own), None) => Ok(own.clone()),
        (Some(own), Some(n)) if n == own => Ok(own.clone()),
        (Some(own), Some(n)) => Err(ApiError::invalid(
            field,
            format!("this token submits as user {own:?}; it cannot submit for {n:?}"),
        )),
        (None, Some(n)) => Ok(n.clone()),
        (None, None) => Err(ApiError::invalid(
            field,
            format!(
                "no user: this token acts for many users, so each job names its user in \
                 metadata[\"{USER_KEY}\"] (or configure the token with a user)"
            ),
        )),
    }
}

/// `/v1` field names in errors → Ray's.
fn ray_field(field: &str) -> String {
    match field {
        "user" => format!("metadata.{USER_KEY}"),
        other => ray_name(other).to_string(),
    }
}

/// The Ray name of a `/v1` payload field (`payload_differences` names these).
fn ray_name(field: &str) -> &str {
    match field {
        "external_id" => "submission_id",
        "resources.cpu" | "resources" => "entrypoint_num_cpus",
        "resources.gpu" => "entrypoint_num_gpus",
        "resources.memory_bytes" => "entrypoint_memory",
        other => other,
    }
}

impl RaySubmitRequest {
    /// The `/v1` submission this is, for `user`. Resources: `entrypoint_num_cpus`,
    /// `_gpus`, `_memory` (or `CPU`, `GPU`, `memory` in `entrypoint_resources`). With
    /// none of them the job counts as 1 CPU, as on `/v1` (Ray's default is 0, which
    /// fair share cannot count), and Ray reserves that CPU for its driver; with GPUs
    /// and no CPUs it is 0 CPUs, as in Ray.
    ///
    /// Errors: 422 naming Ray's field.
    pub fn into_submit(self, user: String) -> Result<SubmitRequest, ApiError> {
        let mut cpu = self.entrypoint_num_cpus;
        let mut gpu = self.entrypoint_num_gpus;
        let mut memory = self.entrypoint_memory;
        for (key, amount) in self.entrypoint_resources.unwrap_or_default() {
            let field = format!("entrypoint_resources.{key}");
            let twice = || {
                ApiError::invalid(
                    field.clone(),
                    "given twice (also as entrypoint_num_*/entrypoint_memory)",
                )
            };
            match key.as_str() {
                "CPU" if cpu.is_none() => cpu = Some(amount),
                "GPU" if gpu.is_none() => gpu = Some(amount),
                "memory" if memory.is_none() => {
                    if !(amount.is_finite() && amount >= 0.0 && amount.fract() == 0.0) {
                        return Err(ApiError::invalid(field, "must be a whole number of bytes"));
                    }
                    memory = Some(amount as u64);
                }
                "CPU" | "GPU" | "memory" => return Err(twice()),
                _ => {
                    return Err(ApiError::invalid(
                        field,
                        "custom resources are not supported: fair share counts CPU, GPU and \
                         memory (entrypoint_num_cpus, entrypoint_num_gpus, entrypoint_memory)",
                    ))
                }
            }
        }
        if self
            .entrypoint_label_selector
            .is_some_and(|s| !s.is_empty())
        {
            return Err(ApiError::invalid(
                "entrypoint_label_selector",
                "not supported: fairshare chooses the cluster, Ray the node",
            ));
        }
        if cpu.is_none() && gpu.is_some_and(|g| g > 0.0) {
            cpu = Some(0.0);
        }
        let submission_id = match (self.submission_id, self.job_id) {
            (Some(a), Some(b)) if a != b => {
                return Err(ApiError::invalid(
                    "job_id",
                    "differs from submission_id (job_id is its deprecated name)",
                ))
            }
            (a, b) => a.or(b),
        };
        if let Some(id) = &submission_id {
            if id.trim().is_empty() || id.contains('/') || id.chars().any(char::is_control) {
                return Err(ApiError::invalid(
                    "submission_id",
                    "must be non-empty, without '/' or control characters (it is a URL path segment)",
                ));
            }
        }
        Ok(SubmitRequest {
            user,
            entrypoint: self.entrypoint,
            runtime_env: self.runtime_env,
            resources: Some(ResourcesIn {
                cpu,
                gpu,
                memory_bytes: memory,
            }),
            priority: None,
            metadata: self.metadata,
            external_id: submission_id,
            max_runtime_s: None,
        })
    }
}

/// The `submission_id` a job answers to: the client's, else fairshare's job id.
pub fn submission_id_of(j: &job::Model) -> String {
    j.external_id.clone().unwrap_or_else(|| j.id.to_string())
}

/// Ray's name of a job's status: a job still here (QUEUED, DISPATCHING) is `PENDING`.
pub fn ray_status(s: JobStatus) -> &'static str {
    match s {
        JobStatus::Queued | JobStatus::Dispatching => "PENDING",
        other => other.as_str(),
    }
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// Ray's `JobDetails` of a row. `pending_reason` and `queue_position` fill the
/// message of a waiting job.
pub fn details(j: &job::Model, pending_reason: Option<&str>, queue_position: Option<u64>) -> Value {
    let message = match j.status {
        JobStatus::Queued => Some(match pending_reason {
            Some(r) => format!("queued in fairshare: {r}"),
            None => "queued in fairshare, waiting for its fair-share turn".to_string(),
        }),
        JobStatus::Dispatching => Some(format!(
            "granted by fairshare; being submitted to Ray cluster {}",
            j.cluster.as_deref().unwrap_or("?")
        )),
        JobStatus::Pending if j.message.is_none() => pending_reason.map(str::to_string),
        _ => j.message.clone(),
    };
    json!({
        "type": "SUBMISSION",
        "job_id": null,
        "submission_id": submission_id_of(j),
        "driver_info": null,
        "status": ray_status(j.status),
        "entrypoint": j.entrypoint,
        "message": message,
        "error_type": null,
        "start_time": ms(j.submitted_at),
        "end_time": j.finished_at.map(ms),
        "metadata": j.metadata.clone().unwrap_or_else(|| json!({})),
        // Never shown back (it may hold secrets), as on /v1.
        "runtime_env": null,
        "driver_agent_http_address": null,
        "driver_node_id": null,
        "driver_exit_code": null,
        "fairshare": {
            "id": j.id,
            "user": j.user_id,
            "status": j.status.as_str(),
            "cluster": j.cluster,
            "attempt": j.attempt,
            "pending_reason": pending_reason,
            "queue_position": queue_position,
        },
    })
}

/// Whether Ray has (or had) the job's current attempt: dispatched, not back in the queue.
fn in_ray(j: &job::Model) -> bool {
    j.cluster.is_some() && !matches!(j.status, JobStatus::Queued | JobStatus::Dispatching)
}

/// A client of the job's cluster, if it is configured.
pub(super) fn cluster_client(state: &AppState, j: &job::Model) -> Option<RayClient> {
    let c = state
        .settings
        .clusters
        .iter()
        .find(|c| Some(&c.name) == j.cluster.as_ref())?;
    RayClient::new(&c.address, state.settings.dispatcher.request_timeout).ok()
}

/// [`details`] with Ray's own view merged in for a job Ray has: Ray's `status` and
/// `message` while the job is outstanding (fairshare's once it ended here), and Ray's
/// `job_id`, `driver_info`, `error_type`, `driver_exit_code`, `end_time`. A cluster
/// that does not answer leaves fairshare's view.
async fn details_with_ray(state: &AppState, j: job::Model) -> Result<Value, ApiError> {
    let v = view(state, j.clone()).await?;
    let mut out = details(&j, v.pending_reason.as_deref(), v.queue_position);
    if !in_ray(&j) {
        return Ok(out);
    }
    let Some(client) = cluster_client(state, &j) else {
        return Ok(out);
    };
    let sid = crate::lifecycle::current_submission_id(&j);
    let ray = match client.job_details(&sid).await {
        Ok(Some(ray)) => ray,
        Ok(None) => return Ok(out),
        Err(e) => {
            tracing::debug!(job_id = %j.id, error = %crate::ray::error_chain(&e), "Ray's view of the job is unavailable");
            return Ok(out);
        }
    };
    let mut keys = vec![
        "job_id",
        "driver_info",
        "error_type",
        "driver_agent_http_address",
        "driver_node_id",
        "driver_exit_code",
        "end_time",
    ];
    if !j.status.is_terminal() {
        keys.extend(["status", "message"]);
    } else if j.message.is_none() {
        keys.push("message");
    }
    for key in keys {
        if let Some(value) = ray.get(key).filter(|v| !v.is_null()) {
            out[key] = value.clone();
        }
    }
    Ok(out)
}

/// The job `raw` names for `who`: fairshare's job id, else the `submission_id` the
/// client chose (its `external_id`). A token with a user sees only that user's jobs.
///
/// Errors: 404 when there is none; 409 when a token acting for many users names a
/// `submission_id` two users chose (use fairshare's id, `fairshare.id`).
pub(super) async fn find(
    state: &AppState,
    who: &Identity,
    raw: &str,
) -> Result<job::Model, ApiError> {
    let visible = |j: &job::Model| who.user.as_ref().is_none_or(|u| *u == j.user_id);
    if let Ok(id) = Uuid::parse_str(raw) {
        if let Some(j) = store::get_job(&state.db, id).await?.filter(visible) {
            return Ok(j);
        }
    }
    let mut found = store::jobs_by_external_id(&state.db, who.user.as_deref(), raw).await?;
    match found.len() {
        0 => Err(ApiError::NotFound(format!(
            "no job with submission_id {raw:?}"
        ))),
        1 => Ok(found.remove(0)),
        _ => Err(ApiError::Conflict(format!(
            "submission_id {raw:?} names jobs of more than one user; use fairshare's job id \
             (fairshare.id in GET /api/jobs/)"
        ))),
    }
}

/// `GET /api/version`: what Ray's client checks first.
pub async fn version(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    state
        .auth
        .require(&req, Role::Submitter, "use the Jobs API")?;
    Ok(HttpResponse::Ok().json(json!({
        "version": JOBS_API_VERSION,
        "ray_version": RAY_VERSION,
        "ray_commit": "fairshare",
        "session_name": "fairshare",
    })))
}

/// `POST /api/jobs/`: Ray's submit. 200 `{"job_id", "submission_id"}` (both the
/// `submission_id`, as Ray answers) for a new job and for a repeat of the same
/// `(user, submission_id)` with the same body; 422 `idempotency_key_reused` for the
/// same key with another body; 422 naming Ray's field for bad input; 429 queue full.
#[tracing::instrument(skip_all, fields(user, job_id))]
pub async fn submit(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "submit jobs")?;
    let body = read_body(&req, payload, state.settings.server.max_body_bytes).await?;
    let request: RaySubmitRequest = parse_json(&body, false)?;
    let user = user_of(&who, request.metadata.as_ref())?;
    let rename = |e: ApiError| match e {
        ApiError::Invalid { field, reason } => ApiError::Invalid {
            field: ray_field(&field),
            reason,
        },
        ApiError::IdempotencyKeyReused {
            external_id,
            job_id,
            fields,
        } => ApiError::IdempotencyKeyReused {
            external_id,
            job_id,
            fields: fields.into_iter().map(ray_name).collect(),
        },
        other => other,
    };
    let new = request.into_submit(user)?.into_new_job().map_err(rename)?;
    let (_, j) = accept(&state, new).await.map_err(rename)?;
    let sid = submission_id_of(&j);
    Ok(HttpResponse::Ok().json(json!({"job_id": sid, "submission_id": sid})))
}

/// `GET /api/jobs/`: the newest [`LIST_LIMIT`] jobs as Ray's `JobDetails` (the token's
/// user's only, for a token with a user), from the database.
pub async fn list(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "read jobs")?;
    let jobs = store::list_jobs(
        &state.db,
        &JobFilter {
            user: who.user,
            status: None,
            limit: LIST_LIMIT,
            after: None,
        },
    )
    .await?;
    let out: Vec<Value> = jobs.iter().map(|j| details(j, None, None)).collect();
    Ok(HttpResponse::Ok().json(out))
}

/// `GET /api/jobs/{id}`: one job as Ray's `JobDetails`, Ray's view merged in.
pub async fn get(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "read jobs")?;
    let j = find(&state, &who, &id).await?;
    Ok(HttpResponse::Ok().json(details_with_ray(&state, j).await?))
}

/// `POST /api/jobs/{id}/stop`: `{"stopped": true}` when the job was queued (STOPPED at
/// once) or outstanding (stop sent to Ray; STOPPED when Ray confirms); `{"stopped":
/// false}` when it had already ended, as Ray answers.
#[tracing::instrument(skip_all, fields(job_id))]
pub async fn stop(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "stop jobs")?;
    let j = find(&state, &who, &id).await?;
    tracing::Span::current().record("job_id", tracing::field::display(j.id));
    let stopped = match cancel_job(&state, j.id).await? {
        Cancelled::NotFound => {
            return Err(ApiError::NotFound(format!(
                "no job with submission_id {:?}",
                id.as_str()
            )))
        }
        Cancelled::AlreadyFinished(_) => false,
        Cancelled::Stopped(_) | Cancelled::StopRequested(_) => true,
    };
    Ok(HttpResponse::Ok().json(json!({ "stopped": stopped })))
}

/// `DELETE /api/jobs/{id}`: a finished job is deleted from Ray (its record there, when
/// the cluster answers) and from fairshare (row and events); a QUEUED job is stopped
/// and deleted at once (Ray never had it); an outstanding one (DISPATCHING, PENDING,
/// RUNNING) is 409, as Ray refuses to delete a running job: stop it first.
#[tracing::instrument(skip_all, fields(job_id))]
pub async fn delete(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "delete jobs")?;
    let mut j = find(&state, &who, &id).await?;
    tracing::Span::current().record("job_id", tracing::field::display(j.id));
    if j.status == JobStatus::Queued {
        j = match cancel_job(&state, j.id).await? {
            Cancelled::Stopped(j) | Cancelled::AlreadyFinished(j) => j,
            Cancelled::StopRequested(j) => j,
            Cancelled::NotFound => {
                return Err(ApiError::NotFound(format!(
                    "no job with submission_id {:?}",
                    id.as_str()
                )))
            }
        };
    }
    if !j.status.is_terminal() {
        j = settle(&state, j).await?;
    }
    if !j.status.is_terminal() {
        return Err(ApiError::JobConflict {
            message: format!(
                "job {} is {}: only a finished job can be deleted; stop it first \
                 (POST /api/jobs/{}/stop)",
                submission_id_of(&j),
                ray_status(j.status),
                submission_id_of(&j)
            ),
            job_id: j.id,
            status: j.status.to_string(),
        });
    }
    if j.cluster.is_some() {
        if let Some(client) = cluster_client(&state, &j) {
            let sid = crate::lifecycle::current_submission_id(&j);
            if let Err(e) = client.delete_job(&sid).await {
                // Ray keeps its record; fairshare's is deleted all the same.
                tracing::warn!(error = %crate::ray::error_chain(&e), "Ray did not delete the job's record");
            }
        }
    }
    let deleted = store::delete_job(&state.db, j.id).await?;
    tracing::info!(deleted, "job deleted");
    Ok(HttpResponse::Ok().json(json!({ "deleted": true })))
}

/// How long [`settle`] waits for the row to catch up with Ray.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(5);

/// An outstanding job that Ray already reports ended (the monitor has not polled yet)
/// as its row once the monitor has recorded the end: Ray's status comes through
/// `GET /api/jobs/{id}` at once, so a client that saw it STOPPED and deletes must not
/// be refused. Waits at most [`SETTLE`], asking the monitor to poll now (on the
/// leader); otherwise the row as it is.
async fn settle(state: &AppState, j: job::Model) -> Result<job::Model, ApiError> {
    let Some(client) = in_ray(&j).then(|| cluster_client(state, &j)).flatten() else {
        return Ok(j);
    };
    let sid = crate::lifecycle::current_submission_id(&j);
    let ended_in_ray = matches!(
        client.job_details(&sid).await,
        Ok(Some(ray)) if matches!(ray["status"].as_str(), Some("SUCCEEDED" | "FAILED" | "STOPPED"))
    );
    if !ended_in_ray {
        return Ok(j);
    }
    let deadline = std::time::Instant::now() + SETTLE;
    let mut latest = j;
    while !latest.status.is_terminal() && std::time::Instant::now() < deadline {
        if let Some(s) = state.scheduler() {
            s.poll_now();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        match store::get_job(&state.db, latest.id).await? {
            Some(row) => latest = row,
            None => break,
        }
    }
    Ok(latest)
}

/// The logs of a job's current attempt from Ray: `""` while Ray does not have it
/// (waiting here, or ended before dispatch), as Ray answers for a job not started.
/// Errors: 503 when the cluster does not answer.
pub(super) async fn ray_logs(state: &AppState, j: &job::Model) -> Result<String, ApiError> {
    if !in_ray(j) {
        return Ok(String::new());
    }
    let logs = match state.scheduler() {
        Some(s) => s.logs(j).await,
        None => crate::actors::job_logs(&state.settings, j).await,
    };
    match logs {
        Ok(logs) => Ok(logs.unwrap_or_default()),
        Err(e) => Err(ApiError::Unavailable(format!(
            "cluster {}: {}",
            j.cluster.as_deref().unwrap_or_default(),
            crate::ray::error_chain(&e)
        ))),
    }
}

/// `GET /api/jobs/{id}/logs`: `{"logs": "..."}`.
pub async fn logs(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "read logs")?;
    let j = find(&state, &who, &id).await?;
    Ok(HttpResponse::Ok().json(json!({ "logs": ray_logs(&state, &j).await? })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(user: Option<&str>) -> Identity {
        Identity {
            role: Role::Submitter,
            user: user.map(str::to_string),
        }
    }

    fn md(user: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(USER_KEY.to_string(), user.to_string())])
    }

    #[test]
    fn the_user_is_the_tokens_own_else_the_one_metadata_names() {
        assert_eq!(user_of(&who(Some("alice")), None).unwrap(), "alice");
        assert_eq!(
            user_of(&who(Some("alice")), Some(&md("alice"))).unwrap(),
            "alice"
        );
        assert_eq!(user_of(&who(None), Some(&md("bob"))).unwrap(), "bob");
        let other = user_of(&who(Some("alice")), Some(&md("bob"))).unwrap_err();
        assert!(
            matches!(other, ApiError::Invalid { ref field, .. } if field == "metadata.fairshare.user")
        );
        let none = user_of(&who(None), Some(&BTreeMap::new())).unwrap_err();
        assert!(
            matches!(none, ApiError::Invalid { ref field, .. } if field == "metadata.fairshare.user")
        );
    }

    fn request(body: Value) -> RaySubmitRequest {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn entrypoint_resources_map_onto_cpu_gpu_memory_and_custom_ones_are_refused() {
        let s = request(json!({"entrypoint": "x", "entrypoint_resources": {"CPU": 2.0, "GPU": 1.0, "memory": 1024.0}}))
            .into_submit("u".into())
            .unwrap();
        let r = s.resources.unwrap();
        assert_eq!(
            (r.cpu, r.gpu, r.memory_bytes),
            (Some(2.0), Some(1.0), Some(1024))
        );
        let err = request(json!({"entrypoint": "x", "entrypoint_resources": {"TPU": 1.0}}))
            .into_submit("u".into())
            .unwrap_err();
        assert!(
            matches!(err, ApiError::Invalid { ref field, .. } if field == "entrypoint_resources.TPU")
        );
        let err = request(json!({"entrypoint": "x", "entrypoint_num_cpus": 1, "entrypoint_resources": {"CPU": 2.0}}))
            .into_submit("u".into())
            .unwrap_err();
        assert!(
            matches!(err, ApiError::Invalid { ref field, .. } if field == "entrypoint_resources.CPU")
        );
    }

    #[test]
    fn a_gpu_job_without_cpus_asks_for_no_cpu_and_a_bare_job_for_one() {
        let gpu = request(json!({"entrypoint": "x", "entrypoint_num_gpus": 1}))
            .into_submit("u".into())
            .unwrap()
            .into_new_job()
            .unwrap();
        assert_eq!((gpu.cpu, gpu.gpu), (0.0, 1.0));
        let bare = request(json!({"entrypoint": "x"}))
            .into_submit("u".into())
            .unwrap()
            .into_new_job()
            .unwrap();
        assert_eq!((bare.cpu, bare.gpu), (1.0, 0.0));
    }

    #[test]
    fn a_queued_job_reads_as_rays_pending_with_its_pending_reason() {
        let now = Utc::now();
        let j = job::Model {
            id: Uuid::now_v7(),
            user_id: "alice".into(),
            external_id: Some("my-job".into()),
            status: JobStatus::Queued,
            priority: 0,
            entrypoint: "python x.py".into(),
            runtime_env: None,
            metadata: None,
            cpu: 1.0,
            gpu: 0.0,
            memory_bytes: 0,
            cluster: None,
            message: None,
            max_runtime_s: None,
            submitted_at: now,
            dispatched_at: None,
            started_at: None,
            finished_at: None,
            attempt: 1,
            retiring_attempt: None,
            stop_reason: None,
        };
        let d = details(&j, Some("user alice is paused"), Some(1));
        assert_eq!(d["status"], "PENDING");
        assert_eq!(d["submission_id"], "my-job");
        assert_eq!(d["message"], "queued in fairshare: user alice is paused");
        assert_eq!(d["start_time"], now.timestamp_millis());
        assert_eq!(d["fairshare"]["status"], "QUEUED");
    }
}
