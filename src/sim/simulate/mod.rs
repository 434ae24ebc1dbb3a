//! Discrete-event simulation of one cluster in virtual time, driving the same
//! [`crate::policy::Ledger`] the arbiter keeps, and two baselines.
//!
//! # Model
//!
//! One cluster named [`CLUSTER_NAME`] with `capacity` cores (unit-CPU slots;
//! `Resources { cpu: capacity, gpu: 0, memory_bytes: 0 }`). Each trace job is
//! one job of `cpus` cores that runs `run` seconds for its user once started.
//! Jobs larger than the capacity are skipped and listed
//! ([`SimOutcome::too_large`]). Time is the trace's: seconds since its start.
//! With [`SimConfig::autoscale`] the cluster autoscales instead ([`autoscale`]: the
//! capacity is its potential, a granted job starts when a node that is up holds it,
//! nodes start after a delay and go when idle; node ups and removals are events too).
//!
//! Events are submits and finishes (and, for the gateway loop, its passes).
//! All events at one instant are processed as a batch (finishes first, then
//! submits), then one scheduling step runs at that instant.
//!
//! # Policies ([`SimPolicy`])
//!
//! - **fairshare**: one [`crate::policy::Ledger`] kept across the whole run and
//!   fed events as the arbiter feeds its own: the cluster's capacity once (a
//!   report of [`CLUSTER_NAME`]), each user's settings when it first submits
//!   (weight, default 1; `max_running_jobs` as configured, default unlimited),
//!   each submitted job appended to its user's window
//!   ([`crate::policy::Ledger::push_queued`]: the window is the user's whole
//!   queue), each finish ([`crate::policy::Ledger::end`]), and one
//!   [`crate::policy::Ledger::cycle`] per step whose grants start their jobs;
//!   the ledger keeps the reservation, decayed usage (the given half-life,
//!   brought forward at each allocation change) and the starvation guard. A step
//!   in which no user's head fits the free cores and no reservation can be made
//!   (one is held, or no head has waited past the guard) would grant nothing, so
//!   no cycle runs then; the heads are kept sorted by size and by submit time for
//!   that test. Each step thus costs what it changes, not the number of users or
//!   running jobs (issue 28: before, a ledger was built from a snapshot of every
//!   user and running job each step, [`crate::policy::run_cycle`]; the schedules
//!   are the same, `sim::golden` checks it).
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

pub mod anchors;
pub mod autoscale;
mod config;
pub mod estimates;
mod fairness;
mod outcome;
mod steps;

pub use autoscale::{Autoscale, AutoscaleOutcome, NodeLife, NodeType};
pub use config::{Preemptible, SimConfig, SimGroups, SimPolicy, UnknownPolicy};
pub use outcome::{
    job_id, top_users_by_core_seconds, JobOutcome, SharePoint, ShareSeries, SimOutcome,
};

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};

use super::swf::TraceJob;
use crate::policy::{GroupView, JobId, Ledger, PolicyConfig, Resources, Tree, UserSettings};
use crate::policy::{QueuedJob, Seconds};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// Name of the single simulated cluster.
pub const CLUSTER_NAME: &str = "sim";

/// Seconds between two passes of the gateway loop.
pub const GATEWAY_PASS_INTERVAL_S: Seconds = 1.0;

/// The gateway loop starts a job for a user only while the user has fewer than
/// this many running jobs.
pub const GATEWAY_MAX_RUNNING: u32 = 2;

/// Default seed of the gateway loop's random user order.
pub const DEFAULT_SEED: u64 = 42;

/// A job that fits, as the simulation keeps it.
struct SimJob {
    number: u64,
    user: usize,
    cpus: u32,
    submit: Seconds,
    run: Seconds,
    /// Runtime estimate (the SWF requested time), seconds.
    estimate: Option<Seconds>,
    /// When the policy granted its current run (the policy's "running").
    start: Option<Seconds>,
    /// When its current run started on a node: `start` on a fixed cluster; on an
    /// autoscaled one when a node that is up held it ([`autoscale`]).
    run_start: Option<Seconds>,
    /// It may be preempted.
    preemptible: bool,
    /// How many times it was preempted.
    preemptions: u32,
    /// Seconds of its runs that preemption cut short.
    cut_s: Seconds,
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
    /// Known to the ledger (it has submitted; fairshare only).
    in_ledger: bool,
    /// Its group's path (with `--groups swf`: its first job's group).
    group: Option<String>,
}

/// A finish event: time, then job index, then the job's preemptions when it
/// started (a finish of a run that was preempted is stale); a min-heap through
/// `Reverse`.
#[derive(Clone, Copy, Debug)]
struct Finish(Seconds, usize, u32);

impl Ord for Finish {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .total_cmp(&other.0)
            .then(self.1.cmp(&other.1))
            .then(self.2.cmp(&other.2))
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
    /// The policy's state across the run (fairshare only).
    ledger: Option<Ledger>,
    jobs: Vec<SimJob>,
    users: Vec<UserState>,
    /// FIFO's global queue (job indices in submit order).
    fifo: VecDeque<usize>,
    finishes: BinaryHeap<Reverse<Finish>>,
    /// Each user's oldest queued job (head), by submit time ([`time_key`]).
    heads: BTreeSet<(u64, usize)>,
    /// The heads' sizes: cores → how many heads ask for that many.
    head_cpus: BTreeMap<u32, usize>,
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
    contended_idle_integral: f64,
    jain_s: Seconds,
    jain_integral: f64,
    /// (user index, series) for the recorded users.
    series: Vec<(usize, ShareSeries)>,
    steps: u64,
    cycles: u64,
    /// Preemptions made, and the core-seconds of the runs they cut short.
    preemptions: u64,
    lost_core_s: f64,
    // Scratch buffers for snapshots.
    scratch_users: Vec<usize>,
    scratch_weights: Vec<f64>,
    scratch_demands: Vec<f64>,
    scratch_fair: Vec<f64>,
    scratch_ratios: Vec<f64>,
    share_order: fairness::ShareOrder,
    /// Submits and finishes so far: what each user's demand (running and
    /// queued cores) depends on (a start or a preemption moves cores between
    /// the two); and the count when the snapshot's demands and fair shares
    /// were last computed, with their capped demand.
    demand_changes: u64,
    snapshot_demands_at: Option<u64>,
    /// Submits, starts, preemptions and finishes so far (what the snapshot
    /// depends on), and the count when the snapshot was last taken.
    state_changes: u64,
    snapshot_at: Option<u64>,
    snapshot_capped_demand: u64,
    /// The groups (empty: none) and each user's path in the tree.
    tree: Tree,
    user_paths: Vec<Vec<usize>>,
    /// In the current snapshot (contended time only), each user with demand and
    /// its demand less its uncapped fair share `λ · w` (capacity fractions); per
    /// user, that integrated over contended time (fraction-seconds).
    over_users: Vec<(usize, f64)>,
    over_share_s: Vec<f64>,
    /// The policy is an anchor ([`SimPolicy::is_anchor`]), whose state follows.
    anchored: bool,
    anchor: anchors::AnchorState,
    /// The nodes of an autoscaled cluster ([`SimConfig::autoscale`]).
    scaler: Option<autoscale::Scaler>,
    /// Estimated starts being recorded (`simulate_with_estimates`, fairshare only).
    estimating: Option<estimates::EstimateState>,
}

/// Replays `trace` (jobs in any order; they are taken in submit order, ties by
/// job number) under `config` and returns what happened.
///
/// Jobs requesting more than `config.capacity` cores (autoscaled: than the widest
/// node) are skipped and listed in [`SimOutcome::too_large`]. Deterministic: the same inputs give the same
/// outcome (the gateway loop's randomness comes from `config.seed`).
#[must_use]
pub fn simulate(trace: &[TraceJob], config: &SimConfig) -> SimOutcome {
    run_sim(trace, config, None).0
}

/// [`simulate`], recording each job's estimated start at submit and comparing it with
/// its real start ([`estimates`]; issue 48 §2). Estimates are made for the fairshare
/// policy only (others give an empty report).
#[must_use]
pub fn simulate_with_estimates(
    trace: &[TraceJob],
    config: &SimConfig,
    options: estimates::EstimateOptions,
) -> (SimOutcome, estimates::EstimateReport) {
    run_sim(trace, config, Some(options))
}

fn run_sim(
    trace: &[TraceJob],
    config: &SimConfig,
    estimating: Option<estimates::EstimateOptions>,
) -> (SimOutcome, estimates::EstimateReport) {
    let mut order: Vec<&TraceJob> = trace.iter().collect();
    order.sort_by(|a, b| a.submit.total_cmp(&b.submit).then(a.number.cmp(&b.number)));

    let mut users: Vec<UserState> = Vec::new();
    let mut user_index: HashMap<String, usize> = HashMap::new();
    let mut jobs = Vec::with_capacity(order.len());
    let mut too_large = Vec::new();
    // On an autoscaled cluster a job runs on one node: no wider than the widest.
    let widest = config
        .autoscale
        .as_ref()
        .map_or(config.capacity, |a| a.widest_node().min(config.capacity));
    for job in order {
        if job.cpus > widest {
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
                    in_ledger: false,
                    group: match config.groups {
                        SimGroups::None => None,
                        SimGroups::Swf => job.group.clone(),
                    },
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
            run_start: None,
            preemptible: config.policy.preempts() && config.is_preemptible(job.number),
            preemptions: 0,
            cut_s: 0.0,
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

    // The groups the users name, each weight 1, and each user's path in their tree.
    let groups: Vec<GroupView> = users
        .iter()
        .filter_map(|u| u.group.as_deref())
        .collect::<std::collections::BTreeSet<&str>>()
        .into_iter()
        .map(GroupView::new)
        .collect();
    let tree = Tree::new(&groups);
    let user_paths: Vec<Vec<usize>> = users
        .iter()
        .map(|u| tree.path_of(u.group.as_deref()))
        .collect();
    let capacity = Resources::new(f64::from(config.capacity), 0.0, 0.0);
    let ledger = (config.policy == SimPolicy::FairShare).then(|| {
        let policy_config = PolicyConfig {
            usage_half_life: config.half_life_s,
            starvation_guard: config.starvation_guard_s,
            starvation_runs: config.starvation_runs,
            backfill: config.backfill,
            age_weight: config.age_weight,
            max_age: config.max_age_s,
            licenses: crate::policy::Custom::EMPTY,
        };
        let mut ledger = Ledger::new(policy_config, UserSettings::default());
        ledger.set_groups(&groups);
        let t0 = jobs.first().map_or(0.0, |j: &SimJob| j.submit);
        ledger.report_cluster(t0, CLUSTER_NAME, true, capacity, Resources::ZERO, |_| false);
        ledger
    });
    let anchored = config.policy.is_anchor();
    let anchor = if anchored {
        let weight_sum = users.iter().map(|u| u.weight).sum();
        anchors::AnchorState::new(users.len(), jobs.len(), weight_sum)
    } else {
        anchors::AnchorState::default()
    };
    let user_count = users.len();
    let scaler = config.autoscale.as_ref().map(|a| {
        let t0 = jobs.first().map_or(0.0, |j: &SimJob| j.submit);
        autoscale::Scaler::new(a, t0, jobs.len())
    });
    let mut sim = Sim {
        scaler,
        over_users: Vec::new(),
        over_share_s: vec![0.0; user_count],
        anchored,
        anchor,
        config,
        ledger,
        jobs,
        users,
        fifo: VecDeque::new(),
        finishes: BinaryHeap::new(),
        heads: BTreeSet::new(),
        head_cpus: BTreeMap::new(),
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
        contended_idle_integral: 0.0,
        jain_s: 0.0,
        jain_integral: 0.0,
        series,
        steps: 0,
        cycles: 0,
        preemptions: 0,
        lost_core_s: 0.0,
        scratch_users: Vec::new(),
        scratch_weights: Vec::new(),
        scratch_demands: Vec::new(),
        scratch_fair: Vec::new(),
        scratch_ratios: Vec::new(),
        share_order: fairness::ShareOrder::default(),
        demand_changes: 0,
        snapshot_demands_at: None,
        state_changes: 0,
        snapshot_at: None,
        snapshot_capped_demand: 0,
        tree,
        user_paths,
        estimating: estimating
            .filter(|_| config.policy == SimPolicy::FairShare)
            .map(estimates::EstimateState::new),
    };
    sim.run();
    let report = sim.estimate_report();
    (sim.into_outcome(too_large), report)
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
            if let Some(Reverse(Finish(at, _, _))) = self.finishes.peek() {
                t = t.min(*at);
            }
            if let Some(w) = wake {
                t = t.min(w);
            }
            if let Some(at) = self.scaler.as_ref().and_then(|s| s.next_event(self.last_t)) {
                t = t.min(at);
            }
            if !t.is_finite() {
                break;
            }
            self.integrate(t);
            self.steps += 1;

            while let Some(&Reverse(Finish(at, j, run))) = self.finishes.peek() {
                if at > t {
                    break;
                }
                self.finishes.pop();
                if run == self.jobs[j].preemptions {
                    self.finish(j, t);
                }
            }
            let first_new = next;
            while self.jobs.get(next).is_some_and(|job| job.submit <= t) {
                self.submit(next);
                next += 1;
            }

            match self.config.policy {
                SimPolicy::FairShare => {
                    self.fair_share_step(t);
                    wake = steps::earliest(self.guard_wake(t), self.preempt_wake(t));
                    if self.estimating.is_some() {
                        self.record_estimates(t, first_new..next);
                    }
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
                _ => self.anchor_step(t),
            }
            self.autoscale_step(t);
            self.take_snapshot(t);
        }
    }

    fn submit(&mut self, j: usize) {
        let job = &self.jobs[j];
        let (u, cpus, submit) = (job.user, job.cpus, job.submit);
        self.demand_changes += 1;
        self.state_changes += 1;
        let user = &mut self.users[u];
        if user.queue.is_empty() {
            self.heads.insert((time_key(submit), u));
            *self.head_cpus.entry(cpus).or_default() += 1;
        }
        user.queue.push_back(j);
        user.queued_cores += u64::from(cpus);
        self.queued_jobs += 1;
        if self.anchored {
            self.anchor_queued(u, cpus, true);
        }
        if self.config.policy == SimPolicy::Fifo {
            self.fifo.push_back(j);
        }
        if let Some(ledger) = &mut self.ledger {
            let user = &mut self.users[u];
            if !user.in_ledger {
                user.in_ledger = true;
                let settings = UserSettings {
                    weight: user.weight,
                    max_running_jobs: self.config.max_running_jobs,
                    group: user.group.clone(),
                    ..UserSettings::default()
                };
                ledger.set_user(submit, &user.name, settings);
            }
            ledger.push_queued(submit, &self.users[u].name, queued_job(j, &self.jobs[j]));
        }
    }

    /// Takes job `j` out of its user's queue (found from the front), keeping the
    /// heads up to date; whether it was there.
    fn dequeue(&mut self, j: usize) -> bool {
        let u = self.jobs[j].user;
        let queue = &mut self.users[u].queue;
        let position = if queue.front() == Some(&j) {
            Some(0)
        } else {
            queue.iter().position(|&k| k == j)
        };
        let Some(p) = position else {
            return false;
        };
        if p == 0 {
            self.drop_head(u);
            self.users[u].queue.pop_front();
            self.add_head(u);
        } else {
            self.users[u].queue.remove(p);
        }
        true
    }

    fn drop_head(&mut self, u: usize) {
        let Some(&h) = self.users[u].queue.front() else {
            return;
        };
        let head = &self.jobs[h];
        self.heads.remove(&(time_key(head.submit), u));
        if let Some(n) = self.head_cpus.get_mut(&head.cpus) {
            *n -= 1;
            if *n == 0 {
                self.head_cpus.remove(&head.cpus);
            }
        }
    }

    fn add_head(&mut self, u: usize) {
        if let Some(&h) = self.users[u].queue.front() {
            let head = &self.jobs[h];
            self.heads.insert((time_key(head.submit), u));
            *self.head_cpus.entry(head.cpus).or_default() += 1;
        }
    }

    /// Starts job `j` (already removed from its user's queue) at `now`.
    fn start(&mut self, j: usize, now: Seconds) {
        self.state_changes += 1;
        if self.anchored {
            self.anchor_touch(self.jobs[j].user, now);
            self.anchor_queued(self.jobs[j].user, self.jobs[j].cpus, false);
            self.anchor_running(j, true, now);
        }
        let job = &mut self.jobs[j];
        job.start = Some(now);
        let cpus = u64::from(job.cpus);
        let user = &mut self.users[job.user];
        user.queued_cores -= cpus;
        user.running_cores += cpus;
        user.running_jobs += 1;
        self.used_cores += cpus;
        self.queued_jobs -= 1;
        match &mut self.scaler {
            // It runs when a node holds it (`autoscale_step`, at this instant if one has
            // room).
            Some(scaler) => scaler.grant(j, now),
            None => {
                job.run_start = Some(now);
                self.finishes
                    .push(Reverse(Finish(now + job.run, j, job.preemptions)));
            }
        }
    }

    /// Preempts running job `j` at `now`: its run so far is lost, it leaves the
    /// ledger and goes back to its user's queue at its place (submit order), and
    /// its pending finish becomes stale.
    fn preempt(&mut self, j: usize, now: Seconds) {
        if self.jobs[j].start.is_none() {
            return;
        }
        if self.anchored {
            self.anchor_touch(self.jobs[j].user, now);
            self.anchor_queued(self.jobs[j].user, self.jobs[j].cpus, true);
            self.anchor_running(j, false, now);
        }
        let job = &mut self.jobs[j];
        if job.start.take().is_none() {
            return;
        }
        self.state_changes += 1;
        // A run granted on an autoscaled cluster that no node held yet lost nothing.
        let ran_from = job.run_start.take().unwrap_or(now);
        job.preemptions += 1;
        let (u, cpus) = (job.user, job.cpus);
        self.lost_core_s += f64::from(cpus) * (now - ran_from);
        job.cut_s += now - ran_from;
        if let Some(scaler) = &mut self.scaler {
            scaler.release(j, cpus);
        }
        self.preemptions += 1;
        let user = &mut self.users[u];
        user.running_cores -= u64::from(cpus);
        user.running_jobs -= 1;
        user.queued_cores += u64::from(cpus);
        self.used_cores -= u64::from(cpus);
        self.queued_jobs += 1;
        // Jobs are indexed in submit order, which is each queue's order.
        let place = self.users[u].queue.partition_point(|&k| k < j);
        if place == 0 {
            self.drop_head(u);
            self.users[u].queue.push_front(j);
            self.add_head(u);
        } else {
            self.users[u].queue.insert(place, j);
        }
        if let Some(ledger) = &mut self.ledger {
            ledger.end(now, ledger_id(j));
            ledger.requeue(now, &self.users[u].name, queued_job(j, &self.jobs[j]));
        }
    }

    fn finish(&mut self, j: usize, now: Seconds) {
        self.state_changes += 1;
        if self.anchored {
            self.anchor_touch(self.jobs[j].user, now);
            self.anchor_running(j, false, now);
        }
        if self.estimating.is_some() {
            if let Some(start) = self.jobs[j].start {
                self.learn_run(j, now - start);
            }
        }
        let job = &self.jobs[j];
        let cpus = u64::from(job.cpus);
        let u = job.user;
        if let Some(ledger) = &mut self.ledger {
            // What it held is free again; h_u is brought to now with the share held
            // so far.
            ledger.end(now, ledger_id(j));
        }
        if let Some(scaler) = &mut self.scaler {
            scaler.release(j, job.cpus);
        }
        self.demand_changes += 1;
        let user = &mut self.users[u];
        user.running_cores -= cpus;
        user.running_jobs -= 1;
        self.used_cores -= cpus;
    }

    fn free_cores(&self) -> u64 {
        u64::from(self.config.capacity).saturating_sub(self.used_cores)
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
}

/// Job `j` as its user's window holds it: its cores, submit time, estimate, and
/// whether (and how often) it may be and was preempted.
fn queued_job(j: usize, job: &SimJob) -> QueuedJob {
    QueuedJob {
        runtime_estimate: job.estimate,
        preemptible: job.preemptible,
        preemptions: job.preemptions,
        ..QueuedJob::new(
            ledger_id(j),
            Resources::new(f64::from(job.cpus), 0.0, 0.0),
            job.submit,
        )
    }
}

/// The ledger's id of job `j` (its index in submit order, unique even where a
/// trace repeats a job number).
fn ledger_id(j: usize) -> JobId {
    JobId::from_u128(j as u128)
}

/// A time as a key that sorts as the time does: its bits, `−0` as `0` (trace times
/// are finite and at least 0, and such floats order as their bits do).
fn time_key(t: Seconds) -> u64 {
    (t + 0.0).to_bits()
}
