//! `/v1/jobs`: submit, read, list, cancel, logs.

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use entity::{job, JobStatus};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::accept::{accept, Accepted};
use super::body::{parse_query, read_body};
use super::error::{ApiError, ErrorBody};
use super::shapes::ResourcesOut;
use super::submit::SubmitRequest;
use super::validate::{validate_external_id, validate_user_id};
use super::AppState;
use crate::actors::{Cancelled, Scheduler};
use crate::config::Role;
use crate::store::{self, JobFilter};

/// Default and largest page size of `GET /v1/jobs`.
pub const DEFAULT_PAGE: u64 = 100;
pub const MAX_PAGE: u64 = 1000;

/// A job as the API shows it. `runtime_env` is not shown: it may hold secrets.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobView {
    pub id: Uuid,
    pub user: String,
    pub external_id: Option<String>,
    /// QUEUED, ADMITTED (a pool job its runner may start), DISPATCHING, PENDING,
    /// RUNNING, SUCCEEDED, FAILED or STOPPED.
    #[schema(value_type = String)]
    pub status: JobStatus,
    pub priority: i32,
    pub entrypoint: String,
    pub resources: ResourcesOut,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
    /// The job's group (`metadata["fairshare.group"]`: given, or found by
    /// `ray_compat.group_rules` on Ray's Jobs API), or null.
    pub group: Option<String>,
    pub max_runtime_s: Option<i64>,
    pub submitted_at: DateTime<Utc>,
    pub dispatched_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The Ray cluster it was dispatched to.
    pub cluster: Option<String>,
    /// Why it ended, or what Ray said.
    pub message: Option<String>,
    /// For a QUEUED job: why it is not running yet, from the last scheduling cycle (on
    /// a replica that does not lead, from the database: the user is paused, the job is
    /// next in its user's queue, or how many jobs are ahead).
    pub pending_reason: Option<String>,
    /// For a QUEUED job: 1-based position within its user's queue.
    pub queue_position: Option<u64>,
    /// For a QUEUED job: when it is expected to start (RFC 3339), by the policy run
    /// forward in virtual time from the live state (DESIGN §2, "Estimates"): running
    /// jobs ending as expected, nothing new submitted. Null when that run does not start
    /// it (its user or group is paused, a limit nothing running will lift, larger than
    /// every cluster, beyond `estimates.horizon` or the forward run's budget), before
    /// the first run, or when estimates are off. Refreshed every `estimates.refresh` at
    /// most, so it may lag a change by that long; a replica that does not lead (on
    /// PostgreSQL) reads the leader's last run from the database, a refresh later, and
    /// has it for the first 100,000 jobs in order of estimated start only.
    pub estimated_start: Option<DateTime<Utc>>,
    /// For a QUEUED job with an `estimated_start`: its 1-based place, in order of
    /// estimated start, among all waiting jobs that could use the same capacity (every
    /// job for the Ray clusters, or those of its pool), whoever submitted them.
    pub position: Option<u64>,
    /// For a QUEUED job with an estimate: where its expected run time comes from,
    /// `max_runtime` (its `max_runtime_s`), `learned` (the decayed median of its user's
    /// past runs of the same entrypoint) or `default` (`estimates.default_runtime`).
    #[schema(pattern = "^(max_runtime|learned|default)$")]
    pub estimate_basis: Option<String>,
    /// For a QUEUED job without `estimated_start` because the forward run stopped
    /// before reaching it (past `estimates.horizon`, or its cycle budget at a long
    /// queue): the instant the run stopped looking at (RFC 3339); the job is expected
    /// to start no sooner ("beyond the horizon"). Null when the run reached its end
    /// (the job cannot start as things stand), for a job submitted after the run, and
    /// for a job with an estimate.
    pub estimated_after: Option<DateTime<Utc>>,
    /// For a job Ray runs: what it holds there now (its entrypoint's reservation, and
    /// the tasks and actors it started), by Ray's State API at the last poll; null
    /// when unknown (not running, or on a replica that does not lead). `resources`
    /// is what it declared; it is charged the larger of the two per resource.
    pub actual_resources: Option<ResourcesOut>,
    /// The Ray attempt, from 1: one more each time the job went back to the queue
    /// after Ray had it (preempted, kept PENDING too long, found alive late).
    pub attempt: i32,
    /// Whether the job may be preempted: stopped while it runs and queued again at
    /// its old place for a user below its fair share (DESIGN §2 "Preemption").
    pub preemptible: bool,
    /// How many times it was preempted so far.
    pub preemptions: i32,
    /// A preemption's stop is under way: Ray has been asked to stop the job, which
    /// goes back to the queue once Ray says it ended (or after `preemption.grace`).
    pub preempting: bool,
    /// The pool it must run in (issue 30: its runner starts it and reports back);
    /// null: a Ray cluster.
    pub pool: Option<String>,
    /// For an ADMITTED or RUNNING pool job: until when its runner's lease holds (each
    /// report renews it); past it the capacity is freed (`[admission]`).
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// For an ADMITTED or RUNNING pool job: a stop was asked (cancel); its runner
    /// should stop it and report `finished` (the `stop_requested` event said so).
    pub stop_requested: bool,
}

impl JobView {
    /// The view of `j` with a QUEUED job's estimate from the last forward run, if
    /// there is one (a read of the shared table, no message), or the instant it starts
    /// no sooner than ([`crate::estimates::Estimates::not_reached`]).
    pub fn estimated(j: job::Model, state: &AppState) -> Self {
        let summary = (j.status == JobStatus::Queued).then(|| crate::store::summary(&j));
        let mut view = Self::from_model(j);
        let Some(summary) = summary else {
            return view;
        };
        let table = state.estimates();
        let Some(e) = table.get(&view.id) else {
            view.estimated_after = table.not_reached(&view.user, &summary, view.submitted_at);
            return view;
        };
        if e.start.is_some() {
            view.estimated_start = e.start;
            view.position = e.position;
            view.estimate_basis = Some(e.basis.as_str().to_owned());
        }
        view
    }

    /// The view of `j` without the queue fields.
    pub fn from_model(j: job::Model) -> Self {
        // From the row itself: `memory_bytes` exactly as stored (the policy's f64
        // rounded whole numbers above 2^53, and a client echoing the answer back got
        // an idempotency conflict).
        let resources = ResourcesOut {
            cpu: j.cpu,
            gpu: j.gpu,
            memory_bytes: j.memory_bytes.max(0) as u64,
            custom: store::custom_of(&j),
        };
        let preempting = crate::lifecycle::JobFacts::of(&j).preempting;
        let stop_requested =
            j.pool.is_some() && j.stop_reason.is_some() && j.status.is_outstanding();
        JobView {
            id: j.id,
            user: j.user_id,
            external_id: j.external_id,
            status: j.status,
            priority: j.priority,
            entrypoint: j.entrypoint,
            resources,
            group: j
                .metadata
                .as_ref()
                .and_then(|m| m.get(super::ray_compat::identity::GROUP_KEY))
                .and_then(|g| g.as_str())
                .map(str::to_string),
            metadata: j.metadata,
            max_runtime_s: j.max_runtime_s,
            submitted_at: j.submitted_at,
            dispatched_at: j.dispatched_at,
            started_at: j.started_at,
            finished_at: j.finished_at,
            cluster: j.cluster,
            message: j.message,
            pending_reason: None,
            actual_resources: None,
            queue_position: None,
            estimated_start: None,
            position: None,
            estimate_basis: None,
            estimated_after: None,
            attempt: j.attempt,
            preemptible: j.preemptible,
            preemptions: j.preemptions,
            preempting,
            pool: j.pool,
            lease_expires_at: j.lease_expires_at,
            stop_requested,
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

/// Parses a job id path segment; anything but a UUID cannot name a job (404).
fn parse_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw)
        .map_err(|_| ApiError::NotFound(format!("no job with id {raw:?} (job ids are UUIDs)")))
}

/// [`load`], as `who` may see it: a token with a user gets 404 for another user's job,
/// as for a job that does not exist (DESIGN §4, tokens).
pub(crate) async fn load_for(
    state: &AppState,
    who: &crate::api::auth::Identity,
    raw: &str,
) -> Result<job::Model, ApiError> {
    let j = load(state, raw).await?;
    if !who.may_access_job(&j) {
        return Err(ApiError::NotFound(format!("no job with id {raw}")));
    }
    Ok(j)
}

async fn load(state: &AppState, raw: &str) -> Result<job::Model, ApiError> {
    let id = parse_id(raw)?;
    store::get_job(&state.db, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no job with id {id}")))
}

/// Adds queue position and pending reason to a QUEUED job's view.
/// How [`view`] finds a QUEUED job's place and pending reason.
pub(crate) enum Fresh {
    /// Read: its position counted in the database, its reason asked of the arbiter.
    No,
    /// Just created, at this position (the intake writer counted it in its
    /// transaction); no cycle has seen it yet, so the arbiter has no reason for it.
    Created(Option<u64>),
}

/// Why a PENDING job waits in Ray: on an autoscaling cluster for a node of the type
/// that would hold it, e.g. "waiting for Ray to add a node of type cpu-2 (requested 40 s
/// ago; after monitor.scale_up_timeout, 600 s, it goes back to the queue)"; elsewhere
/// for resources to free up, as on an autoscaling cluster that cannot grow any more.
/// `growth`: the cluster's node types held back now (left out) and whether Ray can
/// still add a node, as the leader's monitor last saw it (`None`: not known).
fn pending_in_ray(
    settings: &crate::config::Settings,
    j: &job::Model,
    growth: Option<(Vec<String>, bool)>,
) -> String {
    let cluster = j.cluster.as_deref().unwrap_or("?");
    let autoscaling = settings
        .clusters
        .iter()
        .find(|c| c.name == cluster && c.autoscales());
    let (held, can_grow) = growth.unwrap_or((Vec::new(), true));
    let Some(c) = autoscaling.filter(|_| can_grow) else {
        let at_max = if autoscaling.is_some() {
            " (it is at its maximum: no node can be added)"
        } else {
            ""
        };
        return format!(
            "submitted; Ray holds it PENDING on cluster {cluster}{at_max} until resources \
             free up (after monitor.pending_timeout, {} s, it goes back to the queue)",
            settings.monitor.pending_timeout.as_secs()
        );
    };
    let ago = j
        .dispatched_at
        .map(|t| (chrono::Utc::now() - t).num_seconds().max(0))
        .unwrap_or(0);
    let node =
        crate::actors::monitor::growth::node_type_for_unless(c, &store::resources_of(j), |t| {
            held.iter().any(|h| h == t)
        })
        .map_or_else(|| "a node".to_string(), |t| format!("a node of type {t}"));
    format!(
        "waiting for Ray to add {node} on cluster {cluster}, or for resources there to free \
         up (requested {ago} s ago; after monitor.scale_up_timeout, {} s, it goes back to \
         the queue)",
        settings.monitor.scale_up_timeout.as_secs()
    )
}

pub(crate) async fn view(
    state: &AppState,
    j: job::Model,
    fresh: Fresh,
) -> Result<JobView, ApiError> {
    let queued = j.status == JobStatus::Queued;
    let position = match (&fresh, queued) {
        (_, false) => None,
        (Fresh::Created(Some(p)), true) => Some(*p),
        _ => Some(store::queue_position(&state.db, &j).await?),
    };
    let ask_arbiter = matches!(fresh, Fresh::No);
    let id = j.id;
    // Waits the lifecycle knows of without asking the arbiter (DESIGN §3).
    let removed_pool = j
        .pool
        .as_deref()
        .filter(|p| !state.settings.pools.iter().any(|c| c.name == *p));
    let missing_key = j
        .runtime_env
        .as_ref()
        .filter(|_| j.status == JobStatus::Queued)
        .and_then(|env| state.sealer.missing_key(env));
    let lifecycle_reason = match (j.status, j.retiring_attempt) {
        (JobStatus::Queued, _) if missing_key.is_some() => Some(format!(
            "its runtime_env is sealed with key {}, which this replica's \
             secrets.runtime_env_keys does not hold: it waits until a replica that holds \
             the key leads (a key rotation's rolling update, DESIGN §6)",
            missing_key.unwrap_or_default()
        )),
        (JobStatus::Queued, _) if removed_pool.is_some() => Some(format!(
            "pool {} is not configured (removed since the job was submitted): it waits \
             until the pool is configured again, or a cancel",
            removed_pool.unwrap_or_default()
        )),
        (JobStatus::Queued, Some(old)) => Some(format!(
            "back in the queue at its place; waiting for Ray to confirm that attempt {old} \
             stopped before it is submitted again"
        )),
        (JobStatus::Pending, _) => {
            let growth = match (state.scheduler(), j.cluster.as_deref()) {
                (Some(s), Some(c)) => s.growth_now(c).await,
                _ => None,
            };
            Some(pending_in_ray(&state.settings, &j, growth))
        }
        _ => None,
    };
    let user_id = j.user_id.clone();
    let outstanding = j.status.is_outstanding();
    let mut v = JobView::estimated(j, state);
    v.queue_position = position;
    v.pending_reason = lifecycle_reason;
    if let (true, Some(s)) = (outstanding, state.scheduler()) {
        v.actual_resources = s.actual(id).await.map(Into::into);
    }
    if queued && v.pending_reason.is_none() {
        // Not for a job just created (no cycle has seen it; a submit costs no read).
        match state.scheduler() {
            Some(s) if ask_arbiter => v.pending_reason = s.pending_reason(id).await,
            // A follower has no arbiter to ask (DESIGN §10): what the database says.
            None if ask_arbiter => {
                v.pending_reason = follower_reason(state, &user_id, position).await?;
            }
            _ => {}
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

/// A QUEUED job's pending reason on a replica that does not lead, from the database:
/// the user is paused (the arbiter's own words), else for the head of its user's
/// queue that the leader decides when it starts; a job further back gets the count of
/// jobs ahead (by the caller, as on the leader for a job outside the arbiter's window).
async fn follower_reason(
    state: &AppState,
    user: &str,
    position: Option<u64>,
) -> Result<Option<String>, ApiError> {
    if store::get_user(&state.db, user)
        .await?
        .is_some_and(|u| u.paused)
    {
        return Ok(Some(crate::policy::PendingReason::Paused.to_string()));
    }
    if position != Some(1) {
        return Ok(None);
    }
    let view = state.leadership.view();
    let leader = match &view.leader {
        Some(l) => format!("replica {l:?}"),
        None => "the replica that takes the lease next".to_string(),
    };
    Ok(Some(format!(
        "next in its user's queue; the leader ({leader}) decides when it starts, by fair \
         share and free capacity (this replica, {:?}, does not lead: ask the leader for \
         the reason in detail)",
        view.replica
    )))
}

/// `POST /v1/jobs`: 201 with the new job, or 200 with the existing one for a repeated
/// `(user, external_id)` with the same payload (422 `idempotency_key_reused` with
/// another). Answered only after the job is committed.
#[utoipa::path(post, path = "/v1/jobs", tag = "jobs", request_body = SubmitRequest,
    operation_id = "submit_job",
    responses((status = 201, body = JobView, description = "created"),
              (status = 200, body = JobView, description = "same (user, external_id) and same payload seen before"),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody, description = "no token is configured and a browser page of another origin asked (cross-site request forgery)"),
              (status = 408, body = ErrorBody, description = "the body stalled: no bytes for server.body_idle_timeout (10 s); the connection is closed"), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody, description = "a body without `Content-Type: application/json` (unsupported_media_type, details.field = Content-Type)"),
              (status = 422, body = ErrorBody, description = "a field is invalid (invalid_field; `size` for a size not configured or given with `resources`), or the (user, external_id) was used with another payload (idempotency_key_reused; details.job_id is the existing job)"),
              (status = 429, body = ErrorBody, description = "the user's queue is full (max_queued_jobs); Retry-After"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(user, job_id))]
pub async fn submit(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "submit jobs")?;
    let body = read_body(&req, payload, &state.settings.server).await?;
    let request = SubmitRequest::parse(&body)?;
    who.check_user("user", &request.user)?;
    // What Ray would refuse when the job is sent, refused now (as on Ray's API).
    super::ray_compat::identity::check_env_vars(request.runtime_env.as_ref())?;
    if who.user.is_some()
        && request
            .metadata
            .as_ref()
            .is_some_and(|m| m.contains_key(super::ray_compat::identity::GROUP_KEY))
    {
        // A group is the operator's to set (ray_compat.group_rules), not a confined
        // user's to choose (DESIGN §4).
        return Err(ApiError::invalid(
            format!("metadata.{}", super::ray_compat::identity::GROUP_KEY),
            "a token confined to one user cannot choose its group",
        ));
    }
    let blame = request.size_blame();
    let mut new = request
        .with_size(&state.settings.sizes)?
        .into_new_job()
        .map_err(&blame)?;
    who.check_pool(new.pool.as_deref())?;
    // Uploaded packages are the submitter's own (Ray's Jobs API, issue 31).
    super::ray_compat::packages::pin(&state, &who, &mut new.runtime_env).await?;
    match accept(&state, &who, new).await.map_err(&blame)? {
        Accepted::Created(j, position) => {
            let v = view(&state, j, Fresh::Created(position)).await?;
            Ok(HttpResponse::Created().json(v))
        }
        Accepted::Existing(j) => Ok(HttpResponse::Ok().json(view(&state, j, Fresh::No).await?)),
    }
}

/// `GET /v1/jobs/{id}`.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs", operation_id = "get_job",
    params(("id" = Uuid, Path, description = "job id")),
    responses((status = 200, body = JobView), (status = 401, body = ErrorBody),
              (status = 404, body = ErrorBody, description = "no such job (ids that are not UUIDs name no job)"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
pub async fn get(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "read jobs")?;
    let j = load_for(&state, &who, &id).await?;
    Ok(HttpResponse::Ok().json(view(&state, j, Fresh::No).await?))
}

/// Query of `GET /v1/jobs`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this user's jobs: a user id (1–128 characters, no whitespace, control or
    /// invisible characters, not `.` or `..`; the pattern is `api::user_id`'s, set in
    /// `api::openapi::document_json`).
    #[param(value_type = String, min_length = 1, max_length = 128)]
    pub user: Option<String>,
    /// Only jobs in this status (case-insensitive).
    #[param(value_type = JobStatusName)]
    pub status: Option<String>,
    /// Only jobs with this `external_id` (the idempotency key; one per user), 1–256
    /// characters.
    #[param(min_length = 1, max_length = 256)]
    pub external_id: Option<String>,
    /// Page size, 1..=1000 (default 100).
    #[param(value_type = u32, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
    /// The `next_after` of the previous page.
    #[param(value_type = Uuid)]
    pub after: Option<String>,
    /// Only jobs that must run in this pool (a `[[pools]]` name); with
    /// `status=ADMITTED`, what a runner has to start.
    #[param(min_length = 1, max_length = 64)]
    pub pool: Option<String>,
}

/// A job status, as `GET /v1/jobs?status=` takes it (only the schema: the handler
/// parses the string itself to name the field in its 422).
#[derive(ToSchema)]
#[schema(rename_all = "UPPERCASE")]
#[allow(dead_code)]
pub enum JobStatusName {
    Queued,
    Admitted,
    Dispatching,
    Pending,
    Running,
    Succeeded,
    Failed,
    Stopped,
}

/// `GET /v1/jobs?user=&status=&pool=&external_id=&limit=&after=`: newest first, cursor paging. A
/// parameter given empty (`status=`) is invalid like any other bad value (422), never
/// read as "not given".
#[utoipa::path(get, path = "/v1/jobs", tag = "jobs", params(ListQuery), operation_id = "list_jobs",
    responses((status = 200, body = JobPage), (status = 401, body = ErrorBody),
              (status = 404, body = ErrorBody, description = "`after` names no job"),
              (status = 422, body = ErrorBody, description = "a parameter is invalid or empty (details.field)"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
pub async fn list(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "read jobs")?;
    let mut q: ListQuery = parse_query(req.query_string())?;
    if let Some(u) = &q.user {
        validate_user_id("user", u)?;
    }
    // A token with a user lists only that user's jobs.
    q.user = who.user_filter("user", q.user)?;
    if let Some(x) = &q.external_id {
        validate_external_id("external_id", x)?;
    }
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(JobStatus::parse(&s.to_ascii_uppercase()).ok_or_else(|| {
            ApiError::invalid(
                "status",
                "must be one of QUEUED, ADMITTED, DISPATCHING, PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED",
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
        None => None,
        Some(s) => Some(
            Uuid::parse_str(s)
                .map_err(|_| ApiError::invalid("after", "must be a job id (UUID)"))?,
        ),
    };
    if let Some(id) = after {
        if store::get_job(&state.db, id).await?.is_none() {
            // A well-formed cursor that names no job: like a path id that names none.
            return Err(ApiError::NotFound(format!(
                "after: no job with id {id}; pass the next_after of the previous page"
            )));
        }
    }
    // A token confined to a pool lists that pool's jobs only.
    q.pool = who.pool_filter("pool", q.pool)?;
    let filter = JobFilter {
        user: q.user,
        status,
        pool: q.pool,
        external_id: q.external_id,
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
        jobs: jobs
            .into_iter()
            .map(|j| JobView::estimated(j, &state))
            .collect(),
        next_after,
    }))
}

/// `POST /v1/jobs/{id}/cancel`: a QUEUED job is STOPPED at once (200); an outstanding
/// one gets a stop sent to Ray and becomes STOPPED when Ray confirms (202); a finished
/// one is 409.
#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", tag = "jobs", operation_id = "cancel_job",
    params(("id" = Uuid, Path, description = "job id")),
    responses((status = 200, body = JobView, description = "stopped"),
              (status = 202, body = JobView, description = "stop sent to Ray"),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "no token is configured and a browser page of another origin asked (cross-site request forgery)"), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "the job already finished"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
#[tracing::instrument(skip_all, fields(job_id = %id))]
pub async fn cancel(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "cancel jobs")?;
    let id = parse_id(&id)?;
    if who.user.is_some() || who.pool.is_some() {
        // A token with a user cancels only its own user's jobs, one with a pool only
        // that pool's (others are 404).
        load_for(&state, &who, &id.to_string()).await?;
    }
    let cancelled = cancel_job(&state, id).await?;
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

/// Cancels job `id` (of `/v1` cancel and Ray's `/api/jobs/{id}/stop`): the lifecycle
/// decides on the row as it is inside the write's transaction, so a grant racing the
/// cancel is settled there; a follower hands the cancel to the leader (DESIGN §10).
pub(crate) async fn cancel_job(state: &AppState, id: Uuid) -> Result<Cancelled, ApiError> {
    let scheduler = state.scheduler();
    let cancelled = Scheduler::cancel(&state.db, scheduler.as_ref(), id).await?;
    if scheduler.is_none()
        && matches!(
            cancelled,
            Cancelled::Stopped(_) | Cancelled::StopRequested(_)
        )
    {
        state.leadership.hand_over(&format!("job:{id}")).await;
    }
    Ok(cancelled)
}

/// Withdraws job `id` if it is still QUEUED (Ray's `DELETE /api/jobs/{id}`, see
/// [`Scheduler::withdraw`]); a follower hands a withdrawal to the leader like a cancel.
/// Returns the row as it ends up; `None` when there is no such job.
pub(crate) async fn withdraw_job(
    state: &AppState,
    id: Uuid,
) -> Result<Option<job::Model>, ApiError> {
    let scheduler = state.scheduler();
    let job = Scheduler::withdraw(&state.db, scheduler.as_ref(), id).await?;
    if scheduler.is_none() && job.as_ref().is_some_and(|j| j.status == JobStatus::Stopped) {
        state.leadership.hand_over(&format!("job:{id}")).await;
    }
    Ok(job)
}

/// `GET /v1/jobs/{id}/logs`: the job's logs from Ray. A job Ray never had (QUEUED, or
/// ended before it was dispatched) has none: 409 saying so.
#[utoipa::path(get, path = "/v1/jobs/{id}/logs", tag = "jobs", operation_id = "job_logs",
    params(("id" = Uuid, Path, description = "job id")),
    responses((status = 200, body = LogsView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "Ray never had this job (QUEUED, ended before dispatch, or a pool job: its runner's), or no longer has its logs; details: job_id, status, attempt"),
              (status = 503, body = ErrorBody, description = "the database or the job's Ray cluster does not answer; Retry-After")),
    security(("bearer" = [])))]
pub async fn logs(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "read logs")?;
    let j = load_for(&state, &who, &id).await?;
    // A pool job never reaches Ray: its logs are its runner's (DESIGN §3, "Admission").
    if let Some(pool) = &j.pool {
        return Err(ApiError::JobConflict {
            message: format!(
                "job {} is a job of pool {pool}: its runner runs it and has its logs, \
                 Ray never had it",
                j.id
            ),
            job_id: j.id,
            status: j.status.to_string(),
            attempt: j.attempt,
        });
    }
    // A job that was never dispatched, or is back in the queue, has no logs in Ray.
    if j.cluster.is_none() || j.status == JobStatus::Queued {
        let message = if j.status.is_terminal() {
            format!(
                "job {} ended {} before it was dispatched to Ray: there are no logs",
                j.id, j.status
            )
        } else {
            format!(
                "job {} is {}: Ray does not have it yet, so there are no logs",
                j.id, j.status
            )
        };
        return Err(ApiError::JobConflict {
            message,
            job_id: j.id,
            status: j.status.to_string(),
            attempt: j.attempt,
        });
    }
    let logs = match state.scheduler() {
        Some(s) => s.logs(&j).await,
        // A follower asks Ray itself.
        None => crate::actors::job_logs(&state.settings, &j).await,
    };
    let logs = match logs {
        Ok(Some(logs)) => logs,
        Ok(None) => {
            return Err(ApiError::JobConflict {
                message: format!(
                    "Ray does not have the logs of job {} (status {}): its cluster lost or \
                     never started it",
                    j.id, j.status
                ),
                job_id: j.id,
                status: j.status.to_string(),
                attempt: j.attempt,
            })
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
