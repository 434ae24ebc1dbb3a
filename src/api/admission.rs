//! A pool's runner reports (issue 30, DESIGN §3 "Admission" and §4): `POST
//! /v1/jobs/{id}/started`, `/finished`, `/release` and `/heartbeat`. Each is one
//! lifecycle event written by `store::apply` (guarded on status and attempt, as a
//! cancel is, on any replica); each renews the runner's lease on the job. The same
//! report again is 200 and changes nothing more; a report that does not fit the job as
//! it is now (its lease lapsed and it went back to the queue, it ended otherwise) is
//! 409 naming its status and attempt, and changes nothing.

use actix_web::{web, HttpRequest, HttpResponse};
use entity::JobStatus;
use serde::Deserialize;
use utoipa::ToSchema;

use super::auth::Identity;
use super::body::{numbers, parse_json, read_body};
use super::error::{ApiError, ErrorBody};
use super::jobs::{load_for, JobView};
use super::AppState;
use crate::actors::{Reported, Scheduler};
use crate::config::Role;
use crate::lifecycle::Event;

/// Longest runner message kept, in characters.
const MAX_MESSAGE_CHARS: usize = 4096;

/// The body of `started`, `release` and `heartbeat`: nothing, `{}`, or the attempt.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportBody {
    /// The admission the report is about: the job's `attempt` when it was ADMITTED
    /// (each admission is an attempt of its own). Absent or null: the current one. A report
    /// of another attempt is 409 (a release of an earlier one is 200: it is over).
    #[serde(default)]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 2147483647)]
    pub attempt: Option<serde_json::Number>,
}

/// How the runner says the job ended.
#[derive(Clone, Copy, Debug, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum RunnerOutcome {
    Succeeded,
    Failed,
    Stopped,
}

/// The body of `finished`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FinishedBody {
    /// SUCCEEDED, FAILED or STOPPED.
    pub status: RunnerOutcome,
    /// Why, in the runner's words (at most 4096 characters); shown as the job's
    /// message.
    #[schema(max_length = 4096)]
    pub message: Option<String>,
    /// As for the other reports.
    #[serde(default)]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 2147483647)]
    pub attempt: Option<serde_json::Number>,
}

/// Writes one report of the runner of job `id` and answers it.
async fn report(
    state: &AppState,
    who: &Identity,
    raw_id: &str,
    event: impl FnOnce(&AppState) -> Event,
) -> Result<HttpResponse, ApiError> {
    // A token with a user reports only its own user's jobs (others are 404).
    let job = load_for(state, who, raw_id).await?;
    let scheduler = state.scheduler();
    let event = event(state);
    let reported = Scheduler::report(&state.db, scheduler.as_ref(), job.id, &event).await?;
    let conflict = |j: entity::job::Model, why: String| ApiError::JobConflict {
        message: format!(
            "job {} is {} (attempt {}): {why}",
            j.id, j.status, j.attempt
        ),
        job_id: j.id,
        status: j.status.to_string(),
        attempt: j.attempt,
    };
    match reported {
        Reported::NotFound => Err(ApiError::NotFound(format!("no job with id {raw_id}"))),
        Reported::NotAPoolJob(j) => Err(conflict(
            j,
            "it does not name a pool: fairshare runs it on Ray and no runner reports on it".into(),
        )),
        Reported::Conflict(j, why) => Err(conflict(j, why)),
        Reported::Done(j) => {
            if scheduler.is_none() && (j.status == JobStatus::Queued || j.status.is_terminal()) {
                // The leader's arbiter frees what the admission held (DESIGN §10).
                state.leadership.hand_over(&format!("job:{}", j.id)).await;
            }
            Ok(HttpResponse::Ok().json(JobView::from_model(j)))
        }
        Reported::Repeated(j) => Ok(HttpResponse::Ok().json(JobView::from_model(j))),
    }
}

/// Who reports (a submitter's token) and the report's body (nothing, `{}`, or the
/// fields of `T`).
async fn body<T: serde::de::DeserializeOwned>(
    state: &AppState,
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<(Identity, T), ApiError> {
    // Who asks is checked before what is asked (401/403 before 422).
    let who = state
        .auth
        .identify(req, Role::Submitter, "report on pool jobs")?;
    let bytes = read_body(req, payload, &state.settings.server).await?;
    let parsed = parse_json(&bytes, true)?;
    // As written, as every whole-number field (`1.00000000000000001` is not 1;
    // found by a tester). Its range is `check_attempt`'s, one message for all.
    if let Err(e) = numbers::check(&bytes, &[("attempt", numbers::Written::Whole)]) {
        return Err(match e {
            ApiError::Invalid { field, .. } if field == "attempt" => attempt_error(),
            other => other,
        });
    }
    Ok((who, parsed))
}

fn attempt_error() -> ApiError {
    ApiError::invalid("attempt", "must be a whole number from 1 to 2147483647")
}

/// Checks a report's `attempt` (attempts count from 1 and are stored as 32-bit
/// integers). Errors: 422 naming `attempt`.
fn check_attempt(attempt: Option<serde_json::Number>) -> Result<Option<u32>, ApiError> {
    let Some(n) = attempt else {
        return Ok(None);
    };
    let whole = n.as_u64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && (1.0..=f64::from(i32::MAX)).contains(f))
            .map(|f| f as u64)
    });
    match whole {
        Some(a) if (1..=i32::MAX as u64).contains(&a) => Ok(Some(a as u32)),
        _ => Err(attempt_error()),
    }
}

/// `POST /v1/jobs/{id}/started`: the runner started the ADMITTED pool job (RUNNING).
#[utoipa::path(post, path = "/v1/jobs/{id}/started", tag = "admission", operation_id = "report_started",
    request_body(content = Option<ReportBody>, description = "nothing, `{}`, or the attempt"),
    params(("id" = uuid::Uuid, Path, description = "job id")),
    responses((status = 200, body = JobView, description = "RUNNING (also for the same report again); the lease is renewed"),
              (status = 400, body = ErrorBody, description = "the body is not JSON"),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "no token is configured and a browser page of another origin asked (cross-site request forgery)"),
              (status = 404, body = ErrorBody),
              (status = 408, body = ErrorBody, description = "the body stalled"), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody, description = "a body without `Content-Type: application/json`"),
              (status = 409, body = ErrorBody, description = "the job is not ADMITTED or RUNNING as that attempt (its lease lapsed, it ended, it does not name a pool); details: job_id, status, attempt"),
              (status = 422, body = ErrorBody, description = "a field is invalid (details.field)"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(job_id = %id))]
pub async fn started(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (who, b): (_, ReportBody) = body(&state, &req, payload).await?;
    let attempt = check_attempt(b.attempt)?;
    report(&state, &who, &id, |s| Event::RunnerStarted {
        attempt,
        lease_until: s.settings.admission.lease_from_now(),
    })
    .await
}

/// `POST /v1/jobs/{id}/heartbeat`: the runner renews its lease on an ADMITTED or
/// RUNNING pool job.
#[utoipa::path(post, path = "/v1/jobs/{id}/heartbeat", tag = "admission", operation_id = "report_heartbeat",
    request_body(content = Option<ReportBody>, description = "nothing, `{}`, or the attempt"),
    params(("id" = uuid::Uuid, Path, description = "job id")),
    responses((status = 200, body = JobView, description = "the lease is renewed (lease_expires_at)"),
              (status = 400, body = ErrorBody, description = "the body is not JSON"),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "no token is configured and a browser page of another origin asked (cross-site request forgery)"),
              (status = 404, body = ErrorBody),
              (status = 408, body = ErrorBody, description = "the body stalled"), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody, description = "a body without `Content-Type: application/json`"),
              (status = 409, body = ErrorBody, description = "the job is not ADMITTED or RUNNING as that attempt; details: job_id, status, attempt"),
              (status = 422, body = ErrorBody, description = "a field is invalid (details.field)"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(job_id = %id))]
pub async fn heartbeat(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (who, b): (_, ReportBody) = body(&state, &req, payload).await?;
    let attempt = check_attempt(b.attempt)?;
    report(&state, &who, &id, |s| Event::RunnerHeartbeat {
        attempt,
        lease_until: s.settings.admission.lease_from_now(),
    })
    .await
}

/// `POST /v1/jobs/{id}/release`: the runner gives an ADMITTED pool job's capacity back
/// without running it; the job goes back to the queue at its old place as the next
/// attempt (STOPPED if a cancel asked it to stop).
#[utoipa::path(post, path = "/v1/jobs/{id}/release", tag = "admission", operation_id = "report_release",
    request_body(content = Option<ReportBody>, description = "nothing, `{}`, or the attempt"),
    params(("id" = uuid::Uuid, Path, description = "job id")),
    responses((status = 200, body = JobView, description = "QUEUED again (or, for a repeat or an earlier attempt, the job as it is)"),
              (status = 400, body = ErrorBody, description = "the body is not JSON"),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "no token is configured and a browser page of another origin asked (cross-site request forgery)"),
              (status = 404, body = ErrorBody),
              (status = 408, body = ErrorBody, description = "the body stalled"), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody, description = "a body without `Content-Type: application/json`"),
              (status = 409, body = ErrorBody, description = "the job is not ADMITTED as that attempt (it started: report finished); details: job_id, status, attempt"),
              (status = 422, body = ErrorBody, description = "a field is invalid (details.field)"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(job_id = %id))]
pub async fn release(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (who, b): (_, ReportBody) = body(&state, &req, payload).await?;
    let attempt = check_attempt(b.attempt)?;
    report(&state, &who, &id, |_| Event::RunnerReleased { attempt }).await
}

/// `POST /v1/jobs/{id}/finished`: the runner says how an ADMITTED or RUNNING pool job
/// ended; its capacity is freed.
#[utoipa::path(post, path = "/v1/jobs/{id}/finished", tag = "admission", operation_id = "report_finished",
    request_body = FinishedBody,
    params(("id" = uuid::Uuid, Path, description = "job id")),
    responses((status = 200, body = JobView, description = "ended as reported (STOPPED for FAILED when a stop was asked); also for the same report again"),
              (status = 400, body = ErrorBody, description = "the body is not JSON"),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "no token is configured and a browser page of another origin asked (cross-site request forgery)"),
              (status = 404, body = ErrorBody),
              (status = 408, body = ErrorBody, description = "the body stalled"), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody, description = "a body without `Content-Type: application/json`"),
              (status = 409, body = ErrorBody, description = "the job is not ADMITTED or RUNNING as that attempt (its lease lapsed and it went back to the queue), or it ended otherwise; details: job_id, status, attempt"),
              (status = 422, body = ErrorBody, description = "a field is invalid (details.field)"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(job_id = %id))]
pub async fn finished(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (who, b): (_, FinishedBody) = body(&state, &req, payload).await?;
    let attempt = check_attempt(b.attempt)?;
    if b.message
        .as_ref()
        .is_some_and(|m| m.chars().count() > MAX_MESSAGE_CHARS)
    {
        return Err(ApiError::invalid(
            "message",
            format!("must be at most {MAX_MESSAGE_CHARS} characters"),
        ));
    }
    let status = match b.status {
        RunnerOutcome::Succeeded => JobStatus::Succeeded,
        RunnerOutcome::Failed => JobStatus::Failed,
        RunnerOutcome::Stopped => JobStatus::Stopped,
    };
    report(&state, &who, &id, |_| Event::RunnerFinished {
        attempt,
        status,
        message: b.message,
    })
    .await
}
