//! The dispatcher's part in preemption (DESIGN §3, "Preemption"): it writes the
//! lifecycle's `Preempt` step, sends Ray's stop on the cancel's path and hands the
//! row to the monitor, or tells the arbiter that the preemption was not carried out.

use actix::{ActorFutureExt, AsyncContext, Context, Handler, WrapFuture};

use super::Dispatcher;
use crate::actors::messages::{Preempt, PreemptDeclined, StopInRay, Track};
use crate::actors::monitor::book::Origin;
use crate::actors::unix_now;
use crate::lifecycle::{Event, RayCall};
use crate::metrics;
use crate::store::{self, Applied};

impl Dispatcher {
    /// The label of `user` on the preemption metrics: its id while fewer than
    /// `telemetry.per_user_metrics_max` users have one, else `_other`.
    fn user_label(&mut self, user: &str) -> String {
        if self.preempted_users.contains(user) {
            return user.to_string();
        }
        if self.preempted_users.len() < self.per_user_metrics_max {
            self.preempted_users.insert(user.to_string());
            return user.to_string();
        }
        metrics::OTHER_USERS.to_string()
    }
}

/// What a preemption's step leads to (the dispatcher's `Preempt` handler; the protocol
/// model runs it too): when it was written, Ray's stop of the attempt (on the job's
/// cluster, else `cluster`) and the row for the monitor to follow; `None` when it was
/// not (the arbiter is told).
pub(crate) fn preempted(
    applied: &Applied,
    cluster: &str,
) -> Option<(Option<StopInRay>, entity::job::Model)> {
    let Applied::Changed { job, step } = applied else {
        return None;
    };
    let stop = match &step.ray {
        Some(RayCall::Stop { submission_id }) => Some(StopInRay {
            job_id: job.id,
            cluster: job.cluster.clone().unwrap_or_else(|| cluster.to_string()),
            submission_id: submission_id.clone(),
        }),
        _ => None,
    };
    Some((stop, job.clone()))
}

impl Handler<Preempt> for Dispatcher {
    type Result = ();

    /// Writes the lifecycle's `Preempt` step (fenced, as every write of the leader)
    /// and sends Ray's stop, the path a cancel's stop takes; the monitor follows the
    /// job (its row now says a preemption's stop is under way) until Ray says the
    /// attempt ended. A step not written (the job ended, is being stopped already, or
    /// Ray does not run it yet) is handed back to the arbiter.
    #[tracing::instrument(skip_all, fields(job_id = %msg.preemption.job_id, user = %msg.preemption.user))]
    fn handle(&mut self, msg: Preempt, ctx: &mut Context<Self>) {
        let p = msg.preemption;
        let lost = p.resources.cpu * (unix_now() - p.started_at).max(0.0);
        let event = Event::Preempt {
            for_job: p.for_job,
            for_user: p.for_user.clone(),
            lost_core_seconds: lost,
        };
        let (db, fence, id) = (self.db.clone(), self.fence.clone(), p.job_id);
        let fut =
            crate::actors::off_actor(async move { store::apply(&db, &fence, id, &event).await });
        ctx.spawn(fut.into_actor(self).map(move |done, act, ctx| {
            let applied = match done {
                Some(Ok(applied)) => applied,
                Some(Err(e)) => {
                    if !store::is_fenced(&e) {
                        metrics::db_error();
                        tracing::warn!(error = %e, "could not write the preemption; not carried out");
                    }
                    act.arbiter
                        .preempt_declined
                        .do_send(PreemptDeclined { job_id: id });
                    return;
                }
                None => return,
            };
            let Some((stop, job)) = preempted(&applied, &p.cluster) else {
                act.arbiter
                    .preempt_declined
                    .do_send(PreemptDeclined { job_id: id });
                return;
            };
            tracing::info!(for_job = %p.for_job, for_user = %p.for_user,
                core_seconds = lost, "preempted; stop sent to Ray");
            let label = act.user_label(&p.user);
            metrics::get().preempted(&label, lost);
            if let Some(stop) = stop {
                ctx.notify(stop);
            }
            // A pool job's runner stops it and reports (its `job.preempted` event);
            // Ray never has it, so the monitor does not follow it.
            if job.pool.is_none() {
                act.monitor.track.do_send(Track {
                    job,
                    origin: Origin::Changed,
                });
            }
        }));
    }
}
