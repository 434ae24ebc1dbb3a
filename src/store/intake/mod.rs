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
//!
//! Here: the submission ([`NewJob`]), the answer ([`Intake`]), the batch's bounds and
//! its commit on either database. Beside it: `decide` (what a batch answers and
//! inserts given what is stored: pure), `sqlite` and `postgres` (each database's
//! round trips), `writer` (the [`IntakeWriter`] and its batching).

use std::collections::BTreeSet;

use entity::{job, user};
use sea_orm::sea_query::OnConflict;
use sea_orm::{ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, SqlErr};
use uuid::Uuid;

use super::{now, Db, StoreError};
use crate::secrets::{SealError, Sealer};

mod decide;
mod postgres;
mod sqlite;
mod writer;

use decide::{decide, Stored};
pub use writer::IntakeWriter;

/// Most submissions committed in one transaction. Bounded so that one transaction
/// stays short (a few milliseconds) and within SQLite's 32,766 bound parameters per
/// statement once split into chunks of `intake::sqlite::ROWS_PER_STATEMENT`.
pub const MAX_BATCH: usize = 1024;

/// Most bytes of jobs ([`NewJob::approx_bytes`]) committed in one transaction, beyond
/// its first job. 1,024 submissions of 256 KiB `runtime_env`s made one batch of
/// 256 MiB: seconds to serialize and send while the batches beside it, holding
/// their locks, sat idle past `database.idle_in_transaction_timeout` (2 s) and
/// PostgreSQL ended their sessions (every one of their submissions answered 503).
/// Jobs of a few hundred bytes stay 1,024 to a batch.
pub const MAX_BATCH_BYTES: usize = 4 << 20;

/// A job as the API accepted it, before it has an id.
#[derive(Clone, Debug)]
pub struct NewJob {
    pub user: String,
    pub external_id: Option<String>,
    pub priority: i32,
    pub entrypoint: String,
    /// What is stored of Ray's runtime_env: sealed by [`NewJob::sealed`]
    /// (a JSON string) on the API's way in, or the JSON object as submitted.
    pub runtime_env: Option<serde_json::Value>,
    /// The digest of the runtime_env as submitted, to store ([`Sealer::digest`]: keyed
    /// under the newest key), set when it was sealed; `None`: the unkeyed
    /// [`migration::runtime_env_digest`] of `runtime_env`, which is then the plaintext.
    pub runtime_env_digest: Option<String>,
    /// Every digest a stored job with the same runtime_env may carry
    /// ([`Sealer::digests`]), set with `runtime_env_digest`; empty: only
    /// [`NewJob::runtime_env_digest`] matches.
    pub runtime_env_digests: Vec<String>,
    pub metadata: Option<serde_json::Value>,
    /// Cores.
    pub cpu: f64,
    /// GPUs.
    pub gpu: f64,
    /// Bytes.
    pub memory_bytes: i64,
    /// Custom resources by name (checked names, amounts > 0); empty for none.
    pub custom: std::collections::BTreeMap<String, f64>,
    /// Seconds.
    pub max_runtime_s: Option<i64>,
    /// Whether the job may be preempted, as given; `None`: its user's default
    /// (`users.preemptible`), resolved in the batch's transaction.
    pub preemptible: Option<bool>,
    /// The `[[pools]]` entry it must run in (issue 30), checked to exist; `None`: a
    /// Ray cluster of the policy's choosing.
    pub pool: Option<String>,
}

impl NewJob {
    /// The digest an idempotent resubmit is compared with (hex SHA-256 of the submitted
    /// runtime_env's canonical JSON, the empty object's when there is none).
    pub fn runtime_env_digest(&self) -> String {
        self.runtime_env_digest
            .clone()
            .unwrap_or_else(|| migration::runtime_env_digest(self.runtime_env.as_ref()))
    }

    /// The job with its runtime_env sealed by `sealer` on the API's way in, and the
    /// digest of what was submitted ([`Sealer::digest`], keyed when a key is
    /// configured) recorded for idempotent resubmits, with every digest a stored job
    /// with the same runtime_env may carry ([`Sealer::digests`]). Errors: the
    /// sealer's, when it cannot seal.
    pub fn sealed(mut self, sealer: &Sealer) -> Result<NewJob, SealError> {
        self.runtime_env_digests = sealer.digests(self.runtime_env.as_ref());
        self.runtime_env_digest = self.runtime_env_digests.first().cloned();
        if let Some(env) = &self.runtime_env {
            self.runtime_env = Some(sealer.seal(&self.user, env)?);
        }
        Ok(self)
    }

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
            + self.custom.keys().map(|k| k.len() + 28).sum::<usize>()
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
/// values: key order does not matter. The runtime_env is compared by digest
/// ([`Sealer::digests`]): the stored one may be sealed, or deleted once the job
/// ended. A job whose digest was keyed under a key no longer configured cannot be
/// compared: its runtime_env counts as different.
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
    let stored = stored_digest(j);
    let same_env = if new.runtime_env_digests.is_empty() {
        new.runtime_env_digest() == stored
    } else {
        new.runtime_env_digests.contains(&stored)
    };
    if !same_env {
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
    if new.custom != super::custom_of(j) {
        differs.push("resources.custom");
    }
    if new.pool != j.pool {
        differs.push("pool");
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
    // Absent means "the user's default", which may have changed since: it matches
    // whatever the stored job took.
    if new.preemptible.is_some_and(|p| p != j.preemptible) {
        differs.push("preemptible");
    }
    differs
}

/// The runtime_env digest of stored job `j`: its column, or for a row without one
/// (none written before migration 11 had a runtime_env left) its plaintext's.
fn stored_digest(j: &job::Model) -> String {
    match (&j.runtime_env_digest, &j.runtime_env) {
        (Some(d), _) => d.clone(),
        (None, Some(v)) if v.is_object() => migration::runtime_env_digest(Some(v)),
        (None, _) => migration::runtime_env_digest(None),
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
/// (`one_round_trip`, see `intake::postgres`): each answer with a created job's queue
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

/// Creates the users of `ids` that do not exist yet, with the defaults.
async fn create_users<'a, C: ConnectionTrait>(
    conn: &C,
    ids: impl Iterator<Item = &'a str>,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<(), DbErr> {
    user::Entity::insert_many(ids.map(|id| super::users::new_user(id, at)))
        .on_conflict(OnConflict::column(user::Column::Id).do_nothing().to_owned())
        .exec_without_returning(conn)
        .await?;
    Ok(())
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
