//! Groups (issue 29 part 1, the service side): `/v1/groups` (list, get, put, pause,
//! resume, delete; paths with slashes as they are or as `%2F`), a user's `group`,
//! every refusal naming its field, hierarchical fair share through the service
//! against the in-process fake Ray, the identity rule (a job's group places a user
//! that has none), per-group gauges, and a restart keeping it all. On SQLite and
//! PostgreSQL.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::both_databases;
use crate::fake_ray::{self, State};
use crate::helpers::{
    assert_error, metric, spawn_app, spawn_app_with, start_on, test_settings, until, Db, TestApp,
    ADMIN, SUBMITTER,
};

fn paths(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|g| g["path"].as_str().unwrap())
        .collect()
}

async fn put_group(app: &TestApp, path: &str, body: Value) -> Value {
    let r = app.put(&format!("/v1/groups/{path}"), ADMIN, body).await;
    assert_eq!(r.status(), 200, "PUT {path}: {:?}", r.text().await);
    r.json().await.unwrap()
}

/// Groups are created (a parent first), read by their path sent as it is or with
/// `%2F`, changed, paused and resumed, listed in path order with their users; a
/// group with subgroups or users is not deleted (409) until they are gone; users
/// join and leave groups with `PUT /v1/users/{id}`; a submitter reads but cannot
/// change; a restart keeps groups and membership.
async fn groups_are_created_read_changed_and_deleted_by_path(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let top = put_group(&app, "ibm-q", json!({"weight": 2})).await;
    assert_eq!(top["path"], "ibm-q");
    assert!(top["parent"].is_null(), "{top}");
    assert_eq!(top["weight"], 2.0);
    assert_eq!(top["paused"], false);
    assert!(top["max_running_jobs"].is_null() && top["max_resources"].is_null());
    // The path's slashes as they are, and encoded.
    let open = put_group(&app, "ibm-q/open", json!({})).await;
    assert_eq!(open["parent"], "ibm-q", "{open}");
    assert_eq!(open["weight"], 1.0);
    let main = put_group(
        &app,
        "ibm-q%2Fopen%2Fmain",
        json!({"max_running_jobs": 3, "max_resources": {"cpu": 4}}),
    )
    .await;
    assert_eq!(main["path"], "ibm-q/open/main", "{main}");
    assert_eq!(main["max_running_jobs"], 3);
    assert_eq!(main["max_resources"], json!({"cpu": 4.0}));
    let g = app.get_json("/v1/groups/ibm-q%2Fopen", SUBMITTER).await;
    assert_eq!(g["path"], "ibm-q/open");
    let g = app.get_json("/v1/groups/ibm-q/open/main", SUBMITTER).await;
    assert_eq!(g["max_running_jobs"], 3);
    // A change keeps what it does not name; null puts a limit back to none.
    let main = put_group(&app, "ibm-q/open/main", json!({"weight": 3})).await;
    assert_eq!(main["max_running_jobs"], 3);
    assert_eq!(main["weight"], 3.0);
    let main = put_group(&app, "ibm-q/open/main", json!({"max_running_jobs": null})).await;
    assert!(main["max_running_jobs"].is_null(), "{main}");
    assert_eq!(main["max_resources"], json!({"cpu": 4.0}));
    // A user joins a group.
    let r = app
        .put("/v1/users/alice", ADMIN, json!({"group": "ibm-q/open"}))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["group"], "ibm-q/open");
    assert_eq!(
        app.get_json("/v1/users/alice", SUBMITTER).await["group"],
        "ibm-q/open"
    );
    let list = app.get_json("/v1/groups", SUBMITTER).await;
    assert_eq!(paths(&list), ["ibm-q", "ibm-q/open", "ibm-q/open/main"]);
    assert_eq!(list[1]["users"], json!(["alice"]), "{list}");
    assert_eq!(list[0]["users"], json!([]), "a group's own users only");
    for field in ["allocation", "share", "fair_share", "queued", "running"] {
        assert!(!list[0][field].is_null(), "{field} in {list}");
    }
    // Pause and resume, by either spelling.
    let r = app
        .post("/v1/groups/ibm-q/open/pause", ADMIN, json!({}))
        .await;
    assert_eq!(r.status(), 200);
    let g: Value = r.json().await.unwrap();
    assert_eq!(
        (g["path"].as_str(), g["paused"].as_bool()),
        (Some("ibm-q/open"), Some(true))
    );
    let r = app
        .client
        .post(app.url("/v1/groups/ibm-q%2Fopen/resume"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "no body needed");
    assert_eq!(r.json::<Value>().await.unwrap()["paused"], false);
    let r = app.post("/v1/groups/nowhere/pause", ADMIN, json!({})).await;
    assert_error(r, 404, "not_found", None).await;
    // A submitter reads, never changes; POST on the group itself is no route.
    let r = app.put("/v1/groups/x", SUBMITTER, json!({})).await;
    assert_eq!(r.status(), 403);
    let r = app
        .post("/v1/groups/ibm-q/pause", SUBMITTER, json!({}))
        .await;
    assert_eq!(r.status(), 403);
    let r = app.delete("/v1/groups/ibm-q", SUBMITTER).await;
    assert_eq!(r.status(), 403);
    let r = app.post("/v1/groups/ibm-q/nothing", ADMIN, json!({})).await;
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "GET, HEAD, PUT, DELETE");
    // `…/pause` and `…/resume` are the actions, never a group: POST only.
    let r = app.put("/v1/groups/ibm-q/pause", ADMIN, json!({})).await;
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "POST");
    // Deleting: not while subgroups or users are under it.
    let r = app.delete("/v1/groups/ibm-q", ADMIN).await;
    assert_error(r, 409, "conflict", None).await;
    let r = app.delete("/v1/groups/ibm-q%2Fopen%2Fmain", ADMIN).await;
    assert_eq!(r.status(), 204);
    let r = app.delete("/v1/groups/ibm-q/open", ADMIN).await;
    assert_error(r, 409, "conflict", None).await;
    let r = app
        .put("/v1/users/alice", ADMIN, json!({"group": null}))
        .await;
    assert!(
        r.json::<Value>().await.unwrap()["group"].is_null(),
        "null: back to the root"
    );
    let r = app.delete("/v1/groups/ibm-q/open", ADMIN).await;
    assert_eq!(r.status(), 204);
    let r = app.get("/v1/groups/ibm-q/open", SUBMITTER).await;
    assert_error(r, 404, "not_found", None).await;
    let r = app.delete("/v1/groups/ibm-q/open", ADMIN).await;
    assert_error(r, 404, "not_found", None).await;

    // A restart keeps groups and membership.
    put_group(&app, "ibm-q/premium", json!({"weight": 5})).await;
    app.post("/v1/groups/ibm-q/premium/pause", ADMIN, json!({}))
        .await;
    app.put("/v1/users/bob", ADMIN, json!({"group": "ibm-q/premium"}))
        .await;
    let test_db = app.stop().await;
    let s = test_settings(&test_db.url);
    let app = start_on(test_db, s).await;
    let list = app.get_json("/v1/groups", SUBMITTER).await;
    assert_eq!(paths(&list), ["ibm-q", "ibm-q/premium"]);
    assert_eq!(list[1]["weight"], 5.0);
    assert_eq!(list[1]["paused"], true);
    assert_eq!(list[1]["users"], json!(["bob"]));
    assert_eq!(
        app.get_json("/v1/users/bob", SUBMITTER).await["group"],
        "ibm-q/premium"
    );
}
both_databases!(groups_are_created_read_changed_and_deleted_by_path);

/// Every bad input is 422 naming its field and changes nothing: an invalid path (one
/// with a reserved segment, `pause` or `resume`, too), a missing parent, a path deeper than 8, a weight of 0, -1, not a number or
/// infinite, a negative max_running_jobs, a bad max_resources; a user's group that
/// is not a group, or not a path.
async fn bad_groups_and_memberships_are_422_naming_the_field(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    put_group(&app, "a", json!({})).await;
    for path in [
        "a%20b",
        "a/x%21",
        "a%2F%2Fb",
        "pause",
        "a/resume/b",
        &["a"; 9].join("/"),
    ] {
        let r = app
            .put(&format!("/v1/groups/{path}"), ADMIN, json!({}))
            .await;
        assert_error(r, 422, "invalid_field", Some("path")).await;
    }
    // A parent that does not exist (a cycle cannot be written: the parent is the path).
    let r = app.put("/v1/groups/nope/child", ADMIN, json!({})).await;
    assert_error(r, 422, "invalid_field", Some("path")).await;
    for weight in [json!(0), json!(-1), json!("NaN"), json!(1e7)] {
        let r = app
            .put("/v1/groups/a", ADMIN, json!({ "weight": weight }))
            .await;
        assert_error(r, 422, "invalid_field", Some("weight")).await;
    }
    let r = app
        .client
        .put(app.url("/v1/groups/a"))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .body(r#"{"weight": 1e400}"#)
        .send()
        .await
        .unwrap();
    assert_error(r, 422, "invalid_field", Some("weight")).await;
    let r = app
        .put("/v1/groups/a", ADMIN, json!({"max_running_jobs": -1}))
        .await;
    assert_error(r, 422, "invalid_field", Some("max_running_jobs")).await;
    let r = app
        .put("/v1/groups/a", ADMIN, json!({"max_running_jobs": 1.5}))
        .await;
    assert_error(r, 422, "invalid_field", Some("max_running_jobs")).await;
    let r = app
        .put("/v1/groups/a", ADMIN, json!({"max_resources": {"cpu": -1}}))
        .await;
    assert_error(r, 422, "invalid_field", Some("max_resources.cpu")).await;
    let r = app
        .put("/v1/groups/a", ADMIN, json!({"paused": true}))
        .await;
    assert_eq!(r.status(), 422, "pause has its own route");
    // Nothing changed, nothing was created.
    let list = app.get_json("/v1/groups", SUBMITTER).await;
    assert_eq!(paths(&list), ["a"]);
    assert_eq!(list[0]["weight"], 1.0);
    assert!(list[0]["max_running_jobs"].is_null());
    // max_running_jobs 0 is a cap (nothing runs), not an error.
    let g = put_group(&app, "a", json!({"max_running_jobs": 0})).await;
    assert_eq!(g["max_running_jobs"], 0);
    // A user's group.
    for group in ["nope", "a/b"] {
        let r = app
            .put("/v1/users/alice", ADMIN, json!({ "group": group }))
            .await;
        assert_error(r, 422, "invalid_field", Some("group")).await;
    }
    for group in [json!("a b"), json!(""), json!("a/.."), json!(7)] {
        let r = app
            .put("/v1/users/alice", ADMIN, json!({ "group": group }))
            .await;
        assert_error(r, 422, "invalid_field", Some("group")).await;
    }
    let r = app.get("/v1/users/alice", SUBMITTER).await;
    assert_eq!(r.status(), 404, "a refused update creates no user");
}
both_databases!(bad_groups_and_memberships_are_422_naming_the_field);

/// A fake cluster of 8 CPUs whose jobs run until the test ends.
async fn eight_cores() -> (wiremock::MockServer, Arc<Mutex<State>>) {
    fake_ray::start(8.0, |s| s.run_polls = 1_000_000).await
}

fn cluster(uri: String) -> impl Fn(&mut fairshare::config::Settings) + Clone {
    move |s| {
        s.clusters = vec![fairshare::config::ClusterSettings {
            name: "fake".into(),
            address: uri.clone(),
            ..Default::default()
        }];
        s.monitor.poll_interval = Duration::from_millis(100);
        s.monitor.usage_report_lag = Duration::from_millis(0);
        s.dispatcher.retry_initial_backoff = Duration::from_millis(10);
        s.dispatcher.retry_max_backoff = Duration::from_millis(20);
    }
}

/// `running` of each group in `GET /v1/groups`, by path.
async fn running(app: &TestApp) -> Vec<(String, u64)> {
    let list = app.get_json("/v1/groups", SUBMITTER).await;
    list.as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["path"].as_str().unwrap().to_string(),
                g["running"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Groups `org/a` and `org/b` weighted 1:3 under `org`, two users each, 8 one-core
/// jobs per user, 8 cores: while `org` is paused nothing is dispatched and every job
/// says `org` is paused; resumed, `org/a` gets 2 (one per user) and `org/b` 6 (three
/// per user), as the policy's `a_two_level_tree_shares_by_weight_at_each_level`. The
/// groups' live figures, `GET /v1/shares` and the per-group gauges say the same
/// (fair shares 1/4 and 3/4); after a restart the groups still hold the same jobs
/// and nothing more is dispatched.
async fn groups_one_to_three_get_two_and_six_of_eight_cores_and_a_paused_group_waits(db: Db) {
    let (server, state) = eight_cores().await;
    let tweak = cluster(server.uri());
    let Some(app) = spawn_app_with(db, tweak.clone()).await else {
        return;
    };
    put_group(&app, "org", json!({})).await;
    put_group(&app, "org/a", json!({"weight": 1})).await;
    put_group(&app, "org/b", json!({"weight": 3})).await;
    let r = app.post("/v1/groups/org/pause", ADMIN, json!({})).await;
    assert_eq!(r.status(), 200);
    for (user, group) in [
        ("a1", "org/a"),
        ("a2", "org/a"),
        ("b1", "org/b"),
        ("b2", "org/b"),
    ] {
        let r = app
            .put(
                &format!("/v1/users/{user}"),
                ADMIN,
                json!({ "group": group }),
            )
            .await;
        assert_eq!(r.status(), 200);
    }
    // The cluster's capacity known, then every job queued while `org` is paused.
    until(10, "the cluster's cores in GET /v1/scheduler", || async {
        let v = app.get_json("/v1/scheduler", SUBMITTER).await;
        (v["clusters"][0]["capacity"]["cpu"] == json!(8.0)).then_some(())
    })
    .await;
    let mut ids = Vec::new();
    for user in ["a1", "a2", "b1", "b2"] {
        for _ in 0..8 {
            let j = app.submit(user, json!({})).await;
            ids.push(j["id"].as_str().unwrap().to_string());
        }
    }
    let some = ids[0].clone();
    until(
        10,
        "the paused group named in the pending reason",
        || async {
            let j = app.get_json(&format!("/v1/jobs/{some}"), SUBMITTER).await;
            j["pending_reason"]
                .as_str()
                .is_some_and(|r| r.contains("group org is paused"))
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        state.lock().unwrap().posts,
        0,
        "nothing dispatched while paused"
    );

    let r = app.post("/v1/groups/org/resume", ADMIN, json!({})).await;
    assert_eq!(r.status(), 200);
    let want = vec![
        ("org".to_string(), 8),
        ("org/a".to_string(), 2),
        ("org/b".to_string(), 6),
    ];
    until(15, "org/a 2 and org/b 6 running", || async {
        (running(&app).await == want).then_some(())
    })
    .await;
    for (user, n) in [("a1", 1), ("a2", 1), ("b1", 3), ("b2", 3)] {
        let u = app.get_json(&format!("/v1/users/{user}"), SUBMITTER).await;
        assert_eq!(u["running"], n, "{u}");
    }
    // More polls and cycles: still the same.
    let polls = state.lock().unwrap().list_polls;
    until(10, "more polls", || async {
        (state.lock().unwrap().list_polls >= polls + 5).then_some(())
    })
    .await;
    assert_eq!(state.lock().unwrap().posts, 8);
    assert_eq!(running(&app).await, want);
    let list = app.get_json("/v1/groups", SUBMITTER).await;
    let close = |v: &Value, x: f64| (v.as_f64().unwrap() - x).abs() < 1e-9;
    assert!(close(&list[1]["fair_share"], 0.25), "{list}");
    assert!(close(&list[2]["fair_share"], 0.75), "{list}");
    assert!(close(&list[1]["share"], 0.25), "{list}");
    assert!(close(&list[2]["share"], 0.75), "{list}");
    assert_eq!(list[1]["queued"], 14);
    assert_eq!(list[1]["allocation"]["cpu"], 2.0);

    // The gauges, per group.
    let text = app.metrics().await;
    assert!(
        text.contains("# HELP fairshare_group_fair_share "),
        "help text"
    );
    assert!(close(
        &json!(metric(&text, "fairshare_group_fair_share{group=\"org/b\"}")),
        0.75
    ));
    assert_eq!(
        metric(&text, "fairshare_group_running_jobs{group=\"org/a\"}"),
        2.0
    );
    assert_eq!(
        metric(&text, "fairshare_group_queued_jobs{group=\"org/b\"}"),
        10.0
    );
    assert!(close(
        &json!(metric(
            &text,
            "fairshare_group_dominant_share{group=\"org\"}"
        )),
        1.0
    ));
    // A user's fair share is its group's, divided: 1/8 in org/a, 3/8 in org/b.
    assert!(close(
        &json!(metric(&text, "fairshare_user_fair_share{user=\"b1\"}")),
        0.375
    ));
    // GET /v1/shares samples every 5 s.
    let sample = until(15, "a sample in GET /v1/shares", || async {
        let v = app.get_json("/v1/shares", SUBMITTER).await;
        v["samples"].as_array().and_then(|s| s.last().cloned())
    })
    .await;
    let users = sample["users"].as_array().unwrap();
    let a1 = users.iter().find(|u| u["user"] == "a1").unwrap();
    let b2 = users.iter().find(|u| u["user"] == "b2").unwrap();
    assert_eq!(a1["group"], "org/a", "{sample}");
    assert!(close(&a1["fair_share"], 0.125), "{sample}");
    assert!(close(&b2["fair_share"], 0.375), "{sample}");

    // A restart: the same groups, members and jobs; nothing more is sent to Ray.
    let test_db = app.stop().await;
    let mut s = test_settings(&test_db.url);
    tweak(&mut s);
    let app = start_on(test_db, s).await;
    until(
        15,
        "the same running jobs per group after the restart",
        || async { (running(&app).await == want).then_some(()) },
    )
    .await;
    let polls = state.lock().unwrap().list_polls;
    until(10, "more polls", || async {
        (state.lock().unwrap().list_polls >= polls + 5).then_some(())
    })
    .await;
    assert_eq!(state.lock().unwrap().posts, 8);
    assert_eq!(
        app.get_json("/v1/users/b2", SUBMITTER).await["group"],
        "org/b"
    );
}
both_databases!(groups_one_to_three_get_two_and_six_of_eight_cores_and_a_paused_group_waits);

/// `running` of `user` in `GET /v1/users/{user}`.
async fn user_running(app: &TestApp, user: &str) -> u64 {
    app.get_json(&format!("/v1/users/{user}"), SUBMITTER).await["running"]
        .as_u64()
        .unwrap_or(0)
}

/// The `pending_reason` of job `id` (empty without one).
async fn pending_reason(app: &TestApp, id: &str) -> String {
    app.get_json(&format!("/v1/jobs/{id}"), SUBMITTER).await["pending_reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Issue 43 §1 through the service: 10 cores; `org` (`max_resources.cpu = 2`) →
/// `org/mid` → `org/mid/a` (d1a), `org/mid/b` (d1b); `lab` (`max_running_jobs = 1`)
/// → `lab/x` (d1d) → `lab/x/y` (d1c). d1a queues two 1-core jobs and d1d one, and
/// they run; then d1b and d1c queue two each. `org` never holds more than 2 cores
/// nor `lab` more than 1 job, in fairshare (`GET /v1/groups`) and in Ray, and the
/// waiting heads name the group; when one of d1a's jobs ends, one (not two) of
/// d1b's starts. (Before: users whose jobs all ran were left out of their groups'
/// totals, and `org` ran 4 jobs, `lab` 2.)
async fn a_groups_limits_hold_against_users_whose_jobs_all_run(db: Db) {
    let (server, state) = fake_ray::start(10.0, |s| s.run_polls = 1_000_000).await;
    let Some(app) = spawn_app_with(db, cluster(server.uri())).await else {
        return;
    };
    put_group(&app, "org", json!({"max_resources": {"cpu": 2}})).await;
    put_group(&app, "org/mid", json!({})).await;
    put_group(&app, "org/mid/a", json!({})).await;
    put_group(&app, "org/mid/b", json!({})).await;
    put_group(&app, "lab", json!({"max_running_jobs": 1})).await;
    put_group(&app, "lab/x", json!({})).await;
    put_group(&app, "lab/x/y", json!({})).await;
    for (user, group) in [
        ("d1a", "org/mid/a"),
        ("d1b", "org/mid/b"),
        ("d1c", "lab/x/y"),
        ("d1d", "lab/x"),
    ] {
        let r = app
            .put(
                &format!("/v1/users/{user}"),
                ADMIN,
                json!({ "group": group }),
            )
            .await;
        assert_eq!(r.status(), 200);
    }
    until(10, "the cluster's cores in GET /v1/scheduler", || async {
        let v = app.get_json("/v1/scheduler", SUBMITTER).await;
        (v["clusters"][0]["capacity"]["cpu"] == json!(10.0)).then_some(())
    })
    .await;
    let submit = |user: &'static str| {
        let app = &app;
        async move {
            let j = app.submit(user, json!({"resources": {"cpu": 1}})).await;
            j["id"].as_str().unwrap().to_string()
        }
    };
    let a = [submit("d1a").await, submit("d1a").await];
    let d = submit("d1d").await;
    until(15, "d1a's two jobs and d1d's running", || async {
        let (on_a, on_d) = (
            user_running(&app, "d1a").await,
            user_running(&app, "d1d").await,
        );
        (on_a == 2 && on_d == 1).then_some(())
    })
    .await;
    let b = [submit("d1b").await, submit("d1b").await];
    let c = [submit("d1c").await, submit("d1c").await];
    until(10, "d1b's and d1c's heads naming their groups", || async {
        let rb = pending_reason(&app, &b[0]).await;
        let rc = pending_reason(&app, &c[0]).await;
        (rb.contains("allocation of group org over its resource limit")
            && rc.contains("users of group lab already have 1 job"))
        .then_some(())
    })
    .await;
    // More polls and cycles: still nothing of d1b's or d1c's reaches Ray.
    let polls = state.lock().unwrap().list_polls;
    until(10, "more polls", || async {
        (state.lock().unwrap().list_polls >= polls + 5).then_some(())
    })
    .await;
    {
        let s = state.lock().unwrap();
        let sent: Vec<&String> = s.submitted.iter().collect();
        assert_eq!(sent.len(), 3, "only d1a's and d1d's jobs sent: {sent:?}");
        assert!(a
            .iter()
            .chain([&d])
            .all(|id| s.jobs[id].status == "RUNNING"));
        assert_eq!(
            s.max_running, 3,
            "never more than org's 2 and lab's 1 at once"
        );
    }
    let want = |org: u64| {
        vec![
            ("lab".to_string(), 1),
            ("lab/x".to_string(), 1),
            ("lab/x/y".to_string(), 0),
            ("org".to_string(), org),
            ("org/mid".to_string(), org),
            ("org/mid/a".to_string(), org),
            ("org/mid/b".to_string(), 0),
        ]
    };
    assert_eq!(running(&app).await, want(2));
    let list = app.get_json("/v1/groups", SUBMITTER).await;
    let org = list
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["path"] == "org")
        .unwrap();
    assert_eq!(org["allocation"]["cpu"], 2.0, "{org}");
    assert_eq!(org["queued"], 2, "{org}");

    // One of d1a's jobs ends: org has one core again, for one of d1b's jobs.
    state.lock().unwrap().jobs.get_mut(&a[0]).unwrap().runs_for = 0;
    until(15, "one of d1b's jobs running", || async {
        (user_running(&app, "d1b").await == 1).then_some(())
    })
    .await;
    let polls = state.lock().unwrap().list_polls;
    until(10, "more polls", || async {
        (state.lock().unwrap().list_polls >= polls + 5).then_some(())
    })
    .await;
    assert_eq!(
        user_running(&app, "d1b").await,
        1,
        "org holds 2 cores, not 3"
    );
    assert!(pending_reason(&app, &b[1]).await.contains("group org"));
    {
        let s = state.lock().unwrap();
        assert_eq!(s.submitted.len(), 4, "{:?}", s.submitted);
        assert_eq!(s.submitted[3], b[0]);
        assert!(
            c.iter().all(|id| !s.jobs.contains_key(id)),
            "lab's limit holds"
        );
    }

    // A restart recovers the running jobs as their users' only ones: the limits
    // still count them, and nothing more is sent to Ray.
    let tweak = cluster(server.uri());
    let test_db = app.stop().await;
    let mut settings = test_settings(&test_db.url);
    tweak(&mut settings);
    let app = start_on(test_db, settings).await;
    until(
        15,
        "the same running jobs per group after the restart",
        || async {
            let now = running(&app).await;
            let org = now.iter().find(|(p, _)| p == "org").map(|g| g.1);
            let lab = now.iter().find(|(p, _)| p == "lab").map(|g| g.1);
            (org == Some(2) && lab == Some(1)).then_some(())
        },
    )
    .await;
    let polls = state.lock().unwrap().list_polls;
    until(10, "more polls", || async {
        (state.lock().unwrap().list_polls >= polls + 5).then_some(())
    })
    .await;
    assert!(pending_reason(&app, &b[1]).await.contains("group org"));
    let s = state.lock().unwrap();
    assert_eq!(s.submitted.len(), 4, "{:?}", s.submitted);
    assert_eq!(s.max_running, 3, "{:?}", s.submitted);
}
both_databases!(a_groups_limits_hold_against_users_whose_jobs_all_run);

/// The identity rule: a job whose group the operator's `ray_compat.group_rules` find
/// (here `ENV_JOB_GATEWAY_INSTANCE`) puts a user that has no group in that group when
/// it exists; a user with a group keeps it; a group that does not exist is ignored
/// (the user stays in the root, no group is created).
async fn a_jobs_group_places_a_user_without_one_when_the_group_exists(db: Db) {
    let Some(app) = spawn_app_with(db, |s| {
        s.ray_compat.group_rules = vec![fairshare::config::IdentityRule::EnvVar {
            name: "ENV_JOB_GATEWAY_INSTANCE".into(),
        }];
    })
    .await
    else {
        return;
    };
    put_group(&app, "hub", json!({})).await;
    put_group(&app, "hub/a", json!({})).await;
    put_group(&app, "other", json!({})).await;
    app.put("/v1/users/kept", ADMIN, json!({"group": "other"}))
        .await;
    let submit = |user: &str, instance: &str| {
        json!({
            "entrypoint": "python main.py",
            "metadata": {"fairshare.user": user},
            "runtime_env": {"env_vars": {"ENV_JOB_GATEWAY_INSTANCE": instance}},
        })
    };
    for (user, instance) in [("new", "hub/a"), ("kept", "hub/a"), ("lost", "hub/none")] {
        let r = app
            .post("/api/jobs/", SUBMITTER, submit(user, instance))
            .await;
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
    }
    let group = |u: Value| u["group"].clone();
    assert_eq!(
        group(app.get_json("/v1/users/new", SUBMITTER).await),
        "hub/a"
    );
    assert_eq!(
        group(app.get_json("/v1/users/kept", SUBMITTER).await),
        "other"
    );
    assert!(group(app.get_json("/v1/users/lost", SUBMITTER).await).is_null());
    assert_eq!(
        paths(&app.get_json("/v1/groups", SUBMITTER).await),
        ["hub", "hub/a", "other"]
    );
    // On /v1, a gateway's job with the group places its user the same way.
    app.submit("viav1", json!({"metadata": {"fairshare.group": "hub"}}))
        .await;
    assert_eq!(
        group(app.get_json("/v1/users/viav1", SUBMITTER).await),
        "hub"
    );
    let g = app.get_json("/v1/groups/hub%2Fa", SUBMITTER).await;
    assert_eq!(g["users"], json!(["new"]));
    assert_eq!(g["queued"], 1, "{g}");
    // An admin moves `new` to the root: its next job's group does not move it back
    // (a tester found the rule undoing the admin's choice).
    app.put("/v1/users/new", ADMIN, json!({"group": null}))
        .await;
    assert!(group(app.get_json("/v1/users/new", SUBMITTER).await).is_null());
    let r = app
        .post("/api/jobs/", SUBMITTER, submit("new", "hub/a"))
        .await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    assert!(group(app.get_json("/v1/users/new", SUBMITTER).await).is_null());
    let g = app.get_json("/v1/groups/hub%2Fa", SUBMITTER).await;
    assert_eq!(g["users"], json!([]), "{g}");
}
both_databases!(a_jobs_group_places_a_user_without_one_when_the_group_exists);
