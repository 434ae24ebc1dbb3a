//! `queue_counts` (migration m20261206_000007, issue 11): intake reads each user's
//! QUEUED jobs per priority from it instead of counting the jobs. Triggers on `jobs`
//! keep it; these tests check that it equals the count of the jobs through any mix of
//! intake batches, lifecycle steps (alone and in `apply_many` batches), deletions and
//! an operator's SQL, and that the migration counts the jobs stored before it.

use std::collections::BTreeMap;

use fairshare::lifecycle::Event;
use fairshare::store::{self, Fence, NewJob};
use migration::MigratorTrait;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};

use crate::helpers::{Db, TestDb};

/// `(user, priority) -> QUEUED jobs`, counted from `jobs` and read from
/// `queue_counts` (rows at 0 left out).
async fn counts(
    conn: &DatabaseConnection,
) -> (BTreeMap<(String, i32), i64>, BTreeMap<(String, i32), i64>) {
    let read = |sql: &'static str| async move {
        let rows = conn
            .query_all(Statement::from_string(conn.get_database_backend(), sql))
            .await
            .unwrap();
        rows.into_iter()
            .map(|r| {
                let u: String = r.try_get_by_index(0).unwrap();
                let p: i32 = r.try_get_by_index(1).unwrap();
                let n: i64 = r.try_get_by_index(2).unwrap();
                ((u, p), n)
            })
            .collect::<BTreeMap<_, _>>()
    };
    let counted = read(
        "SELECT user_id, priority, COUNT(*) FROM jobs WHERE status = 'QUEUED' \
         GROUP BY user_id, priority",
    )
    .await;
    let kept = read("SELECT user_id, priority, queued FROM queue_counts WHERE queued <> 0").await;
    (counted, kept)
}

/// One operation of a walk; job indexes are taken modulo the jobs created so far.
#[derive(Clone, Debug)]
enum Op {
    /// An intake batch: (user, priority, idempotency key) per job.
    Submit(Vec<(usize, i32, Option<u8>)>),
    /// One lifecycle step: (job, event).
    Apply(usize, usize),
    /// Several steps in one `apply_many` transaction.
    ApplyMany(Vec<(usize, usize)>),
    /// Ray's DELETE of a job (only a finished one is deleted).
    Delete(usize),
    /// An operator's SQL: a job's priority changed in place.
    Reprioritize(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let job = || (0usize..64, 0usize..EVENTS);
    prop_oneof![
        3 => prop::collection::vec(
            (0usize..3, prop::sample::select(vec![-1, 0, 2]), prop::option::weighted(0.3, 0u8..8)),
            1..6
        )
        .prop_map(Op::Submit),
        3 => job().prop_map(|(j, e)| Op::Apply(j, e)),
        2 => prop::collection::vec(job(), 1..5).prop_map(Op::ApplyMany),
        1 => (0usize..64).prop_map(Op::Delete),
        1 => (0usize..64).prop_map(Op::Reprioritize),
    ]
}

const EVENTS: usize = 8;

/// The events a walk applies: every one that moves a job into or out of QUEUED, and
/// the steps between.
fn event(i: usize) -> Event {
    match i % EVENTS {
        0 => Event::Granted {
            cluster: "ray".into(),
        },
        1 => Event::RayAccepted {
            already_existed: false,
            attempts: 1,
        },
        2 => Event::RayNotReady {
            reason: "walk".into(),
        },
        3 => Event::SeenRunning { started_at: None },
        4 => Event::SeenFinished {
            status: entity::JobStatus::Succeeded,
            message: None,
            started_at: None,
            finished_at: None,
        },
        5 => Event::PendingTooLong {
            waited_s: 1,
            scale_up: false,
        },
        6 => Event::CancelRequested,
        _ => Event::WithdrawQueued,
    }
}

/// Runs `ops` on an emptied database and checks `queue_counts` against the count of
/// the jobs after every operation.
async fn walk(conn: &DatabaseConnection, ops: &[Op]) -> Result<(), TestCaseError> {
    for table in ["job_events", "jobs", "queue_counts", "users"] {
        conn.execute_unprepared(&format!("DELETE FROM {table}"))
            .await
            .unwrap();
    }
    let users = ["ann", "bob", "cy"];
    let mut ids = Vec::new();
    let pick = |ids: &Vec<uuid::Uuid>, i: usize| ids[i % ids.len()];
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Submit(jobs) => {
                let batch: Vec<NewJob> = jobs
                    .iter()
                    .map(|(u, priority, key)| {
                        let mut j =
                            crate::helpers::new_job(users[*u], key.map(|k| format!("k{k}")));
                        j.priority = *priority;
                        j
                    })
                    .collect();
                // A limit of 6 that some batches run into.
                for answer in store::submit_batch(conn, batch, 6).await {
                    match answer {
                        Ok(store::Intake::Created(j)) => ids.push(j.id),
                        Ok(_) | Err(store::StoreError::QueueFull { .. }) => {}
                        Err(e) => panic!("step {step}: {e}"),
                    }
                }
            }
            _ if ids.is_empty() => {}
            Op::Apply(j, e) => {
                store::apply(conn, &Fence::Unfenced, pick(&ids, *j), &event(*e))
                    .await
                    .unwrap();
            }
            Op::ApplyMany(steps) => {
                // One step per job, as the dispatcher sends them.
                let mut seen = std::collections::HashSet::new();
                let steps: Vec<_> = steps
                    .iter()
                    .map(|(j, e)| (pick(&ids, *j), event(*e)))
                    .filter(|(id, _)| seen.insert(*id))
                    .collect();
                store::apply_many(conn, &Fence::Unfenced, &steps, store::Flush::Durable)
                    .await
                    .unwrap();
            }
            Op::Delete(j) => {
                let id = pick(&ids, *j);
                let job = store::get_job(conn, id).await.unwrap().unwrap();
                if job.status.is_terminal() {
                    prop_assert!(store::delete_job(conn, id).await.unwrap());
                    ids.retain(|i| *i != id);
                }
            }
            Op::Reprioritize(j) => {
                let backend = conn.get_database_backend();
                let sql = match backend {
                    sea_orm::DatabaseBackend::Postgres => {
                        "UPDATE jobs SET priority = priority + 1 WHERE id = $1"
                    }
                    _ => "UPDATE jobs SET priority = priority + 1 WHERE id = ?",
                };
                let id = pick(&ids, *j);
                conn.execute(Statement::from_sql_and_values(backend, sql, [id.into()]))
                    .await
                    .unwrap();
            }
        }
        let (counted, kept) = counts(conn).await;
        prop_assert_eq!(kept, counted, "after step {} ({:?})", step, op);
    }
    Ok(())
}

/// Property: through any walk of intake batches (limits, repeated keys), lifecycle
/// steps alone and in `apply_many` batches, deletions and an operator's `UPDATE`,
/// `queue_counts` equals the count of the jobs after every operation.
fn queue_counts_equal_the_jobs_through_any_walk(which: Db, cases: u32) {
    let walks = prop::collection::vec(op(), 1..60);
    crate::helpers::property_on_db(which, cases, walks, |conn, ops| async move {
        walk(&conn, &ops).await
    });
}

#[test]
fn queue_counts_equal_the_jobs_through_any_walk_sqlite() {
    queue_counts_equal_the_jobs_through_any_walk(Db::Sqlite, 64);
}

#[test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
fn queue_counts_equal_the_jobs_through_any_walk_postgres() {
    queue_counts_equal_the_jobs_through_any_walk(Db::Postgres, 24);
}

/// Jobs stored before the migration are counted by it.
async fn the_migration_counts_the_jobs_stored_before_it(which: Db) {
    let Some(db) = TestDb::new(which).await else {
        return;
    };
    let conn = sea_orm::Database::connect(&db.url).await.unwrap();
    // Up to the migration that creates `queue_counts` (named, so that later
    // migrations do not move it), then rows, then the rest.
    let before = migration::Migrator::migrations()
        .iter()
        .position(|m| m.name() == "m20261206_000007_queue_counts")
        .expect("the queue_counts migration") as u32;
    migration::Migrator::up(&conn, Some(before)).await.unwrap();
    // Rows as an older version (or an operator) wrote them: this version's intake
    // needs the table the migration creates.
    let at = "'2026-01-01T00:00:00Z'";
    for u in ["ann", "bob"] {
        conn.execute_unprepared(&format!(
            "INSERT INTO users (id, weight, paused, usage, usage_at, created_at, updated_at) \
             VALUES ('{u}', 1, false, 0, {at}, {at}, {at})"
        ))
        .await
        .unwrap();
    }
    let mut queued = 0;
    for i in 0..9 {
        let status = if i % 4 == 0 { "STOPPED" } else { "QUEUED" };
        queued += i64::from(status == "QUEUED");
        conn.execute_unprepared(&format!(
            "INSERT INTO jobs (id, user_id, status, priority, entrypoint, cpu, gpu, \
             memory_bytes, submitted_at, attempt) \
             VALUES ('{}', '{}', '{status}', {}, 'echo', 1, 0, 0, {at}, 1)",
            uuid::Uuid::now_v7(),
            ["ann", "bob"][i % 2],
            i % 3
        ))
        .await
        .unwrap();
    }
    store::migrate(&conn).await.unwrap();
    let (counted, kept) = counts(&conn).await;
    assert_eq!(counted.values().sum::<i64>(), queued);
    assert_eq!(kept, counted);
    conn.close().await.unwrap();
}
crate::both_databases!(the_migration_counts_the_jobs_stored_before_it);

/// PostgreSQL: intake batches of two users and the dispatcher's `apply_many` batches
/// moving jobs of both users in and out of QUEUED, at once on several connections,
/// never deadlock (each locks the users' `queue_counts` rows in user order) and keep
/// the counts exact.
async fn intake_and_apply_many_at_once_do_not_deadlock(which: Db) {
    let Some(db) = TestDb::new(which).await else {
        return;
    };
    let conn = sea_orm::Database::connect(&db.url).await.unwrap();
    store::migrate(&conn).await.unwrap();
    let mut seed = Vec::new();
    for i in 0..41 {
        let j = crate::helpers::new_job(["a", "b"][i % 2], None);
        match store::submit_job(&conn, j, 1_000_000).await.unwrap() {
            store::Intake::Created(j) => seed.push((j.user_id.clone(), j.id)),
            other => panic!("{other:?}"),
        }
    }
    // Pairs of a job of "b" and a later one of "a": in id order (ids are
    // time-ordered) the "b" job comes first, against intake's user order.
    let pairs: Vec<Vec<_>> = seed[1..]
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| {
            assert!(c[0].0 == "b" && c[1].0 == "a" && c[0].1 < c[1].1);
            vec![c[0].1, c[1].1]
        })
        .collect();
    let granted = Event::Granted {
        cluster: "ray".into(),
    };
    let back = Event::RayNotReady {
        reason: "test".into(),
    };
    let mut tasks = Vec::new();
    for w in 0..4 {
        let conn = conn.clone();
        let pairs = pairs.clone();
        let (granted, back) = (granted.clone(), back.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..40 {
                if w % 2 == 0 {
                    let batch = (0..8)
                        .map(|i| crate::helpers::new_job(["b", "a"][(i + round) % 2], None))
                        .collect();
                    for a in store::submit_batch(&conn, batch, 1_000_000).await {
                        a.map_err(|e| format!("intake: {e}"))?;
                    }
                } else {
                    let pair = &pairs[(round * 2 + w) % pairs.len()];
                    for event in [&granted, &back] {
                        let steps: Vec<_> = pair.iter().map(|id| (*id, event.clone())).collect();
                        store::apply_many(&conn, &Fence::Unfenced, &steps, store::Flush::Durable)
                            .await
                            .map_err(|e| format!("apply_many: {e}"))?;
                    }
                }
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let (counted, kept) = counts(&conn).await;
    assert_eq!(kept, counted);
    conn.close().await.unwrap();
}
crate::both_databases!(intake_and_apply_many_at_once_do_not_deadlock);

/// PostgreSQL replicas each commit their own intake batches: many writers at once
/// (one transaction each, as two replicas' writers are) never take a user past its
/// limit. The count must be read after the user's row is locked, in a statement of its
/// own: read in the locking statement, it came from that statement's snapshot, taken
/// before the wait (a fresh tester's two replicas accepted 8–9 jobs for a limit of 7).
async fn concurrent_writers_hold_the_queue_limit(which: Db) {
    let Some(db) = TestDb::new(which).await else {
        return;
    };
    let conn = sea_orm::Database::connect(&db.url).await.unwrap();
    store::migrate(&conn).await.unwrap();
    const LIMIT: u32 = 7;
    let users = ["w0", "w1", "w2", "w3", "w4"];
    let mut tasks = Vec::new();
    for w in 0..24 {
        let conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            let mut created = Vec::new();
            for round in 0..4 {
                let batch = (0..3)
                    .map(|i| {
                        let mut j = crate::helpers::new_job(users[(w + round + i) % 5], None);
                        j.priority = (i % 2) as i32;
                        j
                    })
                    .collect();
                for a in store::submit_batch(&conn, batch, LIMIT).await {
                    match a {
                        Ok(store::Intake::Created(j)) => created.push(j.user_id),
                        Err(store::StoreError::QueueFull { .. }) => {}
                        other => panic!("{other:?}"),
                    }
                }
            }
            created
        }));
    }
    let mut accepted = BTreeMap::<String, u32>::new();
    for t in tasks {
        for u in t.await.unwrap() {
            *accepted.entry(u).or_default() += 1;
        }
    }
    let expected: BTreeMap<String, u32> = users.iter().map(|u| (u.to_string(), LIMIT)).collect();
    assert_eq!(
        accepted, expected,
        "each user's accepted jobs, limit {LIMIT}"
    );
    let (counted, kept) = counts(&conn).await;
    assert_eq!(kept, counted);
    conn.close().await.unwrap();
}
crate::both_databases!(concurrent_writers_hold_the_queue_limit);
