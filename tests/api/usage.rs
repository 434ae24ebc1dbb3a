//! Issue 32: what Ray jobs really use. With Ray's State API (a fake that answers it),
//! a job is charged what its entrypoint, tasks and actors hold, and the cluster's
//! foreign load is exactly what no job of ours holds, with no lag to guess.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::both_databases;
use crate::fake_ray::{self, State};
use crate::helpers::{metric, Db, TestApp, ADMIN, SUBMITTER};

async fn app(db: Db, server: &wiremock::MockServer) -> TestApp {
    let uri = server.uri();
    crate::helpers::spawn_app_with(db, move |s| {
        s.clusters = vec![fairshare::config::ClusterSettings {
            name: "fake".into(),
            address: uri,
            ..Default::default()
        }];
        s.monitor.poll_interval = Duration::from_millis(100);
        // The default lag: with the State API it guesses nothing.
        s.monitor.usage_report_lag = Duration::from_secs(5);
        s.dispatcher.retry_initial_backoff = Duration::from_millis(10);
    })
    .await
    .expect("database available")
}

use crate::helpers::until;

fn running(state: &Arc<Mutex<State>>, prefix: &[String]) -> usize {
    let s = state.lock().unwrap();
    prefix
        .iter()
        .filter(|id| s.jobs.get(*id).is_some_and(|j| j.status == "RUNNING"))
        .count()
}

/// The issue's scenario: a 1000-CPU cluster with no other tenant; H (weight 1e6,
/// capped at 96 CPU) and L (weight 1) post 40 and 240 jobs of 4 CPU at once. L must
/// get the 904 CPU H cannot take, and nothing may be counted as another tenant's.
async fn own_jobs_are_never_counted_as_another_tenants(db: Db) {
    let (server, state) = fake_ray::start(1000.0, |s| {
        s.state_api = true;
        s.run_polls = 1_000_000;
    })
    .await;
    let app = app(db, &server).await;
    let put = |user: &'static str, body: Value| {
        let app = &app;
        async move {
            let r = app.put(&format!("/v1/users/{user}"), ADMIN, body).await;
            assert_eq!(r.status(), 200);
        }
    };
    put(
        "h",
        json!({"weight": 1e6, "max_resources": {"cpu": 96}, "max_running_jobs": 1000}),
    )
    .await;
    put("l", json!({"max_running_jobs": 1000})).await;
    let mut h = Vec::new();
    let mut l = Vec::new();
    for i in 0..240 {
        if i < 40 {
            h.push(
                app.submit("h", json!({"resources": {"cpu": 4}})).await["id"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        l.push(
            app.submit("l", json!({"resources": {"cpu": 4}})).await["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    until(30, "H at 96 CPU and L at 904", || async {
        (running(&state, &h) == 24 && running(&state, &l) == 226).then_some(())
    })
    .await;
    let v = app.get_json("/v1/scheduler", SUBMITTER).await;
    assert_eq!(v["clusters"][0]["used_by_others"]["cpu"], 0.0, "{v}");
    assert_eq!(v["clusters"][0]["free"]["cpu"], 0.0, "{v}");
}
both_databases!(own_jobs_are_never_counted_as_another_tenants);

/// A job that declared 1 CPU but whose driver holds 6 more is charged 7: its user's
/// allocation says so, the job shows both, and another user's job waits for room.
async fn a_job_is_charged_what_it_holds_on_ray(db: Db) {
    let (server, state) = fake_ray::start(8.0, |s| {
        s.state_api = true;
        s.run_polls = 1_000_000;
        s.tasks_cpu = 6.0;
    })
    .await;
    let app = app(db, &server).await;
    let a = app.submit("a", json!({"resources": {"cpu": 1}})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    until(10, "A's job charged 7 CPU", || async {
        let u = app.get_json("/v1/users/a", SUBMITTER).await;
        (u["allocation"]["cpu"] == 7.0).then_some(u)
    })
    .await;
    let u = app.get_json("/v1/users/a", SUBMITTER).await;
    assert_eq!(u["declared_allocation"]["cpu"], 1.0, "{u}");
    let j = app.get_json(&format!("/v1/jobs/{a}"), SUBMITTER).await;
    assert_eq!(j["resources"]["cpu"], 1.0, "{j}");
    assert_eq!(j["actual_resources"]["cpu"], 7.0, "{j}");
    // /metrics says both, and what no job of ours holds (nothing here).
    let text = until(10, "the allocation metrics", || async {
        let text = app.metrics().await;
        (metric(
            &text,
            r#"fairshare_user_allocation{charged="actual",resource="cpu",user="a"}"#,
        ) == 7.0)
            .then_some(text)
    })
    .await;
    assert_eq!(
        metric(
            &text,
            r#"fairshare_user_allocation{charged="declared",resource="cpu",user="a"}"#
        ),
        1.0,
        "{text}"
    );
    assert!(
        text.contains(r#"fairshare_cluster_used_by_others{cluster="fake",resource="cpu"} 0"#),
        "{text}"
    );
    // B's jobs hold no tasks: one of them fits in the CPU left, the other waits.
    state.lock().unwrap().tasks_cpu = 0.0;
    let b1 = app.submit("b", json!({"resources": {"cpu": 1}})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let b2 = app.submit("b", json!({"resources": {"cpu": 1}})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    until(10, "one of B's jobs running", || async {
        (running(&state, &[b1.clone(), b2.clone()]) == 1).then_some(())
    })
    .await;
    // Several polls later the second still waits, for capacity.
    let polls = state.lock().unwrap().list_polls;
    until(10, "more polls", || async {
        (state.lock().unwrap().list_polls >= polls + 5).then_some(())
    })
    .await;
    assert_eq!(running(&state, &[b1.clone(), b2.clone()]), 1);
    let waiting = if state.lock().unwrap().jobs.contains_key(&b1) {
        &b2
    } else {
        &b1
    };
    let j = app
        .get_json(&format!("/v1/jobs/{waiting}"), SUBMITTER)
        .await;
    assert_eq!(j["status"], "QUEUED", "{j}");
}
both_databases!(a_job_is_charged_what_it_holds_on_ray);

/// Ray lists a job SUCCEEDED the moment its driver exits; its `JobSupervisor`, which
/// holds the entrypoint's reservation, exits a moment later. A reading of the State
/// API taken in between must not count that reservation as another tenant's load:
/// the next job is sent to Ray at once (and waits in Ray's queue for those
/// milliseconds, as it would in Ray's own), not after the supervisor is gone. Here the
/// supervisor stays until the test lets it go, so a fairshare that waited for it would
/// never send the second job.
async fn an_ended_jobs_lingering_supervisor_does_not_hold_back_the_next_job(db: Db) {
    let (server, state) = fake_ray::start(1.0, |s| {
        s.state_api = true;
        s.run_polls = 1_000_000;
    })
    .await;
    let app = app(db, &server).await;
    let first = app.submit("a", json!({"resources": {"cpu": 1}})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let second = app.submit("b", json!({"resources": {"cpu": 1}})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    until(30, "the first job RUNNING", || async {
        let j = app.get_json(&format!("/v1/jobs/{first}"), SUBMITTER).await;
        (j["status"] == "RUNNING").then_some(())
    })
    .await;
    {
        // Its driver exits: every answer from now on lists it SUCCEEDED, and its
        // supervisor still holds the CPU.
        let mut s = state.lock().unwrap();
        s.lingering.insert(first.clone());
        s.jobs.get_mut(&first).unwrap().status = "SUCCEEDED";
    }
    until(30, "the first job SUCCEEDED", || async {
        let j = app.get_json(&format!("/v1/jobs/{first}"), SUBMITTER).await;
        (j["status"] == "SUCCEEDED").then_some(())
    })
    .await;
    until(
        10,
        "the second job sent to Ray while the first's supervisor lingers",
        || async {
            state
                .lock()
                .unwrap()
                .jobs
                .contains_key(&second)
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        state.lock().unwrap().jobs[&second].status,
        "PENDING",
        "Ray holds it until the supervisor is gone"
    );
    let v = app.get_json("/v1/scheduler", SUBMITTER).await;
    assert_eq!(v["clusters"][0]["used_by_others"]["cpu"], 0.0, "{v}");
    state.lock().unwrap().lingering.clear();
    until(
        30,
        "Ray starts the second job once the supervisor is gone",
        || async {
            let mut s = state.lock().unwrap();
            let j = s.jobs.get_mut(&second).unwrap();
            (j.status == "RUNNING").then(|| j.status = "SUCCEEDED")
        },
    )
    .await;
    until(30, "the second job SUCCEEDED", || async {
        let j = app.get_json(&format!("/v1/jobs/{second}"), SUBMITTER).await;
        (j["status"] == "SUCCEEDED").then_some(())
    })
    .await;
}
both_databases!(an_ended_jobs_lingering_supervisor_does_not_hold_back_the_next_job);

/// Issue 48: the usage report says what a job actually held by Ray's State API beside
/// what it declared. A job that declared 1 CPU and whose driver holds 6 more is charged
/// 1 core until the first reading and 7 from then on: its actual core-seconds are
/// `1·a + 7·b` over its `a + b` seconds held, with `b ≥ 2` (it runs two seconds after
/// the arbiter charged 7); its declared core-seconds are 1 per second held.
async fn usage_reports_what_a_job_actually_held(db: Db) {
    let (server, state) = fake_ray::start(8.0, |s| {
        s.state_api = true;
        s.run_polls = 1_000_000;
        s.tasks_cpu = 6.0;
    })
    .await;
    let app = app(db, &server).await;
    let id = app
        .submit("actual-a", json!({"resources": {"cpu": 1}}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    until(10, "the job charged 7 CPU", || async {
        let u = app.get_json("/v1/users/actual-a", SUBMITTER).await;
        (u["allocation"]["cpu"] == 7.0).then_some(())
    })
    .await;
    let seen = chrono::Utc::now().timestamp();
    until(10, "two more seconds", || async {
        (chrono::Utc::now().timestamp() >= seen + 2).then_some(())
    })
    .await;
    state.lock().unwrap().jobs.get_mut(&id).unwrap().status = "SUCCEEDED";
    let j = until(30, "the job SUCCEEDED", || async {
        let j = app.get_json(&format!("/v1/jobs/{id}"), SUBMITTER).await;
        (j["status"] == "SUCCEEDED").then_some(j)
    })
    .await;
    let secs = |v: &Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
            .unwrap()
            .timestamp()
    };
    let held = (secs(&j["finished_at"]) - secs(&j["dispatched_at"])) as f64;
    let r = app
        .get_json("/v1/usage?by=user&step=day&user=actual-a", SUBMITTER)
        .await;
    let rows = r["rows"].as_array().unwrap();
    let sum = |f: &dyn Fn(&Value) -> f64| rows.iter().map(f).sum::<f64>();
    let declared = sum(&|x| x["core_seconds"].as_f64().unwrap());
    let actual = sum(&|x| x["actual"]["core_seconds"].as_f64().unwrap());
    assert_eq!(declared, held, "{r}");
    let b = (actual - held) / 6.0;
    assert_eq!(b.fract(), 0.0, "1·a + 7·b: {r}");
    assert!(b >= 2.0 && b <= held, "{b} of {held} s at 7 cores: {r}");
    // No reading left behind for the ended job.
    let gpu = sum(&|x| x["actual"]["gpu_seconds"].as_f64().unwrap());
    assert_eq!(gpu, 0.0);
}
both_databases!(usage_reports_what_a_job_actually_held);
