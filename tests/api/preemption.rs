//! Preemption in the service (issue 28, DESIGN §3 "Preemption") against the fake
//! cluster, on both databases: a preemptible RUNNING job of a user above its fair
//! share is stopped for another user's head that waited past `preemption.after`, goes
//! back to the queue at its old place with its next attempt, and later succeeds; a
//! job that did not opt in is never touched; a cancel during the stop wins; an
//! attempt that finished before the stop landed is not run again; a restart in the
//! middle finishes the requeue.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::both_databases;
use crate::fake_ray::{self, State};
use crate::helpers::{
    assert_error, metric, spawn_app_with, start_on, until, Db, TestApp, ADMIN, SUBMITTER,
};
use crate::jobs::connect;

/// Preemption as quick as a test wants it: after 1 s, no minimum run time, no budget
/// limit, a grace longer than any test unless `tweak` says otherwise.
fn settings(s: &mut fairshare::Settings, uri: &str) {
    s.clusters = vec![fairshare::config::ClusterSettings {
        name: "fake".into(),
        address: uri.to_string(),
        ..Default::default()
    }];
    s.monitor.poll_interval = Duration::from_millis(100);
    s.monitor.usage_report_lag = Duration::from_millis(300);
    s.monitor.lost_job_grace = Duration::from_secs(3600);
    s.dispatcher.retry_initial_backoff = Duration::from_millis(10);
    s.dispatcher.retry_max_backoff = Duration::from_millis(20);
    s.dispatcher.request_timeout = Duration::from_millis(500);
    s.preemption.after = Some(Duration::from_secs(1));
    s.preemption.min_runtime = Duration::ZERO;
    s.preemption.max_per_job = 2;
    s.preemption.budget = 1.0;
    s.preemption.interval = Duration::from_secs(1);
    s.preemption.grace = Duration::from_secs(600);
}

/// A 2-CPU fake Ray whose jobs run until told otherwise, and the service on it.
async fn setup(
    db: Db,
    fake: impl FnOnce(&mut State),
    tweak: impl FnOnce(&mut fairshare::Settings),
) -> Option<(TestApp, wiremock::MockServer, Arc<Mutex<State>>)> {
    let (server, state) = fake_ray::start(2.0, |s| {
        s.run_polls = 1_000_000;
        fake(s);
    })
    .await;
    let uri = server.uri();
    let app = spawn_app_with(db, |s| {
        settings(s, &uri);
        tweak(s);
    })
    .await?;
    Some((app, server, state))
}

async fn job(app: &TestApp, id: &str) -> Value {
    app.get(&format!("/v1/jobs/{id}"), SUBMITTER)
        .await
        .json()
        .await
        .unwrap()
}

fn id_of(v: &Value) -> String {
    v["id"].as_str().unwrap().to_string()
}

/// Users named per test and database: the metrics are the process's.
fn user(base: &str, db: Db) -> String {
    format!("{base}-{}", format!("{db:?}").to_lowercase())
}

/// Reads `GET /v1/events?job=<id>&last_event_id=0` until `needle` appears (10 s).
async fn stream_contains(app: &TestApp, job: &str, needle: &str) -> bool {
    let mut resp = app
        .get(&format!("/v1/events?job={job}&last_event_id=0"), SUBMITTER)
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut seen = String::new();
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match tokio::time::timeout(left, resp.chunk()).await {
            Ok(Ok(Some(bytes))) => {
                seen.push_str(&String::from_utf8_lossy(&bytes));
                if seen.contains(needle) {
                    return true;
                }
            }
            _ => return false,
        }
    }
    false
}

/// A's two 1-CPU jobs (preemptible or not) RUNNING on the 2-CPU fake, then B's
/// 1-CPU job submitted: returns (A's ids, B's id).
async fn fill_then_wait(
    app: &TestApp,
    state: &Arc<Mutex<State>>,
    a: &str,
    b: &str,
    preemptible: bool,
) -> (Vec<String>, String) {
    let mut ids = Vec::new();
    for _ in 0..2 {
        let v = app
            .submit(
                a,
                json!({"entrypoint": "sleep 60", "preemptible": preemptible}),
            )
            .await;
        assert_eq!(v["preemptible"], preemptible, "{v}");
        ids.push(id_of(&v));
    }
    until(20, "A's two jobs RUNNING", || async {
        let s = state.lock().unwrap();
        let running = ids
            .iter()
            .filter(|id| s.jobs.get(*id).is_some_and(|j| j.status == "RUNNING"))
            .count();
        (running == 2).then_some(())
    })
    .await;
    for id in &ids {
        until(10, "RUNNING here", || async {
            (job(app, id).await["status"] == "RUNNING").then_some(())
        })
        .await;
    }
    let bj = id_of(&app.submit(b, json!({"entrypoint": "sleep 1"})).await);
    (ids, bj)
}

/// The one of `ids` whose preemption's stop was sent to the fake.
async fn preempted_one(state: &Arc<Mutex<State>>, ids: &[String]) -> String {
    until(20, "a preemption's stop", || async {
        let s = state.lock().unwrap();
        ids.iter().find(|id| s.stops.contains(id)).cloned()
    })
    .await
}

/// Issue 43 §2 through the service: a 4-CPU fake Ray; groups `heavy` (weight 3, user
/// d5a) and `light` (weight 1, user d5b). d5b runs 4 preemptible 1-CPU jobs (and
/// queues 2 more), then d5a queues 4; preemption after 2 s, budget 1.0 per hour.
/// `GET /v1/groups` says fair shares 0.75 and 0.25, and d5a preempts until it holds
/// 3 CPUs and d5b keeps 1 (three stops), and it stays so. (Before: the share rule
/// divided each user's own share by the user's weight, 1 and 1, and stopped at 2:2.)
async fn with_groups_preemption_reaches_the_hierarchical_fair_shares(db: Db) {
    let (server, state) = fake_ray::start(4.0, |s| s.run_polls = 1_000_000).await;
    let uri = server.uri();
    let Some(app) = spawn_app_with(db, |s| {
        settings(s, &uri);
        s.preemption.after = Some(Duration::from_secs(2));
        s.preemption.max_per_job = 5;
        s.preemption.interval = Duration::from_secs(3600);
    })
    .await
    else {
        return;
    };
    let (a, b) = (user("d5a", db), user("d5b", db));
    for (path, weight) in [("heavy", 3), ("light", 1)] {
        let r = app
            .put(
                &format!("/v1/groups/{path}"),
                ADMIN,
                json!({ "weight": weight }),
            )
            .await;
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
    }
    for (u, g) in [(&a, "heavy"), (&b, "light")] {
        let r = app
            .put(&format!("/v1/users/{u}"), ADMIN, json!({ "group": g }))
            .await;
        assert_eq!(r.status(), 200);
    }
    until(10, "the cluster's 4 CPUs", || async {
        let v = app.get_json("/v1/scheduler", SUBMITTER).await;
        (v["clusters"][0]["capacity"]["cpu"] == json!(4.0)).then_some(())
    })
    .await;
    let mut light = Vec::new();
    for _ in 0..6 {
        let v = app
            .submit(&b, json!({"entrypoint": "sleep 60", "preemptible": true}))
            .await;
        light.push(id_of(&v));
    }
    until(20, "4 of d5b's jobs RUNNING", || async {
        let s = state.lock().unwrap();
        let n = light
            .iter()
            .filter(|id| s.jobs.get(*id).is_some_and(|j| j.status == "RUNNING"))
            .count();
        (n == 4).then_some(())
    })
    .await;
    for _ in 0..4 {
        app.submit(&a, json!({"entrypoint": "sleep 60"})).await;
    }
    let running = |u: String| {
        let app = &app;
        async move {
            app.get_json(&format!("/v1/users/{u}"), SUBMITTER).await["running"]
                .as_u64()
                .unwrap_or(0)
        }
    };
    until(40, "d5a holding 3 CPUs and d5b 1", || async {
        (running(a.clone()).await == 3 && running(b.clone()).await == 1).then_some(())
    })
    .await;
    let list = app.get_json("/v1/groups", SUBMITTER).await;
    let close = |v: &Value, x: f64| (v.as_f64().unwrap() - x).abs() < 1e-9;
    assert!(close(&list[0]["fair_share"], 0.75), "{list}");
    assert!(close(&list[1]["fair_share"], 0.25), "{list}");
    // Three more seconds of cycles (past `after` again for d5a's last head): no
    // more preemptions, and the same holdings.
    let polls = state.lock().unwrap().list_polls;
    until(10, "more polls", || async {
        (state.lock().unwrap().list_polls >= polls + 30).then_some(())
    })
    .await;
    assert_eq!(running(a.clone()).await, 3);
    assert_eq!(running(b.clone()).await, 1);
    let s = state.lock().unwrap();
    // Distinct jobs: a stop the dispatcher retried is still one preemption.
    let stopped: std::collections::BTreeSet<&String> = s.stops.iter().collect();
    assert_eq!(stopped.len(), 3, "{:?}", s.stops);
    assert!(stopped.iter().all(|id| light.contains(id)));
}
both_databases!(with_groups_preemption_reaches_the_hierarchical_fair_shares);

async fn preemptible_running_job_goes_back_to_its_place_and_later_succeeds(db: Db) {
    let Some((app, _server, state)) = setup(db, |_| {}, |_| {}).await else {
        return;
    };
    let (a, b) = (user("pa", db), user("pb", db));
    let (ids, bj) = fill_then_wait(&app, &state, &a, &b, true).await;
    let victim = preempted_one(&state, &ids).await;
    let other = ids.iter().find(|i| **i != victim).unwrap().clone();
    let before = job(&app, &victim).await;
    // Ray's stop takes effect: the job is QUEUED again, attempt 2, at its place.
    let back = until(20, "the victim QUEUED again", || async {
        let v = job(&app, &victim).await;
        (v["status"] == "QUEUED").then_some(v)
    })
    .await;
    assert_eq!(back["attempt"], 2, "{back}");
    assert_eq!(back["preemptions"], 1, "{back}");
    assert_eq!(back["preemptible"], true);
    assert_eq!(back["preempting"], false);
    assert_eq!(
        back["submitted_at"], before["submitted_at"],
        "its old place"
    );
    assert_eq!(back["queue_position"], 1);
    assert!(back["started_at"].is_null(), "{back}");
    assert!(
        back["message"]
            .as_str()
            .unwrap()
            .contains(&format!("preempted for job {bj} of user {b}")),
        "{back}"
    );
    assert!(back["pending_reason"].is_string(), "{back}");
    // B's job runs in the room made for it; A's other job was never touched.
    until(20, "B RUNNING", || async {
        (job(&app, &bj).await["status"] == "RUNNING").then_some(())
    })
    .await;
    assert_eq!(job(&app, &other).await["status"], "RUNNING");
    assert!(!state.lock().unwrap().stops.contains(&other));
    // Ray's Jobs API shows it PENDING again, saying why.
    let ray: Value = app
        .get(&format!("/api/jobs/{victim}"), SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    if job(&app, &victim).await["status"] == "QUEUED" {
        assert_eq!(ray["status"], "PENDING", "{ray}");
        assert!(
            ray["message"]
                .as_str()
                .unwrap()
                .contains("preempted for job"),
            "{ray}"
        );
        assert_eq!(ray["fairshare"]["preemptions"], 1, "{ray}");
    }
    // B's job ends; A's job runs again as attempt 2 and succeeds.
    {
        let mut s = state.lock().unwrap();
        s.run_polls = 2;
        if let Some(j) = s.jobs.get_mut(&bj) {
            j.runs_for = 0;
        }
    }
    let done = until(30, "the victim SUCCEEDED", || async {
        let v = job(&app, &victim).await;
        (v["status"] == "SUCCEEDED").then_some(v)
    })
    .await;
    assert_eq!(done["attempt"], 2);
    {
        let s = state.lock().unwrap();
        assert_eq!(s.jobs[&victim].status, "STOPPED", "attempt 1 was stopped");
        assert_eq!(s.jobs[&format!("{victim}-2")].status, "SUCCEEDED");
    }
    // The timeline and the metrics say so.
    let conn = connect(&app.db.url).await;
    let events = fairshare::store::job_events(&conn, uuid::Uuid::parse_str(&victim).unwrap())
        .await
        .unwrap();
    let details: Vec<String> = events.iter().filter_map(|e| e.detail.clone()).collect();
    assert!(
        details.iter().any(
            |d| d.starts_with(&format!("preempted for job {bj} of user {b}"))
                && d.contains("core-seconds lost")
        ),
        "{details:?}"
    );
    assert!(
        stream_contains(&app, &victim, "event: job.preempted").await,
        "the SSE stream names the preemption"
    );
    let m = app.metrics().await;
    assert_eq!(
        metric(&m, &format!("fairshare_preemptions_total{{user=\"{a}\"}}")),
        1.0
    );
    assert!(
        metric(
            &m,
            &format!("fairshare_preempted_core_seconds_total{{user=\"{a}\"}}")
        ) > 0.0
    );
}
both_databases!(preemptible_running_job_goes_back_to_its_place_and_later_succeeds);

async fn a_job_that_did_not_opt_in_is_never_preempted(db: Db) {
    let Some((app, _server, state)) = setup(db, |_| {}, |_| {}).await else {
        return;
    };
    let (a, b) = (user("na", db), user("nb", db));
    let (ids, bj) = fill_then_wait(&app, &state, &a, &b, false).await;
    // Well past `after` (1 s) and many cycles (every 200 ms): nothing is stopped.
    let start = state.lock().unwrap().list_polls;
    until(20, "30 polls", || async {
        (state.lock().unwrap().list_polls >= start + 30).then_some(())
    })
    .await;
    assert!(state.lock().unwrap().stops.is_empty());
    for id in &ids {
        assert_eq!(job(&app, id).await["status"], "RUNNING");
    }
    let v = job(&app, &bj).await;
    assert_eq!(v["status"], "QUEUED");
    assert!(v["pending_reason"].is_string(), "{v}");
}
both_databases!(a_job_that_did_not_opt_in_is_never_preempted);

async fn a_cancel_during_the_preemptions_stop_ends_the_job_stopped(db: Db) {
    let Some((app, _server, state)) = setup(db, |s| s.ignore_stops = true, |_| {}).await else {
        return;
    };
    let (a, b) = (user("ca", db), user("cb", db));
    let (ids, _bj) = fill_then_wait(&app, &state, &a, &b, true).await;
    let victim = preempted_one(&state, &ids).await;
    until(10, "preempting", || async {
        (job(&app, &victim).await["preempting"] == true).then_some(())
    })
    .await;
    let resp = app
        .post(&format!("/v1/jobs/{victim}/cancel"), SUBMITTER, json!({}))
        .await;
    assert_eq!(resp.status(), 202);
    // Ray's stop lands now.
    state
        .lock()
        .unwrap()
        .jobs
        .get_mut(&victim)
        .unwrap()
        .stop_requested = true;
    let v = until(20, "STOPPED", || async {
        let v = job(&app, &victim).await;
        (v["status"] != "RUNNING").then_some(v)
    })
    .await;
    assert_eq!(v["status"], "STOPPED", "the cancel wins: {v}");
    assert_eq!(v["attempt"], 1);
    let s = state.lock().unwrap();
    assert!(
        !s.post_ids.contains(&format!("{victim}-2")),
        "never requeued"
    );
}
both_databases!(a_cancel_during_the_preemptions_stop_ends_the_job_stopped);

async fn an_attempt_that_succeeded_before_the_stop_landed_is_not_run_again(db: Db) {
    let Some((app, _server, state)) = setup(db, |s| s.ignore_stops = true, |_| {}).await else {
        return;
    };
    let (a, b) = (user("sa", db), user("sb", db));
    let (ids, _bj) = fill_then_wait(&app, &state, &a, &b, true).await;
    let victim = preempted_one(&state, &ids).await;
    until(10, "preempting", || async {
        (job(&app, &victim).await["preempting"] == true).then_some(())
    })
    .await;
    state.lock().unwrap().jobs.get_mut(&victim).unwrap().status = "SUCCEEDED";
    let v = until(20, "ended", || async {
        let v = job(&app, &victim).await;
        (v["status"] != "RUNNING").then_some(v)
    })
    .await;
    assert_eq!(v["status"], "SUCCEEDED", "{v}");
    assert_eq!(v["attempt"], 1);
    assert_eq!(v["preemptions"], 0);
    assert!(!state
        .lock()
        .unwrap()
        .post_ids
        .contains(&format!("{victim}-2")));
}
both_databases!(an_attempt_that_succeeded_before_the_stop_landed_is_not_run_again);

async fn a_restart_in_the_middle_of_a_preemption_finishes_the_requeue(db: Db) {
    let Some((app, server, state)) = setup(db, |s| s.ignore_stops = true, |_| {}).await else {
        return;
    };
    let (a, b) = (user("ra", db), user("rb", db));
    let (ids, bj) = fill_then_wait(&app, &state, &a, &b, true).await;
    let victim = preempted_one(&state, &ids).await;
    until(10, "preempting", || async {
        (job(&app, &victim).await["preempting"] == true).then_some(())
    })
    .await;
    let url = app.db.url.clone();
    let db_handle = app.stop().await;
    let stops_before = state.lock().unwrap().stops.len();
    let mut s = crate::helpers::test_settings(&url);
    settings(&mut s, &server.uri());
    let app = start_on(db_handle, s).await;
    // The new scheduler asks Ray again, and Ray's stop now takes effect.
    until(20, "the stop sent again", || async {
        (state.lock().unwrap().stops.len() > stops_before).then_some(())
    })
    .await;
    {
        let mut s = state.lock().unwrap();
        s.run_polls = 2;
        s.jobs.get_mut(&victim).unwrap().stop_requested = true;
    }
    let back = until(20, "QUEUED again", || async {
        let v = job(&app, &victim).await;
        (v["status"] != "RUNNING").then_some(v)
    })
    .await;
    assert_eq!(back["status"], "QUEUED", "{back}");
    assert_eq!(back["attempt"], 2);
    assert_eq!(back["preemptions"], 1);
    // B runs and ends; the victim runs again and succeeds.
    until(20, "B RUNNING", || async {
        (job(&app, &bj).await["status"] == "RUNNING").then_some(())
    })
    .await;
    if let Some(j) = state.lock().unwrap().jobs.get_mut(&bj) {
        j.runs_for = 0;
    }
    let done = until(30, "the victim SUCCEEDED", || async {
        let v = job(&app, &victim).await;
        let ended = v["status"]
            .as_str()
            .and_then(entity::JobStatus::parse)
            .is_some_and(|s| s.is_terminal());
        ended.then_some(v)
    })
    .await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    assert_eq!(done["attempt"], 2);
}
both_databases!(a_restart_in_the_middle_of_a_preemption_finishes_the_requeue);

async fn a_stop_ray_does_not_confirm_within_the_grace_queues_the_job_held(db: Db) {
    let Some((app, _server, state)) = setup(
        db,
        |s| s.ignore_stops = true,
        |s| s.preemption.grace = Duration::from_secs(1),
    )
    .await
    else {
        return;
    };
    let (a, b) = (user("ga", db), user("gb", db));
    let (ids, bj) = fill_then_wait(&app, &state, &a, &b, true).await;
    let victim = preempted_one(&state, &ids).await;
    let held = until(20, "QUEUED, held", || async {
        let v = job(&app, &victim).await;
        (v["status"] == "QUEUED").then_some(v)
    })
    .await;
    assert_eq!(held["attempt"], 2);
    assert!(
        held["pending_reason"]
            .as_str()
            .unwrap()
            .contains("waiting for Ray to confirm that attempt 1 stopped"),
        "{held}"
    );
    // Ray ends attempt 1; B runs, ends; the victim runs as attempt 2 and succeeds.
    {
        let mut s = state.lock().unwrap();
        s.run_polls = 2;
        s.jobs.get_mut(&victim).unwrap().status = "STOPPED";
    }
    until(20, "B RUNNING", || async {
        (job(&app, &bj).await["status"] == "RUNNING").then_some(())
    })
    .await;
    if let Some(j) = state.lock().unwrap().jobs.get_mut(&bj) {
        j.runs_for = 0;
    }
    let done = until(30, "the victim SUCCEEDED", || async {
        let v = job(&app, &victim).await;
        (v["status"] == "SUCCEEDED").then_some(v)
    })
    .await;
    assert_eq!(done["attempt"], 2);
}
both_databases!(a_stop_ray_does_not_confirm_within_the_grace_queues_the_job_held);

async fn a_users_default_applies_to_jobs_that_do_not_say(db: Db) {
    let Some(app) = spawn_app_with(db, |_| {}).await else {
        return;
    };
    let u = user("du", db);
    let fresh = app.submit(&u, json!({})).await;
    assert_eq!(fresh["preemptible"], false, "off by default");
    let put = app
        .put(
            &format!("/v1/users/{u}"),
            ADMIN,
            json!({"preemptible": true}),
        )
        .await;
    assert_eq!(put.status(), 200);
    let shown: Value = app
        .get(&format!("/v1/users/{u}"), SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(shown["preemptible"], true);
    let inherits = app.submit(&u, json!({})).await;
    assert_eq!(inherits["preemptible"], true, "{inherits}");
    assert_eq!(job(&app, &id_of(&inherits)).await["preemptible"], true);
    let own = app.submit(&u, json!({"preemptible": false})).await;
    assert_eq!(own["preemptible"], false, "the job's own value wins");
    assert_eq!(job(&app, &id_of(&own)).await["preemptible"], false);
    // A batch of several (the two-round-trip way on PostgreSQL) resolves the same.
    let many = futures_util::future::join_all((0..8).map(|i| {
        let body = if i % 2 == 0 {
            json!({})
        } else {
            json!({"preemptible": false})
        };
        app.submit(&u, body)
    }))
    .await;
    for (i, v) in many.iter().enumerate() {
        assert_eq!(v["preemptible"], i % 2 == 0, "{v}");
        assert_eq!(job(&app, &id_of(v)).await["preemptible"], i % 2 == 0);
    }
    // An idempotent retry that says nothing matches whatever the job took.
    let keyed = app
        .submit(&u, json!({"external_id": "k1", "preemptible": true}))
        .await;
    let again = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": u, "entrypoint": "echo hello", "external_id": "k1"}),
        )
        .await;
    assert_eq!(again.status(), 200);
    let other = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": u, "entrypoint": "echo hello", "external_id": "k1", "preemptible": false}),
        )
        .await;
    assert_eq!(other.status(), 422);
    let body: Value = other.json().await.unwrap();
    assert_eq!(body["error"]["details"]["differs"], json!(["preemptible"]));
    assert_eq!(body["error"]["details"]["job_id"], keyed["id"]);
    // Bad values name the field.
    let bad = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": u, "entrypoint": "x", "preemptible": "yes"}),
        )
        .await;
    assert_error(bad, 422, "invalid_field", Some("preemptible")).await;
    let bad = app
        .put(&format!("/v1/users/{u}"), ADMIN, json!({"preemptible": 1}))
        .await;
    assert_error(bad, 422, "invalid_field", Some("preemptible")).await;
    // null puts the user's default back to false.
    let put = app
        .put(
            &format!("/v1/users/{u}"),
            ADMIN,
            json!({"preemptible": null}),
        )
        .await;
    let body: Value = put.json().await.unwrap();
    assert_eq!(body["preemptible"], false);
}
both_databases!(a_users_default_applies_to_jobs_that_do_not_say);

async fn rays_jobs_api_takes_the_preemptible_metadata_key(db: Db) {
    let Some(app) = spawn_app_with(db, |_| {}).await else {
        return;
    };
    let u = user("ru", db);
    for (value, expected) in [("true", true), ("false", false)] {
        let resp = app
            .post(
                "/api/jobs/",
                SUBMITTER,
                json!({"entrypoint": "echo", "metadata": {"fairshare.user": u, "fairshare.preemptible": value}}),
            )
            .await;
        assert_eq!(resp.status(), 200);
        let body: Value = resp.json().await.unwrap();
        let sid = body["submission_id"].as_str().unwrap();
        let ray: Value = app
            .get(&format!("/api/jobs/{sid}"), SUBMITTER)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(ray["fairshare"]["preemptible"], expected, "{ray}");
    }
    let bad = app
        .post(
            "/api/jobs/",
            SUBMITTER,
            json!({"entrypoint": "echo", "metadata": {"fairshare.user": u, "fairshare.preemptible": "yes"}}),
        )
        .await;
    assert_eq!(bad.status(), 422);
    let body: Value = bad.json().await.unwrap();
    assert_eq!(
        body["error"]["details"]["field"], "metadata.fairshare.preemptible",
        "{body}"
    );
}
both_databases!(rays_jobs_api_takes_the_preemptible_metadata_key);
