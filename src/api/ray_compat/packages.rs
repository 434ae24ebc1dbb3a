//! `GET`/`PUT /api/packages/{protocol}/{name}`: the `working_dir` / `py_modules`
//! packages Ray's client uploads before a submit. Kept in the database
//! (`ray_packages`, at most `ray_compat.max_package_bytes` each) and sent to the
//! cluster a job is granted, before the submit (`ray::packages`).
//!
//! Packages are kept per owner ([`crate::api::auth::Identity::package_owner`]): a token
//! with a user sees and uses only its own uploads; tokens without one share one
//! namespace. Neither the existence nor the content of a package crosses owners.

use actix_web::{web, HttpRequest, HttpResponse};

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

/// `GET /api/packages/{protocol}/{name}`: 200 when the caller's namespace has the
/// package, 404 when not (the client then uploads it).
pub async fn get(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, super::pyjson::RayError> {
    let who = state
        .auth
        .identify(&req, Role::Submitter, "read packages")?;
    let (protocol, name) = path.into_inner();
    let uri = uri_of(&protocol, &name)?;
    if crate::store::package_exists(&state.db, who.package_owner(), &uri).await? {
        // Ray answers an empty 200; its client reads the status only.
        Ok(HttpResponse::Ok().finish())
    } else {
        Err(ApiError::NotFound(format!("package {uri} is not uploaded")).into())
    }
}

/// `PUT /api/packages/{protocol}/{name}`: keeps the body (a zip file) under the URI in
/// the caller's namespace.
/// 413 above `ray_compat.max_package_bytes`; an empty body is 422.
#[tracing::instrument(skip_all, fields(package))]
pub async fn put(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    payload: web::Payload,
) -> Result<HttpResponse, super::pyjson::RayError> {
    let who = state
        .auth
        .identify(&req, Role::Submitter, "upload packages")?;
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
        return Err(ApiError::invalid("(body)", "the package (a zip file) is empty").into());
    }
    let bytes = body.len();
    crate::store::put_package(&state.db, who.package_owner(), &uri, body.to_vec()).await?;
    tracing::info!(bytes, "package kept");
    Ok(HttpResponse::Ok().finish())
}

/// Pins a submit's `runtime_env` to `who`'s packages ([`crate::ray::packages::pin_packages`]):
/// each uploaded URI of `who`'s namespace becomes the name of its content on the
/// clusters. Errors: 503 on a database error.
pub async fn pin(
    state: &AppState,
    who: &crate::api::auth::Identity,
    runtime_env: &mut Option<serde_json::Value>,
) -> Result<(), ApiError> {
    let Some(env) = runtime_env.as_mut() else {
        return Ok(());
    };
    let owner = who.package_owner().to_string();
    crate::ray::packages::pin_packages(env, |uri| {
        let (db, owner) = (state.db.clone(), owner.clone());
        async move { crate::store::package_digest(&db, &owner, &uri).await }
    })
    .await?;
    Ok(())
}
