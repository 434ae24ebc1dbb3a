//! Repository functions over SeaORM (DESIGN §6): the only place that writes SQL.
//!
//! Every status change goes through [`apply`], which writes the job row and its
//! `job_events` row in one transaction, guarded by the status it read (optimistic
//! concurrency: the `UPDATE ... WHERE status = <read>` matches or the change is
//! refused), so two writers can never both move a job; with a [`Fence`] it also
//! refuses a leader whose lease term is stale (DESIGN §10). The lease itself
//! (`lease_*`) and the hand-over to the leader ([`notify`]) are here too.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use entity::{job, job_event, user, JobStatus};
use migration::MigratorTrait;
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectOptions, ConnectionTrait, DatabaseBackend,
    DbErr, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, Set, Statement,
    TransactionTrait,
};
use uuid::Uuid;

use crate::config::DatabaseSettings;
use crate::lifecycle;

mod events;
mod intake;
mod lease;
mod ray_api;

use lease::check_fence;
pub use lease::{
    lease_acquire, lease_release, lease_renew, lease_state, LeaseState, Reclaim, NOTIFY_CHANNEL,
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

pub use ray_api::{delete_job, jobs_by_external_id, package_content, package_exists, put_package};

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
/// to have one good plan whatever their arrays hold (store/intake.rs); left to
/// choose, PostgreSQL planned them anew at every execution (0.1–0.2 ms of a one-job
/// batch's `bind`, as the statement log showed).
pub(super) async fn connect_intake(settings: &DatabaseSettings) -> Result<Db, DbErr> {
    let mut opts = options(settings, true);
    // No ping (a round trip) before each batch: a connection that has failed fails
    // the batch's first round trip, which writes nothing, and intake begins the
    // batch again on another (store/intake.rs, `postgres::commit`).
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

/// Checks that the database answers.
pub async fn ping(db: &Db) -> Result<(), DbErr> {
    db.ping().await
}

pub(super) async fn insert_event<C: sea_orm::ConnectionTrait>(
    conn: &C,
    job_id: Uuid,
    from: Option<JobStatus>,
    to: JobStatus,
    at: DateTime<Utc>,
    detail: Option<String>,
) -> Result<(), DbErr> {
    job_event::Entity::insert(job_event::ActiveModel {
        job_id: Set(job_id),
        from_status: Set(from),
        to_status: Set(to),
        at: Set(at),
        detail: Set(detail),
        ..Default::default()
    })
    .exec_without_returning(conn)
    .await?;
    Ok(())
}

/// A new user's weight, and what `PUT /v1/users/{id}` with `"weight": null` restores.
pub const DEFAULT_WEIGHT: f64 = 1.0;

/// A user row with the defaults (weight 1, not paused, no limits, no usage).
pub(super) fn new_user(id: &str, at: DateTime<Utc>) -> user::ActiveModel {
    user::ActiveModel {
        id: Set(id.to_string()),
        weight: Set(DEFAULT_WEIGHT),
        paused: Set(false),
        max_running_jobs: Set(None),
        max_queued_jobs: Set(None),
        max_resources: Set(None),
        usage: Set(0.0),
        usage_at: Set(at),
        created_at: Set(at),
        updated_at: Set(at),
    }
}

pub(super) async fn ensure_user_in<C: sea_orm::ConnectionTrait>(
    conn: &C,
    id: &str,
    at: DateTime<Utc>,
) -> Result<(), DbErr> {
    user::Entity::insert(new_user(id, at))
        .on_conflict(OnConflict::column(user::Column::Id).do_nothing().to_owned())
        .exec_without_returning(conn)
        .await?;
    Ok(())
}

/// One job by id.
pub async fn get_job(db: &Db, id: Uuid) -> Result<Option<job::Model>, DbErr> {
    job::Entity::find_by_id(id).one(db).await
}

/// A job's transitions, oldest first.
pub async fn job_events(db: &Db, id: Uuid) -> Result<Vec<job_event::Model>, DbErr> {
    job_event::Entity::find()
        .filter(job_event::Column::JobId.eq(id))
        .order_by_asc(job_event::Column::Id)
        .all(db)
        .await
}

/// Filters and cursor of [`list_jobs`].
#[derive(Clone, Debug, Default)]
pub struct JobFilter {
    pub user: Option<String>,
    pub status: Option<JobStatus>,
    /// Only the job(s) with this idempotency key (one per user).
    pub external_id: Option<String>,
    /// Page size (the caller bounds it).
    pub limit: u64,
    /// The id of the last job of the previous page.
    pub after: Option<Uuid>,
}

/// A page of jobs, newest first by `(submitted_at, id)`. An `after` id that does not
/// exist yields an empty page.
pub async fn list_jobs(db: &Db, filter: &JobFilter) -> Result<Vec<job::Model>, DbErr> {
    let mut q = job::Entity::find();
    if let Some(u) = &filter.user {
        q = q.filter(job::Column::UserId.eq(u.as_str()));
    }
    if let Some(s) = filter.status {
        q = q.filter(job::Column::Status.eq(s));
    }
    if let Some(x) = &filter.external_id {
        q = q.filter(job::Column::ExternalId.eq(x.as_str()));
    }
    if let Some(after) = filter.after {
        let Some(cursor) = get_job(db, after).await? else {
            return Ok(Vec::new());
        };
        q = q.filter(
            Condition::any()
                .add(job::Column::SubmittedAt.lt(cursor.submitted_at))
                .add(
                    Condition::all()
                        .add(job::Column::SubmittedAt.eq(cursor.submitted_at))
                        .add(job::Column::Id.lt(cursor.id)),
                ),
        );
    }
    q.order_by_desc(job::Column::SubmittedAt)
        .order_by_desc(job::Column::Id)
        .limit(filter.limit)
        .all(db)
        .await
}

/// All jobs in any of `statuses`, oldest first (recovery, monitor bootstrap).
pub async fn jobs_with_status(db: &Db, statuses: &[JobStatus]) -> Result<Vec<job::Model>, DbErr> {
    job::Entity::find()
        .filter(job::Column::Status.is_in(statuses.iter().copied()))
        .order_by_asc(job::Column::SubmittedAt)
        .order_by_asc(job::Column::Id)
        .all(db)
        .await
}

/// The jobs among `ids` (any order; ids with no row are left out).
pub async fn jobs_with_ids(db: &Db, ids: &[Uuid]) -> Result<Vec<job::Model>, DbErr> {
    let mut out = Vec::with_capacity(ids.len());
    // Bounded IN lists: SQLite allows 32,766 parameters a statement.
    for chunk in ids.chunks(1000) {
        out.extend(
            job::Entity::find()
                .filter(job::Column::Id.is_in(chunk.iter().copied()))
                .all(db)
                .await?,
        );
    }
    Ok(out)
}

/// PENDING and RUNNING jobs with a stop asked for (`stop_reason` set), oldest first:
/// what the leader's catch-up follows (DESIGN §10). Reads the `status` index; the
/// outstanding jobs are bounded by the clusters' capacity.
pub async fn outstanding_with_stop(db: &Db) -> Result<Vec<job::Model>, DbErr> {
    job::Entity::find()
        .filter(job::Column::Status.is_in([JobStatus::Pending, JobStatus::Running]))
        .filter(job::Column::StopReason.is_not_null())
        .order_by_asc(job::Column::SubmittedAt)
        .order_by_asc(job::Column::Id)
        .all(db)
        .await
}

/// Every QUEUED job, streamed (one query over the `status` index), with only what
/// the queues need: id, user, priority, submit time, resources, runtime limit, and the
/// retiring attempt and its cluster. Entrypoint, runtime_env and metadata are left
/// empty (the dispatcher reads them when it submits). Holds a connection until
/// dropped.
pub async fn stream_queued(
    db: &Db,
) -> Result<impl futures_util::Stream<Item = Result<job::Model, DbErr>> + Send + '_, DbErr> {
    type Row = (
        Uuid,
        String,
        i32,
        DateTime<Utc>,
        f64,
        f64,
        i64,
        Option<i64>,
        i32,
        Option<i32>,
        Option<String>,
    );
    use futures_util::StreamExt;
    let rows = job::Entity::find()
        .select_only()
        .columns([
            job::Column::Id,
            job::Column::UserId,
            job::Column::Priority,
            job::Column::SubmittedAt,
            job::Column::Cpu,
            job::Column::Gpu,
            job::Column::MemoryBytes,
            job::Column::MaxRuntimeS,
            job::Column::Attempt,
            job::Column::RetiringAttempt,
            job::Column::Cluster,
        ])
        .filter(job::Column::Status.eq(JobStatus::Queued))
        .into_tuple::<Row>()
        .stream(db)
        .await?;
    Ok(rows.map(|r| {
        r.map(
            |(
                id,
                user_id,
                priority,
                submitted_at,
                cpu,
                gpu,
                memory_bytes,
                max_runtime_s,
                attempt,
                retiring_attempt,
                cluster,
            )| {
                job::Model {
                    id,
                    user_id,
                    external_id: None,
                    status: JobStatus::Queued,
                    priority,
                    entrypoint: String::new(),
                    runtime_env: None,
                    metadata: None,
                    cpu,
                    gpu,
                    memory_bytes,
                    cluster,
                    message: None,
                    max_runtime_s,
                    submitted_at,
                    dispatched_at: None,
                    started_at: None,
                    finished_at: None,
                    attempt,
                    retiring_attempt,
                    stop_reason: None,
                }
            },
        )
    }))
}

/// One page of QUEUED jobs on SQLite, for recovery: up to `limit` jobs whose rowid is
/// above `after`, as [`stream_queued`] gives them, and the last rowid of the page
/// (`None` when there are no more). Whatever `limit` is, the page is one row of one
/// query (the jobs packed as a JSON array by SQLite): sqlx hands a SQLite result to
/// the reader row by row between two threads, which at a million QUEUED jobs cost
/// most of the start-up time. Reals travel as `quote()` text, which reads back exactly.
///
/// Errors: the database's, or a value that does not decode.
pub async fn queued_page_sqlite(
    db: &Db,
    after: i64,
    limit: u32,
) -> Result<(Option<i64>, Vec<job::Model>), DbErr> {
    #[derive(serde::Deserialize)]
    struct Packed<'a>(
        #[serde(borrow)] std::borrow::Cow<'a, str>,
        #[serde(borrow)] std::borrow::Cow<'a, str>,
        i32,
        #[serde(borrow)] std::borrow::Cow<'a, str>,
        #[serde(borrow)] std::borrow::Cow<'a, str>,
        #[serde(borrow)] std::borrow::Cow<'a, str>,
        i64,
        Option<i64>,
        i32,
        Option<i32>,
        Option<String>,
    );
    // The page is the rows' JSON arrays joined as text: `json_group_array(json(j))`
    // parsed every row's text again (a tenth of start-up's CPU at 1,000,000 jobs).
    const SQL: &str = "SELECT max(r), '[' || group_concat(j, ',') || ']' FROM (\
        SELECT rowid AS r, json_array(\
          CASE typeof(id) WHEN 'blob' THEN hex(id) ELSE id END, user_id, priority, \
          submitted_at, quote(cpu), quote(gpu), memory_bytes, max_runtime_s, \
          attempt, retiring_attempt, cluster) AS j \
        FROM jobs WHERE status = ? AND rowid > ? ORDER BY rowid LIMIT ?)";
    let bad =
        |what: &str, e: &dyn std::fmt::Display| DbErr::Type(format!("queued page: {what}: {e}"));
    let status = sea_orm::ActiveEnum::to_value(&JobStatus::Queued);
    let row = db
        .query_one(sea_orm::Statement::from_sql_and_values(
            DatabaseBackend::Sqlite,
            SQL,
            [status.into(), after.into(), i64::from(limit).into()],
        ))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("queued page".into()))?;
    let last: Option<i64> = row.try_get_by_index(0)?;
    let Some(last) = last else {
        return Ok((None, Vec::new()));
    };
    let packed: String = row.try_get_by_index(1)?;
    let rows: Vec<Packed> = serde_json::from_str(&packed).map_err(|e| bad("json", &e))?;
    let real = |v: &str| v.parse::<f64>().map_err(|e| bad("real", &e));
    let mut jobs = Vec::with_capacity(rows.len());
    for Packed(
        id,
        user_id,
        priority,
        at,
        cpu,
        gpu,
        memory_bytes,
        max_runtime_s,
        attempt,
        retiring_attempt,
        cluster,
    ) in rows
    {
        jobs.push(job::Model {
            id: Uuid::parse_str(&id).map_err(|e| bad("id", &e))?,
            user_id: user_id.into_owned(),
            external_id: None,
            status: JobStatus::Queued,
            priority,
            entrypoint: String::new(),
            runtime_env: None,
            metadata: None,
            cpu: real(&cpu)?,
            gpu: real(&gpu)?,
            memory_bytes,
            cluster,
            message: None,
            max_runtime_s,
            submitted_at: sqlite_time(&at).ok_or_else(|| bad("submitted_at", &at))?,
            dispatched_at: None,
            started_at: None,
            finished_at: None,
            attempt,
            retiring_attempt,
            stop_reason: None,
        });
    }
    Ok((Some(last), jobs))
}

/// Every QUEUED job on SQLite as one stream, read in [`queued_page_sqlite`] pages of
/// `page` jobs (what recovery reads; [`stream_queued`] gives the same jobs row by row).
pub fn stream_queued_pages_sqlite(
    db: &Db,
    page: u32,
) -> impl futures_util::Stream<Item = Result<job::Model, DbErr>> + Send + '_ {
    use futures_util::{stream, TryStreamExt};
    stream::try_unfold(Some(i64::MIN), move |after| async move {
        let Some(after) = after else {
            return Ok::<_, DbErr>(None);
        };
        let (last, jobs) = queued_page_sqlite(db, after, page).await?;
        Ok(Some((
            stream::iter(jobs.into_iter().map(Ok::<_, DbErr>)),
            last,
        )))
    })
    .try_flatten()
}

/// A timestamp as SQLite stores it, read as sqlx reads it (RFC 3339 first, then
/// SQLite's other formats, without an offset meaning UTC).
fn sqlite_time(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    const FORMATS: [&str; 12] = [
        "%F %T%.f",
        "%F %R",
        "%F %RZ",
        "%F %R%:z",
        "%F %T%.fZ",
        "%F %T%.f%:z",
        "%FT%R",
        "%FT%RZ",
        "%FT%R%:z",
        "%FT%T%.f",
        "%FT%T%.fZ",
        "%FT%T%.f%:z",
    ];
    FORMATS.iter().find_map(|f| {
        DateTime::parse_from_str(text, f)
            .map(|t| t.with_timezone(&Utc))
            .ok()
            .or_else(|| {
                chrono::NaiveDateTime::parse_from_str(text, f)
                    .ok()
                    .map(|t| t.and_utc())
            })
    })
}

/// 1-based position of a QUEUED job in its user's queue (priority desc, then
/// submitted_at, then id).
pub async fn queue_position(db: &Db, j: &job::Model) -> Result<u64, DbErr> {
    let ahead = job::Entity::find()
        .filter(job::Column::UserId.eq(j.user_id.as_str()))
        .filter(job::Column::Status.eq(JobStatus::Queued))
        .filter(
            Condition::any()
                .add(job::Column::Priority.gt(j.priority))
                .add(
                    Condition::all()
                        .add(job::Column::Priority.eq(j.priority))
                        .add(
                            Condition::any()
                                .add(job::Column::SubmittedAt.lt(j.submitted_at))
                                .add(
                                    Condition::all()
                                        .add(job::Column::SubmittedAt.eq(j.submitted_at))
                                        .add(job::Column::Id.lt(j.id)),
                                ),
                        ),
                ),
        )
        .count(db)
        .await?;
    Ok(ahead + 1)
}

/// A job row's request as the policy counts it: cores, GPUs, bytes (the one place a
/// row's resources are converted; a negative byte count, which intake never stores,
/// counts as 0).
pub fn resources_of(j: &job::Model) -> crate::policy::Resources {
    crate::policy::Resources::new(j.cpu, j.gpu, j.memory_bytes.max(0) as f64)
}

/// What [`apply`] did.
#[derive(Clone, Debug)]
pub enum Applied {
    /// The step was written (status update and `job_events` row, one transaction);
    /// the job as it is now, and the step for its Ray call and metric.
    Changed {
        job: job::Model,
        step: lifecycle::Step,
    },
    /// The lifecycle ignored the event for this job (nothing written).
    Unchanged(job::Model),
    /// The lifecycle refused the event (nothing written).
    Refused(job::Model, lifecycle::Refusal),
    /// No such job.
    NotFound,
}

impl Applied {
    /// The job after the step, when one was written.
    pub fn changed(self) -> Option<job::Model> {
        match self {
            Applied::Changed { job, .. } => Some(job),
            _ => None,
        }
    }
}

/// Who writes through [`apply`] (DESIGN §10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fence {
    /// Writes any replica may make (the API's: cancel, and everything on SQLite, which
    /// runs one replica).
    Unfenced,
    /// The leader's writes: refused unless `leases` still names `holder` under `term`.
    Term {
        /// The replica id.
        holder: String,
        /// The fencing term it leads under.
        term: i64,
    },
}

/// The prefix of the error [`apply`] returns when its fence no longer holds.
pub const FENCED: &str = "fenced";

/// Whether `e` is [`apply`]'s refusal of a stale leader's write.
pub fn is_fenced(e: &DbErr) -> bool {
    matches!(e, DbErr::Custom(m) if m.starts_with(FENCED))
}

/// The only writer of job status (DESIGN §3): reads job `id` (locked on PostgreSQL),
/// asks [`lifecycle::decide`] what `event` means for it, and writes the decided step —
/// the guarded status update (`WHERE status = <read> AND attempt = <read>`) and its
/// `job_events` row — in one transaction, then counts the step's metric.
///
/// Deciding on the row read inside the transaction means two writers (say a cancel
/// and a dispatch) can never both act on a stale status. With [`Fence::Term`] the
/// transaction first reads the lease row `FOR SHARE` (so no takeover commits while it
/// runs) and writes nothing unless that row still names the fence's holder and term
/// (DESIGN §10): a leader that lost its lease cannot move a job.
///
/// Errors: the database's; a stale fence is `DbErr::Custom("fenced: ...")`
/// ([`is_fenced`]).
pub async fn apply(
    db: &Db,
    fence: &Fence,
    id: Uuid,
    event: &lifecycle::Event,
) -> Result<Applied, DbErr> {
    let txn = db.begin().await?;
    if let Fence::Term { holder, term } = fence {
        check_fence(&txn, holder, *term).await?;
    }
    let (applied, metric) = apply_in(&txn, id, event).await?;
    txn.commit().await?;
    events::committed();
    count_step(metric);
    Ok(applied)
}

/// [`apply`] for several jobs in **one** transaction (one commit, one fsync): what the
/// dispatcher writes for the grants of one cycle (issue 11: the next job's POST to Ray
/// waits for one commit, not for one per job granted before it). Each `(id, event)`
/// is decided and written exactly as [`apply`] would; rows are visited in id order,
/// on PostgreSQL by user first (it locks them in that order, and the `queue_counts`
/// rows of their users, which intake locks in user order: no deadlock), and the
/// results come back in input order. Errors: as [`apply`], for the whole batch —
/// nothing is written then.
pub async fn apply_many(
    db: &Db,
    fence: &Fence,
    steps: &[(Uuid, lifecycle::Event)],
) -> Result<Vec<Applied>, DbErr> {
    if steps.is_empty() {
        return Ok(Vec::new());
    }
    let txn = db.begin().await?;
    if let Fence::Term { holder, term } = fence {
        check_fence(&txn, holder, *term).await?;
    }
    let mut order: Vec<usize> = (0..steps.len()).collect();
    order.sort_by_key(|&i| steps[i].0);
    if txn.get_database_backend() == DatabaseBackend::Postgres {
        // By user, then id: a step that moves a job into or out of QUEUED locks its
        // user's `queue_counts` row, and intake locks those rows in user order too, so
        // the two cannot deadlock.
        let users: HashMap<Uuid, String> = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .column(job::Column::UserId)
            .filter(job::Column::Id.is_in(steps.iter().map(|(id, _)| *id)))
            .into_tuple::<(Uuid, String)>()
            .all(&txn)
            .await?
            .into_iter()
            .collect();
        order.sort_by(|&a, &b| {
            (users.get(&steps[a].0), steps[a].0).cmp(&(users.get(&steps[b].0), steps[b].0))
        });
    }
    let mut results: Vec<Option<(Applied, Option<StepMetric>)>> =
        (0..steps.len()).map(|_| None).collect();
    for i in order {
        let (id, event) = &steps[i];
        results[i] = Some(apply_in(&txn, *id, event).await?);
    }
    txn.commit().await?;
    events::committed();
    Ok(results
        .into_iter()
        .flatten()
        .map(|(applied, metric)| {
            count_step(metric);
            applied
        })
        .collect())
}

/// A written step's metric and the cluster to label it with, counted once its
/// transaction commits.
type StepMetric = (lifecycle::Metric, Option<String>);

/// Counts a committed step's metric.
fn count_step(metric: Option<StepMetric>) {
    if let Some((m, cluster)) = metric {
        crate::metrics::count(m, cluster.as_deref());
    }
}

/// One [`apply`] step inside `txn`: the decision and the guarded write, not the
/// commit. Returns what was applied and, for a written step, the metric to count once
/// the transaction commits.
async fn apply_in(
    txn: &sea_orm::DatabaseTransaction,
    id: Uuid,
    event: &lifecycle::Event,
) -> Result<(Applied, Option<StepMetric>), DbErr> {
    let at = now();
    let mut q = job::Entity::find_by_id(id);
    if txn.get_database_backend() == DatabaseBackend::Postgres {
        q = q.lock_exclusive();
    }
    let Some(current) = q.one(txn).await? else {
        return Ok((Applied::NotFound, None));
    };
    let facts = lifecycle::JobFacts::of(&current);
    let step = match lifecycle::decide(id, &facts, event) {
        lifecycle::Decision::Step(step) => step,
        lifecycle::Decision::Ignore => return Ok((Applied::Unchanged(current), None)),
        lifecycle::Decision::Refuse(r) => return Ok((Applied::Refused(current, r), None)),
    };
    let c = &step.changes;
    let mut update = job::Entity::update_many()
        .col_expr(job::Column::Status, Expr::value(step.to))
        .filter(job::Column::Id.eq(id))
        .filter(job::Column::Status.eq(current.status))
        .filter(job::Column::Attempt.eq(current.attempt));
    if let Some(cluster) = &c.cluster {
        update = update.col_expr(job::Column::Cluster, Expr::value(cluster.clone()));
    }
    if let Some(m) = &c.message {
        update = update.col_expr(job::Column::Message, Expr::value(m.clone()));
    }
    match c.dispatched_now {
        Some(true) => update = update.col_expr(job::Column::DispatchedAt, Expr::value(at)),
        Some(false) => {
            update = update.col_expr(
                job::Column::DispatchedAt,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
        }
        None => {}
    }
    let started = current
        .started_at
        .or(c.started_at)
        .or((step.to == JobStatus::Running).then_some(at));
    if started != current.started_at {
        update = update.col_expr(job::Column::StartedAt, Expr::value(started));
    }
    let finished = c.finished_at.or(step.to.is_terminal().then_some(at));
    if let Some(t) = finished {
        update = update.col_expr(job::Column::FinishedAt, Expr::value(t));
    }
    if let Some(a) = c.attempt {
        update = update.col_expr(job::Column::Attempt, Expr::value(a as i32));
    }
    if let Some(r) = c.retiring_attempt {
        update = update.col_expr(
            job::Column::RetiringAttempt,
            Expr::value(r.map(|a| a as i32)),
        );
    }
    if let Some(r) = &c.stop_reason {
        update = update.col_expr(job::Column::StopReason, Expr::value(r.clone()));
    }
    let res = update.exec(txn).await?;
    if res.rows_affected != 1 {
        return Ok((Applied::Unchanged(current), None));
    }
    insert_event(
        txn,
        id,
        Some(current.status),
        step.to,
        at,
        Some(step.detail.clone()),
    )
    .await?;
    let job = job::Entity::find_by_id(id)
        .one(txn)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound(id.to_string()))?;
    // Requeued steps clear the cluster: label with the one it was on.
    let metric = step
        .metric
        .map(|m| (m, current.cluster.clone().or_else(|| job.cluster.clone())));
    Ok((Applied::Changed { job, step }, metric))
}

/// One user by id.
pub async fn get_user(db: &Db, id: &str) -> Result<Option<user::Model>, DbErr> {
    user::Entity::find_by_id(id.to_string()).one(db).await
}

/// All users, by id.
pub async fn list_users(db: &Db) -> Result<Vec<user::Model>, DbErr> {
    user::Entity::find()
        .order_by_asc(user::Column::Id)
        .all(db)
        .await
}

/// Changes to a user's settings; `None` leaves a field as it is, `Some(None)` clears a
/// limit back to the default.
#[derive(Clone, Debug, Default)]
pub struct UserPatch {
    pub weight: Option<f64>,
    pub max_running_jobs: Option<Option<i32>>,
    pub max_queued_jobs: Option<Option<i32>>,
    pub max_resources: Option<Option<serde_json::Value>>,
    pub paused: Option<bool>,
}

/// Applies `patch` to user `id`, creating the user with defaults first if it is new.
/// Returns the user as stored.
pub async fn upsert_user(db: &Db, id: &str, patch: UserPatch) -> Result<user::Model, DbErr> {
    let at = now();
    let txn = db.begin().await?;
    ensure_user_in(&txn, id, at).await?;
    let mut am = user::ActiveModel {
        id: sea_orm::Unchanged(id.to_string()),
        updated_at: Set(at),
        ..Default::default()
    };
    if let Some(w) = patch.weight {
        am.weight = Set(w);
    }
    if let Some(v) = patch.max_running_jobs {
        am.max_running_jobs = Set(v);
    }
    if let Some(v) = patch.max_queued_jobs {
        am.max_queued_jobs = Set(v);
    }
    if let Some(v) = patch.max_resources {
        am.max_resources = Set(v);
    }
    if let Some(p) = patch.paused {
        am.paused = Set(p);
    }
    let model = am.update(&txn).await?;
    txn.commit().await?;
    Ok(model)
}

/// The `i`-th (from 1) bound parameter of a raw statement: `$i` on PostgreSQL, `?` on
/// SQLite.
pub(super) fn placeholder(backend: DatabaseBackend, i: usize) -> String {
    match backend {
        DatabaseBackend::Postgres => format!("${i}"),
        _ => "?".to_string(),
    }
}

/// [`lock_users`]' statement: `$1` the ids, each once, in byte order; rows
/// `(id, max_queued_jobs)` of those that exist, in that order. Intake prepares it
/// too (store/intake.rs).
pub(super) const LOCK_USERS: &str = "SELECT u.id, u.max_queued_jobs \
     FROM unnest($1::text[]) WITH ORDINALITY AS k(id, n) \
     CROSS JOIN LATERAL (SELECT id, max_queued_jobs FROM users \
       WHERE users.id = k.id FOR UPDATE) u \
     ORDER BY k.n";

/// Locks the `users` rows of `ids` (PostgreSQL, `SELECT … FOR UPDATE`) one at a time
/// in byte order of the id, so that two transactions locking users (intake, the usage
/// save, another replica's) never deadlock, and returns `(id, max_queued_jobs)` of
/// those that exist, in that order.
///
/// One statement whatever the number of ids (an array), whose plan probes the primary
/// key once per id: the lateral subquery with its `FOR UPDATE` is not flattened into
/// a join, which the planner, on tables it has no statistics of, ran as a sequential
/// scan comparing every row with every id (0.7 ms for 32 ids of 1,000 users).
pub(super) async fn lock_users<'a>(
    txn: &sea_orm::DatabaseTransaction,
    ids: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<(String, Option<i32>)>, DbErr> {
    let mut ids: Vec<String> = ids.into_iter().map(str::to_string).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut locked = Vec::with_capacity(ids.len());
    for row in txn
        .query_all(sea_orm::Statement::from_sql_and_values(
            DatabaseBackend::Postgres,
            LOCK_USERS,
            [sea_orm::Value::from(ids)],
        ))
        .await?
    {
        locked.push((row.try_get_by_index(0)?, row.try_get_by_index(1)?));
    }
    Ok(locked)
}

/// Writes the decayed usage (and its time) of many users: one transaction per
/// [`USAGE_ROWS_PER_STATEMENT`] users, one `UPDATE … FROM (VALUES …)` each, instead of a
/// commit (and an fsync) per user. On PostgreSQL the rows are locked in id order
/// first, as intake locks them, so the two cannot deadlock. Users with no row are
/// skipped.
pub async fn save_usages(db: &Db, rows: &[(String, f64, DateTime<Utc>)]) -> Result<(), DbErr> {
    let backend = db.get_database_backend();
    let mut sorted: Vec<&(String, f64, DateTime<Utc>)> = rows.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let param = |i: usize| placeholder(backend, i);
    for chunk in sorted.chunks(USAGE_ROWS_PER_STATEMENT) {
        let txn = db.begin().await?;
        if backend == DatabaseBackend::Postgres {
            lock_users(&txn, chunk.iter().map(|r| r.0.as_str())).await?;
        }
        let mut values = Vec::with_capacity(chunk.len() * 3);
        let tuples: Vec<String> = chunk
            .iter()
            .enumerate()
            .map(|(i, (id, usage, at))| {
                values.push(sea_orm::Value::from(id.as_str()));
                values.push(sea_orm::Value::from(*usage));
                values.push(sea_orm::Value::from(*at));
                format!(
                    "({}, {}, {})",
                    param(3 * i + 1),
                    param(3 * i + 2),
                    param(3 * i + 3)
                )
            })
            .collect();
        let sql = format!(
            "UPDATE users SET usage = v.column2, usage_at = v.column3 \
             FROM (VALUES {}) AS v WHERE users.id = v.column1",
            tuples.join(", ")
        );
        txn.execute(sea_orm::Statement::from_sql_and_values(
            backend, sql, values,
        ))
        .await?;
        txn.commit().await?;
    }
    Ok(())
}

/// Users per statement of [`save_usages`]: 3 parameters each, well under SQLite's
/// 32,766.
pub const USAGE_ROWS_PER_STATEMENT: usize = 1000;

/// Number of unfinished jobs per `(user, status)`, of one user or of all: the users
/// API's counts while the arbiter is still loading the queues.
pub async fn status_counts(
    db: &Db,
    user: Option<&str>,
) -> Result<Vec<(String, JobStatus, i64)>, DbErr> {
    let mut q = job::Entity::find()
        .select_only()
        .column(job::Column::UserId)
        .column(job::Column::Status)
        .column_as(job::Column::Id.count(), "n")
        .filter(job::Column::Status.is_not_in([
            JobStatus::Succeeded,
            JobStatus::Failed,
            JobStatus::Stopped,
        ]));
    if let Some(u) = user {
        q = q.filter(job::Column::UserId.eq(u));
    }
    q.group_by(job::Column::UserId)
        .group_by(job::Column::Status)
        .into_tuple::<(String, JobStatus, i64)>()
        .all(db)
        .await
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

/// Users whose settings changed after `since` (the leader's catch-up).
pub async fn users_updated_since(db: &Db, since: DateTime<Utc>) -> Result<Vec<user::Model>, DbErr> {
    user::Entity::find()
        .filter(user::Column::UpdatedAt.gt(since))
        .all(db)
        .await
}
