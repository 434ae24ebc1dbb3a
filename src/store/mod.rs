//! Repository functions over SeaORM (DESIGN §6): the only place that writes SQL.
//!
//! Every status change goes through [`apply()`], which writes the job row and its
//! `job_events` row in one transaction, guarded by the status it read (optimistic
//! concurrency: the `UPDATE ... WHERE status = <read>` matches or the change is
//! refused), so two writers can never both move a job; with a [`Fence`] it also
//! refuses a leader whose lease term is stale (DESIGN §10). The lease itself
//! (`lease_*`) and the hand-over to the leader ([`notify`]) are here too.
//!
//! This file opens the database and holds what every part shares; the rest is in
//! `apply` (the status writer), `jobs` (reads of jobs), `users` (user rows, their
//! locks and usage), `intake` (the group commit of new jobs), `events` (`job_events`
//! as a feed, and the wake-up on commit), `lease` (the lease's SQL and `NOTIFY`), `groups` (the tree of groups and users'
//! membership), and
//! `ray_api` (what Ray's Jobs API needs beyond `/v1`), `sealed` (stored runtime_envs
//! brought to the configured keys at start), and `policy_rows` (a row as the policy
//! takes it, for the actors and the estimates alike), all re-exported here.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use migration::MigratorTrait;
use sea_orm::{ConnectOptions, DbErr};

use crate::config::DatabaseSettings;

mod apply;
mod estimates;
mod events;
mod groups;
mod intake;
mod jobs;
mod lease;
mod policy_rows;
mod ray_api;
mod sealed;
mod usage;
mod users;

pub use apply::{apply, apply_many, apply_with, is_fenced, Applied, Fence, Flush, FENCED};
pub use estimates::{estimates_computed_at, load_estimates, save_estimates, StoredEstimate};
pub use groups::{
    delete_group, get_group, join_group, list_groups, put_group, GroupError, GroupPatch, Joined,
};
pub use jobs::{
    custom_column, custom_of, get_job, job_events, jobs_with_ids, jobs_with_status, lapsed_leases,
    list_jobs, outstanding_with_stop, overdue_pool_preemptions, partial as job_row,
    pool_status_counts, queue_position, queued_page_sqlite, queued_per_user, status_counts,
    stream_queued, stream_queued_pages_sqlite, succeeded_since, waiting_and_outstanding, JobFilter,
};
pub use lease::{
    fence_holds, lease_acquire, lease_release, lease_renew, lease_state, notify, LeaseState,
    Reclaim, NOTIFY_CHANNEL,
};
pub use sealed::{seal_stored, Resealed};
pub use usage::{
    percentile, prune as prune_usage, record_actual, record_usage, report as usage_report,
    By as UsageBy, Deltas as UsageDeltas, Hold, Key as UsageKey, Rate as UsageRate,
    Step as UsageStep, Sums as UsageSums, UsageQuery, UsageRow, SIZE_KEY,
};
pub use users::{
    get_user, group_of, list_users, save_usages, upsert_user, users_updated_since, UserPatch,
    DEFAULT_WEIGHT, USAGE_ROWS_PER_STATEMENT,
};

pub(crate) use events::commits;
pub use events::{
    changes_after, changes_with_ids, count_events_after, events_after, init_webhook_cursors,
    last_event_id, set_webhook_cursor, webhook_cursor, Change, JobEvent,
};
pub use intake::{
    batch_len, payload_differences, submit_batch, submit_batch_with, submit_job, Intake,
    IntakeWriter, NewJob, MAX_BATCH, MAX_BATCH_BYTES,
};
pub use policy_rows::resources_of;
pub(crate) use policy_rows::{group_view, resource_cap, summary};

pub use ray_api::{
    delete_job, jobs_by_external_id, package_content, package_digest, package_digest_of,
    package_exists, put_package,
};

pub use sea_orm::DatabaseConnection as Db;

/// Errors of the repository layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed or could not be reached (retryable: 503).
    #[error("database error")]
    Db(#[from] DbErr),
    /// The user already has `limit` QUEUED jobs (429).
    #[error("user {user} already has {limit} queued jobs, its limit (max_queued_jobs); retry when some have started")]
    QueueFull { user: String, limit: u32 },
}

/// The current time, rounded to microseconds so that it reads back equal from both
/// databases (PostgreSQL keeps microseconds).
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// Opens the database. SQLite: one connection, WAL journal, 5 s busy timeout, foreign
/// keys on. PostgreSQL: a pool of `max_connections`, whose sessions the server ends
/// when idle inside a transaction for `idle_in_transaction_timeout`.
pub async fn connect(settings: &DatabaseSettings) -> Result<Db, DbErr> {
    sea_orm::Database::connect(options(settings, false)).await
}

/// The intake writer's PostgreSQL pool: [`connect`], opening no connection until one
/// is needed (and then from the tokio runtime that needs it, whose reactor drives
/// it), with `plan_cache_mode = force_generic_plan`. Intake's statements are written
/// to have one good plan whatever their arrays hold (store/intake/postgres/statements.rs); left to
/// choose, PostgreSQL planned them anew at every execution (0.1–0.2 ms of a one-job
/// batch's `bind`, as the statement log showed).
pub(super) async fn connect_intake(settings: &DatabaseSettings) -> Result<Db, DbErr> {
    let mut opts = options(settings, true);
    // No ping (a round trip) before each batch: a connection that has failed fails
    // the batch's first round trip, which writes nothing, and intake begins the
    // batch again on another (store/intake/postgres/, `commit`).
    opts.connect_lazy(true).test_before_acquire(false);
    sea_orm::Database::connect(opts).await
}

/// The `application_name` of the service's PostgreSQL sessions, unless the URL names
/// one; the intake writer's sessions add `-intake` (`fairshare-intake`).
pub const APPLICATION_NAME: &str = "fairshare";

/// Connection options of `settings`; `intake`: for the intake writer's pool (generic
/// plans, its own `application_name`).
fn options(settings: &DatabaseSettings, intake: bool) -> ConnectOptions {
    let mut opts = ConnectOptions::new(settings.url.clone());
    opts.sqlx_logging(false)
        .acquire_timeout(settings.acquire_timeout)
        .connect_timeout(Duration::from_secs(10));
    if settings.url.starts_with("sqlite:") {
        // One connection: SQLite serializes writers anyway, and a single connection
        // never sees SQLITE_BUSY ("database is locked") from itself.
        opts.max_connections(1).min_connections(1);
        // The connection is in this process (sqlx runs it on a thread of its own):
        // a ping before each use would only cost a round trip to that thread.
        opts.test_before_acquire(false);
        opts.map_sqlx_sqlite_opts(|o| {
            o.journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(5))
                .foreign_keys(true)
        });
    } else {
        opts.max_connections(settings.max_connections);
        let idle_ms = settings
            .idle_in_transaction_timeout
            .as_millis()
            .max(1)
            .to_string();
        opts.map_sqlx_postgres_opts(move |o| {
            let o = o.options([("idle_in_transaction_session_timeout", idle_ms.as_str())]);
            // Named in `pg_stat_activity`: the intake writer's sessions apart from the
            // rest (an `application_name` in the URL is kept, with `-intake` added).
            let name = o.get_application_name().unwrap_or(APPLICATION_NAME);
            if intake {
                let name = format!("{name}-intake");
                o.application_name(&name)
                    .options([("plan_cache_mode", "force_generic_plan")])
            } else {
                let name = name.to_string();
                o.application_name(&name)
            }
        });
    }
    opts
}

/// Runs pending migrations.
pub async fn migrate(db: &Db) -> Result<(), DbErr> {
    migration::Migrator::up(db, None).await
}

/// On SQLite, writes the WAL back into the database file and empties it
/// (`PRAGMA wal_checkpoint(TRUNCATE)`): after a clean stop
/// `fairshare.db` alone holds every table and job, and `fairshare.db-wal` is empty.
/// Waits (the connection's 5 s busy timeout) for a reader still in a transaction.
/// PostgreSQL: nothing to do. Errors: the database's, or SQLite's "busy" when the
/// checkpoint could not complete.
pub async fn checkpoint(db: &Db) -> Result<(), DbErr> {
    use sea_orm::ConnectionTrait;
    if db.get_database_backend() != sea_orm::DatabaseBackend::Sqlite {
        return Ok(());
    }
    // One row: (busy, WAL frames, frames checkpointed); busy = 1 when it could not
    // complete.
    let row = db
        .query_one(sea_orm::Statement::from_string(
            sea_orm::DatabaseBackend::Sqlite,
            "PRAGMA wal_checkpoint(TRUNCATE)",
        ))
        .await?;
    let busy: i32 = match &row {
        Some(r) => r.try_get_by_index(0)?,
        None => 0,
    };
    if busy != 0 {
        return Err(DbErr::Custom(
            "the WAL checkpoint did not complete: a reader held the database".into(),
        ));
    }
    Ok(())
}

/// Checks that the database answers.
pub async fn ping(db: &Db) -> Result<(), DbErr> {
    db.ping().await
}
