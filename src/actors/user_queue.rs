//! `UserQueue`: one actor per user holding its QUEUED jobs in order — `priority`
//! (higher first), then `submitted_at`, then id — and telling the arbiter whenever the
//! head of the queue changes.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use actix::{Actor, Addr, Context, Handler};
use chrono::{DateTime, Utc};
use entity::job;

use super::arbiter::FairShareArbiter;
use super::dispatcher::Dispatcher;
use super::messages::{Demand, Dispatch, Enqueue, Grant, GrantDeclined, RemoveQueued};
use crate::policy::{JobId, QueuedJob, Resources};

type QueueKey = (Reverse<i32>, DateTime<Utc>, JobId);

/// The queue of one user.
pub struct UserQueue {
    user: String,
    window: usize,
    order: BTreeMap<QueueKey, JobId>,
    jobs: HashMap<JobId, job::Model>,
    arbiter: Addr<FairShareArbiter>,
    dispatcher: Addr<Dispatcher>,
    last_sent: Option<Vec<JobId>>,
    /// `scheduler.default_max_runtime`, seconds: the runtime estimate of a job
    /// without `max_runtime_s`.
    default_max_runtime: f64,
}

impl UserQueue {
    /// An empty queue for `user` that shows the arbiter its first `window` jobs.
    pub fn new(
        user: String,
        window: usize,
        arbiter: Addr<FairShareArbiter>,
        dispatcher: Addr<Dispatcher>,
        default_max_runtime: f64,
    ) -> Self {
        UserQueue {
            user,
            window: window.max(1),
            order: BTreeMap::new(),
            jobs: HashMap::new(),
            arbiter,
            dispatcher,
            last_sent: None,
            default_max_runtime,
        }
    }

    fn key(j: &job::Model) -> QueueKey {
        (Reverse(j.priority), j.submitted_at, j.id)
    }

    /// The policy's summary of a job: resources in cores/GPUs/bytes, submit time in
    /// seconds since the Unix epoch, runtime estimate in seconds (`max_runtime_s`,
    /// else `default_max_runtime`).
    pub fn summary(j: &job::Model, default_max_runtime: f64) -> QueuedJob {
        QueuedJob {
            job_id: j.id,
            resources: Resources {
                cpu: j.cpu,
                gpu: j.gpu,
                memory_bytes: j.memory_bytes.max(0) as f64,
            },
            priority: j.priority,
            submitted_at: j.submitted_at.timestamp_micros() as f64 / 1e6,
            runtime_estimate: Some(j.max_runtime_s.map_or(default_max_runtime, |s| s as f64)),
        }
    }

    /// Sends `Demand` if the window differs from the one last sent.
    fn announce(&mut self) {
        let ids: Vec<JobId> = self.order.values().take(self.window).copied().collect();
        if self.last_sent.as_ref() == Some(&ids) {
            return;
        }
        let window = ids
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .map(|j| Self::summary(j, self.default_max_runtime))
            .collect();
        self.last_sent = Some(ids);
        self.arbiter.do_send(Demand {
            user: self.user.clone(),
            window,
            queued: self.jobs.len(),
        });
    }

    fn remove(&mut self, id: JobId) -> Option<job::Model> {
        let j = self.jobs.remove(&id)?;
        self.order.remove(&Self::key(&j));
        Some(j)
    }
}

impl Actor for UserQueue {
    type Context = Context<Self>;
}

impl Handler<Enqueue> for UserQueue {
    type Result = ();

    fn handle(&mut self, msg: Enqueue, _: &mut Context<Self>) {
        let j = msg.job;
        if self.jobs.contains_key(&j.id) {
            return;
        }
        self.order.insert(Self::key(&j), j.id);
        self.jobs.insert(j.id, j);
        self.announce();
    }
}

impl Handler<Grant> for UserQueue {
    type Result = ();

    fn handle(&mut self, msg: Grant, _: &mut Context<Self>) {
        match self.remove(msg.job_id) {
            Some(job) => {
                self.dispatcher.do_send(Dispatch {
                    job,
                    cluster: msg.cluster,
                    granted_at: msg.granted_at,
                });
                self.announce();
            }
            None => {
                tracing::debug!(user = %self.user, job_id = %msg.job_id, "grant for a job no longer queued");
                self.arbiter.do_send(GrantDeclined {
                    user: self.user.clone(),
                    job_id: msg.job_id,
                });
            }
        }
    }
}

impl Handler<RemoveQueued> for UserQueue {
    type Result = ();

    fn handle(&mut self, msg: RemoveQueued, _: &mut Context<Self>) {
        if self.remove(msg.job_id).is_some() {
            self.announce();
        }
    }
}
