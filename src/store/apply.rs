//! The only writer of job status (DESIGN §3): [`apply`] and [`apply_many`] read a job,
//! ask the lifecycle what an event means for it, and write the decided step (the
//! guarded status update and its `job_events` row) in one transaction, fenced against
//! a stale leader ([`Fence`], DESIGN §10), then count the step's metric.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use entity::{job, job_event, JobStatus};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, QueryFilter, QuerySelect,
    Set, TransactionTrait,
};
use uuid::Uuid;

use super::lease::check_fence;
use super::{events, now, usage, Db};
use crate::lifecycle;

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
    apply_with(db, fence, id, event, Flush::Durable).await
}

/// [`apply`] whose commit waits for the disk or not ([`Flush`]). Errors: as [`apply`].
pub async fn apply_with(
    db: &Db,
    fence: &Fence,
    id: Uuid,
    event: &lifecycle::Event,
    flush: Flush,
) -> Result<Applied, DbErr> {
    let applied = apply_steps(db, fence, &[(id, event)], flush).await?;
    Ok(applied.into_iter().next().unwrap_or(Applied::NotFound))
}

/// [`apply`] for several jobs in **one** transaction (one commit, one fsync): what the
/// dispatcher writes for the grants of one cycle (issue 11: the next job's POST to Ray
/// waits for one commit, not for one per job granted before it). Each `(id, event)`
/// is decided and written exactly as [`apply`] would; rows are visited in id order,
/// on PostgreSQL by user first (it locks them in that order, and the `queue_counts`
/// rows of their users, which intake locks in user order: no deadlock), and the
/// results come back in input order. `flush`: whether the commit waits for the disk
/// ([`Flush`]). Errors: as [`apply`], for the whole batch — nothing is written then.
pub async fn apply_many(
    db: &Db,
    fence: &Fence,
    steps: &[(Uuid, lifecycle::Event)],
    flush: Flush,
) -> Result<Vec<Applied>, DbErr> {
    let steps: Vec<(Uuid, &lifecycle::Event)> = steps.iter().map(|(id, e)| (*id, e)).collect();
    apply_steps(db, fence, &steps, flush).await
}

/// [`apply`] and [`apply_many`]: the steps in one transaction, committed as `flush`
/// says; one result per step, in input order.
async fn apply_steps(
    db: &Db,
    fence: &Fence,
    steps: &[(Uuid, &lifecycle::Event)],
    flush: Flush,
) -> Result<Vec<Applied>, DbErr> {
    if steps.is_empty() {
        return Ok(Vec::new());
    }
    let txn = db.begin().await?;
    let deferred = flush == Flush::Deferred;
    let sqlite = txn.get_database_backend() == DatabaseBackend::Sqlite;
    if deferred {
        // SQLite refuses to change `synchronous` inside a transaction: end the empty
        // one `begin` opened, change it, open another, all on the one connection this
        // transaction holds (DESIGN §6, "SQLite").
        let set = if sqlite {
            "COMMIT; PRAGMA synchronous = NORMAL; BEGIN"
        } else {
            "SET LOCAL synchronous_commit = off"
        };
        if let Err(e) = txn.execute_unprepared(set).await {
            if sqlite {
                restore_full(&txn).await;
            }
            return Err(e);
        }
    }
    let written = write_many(&txn, fence, steps).await;
    let done = match written {
        Ok(results) if deferred && sqlite => txn
            .execute_unprepared("COMMIT; PRAGMA synchronous = FULL; BEGIN")
            .await
            .map(|_| results),
        other => other,
    };
    let results = match done {
        Ok(results) => {
            txn.commit().await?;
            results
        }
        Err(e) => {
            if deferred && sqlite {
                restore_full(&txn).await;
            }
            return Err(e);
        }
    };
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

/// Whether a commit of [`apply_with`] or [`apply_many`] waits until the disk has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flush {
    /// It does, as every other write of the service (SQLite `synchronous = FULL`,
    /// PostgreSQL's `synchronous_commit`): a power loss after the commit keeps it.
    Durable,
    /// It does not (SQLite `synchronous = NORMAL` for this commit, PostgreSQL
    /// `SET LOCAL synchronous_commit = off`): the commit is atomic and seen by every
    /// reader at once, and a crash of this process keeps it; only a crash of the
    /// machine (or of PostgreSQL's server) before the next durable commit, which
    /// flushes it too, can lose it. For the dispatcher's `Granted` and `RayAccepted`
    /// steps only (DESIGN §3, "The `Granted` commit does not wait for the disk"): a
    /// lost `Granted` leaves the job QUEUED at the same attempt, and the sweep finds
    /// the attempt Ray accepted as it finds a POST whose answer was lost; a lost
    /// `RayAccepted` leaves it DISPATCHING, which recovery looks up in Ray.
    Deferred,
}

/// After a failed deferred write on SQLite: ends whatever transaction is open and sets
/// `synchronous` back to FULL, so that the connection's next user commits durably;
/// logged when it cannot (the connection then stays at NORMAL until it is reopened).
async fn restore_full(txn: &sea_orm::DatabaseTransaction) {
    let _ = txn.execute_unprepared("ROLLBACK").await;
    let restored = txn
        .execute_unprepared("PRAGMA synchronous = FULL; BEGIN")
        .await;
    if let Err(e) = restored {
        tracing::error!(error = %e, "cannot set SQLite's synchronous back to FULL after a failed write");
    }
}

/// The writes of [`apply_many`] inside `txn`: the fence, then each step in lock order;
/// the results in input order.
async fn write_many(
    txn: &sea_orm::DatabaseTransaction,
    fence: &Fence,
    steps: &[(Uuid, &lifecycle::Event)],
) -> Result<Vec<Option<(Applied, Option<StepMetric>)>>, DbErr> {
    if let Fence::Term { holder, term } = fence {
        check_fence(txn, holder, *term).await?;
    }
    let mut order: Vec<usize> = (0..steps.len()).collect();
    order.sort_by_key(|&i| steps[i].0);
    if steps.len() > 1 && txn.get_database_backend() == DatabaseBackend::Postgres {
        // By user, then id: a step that moves a job into or out of QUEUED locks its
        // user's `queue_counts` row, and intake locks those rows in user order too, so
        // the two cannot deadlock.
        let users: HashMap<Uuid, String> = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .column(job::Column::UserId)
            .filter(job::Column::Id.is_in(steps.iter().map(|(id, _)| *id)))
            .into_tuple::<(Uuid, String)>()
            .all(txn)
            .await?
            .into_iter()
            .collect();
        order.sort_by(|&a, &b| {
            (users.get(&steps[a].0), steps[a].0).cmp(&(users.get(&steps[b].0), steps[b].0))
        });
    }
    let mut results: Vec<Option<(Applied, Option<StepMetric>)>> =
        (0..steps.len()).map(|_| None).collect();
    let mut deltas = usage::Deltas::default();
    for i in order {
        let (id, event) = steps[i];
        results[i] = Some(apply_in(txn, id, event, &mut deltas).await?);
    }
    // Usage (DESIGN §6, "Usage rollup"): after every job row, in key order.
    if !deltas.is_empty() {
        usage::record(txn, &deltas).await?;
        crate::metrics::usage(&deltas);
    }
    Ok(results)
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
    deltas: &mut usage::Deltas,
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
    let started = if c.clear_started {
        None
    } else {
        current
            .started_at
            .or(c.started_at)
            .or((step.to == JobStatus::Running).then_some(at))
    };
    if started != current.started_at {
        update = update.col_expr(job::Column::StartedAt, Expr::value(started));
    }
    let finished = c.finished_at.or(step.to.is_terminal().then_some(at));
    if let Some(t) = finished {
        update = update.col_expr(job::Column::FinishedAt, Expr::value(t));
    }
    if step.to.is_terminal() {
        // Secrets not kept (DESIGN §6): an ended job is never sent to Ray again, so its
        // runtime_env (users' tokens) goes, in the step's own transaction. Its digest
        // stays for idempotent resubmits.
        update = update.col_expr(
            job::Column::RuntimeEnv,
            Expr::value(Option::<serde_json::Value>::None),
        );
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
    match c.preempted {
        Some(true) => update = update.col_expr(job::Column::PreemptedAt, Expr::value(at)),
        Some(false) if current.preempted_at.is_some() => {
            update = update.col_expr(
                job::Column::PreemptedAt,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
        }
        _ => {}
    }
    if let Some(n) = c.preemptions {
        update = update.col_expr(job::Column::Preemptions, Expr::value(n as i32));
    }
    if let Some(lease) = c.lease_until {
        update = update.col_expr(job::Column::LeaseExpiresAt, Expr::value(lease));
    }
    let res = update.exec(txn).await?;
    if res.rows_affected != 1 {
        return Ok((Applied::Unchanged(current), None));
    }
    if c.quiet {
        // A lease renewal: the row changed, but there is no transition to announce.
        let job = job::Entity::find_by_id(id)
            .one(txn)
            .await?
            .ok_or_else(|| DbErr::RecordNotFound(id.to_string()))?;
        return Ok((Applied::Changed { job, step }, None));
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
    // Usage: a hold ends when the job stops being outstanding (it ends, or goes back
    // to the queue); an ended job is counted by status where it ended.
    let ends_hold = current.status.is_outstanding() && !step.to.is_outstanding();
    if ends_hold || step.to.is_terminal() {
        let group = usage::group_path(txn, &current.user_id).await?;
        let end = finished.unwrap_or(at);
        if ends_hold {
            let hold = usage::hold_of(&current, &group, end);
            if let Some(hold) = &hold {
                deltas.declared(hold);
            }
            // What it actually held: since its last reading of Ray's State API, or
            // (none) as declared.
            usage::end_actual(txn, id, hold.as_ref(), deltas).await?;
        }
        if step.to.is_terminal() {
            // The time queued before its last grant (a job granted more than once
            // held resources between its waits); none if never granted.
            let wait = match current.dispatched_at {
                Some(_) => Some(usage::queued_before(txn, &current).await?),
                None => None,
            };
            deltas.ended(
                &usage::key_of(&current, &group),
                step.to,
                end.timestamp(),
                wait,
            );
        }
    }
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

async fn insert_event<C: sea_orm::ConnectionTrait>(
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
