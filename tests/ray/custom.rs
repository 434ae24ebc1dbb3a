//! Issue 29 part 2 on a real Ray head started with `--resources='{"QPU": 2,
//! "qpu_session": 1}'` (and 4
//! CPUs, so that CPUs are not what runs out): three 1-QPU jobs through fairshare, two
//! RUNNING, the third QUEUED with a pending reason naming QPU; Ray itself was sent
//! only two.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{eventually, ray_bin, RayHead};
use crate::service::Service;
use crate::ONE_HEAD_AT_A_TIME;

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn three_one_qpu_jobs_on_a_two_qpu_head_two_run_and_the_third_waits_for_qpu() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let head = RayHead::spawn_with(&ray_bin(), 4, Some(r#"{"QPU": 2, "qpu_session": 1}"#));
    head.wait_ready().await;
    let svc = Service::start(dir.path(), &head.dashboard, "").await;
    // The monitor has read the head's QPUs (a submit before that is not refused, but
    // waits the same; this makes the refusal below certain).
    eventually(60, "the head's QPUs in GET /v1/scheduler", || async {
        let v = svc.get("/v1/scheduler").await;
        let custom = &v["clusters"][0]["capacity"]["custom"];
        // Ray's cluster report spells it qpuSession; the nodes' own name is kept.
        (custom["QPU"] == json!(2.0) && custom["qpu_session"] == json!(1.0)).then_some(())
    })
    .await;
    let qpu = json!({"resources": {"cpu": 1, "custom": {"QPU": 1}}});
    let mut ids = Vec::new();
    for _ in 0..3 {
        let j = svc.submit("q", "sleep 120", 1.0, qpu.clone()).await;
        assert_eq!(j["resources"]["custom"], json!({"QPU": 1.0}), "{j}");
        ids.push(j["id"].as_str().unwrap().to_string());
    }
    let waiting = eventually(90, "two RUNNING, the third QUEUED naming QPU", || async {
        let mut running = 0;
        let mut queued = Vec::new();
        for id in &ids {
            let j = svc.job(id).await;
            match j["status"].as_str() {
                Some("RUNNING") => running += 1,
                Some("QUEUED") => queued.push(j),
                _ => {}
            }
        }
        let names_qpu = |j: &serde_json::Value| {
            j["pending_reason"]
                .as_str()
                .is_some_and(|r| r.contains("QPU"))
        };
        (running == 2 && queued.len() == 1 && names_qpu(&queued[0])).then(|| queued.remove(0))
    })
    .await;
    // It stays so for a few more cycles and polls; Ray has exactly the two.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let j = svc.job(waiting["id"].as_str().unwrap()).await;
        assert_eq!(j["status"], "QUEUED", "{j}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let at_ray = head.jobs().await;
    assert_eq!(at_ray.len(), 2, "{at_ray:?}");
    assert!(at_ray.iter().all(|(_, s)| s == "RUNNING"), "{at_ray:?}");
    // A resource the head does not have is refused at submit, naming it.
    let r = svc
        .client
        .post(format!("{}/v1/jobs", svc.url))
        .json(&json!({"user": "q", "entrypoint": "true",
                      "resources": {"cpu": 1, "custom": {"TPU": 1}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["details"]["field"], "resources.custom.TPU",
        "{v}"
    );
    // A name with `_` (which Ray's cluster report spells otherwise) is found, sent to
    // Ray under its own name, and runs there.
    let j = svc
        .submit(
            "s",
            "sleep 120",
            1.0,
            json!({"resources": {"cpu": 1, "custom": {"qpu_session": 1}}}),
        )
        .await;
    let session = j["id"].as_str().unwrap().to_string();
    eventually(90, "the qpu_session job RUNNING on Ray", || async {
        (svc.job(&session).await["status"] == "RUNNING").then_some(())
    })
    .await;
    ids.push(session);
    for id in &ids {
        assert!(svc
            .post(&format!("/v1/jobs/{id}/cancel"))
            .await
            .status()
            .is_success());
    }
}
