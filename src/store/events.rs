//! `job_events` read as a feed (DESIGN §4, "Events"): the SSE stream and the webhooks
//! read it in id order from a cursor; each webhook's cursor is kept in
//! `webhook_cursors`, so `job_events` is the webhooks' durable outbox.
//!
//! The wake-up on commit lives here too, beside the writers that commit: [`committed`]
//! is called right after a transaction that wrote `job_events` rows commits, and
//! [`commits`] is what `crate::events`' readers wait on. It is a wake-up only (a counter
//! in a `watch` channel), not state: a reader always re-reads the database.

use chrono::{DateTime, Utc};
use entity::{job, job_event, webhook_cursor, JobStatus};
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ColumnTrait, DbErr, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, Set,
};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use std::sync::LazyLock;

use tokio::sync::watch;

use super::{now, Db};

static COMMITTED: LazyLock<watch::Sender<u64>> = LazyLock::new(|| watch::channel(0).0);

/// Tells this process's readers that new `job_events` rows are committed.
pub(crate) fn committed() {
    COMMITTED.send_modify(|n| *n = n.wrapping_add(1));
}

/// A wake-up that changes whenever [`committed`] is called.
pub(crate) fn commits() -> watch::Receiver<u64> {
    COMMITTED.subscribe()
}

/// One job transition as `GET /v1/events` and the webhooks send it: the `job_events`
/// row with the job's user and external id.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct JobEvent {
    /// The `job_events` row id: increasing, the SSE `id:` and `Last-Event-ID`, and the
    /// webhook's `X-Fairshare-Delivery`.
    pub id: i64,
    pub job_id: Uuid,
    pub user: String,
    /// The gateway's idempotency key of the job, if it gave one.
    pub external_id: Option<String>,
    /// The status before; null for the job's creation (to QUEUED).
    #[schema(value_type = Option<String>)]
    pub from: Option<JobStatus>,
    /// QUEUED, ADMITTED, DISPATCHING, PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED.
    #[schema(value_type = String)]
    pub to: JobStatus,
    /// When the transition was committed (UTC, microseconds).
    pub at: DateTime<Utc>,
    /// Why: the lifecycle's detail (e.g. Ray's message, the cancel).
    pub message: Option<String>,
    /// The pool the job must run in (issue 30, DESIGN §3 "Admission"); null for a job
    /// this service runs on Ray. A pool's runner filters on it (`GET
    /// /v1/events?pool=`).
    pub pool: Option<String>,
}

impl JobEvent {
    /// Whether this row asks a pool job's runner to stop it (issue 30, DESIGN §4
    /// "Events"): the SSE event and the webhook's `X-Fairshare-Event` are then
    /// `job.stop_requested`.
    #[must_use]
    pub fn is_stop_request(&self) -> bool {
        self.message
            .as_deref()
            .is_some_and(|m| m.starts_with(crate::lifecycle::STOP_REQUESTED_DETAIL))
    }

    /// Whether this row is a preemption's stop (DESIGN §4, "Events"): the SSE event
    /// and the webhook's `X-Fairshare-Event` are then `job.preempted`.
    #[must_use]
    pub fn is_preemption(&self) -> bool {
        self.message
            .as_deref()
            .is_some_and(|m| m.starts_with(crate::lifecycle::PREEMPTED_DETAIL))
    }
}

/// Up to `limit` events with ids above `after`, oldest first. Jobs are never deleted,
/// so each event has its job; one that has not (a row removed by hand) is left out.
pub async fn events_after(db: &Db, after: i64, limit: u64) -> Result<Vec<JobEvent>, DbErr> {
    let rows = job_event::Entity::find()
        .filter(job_event::Column::Id.gt(after))
        .order_by_asc(job_event::Column::Id)
        .limit(limit)
        .all(db)
        .await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let mut ids: Vec<Uuid> = rows.iter().map(|r| r.job_id).collect();
    ids.sort_unstable();
    ids.dedup();
    type Owner = (String, Option<String>, Option<String>);
    let jobs: std::collections::HashMap<Uuid, Owner> = job::Entity::find()
        .select_only()
        .columns([
            job::Column::Id,
            job::Column::UserId,
            job::Column::ExternalId,
            job::Column::Pool,
        ])
        .filter(job::Column::Id.is_in(ids))
        .into_tuple::<(Uuid, String, Option<String>, Option<String>)>()
        .all(db)
        .await?
        .into_iter()
        .map(|(id, user, ext, pool)| (id, (user, ext, pool)))
        .collect();
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let (user, external_id, pool) = jobs.get(&r.job_id)?.clone();
            Some(JobEvent {
                id: r.id,
                job_id: r.job_id,
                user,
                external_id,
                from: r.from_status,
                to: r.to_status,
                at: r.at,
                message: r.detail,
                pool,
            })
        })
        .collect())
}

/// The newest event id, 0 when there is none.
pub async fn last_event_id(db: &Db) -> Result<i64, DbErr> {
    let max: Option<Option<i64>> = job_event::Entity::find()
        .select_only()
        .column_as(job_event::Column::Id.max(), "m")
        .into_tuple::<Option<i64>>()
        .one(db)
        .await?;
    Ok(max.flatten().unwrap_or(0))
}

/// How many events have ids above `after` (a webhook's outbox depth).
pub async fn count_events_after(db: &Db, after: i64) -> Result<u64, DbErr> {
    job_event::Entity::find()
        .filter(job_event::Column::Id.gt(after))
        .count(db)
        .await
}

/// Creates the cursor of each webhook in `names` that has none, at the newest event
/// now (a new webhook gets the events from then on). Run at start, before the API
/// takes submissions, so no acknowledged job's events fall before a new cursor.
pub async fn init_webhook_cursors(db: &Db, names: &[String]) -> Result<(), DbErr> {
    if names.is_empty() {
        return Ok(());
    }
    let last = last_event_id(db).await?;
    let at = now();
    for name in names {
        webhook_cursor::Entity::insert(webhook_cursor::ActiveModel {
            name: Set(name.clone()),
            last_event_id: Set(last),
            updated_at: Set(at),
        })
        .on_conflict(
            OnConflict::column(webhook_cursor::Column::Name)
                .do_nothing()
                .to_owned(),
        )
        .exec_without_returning(db)
        .await?;
    }
    Ok(())
}

/// The id of the last event webhook `name` settled; `None` when it has no cursor.
pub async fn webhook_cursor(db: &Db, name: &str) -> Result<Option<i64>, DbErr> {
    Ok(webhook_cursor::Entity::find_by_id(name.to_string())
        .one(db)
        .await?
        .map(|c| c.last_event_id))
}

/// Records that webhook `name` settled every event up to `id` (never moves back).
pub async fn set_webhook_cursor(db: &Db, name: &str, id: i64) -> Result<(), DbErr> {
    webhook_cursor::Entity::update_many()
        .col_expr(
            webhook_cursor::Column::LastEventId,
            sea_orm::sea_query::Expr::value(id),
        )
        .col_expr(
            webhook_cursor::Column::UpdatedAt,
            sea_orm::sea_query::Expr::value(now()),
        )
        .filter(webhook_cursor::Column::Name.eq(name))
        .filter(webhook_cursor::Column::LastEventId.lt(id))
        .exec(db)
        .await?;
    Ok(())
}

/// One `job_events` row as the leader's catch-up reads it (DESIGN §10): which job moved
/// from which status to which, nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    /// The `job_events` row id.
    pub id: i64,
    pub job_id: Uuid,
    /// `None` for the job's creation.
    pub from: Option<JobStatus>,
    pub to: JobStatus,
}

impl Change {
    /// Whether the job entered or left the QUEUED state here: the only changes that
    /// move a job into or out of the leader's queues.
    pub fn touches_queue(&self) -> bool {
        self.to == JobStatus::Queued || self.from == Some(JobStatus::Queued)
    }
}

type ChangeRow = (i64, Uuid, Option<JobStatus>, JobStatus);

fn change((id, job_id, from, to): ChangeRow) -> Change {
    Change {
        id,
        job_id,
        from,
        to,
    }
}

/// The changes whose ids match `ids`, oldest first, at most `limit`: four narrow
/// columns a row.
async fn changes(
    db: &Db,
    ids: sea_orm::sea_query::SimpleExpr,
    limit: Option<u64>,
) -> Result<Vec<Change>, DbErr> {
    Ok(job_event::Entity::find()
        .select_only()
        .columns([
            job_event::Column::Id,
            job_event::Column::JobId,
            job_event::Column::FromStatus,
            job_event::Column::ToStatus,
        ])
        .filter(ids)
        .order_by_asc(job_event::Column::Id)
        .limit(limit)
        .into_tuple::<ChangeRow>()
        .all(db)
        .await?
        .into_iter()
        .map(change)
        .collect())
}

/// Up to `limit` changes with ids above `after`, oldest first: a range read of the
/// `job_events` primary key.
pub async fn changes_after(db: &Db, after: i64, limit: u64) -> Result<Vec<Change>, DbErr> {
    changes(db, job_event::Column::Id.gt(after), Some(limit)).await
}

/// The changes among `ids` that are stored (ids the catch-up saw skipped and waits
/// for: a transaction that committed after a later one), oldest first.
pub async fn changes_with_ids(db: &Db, ids: &[i64]) -> Result<Vec<Change>, DbErr> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    changes(db, job_event::Column::Id.is_in(ids.iter().copied()), None).await
}
