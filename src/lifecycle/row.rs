//! How a decided [`Step`] changes a job row: the columns [`crate::store::apply`]
//! writes, as a pure function (the protocol model of issue 26 applies steps with it).

use chrono::{DateTime, Utc};
use entity::job;

use super::Step;

/// `current` after `step`, written at `at`: status, cluster, message, `dispatched_at`
/// (set or cleared), `started_at` (kept once set; Ray's start time, else `at` on
/// RUNNING), `finished_at` (Ray's end time, else `at` on a terminal status), attempt,
/// retiring attempt and stop reason.
pub fn updated(current: &job::Model, step: &Step, at: DateTime<Utc>) -> job::Model {
    let c = &step.changes;
    let mut j = current.clone();
    j.status = step.to;
    if let Some(cluster) = &c.cluster {
        j.cluster = cluster.clone();
    }
    if let Some(m) = &c.message {
        j.message = Some(m.clone());
    }
    match c.dispatched_now {
        Some(true) => j.dispatched_at = Some(at),
        Some(false) => j.dispatched_at = None,
        None => {}
    }
    j.started_at = if c.clear_started {
        None
    } else {
        current
            .started_at
            .or(c.started_at)
            .or((step.to == entity::JobStatus::Running).then_some(at))
    };
    if let Some(t) = c.finished_at.or(step.to.is_terminal().then_some(at)) {
        j.finished_at = Some(t);
    }
    if let Some(a) = c.attempt {
        j.attempt = a as i32;
    }
    if let Some(r) = c.retiring_attempt {
        j.retiring_attempt = r.map(|a| a as i32);
    }
    if let Some(r) = &c.stop_reason {
        j.stop_reason = r.clone();
    }
    match c.preempted {
        Some(true) => j.preempted_at = Some(at),
        Some(false) => j.preempted_at = None,
        None => {}
    }
    if let Some(n) = c.preemptions {
        j.preemptions = n as i32;
    }
    j
}
