//! End-to-end tests against a real local Ray head (2 CPUs) and the real `fairshare`
//! binary: fair-share dispatch order, cancel, pause/resume, and a kill -9 restart
//! that must neither lose nor duplicate a job. Ignored unless the build saw
//! `FAIRSHARE_RAY_BIN` or `FAIRSHARE_REQUIRE_RAY=1` (`build.rs`). They run inside a
//! loopback-only network namespace (`scripts/test-runner`), and refuse to run outside
//! one. One head at a time (they share the machine's 2 cores).

mod autoscale;
mod custom;
mod edge;
mod gateway;
mod harness;
mod preemption;
mod ray_api;
mod record;
mod secured;
mod service;

use std::collections::{BTreeMap, BTreeSet};

use entity::JobStatus;
use harness::{eventually, ray_bin, RayHead};
use serde_json::json;
use service::{all_terminal, Service};

static ONE_HEAD_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn by_dispatch(jobs: &[serde_json::Value]) -> Vec<(String, String, String)> {
    let mut v: Vec<(String, String, String)> = jobs
        .iter()
        .filter_map(|j| {
            Some((
                j["dispatched_at"].as_str()?.to_string(),
                j["user"].as_str()?.to_string(),
                j["id"].as_str()?.to_string(),
            ))
        })
        .collect();
    v.sort();
    v
}

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn jobs_run_on_ray_in_weighted_fair_share_order_with_cancel_and_pause() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let ray = ray_bin();
    let dir = tempfile::tempdir().unwrap();
    // The head starts while jobs are submitted: the first cycle sees every queue at once.
    let head = RayHead::spawn(&ray, 2);
    let svc = Service::start(dir.path(), &head.dashboard, "usage_half_life = \"0s\"").await;
    for (u, w) in [("u1", 1.0), ("u2", 1.0), ("u3", 2.0)] {
        assert_eq!(
            svc.put(&format!("/v1/users/{u}"), json!({"weight": w}))
                .await
                .status(),
            200
        );
    }
    // A queued job cancelled before it can run: Ray must never see it.
    let doomed = svc
        .submit("u1", "sleep 1", 0.5, json!({"priority": -10}))
        .await;
    let doomed_id = doomed["id"].as_str().unwrap().to_string();
    let r = svc.post(&format!("/v1/jobs/{doomed_id}/cancel")).await;
    assert_eq!(r.status(), 200);
    // 0.5-CPU jobs: 4 fit on the 2-CPU head at once.
    for round in 0..6 {
        for u in ["u1", "u2", "u3"] {
            svc.submit(
                u,
                "sleep 2",
                0.5,
                json!({"external_id": format!("{u}-{round}")}),
            )
            .await;
        }
    }
    head.wait_ready().await;

    // First cycle (DRF, history off, keys = dominant share / weight): u1 (oldest head),
    // u2 (key 0, older head than u3), then u3 twice (0 → 0.125 < 0.25).
    let first = eventually(60, "first four dispatches", || async {
        let d = by_dispatch(&svc.jobs().await);
        (d.len() >= 4).then_some(d)
    })
    .await;
    let mut first_users: Vec<&str> = first[..4].iter().map(|(_, u, _)| u.as_str()).collect();
    first_users.sort();
    assert_eq!(
        first_users,
        vec!["u1", "u2", "u3", "u3"],
        "first cycle's grants: {first:?}"
    );

    // Pause u2: nothing new is dispatched for it until it is resumed.
    let r = svc.post("/v1/users/u2/pause").await;
    assert_eq!(r.status(), 200);
    let paused_at = chrono::Utc::now().to_rfc3339();
    let u2_before = by_dispatch(&svc.jobs().await)
        .iter()
        .filter(|(_, u, _)| u == "u2")
        .count();
    // Let the others get at least four more dispatches while u2 is paused.
    let n_at_pause = by_dispatch(&svc.jobs().await).len();
    eventually(90, "dispatches while u2 is paused", || async {
        (by_dispatch(&svc.jobs().await).len() >= n_at_pause + 4).then_some(())
    })
    .await;
    let during: Vec<_> = by_dispatch(&svc.jobs().await)
        .into_iter()
        .filter(|(at, u, _)| u == "u2" && at.as_str() > paused_at.as_str())
        .collect();
    assert!(
        during.is_empty(),
        "u2 was dispatched while paused: {during:?}"
    );
    let u2_paused_count = by_dispatch(&svc.jobs().await)
        .iter()
        .filter(|(_, u, _)| u == "u2")
        .count();
    assert_eq!(u2_before, u2_paused_count);
    let user: serde_json::Value = svc.get("/v1/users/u2").await;
    assert_eq!(user["paused"], true);
    assert!(
        user["queued"].as_u64().unwrap() > 0,
        "queued jobs stay while paused"
    );
    assert_eq!(svc.post("/v1/users/u2/resume").await.status(), 200);

    // A long job, cancelled while it runs: Ray stops it, then it is STOPPED.
    let long = svc.submit("u4", "sleep 300", 0.5, json!({})).await;
    let long_id = long["id"].as_str().unwrap().to_string();
    eventually(120, "long job RUNNING", || async {
        (svc.job(&long_id).await["status"] == "RUNNING").then_some(())
    })
    .await;
    let r = svc.post(&format!("/v1/jobs/{long_id}/cancel")).await;
    assert_eq!(r.status(), 202);
    let stopped = eventually(60, "long job STOPPED", || async {
        let j = svc.job(&long_id).await;
        (j["status"] == "STOPPED").then_some(j)
    })
    .await;
    assert_eq!(stopped["message"], "cancelled by request");

    let jobs = all_terminal(&svc, 240).await;
    // Weighted fair share: u3 (weight 2) may hold twice u1's share, so its six jobs are
    // dispatched earlier on average than u1's six. (Not "u3's last before u1's last":
    // with history off the last grants follow which 0.5-CPU job Ray happens to end
    // first, and that check failed once in CI with u3's last job 1 s after u1's and
    // its mean 2.2 s ahead.)
    let order = by_dispatch(&jobs);
    let mean_at = |u: &str| {
        let at: Vec<f64> = order
            .iter()
            .filter(|(_, user, _)| user == u)
            .map(|(at, _, _)| {
                chrono::DateTime::parse_from_rfc3339(at)
                    .expect("dispatched_at is RFC 3339")
                    .timestamp_micros() as f64
                    / 1e6
            })
            .collect();
        at.iter().sum::<f64>() / at.len() as f64
    };
    assert!(
        mean_at("u3") < mean_at("u1"),
        "u3 (weight 2) should be dispatched earlier on average than u1: {order:?}"
    );
    // u2 was paused for a while: u3 is through its queue before u2 is.
    let last_of = |u: &str| order.iter().rposition(|(_, user, _)| user == u).unwrap();
    assert!(
        last_of("u3") < last_of("u2"),
        "u3 (weight 2) should finish dispatching before u2: {order:?}"
    );

    // Every trace job SUCCEEDED, with its whole path recorded.
    let db = fairshare::store::connect(&fairshare::config::DatabaseSettings {
        url: svc.db_url.clone(),
        max_connections: 1,
        acquire_timeout: std::time::Duration::from_secs(5),
        idle_in_transaction_timeout: std::time::Duration::from_secs(2),
        intake_pipeline: 1,
    })
    .await
    .unwrap();
    for j in jobs
        .iter()
        .filter(|j| j["user"] != "u4" && j["id"] != doomed_id.as_str())
    {
        assert_eq!(j["status"], "SUCCEEDED", "{j}");
        let id = uuid::Uuid::parse_str(j["id"].as_str().unwrap()).unwrap();
        let events = fairshare::store::job_events(&db, id).await.unwrap();
        let path: Vec<JobStatus> = events.iter().map(|e| e.to_status).collect();
        use JobStatus::*;
        let want = [Queued, Dispatching, Pending, Succeeded];
        let mut it = path.iter();
        assert!(
            want.iter().all(|w| it.any(|p| p == w)),
            "events of {id}: {path:?}"
        );
        assert!(
            j["started_at"].is_string() && j["finished_at"].is_string(),
            "{j}"
        );
    }
    // Ray saw each of our jobs once, and never the cancelled queued one.
    let ray_jobs = head.jobs().await;
    let ids: BTreeSet<&str> = ray_jobs.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids.len(),
        ray_jobs.len(),
        "a submission id appears twice in Ray"
    );
    assert!(!ids.contains(doomed_id.as_str()));
    assert_eq!(ray_jobs.len(), 19);

    // The metrics saw the same workload.
    let metrics = svc
        .client
        .get(format!("{}/metrics", svc.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |line_start: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    assert_eq!(value("fairshare_jobs_submitted_total"), 20.0, "{metrics}");
    assert_eq!(
        value("fairshare_jobs_dispatched_total{cluster=\"local\"}"),
        19.0
    );
    assert_eq!(
        value("fairshare_jobs_finished_total{status=\"SUCCEEDED\"}"),
        18.0
    );
    assert_eq!(
        value("fairshare_jobs_finished_total{status=\"STOPPED\"}"),
        2.0
    );
    assert_eq!(
        value("fairshare_cluster_healthy{cluster=\"local\"}"),
        1.0,
        "{metrics}\n{}",
        svc.log()
    );
    assert!(value("fairshare_cycles_total") > 0.0);
}

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn a_killed_service_restarts_without_losing_or_duplicating_jobs() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let ray = ray_bin();
    let dir = tempfile::tempdir().unwrap();
    let head = RayHead::spawn(&ray, 2);
    head.wait_ready().await;
    let mut svc = Service::start(dir.path(), &head.dashboard, "").await;
    let mut submitted = Vec::new();
    for i in 0..8 {
        let user = if i % 2 == 0 { "kim" } else { "lee" };
        let j = svc.submit(user, "sleep 3", 0.5, json!({})).await;
        submitted.push(j["id"].as_str().unwrap().to_string());
    }
    eventually(90, "some jobs running", || async {
        let n = svc
            .jobs()
            .await
            .iter()
            .filter(|j| j["status"] == "RUNNING")
            .count();
        (n >= 2).then_some(())
    })
    .await;
    svc.kill();
    // Nothing of ours runs now; Ray keeps going. Start again on the same database.
    svc.restart().await;
    let jobs = all_terminal(&svc, 240).await;
    let mut statuses = BTreeMap::new();
    for j in &jobs {
        *statuses
            .entry(j["status"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    assert_eq!(
        statuses.get("SUCCEEDED"),
        Some(&8),
        "{statuses:?}\n{}",
        svc.log()
    );
    let ray_jobs = head.jobs().await;
    for id in &submitted {
        let n = ray_jobs.iter().filter(|(sid, _)| sid == id).count();
        assert_eq!(n, 1, "job {id} appears {n} times in Ray");
    }
    assert_eq!(ray_jobs.len(), 8);
    assert!(svc.log().contains("recovered"), "recovery ran");
}

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn a_trace_slice_replayed_through_the_service_all_succeeds() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let ray = ray_bin();
    let dir = tempfile::tempdir().unwrap();
    let head = RayHead::spawn(&ray, 2);
    head.wait_ready().await;
    let svc = Service::start(dir.path(), &head.dashboard, "").await;
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/traces/coare-saliksik-2020.swf.gz");
    let replay = || {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_fairshare"))
            .args(["replay", "--quiet", "--limit", "24", "--time-scale", "1000"])
            .args([
                "--cpu-scale",
                "0.004",
                "--min-cpu",
                "0.25",
                "--max-cpu",
                "2",
            ])
            .args(["--server", &svc.url, "--trace"])
            .arg(&trace)
            .output()
    };
    let out = replay().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "replay failed\n{stdout}\n{stderr}\n{}",
        svc.log()
    );
    let jobs = all_terminal(&svc, 120).await;
    assert_eq!(jobs.len(), 24);
    assert!(jobs.iter().all(|j| j["status"] == "SUCCEEDED"), "{jobs:?}");
    assert!(
        stdout.contains("u62"),
        "the per-user table names the trace's users:\n{stdout}"
    );
    // A rerun does not double-submit: the external ids are already known.
    let again = replay().await.unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(svc.jobs().await.len(), 24);
    assert_eq!(head.jobs().await.len(), 24);
}
