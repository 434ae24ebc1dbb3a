//! Issue 32 on a real Ray head: the end of a job is known within milliseconds (its
//! watcher says so; the idle poll is 5 s), and a job is charged what it holds on
//! Ray (its entrypoint and the tasks it starts), another tenant's job counted as
//! foreign load.

use serde_json::json;

use crate::harness::{eventually, ray_bin, RayHead};
use crate::service::Service;
use crate::ONE_HEAD_AT_A_TIME;

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn the_end_of_a_job_is_known_within_milliseconds() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let head = RayHead::spawn(&ray_bin(), 2);
    head.wait_ready().await;
    let svc = Service::start(dir.path(), &head.dashboard, "").await;
    let http = reqwest::Client::new();
    for round in 0..3 {
        let job = svc.submit("u", "sleep 1", 0.5, json!({})).await;
        let id = job["id"].as_str().unwrap().to_string();
        eventually(120, "SUCCEEDED", || async {
            (svc.job(&id).await["status"] == "SUCCEEDED").then_some(())
        })
        .await;
        let events = svc.get(&format!("/v1/jobs/{id}/events")).await;
        let seen = events["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["to"] == "SUCCEEDED")
            .and_then(|e| e["at"].as_str())
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .expect("a SUCCEEDED event")
            .timestamp_millis();
        let ray: serde_json::Value = http
            .get(format!("{}/api/jobs/{id}", head.dashboard))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let ended = ray["end_time"].as_i64().expect("Ray's end_time");
        let late_ms = seen - ended;
        // The idle poll is 5 s: only the watcher's word gets it here this soon.
        assert!(
            late_ms < 1000,
            "round {round}: seen {late_ms} ms after Ray's end"
        );
    }
    let m = http
        .get(format!("{}/metrics", svc.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metric(
            &m,
            "fairshare_attempt_hints_total{kind=\"ended\",outcome=\"checked\"}"
        ) >= 3.0,
        "{m}"
    );
}

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn a_job_is_charged_the_tasks_it_starts_and_another_tenant_counts_as_foreign() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let head = RayHead::spawn(&ray_bin(), 2);
    head.wait_ready().await;
    let svc = Service::start(dir.path(), &head.dashboard, "").await;
    let http = reqwest::Client::new();
    // Another tenant, straight into Ray: 0.25 CPU for its entrypoint.
    let r = http
        .post(format!("{}/api/jobs/", head.dashboard))
        .json(
            &json!({"entrypoint": "sleep 120", "submission_id": "other-tenant",
            "entrypoint_num_cpus": 0.25}),
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    // Ours: 0.25 CPU declared, and three tasks of 0.5 CPU once the driver runs.
    let script = "import ray, time\nray.init()\n@ray.remote(num_cpus=0.5)\ndef f():\n    time.sleep(120)\nray.get([f.remote() for _ in range(3)])\n";
    let entrypoint = format!("python -c '{script}'");
    let job = svc.submit("u", &entrypoint, 0.25, json!({})).await;
    let id = job["id"].as_str().unwrap().to_string();
    let user = eventually(
        180,
        "the user charged its entrypoint and three tasks",
        || async {
            let u = svc.get("/v1/users/u").await;
            (u["allocation"]["cpu"] == 1.75).then_some(u)
        },
    )
    .await;
    assert_eq!(user["declared_allocation"]["cpu"], 0.25, "{user}");
    let j = svc.job(&id).await;
    assert_eq!(j["actual_resources"]["cpu"], 1.75, "{j}");
    assert_eq!(j["resources"]["cpu"], 0.25, "{j}");
    let v = eventually(30, "the other tenant as foreign load", || async {
        let v = svc.get("/v1/scheduler").await;
        (v["clusters"][0]["used_by_others"]["cpu"] == 0.25).then_some(v)
    })
    .await;
    assert_eq!(v["clusters"][0]["free"]["cpu"], 0.0, "{v}");
    let r = svc.post(&format!("/v1/jobs/{id}/cancel")).await;
    assert_eq!(r.status(), 202);
    let _ = http
        .post(format!("{}/api/jobs/other-tenant/stop", head.dashboard))
        .send()
        .await;
    eventually(120, "STOPPED", || async {
        (svc.job(&id).await["status"] == "STOPPED").then_some(())
    })
    .await;
}
