//! A request id per HTTP request: taken from `X-Request-Id` if the caller sent a sane
//! one, else a new UUID; echoed in the response and recorded on the request's span.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use tracing::Instrument;

/// The header that carries the request id.
pub const HEADER: &str = "x-request-id";

/// Middleware body for `actix_web::middleware::from_fn`.
pub async fn middleware(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = req
        .headers()
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.chars().all(|c| c.is_ascii_graphic()))
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let span = tracing::info_span!("http", request_id = %id, method = %req.method(), path = %req.path(), status = tracing::field::Empty);
    let started = std::time::Instant::now();
    let method = method_label(req.method());
    let mut res = next.call(req).instrument(span.clone()).await?;
    let status = res.status().as_u16();
    span.record("status", status);
    // Labels come from fixed sets only, so that a client cannot mint new series: the
    // method from the standard ones, the route from the registered patterns, the status
    // from what this server answers.
    let route = res
        .request()
        .match_pattern()
        .filter(|p| {
            (crate::api::ROUTES.iter())
                .chain(crate::api::ray_compat::ROUTES)
                .any(|(_, r)| r == p)
        })
        .unwrap_or_else(|| UNMATCHED.to_string());
    crate::metrics::get()
        .http_requests
        .with_label_values(&[method, route.as_str(), res.status().as_str()])
        .observe(started.elapsed().as_secs_f64());
    if let Ok(v) = HeaderValue::from_str(&id) {
        res.headers_mut().insert(HeaderName::from_static(HEADER), v);
    }
    Ok(res)
}

/// The `route` label of requests that matched no route (404s).
pub const UNMATCHED: &str = "unmatched";

/// The `method` label: one of the methods HTTP defines, else `other`.
pub fn method_label(m: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}
