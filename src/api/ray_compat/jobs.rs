//! Ray's job routes under `/api/` (see the module map in [`super`]): submit, list, get,
//! stop, delete, logs and the version check, over the same queue, idempotency and
//! cancel as `/v1` (`api::accept::accept`, `api::jobs::cancel_job`).
//!
//! A job reads as Ray's `JobDetails`: while it waits here (QUEUED, DISPATCHING) its
//! `status` is Ray's `PENDING` and its `message` says why it waits (the
//! `pending_reason`); once Ray has it, Ray's own `status`, `message`, `error_type`,
//! `driver_info`, `job_id` and `end_time` come through (`GET /api/jobs/{id}` asks the
//! cluster; the list answers from the database). `start_time`/`end_time` are ms since
//! the epoch; `start_time` is when fairshare accepted the job. The object also carries
//! `fairshare: {id, user, group, status, cluster, attempt, preemptible, preemptions, pending_reason, queue_position}`,
//! which Ray's client ignores.

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use entity::{job, JobStatus};
use serde_json::{json, Value};
use uuid::Uuid;

use super::identity::{check_env_vars, group_of, user_of, GROUP_KEY};
use super::pyjson::{self, JobDetails, RayError};
use super::submit::{ray_field, ray_name, RaySubmitRequest};
use super::{JOBS_API_VERSION, RAY_VERSION};
use crate::actors::Cancelled;
use crate::api::accept::accept;
use crate::api::auth::Identity;
use crate::api::body::{parse_json, read_body};
use crate::api::jobs::{cancel_job, view, withdraw_job, Fresh};
use crate::api::{ApiError, AppState};
use crate::config::Role;
use crate::ray::RayClient;
use crate::store::{self, JobFilter};

/// Most jobs `GET /api/jobs/` returns (the newest). Ray returns every job it knows;
/// fairshare keeps every job ever submitted, so the list is bounded.
pub const LIST_LIMIT: u64 = 1000;

/// The `submission_id` a job answers to: the client's, else fairshare's job id.
pub fn submission_id_of(j: &job::Model) -> String {
    j.external_id.clone().unwrap_or_else(|| j.id.to_string())
}

/// Ray's name of a job's status: a job still here (QUEUED, DISPATCHING), or admitted to
/// a pool and not started yet (ADMITTED), is `PENDING`.
pub fn ray_status(s: JobStatus) -> &'static str {
    match s {
        JobStatus::Queued | JobStatus::Admitted | JobStatus::Dispatching => "PENDING",
        other => other.as_str(),
    }
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// A waiting job's estimated start (DESIGN §2, "Estimates"), as `/v1` shows it.
#[derive(Clone, Debug, Default)]
pub struct Estimated {
    /// `estimated_start`.
    pub start: Option<DateTime<Utc>>,
    /// `position`.
    pub position: Option<u64>,
    /// `estimate_basis`.
    pub basis: Option<String>,
    /// `estimated_after`.
    pub after: Option<DateTime<Utc>>,
}

impl Estimated {
    /// The estimate fields of a `/v1` view.
    pub fn of(v: &crate::api::jobs::JobView) -> Estimated {
        Estimated {
            start: v.estimated_start,
            position: v.position,
            basis: v.estimate_basis.clone(),
            after: v.estimated_after,
        }
    }
}

/// Ray's `JobDetails` of a row. `pending_reason`, `queue_position` and the estimate
/// fill the message of a waiting job (Ray's `message` is the only free text Ray's
/// clients show): "…; expected to start at about \<RFC 3339\> (position N among the
/// waiting jobs; this job's run time by \<basis\>, each job ahead's by its own)" (the
/// basis is the job's own: a tester read "run times by max_runtime" as every run time
/// behind the estimate), or for a job the forward run stopped before
/// reaching (its horizon, or a queue read only to its first jobs), "…; expected to
/// start no sooner than \<RFC 3339\> (the estimates stopped before this job)".
pub fn details(
    j: &job::Model,
    pending_reason: Option<&str>,
    queue_position: Option<u64>,
    estimated: &Estimated,
) -> Value {
    let message = match j.status {
        JobStatus::Queued => {
            let mut waiting = match pending_reason {
                Some(r) => format!("queued in fairshare: {r}"),
                None => "queued in fairshare, waiting for its fair-share turn".to_string(),
            };
            if let (Some(t), Some(p)) = (estimated.start, estimated.position) {
                waiting.push_str(&format!(
                    "; expected to start at about {} (position {p} among the waiting jobs; \
                     this job's run time by {}, each job ahead's by its own)",
                    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    estimated.basis.as_deref().unwrap_or("default")
                ));
            } else if let Some(t) = estimated.after {
                waiting.push_str(&format!(
                    "; expected to start no sooner than {} (the estimates stopped before this job)",
                    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ));
            }
            // A preempted job says why it is waiting again (its message, DESIGN §3).
            Some(match (&j.message, j.preemptions > 0) {
                (Some(m), true) => format!("{waiting} ({m})"),
                _ => waiting,
            })
        }
        JobStatus::Dispatching => Some(format!(
            "granted by fairshare; being submitted to Ray cluster {}",
            j.cluster.as_deref().unwrap_or("?")
        )),
        JobStatus::Admitted => Some(format!(
            "admitted by fairshare to pool {}; waiting for its runner to start it",
            j.cluster.as_deref().unwrap_or("?")
        )),
        JobStatus::Pending if j.message.is_none() => pending_reason.map(str::to_string),
        _ => j.message.clone(),
    };
    let custom = crate::store::custom_of(j);
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
        // The job's custom resources, as Ray names them (CPU, GPU and memory are
        // fairshare's `resources`); left out when it has none.
        "entrypoint_resources": (!custom.is_empty()).then_some(custom),
        "driver_agent_http_address": null,
        "driver_node_id": null,
        "driver_exit_code": null,
        "fairshare": {
            "id": j.id,
            "user": j.user_id,
            "group": j.metadata.as_ref().and_then(|m| m.get(GROUP_KEY)),
            "status": j.status.as_str(),
            "cluster": j.cluster,
            "pool": j.pool,
            "attempt": j.attempt,
            "preemptible": j.preemptible,
            "preemptions": j.preemptions,
            "pending_reason": pending_reason,
            "queue_position": queue_position,
            "estimated_start": estimated.start,
            "position": estimated.position,
            "estimate_basis": estimated.basis,
            "estimated_after": estimated.after,
        },
    })
}

/// Whether Ray has (or had) the job's current attempt: dispatched, not back in the queue.
fn in_ray(j: &job::Model) -> bool {
    j.cluster.is_some()
        && j.pool.is_none()
        && !matches!(j.status, JobStatus::Queued | JobStatus::Dispatching)
}

/// A client of the job's cluster, if it is configured.
pub(super) fn cluster_client(state: &AppState, j: &job::Model) -> Option<RayClient> {
    let c = state
        .settings
        .clusters
        .iter()
        .find(|c| Some(&c.name) == j.cluster.as_ref())?;
    RayClient::for_cluster(c, state.settings.dispatcher.request_timeout).ok()
}

/// [`details`] with Ray's own view merged in for a job Ray has: Ray's `status` and
/// `message` while the job is outstanding (fairshare's once it ended here), and Ray's
/// `job_id`, `driver_info`, `error_type`, `driver_exit_code`, `end_time`. A cluster
/// that does not answer leaves fairshare's view.
///
/// `/v1` and `/api/` never disagree on whether a job has ended (issue 43 §4): when
/// Ray says the job ended and its row does not yet, the row is given the time to
/// catch up ([`until_recorded`]); if it has not, the job is shown as fairshare has it.
async fn details_with_ray(state: &AppState, j: job::Model) -> Result<Value, ApiError> {
    let ray = match in_ray(&j).then(|| cluster_client(state, &j)).flatten() {
        None => None,
        Some(client) => {
            let sid = crate::lifecycle::current_submission_id(&j);
            match client.job_details(&sid).await {
                Ok(ray) => ray,
                Err(e) => {
                    tracing::debug!(job_id = %j.id, error = %crate::ray::error_chain(&e), "Ray's view of the job is unavailable");
                    None
                }
            }
        }
    };
    let ended_in_ray = ray.as_ref().is_some_and(ray_says_ended);
    let j = if ended_in_ray && !j.status.is_terminal() {
        until_recorded(state, j).await?
    } else {
        j
    };
    let v = view(state, j.clone(), Fresh::No).await?;
    let mut out = details(
        &j,
        v.pending_reason.as_deref(),
        v.queue_position,
        &Estimated::of(&v),
    );
    let Some(ray) = ray else {
        return Ok(out);
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
        if ended_in_ray {
            // Not recorded here yet: fairshare's status, not Ray's end.
            keys.retain(|k| !matches!(*k, "error_type" | "driver_exit_code" | "end_time"));
        } else {
            keys.extend(["status", "message"]);
        }
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

/// Whether Ray's `JobDetails` say the job ended.
fn ray_says_ended(ray: &Value) -> bool {
    matches!(
        ray["status"].as_str(),
        Some("SUCCEEDED" | "FAILED" | "STOPPED")
    )
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
    let visible = |j: &job::Model| who.may_access_job(j);
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

/// `GET /api/version`'s body, in Ray's field order.
#[derive(serde::Serialize)]
struct Version {
    version: &'static str,
    ray_version: &'static str,
    ray_commit: &'static str,
    session_name: &'static str,
}

/// `POST /api/jobs/`'s body, in Ray's field order.
#[derive(serde::Serialize)]
struct Submitted<'a> {
    job_id: &'a str,
    submission_id: &'a str,
}

/// `GET /api/version`: what Ray's client checks first.
pub async fn version(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, RayError> {
    state
        .auth
        .require(&req, Role::Submitter, "use the Jobs API")?;
    Ok(pyjson::ok(&Version {
        version: JOBS_API_VERSION,
        ray_version: RAY_VERSION,
        ray_commit: "fairshare",
        session_name: "fairshare",
    }))
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
) -> Result<HttpResponse, RayError> {
    let who = state.auth.identify(&req, Role::Submitter, "submit jobs")?;
    let body = read_body(&req, payload, &state.settings.server).await?;
    let request: RaySubmitRequest = parse_json(&body, false)?;
    crate::api::body::numbers::check(&body, super::submit::RAY_SUBMIT_NUMBERS)?;
    let mut request = request;
    let rules = &state.settings.ray_compat;
    let (metadata, env) = (request.metadata.as_ref(), request.runtime_env.as_ref());
    check_env_vars(env)?;
    let user = user_of(&rules.user_rules, &who, metadata, env)?;
    // The group is what the operator's rules find, and only that: a `fairshare.group`
    // the client wrote itself is replaced, or dropped when no rule finds one (unless a
    // rule reads that very key), so no client picks its own group (DESIGN §4).
    match group_of(&rules.group_rules, metadata, env)? {
        Some(group) => {
            request
                .metadata
                .get_or_insert_with(Default::default)
                .insert(GROUP_KEY.to_string(), group);
        }
        None => {
            if let Some(m) = request.metadata.as_mut() {
                m.remove(GROUP_KEY);
            }
        }
    }
    let rename = |e: ApiError| match e {
        ApiError::Invalid { field, reason } => ApiError::Invalid {
            field: ray_field(&field),
            reason,
        },
        ApiError::IdempotencyKeyReused {
            external_id,
            job_id,
            fields,
            ..
        } => ApiError::IdempotencyKeyReused {
            key: "submission_id",
            external_id,
            job_id,
            fields: fields.into_iter().map(ray_name).collect(),
        },
        other => other,
    };
    let submit = request
        .into_submit(user, &rules.default_resources)
        .map_err(&rename)?;
    let blame = submit.size_blame();
    let mut new = submit
        .with_size(&state.settings.sizes)
        .and_then(crate::api::submit::SubmitRequest::into_new_job)
        .map_err(&blame)
        .map_err(&rename)?;
    who.check_pool(new.pool.as_deref()).map_err(&rename)?;
    // The packages the runtime_env names are the submitter's own uploads.
    super::packages::pin(&state, &who, &mut new.runtime_env).await?;
    let j = accept(&state, &who, new)
        .await
        .map_err(&blame)
        .map_err(&rename)?
        .into_job();
    let sid = submission_id_of(&j);
    Ok(pyjson::ok(&Submitted {
        job_id: &sid,
        submission_id: &sid,
    }))
}

/// What the list says of a QUEUED job that cannot start as things stand: the job's own
/// `GET /api/jobs/{submission id}` names the bar.
fn list_barred(j: &job::Model) -> String {
    format!(
        "it cannot start as things stand (a pause, a limit, or no cluster large enough: \
         GET /api/jobs/{} says which)",
        submission_id_of(j)
    )
}

/// `GET /api/jobs/`: the newest [`LIST_LIMIT`] jobs as Ray's `JobDetails` (the token's
/// user's only, for a token with a user), from the database.
pub async fn list(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, RayError> {
    let who = state.auth.identify(&req, Role::Submitter, "read jobs")?;
    let jobs = store::list_jobs(
        &state.db,
        &JobFilter {
            user: who.user,
            status: None,
            pool: who.pool,
            external_id: None,
            limit: LIST_LIMIT,
            after: None,
        },
    )
    .await?;
    let out: Vec<JobDetails> = jobs
        .iter()
        .map(|j| {
            let v = crate::api::jobs::JobView::estimated(j.clone(), &state);
            // The list asks nobody why each job waits; a job the estimates' state keeps
            // from ever starting says so rather than "waiting for its fair-share turn"
            // (a tester's finding: the list said that of a job over its user's limit).
            let barred = j.status == JobStatus::Queued
                && v.estimated_start.is_none()
                && v.estimated_after.is_none()
                && state
                    .estimates()
                    .never(&j.user_id, &crate::store::summary(j));
            let reason = barred.then(|| list_barred(j));
            JobDetails::from_value(details(j, reason.as_deref(), None, &Estimated::of(&v)))
        })
        .collect();
    Ok(pyjson::ok(&out))
}

/// `GET /api/jobs/{id}`: one job as Ray's `JobDetails`, Ray's view merged in.
pub async fn get(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, RayError> {
    let who = state.auth.identify(&req, Role::Submitter, "read jobs")?;
    let j = find(&state, &who, &id).await?;
    Ok(pyjson::ok(&JobDetails::from_value(
        details_with_ray(&state, j).await?,
    )))
}

/// `POST /api/jobs/{id}/stop`: `{"stopped": true}` when the job was queued (STOPPED at
/// once) or outstanding (stop sent to Ray; STOPPED when Ray confirms); `{"stopped":
/// false}` when it had already ended, as Ray answers.
#[tracing::instrument(skip_all, fields(job_id))]
pub async fn stop(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, RayError> {
    let who = state.auth.identify(&req, Role::Submitter, "stop jobs")?;
    let j = find(&state, &who, &id).await?;
    tracing::Span::current().record("job_id", tracing::field::display(j.id));
    let stopped = match cancel_job(&state, j.id).await? {
        Cancelled::NotFound => {
            return Err(
                ApiError::NotFound(format!("no job with submission_id {:?}", id.as_str())).into(),
            )
        }
        Cancelled::AlreadyFinished(_) => false,
        Cancelled::Stopped(_) | Cancelled::StopRequested(_) => true,
    };
    Ok(pyjson::ok(&json!({ "stopped": stopped })))
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
) -> Result<HttpResponse, RayError> {
    let who = state.auth.identify(&req, Role::Submitter, "delete jobs")?;
    let mut j = find(&state, &who, &id).await?;
    tracing::Span::current().record("job_id", tracing::field::display(j.id));
    if j.status == JobStatus::Queued {
        // Stopped only if still QUEUED when the write runs: a job granted since it was
        // read is left alone, and the answer below is 409 with nothing changed.
        j = withdraw_job(&state, j.id).await?.ok_or_else(|| {
            ApiError::NotFound(format!("no job with submission_id {:?}", id.as_str()))
        })?;
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
            attempt: j.attempt,
        }
        .into());
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
    Ok(pyjson::ok(&json!({ "deleted": true })))
}

/// How long [`until_recorded`] waits for the row to catch up with Ray.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(5);

/// An outstanding job that Ray already reports ended (the monitor has not polled yet)
/// as its row once the monitor has recorded the end: Ray's status comes through
/// `GET /api/jobs/{id}` at once, so a client that saw it STOPPED and deletes must not
/// be refused. Otherwise the row as it is.
async fn settle(state: &AppState, j: job::Model) -> Result<job::Model, ApiError> {
    let Some(client) = in_ray(&j).then(|| cluster_client(state, &j)).flatten() else {
        return Ok(j);
    };
    let sid = crate::lifecycle::current_submission_id(&j);
    let ended_in_ray =
        matches!(client.job_details(&sid).await, Ok(Some(ray)) if ray_says_ended(&ray));
    if !ended_in_ray {
        return Ok(j);
    }
    until_recorded(state, j).await
}

/// The row of a job Ray says ended, once the monitor has recorded the end: asks the
/// monitor to poll now (on the leader) and waits at most [`SETTLE`]; then the row as
/// it is.
async fn until_recorded(state: &AppState, j: job::Model) -> Result<job::Model, ApiError> {
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
) -> Result<HttpResponse, RayError> {
    let who = state.auth.identify(&req, Role::Submitter, "read logs")?;
    let j = find(&state, &who, &id).await?;
    Ok(pyjson::ok(&json!({ "logs": ray_logs(&state, &j).await? })))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            runtime_env_digest: None,
            preemptible: false,
            preemptions: 0,
            preempted_at: None,
            custom_resources: None,
            pool: None,
            lease_expires_at: None,
        };
        let d = details(
            &j,
            Some("user alice is paused"),
            Some(1),
            &Estimated::default(),
        );
        assert_eq!(d["status"], "PENDING");
        assert_eq!(d["submission_id"], "my-job");
        assert_eq!(d["message"], "queued in fairshare: user alice is paused");
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-06T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let estimated = Estimated {
            start: Some(at),
            position: Some(7),
            basis: Some("learned".into()),
            after: None,
        };
        let d = details(&j, Some("waiting for capacity"), Some(2), &estimated);
        assert_eq!(
            d["message"],
            "queued in fairshare: waiting for capacity; expected to start at about \
             2026-12-06T10:00:00Z (position 7 among the waiting jobs; this job's run time by \
             learned, each job ahead's by its own)"
        );
        assert_eq!(d["fairshare"]["position"], 7);
        assert_eq!(d["fairshare"]["estimate_basis"], "learned");
        assert_eq!(d["start_time"], now.timestamp_millis());
        assert_eq!(d["fairshare"]["status"], "QUEUED");
        // Beyond what the forward run reached.
        let beyond = Estimated {
            after: Some(at),
            ..Estimated::default()
        };
        let d = details(&j, Some("waiting for capacity"), Some(2), &beyond);
        assert_eq!(
            d["message"],
            "queued in fairshare: waiting for capacity; expected to start no sooner than \
             2026-12-06T10:00:00Z (the estimates stopped before this job)"
        );
        assert_eq!(d["fairshare"]["estimated_after"], "2026-12-06T10:00:00Z");
    }
}
