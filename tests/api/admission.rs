//! Admission for runners fairshare does not drive (issue 30, DESIGN §3 "Admission"): a
//! pool of cluster slots, jobs naming it admitted by fair share, and the runner's
//! reports (`started`, `finished`, `release`, `heartbeat`), the lease, a cancel.

use std::collections::BTreeMap;
use std::time::Duration;

use fairshare::config::{PoolSettings, Settings};
use fairshare::store::{self, NewJob};
use serde_json::{json, Value};

use crate::helpers::{
    assert_error, spawn_app_with, start_on, test_settings, until, Db, TestApp, TestDb, ADMIN,
    SUBMITTER,
};

/// A pool `gw` of `slots` cluster slots (and nothing else).
fn with_pool(s: &mut Settings, slots: f64) {
    s.pools = vec![PoolSettings {
        name: "gw".into(),
        capacity: BTreeMap::from([("clusters".to_string(), slots)]),
    }];
}

/// What a job for the pool asks: one cluster slot, no cores.
fn slot() -> Value {
    json!({"cpu": 0, "custom": {"clusters": 1}})
}

fn pool_job(user: &str, n: usize) -> NewJob {
    NewJob {
        entrypoint: format!("run {user} {n}"),
        cpu: 0.0,
        custom: BTreeMap::from([("clusters".to_string(), 1.0)]),
        pool: Some("gw".into()),
        ..crate::helpers::new_job(user, None)
    }
}

/// Submits a one-slot job of `user` for pool `gw` and waits until it is ADMITTED; its id.
async fn admitted_job(app: &TestApp, user: &str) -> String {
    let id = app
        .submit(user, json!({"pool": "gw", "resources": slot()}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    until(15, "the job admitted", || async {
        (job(app, &id).await["status"] == "ADMITTED").then_some(())
    })
    .await;
    id
}

async fn job(app: &TestApp, id: &str) -> Value {
    app.get_json(&format!("/v1/jobs/{id}"), SUBMITTER).await
}

/// The ids of the pool's jobs in `status`, oldest first.
async fn in_status(app: &TestApp, status: &str) -> Vec<String> {
    let page = app
        .get_json(&format!("/v1/jobs?status={status}&pool=gw"), SUBMITTER)
        .await;
    let mut jobs: Vec<(String, String)> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["submitted_at"].as_str().unwrap().to_string(),
                j["id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    jobs.sort();
    jobs.into_iter().map(|(_, id)| id).collect()
}

async fn report(app: &TestApp, id: &str, what: &str, body: Value) -> reqwest::Response {
    app.post(&format!("/v1/jobs/{id}/{what}"), SUBMITTER, body)
        .await
}

async fn report_ok(app: &TestApp, id: &str, what: &str, body: Value) -> Value {
    let resp = report(app, id, what, body).await;
    assert_eq!(resp.status(), 200, "{what} {id}: {:?}", resp.text().await);
    resp.json().await.unwrap()
}

/// The job's timeline (`GET /v1/jobs/{id}/events`) details.
async fn timeline(app: &TestApp, id: &str) -> Vec<String> {
    let v = app
        .get_json(&format!("/v1/jobs/{id}/events"), SUBMITTER)
        .await;
    v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["detail"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Waits until exactly the jobs `ids` are ADMITTED in pool `gw` (and no others).
async fn admitted_are(app: &TestApp, ids: &[&str], what: &str) {
    let mut want: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    want.sort();
    until(15, what, || async {
        let mut got = in_status(app, "ADMITTED").await;
        got.sort();
        (got == want).then_some(())
    })
    .await;
}

/// Two users with three jobs each for a pool of two slots (the jobs are in the
/// database before the service starts, so the first cycle sees all of them): one job
/// of each user is ADMITTED, never sent to Ray; the runner's reports move them on,
/// a finish frees a slot for the next job by fair share, a release puts a job back at
/// its place, a duplicate finished is 200, a conflicting one 409; a cancel of a
/// RUNNING pool job asks the runner (`job.stop_requested`) and ends STOPPED when it
/// reports finished.
async fn pool_jobs_are_admitted_by_fair_share_and_follow_their_runners_reports(which: Db) {
    let Some(db) = TestDb::new(which).await else {
        return;
    };
    let conn = sea_orm::Database::connect(&db.url).await.unwrap();
    store::migrate(&conn).await.unwrap();
    let mut ids: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    // alice's three first: first come, first served would admit two of hers.
    for user in ["alice", "bob"] {
        for n in 0..3 {
            let j = match store::submit_job(&conn, pool_job(user, n), 100)
                .await
                .unwrap()
            {
                store::Intake::Created(j) => j,
                other => panic!("{other:?}"),
            };
            ids.entry(user).or_default().push(j.id.to_string());
        }
    }
    conn.close().await.unwrap();
    let mut settings = test_settings(&db.url);
    with_pool(&mut settings, 2.0);
    let app = start_on(db, settings).await;
    let (a, b) = (ids["alice"].clone(), ids["bob"].clone());

    // One per user: fair share over the pool's two slots.
    admitted_are(&app, &[&a[0], &b[0]], "one job of each user admitted").await;
    assert_eq!(in_status(&app, "QUEUED").await.len(), 4);
    let a0 = job(&app, &a[0]).await;
    assert_eq!(a0["pool"], "gw");
    assert_eq!(a0["cluster"], "gw");
    assert_eq!(a0["attempt"], 1);
    assert!(a0["lease_expires_at"].is_string(), "{a0}");
    assert!(
        timeline(&app, &a[0])
            .await
            .iter()
            .any(|d| d.contains("admitted to pool gw (attempt 1)")),
        "the admission is in the timeline"
    );

    // started → RUNNING; the same report again is 200 and renews the lease.
    let v = report_ok(&app, &a[0], "started", json!({})).await;
    assert_eq!(v["status"], "RUNNING");
    assert!(v["started_at"].is_string());
    let v = report_ok(&app, &a[0], "started", json!({"attempt": 1})).await;
    assert_eq!(v["status"], "RUNNING");
    let v = report_ok(&app, &a[0], "heartbeat", json!({})).await;
    assert_eq!(v["status"], "RUNNING");
    let events_before = timeline(&app, &a[0]).await.len();

    // finished SUCCEEDED frees the slot: alice holds none now, bob one, so alice's
    // next job is admitted (not bob's, which is older than none of hers... by share).
    let v = report_ok(
        &app,
        &a[0],
        "finished",
        json!({"status": "SUCCEEDED", "message": "cluster deleted"}),
    )
    .await;
    assert_eq!(v["status"], "SUCCEEDED");
    assert_eq!(v["message"], "cluster deleted");
    assert_eq!(
        timeline(&app, &a[0]).await.len(),
        events_before + 1,
        "started again and the heartbeat wrote no transition"
    );
    admitted_are(
        &app,
        &[&a[1], &b[0]],
        "the freed slot goes to alice's next job",
    )
    .await;
    // A retried finished is 200 and changes nothing; a conflicting one is 409.
    let v = report_ok(&app, &a[0], "finished", json!({"status": "SUCCEEDED"})).await;
    assert_eq!(v["status"], "SUCCEEDED");
    assert_eq!(v["message"], "cluster deleted");
    let resp = report(&app, &a[0], "finished", json!({"status": "FAILED"})).await;
    assert_eq!(resp.status(), 409);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["details"]["status"], "SUCCEEDED", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("SUCCEEDED"),
        "{body}"
    );

    // release: alice's job goes back to its place as attempt 2; alice still holds
    // less than bob, so the slot goes to her head, which is that job again.
    let v = report_ok(&app, &a[1], "release", json!({"attempt": 1})).await;
    assert!(v["status"] == "QUEUED" || v["status"] == "ADMITTED", "{v}");
    assert_eq!(v["attempt"], 2);
    admitted_are(
        &app,
        &[&a[1], &b[0]],
        "the released slot goes back by fair share",
    )
    .await;
    assert_eq!(job(&app, &a[1]).await["attempt"], 2);
    assert!(timeline(&app, &a[1])
        .await
        .iter()
        .any(|d| d.contains("released it without running it")));
    // The release repeated (of attempt 1) is 200 and changes nothing; a finished of
    // attempt 1 is 409.
    let v = report_ok(&app, &a[1], "release", json!({"attempt": 1})).await;
    assert_eq!(v["status"], "ADMITTED");
    assert_eq!(v["attempt"], 2);
    let resp = report(
        &app,
        &a[1],
        "finished",
        json!({"status": "SUCCEEDED", "attempt": 1}),
    )
    .await;
    assert_eq!(resp.status(), 409);
    assert_eq!(job(&app, &a[1]).await["status"], "ADMITTED");
    // started of a job not admitted (still QUEUED) is 409 naming QUEUED.
    let resp = report(&app, &b[2], "started", json!({})).await;
    assert_eq!(resp.status(), 409);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["details"]["status"], "QUEUED", "{body}");

    // Cancel of a RUNNING pool job: 202, the runner is asked (job.stop_requested on
    // the event stream), and it ends STOPPED when the runner reports finished.
    report_ok(&app, &b[0], "started", json!({})).await;
    let resp = app
        .post(&format!("/v1/jobs/{}/cancel", b[0]), SUBMITTER, json!({}))
        .await;
    assert_eq!(resp.status(), 202);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["status"], "RUNNING");
    assert_eq!(v["stop_requested"], true);
    assert!(timeline(&app, &b[0])
        .await
        .iter()
        .any(|d| d.starts_with("stop_requested: ")));
    let frames = sse_until(&app, "event: job.stop_requested").await;
    assert!(frames.contains(&b[0]), "{frames}");
    let v = report_ok(
        &app,
        &b[0],
        "finished",
        json!({"status": "STOPPED", "message": "cluster deleted on request"}),
    )
    .await;
    assert_eq!(v["status"], "STOPPED");
    assert_eq!(v["stop_requested"], false);
    // Its slot goes to bob's next job (bob holds none, alice one).
    admitted_are(&app, &[&a[1], &b[1]], "the stopped job's slot goes to bob").await;

    // A report on a job that does not name a pool is 409.
    let plain = app.submit("carol", json!({})).await;
    let resp = report(&app, plain["id"].as_str().unwrap(), "started", json!({})).await;
    assert_eq!(resp.status(), 409);
    // Bodies are checked.
    let resp = report(&app, &a[1], "finished", json!({"status": "DONE"})).await;
    assert_error(resp, 422, "invalid_field", Some("status")).await;
    let resp = report(&app, &a[1], "heartbeat", json!({"attempt": 0.5})).await;
    assert_error(resp, 422, "invalid_field", Some("attempt")).await;
    // Every attempt that is not a whole number from 1 to 2^31 - 1, as written, is one
    // 422 with one message (found by a tester: three messages, and
    // 1.00000000000000001 taken as 1).
    for bad in [
        "0",
        "-1",
        "2.5",
        "\"1\"",
        "true",
        "1e400",
        "2147483648",
        "99999999999999999999",
        "1.00000000000000001",
    ] {
        let resp = app
            .post_raw(
                &format!("/v1/jobs/{}/heartbeat", a[1]),
                SUBMITTER,
                format!(r#"{{"attempt": {bad}}}"#),
            )
            .await;
        assert_eq!(resp.status(), 422, "attempt {bad}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(
            body["error"]["details"]["field"], "attempt",
            "{bad}: {body}"
        );
        // A string, a boolean and a number beyond a double get the JSON layer's own
        // words (still 422 naming `attempt`).
        if !matches!(bad, "\"1\"" | "true" | "1e400") {
            assert_eq!(
                body["error"]["details"]["reason"], "must be a whole number from 1 to 2147483647",
                "{bad}: {body}"
            );
        }
    }
    // A whole number written with a decimal point is one (as Python clients send).
    let v = report_ok(&app, &a[1], "heartbeat", json!({"attempt": 2.0})).await;
    assert_eq!(v["status"], "ADMITTED");
    app.stop().await;
}
crate::both_databases!(pool_jobs_are_admitted_by_fair_share_and_follow_their_runners_reports);

/// Reads `GET /v1/events` from the start until `needle` shows up; the text read.
async fn sse_until(app: &TestApp, needle: &str) -> String {
    sse_query_until(app, "", SUBMITTER, needle).await
}

/// Reads `GET /v1/events{query}` with `token` from the start until `needle` shows up.
async fn sse_query_until(app: &TestApp, query: &str, token: &str, needle: &str) -> String {
    let mut resp = app
        .client
        .get(app.url(&format!("/v1/events{query}")))
        .bearer_auth(token)
        .header("Last-Event-ID", "0")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut text = String::new();
    while !text.contains(needle) {
        match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(bytes))) => text.push_str(&String::from_utf8_lossy(&bytes)),
            _ => panic!("no {needle:?} on the event stream: {text}"),
        }
    }
    text
}

/// A runner that stops reporting loses the job: its lease lapses, the capacity is
/// freed and the job goes back to the queue as attempt 2 with a timeline row saying
/// why; the runner's late finished is then 409 and changes nothing.
async fn a_lapsed_lease_requeues_the_job_and_a_late_finished_is_refused(which: Db) {
    let Some(app) = spawn_app_with(which, |s| {
        with_pool(s, 1.0);
        s.admission.lease = Duration::from_secs(1);
    })
    .await
    else {
        return;
    };
    let id = admitted_job(&app, "dave").await;
    report_ok(&app, &id, "started", json!({"attempt": 1})).await;
    // Paused, so that once requeued it stays QUEUED (not admitted again at once).
    let resp = app.post("/v1/users/dave/pause", ADMIN, json!({})).await;
    assert_eq!(resp.status(), 200);
    let requeued = until(15, "the lease to lapse", || async {
        let v = job(&app, &id).await;
        (v["status"] == "QUEUED").then_some(v)
    })
    .await;
    assert_eq!(requeued["attempt"], 2);
    assert!(requeued["cluster"].is_null());
    assert!(requeued["started_at"].is_null());
    assert!(
        requeued["message"]
            .as_str()
            .unwrap()
            .contains("lease lapsed"),
        "{requeued}"
    );
    assert!(timeline(&app, &id)
        .await
        .iter()
        .any(|d| d.contains("lease lapsed") && d.contains("attempt 2")));
    // The runner comes back late: 409, nothing changes (with or without its attempt).
    for body in [
        json!({"status": "SUCCEEDED"}),
        json!({"status": "SUCCEEDED", "attempt": 1}),
    ] {
        let resp = report(&app, &id, "finished", body).await;
        assert_eq!(resp.status(), 409);
        let b: Value = resp.json().await.unwrap();
        assert_eq!(b["error"]["details"]["status"], "QUEUED", "{b}");
        assert_eq!(b["error"]["details"]["attempt"], 2, "{b}");
    }
    // Its logs are its runner's, never Ray's: 409 saying so.
    let resp = app.get(&format!("/v1/jobs/{id}/logs"), SUBMITTER).await;
    assert_eq!(resp.status(), 409);
    let b: Value = resp.json().await.unwrap();
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("its runner runs it and has its logs"),
        "{b}"
    );
    let after = job(&app, &id).await;
    assert_eq!(after["status"], "QUEUED");
    assert_eq!(after["attempt"], 2);
    assert_eq!(after["message"], requeued["message"]);
    // Resumed: admitted again as attempt 2.
    let resp = app.post("/v1/users/dave/resume", ADMIN, json!({})).await;
    assert_eq!(resp.status(), 200);
    until(15, "the job admitted again", || async {
        let v = job(&app, &id).await;
        (v["status"] == "ADMITTED" && v["attempt"] == 2).then_some(())
    })
    .await;
    app.stop().await;
}
crate::both_databases!(a_lapsed_lease_requeues_the_job_and_a_late_finished_is_refused);

/// A token confined to pool `gw` (a runner's).
const RUNNER: &str = "runner-token-gw";

/// Pool `gw` of 2 slots and the [`RUNNER`] token confined to it.
fn with_pool_and_runner(s: &mut Settings) {
    with_pool(s, 2.0);
    s.auth.tokens.push(fairshare::config::TokenSettings {
        name: "gw runner".into(),
        token: RUNNER.into(),
        role: fairshare::config::Role::Submitter,
        user: None,
        pool: Some("gw".into()),
    });
}

/// `pool` is checked at submit: a pool that is not configured is 422 naming `pool`, a
/// job larger than the pool 422 naming the resource; on Ray's Jobs API the pool is the
/// metadata key `fairshare.pool`. A token confined to the pool sees, submits and
/// reports on that pool's jobs only.
async fn a_job_for_a_pool_is_checked_against_the_pools_configuration(which: Db) {
    let Some(app) = spawn_app_with(which, with_pool_and_runner).await else {
        return;
    };
    let resp = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "erin", "entrypoint": "x", "pool": "nope", "resources": slot()}),
        )
        .await;
    assert_error(resp, 422, "invalid_field", Some("pool")).await;
    let resp = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "erin", "entrypoint": "x", "pool": "gw",
                   "resources": {"cpu": 0, "custom": {"clusters": 3}}}),
        )
        .await;
    assert_error(
        resp,
        422,
        "invalid_field",
        Some("resources.custom.clusters"),
    )
    .await;
    // The default cpu of 1: the pool counts no cores.
    let resp = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "erin", "entrypoint": "x", "pool": "gw",
                   "resources": {"custom": {"clusters": 1}}}),
        )
        .await;
    assert_error(resp, 422, "invalid_field", Some("resources.cpu")).await;
    let ok = app
        .submit("erin", json!({"pool": "gw", "resources": slot()}))
        .await;
    assert_eq!(ok["pool"], "gw");
    // The pool is part of the payload an idempotent retry is compared with.
    let keyed = json!({"user": "erin", "entrypoint": "x", "external_id": "k1",
                       "resources": slot(), "pool": "gw"});
    let resp = app.post("/v1/jobs", SUBMITTER, keyed.clone()).await;
    assert_eq!(resp.status(), 201);
    let resp = app.post("/v1/jobs", SUBMITTER, keyed.clone()).await;
    assert_eq!(resp.status(), 200);
    let mut elsewhere = keyed.clone();
    elsewhere["pool"] = Value::Null;
    let resp = app.post("/v1/jobs", SUBMITTER, elsewhere).await;
    assert_eq!(resp.status(), 422);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "idempotency_key_reused", "{body}");
    assert_eq!(
        body["error"]["details"]["differs"],
        json!(["pool"]),
        "{body}"
    );
    // Ray's Jobs API: the metadata key.
    let resp = app
        .post(
            "/api/jobs/",
            SUBMITTER,
            json!({"entrypoint": "x", "entrypoint_num_cpus": 0,
                   "entrypoint_resources": {"clusters": 1},
                   "metadata": {"fairshare.user": "erin", "fairshare.pool": "gw"}}),
        )
        .await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let page = app.get_json("/v1/jobs?user=erin&pool=gw", SUBMITTER).await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 3, "{page}");
    let resp = app
        .post(
            "/api/jobs/",
            SUBMITTER,
            json!({"entrypoint": "x", "entrypoint_num_cpus": 0,
                   "entrypoint_resources": {"clusters": 1},
                   "metadata": {"fairshare.user": "erin", "fairshare.pool": "nope"}}),
        )
        .await;
    assert!(resp.status().is_client_error(), "{}", resp.status());
    let text = resp.text().await.unwrap();
    assert!(text.contains("metadata.fairshare.pool"), "{text}");

    // The runner's token: the pool's jobs only.
    let plain = app.submit("erin", json!({})).await;
    let plain_id = plain["id"].as_str().unwrap();
    let resp = app.get(&format!("/v1/jobs/{plain_id}"), RUNNER).await;
    assert_eq!(resp.status(), 404);
    for what in ["started", "cancel"] {
        let resp = app
            .post(&format!("/v1/jobs/{plain_id}/{what}"), RUNNER, json!({}))
            .await;
        assert_eq!(resp.status(), 404, "{what}");
    }
    let mine = app.get_json("/v1/jobs?user=erin", RUNNER).await;
    assert_eq!(mine["jobs"].as_array().unwrap().len(), 3, "{mine}");
    let resp = app
        .post(
            "/v1/jobs",
            RUNNER,
            json!({"user": "erin", "entrypoint": "x"}),
        )
        .await;
    assert_error(resp, 422, "invalid_field", Some("pool")).await;
    let id = ok["id"].as_str().unwrap();
    until(15, "the job admitted", || async {
        (job(&app, id).await["status"] == "ADMITTED").then_some(())
    })
    .await;
    let resp = app
        .post(&format!("/v1/jobs/{id}/started"), RUNNER, json!({}))
        .await;
    assert_eq!(resp.status(), 200);
    app.stop().await;
}
crate::both_databases!(a_job_for_a_pool_is_checked_against_the_pools_configuration);

/// A pool's runner reads its pool's events only: every event names its job's pool
/// (`null` for a job run on Ray), `?pool=` keeps that pool's, and a token confined to
/// a pool gets its pool's whether it names it or not (another pool is 422 naming
/// `pool`, as on `GET /v1/jobs`).
async fn a_pools_runner_reads_only_its_pools_events(which: Db) {
    let Some(app) = spawn_app_with(which, with_pool_and_runner).await else {
        return;
    };
    let plain = app.submit("erin", json!({})).await;
    let plain_id = plain["id"].as_str().unwrap().to_string();
    let pooled = app
        .submit("erin", json!({"pool": "gw", "resources": slot()}))
        .await;
    let id = pooled["id"].as_str().unwrap().to_string();
    // Unfiltered, both jobs' events come, each naming its pool.
    let all = sse_query_until(&app, "", SUBMITTER, r#""to":"ADMITTED""#).await;
    assert!(all.contains(&plain_id), "{all}");
    assert!(all.contains(r#""pool":null"#), "{all}");
    assert!(all.contains(r#""pool":"gw""#), "{all}");
    // Filtered, only the pool job's: its admission is the stream's only ADMITTED.
    for (query, token) in [("?pool=gw", SUBMITTER), ("", RUNNER), ("?pool=gw", RUNNER)] {
        let text = sse_query_until(&app, query, token, r#""to":"ADMITTED""#).await;
        assert!(text.contains(&id), "{query} with {token}: {text}");
        assert!(!text.contains(&plain_id), "{query} with {token}: {text}");
        assert!(
            !text.contains(r#""pool":null"#),
            "{query} with {token}: {text}"
        );
    }
    for (query, token) in [("?pool=other", RUNNER), ("?pool=", SUBMITTER)] {
        let resp = app
            .client
            .get(app.url(&format!("/v1/events{query}")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_error(resp, 422, "invalid_field", Some("pool")).await;
    }
    app.stop().await;
}
crate::both_databases!(a_pools_runner_reads_only_its_pools_events);

/// Preemption as quick as a test wants it, on a pool of 2 slots: after 1 s, no
/// minimum run time or budget limit, `grace_s` for the runner to end a preempted job.
fn quick_preemption(s: &mut Settings, grace_s: u64) {
    with_pool(s, 2.0);
    s.preemption.after = Some(Duration::from_secs(1));
    s.preemption.min_runtime = Duration::ZERO;
    s.preemption.max_per_job = 2;
    s.preemption.budget = 1.0;
    s.preemption.interval = Duration::from_secs(1);
    s.preemption.grace = Duration::from_secs(grace_s);
}

/// Alice's two preemptible pool jobs run (started); bob's waits. Returns alice's ids,
/// bob's id and the one of alice's that the preemption picked (its `stop_requested`
/// set, its timeline saying "preempted for job <bob's>").
async fn preempt_one_of_alices(app: &TestApp) -> (Vec<String>, String, String) {
    let mut alice = Vec::new();
    for _ in 0..2 {
        let j = app
            .submit(
                "alice",
                json!({"pool": "gw", "resources": slot(), "preemptible": true}),
            )
            .await;
        alice.push(j["id"].as_str().unwrap().to_string());
    }
    for id in &alice {
        until(15, "alice's job admitted", || async {
            (job(app, id).await["status"] == "ADMITTED").then_some(())
        })
        .await;
        report_ok(app, id, "started", json!({"attempt": 1})).await;
    }
    let bob = app
        .submit("bob", json!({"pool": "gw", "resources": slot()}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let victim = until(20, "one of alice's jobs preempted", || async {
        for id in &alice {
            let v = job(app, id).await;
            if v["stop_requested"] == true {
                return Some(id.clone());
            }
        }
        None
    })
    .await;
    let v = job(app, &victim).await;
    assert_eq!(
        (v["status"].as_str(), v["attempt"].as_i64()),
        (Some("RUNNING"), Some(1)),
        "{v}"
    );
    assert!(timeline(app, &victim)
        .await
        .iter()
        .any(|d| d.starts_with(&format!("preempted for job {bob} of user bob"))));
    assert_eq!(job(app, &bob).await["status"], "QUEUED");
    (alice, bob, victim)
}

/// A preempted pool job (issue 30, "Cancel and preemption"): its runner is asked to stop
/// it (`stop_requested`, SSE `job.preempted`, on the pool's stream), and when it reports
/// `finished` STOPPED the job goes back to the queue as attempt 2, preempted once, and
/// bob's job is admitted to the slot. Its runner's late reports of attempt 1 are 409.
async fn a_preempted_pool_job_is_stopped_by_its_runner_and_queued_again(which: Db) {
    let Some(app) = spawn_app_with(which, |s| quick_preemption(s, 600)).await else {
        return;
    };
    let (_, bob, victim) = preempt_one_of_alices(&app).await;
    let text = sse_query_until(&app, "?pool=gw", SUBMITTER, "event: job.preempted").await;
    assert!(text.contains(&victim), "{text}");
    // The runner's heartbeat answer says so too.
    let v = report_ok(&app, &victim, "heartbeat", json!({"attempt": 1})).await;
    assert_eq!(v["stop_requested"], true, "{v}");
    let v = report_ok(
        &app,
        &victim,
        "finished",
        json!({"status": "STOPPED", "message": "cluster deleted", "attempt": 1}),
    )
    .await;
    assert_eq!(v["status"], "QUEUED", "{v}");
    assert_eq!(
        (v["attempt"].as_i64(), v["preemptions"].as_i64()),
        (Some(2), Some(1)),
        "{v}"
    );
    assert_eq!(v["stop_requested"], false, "{v}");
    assert!(v["lease_expires_at"].is_null(), "{v}");
    until(15, "bob's job admitted to the freed slot", || async {
        (job(&app, &bob).await["status"] == "ADMITTED").then_some(())
    })
    .await;
    // Attempt 1 is over: a retry of its finished is 200 only as the same report of the
    // same attempt; another report of it is 409.
    let resp = report(&app, &victim, "heartbeat", json!({"attempt": 1})).await;
    assert_eq!(resp.status(), 409);
    app.stop().await;
}
crate::both_databases!(a_preempted_pool_job_is_stopped_by_its_runner_and_queued_again);

/// A runner that does not end a preempted job within `preemption.grace` loses it: the
/// job goes back to the queue as attempt 2 (the timeline says the grace passed), and
/// that runner's later reports of attempt 1 are refused.
async fn a_preempted_pool_job_whose_runner_lets_the_grace_pass_is_queued_again(which: Db) {
    let Some(app) = spawn_app_with(which, |s| quick_preemption(s, 1)).await else {
        return;
    };
    let (_, _, victim) = preempt_one_of_alices(&app).await;
    // The runner renews its lease but never stops the job.
    let back = until(20, "the preempted job queued again", || async {
        let _ = report(&app, &victim, "heartbeat", json!({"attempt": 1})).await;
        let v = job(&app, &victim).await;
        (v["attempt"] == 2).then_some(v)
    })
    .await;
    assert_eq!(back["preemptions"], 1, "{back}");
    assert!(timeline(&app, &victim)
        .await
        .iter()
        .any(|d| d.contains("preemption.grace")));
    let resp = report(
        &app,
        &victim,
        "finished",
        json!({"status": "SUCCEEDED", "attempt": 1}),
    )
    .await;
    assert_eq!(resp.status(), 409);
    app.stop().await;
}
crate::both_databases!(a_preempted_pool_job_whose_runner_lets_the_grace_pass_is_queued_again);

/// `GET /v1/scheduler` tells a pool from a Ray cluster (`kind`): the pool's figures
/// are this service's own (no report, no other tenant: `used_reported`, `unreported`
/// and `used_by_others` 0, free = capacity − outstanding) and it counts its ADMITTED
/// and RUNNING jobs; a Ray cluster has no such counts.
async fn the_scheduler_view_marks_a_pool_and_counts_its_admitted_and_running_jobs(which: Db) {
    let (ray, _state) = crate::fake_ray::start(8.0, |_| {}).await;
    let Some(app) = spawn_app_with(which, |s| {
        with_pool(s, 2.0);
        s.clusters = vec![fairshare::config::ClusterSettings {
            name: "ray1".into(),
            address: ray.uri(),
            ..Default::default()
        }];
        s.monitor.poll_interval = Duration::from_millis(100);
    })
    .await
    else {
        return;
    };
    let entry = |v: &Value, name: &str| -> Value {
        v["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {v}"))
    };
    // Before any job: the pool is there, empty, with zero counts.
    let v = until(15, "the Ray cluster to report", || async {
        let v = app.get_json("/v1/scheduler", SUBMITTER).await;
        (entry(&v, "ray1")["healthy"] == true).then_some(v)
    })
    .await;
    let names: Vec<&str> = v["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["gw", "ray1"], "name order");
    let ray1 = entry(&v, "ray1");
    assert_eq!(ray1["kind"], "ray", "{ray1}");
    assert!(ray1.get("admitted_jobs").is_none(), "{ray1}");
    assert!(ray1.get("running_jobs").is_none(), "{ray1}");
    let gw = entry(&v, "gw");
    assert_eq!(gw["kind"], "pool", "{gw}");
    assert_eq!(gw["healthy"], true);
    assert_eq!(gw["capacity"]["custom"]["clusters"], 2.0, "{gw}");
    assert_eq!(gw["admitted_jobs"], 0, "{gw}");
    assert_eq!(gw["running_jobs"], 0, "{gw}");

    // Three jobs for two slots: two admitted, one waits; one reported started.
    let mut ids = Vec::new();
    for user in ["alice", "bob", "carol"] {
        let j = app
            .submit(user, json!({"pool": "gw", "resources": slot()}))
            .await;
        ids.push(j["id"].as_str().unwrap().to_string());
    }
    let admitted = until(15, "two jobs admitted", || async {
        let got = in_status(&app, "ADMITTED").await;
        (got.len() == 2).then_some(got)
    })
    .await;
    report_ok(&app, &admitted[0], "started", json!({})).await;
    let gw = until(15, "one admitted and one running in the view", || async {
        let gw = entry(&app.get_json("/v1/scheduler", SUBMITTER).await, "gw");
        (gw["admitted_jobs"] == 1 && gw["running_jobs"] == 1).then_some(gw)
    })
    .await;
    assert_eq!(gw["kind"], "pool");
    assert_eq!(gw["outstanding"]["custom"]["clusters"], 2.0, "{gw}");
    assert!(
        gw["free"]["custom"].get("clusters").is_none(),
        "no slot free: {gw}"
    );
    for figure in ["used_reported", "unreported", "used_by_others"] {
        assert_eq!(
            gw[figure],
            json!({"cpu": 0.0, "gpu": 0.0, "memory_bytes": 0}),
            "{figure} of a pool: {gw}"
        );
    }
    // Ray never has a pool job's logs: 409 saying its runner has them (not that Ray
    // lost them).
    let resp = app
        .get(&format!("/v1/jobs/{}/logs", admitted[0]), SUBMITTER)
        .await;
    assert_eq!(resp.status(), 409);
    let body: Value = resp.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("pool gw: its runner"), "{body}");
    // The Ray cluster's counts stay absent; its figures are Ray's.
    let v = app.get_json("/v1/scheduler", SUBMITTER).await;
    assert_eq!(entry(&v, "ray1")["kind"], "ray");
    assert_eq!(entry(&v, "ray1")["capacity"]["cpu"], 8.0);

    // The running job finishes: its slot goes to the waiting job (admitted 2, running 0).
    report_ok(
        &app,
        &admitted[0],
        "finished",
        json!({"status": "SUCCEEDED"}),
    )
    .await;
    until(15, "the freed slot admitted again", || async {
        let gw = entry(&app.get_json("/v1/scheduler", SUBMITTER).await, "gw");
        (gw["admitted_jobs"] == 2 && gw["running_jobs"] == 0).then_some(())
    })
    .await;
    app.stop().await;
}
crate::both_databases!(the_scheduler_view_marks_a_pool_and_counts_its_admitted_and_running_jobs);

/// An outage of the service longer than the lease does not take a healthy runner's
/// job (found by a tester: a 5-s restart with a 3-s lease failed it): no runner can
/// report while no replica leads, so the lease is counted again from the moment one
/// leads. The job stays RUNNING through the first lease after the restart, its
/// runner's next heartbeat keeps it, and a runner that stays silent loses it then.
async fn an_outage_longer_than_the_lease_does_not_take_a_healthy_runners_job(which: Db) {
    use sea_orm::sea_query::Expr;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let lease = Duration::from_secs(2);
    let settings = |s: &mut Settings| {
        with_pool(s, 2.0);
        s.admission.lease = lease;
    };
    // Before the outage a long lease, so that nothing lapses while the service stops
    // (its scheduler runs until the server has shut down).
    let Some(app) = spawn_app_with(which, |s| with_pool(s, 2.0)).await else {
        return;
    };
    let id = admitted_job(&app, "erin").await;
    report_ok(&app, &id, "started", json!({"attempt": 1})).await;
    let db = app.stop().await;
    // The outage: the lease ran out while the service was down (moved to the past
    // rather than waited for).
    let conn = sea_orm::Database::connect(&db.url).await.unwrap();
    let past = chrono::Utc::now() - chrono::Duration::seconds(60);
    entity::job::Entity::update_many()
        .col_expr(entity::job::Column::LeaseExpiresAt, Expr::value(past))
        .filter(entity::job::Column::Id.eq(uuid::Uuid::parse_str(&id).unwrap()))
        .exec(&conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let mut s = test_settings(&db.url);
    settings(&mut s);
    let restarted = std::time::Instant::now();
    let app = start_on(db, s).await;
    // Through most of the first lease after the restart, with no report at all: the
    // lease check (every half second here) leaves it alone.
    while restarted.elapsed() < lease * 3 / 4 {
        let v = job(&app, &id).await;
        assert_eq!(
            (v["status"].as_str(), v["attempt"].as_i64()),
            (Some("RUNNING"), Some(1)),
            "{v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The runner reaches the service again: its heartbeat renews the lease.
    let v = report_ok(&app, &id, "heartbeat", json!({"attempt": 1})).await;
    assert_eq!(v["status"], "RUNNING");
    // Silent from now on: it loses the job within a lease and a check.
    until(15, "the silent runner's lease lapses", || async {
        (job(&app, &id).await["attempt"] == 2).then_some(())
    })
    .await;
    assert!(timeline(&app, &id)
        .await
        .iter()
        .any(|d| d.contains("lease lapsed")));
    app.stop().await;
}
crate::both_databases!(an_outage_longer_than_the_lease_does_not_take_a_healthy_runners_job);

/// A pool removed from the configuration (found by a tester): its RUNNING job stays
/// booked on it as a pool (`kind: "pool"` in `/v1/scheduler`, never a Ray cluster),
/// its runner's reports still work, and its QUEUED job says why it waits.
async fn a_pool_removed_from_the_configuration_stays_a_pool(which: Db) {
    let Some(app) = spawn_app_with(which, |s| with_pool(s, 1.0)).await else {
        return;
    };
    let mut ids = Vec::new();
    for user in ["erin", "finn"] {
        let j = app
            .submit(user, json!({"pool": "gw", "resources": slot()}))
            .await;
        ids.push(j["id"].as_str().unwrap().to_string());
    }
    let running = until(15, "one job admitted", || async {
        in_status(&app, "ADMITTED").await.into_iter().next()
    })
    .await;
    report_ok(&app, &running, "started", json!({})).await;
    let waiting = ids.iter().find(|i| **i != running).unwrap().clone();
    let db = app.stop().await;
    let settings = test_settings(&db.url);
    let app = start_on(db, settings).await;
    let v = app.get_json("/v1/scheduler", SUBMITTER).await;
    let gw = v["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "gw")
        .cloned()
        .unwrap_or_else(|| panic!("no gw in {v}"));
    assert_eq!(gw["kind"], "pool", "{gw}");
    let w = job(&app, &waiting).await;
    assert_eq!(w["status"], "QUEUED");
    let reason = w["pending_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("pool gw is not configured"), "{w}");
    let v = report_ok(&app, &running, "finished", json!({"status": "SUCCEEDED"})).await;
    assert_eq!(v["status"], "SUCCEEDED");
    app.stop().await;
}
crate::both_databases!(a_pool_removed_from_the_configuration_stays_a_pool);

/// Found by a tester: a job's message is what it says now, not an earlier admission's
/// ("back in the queue") once admitted, started or finished again; a release of a job
/// that ended is 200 (that admission is over, as asked); an idempotency conflict does
/// not name a job the token may not see (one of another pool).
async fn a_pool_jobs_message_and_repeated_reports_say_what_is_so_now(which: Db) {
    let Some(app) = spawn_app_with(which, |s| {
        with_pool_and_runner(s);
        s.pools.push(PoolSettings {
            name: "other".into(),
            capacity: BTreeMap::from([("clusters".to_string(), 1.0)]),
        });
    })
    .await
    else {
        return;
    };
    let id = admitted_job(&app, "erin").await;
    report_ok(&app, &id, "release", json!({"attempt": 1})).await;
    let v = until(15, "admitted again", || async {
        let v = job(&app, &id).await;
        (v["status"] == "ADMITTED" && v["attempt"] == 2).then_some(v)
    })
    .await;
    assert_eq!(v["message"], "admitted to pool gw (attempt 2)", "{v}");
    let v = report_ok(&app, &id, "started", json!({"attempt": 2})).await;
    assert_eq!(v["message"], "its runner started it (attempt 2)", "{v}");
    let v = report_ok(
        &app,
        &id,
        "finished",
        json!({"status": "SUCCEEDED", "attempt": 2}),
    )
    .await;
    assert_eq!(v["message"], "its runner reported SUCCEEDED", "{v}");
    // The admission is over: a release of it is what is so already.
    for _ in 0..2 {
        let v = report_ok(&app, &id, "release", json!({"attempt": 2})).await;
        assert_eq!(v["status"], "SUCCEEDED");
    }
    // Another pool's job under the same key: the runner of gw is not told its id.
    let theirs = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "erin", "entrypoint": "x", "external_id": "k",
                   "pool": "other", "resources": slot()}),
        )
        .await;
    assert_eq!(theirs.status(), 201);
    let theirs: Value = theirs.json().await.unwrap();
    let resp = app
        .post(
            "/v1/jobs",
            RUNNER,
            json!({"user": "erin", "entrypoint": "x", "external_id": "k",
                   "pool": "gw", "resources": slot()}),
        )
        .await;
    assert_eq!(resp.status(), 422);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "idempotency_key_reused", "{body}");
    assert!(body["error"]["details"]["job_id"].is_null(), "{body}");
    assert_eq!(body["error"]["details"]["differs"], json!([]), "{body}");
    let text = body.to_string();
    assert!(!text.contains(theirs["id"].as_str().unwrap()), "{text}");
    // The submitter, who may see it, is told.
    let resp = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "erin", "entrypoint": "y", "external_id": "k",
                   "pool": "other", "resources": slot()}),
        )
        .await;
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["details"]["job_id"], theirs["id"], "{body}");
    app.stop().await;
}
crate::both_databases!(a_pool_jobs_message_and_repeated_reports_say_what_is_so_now);

/// A pool job may hold a `[[licenses]]` seat: a license counts across every cluster
/// and pool (docs/operating.md, DESIGN §2 "Licenses"), not as a resource of the pool's capacity
/// (issue 43, "Also check": it was refused, 422 "pool is not large enough"). With one
/// seat and two slots, one job is admitted and the other waits for the seat, which
/// it takes once the first finishes; more seats than the count is refused naming the
/// license.
async fn a_pool_job_may_hold_a_license_seat_shared_with_the_clusters(which: Db) {
    let Some(app) = spawn_app_with(which, |s| {
        with_pool(s, 2.0);
        s.licenses = vec![fairshare::config::LicenseSettings {
            name: "qpu_session".into(),
            count: 1.0,
        }];
    })
    .await
    else {
        return;
    };
    let seat = json!({"cpu": 0, "custom": {"clusters": 1, "qpu_session": 1}});
    let mut ids = Vec::new();
    for user in ["lic-a", "lic-b"] {
        let resp = app
            .post(
                "/v1/jobs",
                SUBMITTER,
                json!({"user": user, "entrypoint": "run", "pool": "gw", "resources": seat}),
            )
            .await;
        assert_eq!(resp.status(), 201, "{:?}", resp.text().await);
        ids.push(
            resp.json::<Value>().await.unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let first = until(15, "one job admitted", || async {
        let admitted = in_status(&app, "ADMITTED").await;
        (admitted.len() == 1).then(|| admitted[0].clone())
    })
    .await;
    let second = ids.iter().find(|id| **id != first).unwrap().clone();
    // A slot is free; the seat is not: the second waits.
    let waiting = job(&app, &second).await;
    assert_eq!(waiting["status"], "QUEUED", "{waiting}");
    report_ok(&app, &first, "started", json!({})).await;
    report_ok(&app, &first, "finished", json!({"status": "SUCCEEDED"})).await;
    admitted_are(
        &app,
        &[second.as_str()],
        "the second admitted once the seat frees",
    )
    .await;

    let two = json!({"cpu": 0, "custom": {"clusters": 1, "qpu_session": 2}});
    let resp = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "lic-c", "entrypoint": "run", "pool": "gw", "resources": two}),
        )
        .await;
    assert_error(
        resp,
        422,
        "invalid_field",
        Some("resources.custom.qpu_session"),
    )
    .await;
    // The same ask for a Ray cluster (none healthy here): refused alike, naming the
    // license's count, not taken to wait for ever (a fresh tester's finding).
    let resp = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "lic-c", "entrypoint": "run",
                   "resources": {"cpu": 1, "custom": {"qpu_session": 2}}}),
        )
        .await;
    assert_eq!(resp.status(), 422);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["error"]["details"]["field"], "resources.custom.qpu_session",
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("2 seats of the license") && message.contains("which has 1"),
        "{message}"
    );
}
crate::both_databases!(a_pool_job_may_hold_a_license_seat_shared_with_the_clusters);
