//! Messages that the actors exchange (DESIGN §1), and the handles through which they
//! reach each other. Each message has named fields; its sender and receiver are named in
//! its doc. No actor names another's type: each holds the [`Recipient`]s it sends to,
//! built once at start-up in [`super::Scheduler::start`].

use actix::{Message, Recipient};
use entity::{job, user};

use crate::policy::{JobId, QueuedJob, Resources};

/// API, recovery, a failed dispatch or the monitor → arbiter (→ the user's `UserQueue`
/// as [`EnqueueBatch`]): a job is (again) QUEUED; the database says so already. `held`: an earlier Ray attempt
/// of it is not yet confirmed stopped, so it keeps its place but is not offered to the
/// policy until [`Release`].
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Enqueue {
    pub user: String,
    pub job: QueuedJob,
    pub held: bool,
}

/// Arbiter → the user's `UserQueue`: QUEUED jobs of that user, `(job, held)` each (see
/// [`Enqueue`]), counted by the arbiter already; one message for a job from the API, one
/// per user and chunk while recovery loads the queues.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct EnqueueBatch {
    pub jobs: Vec<(QueuedJob, bool)>,
}

/// Where a job sits in its user's queue: its priority and its submit time in
/// microseconds since the Unix epoch (with the id, the queue's key). A message that
/// removes a job carries it when the sender knows it, so the queue needs no map from
/// id to place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuePlace {
    pub priority: i32,
    /// Microseconds since the Unix epoch.
    pub submitted_at_us: i64,
}

impl QueuePlace {
    /// The place of a job as the policy sees it (`submitted_at` in seconds, rounded
    /// to the microsecond).
    pub fn of(job: &QueuedJob) -> QueuePlace {
        QueuePlace {
            priority: job.priority,
            submitted_at_us: (job.submitted_at * 1e6).round() as i64,
        }
    }

    /// The place of a job row.
    pub fn of_row(j: &job::Model) -> QueuePlace {
        QueuePlace {
            priority: j.priority,
            submitted_at_us: j.submitted_at.timestamp_micros(),
        }
    }
}

/// API or monitor → arbiter → `UserQueue`: a QUEUED job ended (cancelled, or an earlier
/// attempt finished its work); drop it from the queue. `place`: where it sits, when the
/// sender knows (without it the queue looks for the id, which costs a scan when the job
/// is neither held nor in the window it last announced).
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct RemoveQueued {
    pub user: String,
    pub job_id: JobId,
    pub place: Option<QueuePlace>,
}

/// Monitor → arbiter → `UserQueue`: Ray confirmed that a held job's earlier attempt
/// ended; the job may be granted again.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Release {
    pub user: String,
    pub job_id: JobId,
}

/// `UserQueue` → arbiter: the first `scheduler.queue_window` grantable jobs of the
/// user's queue, in queue order (empty when none), whenever they change.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Demand {
    pub user: String,
    pub window: Vec<QueuedJob>,
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
    /// When the monitor saw the job finish whose capacity this cycle handed out.
    pub freed_at: Option<std::time::Instant>,
}

/// `UserQueue` → arbiter: a granted job was no longer queued (a cancel raced the
/// grant); release what the grant reserved.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct GrantDeclined {
    pub job_id: JobId,
}

/// `UserQueue` → dispatcher: submit this job to `cluster`. The dispatcher reads the
/// rest of the job (entrypoint, runtime_env, metadata) from the database.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Dispatch {
    pub user: String,
    pub job: QueuedJob,
    pub cluster: String,
    /// Seconds since the Unix epoch of the grant (dispatch latency starts here).
    pub granted_at: f64,
    /// When the monitor saw the finish that freed the capacity (see [`Grant`]).
    pub freed_at: Option<std::time::Instant>,
}

/// Dispatcher → arbiter: the dispatch did not leave an outstanding job: the grant's
/// reservation is released. With `requeue` the job is QUEUED again (the database says
/// so) and goes back to its place; otherwise it ended or someone else moved it.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct DispatchEnded {
    pub user: String,
    pub job_id: JobId,
    pub requeue: Option<QueuedJob>,
    /// With `requeue`: an earlier attempt is alive in Ray; queue it held.
    pub held: bool,
}

/// Dispatcher, recovery or API → monitor: follow this outstanding job (its current
/// attempt) on its cluster; sent again whenever the row changed (e.g. a stop asked).
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Track {
    pub job: job::Model,
    /// Why: the monitor follows a DISPATCHING job only when it was recovered.
    pub origin: Origin,
}

/// Why the monitor is asked to follow a job (`monitor::book::Book::track`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The dispatcher recorded Ray's acceptance.
    Dispatched,
    /// Recovery at start or on taking the lease: nothing of this process can have a
    /// submit of it in flight.
    Recovered,
    /// The row changed elsewhere (a cancel, another replica's change).
    Changed,
}

/// Monitor (pending timeout) or recovery → monitor: follow an earlier attempt of a
/// QUEUED job until Ray confirms it ended.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct TrackRetiring {
    pub job_id: JobId,
    pub user: String,
    pub cluster: String,
    pub attempt: u32,
    /// What the job declared (cores, GPUs, bytes): counted as used while it lives.
    pub resources: Resources,
}

/// API (or the leader's hand-over of a follower's) → monitor: an attempt's watcher says
/// its driver started or ended (`ray::notify`, signature checked): ask Ray about it now.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Hint {
    pub job_id: JobId,
    pub attempt: u32,
    pub kind: crate::ray::notify::HintKind,
}

/// Monitor → arbiter → `UserQueue`: a QUEUED job has an earlier attempt alive in Ray
/// (the sweep found a POST that landed late); it keeps its place but is not granted
/// until [`Release`].
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Hold {
    pub user: String,
    pub job_id: JobId,
    pub place: QueuePlace,
}

/// Dispatcher → monitor: a dispatch to `cluster` failed with the cluster not ready;
/// mark it unhealthy and back off before it is used again.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct ClusterUnreachable {
    pub cluster: String,
}

/// Monitor → arbiter: a cluster's health and capacity as last polled (cores, GPUs,
/// bytes). `used` is what every tenant holds: by Ray's State API when it answered
/// (then `reported` lists this service's jobs it shows holding, and `actual` what
/// each holds), else by Ray's usage report, which lags by seconds (then `reported`
/// lists this service's jobs seen RUNNING for longer than `monitor.usage_report_lag`).
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct CapacityChanged {
    pub cluster: String,
    pub healthy: bool,
    pub total: Resources,
    pub used: Resources,
    pub reported: Vec<JobId>,
    /// What each of `reported` holds now by Ray's State API (its entrypoint, tasks
    /// and actors), when Ray answered it; empty otherwise (then only declared
    /// resources are known).
    pub actual: Vec<(JobId, Resources)>,
    /// Whether the cluster's notifications arrive (issue 49); `None` from a message
    /// that does not know (a dispatch that found the cluster not ready).
    pub notifications: Option<crate::views::NotificationsView>,
    /// Why the cluster is unhealthy (the last poll's error with its causes, e.g. Ray
    /// refusing this service's authentication); `None` while healthy.
    pub unhealthy_reason: Option<String>,
    /// An autoscaling cluster's growth (then `total` is the capacity the policy counts:
    /// what it can grow to, or only what is alive while its growth is held back);
    /// `None` for a fixed cluster and from a message that does not know.
    pub growth: Option<crate::views::GrowthView>,
    /// The part of `total` not alive yet: what an autoscaling cluster can still grow
    /// by (`total − alive` per resource); zero for a fixed cluster. The arbiter
    /// withholds it from fitting between two scale-up batches
    /// (`monitor.scale_up_batch`).
    pub growth_room: Resources,
}

/// Monitor → arbiter: an outstanding job ended (the terminal status is committed).
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct JobFinished {
    pub job_id: JobId,
    /// When the monitor saw it finish (the finish-to-dispatch histogram starts here).
    pub seen_at: std::time::Instant,
}

/// Arbiter → monitor: whether jobs are queued while another tenant holds capacity on
/// a healthy cluster ([`crate::policy::ledger::Ledger::others_hold`]). No watcher
/// announces when another tenant's work ends, so while this is true the monitor polls
/// at `monitor.poll_interval`, not `monitor.idle_poll_interval` (DESIGN §5). Sent when
/// it changes.
#[derive(Message, Clone, Copy, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
pub struct OthersHold(pub bool);

/// Monitor → arbiter: an outstanding job is QUEUED again (pending timeout, or a
/// recovered DISPATCHING job Ray never got); release its reservation and queue it.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Requeued {
    pub user: String,
    pub job: QueuedJob,
    pub held: bool,
}

/// API → arbiter: a user's settings changed (weight, limits, pause). Answered once the
/// arbiter's state holds them, so the change is in force before the next cycle.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct UserSettings {
    pub user: user::Model,
}

/// API, recovery or the leader's catch-up → arbiter: the tree of groups as stored
/// now (every row of `groups`; DESIGN §2 "Groups"). Answered once the arbiter's state
/// holds it, so a pause or a new weight is in force at the next cycle; the same tree
/// again changes nothing.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct SetGroups {
    pub groups: Vec<entity::group::Model>,
}

/// Monitor or API → dispatcher: ask Ray to stop one attempt of a job (the lifecycle
/// decided it). Stopping is the dispatcher's; the monitor follows the outcome.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct StopInRay {
    pub job_id: JobId,
    pub cluster: String,
    pub submission_id: String,
}

/// Arbiter → dispatcher: the policy preempts this job (DESIGN §3, "Preemption"):
/// write the lifecycle's `Preempt` step and send Ray's stop; the monitor follows it
/// until Ray says the attempt ended, and the job goes back to the queue.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct Preempt {
    /// The policy's decision: the job, its user and cluster, what it holds, when it
    /// started (seconds since the Unix epoch) and the head it is stopped for.
    pub preemption: crate::policy::Preemption,
}

/// Dispatcher → arbiter: a preemption was not carried out (the job had ended, was
/// being stopped already, or Ray did not run it yet); the policy stops waiting for it.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct PreemptDeclined {
    /// The job the policy marked as being stopped.
    pub job_id: JobId,
}

/// Dispatcher (or recovery) → arbiter: a pool job is ADMITTED as `attempt` (issue 30).
/// The arbiter remembers which admission it counts, so that a report of another
/// replica about that job (a release) is taken once, and a stale one not at all.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct PoolAdmitted {
    pub job_id: JobId,
    pub attempt: u32,
}

/// How the arbiter is reached by the queues, the dispatcher and the monitor.
#[derive(Clone)]
pub struct ArbiterHandle {
    pub demand: Recipient<Demand>,
    pub grant_declined: Recipient<GrantDeclined>,
    pub dispatch_ended: Recipient<DispatchEnded>,
    pub capacity: Recipient<CapacityChanged>,
    pub finished: Recipient<JobFinished>,
    pub requeued: Recipient<Requeued>,
    pub release: Recipient<Release>,
    pub remove_queued: Recipient<RemoveQueued>,
    pub hold: Recipient<Hold>,
    pub preempt_declined: Recipient<PreemptDeclined>,
    pub admitted: Recipient<PoolAdmitted>,
}

/// How the dispatcher is reached by the queues and the monitor.
#[derive(Clone)]
pub struct DispatcherHandle {
    pub dispatch: Recipient<Dispatch>,
    pub stop: Recipient<StopInRay>,
    pub preempt: Recipient<Preempt>,
}

/// How the monitor is reached by the dispatcher.
#[derive(Clone)]
pub struct MonitorHandle {
    pub track: Recipient<Track>,
    pub unreachable: Recipient<ClusterUnreachable>,
}

/// Arbiter → every `UserQueue`, once recovery has loaded the queues: rebuild the
/// queue's B-tree with every node full (`UserQueue::compact`; a queue also does so
/// by itself as it grows, which leaves up to a third of it in half-full nodes).
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct Compact;

/// How the arbiter reaches one user's queue.
#[derive(Clone)]
pub struct QueueHandle {
    pub enqueue: Recipient<EnqueueBatch>,
    pub grant: Recipient<Grant>,
    pub remove: Recipient<RemoveQueued>,
    pub release: Recipient<Release>,
    pub hold: Recipient<Hold>,
    pub compact: Recipient<Compact>,
}

/// Starts a `UserQueue` for a user (the arbiter calls it on a user's first job).
pub type QueueFactory = Box<dyn Fn(String, ArbiterHandle) -> QueueHandle>;

/// Leadership → the scheduler's actors: this replica lost the lease (or shuts down);
/// stop now (DESIGN §10).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Halt;
