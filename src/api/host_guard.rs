//! What no web page may do through this service (issue 45 §3; DESIGN §4, "Browsers").
//!
//! Whoever can submit a job runs code on the Ray cluster behind the service, so a page
//! in a victim's browser must not be able to. Two rules run before any handler:
//!
//! 1. **Allowed hosts** ([`HostGuard`]): a request whose `Host` names a host this
//!    service does not answer to is refused with 421 and a body naming
//!    `server.allowed_hosts`. A DNS-rebinding page (`http://evil.example:PORT`, its
//!    name rebound to 127.0.0.1) sends its own name as `Host`, and so does every
//!    request it makes: same-origin for the browser, so no Origin check can catch it
//!    (measured against the previous cross-origin check: `POST /v1/jobs` 201). Allowed
//!    by default: any IP literal (a browser sends a name only when the page's URL has
//!    one, and a rebinding attack needs a name; Kubernetes probes and Prometheus use
//!    the pod's IP), `localhost` and `*.localhost` (they resolve to loopback only, RFC
//!    6761), and the host of `notify.url` (the watchers' target). The operator adds the
//!    names the service is reached by; `"*"` turns the check off.
//! 2. **Ray's browser rule on `/api/`** ([`is_browser_request`]): Ray's API on
//!    fairshare refuses every browser request with a method other than GET, HEAD or
//!    OPTIONS, with Ray's own 405 and text, as Ray 2.60's dashboard does since
//!    CVE-2025-62593 (`dashboard/optional_utils.py`,
//!    `get_browser_request_middleware`: a `User-Agent` starting with `Mozilla`, or any
//!    of `Referer`, `Origin`, `Sec-Fetch-*`, `Access-Control-Request-*`). Ray's
//!    clients (the Jobs SDK, the CLI, the gateway's `requests`) send none of these.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{web, HttpResponse};

/// The hosts the service answers to (from `server.allowed_hosts` and `notify.url`).
#[derive(Clone, Debug, Default)]
pub struct HostGuard {
    /// Lower-case host names without port or trailing dot; `*.x` matches every name
    /// under `x`.
    names: Vec<String>,
    /// `server.allowed_hosts` has `"*"`: every host is answered.
    any: bool,
}

impl HostGuard {
    /// The guard for `allowed` (`server.allowed_hosts`) plus the host of `notify_url`
    /// when it names one.
    pub fn new(allowed: &[String], notify_url: &str) -> HostGuard {
        let mut names: Vec<String> = allowed.iter().map(|h| normalize(h)).collect();
        if let Some(host) = reqwest::Url::parse(notify_url)
            .ok()
            .and_then(|u| u.host_str().map(normalize))
        {
            names.push(host);
        }
        HostGuard {
            any: names.iter().any(|n| n == "*"),
            names,
        }
    }

    /// Whether a request with this `Host` header value (`name[:port]`, `[v6]:port`)
    /// is answered. A request without one (HTTP/1.0) is: it cannot come from a
    /// browser, which always sends one.
    pub fn allows(&self, host: Option<&str>) -> bool {
        if self.any {
            return true;
        }
        let Some(host) = host else {
            return true;
        };
        let name = normalize(strip_port(host));
        if name.parse::<std::net::IpAddr>().is_ok() || name == "localhost" {
            return true;
        }
        name.ends_with(".localhost")
            || self
                .names
                .iter()
                .any(|allowed| match allowed.strip_prefix("*.") {
                    Some(parent) => name.ends_with(&format!(".{parent}")),
                    None => *allowed == name,
                })
    }
}

/// `host` without its port: `[::1]:8080` → `::1`, `a.b:80` → `a.b`.
fn strip_port(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        // One colon: a name or IPv4 with a port; more: a bare IPv6 address.
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

/// `path` with every `%XX` decoded (bytes that are not UTF-8 replaced).
fn percent_decoded(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Lower case, no trailing dot, no brackets.
fn normalize(host: &str) -> String {
    host.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// Whether Ray's dashboard would take `req` for a browser's (Ray 2.60,
/// `dashboard/optional_utils.py`, `is_browser_request`).
pub fn is_browser_request(req: &actix_web::HttpRequest) -> bool {
    let headers = req.headers();
    headers
        .get(actix_web::http::header::USER_AGENT)
        .is_some_and(|ua| ua.as_bytes().starts_with(b"Mozilla"))
        || [
            "referer",
            "origin",
            "sec-fetch-mode",
            "sec-fetch-dest",
            "sec-fetch-site",
            "sec-fetch-user",
            "access-control-request-method",
            "access-control-request-headers",
        ]
        .iter()
        .any(|h| headers.contains_key(*h))
}

/// Middleware body for `actix_web::middleware::from_fn`: both rules above.
pub async fn middleware(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let guard = req
        .app_data::<web::Data<HostGuard>>()
        .map(|g| g.get_ref().clone())
        .unwrap_or_default();
    let host = req
        .headers()
        .get(actix_web::http::header::HOST)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if !guard.allows(host.as_deref()) {
        let shown: String = host
            .unwrap_or_default()
            .chars()
            .filter(|c| !c.is_control())
            .take(256)
            .collect();
        tracing::warn!(host = %shown, path = %req.path(), "request refused: its Host is not in server.allowed_hosts");
        let body = serde_json::json!({"error": {
            "code": "host_not_allowed",
            "message": format!(
                "this service does not answer to host {shown:?}: add it to server.allowed_hosts \
                 (a DNS-rebinding page sends its own name; see DESIGN §4, \"Browsers\")"
            ),
            "details": {"field": "Host", "reason": "not in server.allowed_hosts"},
        }});
        let res = HttpResponse::build(StatusCode::MISDIRECTED_REQUEST).json(body);
        return Ok(req.into_response(res));
    }
    // As the router sees it: `/%61pi/jobs/` is routed to `/api/jobs/` (a fresh
    // tester's finding).
    let path = percent_decoded(req.path());
    let ray_api = path == "/api" || path.starts_with("/api/");
    let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if ray_api && !safe && is_browser_request(req.request()) {
        let text = format!("'{}' method not allowed for browser traffic.", req.method());
        let res = HttpResponse::MethodNotAllowed()
            .content_type("text/plain; charset=utf-8")
            .body(text);
        return Ok(req.into_response(res));
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_allowed_by_ip_loopback_name_list_and_notify_url() {
        let g = HostGuard::new(
            &["fairshare.example.org".into(), "*.svc.cluster.local".into()],
            "http://fairshare.ray-ns.svc:8080",
        );
        for ok in [
            None,
            Some("127.0.0.1:8080"),
            Some("10.1.2.3"),
            Some("[::1]:8080"),
            Some("::1"),
            Some("localhost:8080"),
            Some("LOCALHOST"),
            Some("ui.localhost:1"),
            Some("FairShare.Example.Org.:443"),
            Some("fairshare.ns.svc.cluster.local:8080"),
            Some("fairshare.ray-ns.svc:8080"),
        ] {
            assert!(g.allows(ok), "{ok:?}");
        }
        for refused in [
            Some("evil.example:8080"),
            Some("evil.example"),
            Some("fairshare.example.org.evil.example"),
            Some("localhost.evil.example"),
            Some("svc.cluster.local"),
            Some("127.0.0.1.nip.io"),
            Some(""),
        ] {
            assert!(!g.allows(refused), "{refused:?}");
        }
        assert!(HostGuard::new(&["*".into()], "").allows(Some("evil.example")));
    }

    #[test]
    fn paths_are_compared_as_the_router_decodes_them() {
        assert_eq!(percent_decoded("/%61pi/jobs/"), "/api/jobs/");
        assert_eq!(percent_decoded("/a%70i/%6aobs/"), "/api/jobs/");
        assert_eq!(percent_decoded("/api/%zz/%4"), "/api/%zz/%4");
    }

    #[test]
    fn ports_are_stripped_from_names_and_addresses() {
        assert_eq!(strip_port("a.b:80"), "a.b");
        assert_eq!(strip_port("[::1]:80"), "::1");
        assert_eq!(strip_port("::1"), "::1");
        assert_eq!(strip_port("a.b"), "a.b");
        assert_eq!(strip_port("a.b:x"), "a.b:x");
    }
}
