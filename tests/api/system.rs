//! Health, readiness, metrics, OpenAPI, request ids.

use serde_json::json;

use crate::helpers::{spawn_app, Db, ADMIN, SUBMITTER};

#[actix_web::test]
async fn readyz_reports_ready_after_recovery_and_healthz_is_alive() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    // Alive at once; ready once recovery (in the background) has loaded the queues.
    let r = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = app.client.get(app.url("/readyz")).send().await.unwrap();
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 503);
        assert!(std::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[actix_web::test]
async fn a_restart_with_many_queued_jobs_is_alive_at_once_and_counts_each_job_once() {
    use crate::helpers::{start_unready, test_settings, TestDb};
    // 20,000 queued jobs of 20 users, committed as the intake writer would.
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    let conn = crate::jobs::connect(&db.url).await;
    fairshare::store::migrate(&conn).await.unwrap();
    for batch in 0..20 {
        let jobs = (0..1000)
            .map(|i| {
                crate::helpers::new_job(&format!("u{}", i % 20), Some(format!("b{batch}-{i}")))
            })
            .collect();
        for answer in fairshare::store::submit_batch(&conn, jobs, 1_000_000).await {
            answer.unwrap();
        }
    }
    conn.close().await.unwrap();
    let url = db.url.clone();
    let app = start_unready(db, test_settings(&url)).await;
    let r = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200, "alive before the queues are loaded");
    // A job submitted while recovery may still be loading counts once.
    app.submit("u0", json!({"external_id": "during-load"}))
        .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let r = app.client.get(app.url("/readyz")).send().await.unwrap();
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 503);
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "loading", "{body}");
        assert!(std::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let s = app.get_json("/v1/scheduler", SUBMITTER).await;
    assert_eq!(s["queued_jobs"], 20_001, "{}", s["queued_jobs"]);
    let u = app.get_json("/v1/users/u0", SUBMITTER).await;
    assert_eq!(u["queued"], 1_001);
    // A job loaded at start leaves its queue and its count when cancelled.
    let page = app
        .get_json("/v1/jobs?user=u1&status=QUEUED&limit=1", SUBMITTER)
        .await;
    let id = page["jobs"][0]["id"].as_str().unwrap().to_string();
    let r = app
        .post(&format!("/v1/jobs/{id}/cancel"), SUBMITTER, json!({}))
        .await;
    assert_eq!(r.status(), 200);
    let u = app.get_json("/v1/users/u1", SUBMITTER).await;
    assert_eq!(u["queued"], 999);
    let s = app.get_json("/v1/scheduler", SUBMITTER).await;
    assert_eq!(s["queued_jobs"], 20_000);
}

#[actix_web::test]
async fn the_packed_pages_of_queued_jobs_on_sqlite_read_like_the_stream() {
    use crate::helpers::TestDb;
    use futures_util::TryStreamExt;
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    let conn = crate::jobs::connect(&db.url).await;
    fairshare::store::migrate(&conn).await.unwrap();
    let jobs = (0..23)
        .map(|i| {
            let mut j = crate::helpers::new_job(
                if i % 3 == 0 {
                    "o'brien \\ \"x\""
                } else {
                    "ünï"
                },
                Some(format!("e{i}")),
            );
            j.priority = i % 4 - 2;
            j.cpu = 1.0 / 3.0 + f64::from(i);
            j.gpu = 0.1 * f64::from(i);
            j.memory_bytes = (1 << 40) + i64::from(i);
            j.max_runtime_s = (i % 2 == 0).then_some(3_600 + i64::from(i));
            j
        })
        .collect();
    for answer in fairshare::store::submit_batch(&conn, jobs, 1_000_000).await {
        answer.unwrap();
    }
    // One job with a retiring attempt on a cluster, one that is not QUEUED.
    sea_orm::ConnectionTrait::execute_unprepared(
        &conn,
        "update jobs set retiring_attempt = 1, attempt = 2, cluster = 'c' \
         where external_id = 'e4'; update jobs set status = 'RUNNING' where external_id = 'e5'",
    )
    .await
    .unwrap();
    let streamed: Vec<_> = fairshare::store::stream_queued(&conn)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut paged = Vec::new();
    let mut after = i64::MIN;
    while let (Some(last), page) = fairshare::store::queued_page_sqlite(&conn, after, 7)
        .await
        .unwrap()
    {
        assert!(page.len() <= 7);
        after = last;
        paged.extend(page);
    }
    assert_eq!(streamed.len(), 22);
    assert_eq!(paged, streamed);
    // The pages as one stream, as recovery reads them.
    let paged_stream: Vec<_> = fairshare::store::stream_queued_pages_sqlite(&conn, 7)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(paged_stream, streamed);
    assert!(paged
        .iter()
        .any(|j| j.retiring_attempt == Some(1) && j.attempt == 2));
}

#[actix_web::test]
async fn every_response_carries_a_request_id_and_echoes_the_callers() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let r = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert!(r.headers().get("x-request-id").is_some());
    let r = app
        .client
        .get(app.url("/healthz"))
        .header("x-request-id", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers().get("x-request-id").unwrap(), "abc-123");
}

#[actix_web::test]
async fn metrics_move_with_submissions_and_pauses() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let scrape = crate::helpers::metric;
    let before = app.metrics().await;
    app.submit("mia", json!({})).await;
    app.post("/v1/users/mia/pause", ADMIN, json!({})).await;
    let after = app.metrics().await;
    // The registry is process-wide and tests run in parallel: counters only grow.
    assert!(
        scrape(&after, "fairshare_jobs_submitted_total")
            >= scrape(&before, "fairshare_jobs_submitted_total") + 1.0
    );
    assert!(
        after.contains("fairshare_queued_jobs{user=\"mia\"} 1"),
        "{after}"
    );
    assert!(scrape(&after, "fairshare_users_paused") >= 1.0);
    assert!(after.contains("fairshare_build_info{version="));
}

#[actix_web::test]
async fn the_openapi_document_covers_every_route() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let doc: serde_json::Value = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for (method, path) in fairshare::ROUTES {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} missing from /openapi.json"
        );
    }
    let n: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|p| p.as_object().unwrap().len())
        .sum();
    assert_eq!(
        n,
        fairshare::ROUTES.len(),
        "the document lists a route the server does not register"
    );
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
    for p in doc["paths"]["/v1/jobs"]["get"]["parameters"]
        .as_array()
        .unwrap()
    {
        assert_eq!(p["in"], "query", "{p}");
        assert_ne!(p["required"], true, "{p}");
    }
    let _ = SUBMITTER;
}

#[actix_web::test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
async fn a_lost_database_answers_503_retryable_never_500() {
    let admin = crate::helpers::postgres_url();
    let Some(app) = spawn_app(Db::Postgres).await else {
        return;
    };
    let job = app.submit("zed", serde_json::json!({})).await;
    // Take the database away under the running service.
    let name = app.db.url.rsplit('/').next().unwrap().to_string();
    let conn = sea_orm::Database::connect(&admin).await.unwrap();
    use sea_orm::ConnectionTrait;
    conn.execute_unprepared(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await
        .unwrap();
    let r = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            serde_json::json!({"user": "zed", "entrypoint": "x"}),
        )
        .await;
    assert_eq!(
        r.headers().get("retry-after").map(|v| v.to_str().unwrap()),
        Some("1")
    );
    crate::helpers::assert_error(r, 503, "unavailable", None).await;
    let r = app
        .get(
            &format!("/v1/jobs/{}", job["id"].as_str().unwrap()),
            SUBMITTER,
        )
        .await;
    crate::helpers::assert_error(r, 503, "unavailable", None).await;
    // Probes answer at once (a probe's timeout is often 1 s), not after the pool's 5 s
    // acquire timeout: readiness says 503, liveness 200, for GET and HEAD alike.
    for (m, path, want) in [
        (reqwest::Method::GET, "/readyz", 503),
        (reqwest::Method::HEAD, "/readyz", 503),
        (reqwest::Method::GET, "/healthz", 200),
        (reqwest::Method::HEAD, "/healthz", 200),
    ] {
        let started = std::time::Instant::now();
        let r = app
            .client
            .request(m.clone(), app.url(path))
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await
            .unwrap();
        let took = started.elapsed();
        assert_eq!(r.status(), want, "{m} {path}");
        assert!(
            took < std::time::Duration::from_millis(900),
            "{m} {path} took {took:?} while the database is down"
        );
    }
}

#[actix_web::test]
async fn the_scheduler_view_shows_rfc3339_times_and_whole_bytes() {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    // 8 GB of memory that Ray reports as a float, with a fractional part.
    let usage = json!({"result": true, "data": {"clusterStatus": {"loadMetricsReport": {"usage": {"CPU": [0.0, 4.0], "memory": [1234.5, 8.0e9]}}}}});
    Mock::given(method("GET"))
        .and(path("/api/cluster_status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(usage))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/jobs/"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&server)
        .await;
    let uri = server.uri();
    let Some(app) = crate::helpers::spawn_app_with(Db::Sqlite, move |s| {
        s.clusters = vec![fairshare::config::ClusterSettings {
            name: "mock".into(),
            address: uri,
            ..Default::default()
        }];
        s.monitor.poll_interval = std::time::Duration::from_millis(100);
    })
    .await
    else {
        return;
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let view = loop {
        let v: serde_json::Value = app
            .get("/v1/scheduler", SUBMITTER)
            .await
            .json()
            .await
            .unwrap();
        if v["last_cycle"].is_object() && v["clusters"][0]["capacity"]["cpu"] == 4.0 {
            break v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no cycle with capacity: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let at = view["last_cycle"]["at"]
        .as_str()
        .expect("an RFC 3339 string");
    let at = chrono::DateTime::parse_from_rfc3339(at).expect("RFC 3339");
    let age = chrono::Utc::now().signed_duration_since(at);
    assert!(age.num_seconds().abs() < 60, "{at}");
    let cluster = &view["clusters"][0];
    for part in ["capacity", "used_reported", "outstanding", "free"] {
        assert!(
            cluster[part]["memory_bytes"].is_u64(),
            "{part}.memory_bytes is not a whole number: {cluster}"
        );
    }
    assert_eq!(cluster["capacity"]["memory_bytes"], 8_000_000_000u64);
}

/// A clean stop writes SQLite's WAL back into the database file (issue 43 §8: after
/// SIGTERM `fairshare.db` was 4 KB and `fairshare.db-wal` 1 MB, and a copy of the
/// file alone had no tables): a copy of `fairshare.db` alone, taken after the stop,
/// holds the tables and every job submitted.
#[actix_web::test]
async fn after_a_clean_stop_the_sqlite_file_alone_holds_the_tables_and_jobs() {
    use sea_orm::{ConnectionTrait, Statement};
    crate::helpers::init_test_telemetry();
    let db = crate::helpers::TestDb::new(Db::Sqlite).await.unwrap();
    let file = std::path::PathBuf::from(
        db.url
            .trim_start_matches("sqlite://")
            .split('?')
            .next()
            .unwrap(),
    );
    let app = fairshare::Application::build(crate::helpers::test_settings(&db.url))
        .await
        .unwrap();
    let address = format!("http://127.0.0.1:{}", app.port());
    let handle = app.handle();
    // What `fairshare serve` runs; SIGTERM stops the server as `stop(true)` does.
    let serving = actix_web::rt::spawn(app.run_until_stopped());
    let client = reqwest::Client::new();
    crate::helpers::until(30, "ready", || async {
        let r = client.get(format!("{address}/readyz")).send().await;
        r.is_ok_and(|r| r.status() == 200).then_some(())
    })
    .await;
    for i in 0..20 {
        let r = client
            .post(format!("{address}/v1/jobs"))
            .bearer_auth(SUBMITTER)
            .json(&json!({"user": "wal", "entrypoint": format!("echo {i}"),
                "runtime_env": {"env_vars": {"PAD": "p".repeat(20_000)}}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    handle.stop(true).await;
    serving.await.unwrap().unwrap();

    let wal = file.with_file_name("fairshare.db-wal");
    let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(
        wal_len, 0,
        "the WAL still holds {wal_len} bytes after a clean stop"
    );
    let copy_dir = tempfile::tempdir().unwrap();
    let copy = copy_dir.path().join("copy.db");
    std::fs::copy(&file, &copy).unwrap();
    let conn = sea_orm::Database::connect(format!("sqlite://{}?mode=ro", copy.display()))
        .await
        .unwrap();
    let count = |sql: &'static str| {
        let conn = &conn;
        async move {
            let row = conn
                .query_one(Statement::from_string(
                    sea_orm::DatabaseBackend::Sqlite,
                    sql,
                ))
                .await
                .unwrap()
                .unwrap();
            row.try_get_by_index::<i64>(0).unwrap()
        }
    };
    assert!(
        count(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('jobs', 'users')"
        )
        .await
            == 2,
        "the copy has no tables"
    );
    assert_eq!(
        count("SELECT count(*) FROM jobs WHERE user_id = 'wal'").await,
        20
    );
}
