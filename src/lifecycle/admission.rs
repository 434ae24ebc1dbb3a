//! Admission in the lifecycle (issue 30, DESIGN §3 "Admission"): the rows of a *pool
//! job* (one that names a `[[pools]]` entry), decided before every other row. Such a
//! job is never sent to Ray: the policy grants it on its pool, it becomes ADMITTED, and
//! its runner (outside this service) reports `started`, `finished` or `release`,
//! renewing a lease with every report (`heartbeat` renews it alone). A lease that
//! lapses frees the capacity (the leader's timer).
//!
//! A report names the attempt it is about (the admission's; absent: the current one).
//! Each admission is its own attempt: a release and a lapsed lease move the job to
//! attempt + 1, so a late report of an earlier admission never acts on a later one.
//!
//! | from | event | to | also |
//! |---|---|---|---|
//! | QUEUED | `Admitted{pool, lease_until}` | ADMITTED | cluster = pool, dispatched_at, lease |
//! | ADMITTED | `RunnerStarted` | RUNNING | started_at, lease renewed |
//! | RUNNING | `RunnerStarted` (the same again) | RUNNING, quiet | lease renewed, no event row |
//! | ADMITTED, RUNNING | `RunnerHeartbeat` | same, quiet | lease renewed, no event row |
//! | ADMITTED, RUNNING | `RunnerFinished{status}` | that status (STOPPED for FAILED when a stop was asked) | message, finished_at, lease cleared |
//! | SUCCEEDED, FAILED, STOPPED | `RunnerFinished` with the status it ended with | ignored: a retry (200) | |
//! | ADMITTED | `RunnerReleased` | QUEUED, attempt + 1, at its old place (STOPPED if a stop was asked) | cluster, dispatched_at and lease cleared |
//! | any, report of an earlier attempt; SUCCEEDED, FAILED, STOPPED | `RunnerReleased` | ignored: that admission is over (200) | |
//! | ADMITTED, RUNNING (lease past `now`) | `LeaseLapsed{requeue}` | QUEUED, attempt + 1 (or FAILED; STOPPED if a stop was asked) | message says why |
//! | ADMITTED, RUNNING (no stop asked) | `CancelRequested` | same, stop asked | event row "stop_requested: …" (SSE `job.stop_requested`) |
//! | ADMITTED, RUNNING (stop asked) | `CancelRequested` | ignored: asked already | |
//! | ADMITTED, RUNNING (no stop asked) | `Preempt{for_job, for_user}` | same, stop asked ("preempted for job J of user U"), `preempted_at` | event row with the core-seconds lost (SSE `job.preempted`): its runner is to stop it |
//! | ADMITTED, RUNNING (preempting) | `RunnerFinished{STOPPED or FAILED}`, `RunnerReleased`, `LeaseLapsed`, `PreemptionGraceOver` | QUEUED, attempt + 1, preemptions + 1, at its old place | message says why, lease cleared |
//! | ADMITTED, RUNNING (preempting) | `RunnerFinished{SUCCEEDED}` | SUCCEEDED (it finished before the stop landed) | |
//! | any other report | | refused: `ReportConflict` naming the status and attempt (409) | |
//! | ADMITTED, RUNNING | anything Ray-side (`Seen*`, `Missing`, …) | ignored: Ray never has a pool job | |
//!
//! A report for a job that does not name a pool is refused (`NotAPoolJob`).

use chrono::{DateTime, Utc};
use entity::JobStatus;

use uuid::Uuid;

use super::preempt::{preempt_step, preempted_requeue};
use super::{step, Decision, Event, JobFacts, Metric, Refusal, CANCELLED};

/// The start of the `job_events` detail of a cancel of an admitted or started pool job
/// (SSE and webhooks name such an event `job.stop_requested`): its runner is to stop
/// it and report `finished`.
pub const STOP_REQUESTED_DETAIL: &str = "stop_requested: ";

/// Whether `event` is one of a runner's reports.
fn is_report(event: &Event) -> bool {
    matches!(
        event,
        Event::RunnerStarted { .. }
            | Event::RunnerHeartbeat { .. }
            | Event::RunnerFinished { .. }
            | Event::RunnerReleased { .. }
    )
}

/// The attempt a report names (`None`: the current one).
fn reported_attempt(event: &Event) -> Option<u32> {
    match event {
        Event::RunnerStarted { attempt, .. }
        | Event::RunnerHeartbeat { attempt, .. }
        | Event::RunnerFinished { attempt, .. }
        | Event::RunnerReleased { attempt } => *attempt,
        _ => None,
    }
}

fn conflict(facts: &JobFacts, why: impl Into<String>) -> Decision {
    Decision::Refuse(Refusal::ReportConflict {
        status: facts.status,
        attempt: facts.attempt,
        why: why.into(),
    })
}

/// A lease renewal: the status stays, no event row is written (a heartbeat is not a
/// transition).
fn renew(facts: &JobFacts, lease_until: DateTime<Utc>) -> Decision {
    let mut s = step(facts.status, "lease renewed");
    s.changes.lease_until = Some(Some(lease_until));
    s.changes.quiet = true;
    Decision::Step(s)
}

/// The job leaves its runner and goes back to the queue at its old place as the next
/// attempt (release, lapsed lease).
fn requeue(facts: &JobFacts, detail: String, message: String) -> Decision {
    let mut s = step(JobStatus::Queued, detail);
    s.changes.message = Some(message);
    s.changes.cluster = Some(None);
    s.changes.dispatched_now = Some(false);
    s.changes.clear_started = true;
    s.changes.attempt = Some(facts.attempt + 1);
    s.changes.lease_until = Some(None);
    Decision::Step(s)
}

/// A terminal step of a pool job: the lease and any stop asked are cleared.
fn ended(to: JobStatus, detail: String, message: Option<String>) -> Decision {
    let mut s = step(to, detail);
    s.changes.message = message;
    s.changes.stop_reason = Some(None);
    s.changes.preempted = Some(false);
    s.changes.lease_until = Some(None);
    s.metric = Some(Metric::Finished(to));
    Decision::Step(s)
}

/// A preempted pool job goes back to the queue (its runner stopped or gave it back, or
/// let the lease or the preemption's grace pass): the preemption's requeue, with the
/// lease cleared and no attempt left retiring (nothing of it is in Ray; a runner that
/// still runs it learns from a 409 that the admission is over).
fn preempted_back(job_id: Uuid, facts: &JobFacts, detail: String) -> Decision {
    let mut d = preempted_requeue(job_id, facts, detail, false);
    if let Decision::Step(s) = &mut d {
        s.changes.lease_until = Some(None);
    }
    d
}

/// The rows of a pool job, or of a report (`None`: the general rows decide).
pub(super) fn decide(job_id: Uuid, facts: &JobFacts, event: &Event) -> Option<Decision> {
    use JobStatus as S;
    if !facts.pool {
        return is_report(event).then_some(Decision::Refuse(Refusal::NotAPoolJob));
    }
    let status = facts.status;
    if is_report(event) {
        if let Some(a) = reported_attempt(event) {
            if a != facts.attempt {
                if a < facts.attempt && matches!(event, Event::RunnerReleased { .. }) {
                    // That admission is over already (released, or its lease lapsed):
                    // what the runner wants is so.
                    return Some(Decision::Ignore);
                }
                return Some(conflict(facts, format!("the report is about attempt {a}")));
            }
        }
    }
    if matches!(status, S::Admitted | S::Running) && facts.preempting {
        let back = |why: String| preempted_back(job_id, facts, why);
        let a = facts.attempt;
        match event {
            Event::RunnerFinished {
                status: S::Stopped | S::Failed,
                ..
            } => {
                return Some(back(format!(
                    "its runner ended attempt {a} after the preemption's stop; back to the queue"
                )))
            }
            Event::RunnerReleased { .. } if status == S::Admitted => {
                return Some(back(format!(
                    "its runner released attempt {a} after the preemption's stop; back to the queue"
                )))
            }
            Event::LeaseLapsed { now, lease_s, .. }
                if facts.lease_until.is_none_or(|t| t <= *now) =>
            {
                return Some(back(format!(
                    "its runner's lease lapsed (no report for {lease_s} s) while the \
                     preemption's stop of attempt {a} was under way; back to the queue"
                )))
            }
            Event::PreemptionGraceOver { grace_s } => {
                return Some(back(format!(
                    "its runner did not end attempt {a} within preemption.grace ({grace_s} s) \
                     after the preemption's stop; back to the queue (a later report of \
                     attempt {a} is refused)"
                )))
            }
            _ => {}
        }
    }
    Some(match (status, event) {
        (
            S::Admitted | S::Running,
            Event::Preempt {
                for_job,
                for_user,
                lost_core_seconds,
            },
        ) if facts.stop_reason.is_none() => Decision::Step(preempt_step(
            status,
            for_job,
            for_user,
            *lost_core_seconds,
            "its runner is asked to stop it and report finished, back to the queue then",
        )),
        (S::Queued, Event::Admitted { pool, lease_until }) => {
            if let Some(old) = facts.retiring_attempt {
                return Some(Decision::Refuse(Refusal::PreviousAttemptNotStopped(old)));
            }
            let said = format!("admitted to pool {pool} (attempt {})", facts.attempt);
            let mut s = step(S::Admitted, said.clone());
            // What the job says now (not a release's or a lapse's "back in the queue").
            s.changes.message = Some(said);
            s.changes.cluster = Some(Some(pool.clone()));
            s.changes.dispatched_now = Some(true);
            s.changes.lease_until = Some(Some(*lease_until));
            Decision::Step(s)
        }
        (S::Admitted, Event::RunnerStarted { lease_until, .. }) => {
            let said = format!("its runner started it (attempt {})", facts.attempt);
            let mut s = step(S::Running, said.clone());
            s.changes.message = Some(said);
            s.changes.lease_until = Some(Some(*lease_until));
            Decision::Step(s)
        }
        (S::Running, Event::RunnerStarted { lease_until, .. })
        | (S::Admitted | S::Running, Event::RunnerHeartbeat { lease_until, .. }) => {
            renew(facts, *lease_until)
        }
        (
            S::Admitted | S::Running,
            Event::RunnerFinished {
                status: to,
                message,
                ..
            },
        ) if to.is_terminal() => {
            let (to, message) = match (to, &facts.stop_reason) {
                (S::Stopped, Some(why)) => (
                    S::Stopped,
                    Some(match message {
                        Some(m) => format!("{why} (its runner: {m})"),
                        None => why.clone(),
                    }),
                ),
                (S::Failed, Some(why)) => (
                    S::Stopped,
                    Some(match message {
                        Some(m) => format!("{why} (its runner reported FAILED: {m})"),
                        None => format!("{why} (its runner reported FAILED)"),
                    }),
                ),
                (to, _) => (
                    *to,
                    Some(
                        message
                            .clone()
                            .unwrap_or_else(|| format!("its runner reported {to}")),
                    ),
                ),
            };
            ended(to, format!("its runner reported {to}"), message)
        }
        (to_be, Event::RunnerFinished { status: to, .. }) if to_be.is_terminal() => {
            if to_be == *to || (to_be == S::Stopped && *to == S::Failed) {
                Decision::Ignore
            } else {
                conflict(facts, format!("it ended {to_be} already"))
            }
        }
        // The job ended (its runner reported, a lapse failed it, a cancel stopped it):
        // that admission is over, which is what a release asks (200, as for an
        // earlier attempt's).
        (to_be, Event::RunnerReleased { .. }) if to_be.is_terminal() => Decision::Ignore,
        (S::Admitted, Event::RunnerReleased { .. }) if facts.stop_reason.is_some() => ended(
            S::Stopped,
            "its runner released it after a stop was asked".into(),
            facts.stop_reason.clone(),
        ),
        (S::Admitted, Event::RunnerReleased { .. }) => requeue(
            facts,
            format!(
                "its runner released it without running it; back to the queue as attempt {}",
                facts.attempt + 1
            ),
            "released by its runner; back in the queue at its old place".into(),
        ),
        (_, Event::RunnerStarted { .. })
        | (_, Event::RunnerHeartbeat { .. })
        | (_, Event::RunnerFinished { .. })
        | (_, Event::RunnerReleased { .. }) => {
            let why = match (status, event) {
                (S::Running, Event::RunnerReleased { .. }) => {
                    "it started already: report finished instead".to_string()
                }
                (S::Queued, _) => "it is not admitted (its lease may have lapsed)".to_string(),
                (s, _) => format!("it is {s}"),
            };
            conflict(facts, why)
        }
        (
            S::Admitted | S::Running,
            Event::LeaseLapsed {
                now,
                lease_s,
                requeue: again,
            },
        ) => {
            if facts.lease_until.is_some_and(|t| t > *now) {
                return Some(Decision::Ignore);
            }
            let said = format!(
                "its runner's lease lapsed (no report for {lease_s} s, admission.lease) while {status}"
            );
            if let Some(why) = &facts.stop_reason {
                return Some(ended(
                    S::Stopped,
                    format!("{said}; it was being stopped"),
                    Some(why.clone()),
                ));
            }
            if *again {
                requeue(
                    facts,
                    format!("{said}; back to the queue as attempt {}", facts.attempt + 1),
                    format!("{said}; back in the queue at its old place"),
                )
            } else {
                ended(S::Failed, format!("{said}; failed"), Some(said.clone()))
            }
        }
        (S::Admitted | S::Running, Event::CancelRequested) => {
            if facts.stop_reason.as_deref() == Some(CANCELLED) {
                return Some(Decision::Ignore);
            }
            let mut s = step(
                status,
                format!(
                    "{STOP_REQUESTED_DETAIL}cancel requested; its runner is asked to stop it \
                     and report finished"
                ),
            );
            s.changes.stop_reason = Some(Some(CANCELLED.into()));
            Decision::Step(s)
        }
        (S::Admitted | S::Running, Event::WithdrawQueued) => {
            Decision::Refuse(Refusal::NotQueued(status))
        }
        // Ray never has a pool job: nothing it says moves one (and a preemption of a
        // job being stopped already is declined).
        (S::Admitted | S::Running, _) => Decision::Ignore,
        // QUEUED and terminal pool jobs: the general rows (cancel of a queued job, a
        // refused cancel of an ended one).
        _ => return None,
    })
}
