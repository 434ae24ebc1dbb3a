//! `job_estimates` (DESIGN §2 "Estimates", §6): the leader's last forward run, which
//! followers read. The leader replaces the whole table in one transaction per
//! refresh ([`save_estimates`], fenced like its other writes); followers read the
//! run's instant ([`estimates_computed_at`]) and, when it moved, every row
//! ([`load_estimates`]).

use sea_orm::{ConnectionTrait, DatabaseBackend, DbErr, Statement, TransactionTrait, Value};
use uuid::Uuid;

use super::lease::check_fence;
use super::{Db, Fence};

/// One stored estimate: the job, its estimated start (Unix microseconds), its
/// 1-based position and its basis (`max_runtime`, `learned`, `default`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredEstimate {
    /// The QUEUED job.
    pub job_id: Uuid,
    /// Its estimated start, Unix microseconds.
    pub start_us: i64,
    /// Its 1-based position among the jobs that could use the same capacity.
    pub position: i64,
    /// Where its expected run time comes from.
    pub basis: String,
    /// The run stopped early: the jobs it did not reach start no sooner than this,
    /// Unix microseconds (the same in every row of a run).
    pub not_before_us: Option<i64>,
}

/// Rows per `INSERT` (6 parameters each: 60,000 of PostgreSQL's 65,535).
const ROWS_PER_STATEMENT: usize = 10_000;

fn placeholder(backend: DatabaseBackend, i: usize) -> String {
    match backend {
        DatabaseBackend::Postgres => format!("${i}"),
        _ => "?".to_string(),
    }
}

/// Replaces every row of `job_estimates` with `rows`, all of the run whose state was
/// taken at `computed_us` (Unix microseconds), in one transaction; with
/// [`Fence::Term`] only while the lease still names the writer.
pub async fn save_estimates(
    db: &Db,
    fence: &Fence,
    computed_us: i64,
    rows: &[StoredEstimate],
) -> Result<(), DbErr> {
    let txn = db.begin().await?;
    if let Fence::Term { holder, term } = fence {
        check_fence(&txn, holder, *term).await?;
    }
    let backend = txn.get_database_backend();
    txn.execute_unprepared("DELETE FROM job_estimates").await?;
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let mut sql = String::from(
            "INSERT INTO job_estimates (job_id, start_us, position, basis, computed_us, \
             not_before_us) VALUES ",
        );
        let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * 6);
        for (k, r) in chunk.iter().enumerate() {
            if k > 0 {
                sql.push_str(", ");
            }
            let base = k * 6;
            sql.push('(');
            for c in 1..=6 {
                if c > 1 {
                    sql.push_str(", ");
                }
                sql.push_str(&placeholder(backend, base + c));
            }
            sql.push(')');
            values.push(r.job_id.into());
            values.push(r.start_us.into());
            values.push(r.position.into());
            values.push(r.basis.clone().into());
            values.push(computed_us.into());
            values.push(r.not_before_us.into());
        }
        txn.execute(Statement::from_sql_and_values(backend, sql, values))
            .await?;
    }
    txn.commit().await
}

/// The instant of the run `job_estimates` holds (Unix microseconds); `None` when it
/// holds nothing.
pub async fn estimates_computed_at(db: &Db) -> Result<Option<i64>, DbErr> {
    let backend = db.get_database_backend();
    let row = db
        .query_one(Statement::from_string(
            backend,
            "SELECT MAX(computed_us) AS at FROM job_estimates",
        ))
        .await?;
    match row {
        Some(r) => r.try_get::<Option<i64>>("", "at"),
        None => Ok(None),
    }
}

/// Every row of `job_estimates`.
pub async fn load_estimates(db: &Db) -> Result<Vec<StoredEstimate>, DbErr> {
    let backend = db.get_database_backend();
    let rows = db
        .query_all(Statement::from_string(
            backend,
            "SELECT job_id, start_us, position, basis, not_before_us FROM job_estimates",
        ))
        .await?;
    rows.into_iter()
        .map(|r| {
            Ok(StoredEstimate {
                job_id: r.try_get("", "job_id")?,
                start_us: r.try_get("", "start_us")?,
                position: r.try_get("", "position")?,
                basis: r.try_get("", "basis")?,
                not_before_us: r.try_get("", "not_before_us")?,
            })
        })
        .collect()
}
