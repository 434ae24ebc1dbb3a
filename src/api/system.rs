//! `/v1/scheduler`, `/metrics`, `/healthz`, `/readyz`.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody};
use super::AppState;
use crate::config::Role;
use crate::views::{ClusterKind, ClusterStatusView, SchedulerView};
use entity::JobStatus;

/// `GET /v1/scheduler`: clusters and pools (`kind`; health, capacity, free; a pool's
/// ADMITTED and RUNNING jobs), the order of the next users, the last cycle's duration
/// and grants.
#[utoipa::path(get, path = "/v1/scheduler", tag = "system", operation_id = "get_scheduler",
    responses((status = 200, body = SchedulerView), (status = 401, body = ErrorBody),
              (status = 503, body = ErrorBody, description = "the database or the scheduler is unavailable; Retry-After")),
    security(("bearer" = [])))]
pub async fn scheduler(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    state
        .auth
        .require(&req, Role::Submitter, "read the scheduler")?;
    let leadership = Some(state.leadership.view());
    let view = match state.scheduler() {
        Some(s) => {
            let mut view = SchedulerView {
                leadership,
                ..s.view()
                    .await
                    .map_err(|e| ApiError::Unavailable(e.to_string()))?
            };
            pool_counts(&state, &mut view.clusters).await?;
            view
        }
        None => {
            // A follower: the live state is the leader's; counts from the database.
            let counts = crate::store::status_counts(&state.db, None).await?;
            let sum = |f: fn(JobStatus) -> bool| {
                counts
                    .iter()
                    .filter(|(_, s, _)| f(*s))
                    .map(|(_, _, n)| (*n).max(0) as usize)
                    .sum::<usize>()
            };
            let sched = &state.settings.scheduler;
            SchedulerView {
                ready: true,
                leadership,
                clusters: Vec::new(),
                next_users: Vec::new(),
                last_cycle: None,
                cycles: 0,
                queued_jobs: sum(|s| s == JobStatus::Queued),
                outstanding_jobs: sum(|s| s.is_outstanding()),
                usage_half_life_seconds: sched.usage_half_life.as_secs_f64(),
                starvation_guard_seconds: sched.starvation_guard.as_secs_f64(),
                starvation_runs: sched.starvation_runs,
                typical_runtime_seconds: None,
                guard_in_force_seconds: sched.starvation_guard.as_secs_f64(),
                backfill: sched.backfill,
            }
        }
    };
    Ok(HttpResponse::Ok().json(view))
}

/// Fills each pool's ADMITTED and RUNNING job counts from the database (one query,
/// only when the view has a pool).
async fn pool_counts(state: &AppState, clusters: &mut [ClusterStatusView]) -> Result<(), ApiError> {
    if !clusters.iter().any(|c| c.kind == ClusterKind::Pool) {
        return Ok(());
    }
    let counts = crate::store::pool_status_counts(&state.db).await?;
    let count = |pool: &str, status: JobStatus| {
        counts
            .iter()
            .filter(|(p, s, _)| p == pool && *s == status)
            .map(|(_, _, n)| (*n).max(0) as u64)
            .sum::<u64>()
    };
    for c in clusters.iter_mut().filter(|c| c.kind == ClusterKind::Pool) {
        c.admitted_jobs = Some(count(&c.name, JobStatus::Admitted));
        c.running_jobs = Some(count(&c.name, JobStatus::Running));
    }
    Ok(())
}

/// `GET /metrics`: Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "system", operation_id = "metrics",
    responses((status = 200, description = "Prometheus text exposition format", content_type = "text/plain")))]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    if let Some(s) = state.scheduler() {
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

/// `GET /healthz`: the process is alive.
#[utoipa::path(get, path = "/healthz", tag = "system", operation_id = "healthz", responses((status = 200, body = Health)))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Health {
        status: "ok".into(),
    })
}

/// `GET /readyz`: the database answers and, on the leader, recovery is done (503
/// otherwise). A follower is ready: it serves the whole API (DESIGN §10).
#[utoipa::path(get, path = "/readyz", tag = "system", operation_id = "readyz",
    responses((status = 200, body = Health),
              (status = 503, body = ErrorBody, description = "loading (code `loading`, details.loaded_queued_jobs), or the database does not answer")))]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    // Loading first: recovery may hold SQLite's one connection while it streams.
    // Not ready yet is an expected state, not a fault: 503 with what is loading (and
    // no error log), so a probe and an operator both see the progress.
    let loading = |message: String, loaded: Option<usize>| {
        HttpResponse::ServiceUnavailable()
            .insert_header(("Retry-After", "1"))
            .json(super::error::ErrorBody {
                error: super::error::ErrorDetail {
                    code: "loading".into(),
                    message,
                    details: loaded.map(|n| serde_json::json!({ "loaded_queued_jobs": n })),
                },
            })
    };
    if let Some(s) = state.scheduler() {
        if let Some(loaded) = s.loading().await {
            return Ok(loading(
                format!("recovery has loaded {loaded} queued jobs so far"),
                Some(loaded),
            ));
        }
        if !s.ready().await {
            return Ok(loading("recovery is not done yet".into(), None));
        }
    }
    crate::store::ping(&state.db).await?;
    Ok(HttpResponse::Ok().json(Health {
        status: "ok".into(),
    }))
}
