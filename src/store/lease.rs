//! The leadership lease's SQL (DESIGN §10): one row of `leases` naming the holder and
//! its fencing term, taken, renewed and released by the database's clock; and
//! [`notify`], the followers' word to the leader that a job or user changed.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseBackend, DbErr, Statement};

use super::{Db, FENCED};

pub(super) async fn check_fence<C: ConnectionTrait>(
    conn: &C,
    holder: &str,
    term: i64,
) -> Result<(), DbErr> {
    let backend = conn.get_database_backend();
    let lock = if backend == DatabaseBackend::Postgres {
        " FOR SHARE"
    } else {
        ""
    };
    let row = conn
        .query_one(Statement::from_string(
            backend,
            format!("SELECT holder, term FROM leases WHERE id = 1{lock}"),
        ))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("leases row 1".into()))?;
    let (h, t): (String, i64) = (row.try_get("", "holder")?, row.try_get("", "term")?);
    if h != holder || t != term {
        crate::metrics::get().fenced_writes.inc();
        return Err(DbErr::Custom(format!(
            "{FENCED}: replica {holder} no longer leads under term {term} (the lease names {h}, term {t})"
        )));
    }
    Ok(())
}

/// Whether `fence` still holds: always for [`super::Fence::Unfenced`]; for a term,
/// whether the lease still names its holder under it (a read, no lock). The
/// dispatcher asks before each retry of a submit, so that a deposed leader stops
/// POSTing (DESIGN §10). Errors: the database's.
pub async fn fence_holds(db: &Db, fence: &super::Fence) -> Result<bool, DbErr> {
    let super::Fence::Term { holder, term } = fence else {
        return Ok(true);
    };
    let backend = db.get_database_backend();
    let row = db
        .query_one(Statement::from_string(
            backend,
            "SELECT holder, term FROM leases WHERE id = 1".to_string(),
        ))
        .await?;
    Ok(match row {
        Some(row) => {
            let (h, t): (String, i64) = (row.try_get("", "holder")?, row.try_get("", "term")?);
            &h == holder && t == *term
        }
        None => false,
    })
}

/// The lease as the database sees it now (DESIGN §10).
#[derive(Clone, Debug)]
pub struct LeaseState {
    /// The leader's replica id (empty before anyone led).
    pub holder: String,
    pub term: i64,
    /// When the holder took the lease under this term.
    pub acquired_at: DateTime<Utc>,
    /// Whether the lease is unexpired by the database's clock.
    pub live: bool,
}

/// The PostgreSQL `LISTEN/NOTIFY` channel of job and user changes.
pub const NOTIFY_CHANNEL: &str = "fairshare_changes";

/// When [`lease_acquire`] may take a lease that has not lapsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reclaim {
    /// Only a lapsed lease.
    Never,
    /// Also one held under this replica's id, whatever its term (a process starting
    /// under the id of one that is gone, e.g. the same pod name).
    AnyTerm,
    /// Also this replica's own lease under this term (it stepped down on a database
    /// error and takes it back under a new term).
    Term(i64),
}

/// Takes the lease for `holder` when it has lapsed (or as `reclaim` allows): term + 1,
/// expiry `lease` from now by the database's clock. PostgreSQL only. Returns the new
/// term and when it was taken, or `None` when someone else holds it.
pub async fn lease_acquire(
    db: &Db,
    holder: &str,
    lease: Duration,
    reclaim: Reclaim,
) -> Result<Option<(i64, DateTime<Utc>)>, DbErr> {
    let (own, term) = match reclaim {
        Reclaim::Never => (false, 0),
        Reclaim::AnyTerm => (true, -1),
        Reclaim::Term(t) => (true, t),
    };
    let row = db
        .query_one(Statement::from_sql_and_values(
            DatabaseBackend::Postgres,
            "UPDATE leases SET holder = $1, term = term + 1, \
             expires_at = clock_timestamp() + make_interval(secs => $2), acquired_at = clock_timestamp() \
             WHERE id = 1 AND (expires_at < clock_timestamp() \
               OR ($3 AND holder = $1 AND ($4 < 0 OR term = $4))) \
             RETURNING term, acquired_at",
            [
                holder.into(),
                lease.as_secs_f64().into(),
                own.into(),
                term.into(),
            ],
        ))
        .await?;
    match row {
        None => Ok(None),
        Some(r) => Ok(Some((
            r.try_get("", "term")?,
            r.try_get("", "acquired_at")?,
        ))),
    }
}

/// Extends `holder`'s lease under `term` to `lease` from now. `Ok(false)`: the lease
/// is no longer ours (someone took over). PostgreSQL only.
pub async fn lease_renew(db: &Db, holder: &str, term: i64, lease: Duration) -> Result<bool, DbErr> {
    let res = db
        .execute(Statement::from_sql_and_values(
            DatabaseBackend::Postgres,
            "UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => $3) \
             WHERE id = 1 AND holder = $1 AND term = $2",
            [holder.into(), term.into(), lease.as_secs_f64().into()],
        ))
        .await?;
    Ok(res.rows_affected() == 1)
}

/// Lets `holder`'s lease under `term` lapse now, so a follower takes over at once
/// (graceful shutdown). PostgreSQL only.
pub async fn lease_release(db: &Db, holder: &str, term: i64) -> Result<(), DbErr> {
    db.execute(Statement::from_sql_and_values(
        DatabaseBackend::Postgres,
        "UPDATE leases SET expires_at = clock_timestamp() - interval '1 second' \
         WHERE id = 1 AND holder = $1 AND term = $2",
        [holder.into(), term.into()],
    ))
    .await?;
    Ok(())
}

/// The lease row now. PostgreSQL only.
pub async fn lease_state(db: &Db) -> Result<LeaseState, DbErr> {
    let r = db
        .query_one(Statement::from_string(
            DatabaseBackend::Postgres,
            "SELECT holder, term, acquired_at, expires_at > clock_timestamp() AS live FROM leases WHERE id = 1",
        ))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("leases row 1".into()))?;
    Ok(LeaseState {
        holder: r.try_get("", "holder")?,
        term: r.try_get("", "term")?,
        acquired_at: r.try_get("", "acquired_at")?,
        live: r.try_get("", "live")?,
    })
}

/// Tells the leader (through PostgreSQL `NOTIFY` on [`NOTIFY_CHANNEL`]) that a job or
/// user changed: `payload` is `job:<uuid>` or `user:<id>`. No-op on SQLite.
pub async fn notify(db: &Db, payload: &str) -> Result<(), DbErr> {
    if db.get_database_backend() != DatabaseBackend::Postgres {
        return Ok(());
    }
    db.execute(Statement::from_sql_and_values(
        DatabaseBackend::Postgres,
        "SELECT pg_notify($1, $2)",
        [NOTIFY_CHANNEL.into(), payload.into()],
    ))
    .await?;
    Ok(())
}
