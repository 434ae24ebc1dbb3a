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

#[actix_web::test]
async fn invisible_characters_in_user_ids_are_refused() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    for user in ["a\u{200b}b", "\u{feff}ab", "a\u{202e}b"] {
        let body = json!({"user": user, "entrypoint": "x"});
        assert_error(
            app.post("/v1/jobs", SUBMITTER, body).await,
            422,
            "invalid_field",
            Some("user"),
        )
        .await;
    }
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
async fn a_cursor_that_names_no_job_is_refused() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    app.submit("a", json!({})).await;
    let path = format!("/v1/jobs?after={}", uuid::Uuid::new_v4());
    assert_error(
        app.get(&path, SUBMITTER).await,
        422,
        "invalid_field",
        Some("after"),
    )
    .await;
}

#[actix_web::test]
async fn a_declared_oversized_body_gets_413_without_waiting_for_it() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let addr = app.address.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {SUBMITTER}\r\n\
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
