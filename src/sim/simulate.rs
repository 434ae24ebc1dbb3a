//! Discrete-event simulation of one cluster in virtual time, driving the same
//! [`crate::policy::run_cycle`] the arbiter runs, and two baselines.
//!
//! # Model
//!
//! One cluster named [`CLUSTER_NAME`] with `capacity` cores (unit-CPU slots;
//! `Resources { cpu: capacity, gpu: 0, memory_bytes: 0 }`). Each trace job is
//! one job of `cpus` cores that runs `run` seconds for its user once started.
//! Jobs larger than the capacity are skipped and listed
//! ([`SimOutcome::too_large`]). Time is the trace's: seconds since its start.
//!
//! Events are submits and finishes (and, for the gateway loop, its passes).
//! All events at one instant are processed as a batch (finishes first, then
//! submits), then one scheduling step runs at that instant.
//!
//! # Policies ([`SimPolicy`])
//!
//! - **fairshare**: one call to [`crate::policy::run_cycle`] per step, with
//!   the arbiter's semantics: weight per user (default 1), decayed usage `h_u`
//!   with the given half-life, brought to `now` with
//!   [`crate::policy::decay_usage`] before each allocation change (a finish)
//!   and for every user before each cycle; `max_running_jobs` as configured
//!   (default unlimited), backfill on, the given starvation guard. A user's
//!   window is the shortest prefix of its queue whose cores exceed the free
//!   cores (or the whole queue): every job is at least 1 core, so a cycle can
//!   never reach further into a queue, and the result is exactly that of
//!   passing the whole queue. A step in which no user's head fits the free
//!   cores would grant nothing, so `run_cycle` is not called then (usage is
//!   still brought to `now`, as the arbiter does).
//! - **fifo**: one global queue in submit order (ties by job number), no
//!   backfill: start jobs from its head while the head fits, stop at the first
//!   that does not.
//! - **gateway-loop**: the polling loop this project replaces. A pass every
//!   [`GATEWAY_PASS_INTERVAL_S`] (at whole seconds of trace time, after the
//!   events of that instant); in each pass, the users with fewer than
//!   [`GATEWAY_MAX_RUNNING`] running jobs are visited in a random order (a
//!   [`rand::rngs::SmallRng`] seeded with [`SimConfig::seed`]) and each gets at
//!   most its oldest queued job, if it fits the free cores (else it is skipped
//!   for this pass). Passes are only simulated when one can change something:
//!   after a pass that started a job, the next second; after events, the next
//!   whole second. A pass that starts nothing leaves the state as it was, so
//!   skipping the idle passes between events gives the same schedule as
//!   running all of them; only the random stream differs (it is drawn only in
//!   passes where some user's oldest job fits).
//!
//! # Fairness bookkeeping
//!
//! After each step the simulator takes a snapshot of every user's actual
//! share and fair share (defined in [`super::report`]) and integrates it,
//! piecewise constant, up to the next event: the state only changes at events,
//! so the time averages are exact, not sampled.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use super::report::{fair_shares, jain_index};
use super::swf::TraceJob;
use crate::policy::{
    self, ClusterView, JobId, OutstandingJob, PolicyConfig, QueuedJob, Reservation, Resources,
    Seconds, UserView,
};

/// Name of the single simulated cluster.
pub const CLUSTER_NAME: &str = "sim";

/// Seconds between two passes of the gateway loop.
pub const GATEWAY_PASS_INTERVAL_S: Seconds = 1.0;

/// The gateway loop starts a job for a user only while the user has fewer than
/// this many running jobs.
pub const GATEWAY_MAX_RUNNING: u32 = 2;

/// Default seed of the gateway loop's random user order.
pub const DEFAULT_SEED: u64 = 42;

/// Default half-life of decayed usage, seconds (the service's default, 1 h).
pub const DEFAULT_HALF_LIFE_S: Seconds = 3600.0;

/// Default starvation guard, seconds (the service's default, 5 min).
pub const DEFAULT_STARVATION_GUARD_S: Seconds = 300.0;

/// A scheduling policy the simulator can replay a trace with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SimPolicy {
    /// Weighted fair share with decayed usage, backfill and the starvation
    /// guard: [`crate::policy::run_cycle`].
    #[serde(rename = "fairshare")]
    FairShare,
    /// Strict submit order, no backfill.
    #[serde(rename = "fifo")]
    Fifo,
    /// The polling loop of the API gateway: a pass a second, at most one job
    /// per user per pass, at most 2 running per user, random user order.
    #[serde(rename = "gateway-loop")]
    GatewayLoop,
}

impl SimPolicy {
    /// All policies, in the order the comparison prints them.
    pub const ALL: [SimPolicy; 3] = [
        SimPolicy::FairShare,
        SimPolicy::Fifo,
        SimPolicy::GatewayLoop,
    ];

    /// The policy's name on the command line and in reports: `fairshare`,
    /// `fifo` or `gateway-loop`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            SimPolicy::FairShare => "fairshare",
            SimPolicy::Fifo => "fifo",
            SimPolicy::GatewayLoop => "gateway-loop",
        }
    }
}

impl fmt::Display for SimPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A policy name that is not one of `fairshare`, `fifo`, `gateway-loop`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {0:?}: expected fairshare, fifo or gateway-loop")]
pub struct UnknownPolicy(pub String);

impl FromStr for SimPolicy {
    type Err = UnknownPolicy;

    /// Parses `fairshare` (also `fair-share`, `fair_share`), `fifo`,
    /// `gateway-loop` (also `gateway_loop`, `gateway`), ignoring ASCII case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fairshare" | "fair-share" | "fair_share" => Ok(SimPolicy::FairShare),
            "fifo" => Ok(SimPolicy::Fifo),
            "gateway-loop" | "gateway_loop" | "gateway" => Ok(SimPolicy::GatewayLoop),
            _ => Err(UnknownPolicy(s.to_owned())),
        }
    }
}

/// Everything one simulation run needs besides the trace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimConfig {
    /// The policy to replay with.
    pub policy: SimPolicy,
    /// Cores of the simulated cluster.
    pub capacity: u32,
    /// Half-life `T` of decayed usage, seconds; 0 turns history off
    /// (fairshare only).
    pub half_life_s: Seconds,
    /// Starvation guard, seconds; `f64::INFINITY` disables it (fairshare only).
    pub starvation_guard_s: Seconds,
    /// Backfill on (EASY around the reservation) or off (strict order)
    /// (fairshare only).
    pub backfill: bool,
    /// Weight of the age term, dominant-share units (fairshare only).
    pub age_weight: f64,
    /// Age at which the age term saturates, seconds (fairshare only).
    pub max_age_s: Seconds,
    /// Cap on each user's running jobs (fairshare only); `u32::MAX` =
    /// unlimited.
    pub max_running_jobs: u32,
    /// Weight per user; users not listed have weight 1 (fairshare's order,
    /// and every policy's fair share in the fairness metrics).
    pub weights: BTreeMap<String, f64>,
    /// Seed of the gateway loop's random user order.
    pub seed: u64,
    /// Users whose actual and fair share over time are recorded in
    /// [`SimOutcome::series`] (for plots).
    #[serde(skip)]
    pub record_shares_for: Vec<String>,
}

impl SimConfig {
    /// A configuration with the service's defaults: half-life
    /// [`DEFAULT_HALF_LIFE_S`], starvation guard [`DEFAULT_STARVATION_GUARD_S`],
    /// unlimited running jobs, all weights 1, seed [`DEFAULT_SEED`], nothing
    /// recorded.
    #[must_use]
    pub fn new(policy: SimPolicy, capacity: u32) -> SimConfig {
        SimConfig {
            policy,
            capacity,
            half_life_s: DEFAULT_HALF_LIFE_S,
            starvation_guard_s: DEFAULT_STARVATION_GUARD_S,
            backfill: true,
            age_weight: policy::DEFAULT_AGE_WEIGHT,
            max_age_s: policy::default_max_age(),
            max_running_jobs: u32::MAX,
            weights: BTreeMap::new(),
            seed: DEFAULT_SEED,
            record_shares_for: Vec::new(),
        }
    }

    /// The weight of `user`: from [`SimConfig::weights`], else 1.
    #[must_use]
    pub fn weight_of(&self, user: &str) -> f64 {
        self.weights.get(user).copied().unwrap_or(1.0)
    }
}

/// One job as it ran in the simulation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobOutcome {
    /// The trace's job number.
    pub number: u64,
    /// Index of its user in [`SimOutcome::users`].
    pub user: usize,
    /// Cores it held.
    pub cpus: u32,
    /// Submit time, seconds since the trace start.
    pub submit: Seconds,
    /// Start time, seconds since the trace start.
    pub start: Seconds,
    /// Run time, seconds.
    pub run: Seconds,
}

impl JobOutcome {
    /// Seconds between submit and start.
    #[must_use]
    pub fn wait(&self) -> Seconds {
        self.start - self.submit
    }

    /// Finish time, seconds since the trace start.
    #[must_use]
    pub fn finish(&self) -> Seconds {
        self.start + self.run
    }
}

/// A user's actual and fair share from time `t` until the next point.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SharePoint {
    /// Seconds since the trace start.
    pub t: Seconds,
    /// Cores the user holds / capacity.
    pub actual: f64,
    /// The user's weighted, demand-capped fair share (0 without demand).
    pub fair: f64,
}

/// One user's shares over time, piecewise constant: a point is recorded only
/// when a value changes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShareSeries {
    /// The user id.
    pub user: String,
    /// Change points in time order.
    pub points: Vec<SharePoint>,
}

/// What a simulation run produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimOutcome {
    /// The policy that ran.
    pub policy: SimPolicy,
    /// Cores of the cluster.
    pub capacity: u32,
    /// User ids; [`JobOutcome::user`] indexes this.
    pub users: Vec<String>,
    /// Weight of each user, same index.
    pub weights: Vec<f64>,
    /// Every job that ran, in trace (submit) order.
    pub jobs: Vec<JobOutcome>,
    /// Job numbers skipped because they request more cores than the capacity.
    pub too_large: Vec<u64>,
    /// Job numbers still queued when no event was left (always empty unless a
    /// policy can leave a fitting job queued forever).
    pub never_started: Vec<u64>,
    /// Seconds during which at least one job was queued.
    pub queued_s: Seconds,
    /// ∫ free cores dt while at least one job was queued, core-seconds.
    pub idle_while_queued_core_s: f64,
    /// ∫ fairness error dt over queued time (the definition before issue 10,
    /// which called all queued time contended), for comparison.
    pub queued_error_integral: f64,
    /// Seconds of contention (see [`super::report`]): some user is backlogged
    /// and the users' demands, each capped at the capacity, sum to more than
    /// the capacity.
    pub contended_s: Seconds,
    /// ∫ fairness error dt over contended time.
    pub fairness_error_integral: f64,
    /// Seconds of contended time in which some backlogged user holds cores:
    /// the time Jain's index is scored over.
    pub jain_s: Seconds,
    /// ∫ Jain's index dt over `jain_s`.
    pub jain_integral: f64,
    /// Instants at which events were processed.
    pub steps: u64,
    /// Scheduling cycles (fairshare) or passes (gateway-loop) actually run,
    /// or FIFO steps that started something.
    pub cycles: u64,
    /// Shares over time of [`SimConfig::record_shares_for`].
    pub series: Vec<ShareSeries>,
}

/// The users holding the most core-seconds (`cpus × run`) in `jobs`, counting
/// only jobs that fit `capacity`, most first (ties by user id); at most `n`.
#[must_use]
pub fn top_users_by_core_seconds(jobs: &[TraceJob], capacity: u32, n: usize) -> Vec<String> {
    let mut totals: HashMap<&str, f64> = HashMap::new();
    for job in jobs.iter().filter(|j| j.cpus <= capacity) {
        *totals.entry(job.user.as_str()).or_default() += f64::from(job.cpus) * job.run;
    }
    let mut ranked: Vec<(&str, f64)> = totals.into_iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    ranked
        .into_iter()
        .take(n)
        .map(|(u, _)| u.to_owned())
        .collect()
}

/// The policy's job id of trace job `number`.
#[must_use]
pub fn job_id(number: u64) -> JobId {
    JobId::from_u128(u128::from(number))
}

/// A job that fits, as the simulation keeps it.
struct SimJob {
    number: u64,
    user: usize,
    cpus: u32,
    submit: Seconds,
    run: Seconds,
    /// Runtime estimate (the SWF requested time), seconds.
    estimate: Option<Seconds>,
    start: Option<Seconds>,
}

/// Per-user state.
struct UserState {
    name: String,
    weight: f64,
    /// Queued jobs (indices into `jobs`) in submit order.
    queue: VecDeque<usize>,
    queued_cores: u64,
    running_cores: u64,
    running_jobs: u32,
    /// Decayed usage `h_u` at `usage_at`.
    usage: f64,
    usage_at: Seconds,
}

/// A finish event: time, then job index (a min-heap through `Reverse`).
#[derive(Clone, Copy, Debug)]
struct Finish(Seconds, usize);

impl Ord for Finish {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

impl PartialOrd for Finish {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Finish {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Finish {}

/// Fairness metrics of the state between two events.
#[derive(Clone, Copy, Debug, Default)]
struct Snapshot {
    /// Free cores while some job is queued (else 0).
    idle_while_queued: f64,
    /// The fairness error whether contended or not (0 when nothing queues).
    queued_error: f64,
    queued: bool,
    contended: bool,
    fairness_error: f64,
    /// Jain's index, when some backlogged user holds cores.
    jain: Option<f64>,
}

struct Sim<'c> {
    config: &'c SimConfig,
    policy_config: PolicyConfig,
    /// The policy's reservation, carried between cycles.
    reservation: Option<Reservation>,
    capacity: Resources,
    jobs: Vec<SimJob>,
    users: Vec<UserState>,
    user_index: HashMap<String, usize>,
    /// FIFO's global queue (job indices in submit order).
    fifo: VecDeque<usize>,
    finishes: BinaryHeap<Reverse<Finish>>,
    used_cores: u64,
    queued_jobs: usize,
    rng: SmallRng,
    // Fairness bookkeeping.
    last_t: Seconds,
    snapshot: Snapshot,
    queued_s: Seconds,
    idle_integral: f64,
    queued_error_integral: f64,
    contended_s: Seconds,
    error_integral: f64,
    jain_s: Seconds,
    jain_integral: f64,
    /// (user index, series) for the recorded users.
    series: Vec<(usize, ShareSeries)>,
    steps: u64,
    cycles: u64,
    // Scratch buffers for snapshots.
    scratch_users: Vec<usize>,
    scratch_weights: Vec<f64>,
    scratch_demands: Vec<f64>,
    scratch_fair: Vec<f64>,
    scratch_ratios: Vec<f64>,
}

/// Replays `trace` (jobs in any order; they are taken in submit order, ties by
/// job number) under `config` and returns what happened.
///
/// Jobs requesting more than `config.capacity` cores are skipped and listed in
/// [`SimOutcome::too_large`]. Deterministic: the same inputs give the same
/// outcome (the gateway loop's randomness comes from `config.seed`).
#[must_use]
pub fn simulate(trace: &[TraceJob], config: &SimConfig) -> SimOutcome {
    let mut order: Vec<&TraceJob> = trace.iter().collect();
    order.sort_by(|a, b| a.submit.total_cmp(&b.submit).then(a.number.cmp(&b.number)));

    let mut users: Vec<UserState> = Vec::new();
    let mut user_index: HashMap<String, usize> = HashMap::new();
    let mut jobs = Vec::with_capacity(order.len());
    let mut too_large = Vec::new();
    for job in order {
        if job.cpus > config.capacity {
            too_large.push(job.number);
            continue;
        }
        let user = match user_index.get(&job.user) {
            Some(&u) => u,
            None => {
                user_index.insert(job.user.clone(), users.len());
                users.push(UserState {
                    name: job.user.clone(),
                    weight: config.weight_of(&job.user),
                    queue: VecDeque::new(),
                    queued_cores: 0,
                    running_cores: 0,
                    running_jobs: 0,
                    usage: 0.0,
                    usage_at: job.submit,
                });
                users.len() - 1
            }
        };
        jobs.push(SimJob {
            number: job.number,
            user,
            cpus: job.cpus,
            submit: job.submit,
            run: job.run,
            estimate: job.requested_time,
            start: None,
        });
    }

    let series = config
        .record_shares_for
        .iter()
        .filter_map(|name| {
            let u = *user_index.get(name)?;
            Some((
                u,
                ShareSeries {
                    user: name.clone(),
                    points: Vec::new(),
                },
            ))
        })
        .collect();

    let mut sim = Sim {
        config,
        policy_config: PolicyConfig {
            usage_half_life: config.half_life_s,
            starvation_guard: config.starvation_guard_s,
            backfill: config.backfill,
            age_weight: config.age_weight,
            max_age: config.max_age_s,
        },
        reservation: None,
        capacity: Resources::new(f64::from(config.capacity), 0.0, 0.0),
        jobs,
        users,
        user_index,
        fifo: VecDeque::new(),
        finishes: BinaryHeap::new(),
        used_cores: 0,
        queued_jobs: 0,
        rng: SmallRng::seed_from_u64(config.seed),
        last_t: 0.0,
        snapshot: Snapshot::default(),
        queued_s: 0.0,
        idle_integral: 0.0,
        queued_error_integral: 0.0,
        contended_s: 0.0,
        error_integral: 0.0,
        jain_s: 0.0,
        jain_integral: 0.0,
        series,
        steps: 0,
        cycles: 0,
        scratch_users: Vec::new(),
        scratch_weights: Vec::new(),
        scratch_demands: Vec::new(),
        scratch_fair: Vec::new(),
        scratch_ratios: Vec::new(),
    };
    sim.run();
    sim.into_outcome(too_large)
}

impl Sim<'_> {
    fn run(&mut self) {
        let mut next = 0usize;
        let mut wake: Option<Seconds> = None;
        if let Some(first) = self.jobs.first() {
            self.last_t = first.submit;
        }
        loop {
            let mut t = f64::INFINITY;
            if let Some(job) = self.jobs.get(next) {
                t = job.submit;
            }
            if let Some(Reverse(Finish(at, _))) = self.finishes.peek() {
                t = t.min(*at);
            }
            if let Some(w) = wake {
                t = t.min(w);
            }
            if !t.is_finite() {
                break;
            }
            self.integrate(t);
            self.steps += 1;

            while let Some(&Reverse(Finish(at, j))) = self.finishes.peek() {
                if at > t {
                    break;
                }
                self.finishes.pop();
                self.finish(j, t);
            }
            while self.jobs.get(next).is_some_and(|job| job.submit <= t) {
                self.submit(next);
                next += 1;
            }

            match self.config.policy {
                SimPolicy::FairShare => {
                    self.fair_share_cycle(t);
                    wake = self.guard_wake(t);
                }
                SimPolicy::Fifo => self.fifo_step(t),
                SimPolicy::GatewayLoop => {
                    if wake.is_some_and(|w| w <= t) {
                        wake = None;
                    }
                    if t == t.floor() {
                        if self.gateway_pass(t) > 0 {
                            wake = Some(t + GATEWAY_PASS_INTERVAL_S);
                        }
                    } else {
                        let pass = t.ceil();
                        wake = Some(wake.map_or(pass, |w| w.min(pass)));
                    }
                }
            }
            self.take_snapshot(t);
        }
    }

    fn submit(&mut self, j: usize) {
        let job = &self.jobs[j];
        let user = &mut self.users[job.user];
        user.queue.push_back(j);
        user.queued_cores += u64::from(job.cpus);
        self.queued_jobs += 1;
        if self.config.policy == SimPolicy::Fifo {
            self.fifo.push_back(j);
        }
    }

    /// Starts job `j` (already removed from its user's queue) at `now`.
    fn start(&mut self, j: usize, now: Seconds) {
        let job = &mut self.jobs[j];
        job.start = Some(now);
        let cpus = u64::from(job.cpus);
        let user = &mut self.users[job.user];
        user.queued_cores -= cpus;
        user.running_cores += cpus;
        user.running_jobs += 1;
        self.used_cores += cpus;
        self.queued_jobs -= 1;
        self.finishes.push(Reverse(Finish(now + job.run, j)));
    }

    fn finish(&mut self, j: usize, now: Seconds) {
        let job = &self.jobs[j];
        let cpus = u64::from(job.cpus);
        let u = job.user;
        if self.config.policy == SimPolicy::FairShare {
            // The allocation changes: bring h_u to now with the share held so far.
            self.touch_usage(u, now);
        }
        let user = &mut self.users[u];
        user.running_cores -= cpus;
        user.running_jobs -= 1;
        self.used_cores -= cpus;
    }

    fn free_cores(&self) -> u64 {
        u64::from(self.config.capacity).saturating_sub(self.used_cores)
    }

    fn allocation(&self, u: usize) -> Resources {
        Resources::new(self.users[u].running_cores as f64, 0.0, 0.0)
    }

    fn touch_usage(&mut self, u: usize, now: Seconds) {
        let share = policy::dominant_share(&self.allocation(u), &self.capacity);
        let half_life = self.config.half_life_s;
        let user = &mut self.users[u];
        user.usage = policy::decay_usage(user.usage, user.usage_at, share, now, half_life);
        user.usage_at = now;
    }

    /// True when some user's oldest queued job fits the free cores.
    fn some_head_fits(&self, free: u64, eligible: impl Fn(&UserState) -> bool) -> bool {
        self.users.iter().any(|user| {
            eligible(user)
                && user
                    .queue
                    .front()
                    .is_some_and(|&j| u64::from(self.jobs[j].cpus) <= free)
        })
    }

    fn fair_share_cycle(&mut self, now: Seconds) {
        for u in 0..self.users.len() {
            self.touch_usage(u, now);
        }
        let free = self.free_cores();
        // Without a head that fits, run_cycle would grant nothing; it is
        // still called when it would make a reservation (no reservation held
        // and some head past the guard), so that the reservation exists from
        // the same instant as in the arbiter.
        let guard = self.config.starvation_guard_s;
        let starved = |user: &UserState| {
            user.queue
                .front()
                .is_some_and(|&j| now - self.jobs[j].submit > guard)
        };
        let may_reserve =
            self.config.backfill && self.reservation.is_none() && self.users.iter().any(starved);
        if !may_reserve && !self.some_head_fits(free, |_| true) {
            return;
        }
        let mut views = Vec::new();
        for (u, user) in self.users.iter().enumerate() {
            if user.queue.is_empty() {
                continue;
            }
            let mut queue = Vec::new();
            let mut cores = 0u64;
            for &j in &user.queue {
                let job = &self.jobs[j];
                queue.push(QueuedJob {
                    job_id: job_id(job.number),
                    resources: Resources::new(f64::from(job.cpus), 0.0, 0.0),
                    priority: 0,
                    submitted_at: job.submit,
                    runtime_estimate: job.estimate,
                });
                cores += u64::from(job.cpus);
                if cores > free {
                    break;
                }
            }
            views.push(UserView {
                user: user.name.clone(),
                weight: user.weight,
                paused: false,
                max_running_jobs: self.config.max_running_jobs,
                max_resources: None,
                outstanding_jobs: user.running_jobs,
                allocation: self.allocation(u),
                usage: user.usage,
                usage_at: user.usage_at,
                queue,
            });
        }
        let clusters = [ClusterView {
            name: CLUSTER_NAME.to_owned(),
            healthy: true,
            total: self.capacity,
            used_reported: Resources::ZERO,
            outstanding: Resources::new(self.used_cores as f64, 0.0, 0.0),
            jobs: self.outstanding_jobs(),
        }];
        let outcome = policy::run_cycle(
            now,
            &self.policy_config,
            &views,
            &clusters,
            self.reservation.as_ref(),
        );
        self.reservation = outcome.reservation;
        self.cycles += 1;
        for grant in outcome.grants {
            let Some(&u) = self.user_index.get(&grant.user) else {
                continue;
            };
            let queue = &self.users[u].queue;
            let position = if queue
                .front()
                .is_some_and(|&j| job_id(self.jobs[j].number) == grant.job_id)
            {
                Some(0)
            } else {
                queue
                    .iter()
                    .position(|&j| job_id(self.jobs[j].number) == grant.job_id)
            };
            if let Some(j) = position.and_then(|p| self.users[u].queue.remove(p)) {
                self.start(j, now);
            }
        }
    }

    /// When the next queued head will have waited longer than the starvation
    /// guard (just after `submit + guard`), if no reservation is held and that
    /// is after `now`: the simulator runs a cycle then, as the arbiter's
    /// periodic tick would, so that the reservation is made when the guard
    /// trips and not only at the next submit or finish.
    fn guard_wake(&self, now: Seconds) -> Option<Seconds> {
        let guard = self.config.starvation_guard_s;
        if !self.config.backfill || self.reservation.is_some() || !guard.is_finite() {
            return None;
        }
        self.users
            .iter()
            .filter_map(|user| user.queue.front())
            .map(|&j| (self.jobs[j].submit + guard).next_up())
            .filter(|&at| at > now)
            .min_by(f64::total_cmp)
    }

    /// The running jobs with their expected ends (start + estimate).
    fn outstanding_jobs(&self) -> Vec<OutstandingJob> {
        self.finishes
            .iter()
            .map(|Reverse(Finish(_, j))| {
                let job = &self.jobs[*j];
                OutstandingJob {
                    resources: Resources::new(f64::from(job.cpus), 0.0, 0.0),
                    expected_end: job.start.zip(job.estimate).map(|(s, e)| s + e),
                }
            })
            .collect()
    }

    fn fifo_step(&mut self, now: Seconds) {
        let mut started = false;
        while let Some(&j) = self.fifo.front() {
            if u64::from(self.jobs[j].cpus) > self.free_cores() {
                break;
            }
            self.fifo.pop_front();
            let u = self.jobs[j].user;
            // Within a user, FIFO order is the user's own queue order.
            let queue = &mut self.users[u].queue;
            if queue.front() == Some(&j) {
                queue.pop_front();
            } else if let Some(p) = queue.iter().position(|&k| k == j) {
                queue.remove(p);
            }
            self.start(j, now);
            started = true;
        }
        if started {
            self.cycles += 1;
        }
    }

    /// One pass of the gateway loop at `now`; returns how many jobs it started.
    fn gateway_pass(&mut self, now: Seconds) -> usize {
        let eligible = |user: &UserState| user.running_jobs < GATEWAY_MAX_RUNNING;
        if !self.some_head_fits(self.free_cores(), eligible) {
            return 0;
        }
        self.cycles += 1;
        let mut candidates: Vec<usize> = (0..self.users.len())
            .filter(|&u| eligible(&self.users[u]) && !self.users[u].queue.is_empty())
            .collect();
        candidates.sort_by(|&a, &b| self.users[a].name.cmp(&self.users[b].name));
        candidates.shuffle(&mut self.rng);
        let mut started = 0;
        for u in candidates {
            let free = self.free_cores();
            if free == 0 {
                break;
            }
            let Some(&j) = self.users[u].queue.front() else {
                continue;
            };
            if u64::from(self.jobs[j].cpus) <= free {
                self.users[u].queue.pop_front();
                self.start(j, now);
                started += 1;
            }
        }
        started
    }

    /// Adds the current snapshot over `[last_t, t)`.
    fn integrate(&mut self, t: Seconds) {
        let dt = t - self.last_t;
        if dt > 0.0 && self.snapshot.queued {
            self.queued_s += dt;
            self.idle_integral += self.snapshot.idle_while_queued * dt;
            self.queued_error_integral += self.snapshot.queued_error * dt;
        }
        if dt > 0.0 && self.snapshot.contended {
            self.contended_s += dt;
            self.error_integral += self.snapshot.fairness_error * dt;
            if let Some(jain) = self.snapshot.jain {
                self.jain_s += dt;
                self.jain_integral += jain * dt;
            }
        }
        self.last_t = self.last_t.max(t);
    }

    /// Computes the fairness metrics of the state after the step at `t`.
    fn take_snapshot(&mut self, t: Seconds) {
        let queued = self.queued_jobs > 0;
        self.snapshot = Snapshot {
            idle_while_queued: if queued {
                self.free_cores() as f64
            } else {
                0.0
            },
            queued_error: 0.0,
            queued,
            contended: false,
            fairness_error: 0.0,
            jain: None,
        };
        if !queued && self.series.is_empty() {
            return;
        }
        let capacity = f64::from(self.config.capacity);
        self.scratch_users.clear();
        self.scratch_weights.clear();
        self.scratch_demands.clear();
        let mut capped_demand = 0u64;
        for (u, user) in self.users.iter().enumerate() {
            let demand = user.running_cores + user.queued_cores;
            if demand > 0 {
                self.scratch_users.push(u);
                self.scratch_weights.push(user.weight);
                self.scratch_demands.push(demand as f64 / capacity);
                capped_demand += demand.min(u64::from(self.config.capacity));
            }
        }
        let contended = queued && capped_demand > u64::from(self.config.capacity);
        fair_shares(
            &self.scratch_weights,
            &self.scratch_demands,
            &mut self.scratch_fair,
        );
        let mut error = 0.0;
        let mut backlogged_hold = false;
        self.scratch_ratios.clear();
        for (k, &u) in self.scratch_users.iter().enumerate() {
            let user = &self.users[u];
            let actual = user.running_cores as f64 / capacity;
            let fair = self.scratch_fair[k];
            error += (fair - actual).max(0.0);
            if !user.queue.is_empty() && fair > 0.0 {
                self.scratch_ratios.push(actual / fair);
                backlogged_hold |= user.running_cores > 0;
            }
        }
        if queued {
            self.snapshot.queued_error = error;
        }
        if contended {
            self.snapshot.contended = true;
            self.snapshot.fairness_error = error;
            if backlogged_hold {
                self.snapshot.jain = Some(jain_index(&self.scratch_ratios));
            }
        }
        for (u, series) in &mut self.series {
            let user = &self.users[*u];
            let actual = user.running_cores as f64 / capacity;
            let fair = self
                .scratch_users
                .iter()
                .position(|v| v == u)
                .map_or(0.0, |k| self.scratch_fair[k]);
            let changed = series
                .points
                .last()
                .is_none_or(|p| p.actual != actual || p.fair != fair);
            if changed {
                series.points.push(SharePoint { t, actual, fair });
            }
        }
    }

    fn into_outcome(self, too_large: Vec<u64>) -> SimOutcome {
        let mut outcome = SimOutcome {
            policy: self.config.policy,
            capacity: self.config.capacity,
            users: self.users.iter().map(|u| u.name.clone()).collect(),
            weights: self.users.iter().map(|u| u.weight).collect(),
            jobs: Vec::with_capacity(self.jobs.len()),
            too_large,
            never_started: Vec::new(),
            queued_s: self.queued_s,
            idle_while_queued_core_s: self.idle_integral,
            queued_error_integral: self.queued_error_integral,
            contended_s: self.contended_s,
            fairness_error_integral: self.error_integral,
            jain_s: self.jain_s,
            jain_integral: self.jain_integral,
            steps: self.steps,
            cycles: self.cycles,
            series: self.series.into_iter().map(|(_, s)| s).collect(),
        };
        for job in self.jobs {
            match job.start {
                Some(start) => outcome.jobs.push(JobOutcome {
                    number: job.number,
                    user: job.user,
                    cpus: job.cpus,
                    submit: job.submit,
                    start,
                    run: job.run,
                }),
                None => outcome.never_started.push(job.number),
            }
        }
        outcome
    }
}
