//! `POST /v1/attempts/{submission_id}/{started|ended}`: an attempt's watcher says its
//! driver started or ended (`ray::notify`, DESIGN §5 "How the end of a job is
//! learned"). No bearer token: the URL's signature is the proof. A hint changes nothing
//! by itself: the leader's monitor asks Ray about that attempt at once, and Ray's
//! answer decides; a follower hands the hint on to the leader (PostgreSQL `NOTIFY`).
//! The answer to `started` says whether the attempt must not run (`stop`), from the
//! job's row, so that a cancelled or superseded attempt that Ray starts anyway is
//! ended by its own watcher.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ErrorBody;
use super::{ApiError, AppState};
use crate::ray::notify::{HintKind, Hints, SIGNATURE_HEX};

/// The answer to a notification.
#[derive(Serialize, ToSchema)]
pub struct HintAnswer {
    /// `started` or `ended`.
    pub kind: String,
    /// The attempt's Ray `submission_id`.
    pub submission_id: String,
    /// `checked` (taken by the leader, which asks Ray now when the attempt is one it
    /// follows and otherwise drops it: `fairshare_attempt_hints_total`'s `outcome`
    /// says which) or `forwarded` (sent on to the leader).
    pub outcome: String,
    /// For `started`: the attempt must not run (its job was cancelled or has ended,
    /// or it is no longer the job's current attempt): the watcher ends it at once.
    pub stop: bool,
}

/// Whether attempt `attempt` of job `job_id` must not run, by its row: no such job, the
/// job ended or a stop was asked, or the attempt is not the current one.
async fn must_not_run(
    state: &AppState,
    job_id: uuid::Uuid,
    attempt: u32,
) -> Result<bool, ApiError> {
    let Some(j) = crate::store::get_job(&state.db, job_id).await? else {
        return Ok(true);
    };
    let facts = crate::lifecycle::JobFacts::of(&j);
    Ok(j.status.is_terminal() || facts.stop_reason.is_some() || facts.attempt != attempt)
}

/// The largest attempt a notification may name (the OpenAPI pattern's nine digits).
const MAX_ATTEMPT: u32 = 999_999_999;

/// The `sig` parameter: the only query parameter, given once, [`SIGNATURE_HEX`] lowercase hex
/// digits.
fn signature(query: &str) -> Result<String, ApiError> {
    let mut sig = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k != "sig" {
            return Err(ApiError::invalid(
                k,
                "unknown query parameter; only sig is taken",
            ));
        }
        if sig.replace(v.to_string()).is_some() {
            return Err(ApiError::invalid("sig", "given more than once"));
        }
    }
    let sig = sig.ok_or_else(|| ApiError::invalid("sig", "required"))?;
    let hex = sig.len() == SIGNATURE_HEX
        && sig
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !hex {
        return Err(ApiError::invalid(
            "sig",
            format!("must be {SIGNATURE_HEX} lowercase hex digits"),
        ));
    }
    Ok(sig)
}

/// Takes a watcher's notification.
#[utoipa::path(post, path = "/v1/attempts/{submission_id}/{kind}", tag = "attempts", operation_id = "attempt_hint",
    params(("submission_id" = String, Path, description = "the attempt's Ray submission id: the job id, or `<job id>-<attempt>` from attempt 2",
            pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(-([2-9]|[1-9][0-9]{1,8}))?$"),
           ("kind" = String, Path, description = "`started` or `ended`", pattern = "^(started|ended)$"),
           ("sig" = String, Query, description = "the signature in the watcher's URL", pattern = "^[0-9a-f]{32}$")),
    responses((status = 202, body = HintAnswer, description = "taken as a hint: the leader asks Ray about the attempt now; for `started`, `stop` says whether the attempt must not run"),
              (status = 403, body = ErrorBody, description = "the signature is not this service's for this attempt, or notifications are off"),
              (status = 413, body = ErrorBody), (status = 414, body = ErrorBody),
              (status = 422, body = ErrorBody, description = "a malformed submission id, kind or signature (details.field)"),
              (status = 503, body = ErrorBody, description = "the database is unavailable (a follower could not hand it on)")))]
#[tracing::instrument(skip_all, fields(submission_id = %path.0))]
pub async fn hint(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (sid, kind) = path.into_inner();
    let kind = HintKind::parse(&kind)
        .ok_or_else(|| ApiError::invalid("kind", "must be started or ended"))?;
    // Attempts as the OpenAPI pattern has them: 2 to 999,999,999 (nine digits).
    let (job_id, attempt) = crate::lifecycle::parse_submission_id(&sid)
        .filter(|(_, attempt)| *attempt <= MAX_ATTEMPT)
        .ok_or_else(|| {
            ApiError::invalid(
                "submission_id",
                "must be a job id (a UUID) or <job id>-<attempt> with attempt 2 to 999999999",
            )
        })?;
    let sig = signature(req.query_string())?;
    let scheduler = state.scheduler();
    if scheduler.is_some()
        && !Hints::of(&state.settings.notify).is_some_and(|h| h.verify(&sid, kind, &sig))
    {
        crate::metrics::get().hint(kind.as_str(), "forged");
        return Err(ApiError::BadSignature);
    }
    let stop = kind == HintKind::Started && must_not_run(&state, job_id, attempt).await?;
    let answer = |outcome: &str| {
        HttpResponse::Accepted().json(HintAnswer {
            kind: kind.as_str().to_string(),
            submission_id: sid.clone(),
            outcome: outcome.to_string(),
            stop,
        })
    };
    let Some(scheduler) = scheduler else {
        // A follower: the leader checks the signature with its own key.
        let payload = format!("hint:{}:{sid}:{sig}", kind.as_str());
        crate::store::notify(&state.db, &payload).await?;
        crate::metrics::get().hint(kind.as_str(), "forwarded");
        return Ok(answer("forwarded"));
    };
    scheduler.hint(job_id, attempt, kind);
    Ok(answer("checked"))
}
