//! What the monitor follows and what one poll found: the types that its pure book
//! (`book.rs`) and its poll (`poll.rs`) share.

use std::time::{Duration, Instant};

use entity::job;

use crate::policy::{JobId, Resources};
use crate::ray::{ClusterUsage, RayError};
use crate::store::{resources_of, Applied};

/// A current attempt the monitor follows.
#[derive(Clone, Debug)]
pub(crate) struct Followed {
    /// The row as last written.
    pub(crate) job: job::Model,
    /// Since when the answering cluster has not listed it.
    pub(crate) missing_since: Option<Instant>,
    /// When it was first seen RUNNING.
    pub(crate) running_seen: Option<Instant>,
    /// When a stop was last sent for it.
    pub(crate) stop_sent_at: Option<Instant>,
    /// Dispatched by this process behind the watcher (`ray::notify`): its start and
    /// end are announced, so the poll is only its safety net.
    pub(crate) hinted: bool,
    /// A notification from its watcher arrived: the watcher can reach this service.
    pub(crate) announced: bool,
    /// Counted against its cluster's notification path already (each attempt counts
    /// once: a notification that arrives after that is late, not received).
    pub(crate) missed: bool,
}

/// An earlier attempt of a QUEUED job, followed until Ray confirms it ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Retiring {
    pub(crate) job_id: JobId,
    pub(crate) user: String,
    pub(crate) cluster: String,
    pub(crate) attempt: u32,
    /// What the job declared (cores, GPUs, bytes): counted as used while it is alive.
    pub(crate) resources: Resources,
    /// When a stop was last sent for it.
    pub(crate) stop_sent_at: Option<Instant>,
    /// When it was first seen RUNNING.
    pub(crate) running_seen: Option<Instant>,
}

impl Retiring {
    /// The retiring `attempt` of QUEUED `job` on `cluster`, no stop sent yet.
    pub(crate) fn new(job: &job::Model, cluster: &str, attempt: u32) -> Retiring {
        Retiring {
            job_id: job.id,
            user: job.user_id.clone(),
            cluster: cluster.to_string(),
            attempt: attempt.max(1),
            resources: resources_of(job),
            stop_sent_at: None,
            running_seen: None,
        }
    }
}

/// An attempt alive in Ray that is neither a job's current attempt nor its retiring
/// one (a POST that landed late or whose answer was lost, for a job that has moved
/// on): stopped, and followed until Ray says it ended so that its capacity counts.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Stray {
    pub(crate) job_id: JobId,
    pub(crate) attempt: u32,
    pub(crate) cluster: String,
    /// What the job declared (cores, GPUs, bytes).
    pub(crate) resources: Resources,
    /// When a stop was last sent for it.
    pub(crate) stop_sent_at: Option<Instant>,
    /// When it was first seen RUNNING.
    pub(crate) running_seen: Option<Instant>,
}

/// How long to wait before asking Ray again to stop a job that has not stopped.
pub(crate) const STOP_RETRY: Duration = Duration::from_secs(10);

/// Whether a stop last sent at `sent` is due again at `now`.
pub(crate) fn stop_due(sent: Option<Instant>, now: Instant) -> bool {
    sent.is_none_or(|at| now.saturating_duration_since(at) > STOP_RETRY)
}

/// What the poll found for one followed job or attempt.
pub(crate) enum Outcome {
    /// Listed by Ray, nothing to write; `running`: Ray shows it RUNNING.
    Seen { running: bool, pending: bool },
    /// Missing from an answering cluster, not for long enough yet.
    Missing,
    /// An event was applied (written, ignored or refused).
    Applied(Box<Applied>),
    /// A stop is still due (Ray has not carried it out): ask again.
    StopDue(String),
    /// The sweep found this service's own attempt, followed or about to be.
    Ours,
    /// As [`Outcome::Ours`], with a stop to send now.
    StopOurs(String),
    /// The sweep found a QUEUED job's retiring attempt that nothing followed.
    FollowRetiring(Box<Retiring>),
}

pub(crate) struct ClusterPoll {
    pub(crate) name: String,
    pub(crate) usage: Result<ClusterUsage, RayError>,
    pub(crate) jobs: Result<(), RayError>,
    pub(crate) current: Vec<(JobId, Outcome)>,
    pub(crate) retiring: Vec<(JobId, Outcome)>,
    /// Attempts alive in Ray that nothing followed, and what was done about them.
    pub(crate) strays: Vec<(StrayFound, Outcome)>,
    /// What Ray's State API says is alive (`None`: it did not answer, or the poll
    /// was a notification's check).
    pub(crate) usage_now: Option<UsageNow>,
    /// How long the State API took to answer, when it was read this poll.
    pub(crate) state_cost: Option<std::time::Duration>,
}

/// One poll's reading of Ray's State API (`ray::state`), for charging real usage.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct UsageNow {
    /// Everything alive on the cluster, every tenant (cores, GPUs, bytes).
    pub(crate) total: Resources,
    /// What each followed current attempt that Ray runs holds now.
    pub(crate) jobs: Vec<(JobId, Resources)>,
    /// The retiring and stray attempts whose entrypoint holds its reservation (the
    /// others may still start).
    pub(crate) others_holding: std::collections::HashSet<(JobId, u32)>,
}

/// An attempt alive in Ray that the monitor did not follow (found by the sweep), or a
/// stray it follows.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StrayFound {
    pub(crate) job_id: JobId,
    pub(crate) attempt: u32,
    /// What the job declared (cores, GPUs, bytes).
    pub(crate) resources: crate::policy::Resources,
}
