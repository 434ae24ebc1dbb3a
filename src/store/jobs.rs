//! Reads of jobs: one job and its events, the filtered list, the QUEUED jobs that
//! recovery streams (row by row, or on SQLite in packed pages), a job's queue
//! position, the unfinished jobs per user and status, and a row's custom resources
//! ([`custom_of`]).

use chrono::{DateTime, Utc};
use entity::{job, job_event, JobStatus};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect,
};
use uuid::Uuid;

use super::Db;

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
    /// Only the jobs that must run in this pool.
    pub pool: Option<String>,
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
    if let Some(p) = &filter.pool {
        q = q.filter(job::Column::Pool.eq(p.as_str()));
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
        // A pool job's stop is its runner's (issue 30): never asked of Ray.
        .filter(job::Column::Pool.is_null())
        .order_by_asc(job::Column::SubmittedAt)
        .order_by_asc(job::Column::Id)
        .all(db)
        .await
}

/// The ADMITTED or RUNNING pool jobs whose runner's lease ended before `now`, oldest
/// lease first (the leader's lease check, `[admission]`).
pub async fn lapsed_leases(db: &Db, now: DateTime<Utc>) -> Result<Vec<Uuid>, DbErr> {
    job::Entity::find()
        .select_only()
        .column(job::Column::Id)
        .filter(job::Column::Status.is_in([JobStatus::Admitted, JobStatus::Running]))
        .filter(job::Column::Pool.is_not_null())
        .filter(job::Column::LeaseExpiresAt.lt(now))
        .order_by_asc(job::Column::LeaseExpiresAt)
        .into_tuple::<Uuid>()
        .all(db)
        .await
}

/// Pool jobs (ADMITTED or RUNNING) whose preemption's stop was asked before `before`
/// (the lifecycle ignores one cancelled since): their runner has let
/// `preemption.grace` pass (DESIGN §3, "Admission").
pub async fn overdue_pool_preemptions(db: &Db, before: DateTime<Utc>) -> Result<Vec<Uuid>, DbErr> {
    job::Entity::find()
        .select_only()
        .column(job::Column::Id)
        .filter(job::Column::Status.is_in([JobStatus::Admitted, JobStatus::Running]))
        .filter(job::Column::Pool.is_not_null())
        .filter(job::Column::PreemptedAt.lt(before))
        .order_by_asc(job::Column::PreemptedAt)
        .into_tuple::<Uuid>()
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
    #[derive(sea_orm::FromQueryResult)]
    struct Row {
        id: Uuid,
        user_id: String,
        priority: i32,
        submitted_at: DateTime<Utc>,
        cpu: f64,
        gpu: f64,
        memory_bytes: i64,
        max_runtime_s: Option<i64>,
        attempt: i32,
        retiring_attempt: Option<i32>,
        cluster: Option<String>,
        preemptible: bool,
        preemptions: i32,
        custom_resources: Option<String>,
        pool: Option<String>,
    }
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
            job::Column::Preemptible,
            job::Column::Preemptions,
            job::Column::CustomResources,
            job::Column::Pool,
        ])
        .filter(job::Column::Status.eq(JobStatus::Queued))
        .into_model::<Row>()
        .stream(db)
        .await?;
    Ok(rows.map(|r| {
        r.map(|r| job::Model {
            priority: r.priority,
            cpu: r.cpu,
            gpu: r.gpu,
            memory_bytes: r.memory_bytes,
            cluster: r.cluster,
            max_runtime_s: r.max_runtime_s,
            attempt: r.attempt,
            retiring_attempt: r.retiring_attempt,
            preemptible: r.preemptible,
            preemptions: r.preemptions,
            custom_resources: r.custom_resources,
            pool: r.pool,
            ..partial(r.id, r.user_id, JobStatus::Queued, r.submitted_at)
        })
    }))
}

/// A job row with `id`, `user_id`, `status` and `submitted_at` as given and every other
/// column empty (`None`, 0, `""`, `false`): the base of a row read in part (recovery,
/// the estimates) or built by hand (benches, tests), whose caller fills in the columns
/// it has with struct-update syntax.
#[must_use]
pub fn partial(
    id: Uuid,
    user_id: String,
    status: JobStatus,
    submitted_at: DateTime<Utc>,
) -> job::Model {
    job::Model {
        id,
        user_id,
        external_id: None,
        status,
        priority: 0,
        entrypoint: String::new(),
        runtime_env: None,
        metadata: None,
        cpu: 0.0,
        gpu: 0.0,
        memory_bytes: 0,
        cluster: None,
        message: None,
        max_runtime_s: None,
        submitted_at,
        dispatched_at: None,
        started_at: None,
        finished_at: None,
        attempt: 0,
        retiring_attempt: None,
        stop_reason: None,
        runtime_env_digest: None,
        preemptible: false,
        preemptions: 0,
        preempted_at: None,
        custom_resources: None,
        pool: None,
        lease_expires_at: None,
    }
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
        bool,
        i32,
        Option<String>,
        Option<String>,
    );
    // The page is the rows' JSON arrays joined as text: `json_group_array(json(j))`
    // parsed every row's text again (a tenth of start-up's CPU at 1,000,000 jobs).
    const SQL: &str = "SELECT max(r), '[' || group_concat(j, ',') || ']' FROM (\
        SELECT rowid AS r, json_array(\
          CASE typeof(id) WHEN 'blob' THEN hex(id) ELSE id END, user_id, priority, \
          submitted_at, quote(cpu), quote(gpu), memory_bytes, max_runtime_s, \
          attempt, retiring_attempt, cluster, json(CASE WHEN preemptible THEN 'true' \
          ELSE 'false' END), preemptions, custom_resources, pool) AS j \
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
        preemptible,
        preemptions,
        custom_resources,
        pool,
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
            runtime_env_digest: None,
            preemptible,
            preemptions,
            preempted_at: None,
            custom_resources,
            pool,
            lease_expires_at: None,
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

/// A job row's custom resources by name (`jobs.custom_resources`); empty when it has
/// none. A column that does not read as a JSON object of numbers (intake never writes
/// one) counts as none, with a warning.
pub fn custom_of(j: &job::Model) -> std::collections::BTreeMap<String, f64> {
    let Some(text) = j.custom_resources.as_deref() else {
        return Default::default();
    };
    serde_json::from_str(text).unwrap_or_else(|e| {
        tracing::warn!(job_id = %j.id, error = %e, "jobs.custom_resources is not a JSON object of amounts");
        Default::default()
    })
}

/// The `jobs.custom_resources` text of `custom`: a JSON object, `None` when empty.
pub fn custom_column(custom: &std::collections::BTreeMap<String, f64>) -> Option<String> {
    (!custom.is_empty()).then(|| serde_json::to_string(custom).unwrap_or_default())
}

/// Number of ADMITTED and RUNNING pool jobs per `(pool, status)` (issue 30: what
/// `GET /v1/scheduler` shows of each pool). Reads only those two statuses, through the
/// index led by `status`.
pub async fn pool_status_counts(db: &Db) -> Result<Vec<(String, JobStatus, i64)>, DbErr> {
    job::Entity::find()
        .select_only()
        .column(job::Column::Pool)
        .column(job::Column::Status)
        .column_as(job::Column::Id.count(), "n")
        .filter(job::Column::Status.is_in([JobStatus::Admitted, JobStatus::Running]))
        .filter(job::Column::Pool.is_not_null())
        .group_by(job::Column::Pool)
        .group_by(job::Column::Status)
        .into_tuple::<(String, JobStatus, i64)>()
        .all(db)
        .await
}

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

/// What the estimates' forward run reads of a waiting or outstanding job.
#[derive(sea_orm::FromQueryResult)]
struct EstimateRow {
    id: Uuid,
    user_id: String,
    status: JobStatus,
    priority: i32,
    entrypoint: String,
    submitted_at: DateTime<Utc>,
    dispatched_at: Option<DateTime<Utc>>,
    started_at: Option<DateTime<Utc>>,
    cpu: f64,
    gpu: f64,
    memory_bytes: i64,
    max_runtime_s: Option<i64>,
    attempt: i32,
    preemptible: bool,
    preemptions: i32,
    custom_resources: Option<String>,
    pool: Option<String>,
    cluster: Option<String>,
}

impl EstimateRow {
    fn into_model(self) -> job::Model {
        job::Model {
            priority: self.priority,
            entrypoint: self.entrypoint,
            cpu: self.cpu,
            gpu: self.gpu,
            memory_bytes: self.memory_bytes,
            cluster: self.cluster,
            max_runtime_s: self.max_runtime_s,
            dispatched_at: self.dispatched_at,
            started_at: self.started_at,
            attempt: self.attempt,
            preemptible: self.preemptible,
            preemptions: self.preemptions,
            custom_resources: self.custom_resources,
            pool: self.pool,
            ..partial(self.id, self.user_id, self.status, self.submitted_at)
        }
    }
}

/// The columns of [`EstimateRow`], in SQL.
const ESTIMATE_COLUMNS: &str = "id, user_id, status, priority, entrypoint, submitted_at, \
     dispatched_at, started_at, cpu, gpu, memory_bytes, max_runtime_s, attempt, preemptible, \
     preemptions, custom_resources, pool, cluster";

/// The QUEUED and outstanding jobs (ADMITTED, DISPATCHING, PENDING, RUNNING), with what
/// the estimates' forward run needs (issue 48): id, user, status, priority, submit,
/// dispatch and start times, resources, runtime limit, entrypoint, preemptibility and
/// pool; runtime_env and metadata left empty. QUEUED ones in queue order per user
/// (user, priority descending, submit time, id), and with `per_user = Some(k)` only
/// the first `k` of each user's queue (a window function, `ROW_NUMBER() OVER
/// (PARTITION BY user_id …)`, on both databases): what the process holds is bounded
/// by the cap, not by what is queued (issue 43 §7). Errors: the database's.
pub async fn waiting_and_outstanding(
    db: &Db,
    per_user: Option<u64>,
) -> Result<Vec<job::Model>, DbErr> {
    let outstanding: Vec<JobStatus> = JobStatus::ALL
        .into_iter()
        .filter(|s| s.is_outstanding())
        .collect();
    let statuses = match per_user {
        None => std::iter::once(JobStatus::Queued)
            .chain(outstanding.iter().copied())
            .collect(),
        Some(_) => outstanding,
    };
    let mut rows = job::Entity::find()
        .select_only()
        .columns([
            job::Column::Id,
            job::Column::UserId,
            job::Column::Status,
            job::Column::Priority,
            job::Column::Entrypoint,
            job::Column::SubmittedAt,
            job::Column::DispatchedAt,
            job::Column::StartedAt,
            job::Column::Cpu,
            job::Column::Gpu,
            job::Column::MemoryBytes,
            job::Column::MaxRuntimeS,
            job::Column::Attempt,
            job::Column::Preemptible,
            job::Column::Preemptions,
            job::Column::CustomResources,
            job::Column::Pool,
            job::Column::Cluster,
        ])
        .filter(job::Column::Status.is_in(statuses))
        .order_by_asc(job::Column::UserId)
        .order_by_desc(job::Column::Priority)
        .order_by_asc(job::Column::SubmittedAt)
        .order_by_asc(job::Column::Id)
        .into_model::<EstimateRow>()
        .all(db)
        .await?;
    if let Some(k) = per_user {
        use sea_orm::FromQueryResult;
        // `k` is a number this process computed, written into the statement.
        let sql = format!(
            "SELECT {ESTIMATE_COLUMNS} FROM (SELECT {ESTIMATE_COLUMNS}, ROW_NUMBER() OVER \
             (PARTITION BY user_id ORDER BY priority DESC, submitted_at, id) AS place \
             FROM jobs WHERE status = 'QUEUED') AS q WHERE place <= {k} \
             ORDER BY user_id, priority DESC, submitted_at, id"
        );
        let mut queued = EstimateRow::find_by_statement(sea_orm::Statement::from_string(
            db.get_database_backend(),
            sql,
        ))
        .all(db)
        .await?;
        queued.append(&mut rows);
        rows = queued;
    }
    Ok(rows.into_iter().map(EstimateRow::into_model).collect())
}

/// How many jobs each user has QUEUED, from the `queue_counts` table the intake keeps
/// (summed over priorities; users with none left out). Errors: the database's.
pub async fn queued_per_user(db: &Db) -> Result<Vec<(String, u64)>, DbErr> {
    let rows = db
        .query_all(sea_orm::Statement::from_string(
            db.get_database_backend(),
            "SELECT user_id, CAST(SUM(queued) AS BIGINT) AS n FROM queue_counts \
             GROUP BY user_id"
                .to_owned(),
        ))
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let user: String = r.try_get("", "user_id")?;
        let n: i64 = r.try_get("", "n")?;
        if n > 0 {
            out.push((user, u64::try_from(n).unwrap_or(0)));
        }
    }
    Ok(out)
}

/// The SUCCEEDED jobs that finished after `after`, oldest finish first, at most
/// `limit`: `(user, entrypoint, started_at, finished_at)`, what the estimates learn
/// run times from (issue 48).
pub async fn succeeded_since(
    db: &Db,
    after: DateTime<Utc>,
    limit: u64,
) -> Result<Vec<(String, String, DateTime<Utc>, DateTime<Utc>)>, DbErr> {
    job::Entity::find()
        .select_only()
        .columns([
            job::Column::UserId,
            job::Column::Entrypoint,
            job::Column::StartedAt,
            job::Column::FinishedAt,
        ])
        .filter(job::Column::Status.eq(JobStatus::Succeeded))
        .filter(job::Column::FinishedAt.gt(after))
        .filter(job::Column::StartedAt.is_not_null())
        .order_by_asc(job::Column::FinishedAt)
        .limit(limit)
        .into_tuple()
        .all(db)
        .await
}
