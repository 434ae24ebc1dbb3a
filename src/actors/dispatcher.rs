//! `Dispatcher`: submits granted jobs to Ray exactly once and writes their status.
//!
//! Per job: QUEUED → DISPATCHING in the database (guarded: a cancel that won the race
//! stops the dispatch), then [`crate::ray::submit_idempotent`] with `submission_id` =
//! job id. Submitted → PENDING and the monitor tracks it; Ray refused (4xx) → FAILED
//! with Ray's message; retry budget spent → back to QUEUED at its old place and the
//! cluster is reported unreachable. Dispatches run concurrently; the actor keeps which
//! are in flight so a cancel during one is carried out when it lands.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use actix::{Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, WrapFuture};
use entity::JobStatus;

use super::arbiter::{unix_now, FairShareArbiter};
use super::messages::{
    ClusterUnreachable, Dispatch, DispatchFailed, StopJob, StopRequested, Track,
};
use super::monitor::RayCapacityMonitor;
use crate::config::Settings;
use crate::metrics;
use crate::policy::JobId;
use crate::ray::{submit_idempotent, DispatchOutcome, RayClient, RetryBudget, SubmitJob};
use crate::store::{self, Db, TransitionFields};

/// The dispatcher.
pub struct Dispatcher {
    db: Db,
    clients: Arc<BTreeMap<String, RayClient>>,
    budget: RetryBudget,
    arbiter: Addr<FairShareArbiter>,
    monitor: Addr<RayCapacityMonitor>,
    in_flight: HashSet<JobId>,
    stop_after_submit: HashSet<JobId>,
}

/// What one dispatch ended as, for the actor to act on.
enum Landed {
    Submitted(entity::job::Model),
    Requeued(entity::job::Model, String),
    Ended,
}

impl Dispatcher {
    /// A dispatcher over the configured clusters' clients.
    pub fn new(
        settings: &Settings,
        db: Db,
        clients: Arc<BTreeMap<String, RayClient>>,
        arbiter: Addr<FairShareArbiter>,
        monitor: Addr<RayCapacityMonitor>,
    ) -> Self {
        let d = &settings.dispatcher;
        Dispatcher {
            db,
            clients,
            budget: RetryBudget {
                attempts: d.retry_attempts,
                initial_backoff: d.retry_initial_backoff,
                max_backoff: d.retry_max_backoff,
            },
            arbiter,
            monitor,
            in_flight: HashSet::new(),
            stop_after_submit: HashSet::new(),
        }
    }
}

/// Carries out one dispatch; returns what happened. All database writes happen here,
/// before anything is announced.
async fn dispatch_one(
    db: Db,
    client: Option<RayClient>,
    budget: RetryBudget,
    msg: Dispatch,
) -> Result<Landed, sea_orm::DbErr> {
    let job = msg.job;
    let cluster = msg.cluster;
    let m = metrics::get();
    let Some(dispatching) = store::transition(
        &db,
        job.id,
        &[JobStatus::Queued],
        JobStatus::Dispatching,
        Some(format!("granted on cluster {cluster}")),
        TransitionFields {
            cluster: Some(cluster.clone()),
            dispatched_at: Some(store::now()),
            ..Default::default()
        },
    )
    .await?
    else {
        // Cancelled (or otherwise moved) between grant and dispatch.
        return Ok(Landed::Ended);
    };
    let Some(client) = client else {
        let failed = store::transition(
            &db,
            job.id,
            &[JobStatus::Dispatching],
            JobStatus::Failed,
            Some("unknown cluster".into()),
            TransitionFields {
                message: Some(format!("cluster {cluster} is not configured")),
                ..Default::default()
            },
        )
        .await?;
        if failed.is_some() {
            m.jobs_finished.with_label_values(&["FAILED"]).inc();
        }
        return Ok(Landed::Ended);
    };
    let metadata: BTreeMap<String, String> = dispatching
        .metadata
        .as_ref()
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let submit = SubmitJob {
        submission_id: job.id.to_string(),
        entrypoint: dispatching.entrypoint.clone(),
        runtime_env: dispatching.runtime_env.clone(),
        metadata,
        num_cpus: dispatching.cpu,
        num_gpus: dispatching.gpu,
        memory_bytes: dispatching.memory_bytes.max(0) as u64,
    };
    let outcome = submit_idempotent(&client, &submit, &budget).await;
    m.dispatch_latency
        .observe((unix_now() - msg.granted_at).max(0.0));
    match outcome {
        DispatchOutcome::Submitted {
            already_existed,
            attempts,
        } => {
            m.jobs_dispatched.with_label_values(&[&cluster]).inc();
            let detail = format!("submitted to Ray cluster {cluster} (attempts: {attempts}, already existed: {already_existed})");
            let pending = store::transition(
                &db,
                job.id,
                &[JobStatus::Dispatching],
                JobStatus::Pending,
                Some(detail),
                TransitionFields::default(),
            )
            .await?;
            tracing::info!(job_id = %job.id, cluster = %cluster, attempts, "dispatched");
            Ok(pending.map(Landed::Submitted).unwrap_or(Landed::Ended))
        }
        DispatchOutcome::Rejected { message } => {
            m.dispatch_failures
                .with_label_values(&[&cluster, "rejected"])
                .inc();
            tracing::warn!(job_id = %job.id, cluster = %cluster, %message, "Ray refused the job");
            let failed = store::transition(
                &db,
                job.id,
                &[JobStatus::Dispatching],
                JobStatus::Failed,
                Some("Ray refused the submission".into()),
                TransitionFields {
                    message: Some(format!("Ray refused the job: {message}")),
                    ..Default::default()
                },
            )
            .await?;
            if failed.is_some() {
                m.jobs_finished.with_label_values(&["FAILED"]).inc();
            }
            Ok(Landed::Ended)
        }
        DispatchOutcome::GaveUp {
            last_error,
            attempts,
        } => {
            m.dispatch_failures
                .with_label_values(&[&cluster, "gave_up"])
                .inc();
            tracing::warn!(job_id = %job.id, cluster = %cluster, attempts, error = %last_error, "dispatch gave up; job back to its queue");
            let queued = store::transition(
                &db,
                job.id,
                &[JobStatus::Dispatching],
                JobStatus::Queued,
                Some(format!(
                    "dispatch to {cluster} gave up after {attempts} attempts: {last_error}"
                )),
                TransitionFields::default(),
            )
            .await?;
            Ok(match queued {
                Some(j) => Landed::Requeued(j, cluster),
                None => Landed::Ended,
            })
        }
    }
}

impl Actor for Dispatcher {
    type Context = Context<Self>;
}

impl Handler<Dispatch> for Dispatcher {
    type Result = ();

    #[tracing::instrument(skip_all, fields(job_id = %msg.job.id, user = %msg.job.user_id, cluster = %msg.cluster))]
    fn handle(&mut self, msg: Dispatch, ctx: &mut Context<Self>) {
        let job_id = msg.job.id;
        self.in_flight.insert(job_id);
        let client = self.clients.get(&msg.cluster).cloned();
        let fut = dispatch_one(self.db.clone(), client, self.budget, msg);
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
            act.in_flight.remove(&job_id);
            let stop = act.stop_after_submit.remove(&job_id);
            match res {
                Ok(Landed::Submitted(job)) => {
                    act.monitor.do_send(Track { job: job.clone() });
                    if stop {
                        ctx.notify(StopJob {
                            job_id,
                            reason: "cancelled by request".into(),
                        });
                    }
                }
                Ok(Landed::Requeued(job, cluster)) => {
                    act.monitor.do_send(ClusterUnreachable { cluster });
                    if stop {
                        // Cancelled while its dispatch was failing: it ends here instead.
                        let db = act.db.clone();
                        let arbiter = act.arbiter.clone();
                        ctx.spawn(
                            async move {
                                let stopped = store::transition(
                                    &db,
                                    job_id,
                                    &[JobStatus::Queued],
                                    JobStatus::Stopped,
                                    Some("cancelled while dispatching".into()),
                                    TransitionFields {
                                        message: Some("cancelled by request".into()),
                                        ..Default::default()
                                    },
                                )
                                .await;
                                let requeue = match stopped {
                                    Ok(Some(_)) => None,
                                    _ => Some(job),
                                };
                                arbiter.do_send(DispatchFailed { job_id, requeue });
                            }
                            .into_actor(act),
                        );
                    } else {
                        act.arbiter.do_send(DispatchFailed {
                            job_id,
                            requeue: Some(job),
                        });
                    }
                }
                Ok(Landed::Ended) => act.arbiter.do_send(DispatchFailed {
                    job_id,
                    requeue: None,
                }),
                Err(e) => {
                    // The database failed mid-dispatch. The job row says where it is; the
                    // reservation stays until recovery or the monitor settles it.
                    metrics::db_error();
                    tracing::error!(job_id = %job_id, error = %e, "database error during dispatch");
                }
            }
        }));
    }
}

impl Handler<StopJob> for Dispatcher {
    type Result = ();

    #[tracing::instrument(skip_all, fields(job_id = %msg.job_id))]
    fn handle(&mut self, msg: StopJob, ctx: &mut Context<Self>) {
        if self.in_flight.contains(&msg.job_id) {
            self.stop_after_submit.insert(msg.job_id);
            return;
        }
        self.monitor.do_send(StopRequested {
            job_id: msg.job_id,
            reason: msg.reason.clone(),
        });
        let db = self.db.clone();
        let clients = self.clients.clone();
        ctx.spawn(
            async move {
                let job = match store::get_job(&db, msg.job_id).await {
                    Ok(Some(j)) => j,
                    Ok(None) => return,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot read job to stop");
                        return;
                    }
                };
                let Some(client) = job.cluster.as_ref().and_then(|c| clients.get(c)) else {
                    return;
                };
                match client.stop_job(&job.id.to_string()).await {
                    Ok(stopped) => tracing::info!(stopped, reason = %msg.reason, "stop sent to Ray"),
                    Err(e) => tracing::warn!(error = %e, "stop request to Ray failed; the monitor retries"),
                }
            }
            .into_actor(self),
        );
    }
}
