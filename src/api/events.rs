//! `GET /v1/events`: job transitions as Server-Sent Events (DESIGN §4, "Events").
//!
//! Each event is one `job_events` row with its job's user and external id:
//!
//! ```text
//! id: 42
//! event: job
//! data: {"id":42,"job_id":"…","user":"alice","external_id":"order-7","from":"QUEUED","to":"DISPATCHING","at":"…","message":"…","pool":null}
//! ```
//!
//! A preemption's row (DESIGN §3, "Preemption") is sent as `event: job.preempted`,
//! and a cancel of an admitted or started pool job (DESIGN §3, "Admission") as `event:
//! job.stop_requested` (its runner is to stop it), with the same `id:` and `data`.
//!
//! A client that reconnects sends `Last-Event-ID: 42` (browsers' `EventSource` does it
//! by itself) and gets every event after 42 first, then the live ones: nothing is
//! missed. Without it the stream starts at the newest event. An idle stream gets a
//! `: keep-alive` comment every `events.keep_alive`.

use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use tokio::time::Instant;
use uuid::Uuid;

use super::body::parse_query;
use super::error::{ApiError, ErrorBody};
use super::validate::validate_user_id;
use super::AppState;
use crate::config::Role;
use crate::events::Reader;
use crate::store::{self, JobEvent};

/// The header a reconnecting SSE client sends with the id of the last event it got.
pub const LAST_EVENT_ID: &str = "Last-Event-ID";

/// Query of `GET /v1/events`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Only events of this user's jobs: a user id (1–128 characters, no whitespace,
    /// control or invisible characters, not `.` or `..`).
    #[param(value_type = String, min_length = 1, max_length = 128)]
    pub user: Option<String>,
    /// Only events of this job (a job id).
    #[param(value_type = Option<Uuid>)]
    pub job: Option<String>,
    /// Start after this event id, for clients that cannot send the `Last-Event-ID`
    /// header (which wins when both are given). 0 = from the first event.
    #[param(value_type = Option<i64>, minimum = 0)]
    pub last_event_id: Option<String>,
    /// Only events of jobs that must run in this pool (a `[[pools]]` name, 1–64
    /// characters): what a pool's runner reads (DESIGN §3, "Admission"). A token
    /// confined to a pool gets only its pool's events, named or not.
    #[param(value_type = Option<String>, min_length = 1, max_length = 64)]
    pub pool: Option<String>,
}

/// Given empty, in the header as in the query, is invalid: a client that has no id
/// leaves it out (browsers' `EventSource` sends none until it has one).
fn parse_event_id(field: &str, raw: &str) -> Result<Option<i64>, ApiError> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err(ApiError::invalid(
            field,
            "must be an event id: a whole number ≥ 0 (given empty)",
        ));
    }
    match raw.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(Some(n)),
        _ => Err(ApiError::invalid(
            field,
            "must be an event id: a whole number ≥ 0 (the `id:` of an event)",
        )),
    }
}

/// What one stream sends.
struct Stream {
    reader: Reader,
    user: Option<String>,
    job: Option<Uuid>,
    pool: Option<String>,
    keep_alive: Duration,
    opening: Option<Bytes>,
}

impl Stream {
    fn wants(&self, e: &JobEvent) -> bool {
        self.user.as_deref().is_none_or(|u| u == e.user)
            && self.job.is_none_or(|j| j == e.job_id)
            && self
                .pool
                .as_deref()
                .is_none_or(|p| e.pool.as_deref() == Some(p))
    }

    /// The next chunk: an event, or a keep-alive comment after `keep_alive` without
    /// one; `None` ends the stream (a database error: the client resumes).
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(b) = self.opening.take() {
            return Some(b);
        }
        let deadline = Instant::now() + self.keep_alive;
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.reader.next(wait).await {
                Ok(Some(e)) if self.wants(&e) => return Some(frame(&e)),
                Ok(Some(_)) if Instant::now() < deadline => continue,
                Ok(_) => return Some(Bytes::from_static(b": keep-alive\n\n")),
                Err(e) => {
                    tracing::warn!(error = %crate::error_chain(&e), "events stream ends on a database error; the client resumes with Last-Event-ID");
                    return None;
                }
            }
        }
    }
}

/// One event in the SSE wire format.
fn frame(e: &JobEvent) -> Bytes {
    let data = serde_json::to_string(e).unwrap_or_else(|_| "{}".into());
    let name = if e.is_preemption() {
        "job.preempted"
    } else if e.is_stop_request() {
        "job.stop_requested"
    } else {
        "job"
    };
    Bytes::from(format!("id: {}\nevent: {name}\ndata: {data}\n\n", e.id))
}

/// `GET /v1/events?user=&job=&pool=&last_event_id=`: a Server-Sent Events stream of job
/// transitions (`event: job`, `data` a [`JobEvent`]), resumable with `Last-Event-ID`.
#[utoipa::path(get, path = "/v1/events", tag = "events", params(EventsQuery,
        ("Last-Event-ID" = Option<i64>, Header, minimum = 0, description = "resume after this event id (sent by reconnecting SSE clients)")),
    responses((status = 200, body = JobEvent, content_type = "text/event-stream",
                description = "an endless stream: `id: <event id>`, `event: job`, `data: <JobEvent as JSON>`, and `: keep-alive` comments"),
              (status = 401, body = ErrorBody), (status = 422, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn stream(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "read events")?;
    let mut q: EventsQuery = parse_query(req.query_string())?;
    if let Some(u) = &q.user {
        validate_user_id("user", u)?;
    }
    // A token with a user streams only that user's jobs' events.
    q.user = who.user_filter("user", q.user)?;
    // A token confined to a pool streams only that pool's jobs' events.
    q.pool = who.pool_filter("pool", q.pool)?;
    let job = match q.job.as_deref() {
        Some(j) => Some(
            Uuid::parse_str(j.trim())
                .map_err(|_| ApiError::invalid("job", "must be a job id (a UUID)"))?,
        ),
        None => None,
    };
    let header = match req.headers().get(LAST_EVENT_ID) {
        Some(v) => {
            let v = v
                .to_str()
                .map_err(|_| ApiError::invalid(LAST_EVENT_ID, "must be visible ASCII"))?;
            parse_event_id(LAST_EVENT_ID, v)?
        }
        None => None,
    };
    let from_query = match q.last_event_id.as_deref() {
        // Given empty is invalid, as every other query parameter (DESIGN §4).
        Some(v) => parse_event_id("last_event_id", v)?,
        None => None,
    };
    let cursor = match header.or(from_query) {
        Some(id) => id,
        None => store::last_event_id(&state.db).await?,
    };
    let events = &state.settings.events;
    let opening = format!(
        "retry: {}\n: job events after id {cursor}\n\n",
        events.poll_interval.as_millis().max(1000)
    );
    let s = Stream {
        reader: Reader::new(state.db.clone(), cursor, events),
        user: q.user,
        job,
        pool: q.pool,
        keep_alive: events.keep_alive,
        opening: Some(Bytes::from(opening)),
    };
    let body = futures_util::stream::unfold(s, |mut s| async move {
        let chunk = s.next_chunk().await?;
        Some((Ok::<_, actix_web::Error>(chunk), s))
    });
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        // nginx and similar proxies: pass each event on at once.
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body))
}
