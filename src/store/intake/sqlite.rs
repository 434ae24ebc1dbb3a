//! SQLite's intake: a batch takes two round trips to sqlx's SQLite thread, whatever its
//! size.
//!
//! 1. `BEGIN`, the read of the batch's users joined with their QUEUED jobs per
//!    priority (`queue_counts`, kept exact by triggers on `jobs`, migration
//!    m20261206_000007), and the look-up of its `(user, external_id)` pairs;
//! 2. the multi-row inserts of jobs and of their events, and `COMMIT`.
//!
//! Each is one query of several statements, which sqlx's SQLite driver runs one after
//! the other, taking the bound values in order. Through sea-orm the same batch was
//! seven hops to that thread and back (the pool's ping, `BEGIN`, the read, the
//! look-up, two inserts, `COMMIT`; ~65 µs each on the 2-core machine). The values are
//! bound with the types sea-orm binds (sea-query-binder adds each `Value` as its Rust
//! type to sqlx's arguments), so the encodings are the same: UUIDs as 16-byte blobs,
//! timestamps as sqlx's text, JSON as its text, doubles as REAL.
//!
//! SQLite has one writer, this one: nothing changes the users, counts and keys
//! between the read and the commit. Users the read did not find are created in a
//! commit of their own before the batch begins again, as on PostgreSQL.

use entity::job;
use futures_util::future::BoxFuture;
use sea_orm::sqlx::{
    self,
    pool::PoolConnection,
    query::Query,
    sqlite::{SqliteArguments, SqliteConnection, SqliteRow},
    Row as _, Sqlite,
};
use sea_orm::{DbErr, FromQueryResult, QueryResult};

use super::{create_users, db_err, decide::key_pairs, now, Db, NewJob, Stored, Txn};

/// Rows per multi-row `INSERT` on SQLite: 16 job parameters × 500 = 8,000, under
/// SQLite's limit of 32,766.
pub(super) const ROWS_PER_STATEMENT: usize = 500;

/// `(user, external_id)` pairs looked up per statement: an OR of this many terms stays
/// well under SQLite's expression depth of 1,000.
const PAIRS_PER_STATEMENT: usize = 200;

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
        "BEGIN; SELECT 'u' AS kind, u.id, u.max_queued_jobs, c.priority, c.queued, \
         u.preemptible \
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
            let preemptible: bool = row.try_get(5).map_err(db_err)?;
            stored.add_preemptible(&id, preemptible);
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
        const JOB_ROW: &str = "(?, ?, ?, 'QUEUED', ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)";
        let mut sql = String::new();
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            sql.push_str(
                "INSERT INTO jobs (id, user_id, external_id, status, priority, \
                 entrypoint, runtime_env, metadata, cpu, gpu, memory_bytes, \
                 max_runtime_s, submitted_at, attempt, runtime_env_digest, preemptible, \
                 custom_resources, pool) \
                 VALUES ",
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
                    .bind(j.submitted_at)
                    .bind(j.runtime_env_digest.as_deref())
                    .bind(j.preemptible)
                    .bind(j.custom_resources.as_deref())
                    .bind(j.pool.as_deref());
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
