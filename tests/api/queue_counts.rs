//! `queue_counts` (migration m20261206_000007, issue 11): intake reads each user's
//! QUEUED jobs per priority from it instead of counting the jobs. Triggers on `jobs`
//! keep it; these tests check that it equals the count of the jobs through any mix of
//! intake batches, lifecycle steps (alone and in `apply_many` batches), deletions and
//! an operator's SQL, and that the migration counts the jobs stored before it.

use std::collections::BTreeMap;

use fairshare::lifecycle::Event;
use fairshare::store::{self, Fence, NewJob};
use migration::MigratorTrait;
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

/// A small deterministic generator (xorshift64*): the same seed, the same walk.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

/// Random walks over everything that moves a job into or out of QUEUED: after every
/// operation `queue_counts` equals the count of the jobs.
async fn queue_counts_equal_the_jobs_through_any_walk(which: Db) {
    let Some(db) = TestDb::new(which).await else {
        return;
    };
    let conn = sea_orm::Database::connect(&db.url).await.unwrap();
    store::migrate(&conn).await.unwrap();
    let events = [
        Event::Granted {
            cluster: "ray".into(),
        },
        Event::RayAccepted {
            already_existed: false,
            attempts: 1,
        },
        Event::RayNotReady {
            reason: "walk".into(),
        },
        Event::SeenRunning { started_at: None },
        Event::SeenFinished {
            status: entity::JobStatus::Succeeded,
            message: None,
            started_at: None,
            finished_at: None,
        },
        Event::PendingTooLong { waited_s: 1 },
        Event::CancelRequested,
        Event::WithdrawQueued,
    ];
    let users = ["ann", "bob", "cy"];
    let mut rng = Rng(if matches!(which, Db::Sqlite) { 7 } else { 11 });
    let mut ids = Vec::new();
    for step in 0..400 {
        match rng.below(10) {
            // An intake batch: mixed users and priorities, some repeated idempotency
            // keys, a limit of 6 that some batches run into.
            0..=2 => {
                let batch: Vec<NewJob> = (0..1 + rng.below(5))
                    .map(|_| {
                        let mut j = crate::helpers::new_job(
                            users[rng.below(users.len())],
                            (rng.below(3) == 0).then(|| format!("k{}", rng.below(8))),
                        );
                        j.priority = [-1, 0, 2][rng.below(3)];
                        j
                    })
                    .collect();
                for answer in store::submit_batch(&conn, batch, 6).await {
                    match answer {
                        Ok(store::Intake::Created(j)) => ids.push(j.id),
                        Ok(_) | Err(store::StoreError::QueueFull { .. }) => {}
                        Err(e) => panic!("step {step}: {e}"),
                    }
                }
            }
            // One lifecycle step.
            3..=5 if !ids.is_empty() => {
                let id = ids[rng.below(ids.len())];
                let event = &events[rng.below(events.len())];
                store::apply(&conn, &Fence::Unfenced, id, event)
                    .await
                    .unwrap();
            }
            // Several in one transaction, jobs of several users.
            6..=7 if !ids.is_empty() => {
                let steps: Vec<_> = (0..1 + rng.below(4))
                    .map(|_| {
                        (
                            ids[rng.below(ids.len())],
                            events[rng.below(events.len())].clone(),
                        )
                    })
                    .collect();
                // The same job twice in one batch is not what the dispatcher sends.
                let mut seen = std::collections::HashSet::new();
                let steps: Vec<_> = steps
                    .into_iter()
                    .filter(|(id, _)| seen.insert(*id))
                    .collect();
                store::apply_many(&conn, &Fence::Unfenced, &steps)
                    .await
                    .unwrap();
            }
            // A finished job deleted (Ray's DELETE of a finished job).
            8 if !ids.is_empty() => {
                let id = ids[rng.below(ids.len())];
                let job = store::get_job(&conn, id).await.unwrap().unwrap();
                if job.status.is_terminal() {
                    assert!(store::delete_job(&conn, id).await.unwrap());
                    ids.retain(|i| *i != id);
                }
            }
            // An operator's SQL: a job's priority changed in place.
            9 if !ids.is_empty() => {
                let id = ids[rng.below(ids.len())];
                let backend = conn.get_database_backend();
                let sql = match backend {
                    sea_orm::DatabaseBackend::Postgres => {
                        "UPDATE jobs SET priority = priority + 1 WHERE id = $1"
                    }
                    _ => "UPDATE jobs SET priority = priority + 1 WHERE id = ?",
                };
                conn.execute(Statement::from_sql_and_values(backend, sql, [id.into()]))
                    .await
                    .unwrap();
            }
            _ => {}
        }
        let (counted, kept) = counts(&conn).await;
        assert_eq!(kept, counted, "after step {step}");
    }
    let (counted, _) = counts(&conn).await;
    assert!(
        counted.len() >= 3 && ids.len() >= 20,
        "the walk queued jobs of several users and priorities: {counted:?}"
    );
    conn.close().await.unwrap();
}
crate::both_databases!(queue_counts_equal_the_jobs_through_any_walk);

/// Jobs stored before the migration are counted by it.
async fn the_migration_counts_the_jobs_stored_before_it(which: Db) {
    let Some(db) = TestDb::new(which).await else {
        return;
    };
    let conn = sea_orm::Database::connect(&db.url).await.unwrap();
    let before = migration::Migrator::migrations().len() as u32 - 1;
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
                        store::apply_many(&conn, &Fence::Unfenced, &steps)
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
