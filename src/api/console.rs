//! What the browser console (`/ui/`, DESIGN §4) reads beyond the rest of `/v1`: a
//! job's status timeline, each user's share against its fair share over the last
//! hour, and the role of the caller's token (so that the page can disable what the
//! token may not do; the API refuses it anyway).
//!
//! Shares over time come from [`ShareHistory`]: a sampler task on every replica
//! that, while the replica leads, reads the arbiter's live user state every
//! [`SAMPLE_EVERY`] and keeps the last [`HISTORY`] in memory. It is the service's own
//! data (not Prometheus); a restart or a change of leader starts the hour afresh.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use entity::JobStatus;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::error::{ApiError, ErrorBody};
use super::AppState;
use crate::config::Role;
use crate::leadership::Leadership;
use crate::store;

/// How often the sampler reads the shares: often enough that a chart of one hour
/// shows a job of a few seconds, rarely enough that the arbiter does not notice
/// (one message per sample).
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// How far back the history reaches (the console's chart shows one hour).
pub const HISTORY: Duration = Duration::from_secs(3600);

/// One user's shares in one [`ShareSample`].
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct UserShare {
    pub user: String,
    /// Dominant share of the user's outstanding jobs over the healthy clusters'
    /// capacity (0..1), as `GET /v1/users` shows it.
    pub share: f64,
    /// Weighted fair share (0..1), as `fairshare_user_fair_share`: the user's weight
    /// over the summed weights of the users that have queued or outstanding jobs; with
    /// groups, hierarchical: its group's fair share divided among the group's users
    /// and subgroups with work by weight, the root's among its groups and users
    /// likewise (DESIGN §2 "Groups").
    pub fair_share: f64,
    /// The path of the user's group, or null (the root).
    pub group: Option<String>,
}

/// The shares at one instant. Users with neither queued nor outstanding jobs are
/// left out (their share and fair share are 0).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ShareSample {
    /// When it was taken (RFC 3339).
    pub at: DateTime<Utc>,
    pub users: Vec<UserShare>,
}

/// `GET /v1/shares`: the samples of the last hour, oldest first.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ShareHistoryView {
    /// Seconds between samples.
    pub sample_every_seconds: f64,
    /// Seconds of history kept.
    pub history_seconds: f64,
    pub samples: Vec<ShareSample>,
}

/// One row of a job's status timeline (`job_events`), oldest first.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct JobEventView {
    /// `null` for the creation event.
    #[schema(value_type = Option<String>)]
    pub from: Option<JobStatus>,
    /// QUEUED, DISPATCHING, PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED.
    #[schema(value_type = String)]
    pub to: JobStatus,
    /// When the transition was committed (RFC 3339).
    pub at: DateTime<Utc>,
    /// Why, in words (e.g. Ray's message, "cancelled by request").
    pub detail: Option<String>,
}

/// `GET /v1/jobs/{id}/events`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct JobEventsView {
    pub id: Uuid,
    pub events: Vec<JobEventView>,
}

/// `GET /v1/whoami`: what the presented token may do.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct WhoAmI {
    /// `admin`, `submitter`, or `none` (no valid token); `admin` when no token is
    /// configured (the API is open).
    pub role: String,
}

/// The last hour of [`ShareSample`]s, shared by the sampler task and the route.
/// The lock is never held across an `.await`.
#[derive(Clone, Default)]
pub struct ShareHistory {
    samples: Arc<Mutex<VecDeque<ShareSample>>>,
}

impl ShareHistory {
    /// Starts the sampler on the current actix runtime. It stops by itself once every
    /// clone of the returned history is dropped (the server has stopped).
    pub fn start(leadership: Leadership) -> ShareHistory {
        let history = ShareHistory::default();
        let weak = Arc::downgrade(&history.samples);
        actix_web::rt::spawn(sample_loop(weak, leadership));
        history
    }

    /// A copy of the samples, oldest first.
    pub fn snapshot(&self) -> Vec<ShareSample> {
        match self.samples.lock() {
            Ok(s) => s.iter().cloned().collect(),
            Err(poisoned) => poisoned.into_inner().iter().cloned().collect(),
        }
    }
}

/// Adds `sample`, dropping those older than [`HISTORY`] before it.
fn push(samples: &Mutex<VecDeque<ShareSample>>, sample: ShareSample) {
    let horizon = chrono::Duration::from_std(HISTORY).unwrap_or(chrono::Duration::zero());
    let oldest = sample.at - horizon;
    let mut s = match samples.lock() {
        Ok(s) => s,
        Err(poisoned) => poisoned.into_inner(),
    };
    while s.front().is_some_and(|f| f.at < oldest) {
        s.pop_front();
    }
    s.push_back(sample);
}

async fn sample_loop(weak: Weak<Mutex<VecDeque<ShareSample>>>, leadership: Leadership) {
    loop {
        actix_web::rt::time::sleep(SAMPLE_EVERY).await;
        if weak.strong_count() == 0 {
            return;
        }
        let Some(sample) = take_sample(&leadership).await else {
            continue;
        };
        match weak.upgrade() {
            Some(samples) => push(&samples, sample),
            None => return,
        }
    }
}

/// The shares now, while this replica leads and recovery is done; `None` otherwise.
async fn take_sample(leadership: &Leadership) -> Option<ShareSample> {
    let live = leadership.scheduler()?.users_state(None).await?;
    let mut users: Vec<UserShare> = live
        .into_iter()
        .filter(|(_, l)| l.queued > 0 || l.running > 0)
        .map(|(id, l)| UserShare {
            user: id,
            share: l.share,
            fair_share: l.fair_share,
            group: l.group,
        })
        .collect();
    users.sort_by(|a, b| a.user.cmp(&b.user));
    Some(ShareSample {
        at: Utc::now(),
        users,
    })
}

/// `GET /v1/shares`: each user's dominant share against its weighted fair share,
/// sampled every 5 s over the last hour, from this replica's memory (a follower
/// answers what it kept while it led, usually nothing).
#[utoipa::path(get, path = "/v1/shares", tag = "users", operation_id = "share_history",
    responses((status = 200, body = ShareHistoryView), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn shares(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    state.auth.require(&req, Role::Submitter, "read shares")?;
    Ok(HttpResponse::Ok().json(ShareHistoryView {
        sample_every_seconds: SAMPLE_EVERY.as_secs_f64(),
        history_seconds: HISTORY.as_secs_f64(),
        samples: state.shares.snapshot(),
    }))
}

/// `GET /v1/jobs/{id}/events`: the job's status transitions (`job_events`), oldest
/// first. 404 for an unknown id (or one that is not a UUID).
#[utoipa::path(get, path = "/v1/jobs/{id}/events", tag = "jobs", operation_id = "job_timeline",
    params(("id" = Uuid, Path, description = "job id")),
    responses((status = 200, body = JobEventsView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
pub async fn job_events(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "read jobs")?;
    let id = Uuid::parse_str(&id)
        .map_err(|_| ApiError::NotFound(format!("no job with id {:?} (job ids are UUIDs)", *id)))?;
    match store::get_job(&state.db, id).await? {
        Some(j) if who.may_access_job(&j) => {}
        _ => return Err(ApiError::NotFound(format!("no job with id {id}"))),
    }
    let events = store::job_events(&state.db, id)
        .await?
        .into_iter()
        .map(|e| JobEventView {
            from: e.from_status,
            to: e.to_status,
            at: e.at,
            detail: e.detail,
        })
        .collect();
    Ok(HttpResponse::Ok().json(JobEventsView { id, events }))
}

/// `GET /v1/whoami`: the role of the presented token: `admin`, `submitter`, or
/// `none` (no token, or one that is not configured). Always 200, so that a page can
/// ask before it has a token without an error.
#[utoipa::path(get, path = "/v1/whoami", tag = "system", operation_id = "whoami",
    responses((status = 200, body = WhoAmI)),
    security((), ("bearer" = [])))]
pub async fn whoami(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let role = match state.auth.require(&req, Role::Submitter, "read") {
        Ok(Role::Admin) => "admin",
        Ok(Role::Submitter) => "submitter",
        Err(ApiError::Unauthorized) => "none",
        Err(e) => return Err(e),
    };
    Ok(HttpResponse::Ok().json(WhoAmI { role: role.into() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: DateTime<Utc>) -> ShareSample {
        ShareSample {
            at,
            users: Vec::new(),
        }
    }

    #[test]
    fn the_history_keeps_one_hour_and_drops_what_is_older() {
        let h = ShareHistory::default();
        let t0 = Utc::now();
        push(&h.samples, sample(t0));
        push(&h.samples, sample(t0 + chrono::Duration::seconds(1800)));
        push(&h.samples, sample(t0 + chrono::Duration::seconds(3600)));
        assert_eq!(h.snapshot().len(), 3, "exactly one hour old is kept");
        push(&h.samples, sample(t0 + chrono::Duration::seconds(3601)));
        let at: Vec<_> = h.snapshot().iter().map(|s| s.at).collect();
        assert_eq!(at.len(), 3);
        assert_eq!(at[0], t0 + chrono::Duration::seconds(1800));
    }
}
