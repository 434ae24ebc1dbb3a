//! Inputs a fresh tester used to break the API, each kept as a test.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::both_databases;
use crate::helpers::{assert_error, spawn_app, spawn_app_with, Db, ADMIN, SUBMITTER};

async fn nul_characters_are_refused_naming_the_field(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let cases = [
        (
            json!({"user": "a", "entrypoint": "x", "external_id": "a\u{0}"}),
            "external_id",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "metadata": {"k": "v\u{0}"}}),
            "metadata.k",
        ),
        (json!({"user": "a", "entrypoint": "x\u{0}"}), "entrypoint"),
        (
            json!({"user": "a", "entrypoint": "x", "runtime_env": {"env_vars": {"A": "\u{0}"}}}),
            "runtime_env.env_vars.A",
        ),
        (json!({"user": "a\u{0}", "entrypoint": "x"}), "user"),
    ];
    for (body, field) in cases {
        assert_error(
            app.post("/v1/jobs", SUBMITTER, body).await,
            422,
            "invalid_field",
            Some(field),
        )
        .await;
    }
    assert_error(
        app.get("/v1/jobs?user=a%00b", SUBMITTER).await,
        422,
        "invalid_field",
        Some("user"),
    )
    .await;
    assert_error(
        app.get("/v1/users/a%00b", SUBMITTER).await,
        404,
        "not_found",
        None,
    )
    .await;
    assert_error(
        app.put("/v1/users/a%00b", ADMIN, json!({})).await,
        422,
        "invalid_field",
        Some("id"),
    )
    .await;
    // Nothing reached the database, so nothing counted as a database error.
    let page: serde_json::Value = app.get("/v1/jobs", SUBMITTER).await.json().await.unwrap();
    assert_eq!(page["jobs"], json!([]));
}
both_databases!(nul_characters_are_refused_naming_the_field);

#[actix_web::test]
async fn resources_finer_than_rays_precision_are_refused() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    for cpu in [json!(5e-05), json!(1e-320), json!(0.00015)] {
        let body = json!({"user": "a", "entrypoint": "x", "resources": {"cpu": cpu}});
        assert_error(
            app.post("/v1/jobs", SUBMITTER, body).await,
            422,
            "invalid_field",
            Some("resources.cpu"),
        )
        .await;
    }
    let body = json!({"user": "a", "entrypoint": "x", "resources": {"cpu": 0, "gpu": 0.00001}});
    assert_error(
        app.post("/v1/jobs", SUBMITTER, body).await,
        422,
        "invalid_field",
        Some("resources.gpu"),
    )
    .await;
    for cpu in [0.0001, 0.352, 999_999.999_9] {
        app.submit("a", json!({"resources": {"cpu": cpu}})).await;
    }
}

/// Invisible characters in a user id are refused wherever a user id is taken. A
/// later tester found a variation selector (U+FE0F) and the Mongolian vowel separator
/// (U+180E, a format character) accepted: every format character and every
/// default-ignorable code point is refused now (`api::user_id`).
#[actix_web::test]
async fn invisible_characters_in_user_ids_are_refused() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    // Every byte percent-encoded: what a client sends for such an id in a URL.
    let enc = |s: &str| s.bytes().map(|b| format!("%{b:02X}")).collect::<String>();
    for user in [
        "a\u{200b}b",
        "\u{feff}ab",
        "a\u{202e}b",
        "a\u{fe0f}b",
        "a\u{180e}b",
        "a\u{e0100}b",
        "a\u{e0041}b",
        "a\u{3164}b",
    ] {
        let body = json!({"user": user, "entrypoint": "x"});
        assert_error(
            app.post("/v1/jobs", SUBMITTER, body).await,
            422,
            "invalid_field",
            Some("user"),
        )
        .await;
        let path = format!("/v1/users/{}", enc(user));
        let put = app.put(&path, ADMIN, json!({"weight": 2})).await;
        assert_error(put, 422, "invalid_field", Some("id")).await;
        for list in ["/v1/jobs", "/v1/events"] {
            let get = app
                .get(&format!("{list}?user={}", enc(user)), SUBMITTER)
                .await;
            assert_error(get, 422, "invalid_field", Some("user")).await;
        }
        let what_if = json!({"users": {user: {"weight": 2}}});
        let r = app.post("/v1/scheduler/what-if", ADMIN, what_if).await;
        assert_error(r, 422, "invalid_field", Some(&format!("users.{user}"))).await;
        let ray = json!({"entrypoint": "x", "metadata": {"fairshare.user": user}});
        let r = app.post("/api/jobs/", SUBMITTER, ray).await;
        assert_error(r, 422, "invalid_field", Some("metadata.fairshare.user")).await;
    }
    let users = app.get_json("/v1/users", ADMIN).await;
    assert_eq!(users, json!([]), "no user was made");
}

#[actix_web::test]
async fn a_weight_too_small_to_order_by_is_refused() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    for w in [json!(5e-324), json!(1e-7)] {
        assert_error(
            app.put("/v1/users/w", ADMIN, json!({"weight": w})).await,
            422,
            "invalid_field",
            Some("weight"),
        )
        .await;
    }
    assert_eq!(
        app.put("/v1/users/w", ADMIN, json!({"weight": 1e-6}))
            .await
            .status(),
        200
    );
}

#[actix_web::test]
async fn pausing_an_unknown_user_is_404_and_creates_nobody() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    assert_error(
        app.post("/v1/users/typo/pause", ADMIN, json!({})).await,
        404,
        "not_found",
        None,
    )
    .await;
    assert_error(
        app.post("/v1/users/typo/resume", ADMIN, json!({})).await,
        404,
        "not_found",
        None,
    )
    .await;
    assert_error(
        app.get("/v1/users/typo", SUBMITTER).await,
        404,
        "not_found",
        None,
    )
    .await;
}

#[actix_web::test]
async fn a_cursor_that_names_no_job_is_not_found() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    app.submit("a", json!({})).await;
    let path = format!("/v1/jobs?after={}", uuid::Uuid::new_v4());
    // 404 rather than 422: the cursor is well formed (the document's `uuid`), it
    // names nothing, as a path id that names no job (schemathesis finding).
    assert_error(app.get(&path, SUBMITTER).await, 404, "not_found", None).await;
}

#[actix_web::test]
async fn a_declared_oversized_body_gets_413_without_waiting_for_it() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let addr = app.address.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {SUBMITTER}\r\n\
         Content-Type: application/json\r\nContent-Length: 99999999999\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
        .await
        .expect("an answer without sending the body")
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(head.contains("payload_too_large"), "{head}");
}

/// A broken chunked encoding is 400 `bad_body`. A body that stops half-way is answered 408 once no bytes arrived for
/// `server.body_idle_timeout` and the connection is closed; one that keeps coming in
/// slowly is not cut off (tester finding: such a request was never answered).
#[actix_web::test]
async fn a_stalled_body_gets_408_and_the_connection_is_closed() {
    let Some(app) = crate::helpers::spawn_app_with(Db::Sqlite, |s| {
        s.server.body_idle_timeout = Duration::from_millis(500);
    })
    .await
    else {
        return;
    };
    let head = |len: &str| {
        format!(
            "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {SUBMITTER}\r\n\
             Content-Type: application/json\r\n{len}\r\n"
        )
    };
    for framing in ["Content-Length: 100\r\n", "Transfer-Encoding: chunked\r\n"] {
        let partial = if framing.starts_with("Content") {
            r#"{"user": "slow""#.to_string()
        } else {
            "f\r\n{\"user\": \"slow\"\r\n".to_string()
        };
        let answer = exchange(&app, format!("{}{partial}", head(framing)).as_bytes()).await;
        assert!(
            answer.starts_with("HTTP/1.1 408"),
            "{framing}: {answer:.300}"
        );
        assert!(answer.contains("request_timeout"), "{answer:.300}");
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer:.300}"
        );
    }

    // A broken chunked encoding (a chunk size that is not hex) is 400 `bad_body`, not
    // "not valid JSON" (a fresh tester's finding).
    let answer = exchange(
        &app,
        format!(
            "{}zz\r\n{{}}\r\n0\r\n\r\n",
            head("Transfer-Encoding: chunked\r\n")
        )
        .as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:.300}");
    assert!(answer.contains("bad_body"), "{answer:.300}");

    // A body that arrives in pieces, each within the idle timeout, is read whole.
    let addr = app.address.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = r#"{"user": "slow", "entrypoint": "echo slow but steady"}"#;
    let request = head(&format!("Content-Length: {}\r\n", body.len()));
    stream.write_all(request.as_bytes()).await.unwrap();
    for piece in body.as_bytes().chunks(body.len() / 3 + 1) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        stream.write_all(piece).await.unwrap();
    }
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
        .await
        .expect("an answer")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer:.300}");
}

#[actix_web::test]
async fn a_queued_job_behind_others_says_how_many() {
    let Some(app) = spawn_app_with(Db::Sqlite, |s| s.scheduler.queue_window = 1).await else {
        return;
    };
    app.submit("q", json!({})).await;
    let second = app.submit("q", json!({})).await;
    let third = app.submit("q", json!({})).await;
    let get = |id: &serde_json::Value| format!("/v1/jobs/{}", id["id"].as_str().unwrap());
    let second: serde_json::Value = app
        .get(&get(&second), SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    let third: serde_json::Value = app.get(&get(&third), SUBMITTER).await.json().await.unwrap();
    assert_eq!(
        second["pending_reason"],
        "waiting behind 1 earlier job in this user's queue"
    );
    assert_eq!(
        third["pending_reason"],
        "waiting behind 2 earlier jobs in this user's queue"
    );
}

/// The `method` label values of the HTTP histogram in a `/metrics` text.
fn http_label_values(text: &str, label: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| l.starts_with("fairshare_http_request_duration_seconds_count{"))
        .filter_map(|l| {
            let start = l.find(&format!("{label}=\""))? + label.len() + 2;
            let end = start + l[start..].find('"')?;
            Some(l[start..end].to_string())
        })
        .collect()
}

#[actix_web::test]
async fn invented_methods_and_paths_do_not_grow_metrics() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    for i in 0..40 {
        let m = reqwest::Method::from_bytes(format!("INVENTED{i}").as_bytes()).unwrap();
        let r = app
            .client
            .request(m, app.url(&format!("/v1/jobs/made-up-{i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405);
        let r = app
            .client
            .get(app.url(&format!("/no/such/path/{i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
    }
    let text = app.metrics().await;
    assert!(
        !text.contains("INVENTED"),
        "a client-chosen method became a label"
    );
    assert!(!text.contains("made-up"), "a raw path became a label");
    assert!(!text.contains("/no/such"), "a raw path became a label");
    let methods = http_label_values(&text, "method");
    assert!(methods.contains("other"), "{methods:?}");
    let known = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "other",
    ];
    assert!(
        methods.iter().all(|m| known.contains(&m.as_str())),
        "{methods:?}"
    );
    let routes = http_label_values(&text, "route");
    assert!(routes.contains("/v1/jobs/{id}"), "{routes:?}");
    assert!(routes.contains("unmatched"), "{routes:?}");
    assert!(
        routes.iter().all(|r| r == "unmatched"
            || (fairshare::ROUTES.iter())
                .chain(fairshare::RAY_API_ROUTES)
                .any(|(_, p)| p == r)),
        "{routes:?}"
    );
}

async fn whole_numbers_with_a_decimal_point_are_accepted_as_integers(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let job = app
        .submit(
            "dec",
            json!({"max_runtime_s": 600.0, "priority": 1000.0, "resources": {"cpu": 1, "memory_bytes": 1024.0}}),
        )
        .await;
    assert_eq!(job["max_runtime_s"], 600);
    assert_eq!(job["priority"], 1000);
    assert_eq!(job["resources"]["memory_bytes"], 1024);
    let cases = [
        (json!({"max_runtime_s": 600.5}), "max_runtime_s"),
        (json!({"priority": 1.5}), "priority"),
        (json!({"priority": 1e30}), "priority"),
        (json!({"priority": "1"}), "priority"),
        (
            json!({"resources": {"memory_bytes": 1024.25}}),
            "resources.memory_bytes",
        ),
        (
            json!({"resources": {"memory_bytes": -1.0}}),
            "resources.memory_bytes",
        ),
    ];
    for (extra, field) in cases {
        let mut body = json!({"user": "dec", "entrypoint": "x"});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        assert_error(
            app.post("/v1/jobs", SUBMITTER, body).await,
            422,
            "invalid_field",
            Some(field),
        )
        .await;
    }
    let r = app
        .put(
            "/v1/users/dec",
            ADMIN,
            json!({"max_running_jobs": 3.0, "max_queued_jobs": 10.0, "max_resources": {"memory_bytes": 1e9}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let u: serde_json::Value = r.json().await.unwrap();
    assert_eq!(u["max_running_jobs"], 3);
    assert_eq!(u["max_queued_jobs"], 10);
    assert_eq!(u["max_resources"]["memory_bytes"], 1_000_000_000u64);
    for (body, field) in [
        (json!({"max_running_jobs": 2.5}), "max_running_jobs"),
        (json!({"max_queued_jobs": 0.1}), "max_queued_jobs"),
        (
            json!({"max_resources": {"memory_bytes": 0.5}}),
            "max_resources.memory_bytes",
        ),
    ] {
        assert_error(
            app.put("/v1/users/dec", ADMIN, body).await,
            422,
            "invalid_field",
            Some(field),
        )
        .await;
    }
    // null still clears a limit.
    let r = app
        .put("/v1/users/dec", ADMIN, json!({"max_running_jobs": null}))
        .await;
    assert_eq!(r.status(), 200);
    let u: serde_json::Value = r.json().await.unwrap();
    assert_eq!(u["max_running_jobs"], serde_json::Value::Null);
}
both_databases!(whole_numbers_with_a_decimal_point_are_accepted_as_integers);

/// A method a route does not take is 405 with an `Allow` header listing those it
/// does; `HEAD` is taken wherever `GET` is (a fresh tester found `HEAD /v1/usage` 405):
/// on every `GET` route of `/v1` and of Ray's API the same status and `Content-Length`
/// as `GET`, and no body.
#[actix_web::test]
async fn wrong_methods_get_405_with_an_allow_header_and_head_is_get_without_the_body() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let cases = [
        (reqwest::Method::DELETE, "/v1/jobs", "GET, HEAD, POST"),
        (reqwest::Method::PATCH, "/v1/users/x", "GET, HEAD, PUT"),
        (reqwest::Method::GET, "/v1/users/x/pause", "POST"),
        (reqwest::Method::HEAD, "/v1/users/x/pause", "POST"),
        (reqwest::Method::POST, "/healthz", "GET, HEAD"),
        (reqwest::Method::PUT, "/readyz", "GET, HEAD"),
        (reqwest::Method::DELETE, "/metrics", "GET, HEAD"),
        (reqwest::Method::POST, "/api/version", "GET, HEAD"),
    ];
    for (m, path, allow) in cases {
        let r = app
            .client
            .request(m.clone(), app.url(path))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{m} {path}");
        assert_eq!(
            r.headers().get("allow").and_then(|v| v.to_str().ok()),
            Some(allow),
            "{m} {path}"
        );
    }
    let job = app.submit("headed", json!({})).await;
    let id = job["id"].as_str().unwrap().to_string();
    let gets = (fairshare::ROUTES.iter())
        .chain(fairshare::RAY_API_ROUTES)
        .filter(|(m, _)| *m == "get")
        // A WebSocket upgrade and an endless stream: no length to compare.
        .filter(|(_, p)| !p.ends_with("/logs/tail") && *p != "/v1/events");
    for (_, pattern) in gets {
        let path = pattern
            .replace("{id}", &id)
            .replace("{path}", "g")
            .replace("{protocol}", "gcs")
            .replace("{name}", "_ray_pkg_0123456789abcdef.zip");
        let get = app
            .client
            .get(app.url(&path))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        let head = app
            .client
            .head(app.url(&path))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(head.status(), get.status(), "HEAD {path}");
        let length = |r: &reqwest::Response| r.headers().get("content-length").cloned();
        if path != "/metrics" && path != "/v1/users" && path != "/v1/scheduler" {
            // (Those change between the two requests: counters, shares.)
            assert_eq!(length(&head), length(&get), "HEAD {path}");
        }
        assert_eq!(
            head.bytes().await.unwrap().len(),
            0,
            "HEAD {path} has no body"
        );
    }
}

#[actix_web::test]
async fn malformed_client_headers_are_logged_below_error() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let addr = app.address.trim_start_matches("http://").to_string();
    let requests: [&[u8]; 3] = [
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header: v\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \x01\r\n\r\n",
    ];
    for raw in requests {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        stream.write_all(raw).await.unwrap();
        let mut buf = vec![0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        let head = String::from_utf8_lossy(&buf[..n]);
        assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    }
    // Each one is logged as the client's fault, at debug; none at ERROR.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let captured = crate::helpers::CAPTURED.lock().unwrap().clone();
        let errors: Vec<_> = captured
            .iter()
            .filter(|(level, _, _)| *level == tracing::Level::ERROR)
            .collect();
        assert!(
            errors.is_empty(),
            "client faults logged at ERROR: {errors:?}"
        );
        let faults = captured
            .iter()
            .filter(|(level, target, text)| {
                *level == tracing::Level::DEBUG
                    && target == fairshare::telemetry::CLIENT_FAULT_TARGET
                    && text.contains("request parse error")
            })
            .count();
        if faults >= requests.len() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "expected {} client faults at debug: {captured:?}",
            requests.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends `raw` on a new connection and returns everything the server answers until it
/// closes the connection or goes quiet for a second.
async fn exchange(app: &crate::helpers::TestApp, raw: &[u8]) -> String {
    let addr = app.address.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may answer (and close) before it has read everything.
    let _ = stream.write_all(raw).await;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await
    {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).to_string()
}

#[actix_web::test]
async fn a_request_line_of_64_kib_or_more_gets_414_with_a_json_body() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let line = |len: usize| {
        // "GET /" + path + " HTTP/1.1" is `len` bytes.
        let path = "a".repeat(len - "GET / HTTP/1.1".len());
        format!("GET /{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    };
    for len in [65_536, 70_000, 200_000] {
        let answer = exchange(&app, line(len).as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 414"), "{len}: {answer:.200}");
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let body: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
        assert_eq!(body["error"]["code"], "uri_too_long");
    }
    // One byte under the limit is an ordinary request (no such route here).
    let answer = exchange(&app, line(65_535).as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer:.200}");

    // On a kept-alive connection, after a request whose body has long lines, the next
    // request line is still found and held to the limit.
    let body = format!(
        r#"{{"user": "ll", "entrypoint": "echo {}"}}"#,
        "x".repeat(65_000)
    );
    let mut raw = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {SUBMITTER}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    raw.push_str("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    raw.push_str(&line(100_000));
    let answer = exchange(&app, raw.as_bytes()).await;
    let statuses: Vec<&str> = answer
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| &answer[i + 9..i + 12])
        .collect();
    assert_eq!(statuses, vec!["201", "200", "414"], "{answer:.300}");
}

/// An idle keep-alive connection stays open for `server.keep_alive` and is closed
/// after it; by default longer than the client pools that reuse idle connections keep
/// them (reqwest, hyper, Go: 90 s). actix-web's 5 s default closed connections a busy
/// client still held in its pool: its next POST on one met "connection reset by peer"
/// (issue 43 §8, `intake::large_submissions_at_once_are_batched_by_bytes` under load).
#[actix_web::test]
async fn an_idle_connection_is_kept_for_server_keep_alive_longer_than_client_pools() {
    assert!(
        fairshare::config::Settings::defaults().server.keep_alive > Duration::from_secs(90),
        "server.keep_alive must outlast a client pool's 90 s"
    );
    // actix-http counts the keep-alive from a clock it updates every 500 ms: margins
    // of a second and more.
    let keep = Duration::from_secs(3);
    let Some(app) = spawn_app_with(Db::Sqlite, |s| s.server.keep_alive = keep).await else {
        return;
    };
    let addr = app.address.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    let answered = std::time::Instant::now();
    // Open while idle for less than the keep-alive ...
    let early = tokio::time::timeout(keep / 3, stream.read(&mut buf)).await;
    assert!(early.is_err(), "closed before server.keep_alive: {early:?}");
    // ... then closed (end of stream), not left open.
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
        .await
        .expect("the idle connection is closed after server.keep_alive")
        .unwrap_or(0);
    assert_eq!(n, 0, "no more bytes, only the end of the stream");
    assert!(answered.elapsed() >= keep / 2, "{:?}", answered.elapsed());
}

/// Every JSON body error says, in the API's words, which field and what it must be
/// (issue 43 §8): no Rust type (`expected f64`), the range of a whole number (not
/// "out of range for this field"), the field that holds a value nested too deep (not
/// its top-level field). Each case is a 4xx naming its field.
async fn body_errors_name_the_field_and_what_it_must_be_in_plain_words(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let job = |extra: &str| format!(r#"{{"user": "plain", "entrypoint": "x", {extra}}}"#);
    // (route, body, field, words the message must hold)
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "/v1/jobs",
            job(r#""resources": {"cpu": "two"}"#),
            "resources.cpu",
            r#"must be a number, not the string "two""#,
        ),
        (
            "/v1/jobs",
            job(r#""resources": {"gpu": true}"#),
            "resources.gpu",
            "must be a number, not true",
        ),
        (
            "/v1/jobs",
            job(r#""resources": {"memory_bytes": -5}"#),
            "resources.memory_bytes",
            "must be a whole number from 0 to 9007199254740992, not -5",
        ),
        (
            "/v1/jobs",
            job(r#""resources": {"memory_bytes": "5"}"#),
            "resources.memory_bytes",
            "must be a whole number",
        ),
        (
            "/v1/jobs",
            job(r#""resources": {"custom": {"QPU": "one"}}"#),
            "resources.custom.QPU",
            r#"must be a number, not the string "one""#,
        ),
        (
            "/v1/jobs",
            job(&format!(
                r#""resources": {{"custom": {{"QPU": {}}}}}"#,
                deep(200)
            )),
            "resources.custom.QPU",
            "nested deeper than 127 levels",
        ),
        (
            "/v1/jobs",
            job(r#""resources": [1, 0]"#),
            "resources",
            "must be a JSON object, not a list",
        ),
        (
            "/v1/jobs",
            job(r#""priority": "high""#),
            "priority",
            r#"must be a whole number"#,
        ),
        (
            "/v1/jobs",
            job(r#""priority": 1e12"#),
            "priority",
            "must be a whole number from -1000 to 1000, not 1000000000000",
        ),
        (
            "/v1/jobs",
            job(r#""preemptible": "yes""#),
            "preemptible",
            r#"must be true or false, not the string "yes""#,
        ),
        (
            "/v1/jobs",
            job(r#""metadata": {"k": 5}"#),
            "metadata.k",
            "must be a string, not 5",
        ),
        (
            "/v1/jobs",
            r#"{"user": 5, "entrypoint": "x"}"#.to_string(),
            "user",
            "must be a string, not 5",
        ),
        (
            "/v1/jobs",
            job(r#""max_runtime_s": -1"#),
            "max_runtime_s",
            "must be a whole number from 1 to 31536000, not -1",
        ),
        (
            "/v1/jobs",
            job(r#""max_runtime_s": "1h""#),
            "max_runtime_s",
            r#"must be a whole number from 1 to 31536000, not the string "1h""#,
        ),
        (
            "/v1/jobs",
            job(r#""max_runtime_s": 600.5"#),
            "max_runtime_s",
            "must be a whole number",
        ),
        (
            "/v1/scheduler/what-if",
            r#"{"limit": -3}"#.to_string(),
            "limit",
            "must be a whole number from 1 to 1000, not -3",
        ),
        (
            "/v1/scheduler/what-if",
            r#"{"users": {"plain": {"paused": "no"}}}"#.to_string(),
            "users.plain.paused",
            "must be true or false",
        ),
    ];
    let rust = regex_lite_words();
    for (route, body, field, words) in cases {
        let resp = app.post_raw(route, ADMIN, body.clone()).await;
        let status = resp.status().as_u16();
        let answer: serde_json::Value = resp.json().await.unwrap();
        assert!(
            (400..500).contains(&status),
            "{body:.120}: {status} {answer}"
        );
        assert_eq!(
            answer["error"]["details"]["field"], field,
            "{body:.120}: {answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{body:.120}: {message}");
        for w in &rust {
            assert!(
                !message
                    .split(|c: char| !c.is_alphanumeric())
                    .any(|t| t == *w),
                "{body:.120}: names the Rust type {w}: {message}"
            );
        }
    }
    // A PUT body too (users): a mistyped field in plain words.
    let resp = app
        .put("/v1/users/plain", ADMIN, json!({"weight": "heavy"}))
        .await;
    let answer: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["field"], "weight", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("must be a number"), "{message}");
}
both_databases!(body_errors_name_the_field_and_what_it_must_be_in_plain_words);

/// Rust type names no error message may hold.
fn regex_lite_words() -> Vec<&'static str> {
    vec![
        "f32", "f64", "i8", "i16", "i32", "i64", "i128", "u8", "u16", "u32", "u64", "u128",
        "usize", "isize", "struct", "Option", "BTreeMap", "HashMap", "Vec", "String", "sequence",
        "unit",
    ]
}

/// `GET /` is no bare 404: a browser is sent to the console, and the body says where
/// the console and the API's description are (issue 43 §8).
#[actix_web::test]
async fn the_root_points_to_the_console_and_the_api() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let resp = client.get(app.url("/")).send().await.unwrap();
    assert_eq!(resp.status(), 302);
    assert_eq!(resp.headers()["location"], "/ui/");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["console"], "/ui/", "{body}");
    assert_eq!(body["openapi"], "/openapi.json", "{body}");
    // Followed, it is the console's page.
    let page = app.client.get(app.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("<html"));
    let head = client.head(app.url("/")).send().await.unwrap();
    assert_eq!(head.status(), 302);
}
