//! Messages that several actors exchange (DESIGN §1). Each has named fields; the
//! sender and receiver are named in its doc.

use actix::Message;
use entity::{job, user, JobStatus};

use crate::policy::{JobId, QueuedJob, Resources};

/// API, recovery or a failed dispatch → arbiter → the user's `UserQueue`: a job is
/// (again) QUEUED. The job row is already committed as QUEUED.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Enqueue {
    pub job: job::Model,
}

/// API → arbiter → `UserQueue`: a QUEUED job was cancelled (already STOPPED in the
/// database); drop it from the queue.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct RemoveQueued {
    pub user: String,
    pub job_id: JobId,
}

/// `UserQueue` → arbiter: the user's queue head changed. `window` is the first
/// `scheduler.queue_window` jobs in queue order (empty when the queue is empty);
/// `queued` is the whole queue's length.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Demand {
    pub user: String,
    pub window: Vec<QueuedJob>,
    pub queued: usize,
}

/// Arbiter → `UserQueue`: the policy granted `job_id` on `cluster`. The queue pops it
/// and forwards it to the dispatcher, or answers [`GrantDeclined`] if it is gone.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Grant {
    pub job_id: JobId,
    pub cluster: String,
    /// Seconds since the Unix epoch at which the cycle granted it.
    pub granted_at: f64,
}

/// `UserQueue` → arbiter: a granted job was no longer queued (a cancel raced the
/// grant); release what the grant reserved.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct GrantDeclined {
    pub user: String,
    pub job_id: JobId,
}

/// `UserQueue` → dispatcher: submit this job to `cluster`.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Dispatch {
    pub job: job::Model,
    pub cluster: String,
    /// Seconds since the Unix epoch of the grant (dispatch latency starts here).
    pub granted_at: f64,
}

/// Dispatcher → arbiter: the job did not reach Ray. With `requeue` it is QUEUED again
/// (the database says so already) and goes back to its place; otherwise it ended
/// (FAILED or STOPPED). Either way the grant's reservation is released.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct DispatchFailed {
    pub job_id: JobId,
    pub requeue: Option<job::Model>,
}

/// Dispatcher or recovery → monitor: follow this outstanding job on its cluster.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Track {
    pub job: job::Model,
}

/// Dispatcher → monitor: the cluster failed the retry budget; mark it unhealthy until
/// it answers a poll again.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct ClusterUnreachable {
    pub cluster: String,
}

/// Monitor → arbiter: a cluster's health and capacity as last polled (cores, GPUs,
/// bytes). `used` is Ray's report, which lags by seconds.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct CapacityChanged {
    pub cluster: String,
    pub healthy: bool,
    pub total: Resources,
    pub used: Resources,
}

/// Monitor → arbiter: an outstanding job ended (the terminal status is committed).
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct JobFinished {
    pub job_id: JobId,
    pub user: String,
    pub status: JobStatus,
}

/// Monitor → arbiter: a recovered DISPATCHING job turned out never to have reached
/// Ray; it is QUEUED again in the database.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Requeued {
    pub job: job::Model,
}

/// API → arbiter: a user's settings changed (weight, limits, pause). Answered once the
/// arbiter's state holds them, so the change is in force before the next cycle.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct UserSettings {
    pub user: user::Model,
}

/// API → dispatcher: stop an outstanding job (cancel). `reason` becomes the job's
/// message when Ray confirms STOPPED.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct StopJob {
    pub job_id: JobId,
    pub reason: String,
}

/// Dispatcher → monitor: a stop was requested for this job; use `reason` as its
/// message when Ray reports STOPPED.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct StopRequested {
    pub job_id: JobId,
    pub reason: String,
}
