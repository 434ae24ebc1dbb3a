//! `/v1/users`: fair-share settings and state per user; admins change them.

use std::collections::HashMap;

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use entity::{user, JobStatus};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::body::numbers::{self, Written};
use super::body::{object, parse_json, read_body, whole};
use super::error::{ApiError, ErrorBody};
use super::shapes::{Empty, ResourceLimit, ResourcesOut};
use super::validate::{
    check_job_limit, check_path, check_resource_limit, check_weight, validate_user_id,
};
use super::AppState;
use crate::config::Role;
use crate::store::{self, UserPatch};
use crate::views::LiveUser;

/// `PUT /v1/users/{id}` body. Absent fields stay as they are; `null` puts a field
/// back to its default: weight 1, the configured job limits, no resource cap.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserUpdate {
    /// Fair-share weight, 1e-6 to 1e6, or null for the default (1).
    #[serde(default, deserialize_with = "super::body::nullable")]
    #[schema(value_type = Option<f64>, minimum = 0.000001, maximum = 1000000.0)]
    pub weight: Option<Option<f64>>,
    /// 1..=1000000, or null for the default.
    #[serde(default, deserialize_with = "whole::user_limit_double")]
    #[schema(value_type = Option<i32>, minimum = 1, maximum = 1000000)]
    pub max_running_jobs: Option<Option<i32>>,
    /// 1..=1000000, or null for the default. (0 would answer every submit with a
    /// 429 whose `Retry-After` can never come true; to stop a user's jobs, pause it.)
    #[serde(default, deserialize_with = "whole::user_limit_double")]
    #[schema(value_type = Option<i32>, minimum = 1, maximum = 1000000)]
    pub max_queued_jobs: Option<Option<i32>>,
    /// Cap on the user's allocation, or null for none.
    #[serde(default, deserialize_with = "object::double_opt")]
    #[schema(value_type = Option<ResourceLimit>)]
    pub max_resources: Option<Option<ResourceLimit>>,
    /// A readable name for the user (for an id such as `u-3f9a…` that a keyed hash
    /// made), 1–128 characters without control or invisible characters (spaces are
    /// fine), or null for none; the document's pattern is set from the rule
    /// (`api::user_id::display_name_pattern`).
    #[serde(default, deserialize_with = "super::body::nullable")]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 128)]
    pub display_name: Option<Option<String>>,
    /// Whether the user's jobs that do not say (`preemptible` on submit, the
    /// `fairshare.preemptible` metadata key on Ray's API) may be preempted
    /// (DESIGN §2 "Preemption"); null puts back the default, false. Applies to jobs
    /// submitted from then on.
    #[serde(default, deserialize_with = "super::body::nullable")]
    #[schema(value_type = Option<bool>)]
    pub preemptible: Option<Option<bool>>,
    /// The user's group: the path of an existing group (`ibm-q/open/main`; DESIGN §2
    /// "Groups"), or null to move the user to the root. A path that is not a group is
    /// 422 naming `group`.
    #[serde(default, deserialize_with = "super::body::nullable")]
    #[schema(value_type = Option<String>, min_length = 1)]
    pub group: Option<Option<String>>,
}

/// A user: settings from the database, live fair-share state from the arbiter.
#[derive(Debug, Serialize, ToSchema)]
pub struct UserView {
    pub id: String,
    /// The admin-set readable name, or null.
    pub display_name: Option<String>,
    /// Whether the user's jobs that do not say may be preempted (their default).
    pub preemptible: bool,
    /// The path of the user's group, or null (the root).
    pub group: Option<String>,
    pub weight: f64,
    pub paused: bool,
    /// The user's own cap, or null for the default.
    pub max_running_jobs: Option<i32>,
    pub max_queued_jobs: Option<i32>,
    pub max_resources: Option<ResourceLimit>,
    /// The caps in force (own or default).
    pub effective_max_running_jobs: u32,
    pub effective_max_queued_jobs: u32,
    /// QUEUED jobs.
    pub queued: u64,
    /// DISPATCHING + PENDING + RUNNING jobs.
    pub running: u64,
    /// What the outstanding jobs are charged: what Ray's State API says they hold,
    /// never less than declared (`scheduler.charge`).
    pub allocation: ResourcesOut,
    /// What the outstanding jobs declared.
    pub declared_allocation: ResourcesOut,
    /// Dominant share of the allocation over the healthy clusters' capacity (0..1).
    pub share: f64,
    /// Decayed usage h_u (0..1), as of now.
    pub usage: f64,
    /// Fair-share key (share + usage) / weight, without the age term (which belongs
    /// to the user's next job and grows with its wait; `GET /v1/scheduler`'s
    /// `next_users` give the key with it, the one the order uses).
    pub key: f64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Users' queued and outstanding counts and live fair-share state: the arbiter's, in
/// one message, once recovery has loaded the queues (the same numbers as
/// `GET /v1/scheduler` and `/metrics`, without scanning jobs); before that, or with no
/// scheduler, counted in the database.
enum Counts {
    Live(HashMap<String, LiveUser>),
    Stored(Vec<(String, JobStatus, i64)>),
}

async fn counts(state: &AppState, user: Option<&str>) -> Result<Counts, ApiError> {
    if let Some(s) = state.scheduler() {
        if let Some(live) = s.users_state(user).await {
            return Ok(Counts::Live(live));
        }
    }
    Ok(Counts::Stored(store::status_counts(&state.db, user).await?))
}

fn user_view(state: &AppState, u: user::Model, counts: &Counts) -> UserView {
    // Without live state (a follower, DESIGN §10, or a user the arbiter does not
    // know) usage is the decayed usage the leader last saved.
    let mut saved_usage = None;
    let (queued, running, live) = match counts {
        Counts::Live(m) => {
            let live = m.get(&u.id).cloned().unwrap_or_else(|| {
                saved_usage = Some(u.usage);
                LiveUser::default()
            });
            (live.queued as u64, u64::from(live.running), live)
        }
        Counts::Stored(rows) => {
            let mine = rows.iter().filter(|(id, _, _)| *id == u.id);
            let sum = |f: fn(JobStatus) -> bool| {
                mine.clone()
                    .filter(|(_, s, _)| f(*s))
                    .map(|(_, _, n)| *n as u64)
                    .sum::<u64>()
            };
            let queued = sum(|s| s == JobStatus::Queued);
            let running = sum(JobStatus::is_outstanding);
            saved_usage = Some(u.usage);
            (queued, running, LiveUser::default())
        }
    };
    let sched = &state.settings.scheduler;
    UserView {
        effective_max_running_jobs: u
            .max_running_jobs
            .map(|v| v.max(0) as u32)
            .unwrap_or(sched.default_max_running_jobs),
        effective_max_queued_jobs: u
            .max_queued_jobs
            .map(|v| v.max(0) as u32)
            .unwrap_or(sched.default_max_queued_jobs),
        max_resources: u
            .max_resources
            .as_ref()
            .and_then(|v| serde_json::from_value(v.clone()).ok()),
        group: store::group_of(&u).map(str::to_owned),
        id: u.id,
        display_name: u.display_name,
        preemptible: u.preemptible,
        weight: u.weight,
        paused: u.paused,
        max_running_jobs: u.max_running_jobs,
        max_queued_jobs: u.max_queued_jobs,
        queued,
        running,
        allocation: live.allocation.into(),
        declared_allocation: live.declared.into(),
        share: live.share,
        usage: saved_usage.unwrap_or(live.usage),
        key: live.key,
        created_at: u.created_at,
        updated_at: u.updated_at,
    }
}

/// `GET /v1/users`.
#[utoipa::path(get, path = "/v1/users", tag = "users", operation_id = "list_users",
    responses((status = 200, body = [UserView]), (status = 401, body = ErrorBody),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
pub async fn list(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    state.auth.require(&req, Role::Submitter, "read users")?;
    let users = store::list_users(&state.db).await?;
    let counts = counts(&state, None).await?;
    let out: Vec<UserView> = users
        .into_iter()
        .map(|u| user_view(&state, u, &counts))
        .collect();
    Ok(HttpResponse::Ok().json(out))
}

fn check_id(id: &str) -> Result<(), ApiError> {
    validate_user_id("id", id)
}

/// `GET /v1/users/{id}`.
#[utoipa::path(get, path = "/v1/users/{id}", tag = "users", operation_id = "get_user",
    params(("id" = String, Path, min_length = 1, max_length = 128, description = "user id: 1–128 characters, no whitespace, control or invisible (format, zero-width, variation selector, default-ignorable) characters, not `.` or `..`")),
    responses((status = 200, body = UserView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
pub async fn get(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    state.auth.require(&req, Role::Submitter, "read users")?;
    let not_found = || ApiError::NotFound(format!("no user with id {:?}", id.as_str()));
    // An id no user could have (e.g. with control characters) names nobody.
    check_id(&id).map_err(|_| not_found())?;
    let u = store::get_user(&state.db, &id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no user with id {:?}", id.as_str())))?;
    let counts = counts(&state, Some(&u.id)).await?;
    Ok(HttpResponse::Ok().json(user_view(&state, u, &counts)))
}

/// The numbers of a `PUT /v1/users/{id}` body checked as written ([`numbers::check`]).
pub const UPDATE_NUMBERS: &[(&str, Written)] = &[
    ("max_resources.cpu", Written::Resource),
    ("max_resources.gpu", Written::Resource),
    ("max_resources.memory_bytes", Written::Whole),
    ("max_running_jobs", Written::Whole),
    ("max_queued_jobs", Written::Whole),
];

impl UserUpdate {
    fn into_patch(self) -> Result<UserPatch, ApiError> {
        if let Some(Some(w)) = self.weight {
            check_weight("weight", w)?;
        }
        if let Some(Some(n)) = self.max_running_jobs {
            check_job_limit("max_running_jobs", n)?;
        }
        if let Some(Some(n)) = self.max_queued_jobs {
            check_job_limit("max_queued_jobs", n)?;
        }
        if let Some(Some(limit)) = &self.max_resources {
            check_resource_limit("max_resources", limit)?;
        }
        if let Some(Some(name)) = &self.display_name {
            let n = name.chars().count();
            // Spaces are fine in a name; other whitespace, control and invisible
            // characters (a right-to-left override, U+202E, turns a name around on
            // screen: a fresh tester's finding) are refused as in user ids.
            let refused = name
                .chars()
                .find(|&c| c != ' ' && crate::user_id::is_refused(c));
            // Blank, or padded: shown in place of an id, it would hide the user (a
            // fresh tester's finding: " " was taken).
            let padded = name.starts_with(' ') || name.ends_with(' ');
            if !(1..=128).contains(&n) || refused.is_some() || padded {
                return Err(ApiError::invalid(
                    "display_name",
                    "must be 1 to 128 characters without control or invisible characters, \
                     not starting or ending with a space, or null for none",
                ));
            }
        }
        if let Some(Some(g)) = &self.group {
            check_path("group", g)?;
        }
        Ok(UserPatch {
            // null: back to the default, as null puts a limit back to the default.
            weight: self
                .weight
                .map(|w| w.unwrap_or(crate::store::DEFAULT_WEIGHT)),
            max_running_jobs: self.max_running_jobs,
            max_queued_jobs: self.max_queued_jobs,
            max_resources: self
                .max_resources
                .map(|o| o.map(|l| serde_json::to_value(l).unwrap_or_default())),
            paused: None,
            display_name: self.display_name,
            preemptible: self.preemptible.map(|p| p.unwrap_or(false)),
            group: self.group,
        })
    }
}

/// `PUT /v1/users/{id}` (admin): changes weight and limits; creates the user if new.
/// A field left out stays as it is; `null` puts it back to its default (weight 1,
/// the configured job limits, no resource cap).
#[utoipa::path(put, path = "/v1/users/{id}", tag = "users", request_body = UserUpdate, operation_id = "put_user",
    params(("id" = String, Path, min_length = 1, max_length = 128, description = "user id: 1–128 characters, no whitespace, control or invisible (format, zero-width, variation selector, default-ignorable) characters, not `.` or `..`")),
    responses((status = 200, body = UserView), (status = 400, body = ErrorBody, description = "the body is not JSON"),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "not an admin token; or, with no token configured, a browser page of another origin asked"),
              (status = 408, body = ErrorBody, description = "the body stalled: no bytes for server.body_idle_timeout (10 s); the connection is closed"), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody, description = "a body without `Content-Type: application/json` (unsupported_media_type, details.field = Content-Type)"), (status = 422, body = ErrorBody, description = "a field or the id is invalid (details.field)"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(user = %id))]
pub async fn put(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    state.auth.require(&req, Role::Admin, "change users")?;
    check_id(&id)?;
    let body = read_body(&req, payload, &state.settings.server).await?;
    let update: UserUpdate = parse_json(&body, false)?;
    numbers::check(&body, UPDATE_NUMBERS)?;
    let patch = update.into_patch()?;
    apply(&state, &id, patch).await
}

async fn apply(state: &AppState, id: &str, patch: UserPatch) -> Result<HttpResponse, ApiError> {
    let u = store::upsert_user(&state.db, id, patch)
        .await
        .map_err(|e| match e {
            store::GroupError::Db(e) => ApiError::from(e),
            other => ApiError::invalid(
                "group",
                format!("{other}; create it first (PUT /v1/groups/{{path}})"),
            ),
        })?;
    tracing::info!(weight = u.weight, paused = u.paused, group = ?u.group_path, "user updated");
    match state.scheduler() {
        Some(s) => s.user_changed(&u).await,
        None => state.leadership.hand_over(&format!("user:{}", u.id)).await,
    }
    let counts = counts(state, Some(&u.id)).await?;
    Ok(HttpResponse::Ok().json(user_view(state, u, &counts)))
}

async fn set_paused(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: &str,
    payload: web::Payload,
    paused: bool,
) -> Result<HttpResponse, ApiError> {
    state.auth.require(
        &req,
        Role::Admin,
        if paused {
            "pause users"
        } else {
            "resume users"
        },
    )?;
    check_id(id)?;
    let body = read_body(&req, payload, &state.settings.server).await?;
    let _: Empty = parse_json(&body, true)?;
    if store::get_user(&state.db, id).await?.is_none() {
        return Err(ApiError::NotFound(format!(
            "no user with id {id:?}; a user exists once it submits a job or an admin PUTs it"
        )));
    }
    apply(
        &state,
        id,
        UserPatch {
            paused: Some(paused),
            ..Default::default()
        },
    )
    .await
}

/// `POST /v1/users/{id}/pause` (admin): nothing new is dispatched for the user; queued
/// jobs stay, running ones go on. Takes effect before the next cycle.
#[utoipa::path(post, path = "/v1/users/{id}/pause", tag = "users", operation_id = "pause_user",
    request_body(content = Option<Empty>, description = "nothing, or `{}`"),
    params(("id" = String, Path, min_length = 1, max_length = 128, description = "user id: 1–128 characters, no whitespace, control or invisible (format, zero-width, variation selector, default-ignorable) characters, not `.` or `..`")),
    responses((status = 200, body = UserView), (status = 400, body = ErrorBody, description = "the body is not JSON"),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "not an admin token; or, with no token configured, a browser page of another origin asked"),
              (status = 404, body = ErrorBody, description = "no such user (a user exists once it submits a job or an admin PUTs it)"),
              (status = 408, body = ErrorBody, description = "the body stalled: no bytes for server.body_idle_timeout (10 s); the connection is closed"), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody, description = "a body without `Content-Type: application/json` (unsupported_media_type, details.field = Content-Type)"), (status = 422, body = ErrorBody, description = "the body is not empty or `{}`, or the id is invalid (details.field)"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(user = %id))]
pub async fn pause(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    set_paused(state, req, &id, payload, true).await
}

/// `POST /v1/users/{id}/resume` (admin).
#[utoipa::path(post, path = "/v1/users/{id}/resume", tag = "users", operation_id = "resume_user",
    request_body(content = Option<Empty>, description = "nothing, or `{}`"),
    params(("id" = String, Path, min_length = 1, max_length = 128, description = "user id: 1–128 characters, no whitespace, control or invisible (format, zero-width, variation selector, default-ignorable) characters, not `.` or `..`")),
    responses((status = 200, body = UserView), (status = 400, body = ErrorBody, description = "the body is not JSON"),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "not an admin token; or, with no token configured, a browser page of another origin asked"),
              (status = 404, body = ErrorBody, description = "no such user (a user exists once it submits a job or an admin PUTs it)"),
              (status = 408, body = ErrorBody, description = "the body stalled: no bytes for server.body_idle_timeout (10 s); the connection is closed"), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody, description = "a body without `Content-Type: application/json` (unsupported_media_type, details.field = Content-Type)"), (status = 422, body = ErrorBody, description = "the body is not empty or `{}`, or the id is invalid (details.field)"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(user = %id))]
pub async fn resume(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    set_paused(state, req, &id, payload, false).await
}
