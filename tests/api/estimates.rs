//! Estimated starts (issue 48 §1) through the API: a live service with a fake Ray of
//! 2 CPUs, two jobs running, three waiting; every QUEUED job gets `estimated_start`,
//! `position` and `estimate_basis` on `/v1/jobs/{id}`, in the list, and in Ray's
//! `message` on `/api/jobs/{id}`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::fake_ray;
use crate::helpers::{until, TestApp, SUBMITTER};

fn at(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap_or_else(|| panic!("a time: {v}")))
        .unwrap()
        .with_timezone(&Utc)
}

/// The `message` of job `id` (its submission id) in Ray's job list `list`, if listed.
fn listed_message(list: &Value, id: &str) -> Option<String> {
    list.as_array()?
        .iter()
        .find(|d| d["submission_id"] == id)
        .map(|d| d["message"].as_str().unwrap_or("").to_string())
}

/// A service on a fake Ray of `cpus` CPUs whose jobs run until the test ends,
/// estimates refreshed every second, no decayed usage, `tune` applied last; returned
/// once the cluster's capacity is known.
async fn estimating_app(
    cpus: f64,
    tune: impl FnOnce(&mut fairshare::config::Settings),
) -> (TestApp, wiremock::MockServer) {
    let (server, _state) = fake_ray::start(cpus, |s| s.run_polls = 1_000_000).await;
    let app = crate::helpers::app_with_cluster("fake", server.uri(), |s| {
        s.estimates.refresh = Duration::from_secs(1);
        s.scheduler.usage_half_life = Duration::ZERO;
        tune(s);
    })
    .await;
    until(10, "capacity known", || async {
        let v = app.get_json("/v1/scheduler", SUBMITTER).await;
        (v["clusters"][0]["capacity"]["cpu"] == cpus).then_some(())
    })
    .await;
    (app, server)
}

/// Submits `n` jobs of `user`, each `sleep 100` with `max_runtime_s` 100 (so estimated
/// to run 100 s); their ids in order.
async fn submit_sleepers(app: &TestApp, user: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let j = app
            .submit(
                user,
                json!({"entrypoint": "sleep 100", "max_runtime_s": 100}),
            )
            .await;
        ids.push(j["id"].as_str().unwrap().to_string());
    }
    ids
}
#[actix_web::test]
async fn every_waiting_job_gets_an_estimated_start_position_and_basis() {
    // Jobs run until the test ends.
    let (app, _server) = estimating_app(2.0, |s| {
        s.estimates.default_runtime = Duration::from_secs(3600);
    })
    .await;
    // alice: two 1-CPU jobs of at most 100 s start at once; a third (100 s) waits.
    // bob: a job with no max_runtime_s (the default, an hour) waits.
    let alice = submit_sleepers(&app, "alice", 3).await;
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
            && message.contains("(position 1 among the waiting jobs; this job's run time by default, each job ahead's by its own)"),
        "{message}"
    );
    assert_eq!(ray["fairshare"]["estimate_basis"], "default");
}

/// Followers answer the leader's estimates (issue 48 §1): on PostgreSQL the leader
/// writes each refresh's estimates to `job_estimates` and a follower reads them, so
/// `GET /v1/jobs/{id}` and Ray's `/api/jobs/{id}` on the follower show what the leader
/// shows (they were null there). Two replicas on one database, one fake Ray of 2 CPUs.
#[actix_web::test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
async fn a_follower_answers_the_leaders_estimates() {
    use crate::helpers::{test_settings, Db, TestDb};
    let Some(db) = TestDb::new(Db::Postgres).await else {
        return;
    };
    let (server, _state) = fake_ray::start(2.0, |s| s.run_polls = 1_000_000).await;
    let replica = |id: &'static str| {
        let mut s = test_settings(&db.url);
        s.leadership.replica_id = id.into();
        s.leadership.lease = Duration::from_secs(2);
        s.leadership.renew_every = Duration::from_millis(500);
        s.clusters = vec![fairshare::config::ClusterSettings {
            name: "fake".into(),
            address: server.uri(),
            ..Default::default()
        }];
        s.monitor.poll_interval = Duration::from_millis(100);
        s.estimates.refresh = Duration::from_millis(300);
        s.estimates.default_runtime = Duration::from_secs(3600);
        s.scheduler.usage_half_life = Duration::ZERO;
        async move {
            let app = fairshare::Application::build(s)
                .await
                .expect("build replica");
            let address = format!("http://127.0.0.1:{}", app.port());
            let handle = app.handle();
            actix_web::rt::spawn(app.run_until_stopped());
            (address, handle)
        }
    };
    let (a, a_handle) = replica("replica-a").await;
    let (b, b_handle) = replica("replica-b").await;
    let client = reqwest::Client::new();
    let get = |base: &String, path: String| {
        let client = client.clone();
        let url = format!("{base}{path}");
        async move {
            let r = client.get(url).bearer_auth(SUBMITTER).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let leads = get(&a, "/v1/scheduler".into()).await;
    assert_eq!(leads["leadership"]["is_leader"], true, "{leads}");
    assert_eq!(
        get(&b, "/v1/scheduler".into()).await["leadership"]["is_leader"],
        false
    );
    until(10, "capacity known", || async {
        let v = get(&a, "/v1/scheduler".into()).await;
        (v["clusters"][0]["capacity"]["cpu"] == 2.0).then_some(())
    })
    .await;
    // Three 1-CPU jobs of at most 100 s through the follower: two run, one waits.
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = client
            .post(format!("{b}/v1/jobs"))
            .bearer_auth(SUBMITTER)
            .json(&json!({"user": "alice", "entrypoint": "sleep 100", "max_runtime_s": 100}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        ids.push(
            r.json::<Value>().await.unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let waiting = until(20, "two running, one waiting with an estimate", || async {
        let mut queued = None;
        let mut running = 0;
        for id in &ids {
            let v = get(&a, format!("/v1/jobs/{id}")).await;
            match v["status"].as_str() {
                Some("RUNNING") => running += 1,
                Some("QUEUED") if !v["estimated_start"].is_null() => queued = Some(v),
                _ => {}
            }
        }
        (running == 2).then_some(queued).flatten()
    })
    .await;
    let id = waiting["id"].as_str().unwrap().to_string();
    // The follower shows the leader's estimate, a refresh later.
    let on_b = until(10, "the follower's estimate", || async {
        let v = get(&b, format!("/v1/jobs/{id}")).await;
        (!v["estimated_start"].is_null()).then_some(v)
    })
    .await;
    assert_eq!(on_b["status"], "QUEUED");
    assert_eq!(
        at(&on_b["estimated_start"]),
        at(&waiting["estimated_start"]),
        "{on_b} / {waiting}"
    );
    assert_eq!(on_b["position"], 1, "{on_b}");
    assert_eq!(on_b["estimate_basis"], "max_runtime", "{on_b}");
    // The list, and Ray's Jobs API's message, on the follower.
    let list = get(&b, "/v1/jobs?user=alice&status=QUEUED".into()).await;
    assert_eq!(list["jobs"][0]["estimate_basis"], "max_runtime", "{list}");
    let ray = get(&b, format!("/api/jobs/{id}")).await;
    let message = ray["message"].as_str().unwrap();
    assert!(
        message.contains("expected to start at about ")
            && message.contains("(position 1 among the waiting jobs; this job's run time by max_runtime, each job ahead's by its own)"),
        "{message}"
    );
    // A paused user's job, in Ray's job list on the follower: it cannot start as
    // things stand (a fresh tester's finding: the follower's list said it waited for
    // its turn, the leader's did not); alice's waiting job says no such thing.
    let r = client
        .put(format!("{a}/v1/users/paula"))
        .bearer_auth(crate::helpers::ADMIN)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = client
        .post(format!("{a}/v1/users/paula/pause"))
        .bearer_auth(crate::helpers::ADMIN)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text().await);
    let r = client
        .post(format!("{b}/v1/jobs"))
        .bearer_auth(SUBMITTER)
        .json(&json!({"user": "paula", "entrypoint": "sleep 1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let paula = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let list = until(
        10,
        "the follower's list says paula's job cannot start",
        || async {
            let list = get(&b, "/api/jobs/".into()).await;
            listed_message(&list, &paula)
                .unwrap_or_default()
                .starts_with("queued in fairshare: it cannot start as things stand")
                .then_some(list)
        },
    )
    .await;
    assert!(
        !listed_message(&list, &id)
            .unwrap_or_default()
            .contains("cannot start"),
        "{list}"
    );
    a_handle.stop(true).await;
    b_handle.stop(true).await;
}

/// `job_estimates` (DESIGN §6): a write replaces every row in one transaction, the
/// rows read back as written, and a leader whose term has passed writes nothing.
#[actix_web::test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
async fn the_stored_estimates_are_replaced_whole_and_fenced() {
    use crate::helpers::{Db, TestDb};
    use fairshare::store::{self, Fence, Reclaim, StoredEstimate};
    use sea_orm::ConnectionTrait;
    let Some(db) = TestDb::new(Db::Postgres).await else {
        return;
    };
    let conn = sea_orm::Database::connect(&db.url).await.unwrap();
    store::migrate(&conn).await.unwrap();
    assert_eq!(store::estimates_computed_at(&conn).await.unwrap(), None);
    let row = |n: u128, start_us: i64, position: i64| StoredEstimate {
        job_id: uuid::Uuid::from_u128(n),
        start_us,
        position,
        basis: "max_runtime".into(),
        not_before_us: None,
    };
    let lease = Duration::from_secs(4);
    let (term, _) = store::lease_acquire(&conn, "a", lease, Reclaim::Never)
        .await
        .unwrap()
        .expect("the lease starts free");
    let a = Fence::Term {
        holder: "a".into(),
        term,
    };
    // More rows than one statement takes.
    let many: Vec<StoredEstimate> = (0..25_000)
        .map(|n| row(n, 1_000 + n as i64, n as i64 + 1))
        .collect();
    store::save_estimates(&conn, &a, 7, &many).await.unwrap();
    assert_eq!(store::estimates_computed_at(&conn).await.unwrap(), Some(7));
    assert_eq!(store::load_estimates(&conn).await.unwrap().len(), 25_000);
    let few = vec![
        row(1, 5, 1),
        StoredEstimate {
            not_before_us: Some(99),
            ..row(2, 6, 2)
        },
    ];
    store::save_estimates(&conn, &a, 8, &few).await.unwrap();
    let mut back = store::load_estimates(&conn).await.unwrap();
    back.sort_by_key(|r| r.position);
    assert_eq!(back, few);
    assert_eq!(store::estimates_computed_at(&conn).await.unwrap(), Some(8));

    // The lease lapses and b takes it: a's next write is refused and changes nothing.
    conn.execute_unprepared("UPDATE leases SET expires_at = now() - interval '1 second'")
        .await
        .unwrap();
    store::lease_acquire(&conn, "b", lease, Reclaim::Never)
        .await
        .unwrap()
        .expect("a lapsed lease is taken");
    let refused = store::save_estimates(&conn, &a, 9, &[row(3, 1, 1)])
        .await
        .unwrap_err();
    assert!(store::is_fenced(&refused), "{refused}");
    assert_eq!(store::estimates_computed_at(&conn).await.unwrap(), Some(8));
    assert_eq!(store::load_estimates(&conn).await.unwrap().len(), 2);
    conn.close().await.ok();
}

/// A job the forward run stops before reaching (past `estimates.horizon`) has no
/// `estimated_start` but `estimated_after`: the instant the run stopped at, which it
/// starts no sooner than; Ray's message says so. 2 CPUs, five 100-s jobs of one user,
/// a horizon of 150 s: two run, two start when they end (+100 s), the fifth would start
/// at +200 s. A job that can never start as things stand is not marked (a fresh tester
/// found a job larger than every cluster given `estimated_after`): bob's 2-CPU job once
/// his `max_resources` is 1 CPU, and paused carol's.
#[actix_web::test]
async fn a_job_beyond_the_horizon_is_marked() {
    let (app, _server) = estimating_app(2.0, |s| {
        s.estimates.horizon = Duration::from_secs(150);
    })
    .await;
    let r = app
        .put(
            "/v1/users/bob",
            crate::helpers::ADMIN,
            json!({"max_resources": {"cpu": 1}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = app
        .put("/v1/users/carol", crate::helpers::ADMIN, json!({}))
        .await;
    assert_eq!(r.status(), 200);
    let r = app
        .post("/v1/users/carol/pause", crate::helpers::ADMIN, json!({}))
        .await;
    assert_eq!(r.status(), 200);
    let never = [
        app.submit(
            "bob",
            json!({"entrypoint": "sleep 100", "max_runtime_s": 100, "resources": {"cpu": 2}}),
        )
        .await,
        app.submit(
            "carol",
            json!({"entrypoint": "sleep 100", "max_runtime_s": 100}),
        )
        .await,
    ];
    let ids = submit_sleepers(&app, "alice", 5).await;
    let (running, queued) = until(
        20,
        "two running, three with an estimate or a mark",
        || async {
            let mut running = Vec::new();
            let mut queued = Vec::new();
            for id in &ids {
                let v = app.get_json(&format!("/v1/jobs/{id}"), SUBMITTER).await;
                match v["status"].as_str() {
                    Some("RUNNING") => running.push(v),
                    Some("QUEUED")
                        if !v["estimated_start"].is_null() || !v["estimated_after"].is_null() =>
                    {
                        queued.push(v)
                    }
                    _ => {}
                }
            }
            (running.len() == 2 && queued.len() == 3).then_some((running, queued))
        },
    )
    .await;
    let last_end = running
        .iter()
        .map(|v| at(&v["started_at"]) + chrono::Duration::seconds(100))
        .max()
        .unwrap();
    let estimated: Vec<&Value> = queued
        .iter()
        .filter(|v| !v["estimated_start"].is_null())
        .collect();
    let beyond: Vec<&Value> = queued
        .iter()
        .filter(|v| !v["estimated_after"].is_null())
        .collect();
    assert_eq!(estimated.len(), 2, "{queued:?}");
    assert_eq!(beyond.len(), 1, "{queued:?}");
    for v in &estimated {
        assert!(v["estimated_after"].is_null(), "{v}");
    }
    let v = beyond[0];
    assert!(
        v["estimated_start"].is_null() && v["position"].is_null(),
        "{v}"
    );
    // The jobs granted at the last end run 100 s more: the run stops at their end.
    let after = at(&v["estimated_after"]);
    let expected = last_end + chrono::Duration::seconds(100);
    assert!(
        (after - expected).num_milliseconds().abs() <= 2_000,
        "after {after}, expected about {expected}"
    );
    let id = v["id"].as_str().unwrap();
    let ray = app.get_json(&format!("/api/jobs/{id}"), SUBMITTER).await;
    let message = ray["message"].as_str().unwrap();
    assert!(
        message.contains("expected to start no sooner than ")
            && message.ends_with("(the estimates stopped before this job)"),
        "{message}"
    );
    for j in &never {
        let v = app
            .get_json(
                &format!("/v1/jobs/{}", j["id"].as_str().unwrap()),
                SUBMITTER,
            )
            .await;
        assert_eq!(v["status"], "QUEUED", "{v}");
        assert!(
            v["estimated_start"].is_null() && v["estimated_after"].is_null(),
            "{v}"
        );
    }
    // Ray's job list says of them that they cannot start as things stand (it said
    // "waiting for its fair-share turn" of bob's job over his limit: a tester's
    // finding), and of the waiting ones no such thing; each job's page names its bar.
    let list = app.get_json("/api/jobs/", SUBMITTER).await;
    let message_of =
        |id: &str| listed_message(&list, id).unwrap_or_else(|| panic!("{id} in the list: {list}"));
    for (j, bar) in never.iter().zip(["limit", "paused"]) {
        let id = j["id"].as_str().unwrap();
        let listed = message_of(id);
        assert!(
            listed.starts_with("queued in fairshare: it cannot start as things stand")
                && listed.contains(&format!("GET /api/jobs/{id} says which")),
            "{listed}"
        );
        let own = app.get_json(&format!("/api/jobs/{id}"), SUBMITTER).await;
        assert!(own["message"].as_str().unwrap().contains(bar), "{own}");
    }
    for v in &queued {
        let listed = message_of(v["id"].as_str().unwrap());
        assert!(!listed.contains("cannot start"), "{listed}");
    }
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

/// A fresh tester's findings: estimates were refreshed only when jobs came, went or
/// changed state; a start that passed stayed shown in the past, and a pause left a
/// paused user's job with its estimate. Now a passed start and a change of a user's
/// settings each bring a new run within the refresh interval.
#[actix_web::test]
async fn a_passed_start_or_a_pause_refreshes_the_estimates() {
    let (app, _server) = estimating_app(1.0, |s| {
        s.estimates.default_runtime = Duration::from_secs(2);
    })
    .await;
    // alice's job runs (expected, by default, to end 2 s after it started: it does
    // not); bob's waits behind it.
    let a = app
        .submit("alice", json!({"entrypoint": "sleep 100"}))
        .await;
    let a = a["id"].as_str().unwrap().to_string();
    until(20, "alice's job running", || async {
        let v = app.get_json(&format!("/v1/jobs/{a}"), SUBMITTER).await;
        (v["status"] == "RUNNING").then_some(())
    })
    .await;
    let b = app.submit("bob", json!({"entrypoint": "sleep 1"})).await;
    let b = b["id"].as_str().unwrap().to_string();
    let first = until(20, "bob's estimate", || async {
        let v = app.get_json(&format!("/v1/jobs/{b}"), SUBMITTER).await;
        (!v["estimated_start"].is_null()).then(|| at(&v["estimated_start"]))
    })
    .await;
    // The estimated start passes with alice's job still running: a new run moves it
    // to now, not left in the past.
    until(20, "bob's estimate moved past the first one", || async {
        let v = app.get_json(&format!("/v1/jobs/{b}"), SUBMITTER).await;
        (!v["estimated_start"].is_null() && at(&v["estimated_start"]) > first).then_some(())
    })
    .await;
    // Paused: bob's job cannot start as things stand, and says so within a refresh.
    let resp = app
        .post("/v1/users/bob/pause", crate::helpers::ADMIN, json!({}))
        .await;
    assert!(resp.status().is_success(), "{:?}", resp.text().await);
    until(20, "bob's estimate gone once he is paused", || async {
        let v = app.get_json(&format!("/v1/jobs/{b}"), SUBMITTER).await;
        (v["status"] == "QUEUED" && v["estimated_start"].is_null()).then_some(())
    })
    .await;
}

/// A job past the read's cut at `estimates.max_jobs` (not read: behind its user's
/// first `k` jobs) starts no sooner than the last of those: its `estimated_after` is
/// that job's estimated start (before, it had no estimate and no mark at all when the
/// run reached its end). 1 CPU, `max_jobs` 2: alice's first of five 100-s jobs runs,
/// the read takes her next two (estimated at +100 s and +200 s); the fourth and fifth
/// are marked "after" the +200 s start.
#[actix_web::test]
async fn a_job_past_the_read_cut_starts_no_sooner_than_its_users_last_read_job() {
    let (app, _server) = estimating_app(1.0, |s| {
        s.estimates.max_jobs = 2;
    })
    .await;
    let ids = submit_sleepers(&app, "alice", 5).await;
    let views = until(20, "one running, two estimated, two marked", || async {
        let mut views = Vec::new();
        for id in &ids {
            views.push(app.get_json(&format!("/v1/jobs/{id}"), SUBMITTER).await);
        }
        let running = views.iter().filter(|v| v["status"] == "RUNNING").count();
        let estimated = views
            .iter()
            .filter(|v| !v["estimated_start"].is_null())
            .count();
        let marked = views
            .iter()
            .filter(|v| !v["estimated_after"].is_null())
            .count();
        (running == 1 && estimated == 2 && marked == 2).then_some(views)
    })
    .await;
    // Queue order is submit order: the second and third are read, the last two not.
    assert_eq!(views[0]["status"], "RUNNING");
    let third = at(&views[2]["estimated_start"]);
    assert!(at(&views[1]["estimated_start"]) < third);
    for v in &views[3..] {
        assert!(v["estimated_start"].is_null(), "{v}");
        assert_eq!(at(&v["estimated_after"]), third, "{v}");
    }
}

/// A replica that does not lead judges the bars from the stored users and groups (a
/// fresh tester found a follower marking a paused user's job "after the horizon"):
/// a paused user, a user under a paused group's subgroup, a user at a limit of 0, a
/// job alone over its user's or its group's cap are barred; a free user's job is not.
async fn a_follower_judges_the_bars_from_the_stored_users_and_groups(which: crate::helpers::Db) {
    use fairshare::store::{self, GroupPatch, UserPatch};
    let Some(db) = crate::helpers::TestDb::new(which).await else {
        return;
    };
    let conn = sea_orm::Database::connect(&db.url).await.unwrap();
    store::migrate(&conn).await.unwrap();
    let group = |paused: bool, cap: Option<serde_json::Value>| GroupPatch {
        paused: Some(paused),
        max_resources: Some(cap),
        ..GroupPatch::default()
    };
    store::put_group(&conn, "p", group(true, None), true)
        .await
        .unwrap();
    store::put_group(&conn, "p/q", group(false, None), true)
        .await
        .unwrap();
    store::put_group(&conn, "capped", group(false, Some(json!({"cpu": 2}))), true)
        .await
        .unwrap();
    let user = |patch: UserPatch| patch;
    for (id, patch) in [
        (
            "paused",
            user(UserPatch {
                paused: Some(true),
                ..UserPatch::default()
            }),
        ),
        (
            "under",
            user(UserPatch {
                group: Some(Some("p/q".into())),
                ..UserPatch::default()
            }),
        ),
        (
            "zero",
            user(UserPatch {
                max_running_jobs: Some(Some(0)),
                ..UserPatch::default()
            }),
        ),
        (
            "own-cap",
            user(UserPatch {
                max_resources: Some(Some(json!({"cpu": 1}))),
                ..UserPatch::default()
            }),
        ),
        (
            "in-capped",
            user(UserPatch {
                group: Some(Some("capped".into())),
                ..UserPatch::default()
            }),
        ),
        ("free", UserPatch::default()),
    ] {
        store::upsert_user(&conn, id, patch).await.unwrap();
    }
    let bars = fairshare::estimates::stored_bars(&conn, &100)
        .await
        .unwrap();
    let job = |cpu: f64| {
        fairshare::policy::QueuedJob::new(
            uuid::Uuid::from_u128(1),
            fairshare::policy::Resources::new(cpu, 0.0, 0.0),
            0.0,
        )
    };
    for u in ["paused", "under", "zero"] {
        assert!(bars.never(u, &job(1.0)), "{u}");
    }
    assert!(!bars.never("own-cap", &job(1.0)));
    assert!(bars.never("own-cap", &job(1.5)));
    assert!(!bars.never("in-capped", &job(2.0)));
    assert!(bars.never("in-capped", &job(3.0)));
    // No cluster totals on a follower: nothing is judged too large.
    assert!(!bars.never("free", &job(100_000.0)));
    conn.close().await.ok();
}
crate::both_databases!(a_follower_judges_the_bars_from_the_stored_users_and_groups);

/// A job past the read's cut behind only jobs without an estimate (here one that can
/// never start) is marked from the run's instant, not left looking as if it never
/// starts (a fresh tester's finding: it had nothing, and started). 2 CPUs, cx capped at
/// 1 CPU, `max_jobs` 1: job A (1 CPU) runs, B (2 CPUs, over the cap) is read and barred,
/// C (1 CPU) is past the cut.
#[actix_web::test]
async fn a_job_past_the_cut_behind_a_barred_one_is_still_marked() {
    let (app, _server) = estimating_app(2.0, |s| {
        s.estimates.max_jobs = 1;
    })
    .await;
    let r = app
        .put(
            "/v1/users/cx",
            crate::helpers::ADMIN,
            json!({"max_resources": {"cpu": 1}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let mut ids = Vec::new();
    for cpu in [1, 2, 1] {
        let j = app
            .submit(
                "cx",
                json!({"entrypoint": "sleep 100", "max_runtime_s": 100, "resources": {"cpu": cpu}}),
            )
            .await;
        ids.push(j["id"].as_str().unwrap().to_string());
    }
    let c = until(20, "C marked", || async {
        let v = app
            .get_json(&format!("/v1/jobs/{}", ids[2]), SUBMITTER)
            .await;
        (!v["estimated_after"].is_null()).then_some(v)
    })
    .await;
    assert_eq!(c["status"], "QUEUED", "{c}");
    assert!(c["estimated_start"].is_null(), "{c}");
    let b = app
        .get_json(&format!("/v1/jobs/{}", ids[1]), SUBMITTER)
        .await;
    assert!(
        b["estimated_start"].is_null() && b["estimated_after"].is_null(),
        "{b}"
    );
}

/// A pool job whose runner stays silent lapses and is admitted again (QUEUED with
/// attempt + 1, then ADMITTED with a new `dispatched_at`, within one cycle): the job
/// queued behind it is estimated from the new grant, not the old one. Both are
/// alice's (her queue's order decides which is admitted again); each asks the pool's
/// one slot for `max_runtime_s` 1000, so the second's estimated start is the first's
/// `dispatched_at` + 1000 s. Before, the refresh saw the same jobs in the same
/// states and kept the estimate of the first grant (a fresh tester's finding).
#[actix_web::test]
async fn a_pool_job_admitted_again_moves_the_estimates_behind_it() {
    let app = crate::helpers::spawn_app_with(crate::helpers::Db::Sqlite, |s| {
        s.pools = vec![fairshare::config::PoolSettings {
            name: "gw".into(),
            capacity: std::collections::BTreeMap::from([("clusters".to_string(), 1.0)]),
        }];
        s.admission.lease = Duration::from_secs(3);
        s.estimates.refresh = Duration::from_secs(1);
        s.scheduler.usage_half_life = Duration::ZERO;
    })
    .await
    .expect("SQLite is always there");
    let body = json!({"entrypoint": "run", "pool": "gw", "max_runtime_s": 1000,
        "resources": {"cpu": 0, "custom": {"clusters": 1}}});
    let first = app.submit("alice", body.clone()).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let second = app.submit("alice", body).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let job = |id: &str| {
        let path = format!("/v1/jobs/{id}");
        let app = &app;
        async move { app.get_json(&path, SUBMITTER).await }
    };
    // No runner reports: the lease lapses every 3 s and the job is admitted again.
    until(
        60,
        "the second job estimated from the first's new grant",
        || async {
            let before = job(&first).await;
            let behind = job(&second).await;
            let after = job(&first).await;
            let settled = before["attempt"].as_i64() >= Some(2)
                && before["status"] == "ADMITTED"
                && before["attempt"] == after["attempt"]
                && !behind["estimated_start"].is_null();
            // Within a millisecond: instants pass through f64 seconds.
            let off = settled.then(|| {
                at(&behind["estimated_start"])
                    - (at(&before["dispatched_at"]) + chrono::Duration::seconds(1000))
            });
            off.is_some_and(|d| d.abs() <= chrono::Duration::milliseconds(1))
                .then_some(())
        },
    )
    .await;
}
