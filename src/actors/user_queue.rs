//! `UserQueue`: one actor per user holding its QUEUED jobs in order — `priority`
//! (higher first), then `submitted_at`, then id — and telling the arbiter whenever the
//! grantable front of the queue (its window) changes.
//!
//! It holds the policy's summary of each job ([`QueuedJob`]: id, resources, priority,
//! submit time), not the entrypoint or runtime_env: the dispatcher reads those from the
//! database when it submits. A *held* job (an earlier Ray attempt not yet confirmed
//! stopped) keeps its place but is left out of the window until [`Release`].

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

use actix::{Actor, Context, Handler};
use entity::job;

use super::messages::{
    ArbiterHandle, Demand, Dispatch, DispatcherHandle, Enqueue, Grant, GrantDeclined, QueueHandle,
    Release, RemoveQueued,
};
use crate::policy::{JobId, QueuedJob, Resources};

/// Queue order: priority (higher first), submit time (microseconds), id.
type QueueKey = (Reverse<i32>, i64, JobId);

/// The policy's summary of a job row: resources in cores/GPUs/bytes, submit time in
/// seconds since the Unix epoch.
pub fn summary(j: &job::Model) -> QueuedJob {
    QueuedJob {
        job_id: j.id,
        resources: crate::store::resources_of(j),
        priority: j.priority,
        submitted_at: j.submitted_at.timestamp_micros() as f64 / 1e6,
        // `None` here means "the configured default": the arbiter fills it in.
        runtime_estimate: j.max_runtime_s.map(|s| s as f64),
    }
}

/// A queued job as the queue keeps it: its [`QueuedJob`] less the id (the map's key)
/// and with the runtime estimate as `NaN` for "none": 48 bytes (BENCHMARKS.md, "Scale",
/// has the memory per queued job).
struct Entry {
    resources: Resources,
    submitted_at: f64,
    /// `NaN`: none (the arbiter fills in the configured default).
    runtime_estimate: f64,
    priority: i32,
    held: bool,
}

impl Entry {
    fn new(job: &QueuedJob, held: bool) -> Entry {
        Entry {
            resources: job.resources,
            submitted_at: job.submitted_at,
            runtime_estimate: job.runtime_estimate.unwrap_or(f64::NAN),
            priority: job.priority,
            held,
        }
    }

    fn job(&self, job_id: JobId) -> QueuedJob {
        QueuedJob {
            job_id,
            resources: self.resources,
            priority: self.priority,
            submitted_at: self.submitted_at,
            runtime_estimate: Some(self.runtime_estimate).filter(|e| !e.is_nan()),
        }
    }

    fn key(&self, job_id: JobId) -> QueueKey {
        queue_key(self.priority, self.submitted_at, job_id)
    }
}

fn queue_key(priority: i32, submitted_at: f64, job_id: JobId) -> QueueKey {
    (
        Reverse(priority),
        (submitted_at * 1e6).round() as i64,
        job_id,
    )
}

/// The queue of one user.
pub struct UserQueue {
    user: String,
    window: usize,
    /// Queue order; the key ends with the job's id.
    order: BTreeSet<QueueKey>,
    jobs: HashMap<JobId, Entry>,
    arbiter: ArbiterHandle,
    dispatcher: DispatcherHandle,
    last_sent: Option<Vec<JobId>>,
}

impl UserQueue {
    /// An empty queue for `user` that shows the arbiter its first `window` grantable
    /// jobs.
    pub fn new(
        user: String,
        window: usize,
        arbiter: ArbiterHandle,
        dispatcher: DispatcherHandle,
    ) -> Self {
        UserQueue {
            user,
            window: window.max(1),
            order: BTreeSet::new(),
            jobs: HashMap::new(),
            arbiter,
            dispatcher,
            last_sent: None,
        }
    }

    /// Starts a queue actor and returns its handle.
    pub fn spawn(
        user: String,
        window: usize,
        arbiter: ArbiterHandle,
        dispatcher: DispatcherHandle,
    ) -> QueueHandle {
        let addr = UserQueue::new(user, window, arbiter, dispatcher).start();
        QueueHandle {
            enqueue: addr.clone().recipient(),
            grant: addr.clone().recipient(),
            remove: addr.clone().recipient(),
            release: addr.recipient(),
        }
    }

    /// Sends `Demand` if the window differs from the one last sent.
    fn announce(&mut self) {
        let ids: Vec<JobId> = self
            .order
            .iter()
            .map(|k| k.2)
            .filter(|id| self.jobs.get(id).is_some_and(|e| !e.held))
            .take(self.window)
            .collect();
        if self.last_sent.as_ref() == Some(&ids) {
            return;
        }
        let window = ids
            .iter()
            .filter_map(|id| self.jobs.get(id).map(|e| e.job(*id)))
            .collect();
        self.last_sent = Some(ids);
        self.arbiter.demand.do_send(Demand {
            user: self.user.clone(),
            window,
        });
    }

    /// Whether a new job with `key` comes after the whole window last sent, and that
    /// window is full: then the window does not change.
    fn behind_full_window(&self, key: &QueueKey) -> bool {
        let Some(last) = self.last_sent.as_ref().filter(|w| w.len() >= self.window) else {
            return false;
        };
        last.last()
            .and_then(|id| self.jobs.get(id).map(|e| e.key(*id)))
            .is_some_and(|last_key| *key > last_key)
    }

    fn remove(&mut self, id: JobId) -> Option<QueuedJob> {
        let e = self.jobs.remove(&id)?;
        self.order.remove(&e.key(id));
        Some(e.job(id))
    }
}

impl Actor for UserQueue {
    type Context = Context<Self>;
}

impl Handler<Enqueue> for UserQueue {
    type Result = ();

    fn handle(&mut self, msg: Enqueue, _: &mut Context<Self>) {
        if let Some(e) = self.jobs.get_mut(&msg.job.job_id) {
            e.held = msg.held;
        } else {
            let entry = Entry::new(&msg.job, msg.held);
            let key = entry.key(msg.job.job_id);
            let behind_window = self.behind_full_window(&key);
            self.order.insert(key);
            self.jobs.insert(msg.job.job_id, entry);
            if behind_window || msg.held {
                // The window is unchanged: nothing to compare or send (a queue loaded
                // at start gets its jobs in order, almost all of them here).
                return;
            }
        }
        self.announce();
    }
}

impl Handler<Grant> for UserQueue {
    type Result = ();

    fn handle(&mut self, msg: Grant, _: &mut Context<Self>) {
        let grantable = self.jobs.get(&msg.job_id).is_some_and(|e| !e.held);
        match grantable.then(|| self.remove(msg.job_id)).flatten() {
            Some(job) => {
                self.dispatcher.dispatch.do_send(Dispatch {
                    user: self.user.clone(),
                    job,
                    cluster: msg.cluster,
                    granted_at: msg.granted_at,
                    freed_at: msg.freed_at,
                });
                self.announce();
            }
            None => {
                tracing::debug!(user = %self.user, job_id = %msg.job_id, "grant for a job no longer grantable");
                self.arbiter
                    .grant_declined
                    .do_send(GrantDeclined { job_id: msg.job_id });
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

impl Handler<Release> for UserQueue {
    type Result = ();

    fn handle(&mut self, msg: Release, _: &mut Context<Self>) {
        if let Some(e) = self.jobs.get_mut(&msg.job_id) {
            e.held = false;
            self.announce();
        }
    }
}
