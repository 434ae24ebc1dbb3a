//! `/v1/groups`: the tree of groups (DESIGN §2 "Groups", §4): settings from the
//! database, live figures from the arbiter; admins create, change, pause, resume and
//! delete groups.
//!
//! A group is named by its path (`ibm-q/open/main`), so its parent is part of its
//! name: a cycle cannot be written down, and a group whose parent does not exist is
//! refused (422 naming `path`). The path may be sent with its slashes as they are
//! (`/v1/groups/ibm-q/open`) or encoded (`/v1/groups/ibm-q%2Fopen`); one route takes
//! the rest of the URL, and one ending in `/pause` or `/resume` is that action on the
//! group before it (`POST` only): so no segment of a group path may be `pause` or
//! `resume` (nor `.` or `..`, which a URL cannot carry).

use std::collections::{BTreeMap, HashMap};

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use entity::{group, JobStatus};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::body::numbers::{self, Written};
use super::body::{object, parse_json, read_body, whole};
use super::error::{ApiError, ErrorBody};
use super::shapes::{Empty, ResourceLimit, ResourcesOut};
use super::validate::{check_group_max_running, check_path, check_resource_limit, check_weight};
use super::AppState;
use crate::config::Role;
use crate::store::{self, GroupError, GroupPatch};
use crate::views::LiveGroup;

/// `PUT /v1/groups/{path}` body. Absent fields stay as they are (a new group starts
/// at weight 1 with no limits); `null` puts a field back to that default.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupUpdate {
    /// Weight among its siblings (groups and users beside it), 1e-6 to 1e6, or null
    /// for the default (1).
    #[serde(default, deserialize_with = "super::body::nullable")]
    #[schema(value_type = Option<f64>, minimum = 0.000001, maximum = 1000000.0)]
    pub weight: Option<Option<f64>>,
    /// Cap on the outstanding jobs of all users under the group (0 to 1000000), or
    /// null for none.
    #[serde(default, deserialize_with = "whole::group_max_running_double")]
    #[schema(value_type = Option<i32>, minimum = 0, maximum = 1000000)]
    pub max_running_jobs: Option<Option<i32>>,
    /// Cap on the summed allocation of all users under the group, or null for none.
    #[serde(default, deserialize_with = "object::double_opt")]
    #[schema(value_type = Option<ResourceLimit>)]
    pub max_resources: Option<Option<ResourceLimit>>,
}

/// A group: settings from the database, live figures from the arbiter (sums over
/// every user under it, subgroups included).
#[derive(Debug, Serialize, ToSchema)]
pub struct GroupView {
    /// Its path (`ibm-q/open/main`).
    pub path: String,
    /// Its parent's path, or null for a top-level group.
    pub parent: Option<String>,
    pub weight: f64,
    pub paused: bool,
    /// Cap on the outstanding jobs of the users under it, or null for none.
    pub max_running_jobs: Option<i32>,
    /// Cap on their summed allocation, or null for none.
    pub max_resources: Option<ResourceLimit>,
    /// The users whose group it is (not those of its subgroups), by id.
    pub users: Vec<String>,
    /// What the outstanding jobs of the users under it are charged.
    pub allocation: ResourcesOut,
    /// Dominant share of that allocation over the healthy clusters' capacity (0..1).
    pub share: f64,
    /// Weighted fair share (0..1): the capacity divided by weight among the root's
    /// groups and users with work, and each group's part among its children the same
    /// way.
    pub fair_share: f64,
    /// QUEUED jobs of the users under it.
    pub queued: u64,
    /// DISPATCHING + PENDING + RUNNING jobs of the users under it.
    pub running: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The numbers of a `PUT /v1/groups/{path}` body checked as written ([`numbers::check`]).
pub const GROUP_NUMBERS: &[(&str, Written)] = &[
    ("max_resources.cpu", Written::Resource),
    ("max_resources.gpu", Written::Resource),
    ("max_resources.memory_bytes", Written::Whole),
    ("max_running_jobs", Written::Whole),
];

/// The group and the action of a URL tail `…/pause` or `…/resume`.
fn action(tail: &str) -> Option<(&str, &str)> {
    tail.rsplit_once('/')
        .filter(|(_, a)| *a == "pause" || *a == "resume")
}

/// What the tail route allows: `POST` on `…/pause|resume`, else `GET, HEAD, PUT,
/// DELETE`.
fn allowed(tail: &str) -> ApiError {
    ApiError::MethodNotAllowed {
        allow: if action(tail).is_some() {
            "POST"
        } else {
            "GET, HEAD, PUT, DELETE"
        },
    }
}

/// Any other method on `/v1/groups/{path}…`: 405 with the methods that path takes.
pub async fn other_method(path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    Err(allowed(&path))
}

/// Live figures of every group: the arbiter's once recovery has loaded the queues;
/// before that, or on a follower, the stored job counts of the users under each
/// group (no allocation or shares).
async fn live(
    state: &AppState,
    groups: &[group::Model],
    members: &BTreeMap<String, Vec<String>>,
) -> Result<HashMap<String, LiveGroup>, ApiError> {
    if let Some(s) = state.scheduler() {
        if let Some(live) = s.groups_state().await {
            return Ok(live);
        }
    }
    let rows = store::status_counts(&state.db, None).await?;
    let mut per_user: HashMap<&str, (usize, u32)> = HashMap::new();
    for (user, status, n) in &rows {
        let e = per_user.entry(user.as_str()).or_default();
        if *status == JobStatus::Queued {
            e.0 += *n as usize;
        } else if status.is_outstanding() {
            e.1 += *n as u32;
        }
    }
    let mut out = HashMap::new();
    for g in groups {
        let prefix = format!("{}/", g.path);
        let mut live = LiveGroup::default();
        for (path, users) in members {
            if *path != g.path && !path.starts_with(&prefix) {
                continue;
            }
            for u in users {
                let (q, r) = per_user.get(u.as_str()).copied().unwrap_or_default();
                live.queued += q;
                live.running += r;
            }
        }
        out.insert(g.path.clone(), live);
    }
    Ok(out)
}

/// Each group's users, by group path.
async fn members(state: &AppState) -> Result<BTreeMap<String, Vec<String>>, ApiError> {
    let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for u in store::list_users(&state.db).await? {
        if let Some(g) = store::group_of(&u) {
            by.entry(g.to_owned()).or_default().push(u.id.clone());
        }
    }
    Ok(by)
}

fn view(
    g: group::Model,
    members: &BTreeMap<String, Vec<String>>,
    live: &HashMap<String, LiveGroup>,
) -> GroupView {
    let l = live.get(&g.path).cloned().unwrap_or_default();
    GroupView {
        parent: crate::policy::groups::parent(&g.path).map(str::to_string),
        users: members.get(&g.path).cloned().unwrap_or_default(),
        max_resources: g
            .max_resources
            .as_ref()
            .and_then(|v| serde_json::from_value(v.clone()).ok()),
        path: g.path,
        weight: g.weight,
        paused: g.paused,
        max_running_jobs: g.max_running_jobs,
        allocation: l.allocation.into(),
        share: l.share,
        fair_share: l.fair_share,
        queued: l.queued as u64,
        running: u64::from(l.running),
        created_at: g.created_at,
        updated_at: g.updated_at,
    }
}

/// One group as the API shows it (after a change, or for `GET`).
async fn one(state: &AppState, g: group::Model) -> Result<HttpResponse, ApiError> {
    let members = members(state).await?;
    let live = live(state, std::slice::from_ref(&g), &members).await?;
    Ok(HttpResponse::Ok().json(view(g, &members, &live)))
}

/// Tells the scheduler the tree changed: the leader's arbiter takes it before the
/// answer; a follower notifies the leader (DESIGN §10).
async fn changed(state: &AppState) -> Result<(), ApiError> {
    match state.scheduler() {
        Some(s) => s.groups_changed(store::list_groups(&state.db).await?).await,
        None => state.leadership.hand_over("groups").await,
    }
    Ok(())
}

fn not_found(path: &str) -> ApiError {
    ApiError::NotFound(format!("no group {path:?}"))
}

/// `GET /v1/groups`: every group, in path order.
#[utoipa::path(get, path = "/v1/groups", tag = "groups", operation_id = "list_groups",
    responses((status = 200, body = [GroupView]), (status = 401, body = ErrorBody),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
pub async fn list(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    state.auth.require(&req, Role::Submitter, "read groups")?;
    let groups = store::list_groups(&state.db).await?;
    let members = members(&state).await?;
    let live = live(&state, &groups, &members).await?;
    let out: Vec<GroupView> = groups
        .into_iter()
        .map(|g| view(g, &members, &live))
        .collect();
    Ok(HttpResponse::Ok().json(out))
}

/// `GET /v1/groups/{path}`.
#[utoipa::path(get, path = "/v1/groups/{path}", tag = "groups", operation_id = "get_group",
    params(("path" = String, Path, min_length = 1, description = "the group's path, segments of 1–64 characters `A-Z a-z 0-9 _ . -` joined by `/` (sent as they are or as `%2F`), at most 8")),
    responses((status = 200, body = GroupView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
pub async fn get(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    if action(&path).is_some() {
        return Err(allowed(&path));
    }
    state.auth.require(&req, Role::Submitter, "read groups")?;
    // A path no group could have names none.
    check_path("path", &path).map_err(|_| not_found(&path))?;
    let g = store::get_group(&state.db, &path)
        .await?
        .ok_or_else(|| not_found(&path))?;
    one(&state, g).await
}

impl GroupUpdate {
    fn into_patch(self) -> Result<GroupPatch, ApiError> {
        if let Some(Some(w)) = self.weight {
            check_weight("weight", w)?;
        }
        if let Some(Some(n)) = self.max_running_jobs {
            check_group_max_running("max_running_jobs", n)?;
        }
        if let Some(Some(limit)) = &self.max_resources {
            check_resource_limit("max_resources", limit)?;
        }
        Ok(GroupPatch {
            weight: self
                .weight
                .map(|w| w.unwrap_or(crate::store::DEFAULT_WEIGHT)),
            paused: None,
            max_running_jobs: self.max_running_jobs,
            max_resources: self
                .max_resources
                .map(|o| o.map(|l| serde_json::to_value(l).unwrap_or_default())),
        })
    }
}

/// A refusal of the store as the API answers it.
fn refused(e: GroupError) -> ApiError {
    match e {
        GroupError::Db(e) => ApiError::from(e),
        GroupError::NotFound(path) => not_found(&path),
        GroupError::NoParent(_) => ApiError::invalid("path", e.to_string()),
        GroupError::InUse { .. } => ApiError::Conflict(e.to_string()),
    }
}

/// `PUT /v1/groups/{path}` (admin): creates the group (its parent must exist) or
/// changes its weight and limits. A field left out stays as it is; `null` puts it
/// back to its default (weight 1, no cap).
#[utoipa::path(put, path = "/v1/groups/{path}", tag = "groups", request_body = GroupUpdate, operation_id = "put_group",
    params(("path" = String, Path, min_length = 1, description = "the group's path, segments of 1–64 characters `A-Z a-z 0-9 _ . -` joined by `/` (sent as they are or as `%2F`), at most 8; its parent must be a group")),
    responses((status = 200, body = GroupView), (status = 400, body = ErrorBody, description = "the body is not JSON"),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "not an admin token; or, with no token configured, a browser page of another origin asked"),
              (status = 408, body = ErrorBody, description = "the body stalled: no bytes for server.body_idle_timeout (10 s); the connection is closed"), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody, description = "a body without `Content-Type: application/json` (unsupported_media_type, details.field = Content-Type)"),
              (status = 422, body = ErrorBody, description = "a field is invalid, or the path is (not a group path, or its parent is not a group) (details.field)"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(group = %path))]
pub async fn put(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    if action(&path).is_some() {
        return Err(allowed(&path));
    }
    state.auth.require(&req, Role::Admin, "change groups")?;
    check_path("path", &path)?;
    let body = read_body(&req, payload, &state.settings.server).await?;
    let update: GroupUpdate = parse_json(&body, false)?;
    numbers::check(&body, GROUP_NUMBERS)?;
    let patch = update.into_patch()?;
    let (g, created) = store::put_group(&state.db, &path, patch, true)
        .await
        .map_err(refused)?;
    tracing::info!(weight = g.weight, created, "group stored");
    changed(&state).await?;
    one(&state, g).await
}

/// `DELETE /v1/groups/{path}` (admin): removes a group with no subgroups and no users
/// (409 otherwise: move the users, delete the subgroups first).
#[utoipa::path(delete, path = "/v1/groups/{path}", tag = "groups", operation_id = "delete_group",
    params(("path" = String, Path, min_length = 1, description = "the group's path (sent as it is or with `%2F`)")),
    responses((status = 204, description = "deleted"),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "not an admin token; or, with no token configured, a browser page of another origin asked"),
              (status = 404, body = ErrorBody, description = "no such group"),
              (status = 409, body = ErrorBody, description = "the group has subgroups or users"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(group = %path))]
pub async fn delete(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    if action(&path).is_some() {
        return Err(allowed(&path));
    }
    state.auth.require(&req, Role::Admin, "delete groups")?;
    check_path("path", &path).map_err(|_| not_found(&path))?;
    store::delete_group(&state.db, &path)
        .await
        .map_err(refused)?;
    tracing::info!("group deleted");
    changed(&state).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// `POST /v1/groups/{path}/pause|resume`: the route takes the whole tail, the last
/// segment says which.
pub async fn post(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    match action(&path) {
        Some((group, "pause")) => pause(state, req, group, payload).await,
        Some((group, _)) => resume(state, req, group, payload).await,
        None => Err(allowed(&path)),
    }
}

async fn set_paused(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: &str,
    payload: web::Payload,
    paused: bool,
) -> Result<HttpResponse, ApiError> {
    state.auth.require(
        &req,
        Role::Admin,
        if paused {
            "pause groups"
        } else {
            "resume groups"
        },
    )?;
    check_path("path", path).map_err(|_| not_found(path))?;
    let body = read_body(&req, payload, &state.settings.server).await?;
    let _: Empty = parse_json(&body, true)?;
    let patch = GroupPatch {
        paused: Some(paused),
        ..GroupPatch::default()
    };
    let (g, _) = store::put_group(&state.db, path, patch, false)
        .await
        .map_err(refused)?;
    tracing::info!(paused, "group paused or resumed");
    changed(&state).await?;
    one(&state, g).await
}

/// `POST /v1/groups/{path}/pause` (admin): nothing new is dispatched for any user under
/// the group (subgroups included); queued jobs stay, saying which group is paused,
/// running ones go on. Takes effect at the next cycle.
#[utoipa::path(post, path = "/v1/groups/{path}/pause", tag = "groups", operation_id = "pause_group",
    request_body(content = Option<Empty>, description = "nothing, or `{}`"),
    params(("path" = String, Path, min_length = 1, description = "the group's path (sent as it is or with `%2F`)")),
    responses((status = 200, body = GroupView), (status = 400, body = ErrorBody, description = "the body is not JSON"),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "not an admin token; or, with no token configured, a browser page of another origin asked"),
              (status = 404, body = ErrorBody, description = "no such group"),
              (status = 408, body = ErrorBody, description = "the body stalled: no bytes for server.body_idle_timeout (10 s); the connection is closed"), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody, description = "a body without `Content-Type: application/json` (unsupported_media_type, details.field = Content-Type)"), (status = 422, body = ErrorBody, description = "the body is not empty or `{}` (details.field)"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(group = %path))]
pub async fn pause(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: &str,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    set_paused(state, req, path, payload, true).await
}

/// `POST /v1/groups/{path}/resume` (admin).
#[utoipa::path(post, path = "/v1/groups/{path}/resume", tag = "groups", operation_id = "resume_group",
    request_body(content = Option<Empty>, description = "nothing, or `{}`"),
    params(("path" = String, Path, min_length = 1, description = "the group's path (sent as it is or with `%2F`)")),
    responses((status = 200, body = GroupView), (status = 400, body = ErrorBody, description = "the body is not JSON"),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "not an admin token; or, with no token configured, a browser page of another origin asked"),
              (status = 404, body = ErrorBody, description = "no such group"),
              (status = 408, body = ErrorBody, description = "the body stalled: no bytes for server.body_idle_timeout (10 s); the connection is closed"), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody, description = "a body without `Content-Type: application/json` (unsupported_media_type, details.field = Content-Type)"), (status = 422, body = ErrorBody, description = "the body is not empty or `{}` (details.field)"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(group = %path))]
pub async fn resume(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: &str,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    set_paused(state, req, path, payload, false).await
}
