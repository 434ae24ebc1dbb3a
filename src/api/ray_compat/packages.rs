//! `GET`/`PUT /api/packages/{protocol}/{name}`: the `working_dir` / `py_modules`
//! packages Ray's client uploads before a submit. Kept in the database
//! (`ray_packages`, at most `ray_compat.max_package_bytes` each) and sent to the
//! cluster a job is granted, before the submit (`ray::packages`).

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;

use crate::api::body::read_body_limited;
use crate::api::{ApiError, AppState};
use crate::config::Role;
use crate::ray::packages::{split_uri, UPLOADED_PROTOCOL};

/// The package's URI `{protocol}://{name}`, or 404 for a name that cannot be one (a
/// protocol other than `gcs`, or a name with characters Ray's client never makes).
fn uri_of(protocol: &str, name: &str) -> Result<String, ApiError> {
    let uri = format!("{protocol}://{name}");
    match split_uri(&uri) {
        Some((p, _)) if p == UPLOADED_PROTOCOL => Ok(uri),
        _ => Err(ApiError::NotFound(format!(
            "no package {uri:?}: packages are gcs://<name>.zip as Ray's client names them"
        ))),
    }
}

/// `GET /api/packages/{protocol}/{name}`: 200 when the package is kept here, 404 when
/// not (the client then uploads it).
pub async fn get(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    state.auth.require(&req, Role::Submitter, "read packages")?;
    let (protocol, name) = path.into_inner();
    let uri = uri_of(&protocol, &name)?;
    if crate::store::package_exists(&state.db, &uri).await? {
        Ok(HttpResponse::Ok().json(json!({"result": true, "msg": "package exists"})))
    } else {
        Err(ApiError::NotFound(format!("package {uri} is not uploaded")))
    }
}

/// `PUT /api/packages/{protocol}/{name}`: keeps the body (a zip file) under the URI.
/// 413 above `ray_compat.max_package_bytes`; an empty body is 422.
#[tracing::instrument(skip_all, fields(package))]
pub async fn put(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    state
        .auth
        .require(&req, Role::Submitter, "upload packages")?;
    let (protocol, name) = path.into_inner();
    let uri = uri_of(&protocol, &name)?;
    tracing::Span::current().record("package", uri.as_str());
    let limit = state.settings.ray_compat.max_package_bytes;
    let body = read_body_limited(
        &req,
        payload,
        limit,
        state.settings.server.body_idle_timeout,
    )
    .await?;
    if body.is_empty() {
        return Err(ApiError::invalid(
            "(body)",
            "the package (a zip file) is empty",
        ));
    }
    let bytes = body.len();
    crate::store::put_package(&state.db, &uri, body.to_vec()).await?;
    tracing::info!(bytes, "package kept");
    Ok(HttpResponse::Ok().json(json!({"result": true, "msg": "package uploaded"})))
}
