//! One user's burst (issue 27): many clients submitting for one user at once, through
//! the process's real intake writer (its batching and, on PostgreSQL, its batches in
//! flight), at and past the user's `max_queued_jobs`. Whatever the batches: the limit
//! is never exceeded and never refuses a job that fits, each answered queue position
//! is the job's place in its user's queue at its commit, and a retried
//! `external_id` is one job.

use std::collections::{BTreeMap, BTreeSet};

use entity::{job, JobStatus};
use fairshare::store::{self, Intake, IntakeWriter, NewJob, StoreError, UserPatch};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sea_orm::{ColumnTrait, Database, DatabaseConnection, EntityTrait, QueryFilter};

use crate::helpers::{test_settings, Db, TestDb};

/// One case: the user's limit, the jobs queued before the burst, and the burst itself.
#[derive(Clone, Debug)]
struct Burst {
    /// The user's own `max_queued_jobs`.
    limit: u32,
    /// Jobs queued (or refused) one by one before the burst.
    before: u32,
    /// Each client's submissions, sent one after the other; the clients at once.
    /// A submission is `(key, priority)`: the same key means the same payload (a
    /// retry); `None` is a submission without `external_id`.
    clients: Vec<Vec<(Option<u16>, i32)>>,
    /// Intake writers on the same database (two: two replicas' writers).
    writers: usize,
}

fn burst() -> impl Strategy<Value = Burst> {
    (1u32..=48, 0u32..=56, 0i32..=2, 1usize..=2, 0u16..=6)
        .prop_flat_map(|(limit, before, max_priority, writers, pool)| {
            // A key drawn from fewer keys than submissions is retried, at once or later.
            let keys = (1 + pool) * 12;
            let submission = (
                prop_oneof![1 => Just(None), 6 => (0..keys).prop_map(Some)],
                0..=max_priority,
            );
            let clients = prop::collection::vec(prop::collection::vec(submission, 1..=10), 2..=24);
            (Just(limit), Just(before), clients, Just(writers))
        })
        .prop_map(|(limit, before, clients, writers)| Burst {
            limit,
            before,
            clients,
            writers,
        })
}

/// A key's one payload: what a retry sends again.
fn submission(user: &str, key: Option<u16>, priority: i32, unkeyed: usize) -> NewJob {
    let mut new = crate::helpers::new_job(user, key.map(|k| format!("k{k}")));
    // A key has one priority (its first); the entrypoint tells unkeyed jobs apart.
    new.priority = priority;
    new.entrypoint = match key {
        Some(k) => format!("sweep {k}"),
        None => format!("unkeyed {unkeyed}"),
    };
    new
}

/// What one submission was answered.
#[derive(Debug)]
enum Answer {
    Created(job::Model, Option<u64>),
    Existing(job::Model),
    Full,
}

async fn check(
    conn: &DatabaseConnection,
    url: &str,
    case: u32,
    b: Burst,
) -> Result<(), TestCaseError> {
    let user = format!("burst{case}");
    store::upsert_user(
        conn,
        &user,
        UserPatch {
            max_queued_jobs: Some(Some(b.limit as i32)),
            ..UserPatch::default()
        },
    )
    .await
    .map_err(|e| TestCaseError::fail(format!("user: {e}")))?;
    let settings = test_settings(url).database;
    // The default is far above the user's own limit: the user's limit is what holds.
    let writers: Vec<IntakeWriter> = (0..b.writers)
        .map(|_| IntakeWriter::start(conn.clone(), &settings, 1_000_000))
        .collect();

    let mut queued_before = 0;
    for i in 0..b.before {
        let mut new = crate::helpers::new_job(&user, Some(format!("before{i}")));
        new.entrypoint = format!("before {i}");
        match writers[0].submit(new).await {
            Ok(Intake::Created(_)) => queued_before += 1,
            Err(StoreError::QueueFull { .. }) => {}
            other => return Err(TestCaseError::fail(format!("before the burst: {other:?}"))),
        }
    }
    prop_assert_eq!(queued_before, b.before.min(b.limit));

    // A key's payload is its first submission's (a retry sends the same again).
    let mut payloads: BTreeMap<u16, i32> = BTreeMap::new();
    let mut unkeyed = 0;
    let clients: Vec<Vec<NewJob>> = b
        .clients
        .iter()
        .map(|c| {
            c.iter()
                .map(|&(key, priority)| {
                    let priority = key.map_or(priority, |k| *payloads.entry(k).or_insert(priority));
                    unkeyed += usize::from(key.is_none());
                    submission(&user, key, priority, unkeyed)
                })
                .collect()
        })
        .collect();
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, jobs)| {
            let writer = writers[i % writers.len()].clone();
            tokio::spawn(async move {
                let mut answers = Vec::new();
                for new in jobs {
                    let key = new.external_id.clone();
                    let answer = match writer.submit_positioned(new).await {
                        Ok((Intake::Created(j), p)) => Answer::Created(j, p),
                        Ok((Intake::Existing(j), _)) => Answer::Existing(j),
                        Err(StoreError::QueueFull { .. }) => Answer::Full,
                        other => panic!("a submission of the burst: {other:?}"),
                    };
                    answers.push((key, answer));
                }
                answers
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.extend(t.await.map_err(|e| TestCaseError::fail(e.to_string()))?);
    }

    // The limit, exactly: every job that fitted was taken, and none beyond.
    let distinct = payloads.len() + unkeyed;
    let room = (b.limit - queued_before) as usize;
    let created: Vec<(&job::Model, Option<u64>)> = answers
        .iter()
        .filter_map(|(_, a)| match a {
            Answer::Created(j, p) => Some((j, *p)),
            _ => None,
        })
        .collect();
    prop_assert_eq!(
        created.len(),
        distinct.min(room),
        "jobs created by the burst"
    );
    let queued: Vec<job::Model> = job::Entity::find()
        .filter(job::Column::UserId.eq(user.as_str()))
        .filter(job::Column::Status.eq(JobStatus::Queued))
        .all(conn)
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(queued.len(), queued_before as usize + created.len());
    prop_assert!(queued.len() <= b.limit as usize);

    // Idempotency: a key is one job, or was refused every time (a full queue stays
    // full: nothing leaves it here).
    let mut by_key: BTreeMap<&str, Vec<&Answer>> = BTreeMap::new();
    for (key, a) in &answers {
        if let Some(k) = key {
            by_key.entry(k.as_str()).or_default().push(a);
        }
    }
    let mut created_keys = BTreeMap::new();
    for (key, got) in &by_key {
        let ids: BTreeSet<uuid::Uuid> = got
            .iter()
            .filter_map(|a| match a {
                Answer::Created(j, _) | Answer::Existing(j) => Some(j.id),
                Answer::Full => None,
            })
            .collect();
        let made = got
            .iter()
            .filter(|a| matches!(a, Answer::Created(..)))
            .count();
        if ids.is_empty() {
            prop_assert_eq!(made, 0);
        } else {
            prop_assert_eq!((made, ids.len()), (1, 1), "key {}: {:?}", key, got);
            prop_assert!(
                got.iter().all(|a| !matches!(a, Answer::Full)),
                "key {} was both refused and taken: {:?}",
                key,
                got
            );
            created_keys.insert(key.to_string(), *ids.first().expect("one"));
        }
    }

    // Positions (one writer: two replicas racing may count each other's batch or
    // not, DESIGN §6 "One round trip"): 1 + the user's QUEUED jobs ahead of the job
    // in queue order that were committed with it or before it. A user's batches
    // take their submit time under its lock, so commit order is submit-time order.
    if b.writers == 1 {
        let ahead = |k: &job::Model, j: &job::Model| {
            k.priority > j.priority
                || (k.priority == j.priority && (k.submitted_at, k.id) < (j.submitted_at, j.id))
        };
        for (j, position) in &created {
            let expected = 1 + queued
                .iter()
                .filter(|k| k.id != j.id && k.submitted_at <= j.submitted_at && ahead(k, j))
                .count() as u64;
            prop_assert_eq!(*position, Some(expected), "job {:?}", j.external_id);
        }
        if b.clients.iter().flatten().all(|&(_, p)| p == 0) {
            let positions: BTreeSet<u64> = created.iter().filter_map(|(_, p)| *p).collect();
            let dense: BTreeSet<u64> =
                (u64::from(queued_before) + 1..=queued.len() as u64).collect();
            prop_assert_eq!(
                positions,
                dense,
                "one priority: positions after those queued before"
            );
        }
    }

    // Retried after the burst, every key gets its one job back (or the full queue).
    for (key, priority) in &payloads {
        let again = submission(&user, Some(*key), *priority, 0);
        let name = format!("k{key}");
        match (writers[0].submit(again).await, created_keys.get(&name)) {
            (Ok(Intake::Existing(j)), Some(id)) => prop_assert_eq!(j.id, *id),
            (Err(StoreError::QueueFull { .. }), None) => {}
            (other, id) => {
                return Err(TestCaseError::fail(format!(
                    "retry of {name} (created as {id:?}): {other:?}"
                )))
            }
        }
    }
    let stored = job::Entity::find()
        .filter(job::Column::UserId.eq(user.as_str()))
        .all(conn)
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(stored.len(), queued.len(), "a retry added a row");
    Ok(())
}

fn one_users_burst_holds_its_limit_positions_and_keys(which: Db, cases: u32) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some(db) = rt.block_on(TestDb::new(which)) else {
        return;
    };
    let conn = rt.block_on(async {
        let conn = Database::connect(&db.url).await.unwrap();
        store::migrate(&conn).await.unwrap();
        conn
    });
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU32::new(0);
    let result = runner.run(&burst(), |b| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        rt.block_on(check(&conn, &db.url, n, b))
    });
    rt.block_on(conn.close()).unwrap();
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn one_users_burst_holds_its_limit_positions_and_keys_sqlite() {
    one_users_burst_holds_its_limit_positions_and_keys(Db::Sqlite, 24);
}

#[test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
fn one_users_burst_holds_its_limit_positions_and_keys_postgres() {
    one_users_burst_holds_its_limit_positions_and_keys(Db::Postgres, 24);
}

/// What made one user's burst slow (issue 27): on a new `jobs` table, without
/// statistics, the generic plan of intake's look-up of a `(user, external_id)` pair
/// (made once per connection, at its first batch) took the status index, which then
/// led with `user_id`, and read every job of the user per pair. With the unique index
/// the only one leading with `user_id`, the plan made on an empty table probes it.
/// (Fails on the schema before migration `m20261209_000010`.)
#[actix_web::test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
async fn a_new_databases_generic_plan_looks_keys_up_by_the_unique_index() {
    use sea_orm::{ConnectionTrait, Statement};
    let Some(db) = TestDb::new(Db::Postgres).await else {
        return;
    };
    let conn = Database::connect(&db.url).await.unwrap();
    store::migrate(&conn).await.unwrap();
    let run = |sql: &str| {
        let conn = conn.clone();
        let sql = sql.to_string();
        async move {
            conn.query_all(Statement::from_string(
                sea_orm::DatabaseBackend::Postgres,
                sql,
            ))
            .await
            .unwrap()
        }
    };
    // The look-up's shape as intake prepares it (`fairshare_intake_read`); on a table
    // without statistics its plan is the same whether the pair is a constant or a
    // parameter of a generic plan.
    let mut text = String::new();
    for row in run(
        "EXPLAIN (COSTS OFF) SELECT j.id FROM unnest(ARRAY['u']::text[], ARRAY['k']::text[]) \
           AS k(user_id, external_id) \
         CROSS JOIN LATERAL (SELECT * FROM jobs WHERE jobs.user_id = k.user_id \
           AND jobs.external_id = k.external_id OFFSET 0) j",
    )
    .await
    {
        let line: String = row.try_get_by_index(0).unwrap();
        text.push_str(&line);
        text.push('\n');
    }
    assert!(text.contains("idx_jobs_user_external"), "{text}");
    assert!(!text.contains("Filter"), "{text}");
    conn.close().await.unwrap();
}
