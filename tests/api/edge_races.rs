//! Issue 26's scenario: a cancel while the submit is in flight. A fake Ray with 4 CPUs
//! behind a loopback proxy that holds each `POST /api/jobs/` for 2 s before Ray sees
//! it; the job is cancelled (202) while DISPATCHING. Variant X: the submit goes
//! through; Y: the proxy answers 503 to the submits; Z: the user is paused right after
//! the cancel. In every variant the job ends STOPPED, never goes back to the queue,
//! reaches Ray at most once per dispatch, and never runs to completion in Ray.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::both_databases;
use crate::fake_ray::{self, State};
use crate::helpers::{Db, TestApp, ADMIN, SUBMITTER};

/// How long the proxy holds each submit.
const HOLD: Duration = Duration::from_secs(2);

/// POSTs one dispatch may send (`dispatcher.retry_attempts`).
const RETRY_ATTEMPTS: u32 = 5;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    /// The submit goes through after the hold.
    Through,
    /// The proxy answers 503 to every submit.
    Refused503,
    /// The submit goes through; the user is paused right after the cancel.
    PausedAfterCancel,
}

async fn app(db: Db, server: &wiremock::MockServer) -> TestApp {
    let uri = server.uri();
    crate::helpers::spawn_app_with(db, move |s| {
        s.clusters = vec![fairshare::config::ClusterSettings {
            name: "fake".into(),
            address: uri,
            ..Default::default()
        }];
        s.monitor.poll_interval = Duration::from_millis(100);
        s.monitor.usage_report_lag = Duration::from_millis(300);
        s.dispatcher.retry_initial_backoff = Duration::from_millis(10);
        s.dispatcher.retry_max_backoff = Duration::from_millis(20);
        // Longer than the proxy's hold, so a held submit is answered, not timed out.
        s.dispatcher.request_timeout = Duration::from_secs(5);
        s.dispatcher.retry_attempts = RETRY_ATTEMPTS;
    })
    .await
    .expect("database available")
}

async fn job(app: &TestApp, id: &str) -> Value {
    app.get_json(&format!("/v1/jobs/{id}"), SUBMITTER).await
}

async fn until<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn cancelled_while_dispatching(db: Db, variant: Variant) {
    let (server, state): (_, Arc<Mutex<State>>) = fake_ray::start(4.0, |s| {
        s.submit_hold = HOLD;
        // 6 s of running at 10 polls a second.
        s.run_polls = 60;
        if variant == Variant::Refused503 {
            s.submit_status = Some(503);
        }
    })
    .await;
    let app = app(db, &server).await;
    let id = app.submit("u", json!({"resources": {"cpu": 1}})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    until(10, "DISPATCHING", || async {
        (job(&app, &id).await["status"] == "DISPATCHING").then_some(())
    })
    .await;
    let resp = app
        .post(&format!("/v1/jobs/{id}/cancel"), SUBMITTER, json!({}))
        .await;
    assert_eq!(resp.status(), 202, "a cancel while DISPATCHING is accepted");
    if variant == Variant::PausedAfterCancel {
        let resp = app.post("/v1/users/u/pause", ADMIN, json!({})).await;
        assert_eq!(resp.status(), 200);
    }
    let ended = until(20, "the job to end", || async {
        let j = job(&app, &id).await;
        let status = j["status"].as_str().unwrap_or_default().to_string();
        assert_ne!(
            status, "QUEUED",
            "a cancelled job went back to the queue: {j}"
        );
        matches!(status.as_str(), "STOPPED" | "FAILED" | "SUCCEEDED").then_some(j)
    })
    .await;
    assert_eq!(ended["status"], "STOPPED", "{ended}");

    let events = app
        .get_json(&format!("/v1/jobs/{id}/events"), SUBMITTER)
        .await;
    let moves: Vec<(&str, &str)> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["from"].as_str().unwrap_or_default(),
                e["to"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        moves.iter().filter(|(_, to)| *to == "QUEUED").count(),
        1,
        "QUEUED only at submit: {events}"
    );
    assert_eq!(
        moves
            .iter()
            .filter(|m| **m == ("QUEUED", "DISPATCHING"))
            .count(),
        1,
        "one dispatch round: {events}"
    );

    // Ray: never two submissions that it accepted, and the job never ran to the end.
    let s = state.lock().unwrap();
    let posts = s.post_ids.iter().filter(|p| **p == id).count();
    match variant {
        Variant::Through | Variant::PausedAfterCancel => {
            assert_eq!(posts, 1, "one POST reaches Ray: {:?}", s.post_ids);
            let ray = s.jobs.get(&id).expect("Ray has the job");
            assert!(ray.stop_requested, "the stop reached Ray");
            assert_ne!(
                ray.status, "SUCCEEDED",
                "the cancelled job ran to completion"
            );
        }
        Variant::Refused503 => {
            assert!(
                (1..=RETRY_ATTEMPTS as usize).contains(&posts),
                "one dispatch's POSTs at most ({posts} of {RETRY_ATTEMPTS})"
            );
            assert!(!s.jobs.contains_key(&id), "Ray never saw it");
        }
    }
    assert!(s.in_transit.is_empty());
}

async fn cancel_in_flight_submit_goes_through(db: Db) {
    cancelled_while_dispatching(db, Variant::Through).await
}
both_databases!(cancel_in_flight_submit_goes_through);

async fn cancel_in_flight_submit_refused_503(db: Db) {
    cancelled_while_dispatching(db, Variant::Refused503).await
}
both_databases!(cancel_in_flight_submit_refused_503);

async fn cancel_in_flight_then_pause(db: Db) {
    cancelled_while_dispatching(db, Variant::PausedAfterCancel).await
}
both_databases!(cancel_in_flight_then_pause);
