//! Job events pushed (DESIGN §4, "Events"): the SSE stream `GET /v1/events` with
//! `Last-Event-ID` resume, and webhooks delivered at least once, in order, signed,
//! across a receiver outage and a restart of the service.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use fairshare::config::WebhookSettings;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::both_databases;
use crate::helpers::{
    assert_error, spawn_app, spawn_app_with, start_on, test_settings, Db, TestApp, SUBMITTER,
};

/// A reader of one SSE response.
struct Sse {
    resp: reqwest::Response,
    buf: String,
}

impl Sse {
    async fn open(app: &TestApp, query: &str, last_event_id: Option<i64>) -> Sse {
        let mut req = app
            .client
            .get(app.url(&format!("/v1/events{query}")))
            .bearer_auth(SUBMITTER);
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let resp = req.send().await.expect("open the stream");
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Sse {
            resp,
            buf: String::new(),
        }
    }

    /// The next `event: job` (its id and data), or `None` if none comes within `wait`.
    async fn next(&mut self, wait: Duration) -> Option<(i64, Value)> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            while let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut id = None;
                let mut data = None;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        id = v.parse::<i64>().ok();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data = serde_json::from_str::<Value>(v).ok();
                    }
                }
                if let (Some(id), Some(data)) = (id, data) {
                    assert!(block.contains("event: job\n"), "{block}");
                    return Some((id, data));
                }
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk()).await;
            match chunk {
                Ok(Ok(Some(bytes))) => self.buf.push_str(&String::from_utf8_lossy(&bytes)),
                _ => return None,
            }
        }
    }

    /// The next `n` events, waiting for them up to `deadline` in all (a loaded machine
    /// may take seconds), then none more within `quiet`.
    async fn take(&mut self, n: usize, deadline: Duration, quiet: Duration) -> Vec<(i64, Value)> {
        let until = tokio::time::Instant::now() + deadline;
        let mut out = Vec::new();
        while out.len() < n {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some(e) => out.push(e),
                None => panic!("{} of {n} events within {deadline:?}: {out:?}", out.len()),
            }
        }
        if let Some(extra) = self.next(quiet).await {
            panic!("an event beyond the {n} expected: {extra:?} after {out:?}");
        }
        out
    }

    /// Every event that comes until none has come for `quiet`.
    async fn drain(&mut self, quiet: Duration) -> Vec<(i64, Value)> {
        let mut out = Vec::new();
        while let Some(e) = self.next(quiet).await {
            out.push(e);
        }
        out
    }
}

async fn cancel(app: &TestApp, id: &str) {
    let resp = app
        .post(&format!("/v1/jobs/{id}/cancel"), SUBMITTER, json!({}))
        .await;
    assert!(resp.status().is_success(), "{:?}", resp.text().await);
}

fn id_of(job: &Value) -> String {
    job["id"].as_str().expect("job id").to_string()
}

async fn a_stream_that_reconnects_with_last_event_id_gets_the_gap(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let mut live = Sse::open(&app, "", None).await;
    let a = app.submit("alice", json!({"external_id": "order-1"})).await;
    let (first_id, first) = live
        .next(Duration::from_secs(10))
        .await
        .expect("the live stream shows the new job");
    assert_eq!(first["job_id"], a["id"]);
    assert_eq!(first["id"], first_id);
    assert_eq!(first["user"], "alice");
    assert_eq!(first["external_id"], "order-1");
    assert_eq!(first["from"], Value::Null);
    assert_eq!(first["to"], "QUEUED");
    assert!(first["at"].is_string());
    drop(live);

    // While nobody listens: a new job and a cancel.
    let b = app.submit("bob", json!({})).await;
    cancel(&app, &id_of(&a)).await;

    let mut resumed = Sse::open(&app, "", Some(first_id)).await;
    let got = resumed.drain(Duration::from_millis(700)).await;
    let seen: Vec<(Value, Value, Value)> = got
        .iter()
        .map(|(_, e)| (e["job_id"].clone(), e["from"].clone(), e["to"].clone()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (b["id"].clone(), Value::Null, json!("QUEUED")),
            (a["id"].clone(), json!("QUEUED"), json!("STOPPED")),
        ],
        "the reconnected stream gets exactly the gap, in order"
    );
    assert!(got.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(got[0].0 > first_id);
    // And it goes on live after the gap.
    let c = app.submit("carol", json!({})).await;
    let (_, live_again) = resumed
        .next(Duration::from_secs(10))
        .await
        .expect("live after the gap");
    assert_eq!(live_again["job_id"], c["id"]);
}
both_databases!(a_stream_that_reconnects_with_last_event_id_gets_the_gap);

async fn the_stream_shows_only_the_user_or_job_asked_for(db: Db) {
    let Some(app) = spawn_app(db).await else {
        return;
    };
    let a1 = app.submit("alice", json!({})).await;
    let b1 = app.submit("bob", json!({})).await;
    let a2 = app.submit("alice", json!({})).await;
    cancel(&app, &id_of(&b1)).await;
    cancel(&app, &id_of(&a1)).await;

    let mut alice = Sse::open(&app, "?user=alice&last_event_id=0", None).await;
    let jobs: Vec<Value> = alice
        .take(3, Duration::from_secs(20), Duration::from_millis(300))
        .await
        .into_iter()
        .map(|(_, e)| {
            assert_eq!(e["user"], "alice");
            e["job_id"].clone()
        })
        .collect();
    assert_eq!(
        jobs,
        vec![a1["id"].clone(), a2["id"].clone(), a1["id"].clone()]
    );

    let mut one = Sse::open(&app, &format!("?job={}&last_event_id=0", id_of(&b1)), None).await;
    let tos: Vec<Value> = one
        .take(2, Duration::from_secs(20), Duration::from_millis(300))
        .await
        .into_iter()
        .map(|(_, e)| e["to"].clone())
        .collect();
    assert_eq!(tos, vec![json!("QUEUED"), json!("STOPPED")]);
}
both_databases!(the_stream_shows_only_the_user_or_job_asked_for);

#[actix_web::test]
async fn a_bad_event_id_or_filter_is_422_naming_the_field() {
    let app = spawn_app(Db::Sqlite).await.expect("sqlite app");
    let get = |q: &'static str, last: Option<&'static str>| {
        let mut r = app
            .client
            .get(app.url(&format!("/v1/events{q}")))
            .bearer_auth(SUBMITTER);
        if let Some(l) = last {
            r = r.header("Last-Event-ID", l);
        }
        r.send()
    };
    let r = get("", Some("-1")).await.unwrap();
    assert_error(r, 422, "invalid_field", Some("Last-Event-ID")).await;
    let r = get("", Some("abc")).await.unwrap();
    assert_error(r, 422, "invalid_field", Some("Last-Event-ID")).await;
    let r = get("?last_event_id=1.5", None).await.unwrap();
    assert_error(r, 422, "invalid_field", Some("last_event_id")).await;
    let r = get("?job=nope", None).await.unwrap();
    assert_error(r, 422, "invalid_field", Some("job")).await;
    let r = get("?user=", None).await.unwrap();
    assert_error(r, 422, "invalid_field", Some("user")).await;
    let r = get("?colour=red", None).await.unwrap();
    assert_eq!(r.status(), 422);
    let r = app.client.get(app.url("/v1/events")).send().await.unwrap();
    assert_eq!(r.status(), 401);
}

const SECRET: &str = "webhook-secret-0123456789";

fn verify(signature: &str, body: &[u8]) -> bool {
    let Some((t, v1)) = signature
        .split_once(',')
        .and_then(|(t, v)| Some((t.strip_prefix("t=")?, v.strip_prefix("v1=")?)))
    else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    let want: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    want == v1
}

async fn until<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn a_webhook_receiver_that_is_down_and_comes_back_gets_every_event_in_order_across_a_restart(
    db: Db,
) {
    // The receiver's port, with nothing listening on it yet: deliveries are refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Metrics are process-wide: one webhook name per test.
    let name = format!("gateway-{db:?}");
    let hook = name.clone();
    let tweak = move |s: &mut fairshare::Settings| {
        s.webhooks = vec![WebhookSettings {
            name: hook.clone(),
            url: format!("http://127.0.0.1:{port}/hook"),
            secret: SECRET.into(),
            events: None,
        }];
        s.events.poll_interval = Duration::from_millis(100);
        s.events.webhook_retry_initial_backoff = Duration::from_millis(20);
        s.events.webhook_retry_max_backoff = Duration::from_millis(200);
        s.events.webhook_timeout = Duration::from_secs(2);
    };
    let Some(app) = spawn_app_with(db, tweak.clone()).await else {
        return;
    };
    let mut jobs = Vec::new();
    for i in 0..3 {
        jobs.push(
            app.submit("alice", json!({"external_id": format!("a-{i}")}))
                .await,
        );
    }
    cancel(&app, &id_of(&jobs[0])).await;
    until(10, "a failed delivery", || async {
        crate::helpers::metric(
            &app.metrics().await,
            &format!("fairshare_webhook_failures_total{{webhook=\"{name}\"}}"),
        ) >= 1.0
    })
    .await;

    // Restart while the receiver is still down.
    let test_db = app.stop().await;
    let mut settings = test_settings(&test_db.url);
    tweak(&mut settings);
    let app = start_on(test_db, settings).await;
    jobs.push(app.submit("bob", json!({})).await);
    jobs.push(app.submit("bob", json!({})).await);
    cancel(&app, &id_of(&jobs[3])).await;

    // The receiver comes back on the same port.
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("rebind the port");
    let receiver = wiremock::MockServer::builder()
        .listener(listener)
        .start()
        .await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/hook"))
        .respond_with(wiremock::ResponseTemplate::new(204))
        .mount(&receiver)
        .await;

    let conn = sea_orm::Database::connect(&app.db.url).await.unwrap();
    let events = fairshare::store::events_after(&conn, 0, 1000)
        .await
        .unwrap();
    assert_eq!(events.len(), 7, "5 submits and 2 cancels");
    let want: BTreeSet<i64> = events.iter().map(|e| e.id).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (got, order) = loop {
        let mut got: BTreeMap<i64, Value> = BTreeMap::new();
        let mut order: Vec<i64> = Vec::new();
        for r in receiver.received_requests().await.unwrap_or_default() {
            let delivery: i64 = r.headers["x-fairshare-delivery"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            let sig = r.headers["x-fairshare-signature"].to_str().unwrap();
            assert!(verify(sig, &r.body), "signature {sig} does not verify");
            let body: Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(body["id"], delivery);
            order.push(delivery);
            got.insert(delivery, body);
        }
        if got.keys().copied().collect::<BTreeSet<_>>() == want {
            break (got, order);
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for every event; got {order:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Once per delivery id (a redelivery would repeat an id; at least once allows it,
    // but nothing here crashed between a delivery and its cursor).
    assert_eq!(order.len(), want.len(), "each event once: {order:?}");
    // In order per job (and here, as one webhook sends in id order, overall).
    let mut last_per_job: BTreeMap<String, i64> = BTreeMap::new();
    for id in &order {
        let job = got[id]["job_id"].as_str().unwrap().to_string();
        if let Some(prev) = last_per_job.insert(job, *id) {
            assert!(prev < *id, "job events out of order: {order:?}");
        }
    }
    for e in &events {
        assert_eq!(got[&e.id]["to"], serde_json::to_value(e.to).unwrap());
        assert_eq!(got[&e.id]["user"], e.user);
    }
    until(10, "the outbox drained", || async {
        let m = app.metrics().await;
        m.contains(&format!(
            "fairshare_webhook_outbox_depth{{webhook=\"{name}\"}} 0"
        ))
    })
    .await;
}
both_databases!(
    a_webhook_receiver_that_is_down_and_comes_back_gets_every_event_in_order_across_a_restart
);

async fn a_webhook_gets_only_the_statuses_it_asked_for(db: Db) {
    let receiver = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(200))
        .mount(&receiver)
        .await;
    let url = format!("{}/done", receiver.uri());
    let Some(app) = spawn_app_with(db, move |s| {
        s.webhooks = vec![WebhookSettings {
            name: format!("finished-{db:?}"),
            url,
            secret: SECRET.into(),
            events: Some(vec![entity::JobStatus::Stopped]),
        }];
        s.events.poll_interval = Duration::from_millis(100);
    })
    .await
    else {
        return;
    };
    let a = app.submit("alice", json!({})).await;
    let _b = app.submit("alice", json!({})).await;
    cancel(&app, &id_of(&a)).await;
    until(10, "the STOPPED event delivered", || async {
        !receiver
            .received_requests()
            .await
            .unwrap_or_default()
            .is_empty()
    })
    .await;
    // Give a wrongly sent QUEUED event time to show up, then check there is none.
    until(10, "the outbox drained", || async {
        app.metrics().await.contains(&format!(
            "fairshare_webhook_outbox_depth{{webhook=\"finished-{db:?}\"}} 0"
        ))
    })
    .await;
    let got = receiver.received_requests().await.unwrap();
    assert_eq!(got.len(), 1);
    let body: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(body["job_id"], a["id"]);
    assert_eq!(body["to"], "STOPPED");
    assert_eq!(got[0].headers["x-fairshare-event"], "STOPPED");
}
both_databases!(a_webhook_gets_only_the_statuses_it_asked_for);

/// Another replica's commits do not wake this process's readers: a stream sees them
/// by its own look every `events.poll_interval`. An event row written behind the
/// service's back (as another replica's would be) shows up within that bound.
#[actix_web::test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
async fn another_replicas_events_reach_a_stream_within_the_poll_interval() {
    let Some(app) = spawn_app_with(Db::Postgres, |s| {
        s.events.poll_interval = Duration::from_millis(200);
    })
    .await
    else {
        return;
    };
    let job = app.submit("ivan", json!({})).await;
    let mut stream = Sse::open(&app, "?user=ivan&last_event_id=0", None).await;
    let (_, queued) = stream.next(Duration::from_secs(10)).await.expect("QUEUED");
    assert_eq!(queued["to"], "QUEUED");

    let conn = sea_orm::Database::connect(&app.db.url).await.unwrap();
    let written = Instant::now();
    sea_orm::ConnectionTrait::execute_unprepared(
        &conn,
        &format!(
            "INSERT INTO job_events (job_id, from_status, to_status, at, detail) \
             VALUES ('{}', 'QUEUED', 'STOPPED', now(), 'written by another replica')",
            id_of(&job)
        ),
    )
    .await
    .unwrap();
    let (_, stopped) = stream
        .next(Duration::from_secs(5))
        .await
        .expect("the other replica's event");
    let took = written.elapsed();
    assert_eq!(stopped["to"], "STOPPED");
    assert_eq!(stopped["message"], "written by another replica");
    assert!(
        took < Duration::from_millis(1500),
        "seen after {took:?}; the poll interval is 200 ms"
    );
}
