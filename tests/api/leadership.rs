//! Leadership (DESIGN §10): the fencing term in `store::apply`, two replicas on one
//! PostgreSQL database (one leads, the follower serves the API and hands work over,
//! takes over when the leader goes), and the SQLite single-replica lock.

use std::time::{Duration, Instant};

use fairshare::store::{self, Applied, Fence, NewJob, Reclaim};
use fairshare::Application;
use sea_orm::ConnectionTrait;
use serde_json::{json, Value};

use crate::helpers::{spawn_app, test_settings, Db, TestDb, ADMIN, SUBMITTER};

fn new_job(user: &str) -> NewJob {
    crate::helpers::new_job(user, None)
}

fn created(i: store::Intake) -> entity::job::Model {
    match i {
        store::Intake::Created(j) | store::Intake::Existing(j) => j,
        store::Intake::Conflict { existing, .. } => {
            panic!("unexpected conflict with {}", existing.id)
        }
    }
}

/// `store::apply_many` (the dispatcher's one transaction for a cycle's grants) decides
/// and writes each step as `store::apply` would, answers in input order, and writes
/// nothing when its fence no longer holds.
async fn apply_many_is_apply_for_each_in_one_transaction(which: Db) {
    let Some(db) = TestDb::new(which).await else {
        return;
    };
    let conn = sea_orm::Database::connect(&db.url).await.unwrap();
    store::migrate(&conn).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(created(store::submit_job(&conn, new_job("u"), 100).await.unwrap()).id);
    }
    // The third was cancelled before its grant was written: refused, as alone.
    let cancel = fairshare::lifecycle::Event::CancelRequested;
    store::apply(&conn, &Fence::Unfenced, ids[2], &cancel)
        .await
        .unwrap();
    let granted = fairshare::lifecycle::Event::Granted {
        cluster: "ray".into(),
    };
    // Input order is not id order: answers still come back in input order.
    let steps: Vec<_> = [ids[3], ids[0], ids[2], ids[1]]
        .into_iter()
        .map(|id| (id, granted.clone()))
        .collect();
    let applied = store::apply_many(&conn, &Fence::Unfenced, &steps, store::Flush::Durable)
        .await
        .unwrap();
    assert_eq!(applied.len(), 4);
    for (a, (id, _)) in applied.iter().zip(&steps) {
        match a {
            Applied::Changed { job, .. } => {
                assert_eq!(job.id, *id);
                assert_eq!(job.status, entity::JobStatus::Dispatching);
                assert_eq!(job.cluster.as_deref(), Some("ray"));
            }
            _ => assert_eq!(*id, ids[2], "only the cancelled job is not granted"),
        }
    }
    // Again: every step is now ignored or refused, nothing moves twice.
    let again = store::apply_many(&conn, &Fence::Unfenced, &steps, store::Flush::Durable)
        .await
        .unwrap();
    assert!(!again.iter().any(|a| matches!(a, Applied::Changed { .. })));
    assert!(
        store::apply_many(&conn, &Fence::Unfenced, &[], store::Flush::Durable)
            .await
            .unwrap()
            .is_empty()
    );

    if matches!(which, Db::Postgres) {
        // A stale fence: the whole batch is refused and nothing is written.
        let lease = Duration::from_secs(4);
        let (term, _) = store::lease_acquire(&conn, "a", lease, Reclaim::Never)
            .await
            .unwrap()
            .expect("the lease starts free");
        let stale = Fence::Term {
            holder: "a".into(),
            term: term - 1,
        };
        let fresh = created(store::submit_job(&conn, new_job("u"), 100).await.unwrap());
        let e = store::apply_many(
            &conn,
            &stale,
            &[(fresh.id, granted.clone())],
            store::Flush::Durable,
        )
        .await
        .unwrap_err();
        assert!(store::is_fenced(&e), "{e}");
        let row = store::get_job(&conn, fresh.id).await.unwrap().unwrap();
        assert_eq!(row.status, entity::JobStatus::Queued, "nothing written");
    }
    conn.close().await.unwrap();
}
crate::both_databases!(apply_many_is_apply_for_each_in_one_transaction);

/// The dispatcher's `Granted` steps commit without waiting for the disk
/// (`store::Flush::Deferred`, DESIGN §3 "Dispatch"): they are written exactly as
/// durable ones, and the service's one SQLite connection is back at
/// `synchronous = FULL` afterwards (PostgreSQL: `synchronous_commit` back on), after
/// a commit and after a write that failed, so that the next intake or cancel is
/// durable again.
async fn deferred_grants_are_written_and_leave_the_connection_durable(which: Db) {
    let Some(db) = TestDb::new(which).await else {
        return;
    };
    // The service's own connection options: one connection on SQLite.
    let conn = crate::jobs::connect(&db.url).await;
    store::migrate(&conn).await.unwrap();
    let sqlite = matches!(which, Db::Sqlite);
    let durable = |conn: sea_orm::DatabaseConnection| async move {
        let sql = if sqlite {
            "PRAGMA synchronous"
        } else {
            "SHOW synchronous_commit"
        };
        let row = conn
            .query_one(sea_orm::Statement::from_string(
                conn.get_database_backend(),
                sql,
            ))
            .await
            .unwrap()
            .unwrap();
        let value = if sqlite {
            row.try_get_by_index::<i64>(0).unwrap().to_string()
        } else {
            row.try_get_by_index::<String>(0).unwrap()
        };
        (value, conn)
    };
    let want = if sqlite { "2" } else { "on" };
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(created(store::submit_job(&conn, new_job("u"), 100).await.unwrap()).id);
    }
    let granted = fairshare::lifecycle::Event::Granted {
        cluster: "ray".into(),
    };
    let steps: Vec<_> = ids.iter().map(|id| (*id, granted.clone())).collect();
    let applied = store::apply_many(&conn, &Fence::Unfenced, &steps, store::Flush::Deferred)
        .await
        .unwrap();
    assert!(applied
        .iter()
        .all(|a| matches!(a, Applied::Changed { job, .. } if job.status == entity::JobStatus::Dispatching)));
    for id in &ids {
        let row = store::get_job(&conn, *id).await.unwrap().unwrap();
        assert_eq!(row.status, entity::JobStatus::Dispatching, "committed");
    }
    let (value, conn) = durable(conn).await;
    assert_eq!(value, want, "durable again after a deferred commit");

    // A write that fails (a fence no lease row names) writes nothing and leaves the
    // connection durable and usable.
    let fresh = created(store::submit_job(&conn, new_job("u"), 100).await.unwrap());
    let stale = Fence::Term {
        holder: "nobody".into(),
        term: 1_000_000,
    };
    let e = store::apply_many(
        &conn,
        &stale,
        &[(fresh.id, granted.clone())],
        store::Flush::Deferred,
    )
    .await
    .unwrap_err();
    assert!(store::is_fenced(&e), "{e}");
    let row = store::get_job(&conn, fresh.id).await.unwrap().unwrap();
    assert_eq!(row.status, entity::JobStatus::Queued, "nothing written");
    let (value, conn) = durable(conn).await;
    assert_eq!(value, want, "durable again after a failed deferred write");
    let after = store::apply(&conn, &Fence::Unfenced, fresh.id, &granted)
        .await
        .unwrap();
    assert!(
        matches!(after, Applied::Changed { .. }),
        "the connection still works"
    );
    conn.close().await.unwrap();
}
crate::both_databases!(deferred_grants_are_written_and_leave_the_connection_durable);

#[actix_web::test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
async fn a_stale_term_cannot_move_a_job() {
    let Some(db) = TestDb::new(Db::Postgres).await else {
        return;
    };
    let conn = sea_orm::Database::connect(&db.url).await.unwrap();
    store::migrate(&conn).await.unwrap();
    let one = created(store::submit_job(&conn, new_job("u"), 100).await.unwrap());
    let two = created(store::submit_job(&conn, new_job("u"), 100).await.unwrap());
    let lease = Duration::from_secs(4);

    let (term_a, _) = store::lease_acquire(&conn, "a", lease, Reclaim::Never)
        .await
        .unwrap()
        .expect("the lease starts free");
    assert!(
        store::lease_acquire(&conn, "b", lease, Reclaim::Never)
            .await
            .unwrap()
            .is_none(),
        "a live lease is not taken"
    );
    let a = Fence::Term {
        holder: "a".into(),
        term: term_a,
    };
    let cancel = fairshare::lifecycle::Event::CancelRequested;
    assert!(matches!(
        store::apply(&conn, &a, one.id, &cancel).await.unwrap(),
        Applied::Changed { .. }
    ));

    // The lease lapses (a's process paused) and b takes it under a new term.
    conn.execute_unprepared("UPDATE leases SET expires_at = now() - interval '1 second'")
        .await
        .unwrap();
    let (term_b, _) = store::lease_acquire(&conn, "b", lease, Reclaim::Never)
        .await
        .unwrap()
        .expect("a lapsed lease is taken");
    assert_eq!(term_b, term_a + 1);

    let refused = store::apply(&conn, &a, two.id, &cancel).await.unwrap_err();
    assert!(store::is_fenced(&refused), "{refused}");
    let row = store::get_job(&conn, two.id).await.unwrap().unwrap();
    assert_eq!(row.status, entity::JobStatus::Queued, "nothing written");
    assert!(!store::lease_renew(&conn, "a", term_a, lease).await.unwrap());

    let b = Fence::Term {
        holder: "b".into(),
        term: term_b,
    };
    assert!(matches!(
        store::apply(&conn, &b, two.id, &cancel).await.unwrap(),
        Applied::Changed { .. }
    ));
    conn.close().await.ok();
}

struct Replica {
    address: String,
    handle: actix_web::dev::ServerHandle,
}

async fn replica(url: &str, id: &str) -> Replica {
    let mut s = test_settings(url);
    s.leadership.replica_id = id.into();
    s.leadership.lease = Duration::from_secs(2);
    s.leadership.renew_every = Duration::from_millis(500);
    let app = Application::build(s).await.expect("build replica");
    let address = format!("http://127.0.0.1:{}", app.port());
    let handle = app.handle();
    actix_web::rt::spawn(app.run_until_stopped());
    Replica { address, handle }
}

async fn get(r: &Replica, path: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .get(format!("{}{path}", r.address))
        .bearer_auth(SUBMITTER)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Polls `f` every 20 ms until it holds or `deadline` passes; returns the time taken.
async fn until<F, Fut>(deadline: Duration, mut f: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < deadline {
        if f().await {
            return Some(start.elapsed());
        }
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

#[actix_web::test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
async fn a_follower_serves_hands_over_and_takes_over() {
    let Some(db) = TestDb::new(Db::Postgres).await else {
        return;
    };
    let a = replica(&db.url, "replica-a").await;
    let b = replica(&db.url, "replica-b").await;

    let (_, va) = get(&a, "/v1/scheduler").await;
    let (_, vb) = get(&b, "/v1/scheduler").await;
    assert_eq!(va["leadership"]["is_leader"], true, "{va}");
    assert_eq!(vb["leadership"]["is_leader"], false, "{vb}");
    assert_eq!(vb["leadership"]["leader"], "replica-a", "{vb}");
    assert_eq!(get(&b, "/readyz").await.0, 200, "a follower is ready");
    // A preview needs the leader's live state: the follower's 503 says so and names
    // the leader (it once said "the database or a dependency is unavailable").
    let r = reqwest::Client::new()
        .post(format!("{}/v1/scheduler/what-if", b.address))
        .bearer_auth(ADMIN)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "unavailable", "{e}");
    assert_eq!(e["error"]["details"]["reason"], "not_leader", "{e}");
    assert_eq!(e["error"]["details"]["replica"], "replica-b", "{e}");
    assert_eq!(e["error"]["details"]["leader"], "replica-a", "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("does not lead") && message.contains("\"replica-a\""),
        "{message}"
    );

    // A job committed by the follower reaches the leader's queues.
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/jobs", b.address))
        .bearer_auth(SUBMITTER)
        .json(&json!({"user": "alice", "entrypoint": "echo"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let handed = until(Duration::from_secs(5), || async {
        get(&a, "/v1/scheduler").await.1["queued_jobs"] == 1
    })
    .await;
    assert!(
        handed.is_some(),
        "the leader never queued the follower's job"
    );

    // The leader goes (it lets its lease go); the follower leads under a new term
    // and recovers the queue.
    let term = va["leadership"]["term"].as_i64().unwrap();
    a.handle.stop(true).await;
    let took = until(Duration::from_secs(10), || async {
        let v = get(&b, "/v1/scheduler").await.1;
        v["leadership"]["is_leader"] == true && v["queued_jobs"] == 1
    })
    .await;
    assert!(took.is_some(), "the follower never took over");
    let (_, vb) = get(&b, "/v1/scheduler").await;
    assert_eq!(vb["leadership"]["leader"], "replica-b");
    assert!(vb["leadership"]["term"].as_i64().unwrap() > term, "{vb}");
    b.handle.stop(true).await;
}

/// A fresh tester: on a follower a queue head's `pending_reason` was null, even for a
/// paused user. A follower has no arbiter to ask; it says what the database knows
/// (DESIGN §10): the user is paused, or the head is next in its user's queue and the
/// leader decides when it starts, or how many jobs are ahead.
#[actix_web::test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
async fn a_follower_says_why_a_queued_job_waits() {
    let Some(db) = TestDb::new(Db::Postgres).await else {
        return;
    };
    let a = replica(&db.url, "replica-a").await;
    let b = replica(&db.url, "replica-b").await;
    let (_, vb) = get(&b, "/v1/scheduler").await;
    assert_eq!(vb["leadership"]["is_leader"], false, "{vb}");
    let client = reqwest::Client::new();
    let submit = |user: &'static str| {
        let client = client.clone();
        let url = format!("{}/v1/jobs", b.address);
        async move {
            let r = client
                .post(url)
                .bearer_auth(SUBMITTER)
                .json(&json!({"user": user, "entrypoint": "echo"}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201);
            r.json::<Value>().await.unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    let head = submit("carol").await;
    let second = submit("carol").await;
    let paused = submit("dave").await;
    let r = client
        .post(format!("{}/v1/users/dave/pause", b.address))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let reason = |id: String| {
        let b = &b;
        async move {
            let (status, job) = get(b, &format!("/v1/jobs/{id}")).await;
            assert_eq!(status, 200, "{job}");
            assert_eq!(job["status"], "QUEUED", "{job}");
            job["pending_reason"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }
    };
    let r = reason(head).await;
    assert!(
        r.starts_with("next in its user's queue; the leader (replica \"replica-a\") decides"),
        "{r}"
    );
    let r = reason(second).await;
    assert_eq!(r, "waiting behind 1 earlier job in this user's queue");
    let r = reason(paused).await;
    assert!(r.starts_with("the user is paused"), "{r}");
    a.handle.stop(true).await;
    b.handle.stop(true).await;
}

#[actix_web::test]
async fn a_second_service_on_the_same_sqlite_file_refuses_to_start() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let err = match Application::build(test_settings(&app.db.url)).await {
        Ok(_) => panic!("a second service started on the same SQLite file"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("another fairshare service"), "{err}");
    // Nor through a symlink to the same file.
    let path = app
        .db
        .url
        .trim_start_matches("sqlite://")
        .split('?')
        .next()
        .unwrap()
        .to_string();
    let link = format!("{path}.link.db");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let err = match Application::build(test_settings(&format!("sqlite://{link}?mode=rwc"))).await {
        Ok(_) => panic!("a second service started on a symlink to the same SQLite file"),
        Err(e) => format!("{e:#}"),
    };
    let _ = std::fs::remove_file(&link);
    assert!(err.contains("another fairshare service"), "{err}");
}

/// The leader's catch-up (DESIGN §10) finds what another replica committed without a
/// notification reaching the leader: a job submitted, a job cancelled, and a job whose
/// transaction took its event id before a later one and committed after it (the
/// catch-up reads the changes after its cursor, so such an id is skipped at first and
/// looked up again).
#[actix_web::test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
async fn the_catch_up_finds_changes_no_notification_announced() {
    let Some(db) = TestDb::new(Db::Postgres).await else {
        return;
    };
    let mut s = test_settings(&db.url);
    s.leadership.replica_id = "leader".into();
    s.leadership.catch_up_every = Duration::from_millis(100);
    let app = Application::build(s).await.expect("build replica");
    let leader = Replica {
        address: format!("http://127.0.0.1:{}", app.port()),
        handle: app.handle(),
    };
    actix_web::rt::spawn(app.run_until_stopped());
    let queued = || async { get(&leader, "/v1/scheduler").await.1["queued_jobs"].clone() };
    let until_queued = |n: u64| async move {
        until(Duration::from_secs(5), || async { queued().await == n }).await
    };

    // Written straight to the database, as a follower would, but with no NOTIFY.
    let conn = sea_orm::Database::connect(&db.url).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            created(
                store::submit_job(&conn, new_job("carol"), 100)
                    .await
                    .unwrap(),
            )
            .id,
        );
    }
    assert!(
        until_queued(3).await.is_some(),
        "queued: {}",
        queued().await
    );

    store::apply(
        &conn,
        &Fence::Unfenced,
        ids[0],
        &fairshare::lifecycle::Event::CancelRequested,
    )
    .await
    .unwrap();
    assert!(
        until_queued(2).await.is_some(),
        "queued: {}",
        queued().await
    );

    // A transaction takes its event id, then a later one commits and is read.
    use sea_orm::TransactionTrait;
    let late = uuid::Uuid::now_v7();
    let txn = conn.begin().await.unwrap();
    txn.execute_unprepared(&format!(
        "INSERT INTO jobs (id, user_id, status, priority, entrypoint, cpu, gpu, memory_bytes, \
         submitted_at, attempt) VALUES ('{late}', 'carol', 'QUEUED', 0, 'echo', 1, 0, 0, now(), 1)"
    ))
    .await
    .unwrap();
    txn.execute_unprepared(&format!(
        "INSERT INTO job_events (job_id, to_status, at) VALUES ('{late}', 'QUEUED', now())"
    ))
    .await
    .unwrap();
    // (Another user: the open transaction holds carol's `queue_counts` row.)
    store::submit_job(&conn, new_job("erin"), 100)
        .await
        .unwrap();
    assert!(
        until_queued(3).await.is_some(),
        "queued: {}",
        queued().await
    );
    txn.commit().await.unwrap();
    assert!(
        until_queued(4).await.is_some(),
        "the job committed out of order never reached the leader (queued: {})",
        queued().await
    );
    conn.close().await.ok();
    leader.handle.stop(true).await;
}

/// One user's burst through two replicas at once (a fresh tester's finding: with the
/// batch in one round trip, a replica's batch that waited for the other's lock on the
/// user wrote its own, earlier, submit time and went ahead of jobs the other replica
/// had already answered): every 201's `queue_position` is the job's place as the
/// database orders the queue once all of them are in.
#[actix_web::test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
async fn one_users_burst_through_two_replicas_gets_each_place_right() {
    let Some(db) = TestDb::new(Db::Postgres).await else {
        return;
    };
    let a = replica(&db.url, "replica-a").await;
    let b = replica(&db.url, "replica-b").await;
    let client = reqwest::Client::new();
    let mut answered = Vec::new();
    for round in 0..5 {
        let reqs = (0..64).map(|i| {
            let r = if i % 2 == 0 { &a } else { &b };
            client
                .post(format!("{}/v1/jobs", r.address))
                .bearer_auth(SUBMITTER)
                .json(&json!({"user": "burst", "entrypoint": format!("echo {round}-{i}")}))
                .send()
        });
        for resp in futures_util::future::join_all(reqs).await {
            let resp = resp.expect("request");
            assert_eq!(resp.status(), 201);
            let v: Value = resp.json().await.unwrap();
            answered.push((
                v["id"].as_str().unwrap().to_string(),
                v["queue_position"].clone(),
            ));
        }
    }
    let mut wrong = Vec::new();
    for (id, position) in &answered {
        let (_, v) = get(&a, &format!("/v1/jobs/{id}")).await;
        if v["queue_position"] != *position {
            wrong.push((position.clone(), v["queue_position"].clone()));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} jobs are not where their answer put them (answered, now): {:?}",
        wrong.len(),
        answered.len(),
        &wrong[..wrong.len().min(8)]
    );
    a.handle.stop(true).await;
    b.handle.stop(true).await;
}
