//! `/v1/jobs`: intake, validation, idempotency, paging, cancel, limits, concurrency,
//! restart.

use serde_json::json;

use crate::both_databases;
use crate::helpers::{
    assert_error, spawn_app, spawn_app_with, start_on, test_settings, Db, ADMIN, SUBMITTER,
};

async fn a_valid_job_is_committed_as_queued_with_defaults(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let job = app
        .submit(
            "alice",
            json!({"metadata": {"team": "q"}, "priority": 5, "resources": {"memory_bytes": 1024}}),
        )
        .await;
    assert_eq!(job["status"], "QUEUED");
    assert_eq!(job["user"], "alice");
    assert_eq!(
        job["resources"],
        json!({"cpu": 1.0, "gpu": 0.0, "memory_bytes": 1024})
    );
    assert_eq!(job["priority"], 5);
    assert_eq!(job["queue_position"], 1);
    assert!(
        job.get("runtime_env").is_none(),
        "runtime_env is never shown"
    );
    let id = job["id"].as_str().unwrap();
    let got: serde_json::Value = app
        .get(&format!("/v1/jobs/{id}"), SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["id"], job["id"]);
    assert_eq!(got["metadata"], json!({"team": "q"}));
}
both_databases!(a_valid_job_is_committed_as_queued_with_defaults);

async fn a_retry_with_the_same_external_id_returns_the_same_job(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let body = json!({"user": "alice", "entrypoint": "echo 1", "external_id": "gw-42"});
    let first = app.post("/v1/jobs", SUBMITTER, body.clone()).await;
    assert_eq!(first.status(), 201);
    let first: serde_json::Value = first.json().await.unwrap();
    let again = app.post("/v1/jobs", SUBMITTER, body).await;
    assert_eq!(again.status(), 200);
    let again: serde_json::Value = again.json().await.unwrap();
    assert_eq!(first["id"], again["id"]);
    // Another user may use the same external id.
    let other = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "bob", "entrypoint": "echo 1", "external_id": "gw-42"}),
        )
        .await;
    assert_eq!(other.status(), 201);
    let page: serde_json::Value = app
        .get("/v1/jobs?user=alice", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1);
}
both_databases!(a_retry_with_the_same_external_id_returns_the_same_job);

async fn concurrent_retries_with_one_external_id_create_one_job(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let body = json!({"user": "alice", "entrypoint": "echo 1", "external_id": "dup"});
    let reqs = (0..20).map(|_| app.post("/v1/jobs", SUBMITTER, body.clone()));
    let resps = futures_util::future::join_all(reqs).await;
    let mut ids = std::collections::BTreeSet::new();
    let mut created = 0;
    for r in resps {
        let status = r.status().as_u16();
        assert!(status == 201 || status == 200, "status {status}");
        created += usize::from(status == 201);
        let v: serde_json::Value = r.json().await.unwrap();
        ids.insert(v["id"].as_str().unwrap().to_string());
    }
    assert_eq!(created, 1);
    assert_eq!(ids.len(), 1);
}
both_databases!(concurrent_retries_with_one_external_id_create_one_job);

#[actix_web::test]
async fn invalid_fields_get_422_naming_the_field() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let long_user = "u".repeat(129);
    let cases = [
        (json!({"entrypoint": "x"}), "user"),
        (json!({"user": "a"}), "entrypoint"),
        (json!({"user": "", "entrypoint": "x"}), "user"),
        (json!({"user": long_user, "entrypoint": "x"}), "user"),
        (json!({"user": "a b", "entrypoint": "x"}), "user"),
        (json!({"user": 7, "entrypoint": "x"}), "user"),
        (json!({"user": "a", "entrypoint": "  "}), "entrypoint"),
        (
            json!({"user": "a", "entrypoint": "x", "resources": {"cpu": -1}}),
            "resources.cpu",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "resources": {"cpu": 0, "gpu": 0}}),
            "resources.cpu",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "resources": {"gpu": -0.5}}),
            "resources.gpu",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "resources": {"cpu": "1"}}),
            "resources.cpu",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "resources": {"memory_bytes": -5}}),
            "resources.memory_bytes",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "resources": {"disk": 5}}),
            "resources.disk",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "priority": 1001}),
            "priority",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "priority": 1.5}),
            "priority",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "metadata": {"k": 1}}),
            "metadata.k",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "metadata": ["x"]}),
            "metadata",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "runtime_env": "pip"}),
            "runtime_env",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "external_id": ""}),
            "external_id",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "max_runtime_s": 0}),
            "max_runtime_s",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "max_runtime_s": -3}),
            "max_runtime_s",
        ),
        (
            json!({"user": "a", "entrypoint": "x", "colour": "red"}),
            "colour",
        ),
    ];
    for (body, field) in cases {
        let resp = app.post("/v1/jobs", SUBMITTER, body.clone()).await;
        assert_eq!(resp.status(), 422, "{body}");
        assert_error(resp, 422, "invalid_field", Some(field)).await;
    }
    // Nothing was stored.
    let page: serde_json::Value = app.get("/v1/jobs", SUBMITTER).await.json().await.unwrap();
    assert_eq!(page["jobs"], json!([]));
}

#[actix_web::test]
async fn malformed_and_oversized_bodies_get_400_and_413() {
    let Some(app) = spawn_app_with(Db::Sqlite, |s| s.server.max_body_bytes = 1000).await else {
        return;
    };
    assert_error(
        app.post_raw("/v1/jobs", SUBMITTER, "{\"user\": ").await,
        400,
        "bad_json",
        None,
    )
    .await;
    assert_error(
        app.post_raw("/v1/jobs", SUBMITTER, "not json").await,
        400,
        "bad_json",
        None,
    )
    .await;
    assert_error(
        app.post_raw("/v1/jobs", SUBMITTER, "").await,
        400,
        "bad_json",
        None,
    )
    .await;
    assert_error(
        app.post_raw("/v1/jobs", SUBMITTER, "[1,2]").await,
        422,
        "invalid_field",
        Some("(body)"),
    )
    .await;
    let big = json!({"user": "a", "entrypoint": "x".repeat(2000)}).to_string();
    assert_error(
        app.post_raw("/v1/jobs", SUBMITTER, big).await,
        413,
        "payload_too_large",
        None,
    )
    .await;
    // A number beyond f64 is valid JSON that names a field: 422 naming it (round 4's
    // tester; it was 400 bad_json before).
    assert_error(
        app.post_raw(
            "/v1/jobs",
            SUBMITTER,
            r#"{"user":"a","entrypoint":"x","resources":{"cpu":1e999}}"#,
        )
        .await,
        422,
        "invalid_field",
        Some("resources.cpu"),
    )
    .await;
}

#[actix_web::test]
async fn unknown_jobs_and_routes_get_404_and_wrong_methods_405() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let id = uuid::Uuid::new_v4();
    assert_error(
        app.get(&format!("/v1/jobs/{id}"), SUBMITTER).await,
        404,
        "not_found",
        None,
    )
    .await;
    assert_error(
        app.get("/v1/jobs/not-a-uuid", SUBMITTER).await,
        404,
        "not_found",
        None,
    )
    .await;
    assert_error(
        app.post(&format!("/v1/jobs/{id}/cancel"), SUBMITTER, json!({}))
            .await,
        404,
        "not_found",
        None,
    )
    .await;
    assert_error(
        app.get("/v1/nothing", SUBMITTER).await,
        404,
        "not_found",
        None,
    )
    .await;
    let resp = app
        .client
        .delete(app.url("/v1/jobs"))
        .bearer_auth(SUBMITTER)
        .send()
        .await
        .unwrap();
    assert_error(resp, 405, "method_not_allowed", None).await;
}

async fn jobs_page_newest_first_with_a_cursor_and_filters(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let mut ids = Vec::new();
    for i in 0..7 {
        let user = if i % 2 == 0 { "even" } else { "odd" };
        ids.push(
            app.submit(user, json!({})).await["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let mut seen = Vec::new();
    // The first page has no `after` (an empty `after=` is 422, as every empty
    // parameter is: issue 14).
    let mut after = String::new();
    loop {
        let cursor = if after.is_empty() {
            String::new()
        } else {
            format!("&after={after}")
        };
        let page: serde_json::Value = app
            .get(&format!("/v1/jobs?limit=3{cursor}"), SUBMITTER)
            .await
            .json()
            .await
            .unwrap();
        for j in page["jobs"].as_array().unwrap() {
            seen.push(j["id"].as_str().unwrap().to_string());
        }
        match page["next_after"].as_str() {
            Some(next) => after = next.to_string(),
            None => break,
        }
    }
    ids.reverse();
    assert_eq!(seen, ids, "every job once, newest first");
    let evens: serde_json::Value = app
        .get("/v1/jobs?user=even&status=QUEUED", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(evens["jobs"].as_array().unwrap().len(), 4);
    let none: serde_json::Value = app
        .get("/v1/jobs?status=running", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(none["jobs"], json!([]));
    assert_error(
        app.get("/v1/jobs?limit=0", SUBMITTER).await,
        422,
        "invalid_field",
        Some("limit"),
    )
    .await;
    assert_error(
        app.get("/v1/jobs?limit=abc", SUBMITTER).await,
        422,
        "invalid_field",
        Some("limit"),
    )
    .await;
    assert_error(
        app.get("/v1/jobs?status=DONE", SUBMITTER).await,
        422,
        "invalid_field",
        Some("status"),
    )
    .await;
    assert_error(
        app.get("/v1/jobs?after=x", SUBMITTER).await,
        422,
        "invalid_field",
        Some("after"),
    )
    .await;
    assert_error(
        app.get("/v1/jobs?sort=x", SUBMITTER).await,
        422,
        "invalid_field",
        Some("sort"),
    )
    .await;
}
both_databases!(jobs_page_newest_first_with_a_cursor_and_filters);

async fn cancelling_a_queued_job_stops_it_at_once_with_its_events(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let job = app.submit("alice", json!({})).await;
    let second = app.submit("alice", json!({})).await;
    assert_eq!(second["queue_position"], 2);
    let id = job["id"].as_str().unwrap();
    let resp = app
        .post(&format!("/v1/jobs/{id}/cancel"), SUBMITTER, json!({}))
        .await;
    assert_eq!(resp.status(), 200);
    let stopped: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(stopped["status"], "STOPPED");
    assert!(stopped["finished_at"].is_string());
    let again = app
        .post(&format!("/v1/jobs/{id}/cancel"), SUBMITTER, json!({}))
        .await;
    assert_error(again, 409, "conflict", None).await;
    let second: serde_json::Value = app
        .get(
            &format!("/v1/jobs/{}", second["id"].as_str().unwrap()),
            SUBMITTER,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(second["queue_position"], 1, "the next job moved up");
    let events = fairshare::store::job_events(
        &connect(&app.db.url).await,
        uuid::Uuid::parse_str(id).unwrap(),
    )
    .await
    .unwrap();
    let path: Vec<_> = events
        .iter()
        .map(|e| (e.from_status, e.to_status))
        .collect();
    use entity::JobStatus::*;
    assert_eq!(path, vec![(None, Queued), (Some(Queued), Stopped)]);
}
both_databases!(cancelling_a_queued_job_stops_it_at_once_with_its_events);

pub async fn connect(url: &str) -> sea_orm::DatabaseConnection {
    let mut s = test_settings(url);
    s.database.url = url.to_string();
    fairshare::store::connect(&s.database).await.unwrap()
}

async fn a_full_queue_gets_429_until_a_job_leaves(db: Db) {
    let Some(app) = spawn_app_with(db, |s| s.scheduler.default_max_queued_jobs = 2).await else {
        return;
    };
    let first = app.submit("alice", json!({})).await;
    app.submit("alice", json!({})).await;
    let resp = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "alice", "entrypoint": "x"}),
        )
        .await;
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap()),
        Some("1")
    );
    assert_error(resp, 429, "queue_full", None).await;
    // Other users are not affected; a per-user limit overrides the default.
    app.submit("bob", json!({})).await;
    let resp = app
        .put("/v1/users/alice", ADMIN, json!({"max_queued_jobs": 3}))
        .await;
    assert_eq!(resp.status(), 200);
    app.submit("alice", json!({})).await;
    assert_error(
        app.post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "alice", "entrypoint": "x"}),
        )
        .await,
        429,
        "queue_full",
        None,
    )
    .await;
    let id = first["id"].as_str().unwrap();
    assert_eq!(
        app.post(&format!("/v1/jobs/{id}/cancel"), SUBMITTER, json!({}))
            .await
            .status(),
        200
    );
    app.submit("alice", json!({})).await;
}
both_databases!(a_full_queue_gets_429_until_a_job_leaves);

async fn two_hundred_concurrent_submissions_all_land(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let reqs = (0..200).map(|i| {
        app.post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": format!("user{}", i % 10), "entrypoint": format!("echo {i}"), "external_id": format!("c{i}")}),
        )
    });
    let resps = futures_util::future::join_all(reqs).await;
    for r in resps {
        let status = r.status().as_u16();
        let body = r.text().await.unwrap();
        assert_eq!(status, 201, "{body}");
        assert!(!body.contains("locked"), "{body}");
    }
    let conn = connect(&app.db.url).await;
    let jobs = fairshare::store::jobs_with_status(&conn, &[entity::JobStatus::Queued])
        .await
        .unwrap();
    assert_eq!(jobs.len(), 200);
    let users = fairshare::store::list_users(&conn).await.unwrap();
    assert_eq!(users.len(), 10);
}
both_databases!(two_hundred_concurrent_submissions_all_land);

async fn concurrent_submissions_of_one_user_get_each_queue_position_once(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    // Answered from the intake writer's own count (batches of whatever arrived), not a
    // COUNT(*) per request: the positions must still be 1..=100, each once.
    let reqs = (0..100).map(|i| {
        app.post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "p", "entrypoint": format!("echo {i}")}),
        )
    });
    let mut positions = Vec::new();
    for r in futures_util::future::join_all(reqs).await {
        assert_eq!(r.status(), 201);
        let v: serde_json::Value = r.json().await.unwrap();
        positions.push(v["queue_position"].as_u64().unwrap());
    }
    positions.sort_unstable();
    assert_eq!(positions, (1..=100).collect::<Vec<u64>>());
    // Three users at once, in batches that PostgreSQL's writer commits side by side
    // (database.intake_pipeline): each answer is the job's place in the queue as it
    // stands after all of them, since later submissions queue behind it.
    let reqs = (0..150).map(|i| {
        app.post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": format!("q{}", i % 3), "entrypoint": format!("echo {i}")}),
        )
    });
    let mut answered = Vec::new();
    for r in futures_util::future::join_all(reqs).await {
        assert_eq!(r.status(), 201);
        let v: serde_json::Value = r.json().await.unwrap();
        answered.push((
            v["id"].as_str().unwrap().to_string(),
            v["queue_position"].clone(),
        ));
    }
    for (id, position) in answered {
        let read: serde_json::Value = app
            .get(&format!("/v1/jobs/{id}"), SUBMITTER)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(read["queue_position"], position, "job {id}");
    }
    let urgent = app.submit("p", json!({"priority": 5})).await;
    assert_eq!(urgent["queue_position"], 1, "a higher priority goes first");
    let later = app.submit("p", json!({})).await;
    assert_eq!(later["queue_position"], 102);
    let read: serde_json::Value = app
        .get(
            &format!("/v1/jobs/{}", later["id"].as_str().unwrap()),
            SUBMITTER,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(read["queue_position"], 102, "the database agrees");
}
both_databases!(concurrent_submissions_of_one_user_get_each_queue_position_once);

async fn a_restart_keeps_jobs_users_and_queue_order(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let a = app.submit("alice", json!({"priority": 1})).await;
    let b = app.submit("alice", json!({"priority": 9})).await;
    app.put(
        "/v1/users/alice",
        ADMIN,
        json!({"weight": 3.5, "max_running_jobs": 4}),
    )
    .await;
    app.put("/v1/users/bob", ADMIN, json!({})).await;
    let paused = app.post("/v1/users/bob/pause", ADMIN, json!({})).await;
    assert_eq!(paused.status(), 200);
    let url = app.db.url.clone();
    let db_handle = app.stop().await;
    let app = start_on(db_handle, test_settings(&url)).await;
    let alice: serde_json::Value = app
        .get("/v1/users/alice", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(alice["weight"], 3.5);
    assert_eq!(alice["max_running_jobs"], 4);
    assert_eq!(alice["queued"], 2);
    let bob: serde_json::Value = app
        .get("/v1/users/bob", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(bob["paused"], true);
    let a: serde_json::Value = app
        .get(
            &format!("/v1/jobs/{}", a["id"].as_str().unwrap()),
            SUBMITTER,
        )
        .await
        .json()
        .await
        .unwrap();
    let b: serde_json::Value = app
        .get(
            &format!("/v1/jobs/{}", b["id"].as_str().unwrap()),
            SUBMITTER,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(a["status"], "QUEUED");
    assert_eq!(b["queue_position"], 1, "higher priority first");
    assert_eq!(a["queue_position"], 2);
}
both_databases!(a_restart_keeps_jobs_users_and_queue_order);

async fn the_same_external_id_with_another_payload_is_422_naming_the_existing_job(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let first = json!({"user": "g", "entrypoint": "python a.py", "resources": {"cpu": 1}, "external_id": "k-1"});
    let created = app.post("/v1/jobs", SUBMITTER, first.clone()).await;
    assert_eq!(created.status(), 201);
    let created: serde_json::Value = created.json().await.unwrap();
    let id = created["id"].as_str().unwrap();

    // The issue's input: another entrypoint and cpu under the same key.
    let other = json!({"user": "g", "entrypoint": "python b.py", "resources": {"cpu": 2}, "external_id": "k-1"});
    let resp = app.post("/v1/jobs", SUBMITTER, other).await;
    assert_eq!(resp.status(), 422);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "idempotency_key_reused", "{body}");
    assert_eq!(body["error"]["details"]["job_id"], id, "{body}");
    assert_eq!(body["error"]["details"]["field"], "external_id", "{body}");
    assert_eq!(
        body["error"]["details"]["differs"],
        json!(["entrypoint", "resources.cpu"]),
        "{body}"
    );

    // Each field of the payload on its own makes a conflict.
    let changes = [
        ("runtime_env", json!({"env_vars": {"A": "1"}})),
        ("resources", json!({"gpu": 1})),
        ("resources", json!({"memory_bytes": 1})),
        ("priority", json!(1)),
        ("metadata", json!({"team": "x"})),
        ("max_runtime_s", json!(60)),
    ];
    for (key, value) in changes {
        let mut body = first.clone();
        if key == "resources" {
            let mut r = json!({"cpu": 1});
            for (k, v) in value.as_object().unwrap() {
                r[k] = v.clone();
            }
            body["resources"] = r;
        } else {
            body[key] = value;
        }
        let resp = app.post("/v1/jobs", SUBMITTER, body.clone()).await;
        assert_eq!(resp.status(), 422, "{body}");
        let err: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(err["error"]["code"], "idempotency_key_reused", "{body}");
        assert_eq!(err["error"]["details"]["job_id"], id);
    }

    // An identical retry, and one that spells the defaults out, is the same payload.
    for same in [
        first.clone(),
        json!({"user": "g", "entrypoint": "python a.py", "external_id": "k-1",
               "resources": {"cpu": 1.0, "gpu": 0, "memory_bytes": 0}, "priority": 0,
               "metadata": {}, "runtime_env": {}}),
    ] {
        let resp = app.post("/v1/jobs", SUBMITTER, same).await;
        assert_eq!(resp.status(), 200);
        let again: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(again["id"], id);
    }
    // Nothing but the first job was created.
    let page: serde_json::Value = app
        .get("/v1/jobs?user=g", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1, "{page}");
}
both_databases!(the_same_external_id_with_another_payload_is_422_naming_the_existing_job);

fn new_job(entrypoint: &str, cpu: f64) -> fairshare::store::NewJob {
    fairshare::store::NewJob {
        user: "race".into(),
        external_id: Some("k-race".into()),
        priority: 0,
        entrypoint: entrypoint.into(),
        runtime_env: None,
        runtime_env_digest: None,
        runtime_env_digests: Vec::new(),
        metadata: None,
        cpu,
        gpu: 0.0,
        memory_bytes: 0,
        custom: Default::default(),
        max_runtime_s: None,
        preemptible: None,
        pool: None,
    }
}

async fn a_request_that_loses_the_insert_race_gets_the_winner_or_a_conflict(db: Db) {
    use fairshare::store::{submit_batch, submit_job, Intake};
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let conn = connect(&app.db.url).await;
    // One batch (group commit) holding the same key three times: the first creates
    // the job, an identical repeat gets it, a different payload a conflict naming it.
    let answers = submit_batch(
        &conn,
        vec![
            new_job("python a.py", 1.0),
            new_job("python a.py", 1.0),
            new_job("python b.py", 2.0),
        ],
        100,
    )
    .await;
    let mut answers = answers.into_iter().map(Result::unwrap);
    let Some(Intake::Created(winner)) = answers.next() else {
        panic!("the first submission of the batch creates the job");
    };
    match answers.next() {
        Some(Intake::Existing(j)) => assert_eq!(j.id, winner.id),
        other => panic!("an identical repeat gets the winner, not {other:?}"),
    }
    match answers.next() {
        Some(Intake::Conflict { existing, differs }) => {
            assert_eq!(existing.id, winner.id);
            assert_eq!(differs, vec!["entrypoint", "resources.cpu"]);
        }
        other => panic!("a different payload gets a conflict, not {other:?}"),
    }
    // A later batch resolves against the stored job the same way.
    match submit_job(&conn, new_job("python a.py", 1.0), 100)
        .await
        .unwrap()
    {
        Intake::Existing(j) => assert_eq!(j.id, winner.id),
        other => panic!("a retry gets the winner, not {other:?}"),
    }

    // And over HTTP, many different payloads racing for one key: one job, the rest 422
    // naming it.
    let bodies: Vec<_> = (0..12)
        .map(|i| json!({"user": "race2", "entrypoint": format!("echo {i}"), "external_id": "k-2"}))
        .collect();
    let answers = futures_util::future::join_all(
        bodies
            .into_iter()
            .map(|b| async { app.post("/v1/jobs", SUBMITTER, b).await }),
    )
    .await;
    let mut created = Vec::new();
    let mut conflicts = Vec::new();
    for r in answers {
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.unwrap();
        match status {
            201 => created.push(body["id"].clone()),
            422 => {
                assert_eq!(body["error"]["code"], "idempotency_key_reused", "{body}");
                conflicts.push(body["error"]["details"]["job_id"].clone());
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(created.len(), 1, "exactly one request creates the job");
    assert_eq!(conflicts.len(), 11);
    assert!(conflicts.iter().all(|id| *id == created[0]));
}
both_databases!(a_request_that_loses_the_insert_race_gets_the_winner_or_a_conflict);

async fn logs_of_a_job_ray_never_had_are_409_with_a_reason(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let queued = app.submit("l", json!({})).await;
    let id = queued["id"].as_str().unwrap();
    let resp = app.get(&format!("/v1/jobs/{id}/logs"), SUBMITTER).await;
    assert_eq!(resp.status(), 409);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "conflict", "{body}");
    assert_eq!(body["error"]["details"]["status"], "QUEUED", "{body}");
    assert_eq!(body["error"]["details"]["job_id"], id, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Ray does not have it"),
        "{body}"
    );
    // Cancelled before dispatch: still nothing in Ray.
    let r = app
        .post(&format!("/v1/jobs/{id}/cancel"), SUBMITTER, json!({}))
        .await;
    assert_eq!(r.status(), 200);
    let resp = app.get(&format!("/v1/jobs/{id}/logs"), SUBMITTER).await;
    assert_eq!(resp.status(), 409);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["details"]["status"], "STOPPED", "{body}");
}
both_databases!(logs_of_a_job_ray_never_had_are_409_with_a_reason);

/// Intake looks up a batch's idempotency keys as (user, key) pairs, in statements of
/// a few hundred: a key stored for one user is a repeat for that user only, and a
/// batch of more pairs than one statement takes still finds every stored one.
async fn idempotency_keys_are_per_user_across_a_large_batch(db: Db) {
    use fairshare::store::{submit_batch, Intake};
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let conn = connect(&app.db.url).await;
    let job = |user: String, key: usize| crate::helpers::new_job(&user, Some(format!("k{key}")));
    let stored: Vec<_> = (0..250).map(|i| job(format!("p{}", i % 3), i)).collect();
    for a in submit_batch(&conn, stored.clone(), 10_000).await {
        assert!(matches!(a.unwrap(), Intake::Created(_)));
    }
    // The same 250 again, then the same keys for other users.
    let mut batch = stored;
    batch.extend((0..250).map(|i| job(format!("q{}", i % 5), i)));
    let answers = submit_batch(&conn, batch, 10_000).await;
    let (mut existing, mut created) = (0, 0);
    for (i, a) in answers.into_iter().enumerate() {
        match a.unwrap() {
            Intake::Existing(j) if i < 250 => {
                assert_eq!(j.user_id, format!("p{}", i % 3));
                assert_eq!(j.external_id.as_deref(), Some(format!("k{i}").as_str()));
                existing += 1;
            }
            Intake::Created(j) if i >= 250 => {
                assert_eq!(j.user_id, format!("q{}", (i - 250) % 5));
                created += 1;
            }
            other => panic!("submission {i}: unexpected {other:?}"),
        }
    }
    assert_eq!((existing, created), (250, 250));
}
both_databases!(idempotency_keys_are_per_user_across_a_large_batch);
