//! Why a call to Ray failed, and the one place that classifies Ray's answers.

use reqwest::StatusCode;

use super::{MAX_BODY_CHARS, MAX_MESSAGE_CHARS, TRACEBACK_HEADER};

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Why a call to Ray failed.
///
/// `endpoint` fields name the request (`"GET /api/jobs/{id}"`) without the cluster's
/// address, which may carry credentials; the caller knows which cluster it asked.
#[derive(Debug, thiserror::Error)]
pub enum RayError {
    /// Ray could not be reached or the connection broke (refused, DNS, reset, TLS).
    /// Retryable.
    #[error("cannot reach Ray for {endpoint}")]
    Transport {
        /// The request, e.g. `"POST /api/jobs/"`.
        endpoint: String,
        /// The underlying error (its URL removed).
        #[source]
        source: reqwest::Error,
    },
    /// Ray did not answer within the client's request timeout. The request may still
    /// have had its effect. Retryable.
    #[error("Ray did not answer {endpoint} within {timeout_ms} ms")]
    Timeout {
        /// The request, e.g. `"POST /api/jobs/"`.
        endpoint: String,
        /// The client's request timeout, in milliseconds.
        timeout_ms: u64,
        /// The underlying error (its URL removed).
        #[source]
        source: reqwest::Error,
    },
    /// Ray (or a proxy in front of it) answered with a 5xx other than the
    /// duplicate-submission case, or with an unexpected non-2xx, non-4xx status.
    /// Retryable.
    #[error("Ray failed with HTTP {status}: {}", summarize(.body))]
    Server {
        /// HTTP status code.
        status: u16,
        /// The response body, trimmed and cut to its last 4000 characters.
        body: String,
    },
    /// Ray refused the request for good (HTTP 4xx), e.g. 400 for an invalid field.
    /// Not retryable, except 408 and 429 (which only a proxy sends).
    ///
    /// `status` is 0 only from [`RayClient::new`]: the address is unusable and no
    /// request was sent.
    ///
    /// [`RayClient::new`]: super::RayClient::new
    #[error("Ray refused the request with HTTP {status}: {message}")]
    Client {
        /// HTTP status code (0: invalid address, nothing sent).
        status: u16,
        /// Ray's message: the exception line of its traceback, or its whole text,
        /// at most 1000 characters.
        message: String,
    },
    /// The route itself is not there (yet): 404, 405 or 501 on a collection route
    /// such as `POST /api/jobs/`. A dashboard that is still starting answers so while
    /// its other routes already work (KubeRay users meet it on every head restart).
    /// Means "cluster not ready", never "bad job". Retryable.
    #[error("Ray's {endpoint} route is not ready (HTTP {status}): {message}")]
    NotReady {
        /// The request, e.g. `"POST /api/jobs/"`.
        endpoint: String,
        /// HTTP status code.
        status: u16,
        /// Ray's text, summarized.
        message: String,
    },
    /// Ray refused this service's credentials (HTTP 401 or 403 from a head with
    /// token authentication), or the configured token cannot be read (`status` 0).
    /// About the cluster, never the job: the cluster is unhealthy, its jobs stay
    /// QUEUED. Retryable (the token may be rotated). Never carries the token.
    #[error("{}", unauthorized(.endpoint, *.status, .detail))]
    Unauthorized {
        /// The request, e.g. `"GET /api/jobs/"`.
        endpoint: String,
        /// HTTP status code (0: no request was sent, the token could not be read).
        status: u16,
        /// What was sent and what to check.
        detail: String,
    },
    /// Ray answered 2xx with a body this client cannot use. Retryable (a truncated
    /// answer, a proxy's page, a cluster still starting).
    #[error("cannot decode Ray's answer to {endpoint}: {detail}")]
    Decode {
        /// The request, e.g. `"GET /api/jobs/"`.
        endpoint: String,
        /// What was wrong with the body.
        detail: String,
    },
}

impl RayError {
    /// Whether trying the same request again later may succeed: transport errors,
    /// timeouts, 5xx, undecodable answers, and 408/429. Other 4xx are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Transport { .. } | Self::Timeout { .. } | Self::Server { .. } => true,
            Self::NotReady { .. } => true,
            Self::Decode { .. } | Self::Unauthorized { .. } => true,
            Self::Client { status, .. } => matches!(*status, 408 | 429),
        }
    }

    /// Short, stable name of the variant for metrics labels: `"transport"`,
    /// `"timeout"`, `"server"`, `"client"`, `"not_ready"`, `"decode"` or
    /// `"unauthorized"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Transport { .. } => "transport",
            Self::Timeout { .. } => "timeout",
            Self::Server { .. } => "server",
            Self::Client { .. } => "client",
            Self::NotReady { .. } => "not_ready",
            Self::Decode { .. } => "decode",
            Self::Unauthorized { .. } => "unauthorized",
        }
    }
}

pub use crate::errors::chain as error_chain;

/// [`RayError::Unauthorized`]'s text: Ray's refusal, or the token that could not be
/// used (status 0, nothing sent).
fn unauthorized(endpoint: &str, status: u16, detail: &str) -> String {
    if status == 0 {
        format!("no request sent for {endpoint}: this service's token for Ray's authentication cannot be used: {detail}")
    } else {
        format!(
            "Ray refused this service's authentication for {endpoint} (HTTP {status}): {detail}"
        )
    }
}

/// Ray's error text reduced to its message: the exception line(s) at the end of a
/// Python traceback, or the whole text; trimmed, at most [`MAX_MESSAGE_CHARS`].
pub(super) fn summarize(body: &str) -> String {
    let body = body.trim();
    let message = if body.starts_with(TRACEBACK_HEADER) {
        // Frames are indented; the exception that ended the traceback is not. Nested
        // tracebacks (Ray's head quoting its agent) end the same way.
        let lines: Vec<&str> = body.lines().collect();
        match lines
            .iter()
            .rposition(|line| line.starts_with(' ') || line.starts_with('\t'))
        {
            Some(last_frame) if last_frame + 1 < lines.len() => lines[last_frame + 1..]
                .iter()
                .map(|line| line.trim())
                .filter(|line| !line.is_empty() && *line != ".")
                .collect::<Vec<_>>()
                .join(" "),
            _ => body.to_owned(),
        }
    } else {
        body.to_owned()
    };
    truncate_head(&message, MAX_MESSAGE_CHARS)
}

/// The first `max` characters of `text`, with `…` when cut.
pub(super) fn truncate_head(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The last `max` characters of `text`, with `…` when cut.
pub(super) fn truncate_tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    match text.char_indices().nth(count - max) {
        Some((cut, _)) => format!("…{}", &text[cut..]),
        None => text.to_owned(),
    }
}

///
/// Transport errors, timeouts and undecodable 2xx bodies are retryable too.
/// Every non-2xx answer of Ray is classified here (DESIGN §5 lists the classes):
///
/// | answer | class | the job |
/// |---|---|---|
/// | 2xx | success | — |
/// | 500 "already exists" on submit | duplicate (handled by [`RayClient::submit`]) | submitted |
/// | 404 on `GET`/stop/logs of one job | that job is unknown (handled by the caller) | — |
/// | 404, 405, 501 on `POST /api/jobs/` (the route itself) | [`RayError::NotReady`] | back to QUEUED, cluster backs off |
/// | 408, 429 | [`RayError::Client`], retryable | back to QUEUED after the budget |
/// | other 4xx (400, 413, 422, …) | [`RayError::Client`], final | FAILED with Ray's message |
/// | other 5xx | [`RayError::Server`], retryable | back to QUEUED after the budget |
///
/// [`RayClient::submit`]: super::RayClient::submit
pub fn classify(endpoint: &str, status: StatusCode, body: &str) -> RayError {
    let route_missing = matches!(status.as_u16(), 404 | 405 | 501);
    if route_missing && endpoint.ends_with('/') {
        return RayError::NotReady {
            endpoint: endpoint.to_owned(),
            status: status.as_u16(),
            message: summarize(body),
        };
    }
    status_error(status, body)
}

/// The error for a non-2xx status that the endpoint gives no special meaning to.
pub(super) fn status_error(status: StatusCode, body: &str) -> RayError {
    if status.is_client_error() {
        RayError::Client {
            status: status.as_u16(),
            message: summarize(body),
        }
    } else {
        RayError::Server {
            status: status.as_u16(),
            body: truncate_tail(body.trim(), MAX_BODY_CHARS),
        }
    }
}

pub(super) fn decode<T: serde::de::DeserializeOwned>(
    endpoint: &str,
    bytes: &[u8],
) -> Result<T, RayError> {
    serde_json::from_slice(bytes).map_err(|e| RayError::Decode {
        endpoint: endpoint.to_owned(),
        detail: e.to_string(),
    })
}

pub(super) fn bad_usage(endpoint: &str, key: &str, value: &serde_json::Value) -> RayError {
    RayError::Decode {
        endpoint: endpoint.to_owned(),
        detail: format!("usage.{key} is not [used, total]: {value}"),
    }
}
