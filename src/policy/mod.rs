//! The fair-share policy (DESIGN §2): a pure function from a snapshot of users
//! and clusters to the jobs to start now.
//!
//! No I/O, no clock, no randomness, no global state. The arbiter actor and the
//! simulator keep a [`Ledger`] and get from [`Ledger::cycle`] the grants
//! [`run_cycle`] gives on the same snapshot, whatever the order of the `users`
//! and `clusters` slices.
//!
//! # Terms and formulas
//!
//! - **Capacity** `C` (for shares) is the sum of [`ClusterView::total`] over the
//!   healthy clusters. Fitting uses each healthy cluster's own
//!   [`ClusterView::free`] = `total − max(used_reported, outstanding)`, floored
//!   at 0, reduced as the cycle grants jobs. Unhealthy clusters are never
//!   granted to.
//! - **Dominant share** `s_u = max_k A_u,k / C_k` over resources with
//!   `C_k > 0`, where `A_u` is the user's allocation (its outstanding jobs'
//!   resources). This is Dominant Resource Fairness (DRF: A. Ghodsi, M. Zaharia,
//!   B. Hindman, A. Konwinski, S. Shenker, I. Stoica, "Dominant Resource
//!   Fairness: Fair Allocation of Multiple Resource Types", NSDI 2011), whose
//!   progressive filling always serves the user with the smallest dominant
//!   share. See [`dominant_share`].
//! - **Decayed usage** `h_u` is an exponential moving average of `s_u(t)` with
//!   **half-life** `T`: `h ← h·e^(−λΔt) + s·(1 − e^(−λΔt))`, `λ = ln 2 / T`, the
//!   same decay as Slurm's multifactor priority plugin (`PriorityDecayHalfLife`).
//!   `T = 0` turns history off (`h ≡ 0`). At the start of a cycle every user's
//!   `h_u` is brought from its `usage_at` to `now` with the share it held
//!   before the cycle, so all users are compared at the same instant. See
//!   [`decay_usage`]; [`UserOrder::usage`] reports the result so the caller can
//!   persist it with timestamp `now`.
//! - **Age term** `g_u = a · min(age_u / M, 1)` ([`age_term`]), where
//!   `age_u = now − submitted_at` of the user's effective head (seconds), `a =`
//!   [`PolicyConfig::age_weight`] (in dominant-share units, default
//!   `scheduler.age_weight`, 0.05 by default) and `M =` [`PolicyConfig::max_age`]
//!   (seconds, default 1 day), like Slurm's `PriorityWeightAge` × age factor with
//!   `PriorityMaxAge`: it grows linearly with the head's wait and saturates at
//!   `a`, so waiting can make up for at most `a` of dominant share.
//! - **Fair-share key** `(s_u + h_u) / w_u − g_u` with **weight** `w_u > 0`
//!   ([`fair_share_key`] minus [`age_term`]). With all weights 1, unit jobs,
//!   history and age off this is "the user with the fewest running jobs goes
//!   next".
//! - **Runtime estimate** of a queued job ([`QueuedJob::runtime_estimate`],
//!   seconds): live `max_runtime_s`, else `scheduler.default_max_runtime`; in
//!   simulation the SWF requested time. An outstanding job's **expected end**
//!   ([`OutstandingJob::expected_end`]) is its start (grant) plus its estimate.
//!
//! # Order
//!
//! Smallest key first; ties by the older `submitted_at` of the user's
//! effective head, then by user id (string order). Keys are compared after
//! [`quantize_key`], which clears the low 12 of the 52 mantissa bits (relative
//! resolution 2⁻⁴⁰ ≈ 9·10⁻¹³, truncation toward zero, so it is monotone):
//! equal histories give equal keys, and keys that differ only by floating-point
//! noise tie exactly, so the noise never overrides the tie-break. One grant
//! moves a key by a relative 10⁻⁹ or more even for weight 1000 on a
//! 1,000,000-core pool, far above the resolution, so real differences survive.
//!
//! # Eligibility
//!
//! A user is served this cycle only if it is not paused, has an effective head,
//! has fewer outstanding jobs than `max_running_jobs`, and its head would not
//! take its allocation over `max_resources` (if set). An ineligible user is
//! passed over (it does not stop the cycle) and its head gets the matching
//! [`PendingReason`]. These are rechecked after each of its grants.
//!
//! # The cycle (progressive filling)
//!
//! Repeatedly take the first eligible user in order. If its effective head fits
//! some healthy cluster's free capacity, grant it to the **best-fit** cluster
//! (the one left tightest: smallest `Σ_k (free_k − req_k) / total_k` over
//! resources with `total_k > 0`, ties by cluster name), add it to the user's
//! allocation and outstanding count, take it from the cluster's free capacity,
//! recompute the user's key and go on. If it fits nowhere:
//!
//! - with **backfill** on, the user is skipped for the rest of the cycle (its
//!   head: [`PendingReason::WaitingForCapacity`]) and later users may use the
//!   capacity, subject to the reservation below;
//! - with backfill off, the cycle stops at the first head that does not fit
//!   (strict order): it gets `WaitingForCapacity`, the users behind it
//!   [`PendingReason::WaitingBehind`], and [`CycleOutcome::stopped_for`]
//!   names it. No reservation is made or kept.
//!
//! A user's window is never reordered: it is already in queue order (priority,
//! then `submitted_at`, then id), and a user whose head does not fit is skipped
//! as a whole rather than having a later job of its own jump ahead.
//!
//! # Reservation and EASY backfill (backfill on)
//!
//! At most one job holds a [`Reservation`]. It is state carried between
//! cycles: `run_cycle` takes the previous cycle's
//! [`CycleOutcome::reservation`] and returns the next one, so the function
//! stays pure.
//!
//! - **Starved head**: an effective head whose user is eligible, that has
//!   waited longer than the **starvation guard**
//!   (`now − submitted_at > starvation_guard`), fits no healthy cluster's
//!   free capacity, and is **passed over by backfill**: with no reservation
//!   held, a job of a user after it in fair-share order is about to be granted
//!   in this cycle (issue 43 §5–§6). A head that waits only because the
//!   cluster is full, served in order, is never starved: nothing jumps it, and
//!   a reservation would only put it before users that fall below it meanwhile
//!   (the two real-Ray fair-order tests); nor is one that waits only behind
//!   its own user's running jobs (issue 10's S/L scenario).
//! - **Making one**: with none held, the first head met in fair-share order
//!   (key, older head, user) that is past the guard and fits no free capacity
//!   gets it as soon as a later user's job is about to be granted, before that
//!   grant, which then goes ahead only if it does not delay the reservation.
//!   No grant, no reservation.
//!   (Issue 10 suggested the oldest starved head; on COARE that gave a
//!   fairness error of 0.142 against 0.108 for key order, at the same
//!   utilization and better under overload: BENCHMARKS.md.) It is placed on the cluster where
//!   the job can start **soonest** (smallest shadow time; unknown last; ties
//!   by name) among those that could ever hold it.
//! - **Sticking**: a held reservation keeps its job whatever the keys do, and
//!   its cluster while that cluster stays healthy and could hold the job
//!   (else it moves to the soonest one). It ends when its job is granted, or
//!   leaves the input (cancelled), or is no longer its user's effective head,
//!   or its user becomes ineligible for it (paused, at a limit): the policy
//!   never reorders a user's window. At the start of each cycle, if the
//!   reserved job fits some cluster's free capacity it is granted first,
//!   ahead of every key.
//! - **Shadow time** `S` and **extra capacity** `E` ([`shadow`], EASY: D.
//!   Lifka, JSSPP 1995; A. Mu'alem, D. Feitelson, IEEE TPDS 2001): walking the
//!   reserved cluster's outstanding jobs by expected end (unknown last, past
//!   ends as `now`), `S` is the first end after which
//!   `free = (total − foreign) − (held − released)` holds the request, and
//!   `E = free(S) − request`. `S` is unknown (`None`) when it fits only once
//!   jobs without an estimate end.
//! - **Backfill rule**: on the reserved cluster a job may start now only if it
//!   fits the free capacity and either its estimate ends by `S`
//!   (`now + estimate ≤ S`, `S` known) or it fits in what is left of `E`
//!   (which it then uses up). A job without an estimate only ever uses `E`.
//!   Other clusters are not constrained. So, if jobs end by their estimates,
//!   the reserved job can start at `S`.
//! - **Reasons**: the reserved job gets [`PendingReason::Reserved`] (cluster,
//!   seconds until `S`, its wait); a head that fits free capacity but would
//!   delay the reservation gets [`PendingReason::BlockedByReservation`]; one
//!   that fits nowhere [`PendingReason::WaitingForCapacity`].
//!   [`CycleOutcome::stopped_for`] names the reserved job.
//!
//! # Decisions beyond DESIGN §2
//!
//! - **Jobs that can never run do not block.** A job larger than every healthy
//!   cluster's `total` ([`PendingReason::NoClusterLargeEnough`]), or larger on its
//!   own than its user's `max_resources` ([`PendingReason::ExceedsMaxResources`])
//!   or than that of its user's group or a group above it
//!   ([`PendingReason::ExceedsGroupMaxResources`]), is stepped over inside its user's window: the next job becomes the
//!   **effective head**. The reason is reported for each such job the cycle
//!   steps over; jobs behind the effective head are not looked at (so a cycle's
//!   cost does not grow with the windows' length).
//! - **No healthy cluster**: nothing is granted; each user's effective head gets
//!   [`PendingReason::NoHealthyCluster`] (unless the user is paused). Without
//!   clusters no job can be judged too large, so only `ExceedsMaxResources` is
//!   reported besides.
//! - **Pending reasons** go to each user's effective head, plus the per-job
//!   reasons above; a paused user's whole window gets
//!   [`PendingReason::Paused`]. Precedence for a head: `Paused`, then
//!   `MaxRunningJobs`, then `MaxResources`.
//! - **`stopped_for`** is set whenever capacity is held for one job: the
//!   reserved job (reason `Reserved`), or the head the cycle stopped at with
//!   backfill off (reason `WaitingForCapacity`).
//! - **Fitting tolerance**: [`Resources::fits_within`] allows a relative
//!   10⁻⁹ ([`FIT_TOLERANCE`]) so that `0.1 + 0.2` cores fits in `0.3`.
//! - **Invalid numbers** never panic: a weight that is not finite and positive
//!   gives the key `+∞` (served last), NaN keys and timestamps sort as `+∞`, a
//!   request with a NaN component fits nowhere.
//! - **Uniqueness**: user names and cluster names are assumed unique (the
//!   arbiter keys them by name). Determinism does not depend on it, but
//!   independence from the input order does.
//! - **Determinism**: users are processed in name order and clusters in name
//!   order internally; [`CycleOutcome::pending`] lists users by name, then
//!   jobs in window order.
//!
//! # Cost
//!
//! The decision is made by a [`Ledger`], which keeps users, clusters, outstanding
//! jobs and the reservation between cycles, indexed so that a cycle reads what it
//! grants and what changed, not every user (see [`ledger`] and DESIGN §2, "Cost").
//! [`run_cycle`] is one ledger cycle on a snapshot: O(U log U) to build the ledger
//! from U users, then the same decision. Property tests check the ledger against
//! the straightforward O(U) cycle kept, test-only, as their oracle. `cargo bench
//! --bench policy` measures both (BENCHMARKS.md, issue 11).
//!
//! Pending reasons are derived from the state a cycle leaves ([`Ledger::reason`]);
//! "blocked by the reservation" means the head fits free capacity as the cycle leaves
//! it, and would delay the reservation wherever it fits.

pub mod custom;
mod cycle;
pub mod estimate;
mod fit;
pub mod groups;
pub mod ledger;
mod licenses;
mod oracle;
mod preemption;
pub mod preview;
mod reservation;
mod resources;
mod share;
pub mod starvation;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use custom::Custom;

/// Largest weight a user may have (weights are relative; 1e6 to 1 is already
/// extreme). The API refuses others (422 naming `weight`), the simulator's weights file
/// too.
pub const MAX_WEIGHT: f64 = 1.0e6;
/// Smallest weight a user may have: keys `(share + usage) / weight` stay finite and
/// printable.
pub const MIN_WEIGHT: f64 = 1.0e-6;
pub use cycle::{run_cycle, run_cycle_in};
pub(crate) use fit::tightest;
pub use fit::{admits, best_fit, fits_some_cluster, short_of};
pub use groups::{GroupView, Tree};
pub use ledger::{CycleResult, Ledger, UserSettings, UserState};
pub use licenses::{frees as license_frees, without_licenses};
pub use preemption::{Preemption, PreemptionConfig};
pub use reservation::{shadow, OutstandingJob, Reservation, Shadow};
pub use resources::{ClusterView, Resources, FIT_TOLERANCE};
pub use share::{
    age_term, decay_usage, dominant_share, fair_share_key, fair_shares, fill_in_order,
    quantize_key, KEY_DROPPED_BITS,
};

/// Timestamps and durations, in seconds: Unix epoch time in the service,
/// seconds since the trace start in the simulator.
pub type Seconds = f64;

/// A job's id (the Ray `submission_id` too).
pub type JobId = uuid::Uuid;

/// One queued job, as much of it as the policy needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueuedJob {
    /// The job's id.
    pub job_id: JobId,
    /// What it requests (cores, GPUs, bytes).
    pub resources: Resources,
    /// Higher first within its user's queue; the policy does not reorder by
    /// it (the window comes in queue order), it is carried for callers.
    pub priority: i32,
    /// When it was submitted, seconds; an older effective head wins key ties,
    /// and the starvation guard and the age term measure from it.
    pub submitted_at: Seconds,
    /// How long it is expected to run once started, seconds, if known: live
    /// its `max_runtime_s`, else `scheduler.default_max_runtime`; in
    /// simulation the SWF requested time (field 9). Backfill uses it to decide
    /// whether the job ends before a reservation's expected start; a job
    /// without one never starts in front of a reservation except in capacity
    /// the reservation does not need.
    #[serde(default)]
    pub runtime_estimate: Option<Seconds>,
    /// The job may be stopped and queued again to give its capacity to a user
    /// below its fair share (DESIGN §2, "Preemption"); false by default.
    #[serde(default)]
    pub preemptible: bool,
    /// How many times it has been preempted so far (`attempt − 1` counts other
    /// requeues too; this counts preemptions only).
    #[serde(default)]
    pub preemptions: u32,
    /// The pool it must run in (issue 30: capacity a runner outside this service
    /// drives, a [`ClusterView`] with `pool` set and this name); `None`: a Ray
    /// cluster of the policy's choosing, never a pool ([`admits`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

impl QueuedJob {
    /// Job `job_id` asking for `resources` (cores, GPUs, bytes, custom amounts),
    /// submitted at `submitted_at` (seconds: Unix epoch time in the service, since
    /// the trace start in the simulator). The rest as a plain submission has it:
    /// priority 0, no runtime estimate, not preemptible, never preempted, no pool.
    #[must_use]
    pub fn new(job_id: JobId, resources: Resources, submitted_at: Seconds) -> Self {
        Self {
            job_id,
            resources,
            priority: 0,
            submitted_at,
            runtime_estimate: None,
            preemptible: false,
            preemptions: 0,
            pool: None,
        }
    }

    /// The job with priority `priority` (higher first within its user's queue).
    #[must_use]
    pub fn with_priority(self, priority: i32) -> Self {
        Self { priority, ..self }
    }

    /// The job expected to run `seconds` once started.
    #[must_use]
    pub fn with_runtime_estimate(self, seconds: Seconds) -> Self {
        Self {
            runtime_estimate: Some(seconds),
            ..self
        }
    }

    /// The job bound to the pool `pool`.
    #[must_use]
    pub fn with_pool(self, pool: impl Into<String>) -> Self {
        Self {
            pool: Some(pool.into()),
            ..self
        }
    }
}

/// One user's fair-share state at the start of a cycle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserView {
    /// The gateway's user id; unique among the users of one call.
    pub user: String,
    /// Weight `w_u > 0` (default 1): a user with weight 3 gets three times the
    /// dominant share of a user with weight 1.
    pub weight: f64,
    /// Paused by an admin: nothing new is granted, its jobs stay queued.
    pub paused: bool,
    /// Cap on outstanding jobs, already resolved against the configured
    /// default.
    pub max_running_jobs: u32,
    /// Cap on the user's allocation `A_u` in cores, GPUs and bytes, if any
    /// (custom resources are not capped: [`Resources::fits_cap`]).
    pub max_resources: Option<Resources>,
    /// Number of its DISPATCHING, PENDING and RUNNING jobs.
    pub outstanding_jobs: u32,
    /// `A_u`: the sum of those jobs' resources.
    pub allocation: Resources,
    /// Decayed usage `h_u` (a dominant share, dimensionless), valid at
    /// `usage_at`.
    pub usage: f64,
    /// When `usage` was last brought up to date, seconds.
    pub usage_at: Seconds,
    /// The path of the group the user belongs to (`ibm-q/open/main`; see
    /// [`groups`]); `None`, or a path the tree lacks: the root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// A prefix (window) of the user's QUEUED jobs, already in queue order
    /// (priority desc, `submitted_at`, id). The policy never reorders it.
    pub queue: Vec<QueuedJob>,
}

/// The policy's knobs (`[scheduler]` in the configuration).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyConfig {
    /// Half-life `T` of decayed usage, seconds; 0 turns history off.
    pub usage_half_life: Seconds,
    /// A head that fits nowhere, is passed over by backfill and has waited
    /// longer than this (seconds) gets the reservation when backfill is on
    /// (module doc).
    /// `f64::INFINITY` disables reservations.
    pub starvation_guard: Seconds,
    /// How many typical run times a head may wait before it counts as starved,
    /// when that is shorter than `starvation_guard` ([`starvation`]; the ledger
    /// learns the typical run time from the jobs that end). `0` or not finite: the
    /// wall-clock guard alone. The snapshot functions ([`run_cycle`]) take
    /// `starvation_guard` as the guard in force and ignore this.
    #[serde(default)]
    pub starvation_runs: f64,
    /// On: skip a user whose head does not fit and go on (EASY backfill
    /// around the reservation, if any). Off: stop there.
    pub backfill: bool,
    /// Weight `a` of the age term, in units of dominant share (0 turns it
    /// off): a user's key is lowered by `a · min(age / max_age, 1)`, where
    /// `age` is how long its effective head has waited.
    pub age_weight: f64,
    /// Age `M` at which the age term saturates, seconds (Slurm's
    /// `PriorityMaxAge`). `0` or not finite turns the term off.
    pub max_age: Seconds,
    /// Licenses (`[[licenses]]`; Slurm's licenses): custom resources with one count
    /// shared by every cluster rather than a capacity per cluster, e.g. "at most 4
    /// jobs hold a session on the quantum backend at once". A slot with a count
    /// above 0 is a license (module `policy::licenses`); empty: none.
    #[serde(default)]
    pub licenses: Custom,
}

/// A decision: start `job_id` of `user` on `cluster`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    /// The job's user.
    pub user: String,
    /// The job to start.
    pub job_id: JobId,
    /// Name of the healthy cluster it goes to.
    pub cluster: String,
    /// The job's request, now part of the user's allocation and taken from the
    /// cluster's free capacity.
    pub resources: Resources,
}

/// Why a queued job was not granted this cycle. [`fmt::Display`] gives the
/// sentence shown to users as `pending_reason`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum PendingReason {
    /// The user is paused by an admin.
    Paused,
    /// The user already has `limit` outstanding jobs.
    MaxRunningJobs {
        /// The user's `max_running_jobs`.
        limit: u32,
    },
    /// Starting the job would take the user's allocation over its
    /// `max_resources`; it can start once some of the user's jobs finish.
    MaxResources,
    /// The job alone requests more than the user's `max_resources`: it cannot
    /// start unless the limit is raised. It does not block the user's other
    /// jobs.
    ExceedsMaxResources,
    /// The job alone requests more than the `max_resources` of `group` (the user's
    /// group or one above it): it cannot start unless that limit is raised. It does
    /// not block the user's other jobs.
    ExceedsGroupMaxResources {
        /// The group's path.
        group: String,
    },
    /// No healthy cluster could hold the job even when empty. It does not
    /// block the user's other jobs.
    NoClusterLargeEnough,
    /// No cluster is healthy.
    NoHealthyCluster,
    /// A group the user belongs to (`group`, or one of its ancestors) is paused.
    GroupPaused {
        /// The paused group's path.
        group: String,
    },
    /// The users under `group` already have `limit` outstanding jobs.
    GroupMaxRunningJobs {
        /// The group's path.
        group: String,
        /// Its `max_running_jobs`.
        limit: u32,
    },
    /// Starting the job would take the allocation of the users under `group` over
    /// the group's `max_resources`.
    GroupMaxResources {
        /// The group's path.
        group: String,
    },
    /// No healthy cluster has enough free capacity right now.
    WaitingForCapacity {
        /// The resources it lacks after the cycle (`"cpu"`, `"gpu"`, `"memory"`,
        /// then custom names in name order): those no healthy cluster has enough
        /// of free, or, when each cluster lacks a different one, every resource
        /// some cluster lacks ([`fit::short_of`]). Omitted from JSON when empty.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        short: Vec<String>,
    },
    /// The job has waited longer than the starvation guard and holds the
    /// reservation: capacity on `cluster` is kept for it and only jobs that do
    /// not delay it may start there.
    Reserved {
        /// The reserved cluster.
        cluster: String,
        /// Seconds from this cycle until it is expected to start (all
        /// outstanding jobs there ending at their estimates), if known.
        expected_in: Option<Seconds>,
        /// How long it has waited, seconds.
        waited: Seconds,
    },
    /// The job fits free capacity now, but starting it would delay the
    /// reservation of `job_id` on every cluster where it fits (it runs past
    /// that job's expected start, or has no runtime estimate, and needs
    /// capacity the reservation needs).
    BlockedByReservation {
        /// The reserved job.
        job_id: JobId,
        /// Seconds from this cycle until that job is expected to start, if
        /// known.
        until_in: Option<Seconds>,
    },
    /// The job waited past `preemption.after` without fitting, its user below its
    /// fair share: `jobs` of users above theirs are being stopped on `cluster` so
    /// that it can start there (DESIGN §2, "Preemption").
    Preempting {
        /// The cluster where it will fit.
        cluster: String,
        /// The jobs being stopped for it.
        jobs: Vec<JobId>,
    },
    /// Backfill is off and the cycle stopped before this user's turn, at a job
    /// ahead in fair-share order that does not fit yet.
    WaitingBehind {
        /// The job that does not fit.
        job_id: JobId,
    },
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PendingReason::Paused => {
                write!(
                    f,
                    "the user is paused; its jobs wait until an admin resumes it"
                )
            }
            PendingReason::MaxRunningJobs { limit } => write!(
                f,
                "the user already has {limit} {} dispatched or running, its limit \
                 (max_running_jobs)",
                if *limit == 1 { "job" } else { "jobs" }
            ),
            PendingReason::MaxResources => write!(
                f,
                "starting this job would take the user's allocation over its resource limit \
                 (max_resources); it starts when some of the user's jobs finish"
            ),
            PendingReason::ExceedsMaxResources => write!(
                f,
                "this job alone requests more than the user's resource limit (max_resources); \
                 it cannot start unless the limit is raised"
            ),
            PendingReason::ExceedsGroupMaxResources { group } => write!(
                f,
                "this job alone requests more than the resource limit of group {group} \
                 (max_resources); it cannot start unless the limit is raised"
            ),
            PendingReason::NoClusterLargeEnough => write!(
                f,
                "no healthy cluster is large enough for this job's request, even when empty"
            ),
            PendingReason::NoHealthyCluster => write!(f, "no cluster is healthy right now"),
            PendingReason::GroupPaused { group } => write!(
                f,
                "the group {group} is paused; its users' jobs wait until an admin resumes it"
            ),
            // A limit of 0 lets nothing run: said so, not as if jobs finishing would help
            // (a fresh tester's finding).
            PendingReason::GroupMaxRunningJobs { group, limit: 0 } => write!(
                f,
                "group {group} lets none of its users' jobs run (max_running_jobs 0); \
                 they wait until an admin raises the limit"
            ),
            PendingReason::GroupMaxRunningJobs { group, limit } => write!(
                f,
                "the users of group {group} already have {limit} {} dispatched or running, \
                 its limit (max_running_jobs)",
                if *limit == 1 { "job" } else { "jobs" }
            ),
            PendingReason::GroupMaxResources { group } => write!(
                f,
                "starting this job would take the allocation of group {group} over its \
                 resource limit (max_resources); it starts when some of its jobs finish"
            ),
            PendingReason::WaitingForCapacity { short } => {
                write!(f, "waiting for enough free capacity on a cluster")?;
                if !short.is_empty() {
                    write!(f, " (short of {})", short.join(", "))?;
                }
                Ok(())
            }
            PendingReason::Reserved {
                cluster,
                expected_in,
                waited,
            } => {
                // Under 10 s, tenths: a guard that follows short run times can trip
                // after half a second, and "waited 0 s, longer than the guard" read wrong.
                let waited = if *waited < 10.0 {
                    format!("{waited:.1}")
                } else {
                    format!("{waited:.0}")
                };
                write!(
                    f,
                    "capacity on cluster {cluster} is reserved for this job (it has waited \
                     {waited} s, longer than the starvation guard); "
                )?;
                match expected_in {
                    Some(s) => write!(f, "expected to start in about {s:.0} s"),
                    None => write!(
                        f,
                        "its start time is unknown (jobs there have no runtime estimate)"
                    ),
                }
            }
            PendingReason::BlockedByReservation { job_id, until_in } => {
                write!(
                    f,
                    "free capacity is held for job {job_id}, which has waited longer than the \
                     starvation guard; this job would delay it"
                )?;
                match until_in {
                    Some(s) => write!(
                        f,
                        " (it may start before then if its runtime estimate ends within about \
                         {s:.0} s)"
                    ),
                    None => write!(f, " (its start time is unknown)"),
                }
            }
            PendingReason::Preempting { cluster, jobs } => {
                write!(
                    f,
                    "this job has waited past preemption.after and its user holds less than \
                     its fair share: {} {} of other users {} being stopped on cluster \
                      {cluster} to make room for it (",
                    jobs.len(),
                    if jobs.len() == 1 { "job" } else { "jobs" },
                    if jobs.len() == 1 { "is" } else { "are" }
                )?;
                for (i, j) in jobs.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{j}")?;
                }
                write!(f, ")")
            }
            PendingReason::WaitingBehind { job_id } => write!(
                f,
                "waiting behind job {job_id}, which comes first in fair-share order and does \
                 not fit yet (backfill is off)"
            ),
        }
    }
}

/// One user's place in the order after the cycle (the "next users" list).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserOrder {
    /// The user id.
    pub user: String,
    /// Key `(s_u + h_u) / w_u − g_u` after the cycle's grants, the age term
    /// taken from the user's effective head then (not quantized; the order
    /// uses [`quantize_key`] of it).
    pub key: f64,
    /// Dominant share `s_u` after the cycle's grants (fraction of capacity).
    pub share: f64,
    /// Decayed usage `h_u` brought to the cycle's `now`; persist it with
    /// `usage_at = now`.
    pub usage: f64,
}

/// What a cycle decided.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CycleOutcome {
    /// The jobs to start, in grant order.
    pub grants: Vec<Grant>,
    /// Jobs in the input windows that were not granted, with the reason to
    /// show: at least each user's effective head, plus jobs that can never run
    /// and a paused user's whole window. Listed by user name, then window
    /// order.
    pub pending: Vec<(JobId, PendingReason)>,
    /// Every user whose input window was not empty, in the order the next
    /// cycle would serve them (key, then oldest remaining head, then user id).
    pub order: Vec<UserOrder>,
    /// Set when capacity is held for this job: it holds the reservation
    /// (backfill on), or backfill is off and it was the first head that did
    /// not fit (the cycle stopped there).
    pub stopped_for: Option<JobId>,
    /// The reservation after this cycle: pass it to the next cycle. `None`
    /// when none was held and no head past the starvation guard was passed over
    /// by backfill, or the reserved job was granted this cycle.
    pub reservation: Option<Reservation>,
}
