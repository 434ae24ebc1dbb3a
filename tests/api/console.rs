//! What the browser console reads beyond the rest of `/v1` (a job's events, shares
//! over time, the token's role, jobs by external id) and the console's files at
//! `/ui/`. The page itself is tested in a real browser: `ui/tests`.

use serde_json::json;

use crate::both_databases;
use crate::helpers::{assert_error, spawn_app, Db, ADMIN, SUBMITTER};

async fn a_jobs_events_are_its_transitions_oldest_first(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let job = app.submit("alice", json!({})).await;
    let id = job["id"].as_str().unwrap();
    let resp = app
        .post(&format!("/v1/jobs/{id}/cancel"), ADMIN, json!({}))
        .await;
    assert_eq!(resp.status(), 200);
    let resp = app.get(&format!("/v1/jobs/{id}/events"), SUBMITTER).await;
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["id"], id);
    let events = body["events"].as_array().unwrap();
    assert_eq!(events.len(), 2, "{body}");
    assert_eq!(events[0]["from"], serde_json::Value::Null);
    assert_eq!(events[0]["to"], "QUEUED");
    assert_eq!(events[1]["from"], "QUEUED");
    assert_eq!(events[1]["to"], "STOPPED");
    assert!(events[1]["detail"].as_str().is_some_and(|d| !d.is_empty()));
    let at =
        |i: usize| chrono::DateTime::parse_from_rfc3339(events[i]["at"].as_str().unwrap()).unwrap();
    assert!(at(0) <= at(1));

    let unknown = uuid::Uuid::now_v7();
    assert_error(
        app.get(&format!("/v1/jobs/{unknown}/events"), SUBMITTER)
            .await,
        404,
        "not_found",
        None,
    )
    .await;
    assert_error(
        app.get("/v1/jobs/not-a-uuid/events", SUBMITTER).await,
        404,
        "not_found",
        None,
    )
    .await;
    assert_error(
        app.get(&format!("/v1/jobs/{id}/events"), "wrong-token-123")
            .await,
        401,
        "unauthorized",
        None,
    )
    .await;
}
both_databases!(a_jobs_events_are_its_transitions_oldest_first);

async fn jobs_are_found_by_external_id(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let a = app
        .submit("alice", json!({"external_id": "ticket-7"}))
        .await;
    let b = app.submit("bob", json!({"external_id": "ticket-7"})).await;
    app.submit("alice", json!({"external_id": "ticket-8"}))
        .await;
    let page: serde_json::Value = app
        .get("/v1/jobs?external_id=ticket-7", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    let mut ids: Vec<_> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].clone())
        .collect();
    ids.sort_by_key(|v| v.to_string());
    let mut want = vec![a["id"].clone(), b["id"].clone()];
    want.sort_by_key(|v| v.to_string());
    assert_eq!(ids, want);
    let page: serde_json::Value = app
        .get("/v1/jobs?external_id=ticket-7&user=bob", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(page["jobs"][0]["id"], b["id"]);
    let page: serde_json::Value = app
        .get("/v1/jobs?external_id=nothing", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["jobs"], json!([]));
}
both_databases!(jobs_are_found_by_external_id);

#[actix_web::test]
async fn whoami_names_the_role_of_the_token_and_never_refuses() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    for (token, role) in [
        (ADMIN, "admin"),
        (SUBMITTER, "submitter"),
        ("not-a-token-1", "none"),
    ] {
        let resp = app.get("/v1/whoami", token).await;
        assert_eq!(resp.status(), 200);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body, json!({"role": role}));
    }
    let resp = app.client.get(app.url("/v1/whoami")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["role"], "none");
}

#[actix_web::test]
async fn shares_over_time_answer_the_sampling_and_need_a_token() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let resp = app.get("/v1/shares", SUBMITTER).await;
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["sample_every_seconds"], 5.0);
    assert_eq!(body["history_seconds"], 3600.0);
    assert!(body["samples"].is_array(), "{body}");
    let resp = app.client.get(app.url("/v1/shares")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
}

#[actix_web::test]
async fn the_console_is_served_from_the_binary_under_a_strict_policy() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let resp = no_redirects.get(app.url("/ui")).send().await.unwrap();
    assert_eq!(resp.status(), 308);
    assert_eq!(resp.headers()["location"], "/ui/");
    for (path, kind) in [
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/style.css", "text/css"),
        ("/ui/favicon.svg", "image/svg+xml"),
    ] {
        // The files are open: they hold no data; the page asks /v1 with a token.
        let resp = app.client.get(app.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let h = resp.headers();
        assert!(
            h["content-type"].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'none'"), "{csp}");
        assert!(csp.contains("script-src 'self'"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert!(!resp.text().await.unwrap().is_empty());
    }
    assert_error(
        app.client
            .get(app.url("/ui/secrets.txt"))
            .send()
            .await
            .unwrap(),
        404,
        "not_found",
        None,
    )
    .await;
    let resp = app.client.post(app.url("/ui/")).send().await.unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "GET, HEAD");
}
