//! `POST /v1/scheduler/what-if` (issue 14 §3) against the arbiter's real decisions:
//! preview a change, apply it for real through the API, and check that the jobs the
//! fake Ray receives next are the previewed ones, in the previewed order.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::both_databases;
use crate::fake_ray::{self, State};
use crate::helpers::{assert_error, spawn_app, Db, TestApp, ADMIN, SUBMITTER};

async fn app_on(server: &wiremock::MockServer) -> TestApp {
    crate::helpers::app_with_cluster("fake", server.uri(), |s| {
        s.monitor.usage_report_lag = Duration::from_millis(300);
        s.monitor.lost_job_grace = Duration::from_secs(3600);
        // History off: decayed usage would move keys between the preview and the
        // grants (the age term does not: every head ages alike).
        s.scheduler.usage_half_life = Duration::ZERO;
    })
    .await
}

use crate::helpers::until;

async fn what_if(app: &TestApp, body: Value) -> Value {
    let resp = app.post("/v1/scheduler/what-if", ADMIN, body).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    resp.json().await.unwrap()
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|g| g["job_id"].as_str().unwrap().to_string())
        .collect()
}

/// Submits `per_user` 1-CPU jobs for each of `users`, interleaved, and waits until
/// the arbiter sees all of them (the preview without a change lists them all).
async fn fill_queues(app: &TestApp, users: &[&str], per_user: usize) -> Vec<String> {
    let mut all = Vec::new();
    for _ in 0..per_user {
        for u in users {
            all.push(
                app.submit(u, json!({"entrypoint": "sleep 100"})).await["id"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
    }
    let n = all.len();
    until(10, "every job in the arbiter's windows", || async {
        let v = what_if(app, json!({"limit": 1000})).await;
        (v["before"].as_array().unwrap().len() == n).then_some(())
    })
    .await;
    all
}

/// Waits until the fake cluster has received `n` submissions; returns them in order.
async fn submitted(state: &Arc<Mutex<State>>, n: usize) -> Vec<String> {
    until(20, "submissions", || async {
        let s = state.lock().unwrap();
        (s.submitted.len() >= n).then(|| s.submitted.clone())
    })
    .await
}

#[actix_web::test]
async fn a_previewed_weight_change_is_the_order_in_which_jobs_start_once_applied() {
    // 8 CPUs, all taken by another tenant: nothing starts until it frees them.
    let (server, state) = fake_ray::start(8.0, |s| {
        s.foreign_cpu = 8.0;
        s.run_polls = 1_000_000;
    })
    .await;
    let app = app_on(&server).await;
    until(10, "capacity known", || async {
        let v: Value = app
            .get("/v1/scheduler", SUBMITTER)
            .await
            .json()
            .await
            .unwrap();
        (v["clusters"][0]["capacity"]["cpu"] == 8.0).then_some(())
    })
    .await;
    fill_queues(&app, &["alice", "bob"], 4).await;

    let preview = what_if(&app, json!({"users": {"alice": {"weight": 3}}, "limit": 8})).await;
    let before: Vec<Value> = preview["before"].as_array().unwrap().clone();
    let after: Vec<Value> = preview["after"].as_array().unwrap().clone();
    assert_eq!((before.len(), after.len()), (8, 8), "{preview}");
    assert!(
        before
            .iter()
            .chain(&after)
            .all(|g| g["now"] == false && g["cluster"].is_null()),
        "no capacity is free now: {preview}"
    );
    let users = |list: &[Value]| -> Vec<String> {
        list.iter()
            .map(|g| g["user"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        users(&before),
        ["alice", "bob", "alice", "bob", "alice", "bob", "alice", "bob"],
        "equal weights alternate"
    );
    assert_ne!(users(&before), users(&after), "weight 3 changes the order");
    let moved = preview["moved"].as_array().unwrap();
    assert!(!moved.is_empty(), "{preview}");
    for m in moved {
        let sooner = m["user"] == "alice";
        assert_eq!(m["change"], if sooner { "sooner" } else { "later" }, "{m}");
    }
    let alice = &preview["users"].as_array().unwrap()[0];
    assert_eq!(
        (alice["user"].as_str(), alice["before"]["weight"].as_f64()),
        (Some("alice"), Some(1.0))
    );
    assert_eq!(alice["after"]["weight"], 3.0);

    // Nothing changed: alice still weighs 1 and nothing was sent to Ray.
    let a: Value = app
        .get("/v1/users/alice", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(a["weight"], 1.0);
    assert_eq!(state.lock().unwrap().posts, 0);

    // Apply it for real, then free one CPU at a time (no job of ours ends).
    let put = app
        .put("/v1/users/alice", ADMIN, json!({"weight": 3}))
        .await;
    assert_eq!(put.status(), 200);
    for n in 1..=after.len() {
        state.lock().unwrap().foreign_cpu -= 1.0;
        submitted(&state, n).await;
    }
    let got = submitted(&state, after.len()).await;
    assert_eq!(
        got,
        ids(&preview["after"]),
        "the arbiter granted what the preview said"
    );
}

#[actix_web::test]
async fn a_previewed_resume_and_larger_cluster_grant_now_what_the_arbiter_grants() {
    let (server, state) = fake_ray::start(4.0, |s| {
        s.foreign_cpu = 4.0;
        s.run_polls = 1_000_000;
    })
    .await;
    let app = app_on(&server).await;
    until(10, "capacity known", || async {
        let v: Value = app
            .get("/v1/scheduler", SUBMITTER)
            .await
            .json()
            .await
            .unwrap();
        (v["clusters"][0]["capacity"]["cpu"] == 4.0).then_some(())
    })
    .await;
    fill_queues(&app, &["alice", "bob"], 3).await;
    let pause = app.post("/v1/users/bob/pause", ADMIN, json!({})).await;
    assert_eq!(pause.status(), 200);

    // Resume bob and grow the cluster to 7 CPUs: 3 free now.
    let preview = what_if(
        &app,
        json!({"users": {"bob": {"paused": false}}, "clusters": {"fake": {"capacity": {"cpu": 7}}}}),
    )
    .await;
    let now: Vec<&Value> = preview["after"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["now"] == true)
        .collect();
    assert_eq!(now.len(), 3, "{preview}");
    assert!(now.iter().all(|g| g["cluster"] == "fake"));
    assert!(now.iter().any(|g| g["user"] == "bob"), "{preview}");
    assert!(
        preview["before"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["user"] == "alice"),
        "paused bob has no grants today: {preview}"
    );

    let resume = app.post("/v1/users/bob/resume", ADMIN, json!({})).await;
    assert_eq!(resume.status(), 200);
    state.lock().unwrap().total_cpu = 7.0;
    // One cycle grants all three; their queues forward them to Ray concurrently, so
    // Ray's order is not the grant order: compare the sets.
    let mut got = submitted(&state, 3).await;
    let mut expected: Vec<String> = now
        .iter()
        .map(|g| g["job_id"].as_str().unwrap().to_string())
        .collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected, "the arbiter granted what the preview said");
    // And no more than that.
    let polls = state.lock().unwrap().list_polls;
    until(10, "more polls", || async {
        (state.lock().unwrap().list_polls >= polls + 5).then_some(())
    })
    .await;
    assert_eq!(state.lock().unwrap().posts, 3);
}

async fn a_preview_changes_nothing_and_a_bad_change_names_its_field(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    app.submit("alice", json!({})).await;
    until(10, "alice known to the arbiter", || async {
        let resp = app
            .post(
                "/v1/scheduler/what-if",
                ADMIN,
                json!({"users": {"alice": {"weight": 2, "paused": true, "max_running_jobs": null, "max_resources": {"cpu": 2}}}}),
            )
            .await;
        (resp.status() == 200).then_some(())
    })
    .await;
    let v = what_if(&app, json!({"users": {"alice": {"weight": 2}}})).await;
    assert_eq!(v["limit"], 20);
    // No cluster: nothing can be granted either way.
    assert_eq!(v["before"], json!([]));
    assert_eq!(v["after"], json!([]));
    assert_eq!(v["users"][0]["after"]["weight"], 2.0);
    let a: Value = app
        .get("/v1/users/alice", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(a["weight"], 1.0, "the preview changed nothing");
    // An empty body previews no change.
    let empty = app.post_raw("/v1/scheduler/what-if", ADMIN, "").await;
    assert_eq!(empty.status(), 200);

    let path = "/v1/scheduler/what-if";
    for (body, field) in [
        (
            json!({"users": {"alice": {"weight": 0}}}),
            "users.alice.weight",
        ),
        (
            json!({"users": {"alice": {"weight": 2e6}}}),
            "users.alice.weight",
        ),
        (
            json!({"users": {"alice": {"max_running_jobs": 0}}}),
            "users.alice.max_running_jobs",
        ),
        (
            json!({"users": {"alice": {"max_resources": {"cpu": -1}}}}),
            "users.alice.max_resources.cpu",
        ),
        (
            json!({"users": {"alice": {"colour": 1}}}),
            "users.alice.colour",
        ),
        (
            json!({"clusters": {"c": {"capacity": {"cpu": 0.00001}}}}),
            "clusters.c.capacity.cpu",
        ),
        (json!({"limit": 0}), "limit"),
        (json!({"limit": 1001}), "limit"),
        (json!({"limit": 2.5}), "limit"),
        (json!({"change": {}}), "change"),
        (json!({"groups": {"a//b": {}}}), "groups.a//b"),
        (json!({"groups": {"g": {"weight": 0}}}), "groups.g.weight"),
        (
            json!({"groups": {"g": {"max_running_jobs": -1}}}),
            "groups.g.max_running_jobs",
        ),
        (json!({"groups": {"g": {"colour": 1}}}), "groups.g.colour"),
        (
            json!({"users": {"alice": {"group": "a b"}}}),
            "users.alice.group",
        ),
    ] {
        let resp = app.post(path, ADMIN, body.clone()).await;
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert_eq!(status, 422, "{body}: {text}");
        let e: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(e["error"]["details"]["field"], field, "{body}: {text}");
    }
    // A user or cluster the scheduler does not know: 404, as pausing one is (a key
    // that cannot be a user id is 422: tester_findings.rs).
    for body in [
        json!({"users": {"nobody": {"weight": 2}}}),
        json!({"clusters": {"nowhere": {"healthy": true}}}),
        json!({"groups": {"nogroup": {"paused": true}}}),
        json!({"users": {"alice": {"group": "nogroup"}}}),
    ] {
        assert_error(app.post(path, ADMIN, body).await, 404, "not_found", None).await;
    }
    assert_error(
        app.post(path, SUBMITTER, json!({})).await,
        403,
        "forbidden",
        None,
    )
    .await;
    assert_error(app.post_raw(path, ADMIN, "{").await, 400, "bad_json", None).await;
    let get = app.get(path, ADMIN).await;
    assert_eq!(get.status(), 405);
    // A group that exists may be changed in a preview, and alice moved into it.
    let r = app.put("/v1/groups/g", ADMIN, json!({})).await;
    assert!(r.status().is_success(), "{:?}", r.text().await);
    let v = what_if(
        &app,
        json!({"groups": {"g": {"weight": 2, "paused": true, "max_running_jobs": null}},
               "users": {"alice": {"group": "g"}}}),
    )
    .await;
    assert_eq!(v["after"], json!([]));
    app.stop().await;
}
both_databases!(a_preview_changes_nothing_and_a_bad_change_names_its_field);

/// A fresh tester: while recovery loads the queues a preview answered "the database or
/// a dependency is unavailable". It says that recovery is loading (503, Retry-After,
/// `details.reason` = `loading`). Recovery is held on its read of the jobs table by a
/// lock another session takes before the service starts.
#[actix_web::test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
async fn a_preview_while_recovery_loads_says_so() {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let Some(db) = crate::helpers::TestDb::new(Db::Postgres).await else {
        return;
    };
    let conn = crate::jobs::connect(&db.url).await;
    fairshare::store::migrate(&conn).await.unwrap();
    let jobs = vec![crate::helpers::new_job("u", None)];
    for answer in fairshare::store::submit_batch(&conn, jobs, 10).await {
        answer.unwrap();
    }
    // A session of its own, without the service's idle-in-transaction timeout (2 s),
    // which would end the lock on its own.
    let locker = sea_orm::Database::connect(&db.url).await.unwrap();
    let lock = locker.begin().await.unwrap();
    lock.execute_unprepared("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let url = db.url.clone();
    let app = crate::helpers::start_unready(db, crate::helpers::test_settings(&url)).await;
    // Before it leads the preview says "not the leader"; then "loading" until the
    // lock goes.
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let r = app.post("/v1/scheduler/what-if", ADMIN, json!({})).await;
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()["retry-after"], "1");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unavailable", "{body}");
        if body["error"]["details"]["reason"] == "loading" {
            break body;
        }
        assert_eq!(body["error"]["details"]["reason"], "not_leader", "{body}");
        assert!(Instant::now() < deadline, "never loading: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("recovery has not loaded the queues"),
        "{message}"
    );
    lock.rollback().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while app
        .post("/v1/scheduler/what-if", ADMIN, json!({}))
        .await
        .status()
        != 200
    {
        assert!(Instant::now() < deadline, "never ready after the lock went");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    conn.close().await.ok();
    locker.close().await.ok();
    app.stop().await;
}

/// With its only cluster unhealthy at capacity 0, `GET /v1/scheduler` lists no next
/// user (no healthy cluster can serve one), and a preview that lists no grant says
/// why, before and with the change (issue 43 §8: `"before": [], "after": []` said
/// nothing, and `next_users` listed the user).
#[actix_web::test]
async fn with_no_cluster_to_serve_nobody_is_next_and_an_empty_preview_says_why() {
    // Nothing listens on a port just released: the cluster never answers.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let app = crate::helpers::app_with_cluster("gone", uri, |_| {}).await;
    app.submit("nx", json!({"entrypoint": "echo"})).await;
    let view = until(
        10,
        "a cycle with the job queued and the cluster unhealthy",
        || async {
            let v = app.get_json("/v1/scheduler", ADMIN).await;
            let unhealthy = v["clusters"][0]["healthy"] == json!(false);
            (unhealthy && v["queued_jobs"] == json!(1) && v["cycles"].as_u64() > Some(0))
                .then_some(v)
        },
    )
    .await;
    assert_eq!(view["next_users"], json!([]), "{view}");

    let v = what_if(&app, json!({})).await;
    assert_eq!(v["before"], json!([]), "{v}");
    let why = v["before_reason"].as_str().unwrap_or_default();
    assert!(why.contains("no cluster is healthy"), "{v}");
    // Healthy but still of no capacity: said so.
    let v = what_if(&app, json!({"clusters": {"gone": {"healthy": true}}})).await;
    let why = v["after_reason"].as_str().unwrap_or_default();
    assert!(why.contains("no capacity"), "{v}");
    // Healthy with room: the job is granted, no reason.
    let v = what_if(
        &app,
        json!({"clusters": {"gone": {"healthy": true, "capacity": {"cpu": 2}}}}),
    )
    .await;
    assert_eq!(v["after"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["after_reason"], json!(null), "{v}");
    // Paused, it is held back: said so.
    let v = what_if(
        &app,
        json!({"users": {"nx": {"paused": true}},
               "clusters": {"gone": {"healthy": true, "capacity": {"cpu": 2}}}}),
    )
    .await;
    let why = v["after_reason"].as_str().unwrap_or_default();
    assert!(why.contains("paused"), "{v}");
}
