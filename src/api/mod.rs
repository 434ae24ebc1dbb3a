//! The HTTP surface (DESIGN §4): jobs and users under `/v1`, the scheduler view,
//! health, metrics and the OpenAPI document.

pub mod auth;
pub mod body;
pub mod error;
pub mod jobs;
pub mod openapi;
pub mod request_id;
pub mod system;
pub mod users;

use std::sync::Arc;

use actix_web::{web, HttpResponse};

use crate::actors::Scheduler;
use crate::config::Settings;
use crate::leadership::Leadership;
use crate::store::Db;
pub use auth::Auth;
pub use error::ApiError;

/// What every handler gets.
#[derive(Clone)]
pub struct AppState {
    pub db: Db,
    pub settings: Arc<Settings>,
    pub auth: Auth,
    /// Who leads; the scheduler's actors while this replica does (DESIGN §10).
    pub leadership: Leadership,
}

impl AppState {
    /// The scheduler's actors while this replica leads; `None` on a follower.
    pub fn scheduler(&self) -> Option<Scheduler> {
        self.leadership.scheduler()
    }
}

async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound("no such route".into()))
}

async fn method_not_allowed() -> Result<HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed)
}

/// Registers every route. Each path is listed once here and once in the OpenAPI
/// document (a test checks they agree).
pub fn routes(cfg: &mut web::ServiceConfig) {
    let resource =
        |path: &str| web::resource(path.to_string()).default_service(web::to(method_not_allowed));
    cfg.service(resource("/v1/jobs").post(jobs::submit).get(jobs::list))
        .service(resource("/v1/jobs/{id}").get(jobs::get))
        .service(resource("/v1/jobs/{id}/cancel").post(jobs::cancel))
        .service(resource("/v1/jobs/{id}/logs").get(jobs::logs))
        .service(resource("/v1/users").get(users::list))
        .service(resource("/v1/users/{id}").get(users::get).put(users::put))
        .service(resource("/v1/users/{id}/pause").post(users::pause))
        .service(resource("/v1/users/{id}/resume").post(users::resume))
        .service(resource("/v1/scheduler").get(system::scheduler))
        .service(resource("/openapi.json").get(openapi::document))
        .service(resource("/metrics").get(system::metrics))
        .service(resource("/healthz").get(system::healthz))
        .service(resource("/readyz").get(system::readyz))
        .default_service(web::to(not_found));
}

/// Every path [`routes`] registers, for the OpenAPI completeness test.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/jobs"),
    ("get", "/v1/jobs"),
    ("get", "/v1/jobs/{id}"),
    ("post", "/v1/jobs/{id}/cancel"),
    ("get", "/v1/jobs/{id}/logs"),
    ("get", "/v1/users"),
    ("get", "/v1/users/{id}"),
    ("put", "/v1/users/{id}"),
    ("post", "/v1/users/{id}/pause"),
    ("post", "/v1/users/{id}/resume"),
    ("get", "/v1/scheduler"),
    ("get", "/openapi.json"),
    ("get", "/metrics"),
    ("get", "/healthz"),
    ("get", "/readyz"),
];
