//! The HTTP surface (DESIGN §4): jobs, users and groups under `/v1`, the scheduler view,
//! health, metrics and the OpenAPI document; Ray's Jobs REST API under `/api/`
//! (`ray_compat`).

mod accept;
pub mod admission;
pub mod auth;
pub mod body;
pub mod console;
pub mod error;
pub mod events;
pub mod groups;
pub mod hints;
pub mod host_guard;
pub mod jobs;
pub mod line_limit;
pub mod openapi;
pub mod ray_compat;
pub mod request_id;
pub mod shapes;
pub mod submit;
pub mod system;
pub mod ui;
pub mod usage;
pub mod user_id;
pub mod users;
pub mod validate;
pub mod what_if;

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
    /// The group-commit writer of `POST /v1/jobs`.
    pub intake: crate::store::IntakeWriter,
    /// The last hour of users' shares, for `GET /v1/shares` (the console's chart).
    pub shares: console::ShareHistory,
    /// Seals each submission's runtime_env before intake stores it (DESIGN §6, "Secrets").
    pub sealer: Arc<crate::secrets::Sealer>,
    /// The leader's estimates as `job_estimates` holds them, read while this replica
    /// follows (DESIGN §2, "Estimates").
    pub followed_estimates: crate::estimates::Estimates,
}

impl AppState {
    /// The scheduler's actors while this replica leads; `None` on a follower.
    pub fn scheduler(&self) -> Option<Scheduler> {
        self.leadership.scheduler()
    }

    /// The estimates this replica answers with: the leader's own table, or on a
    /// follower the one it reads from the database.
    pub fn estimates(&self) -> crate::estimates::Estimates {
        match self.scheduler() {
            Some(s) => s.estimates().clone(),
            None => self.followed_estimates.clone(),
        }
    }
}

async fn uri_too_long() -> Result<HttpResponse, ApiError> {
    Err(ApiError::UriTooLong)
}

/// 404 for a path no route takes; under `/api/` in Python's JSON spacing, as every
/// body of Ray's Jobs API is (a fresh tester's finding: `/api/nothing` answered
/// compact JSON).
async fn not_found(req: actix_web::HttpRequest) -> HttpResponse {
    use actix_web::ResponseError;
    let e = ApiError::NotFound("no such route".into());
    if req.path().starts_with("/api/") {
        ray_compat::pyjson::RayError::from(e).error_response()
    } else {
        e.error_response()
    }
}

/// `HEAD` is `GET` without the body (RFC 9110 §9.3.2, as Ray's own aiohttp server
/// answers it) on every route that takes `GET`: the request is routed as a `GET`, and
/// actix-http, which read a `HEAD`, sends the answer's head (its `Content-Length`
/// included) and no body. Innermost of the middleware, so that logs and metrics
/// still say `HEAD`. (A fresh tester's finding: `HEAD /v1/usage` was 405, as was every
/// route but the health probes and the console.)
pub async fn head_as_get(
    mut req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody>,
) -> Result<actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>, actix_web::Error> {
    if req.method() == actix_web::http::Method::HEAD {
        req.head_mut().method = actix_web::http::Method::GET;
    }
    next.call(req).await
}

/// Registers every route. Each path is listed once here and once in the OpenAPI
/// document (a test checks they agree). Any other method on a known path is 405 with
/// an `Allow` header listing the ones it takes; `HEAD` works wherever `GET` does
/// ([`head_as_get`]).
pub fn routes(cfg: &mut web::ServiceConfig) {
    let resource = |path: &str, allow: &'static str| {
        web::resource(path.to_string()).default_service(web::to(move || async move {
            Err::<HttpResponse, _>(ApiError::MethodNotAllowed { allow })
        }))
    };
    cfg.service(
        resource("/v1/jobs", "GET, HEAD, POST")
            .post(jobs::submit)
            .get(jobs::list),
    )
    .service(resource("/v1/jobs/{id}", "GET, HEAD").get(jobs::get))
    .service(resource("/v1/jobs/{id}/cancel", "POST").post(jobs::cancel))
    .service(resource("/v1/jobs/{id}/logs", "GET, HEAD").get(jobs::logs))
    .service(resource("/v1/jobs/{id}/started", "POST").post(admission::started))
    .service(resource("/v1/jobs/{id}/finished", "POST").post(admission::finished))
    .service(resource("/v1/jobs/{id}/release", "POST").post(admission::release))
    .service(resource("/v1/jobs/{id}/heartbeat", "POST").post(admission::heartbeat))
    .service(resource("/v1/jobs/{id}/events", "GET, HEAD").get(console::job_events))
    .service(resource("/v1/attempts/{submission_id}/{kind}", "POST").post(hints::hint))
    .service(resource("/v1/shares", "GET, HEAD").get(console::shares))
    .service(resource("/v1/whoami", "GET, HEAD").get(console::whoami))
    .service(resource("/v1/users", "GET, HEAD").get(users::list))
    .service(
        resource("/v1/users/{id}", "GET, HEAD, PUT")
            .get(users::get)
            .put(users::put),
    )
    .service(resource("/v1/users/{id}/pause", "POST").post(users::pause))
    .service(resource("/v1/users/{id}/resume", "POST").post(users::resume))
    .service(resource("/v1/groups", "GET, HEAD").get(groups::list))
    // A group's path has slashes, sent as they are or as %2F: the route takes the
    // rest of the URL; `…/pause|resume` is that action (POST) on the group before it,
    // and each answers 405 with its own methods (groups::other_method).
    .service(
        web::resource("/v1/groups/{path:.+}")
            .get(groups::get)
            .put(groups::put)
            .delete(groups::delete)
            .post(groups::post)
            .default_service(web::to(groups::other_method)),
    )
    .service(resource("/v1/events", "GET, HEAD").get(events::stream))
    .service(resource("/v1/usage", "GET, HEAD").get(usage::usage))
    .service(resource("/v1/scheduler", "GET, HEAD").get(system::scheduler))
    .service(resource("/v1/scheduler/what-if", "POST").post(what_if::what_if))
    .service(resource("/openapi.json", "GET, HEAD").get(openapi::document))
    .service(resource("/metrics", "GET, HEAD").get(system::metrics))
    // Uptime checks and load balancers probe with HEAD; actix sends no body for it.
    .service(resource("/healthz", "GET, HEAD").get(system::healthz))
    .service(resource("/readyz", "GET, HEAD").get(system::readyz))
    // The browser console's static files (not API routes: not in ROUTES or OpenAPI).
    .configure(ui::routes)
    // Ray's Jobs REST API for Ray's own clients (docs/ray-jobs-api.md).
    .configure(ray_compat::routes)
    // What a request line over 64 KiB becomes (line_limit): every method, 414.
    .service(web::resource(line_limit::URI_TOO_LONG_PATH).to(uri_too_long))
    .default_service(web::to(not_found));
}

/// Every path `api::routes` registers, for the OpenAPI completeness test.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/jobs"),
    ("get", "/v1/jobs"),
    ("get", "/v1/jobs/{id}"),
    ("post", "/v1/jobs/{id}/cancel"),
    ("get", "/v1/jobs/{id}/logs"),
    ("post", "/v1/jobs/{id}/started"),
    ("post", "/v1/jobs/{id}/finished"),
    ("post", "/v1/jobs/{id}/release"),
    ("post", "/v1/jobs/{id}/heartbeat"),
    ("get", "/v1/jobs/{id}/events"),
    ("post", "/v1/attempts/{submission_id}/{kind}"),
    ("get", "/v1/shares"),
    ("get", "/v1/whoami"),
    ("get", "/v1/users"),
    ("get", "/v1/users/{id}"),
    ("put", "/v1/users/{id}"),
    ("post", "/v1/users/{id}/pause"),
    ("post", "/v1/users/{id}/resume"),
    ("get", "/v1/groups"),
    ("get", "/v1/groups/{path}"),
    ("put", "/v1/groups/{path}"),
    ("delete", "/v1/groups/{path}"),
    ("post", "/v1/groups/{path}/pause"),
    ("post", "/v1/groups/{path}/resume"),
    ("get", "/v1/events"),
    ("get", "/v1/usage"),
    ("get", "/v1/scheduler"),
    ("post", "/v1/scheduler/what-if"),
    ("get", "/openapi.json"),
    ("get", "/metrics"),
    ("get", "/healthz"),
    ("get", "/readyz"),
];
