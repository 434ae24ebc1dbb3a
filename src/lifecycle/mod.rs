//! The job lifecycle (DESIGN §3): states, events and one pure function, [`decide`],
//! that says what follows. Beside [`crate::policy`] and as pure: no I/O, no clock.
//!
//! Every status change of a job is decided here and written by
//! [`crate::store::apply()`] (guarded status update + `job_events` row, one
//! transaction). Actors and the API only turn what they see into an [`Event`], apply
//! the decision, and carry out the [`RayCall`] it names.
//!
//! # The table
//!
//! `*` = any non-terminal status. "stop asked" = `stop_reason` is set. A row whose
//! event does not fit the status is [`Decision::Ignore`] (nothing is written), except
//! where it says "refused" ([`Decision::Refuse`]: the caller reports it).
//!
//! | from | event | to | also | Ray call | metric |
//! |---|---|---|---|---|---|
//! | QUEUED (no retiring attempt) | `Granted{cluster}` | DISPATCHING | cluster, dispatched_at | submit (attempt's id) | — |
//! | QUEUED (retiring attempt) | `Granted` | refused: `PreviousAttemptNotStopped` | | | |
//! | DISPATCHING | `RayAccepted` | PENDING | | stop, if stop asked | dispatched |
//! | DISPATCHING (no stop asked) | `RayRefused{message}` | FAILED | message | — | finished{FAILED} |
//! | DISPATCHING (stop asked) | `RayRefused{message}` | STOPPED | the stop reason, and Ray's refusal | — | finished{STOPPED} |
//! | DISPATCHING | `RayNotReady{reason}` | QUEUED (same attempt), or STOPPED if stop asked | cluster cleared | — | dispatch_requeued / finished{STOPPED} |
//! | DISPATCHING, PENDING | `SeenRunning` | RUNNING | started_at | stop, if stop asked | — |
//! | DISPATCHING | `SeenPending` | PENDING | (recovery found it) | stop, if stop asked | — |
//! | DISPATCHING, PENDING, RUNNING | `SeenFinished{status}` | that status (STOPPED for FAILED when a stop was asked) | finished_at, message (the stop reason for STOPPED) | — | finished{status} |
//! | DISPATCHING (no stop asked) | `Missing` (recovery: Ray does not have it) | QUEUED (same attempt) | | — | — |
//! | DISPATCHING (stop asked) | `Missing` (recovery: Ray does not have it) | STOPPED | the stop reason | — | finished{STOPPED} |
//! | PENDING, RUNNING | `Missing` (longer than the grace) | FAILED | "the cluster lost it" | — | finished{FAILED} |
//! | PENDING (no stop asked) | `PendingTooLong{waited_s}` | QUEUED, attempt + 1, retiring = old attempt (`cluster` kept: where it is) | message says why | stop (old id) | pending_timeouts |
//! | PENDING (stop asked) | `PendingTooLong` | STOPPED | the stop reason | stop | finished{STOPPED} |
//! | RUNNING (no stop asked) | `RuntimeExceeded{limit_s}` | RUNNING, stop asked | | stop | — |
//! | QUEUED | `CancelRequested` | STOPPED | message | stop of a retiring attempt, if any | finished{STOPPED} |
//! | DISPATCHING | `CancelRequested` | DISPATCHING, stop asked | | stop (a 404 if Ray does not have it yet; sent again once it has) | — |
//! | PENDING, RUNNING | `CancelRequested` | same, stop asked | | stop | — |
//! | DISPATCHING, PENDING, RUNNING (cancel already asked) | `CancelRequested` | ignored: the first cancel's stop is under way | | | |
//! | terminal | `CancelRequested` | refused: `AlreadyFinished` | | | |
//! | QUEUED | `WithdrawQueued` | STOPPED | message | stop of a retiring attempt, if any | finished{STOPPED} |
//! | DISPATCHING, PENDING, RUNNING | `WithdrawQueued` | refused: `NotQueued` (nothing written) | | | |
//! | QUEUED (retiring) | `RetiredAttemptEnded{status: SUCCEEDED}` | SUCCEEDED | the earlier attempt finished the work | — | finished{SUCCEEDED} |
//! | QUEUED (retiring) | `RetiredAttemptEnded{other}` / `RetiredAttemptGone` | QUEUED, retiring and cluster cleared | grantable again | — | — |
//! | PENDING, RUNNING | `ClusterRemoved` | FAILED | "cluster no longer configured" | — | finished{FAILED} |
//! | DISPATCHING (no stop asked) | `ClusterRemoved` | QUEUED (same attempt) | | — | — |
//! | DISPATCHING (stop asked) | `ClusterRemoved` | STOPPED | the stop reason | — | finished{STOPPED} |
//! | QUEUED (no retiring attempt) | `StrayFound{attempt}` = the current attempt | QUEUED, attempt + 1, retiring = that attempt (`cluster` = where it is) | message says why | stop (that attempt) | — |
//! | terminal | anything | ignored | | | |
//!
//! A preemption (`Preempt`, `PreemptionGraceOver`, and what Ray's answers mean for a
//! job whose preemption's stop is under way) adds the rows in `lifecycle/preempt.rs`,
//! decided before these. A pool job (issue 30: ADMITTED, its runner's reports, its
//! lease) has the rows in `lifecycle/admission.rs`, decided before all others.
//!
//! # Invariants (checked by the property tests)
//! - A terminal status never changes.
//! - Ray is asked to submit only on `Granted`, and a job is granted only when no
//!   earlier attempt is still alive in Ray: the job never runs twice.
//! - Once Ray reports an attempt finished, the job is terminal (or, for a retired
//!   attempt that did not succeed, grantable again): nothing stays stuck.
//! - A stop asked while DISPATCHING is carried out on every path: sent the moment Ray
//!   is known to have the attempt (accepted, found PENDING or RUNNING), or the job
//!   ends STOPPED when Ray does not have it (refused, not ready, missing, cluster
//!   removed). It never goes back to the queue.
//!
//! What happens between the actors (a submit in flight while the monitor polls, a lost
//! answer, a late POST, a crash or a change of leader) is checked by the protocol
//! model in `actors::model` over every bounded interleaving.

mod admission;
#[cfg(test)]
mod admission_tests;
mod observe;
mod preempt;
mod row;
mod step;
mod submission;
#[cfg(test)]
mod tests;

pub use admission::STOP_REQUESTED_DETAIL;
pub use observe::{observe_current, observe_retiring, Limits};
pub use preempt::{preempted_for, PREEMPTED_DETAIL};
pub use row::updated;
pub use step::{Changes, Decision, Metric, RayCall, Refusal, Step};
pub use submission::{current_submission_id, parse_submission_id, submission_id};

use entity::JobStatus;
use uuid::Uuid;

/// The `stop_reason` a cancel writes (`POST /v1/jobs/{id}/cancel`, Ray's stop).
pub const CANCELLED: &str = "cancelled by request";

/// What the lifecycle needs to know about a job to decide (read from its row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobFacts {
    /// Current status.
    pub status: JobStatus,
    /// Current Ray attempt, from 1.
    pub attempt: u32,
    /// An earlier attempt that Ray has not yet confirmed stopped.
    pub retiring_attempt: Option<u32>,
    /// A stop was asked for, with this reason.
    pub stop_reason: Option<String>,
    /// A preemption's stop is under way (`preempted_at` set, and no cancel since:
    /// a cancel's stop reason replaces the preemption's, and the cancel wins).
    pub preempting: bool,
    /// How many times the job was preempted so far.
    pub preemptions: u32,
    /// It names a pool (issue 30): its runner, not Ray, runs it.
    pub pool: bool,
    /// Until when its runner's lease holds (an ADMITTED or RUNNING pool job).
    pub lease_until: Option<chrono::DateTime<chrono::Utc>>,
}

impl JobFacts {
    /// The facts of a job row.
    pub fn of(j: &entity::job::Model) -> JobFacts {
        JobFacts {
            status: j.status,
            attempt: u32::try_from(j.attempt).unwrap_or(1).max(1),
            retiring_attempt: j.retiring_attempt.and_then(|a| u32::try_from(a).ok()),
            stop_reason: j.stop_reason.clone(),
            preempting: j.preempted_at.is_some()
                && j.stop_reason.is_some()
                && j.stop_reason.as_deref() != Some(CANCELLED),
            preemptions: u32::try_from(j.preemptions).unwrap_or(0),
            pool: j.pool.is_some(),
            lease_until: j.lease_expires_at,
        }
    }
}

/// Something that happened to a job.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The arbiter granted the job on `cluster`.
    Granted {
        /// Cluster name.
        cluster: String,
    },
    /// Ray holds the current attempt (accepted, or it already had it).
    RayAccepted {
        /// Ray already had this `submission_id` (an earlier POST got through).
        already_existed: bool,
        /// POSTs sent.
        attempts: u32,
    },
    /// Ray refused the job itself (400/422 with its validation message).
    RayRefused {
        /// Ray's message.
        message: String,
    },
    /// The cluster could not take the job now (route not ready, 5xx, timeouts, retry
    /// budget spent) and does not have it.
    RayNotReady {
        /// What went wrong, for the event row.
        reason: String,
    },
    /// Ray lists the current attempt as PENDING.
    SeenPending,
    /// Ray lists the current attempt as RUNNING.
    SeenRunning {
        /// When Ray started it.
        started_at: Option<chrono::DateTime<chrono::Utc>>,
    },
    /// Ray lists the current attempt as finished.
    SeenFinished {
        /// SUCCEEDED, FAILED or STOPPED.
        status: JobStatus,
        /// Ray's message (with its error type for FAILED).
        message: Option<String>,
        /// Ray's start time, if known.
        started_at: Option<chrono::DateTime<chrono::Utc>>,
        /// Ray's end time, if known.
        finished_at: Option<chrono::DateTime<chrono::Utc>>,
    },
    /// The cluster answers but does not list the current attempt: for a DISPATCHING
    /// job found at recovery, at once; otherwise longer than `monitor.lost_job_grace`.
    Missing {
        /// Cluster name.
        cluster: String,
        /// How long it has been missing, seconds.
        for_s: u64,
    },
    /// Ray kept the current attempt PENDING longer than `monitor.pending_timeout`, or
    /// on an autoscaling cluster `monitor.scale_up_timeout` (`scale_up`).
    PendingTooLong {
        /// Seconds it has been PENDING.
        waited_s: u64,
        /// Its cluster autoscales: it waited for Ray to add a node that never came.
        scale_up: bool,
    },
    /// The job has RUNNING longer than its `max_runtime_s`.
    RuntimeExceeded {
        /// The limit, seconds.
        limit_s: u64,
    },
    /// A user asked to cancel the job.
    CancelRequested,
    /// Ray's `DELETE /api/jobs/{id}` of a job the caller saw QUEUED: stop it only if it
    /// is still QUEUED. A job granted in between is refused untouched (`NotQueued`), so
    /// a delete that is answered 409 changes nothing (a plain cancel would have asked
    /// Ray to stop it).
    WithdrawQueued,
    /// Ray reports the retiring attempt finished with `status`.
    RetiredAttemptEnded {
        /// Its terminal status in Ray.
        status: JobStatus,
    },
    /// The cluster answers and does not know the retiring attempt (never started, or
    /// forgotten): it cannot run any more.
    RetiredAttemptGone,
    /// The monitor's sweep found `attempt`, the current attempt of this QUEUED job,
    /// alive in Ray although nobody followed it (a POST that landed late, or whose
    /// answer was lost). It cannot be granted again under that id (Ray would call it a
    /// duplicate), so it moves to the next attempt and waits for this one to end.
    StrayFound {
        /// The attempt Ray holds.
        attempt: u32,
        /// The cluster where Ray holds it.
        cluster: String,
    },
    /// Recovery: the job's cluster is no longer configured.
    ClusterRemoved {
        /// Cluster name.
        cluster: String,
    },
    /// The arbiter preempts the job (DESIGN §3, "Preemption"): stop it in Ray and
    /// queue it again once Ray says it ended, for `for_job` of `for_user`.
    Preempt {
        /// The head it is stopped for.
        for_job: Uuid,
        /// That head's user.
        for_user: String,
        /// Cores × seconds it has run (the work lost), for the event row.
        lost_core_seconds: f64,
    },
    /// A preemption's stop was sent `preemption.grace` ago and Ray still lists the
    /// attempt alive: the job goes back to the queue held, its attempt retiring.
    PreemptionGraceOver {
        /// The grace, seconds.
        grace_s: u64,
    },
    /// The arbiter granted a pool job on its pool (issue 30): it is ADMITTED, and its
    /// runner holds a lease on it until `lease_until`.
    Admitted {
        /// The pool's name.
        pool: String,
        /// The lease's end (now + `admission.lease`).
        lease_until: chrono::DateTime<chrono::Utc>,
    },
    /// The runner reports it started the job (`POST /v1/jobs/{id}/started`).
    RunnerStarted {
        /// The admission (attempt) it is about; `None`: the current one.
        attempt: Option<u32>,
        /// The renewed lease's end.
        lease_until: chrono::DateTime<chrono::Utc>,
    },
    /// The runner renews its lease (`POST /v1/jobs/{id}/heartbeat`).
    RunnerHeartbeat {
        /// The admission it is about; `None`: the current one.
        attempt: Option<u32>,
        /// The renewed lease's end.
        lease_until: chrono::DateTime<chrono::Utc>,
    },
    /// The runner reports the job ended (`POST /v1/jobs/{id}/finished`).
    RunnerFinished {
        /// The admission it is about; `None`: the current one.
        attempt: Option<u32>,
        /// SUCCEEDED, FAILED or STOPPED.
        status: JobStatus,
        /// The runner's message.
        message: Option<String>,
    },
    /// The runner gives the capacity back without running the job
    /// (`POST /v1/jobs/{id}/release`).
    RunnerReleased {
        /// The admission it is about; `None`: the current one.
        attempt: Option<u32>,
    },
    /// The leader found the runner's lease past its end (`now`): the capacity is freed.
    LeaseLapsed {
        /// Now, by the leader's clock (a lease renewed meanwhile is not lapsed).
        now: chrono::DateTime<chrono::Utc>,
        /// `admission.lease`, seconds, for the message.
        lease_s: u64,
        /// Back to the queue (`on_lease_lapse = "requeue"`), else FAILED.
        requeue: bool,
    },
}

pub(super) fn step(to: JobStatus, detail: impl Into<String>) -> Step {
    Step {
        to,
        detail: detail.into(),
        changes: Changes::default(),
        ray: None,
        metric: None,
    }
}

fn finished(to: JobStatus, detail: impl Into<String>, message: Option<String>) -> Decision {
    let mut s = step(to, detail);
    s.changes.message = message;
    s.changes.stop_reason = Some(None);
    s.changes.preempted = Some(false);
    s.metric = Some(Metric::Finished(to));
    Decision::Step(s)
}

pub(super) fn stop_current(facts: &JobFacts, job_id: Uuid) -> Option<RayCall> {
    Some(RayCall::Stop {
        submission_id: submission_id(job_id, facts.attempt),
    })
}

/// Decides what follows `event` for job `job_id` with `facts` (see the table in the
/// module docs). Pure: the same inputs always give the same decision.
pub fn decide(job_id: Uuid, facts: &JobFacts, event: &Event) -> Decision {
    use JobStatus as S;
    if let Some(d) = admission::decide(job_id, facts, event) {
        return d;
    }
    let status = facts.status;
    if status.is_terminal() {
        return match event {
            Event::CancelRequested => Decision::Refuse(Refusal::AlreadyFinished(status)),
            _ => Decision::Ignore,
        };
    }
    if let Some(d) = preempt::decide(job_id, facts, event) {
        return d;
    }
    match (status, event) {
        (S::Queued, Event::Granted { cluster }) => {
            if let Some(old) = facts.retiring_attempt {
                return Decision::Refuse(Refusal::PreviousAttemptNotStopped(old));
            }
            let mut s = step(
                S::Dispatching,
                format!("granted on cluster {cluster} (attempt {})", facts.attempt),
            );
            s.changes.cluster = Some(Some(cluster.clone()));
            s.changes.dispatched_now = Some(true);
            s.ray = Some(RayCall::Submit {
                submission_id: submission_id(job_id, facts.attempt),
            });
            Decision::Step(s)
        }
        (
            S::Dispatching,
            Event::RayAccepted {
                already_existed,
                attempts,
            },
        ) => {
            let mut s = step(
                S::Pending,
                format!(
                    "submitted to Ray as {} (POSTs: {attempts}, already existed: {already_existed})",
                    submission_id(job_id, facts.attempt)
                ),
            );
            s.metric = Some(Metric::Dispatched);
            if facts.stop_reason.is_some() {
                s.ray = stop_current(facts, job_id);
            }
            Decision::Step(s)
        }
        (S::Dispatching, Event::RayRefused { message }) => match &facts.stop_reason {
            Some(why) => finished(
                S::Stopped,
                format!("cancelled while dispatching; Ray refused the submission: {message}"),
                Some(format!("{why} (Ray had refused the job: {message})")),
            ),
            None => finished(
                S::Failed,
                "Ray refused the submission",
                Some(format!("Ray refused the job: {message}")),
            ),
        },
        (S::Dispatching, Event::RayNotReady { reason }) => {
            if let Some(why) = &facts.stop_reason {
                return finished(
                    S::Stopped,
                    format!("cancelled while dispatching; the cluster did not take it: {reason}"),
                    Some(why.clone()),
                );
            }
            let mut s = step(
                S::Queued,
                format!("the cluster could not take it; back to the queue: {reason}"),
            );
            s.changes.cluster = Some(None);
            s.changes.dispatched_now = Some(false);
            s.metric = Some(Metric::Requeued);
            Decision::Step(s)
        }
        (S::Dispatching, Event::SeenPending) => {
            let mut s = step(S::Pending, "recovery: found in Ray as PENDING");
            if facts.stop_reason.is_some() {
                s.ray = stop_current(facts, job_id);
            }
            Decision::Step(s)
        }
        (S::Dispatching | S::Pending, Event::SeenRunning { started_at }) => {
            let mut s = step(S::Running, "Ray reported RUNNING");
            s.changes.started_at = *started_at;
            if facts.stop_reason.is_some() {
                s.ray = stop_current(facts, job_id);
            }
            Decision::Step(s)
        }
        (
            S::Dispatching | S::Pending | S::Running,
            Event::SeenFinished {
                status: to,
                message,
                started_at,
                finished_at,
            },
        ) if to.is_terminal() => {
            // A job whose stop was asked and that Ray reports FAILED was, most likely,
            // ended by that stop (its watcher ends a cancelled attempt that Ray starts
            // anyway, `ray::notify`): it is STOPPED, with Ray's word kept.
            let (to, message) = match (to, &facts.stop_reason) {
                (S::Stopped, why) => (S::Stopped, why.clone().or_else(|| message.clone())),
                (S::Failed, Some(why)) => (
                    S::Stopped,
                    Some(match message {
                        Some(m) => format!("{why} (Ray reported FAILED: {m})"),
                        None => format!("{why} (Ray reported FAILED)"),
                    }),
                ),
                (S::Failed, None) => (
                    S::Failed,
                    message
                        .clone()
                        .or_else(|| Some("Ray reported the job FAILED".into())),
                ),
                (to, _) => (*to, message.clone()),
            };
            let to = &to;
            let mut s = step(*to, format!("Ray reported {to}"));
            s.changes.message = message;
            s.changes.started_at = *started_at;
            s.changes.finished_at = *finished_at;
            s.changes.stop_reason = Some(None);
            s.changes.preempted = Some(false);
            s.metric = Some(Metric::Finished(*to));
            Decision::Step(s)
        }
        (S::Dispatching, Event::Missing { cluster, .. }) if facts.stop_reason.is_some() => {
            finished(
                S::Stopped,
                format!("recovery: cluster {cluster} does not have it; it was cancelled"),
                facts.stop_reason.clone(),
            )
        }
        (S::Dispatching, Event::Missing { cluster, .. }) => {
            let mut s = step(
                S::Queued,
                format!("recovery: cluster {cluster} does not have it; back to the queue"),
            );
            s.changes.cluster = Some(None);
            s.changes.dispatched_now = Some(false);
            Decision::Step(s)
        }
        (S::Pending | S::Running, Event::Missing { cluster, for_s }) => finished(
            S::Failed,
            "lost by the cluster",
            Some(format!(
                "Ray cluster {cluster} lost the job: missing from its job list for {for_s} s \
                 (the cluster may have restarted)"
            )),
        ),
        (S::Pending, Event::PendingTooLong { waited_s, .. }) if facts.stop_reason.is_some() => {
            // Cancelled while Ray held it: end it rather than queue it again.
            let mut s = step(
                S::Stopped,
                format!("Ray kept it PENDING for {waited_s} s after a stop was sent; stopped here"),
            );
            s.changes.message = facts.stop_reason.clone();
            s.changes.stop_reason = Some(None);
            s.ray = stop_current(facts, job_id);
            s.metric = Some(Metric::Finished(S::Stopped));
            Decision::Step(s)
        }
        (S::Pending, Event::PendingTooLong { waited_s, scale_up }) => {
            let old = facts.attempt;
            let limit = if *scale_up {
                "monitor.scale_up_timeout"
            } else {
                "monitor.pending_timeout"
            };
            let mut s = step(
                S::Queued,
                format!(
                    "Ray kept attempt {old} PENDING for {waited_s} s ({limit}); \
                     stopping it and queueing attempt {}",
                    old + 1
                ),
            );
            s.changes.message = Some(if *scale_up {
                format!(
                    "Ray kept the job PENDING for {waited_s} s and added no node that holds \
                     it (a scale-up that failed, or the cluster at its maximum); it is back \
                     in the queue at its old place"
                )
            } else {
                format!(
                    "Ray kept the job PENDING for {waited_s} s (its cluster was busy, e.g. \
                     with other tenants' work); it is back in the queue at its old place"
                )
            });
            // `cluster` keeps naming where the retiring attempt is until Ray confirms it.
            s.changes.dispatched_now = Some(false);
            s.changes.attempt = Some(old + 1);
            s.changes.retiring_attempt = Some(Some(old));
            s.ray = stop_current(facts, job_id);
            s.metric = Some(Metric::PendingTimeout);
            Decision::Step(s)
        }
        (S::Running, Event::RuntimeExceeded { limit_s }) if facts.stop_reason.is_none() => {
            let mut s = step(
                S::Running,
                format!("ran longer than its max_runtime of {limit_s} s; stop sent"),
            );
            s.changes.stop_reason = Some(Some(format!(
                "stopped: ran longer than its max_runtime of {limit_s} s"
            )));
            s.ray = stop_current(facts, job_id);
            Decision::Step(s)
        }
        (S::Queued, Event::CancelRequested | Event::WithdrawQueued) => {
            let Decision::Step(mut s) = finished(
                S::Stopped,
                "cancelled while queued",
                Some("cancelled by request while queued".into()),
            ) else {
                return Decision::Ignore;
            };
            if let Some(old) = facts.retiring_attempt {
                s.ray = Some(RayCall::Stop {
                    submission_id: submission_id(job_id, old),
                });
            }
            Decision::Step(s)
        }
        (S::Dispatching | S::Pending | S::Running, Event::WithdrawQueued) => {
            Decision::Refuse(Refusal::NotQueued(status))
        }
        (S::Dispatching | S::Pending | S::Running, Event::CancelRequested)
            if facts.stop_reason.as_deref() == Some(CANCELLED) =>
        {
            // Asked again (a client's retry, a second click): the first cancel's stop
            // is under way and carried through by the row's stop_reason (re-sent when
            // Ray accepts, retried until Ray says the attempt ended). Nothing more to
            // write, send or announce.
            Decision::Ignore
        }
        (S::Dispatching | S::Pending | S::Running, Event::CancelRequested) => {
            let mut s = step(status, "cancel requested; stop sent to Ray");
            s.changes.stop_reason = Some(Some(CANCELLED.into()));
            if status == S::Dispatching {
                // The submit is in flight: Ray may have the attempt already (a POST
                // whose answer is late) or not yet (then the stop is a 404, and it is
                // sent again the moment Ray's acceptance is recorded).
                s.detail = "cancel requested while dispatching; stop sent to Ray, and sent \
                            again once Ray has the job"
                    .into();
            }
            s.ray = stop_current(facts, job_id);
            Decision::Step(s)
        }
        (S::Queued, Event::RetiredAttemptEnded { status: S::Succeeded })
            if facts.retiring_attempt.is_some() =>
        {
            let old = facts.retiring_attempt.unwrap_or(facts.attempt);
            let mut s = step(
                S::Succeeded,
                format!("attempt {old} ran to completion in Ray before its stop took effect"),
            );
            s.changes.message = Some(format!(
                "attempt {old} succeeded in Ray after all; the job is not run again"
            ));
            s.changes.retiring_attempt = Some(None);
            s.changes.attempt = Some(old);
            s.metric = Some(Metric::Finished(S::Succeeded));
            Decision::Step(s)
        }
        (S::Queued, Event::RetiredAttemptEnded { status: ended }) if facts.retiring_attempt.is_some() => {
            let old = facts.retiring_attempt.unwrap_or_default();
            let mut s = step(
                S::Queued,
                format!("Ray confirmed attempt {old} ended ({ended}); the job may be granted again"),
            );
            s.changes.retiring_attempt = Some(None);
            s.changes.cluster = Some(None);
            Decision::Step(s)
        }
        (S::Queued, Event::RetiredAttemptGone) if facts.retiring_attempt.is_some() => {
            let old = facts.retiring_attempt.unwrap_or_default();
            let mut s = step(
                S::Queued,
                format!("Ray no longer lists attempt {old}; the job may be granted again"),
            );
            s.changes.retiring_attempt = Some(None);
            s.changes.cluster = Some(None);
            Decision::Step(s)
        }
        (S::Pending | S::Running, Event::ClusterRemoved { cluster }) => finished(
            S::Failed,
            "recovery: cluster not configured",
            Some(format!(
                "cluster {cluster:?} is no longer in the configuration; the job's outcome is unknown"
            )),
        ),
        (S::Dispatching, Event::ClusterRemoved { cluster }) if facts.stop_reason.is_some() => {
            finished(
                S::Stopped,
                format!("recovery: cluster {cluster:?} is not configured; it was cancelled"),
                facts.stop_reason.clone(),
            )
        }
        (S::Queued, Event::StrayFound { attempt, cluster })
            if facts.retiring_attempt.is_none() && *attempt == facts.attempt =>
        {
            let mut s = step(
                S::Queued,
                format!(
                    "attempt {attempt} found alive in Ray on cluster {cluster} while queued (a \
                     submit that landed late); stopping it and queueing attempt {}",
                    attempt + 1
                ),
            );
            s.changes.message = Some(format!(
                "an earlier submit of this job reached Ray late (attempt {attempt}); it is \
                 stopped and the job keeps its place in the queue"
            ));
            s.changes.cluster = Some(Some(cluster.clone()));
            s.changes.attempt = Some(attempt + 1);
            s.changes.retiring_attempt = Some(Some(*attempt));
            s.ray = Some(RayCall::Stop {
                submission_id: submission_id(job_id, *attempt),
            });
            Decision::Step(s)
        }
        (S::Dispatching, Event::ClusterRemoved { cluster }) => {
            let mut s = step(
                S::Queued,
                format!("recovery: cluster {cluster:?} is not configured; back to the queue"),
            );
            s.changes.cluster = Some(None);
            s.changes.dispatched_now = Some(false);
            Decision::Step(s)
        }
        _ => Decision::Ignore,
    }
}
