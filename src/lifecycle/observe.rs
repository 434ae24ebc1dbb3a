//! What the monitor's poll means for a job: Ray's answer → an [`Event`] (or none).
//! Pure, like [`super::decide`]; the monitor carries the event to `store::apply`.

use chrono::{DateTime, Utc};
use entity::{job, JobStatus};

use super::Event;
use crate::ray::{RayJob, RayJobStatus};

/// The limits a poll checks, seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// `monitor.pending_timeout` (or `monitor.scale_up_timeout` on an autoscaling
    /// cluster, `scale_up`): longest time Ray may keep an attempt PENDING.
    pub pending_timeout_s: f64,
    /// The job's cluster autoscales: `pending_timeout_s` is `monitor.scale_up_timeout`.
    pub scale_up: bool,
    /// The job's `max_runtime_s`, else `scheduler.default_max_runtime`, counted from
    /// RUNNING.
    pub max_runtime_s: f64,
    /// `monitor.lost_job_grace`: how long a job may be missing from an answering
    /// cluster before it is FAILED as lost.
    pub lost_job_grace_s: f64,
    /// `preemption.grace`: how long after a preemption's stop an attempt Ray still
    /// lists alive is given before the job goes back to the queue held.
    pub preemption_grace_s: f64,
}

fn ms_to_time(ms: Option<i64>) -> Option<DateTime<Utc>> {
    ms.and_then(DateTime::from_timestamp_millis)
}

fn terminal(status: &RayJobStatus) -> Option<JobStatus> {
    match status {
        RayJobStatus::Succeeded => Some(JobStatus::Succeeded),
        RayJobStatus::Failed => Some(JobStatus::Failed),
        RayJobStatus::Stopped => Some(JobStatus::Stopped),
        _ => None,
    }
}

/// The event Ray's answer `ray` (None: the answering cluster does not list the
/// attempt, for `missing_for_s` seconds so far) means for the current attempt of `j`
/// at `now`.
pub fn observe_current(
    j: &job::Model,
    cluster: &str,
    ray: Option<&RayJob>,
    missing_for_s: f64,
    now: DateTime<Utc>,
    limits: &Limits,
) -> Option<Event> {
    let Some(ray) = ray else {
        // A DISPATCHING job is only followed after a restart: the process that sent
        // the POST is gone and Ray does not have it, so it was never submitted.
        let due = j.status == JobStatus::Dispatching || missing_for_s >= limits.lost_job_grace_s;
        return due.then(|| Event::Missing {
            cluster: cluster.to_string(),
            for_s: missing_for_s as u64,
        });
    };
    if let Some(status) = terminal(&ray.status) {
        let message = ray.message.clone().filter(|m| !m.is_empty());
        let message = match (status, &ray.error_type, message) {
            (JobStatus::Failed, Some(kind), Some(m)) => Some(format!("{kind}: {m}")),
            (JobStatus::Failed, Some(kind), None) => Some(kind.clone()),
            (_, _, m) => m,
        };
        return Some(Event::SeenFinished {
            status,
            message,
            started_at: ms_to_time(ray.start_time),
            finished_at: ms_to_time(ray.end_time),
        });
    }
    let since = |t: Option<DateTime<Utc>>| {
        t.map(|t| (now - t).num_milliseconds() as f64 / 1000.0)
            .unwrap_or(0.0)
    };
    if super::JobFacts::of(j).preempting && since(j.preempted_at) > limits.preemption_grace_s {
        return Some(Event::PreemptionGraceOver {
            grace_s: limits.preemption_grace_s as u64,
        });
    }
    match (&ray.status, j.status) {
        (RayJobStatus::Running, JobStatus::Running) => (since(j.started_at) > limits.max_runtime_s)
            .then_some(Event::RuntimeExceeded {
                limit_s: limits.max_runtime_s as u64,
            }),
        (RayJobStatus::Running, _) => Some(Event::SeenRunning {
            started_at: ms_to_time(ray.start_time),
        }),
        (RayJobStatus::Pending, JobStatus::Dispatching) => Some(Event::SeenPending),
        (RayJobStatus::Pending, JobStatus::Pending) => {
            let waited = since(j.dispatched_at);
            (waited > limits.pending_timeout_s).then_some(Event::PendingTooLong {
                waited_s: waited as u64,
                scale_up: limits.scale_up,
            })
        }
        _ => None,
    }
}

/// The event Ray's answer means for a job's retiring (earlier) attempt: ended, gone,
/// or nothing yet.
pub fn observe_retiring(ray: Option<&RayJob>) -> Option<Event> {
    match ray {
        None => Some(Event::RetiredAttemptGone),
        Some(r) => terminal(&r.status).map(|status| Event::RetiredAttemptEnded { status }),
    }
}
