//! What [`super::decide`] answers: a [`Decision`], and for a step its columns, its
//! Ray call and its metric.

use entity::JobStatus;

/// A call to make to Ray after the step is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RayCall {
    /// `POST /api/jobs/` with this `submission_id`.
    Submit {
        /// The attempt's Ray id.
        submission_id: String,
    },
    /// `POST /api/jobs/{id}/stop`.
    Stop {
        /// The attempt's Ray id.
        submission_id: String,
    },
}

/// A counter to increment once the step is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// `fairshare_jobs_dispatched_total`.
    Dispatched,
    /// `fairshare_jobs_finished_total{status}`.
    Finished(JobStatus),
    /// `fairshare_dispatch_requeued_total`: back to the queue because the cluster was
    /// not ready.
    Requeued,
    /// `fairshare_pending_timeouts_total`.
    PendingTimeout,
}

/// A column change that goes with a step; `None` leaves the column as it is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Changes {
    /// The new `cluster` (`Some(None)` clears it).
    pub cluster: Option<Option<String>>,
    /// The new `message`.
    pub message: Option<String>,
    /// Set `dispatched_at` to now (`Some(true)`) or clear it (`Some(false)`).
    pub dispatched_now: Option<bool>,
    /// The new `started_at`.
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The new `finished_at` (a terminal step without it uses now).
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The new attempt number.
    pub attempt: Option<u32>,
    /// The new retiring attempt (`Some(None)` clears it).
    pub retiring_attempt: Option<Option<u32>>,
    /// The new stop reason (`Some(None)` clears it).
    pub stop_reason: Option<Option<String>>,
    /// Set `preempted_at` to now (`Some(true)`) or clear it (`Some(false)`).
    pub preempted: Option<bool>,
    /// The new preemption count.
    pub preemptions: Option<u32>,
    /// Clear `started_at` (the job goes back to the queue after it ran: its next
    /// attempt's start is its own).
    pub clear_started: bool,
    /// The new end of a pool job runner's lease (`Some(None)` clears it).
    pub lease_until: Option<Option<chrono::DateTime<chrono::Utc>>>,
    /// No `job_events` row (a lease renewal is not a transition: nothing to announce).
    pub quiet: bool,
}

/// A decided step: the new status (may equal the old one when only columns change),
/// the `job_events` detail, the columns, the Ray call and the metric.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The status after the step.
    pub to: JobStatus,
    /// Text of the `job_events` row.
    pub detail: String,
    /// Columns that change with it.
    pub changes: Changes,
    /// What to ask Ray once written.
    pub ray: Option<RayCall>,
    /// What to count once written.
    pub metric: Option<Metric>,
}

/// Why an event was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Cancel of a job that already ended (the API's 409).
    AlreadyFinished(JobStatus),
    /// A grant of a job whose earlier attempt Ray has not confirmed stopped.
    PreviousAttemptNotStopped(u32),
    /// A withdrawal of a job that has left the queue (dispatched meanwhile).
    NotQueued(JobStatus),
    /// A runner's report of a job that does not name a pool.
    NotAPoolJob,
    /// A runner's report that does not fit the job as it is (the API's 409): its
    /// status and attempt now, and why.
    ReportConflict {
        /// The job's status.
        status: JobStatus,
        /// Its current attempt.
        attempt: u32,
        /// Why the report does not fit.
        why: String,
    },
}

/// What follows an event.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Write this step.
    Step(Step),
    /// Nothing to write (the event does not change this job).
    Ignore,
    /// The event is refused; tell whoever asked.
    Refuse(Refusal),
}
