//! A job: what the gateway submitted, and where it is in its lifecycle (DESIGN §3).

use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// Lifecycle states. Names match Ray's and the gateway's; `DISPATCHING` is ours
/// (granted by the arbiter, being submitted to Ray).
///
/// `QUEUED → DISPATCHING → PENDING → RUNNING → SUCCEEDED | FAILED | STOPPED`;
/// QUEUED or DISPATCHING can also end in STOPPED or FAILED. A pool job (issue 30) goes
/// `QUEUED → ADMITTED → RUNNING → SUCCEEDED | FAILED | STOPPED` as its runner reports.
/// Terminal states never change.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize,
)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobStatus {
    #[sea_orm(string_value = "QUEUED")]
    Queued,
    /// A pool job (issue 30) the policy granted: its runner may start it
    /// (`POST /v1/jobs/{id}/started`); fairshare never sends it to Ray.
    #[sea_orm(string_value = "ADMITTED")]
    Admitted,
    #[sea_orm(string_value = "DISPATCHING")]
    Dispatching,
    #[sea_orm(string_value = "PENDING")]
    Pending,
    #[sea_orm(string_value = "RUNNING")]
    Running,
    #[sea_orm(string_value = "SUCCEEDED")]
    Succeeded,
    #[sea_orm(string_value = "FAILED")]
    Failed,
    #[sea_orm(string_value = "STOPPED")]
    Stopped,
}

impl JobStatus {
    /// All states, in lifecycle order.
    pub const ALL: [JobStatus; 8] = [
        JobStatus::Queued,
        JobStatus::Admitted,
        JobStatus::Dispatching,
        JobStatus::Pending,
        JobStatus::Running,
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::Stopped,
    ];

    /// SUCCEEDED, FAILED and STOPPED never change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Stopped
        )
    }

    /// ADMITTED, DISPATCHING, PENDING and RUNNING hold resources on a cluster or a
    /// pool ("outstanding").
    pub fn is_outstanding(self) -> bool {
        matches!(
            self,
            JobStatus::Admitted | JobStatus::Dispatching | JobStatus::Pending | JobStatus::Running
        )
    }

    /// The upper-case name used in the API, the database and Ray.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "QUEUED",
            JobStatus::Admitted => "ADMITTED",
            JobStatus::Dispatching => "DISPATCHING",
            JobStatus::Pending => "PENDING",
            JobStatus::Running => "RUNNING",
            JobStatus::Succeeded => "SUCCEEDED",
            JobStatus::Failed => "FAILED",
            JobStatus::Stopped => "STOPPED",
        }
    }

    /// Parses an upper-case name; `None` for anything else.
    pub fn parse(s: &str) -> Option<JobStatus> {
        JobStatus::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of `jobs`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "jobs")]
pub struct Model {
    /// Our id; also Ray's `submission_id`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub user_id: String,
    /// The gateway's own id for idempotent retries; unique with `user_id`.
    pub external_id: Option<String>,
    pub status: JobStatus,
    /// Higher runs first within the user's queue (-1000..=1000).
    pub priority: i32,
    #[sea_orm(column_type = "Text")]
    pub entrypoint: String,
    /// Ray's runtime_env as the dispatcher sends it, kept only while the job may still
    /// be sent to Ray (DESIGN §6, "Secrets"): a JSON string `"fs1:<key id>:<base64>"`
    /// (sealed with AES-256-GCM, `fairshare::secrets`), or the JSON object itself
    /// when no key is configured; `None` once the job has ended, or when it had none.
    pub runtime_env: Option<Json>,
    /// String-to-string map passed to Ray as job metadata.
    pub metadata: Option<Json>,
    /// Cores.
    pub cpu: f64,
    /// GPUs.
    pub gpu: f64,
    /// Bytes.
    pub memory_bytes: i64,
    /// The Ray cluster it was dispatched to.
    pub cluster: Option<String>,
    #[sea_orm(column_type = "Text", nullable)]
    pub message: Option<String>,
    /// Seconds; `None` = the configured default.
    pub max_runtime_s: Option<i64>,
    pub submitted_at: DateTimeUtc,
    pub dispatched_at: Option<DateTimeUtc>,
    pub started_at: Option<DateTimeUtc>,
    pub finished_at: Option<DateTimeUtc>,
    /// Ray attempt number, from 1: the Ray `submission_id` is the job id for attempt 1
    /// and `<id>-<attempt>` after that (see `fairshare::lifecycle::submission_id`).
    pub attempt: i32,
    /// An earlier attempt whose stop Ray has not confirmed yet; the job is not granted
    /// again until it has.
    pub retiring_attempt: Option<i32>,
    /// Why a stop was asked for (cancel, runtime limit); kept until Ray confirms.
    #[sea_orm(column_type = "Text", nullable)]
    pub stop_reason: Option<String>,
    /// Hex SHA-256 of the submitted runtime_env's canonical JSON
    /// (`migration::runtime_env_digest`), what an idempotent resubmit is compared with;
    /// kept after the job ends. `None`: the job had no runtime_env.
    pub runtime_env_digest: Option<String>,
    /// The job may be stopped and queued again to give its capacity to a user below
    /// its fair share (DESIGN §2 "Preemption"): the job's own value, else its user's
    /// default when it was submitted.
    pub preemptible: bool,
    /// How many times it was preempted (stopped and queued again) so far.
    pub preemptions: i32,
    /// When a preemption's stop was decided, while that stop is under way (cleared
    /// once the job is queued again, or ends): `preemption.grace` counts from it.
    pub preempted_at: Option<DateTimeUtc>,
    /// Custom resources the job asks for (Ray's custom resources, e.g. `{"QPU": 1}`):
    /// a JSON object of name to amount, as text; `None` when it asks for none.
    #[sea_orm(column_type = "Text", nullable)]
    pub custom_resources: Option<String>,
    /// The `[[pools]]` entry it must run in (issue 30: a runner outside this service
    /// starts it); `None`: a Ray cluster of the policy's choosing.
    pub pool: Option<String>,
    /// Until when the runner's lease on an ADMITTED or RUNNING pool job holds (every
    /// report renews it); past it the leader frees the capacity (`[admission]`).
    pub lease_expires_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
