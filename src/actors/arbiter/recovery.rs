//! The arbiter's recovery messages (DESIGN §5 "Recovery"), sent by
//! `Scheduler::start` before the service reports ready: the users and outstanding
//! jobs first, then the QUEUED jobs in chunks, then that loading is done.

use actix::{Context, Handler, Message};
use entity::user;

use super::FairShareArbiter;
use crate::actors::unix_now;
use crate::policy::QueuedJob;

/// Recovery → arbiter: users from the database, outstanding jobs' reservations; then
/// the arbiter is ready.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Recovered;

/// Recovery → arbiter, first: the users' settings and the reservations of every
/// outstanding job (before the monitor follows them, so a job that ends at once
/// releases what it holds).
#[derive(Message)]
#[rtype(result = "()")]
pub struct RecoveredOutstanding {
    /// Every group (DESIGN §2 "Groups"), taken before the users that name them.
    pub groups: Vec<entity::group::Model>,
    pub users: Vec<user::Model>,
    pub outstanding: Vec<entity::job::Model>,
}

/// Recovery → arbiter: a chunk of QUEUED jobs read from the database, grouped by user:
/// `(user, [(job, held)])`. The arbiter counts them and hands each user's part to its
/// queue in one message.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EnqueueMany {
    pub users: Vec<(String, Vec<(QueuedJob, bool)>)>,
}

impl Handler<RecoveredOutstanding> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: RecoveredOutstanding, _: &mut Context<Self>) {
        let mut groups: Vec<_> = msg.groups.iter().map(crate::store::group_view).collect();
        groups.sort_by(|a, b| a.path.cmp(&b.path));
        self.ledger.set_groups(&groups);
        for u in &msg.users {
            self.apply_settings(u);
        }
        let default_runtime = self.settings.scheduler.default_max_runtime.as_secs_f64();
        let now = unix_now();
        for j in msg.outstanding {
            if let Some(cluster) = j.cluster.clone() {
                let summary = crate::store::summary(&j);
                let granted_at = j
                    .dispatched_at
                    .or(j.started_at)
                    .map_or(now, |t| t.timestamp_micros() as f64 / 1e6);
                let estimate = summary.runtime_estimate.unwrap_or(default_runtime);
                self.entry(&j.user_id);
                if j.pool.is_some() {
                    // A pool (also one removed from the configuration since: its jobs
                    // stay booked there until their runners report) is never taken for
                    // a Ray cluster (found by a tester: `/v1/scheduler` showed it so).
                    self.ledger.set_pool(now, &cluster);
                }
                self.ledger.start(
                    now,
                    j.id,
                    &j.user_id,
                    &cluster,
                    summary.resources,
                    Some(granted_at + estimate),
                );
                // A preemptible job with no stop under way may be preempted again
                // (one whose preemption's stop was in flight finishes its requeue:
                // the monitor follows it and its row says so).
                if j.pool.is_some() {
                    self.admitted
                        .insert(j.id, u32::try_from(j.attempt).unwrap_or(1));
                }
                if j.preemptible && j.stop_reason.is_none() {
                    let started = j
                        .started_at
                        .or(j.dispatched_at)
                        .map_or(now, |t| t.timestamp_micros() as f64 / 1e6);
                    self.ledger
                        .set_preemptible(j.id, started, summary.preemptions);
                }
            }
        }
    }
}

impl Handler<EnqueueMany> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: EnqueueMany, _: &mut Context<Self>) {
        for (user, jobs) in msg.users {
            self.enqueue_all(&user, jobs);
        }
    }
}

impl Handler<Recovered> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, _: Recovered, ctx: &mut Context<Self>) {
        self.loading = None;
        self.ready = true;
        // The queues were filled in order, each leaving its B-tree half empty: each
        // rebuilds it full once it has handled the jobs sent before (its mailbox is
        // first in, first out).
        for q in self.queues.values() {
            q.compact.do_send(crate::actors::messages::Compact);
        }
        self.request_cycle(ctx);
    }
}
