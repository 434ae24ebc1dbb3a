//! Issue 28 on a real Ray head (2 CPUs): user A's two preemptible 1-CPU jobs fill
//! it, user B submits a 1-CPU job, and with `preemption.after` = 2 s one of A's jobs
//! is stopped within `after` plus a cycle and a poll, goes back to the queue, and
//! succeeds later as attempt 2; jobs that did not opt in are never touched. The
//! timeline, the event stream and the metrics say so.

use std::time::{Duration, Instant};

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

/// `after` of the test's `[preemption]`, seconds.
const AFTER_S: u64 = 2;

/// A job that runs long the first time and briefly after (`marker` tells them apart):
/// a preempted attempt's retry finishes in a second.
fn long_once(marker: &std::path::Path) -> String {
    let m = marker.display();
    format!("if [ -e {m} ]; then sleep 1; else touch {m} && sleep 60; fi")
}

/// Reads `GET /v1/events?job=<id>&last_event_id=0` until `needle` appears (deadline
/// `secs`).
async fn stream_contains(svc: &Service, job: &str, needle: &str, secs: u64) -> bool {
    let mut resp = svc
        .client
        .get(format!("{}/v1/events?job={job}&last_event_id=0", svc.url))
        .send()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut seen = String::new();
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
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

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn a_preemptible_job_is_stopped_for_a_user_below_its_share_and_succeeds_later() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let head = RayHead::spawn(&ray_bin(), 2);
    head.wait_ready().await;
    let svc = Service::start(
        dir.path(),
        &head.dashboard,
        &format!(
            "[preemption]\nafter = \"{AFTER_S}s\"\nmin_runtime = \"0s\"\nbudget = 1.0\n\
             interval = \"1s\"\ngrace = \"30s\"\n"
        ),
    )
    .await;
    let running = |id: String| {
        let svc = &svc;
        async move { (svc.job(&id).await["status"] == "RUNNING").then_some(()) }
    };

    // 1. Jobs that did not opt in: B waits well past `after`, nothing is stopped.
    let mut fixed = Vec::new();
    for _ in 0..2 {
        let j = svc.submit("a", "sleep 60", 1.0, json!({})).await;
        assert_eq!(j["preemptible"], false);
        fixed.push(j["id"].as_str().unwrap().to_string());
    }
    for id in &fixed {
        // The head's first jobs: a cold start of its workers, 60 s was once too short
        // in a full run beside other builds.
        eventually(180, "A's job RUNNING", || running(id.clone())).await;
    }
    let b0 = svc.submit("b", "sleep 1", 1.0, json!({})).await;
    let b0 = b0["id"].as_str().unwrap().to_string();
    // Past `after`, a cycle (scheduler.tick = 1 s) and polls, then some.
    let until = Instant::now() + Duration::from_secs(AFTER_S + 4);
    while Instant::now() < until {
        for id in &fixed {
            let j = svc.job(id).await;
            assert_eq!(j["status"], "RUNNING", "a job that did not opt in: {j}");
            assert_eq!(j["preempting"], false, "{j}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(svc.job(&b0).await["status"], "QUEUED");
    // Clear the head for part 2: B's waiting job goes too.
    for id in fixed.iter().chain([&b0]) {
        assert!(svc
            .post(&format!("/v1/jobs/{id}/cancel"))
            .await
            .status()
            .is_success());
    }
    for id in fixed.iter().chain([&b0]) {
        eventually(60, "cancelled", || async {
            (svc.job(id).await["status"] == "STOPPED").then_some(())
        })
        .await;
    }

    // 2. A's two preemptible jobs fill the head; B's 1-CPU job waits, then one of A's
    // is stopped for it.
    let mut mine = Vec::new();
    for n in 0..2 {
        let marker = dir.path().join(format!("a{n}.started"));
        let j = svc
            .submit("a", &long_once(&marker), 1.0, json!({"preemptible": true}))
            .await;
        assert_eq!(j["preemptible"], true);
        mine.push(j["id"].as_str().unwrap().to_string());
    }
    for id in &mine {
        eventually(60, "A's preemptible job RUNNING", || running(id.clone())).await;
    }
    let b = svc.submit("b", "sleep 1", 1.0, json!({})).await;
    let b = b["id"].as_str().unwrap().to_string();
    let submitted = Instant::now();
    let victim = eventually(AFTER_S + 20, "a preemption", || async {
        for id in &mine {
            if svc.job(id).await["preempting"] == true {
                return Some(id.clone());
            }
        }
        None
    })
    .await;
    let waited = submitted.elapsed();
    // `after`, then the next cycle (at most scheduler.tick, 1 s) and a poll (250 ms);
    // a second of slack for a loaded machine.
    assert!(
        waited <= Duration::from_secs(AFTER_S + 3),
        "preempted {waited:?} after B's submit"
    );
    let survivor = mine.iter().find(|i| **i != victim).unwrap().clone();
    // Ray stops it; it is QUEUED again with attempt 2 (B holds its place meanwhile).
    let back = eventually(60, "the victim back in the queue", || async {
        let j = svc.job(&victim).await;
        (j["status"] != "RUNNING").then_some(j)
    })
    .await;
    assert!(
        ["QUEUED", "DISPATCHING", "PENDING", "RUNNING", "SUCCEEDED"]
            .contains(&back["status"].as_str().unwrap()),
        "{back}"
    );
    assert_eq!(back["attempt"], 2, "{back}");
    assert_eq!(back["preemptions"], 1, "{back}");
    eventually(60, "B RUNNING or done", || async {
        let s = svc.job(&b).await["status"].clone();
        (s == "RUNNING" || s == "SUCCEEDED").then_some(())
    })
    .await;
    // B ends (sleep 1), then the victim's attempt 2 runs (briefly) and succeeds.
    let done = eventually(90, "the victim SUCCEEDED", || async {
        let j = svc.job(&victim).await;
        (j["status"] == "SUCCEEDED").then_some(j)
    })
    .await;
    assert_eq!(done["attempt"], 2);
    assert_eq!(svc.job(&b).await["status"], "SUCCEEDED");
    // A's other job was never touched.
    let other = svc.job(&survivor).await;
    assert_eq!(other["status"], "RUNNING", "{other}");
    assert_eq!(other["attempt"], 1);

    // The timeline, the event stream and the metrics.
    let events = svc.get(&format!("/v1/jobs/{victim}/events")).await;
    let details: Vec<String> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["detail"].as_str().map(str::to_string))
        .collect();
    assert!(
        details.iter().any(
            |d| d.starts_with(&format!("preempted for job {b} of user b"))
                && d.contains("core-seconds lost")
        ),
        "{details:?}"
    );
    assert!(
        stream_contains(&svc, &victim, "event: job.preempted", 10).await,
        "the SSE stream names the preemption"
    );
    let m = svc
        .client
        .get(format!("{}/metrics", svc.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        metric(&m, "fairshare_preemptions_total{user=\"a\"}"),
        1.0,
        "{m}"
    );
    assert!(metric(&m, "fairshare_preempted_core_seconds_total{user=\"a\"}") > 0.0);
    // Done: the long one goes.
    assert!(svc
        .post(&format!("/v1/jobs/{survivor}/cancel"))
        .await
        .status()
        .is_success());
    eventually(60, "the survivor cancelled", || async {
        (svc.job(&survivor).await["status"] == "STOPPED").then_some(())
    })
    .await;
}
