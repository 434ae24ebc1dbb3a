//! `POST /v1/scheduler/what-if`: preview an admin change against the live queue
//! (issue 14 §3, DESIGN §4). Nothing changes: the arbiter hands over a copy of the
//! policy's input and [`crate::policy::preview`] runs the same pure policy on it twice,
//! as is and with the change.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::body::numbers::{self, Written};
use super::body::{object, parse_json, read_body, whole};
use super::error::{ApiError, ErrorBody};
use super::shapes::ResourceLimit;
use super::validate::{
    check_group_max_running, check_job_limit, check_memory_bytes, check_path, check_resource_limit,
    check_weight, validate_amount, validate_user_id,
};
use super::AppState;
use crate::config::Role;
use crate::policy::preview::{
    self, Change, ChangeError, ClusterChange, GroupChange, Move, UserChange,
};
use crate::policy::Resources;

/// Default number of grants a preview lists.
pub const DEFAULT_LIMIT: u32 = 20;
/// Largest number of grants a preview lists (each costs a pass of the policy at worst).
pub const MAX_LIMIT: u32 = 1000;

/// A proposed change to one user. Absent fields stay as they are; `null` is the
/// default, as in `PUT /v1/users/{id}`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserChangeIn {
    /// Fair-share weight, 1e-6 to 1e6, or null for the default (1).
    #[serde(default, deserialize_with = "super::body::nullable")]
    #[schema(value_type = Option<f64>, minimum = 0.000001, maximum = 1000000.0)]
    pub weight: Option<Option<f64>>,
    /// `true` pauses the user, `false` resumes it.
    pub paused: Option<bool>,
    /// 1..=1000000, or null for the configured default.
    #[serde(default, deserialize_with = "whole::user_limit_double")]
    #[schema(value_type = Option<i32>, minimum = 1, maximum = 1000000)]
    pub max_running_jobs: Option<Option<i32>>,
    /// Cap on the user's allocation, or null for none.
    #[serde(default, deserialize_with = "object::double_opt")]
    #[schema(value_type = Option<ResourceLimit>)]
    pub max_resources: Option<Option<ResourceLimit>>,
    /// Move the user to this group (a path that is a group), or null for the root.
    #[serde(default, deserialize_with = "super::body::nullable")]
    #[schema(value_type = Option<String>, min_length = 1)]
    pub group: Option<Option<String>>,
}

/// A proposed change to one group. Absent fields stay as they are.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupChangeIn {
    /// Weight among its siblings, 1e-6 to 1e6, or null for the default (1).
    #[serde(default, deserialize_with = "super::body::nullable")]
    #[schema(value_type = Option<f64>, minimum = 0.000001, maximum = 1000000.0)]
    pub weight: Option<Option<f64>>,
    /// `true` pauses the group, `false` resumes it.
    pub paused: Option<bool>,
    /// Cap on its users' outstanding jobs, 0 to 1000000, or null for none.
    #[serde(default, deserialize_with = "whole::group_max_running_double")]
    #[schema(value_type = Option<i32>, minimum = 0, maximum = 1000000)]
    pub max_running_jobs: Option<Option<i32>>,
}

/// A cluster's total capacity in a proposed change; an absent resource keeps its
/// current total.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CapacityIn {
    /// Cores: 0 to 1e6, at most 4 decimal places.
    #[schema(minimum = 0.0, maximum = 1000000.0, multiple_of = 0.0001)]
    pub cpu: Option<f64>,
    /// GPUs: 0 to 1e6, at most 4 decimal places.
    #[schema(minimum = 0.0, maximum = 1000000.0, multiple_of = 0.0001)]
    pub gpu: Option<f64>,
    /// Bytes, a whole number from 0 to 2^53.
    #[serde(default, deserialize_with = "whole::opt")]
    #[schema(minimum = 0, maximum = 9007199254740992_u64)]
    pub memory_bytes: Option<u64>,
}

/// A proposed change to one cluster. Other tenants' usage and this service's jobs
/// there stay as they are.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterChangeIn {
    /// New total capacity.
    #[serde(default, deserialize_with = "object::opt")]
    pub capacity: Option<CapacityIn>,
    /// Whether the cluster is healthy (granted to).
    pub healthy: Option<bool>,
}

/// `POST /v1/scheduler/what-if` body: the proposed change.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WhatIfRequest {
    /// Changes by user id; each user must be known to the scheduler.
    #[serde(default, deserialize_with = "object::map")]
    pub users: BTreeMap<String, UserChangeIn>,
    /// Changes by cluster name; each must be configured.
    #[serde(default, deserialize_with = "object::map")]
    pub clusters: BTreeMap<String, ClusterChangeIn>,
    /// Changes by group path; each must be a group.
    #[serde(default, deserialize_with = "object::map")]
    pub groups: BTreeMap<String, GroupChangeIn>,
    /// How many grants to list, 1..=1000 (default 20).
    #[serde(default, deserialize_with = "whole::preview_limit")]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// The numbers of a what-if body checked as written ([`numbers::check`]).
pub const WHAT_IF_NUMBERS: &[(&str, Written)] = &[
    ("users.*.max_resources.cpu", Written::Resource),
    ("users.*.max_resources.gpu", Written::Resource),
    ("users.*.max_resources.memory_bytes", Written::Whole),
    ("users.*.max_running_jobs", Written::Whole),
    ("clusters.*.capacity.cpu", Written::Resource),
    ("clusters.*.capacity.gpu", Written::Resource),
    ("clusters.*.capacity.memory_bytes", Written::Whole),
    ("limit", Written::Whole),
];

/// One previewed grant.
#[derive(Debug, Serialize, ToSchema)]
pub struct PreviewGrantView {
    /// 1-based place in the order of grants.
    pub position: usize,
    pub job_id: Uuid,
    pub user: String,
    /// The cluster, for a grant the next cycle makes now; null for one made once
    /// capacity frees.
    pub cluster: Option<String>,
    /// True when today's free capacity holds it (the next cycle grants it); false
    /// when it starts only as capacity frees (no running job ending meanwhile).
    pub now: bool,
}

/// A user's fair-share state at the preview's instant.
#[derive(Debug, Serialize, ToSchema)]
pub struct UserStateView {
    pub weight: f64,
    pub paused: bool,
    /// Dominant share of its allocation over the healthy clusters' capacity.
    pub share: f64,
    /// Decayed usage h_u.
    pub usage: f64,
    /// (share + usage) / weight, as in `GET /v1/users`.
    pub key: f64,
}

/// A user before and with the change.
#[derive(Debug, Serialize, ToSchema)]
pub struct UserCompareView {
    pub user: String,
    pub before: UserStateView,
    pub after: UserStateView,
}

/// A job whose place among the next grants changes.
#[derive(Debug, Serialize, ToSchema)]
pub struct MovedJobView {
    pub job_id: Uuid,
    pub user: String,
    /// Place without the change; null = not among the listed grants.
    pub before: Option<usize>,
    /// Place with the change; null = not among the listed grants.
    pub after: Option<usize>,
    /// `sooner` or `later`.
    #[schema(value_type = String, pattern = "^(sooner|later)$")]
    pub change: Move,
}

/// What the change would do. Nothing was changed.
#[derive(Debug, Serialize, ToSchema)]
pub struct WhatIfView {
    /// The instant of the arbiter's state the preview ran on (RFC 3339).
    pub at: DateTime<Utc>,
    /// The most grants each list holds.
    pub limit: u32,
    /// The next grants under today's state, in order.
    pub before: Vec<PreviewGrantView>,
    /// The next grants with the change, in order.
    pub after: Vec<PreviewGrantView>,
    /// Why `before` is empty (no job queued, no healthy cluster with capacity, or
    /// every user with queued jobs held back); null when it lists a grant.
    pub before_reason: Option<String>,
    /// Why `after` is empty, as `before_reason`; null when it lists a grant.
    pub after_reason: Option<String>,
    /// Every user the scheduler knows, by id, before and with the change.
    pub users: Vec<UserCompareView>,
    /// Queued jobs that would start sooner or later with the change, by their place
    /// with it (those that drop out of the list last).
    pub moved: Vec<MovedJobView>,
}

impl WhatIfRequest {
    /// Validates every field (422 naming it, e.g. `users.alice.weight`) and resolves
    /// defaults into the policy's change.
    fn into_change(self, default_running: u32) -> Result<(Change, usize), ApiError> {
        let limit = self.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::invalid(
                "limit",
                format!("must be an integer from 1 to {MAX_LIMIT}"),
            ));
        }
        let mut change = Change::default();
        for (id, u) in self.users {
            // A key that cannot be a user id is a bad field, not an unknown user.
            validate_user_id(&format!("users.{id}"), &id)?;
            let field = |f: &str| format!("users.{id}.{f}");
            if let Some(Some(w)) = u.weight {
                check_weight(&field("weight"), w)?;
            }
            let max_running_jobs = match u.max_running_jobs {
                None => None,
                Some(None) => Some(default_running),
                Some(Some(n)) => {
                    check_job_limit(&field("max_running_jobs"), n)?;
                    Some(n as u32)
                }
            };
            let max_resources = match u.max_resources {
                None => None,
                Some(None) => Some(None),
                Some(Some(l)) => {
                    check_resource_limit(&field("max_resources"), &l)?;
                    // As the arbiter reads it: a resource not named is not capped.
                    Some(Some(Resources::new(
                        l.cpu.unwrap_or(f64::INFINITY),
                        l.gpu.unwrap_or(f64::INFINITY),
                        l.memory_bytes.map_or(f64::INFINITY, |m| m as f64),
                    )))
                }
            };
            change.users.insert(
                id.clone(),
                UserChange {
                    weight: u.weight.map(|w| w.unwrap_or(crate::store::DEFAULT_WEIGHT)),
                    paused: u.paused,
                    max_running_jobs,
                    max_resources,
                    group: match u.group {
                        None => None,
                        Some(None) => Some(None),
                        Some(Some(path)) => {
                            check_path(&field("group"), &path)?;
                            Some(Some(path))
                        }
                    },
                },
            );
        }
        for (path, g) in self.groups {
            check_path(&format!("groups.{path}"), &path)?;
            let field = |f: &str| format!("groups.{path}.{f}");
            if let Some(Some(w)) = g.weight {
                check_weight(&field("weight"), w)?;
            }
            let max_running_jobs = match g.max_running_jobs {
                None => None,
                Some(None) => Some(u32::MAX),
                Some(Some(n)) => {
                    check_group_max_running(&field("max_running_jobs"), n)?;
                    Some(n as u32)
                }
            };
            change.groups.insert(
                path.clone(),
                GroupChange {
                    weight: g.weight.map(|w| w.unwrap_or(crate::store::DEFAULT_WEIGHT)),
                    paused: g.paused,
                    max_running_jobs,
                },
            );
        }
        for (name, c) in self.clusters {
            let field = |f: &str| format!("clusters.{name}.{f}");
            let total = match c.capacity {
                None => None,
                Some(cap) => {
                    for (k, v) in [("cpu", cap.cpu), ("gpu", cap.gpu)] {
                        if let Some(v) = v {
                            validate_amount(&field(&format!("capacity.{k}")), v)?;
                        }
                    }
                    if let Some(m) = cap.memory_bytes {
                        check_memory_bytes(&field("capacity.memory_bytes"), m)?;
                    }
                    Some(cap)
                }
            };
            change.clusters.insert(
                name.clone(),
                ClusterChange {
                    // Resolved against the current totals in `resolve_capacity`.
                    total: total.map(|cap| {
                        Resources::new(
                            cap.cpu.unwrap_or(f64::NAN),
                            cap.gpu.unwrap_or(f64::NAN),
                            cap.memory_bytes.map_or(f64::NAN, |m| m as f64),
                        )
                    }),
                    healthy: c.healthy,
                },
            );
        }
        Ok((change, limit as usize))
    }
}

/// Fills the resources a capacity change left out (NaN) with the cluster's current
/// total.
fn resolve_capacity(change: &mut Change, snapshot: &preview::Snapshot) {
    for (name, c) in change.clusters.iter_mut() {
        let current = snapshot
            .clusters
            .iter()
            .find(|k| &k.name == name)
            .map(|k| k.total);
        if let (Some(t), Some(current)) = (c.total.as_mut(), current) {
            let keep = |v: f64, cur: f64| if v.is_nan() { cur } else { v };
            *t = Resources::new(
                keep(t.cpu, current.cpu),
                keep(t.gpu, current.gpu),
                keep(t.memory_bytes, current.memory_bytes),
            );
        }
    }
}

/// Why a preview of `s` lists no grant (issue 43 §8: `"before": [], "after": []`
/// said nothing): the first that holds of no job queued, no healthy cluster, no
/// healthy cluster with capacity, and every user with queued jobs held back.
fn why_no_grant(s: &preview::Snapshot) -> String {
    if s.users.iter().all(|u| u.queue.is_empty()) {
        return "no job is queued".into();
    }
    if !s.clusters.iter().any(|c| c.healthy) {
        return "no cluster is healthy: nothing is granted until one answers \
                (GET /v1/scheduler shows each cluster's health)"
            .into();
    }
    if !s.clusters.iter().any(crate::actors::cluster_serves) {
        return "the healthy clusters report no capacity".into();
    }
    let mut why = String::from(
        "every user with queued jobs is paused, at a limit (its own or a group's), or \
         asks for more than any healthy cluster holds (GET /v1/jobs/{id} gives each \
         job's pending_reason)",
    );
    // A cluster that is not healthy is granted nothing, a capacity given for it in
    // the change included (a fresh tester's finding: the override seemed to do
    // nothing, and nothing said why).
    let unhealthy: Vec<&str> = s
        .clusters
        .iter()
        .filter(|c| !c.healthy)
        .map(|c| c.name.as_str())
        .collect();
    if !unhealthy.is_empty() {
        why.push_str(&format!(
            "; not healthy, so granted nothing whatever their capacity (add \
             \"healthy\": true to the change to preview them up): {}",
            unhealthy.join(", ")
        ));
    }
    why
}

fn grant_views(grants: &[preview::PreviewGrant]) -> Vec<PreviewGrantView> {
    grants
        .iter()
        .enumerate()
        .map(|(i, g)| PreviewGrantView {
            position: i + 1,
            job_id: g.job_id,
            user: g.user.clone(),
            cluster: g.cluster.clone(),
            now: g.now,
        })
        .collect()
}

fn state_view(u: &preview::UserState) -> UserStateView {
    UserStateView {
        weight: u.weight,
        paused: u.paused,
        share: u.share,
        usage: u.usage,
        key: u.key,
    }
}

/// The 503 of a replica that does not lead: the preview needs the leader's live
/// state. Names this replica and the leader (if any), as `GET /v1/scheduler` does.
pub(crate) fn not_leader(replica: &str, leader: Option<&str>) -> ApiError {
    let whom = match leader {
        Some(l) => format!("send it to the leader, replica {l:?}"),
        None => "no replica leads right now (a takeover takes a few seconds); retry".into(),
    };
    ApiError::NotNow {
        message: format!(
            "replica {replica:?} does not lead and a preview needs the leader's live state: \
             {whom}"
        ),
        details: serde_json::json!({"reason": "not_leader", "replica": replica, "leader": leader}),
    }
}

/// The 503 while recovery loads the queues (`/readyz` answers 503 `loading` meanwhile).
pub(crate) fn loading() -> ApiError {
    ApiError::NotNow {
        message: "recovery has not loaded the queues yet (GET /readyz answers 200 once it \
                  has); retry shortly"
            .into(),
        details: serde_json::json!({"reason": "loading"}),
    }
}

/// `POST /v1/scheduler/what-if` (admin): the next grants (up to `limit`) under
/// today's state and with the proposed change, each user's share and key before and
/// after, and which queued jobs would start sooner or later. Changes nothing.
#[utoipa::path(post, path = "/v1/scheduler/what-if", tag = "system",
    request_body(content = Option<WhatIfRequest>, description = "the proposed change; none (or `{}`) previews today's state only"),
    operation_id = "what_if",
    responses((status = 200, body = WhatIfView, description = "the preview; nothing was changed"),
              (status = 400, body = ErrorBody, description = "the body is not JSON"),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "not an admin token; or, with no token configured, a browser page of another origin asked"),
              (status = 408, body = ErrorBody, description = "the body stalled: no bytes for server.body_idle_timeout (10 s); the connection is closed"), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody, description = "a body without `Content-Type: application/json` (unsupported_media_type, details.field = Content-Type)"),
              (status = 404, body = ErrorBody, description = "the change names a user or cluster the scheduler does not know"),
              (status = 422, body = ErrorBody, description = "a field is invalid (details.field, e.g. users.alice.weight)"),
              (status = 503, body = ErrorBody, description = "this replica does not lead (details.reason = not_leader, details.leader names the leader), or recovery has not loaded the queues yet (details.reason = loading); Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all)]
pub async fn what_if(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    state
        .auth
        .require(&req, Role::Admin, "preview scheduler changes")?;
    let body = read_body(&req, payload, &state.settings.server).await?;
    let request: WhatIfRequest = parse_json(&body, true)?;
    numbers::check(&body, WHAT_IF_NUMBERS)?;
    let (mut change, limit) =
        request.into_change(state.settings.scheduler.default_max_running_jobs)?;
    let scheduler = state.scheduler().ok_or_else(|| {
        let who = state.leadership.view();
        not_leader(&who.replica, who.leader.as_deref())
    })?;
    let snapshot = scheduler
        .snapshot()
        .await
        .map_err(|e| ApiError::Unavailable(e.to_string()))?
        .ok_or_else(loading)?;
    resolve_capacity(&mut change, &snapshot);
    // Like pausing a user that does not exist: 404, naming the entry in the body.
    let changed = snapshot.with(&change).map_err(|e| match &e {
        ChangeError::UnknownUser(u) => ApiError::NotFound(format!(
            "users.{u}: {e}; a user exists once it submits a job or an admin PUTs it"
        )),
        ChangeError::UnknownCluster(c) => ApiError::NotFound(format!("clusters.{c}: {e}")),
        ChangeError::UnknownGroup(g) => ApiError::NotFound(format!("groups.{g}: {e}")),
    })?;
    let at = DateTime::from_timestamp_micros((snapshot.now * 1e6) as i64)
        .unwrap_or_else(crate::store::now);
    // Off the HTTP worker's thread: a large queue takes a few passes of the policy.
    let (snapshot, changed) = (Arc::new(snapshot), Arc::new(changed));
    let (s, c) = (snapshot.clone(), changed.clone());
    let (before, after) = web::block(move || {
        (
            preview::next_grants(&s, limit),
            preview::next_grants(&c, limit),
        )
    })
    .await
    .map_err(|e| ApiError::Unavailable(format!("preview did not run: {e}")))?;
    let moved = preview::moved(&before.grants, &after.grants)
        .into_iter()
        .map(|m| MovedJobView {
            job_id: m.job_id,
            user: m.user,
            before: m.before,
            after: m.after,
            change: m.change,
        })
        .collect();
    let users = before
        .users
        .iter()
        .zip(&after.users)
        .map(|(b, a)| UserCompareView {
            user: b.user.clone(),
            before: state_view(b),
            after: state_view(a),
        })
        .collect();
    let reason =
        |s: &preview::Snapshot, p: &preview::Preview| p.grants.is_empty().then(|| why_no_grant(s));
    Ok(HttpResponse::Ok().json(WhatIfView {
        at,
        limit: limit as u32,
        before_reason: reason(&snapshot, &before),
        after_reason: reason(&changed, &after),
        before: grant_views(&before.grants),
        after: grant_views(&after.grants),
        users,
        moved,
    }))
}

#[cfg(test)]
mod tests {
    use actix_web::body::MessageBody;
    use actix_web::ResponseError;

    /// Status, `Retry-After` and body of an error as the client gets them.
    fn answer(e: super::ApiError) -> (u16, String, serde_json::Value) {
        let r = e.error_response();
        let retry = r
            .headers()
            .get("retry-after")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let status = r.status().as_u16();
        let bytes = r.into_body().try_into_bytes().unwrap();
        (status, retry, serde_json::from_slice(&bytes).unwrap())
    }

    /// A preview that cannot run says why: on a follower, and while recovery loads
    /// (both once answered "the database or a dependency is unavailable").
    #[test]
    fn a_preview_that_cannot_run_yet_says_why() {
        let (status, retry, body) = answer(super::loading());
        assert_eq!((status, retry.as_str()), (503, "1"));
        assert_eq!(body["error"]["code"], "unavailable");
        assert_eq!(body["error"]["details"]["reason"], "loading");
        let m = body["error"]["message"].as_str().unwrap();
        assert!(m.contains("recovery has not loaded the queues"), "{m}");

        let (status, retry, body) = answer(super::not_leader("b", Some("a")));
        assert_eq!((status, retry.as_str()), (503, "1"));
        assert_eq!(
            body["error"]["details"],
            serde_json::json!({"reason": "not_leader", "replica": "b", "leader": "a"})
        );
        let m = body["error"]["message"].as_str().unwrap();
        assert!(
            m.contains("\"b\" does not lead") && m.contains("leader, replica \"a\""),
            "{m}"
        );

        let (_, _, body) = answer(super::not_leader("b", None));
        assert_eq!(body["error"]["details"]["leader"], serde_json::Value::Null);
        let m = body["error"]["message"].as_str().unwrap();
        assert!(m.contains("no replica leads right now"), "{m}");
    }

    /// A fresh tester's finding: with a healthy pool and its only Ray cluster down, a
    /// preview that gave the cluster capacity listed nothing, for a generic reason.
    #[test]
    fn an_empty_preview_names_the_clusters_that_are_not_healthy() {
        use crate::policy::{ClusterView, PolicyConfig, QueuedJob, Resources, UserView};
        let cluster = |name: &str, healthy: bool, pool: bool| ClusterView {
            name: name.into(),
            healthy,
            total: Resources::new(64.0, 0.0, 0.0),
            used_reported: Resources::ZERO,
            outstanding: Resources::ZERO,
            unreported: Resources::ZERO,
            jobs: Vec::new(),
            pool,
        };
        let s = crate::policy::preview::Snapshot {
            now: 0.0,
            config: PolicyConfig {
                usage_half_life: 0.0,
                starvation_guard: 300.0,
                starvation_runs: 1.0,
                backfill: true,
                age_weight: 0.0,
                max_age: 0.0,
                licenses: crate::policy::Custom::EMPTY,
            },
            users: vec![UserView {
                user: "alice".into(),
                weight: 1.0,
                paused: false,
                max_running_jobs: 10,
                max_resources: None,
                outstanding_jobs: 0,
                allocation: Resources::ZERO,
                usage: 0.0,
                usage_at: 0.0,
                group: None,
                queue: vec![QueuedJob::new(
                    uuid::Uuid::nil(),
                    Resources::new(1.0, 0.0, 0.0),
                    0.0,
                )],
            }],
            clusters: vec![cluster("local", false, false), cluster("gw", true, true)],
            reservation: None,
            groups: Vec::new(),
        };
        let why = super::why_no_grant(&s);
        assert!(
            why.ends_with("(add \"healthy\": true to the change to preview them up): local"),
            "{why}"
        );
        // All healthy: the reason names none.
        let mut up = s.clone();
        up.clusters[0].healthy = true;
        assert!(!super::why_no_grant(&up).contains("not healthy"));
    }
}
