//! The service against an HTTP mock of a Ray cluster, for what a real Ray cannot
//! produce on demand: refusals, duplicate answers, unreachable submits, vanishing jobs,
//! lagging capacity reports.

use std::time::{Duration, Instant};

use serde_json::json;
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::helpers::{Db, TestApp, SUBMITTER};
use fairshare::config::ClusterSettings;

fn usage(used: f64, total: f64) -> serde_json::Value {
    json!({"result": true, "data": {"clusterStatus": {"loadMetricsReport": {"usage": {"CPU": [used, total], "memory": [0, 8e9]}}}}})
}

/// A mock cluster that answers polls: `total` CPUs, Ray's report always `used`, and a
/// job list that is always empty.
async fn mock_cluster(used: f64, total: f64) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/cluster_status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(usage(used, total)))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/jobs/"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&server)
        .await;
    server
}

/// Ray accepts every submission (200).
async fn accept_submits(server: &MockServer) {
    Mock::given(method("POST"))
        .and(path("/api/jobs/"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"job_id": "j", "submission_id": "x"})),
        )
        .mount(server)
        .await;
}

async fn app_on(server: &MockServer, tweak: impl FnOnce(&mut fairshare::Settings)) -> TestApp {
    crate::helpers::app_with_cluster("mock", server.uri(), tweak).await
}

async fn wait_for_status(app: &TestApp, id: &str, want: &str, secs: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let j: serde_json::Value = app
            .get(&format!("/v1/jobs/{id}"), SUBMITTER)
            .await
            .json()
            .await
            .unwrap();
        if j["status"] == want {
            return j;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} never reached {want}: {j}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn posts(server: &MockServer) -> usize {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.method == wiremock::http::Method::POST && r.url.path() == "/api/jobs/")
        .count()
}

#[actix_web::test]
async fn a_job_ray_refuses_fails_with_rays_message() {
    let server = mock_cluster(0.0, 4.0).await;
    Mock::given(method("POST"))
        .and(path("/api/jobs/"))
        .respond_with(
            ResponseTemplate::new(400)
                .set_body_string("Traceback...\nTypeError: runtime_env must be a dict"),
        )
        .mount(&server)
        .await;
    let app = app_on(&server, |_| {}).await;
    let job = app.submit("ann", json!({})).await;
    let j = wait_for_status(&app, job["id"].as_str().unwrap(), "FAILED", 10).await;
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains("TypeError: runtime_env must be a dict"),
        "{j}"
    );
    assert_eq!(posts(&server).await, 1, "a 4xx is not retried");
}

#[actix_web::test]
async fn a_duplicate_submission_answer_counts_as_submitted() {
    let server = mock_cluster(0.0, 4.0).await;
    Mock::given(method("POST"))
        .and(path("/api/jobs/"))
        .respond_with(ResponseTemplate::new(500).set_body_string("ValueError: Job with submission_id x already exists. Please use a different submission_id."))
        .mount(&server)
        .await;
    let app = app_on(&server, |s| {
        s.monitor.lost_job_grace = Duration::from_secs(3600)
    })
    .await;
    let job = app.submit("ben", json!({})).await;
    let j = wait_for_status(&app, job["id"].as_str().unwrap(), "PENDING", 10).await;
    assert_eq!(j["cluster"], "mock");
    assert_eq!(posts(&server).await, 1);
}

#[actix_web::test]
async fn a_failing_submit_sends_the_job_back_to_its_queue() {
    let server = mock_cluster(0.0, 4.0).await;
    Mock::given(method("POST"))
        .and(path("/api/jobs/"))
        .respond_with(ResponseTemplate::new(503).set_body_string("unavailable"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(r"^/api/jobs/[0-9a-f-]+$"))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    let app = app_on(&server, |s| s.dispatcher.retry_attempts = 2).await;
    let job = app.submit("cat", json!({})).await;
    let id = uuid::Uuid::parse_str(job["id"].as_str().unwrap()).unwrap();
    let conn = crate::jobs::connect(&app.db.url).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = fairshare::store::job_events(&conn, id).await.unwrap();
        let back = events.iter().find(|e| {
            e.from_status == Some(entity::JobStatus::Dispatching)
                && e.to_status == entity::JobStatus::Queued
        });
        if let Some(e) = back {
            assert!(
                e.detail
                    .as_deref()
                    .unwrap_or("")
                    .contains("did not take it after 2 attempts"),
                "{e:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "job never went back to QUEUED: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(posts(&server).await >= 2);
    let j: serde_json::Value = app
        .get(&format!("/v1/jobs/{id}"), SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_ne!(
        j["status"], "FAILED",
        "an unreachable cluster never fails a job: {j}"
    );
}

#[actix_web::test]
async fn a_job_that_vanishes_from_an_answering_cluster_fails_as_lost() {
    let server = mock_cluster(0.0, 4.0).await;
    accept_submits(&server).await;
    let app = app_on(&server, |s| {
        s.monitor.lost_job_grace = Duration::from_millis(500)
    })
    .await;
    let job = app.submit("dan", json!({})).await;
    let j = wait_for_status(&app, job["id"].as_str().unwrap(), "FAILED", 10).await;
    assert!(
        j["message"].as_str().unwrap().contains("lost the job"),
        "{j}"
    );
}

#[actix_web::test]
async fn lagging_capacity_reports_do_not_over_grant() {
    // Ray keeps reporting 0 of 2 CPUs used while our jobs hold them.
    let server = mock_cluster(0.0, 2.0).await;
    accept_submits(&server).await;
    let app = app_on(&server, |s| {
        s.monitor.lost_job_grace = Duration::from_secs(3600)
    })
    .await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(
            app.submit("eve", json!({})).await["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while posts(&server).await < 2 {
        assert!(Instant::now() < deadline, "two jobs should be dispatched");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Several polls and safety cycles later, still only two.
    let view_cycles = |v: &serde_json::Value| v["cycles"].as_u64().unwrap();
    let before: serde_json::Value = app
        .get("/v1/scheduler", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v: serde_json::Value = app
            .get("/v1/scheduler", SUBMITTER)
            .await
            .json()
            .await
            .unwrap();
        if view_cycles(&v) >= view_cycles(&before) + 3 {
            assert_eq!(v["clusters"][0]["free"]["cpu"], 0.0, "{v}");
            assert_eq!(v["outstanding_jobs"], 2);
            break;
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(posts(&server).await, 2);
    let metrics = app.metrics().await;
    for line in [
        "fairshare_cluster_capacity{cluster=\"mock\",resource=\"cpu\"} 2",
        "fairshare_cluster_used{cluster=\"mock\",resource=\"cpu\"} 2",
        "fairshare_cluster_free{cluster=\"mock\",resource=\"cpu\"} 0",
        "fairshare_cluster_healthy{cluster=\"mock\"} 1",
        "fairshare_running_jobs{user=\"eve\"} 2",
        "fairshare_queued_jobs{user=\"eve\"} 3",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing `{line}` in\n{metrics}"
        );
    }
    let last: serde_json::Value = app
        .get(&format!("/v1/jobs/{}", ids[4]), SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(last["status"], "QUEUED");
    let third: serde_json::Value = app
        .get(&format!("/v1/jobs/{}", ids[2]), SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert!(
        third["pending_reason"]
            .as_str()
            .unwrap()
            .contains("capacity"),
        "{third}"
    );
    // A job no cluster could ever hold is refused at submit.
    let resp = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "eve", "entrypoint": "x", "resources": {"cpu": 3}}),
        )
        .await;
    crate::helpers::assert_error(resp, 422, "invalid_field", Some("resources.cpu")).await;
    // Named by the resource no cluster has (a fresh tester's finding: a GPU job on
    // CPU-only clusters named the CPUs), here and on Ray's API.
    let resp = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "eve", "entrypoint": "x", "resources": {"cpu": 1, "gpu": 1}}),
        )
        .await;
    crate::helpers::assert_error(resp, 422, "invalid_field", Some("resources.gpu")).await;
    let resp = app
        .post(
            "/api/jobs/",
            SUBMITTER,
            json!({"entrypoint": "x", "entrypoint_num_gpus": 1,
                   "metadata": {"fairshare.user": "eve"}}),
        )
        .await;
    assert_eq!(resp.status(), 422);
    let text = resp.text().await.unwrap();
    assert!(text.contains("entrypoint_num_gpus"), "{text}");
}

#[actix_web::test]
async fn jobs_go_to_the_cluster_they_fit_best() {
    let small = mock_cluster(0.0, 1.0).await;
    let big = mock_cluster(0.0, 4.0).await;
    for server in [&small, &big] {
        Mock::given(method("POST"))
            .and(path("/api/jobs/"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({"job_id": "j", "submission_id": "x"})),
            )
            .mount(server)
            .await;
    }
    let (small_uri, big_uri) = (small.uri(), big.uri());
    let app = app_on(&small, move |s| {
        s.monitor.lost_job_grace = Duration::from_secs(3600);
        s.clusters = vec![
            ClusterSettings {
                name: "small".into(),
                address: small_uri,
                ..Default::default()
            },
            ClusterSettings {
                name: "big".into(),
                address: big_uri,
                ..Default::default()
            },
        ];
    })
    .await;
    // Wait until both clusters have reported capacity.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v: serde_json::Value = app
            .get("/v1/scheduler", SUBMITTER)
            .await
            .json()
            .await
            .unwrap();
        if v["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["healthy"] == true)
        {
            break;
        }
        assert!(Instant::now() < deadline, "{v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let wide = app.submit("fay", json!({"resources": {"cpu": 2}})).await;
    let wide = wait_for_status(&app, wide["id"].as_str().unwrap(), "PENDING", 10).await;
    assert_eq!(wide["cluster"], "big", "only big can hold 2 CPUs");
    let unit = app.submit("gus", json!({"resources": {"cpu": 1}})).await;
    let unit = wait_for_status(&app, unit["id"].as_str().unwrap(), "PENDING", 10).await;
    assert_eq!(
        unit["cluster"], "small",
        "best fit: small is left with nothing to waste"
    );
    assert_eq!(posts(&small).await, 1);
    assert_eq!(posts(&big).await, 1);
}

/// A fake Ray job list: our job RUNNING (started `ran_ms` ago) until a stop arrives,
/// then STOPPED.
struct OneJob {
    id: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    stopped: std::sync::Arc<std::sync::atomic::AtomicBool>,
    started_ms: i64,
}

impl wiremock::Respond for OneJob {
    fn respond(&self, _: &wiremock::Request) -> ResponseTemplate {
        let Some(id) = self.id.lock().unwrap().clone() else {
            return ResponseTemplate::new(200).set_body_json(json!([]));
        };
        let stopped = self.stopped.load(std::sync::atomic::Ordering::SeqCst);
        let status = if stopped { "STOPPED" } else { "RUNNING" };
        ResponseTemplate::new(200).set_body_json(json!([{
            "submission_id": id, "status": status, "message": "", "start_time": self.started_ms,
            "end_time": if stopped { json!(self.started_ms + 5000) } else { json!(null) },
        }]))
    }
}

struct Stop(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl wiremock::Respond for Stop {
    fn respond(&self, _: &wiremock::Request) -> ResponseTemplate {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        ResponseTemplate::new(200).set_body_json(json!({"stopped": true}))
    }
}

#[actix_web::test]
async fn a_job_past_its_max_runtime_is_stopped_with_a_message_saying_so() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/cluster_status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(usage(0.0, 4.0)))
        .mount(&server)
        .await;
    let id = std::sync::Arc::new(std::sync::Mutex::new(None));
    let stopped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started_ms = chrono::Utc::now().timestamp_millis() - 5_000;
    Mock::given(method("GET"))
        .and(path("/api/jobs/"))
        .respond_with(OneJob {
            id: id.clone(),
            stopped: stopped.clone(),
            started_ms,
        })
        .mount(&server)
        .await;
    accept_submits(&server).await;
    Mock::given(method("POST"))
        .and(path_regex(r"^/api/jobs/[0-9a-f-]+/stop$"))
        .respond_with(Stop(stopped.clone()))
        .mount(&server)
        .await;
    let app = app_on(&server, |s| {
        s.monitor.lost_job_grace = Duration::from_secs(3600)
    })
    .await;
    let job = app.submit("hal", json!({"max_runtime_s": 2})).await;
    let job_id = job["id"].as_str().unwrap().to_string();
    *id.lock().unwrap() = Some(job_id.clone());
    let j = wait_for_status(&app, &job_id, "STOPPED", 15).await;
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains("max_runtime of 2 s"),
        "{j}"
    );
    assert!(
        stopped.load(std::sync::atomic::Ordering::SeqCst),
        "a stop was sent to Ray"
    );
}

/// Leaves one job DISPATCHING (or RUNNING) on `cluster` in a fresh database, as a
/// process killed mid-dispatch (or while it ran) would; returns the database and job id.
async fn killed_mid_dispatch(cluster: &str, running: bool) -> (crate::helpers::TestDb, uuid::Uuid) {
    let db = crate::helpers::TestDb::new(Db::Sqlite).await.unwrap();
    let conn = crate::jobs::connect(&db.url).await;
    fairshare::store::migrate(&conn).await.unwrap();
    let new = crate::helpers::new_job("ivy", None);
    let fairshare::store::Intake::Created(job) =
        fairshare::store::submit_job(&conn, new, 10).await.unwrap()
    else {
        panic!("not created")
    };
    // Through the lifecycle, as the service would: granted, then (optionally) seen
    // RUNNING; the process "dies" before anything else.
    use fairshare::lifecycle::Event;
    let granted = Event::Granted {
        cluster: cluster.into(),
    };
    let moved =
        fairshare::store::apply(&conn, &fairshare::store::Fence::Unfenced, job.id, &granted)
            .await
            .unwrap();
    assert!(moved.changed().is_some());
    if running {
        let seen = Event::SeenRunning { started_at: None };
        let ran = fairshare::store::apply(&conn, &fairshare::store::Fence::Unfenced, job.id, &seen)
            .await
            .unwrap();
        assert!(ran.changed().is_some());
    }
    conn.close().await.unwrap();
    (db, job.id)
}

fn mock_settings(db: &crate::helpers::TestDb, server: &MockServer) -> fairshare::Settings {
    let mut s = crate::helpers::test_settings(&db.url);
    s.clusters = vec![ClusterSettings {
        name: "mock".into(),
        address: server.uri(),
        ..Default::default()
    }];
    s.monitor.poll_interval = Duration::from_millis(100);
    s.monitor.lost_job_grace = Duration::from_secs(3600);
    s
}

#[actix_web::test]
async fn recovery_requeues_a_dispatching_job_ray_never_got_and_submits_it_once() {
    let (db, id) = killed_mid_dispatch("mock", false).await;
    let server = mock_cluster(0.0, 4.0).await;
    Mock::given(method("GET"))
        .and(path(format!("/api/jobs/{id}")))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    accept_submits(&server).await;
    let settings = mock_settings(&db, &server);
    let app = crate::helpers::start_on(db, settings).await;
    wait_for_status(&app, &id.to_string(), "PENDING", 10).await;
    assert_eq!(posts(&server).await, 1);
    let conn = crate::jobs::connect(&app.db.url).await;
    let path: Vec<_> = fairshare::store::job_events(&conn, id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.to_status)
        .collect();
    use entity::JobStatus::*;
    assert_eq!(
        path,
        vec![Queued, Dispatching, Queued, Dispatching, Pending]
    );
}

#[actix_web::test]
async fn recovery_adopts_a_dispatching_job_ray_already_has_without_resubmitting() {
    let (db, id) = killed_mid_dispatch("mock", false).await;
    let server = mock_cluster(0.0, 4.0).await;
    Mock::given(method("GET"))
        .and(path(format!("/api/jobs/{id}")))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"submission_id": id.to_string(), "status": "RUNNING"})),
        )
        .mount(&server)
        .await;
    let settings = mock_settings(&db, &server);
    let app = crate::helpers::start_on(db, settings).await;
    // Ray says RUNNING: the first poll brings it there directly, without a POST.
    let j = wait_for_status(&app, &id.to_string(), "RUNNING", 10).await;
    assert_eq!(j["cluster"], "mock");
    let v: serde_json::Value = app
        .get("/v1/scheduler", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["outstanding_jobs"], 1, "it counts as allocated: {v}");
    assert_eq!(posts(&server).await, 0, "never submitted twice");
}

#[actix_web::test]
async fn a_running_job_whose_cluster_left_the_configuration_fails_with_a_reason() {
    let (db, id) = killed_mid_dispatch("renamed-away", true).await;
    let server = mock_cluster(0.0, 4.0).await;
    let settings = mock_settings(&db, &server);
    let app = crate::helpers::start_on(db, settings).await;
    let j = wait_for_status(&app, &id.to_string(), "FAILED", 10).await;
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains("no longer in the configuration"),
        "{j}"
    );
    let u: serde_json::Value = app
        .get("/v1/users/ivy", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(u["running"], 0, "it holds nothing: {u}");
}

/// Issue 45 §1: a cluster that refuses this service's token (Ray's 401) is unhealthy
/// with a reason naming authentication, its job waits QUEUED (never FAILED), and it is
/// polled less and less often (each refusal doubles the wait, 1 s up to 30 s), not at
/// every 100-ms poll.
#[actix_web::test]
async fn a_cluster_that_refuses_the_token_is_unhealthy_polled_less_and_its_job_waits() {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(
            ResponseTemplate::new(401)
                .set_body_string("Unauthorized: Missing or invalid authentication token"),
        )
        .mount(&server)
        .await;
    let app = app_on(&server, |s| {
        s.monitor.poll_interval = Duration::from_millis(100);
        s.monitor.unhealthy_backoff = Duration::from_secs(1);
    })
    .await;
    let job = app.submit("u", json!({})).await;
    let id = job["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    let cluster = loop {
        let v: serde_json::Value = app.get_json("/v1/scheduler", SUBMITTER).await;
        let c = v["clusters"][0].clone();
        if c["healthy"] == false && c["unhealthy_reason"].is_string() {
            break c;
        }
        assert!(Instant::now() < deadline, "never unhealthy: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let reason = cluster["unhealthy_reason"].as_str().unwrap();
    assert!(reason.contains("authentication"), "{cluster}");
    assert!(reason.contains("HTTP 401"), "{cluster}");
    let seen = server.received_requests().await.unwrap().len();
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let during = server.received_requests().await.unwrap().len() - seen;
    // Without the backoff: 30 polls of 2 requests or more in 3 s.
    assert!(
        during <= 12,
        "{during} requests in 3 s to a cluster refusing the token"
    );
    assert_eq!(
        app.get_json(&format!("/v1/jobs/{id}"), SUBMITTER).await["status"],
        "QUEUED"
    );
}
