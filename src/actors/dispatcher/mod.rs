//! `Dispatcher`: submits granted jobs to Ray exactly once, and carries out the stops
//! the lifecycle decides (cancel, runtime limit, pending timeout).
//!
//! Per grant: the lifecycle's `Granted` step (QUEUED → DISPATCHING, guarded) is
//! written — the grants that arrive together (one cycle's) in one transaction, so the
//! last of them does not wait for one commit per grant ahead of it; a cancel that won
//! the race ends that job's dispatch there. Then
//! [`crate::ray::submit_idempotent`] with the attempt's `submission_id`, and Ray's
//! answer, classified by [`crate::ray`], becomes the next event: accepted → PENDING
//! (the monitor tracks it; a stop asked meanwhile is sent now), refused → FAILED,
//! not ready → back to QUEUED at its old place and the cluster backs off. Dispatches
//! run concurrently; all decisions are the lifecycle's, all writes `store::apply`'s.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, WrapFuture};

use super::messages::{
    ArbiterHandle, ClusterUnreachable, Dispatch, DispatchEnded, MonitorHandle, StopInRay, Track,
};
use super::monitor::book::Origin;
use super::unix_now;
use backon::{ExponentialBuilder, Retryable};

mod preempt;
// The protocol model runs it (`actors::model`).
#[cfg(test)]
pub(crate) use preempt::preempted;

use crate::lifecycle::{Event, RayCall};
use crate::metrics;
use crate::policy::JobId;
use crate::ray::{submit_idempotent, DispatchOutcome, RayClient, RetryBudget, SubmitJob};
use crate::store::{self, Applied, Db, Fence};

/// A `Granted` write or a finish → POST that takes this long is logged (info) with
/// where the time went: the tail of `fairshare_finish_to_dispatch_seconds`.
const SLOW_STEP: std::time::Duration = std::time::Duration::from_millis(15);

/// The dispatcher.
pub struct Dispatcher {
    db: Db,
    /// Carried into every `store::apply` (DESIGN §10).
    fence: Fence,
    clients: Arc<BTreeMap<String, RayClient>>,
    budget: RetryBudget,
    /// Where attempts' watchers report (`[notify]`); `None`: entrypoints go as they are.
    /// `[[licenses]]`: never sent to Ray.
    licenses: crate::policy::Custom,
    hints: Option<crate::ray::notify::Hints>,
    /// Opens the stored runtime_env of each job it sends (DESIGN §6, "Secrets").
    sealer: Arc<crate::secrets::Sealer>,
    arbiter: ArbiterHandle,
    monitor: MonitorHandle,
    /// Grants received since the last flush (see [`Dispatcher::flush`]).
    batch: Vec<Dispatch>,
    flush_scheduled: bool,
    /// Users with a label of their own on the preemption metrics, at most
    /// `telemetry.per_user_metrics_max` (the others count as `_other`).
    preempted_users: std::collections::HashSet<String>,
    per_user_metrics_max: usize,
    /// `[[pools]]` names: a grant there admits the job (no Ray call, issue 30).
    pools: std::collections::HashSet<String>,
    /// `[admission]`: the lease a runner gets, what a lapse does.
    admission: crate::config::AdmissionSettings,
    /// `preemption.grace`: how long a preempted pool job's runner has to end it.
    preemption_grace: std::time::Duration,
    /// No runner's lease lapses before this: one lease after this dispatcher started,
    /// i.e. after this replica began to lead. While no replica led (a restart, an
    /// outage, a failover) no runner could report, so its lease is counted again from
    /// the moment one leads.
    lapse_from: std::time::Instant,
    /// The same for a pool preemption's grace: one grace after this replica began to
    /// lead.
    grace_from: std::time::Instant,
}

/// What one dispatch ended as, for the actor to announce.
#[derive(Clone, Debug)]
pub(crate) enum Landed {
    /// Ray has it (PENDING); `stop` when a cancel came in meanwhile.
    Submitted(Box<entity::job::Model>, Option<RayCall>),
    /// Back in the queue: the cluster was not ready.
    Requeued(Box<entity::job::Model>),
    /// Back in the queue and held there: its runtime_env is sealed with a key this
    /// leader does not hold. It waits until a replica that holds the key leads (that
    /// leader's recovery queues it again), never failed for it (issue 43 §3).
    Withheld(Box<entity::job::Model>),
    /// Ended (FAILED/STOPPED) or moved by someone else.
    Ended,
}

impl Dispatcher {
    /// A dispatcher over the configured clusters' clients.
    pub fn new(
        settings: &crate::config::Settings,
        db: Db,
        fence: Fence,
        clients: Arc<BTreeMap<String, RayClient>>,
        arbiter: ArbiterHandle,
        monitor: MonitorHandle,
    ) -> Self {
        let d = &settings.dispatcher;
        Dispatcher {
            db,
            fence,
            clients,
            budget: RetryBudget {
                attempts: d.retry_attempts,
                initial_backoff: d.retry_initial_backoff,
                max_backoff: d.retry_max_backoff,
            },
            hints: crate::ray::notify::Hints::of(&settings.notify),
            sealer: Arc::new(crate::secrets::Sealer::new(
                &settings.secrets.runtime_env_keys,
            )),
            arbiter,
            monitor,
            batch: Vec::new(),
            flush_scheduled: false,
            preempted_users: std::collections::HashSet::new(),
            per_user_metrics_max: settings.telemetry.per_user_metrics_max,
            licenses: settings.policy().licenses,
            pools: settings.pools.iter().map(|p| p.name.clone()).collect(),
            admission: settings.admission.clone(),
            preemption_grace: settings.preemption.grace,
            lapse_from: std::time::Instant::now() + settings.admission.lease,
            grace_from: std::time::Instant::now() + settings.preemption.grace,
        }
    }

    /// What an `Admitted` step's result means for the grant: the job is ADMITTED (its
    /// runner learns it from the event stream and webhooks; nothing else to do here),
    /// or the admission did not happen (cancelled or moved since the grant) and the
    /// grant's reservation is released as for a dispatch that ended.
    fn admitted(&mut self, msg: &Dispatch, applied: Applied) {
        // Not through `landed`: a pool is no cluster for the monitor to back off from.
        let requeue = match applied {
            Applied::Changed { job, .. } if job.status == entity::JobStatus::Admitted => {
                tracing::info!(job_id = %job.id, pool = %msg.cluster, attempt = job.attempt, "admitted");
                self.arbiter
                    .admitted
                    .do_send(super::messages::PoolAdmitted {
                        job_id: job.id,
                        attempt: u32::try_from(job.attempt).unwrap_or(1),
                    });
                return;
            }
            Applied::Refused(job, _) if job.status == entity::JobStatus::Queued => {
                Some((store::summary(&job), job.retiring_attempt.is_some()))
            }
            _ => None,
        };
        let held = requeue.as_ref().is_some_and(|(_, held)| *held);
        self.arbiter.dispatch_ended.do_send(DispatchEnded {
            user: msg.user.clone(),
            job_id: msg.job.job_id,
            requeue: requeue.map(|(job, _)| job),
            held,
        });
    }

    /// Looks for pool jobs whose runner's lease has lapsed and frees what they hold
    /// (`[admission]`, DESIGN §3 "Admission"): back to the queue as the next attempt, or
    /// FAILED (STOPPED when a stop was asked), each with a `job_events` row saying why.
    /// A preempted pool job whose runner has not ended it within `preemption.grace`
    /// goes back to the queue too (the preemption's requeue).
    fn check_leases(&mut self, ctx: &mut Context<Self>) {
        let now = std::time::Instant::now();
        let (lapses, graces) = (now >= self.lapse_from, now >= self.grace_from);
        if !lapses && !graces {
            return;
        }
        let db = self.db.clone();
        let fence = self.fence.clone();
        let requeue = self.admission.on_lease_lapse == crate::config::OnLeaseLapse::Requeue;
        let lease_s = self.admission.lease.as_secs();
        let grace = self.preemption_grace;
        let arbiter = self.arbiter.clone();
        let fut = super::off_actor(async move {
            let now = chrono::Utc::now();
            let lapsed = if lapses {
                store::lapsed_leases(&db, now).await?
            } else {
                Vec::new()
            };
            let grace_over = chrono::Duration::from_std(grace)
                .ok()
                .and_then(|g| now.checked_sub_signed(g))
                .unwrap_or(now);
            let overdue = if graces {
                store::overdue_pool_preemptions(&db, grace_over).await?
            } else {
                Vec::new()
            };
            let events = lapsed
                .into_iter()
                .map(|id| {
                    (
                        id,
                        Event::LeaseLapsed {
                            now,
                            lease_s,
                            requeue,
                        },
                    )
                })
                .chain(overdue.into_iter().map(|id| {
                    (
                        id,
                        Event::PreemptionGraceOver {
                            grace_s: grace.as_secs(),
                        },
                    )
                }));
            for (id, event) in events {
                if let Applied::Changed { job, .. } = store::apply(&db, &fence, id, &event).await? {
                    tracing::warn!(job_id = %id, status = %job.status, "a pool job's runner let its lease or a preemption's grace pass");
                    super::tell_arbiter_pool_job(&arbiter.requeued, &arbiter.finished, &job);
                }
            }
            Ok::<(), sea_orm::DbErr>(())
        });
        ctx.spawn(fut.into_actor(self).map(|done, _, _| {
            if let Some(Err(e)) = done {
                if !store::is_fenced(&e) {
                    metrics::db_error();
                }
                tracing::warn!(error = %e, "could not check the runners' leases");
            }
        }));
    }

    /// Writes the `Granted` step of every grant received since the last flush in one
    /// transaction ([`store::apply_many`]: one commit for a cycle's grants, not one
    /// each), then submits each to Ray concurrently.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        self.flush_scheduled = false;
        let batch = std::mem::take(&mut self.batch);
        if batch.is_empty() {
            return;
        }
        let db = self.db.clone();
        let fence = self.fence.clone();
        let steps: Vec<(JobId, Event)> = batch
            .iter()
            .map(|m| {
                let cluster = m.cluster.clone();
                let event = if self.pools.contains(&cluster) {
                    // A pool's runner starts it (issue 30): no Ray call.
                    Event::Admitted {
                        pool: cluster,
                        lease_until: self.admission.lease_from_now(),
                    }
                } else {
                    Event::Granted { cluster }
                };
                (m.job.job_id, event)
            })
            .collect();
        // Ray's grants need not reach the disk before the POST (store::Flush::Deferred,
        // DESIGN §3 "Dispatch"); a pool's admission does: no sweep finds a runner's work.
        let flush = if steps
            .iter()
            .all(|(_, e)| matches!(e, Event::Granted { .. }))
        {
            store::Flush::Deferred
        } else {
            store::Flush::Durable
        };
        let fut = super::off_actor(async move {
            let began = std::time::Instant::now();
            let done = store::apply_many(&db, &fence, &steps, flush).await;
            let took = began.elapsed();
            if took >= SLOW_STEP {
                tracing::info!(
                    write_ms = took.as_secs_f64() * 1e3,
                    grants = steps.len(),
                    "slow Granted write"
                );
            }
            done
        });
        ctx.spawn(fut.into_actor(self).map(move |done, act, ctx| match done {
            Some(Ok(granted)) => {
                for (msg, granted) in batch.into_iter().zip(granted) {
                    if act.pools.contains(&msg.cluster) {
                        act.admitted(&msg, granted);
                    } else {
                        act.submit(msg, granted, ctx);
                    }
                }
            }
            Some(Err(e)) => {
                let fenced = store::is_fenced(&e);
                for msg in batch {
                    act.landed(&msg, Err(&e), fenced);
                }
            }
            None => {}
        }));
    }

    /// Submits one granted job to Ray (its `Granted` step is written).
    fn submit(&mut self, msg: Dispatch, granted: Applied, ctx: &mut Context<Self>) {
        let client = self.clients.get(&msg.cluster).cloned();
        let db = self.db.clone();
        let fence = self.fence.clone();
        let how = How {
            budget: self.budget,
            hints: self.hints.clone(),
            sealer: self.sealer.clone(),
            licenses: self.licenses,
        };
        let fut = super::off_actor(async move {
            let res = dispatch_granted(db, fence, client, how, &msg, granted).await;
            (msg, res)
        });
        ctx.spawn(fut.into_actor(self).map(|done, act, ctx| {
            let Some((msg, res)) = done else { return };
            let fenced = res.as_ref().err().is_some_and(store::is_fenced);
            if let Some(stop) = act.landed(&msg, res.as_ref(), fenced) {
                ctx.notify(stop);
            }
        }));
    }

    /// Announces how a dispatch ended; a stop to send when a cancel came in meanwhile.
    fn landed(
        &mut self,
        msg: &Dispatch,
        res: Result<&Landed, &sea_orm::DbErr>,
        fenced: bool,
    ) -> Option<StopInRay> {
        let landed = match res {
            Ok(landed) => landed,
            Err(e) if fenced => {
                // This replica lost the lease: the new leader's recovery owns the job.
                tracing::warn!(job_id = %msg.job.job_id, error = %e, "not dispatching: the lease is lost");
                return None;
            }
            Err(e) => {
                // The database failed mid-dispatch. The job row says where it is; the
                // reservation stays until recovery (the leadership loop re-runs it
                // after a database error, DESIGN §10) or the monitor settles it.
                metrics::db_error();
                tracing::error!(job_id = %msg.job.job_id, error = %e, "database error during dispatch");
                return None;
            }
        };
        let mut stop = None;
        for then in after(&msg.cluster, msg.job.job_id, &msg.user, landed) {
            match then {
                Then::Track(job) => self.monitor.track.do_send(Track {
                    job: *job,
                    origin: Origin::Dispatched,
                }),
                Then::Stop(s) => stop = Some(s),
                Then::Unreachable(cluster) => self
                    .monitor
                    .unreachable
                    .do_send(ClusterUnreachable { cluster }),
                Then::Ended(ended) => self.arbiter.dispatch_ended.do_send(ended),
            }
        }
        stop
    }
}

/// What follows a dispatch's end, for the actor to send (pure).
#[derive(Clone, Debug)]
pub(crate) enum Then {
    /// Monitor: follow the job (Ray has it).
    Track(Box<entity::job::Model>),
    /// Self: stop the attempt in Ray (a cancel came in meanwhile).
    Stop(StopInRay),
    /// Monitor: the cluster was not ready; back off.
    Unreachable(String),
    /// Arbiter: the grant's reservation is released.
    Ended(DispatchEnded),
}

/// What follows a dispatch of `job_id` (user `user`) to `cluster` that ended as
/// `landed`, in order.
pub(crate) fn after(cluster: &str, job_id: JobId, user: &str, landed: &Landed) -> Vec<Then> {
    let ended = |requeue, held| {
        Then::Ended(DispatchEnded {
            user: user.to_string(),
            job_id,
            requeue,
            held,
        })
    };
    match landed {
        Landed::Submitted(job, stop) => {
            let mut then = vec![Then::Track(job.clone())];
            if let Some(RayCall::Stop { submission_id }) = stop {
                then.push(Then::Stop(StopInRay {
                    job_id: job.id,
                    cluster: cluster.to_string(),
                    submission_id: submission_id.clone(),
                }));
            }
            then
        }
        Landed::Requeued(job) => {
            let held = job.retiring_attempt.is_some();
            let mut then = Vec::new();
            if !held {
                then.push(Then::Unreachable(cluster.to_string()));
            }
            then.push(ended(Some(store::summary(job)), held));
            then
        }
        // Not the cluster's fault: no back-off; held, so this leader does not grant it
        // again.
        Landed::Withheld(job) => vec![ended(Some(store::summary(job)), true)],
        Landed::Ended => vec![ended(None, false)],
    }
}

/// What the `Granted` step's result means: the attempt to submit, or how the dispatch
/// ended without a submit (cancelled or moved between grant and dispatch, or held).
pub(crate) fn granted(applied: Applied) -> Result<(entity::job::Model, String), Landed> {
    match applied {
        Applied::Changed {
            job,
            step:
                crate::lifecycle::Step {
                    ray: Some(RayCall::Submit { submission_id }),
                    ..
                },
        } => Ok((job, submission_id)),
        Applied::Refused(job, _) if job.status == entity::JobStatus::Queued => {
            Err(Landed::Requeued(Box::new(job)))
        }
        _ => Err(Landed::Ended),
    }
}

/// The lifecycle event Ray's answer to a submit is.
pub(crate) fn answer_event(cluster: &str, outcome: DispatchOutcome) -> Event {
    match outcome {
        DispatchOutcome::Submitted {
            already_existed,
            attempts,
        } => Event::RayAccepted {
            already_existed,
            attempts,
        },
        DispatchOutcome::Rejected { message } => Event::RayRefused { message },
        DispatchOutcome::GaveUp {
            last_error,
            attempts,
        } => Event::RayNotReady {
            reason: format!("{cluster} did not take it after {attempts} attempts: {last_error}"),
        },
    }
}

/// Whether a dispatch of `attempt` should send another POST after an ambiguous
/// failure, given the job's row as it is now and whether this replica still leads.
///
/// Errors: why not — the job was cancelled, has moved on, or the lease is lost.
pub(crate) fn keep_trying(
    facts: &crate::lifecycle::JobFacts,
    attempt: u32,
    leads: bool,
) -> Result<(), String> {
    if !leads {
        return Err("this replica no longer leads".into());
    }
    if facts.status != entity::JobStatus::Dispatching || facts.attempt != attempt {
        return Err(format!("the job is {} now", facts.status));
    }
    if facts.stop_reason.is_some() {
        return Err("the job was cancelled".into());
    }
    Ok(())
}

/// How a dispatch ended once Ray's answer was recorded as `applied`. A row that some
/// other path moved on to PENDING or RUNNING under the same attempt (it should not
/// happen: nothing else moves a job whose submit is in flight here) is still handed
/// to the monitor, with its stop, rather than dropped: the attempt is alive in Ray.
pub(crate) fn recorded(applied: Applied) -> Landed {
    match applied {
        Applied::Changed { job, step } if job.status == entity::JobStatus::Pending => {
            Landed::Submitted(Box::new(job), step.ray)
        }
        Applied::Unchanged(job)
            if matches!(
                job.status,
                entity::JobStatus::Pending | entity::JobStatus::Running
            ) =>
        {
            let stop = job.stop_reason.as_ref().map(|_| RayCall::Stop {
                submission_id: crate::lifecycle::current_submission_id(&job),
            });
            Landed::Submitted(Box::new(job), stop)
        }
        Applied::Changed { job, .. } if job.status == entity::JobStatus::Queued => {
            Landed::Requeued(Box::new(job))
        }
        _ => Landed::Ended,
    }
}

/// Carries out one dispatch; every write is a lifecycle step through `store::apply`.
/// Backoff of recording Ray's answer to a dispatch after a database error: from
/// 100 ms, doubling up to 10 s, 40 times (about 6 minutes in all) — longer than a
/// PostgreSQL restart or a burst of SQLite pool timeouts, after which the row stays
/// DISPATCHING for recovery to settle (DESIGN §3).
const RECORD_RETRY_MIN: std::time::Duration = std::time::Duration::from_millis(100);
const RECORD_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(10);
const RECORD_RETRIES: usize = 40;

/// How a dispatch sends: the submit's retry budget, the watcher's notify URLs, and
/// the sealer that opens the stored runtime_env.
struct How {
    budget: RetryBudget,
    hints: Option<crate::ray::notify::Hints>,
    sealer: Arc<crate::secrets::Sealer>,
    /// `[[licenses]]`: counted by the policy, never sent to Ray.
    licenses: crate::policy::Custom,
}

/// The rest of one dispatch once its `Granted` step was written (in the batch's
/// transaction, see [`Dispatcher::flush`]): Ray's submit and the step its answer
/// decides.
async fn dispatch_granted(
    db: Db,
    fence: Fence,
    client: Option<RayClient>,
    how: How,
    msg: &Dispatch,
    granted: Applied,
) -> Result<Landed, sea_orm::DbErr> {
    let How {
        budget,
        hints,
        sealer,
        licenses,
    } = how;
    let id = msg.job.job_id;
    let (job, submission_id) = match self::granted(granted) {
        Ok(submit) => submit,
        Err(landed) => return Ok(landed),
    };
    // The stored runtime_env is sealed (DESIGN §6, "Secrets"): opened for this send
    // only, never logged. One that does not open fails the job (it cannot be sent).
    let runtime_env = match job.runtime_env.as_ref() {
        None => Ok(None),
        Some(v) => sealer.open(&job.user_id, v).map(Some),
    };
    let opened = runtime_env.as_ref().ok().and_then(Option::as_ref);
    // Packages uploaded through Ray's Jobs API go to the cluster first (ray::packages).
    let packages = match (&client, &runtime_env) {
        (Some(c), Ok(_)) => {
            crate::ray::packages::send_packages(c, opened, |uri| {
                let db = db.clone();
                async move { store::package_content(&db, &uri).await }
            })
            .await
        }
        _ => Ok(()),
    };
    // Sealed with a key this leader lacks (a rolling key rotation under way): not a
    // fault of the job's; it waits for a leader that holds the key.
    let withheld = matches!(&runtime_env, Err(crate::secrets::OpenError::UnknownKey(_)));
    let event = match (client, packages) {
        _ if withheld => {
            let e = runtime_env
                .as_ref()
                .err()
                .map(ToString::to_string)
                .unwrap_or_default();
            tracing::warn!(job_id = %id, error = %e, "not sent to Ray: the job waits (QUEUED) until a replica that holds its key leads");
            Event::RayNotReady {
                reason: format!(
                    "not sent to Ray: {e}; it waits until a replica that holds the key leads"
                ),
            }
        }
        _ if runtime_env.is_err() => {
            let e = runtime_env
                .as_ref()
                .err()
                .map(ToString::to_string)
                .unwrap_or_default();
            tracing::error!(job_id = %id, error = %e, "the job's runtime_env does not open: failed, not sent to Ray");
            Event::RayRefused {
                message: format!("not sent to Ray: {e}"),
            }
        }
        (None, _) => Event::RayRefused {
            message: format!("cluster {} is not configured", msg.cluster),
        },
        (Some(_), Err(reason)) => Event::RayNotReady {
            reason: format!("{}: {reason}", msg.cluster),
        },
        (Some(client), Ok(())) => {
            if let Some(freed) = msg.freed_at {
                let took = freed.elapsed();
                metrics::get()
                    .finish_to_dispatch
                    .observe(took.as_secs_f64());
                if took >= SLOW_STEP {
                    tracing::info!(job_id = %id, finish_to_post_ms = took.as_secs_f64() * 1e3,
                        grant_to_post_ms = (unix_now() - msg.granted_at) * 1e3,
                        "slow finish -> POST");
                }
            }
            // Behind the watcher, so that the end is known within milliseconds; the
            // row keeps the entrypoint as submitted (what /v1 and /api/ show).
            let entrypoint = match &hints {
                Some(h) => h.wrap(&job.entrypoint, &submission_id),
                None => job.entrypoint.clone(),
            };
            let submit = SubmitJob {
                submission_id,
                entrypoint,
                runtime_env: opened.cloned(),
                metadata: job
                    .metadata
                    .as_ref()
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or_default(),
                resources: crate::policy::without_licenses(
                    crate::store::resources_of(&job),
                    &licenses,
                ),
            };
            let attempt = crate::lifecycle::JobFacts::of(&job).attempt;
            let guard = || {
                let (db, fence) = (db.clone(), fence.clone());
                async move {
                    let row = store::get_job(&db, id)
                        .await
                        .map_err(|e| format!("cannot read the job: {e}"))?
                        .ok_or_else(|| "the job no longer exists".to_string())?;
                    let leads = store::fence_holds(&db, &fence)
                        .await
                        .map_err(|e| format!("cannot read the lease: {e}"))?;
                    keep_trying(&crate::lifecycle::JobFacts::of(&row), attempt, leads)
                }
            };
            let outcome = submit_idempotent(&client, &submit, &budget, guard).await;
            metrics::get()
                .dispatch_latency
                .observe((unix_now() - msg.granted_at).max(0.0));
            match &outcome {
                DispatchOutcome::Submitted { .. } => {}
                DispatchOutcome::Rejected { message } => {
                    tracing::warn!(job_id = %id, cluster = %msg.cluster, %message, "Ray refused the job");
                    metrics::get()
                        .dispatch_failed(&msg.cluster, metrics::DispatchFailure::Rejected);
                }
                DispatchOutcome::GaveUp {
                    last_error,
                    attempts,
                } => {
                    tracing::warn!(job_id = %id, cluster = %msg.cluster, attempts, error = %last_error,
                        "the cluster did not take the job; it goes back to its queue, or ends STOPPED if cancelled meanwhile");
                }
            }
            answer_event(&msg.cluster, outcome)
        }
    };
    // Ray has answered: what it answered must be recorded, so a database error here
    // (a pool timeout under load, a PostgreSQL restart) is retried with backoff rather
    // than leaving the row DISPATCHING until the next recovery. `apply` re-reads the
    // row in its transaction and is guarded on status and attempt, so a retry after a
    // failed transaction is safe; a fenced write is not retried (the new leader's
    // recovery owns the job).
    //
    // Ray's acceptance (DISPATCHING → PENDING) need not reach the disk before the next
    // write either (store::Flush::Deferred, DESIGN §3): recovery looks a DISPATCHING
    // job up in Ray. It shares the one SQLite connection with the next grant's write,
    // which would otherwise wait for its fsync.
    let flush = if matches!(event, Event::RayAccepted { .. }) {
        store::Flush::Deferred
    } else {
        store::Flush::Durable
    };
    let record = || store::apply_with(&db, &fence, id, &event, flush);
    let applied = record
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(RECORD_RETRY_MIN)
                .with_max_delay(RECORD_RETRY_MAX)
                .with_max_times(RECORD_RETRIES),
        )
        .when(|e| !store::is_fenced(e))
        .notify(|e, after| {
            metrics::db_error();
            tracing::warn!(job_id = %id, error = %e, retry_in = ?after,
                "could not record Ray's answer to the dispatch; retrying");
        })
        .await?;
    let landed = match recorded(applied) {
        Landed::Requeued(job) if withheld => Landed::Withheld(job),
        landed => landed,
    };
    if matches!(landed, Landed::Submitted(..)) {
        tracing::info!(job_id = %id, cluster = %msg.cluster, "dispatched");
    }
    Ok(landed)
}

impl Actor for Dispatcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if !self.pools.is_empty() {
            ctx.run_interval(self.admission.check_interval(), |act, ctx| {
                act.check_leases(ctx);
            });
        }
    }
}

impl Handler<Dispatch> for Dispatcher {
    type Result = ();

    #[tracing::instrument(skip_all, fields(job_id = %msg.job.job_id, user = %msg.user, cluster = %msg.cluster))]
    fn handle(&mut self, msg: Dispatch, ctx: &mut Context<Self>) {
        // Grants of one cycle arrive together (one per queue): they are written in one
        // transaction once the mailbox has been drained.
        self.batch.push(msg);
        if !self.flush_scheduled {
            self.flush_scheduled = true;
            super::after_mailbox(ctx, |act: &mut Self, ctx| act.flush(ctx));
        }
    }
}

impl Handler<super::messages::Halt> for Dispatcher {
    type Result = ();

    fn handle(&mut self, _: super::messages::Halt, ctx: &mut Context<Self>) {
        actix::ActorContext::stop(ctx);
    }
}

impl Handler<StopInRay> for Dispatcher {
    type Result = ();

    #[tracing::instrument(skip_all, fields(job_id = %msg.job_id, cluster = %msg.cluster))]
    fn handle(&mut self, msg: StopInRay, ctx: &mut Context<Self>) {
        let Some(client) = self.clients.get(&msg.cluster).cloned() else {
            return;
        };
        ctx.spawn(
            super::off_actor(async move {
                match client.stop_job(&msg.submission_id).await {
                    Ok(stopped) => tracing::info!(stopped, submission_id = %msg.submission_id, "stop sent to Ray"),
                    Err(e) => tracing::warn!(error = %e, "stop request to Ray failed; the monitor retries"),
                }
            })
            .into_actor(self)
            .map(|_, _, _| ()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job its leader cannot open (key missing) goes back to its user's queue held,
    /// with no back-off of the cluster (it is not the cluster's fault), unlike a job
    /// the cluster did not take (issue 43 §3).
    #[test]
    fn a_withheld_job_is_requeued_held_and_the_cluster_is_not_backed_off() {
        let row = crate::actors::model::initial_row();
        let then = after("c", row.id, "u", &Landed::Withheld(Box::new(row.clone())));
        assert!(matches!(
            then.as_slice(),
            [Then::Ended(DispatchEnded {
                requeue: Some(_),
                held: true,
                ..
            })]
        ));
        let then = after("c", row.id, "u", &Landed::Requeued(Box::new(row)));
        assert!(matches!(
            then.as_slice(),
            [
                Then::Unreachable(_),
                Then::Ended(DispatchEnded { held: false, .. })
            ]
        ));
    }
}
