//! Custom resources (issue 29 part 2) through the service, against the in-process
//! fake Ray with `{"QPU": 2}`: submit, fit, dispatch with `entrypoint_resources`, the
//! pending reason naming QPU, refusal at submit of what no cluster has, Ray's Jobs
//! API, and a restart keeping them. On SQLite and PostgreSQL.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::both_databases;
use crate::fake_ray::{self, State};
use crate::helpers::{assert_error, start_on, test_settings, until, Db, TestApp, SUBMITTER};

fn settings(uri: String) -> impl Fn(&mut fairshare::config::Settings) + Clone {
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

/// A fake cluster of 8 CPUs and 2 QPUs whose jobs run until the test ends.
async fn qpu_cluster() -> (wiremock::MockServer, Arc<Mutex<State>>) {
    fake_ray::start(8.0, |s| {
        s.custom_total.insert("QPU".into(), 2.0);
        s.run_polls = 1_000_000;
    })
    .await
}

/// Waits until the scheduler knows the cluster's QPUs.
async fn until_qpus_known(app: &TestApp) {
    until(10, "the cluster's QPUs in GET /v1/scheduler", || async {
        let v = app.get_json("/v1/scheduler", SUBMITTER).await;
        (v["clusters"][0]["capacity"]["custom"]["QPU"] == json!(2.0)).then_some(())
    })
    .await;
}

async fn job(app: &TestApp, id: &str) -> Value {
    app.get_json(&format!("/v1/jobs/{id}"), SUBMITTER).await
}

/// Three 1-QPU jobs on a cluster with 2 QPUs (and CPUs to spare): exactly two are
/// dispatched, sent to Ray with `entrypoint_resources: {"QPU": 1}`; the third stays
/// QUEUED with a pending reason naming QPU. The jobs show their custom resources,
/// and still do after a restart, which dispatches nothing more.
async fn three_one_qpu_jobs_on_two_qpus_two_run_and_the_third_waits_for_qpu(db: Db) {
    let (server, state) = qpu_cluster().await;
    let tweak = settings(server.uri());
    let Some(app) = crate::helpers::spawn_app_with(db, tweak.clone()).await else {
        return;
    };
    until_qpus_known(&app).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let j = app
            .submit("q", json!({"resources": {"cpu": 1, "custom": {"QPU": 1}}}))
            .await;
        assert_eq!(j["resources"]["custom"], json!({"QPU": 1.0}), "{j}");
        ids.push(j["id"].as_str().unwrap().to_string());
    }
    let waiting = until(15, "two dispatched, the third waiting for QPU", || async {
        let mut queued = Vec::new();
        for id in &ids {
            let j = job(&app, id).await;
            if j["status"] == "QUEUED" {
                queued.push(j);
            }
        }
        let reason_names_qpu = |j: &Value| {
            j["pending_reason"]
                .as_str()
                .is_some_and(|r| r.contains("QPU"))
        };
        (queued.len() == 1 && reason_names_qpu(&queued[0]) && state.lock().unwrap().posts == 2)
            .then(|| queued.remove(0))
    })
    .await;
    // A few more polls and cycles: still two at Ray, the third still waiting.
    let polls = state.lock().unwrap().list_polls;
    until(10, "more polls", || async {
        (state.lock().unwrap().list_polls >= polls + 5).then_some(())
    })
    .await;
    {
        let s = state.lock().unwrap();
        assert_eq!(s.posts, 2, "only two jobs were sent to Ray");
        for sid in &s.submitted {
            assert_eq!(
                s.jobs[sid].custom,
                [("QPU".to_string(), 1.0)].into_iter().collect(),
                "sent as entrypoint_resources"
            );
        }
    }
    let third = waiting["id"].as_str().unwrap().to_string();
    let j = job(&app, &third).await;
    assert_eq!(j["status"], "QUEUED", "{j}");
    assert!(j["pending_reason"].as_str().unwrap().contains("QPU"), "{j}");
    // Ray's Jobs API shows the custom resources as entrypoint_resources.
    let ray = app.get_json(&format!("/api/jobs/{third}"), SUBMITTER).await;
    assert_eq!(ray["entrypoint_resources"], json!({"QPU": 1.0}), "{ray}");
    assert!(
        ray["message"].as_str().unwrap_or_default().contains("QPU"),
        "{ray}"
    );

    // A restart keeps them: the rows say QPU, so the third still waits.
    let test_db = app.stop().await;
    let mut s = test_settings(&test_db.url);
    tweak(&mut s);
    let app = start_on(test_db, s).await;
    for id in &ids {
        assert_eq!(
            job(&app, id).await["resources"]["custom"],
            json!({"QPU": 1.0})
        );
    }
    until(
        10,
        "the third waiting for QPU after the restart",
        || async {
            let j = job(&app, &third).await;
            (j["status"] == "QUEUED"
                && j["pending_reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("QPU")))
            .then_some(())
        },
    )
    .await;
    assert_eq!(
        state.lock().unwrap().posts,
        2,
        "nothing more sent after the restart"
    );
}
both_databases!(three_one_qpu_jobs_on_two_qpus_two_run_and_the_third_waits_for_qpu);

/// A job asking a resource no healthy cluster has, or more of one than any has, is
/// refused at submit (422 naming the resource's field, the message naming it), on
/// `/v1` and on Ray's Jobs API; bad names and amounts are 422 naming the field. A
/// job that fits is taken on Ray's API too.
async fn custom_resources_no_cluster_has_are_refused_at_submit(db: Db) {
    let (server, _state) = qpu_cluster().await;
    let Some(app) = crate::helpers::spawn_app_with(db, settings(server.uri())).await else {
        return;
    };
    until_qpus_known(&app).await;
    let submit = |resources: Value| {
        let app = &app;
        async move {
            app.post(
                "/v1/jobs",
                SUBMITTER,
                json!({"user": "q", "entrypoint": "x", "resources": resources}),
            )
            .await
        }
    };
    let message = |r: reqwest::Response| async move {
        let v: Value = r.json().await.unwrap();
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let r = submit(json!({"custom": {"TPU": 1}})).await;
    assert_eq!(r.status(), 422);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["details"]["field"], "resources.custom.TPU",
        "{v}"
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("TPU"),
        "{v}"
    );
    // fairshare's own resource named as a custom one: refused for what it is, not
    // as a resource no cluster reports (the same check refuses such a [[sizes]]).
    let r = submit(json!({"custom": {"cpu": 1}})).await;
    assert_eq!(r.status(), 422);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["details"]["field"], "resources.custom.cpu",
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("fairshare's own resources"),
        "{v}"
    );
    let r = submit(json!({"custom": {"QPU": 3}})).await;
    assert_eq!(r.status(), 422);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["details"]["field"], "resources.custom.QPU",
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("short of QPU"),
        "{v}"
    );
    for (resources, field) in [
        (json!({"custom": {"Q P U": 1}}), "resources.custom.Q P U"),
        (json!({"custom": {"QPU": -1}}), "resources.custom.QPU"),
        (json!({"custom": {"QPU": 0}}), "resources.custom.QPU"),
        (json!({"custom": {"CPU": 1}}), "resources.custom.CPU"),
    ] {
        assert_error(submit(resources).await, 422, "invalid_field", Some(field)).await;
    }
    let r = app
        .post_raw(
            "/v1/jobs",
            SUBMITTER,
            r#"{"user": "q", "entrypoint": "x", "resources": {"custom": {"QPU": 1e400}}}"#,
        )
        .await;
    assert_eq!(r.status(), 422, "a non-finite amount");
    // Ray's Jobs API: the same checks under Ray's names.
    let ray = |resources: Value| {
        let app = &app;
        async move {
            app.post(
                "/api/jobs/",
                SUBMITTER,
                json!({"entrypoint": "x", "metadata": {"fairshare.user": "q"},
                       "entrypoint_resources": resources}),
            )
            .await
        }
    };
    let r = ray(json!({"TPU": 1})).await;
    assert_eq!(r.status(), 422);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["details"]["field"], "entrypoint_resources.TPU",
        "{v}"
    );
    let r = ray(json!({"Q P U": 1})).await;
    assert_eq!(r.status(), 422);
    assert!(message(r).await.contains("not a valid Ray resource name"));
    let r = ray(json!({"QPU": 1})).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
}
both_databases!(custom_resources_no_cluster_has_are_refused_at_submit);

/// A license (`[[licenses]] name = "session", count = 1`) shared by two clusters:
/// of two jobs asking a session, on two clusters with cores to spare, one runs and
/// the other waits naming the license; the license never reaches Ray. Cancelling
/// the first frees the seat and the second runs.
async fn a_license_is_one_pool_for_all_clusters_and_never_sent_to_ray(db: Db) {
    let (one, one_state) = fake_ray::start(8.0, |s| s.run_polls = 1_000_000).await;
    let (two, two_state) = fake_ray::start(8.0, |s| s.run_polls = 1_000_000).await;
    let (a, b) = (one.uri(), two.uri());
    let tweak = move |s: &mut fairshare::config::Settings| {
        settings(a.clone())(s);
        s.clusters.push(fairshare::config::ClusterSettings {
            name: "fake-two".into(),
            address: b.clone(),
            ..Default::default()
        });
        s.licenses = vec![fairshare::config::LicenseSettings {
            name: "session".into(),
            count: 1.0,
        }];
    };
    let Some(app) = crate::helpers::spawn_app_with(db, tweak).await else {
        return;
    };
    until(10, "both clusters healthy", || async {
        let v = app.get_json("/v1/scheduler", SUBMITTER).await;
        let healthy = v["clusters"].as_array().map_or(0, |c| {
            c.iter().filter(|c| c["healthy"] == json!(true)).count()
        });
        (healthy == 2).then_some(())
    })
    .await;
    let mut ids = Vec::new();
    // The second asks no core at all: a custom resource alone is a request.
    for cpu in [1, 0] {
        let j = app
            .submit(
                "s",
                json!({"resources": {"cpu": cpu, "custom": {"session": 1}}}),
            )
            .await;
        assert_eq!(j["status"], "QUEUED", "{j}");
        ids.push(j["id"].as_str().unwrap().to_string());
    }
    let posts = || one_state.lock().unwrap().posts + two_state.lock().unwrap().posts;
    let waiting = until(
        15,
        "one dispatched, the other waiting for the session",
        || async {
            let mut queued = Vec::new();
            for id in &ids {
                let j = job(&app, id).await;
                if j["status"] == "QUEUED" {
                    queued.push(j);
                }
            }
            let names_session = |j: &Value| {
                j["pending_reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("session"))
            };
            (queued.len() == 1 && names_session(&queued[0]) && posts() == 1)
                .then(|| queued.remove(0))
        },
    )
    .await;
    for state in [&one_state, &two_state] {
        let s = state.lock().unwrap();
        for sid in &s.submitted {
            assert!(
                s.jobs[sid].custom.is_empty(),
                "a license is never sent to Ray"
            );
        }
    }
    // Every cluster shows the one pool: no seat free on either (a tester found the
    // cluster without the job showing its own count), in the view and the gauges.
    let v = app.get_json("/v1/scheduler", SUBMITTER).await;
    for c in v["clusters"].as_array().unwrap() {
        assert_eq!(c["capacity"]["custom"]["session"], json!(1.0), "{c}");
        let free = c["free"]["custom"]["session"].as_f64().unwrap_or(0.0);
        assert_eq!(free, 0.0, "{c}");
    }
    let metrics = app.metrics().await;
    let free_gauges: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("fairshare_cluster_free{") && l.contains("resource=\"session\""))
        .collect();
    assert_eq!(free_gauges.len(), 2, "{metrics}");
    assert!(
        free_gauges.iter().all(|l| l.ends_with(" 0")),
        "{free_gauges:?}"
    );
    let second = waiting["id"].as_str().unwrap().to_string();
    let first = ids.iter().find(|id| **id != second).unwrap().clone();
    let r = app
        .post(&format!("/v1/jobs/{first}/cancel"), SUBMITTER, json!({}))
        .await;
    assert!(r.status().is_success(), "cancel: {}", r.status());
    until(15, "the second runs once the seat is free", || async {
        (posts() == 2).then_some(())
    })
    .await;
    // Asking more seats than the license has is refused at submit, naming it.
    let r = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "s", "entrypoint": "x", "resources": {"cpu": 1, "custom": {"session": 2}}}),
        )
        .await;
    assert_eq!(r.status(), 422);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["details"]["field"], "resources.custom.session",
        "{v}"
    );
}
both_databases!(a_license_is_one_pool_for_all_clusters_and_never_sent_to_ray);
