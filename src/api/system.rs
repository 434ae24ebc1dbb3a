//! `/v1/scheduler`, `/metrics`, `/healthz`, `/readyz`.

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody};
use super::AppState;
use crate::actors::arbiter::{Amounts, ClusterStatusView, CycleView, GrantView, UserOrderView};
use crate::actors::SchedulerView;
use crate::config::Role;

/// `GET /v1/scheduler`: clusters (health, capacity, free), the order of the next users,
/// the last cycle's duration and grants.
#[utoipa::path(get, path = "/v1/scheduler", tag = "system",
    responses((status = 200, body = SchedulerOut), (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn scheduler(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    state
        .auth
        .require(&req, Role::Submitter, "read the scheduler")?;
    let s = state
        .scheduler
        .as_ref()
        .ok_or_else(|| ApiError::Unavailable("the scheduler is not running".into()))?;
    Ok(HttpResponse::Ok().json(SchedulerOut::from(s.view().await?)))
}

/// Amounts of each resource as the API shows them: cores, GPUs, and whole bytes.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub struct AmountsOut {
    pub cpu: f64,
    pub gpu: f64,
    pub memory_bytes: u64,
}

impl From<Amounts> for AmountsOut {
    fn from(a: Amounts) -> Self {
        AmountsOut {
            cpu: a.cpu,
            gpu: a.gpu,
            // Bytes are whole; negative or NaN never reach here but must not wrap.
            memory_bytes: a.memory_bytes.max(0.0).round() as u64,
        }
    }
}

/// One cluster in [`SchedulerOut`].
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ClusterOut {
    pub name: String,
    pub healthy: bool,
    pub capacity: AmountsOut,
    /// Ray's report of used capacity (lags by seconds).
    pub used_reported: AmountsOut,
    /// Resources of this service's outstanding jobs there.
    pub outstanding: AmountsOut,
    /// What the scheduler may still grant there.
    pub free: AmountsOut,
}

impl From<ClusterStatusView> for ClusterOut {
    fn from(c: ClusterStatusView) -> Self {
        ClusterOut {
            name: c.name,
            healthy: c.healthy,
            capacity: c.capacity.into(),
            used_reported: c.used_reported.into(),
            outstanding: c.outstanding.into(),
            free: c.free.into(),
        }
    }
}

/// The last scheduling cycle.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct CycleOut {
    /// When it ran (RFC 3339).
    pub at: Option<DateTime<Utc>>,
    pub duration_seconds: f64,
    pub grants: Vec<GrantView>,
    /// Set when the starvation guard stopped the cycle for this job.
    pub stopped_for: Option<uuid::Uuid>,
}

impl From<CycleView> for CycleOut {
    fn from(c: CycleView) -> Self {
        CycleOut {
            // The arbiter keeps Unix seconds; the API shows RFC 3339 like every other
            // timestamp.
            at: DateTime::from_timestamp_micros((c.at * 1e6).round() as i64),
            duration_seconds: c.duration_seconds,
            grants: c.grants,
            stopped_for: c.stopped_for,
        }
    }
}

/// `GET /v1/scheduler`: the arbiter's view with RFC 3339 timestamps and whole bytes.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct SchedulerOut {
    pub ready: bool,
    pub clusters: Vec<ClusterOut>,
    /// Users with queued jobs, in the order the next cycle would serve them.
    pub next_users: Vec<UserOrderView>,
    pub last_cycle: Option<CycleOut>,
    pub cycles: u64,
    pub queued_jobs: usize,
    pub outstanding_jobs: usize,
    pub usage_half_life_seconds: f64,
    pub starvation_guard_seconds: f64,
    pub backfill: bool,
}

impl From<SchedulerView> for SchedulerOut {
    fn from(v: SchedulerView) -> Self {
        SchedulerOut {
            ready: v.ready,
            clusters: v.clusters.into_iter().map(ClusterOut::from).collect(),
            next_users: v.next_users,
            last_cycle: v.last_cycle.map(CycleOut::from),
            cycles: v.cycles,
            queued_jobs: v.queued_jobs,
            outstanding_jobs: v.outstanding_jobs,
            usage_half_life_seconds: v.usage_half_life_seconds,
            starvation_guard_seconds: v.starvation_guard_seconds,
            backfill: v.backfill,
        }
    }
}

/// `GET /metrics`: Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "system",
    responses((status = 200, description = "Prometheus text exposition format", content_type = "text/plain")))]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    if let Some(s) = &state.scheduler {
        s.refresh_metrics().await;
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(crate::metrics::render())
}

/// Health answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// "ok", or what is not ready.
    pub status: String,
}

/// `GET /healthz` (and `HEAD`): the process is alive. Touches nothing, so it answers
/// at once even while the database is down.
#[utoipa::path(get, path = "/healthz", tag = "system", responses((status = 200, body = Health)))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Health {
        status: "ok".into(),
    })
}

/// How long `/readyz` waits for the database before it answers 503: well under the
/// 1 s timeout probes commonly use, and far above a healthy ping (about a millisecond).
/// Without it a probe would wait the pool's whole acquire timeout (5 s) while the
/// database is down.
pub const READY_DB_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// `GET /readyz` (and `HEAD`): the database answers within [`READY_DB_TIMEOUT`] and
/// recovery is done (503 otherwise).
#[utoipa::path(get, path = "/readyz", tag = "system",
    responses((status = 200, body = Health), (status = 503, body = ErrorBody)))]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    match tokio::time::timeout(READY_DB_TIMEOUT, crate::store::ping(&state.db)).await {
        Ok(answer) => answer?,
        Err(_) => {
            return Err(ApiError::Unavailable(format!(
                "the database did not answer a ping within {} ms",
                READY_DB_TIMEOUT.as_millis()
            )))
        }
    }
    if let Some(s) = &state.scheduler {
        if !s.ready().await {
            return Err(ApiError::Unavailable("recovery is not done yet".into()));
        }
    }
    Ok(HttpResponse::Ok().json(Health {
        status: "ok".into(),
    }))
}
