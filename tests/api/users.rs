//! `/v1/users`: settings, pause/resume, auth roles.

use serde_json::json;

use crate::both_databases;
use crate::helpers::{assert_error, spawn_app, Db, ADMIN, SUBMITTER};

async fn admins_create_and_change_users(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let resp = app
        .put(
            "/v1/users/carol",
            ADMIN,
            json!({"weight": 2.5, "max_running_jobs": 3, "max_resources": {"cpu": 8, "gpu": 1}}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let u: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(u["weight"], 2.5);
    assert_eq!(u["effective_max_running_jobs"], 3);
    assert_eq!(u["max_resources"], json!({"cpu": 8.0, "gpu": 1.0}));
    // Absent fields stay; null clears back to the default.
    let u: serde_json::Value = app
        .put("/v1/users/carol", ADMIN, json!({"max_running_jobs": null}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(u["weight"], 2.5);
    assert_eq!(u["max_running_jobs"], serde_json::Value::Null);
    assert_eq!(u["effective_max_running_jobs"], 100);
    let list: serde_json::Value = app.get("/v1/users", SUBMITTER).await.json().await.unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    let got: serde_json::Value = app
        .get("/v1/users/carol", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["weight"], 2.5);
    assert_error(
        app.get("/v1/users/nobody", SUBMITTER).await,
        404,
        "not_found",
        None,
    )
    .await;
}
both_databases!(admins_create_and_change_users);

/// A fresh tester: `{"weight": null}` answered 200 and changed nothing. Like a limit,
/// null puts the weight back to its default, 1; the live key follows; what-if
/// previews the same.
async fn a_null_weight_is_the_default_weight(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    app.submit("dora", json!({})).await;
    let u = app
        .put("/v1/users/dora", ADMIN, json!({"weight": 4}))
        .await
        .json::<serde_json::Value>()
        .await
        .unwrap();
    assert_eq!(u["weight"], 4.0);
    let preview: serde_json::Value = app
        .post(
            "/v1/scheduler/what-if",
            ADMIN,
            json!({"users": {"dora": {"weight": null}}}),
        )
        .await
        .json()
        .await
        .unwrap();
    let dora = preview["users"]
        .as_array()
        .and_then(|us| us.iter().find(|u| u["user"] == "dora"))
        .unwrap_or_else(|| panic!("no dora in {preview}"));
    assert_eq!(dora["before"]["weight"], 4.0, "{preview}");
    assert_eq!(dora["after"]["weight"], 1.0, "{preview}");
    let resp = app
        .put("/v1/users/dora", ADMIN, json!({"weight": null}))
        .await;
    assert_eq!(resp.status(), 200);
    let u: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(u["weight"], 1.0, "{u}");
    let got = app.get_json("/v1/users/dora", SUBMITTER).await;
    assert_eq!(got["weight"], 1.0, "{got}");
    // Absent still means "as it is".
    app.put("/v1/users/dora", ADMIN, json!({"weight": 3})).await;
    let u: serde_json::Value = app
        .put("/v1/users/dora", ADMIN, json!({"max_queued_jobs": 5}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(u["weight"], 3.0, "{u}");
}
both_databases!(a_null_weight_is_the_default_weight);

#[actix_web::test]
async fn bad_user_settings_get_422_naming_the_field() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let cases = [
        (json!({"weight": 0}), "weight"),
        (json!({"weight": -1}), "weight"),
        (json!({"weight": 1e7}), "weight"),
        (json!({"weight": "heavy"}), "weight"),
        (json!({"max_running_jobs": 0}), "max_running_jobs"),
        (json!({"max_running_jobs": 2.5}), "max_running_jobs"),
        (json!({"max_queued_jobs": -1}), "max_queued_jobs"),
        (json!({"max_resources": {"cpu": -1}}), "max_resources.cpu"),
        (json!({"max_resources": {"tpu": 1}}), "max_resources.tpu"),
        (json!({"paused": true}), "paused"),
    ];
    for (body, field) in cases {
        assert_error(
            app.put("/v1/users/dave", ADMIN, body).await,
            422,
            "invalid_field",
            Some(field),
        )
        .await;
    }
    assert_error(
        app.put("/v1/users/has%20space", ADMIN, json!({})).await,
        422,
        "invalid_field",
        Some("id"),
    )
    .await;
    assert_error(
        app.post_raw("/v1/users/dave/pause", ADMIN, "{").await,
        400,
        "bad_json",
        None,
    )
    .await;
    assert_error(
        app.post("/v1/users/dave/pause", ADMIN, json!({"now": true}))
            .await,
        422,
        "invalid_field",
        Some("now"),
    )
    .await;
    // None of that created the user.
    assert_error(
        app.get("/v1/users/dave", SUBMITTER).await,
        404,
        "not_found",
        None,
    )
    .await;
}

async fn pause_and_resume_take_no_body_or_an_empty_object(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    app.submit("erin", json!({})).await;
    let resp = app
        .client
        .post(app.url("/v1/users/erin/pause"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let u: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(u["paused"], true);
    assert_eq!(u["queued"], 1, "queued jobs stay");
    let u: serde_json::Value = app
        .post("/v1/users/erin/resume", ADMIN, json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(u["paused"], false);
}
both_databases!(pause_and_resume_take_no_body_or_an_empty_object);

#[actix_web::test]
async fn tokens_and_roles_are_enforced() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    // No token, a wrong token, a wrong scheme: 401.
    let resp = app.client.get(app.url("/v1/jobs")).send().await.unwrap();
    assert_eq!(
        resp.headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap()),
        Some("Bearer")
    );
    assert_error(resp, 401, "unauthorized", None).await;
    assert_error(
        app.get("/v1/jobs", "wrong-token").await,
        401,
        "unauthorized",
        None,
    )
    .await;
    let resp = app
        .client
        .get(app.url("/v1/jobs"))
        .header("authorization", format!("Basic {SUBMITTER}"))
        .send()
        .await
        .unwrap();
    assert_error(resp, 401, "unauthorized", None).await;
    // A submitter may not change users: 403.
    assert_error(
        app.put("/v1/users/x", SUBMITTER, json!({"weight": 2}))
            .await,
        403,
        "forbidden",
        None,
    )
    .await;
    assert_error(
        app.post("/v1/users/x/pause", SUBMITTER, json!({})).await,
        403,
        "forbidden",
        None,
    )
    .await;
    assert_error(
        app.post("/v1/users/x/resume", SUBMITTER, json!({})).await,
        403,
        "forbidden",
        None,
    )
    .await;
    // An admin can do everything a submitter can.
    assert_eq!(
        app.post("/v1/jobs", ADMIN, json!({"user": "x", "entrypoint": "e"}))
            .await
            .status(),
        201
    );
    assert_eq!(app.get("/v1/scheduler", SUBMITTER).await.status(), 200);
    // Health, metrics and the API document are open.
    for open in ["/healthz", "/metrics", "/openapi.json"] {
        let status = app.client.get(app.url(open)).send().await.unwrap().status();
        assert_eq!(status, 200, "{open}");
    }
}

/// `.` and `..` cannot be addressed in a URL path (`/v1/users/../pause` is normalised
/// away by browsers and HTTP clients), so they are refused as user ids everywhere.
async fn dot_and_dot_dot_are_not_user_ids(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    for user in [".", ".."] {
        assert_error(
            app.post(
                "/v1/jobs",
                SUBMITTER,
                json!({"user": user, "entrypoint": "echo 1"}),
            )
            .await,
            422,
            "invalid_field",
            Some("user"),
        )
        .await;
        let filter = if user == "." { "%2E" } else { "%2E%2E" };
        assert_error(
            app.get(&format!("/v1/jobs?user={filter}"), SUBMITTER).await,
            422,
            "invalid_field",
            Some("user"),
        )
        .await;
    }
    // Dots inside a longer id are fine.
    let resp = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "...", "entrypoint": "echo 1"}),
        )
        .await;
    assert_eq!(resp.status(), 201);
    let resp = app.put("/v1/users/a..b", ADMIN, json!({"weight": 2})).await;
    assert_eq!(resp.status(), 200);
    // Nothing was created under `.` or `..`.
    let users: serde_json::Value = app.get("/v1/users", SUBMITTER).await.json().await.unwrap();
    let ids: Vec<&str> = users
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["id"].as_str().unwrap())
        .collect();
    assert!(!ids.contains(&".") && !ids.contains(&".."), "{ids:?}");
}
both_databases!(dot_and_dot_dot_are_not_user_ids);

/// `store::save_usages` (the arbiter's tick) writes every user's usage and its time in
/// statements of many users: exact values, chunks past one statement's worth, a user
/// without a row skipped, the others untouched.
async fn usage_of_many_users_is_saved_in_few_statements(which: Db) {
    use fairshare::store;
    let Some(db) = crate::helpers::TestDb::new(which).await else {
        return;
    };
    let conn = sea_orm::Database::connect(&db.url).await.unwrap();
    store::migrate(&conn).await.unwrap();
    let n = store::USAGE_ROWS_PER_STATEMENT + 7;
    for i in 0..n + 1 {
        store::submit_job(
            &conn,
            crate::helpers::new_job(&format!("u{i:04}"), None),
            10,
        )
        .await
        .unwrap();
    }
    let at = chrono::DateTime::from_timestamp_micros(1_764_000_000_123_456).unwrap();
    let mut rows: Vec<(String, f64, chrono::DateTime<chrono::Utc>)> = (0..n)
        .map(|i| (format!("u{i:04}"), 0.5 + i as f64, at))
        .collect();
    rows.push(("nobody".into(), 9.0, at));
    store::save_usages(&conn, &rows).await.unwrap();
    for (i, u) in [0, 1, store::USAGE_ROWS_PER_STATEMENT, n - 1]
        .into_iter()
        .map(|i| (i, format!("u{i:04}")))
    {
        let got = store::get_user(&conn, &u).await.unwrap().unwrap();
        assert_eq!(got.usage, 0.5 + i as f64, "{u}");
        assert_eq!(got.usage_at, at, "{u}");
    }
    let untouched = store::get_user(&conn, &format!("u{n:04}"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(untouched.usage, 0.0);
    assert!(store::get_user(&conn, "nobody").await.unwrap().is_none());
    conn.close().await.ok();
}
both_databases!(usage_of_many_users_is_saved_in_few_statements);

/// Fresh tester (round 7): every queued job of a paused user says "paused", beyond the
/// arbiter's window too (they said how many jobs were ahead of them), and a paused
/// user leaves `GET /v1/scheduler`'s `next_users`, which lists the users the next
/// cycle could serve (it listed every user with queued jobs). A healthy cluster whose
/// cores another tenant holds keeps the jobs queued: with no healthy cluster nobody is
/// next (issue 43 §8).
async fn a_paused_users_jobs_all_say_so_and_it_leaves_the_next_users(db: Db) {
    let (server, _ray) = crate::fake_ray::start(2.0, |s| s.foreign_cpu = 2.0).await;
    let uri = server.uri();
    let Some(app) = crate::helpers::spawn_app_with(db, move |s| {
        s.scheduler.queue_window = 3;
        s.clusters = vec![fairshare::config::ClusterSettings {
            name: "busy".into(),
            address: uri,
            ..Default::default()
        }];
        s.monitor.poll_interval = std::time::Duration::from_millis(100);
    })
    .await
    else {
        return;
    };
    let mut ids = Vec::new();
    for _ in 0..6 {
        let job = app.submit("bob", json!({})).await;
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    app.submit("alice", json!({})).await;
    app.submit("carol", json!({})).await;
    let resp = app.post("/v1/users/bob/pause", ADMIN, json!({})).await;
    assert_eq!(resp.status(), 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let view = app.get_json("/v1/scheduler", SUBMITTER).await;
        let mut next: Vec<String> = view["next_users"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["user"].as_str().unwrap().to_string())
            .collect();
        next.sort();
        let mut reasons = Vec::new();
        for id in &ids {
            let job = app.get_json(&format!("/v1/jobs/{id}"), SUBMITTER).await;
            reasons.push(job["pending_reason"].as_str().unwrap_or("").to_string());
        }
        let all_paused = reasons.iter().all(|r| r.contains("paused"));
        if next == ["alice", "carol"] && all_paused {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "next users {next:?}, reasons {reasons:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    drop(server);
}
both_databases!(a_paused_users_jobs_all_say_so_and_it_leaves_the_next_users);
