//! PostgreSQL's intake on one connection: sending a simple-query message, rolling
//! back, preparing the statements, and telling a refused statement from a lost
//! connection ([`Failed`]).

use std::fmt::Write as _;

use futures_util::future::BoxFuture;
use sea_orm::sqlx::{
    self, pool::PoolConnection, postgres::PgConnection, postgres::PgRow, Postgres, Row as _,
};
use sea_orm::DbErr;

use super::super::db_err;
use super::statements::PREPARED;

/// The SQLSTATE of a statement the server refused, its session going on; `None`
/// when the connection is gone: it failed, or the server ended the session (an
/// error of severity FATAL, as `pg_terminate_backend` and a shutdown send, read
/// at the connection's next use).
pub(super) fn sqlstate(e: &sqlx::Error) -> Option<String> {
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
pub(super) fn simple<'c>(
    conn: &'c mut PgConnection,
    sql: &'c str,
) -> BoxFuture<'c, Result<Vec<PgRow>, sqlx::Error>> {
    sqlx::Executor::fetch_all(conn, sql)
}

/// Rolls back `conn`'s transaction after the server refused a statement of it;
/// `None` (the connection closed) if that failed too.
pub(super) async fn rollback(
    mut conn: PoolConnection<Postgres>,
) -> Option<PoolConnection<Postgres>> {
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
pub(super) async fn abandon(conn: PoolConnection<Postgres>, e: &sqlx::Error) {
    if sqlstate(e).is_some() {
        rollback(conn).await;
    } else {
        drop(conn.detach());
    }
}

/// Prepares (again) the intake statements on `conn`, outside any transaction.
pub(super) async fn prepare(conn: &mut PoolConnection<Postgres>) -> Result<(), sqlx::Error> {
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
pub(super) fn unprepared(e: &sqlx::Error) -> bool {
    matches!(sqlstate(e).as_deref(), Some("26000" | "0A000"))
}

/// After [`unprepared`] `e`: rolls `conn`'s transaction back and prepares the
/// statements on it, ready for the message again.
pub(super) async fn prepare_after(
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
    /// doubt recorded for the next attempt to resolve ([`super::commit`]).
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
pub(super) fn connection_lost(e: &sqlx::Error) -> bool {
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
pub(super) fn failed(e: sqlx::Error) -> Failed {
    if connection_lost(&e) {
        Failed::Lost(db_err(e))
    } else {
        Failed::Refused(db_err(e))
    }
}

/// [`Failed`] of an error sea-orm returned (creating users).
pub(super) fn failed_db(e: DbErr) -> Failed {
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
