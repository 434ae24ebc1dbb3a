//! Ray's Jobs REST API, served by fairshare under `/api/` beside `/v1` (docs/ray-jobs-api.md,
//! DESIGN §4): what Ray 2.x's `JobSubmissionClient` and the `ray job` CLI
//! call, so a platform that submits with Ray's own client adopts fair share by
//! changing one address.
//!
//! | route | what |
//! |---|---|
//! | `GET /api/version` | `{"version": "4", "ray_version", "ray_commit", "session_name"}` |
//! | `POST /api/jobs/` | Ray's `JobSubmitRequest` → queued here; `{"job_id", "submission_id"}` |
//! | `GET /api/jobs/` | Ray's `JobDetails` of the newest jobs |
//! | `GET /api/jobs/{id}` | one `JobDetails`; `{id}` is the `submission_id` or fairshare's job id |
//! | `POST /api/jobs/{id}/stop` | `{"stopped": bool}` |
//! | `DELETE /api/jobs/{id}` | `{"deleted": true}` |
//! | `GET /api/jobs/{id}/logs` | `{"logs": "..."}` |
//! | `GET /api/jobs/{id}/logs/tail` | websocket: text frames of new log output until the job ends |
//! | `GET`/`PUT /api/packages/{protocol}/{name}` | `working_dir`/`py_modules` packages |
//!
//! **Who the user is.** The bearer token names a submitter (`auth.tokens`); a token
//! with a `user` submits as that user; for a token without one (a gateway acting for
//! many users) `ray_compat.user_rules` find the user in what the client sends (a
//! metadata key, an env var as written or hashed, a default). See [`identity`].
//!
//! Errors use fairshare's JSON error body (`{"error": {"code", "message",
//! "details"}}`) with Ray's field names in `details.field`; Ray's client shows the body
//! in its `RuntimeError`. Every JSON body here, errors included, is written as Ray's
//! dashboard writes JSON (Python's `json.dumps` defaults: [`pyjson`]).

pub mod identity;
pub mod jobs;
pub mod packages;
pub mod pyjson;
pub mod submit;
pub mod tail;

use actix_web::{web, HttpResponse};

use super::ApiError;

/// The Ray release whose Jobs API this surface follows (measured against Ray 2.60,
/// `docs/ray.md`). Clients gate features on it: `entrypoint_memory` needs ≥ 2.8.
pub const RAY_VERSION: &str = "2.60.0";

/// Ray's Jobs API version (Ray's `CURRENT_VERSION`); the CLI tails logs only when it
/// is above 0.
pub const JOBS_API_VERSION: &str = "4";

/// Registers the `/api/` routes (called from [`super::routes`]).
pub fn routes(cfg: &mut web::ServiceConfig) {
    let resource = |path: &str, allow: &'static str| {
        web::resource(path.to_string()).default_service(web::to(move || async move {
            Err::<HttpResponse, _>(pyjson::RayError(ApiError::MethodNotAllowed { allow }))
        }))
    };
    cfg.service(resource("/api/version", "GET, HEAD").get(jobs::version))
        .service(
            resource("/api/jobs/", "GET, HEAD, POST")
                .post(jobs::submit)
                .get(jobs::list),
        )
        .service(
            resource("/api/jobs/{id}", "GET, HEAD, DELETE")
                .get(jobs::get)
                .delete(jobs::delete),
        )
        .service(resource("/api/jobs/{id}/stop", "POST").post(jobs::stop))
        .service(resource("/api/jobs/{id}/logs", "GET, HEAD").get(jobs::logs))
        .service(resource("/api/jobs/{id}/logs/tail", "GET, HEAD").get(tail::tail))
        .service(
            resource("/api/packages/{protocol}/{name}", "GET, HEAD, PUT")
                .get(packages::get)
                .put(packages::put),
        );
}

/// Every `/api/` route `api::ray_compat::routes` registers, as `(method, path)`; listed in
/// `docs/ray-jobs-api.md` (not in `/openapi.json`, which describes `/v1`).
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/api/version"),
    ("post", "/api/jobs/"),
    ("get", "/api/jobs/"),
    ("get", "/api/jobs/{id}"),
    ("delete", "/api/jobs/{id}"),
    ("post", "/api/jobs/{id}/stop"),
    ("get", "/api/jobs/{id}/logs"),
    ("get", "/api/jobs/{id}/logs/tail"),
    ("get", "/api/packages/{protocol}/{name}"),
    ("put", "/api/packages/{protocol}/{name}"),
];
