//! Preemption in the lifecycle (DESIGN §3, "Preemption"): the rows of the table in
//! the module docs of [`super`] that a preemption adds. `preempting` = the job's
//! `preempted_at` is set and no cancel came since ([`super::JobFacts::preempting`]).
//!
//! | from | event | to | also | Ray call |
//! |---|---|---|---|---|
//! | PENDING, RUNNING (no stop asked) | `Preempt{for_job, for_user}` | same, stop asked ("preempted for job J of user U"), `preempted_at` = now | event row with the core-seconds lost | stop |
//! | PENDING, RUNNING (preempting) | `SeenFinished{STOPPED or FAILED}` / `Missing` | QUEUED, attempt + 1, preemptions + 1, cluster, `started_at` and `preempted_at` cleared | message says why | — |
//! | PENDING, RUNNING (preempting) | `SeenFinished{SUCCEEDED}` | SUCCEEDED (the general row: it finished before the stop landed) | | — |
//! | PENDING, RUNNING (preempting) | `PreemptionGraceOver` / `PendingTooLong` | QUEUED, attempt + 1, preemptions + 1, retiring = old attempt (held until Ray confirms; SUCCEEDED if it turns out to have finished) | message says why | stop again |
//! | preempting, then `CancelRequested` | | the cancel's general row: its stop reason replaces the preemption's, so the job ends STOPPED | | stop |

use entity::JobStatus;
use uuid::Uuid;

use super::{step, stop_current, Decision, Event, JobFacts};

/// The `stop_reason` (and the start of the message) of a preemption, for job
/// `for_job` of `for_user`.
pub fn preempted_for(for_job: Uuid, for_user: &str) -> String {
    format!("preempted for job {for_job} of user {for_user}")
}

/// The start of the `job_events` detail of a preemption's stop (SSE and webhooks name
/// such an event `job.preempted`).
pub const PREEMPTED_DETAIL: &str = "preempted for job ";

/// The preemption's step (a job of Ray's or a pool's): the status kept, the stop
/// asked with the preemption's reason, `preempted_at` set, and the event row's detail
/// "preempted for job J of user U (core-seconds lost: N); `then`".
pub(super) fn preempt_step(
    status: JobStatus,
    for_job: &Uuid,
    for_user: &str,
    lost_core_seconds: f64,
    then: &str,
) -> super::Step {
    let why = preempted_for(*for_job, for_user);
    let mut s = step(
        status,
        format!(
            "{why} (core-seconds lost: {:.0}); {then}",
            lost_core_seconds.max(0.0)
        ),
    );
    s.changes.stop_reason = Some(Some(why));
    s.changes.preempted = Some(true);
    s
}

/// A preempted job goes back to the queue at its old place: attempt + 1, preempted
/// once more; `retiring` when Ray has not said the old attempt ended (it is held
/// until it has), else grantable at once.
pub(super) fn preempted_requeue(
    job_id: Uuid,
    facts: &JobFacts,
    detail: String,
    retiring: bool,
) -> Decision {
    let old = facts.attempt;
    let why = facts
        .stop_reason
        .clone()
        .unwrap_or_else(|| "preempted".into());
    let mut s = step(JobStatus::Queued, detail);
    s.changes.message = Some(format!(
        "{why}; back in the queue at its old place as attempt {} (preempted {} time{})",
        old + 1,
        facts.preemptions + 1,
        if facts.preemptions == 0 { "" } else { "s" }
    ));
    s.changes.dispatched_now = Some(false);
    s.changes.attempt = Some(old + 1);
    s.changes.stop_reason = Some(None);
    s.changes.preempted = Some(false);
    s.changes.preemptions = Some(facts.preemptions + 1);
    s.changes.clear_started = true;
    if retiring {
        // `cluster` keeps naming where the retiring attempt is until Ray confirms it.
        s.changes.retiring_attempt = Some(Some(old));
    } else {
        s.changes.cluster = Some(None);
    }
    s.ray = retiring.then(|| stop_current(facts, job_id)).flatten();
    Decision::Step(s)
}

/// The preemption rows of the table, or `None` for the general ones.
pub(super) fn decide(job_id: Uuid, facts: &JobFacts, event: &Event) -> Option<Decision> {
    use JobStatus as S;
    let status = facts.status;
    Some(match (status, event) {
        (
            S::Pending | S::Running,
            Event::SeenFinished {
                status: S::Stopped | S::Failed,
                ..
            },
        ) if facts.preempting => preempted_requeue(
            job_id,
            facts,
            format!(
                "Ray confirmed attempt {} ended after the preemption's stop; back to the queue",
                facts.attempt
            ),
            false,
        ),
        (S::Pending | S::Running, Event::Missing { cluster, for_s }) if facts.preempting => {
            preempted_requeue(
                job_id,
                facts,
                format!(
                    "cluster {cluster} no longer lists attempt {} ({for_s} s) after the \
                     preemption's stop; back to the queue",
                    facts.attempt
                ),
                false,
            )
        }
        (S::Pending | S::Running, Event::PreemptionGraceOver { grace_s }) if facts.preempting => {
            preempted_requeue(
                job_id,
                facts,
                format!(
                    "Ray has not confirmed the preemption's stop of attempt {} within \
                     preemption.grace ({grace_s} s); back to the queue, held until it does",
                    facts.attempt
                ),
                true,
            )
        }
        (
            S::Pending | S::Running,
            Event::Preempt {
                for_job,
                for_user,
                lost_core_seconds,
            },
        ) if facts.stop_reason.is_none() => {
            let mut s = preempt_step(
                status,
                for_job,
                for_user,
                *lost_core_seconds,
                "stop sent to Ray, back to the queue once Ray confirms",
            );
            s.ray = stop_current(facts, job_id);
            Decision::Step(s)
        }
        (S::Pending, Event::PendingTooLong { waited_s, .. }) if facts.preempting => {
            preempted_requeue(
                job_id,
                facts,
                format!(
                    "Ray kept attempt {} PENDING for {waited_s} s while its preemption's stop was \
                 under way; back to the queue, held until Ray confirms it stopped",
                    facts.attempt
                ),
                true,
            )
        }
        _ => return None,
    })
}
