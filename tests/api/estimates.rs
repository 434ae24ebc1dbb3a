//! Estimated starts (issue 48 §1) through the API: a live service with a fake Ray of
//! 2 CPUs, two jobs running, three waiting; every QUEUED job gets `estimated_start`,
//! `position` and `estimate_basis` on `/v1/jobs/{id}`, in the list, and in Ray's
//! `message` on `/api/jobs/{id}`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::fake_ray;
use crate::helpers::{until, SUBMITTER};

fn at(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap_or_else(|| panic!("a time: {v}")))
        .unwrap()
        .with_timezone(&Utc)
}

#[actix_web::test]
async fn every_waiting_job_gets_an_estimated_start_position_and_basis() {
    // Jobs run until the test ends.
    let (server, _state) = fake_ray::start(2.0, |s| s.run_polls = 1_000_000).await;
    let app = crate::helpers::app_with_cluster("fake", server.uri(), |s| {
        s.estimates.refresh = Duration::from_secs(1);
        s.estimates.default_runtime = Duration::from_secs(3600);
        s.scheduler.usage_half_life = Duration::ZERO;
    })
    .await;
    until(10, "capacity known", || async {
        let v = app.get_json("/v1/scheduler", SUBMITTER).await;
        (v["clusters"][0]["capacity"]["cpu"] == 2.0).then_some(())
    })
    .await;
    // alice: two 1-CPU jobs of at most 100 s start at once; a third (100 s) waits.
    // bob: a job with no max_runtime_s (the default, an hour) waits.
    let mut alice = Vec::new();
    for _ in 0..3 {
        let j = app
            .submit(
                "alice",
                json!({"entrypoint": "sleep 100", "max_runtime_s": 100}),
            )
            .await;
        alice.push(j["id"].as_str().unwrap().to_string());
    }
    let running: Vec<Value> = until(20, "alice's first two jobs running", || async {
        let mut out = Vec::new();
        for id in &alice[..2] {
            let v = app.get_json(&format!("/v1/jobs/{id}"), SUBMITTER).await;
            if v["status"] != "RUNNING" {
                return None;
            }
            out.push(v);
        }
        Some(out)
    })
    .await;
    let bob = app
        .submit("bob", json!({"entrypoint": "python train.py"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (third, bobs) = until(20, "estimates for both waiting jobs", || async {
        let a = app
            .get_json(&format!("/v1/jobs/{}", alice[2]), SUBMITTER)
            .await;
        let b = app.get_json(&format!("/v1/jobs/{bob}"), SUBMITTER).await;
        (!a["estimated_start"].is_null() && !b["estimated_start"].is_null()).then_some((a, b))
    })
    .await;
    assert_eq!(third["status"], "QUEUED");
    assert_eq!(third["estimate_basis"], "max_runtime");
    assert_eq!(bobs["estimate_basis"], "default");
    // Both CPUs free when alice's running jobs end, 100 s after they started; bob
    // (who holds nothing) goes first, then alice's third job on the other CPU.
    let ends: Vec<DateTime<Utc>> = running
        .iter()
        .map(|v| at(&v["started_at"].clone()) + chrono::Duration::seconds(100))
        .collect();
    let first_end = *ends.iter().min().unwrap();
    let last_end = *ends.iter().max().unwrap();
    let (ta, tb) = (at(&third["estimated_start"]), at(&bobs["estimated_start"]));
    let close = |t: DateTime<Utc>, to: DateTime<Utc>| (t - to).num_milliseconds().abs() <= 2_000;
    assert!(close(tb, first_end), "bob at {tb}, first end {first_end}");
    assert!(
        close(ta, last_end),
        "alice's third at {ta}, last end {last_end}"
    );
    assert_eq!(bobs["position"], 1, "{bobs}");
    assert_eq!(third["position"], 2, "{third}");
    // A running job has no estimate.
    assert!(running[0]["estimated_start"].is_null());

    // The list shows the same.
    let list = app.get_json("/v1/jobs?user=bob", SUBMITTER).await;
    assert_eq!(list["jobs"][0]["estimate_basis"], "default", "{list}");
    assert!(!list["jobs"][0]["estimated_start"].is_null());

    // Ray's Jobs API: in the message, and in fairshare's object.
    let ray = app.get_json(&format!("/api/jobs/{bob}"), SUBMITTER).await;
    let message = ray["message"].as_str().unwrap();
    assert!(
        message.contains("expected to start at about ")
            && message.contains("(position 1 among the waiting jobs; run times by default)"),
        "{message}"
    );
    assert_eq!(ray["fairshare"]["estimate_basis"], "default");
}
