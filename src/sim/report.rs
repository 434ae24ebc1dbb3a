//! What a simulation run means: waits, bounded slowdown, utilization and
//! fairness, per user and overall, as a serializable [`Report`], text tables,
//! and the comparison of the three policies.
//!
//! # Definitions
//!
//! - **Wait** of a job: start − submit, seconds, to the start of the run that
//!   finished. **Time queued**: the wait less the runs preemption cut short
//!   (the same for a job never preempted). **p95**: the nearest-rank 95th
//!   percentile, the `⌈0.95·n⌉`-th smallest value.
//! - **Bounded slowdown** (Feitelson, Rudolph, Schwiegelshohn, Sevcik, Wong,
//!   "Theory and Practice in Parallel Job Scheduling", JSSPP 1997):
//!   `bsld = max(1, (wait + run) / max(run, τ))` with the bound
//!   `τ =` [`BSLD_BOUND_S`] = 10 s, so that very short jobs do not dominate
//!   the mean.
//! - **Utilization**: busy core-seconds (`Σ cpus × run` over the jobs that ran)
//!   / (capacity × makespan), where **makespan** = last finish − first submit,
//!   seconds. On an autoscaled cluster (`--autoscale`,
//!   [`super::simulate::autoscale`]) the denominator is instead the core-seconds
//!   *alive* (the head's cores and every worker's from up to removal) within the
//!   makespan; the capacity elsewhere below is the cluster's potential (what the
//!   policy divides), and a job's wait ends when a node holds it, not at its grant.
//! - **Actual share** of user `u` at time `t`: `actual_u` = cores in use by `u`
//!   / capacity.
//! - **Fair share**: `demand_u` = cores of `u`'s running and queued jobs /
//!   capacity; `fair_u` is the weighted max-min (water-filling) division of the
//!   whole cluster (1.0) among the users with demand, each capped at its demand
//!   ([`fair_shares`]): `fair_u = min(demand_u, w_u·λ)` with the level `λ` such
//!   that `Σ fair_u = min(1, Σ demand_u)`. With one resource this is what DRF
//!   (Ghodsi et al., "Dominant Resource Fairness", NSDI 2011) allocates in the
//!   limit of infinitely divisible jobs.
//! - **Backlogged** user: one with queued jobs. **Queued time**: some user is
//!   backlogged.
//! - **Contended**: some user is backlogged and `Σ_u min(demand_u, 1) > 1`
//!   over the users with demand (running or queued), i.e. the demands, each
//!   capped at the capacity, exceed the capacity. One user alone wanting more
//!   than the cluster is not contention. (Issue 10 sums over the backlogged
//!   users only; that would call "b queues while a, no longer backlogged,
//!   holds the whole cluster" uncontended, so users whose demand is all
//!   running count too.)
//! - **Idle while queued**: free cores integrated over queued time,
//!   reported as a percentage of capacity × makespan and as the mean number
//!   of idle cores during queued time: capacity a policy leaves unused while
//!   jobs wait (head-of-line blocking, reservations).
//! - **Fairness error**: `Σ_u max(0, fair_u − actual_u)`, the share of the
//!   cluster that users with demand are owed; time-averaged over contended time.
//!   While contended the fair shares sum to 1, so it splits exactly into
//!   **idle capacity** (free cores / capacity) plus what the other users hold
//!   **beyond their fair share** (`Σ_u max(0, actual_u − fair_u)`); the report
//!   gives the first part as `fairness_error_idle`. Without preemption neither
//!   part can reach 0: a job started while its user was alone keeps its cores
//!   when others arrive, and a wide job waits, its cores idle, until enough
//!   are free.
//! - **Jain's index** (R. Jain, D.-M. Chiu, W. Hawe, "A Quantitative Measure of
//!   Fairness and Discrimination for Resource Allocation in Shared Computer
//!   Systems", DEC TR-301, 1984) of `x_u = actual_u / fair_u` over the
//!   backlogged users: `(Σ x)² / (n · Σ x²)`, 1 when all get the same
//!   fraction of their fair share, `1/n` when one user gets everything;
//!   time-averaged over the contended time in which some backlogged user
//!   holds cores. Time in which no backlogged user holds anything is left
//!   out, not scored 1; with no such time the index is not reported.
//! - **Worst user's p95 wait**: the largest per-user p95 wait (over users that
//!   ran jobs): how long the worst-treated user's unlucky jobs wait.
//! - **Below-share and above-share users** (issue 47): a user is above its share
//!   when, over the contended time in which it has demand, its demand averages
//!   more than its fair share before the cap at demand (`λ·w_u`, `λ` the water
//!   level); the others stayed at or below it over the run's busy time. The p95
//!   wait of each group pools its users' jobs. In a comparison every policy is
//!   scored on FIFO's groups, so each is judged on the same users.
//!
//! The time averages are exact: the simulator evaluates the metrics after
//! every event (every state change) and integrates them, piecewise constant,
//! up to the next event. With no contended time the fairness error is 0.

use std::fmt::Write as _;

use serde::Serialize;

pub use super::stats::{bounded_slowdown, fair_shares, jain_index, mean, p95, BSLD_BOUND_S};

use super::simulate::{simulate, SimConfig, SimOutcome, SimPolicy};
use super::swf::TraceJob;

/// How many users [`Report::to_table`] lists (by jobs, most first).
pub const TABLE_USERS: usize = 15;

/// The whole run in numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Overall {
    /// Jobs that ran.
    pub jobs: usize,
    /// Jobs skipped because they request more cores than the capacity.
    pub skipped_too_large: usize,
    /// Their job numbers.
    pub skipped_job_numbers: Vec<u64>,
    /// Trace lines the reader could not use (unknown run time, user or
    /// processors, malformed).
    pub unparsed_lines: usize,
    /// Jobs that fit but never started (0 unless a policy is broken).
    pub never_started: usize,
    /// Busy core-seconds / (capacity × makespan), 0..1.
    pub utilization: f64,
    /// Last finish − first submit, seconds.
    pub makespan_s: f64,
    /// Mean wait, seconds.
    pub mean_wait_s: f64,
    /// Nearest-rank 95th percentile of the wait, seconds.
    pub p95_wait_s: f64,
    /// Mean bounded slowdown (bound 10 s).
    pub mean_bounded_slowdown: f64,
    /// The largest per-user p95 wait, seconds.
    pub worst_user_p95_wait_s: f64,
    /// The user with that p95 wait.
    pub worst_user: Option<String>,
    /// The largest per-user p95 time queued (the wait less the runs preemption
    /// cut short), seconds; the wait's when nothing was preempted.
    pub worst_user_p95_queued_s: f64,
    /// The user with that p95 time queued.
    pub worst_queued_user: Option<String>,
    /// Nearest-rank p95 wait of the jobs of the users whose demand stayed at or
    /// below their fair share over the contended time ([`SimOutcome::above_share`]
    /// false), seconds; `null` without such jobs. In a comparison the groups are
    /// FIFO's run's ([`Overall::share_groups_from`]), so every policy is scored
    /// on the same users.
    pub p95_wait_below_share_s: Option<f64>,
    /// The same over the users whose demand exceeded their fair share.
    pub p95_wait_above_share_s: Option<f64>,
    /// How many users were above their share.
    pub users_above_share: usize,
    /// The run whose demand decided the groups (the policy's own, or fifo).
    pub share_groups_from: SimPolicy,
    /// Time average over contended time of `Σ_u max(0, fair_u − actual_u)`.
    pub fairness_error: f64,
    /// Time average of Jain's index of `actual_u / fair_u` over backlogged
    /// users, over contended time in which some backlogged user holds cores;
    /// `null` when there is no such time.
    pub jain_index: Option<f64>,
    /// The part of `fairness_error` that is idle capacity: free cores /
    /// capacity, time-averaged over contended time. The rest,
    /// `fairness_error − fairness_error_idle`, is what users hold beyond their
    /// fair share (while contended the fair shares sum to 1, so the shortfall
    /// of the owed users is the idle capacity plus the excess of the others).
    pub fairness_error_idle: f64,
    /// The fairness error time-averaged over all queued time instead of
    /// contended time: the definition before issue 10, for comparison.
    pub fairness_error_over_queued_time: f64,
    /// Seconds with at least one job queued.
    pub queued_s: f64,
    /// Seconds of contention (capped demands exceed the capacity).
    pub contended_s: f64,
    /// Seconds over which Jain's index is averaged.
    pub jain_s: f64,
    /// Free cores while jobs queue, integrated, as a percentage of
    /// capacity × makespan.
    pub idle_while_queued_pct: f64,
    /// Mean free cores during queued time.
    pub mean_idle_cores_while_queued: f64,
    /// Preemptions made.
    pub preemptions: u64,
    /// Work lost to preemption: the core-hours of the runs it cut short.
    pub lost_core_hours: f64,
    /// That, as a percentage of the core-hours of the jobs that ran to the end.
    pub lost_pct: f64,
    /// Event instants processed.
    pub steps: u64,
    /// Scheduling cycles or passes that ran.
    pub cycles: u64,
    /// The autoscaler's figures (autoscaled runs only; then `utilization` is of the
    /// cores alive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<AutoscaleFigures>,
}

/// What an autoscaled cluster cost and did, within the makespan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AutoscaleFigures {
    /// The cluster: head, node types, start delay, idle timeout.
    pub cluster: crate::sim::simulate::Autoscale,
    /// Cores it can grow to (what the policy divides).
    pub potential_cores: u64,
    /// Core-seconds alive (head and workers up) within the makespan.
    pub alive_core_s: f64,
    /// Mean cores alive over the makespan.
    pub mean_alive_cores: f64,
    /// Worker node-seconds alive (up to removal) within the makespan.
    pub worker_node_s: f64,
    /// Busy core-seconds / (potential × makespan), 0..1: the fixed cluster's
    /// utilization for a cluster of the maximum size.
    pub utilization_of_potential: f64,
    /// Worker nodes launched, the `min` nodes present from the start included.
    pub workers_started: usize,
    /// Of those, the `min` nodes.
    pub workers_min: u64,
    /// Mean seconds between a job's grant and its start on a node (0 when a node
    /// had room).
    pub mean_node_wait_s: f64,
    /// Jobs that waited for a node after their grant.
    pub jobs_waited_for_node: usize,
}

/// One user's numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UserReport {
    /// The user id.
    pub user: String,
    /// Its weight.
    pub weight: f64,
    /// Jobs it ran.
    pub jobs: usize,
    /// `Σ cpus × run` of its jobs, core-seconds.
    pub core_seconds: f64,
    /// Mean wait, seconds.
    pub mean_wait_s: f64,
    /// Nearest-rank 95th percentile of the wait, seconds.
    pub p95_wait_s: f64,
    /// Nearest-rank 95th percentile of the time queued (the wait less the runs
    /// preemption cut short), seconds.
    pub p95_queued_s: f64,
    /// Mean bounded slowdown (bound 10 s).
    pub mean_bounded_slowdown: f64,
    /// Its demand exceeded its fair share at some contended instant (in the run
    /// named by [`Overall::share_groups_from`]).
    pub above_share: bool,
}

/// The settings `config`'s policy reads, as a run's header gives them: fairshare's
/// knobs, the gateway loop's seed, an anchor's documented defaults
/// ([`crate::sim::simulate::anchors::settings`]), nothing for FIFO (a tester took
/// fairshare's knobs in a FIFO header for FIFO's).
fn settings_of(config: &SimConfig) -> String {
    match config.policy {
        SimPolicy::FairShare => {
            let guard = match (
                config.starvation_guard_s.is_finite(),
                config.starvation_runs > 0.0,
            ) {
                (true, true) => format!(
                    "{} s (or {} × the typical run time)",
                    config.starvation_guard_s, config.starvation_runs
                ),
                (true, false) => format!("{} s", config.starvation_guard_s),
                (false, _) => "off".to_owned(),
            };
            let cap = if config.max_running_jobs == u32::MAX {
                String::new()
            } else {
                format!(
                    ", at most {} running jobs per user",
                    config.max_running_jobs
                )
            };
            let p = &config.preemption;
            let preemption = match config.preemptible {
                crate::sim::simulate::Preemptible::None => String::new(),
                _ if !p.after.is_finite() => ", preemption off".to_owned(),
                _ => format!(
                    ", preemption after {} s (min runtime {} s, at most {} per job, budget {} \
                     per {} s, shortfall {})",
                    p.after,
                    p.min_runtime,
                    p.max_per_job,
                    p.budget,
                    p.interval,
                    if p.shortfall { "on" } else { "off" }
                ),
            };
            // A max age of 0 turns the age term off (PolicyConfig::max_age): said, since
            // "age weight 0.05 (max age 0 s)" read as a term that saturates at once.
            let age_off = if config.max_age_s == 0.0 {
                ": age term off"
            } else {
                ""
            };
            format!(
                "half-life {} s, starvation guard {guard}, backfill {}, age weight {} (max age \
                 {} s{age_off}){cap}{preemption}, seed {}",
                config.half_life_s,
                if config.backfill { "on" } else { "off" },
                config.age_weight,
                config.max_age_s,
                config.seed
            )
        }
        SimPolicy::GatewayLoop => format!("seed {}", config.seed),
        SimPolicy::Fifo => String::new(),
        anchor => crate::sim::simulate::anchors::settings(anchor),
    }
}

/// The fairshare policy's knobs in a [`Report`] of a fairshare run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FairshareKnobs {
    /// Half-life of decayed usage, seconds.
    pub half_life_s: f64,
    /// Starvation guard, seconds; `null` in JSON when disabled.
    pub starvation_guard_s: Option<f64>,
    /// Typical run times a head may wait before it is starved, when shorter than
    /// the guard (0: the guard alone).
    pub starvation_runs: f64,
    /// Backfill on.
    pub backfill: bool,
    /// Weight of the age term.
    pub age_weight: f64,
    /// Age at which the age term saturates, seconds.
    pub max_age_s: f64,
    /// Cap on running jobs per user; `null` when unlimited.
    pub max_running_jobs: Option<u32>,
    /// Preemption's knobs.
    pub preemption: crate::policy::PreemptionConfig,
}

/// The report of one simulation run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// The trace's name (file name without `.swf` / `.gz`).
    pub trace: String,
    /// The policy.
    pub policy: SimPolicy,
    /// Cores of the simulated cluster.
    pub capacity_cores: u32,
    /// The policy's settings as its header gives them (an anchor's are its project's
    /// documented defaults, [`crate::sim::simulate::anchors::settings`]).
    pub settings: String,
    /// The fairshare policy's knobs, for a fairshare run only (absent in JSON for the
    /// other policies, which read none of them: a tester found fairshare's half-life
    /// and backfill recorded for a Slurm run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fairshare: Option<FairshareKnobs>,
    /// Seed of the gateway loop's random order.
    pub seed: u64,
    /// Which jobs could be preempted (fairshare, kueue-fair, armada).
    pub preemptible: crate::sim::simulate::Preemptible,
    /// Groups (`--groups`): none, or the trace's group field.
    #[serde(default)]
    pub groups: crate::sim::simulate::SimGroups,
    /// Numbers for the whole run.
    pub overall: Overall,
    /// Per user, most jobs first (ties by user id).
    pub users: Vec<UserReport>,
}

/// The largest of `figure` over `users` and whose it is (ties: the first user by
/// name); `None` without users.
fn worst(users: &[UserReport], figure: impl Fn(&UserReport) -> f64) -> Option<(f64, String)> {
    users
        .iter()
        .max_by(|a, b| {
            figure(a)
                .total_cmp(&figure(b))
                .then_with(|| b.user.cmp(&a.user))
        })
        .map(|u| (figure(u), u.user.clone()))
}

impl Report {
    /// Computes the report of `outcome`, run with `config` on the trace named
    /// `trace` that had `unparsed_lines` unusable lines.
    #[must_use]
    pub fn new(
        trace: &str,
        unparsed_lines: usize,
        config: &SimConfig,
        outcome: &SimOutcome,
    ) -> Report {
        let jobs = &outcome.jobs;
        let waits: Vec<f64> = jobs.iter().map(|j| j.wait()).collect();
        let first_submit = jobs.iter().map(|j| j.submit).fold(f64::INFINITY, f64::min);
        let last_finish = jobs
            .iter()
            .map(|j| j.finish())
            .fold(f64::NEG_INFINITY, f64::max);
        let makespan = if jobs.is_empty() {
            0.0
        } else {
            last_finish - first_submit
        };
        let busy: f64 = jobs.iter().map(|j| f64::from(j.cpus) * j.run).sum();
        let mut utilization = if makespan > 0.0 && outcome.capacity > 0 {
            busy / (f64::from(outcome.capacity) * makespan)
        } else {
            0.0
        };
        let autoscale = config
            .autoscale
            .as_ref()
            .zip(outcome.autoscale.as_ref())
            .map(|(cluster, nodes)| {
                let (alive_core_s, worker_node_s) = if jobs.is_empty() {
                    (0.0, 0.0)
                } else {
                    nodes.alive_within(first_submit, last_finish)
                };
                let node_waits: Vec<f64> = jobs
                    .iter()
                    .zip(&nodes.granted)
                    .map(|(j, &g)| j.start - g)
                    .collect();
                AutoscaleFigures {
                    cluster: cluster.clone(),
                    potential_cores: cluster.potential(),
                    alive_core_s,
                    mean_alive_cores: if makespan > 0.0 {
                        alive_core_s / makespan
                    } else {
                        0.0
                    },
                    worker_node_s,
                    utilization_of_potential: utilization,
                    workers_started: nodes.workers_started(),
                    workers_min: cluster.node_types.iter().map(|t| u64::from(t.min)).sum(),
                    mean_node_wait_s: mean(node_waits.iter().copied()),
                    jobs_waited_for_node: node_waits.iter().filter(|&&w| w > 0.0).count(),
                }
            });
        if let Some(a) = &autoscale {
            utilization = if a.alive_core_s > 0.0 {
                busy / a.alive_core_s
            } else {
                0.0
            };
        }
        let fairness_error = if outcome.contended_s > 0.0 {
            outcome.fairness_error_integral / outcome.contended_s
        } else {
            0.0
        };
        let jain = (outcome.jain_s > 0.0).then(|| outcome.jain_integral / outcome.jain_s);
        let capacity_time = f64::from(outcome.capacity) * makespan;
        let overall = Overall {
            jobs: jobs.len(),
            skipped_too_large: outcome.too_large.len(),
            skipped_job_numbers: outcome.too_large.clone(),
            unparsed_lines,
            never_started: outcome.never_started.len(),
            utilization,
            makespan_s: makespan,
            mean_wait_s: mean(waits.iter().copied()),
            p95_wait_s: p95(&waits),
            mean_bounded_slowdown: mean(jobs.iter().map(|j| bounded_slowdown(j.wait(), j.run))),
            worst_user_p95_wait_s: 0.0,
            worst_user: None,
            worst_user_p95_queued_s: 0.0,
            worst_queued_user: None,
            p95_wait_below_share_s: None,
            p95_wait_above_share_s: None,
            users_above_share: 0,
            share_groups_from: outcome.policy,
            fairness_error,
            fairness_error_idle: if outcome.contended_s > 0.0 {
                outcome.contended_idle_integral / outcome.contended_s
            } else {
                0.0
            },
            jain_index: jain,
            fairness_error_over_queued_time: if outcome.queued_s > 0.0 {
                outcome.queued_error_integral / outcome.queued_s
            } else {
                0.0
            },
            queued_s: outcome.queued_s,
            contended_s: outcome.contended_s,
            jain_s: outcome.jain_s,
            idle_while_queued_pct: if capacity_time > 0.0 {
                100.0 * outcome.idle_while_queued_core_s / capacity_time
            } else {
                0.0
            },
            mean_idle_cores_while_queued: if outcome.queued_s > 0.0 {
                outcome.idle_while_queued_core_s / outcome.queued_s
            } else {
                0.0
            },
            preemptions: outcome.preemptions,
            lost_core_hours: outcome.lost_core_s / 3600.0,
            lost_pct: if busy > 0.0 {
                100.0 * outcome.lost_core_s / busy
            } else {
                0.0
            },
            steps: outcome.steps,
            cycles: outcome.cycles,
            autoscale,
        };

        let mut per_user: Vec<Vec<usize>> = vec![Vec::new(); outcome.users.len()];
        for (k, job) in jobs.iter().enumerate() {
            if let Some(list) = per_user.get_mut(job.user) {
                list.push(k);
            }
        }
        let mut users: Vec<UserReport> = per_user
            .iter()
            .enumerate()
            .filter(|(_, list)| !list.is_empty())
            .map(|(u, list)| {
                let waits: Vec<f64> = list.iter().map(|&k| jobs[k].wait()).collect();
                let queued: Vec<f64> = list.iter().map(|&k| jobs[k].queued()).collect();
                UserReport {
                    user: outcome.users[u].clone(),
                    weight: outcome.weights.get(u).copied().unwrap_or(1.0),
                    jobs: list.len(),
                    core_seconds: list
                        .iter()
                        .map(|&k| f64::from(jobs[k].cpus) * jobs[k].run)
                        .sum(),
                    mean_wait_s: mean(waits.iter().copied()),
                    p95_wait_s: p95(&waits),
                    p95_queued_s: p95(&queued),
                    mean_bounded_slowdown: mean(
                        list.iter()
                            .map(|&k| bounded_slowdown(jobs[k].wait(), jobs[k].run)),
                    ),
                    above_share: false,
                }
            })
            .collect();
        users.sort_by(|a, b| b.jobs.cmp(&a.jobs).then_with(|| a.user.cmp(&b.user)));
        let mut overall = overall;
        if let Some((p95, user)) = worst(&users, |u| u.p95_wait_s) {
            overall.worst_user_p95_wait_s = p95;
            overall.worst_user = Some(user);
        }
        if let Some((p95, user)) = worst(&users, |u| u.p95_queued_s) {
            overall.worst_user_p95_queued_s = p95;
            overall.worst_queued_user = Some(user);
        }

        let mut report = Report {
            trace: trace.to_owned(),
            policy: outcome.policy,
            capacity_cores: outcome.capacity,
            settings: settings_of(config),
            fairshare: (outcome.policy == SimPolicy::FairShare).then(|| FairshareKnobs {
                half_life_s: config.half_life_s,
                starvation_guard_s: Some(config.starvation_guard_s).filter(|g| g.is_finite()),
                starvation_runs: config.starvation_runs,
                backfill: config.backfill,
                age_weight: config.age_weight,
                max_age_s: config.max_age_s,
                max_running_jobs: Some(config.max_running_jobs).filter(|&m| m != u32::MAX),
                preemption: config.preemption.clone(),
            }),
            seed: config.seed,
            preemptible: config.preemptible,
            groups: config.groups,
            overall,
            users,
        };
        report.group_by_share(outcome, &outcome.above_share, outcome.policy);
        report
    }

    /// Sets the below-share and above-share figures of `outcome`'s report from
    /// `above` (per user of the outcome: above its share), taken from the run of
    /// `from`.
    pub fn group_by_share(&mut self, outcome: &SimOutcome, above: &[bool], from: SimPolicy) {
        let is_above = |u: usize| above.get(u).copied().unwrap_or(false);
        let (mut below_waits, mut above_waits) = (Vec::new(), Vec::new());
        for job in &outcome.jobs {
            if is_above(job.user) {
                above_waits.push(job.wait());
            } else {
                below_waits.push(job.wait());
            }
        }
        let o = &mut self.overall;
        o.p95_wait_below_share_s = (!below_waits.is_empty()).then(|| p95(&below_waits));
        o.p95_wait_above_share_s = (!above_waits.is_empty()).then(|| p95(&above_waits));
        o.users_above_share = (0..outcome.users.len()).filter(|&u| is_above(u)).count();
        o.share_groups_from = from;
        for user in &mut self.users {
            if let Some(u) = outcome.users.iter().position(|n| *n == user.user) {
                user.above_share = is_above(u);
            }
        }
    }

    /// An aligned text table: the run's settings, the overall numbers, then
    /// the top [`TABLE_USERS`] users by jobs.
    #[must_use]
    pub fn to_table(&self) -> String {
        let o = &self.overall;
        let mut out = String::new();
        let knobs = if self.settings.is_empty() {
            String::new()
        } else {
            format!(", {}", self.settings)
        };
        let _ = writeln!(
            out,
            "{} — policy {}, capacity {} cores{knobs}{}",
            self.trace,
            self.policy,
            self.capacity_cores,
            match (self.groups, self.policy.is_anchor()) {
                (crate::sim::simulate::SimGroups::None, _) => "",
                (crate::sim::simulate::SimGroups::Swf, false) =>
                    ", groups from the trace (SWF field 13)",
                // A second tester: the anchors' order ignored the groups the header named.
                (crate::sim::simulate::SimGroups::Swf, true) =>
                    ", groups from the trace (SWF field 13) in the fair shares measured; \
                     its order is flat (its hierarchy is not modelled)",
            }
        );
        if let Some(a) = &o.autoscale {
            let _ = writeln!(
                out,
                "{} (the capacity is the potential; utilization is of the cores alive)",
                a.cluster.describe()
            );
        }
        let skipped = if o.skipped_job_numbers.is_empty() {
            o.skipped_too_large.to_string()
        } else {
            let shown: Vec<String> = o
                .skipped_job_numbers
                .iter()
                .take(10)
                .map(u64::to_string)
                .collect();
            let more = if o.skipped_job_numbers.len() > 10 {
                ", …"
            } else {
                ""
            };
            format!("{} (jobs {}{more})", o.skipped_too_large, shown.join(", "))
        };
        let mut rows = vec![
            vec!["jobs run".to_owned(), o.jobs.to_string()],
            vec![
                if o.autoscale.is_some() {
                    "skipped, wider than any node".to_owned()
                } else {
                    "skipped, larger than capacity".to_owned()
                },
                skipped,
            ],
            vec![
                "unparsed trace lines".to_owned(),
                o.unparsed_lines.to_string(),
            ],
            vec![
                "utilization".to_owned(),
                format!("{:.2} %", 100.0 * o.utilization),
            ],
            vec![
                "makespan".to_owned(),
                format!("{:.0} s ({:.1} h)", o.makespan_s, o.makespan_s / 3600.0),
            ],
            vec!["mean wait".to_owned(), format!("{:.1} s", o.mean_wait_s)],
            vec!["p95 wait".to_owned(), format!("{:.1} s", o.p95_wait_s)],
            vec![
                "worst user's p95 wait".to_owned(),
                format!(
                    "{:.1} s ({})",
                    o.worst_user_p95_wait_s,
                    o.worst_user.as_deref().unwrap_or("-")
                ),
            ],
            vec![
                "p95 wait, users at or below / above their share".to_owned(),
                format!(
                    "{} / {} ({} users above, by {}'s run)",
                    o.p95_wait_below_share_s
                        .map_or_else(|| "-".to_owned(), |p| format!("{p:.1} s")),
                    o.p95_wait_above_share_s
                        .map_or_else(|| "-".to_owned(), |p| format!("{p:.1} s")),
                    o.users_above_share,
                    o.share_groups_from.name()
                ),
            ],
            vec![
                "mean bounded slowdown".to_owned(),
                format!("{:.2}", o.mean_bounded_slowdown),
            ],
            vec![
                "fairness error".to_owned(),
                format!(
                    "{:.4} (idle capacity {:.4} + held beyond fair share {:.4})",
                    o.fairness_error,
                    o.fairness_error_idle,
                    o.fairness_error - o.fairness_error_idle
                ),
            ],
            vec!["Jain's index".to_owned(), jain_cell(o.jain_index)],
            vec![
                "preemptions".to_owned(),
                format!(
                    "{} ({:.1} core-hours lost, {:.2} % of the work done)",
                    o.preemptions, o.lost_core_hours, o.lost_pct
                ),
            ],
            vec![
                "time with some job queued".to_owned(),
                format!("{:.0} s", o.queued_s),
            ],
            vec![
                "contended time".to_owned(),
                format!("{:.0} s", o.contended_s),
            ],
            vec![
                "idle while jobs queue".to_owned(),
                format!(
                    "{:.2} % of capacity × makespan ({:.1} cores on average while queued)",
                    o.idle_while_queued_pct, o.mean_idle_cores_while_queued
                ),
            ],
        ];
        if let Some(a) = &o.autoscale {
            rows[3][0] = "utilization (of the cores alive)".to_owned();
            let extra = [
                vec![
                    "utilization of the potential".to_owned(),
                    format!(
                        "{:.2} % ({} cores × makespan)",
                        100.0 * a.utilization_of_potential,
                        a.potential_cores
                    ),
                ],
                vec![
                    "cores alive".to_owned(),
                    format!(
                        "{:.1} on average ({:.0} core-seconds)",
                        a.mean_alive_cores, a.alive_core_s
                    ),
                ],
                vec![
                    "worker nodes".to_owned(),
                    format!(
                        "{} started ({} of them the minimum, up from the start), \
                         {:.0} node-seconds alive",
                        a.workers_started, a.workers_min, a.worker_node_s
                    ),
                ],
                vec![
                    "wait for a node after the grant".to_owned(),
                    format!(
                        "{:.1} s on average ({} jobs waited)",
                        a.mean_node_wait_s, a.jobs_waited_for_node
                    ),
                ],
            ];
            for (k, row) in extra.into_iter().enumerate() {
                rows.insert(4 + k, row);
            }
        }
        if o.preemptions > 0 {
            // After the wait's row: the same less the runs preemption cut short.
            rows.insert(
                if o.autoscale.is_some() { 12 } else { 8 },
                vec![
                    "worst user's p95 time queued".to_owned(),
                    format!(
                        "{:.1} s ({})",
                        o.worst_user_p95_queued_s,
                        o.worst_queued_user.as_deref().unwrap_or("-")
                    ),
                ],
            );
        }
        out.push_str(&format_table(&["overall", "value"], &rows, &[false, false]));
        if o.never_started > 0 {
            let _ = writeln!(out, "WARNING: {} jobs never started", o.never_started);
        }
        out.push('\n');
        let rows: Vec<Vec<String>> = self
            .users
            .iter()
            .take(TABLE_USERS)
            .map(|u| {
                vec![
                    u.user.clone(),
                    format!("{}", u.weight),
                    u.jobs.to_string(),
                    format!("{:.1}", u.core_seconds / 3600.0),
                    format!("{:.1}", u.mean_wait_s),
                    format!("{:.1}", u.p95_wait_s),
                    format!("{:.2}", u.mean_bounded_slowdown),
                ]
            })
            .collect();
        let title = format!("top {} of {} users by jobs", rows.len(), self.users.len());
        let _ = writeln!(out, "{title}");
        out.push_str(&format_table(
            &[
                "user",
                "weight",
                "jobs",
                "core-h",
                "mean wait (s)",
                "p95 wait (s)",
                "mean bsld",
            ],
            &rows,
            &[false, true, true, true, true, true, true],
        ));
        out
    }
}

/// One run per policy on the same trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// One `(report, outcome)` per policy, in [`SimPolicy::ALL`] order.
    pub runs: Vec<(Report, SimOutcome)>,
}

/// Runs every policy of [`SimPolicy::ALL`] on `trace` with `base` (its
/// `policy` field is overridden) and reports each run.
#[must_use]
pub fn compare(
    trace_name: &str,
    unparsed_lines: usize,
    trace: &[TraceJob],
    base: &SimConfig,
) -> Comparison {
    let mut runs: Vec<(Report, SimOutcome)> = SimPolicy::ALL
        .iter()
        .map(|&policy| {
            let config = SimConfig {
                policy,
                ..base.clone()
            };
            let outcome = simulate(trace, &config);
            let report = Report::new(trace_name, unparsed_lines, &config, &outcome);
            (report, outcome)
        })
        .collect();
    // Every policy is scored on FIFO's groups: the same users in each.
    if let Some(above) = runs
        .iter()
        .find(|(r, _)| r.policy == SimPolicy::Fifo)
        .map(|(_, o)| o.above_share.clone())
    {
        for (report, outcome) in &mut runs {
            report.group_by_share(outcome, &above, SimPolicy::Fifo);
        }
    }
    Comparison { runs }
}

impl Comparison {
    /// One row per policy: policy, utilization %, makespan, mean and p95
    /// wait, worst user's p95 wait, mean bounded slowdown, idle-while-queued
    /// %, fairness error, Jain's index.
    #[must_use]
    pub fn to_table(&self) -> String {
        let reports: Vec<&Report> = self.runs.iter().map(|(r, _)| r).collect();
        comparison_table(&reports)
    }

    /// The report of `policy`'s run, if it ran.
    #[must_use]
    pub fn get(&self, policy: SimPolicy) -> Option<&(Report, SimOutcome)> {
        self.runs.iter().find(|(r, _)| r.policy == policy)
    }
}

/// Jain's index with four decimals, or `-` when it was never scored.
fn jain_cell(jain: Option<f64>) -> String {
    jain.map_or_else(|| "-".to_owned(), |j| format!("{j:.4}"))
}

/// The comparison table of any reports: one row each. When some run preempted,
/// two more columns: preemptions, and the work they lost (percent of the work done).
#[must_use]
pub fn comparison_table(reports: &[&Report]) -> String {
    let preempted = reports.iter().any(|r| r.overall.preemptions > 0);
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            let o = &r.overall;
            let mut row = vec![
                r.policy.to_string(),
                format!("{:.2}", 100.0 * o.utilization),
                format!("{:.0}", o.makespan_s),
                format!("{:.1}", o.mean_wait_s),
                format!("{:.1}", o.p95_wait_s),
                format!("{:.1}", o.worst_user_p95_wait_s),
                format!("{:.2}", o.mean_bounded_slowdown),
                format!("{:.2}", o.idle_while_queued_pct),
                format!("{:.4}", o.fairness_error),
                jain_cell(o.jain_index),
            ];
            if preempted {
                row.push(o.preemptions.to_string());
                row.push(format!("{:.2}", o.lost_pct));
            }
            row
        })
        .collect();
    let mut headers = vec![
        "policy",
        "util %",
        "makespan (s)",
        "mean wait (s)",
        "p95 wait (s)",
        "worst p95 (s)",
        "mean bsld",
        "idle q %",
        "fairness err",
        "Jain",
    ];
    if preempted {
        headers.extend(["preempted", "lost %"]);
    }
    let mut right = vec![true; headers.len()];
    right[0] = false;
    format_table(&headers, &rows, &right)
}

/// Formats rows under headers, columns padded to their widest cell; columns
/// flagged in `right` are right-aligned.
fn format_table(headers: &[&str], rows: &[Vec<String>], right: &[bool]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (k, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(k) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (k, cell) in cells.enumerate() {
            let width = widths.get(k).copied().unwrap_or(0);
            let pad = width.saturating_sub(cell.chars().count());
            if k > 0 {
                s.push_str("  ");
            }
            if right.get(k).copied().unwrap_or(false) {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            } else {
                s.push_str(cell);
                s.push_str(&" ".repeat(pad));
            }
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
        s
    };
    let mut out = line(&mut headers.iter().copied());
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    out.push_str(&line(&mut rule.iter().map(String::as_str)));
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}
