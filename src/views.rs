//! What the scheduler shows: the shapes that the actors produce and the API serves
//! (`GET /v1/scheduler`, the live part of `GET /v1/users`). Here so that neither
//! `actors/` nor `api/` imports the other.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use crate::policy::Resources;

/// Amounts of each resource: cores, GPUs, bytes, and custom resources by name.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct Amounts {
    /// Cores.
    pub cpu: f64,
    /// GPUs.
    pub gpu: f64,
    /// Bytes.
    pub memory_bytes: u64,
    /// Custom resources (Ray's custom resources, e.g. `{"QPU": 1}`) by name, non-zero
    /// amounts only; omitted when there are none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub custom: BTreeMap<String, f64>,
}

impl From<Resources> for Amounts {
    fn from(r: Resources) -> Self {
        Amounts {
            cpu: r.cpu,
            gpu: r.gpu,
            memory_bytes: bytes(r.memory_bytes),
            custom: r.custom.by_name(),
        }
    }
}

/// A byte count held as `f64` by the policy, as an integer (negative and NaN → 0).
pub fn bytes(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v.round() as u64
    } else {
        0
    }
}

/// What an entry of [`SchedulerView::clusters`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClusterKind {
    /// A Ray cluster (`[[clusters]]`): this service submits its jobs there and polls
    /// its capacity and usage.
    Ray,
    /// A pool (`[[pools]]`, DESIGN §3 "Admission"): capacity this service admits jobs
    /// to but does not run; a runner outside it starts them and reports back.
    Pool,
}

/// One cluster or pool in [`SchedulerView`].
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ClusterStatusView {
    /// The `[[clusters]]` or `[[pools]]` name (a pool job's `cluster` and `pool`).
    pub name: String,
    /// `ray` for a Ray cluster, `pool` for a pool. A pool's figures are this
    /// service's alone: its capacity is configured (always healthy), nobody reports
    /// its usage, so `used_reported`, `unreported` and `used_by_others` are 0,
    /// `outstanding` is what its ADMITTED and RUNNING jobs ask, and `free` is
    /// `capacity − outstanding`.
    pub kind: ClusterKind,
    pub healthy: bool,
    pub capacity: Amounts,
    /// Ray's report of used capacity, all tenants (lags by seconds). 0 for a pool.
    pub used_reported: Amounts,
    /// Resources of this service's outstanding jobs there (for a pool: its
    /// ADMITTED and RUNNING jobs).
    pub outstanding: Amounts,
    /// The part of `outstanding` that Ray's report does not include yet. 0 for a
    /// pool (no report to wait for).
    pub unreported: Amounts,
    /// Used by other tenants as far as the report shows:
    /// `used_reported − (outstanding − unreported)`, floored at 0. 0 for a pool.
    pub used_by_others: Amounts,
    /// `capacity − max(used_reported + unreported, outstanding)`, floored at 0 (for
    /// a pool, `capacity − outstanding`).
    pub free: Amounts,
    /// A pool's ADMITTED jobs (admitted, not yet reported started by its runner),
    /// as the database has them when this is answered; absent for a Ray cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admitted_jobs: Option<u64>,
    /// A pool's RUNNING jobs (its runner reported them started), as the database
    /// has them when this is answered; absent for a Ray cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running_jobs: Option<u64>,
    /// Whether the end-of-job notifications of this cluster's attempts reach the
    /// service (DESIGN §5, "When notifications do not arrive"); absent for a pool and
    /// before the cluster's first poll.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notifications: Option<NotificationsView>,
    /// Why an unhealthy Ray cluster is so: its last poll's error with causes (e.g.
    /// "Ray refused this service's authentication for GET /api/jobs/ (HTTP 401): …",
    /// never the token); absent while healthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unhealthy_reason: Option<String>,
    /// An autoscaling cluster's growth (`[[clusters.node_types]]`, issue 44; DESIGN §2,
    /// "Autoscaling clusters"): then `capacity` is what it can grow to, and this says
    /// what is alive now; absent for a fixed cluster, a pool, and before the first poll.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth: Option<GrowthView>,
}

/// [`ClusterStatusView::growth`]: an autoscaling cluster as the leader's monitor last
/// saw it.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct GrowthView {
    /// What the nodes alive now offer, as Ray reports it
    /// (`loadMetricsReport.usage` totals).
    pub alive: Amounts,
    /// What it can grow to: `head + Σ max_count × resources` of its node types, as
    /// configured.
    pub potential: Amounts,
    /// Nodes Ray's autoscaler is adding now: launches asked for and nodes started but
    /// not yet counted (`autoscalerReport.pendingLaunches`, `pendingNodes`).
    pub nodes_starting: u32,
    /// This service's jobs waiting in Ray there (DISPATCHING or PENDING): the demand it
    /// placed for Ray's autoscaler to see.
    pub jobs_waiting_in_ray: u32,
    /// What those jobs ask, in all.
    pub demand_in_ray: Amounts,
    /// The longest hold of any of its node types (`node_types[].held_for_seconds`):
    /// seconds for which a node type a job waited `monitor.scale_up_timeout` for is left
    /// out of `capacity`. Absent while no node type is held back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth_held_for_seconds: Option<f64>,
    /// Whether Ray can still add a node: one is starting, or the node types not held
    /// back can grow it beyond what is alive. When false (at its maximum) a job Ray
    /// holds PENDING waits for resources to free up (`monitor.pending_timeout`), not for
    /// a node (`monitor.scale_up_timeout`).
    pub can_grow: bool,
    /// Its node types as configured, the head first (named `head`) when it takes work.
    pub node_types: Vec<NodeTypeView>,
}

/// One node type of an autoscaling cluster ([`GrowthView::node_types`]).
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct NodeTypeView {
    /// The `[[clusters.node_types]]` name (`head` for the head).
    pub name: String,
    /// What one node offers.
    pub resources: Amounts,
    /// Nodes of this type kept at least (1 for the head).
    pub min_count: u32,
    /// Nodes of this type at most (1 for the head).
    pub max_count: u32,
    /// Seconds for which this type is left out of the cluster's capacity: a job
    /// waited `monitor.scale_up_timeout` for a node of it that did not come. The hold
    /// doubles with each such failure in a row, up to 8 × `scale_up_timeout`; absent
    /// while the type may grow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_for_seconds: Option<f64>,
    /// Scale-ups of this type in a row that did not come (0 once a node came up).
    pub failed_scale_ups: u32,
}

/// [`ClusterStatusView::notifications`]: what the leader's monitor knows of one Ray
/// cluster's notification path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct NotificationsView {
    /// `off` (`notify.enabled = false`, or no `notify.url` could be found),
    /// `unproven` (none has arrived yet: polled at `monitor.poll_interval` while jobs
    /// run there), `arriving` (notifications arrive: the first on a fresh path, or 3
    /// attempts in a row after a miss) or `missing` (an attempt Ray ran or ended
    /// announced nothing, and fewer than 3 were received in a row since: polled at
    /// `monitor.poll_interval`).
    pub state: String,
    /// Attempts whose notification arrived, since this replica started leading.
    pub received: u64,
    /// Attempts Ray ran for 500 ms, or ended, with no notification, since then.
    pub missed: u64,
    /// Notifications that arrived for an attempt already counted missed (a slow
    /// path: each attempt counts once).
    pub late: u64,
    /// How often the monitor polls Ray for this cluster's jobs, in milliseconds:
    /// `monitor.poll_interval` while its notifications are not known to arrive
    /// (`unproven`, `missing`), else the interval in force now.
    pub poll_interval_ms: u64,
    /// What an operator should know, when notifications do not arrive; absent when
    /// they do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One user in the fair-share order.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct UserOrderView {
    pub user: String,
    /// The fair-share key the order uses: (share + usage) / weight − age term
    /// (DESIGN §2; the age term of the user's next job, which grows with its wait);
    /// smallest goes next. `GET /v1/users`' `key` is the same without the age term.
    pub key: f64,
    pub share: f64,
    pub usage: f64,
}

/// One grant of the last cycle.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct GrantView {
    pub user: String,
    pub job_id: uuid::Uuid,
    pub cluster: String,
}

/// The last scheduling cycle.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct CycleView {
    /// When it ran (RFC 3339).
    pub at: DateTime<Utc>,
    pub duration_seconds: f64,
    pub grants: Vec<GrantView>,
    /// The job capacity is held for: the reservation's job (backfill on), or the head
    /// the cycle stopped at (backfill off).
    pub stopped_for: Option<uuid::Uuid>,
}

/// Which replica leads (DESIGN §10).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct LeadershipView {
    /// The replica that answered this request.
    pub replica: String,
    /// Whether that replica leads (runs the arbiter, dispatcher and monitor).
    pub is_leader: bool,
    /// The leader's replica id, as this replica last read the lease; `None` while
    /// nobody holds a live lease.
    pub leader: Option<String>,
    /// The fencing term of that leadership (increments on every takeover).
    pub term: i64,
    /// When the leader took the lease (RFC 3339).
    pub since: Option<DateTime<Utc>>,
}

/// `GET /v1/scheduler`. On a follower the live parts (clusters, order, cycles) are
/// the leader's to show: they are empty, `queued_jobs`/`outstanding_jobs` come from
/// the database, and `leadership` says which replica leads.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct SchedulerView {
    pub ready: bool,
    pub leadership: Option<LeadershipView>,
    /// The Ray clusters and the pools (`kind`), in name order.
    pub clusters: Vec<ClusterStatusView>,
    /// The users the next cycle could serve (not paused, under their limits, with a
    /// queued job some healthy cluster can hold), in the order it would serve them.
    pub next_users: Vec<UserOrderView>,
    pub last_cycle: Option<CycleView>,
    pub cycles: u64,
    /// QUEUED jobs of all users (the same count as `GET /v1/users` and
    /// `fairshare_queued_jobs`).
    pub queued_jobs: usize,
    pub outstanding_jobs: usize,
    pub usage_half_life_seconds: f64,
    /// `scheduler.starvation_guard`, seconds.
    pub starvation_guard_seconds: f64,
    /// `scheduler.starvation_runs`: typical run times a head may wait before it is
    /// starved, when shorter than the guard (0: off).
    pub starvation_runs: f64,
    /// The typical run time of recently ended jobs (geometric mean, seconds); `null`
    /// before any ended, and on a follower.
    pub typical_runtime_seconds: Option<f64>,
    /// The starvation guard in force, seconds: `starvation_guard_seconds`, or
    /// `starvation_runs` typical run times when shorter (DESIGN §2). On a follower,
    /// the configured guard.
    pub guard_in_force_seconds: f64,
    pub backfill: bool,
}

/// Live fair-share state of one user, as the arbiter sees it.
#[derive(Clone, Debug, Default)]
pub struct LiveUser {
    /// What its outstanding jobs are charged (cores, GPUs, bytes): what Ray's State
    /// API says they hold, never less than declared (`scheduler.charge`).
    pub allocation: Resources,
    /// What its outstanding jobs declared.
    pub declared: Resources,
    /// Dominant share.
    pub share: f64,
    /// Decayed usage, brought to now.
    pub usage: f64,
    /// Fair-share key.
    pub key: f64,
    /// QUEUED jobs.
    pub queued: usize,
    /// Outstanding (DISPATCHING, PENDING, RUNNING) jobs.
    pub running: u32,
    /// Weighted fair share (0..1): with no groups, its weight over the summed weights
    /// of the users with queued or outstanding jobs; with groups, its group's fair
    /// share divided the same way among the group's users and subgroups, each level
    /// by weight ([`crate::policy::groups::fair_shares`]). 0 for a user without work.
    pub fair_share: f64,
    /// The path of its group (`None`: the root).
    pub group: Option<String>,
}

/// Live fair-share state of one group, as the arbiter sees it: sums over every user
/// under it (its subgroups' included).
#[derive(Clone, Debug, Default)]
pub struct LiveGroup {
    /// What the users' outstanding jobs are charged.
    pub allocation: Resources,
    /// Dominant share of that allocation over the healthy clusters' capacity (0..1).
    pub share: f64,
    /// Its fair share (0..1): the sum of its users' (see [`LiveUser::fair_share`]).
    pub fair_share: f64,
    /// QUEUED jobs.
    pub queued: usize,
    /// Outstanding (DISPATCHING, PENDING, RUNNING) jobs.
    pub running: u32,
}
