//! Intake (DESIGN §4, §6): new jobs are committed in batches by one writer per
//! process ("group commit"), so that a durable submit costs a share of one transaction
//! and one fsync instead of its own.
//!
//! [`IntakeWriter`] owns a channel; `POST /v1/jobs` hands it a [`NewJob`] and awaits
//! the answer, which comes only after the batch holding it committed. The writer takes
//! whatever has arrived (up to [`MAX_BATCH`]) and [`submit_batch`] commits it in one
//! transaction: the users (created if new; rows locked on PostgreSQL, in id order, so
//! that queue limits hold across replicas) read with their QUEUED jobs per priority
//! (`queue_counts`), one look-up of the batch's external ids, then the inserts of the
//! jobs and their creation events (SQLite: multi-row inserts; PostgreSQL: statements
//! of one text whatever the batch's size, see [`postgres`]). Idempotency on
//! `(user, external_id)` holds inside a batch too: a repeat of a key created earlier
//! in the same batch resolves against it. If another replica committed the same key in between (the unique index
//! refuses the batch), the batch is retried one submission at a time.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use entity::{job, user, JobStatus};
use sea_orm::sea_query::OnConflict;
use sea_orm::{ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, SqlErr};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::{now, Db, StoreError};
use crate::config::DatabaseSettings;

/// Most submissions committed in one transaction. Bounded so that one transaction
/// stays short (a few milliseconds) and within SQLite's 32,766 bound parameters per
/// statement once split into chunks of [`ROWS_PER_STATEMENT`].
pub const MAX_BATCH: usize = 1024;

/// Most bytes of jobs ([`NewJob::approx_bytes`]) committed in one transaction, beyond
/// its first job. 1,024 submissions of 256 KiB `runtime_env`s made one batch of
/// 256 MiB: seconds to serialize and send while the batches beside it, holding
/// their locks, sat idle past `database.idle_in_transaction_timeout` (2 s) and
/// PostgreSQL ended their sessions (every one of their submissions answered 503).
/// Jobs of a few hundred bytes stay 1,024 to a batch.
pub const MAX_BATCH_BYTES: usize = 4 << 20;

/// Rows per multi-row `INSERT` on SQLite: 12 job parameters × 500 = 6,000, under
/// SQLite's limit of 32,766.
const ROWS_PER_STATEMENT: usize = 500;

/// `(user, external_id)` pairs looked up per statement: an OR of this many terms stays
/// well under SQLite's expression depth of 1,000.
const PAIRS_PER_STATEMENT: usize = 200;

/// Submissions waiting for the writer, at most; a full channel makes `POST /v1/jobs`
/// wait (back-pressure) rather than grow memory without bound.
const CHANNEL_CAPACITY: usize = 16 * MAX_BATCH;

/// A job as the API accepted it, before it has an id.
#[derive(Clone, Debug)]
pub struct NewJob {
    pub user: String,
    pub external_id: Option<String>,
    pub priority: i32,
    pub entrypoint: String,
    pub runtime_env: Option<serde_json::Value>,
    pub metadata: Option<serde_json::Value>,
    /// Cores.
    pub cpu: f64,
    /// GPUs.
    pub gpu: f64,
    /// Bytes.
    pub memory_bytes: i64,
    /// Seconds.
    pub max_runtime_s: Option<i64>,
}

impl NewJob {
    /// About how many bytes the job takes in a batch's statements: its texts and its
    /// JSON values as written, plus a fixed share for the rest. An estimate for
    /// [`MAX_BATCH_BYTES`], not an exact size.
    pub fn approx_bytes(&self) -> usize {
        fn json(v: &serde_json::Value) -> usize {
            match v {
                serde_json::Value::String(s) => s.len() + 2,
                serde_json::Value::Array(items) => {
                    2 + items.iter().map(|v| json(v) + 1).sum::<usize>()
                }
                serde_json::Value::Object(map) => {
                    2 + map
                        .iter()
                        .map(|(k, v)| k.len() + 4 + json(v))
                        .sum::<usize>()
                }
                _ => 8,
            }
        }
        128 + self.user.len()
            + self.external_id.as_ref().map_or(0, String::len)
            + self.entrypoint.len()
            + self.runtime_env.as_ref().map_or(0, json)
            + self.metadata.as_ref().map_or(0, json)
    }
}

/// How many of `jobs`, from the first, make the next batch: at most [`MAX_BATCH`] and,
/// beyond the first, at most [`MAX_BATCH_BYTES`] ([`NewJob::approx_bytes`]). At least
/// one when `jobs` is not empty.
pub fn batch_len<'a>(jobs: impl IntoIterator<Item = &'a NewJob>) -> usize {
    let mut bytes = 0;
    let mut n = 0;
    for job in jobs.into_iter().take(MAX_BATCH) {
        bytes += job.approx_bytes();
        if n > 0 && bytes > MAX_BATCH_BYTES {
            break;
        }
        n += 1;
    }
    n
}

/// The result of [`submit_job`].
#[derive(Clone, Debug)]
pub enum Intake {
    /// A new job, committed as QUEUED.
    Created(job::Model),
    /// `(user, external_id)` was seen before with the same payload: the existing job,
    /// unchanged (an idempotent retry).
    Existing(job::Model),
    /// `(user, external_id)` was seen before with another payload: the existing job,
    /// unchanged, and the fields that differ ([`payload_differences`]).
    Conflict {
        existing: job::Model,
        differs: Vec<&'static str>,
    },
}

/// The fields in which `new` differs from the stored job `j`: the payload that reaches
/// Ray and the scheduler (DESIGN §4), compared after defaults are applied, so an absent
/// `cpu` equals an explicit `1`, an absent `priority` an explicit `0`, and an absent
/// `metadata` or `runtime_env` an empty object. `max_runtime_s` is compared as sent
/// (absent means "the configured default", which may change). JSON values compare as
/// values: key order does not matter.
pub fn payload_differences(new: &NewJob, j: &job::Model) -> Vec<&'static str> {
    fn object_or_empty(v: &Option<serde_json::Value>) -> serde_json::Value {
        match v {
            None | Some(serde_json::Value::Null) => serde_json::Value::Object(Default::default()),
            Some(v) => v.clone(),
        }
    }
    let mut differs = Vec::new();
    if new.entrypoint != j.entrypoint {
        differs.push("entrypoint");
    }
    if object_or_empty(&new.runtime_env) != object_or_empty(&j.runtime_env) {
        differs.push("runtime_env");
    }
    if new.cpu != j.cpu {
        differs.push("resources.cpu");
    }
    if new.gpu != j.gpu {
        differs.push("resources.gpu");
    }
    if new.memory_bytes != j.memory_bytes {
        differs.push("resources.memory_bytes");
    }
    if new.priority != j.priority {
        differs.push("priority");
    }
    if object_or_empty(&new.metadata) != object_or_empty(&j.metadata) {
        differs.push("metadata");
    }
    if new.max_runtime_s != j.max_runtime_s {
        differs.push("max_runtime_s");
    }
    differs
}

/// What a repeated `(user, external_id)` gets: the job itself, or a conflict.
fn resolve_existing(new: &NewJob, existing: job::Model) -> Intake {
    let differs = payload_differences(new, &existing);
    if differs.is_empty() {
        Intake::Existing(existing)
    } else {
        Intake::Conflict { existing, differs }
    }
}

/// Commits a new QUEUED job (and its user row, if new) with its creation event: a
/// batch of one (see [`submit_batch`]).
///
/// Idempotent on `(user, external_id)`: the same payload again gets the existing job,
/// another payload a [`Intake::Conflict`]. Errors: [`StoreError::QueueFull`] when the
/// user already has `max_queued_jobs` (its own, else `default_max_queued`) QUEUED jobs;
/// [`StoreError::Db`] when the database fails.
pub async fn submit_job(
    db: &Db,
    new: NewJob,
    default_max_queued: u32,
) -> Result<Intake, StoreError> {
    let mut out = submit_batch(db, vec![new], default_max_queued).await;
    out.pop()
        .unwrap_or_else(|| Err(StoreError::Db(DbErr::Custom("empty batch".into()))))
}

/// Commits `batch` in one transaction and answers each submission in order (see the
/// module docs). A database failure fails the whole batch (every answer is
/// [`StoreError::Db`]) and nothing of it is stored.
pub async fn submit_batch(
    db: &Db,
    batch: Vec<NewJob>,
    default_max_queued: u32,
) -> Vec<Result<Intake, StoreError>> {
    submit_batch_with(db, batch, default_max_queued, true)
        .await
        .0
        .into_iter()
        .map(|(answer, _)| answer)
        .collect()
}

/// [`submit_batch`], on PostgreSQL trying the batch in one round trip first or not
/// (`one_round_trip`, see [`postgres`]): each answer with a created job's queue
/// position, and in how many round trips the batch committed (2 on SQLite; 0 if it
/// failed or went one submission at a time). Answers and rows are the same either
/// way; the tests hold the two ways to that.
pub async fn submit_batch_with(
    db: &Db,
    batch: Vec<NewJob>,
    default_max_queued: u32,
    one_round_trip: bool,
) -> (Vec<(Result<Intake, StoreError>, Option<u64>)>, u8) {
    let (answers, trips) =
        submit_batch_counted(db, batch, default_max_queued, one_round_trip).await;
    let answers = answers
        .into_iter()
        .map(|a| (a.answer, a.position))
        .collect();
    (answers, trips)
}

/// One submission's answer, with a created job's place in its user's queue.
struct Answered {
    answer: Result<Intake, StoreError>,
    /// For [`Intake::Created`]: 1 + the QUEUED jobs of its user ahead of it in queue
    /// order (higher priority, or the same and submitted earlier) at the commit.
    position: Option<u64>,
}

impl Answered {
    fn failed(e: StoreError) -> Answered {
        Answered {
            answer: Err(e),
            position: None,
        }
    }
}

/// [`submit_batch`] with each created job's queue position; `speculate`: PostgreSQL
/// may try the batch in one round trip first ([`postgres::commit`]).
async fn submit_batch_positioned(
    db: &Db,
    batch: Vec<NewJob>,
    default_max_queued: u32,
    speculate: bool,
) -> Vec<Answered> {
    submit_batch_counted(db, batch, default_max_queued, speculate)
        .await
        .0
}

/// [`submit_batch_positioned`], with the round trips the commit took (0: it failed,
/// or went one submission at a time).
async fn submit_batch_counted(
    db: &Db,
    batch: Vec<NewJob>,
    default_max_queued: u32,
    speculate: bool,
) -> (Vec<Answered>, u8) {
    match commit(db, &batch, default_max_queued, speculate).await {
        Ok(done) => done,
        Err(e)
            if matches!(e.sql_err(), Some(SqlErr::UniqueConstraintViolation(_)))
                && batch.len() > 1 =>
        {
            // Another replica committed one of these keys meanwhile: one by one, each
            // resolves against whatever is stored now.
            let mut answers = Vec::with_capacity(batch.len());
            for new in batch {
                let one = commit(db, std::slice::from_ref(&new), default_max_queued, false).await;
                answers.push(match one {
                    Ok((mut a, _)) => a.pop().unwrap_or_else(|| {
                        Answered::failed(StoreError::Db(DbErr::Custom("empty".into())))
                    }),
                    Err(e) => Answered::failed(StoreError::Db(e)),
                });
            }
            (answers, 0)
        }
        Err(e) => {
            let text = e.to_string();
            let answers = batch
                .iter()
                .map(|_| Answered::failed(StoreError::Db(DbErr::Custom(text.clone()))))
                .collect();
            (answers, 0)
        }
    }
}

/// What a batch comes to once its stored state is read: each submission's answer,
/// the rows to insert (by user), and their submit time.
type Decided = (
    Vec<Answered>,
    Vec<job::Model>,
    chrono::DateTime<chrono::Utc>,
);

/// A job row as it is created.
fn new_row(new: &NewJob, id: Uuid, at: chrono::DateTime<chrono::Utc>) -> job::Model {
    job::Model {
        id,
        user_id: new.user.clone(),
        external_id: new.external_id.clone(),
        status: JobStatus::Queued,
        priority: new.priority,
        entrypoint: new.entrypoint.clone(),
        runtime_env: new.runtime_env.clone(),
        metadata: new.metadata.clone(),
        cpu: new.cpu,
        gpu: new.gpu,
        memory_bytes: new.memory_bytes,
        cluster: None,
        message: None,
        max_runtime_s: new.max_runtime_s,
        submitted_at: at,
        dispatched_at: None,
        started_at: None,
        finished_at: None,
        attempt: 1,
        retiring_attempt: None,
        stop_reason: None,
    }
}

/// Creates the users of `ids` that do not exist yet, with the defaults.
async fn create_users<'a, C: ConnectionTrait>(
    conn: &C,
    ids: impl Iterator<Item = &'a str>,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<(), DbErr> {
    user::Entity::insert_many(ids.map(|id| super::new_user(id, at)))
        .on_conflict(OnConflict::column(user::Column::Id).do_nothing().to_owned())
        .exec_without_returning(conn)
        .await?;
    Ok(())
}

/// What the database holds of a batch's users and keys, read inside its transaction.
#[derive(Default)]
struct Stored {
    /// Each user's queue limit (its own `max_queued_jobs`, else the default).
    limits: HashMap<String, u32>,
    /// Each user's QUEUED jobs per priority (`queue_counts`), users with none absent.
    by_priority: HashMap<String, BTreeMap<i32, u64>>,
    /// The stored jobs of the batch's `(user, external_id)` pairs.
    known: BTreeMap<(String, String), job::Model>,
}

impl Stored {
    /// Records `user`'s queue limit: its own `max_queued_jobs`, else the default.
    fn add_limit(&mut self, user: String, max_queued_jobs: Option<i32>, default: u32) {
        let limit = max_queued_jobs.map_or(default, |v| v.max(0) as u32);
        self.limits.insert(user, limit);
    }

    fn add_count(&mut self, user: String, priority: i32, queued: i64) {
        *self
            .by_priority
            .entry(user)
            .or_default()
            .entry(priority)
            .or_default() += queued.max(0) as u64;
    }

    fn add_known(&mut self, jobs: Vec<job::Model>) {
        for j in jobs {
            if let Some(ext) = j.external_id.clone() {
                self.known.insert((j.user_id.clone(), ext), j);
            }
        }
    }
}

/// The batch's `(user, external_id)` pairs, each once, in order.
fn key_pairs(batch: &[NewJob]) -> Vec<(&str, &str)> {
    let pairs: BTreeSet<(&str, &str)> = batch
        .iter()
        .filter_map(|n| Some((n.user.as_str(), n.external_id.as_deref()?)))
        .collect();
    pairs.into_iter().collect()
}

async fn commit(
    db: &Db,
    batch: &[NewJob],
    default_max_queued: u32,
    speculate: bool,
) -> Result<(Vec<Answered>, u8), DbErr> {
    let users: Vec<&str> = batch
        .iter()
        .map(|n| n.user.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // The submit time is taken once the batch holds its users (on PostgreSQL, their
    // locks): a user's jobs are submitted in the order their batches commit, so the
    // queue positions computed from the counts read are the queue's order.
    let decide_at = |stored: Stored| {
        let at = now();
        let (answers, mut rows) = decide(batch, stored, default_max_queued, at, Uuid::now_v7);
        // By user: the `queue_counts` triggers lock one row per (user, priority), and
        // every transaction that changes several users' jobs does so in user order.
        rows.sort_by(|a, b| a.user_id.cmp(&b.user_id));
        (answers, rows, at)
    };
    let done = if db.get_database_backend() == DatabaseBackend::Postgres {
        postgres::commit(db, batch, &users, default_max_queued, speculate, decide_at).await?
    } else {
        let (txn, stored) = sqlite::read(db, batch, &users, default_max_queued).await?;
        let (answers, rows, at) = decide_at(stored);
        txn.insert_and_commit(&rows, at).await?;
        crate::metrics::get()
            .intake_batches
            .with_label_values(&["2"])
            .inc();
        (answers, 2)
    };
    super::events::committed();
    Ok(done)
}

/// A batch's open transaction on a connection taken from the pool by hand: `BEGIN`
/// travels in one message with the batch's first statements (see [`sqlite`],
/// [`postgres`]), so sqlx does not know the connection is inside a transaction.
/// Dropped while it still holds the connection (an error, a cancelled task), it closes
/// the connection instead of handing it back, so no pool hands out a session left
/// inside a transaction; the database rolls it back (the pool opens another).
struct Txn<DB: sea_orm::sqlx::Database> {
    conn: Option<sea_orm::sqlx::pool::PoolConnection<DB>>,
}

impl<DB: sea_orm::sqlx::Database> Drop for Txn<DB> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            drop(conn.detach());
        }
    }
}

/// A sqlx error as sea-orm gives it (so that `DbErr::sql_err` sees a unique
/// violation).
fn db_err(e: sea_orm::sqlx::Error) -> DbErr {
    DbErr::Exec(sea_orm::RuntimeErr::SqlxError(e))
}

/// SQLite's intake: a batch takes two round trips to sqlx's SQLite thread, whatever its
/// size.
///
/// 1. `BEGIN`, the read of the batch's users joined with their QUEUED jobs per
///    priority (`queue_counts`, kept exact by triggers on `jobs`, migration
///    m20261206_000007), and the look-up of its `(user, external_id)` pairs;
/// 2. the multi-row inserts of jobs and of their events, and `COMMIT`.
///
/// Each is one query of several statements, which sqlx's SQLite driver runs one after
/// the other, taking the bound values in order. Through sea-orm the same batch was
/// seven hops to that thread and back (the pool's ping, `BEGIN`, the read, the
/// look-up, two inserts, `COMMIT`; ~65 µs each on the 2-core machine). The values are
/// bound with the types sea-orm binds (sea-query-binder adds each `Value` as its Rust
/// type to sqlx's arguments), so the encodings are the same: UUIDs as 16-byte blobs,
/// timestamps as sqlx's text, JSON as its text, doubles as REAL.
///
/// SQLite has one writer, this one: nothing changes the users, counts and keys
/// between the read and the commit. Users the read did not find are created in a
/// commit of their own before the batch begins again, as on PostgreSQL.
mod sqlite {
    use futures_util::future::BoxFuture;
    use sea_orm::sqlx::{
        self,
        pool::PoolConnection,
        query::Query,
        sqlite::{SqliteArguments, SqliteConnection, SqliteRow},
        Row as _, Sqlite,
    };
    use sea_orm::{FromQueryResult, QueryResult};

    use super::{db_err, Txn, *};

    type SqliteQuery<'q> = Query<'q, Sqlite, SqliteArguments<'q>>;

    /// Runs `query` (one statement or several) and returns the rows of all of them.
    /// A named function with its lifetimes spelled out: the generic `fetch_all`
    /// inside the writer's spawned task does not prove `Send` (rustc's higher-ranked
    /// lifetime limitation).
    fn fetch<'c>(
        conn: &'c mut SqliteConnection,
        query: SqliteQuery<'c>,
    ) -> BoxFuture<'c, Result<Vec<SqliteRow>, sqlx::Error>> {
        sqlx::Executor::fetch_all(conn, query)
    }

    /// Rolls back `conn`'s open transaction and hands the connection back to the
    /// pool (or closes it if that failed).
    async fn rollback(mut conn: PoolConnection<Sqlite>) {
        if fetch(&mut conn, sqlx::query("ROLLBACK")).await.is_err() {
            drop(conn.detach());
        }
    }

    /// Begins the batch's transaction and reads its users' limits, counts and keys
    /// (round trip 1). `users`: the batch's users, each once.
    pub(super) async fn read(
        db: &Db,
        batch: &[NewJob],
        users: &[&str],
        default_max_queued: u32,
    ) -> Result<(Txn<Sqlite>, Stored), DbErr> {
        let pool = db.get_sqlite_connection_pool();
        let pairs = key_pairs(batch);
        let mut sql = format!(
            "BEGIN; SELECT 'u' AS kind, u.id, u.max_queued_jobs, c.priority, c.queued \
             FROM users u LEFT JOIN queue_counts c ON c.user_id = u.id AND c.queued > 0 \
             WHERE u.id IN ({});",
            vec!["?"; users.len()].join(", ")
        );
        // Each pair one probe of the unique index: an OR of pairs, not `user_id IN
        // (…) AND external_id IN (…)`, which is the cross product of the two lists.
        for chunk in pairs.chunks(PAIRS_PER_STATEMENT) {
            sql.push_str(" SELECT 'j' AS kind, * FROM jobs WHERE ");
            sql.push_str(&vec!["(user_id = ? AND external_id = ?)"; chunk.len()].join(" OR "));
            sql.push(';');
        }
        for created in 0.. {
            let mut query = sqlx::query(&sql);
            for user in users {
                query = query.bind(*user);
            }
            for (user, ext) in &pairs {
                query = query.bind(*user).bind(*ext);
            }
            let mut conn = pool.acquire().await.map_err(db_err)?;
            let rows = match fetch(&mut conn, query).await {
                Ok(rows) => rows,
                Err(e) => {
                    rollback(conn).await;
                    return Err(db_err(e));
                }
            };
            let stored = stored_of(rows, default_max_queued)?;
            if stored.limits.len() == users.len() {
                return Ok((Txn { conn: Some(conn) }, stored));
            }
            // Back to the pool (its one connection) while the users are created.
            rollback(conn).await;
            if created == 2 {
                break;
            }
            let missing = users
                .iter()
                .copied()
                .filter(|u| !stored.limits.contains_key(*u));
            create_users(db, missing, now()).await?;
        }
        Err(DbErr::Custom(
            "the batch's users could not be created".into(),
        ))
    }

    /// The rows of round trip 1: kind `u` (a user, with one of its priorities and
    /// that priority's QUEUED count, or none) and kind `j` (a stored job of a key).
    fn stored_of(rows: Vec<SqliteRow>, default_max_queued: u32) -> Result<Stored, DbErr> {
        let mut stored = Stored::default();
        let mut found = Vec::new();
        for row in rows {
            let kind: String = row.try_get(0).map_err(db_err)?;
            if kind == "u" {
                let id: String = row.try_get(1).map_err(db_err)?;
                let max: Option<i32> = row.try_get(2).map_err(db_err)?;
                let priority: Option<i32> = row.try_get(3).map_err(db_err)?;
                let n: Option<i64> = row.try_get(4).map_err(db_err)?;
                if let (Some(p), Some(n)) = (priority, n) {
                    stored.add_count(id.clone(), p, n);
                }
                stored.add_limit(id, max, default_max_queued);
            } else {
                found.push(job::Model::from_query_result(&QueryResult::from(row), "")?);
            }
        }
        stored.add_known(found);
        Ok(stored)
    }

    impl Txn<Sqlite> {
        /// Inserts the jobs and their creation events at `at`, in multi-row inserts of
        /// [`ROWS_PER_STATEMENT`] rows, and commits (round trip 2). An error rolls
        /// the batch back.
        pub(super) async fn insert_and_commit(
            mut self,
            rows: &[job::Model],
            at: chrono::DateTime<chrono::Utc>,
        ) -> Result<(), DbErr> {
            const JOB_ROW: &str = "(?, ?, ?, 'QUEUED', ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)";
            let mut sql = String::new();
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                sql.push_str(
                    "INSERT INTO jobs (id, user_id, external_id, status, priority, \
                     entrypoint, runtime_env, metadata, cpu, gpu, memory_bytes, \
                     max_runtime_s, submitted_at, attempt) VALUES ",
                );
                sql.push_str(&vec![JOB_ROW; chunk.len()].join(", "));
                sql.push_str("; INSERT INTO job_events (job_id, to_status, at) VALUES ");
                sql.push_str(&vec!["(?, 'QUEUED', ?)"; chunk.len()].join(", "));
                sql.push_str("; ");
            }
            sql.push_str("COMMIT");
            let mut query = sqlx::query(&sql);
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                for j in chunk {
                    query = query
                        .bind(j.id)
                        .bind(j.user_id.as_str())
                        .bind(j.external_id.as_deref())
                        .bind(j.priority)
                        .bind(j.entrypoint.as_str())
                        .bind(j.runtime_env.as_ref())
                        .bind(j.metadata.as_ref())
                        .bind(j.cpu)
                        .bind(j.gpu)
                        .bind(j.memory_bytes)
                        .bind(j.max_runtime_s)
                        .bind(j.submitted_at);
                }
                for j in chunk {
                    query = query.bind(j.id).bind(at);
                }
            }
            let Some(mut conn) = self.conn.take() else {
                return Err(DbErr::Custom("the batch's connection is gone".into()));
            };
            match fetch(&mut conn, query).await {
                Ok(_) => Ok(()),
                Err(e) => {
                    rollback(conn).await;
                    Err(db_err(e))
                }
            }
        }
    }
}

/// Answers each submission of `batch` against what is stored, in order, and returns
/// the rows to insert: a repeated key resolves against the stored job (or one created
/// earlier in the batch), a user at its limit gets [`StoreError::QueueFull`], and
/// every other submission becomes a new QUEUED job with its queue position.
fn decide(
    batch: &[NewJob],
    stored: Stored,
    default_max_queued: u32,
    at: chrono::DateTime<chrono::Utc>,
    mut next_id: impl FnMut() -> Uuid,
) -> (Vec<Answered>, Vec<job::Model>) {
    let Stored {
        limits,
        by_priority,
        mut known,
    } = stored;
    let mut queued: HashMap<String, u64> = by_priority
        .iter()
        .map(|(u, counts)| (u.clone(), counts.values().sum()))
        .collect();
    let mut answers = Vec::with_capacity(batch.len());
    let mut rows = Vec::new();
    // Per user, the jobs this batch creates: (priority, index in `answers`).
    let mut created: HashMap<&str, Vec<(Reverse<i32>, usize)>> = HashMap::new();
    for new in batch {
        if let Some(ext) = &new.external_id {
            if let Some(existing) = known.get(&(new.user.clone(), ext.clone())) {
                answers.push(Answered {
                    answer: Ok(resolve_existing(new, existing.clone())),
                    position: None,
                });
                continue;
            }
        }
        let limit = limits.get(&new.user).copied().unwrap_or(default_max_queued);
        let count = queued.entry(new.user.clone()).or_default();
        if *count >= u64::from(limit) {
            answers.push(Answered::failed(StoreError::QueueFull {
                user: new.user.clone(),
                limit,
            }));
            continue;
        }
        *count += 1;
        created
            .entry(new.user.as_str())
            .or_default()
            .push((Reverse(new.priority), answers.len()));
        let row = new_row(new, next_id(), at);
        if let Some(ext) = &new.external_id {
            known.insert((new.user.clone(), ext.clone()), row.clone());
        }
        answers.push(Answered {
            answer: Ok(Intake::Created(row.clone())),
            position: None,
        });
        rows.push(row);
    }
    // Positions: ahead of a new job are its user's stored QUEUED jobs of at least its
    // priority (all submitted before it) and the jobs of this batch that come first in
    // queue order (higher priority, or the same and created earlier: the same submit
    // time and a smaller id, ids being time-ordered).
    for (user, mut mine) in created {
        mine.sort_unstable();
        let stored = by_priority.get(user);
        for (rank, (Reverse(priority), i)) in mine.into_iter().enumerate() {
            let ahead: u64 = stored.map_or(0, |c| c.range(priority..).map(|(_, n)| n).sum());
            if let Some(a) = answers.get_mut(i) {
                a.position = Some(ahead + rank as u64 + 1);
            }
        }
    }
    (answers, rows)
}

/// PostgreSQL's intake: a batch takes two round trips, whatever its size (one, for a
/// batch taken while no other is in flight and with nothing to weigh: see
/// [`postgres::commit`], "One round trip").
///
/// 1. `BEGIN; EXECUTE lock(users); EXECUTE read(users, keys)` (one simple-query
///    message): the transaction, the users' row locks and the read of their counts
///    and keys;
/// 2. `EXECUTE insert(jobs, at); COMMIT`: the jobs and their events, and the commit.
///
/// The three statements are prepared once per connection with SQL `PREPARE` (and
/// planned once: the writer's sessions force generic plans), so a batch sends only
/// their arguments: arrays of texts and one JSON document, written as literals
/// ([`postgres::literal`]). Through sqlx's extended protocol the same batch took six round
/// trips (the pool's ping, `BEGIN`, lock, read, insert, `COMMIT`), each a wake-up of
/// the backend and of the writer: 1.3-2.5 ms of a one-job submit against 0.4 ms of
/// work inside PostgreSQL (BENCHMARKS.md, round 6). sqlx has no pipelining; a
/// simple-query message with several statements is PostgreSQL's own way to send them
/// at once, each statement with its own snapshot (READ COMMITTED).
///
/// A batch whose connection is lost is begun again on another; when the loss came
/// after round trip 2 was sent, the next attempt first looks whether the lost one
/// committed ([`postgres::commit`], DESIGN §6 "Lost connections").
mod postgres {
    use std::fmt::Write as _;

    use futures_util::future::BoxFuture;
    use sea_orm::sqlx::{
        self, pool::PoolConnection, postgres::PgConnection, postgres::PgRow, Postgres, Row as _,
    };
    use sea_orm::{FromQueryResult, QueryResult};

    use super::{db_err, Txn, *};

    /// What the batch needs to know, in one statement after the lock: the users'
    /// QUEUED jobs per priority (rows of kind `c`) and the stored jobs of its
    /// `(user, external_id)` pairs (kind `j`, one probe of the unique index per
    /// pair; `(NULL::jobs).*` gives the first branch the jobs' columns).
    ///
    /// Not read in the locking statement: the counts would come from that statement's
    /// snapshot, taken before it waited for the other writer's commit (the limit was
    /// overrun so; test `concurrent_writers_hold_the_queue_limit`). `OFFSET 0` keeps
    /// the planner from flattening a lateral subquery into a join, which it ran as a
    /// sequential scan (see [`super::super::lock_users`]).
    const READ: &str = "SELECT 'c' AS kind, c.user_id AS c_user, c.priority AS c_priority, \
           c.queued AS c_queued, (NULL::jobs).* \
         FROM unnest($1::text[]) AS k(user_id) \
         CROSS JOIN LATERAL (SELECT user_id, priority, queued FROM queue_counts \
           WHERE queue_counts.user_id = k.user_id AND queued > 0 OFFSET 0) c \
         UNION ALL \
         SELECT 'j', NULL, NULL, NULL, j.* \
         FROM unnest($2::text[], $3::text[]) AS k(user_id, external_id) \
         CROSS JOIN LATERAL (SELECT * FROM jobs \
           WHERE jobs.user_id = k.user_id AND jobs.external_id = k.external_id OFFSET 0) j";

    /// The batch's jobs (a JSON array of objects, `$1`) and their creation events at
    /// `$2`, in one statement.
    ///
    /// `json`, not `jsonb`: `json_to_recordset` hands each `runtime_env` and
    /// `metadata` on as the text the writer wrote (serde_json's, the same text SQLite
    /// stores), into columns of type `json`, which keep it. Through `jsonb` PostgreSQL
    /// rewrote it (keys by length, `1e16` as `10000000000000000`, read back as an
    /// integer; `-0.0` as `0.0`), so the same submission read back differently by
    /// database (DESIGN §6, "JSON columns").
    const INSERT: &str = "WITH r AS (SELECT * FROM json_to_recordset($1) AS r(\
           id uuid, user_id text, external_id text, priority integer, entrypoint text, \
           runtime_env json, metadata json, cpu double precision, gpu double precision, \
           memory_bytes bigint, max_runtime_s bigint)), \
         j AS (INSERT INTO jobs (id, user_id, external_id, status, priority, entrypoint, \
           runtime_env, metadata, cpu, gpu, memory_bytes, max_runtime_s, submitted_at, \
           attempt) \
           SELECT id, user_id, external_id, 'QUEUED', priority, entrypoint, runtime_env, \
           metadata, cpu, gpu, memory_bytes, max_runtime_s, $2, 1 FROM r ORDER BY user_id \
           RETURNING id) \
         INSERT INTO job_events (job_id, to_status, at) SELECT id, 'QUEUED', $2 FROM j";

    /// [`INSERT`], guarded (the batch in one round trip, see [`commit`]): the jobs
    /// (`$1`) and their events at `$2` are inserted only if every user of the batch
    /// (`$3`) exists, no stored job has one of the batch's `(user, external_id)`
    /// pairs, and no user's QUEUED jobs plus its jobs in the batch (`$4`, by `$3`'s
    /// order) exceed its `max_queued_jobs` (else the default, `$5`): exactly when
    /// [`super::decide`] would create every job of a batch without repeated keys.
    /// Otherwise nothing. Answers the number of jobs inserted (all or none). Runs after
    /// the lock, in a snapshot of its own (READ COMMITTED), as [`READ`] does.
    const INSERT_IF: &str = "WITH r AS (SELECT * FROM json_to_recordset($1) AS r(\
           id uuid, user_id text, external_id text, priority integer, entrypoint text, \
           runtime_env json, metadata json, cpu double precision, gpu double precision, \
           memory_bytes bigint, max_runtime_s bigint)), \
         ok AS (SELECT \
           (SELECT count(*) FROM users WHERE id = ANY($3::text[])) = cardinality($3::text[]) \
           AND NOT EXISTS (SELECT 1 FROM r CROSS JOIN LATERAL (SELECT 1 FROM jobs \
             WHERE jobs.user_id = r.user_id AND jobs.external_id = r.external_id OFFSET 0) x) \
           AND NOT EXISTS (SELECT 1 FROM unnest($3::text[], $4::bigint[]) AS k(user_id, n) \
             CROSS JOIN LATERAL (SELECT max_queued_jobs FROM users \
               WHERE users.id = k.user_id OFFSET 0) u \
             WHERE (SELECT coalesce(sum(queued), 0) FROM queue_counts \
               WHERE queue_counts.user_id = k.user_id) + k.n \
               > greatest(coalesce(u.max_queued_jobs, $5), 0)) AS pass), \
         j AS (INSERT INTO jobs (id, user_id, external_id, status, priority, entrypoint, \
           runtime_env, metadata, cpu, gpu, memory_bytes, max_runtime_s, submitted_at, \
           attempt) \
           SELECT id, user_id, external_id, 'QUEUED', priority, entrypoint, runtime_env, \
           metadata, cpu, gpu, memory_bytes, max_runtime_s, $2, 1 FROM r, ok \
           WHERE ok.pass ORDER BY user_id RETURNING id), \
         e AS (INSERT INTO job_events (job_id, to_status, at) SELECT id, 'QUEUED', $2 FROM j) \
         SELECT count(*) AS inserted FROM j";

    /// The statements a connection prepares for intake: name, parameter types, text.
    /// A connection prepares them at its first batch (the error "prepared statement
    /// does not exist" says when), and again if a migration changed a table under
    /// them ("cached plan must not change result type").
    const PREPARED: [(&str, &str, &str); 4] = [
        ("fairshare_intake_lock", "text[]", super::super::LOCK_USERS),
        ("fairshare_intake_read", "text[], text[], text[]", READ),
        ("fairshare_intake_insert", "json, timestamptz", INSERT),
        (
            "fairshare_intake_insert_if",
            "json, timestamptz, text[], bigint[], integer",
            INSERT_IF,
        ),
    ];

    /// Appends `s` to `sql` as an escape-string literal, `E'…'`, with every backslash
    /// and quote doubled: its value is `s` exactly, whatever the server's
    /// `standard_conforming_strings`. Errors on NUL, which no PostgreSQL text can hold
    /// (the API refuses it before, DESIGN §4).
    pub(super) fn literal(sql: &mut String, s: &str) -> Result<(), DbErr> {
        sql.reserve(s.len() + 3);
        sql.push_str("E'");
        // Byte by byte between the three ASCII bytes that matter (none occurs inside a
        // multi-byte UTF-8 sequence), the rest copied in runs: a batch's JSON document
        // can be hundreds of MiB.
        let mut rest = s;
        while let Some(i) = rest
            .bytes()
            .position(|b| b == b'\\' || b == b'\'' || b == 0)
        {
            sql.push_str(&rest[..i]);
            match rest.as_bytes()[i] {
                b'\\' => sql.push_str("\\\\"),
                b'\'' => sql.push_str("''"),
                _ => {
                    return Err(DbErr::Custom(
                        "a text holds NUL, which PostgreSQL cannot store".into(),
                    ))
                }
            }
            rest = &rest[i + 1..];
        }
        sql.push_str(rest);
        sql.push('\'');
        Ok(())
    }

    /// Appends `ARRAY[…]::text[]` of `items` ([`literal`] each).
    fn text_array<'a>(sql: &mut String, items: impl Iterator<Item = &'a str>) -> Result<(), DbErr> {
        sql.push_str("ARRAY[");
        for (i, item) in items.enumerate() {
            if i > 0 {
                sql.push(',');
            }
            literal(sql, item)?;
        }
        sql.push_str("]::text[]");
        Ok(())
    }

    /// The SQLSTATE of a statement the server refused, its session going on; `None`
    /// when the connection is gone: it failed, or the server ended the session (an
    /// error of severity FATAL, as `pg_terminate_backend` and a shutdown send, read
    /// at the connection's next use).
    fn sqlstate(e: &sqlx::Error) -> Option<String> {
        use sqlx::postgres::{PgDatabaseError, PgSeverity};
        let sqlx::Error::Database(d) = e else {
            return None;
        };
        let ended = d
            .try_downcast_ref::<PgDatabaseError>()
            .is_some_and(|p| matches!(p.severity(), PgSeverity::Fatal | PgSeverity::Panic));
        if ended {
            return None;
        }
        Some(d.code().map(|c| c.into_owned()).unwrap_or_default())
    }

    /// Sends `sql`, one statement or several, in one simple-query message (no
    /// arguments: a text sqlx sends with the simple protocol) and returns the rows of
    /// all of them, in text format. A named function with its lifetimes spelled out:
    /// the generic `raw_sql(…).fetch_all` inside the writer's spawned task does not
    /// prove `Send` (rustc's higher-ranked lifetime limitation).
    fn simple<'c>(
        conn: &'c mut PgConnection,
        sql: &'c str,
    ) -> BoxFuture<'c, Result<Vec<PgRow>, sqlx::Error>> {
        sqlx::Executor::fetch_all(conn, sql)
    }

    /// Rolls back `conn`'s transaction after the server refused a statement of it;
    /// `None` (the connection closed) if that failed too.
    async fn rollback(mut conn: PoolConnection<Postgres>) -> Option<PoolConnection<Postgres>> {
        match simple(&mut conn, "ROLLBACK").await {
            Ok(_) => Some(conn),
            Err(_) => {
                drop(conn.detach());
                None
            }
        }
    }

    /// Gives `conn` up after `e`: rolled back and handed back to the pool if the
    /// server only refused a statement, closed if the connection is gone.
    async fn abandon(conn: PoolConnection<Postgres>, e: &sqlx::Error) {
        if sqlstate(e).is_some() {
            rollback(conn).await;
        } else {
            drop(conn.detach());
        }
    }

    /// Prepares (again) the intake statements on `conn`, outside any transaction.
    async fn prepare(conn: &mut PoolConnection<Postgres>) -> Result<(), sqlx::Error> {
        let present = simple(
            conn,
            "SELECT name FROM pg_prepared_statements WHERE name LIKE 'fairshare\\_intake\\_%'",
        )
        .await?
        .iter()
        .map(|row| row.try_get::<String, _>(0))
        .collect::<Result<Vec<_>, _>>()?;
        let mut sql = String::new();
        for (name, types, text) in PREPARED {
            if present.iter().any(|p| p == name) {
                let _ = write!(sql, "DEALLOCATE {name}; ");
            }
            let _ = write!(sql, "PREPARE {name}({types}) AS {text}; ");
        }
        simple(conn, &sql).await?;
        Ok(())
    }

    /// Whether `e` says the intake statements are not prepared on the connection: not
    /// yet ("prepared statement does not exist"), or prepared before a migration
    /// changed a table under them ("cached plan must not change result type").
    fn unprepared(e: &sqlx::Error) -> bool {
        matches!(sqlstate(e).as_deref(), Some("26000" | "0A000"))
    }

    /// After [`unprepared`] `e`: rolls `conn`'s transaction back and prepares the
    /// statements on it, ready for the message again.
    async fn prepare_after(
        conn: PoolConnection<Postgres>,
        e: sqlx::Error,
    ) -> Result<PoolConnection<Postgres>, Failed> {
        let Some(mut back) = rollback(conn).await else {
            return Err(Failed::Lost(db_err(e)));
        };
        if let Err(e) = prepare(&mut back).await {
            abandon(back, &e).await;
            return Err(failed(e));
        }
        Ok(back)
    }

    /// How an attempt at a batch failed.
    pub(super) enum Failed {
        /// The connection was lost (it failed, or the server ended the session) at a
        /// point where the batch may be begun again: before round trip 2 was sent,
        /// when nothing of it can have been committed, or after round trip 2 with the
        /// doubt recorded for the next attempt to resolve ([`commit`]).
        Lost(DbErr),
        /// Anything else (the server refused a statement, no connection could be had):
        /// the batch fails with it.
        Refused(DbErr),
    }

    /// Whether `e` means the connection is gone rather than a refusal: an I/O or
    /// protocol failure, or an error of severity FATAL (`pg_terminate_backend`, a
    /// shutdown, `idle_in_transaction_session_timeout`). The pool's own errors (no
    /// connection within `acquire_timeout`) are not: trying again would only wait as
    /// long again.
    fn connection_lost(e: &sqlx::Error) -> bool {
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(_) => sqlstate(e).is_none(),
            _ => false,
        }
    }

    /// [`Failed`] of a sqlx error.
    fn failed(e: sqlx::Error) -> Failed {
        if connection_lost(&e) {
            Failed::Lost(db_err(e))
        } else {
            Failed::Refused(db_err(e))
        }
    }

    /// [`Failed`] of an error sea-orm returned (creating users).
    fn failed_db(e: DbErr) -> Failed {
        use sea_orm::RuntimeErr;
        let lost = match &e {
            DbErr::Conn(RuntimeErr::SqlxError(s))
            | DbErr::Exec(RuntimeErr::SqlxError(s))
            | DbErr::Query(RuntimeErr::SqlxError(s)) => connection_lost(s),
            _ => false,
        };
        if lost {
            Failed::Lost(e)
        } else {
            Failed::Refused(e)
        }
    }

    /// Commits `batch` (see the module docs), beginning it again when its connection
    /// is lost, at most the pool's size + 2 times (enough to get past every idle
    /// connection of the pool, had the server ended them all, as a restart does, and
    /// then some), then failing with the last error (503). A batch whose doubt is
    /// still open then may have been committed: as with any 503 to a submit, a retry
    /// with the same `external_id` finds the job if so.
    ///
    /// - Lost before round trip 2 was sent (round trip 1, preparing, creating users):
    ///   nothing of the batch can have been committed; it begins again on another
    ///   connection.
    /// - Lost after round trip 2 was sent: the `COMMIT` may or may not have happened.
    ///   The next attempt, on another connection, first takes the batch's user locks
    ///   (round trip 1 as always), which waits for the lost transaction to end if its
    ///   session still runs, then looks for the first of the lost attempt's job ids:
    ///   a transaction is all or nothing, so that one id tells. Found: the lost
    ///   attempt committed, and its answers are the batch's (the new transaction is
    ///   rolled back). Not found: it never will be, and the batch goes on as new.
    ///
    /// `decide`: what the batch answers and inserts given what round trip 1 read.
    ///
    /// **One round trip** (`speculate`, when the writer has no other batch in flight:
    /// a lone client's case). The batch is first sent as one message, `BEGIN; lock;
    /// read; insert if; COMMIT` ([`INSERT_IF`]), its ids and submit time chosen
    /// before: the guarded insert writes every job exactly when [`super::decide`]
    /// would create them all (users exist, no key stored, every user within its
    /// limit), and nothing otherwise; then the batch goes the two-round-trip way
    /// above. The answers (queue positions) come from `decide` on what the same
    /// message read. Its submit time is taken before its user locks, not after: the
    /// writer runs such a batch alone, so none of its own batches can commit a later
    /// submit time first; another replica's batch for the same user, racing it within
    /// that round trip, can (their queue order is then their submit times', and the
    /// positions answered may count the other batch's jobs or miss them). A loss in
    /// that round trip is in doubt, settled as above.
    pub(super) async fn commit(
        db: &Db,
        batch: &[NewJob],
        users: &[&str],
        default_max_queued: u32,
        speculate: bool,
        decide: impl Fn(Stored) -> Decided,
    ) -> Result<(Vec<Answered>, u8), DbErr> {
        let pool = db.get_postgres_connection_pool();
        let max_lost = pool.options().get_max_connections() as usize + 2;
        let mut lost = 0;
        // The last attempt's first job id and answers when its round trip 2 was lost.
        let mut in_doubt = None;
        let batches = &crate::metrics::get().intake_batches;
        if speculate {
            match one_round_trip(db, batch, users, default_max_queued, &mut in_doubt).await {
                Ok(Some(answers)) => {
                    batches.with_label_values(&["1"]).inc();
                    return Ok((answers, 1));
                }
                Ok(None) => {}
                Err(Failed::Refused(e)) => return Err(e),
                Err(Failed::Lost(e)) => {
                    lost += 1;
                    tracing::info!(error = %e, lost, in_doubt = in_doubt.is_some(),
                        "intake lost its connection; the batch begins again on another");
                }
            }
        }
        loop {
            let e =
                match attempt(db, batch, users, default_max_queued, &decide, &mut in_doubt).await {
                    Ok(answers) => {
                        batches.with_label_values(&["2"]).inc();
                        return Ok((answers, 2));
                    }
                    Err(Failed::Refused(e)) => return Err(e),
                    Err(Failed::Lost(e)) => e,
                };
            lost += 1;
            if lost > max_lost {
                return Err(e);
            }
            tracing::info!(error = %e, lost, in_doubt = in_doubt.is_some(),
                "intake lost its connection; the batch begins again on another");
        }
    }

    /// Round trip 1's text, `BEGIN; EXECUTE lock(users); EXECUTE read(users, keys)`,
    /// and the users' array literal (the one-round-trip message goes on from it).
    fn begin_lock_read(users: &[&str], pairs: &[(&str, &str)]) -> Result<(String, String), Failed> {
        let mut users_array = String::new();
        text_array(&mut users_array, users.iter().copied()).map_err(Failed::Refused)?;
        let mut sql = format!(
            "BEGIN; EXECUTE fairshare_intake_lock({users_array}); \
             EXECUTE fairshare_intake_read({users_array}, "
        );
        text_array(&mut sql, pairs.iter().map(|p| p.0)).map_err(Failed::Refused)?;
        sql.push_str(", ");
        text_array(&mut sql, pairs.iter().map(|p| p.1)).map_err(Failed::Refused)?;
        sql.push(')');
        Ok((sql, users_array))
    }

    /// The batch in one round trip (see [`commit`]): `Some(answers)` if it committed
    /// so, `None` if the guard found something [`super::decide`] must weigh (nothing
    /// was written). A connection that has not prepared the statements yet prepares
    /// them and is sent the message again. A loss leaves the batch in doubt, with the
    /// answers it would have (without queue positions: the API counts them).
    async fn one_round_trip(
        db: &Db,
        batch: &[NewJob],
        users: &[&str],
        default_max_queued: u32,
        in_doubt: &mut Option<(Uuid, Vec<Answered>)>,
    ) -> Result<Option<Vec<Answered>>, Failed> {
        let pairs = key_pairs(batch);
        if pairs.len() != batch.iter().filter(|n| n.external_id.is_some()).count() {
            // A key repeated inside the batch resolves against its first use: decide.
            return Ok(None);
        }
        let at = now();
        let ids: Vec<Uuid> = batch.iter().map(|_| Uuid::now_v7()).collect();
        let mut rows: Vec<job::Model> = batch
            .iter()
            .zip(&ids)
            .map(|(new, id)| new_row(new, *id, at))
            .collect();
        rows.sort_by(|a, b| a.user_id.cmp(&b.user_id));
        let mut per_user: HashMap<&str, usize> = HashMap::new();
        for new in batch {
            *per_user.entry(new.user.as_str()).or_default() += 1;
        }
        let counts: Vec<String> = users
            .iter()
            .map(|u| per_user.get(u).copied().unwrap_or(0).to_string())
            .collect();

        let (mut sql, users_array) = begin_lock_read(users, &pairs)?;
        sql.push_str("; EXECUTE fairshare_intake_insert_if(");
        let doc: Vec<DocRow<'_>> = rows.iter().map(DocRow::from).collect();
        let doc = serde_json::to_string(&doc)
            .map_err(|e| Failed::Refused(DbErr::Custom(format!("a batch as JSON: {e}"))))?;
        literal(&mut sql, &doc).map_err(Failed::Refused)?;
        sql.push_str(", ");
        literal(&mut sql, &at.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string())
            .map_err(Failed::Refused)?;
        let _ = write!(
            sql,
            ", {users_array}, '{{{}}}'::bigint[], {default_max_queued}); COMMIT",
            counts.join(",")
        );

        let pool = db.get_postgres_connection_pool();
        let mut conn = pool
            .acquire()
            .await
            .map_err(|e| Failed::Refused(db_err(e)))?;
        let mut prepared = false;
        let answered = loop {
            match simple(&mut conn, &sql).await {
                Ok(read) => break read,
                Err(e) => {
                    if !prepared && unprepared(&e) {
                        // Nothing ran: prepare, and send it again.
                        prepared = true;
                        conn = prepare_after(conn, e).await?;
                        continue;
                    }
                    if connection_lost(&e) {
                        drop(conn.detach());
                        *in_doubt = Some((batch_first(&ids), created(&rows)));
                        return Err(Failed::Lost(db_err(e)));
                    }
                    abandon(conn, &e).await;
                    return Err(failed(e));
                }
            }
        };
        let (inserted, read): (Vec<PgRow>, Vec<PgRow>) = answered
            .into_iter()
            .partition(|row| row.try_column("inserted").is_ok());
        let inserted: i64 = match inserted.first() {
            Some(row) => row
                .try_get("inserted")
                .map_err(|e| Failed::Refused(db_err(e)))?,
            None => 0,
        };
        if inserted == 0 {
            return Ok(None);
        }
        // Committed: what decide makes of the same read, with the same ids, is what was
        // written (the guard is decide's own condition for creating every job).
        let stored = stored_of(read, default_max_queued).map_err(Failed::Refused)?;
        let mut next = ids.iter().copied();
        let (answers, decided) = decide(batch, stored, default_max_queued, at, || {
            next.next().unwrap_or_else(Uuid::now_v7)
        });
        let written: BTreeSet<Uuid> = rows.iter().map(|r| r.id).collect();
        let same = decided.len() == rows.len() && decided.iter().all(|d| written.contains(&d.id));
        #[cfg(feature = "fault-injection")]
        if let Some(name) = db_name(db) {
            if crate::faults::intake_commit_answer_lost(&name).await {
                let answers = if same { answers } else { created(&rows) };
                *in_doubt = Some((batch_first(&ids), answers));
                return Err(Failed::Lost(DbErr::Custom(
                    "fault injected: the answer to the commit was lost".into(),
                )));
            }
        }
        if !same {
            // The guard read the counts a statement later than decide's read: a job
            // that left or re-entered a queue in between (a dispatch, a requeue, which
            // take no user lock) can make them disagree. What was written stands (the
            // guard held the limit on the later count); positions are counted afresh.
            tracing::info!(
                written = rows.len(),
                decided = decided.len(),
                "a queue changed between intake's read and its guarded insert"
            );
            return Ok(Some(created(&rows)));
        }
        Ok(Some(answers))
    }

    /// Each row's answer as created, without its queue position (the API counts it).
    fn created(rows: &[job::Model]) -> Vec<Answered> {
        rows.iter()
            .map(|row| Answered {
                answer: Ok(Intake::Created(row.clone())),
                position: None,
            })
            .collect()
    }

    /// The id of a batch's first job as written (rows go in user order, but any of
    /// them tells whether the transaction committed): the smallest.
    fn batch_first(ids: &[Uuid]) -> Uuid {
        ids.iter().copied().min().unwrap_or_else(Uuid::nil)
    }

    /// One attempt at a batch (see [`commit`]). On a loss in round trip 2 it leaves
    /// the attempt's first job id and answers in `in_doubt`; when `in_doubt` holds an
    /// earlier attempt's, it settles that first.
    async fn attempt(
        db: &Db,
        batch: &[NewJob],
        users: &[&str],
        default_max_queued: u32,
        decide: &impl Fn(Stored) -> Decided,
        in_doubt: &mut Option<(Uuid, Vec<Answered>)>,
    ) -> Result<Vec<Answered>, Failed> {
        let (mut txn, stored) = read(db, batch, users, default_max_queued).await?;
        if let Some((id, _)) = in_doubt {
            let committed = txn.holds_job(*id).await?;
            let (_, answers) = in_doubt.take().expect("checked above");
            if committed {
                txn.roll_back().await;
                return Ok(answers);
            }
        }
        let (answers, rows, at) = decide(stored);
        match txn.insert_and_commit(&rows, at).await {
            Ok(()) => {}
            Err(Failed::Lost(e)) => {
                let Some(first) = rows.first() else {
                    // Nothing to commit: the answers (stored jobs, full queues) stand
                    // as read.
                    return Ok(answers);
                };
                *in_doubt = Some((first.id, answers));
                return Err(Failed::Lost(e));
            }
            Err(refused) => return Err(refused),
        }
        #[cfg(feature = "fault-injection")]
        if let (Some(first), Some(name)) = (rows.first(), db_name(db)) {
            if crate::faults::intake_commit_answer_lost(&name).await {
                *in_doubt = Some((first.id, answers));
                return Err(Failed::Lost(DbErr::Custom(
                    "fault injected: the answer to the commit was lost".into(),
                )));
            }
        }
        Ok(answers)
    }

    /// The database `db` connects to (the fault-injection hooks' key).
    #[cfg(feature = "fault-injection")]
    fn db_name(db: &Db) -> Option<String> {
        let options = db.get_postgres_connection_pool().connect_options();
        options.get_database().map(str::to_string)
    }

    /// Begins the batch's transaction with its users locked and reads their limits,
    /// counts and keys (round trip 1). Users that do not exist yet are created first,
    /// in a commit of their own (the transaction is rolled back, and begun again once
    /// they exist; at most twice, then the batch fails): inserting a user row inside
    /// the batch would take its lock out of id order. A user created so whose batch
    /// then fails stays, with the defaults, as `PUT /v1/users/{u}` with an empty body
    /// would leave it. A connection found lost (the pool does not ping a connection
    /// before handing it out, `store::connect_intake`) is [`Failed::Lost`]: nothing
    /// was written, and [`commit`] begins the batch again on another.
    ///
    /// `users`: the batch's users, each once, in byte order (the lock's order).
    async fn read(
        db: &Db,
        batch: &[NewJob],
        users: &[&str],
        default_max_queued: u32,
    ) -> Result<(Txn<Postgres>, Stored), Failed> {
        let pool = db.get_postgres_connection_pool();
        let pairs = key_pairs(batch);
        let (sql, _) = begin_lock_read(users, &pairs)?;

        let mut conn = pool
            .acquire()
            .await
            .map_err(|e| Failed::Refused(db_err(e)))?;
        let (mut created, mut prepared) = (0, false);
        loop {
            let rows = match simple(&mut conn, &sql).await {
                Ok(rows) => rows,
                Err(e) => {
                    // Prepare, once per connection.
                    if !prepared && unprepared(&e) {
                        prepared = true;
                        conn = prepare_after(conn, e).await?;
                        continue;
                    }
                    abandon(conn, &e).await;
                    return Err(failed(e));
                }
            };
            let stored = stored_of(rows, default_max_queued).map_err(Failed::Refused)?;
            if stored.limits.len() == users.len() {
                return Ok((Txn { conn: Some(conn) }, stored));
            }
            // Back to the pool while the users are created: that takes a connection
            // of the same pool, which may have no other.
            drop(rollback(conn).await);
            if created == 2 {
                return Err(Failed::Refused(DbErr::Custom(
                    "the batch's users could not be created".into(),
                )));
            }
            created += 1;
            let missing = users
                .iter()
                .copied()
                .filter(|u| !stored.limits.contains_key(*u));
            create_users(db, missing, now()).await.map_err(failed_db)?;
            conn = pool
                .acquire()
                .await
                .map_err(|e| Failed::Refused(db_err(e)))?;
            prepared = false;
        }
    }

    /// The rows of round trip 1: the lock's `(id, max_queued_jobs)` and the read's
    /// kinds `c` and `j`, all in text format (a simple query's results).
    fn stored_of(rows: Vec<PgRow>, default_max_queued: u32) -> Result<Stored, DbErr> {
        let mut stored = Stored::default();
        let mut found = Vec::new();
        for row in rows {
            if row.try_column("kind").is_err() {
                let id: String = row.try_get(0).map_err(db_err)?;
                let max: Option<i32> = row.try_get(1).map_err(db_err)?;
                stored.add_limit(id, max, default_max_queued);
                continue;
            }
            let row = QueryResult::from(row);
            let kind: String = row.try_get("", "kind")?;
            if kind == "c" {
                stored.add_count(
                    row.try_get("", "c_user")?,
                    row.try_get("", "c_priority")?,
                    row.try_get("", "c_queued")?,
                );
            } else {
                found.push(job::Model::from_query_result(&row, "")?);
            }
        }
        stored.add_known(found);
        Ok(stored)
    }

    /// A job of [`INSERT`]'s JSON document, borrowed from its row.
    #[derive(serde::Serialize)]
    struct DocRow<'a> {
        id: Uuid,
        user_id: &'a str,
        external_id: Option<&'a str>,
        priority: i32,
        entrypoint: &'a str,
        runtime_env: Option<&'a serde_json::Value>,
        metadata: Option<&'a serde_json::Value>,
        cpu: f64,
        gpu: f64,
        memory_bytes: i64,
        max_runtime_s: Option<i64>,
    }

    impl<'a> From<&'a job::Model> for DocRow<'a> {
        fn from(j: &'a job::Model) -> DocRow<'a> {
            DocRow {
                id: j.id,
                user_id: &j.user_id,
                external_id: j.external_id.as_deref(),
                priority: j.priority,
                entrypoint: &j.entrypoint,
                runtime_env: j.runtime_env.as_ref(),
                metadata: j.metadata.as_ref(),
                cpu: j.cpu,
                gpu: j.gpu,
                memory_bytes: j.memory_bytes,
                max_runtime_s: j.max_runtime_s,
            }
        }
    }

    impl Txn<Postgres> {
        /// Whether job `id` is stored, read inside the batch's transaction after its
        /// user locks (see [`commit`]).
        async fn holds_job(&mut self, id: Uuid) -> Result<bool, Failed> {
            let Some(conn) = self.conn.as_mut() else {
                return Err(Failed::Refused(DbErr::Custom(
                    "the batch's connection is gone".into(),
                )));
            };
            let sql = format!("SELECT 1 FROM jobs WHERE id = '{id}'");
            match simple(conn, &sql).await {
                Ok(rows) => Ok(!rows.is_empty()),
                Err(e) => {
                    if let Some(conn) = self.conn.take() {
                        abandon(conn, &e).await;
                    }
                    Err(failed(e))
                }
            }
        }

        /// Rolls the transaction back and hands its connection back to the pool.
        async fn roll_back(mut self) {
            if let Some(conn) = self.conn.take() {
                drop(rollback(conn).await);
            }
        }

        /// Inserts the jobs and their creation events (see [`INSERT`]) and commits
        /// (round trip 2). A refusal leaves nothing of the batch stored
        /// ([`Failed::Refused`]); a lost connection ([`Failed::Lost`]) leaves it in
        /// doubt, for [`commit`] to settle.
        async fn insert_and_commit(
            mut self,
            rows: &[job::Model],
            at: chrono::DateTime<chrono::Utc>,
        ) -> Result<(), Failed> {
            let at = at.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string();
            let mut sql = String::new();
            if !rows.is_empty() {
                let doc: Vec<DocRow<'_>> = rows.iter().map(DocRow::from).collect();
                let doc = serde_json::to_string(&doc)
                    .map_err(|e| Failed::Refused(DbErr::Custom(format!("a batch as JSON: {e}"))))?;
                sql.push_str("EXECUTE fairshare_intake_insert(");
                literal(&mut sql, &doc).map_err(Failed::Refused)?;
                sql.push_str(", ");
                literal(&mut sql, &at).map_err(Failed::Refused)?;
                sql.push_str("); ");
            }
            sql.push_str("COMMIT");
            let Some(mut conn) = self.conn.take() else {
                return Err(Failed::Refused(DbErr::Custom(
                    "the batch's connection is gone".into(),
                )));
            };
            match simple(&mut conn, &sql).await {
                Ok(_) => Ok(()),
                Err(e) => {
                    abandon(conn, &e).await;
                    Err(failed(e))
                }
            }
        }
    }
}

struct Pending {
    new: NewJob,
    reply: oneshot::Sender<Answered>,
}

/// The process's intake writer (see the module docs). Cheap to clone.
///
/// One per process. On PostgreSQL it keeps up to `database.intake_pipeline`
/// transactions in flight: it takes the next batch while earlier ones commit, so a
/// request waits for the round trips of its own batch, not for those of the batch
/// before it as well. Batches that share a user wait for each other at the user lock
/// (in the order they were taken), which keeps the queue limits and idempotency as
/// they are with one transaction at a time. Writers that own disjoint users (four, by
/// a hash of the user id, each one transaction at a time) were tried and measured
/// slower (BENCHMARKS.md, round 4).
#[derive(Clone)]
pub struct IntakeWriter {
    tx: mpsc::Sender<Pending>,
}

impl IntakeWriter {
    /// Starts the writer on a thread of its own (`intake-writer`, its own tokio
    /// runtime), so that a batch waits for no actor's work: on the service's main
    /// thread it shared its turns with the arbiter and the queues, and its p99 grew
    /// from 26 to 42 ms (BENCHMARKS.md, round 5). `default_max_queued` is
    /// `scheduler.default_max_queued_jobs`.
    ///
    /// SQLite: the writer uses `db`, the process's one connection (its I/O runs on
    /// sqlx's own thread). PostgreSQL: a pool of its own of `database.intake_pipeline`
    /// connections (capped at `max_connections − 1`, at least 1), opened lazily from
    /// the writer's runtime, whose reactor then drives them; that many batches are in
    /// flight at once.
    pub fn start(db: Db, settings: &DatabaseSettings, default_max_queued: u32) -> IntakeWriter {
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let postgres = db.get_database_backend() == DatabaseBackend::Postgres;
        let in_flight = if postgres {
            settings
                .intake_pipeline
                .min(settings.max_connections.saturating_sub(1))
                .max(1)
        } else {
            1
        };
        let own = DatabaseSettings {
            max_connections: in_flight,
            ..settings.clone()
        };
        let spawned = std::thread::Builder::new()
            .name("intake-writer".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        // Every submit then answers 503 (the writer has stopped).
                        tracing::error!(error = %e, "the intake writer cannot start its runtime");
                        return;
                    }
                };
                rt.block_on(async move {
                    let db = if postgres {
                        match super::connect_intake(&own).await {
                            Ok(own) => own,
                            Err(e) => {
                                tracing::warn!(error = %e, "the intake writer shares the service's pool: it could not open its own");
                                db
                            }
                        }
                    } else {
                        db
                    };
                    run(db, rx, default_max_queued, in_flight as usize).await
                })
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "the intake writer's thread did not start");
        }
        IntakeWriter { tx }
    }

    /// Submits one job; answers after the batch holding it committed. Errors as
    /// [`submit_job`]; [`StoreError::Db`] if the writer is gone (shutting down).
    pub async fn submit(&self, new: NewJob) -> Result<Intake, StoreError> {
        Ok(self.submit_positioned(new).await?.0)
    }

    /// [`IntakeWriter::submit`], with a created job's place in its user's queue as the
    /// commit left it (1 + its user's QUEUED jobs of a higher priority, or of the same
    /// and submitted before it); `None` for an existing job. Saves `POST /v1/jobs` a
    /// `COUNT(*)` of its own.
    pub async fn submit_positioned(
        &self,
        new: NewJob,
    ) -> Result<(Intake, Option<u64>), StoreError> {
        let (reply, answer) = oneshot::channel();
        let gone = || StoreError::Db(DbErr::Custom("the intake writer has stopped".into()));
        self.tx
            .send(Pending { new, reply })
            .await
            .map_err(|_| gone())?;
        let a = answer.await.map_err(|_| gone())?;
        Ok((a.answer?, a.position))
    }
}

async fn run(db: Db, mut rx: mpsc::Receiver<Pending>, default_max_queued: u32, in_flight: usize) {
    let mut batches = tokio::task::JoinSet::new();
    let mut pending = Vec::with_capacity(MAX_BATCH);
    // A batch tried in one round trip takes its submit time before its user locks;
    // it runs alone, so that no batch of this writer takes a lock it waits for and
    // commits a later submit time first (see `postgres::commit`, "One round trip").
    let mut alone = false;
    loop {
        while batches.len() >= in_flight || (alone && !batches.is_empty()) {
            batches.join_next().await;
        }
        // What is left of the last arrivals goes first; new ones are taken only once
        // it is gone, so jobs are committed in the order they arrived.
        if pending.is_empty() && rx.recv_many(&mut pending, MAX_BATCH).await == 0 {
            break;
        }
        let n = batch_len(pending.iter().map(|p| &p.new));
        let batch: Vec<Pending> = pending.drain(..n).collect();
        let db = db.clone();
        alone = batches.is_empty();
        let speculate = alone;
        batches.spawn(
            async move { commit_and_answer(&db, batch, default_max_queued, speculate).await },
        );
    }
    while batches.join_next().await.is_some() {}
}

/// Commits one batch and answers each of its requests.
async fn commit_and_answer(db: &Db, batch: Vec<Pending>, default_max_queued: u32, speculate: bool) {
    let (news, replies): (Vec<NewJob>, Vec<_>) =
        batch.into_iter().map(|p| (p.new, p.reply)).unzip();
    let size = news.len();
    let started = std::time::Instant::now();
    let answers = submit_batch_positioned(db, news, default_max_queued, speculate).await;
    let m = crate::metrics::get();
    m.intake_batch_size.observe(size as f64);
    m.intake_commit_seconds
        .observe(started.elapsed().as_secs_f64());
    for (reply, answer) in replies.into_iter().zip(answers) {
        // A client that went away no longer waits; its job is stored all the same.
        let _ = reply.send(answer);
    }
}
