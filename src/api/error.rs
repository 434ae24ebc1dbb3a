//! The API's error type and its JSON shape: `{"error": {"code", "message", "details"?}}`.
//!
//! 4xx bodies say what is wrong and, for 422, which field (`details.field`). 5xx bodies
//! stay opaque; the cause chain goes to the log.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use utoipa::ToSchema;

use crate::store::StoreError;

/// Every `code` an API error answers with (`ApiError::code`), for the docs' error
/// tables (a test checks `docs/gateway.md` lists each).
pub const ERROR_CODES: &[&str] = &[
    "bad_json",
    "bad_body",
    "unauthorized",
    "forbidden",
    "not_found",
    "method_not_allowed",
    "conflict",
    "request_timeout",
    "payload_too_large",
    "uri_too_long",
    "unsupported_media_type",
    "invalid_field",
    "idempotency_key_reused",
    "queue_full",
    "unavailable",
];

/// Longest field name an error echoes, in characters (longer ones end in `…`).
pub const MAX_FIELD_CHARS: usize = 160;

/// Every way a request can fail.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: the body is not JSON at all.
    #[error("request body is not valid JSON: {0}")]
    BadJson(String),
    /// 400: the body's framing is broken (a malformed chunked encoding, a connection
    /// that ended before the declared length): nothing of it can be read as sent.
    #[error("request body cannot be read: {0}")]
    BadBody(String),
    /// 401: no or unknown bearer token.
    #[error("missing or invalid bearer token")]
    Unauthorized,
    /// 403: the token's role may not do this.
    #[error("this token's role may not {0}")]
    Forbidden(&'static str),
    /// 403: with no token configured, a browser page of another origin asked for a
    /// change (cross-site request forgery; `api::auth`).
    #[error(
        "a page of another origin may not {0}: with no token configured the API takes \
         changes only from clients that are not browsers and from this service's own console"
    )]
    CrossOrigin(&'static str),
    /// 403: a watcher's notification whose signature is not this service's for that
    /// attempt (`ray::notify`).
    #[error("the notification's signature is not this service's for this attempt")]
    BadSignature,
    /// 404.
    #[error("{0}")]
    NotFound(String),
    /// 405; `allow` lists the methods the route takes (the `Allow` header).
    #[error("method not allowed; this route takes {allow}")]
    MethodNotAllowed { allow: &'static str },
    /// 409: the request conflicts with the resource's state.
    #[error("{0}")]
    Conflict(String),
    /// 409 about a job, with details (e.g. logs of a job Ray never had).
    #[error("{message}")]
    JobConflict {
        message: String,
        job_id: uuid::Uuid,
        status: String,
        /// The job's attempt (each admission of a pool job is one: a runner's report of
        /// another attempt is refused).
        attempt: i32,
    },
    /// 408: the request body stalled (no bytes for `idle_s` seconds).
    #[error("the request body stalled: no bytes arrived for {idle_s} s")]
    BodyTimeout { idle_s: f64 },
    /// 413: body over `server.max_body_bytes`.
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// 415: a request with a body that does not declare `Content-Type:
    /// application/json` (what it declared, if anything).
    #[error(
        "a request body must be JSON, sent with `Content-Type: application/json`{}",
        .0.as_ref().map_or(" (none was given)".to_string(), |t| format!(" (not {t:?})"))
    )]
    UnsupportedMediaType(Option<String>),
    /// 414: a request line of `api::line_limit::MAX_REQUEST_LINE` bytes or more.
    #[error(
        "the request line is {} bytes or longer; send long parameters in a request body",
        crate::api::line_limit::MAX_REQUEST_LINE
    )]
    UriTooLong,
    /// 422: a field is missing or invalid.
    #[error("invalid field `{field}`: {reason}")]
    Invalid { field: String, reason: String },
    /// 422: the `(user, external_id)` names a job that was submitted with another
    /// payload (`fields` lists what differs). `key` is the key's field name as the
    /// client sent it: `external_id` on `/v1`, `submission_id` on Ray's Jobs API.
    /// `job_id`: that job, `None` when the caller may not see it (a token confined
    /// to another pool; `fields` is then empty too).
    #[error("{key} {external_id:?} was already used by this user for {} with a different {}; use a new {key} for a new job",
        job_id.map_or_else(|| "another job".to_string(), |id| format!("job {id}")),
        if fields.is_empty() { "payload".to_string() } else { fields.join(", ") })]
    IdempotencyKeyReused {
        key: &'static str,
        external_id: String,
        job_id: Option<uuid::Uuid>,
        fields: Vec<&'static str>,
    },
    /// 429: the user's queue is full.
    #[error("{0}")]
    QueueFull(String),
    /// 503: the database or another dependency is unavailable; retry later.
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// 503 (code `unavailable`, `Retry-After`) for a state that passes and that the
    /// client may act on: this replica does not lead, or recovery is still loading.
    /// Unlike [`ApiError::Unavailable`] (a fault, whose cause stays in the log) the
    /// message is shown and `details` (`{"reason", ...}`) says which.
    #[error("{message}")]
    NotNow {
        message: String,
        details: serde_json::Value,
    },
}

impl ApiError {
    /// A 422 for `field`.
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        let mut field = field.into();
        // A field named after what the client sent (a metadata key, a path) is cut at
        // MAX_FIELD_CHARS characters: a 100,000-character key was echoed whole, twice.
        if let Some((cut, _)) = field.char_indices().nth(MAX_FIELD_CHARS) {
            field.truncate(cut);
            field.push('…');
        }
        ApiError::Invalid {
            field,
            reason: reason.into(),
        }
    }

    /// The stable machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadJson(_) => "bad_json",
            ApiError::BadBody(_) => "bad_body",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden(_) | ApiError::CrossOrigin(_) | ApiError::BadSignature => {
                "forbidden"
            }
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::Conflict(_) => "conflict",
            ApiError::JobConflict { .. } => "conflict",
            ApiError::BodyTimeout { .. } => "request_timeout",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::UriTooLong => "uri_too_long",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::Invalid { .. } => "invalid_field",
            ApiError::IdempotencyKeyReused { .. } => "idempotency_key_reused",
            ApiError::QueueFull(_) => "queue_full",
            ApiError::Unavailable(_) | ApiError::NotNow { .. } => "unavailable",
        }
    }
}

/// The JSON error body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable code: bad_json, unauthorized, forbidden, not_found, method_not_allowed,
    /// conflict, request_timeout, payload_too_large, uri_too_long,
    /// unsupported_media_type, invalid_field, idempotency_key_reused, queue_full,
    /// unavailable, loading (`/readyz` while recovery runs).
    pub code: String,
    /// A sentence for humans.
    pub message: String,
    /// For invalid_field: `{"field", "reason"}`; for unsupported_media_type:
    /// `{"field": "Content-Type", "reason"}`; for idempotency_key_reused:
    /// `{"field": "external_id", "external_id", "job_id" (the existing job), "differs"
    /// (the fields that differ)}` (on Ray's Jobs API `submission_id` in place of
    /// `external_id`); for a 503 that passes: `{"reason": "not_leader", "replica",
    /// "leader"}` (this replica does not lead; `leader` is null while nobody does) or
    /// `{"reason": "loading"}` (recovery has not loaded the queues yet); for a conflict about a job: `{"job_id", "status", "attempt"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::BadJson(_) | ApiError::BadBody(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::CrossOrigin(_) | ApiError::BadSignature => {
                StatusCode::FORBIDDEN
            }
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) | ApiError::JobConflict { .. } => StatusCode::CONFLICT,
            ApiError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UriTooLong => StatusCode::URI_TOO_LONG,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Invalid { .. } | ApiError::IdempotencyKeyReused { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ApiError::QueueFull(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) | ApiError::NotNow { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        // A state that passes (NotNow) is expected, not a fault: no error log.
        if status.is_server_error() && !matches!(self, ApiError::NotNow { .. }) {
            tracing::error!(error = %crate::errors::chain(self), code = self.code(), "request failed");
        }
        let details = match self {
            ApiError::Invalid { field, reason } => {
                Some(serde_json::json!({ "field": field, "reason": reason }))
            }
            ApiError::IdempotencyKeyReused {
                key,
                external_id,
                job_id,
                fields,
            } => {
                let mut d = serde_json::json!({
                    "field": key,
                    "job_id": job_id,
                    "differs": fields,
                });
                d[*key] = serde_json::Value::from(external_id.as_str());
                Some(d)
            }
            ApiError::JobConflict {
                job_id,
                status,
                attempt,
                ..
            } => {
                Some(serde_json::json!({ "job_id": job_id, "status": status, "attempt": attempt }))
            }
            ApiError::UnsupportedMediaType(_) => Some(serde_json::json!({
                "field": "Content-Type",
                "reason": "must be application/json (parameters such as charset allowed)",
            })),
            ApiError::NotNow { details, .. } => Some(details.clone()),
            _ => None,
        };
        let message = match self {
            // Opaque: the cause chain is in the log.
            ApiError::Unavailable(_) => {
                "the database or a dependency is unavailable; retry later".to_string()
            }
            other => other.to_string(),
        };
        let mut resp = HttpResponse::build(status);
        if matches!(
            self,
            ApiError::Unavailable(_) | ApiError::NotNow { .. } | ApiError::QueueFull(_)
        ) {
            resp.insert_header(("Retry-After", "1"));
        }
        if matches!(self, ApiError::UriTooLong | ApiError::BodyTimeout { .. }) {
            // What followed the line is unknown; do not keep the connection.
            resp.force_close();
        }
        if let ApiError::MethodNotAllowed { allow } = self {
            resp.insert_header(("Allow", *allow));
        }
        if matches!(self, ApiError::Unauthorized) {
            resp.insert_header(("WWW-Authenticate", "Bearer"));
        }
        resp.json(ErrorBody {
            error: ErrorDetail {
                code: self.code().to_string(),
                message,
                details,
            },
        })
    }
}

impl From<sea_orm::DbErr> for ApiError {
    fn from(e: sea_orm::DbErr) -> Self {
        crate::metrics::db_error();
        tracing::error!(error = %e, "database error");
        ApiError::Unavailable(e.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Db(db) => db.into(),
            StoreError::QueueFull { .. } => ApiError::QueueFull(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of each variant (a new variant goes here too): [`ERROR_CODES`] lists
    /// exactly their codes, in order.
    #[test]
    fn every_error_code_is_listed() {
        let id = uuid::Uuid::nil();
        let all = [
            ApiError::BadJson(String::new()),
            ApiError::BadBody(String::new()),
            ApiError::Unauthorized,
            ApiError::Forbidden("x"),
            ApiError::CrossOrigin("x"),
            ApiError::BadSignature,
            ApiError::NotFound(String::new()),
            ApiError::MethodNotAllowed { allow: "GET" },
            ApiError::Conflict(String::new()),
            ApiError::JobConflict {
                message: String::new(),
                job_id: id,
                status: String::new(),
                attempt: 1,
            },
            ApiError::BodyTimeout { idle_s: 1.0 },
            ApiError::PayloadTooLarge { limit: 1 },
            ApiError::UriTooLong,
            ApiError::UnsupportedMediaType(None),
            ApiError::invalid("f", "r"),
            ApiError::IdempotencyKeyReused {
                key: "external_id",
                external_id: String::new(),
                job_id: Some(id),
                fields: vec![],
            },
            ApiError::QueueFull(String::new()),
            ApiError::Unavailable(String::new()),
            ApiError::NotNow {
                message: String::new(),
                details: serde_json::Value::Null,
            },
        ];
        let mut codes: Vec<&str> = all.iter().map(ApiError::code).collect();
        codes.dedup();
        assert_eq!(codes, ERROR_CODES);
    }
}
