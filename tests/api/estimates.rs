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

/// Inserts QUEUED jobs `(user, priority, submit second)` and one RUNNING job of
/// `carol`; the intake's triggers keep `queue_counts`.
async fn insert_queued(db: &sea_orm::DatabaseConnection, jobs: &[(String, i32, i64)]) {
    use sea_orm::EntityTrait;
    let ts = |t: i64| DateTime::<Utc>::from_timestamp(1_800_000_000 + t, 0).unwrap();
    let mut rows = Vec::new();
    for (user, priority, at) in jobs {
        rows.push(entity::job::Model {
            entrypoint: "sleep 1".into(),
            cpu: 1.0,
            priority: *priority,
            ..fairshare::store::job_row(
                uuid::Uuid::now_v7(),
                user.clone(),
                entity::JobStatus::Queued,
                ts(*at),
            )
        });
    }
    rows.push(entity::job::Model {
        entrypoint: "sleep 1".into(),
        cpu: 1.0,
        cluster: Some("c1".into()),
        dispatched_at: Some(ts(0)),
        started_at: Some(ts(0)),
        ..fairshare::store::job_row(
            uuid::Uuid::now_v7(),
            "carol".into(),
            entity::JobStatus::Running,
            ts(0),
        )
    });
    for row in rows {
        entity::job::Entity::insert(sea_orm::IntoActiveModel::into_active_model(row))
            .exec_without_returning(db)
            .await
            .unwrap();
    }
}

/// The forward run's read past `estimates.max_jobs` (issue 43 §7): each user's first
/// `k` QUEUED jobs in queue order (priority descending, then submit time, then id),
/// every outstanding job, and the queues' lengths from `queue_counts`; on both
/// databases (a window function), against the order computed here, for random queues.
fn the_estimates_read_is_each_users_first_k_jobs_in_queue_order(which: crate::helpers::Db) {
    use proptest::prelude::*;
    let strategy = (
        proptest::collection::vec((0usize..4, -2i32..3, 0i64..50), 0..40),
        1u64..6,
    );
    crate::helpers::property_on_db(which, 24, strategy, |db, (jobs, k)| async move {
        use sea_orm::ConnectionTrait;
        db.execute_unprepared("DELETE FROM jobs").await.unwrap();
        let jobs: Vec<(String, i32, i64)> = jobs
            .into_iter()
            .map(|(u, p, t)| (["alice", "bob", "dave", "eve"][u].to_owned(), p, t))
            .collect();
        insert_queued(&db, &jobs).await;
        let mut counts = fairshare::store::queued_per_user(&db).await.unwrap();
        counts.sort();
        let mut want_counts: std::collections::BTreeMap<String, u64> = Default::default();
        for (u, _, _) in &jobs {
            *want_counts.entry(u.clone()).or_default() += 1;
        }
        prop_assert_eq!(counts, want_counts.into_iter().collect::<Vec<_>>());

        let all = fairshare::store::waiting_and_outstanding(&db, None)
            .await
            .unwrap();
        let cut = fairshare::store::waiting_and_outstanding(&db, Some(k))
            .await
            .unwrap();
        // The uncut read's QUEUED jobs are in queue order per user (its own contract);
        // the cut keeps each user's first k of them, in that order.
        let queued = |rows: &[entity::job::Model]| -> Vec<(String, uuid::Uuid)> {
            rows.iter()
                .filter(|r| r.status == entity::JobStatus::Queued)
                .map(|r| (r.user_id.clone(), r.id))
                .collect()
        };
        let mut taken: std::collections::HashMap<String, u64> = Default::default();
        let want: Vec<(String, uuid::Uuid)> = queued(&all)
            .into_iter()
            .filter(|(u, _)| {
                let n = taken.entry(u.clone()).or_default();
                *n += 1;
                *n <= k
            })
            .collect();
        prop_assert_eq!(queued(&cut), want);
        // Queue order checked from scratch on the uncut read.
        let order: Vec<(String, i32, DateTime<Utc>, uuid::Uuid)> = all
            .iter()
            .filter(|r| r.status == entity::JobStatus::Queued)
            .map(|r| (r.user_id.clone(), -r.priority, r.submitted_at, r.id))
            .collect();
        let mut sorted = order.clone();
        sorted.sort();
        prop_assert_eq!(order, sorted);
        // The running job is read either way.
        for rows in [&all, &cut] {
            prop_assert_eq!(
                rows.iter()
                    .filter(|r| r.status == entity::JobStatus::Running)
                    .count(),
                1
            );
        }
        Ok(())
    });
}

#[test]
fn the_estimates_read_is_each_users_first_k_jobs_in_queue_order_sqlite() {
    the_estimates_read_is_each_users_first_k_jobs_in_queue_order(crate::helpers::Db::Sqlite);
}

#[test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
fn the_estimates_read_is_each_users_first_k_jobs_in_queue_order_postgres() {
    the_estimates_read_is_each_users_first_k_jobs_in_queue_order(crate::helpers::Db::Postgres);
}
