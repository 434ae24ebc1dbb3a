//! The anchors (issue 47): the policies of the schedulers an operator would pick
//! instead of fairshare, each as its project documents it, on the simulator's
//! capacity model (one pool of `capacity` cores), with the simulator's job order
//! within a user (submit order, ties by job number) and its events.
//!
//! Every anchor treats a user as its own queue (Slurm: an association under
//! `root` with `w_u` shares; Kueue: a LocalQueue, or a ClusterQueue in one cohort;
//! Armada and YuniKorn: a queue). A job's runtime estimate is the SWF requested
//! time, as for fairshare. What each does, and where a choice had to be made:
//!
//! - **slurm** (`priority/multifactor` with `PriorityFlags=NO_FAIR_TREE`,
//!   `sched/backfill`): <https://slurm.schedmd.com/priority_multifactor.html>,
//!   <https://slurm.schedmd.com/classic_fair_share.html>. Job priority
//!   `P = floor(W_fs · F_u + W_age · A_j)` with the fair-share factor
//!   `F_u = 2^(−U_u / S_u)`: `U_u` the user's decayed usage (core-seconds, each
//!   second of use decayed by `2^(−age / PriorityDecayHalfLife)`) over all users'
//!   (0 when nobody has usage), `S_u = w_u / Σ w` its normalized shares over
//!   every user of the trace (all associations exist from the start); the age
//!   factor `A_j = min(wait_j / PriorityMaxAge, 1)`. Jobs are taken by priority,
//!   then submit time, then job number; the first that does not fit gets an EASY
//!   reservation (shadow time and extra cores from the running jobs' expected
//!   ends, [`crate::policy::shadow`]), and later jobs start only if
//!   they fit now and end by the shadow time or fit in the extra cores.
//!   Choices: `PriorityDecayHalfLife` and `PriorityMaxAge` at slurm.conf's
//!   defaults (7 days each); the weights: slurm.conf's default for every
//!   `PriorityWeight*` is 0, which would make the order plain FIFO, so the
//!   ratio of the multifactor page's "Configuration Example" is used
//!   (`PriorityWeightFairshare=10000`, `PriorityWeightAge=1000`); job size,
//!   partition, QOS, TRES and nice are left at 0 (one partition, one QOS; a
//!   job-size term would reorder a user's own jobs). Usage and priorities are
//!   recomputed at every event instead of every `PriorityCalcPeriod` (5 min).
//!   Slurm's backfill plans for every pending job it tests; the issue asks for
//!   EASY (one reservation), which this is; like Slurm's it tests at most
//!   `bf_max_job_test` (500, its default) jobs once the reservation is made.
//! - **slurm-fairtree** (`PriorityFlags=FAIR_TREE`, the default since 19.05):
//!   <https://slurm.schedmd.com/fair_tree.html>. The same priority and backfill;
//!   `F_u` is the user's rank: users sorted by Level Fairshare
//!   `LF_u = S_u / U_u` (∞ without usage) descending, `F_u = (N − k_u) / N`
//!   with `k_u` the number of users with a strictly larger `LF` (so ties share a
//!   rank and the first gets 1.0), `N` the number of users in the trace.
//! - **kueue-afs** (Admission Fair Sharing, KEP-4136,
//!   `keps/4136-admission-fair-sharing`; the admission fair sharing page): one
//!   ClusterQueue with `admissionScope: UsageBasedAdmissionFairSharing`, one
//!   LocalQueue per user; pending workloads sorted by their LocalQueue's usage,
//!   over its `fairSharing.weight` (the user's weight: "a queue with weight 2 will be
//!   treated as if it used half as many resources"), then priority (all equal),
//!   then creation time; `BestEffortFIFO`: a workload
//!   that does not fit does not block the ones after it. Usage is the decayed
//!   average of the cores the LocalQueue's admitted workloads hold,
//!   `h ← h·2^(−Δt/T) + cores·(1 − 2^(−Δt/T))`, with `usageHalfLifeTime`
//!   `T = 168h` (it has no default; 168h is the example of Kueue's page and
//!   configuration file). Choices: the usage is brought forward continuously
//!   instead of every `usageSamplingInterval` (5 min), so the admission penalty
//!   of the sampled implementation is not needed. AFS itself never preempts.
//! - **kueue-fair** (fair sharing, KEP-1714, `keps/1714-fair-sharing`; Kueue's
//!   `pkg/scheduler/preemption` `fairPreemptions`): one ClusterQueue per user, all
//!   in one cohort that holds the capacity (nominal quotas 0: equal static quotas
//!   for 100–200 users would be a few cores each and need every user known in
//!   advance; with 0 every queue borrows, and the share is exactly the dominant
//!   share). Share value `DRS_u = floor(1000 · cores_u / C / w_u)`. Admission:
//!   the heads (first workload that fits, `BestEffortFIFO`) in order of the share
//!   their queue would have with them admitted, then creation time. With
//!   preemptible jobs, a head that fits nowhere may preempt, with the default
//!   `preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]`:
//!   target queues by current share, highest first; within one, candidates most
//!   recently admitted first; strategy 1 takes the first candidate with
//!   `DRS_p(with head) ≤ DRS_v(without it)` (the queue is then re-ranked), and a
//!   queue with none is set aside; if the head still does not fit, strategy 2
//!   takes, once per remaining queue in share order, its first candidate if
//!   `DRS_p(with head) < DRS_v`; if it still does not fit nothing is preempted;
//!   else targets not needed are given back (`fillBackWorkloads`, all but the
//!   last). The preemptor starts at once (the simulator's stops take no time); a
//!   job admitted at this very instant is not a candidate.
//! - **armada** (`internal/scheduler`: `PreemptingQueueScheduler`, the DRF
//!   `FairnessCostProvider`, `docs/scheduler.md`): queues ordered by the cost
//!   they would have with their next job, `cores / C / w` (DRF, one resource),
//!   then name; within a queue submit order, a job that does not fit skipped.
//!   With preemptible jobs, each round first evicts every preemptible job of the
//!   queues whose unweighted share exceeds `protectedFractionOfFairShare` (1.0,
//!   Armada's default) times their fair share `max(adjusted, w / Σ w_active)`
//!   (adjusted: the demand-capped water-filling share), then schedules evicted
//!   jobs (first within their queue) and queued jobs in cost order; evicted jobs
//!   not scheduled again are preempted (requeued, their run lost). Choices: a
//!   round runs at every event rather than every `schedulePeriod`; the eviction
//!   round runs only when some user with queued jobs holds less than its fair
//!   share (otherwise nothing is evicted for anyone's benefit, and the plain
//!   round is the same); `maxQueueLookback` is not applied.
//! - **yunikorn** (`pkg/scheduler/objects/sorters.go`:
//!   `sortQueuesByFairnessAndPriority`, `CompUsageRatioSeparately`): queue sort
//!   policy `fair`, queues ordered by allocated / guaranteed (`guaranteed_u =
//!   C · w_u / Σ w`), ties by more pending resources first, then user order;
//!   application sort `fifo` (submit time) within a queue; each allocation
//!   re-sorts; an ask that does not fit is skipped. Choices: YuniKorn's node
//!   reservations for large asks need nodes, which the one-pool model has not;
//!   its preemption (for guaranteed resources) is not modelled.
//!
//! Slurm and Kueue AFS keep decayed usage; Kueue fair sharing, Armada and
//! YuniKorn order by what users hold now.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::{time_key, Sim, SimPolicy};
use crate::policy::Shadow;
use crate::policy::{Resources, Seconds};

/// Slurm's `PriorityDecayHalfLife` default (slurm.conf: `7-0`), seconds.
pub const SLURM_DECAY_HALF_LIFE_S: Seconds = 7.0 * 86_400.0;
/// Slurm's `PriorityMaxAge` default (slurm.conf: `7-0`), seconds.
pub const SLURM_MAX_AGE_S: Seconds = 7.0 * 86_400.0;
/// `PriorityWeightFairshare` of the multifactor page's configuration example
/// (slurm.conf's default, 0, would leave only submit order).
pub const SLURM_WEIGHT_FAIRSHARE: f64 = 10_000.0;
/// `PriorityWeightAge` of the same example.
pub const SLURM_WEIGHT_AGE: f64 = 1_000.0;
/// Slurm's `bf_max_job_test` default (slurm.conf `SchedulerParameters`: 500): the
/// backfill pass tests at most this many jobs once a job holds the reservation.
pub const SLURM_BF_MAX_JOB_TEST: usize = 500;
/// Kueue's `usageHalfLifeTime` (168h, the example of its admission fair sharing
/// page; the field has no default), seconds.
pub const KUEUE_AFS_HALF_LIFE_S: Seconds = 168.0 * 3_600.0;
/// Armada's `protectedFractionOfFairShare` default (1.0): queues at or below
/// their fair share are not evicted.
pub const ARMADA_PROTECTED_FRACTION: f64 = 1.0;

/// The settings an anchor runs with, for a report's header.
#[must_use]
pub fn settings(policy: SimPolicy) -> String {
    match policy {
        SimPolicy::SlurmMultifactor | SimPolicy::SlurmFairTree => format!(
            "{} fair share, PriorityDecayHalfLife {} s, PriorityMaxAge {} s, \
             PriorityWeightFairshare {}, PriorityWeightAge {}, EASY backfill",
            if policy == SimPolicy::SlurmFairTree {
                "Fair Tree"
            } else {
                "classic"
            },
            SLURM_DECAY_HALF_LIFE_S,
            SLURM_MAX_AGE_S,
            SLURM_WEIGHT_FAIRSHARE,
            SLURM_WEIGHT_AGE
        ),
        SimPolicy::KueueAfs => format!(
            "admission fair sharing, usageHalfLifeTime {KUEUE_AFS_HALF_LIFE_S} s, BestEffortFIFO"
        ),
        SimPolicy::KueueFairSharing => {
            "fair sharing (one ClusterQueue per user, nominal quota 0), \
             preemptionStrategies LessThanOrEqualToFinalShare, LessThanInitialShare"
                .to_owned()
        }
        SimPolicy::Armada => {
            format!("DRF queue cost, protectedFractionOfFairShare {ARMADA_PROTECTED_FRACTION}")
        }
        SimPolicy::YuniKorn => {
            "queue sort fair (allocated / guaranteed, guaranteed ∝ weight), application sort fifo"
                .to_owned()
        }
        _ => String::new(),
    }
}

/// Slurm's classic fair-share factor `2^(−U/S)` of a user with normalized usage
/// `usage` (its decayed usage / everyone's, 0..1) and normalized shares `shares`
/// (`w_u / Σ w`, > 0) (classic_fair_share.html).
#[must_use]
pub fn slurm_classic_factor(usage: f64, shares: f64) -> f64 {
    (-usage / shares).exp2()
}

/// Slurm Fair Tree factors (fair_tree.html) of users with the given Level
/// Fairshare values (`S / U`, `f64::INFINITY` without usage): `(N − k) / N`,
/// `k` the number of users with a strictly larger value, in input order.
#[must_use]
pub fn fair_tree_factors(level_fs: &[f64]) -> Vec<f64> {
    let n = level_fs.len();
    let mut sorted: Vec<f64> = level_fs.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    level_fs
        .iter()
        .map(|lf| {
            let above = sorted.partition_point(|x| x.total_cmp(lf) == Ordering::Greater);
            (n - above) as f64 / n as f64
        })
        .collect()
}

/// [`fair_tree_factors`] with the users' order kept between calls in `order`
/// (Level Fairshare descending; insertion sort, so a nearly sorted order costs
/// `O(n)`): the same factors.
fn fair_tree_factors_kept(level_fs: &[f64], order: &mut Vec<usize>) -> Vec<f64> {
    let n = level_fs.len();
    if order.len() != n {
        *order = (0..n).collect();
    }
    let before = |a: usize, b: usize| level_fs[a].total_cmp(&level_fs[b]) == Ordering::Greater;
    for i in 1..n {
        let u = order[i];
        let mut j = i;
        while j > 0 && before(u, order[j - 1]) {
            order[j] = order[j - 1];
            j -= 1;
        }
        order[j] = u;
    }
    let mut out = vec![0.0; n];
    let mut above = 0;
    for (i, &u) in order.iter().enumerate() {
        if i > 0 && level_fs[order[i - 1]].total_cmp(&level_fs[u]) == Ordering::Greater {
            above = i;
        }
        out[u] = (n - above) as f64 / n as f64;
    }
    out
}

/// A Slurm job priority: `floor(W_fs · F + W_age · min(wait / max_age, 1))`
/// (priority_multifactor.html, "Job Priority Factors In General"; Slurm keeps it
/// as a 32-bit integer).
#[must_use]
pub fn slurm_priority(fair_share_factor: f64, wait_s: Seconds) -> f64 {
    let age = (wait_s / SLURM_MAX_AGE_S).clamp(0.0, 1.0);
    (SLURM_WEIGHT_FAIRSHARE * fair_share_factor + SLURM_WEIGHT_AGE * age).floor()
}

/// Kueue's dominant resource share of a ClusterQueue holding `cores` of a cohort
/// of `capacity` with nominal quota 0 and weight `weight`:
/// `floor(1000 · cores / capacity / weight)` (KEP-1714, "Share value function").
#[must_use]
pub fn kueue_share(cores: f64, capacity: f64, weight: f64) -> i64 {
    let x = 1000.0 * cores / capacity / weight;
    // The same as `x.floor() as i64`: truncation is the floor from 0 up (and
    // both saturate), and costs no call to `floor` (which x86-64 without SSE4.1
    // makes one); NaN and negatives take `floor`.
    if x >= 0.0 {
        x as i64
    } else {
        x.floor() as i64
    }
}

/// `x ← x·d + rate·scale·(1 − d)` with `d = 2^(−dt/half_life)`: exponential decay
/// brought forward `dt` seconds while `rate` holds. With `scale = half_life / ln 2`
/// this is decayed usage (Slurm); with `scale = 1` an exponential moving average
/// (Kueue AFS). A half-life of 0 forgets at once.
fn decay(x: f64, rate: f64, dt: Seconds, half_life: Seconds, scale: f64) -> f64 {
    if dt <= 0.0 {
        return x;
    }
    if half_life <= 0.0 {
        return if scale.is_finite() { rate } else { 0.0 };
    }
    let d = (-dt / half_life).exp2();
    x * d + rate * scale * (1.0 - d)
}

/// A heap key: compared lexicographically, the smallest first.
#[derive(Clone, Copy, Debug)]
struct Key(f64, f64, u64);

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .total_cmp(&other.0)
            .then(self.1.total_cmp(&other.1))
            .then(self.2.cmp(&other.2))
    }
}

/// An evicted queue's keys in the bulk start of an Armada round: its next
/// job's, its last one's, and whether it has queued jobs.
type EvictedKeys = (Option<Key>, Key, bool);

/// The anchors' state kept across the run.
#[derive(Debug, Default)]
pub(super) struct AnchorState {
    /// Per user: decayed usage (Slurm, core-seconds) or usage average (Kueue AFS,
    /// cores), as of `at[u]`.
    usage: Vec<f64>,
    at: Vec<Seconds>,
    /// Everyone's decayed usage (Slurm), as of `total_at`.
    total: f64,
    total_at: Seconds,
    /// Σ w over every user of the trace.
    weight_sum: f64,
    /// Running jobs (indices), and each job's place in it (`usize::MAX`: none).
    pub(super) running: Vec<usize>,
    pub(super) running_pos: Vec<usize>,
    /// Cores → how many queued jobs ask for that many.
    pub(super) queued_sizes: std::collections::BTreeMap<u32, usize>,
    /// The same per user.
    user_sizes: Vec<std::collections::BTreeMap<u32, usize>>,
    /// Fair Tree: the users by Level Fairshare as last sorted (kept, so that
    /// sorting again costs what changed).
    fair_tree_order: Vec<usize>,
    /// Running preemptible jobs.
    pub(super) preemptible_running: usize,
    /// Per user, the cores of its running preemptible jobs (what an Armada
    /// round could evict), and their sum.
    preemptible_cores: Vec<u64>,
    preemptible_cores_all: u64,
    /// The users with running preemptible jobs, in user order (the only ones
    /// an Armada round can evict or a Kueue check can take targets from).
    preemptible_users: Vec<usize>,
    /// Slurm: running jobs by expected end (start + estimate as [`time_key`]
    /// bits; `u64::MAX` without an estimate), then index.
    by_end: std::collections::BTreeSet<(u64, usize)>,
    /// Armada: each user's fair share in cores as of the step's start
    /// ([`Sim::armada_fair_shares`]), and the water-filling order kept between
    /// steps (as the fairness bookkeeping keeps its own), with scratch arrays.
    armada_shares: Vec<f64>,
    /// The demand changes counted when `armada_shares` was computed (the fair
    /// shares depend on nothing else).
    armada_shares_at: Option<u64>,
    armada_order: super::fairness::ShareOrder,
    scratch_users: Vec<usize>,
    scratch_weights: Vec<f64>,
    scratch_demands: Vec<f64>,
    scratch_adjusted: Vec<f64>,
    /// Kueue fair sharing, kept across preemption checks: each user's share
    /// value at what it holds and its cores / weight as [`total_key`] (`None`:
    /// not yet computed), the users by that key (the largest share is the
    /// last's), and the users whose cores changed since (`kueue_dirty`, marked
    /// in `kueue_is_dirty`).
    kueue_share_now: Vec<i64>,
    kueue_ratio: Vec<Option<i64>>,
    kueue_by_ratio: std::collections::BTreeSet<(i64, usize)>,
    kueue_dirty: Vec<usize>,
    kueue_is_dirty: Vec<bool>,
    /// Per user, its running preemptible jobs, kept across steps: Armada's by
    /// job index (what a round evicts, in the order it schedules them again);
    /// Kueue fair sharing's by start, then job index (its candidates are these,
    /// most recently admitted first, less those admitted at this instant).
    preemptible_jobs: Vec<Vec<usize>>,
    /// Scratch of the greedy pass and the Armada round, kept to spare their
    /// allocations: each user's evicted jobs, cursors, the heap, the users,
    /// per job whether a round placed it again, the evicted jobs it did not.
    scratch_evicted: Vec<Vec<usize>>,
    scratch_cursor: Vec<(usize, usize)>,
    scratch_heap: BinaryHeap<Reverse<(Key, usize)>>,
    scratch_queued_heap: BinaryHeap<Reverse<(Key, usize)>>,
    scratch_evicting: Vec<usize>,
    scratch_left: Vec<u64>,
    scratch_keys: Vec<EvictedKeys>,
    scratch_pass_users: Vec<usize>,
    kept: Vec<bool>,
    /// Per evicted user, how many of its evicted jobs (a prefix) the bulk
    /// start of an Armada round placed back (not marked in `kept`).
    scratch_prefix: Vec<usize>,
    scratch_lost: Vec<usize>,
    /// Kueue: per user, how many of its candidates the current check has.
    kueue_cands: Vec<usize>,
    /// Changes to what runs and what queues (starts, finishes, preemptions,
    /// submits), counted; and, after an Armada step that changed nothing, the
    /// count then and the cycles that step counted (`None`: the last step
    /// changed something).
    changes: u64,
    idle_at: Option<(u64, u64)>,
}

impl AnchorState {
    pub(super) fn new(users: usize, jobs: usize, weight_sum: f64) -> AnchorState {
        AnchorState {
            usage: vec![0.0; users],
            at: vec![0.0; users],
            total: 0.0,
            total_at: 0.0,
            weight_sum,
            running: Vec::new(),
            running_pos: vec![usize::MAX; jobs],
            queued_sizes: std::collections::BTreeMap::new(),
            user_sizes: vec![std::collections::BTreeMap::new(); users],
            fair_tree_order: (0..users).collect(),
            preemptible_running: 0,
            preemptible_cores: vec![0; users],
            preemptible_cores_all: 0,
            by_end: std::collections::BTreeSet::new(),
            preemptible_jobs: vec![Vec::new(); users],
            ..AnchorState::default()
        }
    }
}

impl Sim<'_> {
    /// Brings user `u`'s usage (and the total) to `now` with what it holds: called
    /// before anything it holds changes.
    pub(super) fn anchor_touch(&mut self, u: usize, now: Seconds) {
        let (half_life, scale) = match self.config.policy {
            SimPolicy::SlurmMultifactor | SimPolicy::SlurmFairTree => (
                SLURM_DECAY_HALF_LIFE_S,
                SLURM_DECAY_HALF_LIFE_S / std::f64::consts::LN_2,
            ),
            SimPolicy::KueueAfs => (KUEUE_AFS_HALF_LIFE_S, 1.0),
            _ => return,
        };
        let held = self.users[u].running_cores as f64;
        let a = &mut self.anchor;
        a.usage[u] = decay(a.usage[u], held, now - a.at[u], half_life, scale);
        a.at[u] = now;
        let all = self.used_cores as f64;
        a.total = decay(a.total, all, now - a.total_at, half_life, scale);
        a.total_at = now;
    }

    /// Records job `j` as running (`true`, started at `now`) or not (still
    /// holding its start).
    pub(super) fn anchor_running(&mut self, j: usize, running: bool, now: Seconds) {
        self.anchor.changes += 1;
        let job = &self.jobs[j];
        let preemptible = job.preemptible;
        let (u, cpus) = (job.user, u64::from(job.cpus));
        if matches!(
            self.config.policy,
            SimPolicy::SlurmMultifactor | SimPolicy::SlurmFairTree
        ) {
            let start = if running { Some(now) } else { job.start };
            let key = match (start, job.estimate) {
                (Some(s), Some(e)) => time_key(s + e),
                _ => u64::MAX,
            };
            if running {
                self.anchor.by_end.insert((key, j));
            } else {
                self.anchor.by_end.remove(&(key, j));
            }
        }
        // Kueue's order: start (now, for a job starting), then job index.
        let by_start = self.config.policy == SimPolicy::KueueFairSharing;
        let start_of = |k: usize| self.jobs[k].start.unwrap_or(0.0);
        let start = if running { now } else { start_of(j) };
        // Where `j` stands in its user's list of running preemptible jobs.
        let place = |list: &[usize]| {
            if by_start {
                list.partition_point(|&k| {
                    start_of(k).total_cmp(&start).then(k.cmp(&j)) == Ordering::Less
                })
            } else {
                list.partition_point(|&k| k < j)
            }
        };
        let a = &mut self.anchor;
        if by_start {
            // What `u` holds changes (after this call): its share is computed
            // again at the next check.
            if let Some(dirty) = a.kueue_is_dirty.get_mut(u) {
                if !*dirty {
                    *dirty = true;
                    a.kueue_dirty.push(u);
                }
            }
        }
        if running {
            a.running_pos[j] = a.running.len();
            a.running.push(j);
            a.preemptible_running += usize::from(preemptible);
            if preemptible {
                a.preemptible_cores[u] += cpus;
                a.preemptible_cores_all += cpus;
                let list = &mut a.preemptible_jobs[u];
                let at = place(list);
                list.insert(at, j);
                if list.len() == 1 {
                    let users = &mut a.preemptible_users;
                    let at = users.partition_point(|&v| v < u);
                    users.insert(at, u);
                }
            }
        } else if let Some(&p) = a.running_pos.get(j).filter(|&&p| p != usize::MAX) {
            a.preemptible_running -= usize::from(preemptible);
            if preemptible {
                a.preemptible_cores[u] -= cpus;
                a.preemptible_cores_all -= cpus;
                let list = &mut a.preemptible_jobs[u];
                let at = place(list);
                if list.get(at) == Some(&j) {
                    list.remove(at);
                    if list.is_empty() {
                        let users = &mut a.preemptible_users;
                        let at = users.partition_point(|&v| v < u);
                        if users.get(at) == Some(&u) {
                            users.remove(at);
                        }
                    }
                }
            }
            a.running.swap_remove(p);
            if let Some(&moved) = a.running.get(p) {
                a.running_pos[moved] = p;
            }
            a.running_pos[j] = usize::MAX;
        }
    }

    /// Counts a queued job of `cpus` cores in (`true`) or out.
    pub(super) fn anchor_queued(&mut self, u: usize, cpus: u32, queued: bool) {
        self.anchor.changes += 1;
        fn count(sizes: &mut std::collections::BTreeMap<u32, usize>, cpus: u32, queued: bool) {
            if queued {
                *sizes.entry(cpus).or_default() += 1;
            } else if let Some(n) = sizes.get_mut(&cpus) {
                *n -= 1;
                if *n == 0 {
                    sizes.remove(&cpus);
                }
            }
        }
        count(&mut self.anchor.queued_sizes, cpus, queued);
        if let Some(sizes) = self.anchor.user_sizes.get_mut(u) {
            count(sizes, cpus, queued);
        }
    }

    /// The fewest cores any queued job of user `u` asks for (`u64::MAX`: none).
    fn user_min_queued(&self, u: usize) -> u64 {
        self.anchor
            .user_sizes
            .get(u)
            .and_then(|sizes| sizes.first_key_value())
            .map_or(u64::MAX, |(&c, _)| u64::from(c))
    }

    /// Whether some queued job fits the free cores.
    fn anchor_some_fits(&self) -> bool {
        self.anchor
            .queued_sizes
            .first_key_value()
            .is_some_and(|(&c, _)| u64::from(c) <= self.free_cores())
    }

    /// One step of an anchor at `now`.
    pub(super) fn anchor_step(&mut self, now: Seconds) {
        match self.config.policy {
            SimPolicy::SlurmMultifactor | SimPolicy::SlurmFairTree => {
                if self.anchor_some_fits() {
                    self.cycles += 1;
                    self.slurm_pass(now);
                }
            }
            SimPolicy::Armada | SimPolicy::KueueFairSharing => {
                // A step changes nothing at the state a step that changed
                // nothing left: neither policy's decisions depend on the time
                // (Kueue's candidates were admitted before now, and a step
                // that changed nothing admitted none), only on what runs and
                // what queues. Counted as that step was.
                let changes = self.anchor.changes;
                if let Some((at, counted)) = self.anchor.idle_at {
                    if at == changes && self.scaler.is_none() {
                        self.cycles += counted;
                        return;
                    }
                }
                let cycles = self.cycles;
                if self.config.policy == SimPolicy::Armada {
                    self.armada_step(now);
                } else {
                    loop {
                        if self.anchor_some_fits() {
                            self.cycles += 1;
                            self.greedy_pass(now);
                        }
                        if !self.kueue_preempt_once(now) {
                            break;
                        }
                    }
                }
                self.anchor.idle_at =
                    (self.anchor.changes == changes).then_some((changes, self.cycles - cycles));
            }
            _ => {
                if self.anchor_some_fits() {
                    self.cycles += 1;
                    self.greedy_pass(now);
                }
            }
        }
    }

    /// One Armada step at `now`: an eviction round if some user waits below
    /// its fair share, else the plain pass if a queued job fits.
    fn armada_step(&mut self, now: Seconds) {
        // `armada_wants_eviction` leaves the fair shares the round uses.
        if self.armada_wants_eviction() {
            self.cycles += 1;
            let shares = std::mem::take(&mut self.anchor.armada_shares);
            let plain = self.armada_round_is_plain(&shares);
            self.anchor.armada_shares = shares;
            if !plain {
                self.armada_round(now);
            } else if self.anchor_some_fits() {
                let start_free = self.armada_round_start_free();
                self.greedy_pass_from(now, &[], &[], Some(&start_free));
            }
        } else if self.anchor_some_fits() {
            self.cycles += 1;
            self.greedy_pass(now);
        }
    }

    /// The users with queued jobs, in user order.
    fn queued_users(&self) -> Vec<usize> {
        (0..self.users.len())
            .filter(|&u| !self.users[u].queue.is_empty())
            .collect()
    }

    /// Slurm's fair-share factor of every user (classic or Fair Tree), from usage
    /// brought to `now`.
    fn slurm_factors(&mut self, now: Seconds) -> Vec<f64> {
        // Every user's usage brought to now, as `anchor_touch` does; users last
        // brought forward at the same instant (most: the previous pass) share one
        // decay factor, so a pass computes few powers.
        let half_life = SLURM_DECAY_HALF_LIFE_S;
        let scale = half_life / std::f64::consts::LN_2;
        let mut memo = (f64::NAN, 0.0);
        for u in 0..self.users.len() {
            let dt = now - self.anchor.at[u];
            if dt <= 0.0 {
                continue;
            }
            let at = self.anchor.at[u];
            let d = if at == memo.0 {
                memo.1
            } else {
                let d = (-dt / half_life).exp2();
                memo = (at, d);
                d
            };
            let held = self.users[u].running_cores as f64;
            let a = &mut self.anchor;
            a.usage[u] = a.usage[u] * d + held * scale * (1.0 - d);
            a.at[u] = now;
        }
        let all = self.used_cores as f64;
        let a = &mut self.anchor;
        a.total = decay(a.total, all, now - a.total_at, half_life, scale);
        a.total_at = now;
        let total = self.anchor.total;
        let wsum = self.anchor.weight_sum;
        let norm_usage = |x: f64| if total > 0.0 { x / total } else { 0.0 };
        let users = &self.users;
        let usage = &self.anchor.usage;
        if self.config.policy == SimPolicy::SlurmFairTree {
            let lf: Vec<f64> = (0..users.len())
                .map(|u| {
                    let used = norm_usage(usage[u]);
                    let shares = users[u].weight / wsum;
                    if used > 0.0 {
                        shares / used
                    } else {
                        f64::INFINITY
                    }
                })
                .collect();
            fair_tree_factors_kept(&lf, &mut self.anchor.fair_tree_order)
        } else {
            // Only users with queued jobs need theirs.
            let mut factors = vec![0.0; users.len()];
            for &(_, u) in &self.heads {
                factors[u] = slurm_classic_factor(norm_usage(usage[u]), users[u].weight / wsum);
            }
            factors
        }
    }

    /// One Slurm scheduling pass at `now`: jobs by priority; the first that does
    /// not fit holds an EASY reservation; later ones start only if they fit and
    /// do not delay it.
    fn slurm_pass(&mut self, now: Seconds) {
        let factors = self.slurm_factors(now);
        let key = |sim: &Sim<'_>, u: usize, pos: usize| -> Option<Key> {
            let &j = sim.users[u].queue.get(pos)?;
            let job = &sim.jobs[j];
            let p = slurm_priority(factors[u], now - job.submit);
            Some(Key(-p, job.submit, j as u64))
        };
        let mut heap: BinaryHeap<Reverse<(Key, usize, usize)>> = self
            .queued_users()
            .into_iter()
            .filter_map(|u| key(self, u, 0).map(|k| Reverse((k, u, 0))))
            .collect();
        let mut hold: Option<Shadow> = None;
        let min_queued = self
            .anchor
            .queued_sizes
            .first_key_value()
            .map_or(u64::MAX, |(&c, _)| u64::from(c));
        let mut tested_after_hold = 0usize;
        while let Some(Reverse((_, u, pos))) = heap.pop() {
            if self.free_cores() < min_queued {
                break;
            }
            if hold.is_some() {
                tested_after_hold += 1;
                if tested_after_hold > SLURM_BF_MAX_JOB_TEST {
                    break;
                }
            }
            let j = self.users[u].queue[pos];
            let cpus = u64::from(self.jobs[j].cpus);
            let request = Resources::new(cpus as f64, 0.0, 0.0);
            let fits = cpus <= self.free_cores();
            let mut next = pos + 1;
            match &mut hold {
                None if fits => {
                    self.anchor_start(j, now);
                    next = pos;
                }
                None => {
                    let s = self.shadow_of(now, &request);
                    if s.start.is_none() && s.extra.cpu <= 0.0 {
                        // No job can start without delaying it (unknown ends).
                        break;
                    }
                    hold = Some(s);
                }
                Some(s) if fits => {
                    let how = admits(s, now, &request, self.jobs[j].estimate);
                    if how != Backfill::No {
                        if how == Backfill::InExtra {
                            s.extra = s.extra.saturating_sub(request);
                        }
                        self.anchor_start(j, now);
                        next = pos;
                    }
                }
                Some(_) => {}
            }
            if let Some(k) = key(self, u, next) {
                heap.push(Reverse((k, u, next)));
            }
        }
    }

    /// The EASY shadow of `request` against the running jobs' expected ends
    /// (`crate::policy::shadow`'s walk, on the running jobs kept in end order):
    /// ends already past count as `now`, jobs ending at one instant are released
    /// together, jobs without an estimate last (`start: None` if only their end
    /// lets it fit; `None` with no extra if nothing does).
    fn shadow_of(&self, now: Seconds, request: &Resources) -> Shadow {
        let need = request.cpu;
        let mut avail = self.free_cores() as f64;
        let end_of = |key: u64| (key != u64::MAX).then(|| f64::from_bits(key).max(now));
        let mut ends = self.anchor.by_end.iter().peekable();
        while let Some(&(key, j)) = ends.next() {
            let end = end_of(key);
            avail += f64::from(self.jobs[j].cpus);
            while let Some(&&(next, k)) = ends.peek() {
                if end_of(next) != end {
                    break;
                }
                avail += f64::from(self.jobs[k].cpus);
                ends.next();
            }
            if need <= avail {
                return Shadow {
                    start: end,
                    extra: Resources::new(avail - need, 0.0, 0.0),
                };
            }
        }
        Shadow {
            start: None,
            extra: Resources::ZERO,
        }
    }

    /// Takes queued job `j` out of its queue and starts it.
    fn anchor_start(&mut self, j: usize, now: Seconds) {
        if self.dequeue(j) {
            self.start(j, now);
        }
    }

    /// The greedy pass of Kueue, Armada and YuniKorn at `now`: repeatedly the
    /// queue first by the policy's key takes its first job that fits.
    fn greedy_pass(&mut self, now: Seconds) {
        self.greedy_pass_from(now, &[], &[], None);
    }

    /// [`Self::greedy_pass`] with each user's `evicted` jobs (Armada) taken
    /// before its queued ones, each one scheduled again marked in
    /// `anchor.kept` (`evicting`: the users with evicted jobs, in user
    /// order); each user's first candidate chosen against `start_free[u]` free
    /// cores instead of the free cores now (with `Some`).
    fn greedy_pass_from(
        &mut self,
        now: Seconds,
        evicted: &[Vec<usize>],
        evicting: &[usize],
        start_free: Option<&[u64]>,
    ) {
        let min_queued = self
            .anchor
            .queued_sizes
            .first_key_value()
            .map_or(u64::MAX, |(&c, _)| u64::from(c));
        // The users with queued jobs (the order does not matter: the heap's
        // entries differ in their user; user order, as ever).
        let mut users = std::mem::take(&mut self.anchor.scratch_pass_users);
        users.clear();
        users.extend(self.heads.iter().map(|&(_, u)| u));
        users.sort_unstable();
        if self.config.policy == SimPolicy::KueueAfs {
            for &u in &users {
                self.anchor_touch(u, now);
            }
        }
        // The users with evicted jobs join those with queued ones.
        for &u in evicting {
            if self.users[u].queue.is_empty() {
                users.push(u);
            }
        }
        // Per user: next evicted index, next queue position (all 0 between
        // passes: set back for the users of this one at its end).
        let mut cursor = std::mem::take(&mut self.anchor.scratch_cursor);
        cursor.resize(self.users.len(), (0, 0));
        let mut heap = std::mem::take(&mut self.anchor.scratch_heap);
        heap.clear();
        // An Armada round's bulk start takes the queued users' entries apart
        // (`anchor.scratch_queued_heap`) and gives each evicted queue its next
        // evicted job's (which fits: every evicted core is free).
        let bulk = self.config.policy == SimPolicy::Armada && !evicting.is_empty();
        let mut queued = std::mem::take(&mut self.anchor.scratch_queued_heap);
        queued.clear();
        for &u in &users {
            if bulk && !evicted[u].is_empty() {
                continue;
            }
            let free = start_free.map_or(self.free_cores(), |f| f[u]);
            if let Some((k, _)) = self.greedy_candidate_at(free, now, u, &mut cursor[u], evicted) {
                if bulk { &mut queued } else { &mut heap }.push(Reverse((k, u)));
            }
        }
        self.anchor.scratch_queued_heap = queued;
        if !bulk
            || self.armada_place_evicted_first(
                now,
                evicted,
                evicting,
                &mut heap,
                &mut cursor,
                min_queued,
            )
        {
            // Nothing can be placed once the free cores are fewer than any
            // queued job or evicted job not yet placed or passed over asks for
            // (those only grow fewer).
            let min_evicted = evicting
                .iter()
                .flat_map(|&u| &evicted[u][cursor[u].0..])
                .map(|&j| u64::from(self.jobs[j].cpus))
                .min()
                .unwrap_or(u64::MAX);
            let min_any = min_queued.min(min_evicted);
            self.greedy_loop(now, evicted, &mut heap, &mut cursor, min_any);
        }
        for &u in &users {
            cursor[u] = (0, 0);
        }
        self.anchor.scratch_pass_users = users;
        self.anchor.scratch_cursor = cursor;
        self.anchor.scratch_heap = heap;
    }

    /// The greedy pass from its heap on: pops the queue first by its key
    /// (pushed back if its candidate changed and is no longer first), places
    /// its candidate and the next ones while it stays first, until the free
    /// cores are fewer than `min_any`.
    fn greedy_loop(
        &mut self,
        now: Seconds,
        evicted: &[Vec<usize>],
        heap: &mut BinaryHeap<Reverse<(Key, usize)>>,
        cursor: &mut [(usize, usize)],
        min_any: u64,
    ) {
        'pass: while let Some(Reverse((popped, u))) = heap.pop() {
            let Some((key, mut pick)) = self.greedy_candidate(now, u, &mut cursor[u], evicted)
            else {
                continue;
            };
            // The key may have changed since it was pushed (a candidate that no
            // longer fits was skipped): take it only if still first.
            if key > popped {
                heap.push(Reverse((key, u)));
                continue;
            }
            loop {
                let (from_evicted, j) = pick;
                if from_evicted {
                    let c = u64::from(self.jobs[j].cpus);
                    self.used_cores += c;
                    self.users[u].running_cores += c;
                    self.anchor.kept[j] = true;
                    cursor[u].0 += 1;
                } else {
                    self.anchor_start(j, now);
                }
                if self.free_cores() < min_any {
                    break 'pass;
                }
                let Some((k, next)) = self.greedy_candidate(now, u, &mut cursor[u], evicted) else {
                    break;
                };
                // Still ahead of every other queue: taken at once (pushing it
                // would pop it straight back, with the same candidate).
                if heap.peek().is_none_or(|Reverse(top)| (k, u) < *top) {
                    pick = next;
                    continue;
                }
                heap.push(Reverse((k, u)));
                break;
            }
        }
    }

    /// Armada's key of user `u` with job `j` when it holds `held` cores
    /// ([`Self::greedy_key`]'s, for a state to come).
    fn armada_key_at(&self, u: usize, held: u64, j: usize) -> Key {
        let capacity = f64::from(self.config.capacity);
        let with = held as f64 + f64::from(self.jobs[j].cpus);
        Key(with / capacity / self.users[u].weight, u as f64, j as u64)
    }

    /// The start of an Armada round's pass ([`Self::greedy_loop`] from the
    /// heap of each user's first candidate, `evicted` jobs first: the queued
    /// users' in `anchor.scratch_queued_heap`, `heap` empty), up to its
    /// first queued job placed, in bulk. Until then every evicted job still
    /// fits (the free cores are at least those of the evicted jobs not yet
    /// placed back), so each evicted queue's entry is its next job and every
    /// evicted job with a key below the smallest queued entry is placed
    /// before it, in whatever order; a queue whose last job's key is below it
    /// has all of them placed at once (its keys increase along its jobs).
    /// The events that can place a queued job
    /// are taken one by one as the pass takes them: the smallest queued entry
    /// popped (its candidate chosen again against the free cores then), and an
    /// evicted queue with queued jobs placing its last evicted job (its first
    /// queued candidate chosen against the free cores then). At the first
    /// queued job to be placed, `heap` is left as the pass has it, that job's
    /// entry on top; `false` if the pass is over (every evicted job placed
    /// back, the free cores fewer than `min_queued`). Each evicted queue's
    /// jobs placed back here (a prefix of them, not marked in `anchor.kept`)
    /// are counted in `anchor.scratch_prefix`.
    fn armada_place_evicted_first(
        &mut self,
        now: Seconds,
        evicted: &[Vec<usize>],
        evicting: &[usize],
        heap: &mut BinaryHeap<Reverse<(Key, usize)>>,
        cursor: &mut [(usize, usize)],
        min_queued: u64,
    ) -> bool {
        // The queued entries (`heap` is empty); the evicted ones are each
        // queue's next job.
        let mut queued = std::mem::take(&mut self.anchor.scratch_queued_heap);
        // Per evicted queue, the cores of its evicted jobs not yet placed back
        // (at first all its running preemptible ones).
        let mut left = std::mem::take(&mut self.anchor.scratch_left);
        left.resize(self.users.len(), 0);
        let mut left_all = 0;
        for &u in evicting {
            left[u] = self.anchor.preemptible_cores[u];
            left_all += left[u];
        }
        let next_key = |sim: &Sim<'_>, v: usize, at: usize| {
            evicted[v]
                .get(at)
                .map(|&j| sim.armada_key_at(v, sim.users[v].running_cores, j))
        };
        // Per evicted queue (as `evicting`): its next job's key, its last
        // one's (as it will be, its cores placed back before it: the same all
        // along), and whether it has queued jobs.
        let mut keys = std::mem::take(&mut self.anchor.scratch_keys);
        keys.clear();
        for &v in evicting {
            let list = &evicted[v];
            let &j = list.last().unwrap_or(&0);
            let held = self.users[v].running_cores + left[v] - u64::from(self.jobs[j].cpus);
            let last = self.armada_key_at(v, held, j);
            let queues = !self.users[v].queue.is_empty();
            keys.push((next_key(self, v, cursor[v].0), last, queues));
        }
        let mut going = true;
        loop {
            // The next event: the smallest queued entry, or the last evicted
            // job of an evicted queue with queued jobs.
            let mut event = queued.peek().map(|Reverse(e)| *e);
            let mut last_of = None;
            for (&v, &(next, last, queues)) in evicting.iter().zip(&keys) {
                if next.is_some() && queues && event.is_none_or(|e| (last, v) < e) {
                    event = Some((last, v));
                    last_of = Some(v);
                }
            }
            // Every evicted job up to it placed back.
            let mut placed = false;
            for (&v, (next, last, _)) in evicting.iter().zip(keys.iter_mut()) {
                while let Some(key) = *next {
                    if event.is_some_and(|e| (key, v) > e) {
                        break;
                    }
                    placed = true;
                    if event.is_none_or(|e| (*last, v) <= e) {
                        // All the rest at once.
                        let c = left[v];
                        self.used_cores += c;
                        self.users[v].running_cores += c;
                        cursor[v].0 = evicted[v].len();
                        left[v] = 0;
                        left_all -= c;
                        *next = None;
                        break;
                    }
                    let j = evicted[v][cursor[v].0];
                    let c = u64::from(self.jobs[j].cpus);
                    self.used_cores += c;
                    self.users[v].running_cores += c;
                    cursor[v].0 += 1;
                    left[v] -= c;
                    left_all -= c;
                    *next = next_key(self, v, cursor[v].0);
                }
            }
            // The pass stops once every evicted job is back and the free cores
            // are fewer than any queued job asks for, which the last evicted
            // job placed back may make them.
            if placed && left_all == 0 && self.free_cores() < min_queued {
                going = false;
                break;
            }
            let Some((at_key, at_user)) = event else {
                break;
            };
            if let Some(u) = last_of {
                // Its first queued candidate, against the free cores now; taken
                // at once if ahead of every other entry.
                if let Some((k, _)) = self.greedy_candidate(now, u, &mut cursor[u], evicted) {
                    let top = evicting
                        .iter()
                        .zip(&keys)
                        .filter_map(|(&v, &(next, _, _))| next.map(|key| (key, v)))
                        .chain(queued.peek().map(|Reverse(e)| *e))
                        .min();
                    queued.push(Reverse((k, u)));
                    if top.is_none_or(|top| (k, u) < top) {
                        break;
                    }
                }
            } else {
                // The smallest queued entry popped: its candidate again; placed
                // if its key did not grow.
                queued.pop();
                let q = at_user;
                if let Some((k, _)) = self.greedy_candidate(now, q, &mut cursor[q], evicted) {
                    queued.push(Reverse((k, q)));
                    if k <= at_key {
                        break;
                    }
                }
            }
        }
        // The heap as the pass has it: the queued entries and each evicted
        // queue's next job.
        heap.extend(queued.drain());
        let mut prefix = std::mem::take(&mut self.anchor.scratch_prefix);
        prefix.resize(self.users.len(), 0);
        for (&v, &(next, _, _)) in evicting.iter().zip(&keys) {
            prefix[v] = cursor[v].0;
            if let Some(key) = next {
                heap.push(Reverse((key, v)));
            }
        }
        self.anchor.scratch_prefix = prefix;
        self.anchor.scratch_keys = keys;
        self.anchor.scratch_queued_heap = queued;
        self.anchor.scratch_left = left;
        going
    }

    /// User `u`'s next job that fits the free cores (evicted ones first), moving
    /// its cursor past those that do not, and its key.
    fn greedy_candidate(
        &self,
        now: Seconds,
        u: usize,
        cursor: &mut (usize, usize),
        evicted: &[Vec<usize>],
    ) -> Option<(Key, (bool, usize))> {
        self.greedy_candidate_at(self.free_cores(), now, u, cursor, evicted)
    }

    /// [`Self::greedy_candidate`] against `free` free cores.
    fn greedy_candidate_at(
        &self,
        free: u64,
        now: Seconds,
        u: usize,
        cursor: &mut (usize, usize),
        evicted: &[Vec<usize>],
    ) -> Option<(Key, (bool, usize))> {
        let mut pick = None;
        if let Some(list) = evicted.get(u) {
            while let Some(&j) = list.get(cursor.0) {
                if u64::from(self.jobs[j].cpus) <= free {
                    pick = Some((true, j));
                    break;
                }
                cursor.0 += 1;
            }
        }
        if pick.is_none() && self.user_min_queued(u) <= free {
            let queue = &self.users[u].queue;
            while let Some(&j) = queue.get(cursor.1) {
                if u64::from(self.jobs[j].cpus) <= free {
                    pick = Some((false, j));
                    break;
                }
                cursor.1 += 1;
            }
        }
        let (from_evicted, j) = pick?;
        Some((self.greedy_key(now, u, j), (from_evicted, j)))
    }

    /// The policy's key of user `u` with candidate job `j` (smallest first).
    fn greedy_key(&self, _now: Seconds, u: usize, j: usize) -> Key {
        let capacity = f64::from(self.config.capacity);
        let user = &self.users[u];
        let job = &self.jobs[j];
        let held = user.running_cores as f64;
        let with = held + f64::from(job.cpus);
        match self.config.policy {
            // LocalQueue usage over its `fairSharing.weight`, then creation time.
            SimPolicy::KueueAfs => Key(self.anchor.usage[u] / user.weight, job.submit, j as u64),
            // Share with the workload admitted, then creation time.
            SimPolicy::KueueFairSharing => Key(
                kueue_share(with, capacity, user.weight) as f64,
                job.submit,
                j as u64,
            ),
            // Cost with the job, then queue (user) order.
            SimPolicy::Armada => Key(with / capacity / user.weight, u as f64, j as u64),
            // Allocated / guaranteed, then more pending first, then user order.
            _ => {
                let guaranteed = capacity * user.weight / self.anchor.weight_sum;
                Key(held / guaranteed, -(user.queued_cores as f64), u as u64)
            }
        }
    }

    /// Whether an Armada round should evict: some job may be preempted and some
    /// user with queued jobs holds less than its fair share. When it gets that
    /// far it leaves the fair shares in `anchor.armada_shares` for the round.
    fn armada_wants_eviction(&mut self) -> bool {
        if self.queued_jobs == 0 || self.anchor.preemptible_running == 0 {
            return false;
        }
        self.armada_fair_shares();
        let shares = &self.anchor.armada_shares;
        self.heads
            .iter()
            .any(|&(_, u)| (self.users[u].running_cores as f64) < shares[u] - 1e-9)
    }

    /// Whether an Armada eviction round at this state provably places exactly
    /// what the plain pass places and preempts nothing: every queued job's key
    /// is above the key of every job the round evicts. The round's pass (the
    /// smallest key first) then places every evicted job before any queued one,
    /// each fitting, since the free cores are at least the evicted cores not yet
    /// placed back; once all are back the state is the one before the round and
    /// what follows is the plain pass (which places, at each turn, the queue
    /// whose current key is the smallest, however stale its heap entry). A
    /// queued job of user `u` has a key of at least `(h_u + c_u) / C / w_u`
    /// (`c_u` its fewest queued cores, `h_u` what it holds, which the round
    /// gives back in full), and none fits that asks for more than the free cores
    /// plus every preemptible core; an evicted job of user `v` has a key of at
    /// most `h_v / C / w_v`, over the users the round evicts (`shares`: the fair
    /// shares it uses).
    fn armada_round_is_plain(&self, shares: &[f64]) -> bool {
        if self.queued_jobs == 0 || self.anchor.preemptible_running == 0 {
            return true;
        }
        let capacity = f64::from(self.config.capacity);
        let a = &self.anchor;
        let top = a
            .preemptible_users
            .iter()
            .map(|&u| (u, &self.users[u]))
            .filter(|&(u, user)| {
                shares[u] > 0.0 && user.running_cores as f64 / shares[u] > ARMADA_PROTECTED_FRACTION
            })
            .map(|(_, user)| user.running_cores as f64 / capacity / user.weight)
            .fold(f64::NEG_INFINITY, f64::max);
        let most_free = self.free_cores() + a.preemptible_cores_all;
        self.heads.iter().all(|&(_, u)| {
            let least = self.user_min_queued(u);
            let user = &self.users[u];
            least > most_free
                || (user.running_cores as f64 + least as f64) / capacity / user.weight > top
        })
    }

    /// Each user's Armada fair share in cores, into `anchor.armada_shares`:
    /// `max(adjusted, w / Σ w)` over the users with demand (adjusted:
    /// water-filling capped at demand, [`crate::sim::stats::fair_shares`], here
    /// with its order kept between steps); 0 without.
    fn armada_fair_shares(&mut self) {
        if self.anchor.armada_shares_at == Some(self.demand_changes) {
            return;
        }
        self.anchor.armada_shares_at = Some(self.demand_changes);
        let capacity = f64::from(self.config.capacity);
        let n = self.users.len();
        if self.tree.is_empty() {
            // Without groups the fairness snapshot's fair shares are these
            // (the same users, weights and demands, the same water-filling):
            // computed once for both.
            self.update_demands();
            let a = &mut self.anchor;
            let wsum: f64 = self.scratch_weights.iter().sum();
            a.armada_shares.clear();
            a.armada_shares.resize(n, 0.0);
            for (k, &u) in self.scratch_users.iter().enumerate() {
                let w = self.scratch_weights[k];
                a.armada_shares[u] = capacity * self.scratch_fair[k].max(w / wsum);
            }
            return;
        }
        let a = &mut self.anchor;
        super::fairness::gather_demands(
            &self.users,
            self.config.capacity,
            &mut a.scratch_users,
            &mut a.scratch_weights,
            &mut a.scratch_demands,
        );
        a.scratch_adjusted.clear();
        a.scratch_adjusted.resize(a.scratch_demands.len(), 0.0);
        let total: f64 = a.scratch_demands.iter().sum();
        if total <= 1.0 {
            a.scratch_adjusted.copy_from_slice(&a.scratch_demands);
        } else {
            let order =
                a.armada_order
                    .update(&a.scratch_users, &a.scratch_weights, &a.scratch_demands, n);
            crate::sim::stats::fill_in_order(
                &a.scratch_weights,
                &a.scratch_demands,
                order,
                &mut a.scratch_adjusted,
            );
        }
        let wsum: f64 = a.scratch_weights.iter().sum();
        a.armada_shares.clear();
        a.armada_shares.resize(n, 0.0);
        for (k, &u) in a.scratch_users.iter().enumerate() {
            let w = a.scratch_weights[k];
            a.armada_shares[u] = capacity * a.scratch_adjusted[k].max(w / wsum);
        }
    }

    /// For a round [`Self::armada_round_is_plain`] found to place every
    /// evicted job first, the free cores against which its pass chooses each
    /// queued user's first candidate: all evicted jobs' cores free (the pass's
    /// start) for a user the round does not evict; for one it does, the free
    /// cores when its last evicted job is placed back, the evicted jobs being
    /// placed in the order of their keys (each queue's keys increase).
    fn armada_round_start_free(&self) -> Vec<u64> {
        let capacity = f64::from(self.config.capacity);
        let shares = &self.anchor.armada_shares;
        let evicts = |u: usize| self.armada_evicts(shares, u);
        // Each evicted job's key when placed back (its user's keys increase
        // along its jobs, in job order), its user and cores.
        let mut keys: Vec<(Key, usize, u64)> = Vec::new();
        let mut evicted_cores = 0;
        for &u in self.anchor.preemptible_users.iter().filter(|&&u| evicts(u)) {
            let mut base = self.users[u].running_cores - self.anchor.preemptible_cores[u];
            evicted_cores += self.anchor.preemptible_cores[u];
            for &j in &self.anchor.preemptible_jobs[u] {
                let c = u64::from(self.jobs[j].cpus);
                base += c;
                let key = Key(
                    base as f64 / capacity / self.users[u].weight,
                    u as f64,
                    j as u64,
                );
                keys.push((key, u, c));
            }
        }
        let free = self.free_cores();
        let mut start = vec![free + evicted_cores; self.users.len()];
        let mut from = 0;
        while from < keys.len() {
            // This user's jobs are `keys[from..to]`; its last is placed back
            // when every job with a smaller (key, user) is.
            let v = keys[from].1;
            let to = from + keys[from..].iter().take_while(|e| e.1 == v).count();
            let last = keys[to - 1];
            let later: u64 = keys
                .iter()
                .filter(|e| (e.0, e.1) > (last.0, last.1))
                .map(|e| e.2)
                .sum();
            start[v] = free + later;
            from = to;
        }
        start
    }

    /// Whether an Armada round evicts user `u`'s preemptible jobs: it has some
    /// and holds more than `protectedFractionOfFairShare` of its fair share
    /// (`shares`, cores).
    fn armada_evicts(&self, shares: &[f64], u: usize) -> bool {
        let held = self.users[u].running_cores as f64;
        !self.anchor.preemptible_jobs[u].is_empty()
            && shares[u] > 0.0
            && held / shares[u] > ARMADA_PROTECTED_FRACTION
    }

    /// One Armada round with eviction at `now`: evicts the preemptible jobs of
    /// users above `protectedFractionOfFairShare` of their fair share, schedules
    /// evicted and queued jobs in cost order, preempts the evicted jobs not
    /// scheduled again.
    fn armada_round(&mut self, now: Seconds) {
        let shares = std::mem::take(&mut self.anchor.armada_shares);
        let n = self.users.len();
        // Per user, its evicted jobs in job order (Armada's scheduling order
        // within a queue for equal priorities): all its running preemptible
        // ones, decided on what each user holds before any is evicted.
        let mut evicted = std::mem::take(&mut self.anchor.scratch_evicted);
        evicted.resize_with(n, Vec::new);
        let mut evicting = std::mem::take(&mut self.anchor.scratch_evicting);
        for &u in &evicting {
            evicted[u].clear();
        }
        evicting.clear();
        // Each user's lot depends on what it held before any eviction.
        evicting.extend(
            self.anchor
                .preemptible_users
                .iter()
                .copied()
                .filter(|&u| self.armada_evicts(&shares, u)),
        );
        for &u in &evicting {
            evicted[u].extend_from_slice(&self.anchor.preemptible_jobs[u]);
            let c = self.anchor.preemptible_cores[u];
            self.used_cores -= c;
            self.users[u].running_cores -= c;
        }
        self.anchor.kept.resize(self.jobs.len(), false);
        self.greedy_pass_from(now, &evicted, &evicting, None);
        // The evicted jobs not scheduled again are preempted, in job order
        // (those the round's bulk start placed back, a prefix of each queue's,
        // are not marked).
        let mut lost = std::mem::take(&mut self.anchor.scratch_lost);
        lost.clear();
        let prefix = &self.anchor.scratch_prefix;
        for &u in &evicting {
            for &j in &evicted[u][prefix[u]..] {
                if !std::mem::take(&mut self.anchor.kept[j]) {
                    lost.push(j);
                }
            }
        }
        lost.sort_unstable();
        for &j in &lost {
            let (u, c) = (self.jobs[j].user, u64::from(self.jobs[j].cpus));
            self.used_cores += c;
            self.users[u].running_cores += c;
            self.preempt(j, now);
        }
        self.anchor.scratch_lost = lost;
        self.anchor.scratch_evicted = evicted;
        self.anchor.scratch_evicting = evicting;
        self.anchor.armada_shares = shares;
    }

    /// Kueue fair sharing: the first head (in admission order) that fits nowhere
    /// and finds targets preempts them and starts; whether one did.
    fn kueue_preempt_once(&mut self, now: Seconds) -> bool {
        if self.queued_jobs == 0 || self.anchor.preemptible_running == 0 {
            return false;
        }
        let capacity = f64::from(self.config.capacity);
        let share =
            |sim: &Sim<'_>, u: usize, cores: f64| kueue_share(cores, capacity, sim.users[u].weight);
        // A target's share must be at least the preemptor's with its head, so a
        // head above every user's share cannot preempt: checked before anything is
        // gathered (most steps stop here).
        // `floor` is monotone: the largest share is the share of the largest
        // cores / weight.
        // (The last of equals, as `max_by`: the last of the users kept by
        // ratio, then user.)
        self.kueue_update_shares();
        let a = &self.anchor;
        let max_share = a
            .kueue_by_ratio
            .last()
            .map_or(i64::MIN, |&(_, u)| a.kueue_share_now[u]);
        let free = self.free_cores() as f64;
        let mut heads: Vec<(Key, usize, i64)> = self
            .heads
            .iter()
            .filter_map(|&(_, u)| {
                let j = self.users[u].queue[0];
                let c = f64::from(self.jobs[j].cpus);
                if c <= free {
                    return None;
                }
                let p_new = share(self, u, self.users[u].running_cores as f64 + c);
                // Its admission key ([`Self::greedy_key`]): the share with it
                // admitted, `p_new`, then creation time.
                (p_new <= max_share)
                    .then(|| (Key(p_new as f64, self.jobs[j].submit, j as u64), u, p_new))
            })
            .collect();
        if heads.is_empty() {
            return false;
        }
        heads.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        let floor = heads.iter().map(|h| h.2).min().unwrap_or(i64::MAX);
        // Each user's share, kept (not once per running job).
        let shares = std::mem::take(&mut self.anchor.kueue_share_now);
        // Candidates of the users that can be targets: preemptible jobs admitted
        // before now, most recent first: the kept list (by start) read from
        // its end, less those admitted now (at its end).
        // (Set for the users with candidates, the only ones read.)
        let mut cands = std::mem::take(&mut self.anchor.kueue_cands);
        cands.resize(self.users.len(), 0);
        // The users with candidates, and the cores of their candidates.
        let mut targets_of: Vec<(usize, f64)> = Vec::new();
        for &u in &self.anchor.preemptible_users {
            let list = &self.anchor.preemptible_jobs[u];
            if shares[u] < floor {
                continue;
            }
            let mut cores = self.anchor.preemptible_cores[u];
            let mut len = list.len();
            while len > 0 && self.jobs[list[len - 1]].start.is_none_or(|s| s >= now) {
                len -= 1;
                cores -= u64::from(self.jobs[list[len]].cpus);
            }
            cands[u] = len;
            if len > 0 {
                targets_of.push((u, cores as f64));
            }
        }
        for (_, p, p_new) in heads {
            let j = self.users[p].queue[0];
            let c = f64::from(self.jobs[j].cpus);
            // Every target is a candidate of another queue whose share is at
            // least the preemptor's with its workload (both strategies): if all
            // of those would not make room, `kueue_targets` finds none.
            let room: f64 = targets_of
                .iter()
                .filter(|&&(v, _)| v != p && shares[v] >= p_new)
                .map(|&(_, cores)| cores)
                .sum();
            if c > free + room + 1e-9 {
                continue;
            }
            let lists = &self.anchor.preemptible_jobs;
            if let Some(targets) = kueue_targets_in(
                p,
                c,
                free,
                p_new,
                |v| self.users[v].running_cores as f64,
                targets_of.iter().map(|&(v, _)| v),
                |v| cands[v],
                |v, k| lists[v][cands[v] - 1 - k],
                |u, cores| share(self, u, cores),
                |k| f64::from(self.jobs[k].cpus),
            ) {
                self.anchor.kueue_share_now = shares;
                self.anchor.kueue_cands = cands;
                for v in targets {
                    self.preempt(v, now);
                }
                self.anchor_start(j, now);
                return true;
            }
        }
        self.anchor.kueue_share_now = shares;
        self.anchor.kueue_cands = cands;
        false
    }

    /// Brings Kueue's kept shares and ratios to what each user holds now: every
    /// user's at the first check, then those whose cores changed.
    fn kueue_update_shares(&mut self) {
        let capacity = f64::from(self.config.capacity);
        let a = &mut self.anchor;
        let n = self.users.len();
        if a.kueue_is_dirty.len() != n {
            a.kueue_is_dirty = vec![true; n];
            a.kueue_dirty = (0..n).collect();
            a.kueue_share_now = vec![0; n];
            a.kueue_ratio = vec![None; n];
            a.kueue_by_ratio.clear();
        }
        for &u in &a.kueue_dirty {
            let user = &self.users[u];
            let cores = user.running_cores as f64;
            let ratio = total_key(cores / user.weight);
            if a.kueue_ratio[u] != Some(ratio) {
                if let Some(old) = a.kueue_ratio[u] {
                    a.kueue_by_ratio.remove(&(old, u));
                }
                a.kueue_by_ratio.insert((ratio, u));
                a.kueue_ratio[u] = Some(ratio);
            }
            a.kueue_share_now[u] = kueue_share(cores, capacity, user.weight);
            a.kueue_is_dirty[u] = false;
        }
        a.kueue_dirty.clear();
    }
}

/// `x` as an integer in the order of [`f64::total_cmp`] (its own mapping).
fn total_key(x: f64) -> i64 {
    let bits = x.to_bits() as i64;
    bits ^ ((((bits >> 63) as u64) >> 1) as i64)
}

/// Kueue's `fairPreemptions` for a preemptor of user `p` needing `need` cores with
/// `free` free, its share with the workload `p_new`: `held` cores per user,
/// `candidates` per user (job indices, most recently admitted first), `share(u,
/// cores)` (thousandths, [`kueue_share`]),
/// `cpus(job)`, `user(job)` (each of `candidates[v]` is user `v`'s, so it is
/// not called). The targets, or `None` if it cannot fit.
#[allow(clippy::too_many_arguments)]
pub fn kueue_targets(
    p: usize,
    need: f64,
    free: f64,
    p_new: i64,
    held: &[f64],
    candidates: &[Vec<usize>],
    share: impl Fn(usize, f64) -> i64,
    cpus: impl Fn(usize) -> f64,
    _user: impl Fn(usize) -> usize,
) -> Option<Vec<usize>> {
    kueue_targets_in(
        p,
        need,
        free,
        p_new,
        |v| held[v],
        0..held.len(),
        |v| candidates.get(v).map_or(0, Vec::len),
        |v, k| candidates[v][k],
        share,
        cpus,
    )
}

/// [`kueue_targets`] with the cores held as `held(v)`, the candidates as
/// `len(v)`, user `v`'s number (every user with some among `queues`), and
/// `at(v, k)`, its `k`-th (most recently admitted first; each of user `v`).
#[allow(clippy::too_many_arguments)]
fn kueue_targets_in(
    p: usize,
    need: f64,
    free: f64,
    p_new: i64,
    held: impl Fn(usize) -> f64,
    queues: impl Iterator<Item = usize>,
    len: impl Fn(usize) -> usize,
    at: impl Fn(usize, usize) -> usize,
    share: impl Fn(usize, f64) -> i64,
    cpus: impl Fn(usize) -> f64,
) -> Option<Vec<usize>> {
    // The queues that may give targets (the preemptor's own queue is no
    // target); every per-queue array below is over them, by place in `act`.
    let act: Vec<usize> = queues.filter(|&u| u != p && len(u) > 0).collect();
    let mut held: Vec<f64> = act.iter().map(|&v| held(v)).collect();
    let mut free = free;
    let mut targets = Vec::new();
    // Each queue's candidates not yet taken or set aside: `at(v, k)` for `k` in
    // `next[i]..len(v)`, `v = act[i]`.
    let mut next: Vec<usize> = vec![0; act.len()];
    let fits = |free: f64| need <= free + 1e-9;
    // Strategy 1: LessThanOrEqualToFinalShare, target queues by share, highest
    // first (ties: lower user index), re-ranked after each preemption.
    let mut retry: Vec<usize> = Vec::new();
    // Per queue, where its first candidate set aside is in `retry`
    // (`usize::MAX`: none), and the queues with one.
    let mut first_retry: Vec<usize> = vec![usize::MAX; act.len()];
    let mut retry_queues: Vec<usize> = Vec::new();
    let mut active: Vec<usize> = (0..act.len()).collect();
    // Each active queue's share at what it holds, kept as that changes.
    let mut shares: Vec<i64> = act.iter().zip(&held).map(|(&v, &h)| share(v, h)).collect();
    while !fits(free) {
        let Some((place, &q)) = active.iter().enumerate().max_by(|a, b| {
            shares[*a.1]
                .cmp(&shares[*b.1])
                .then(act[*b.1].cmp(&act[*a.1]))
        }) else {
            break;
        };
        let v = act[q];
        let (from, end) = (next[q], len(v));
        // The share left is monotone in the cores taken away (as `kueue_share`
        // is in the cores held): a job at least as large as one that failed
        // fails too, without its share computed.
        let mut fails_from = f64::INFINITY;
        let found = (from..end).find(|&k| {
            let c = cpus(at(v, k));
            if c >= fails_from {
                return false;
            }
            let ok = p_new <= share(v, held[q] - c);
            if !ok {
                fails_from = c;
            }
            ok
        });
        match found {
            Some(i) => {
                // Those before it stay candidates for strategy 2.
                if from < i && first_retry[q] == usize::MAX {
                    first_retry[q] = retry.len();
                    retry_queues.push(q);
                }
                retry.extend((from..i).map(|k| at(v, k)));
                let z = at(v, i);
                next[q] = i + 1;
                held[q] -= cpus(z);
                shares[q] = share(v, held[q]);
                free += cpus(z);
                targets.push(z);
                if next[q] == end {
                    active.swap_remove(place);
                }
            }
            None => {
                if from < end && first_retry[q] == usize::MAX {
                    first_retry[q] = retry.len();
                    retry_queues.push(q);
                }
                retry.extend((from..end).map(|k| at(v, k)));
                next[q] = end;
                active.swap_remove(place);
            }
        }
    }
    if !fits(free) {
        // Strategy 2: LessThanInitialShare, once per queue, by share.
        // The queues with candidates set aside (each candidate of its own
        // queue), and each one's first.
        let mut queues = retry_queues;
        queues.sort_by(|&a, &b| {
            share(act[b], held[b])
                .cmp(&share(act[a], held[a]))
                .then(act[a].cmp(&act[b]))
        });
        for q in queues {
            if fits(free) {
                break;
            }
            if p_new < share(act[q], held[q]) {
                if let Some(&z) = retry.get(first_retry[q]) {
                    held[q] -= cpus(z);
                    free += cpus(z);
                    targets.push(z);
                }
            }
        }
    }
    if !fits(free) {
        return None;
    }
    // fillBackWorkloads: give back targets not needed, all but the last, newest
    // first.
    let last = targets.len().saturating_sub(1);
    let mut keep = vec![true; targets.len()];
    for i in (0..last).rev() {
        let c = cpus(targets[i]);
        if need <= free - c + 1e-9 {
            free -= c;
            keep[i] = false;
        }
    }
    Some(
        targets
            .into_iter()
            .zip(keep)
            .filter_map(|(z, k)| k.then_some(z))
            .collect(),
    )
}

/// How a job may start beside an EASY reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backfill {
    /// It ends (by its estimate) no later than the shadow time.
    EndsBefore,
    /// It fits in the extra cores, which it then uses up.
    InExtra,
    /// It would delay the reservation.
    No,
}

/// The EASY test of a job of `request` and `estimate` against shadow `s` (as
/// `policy::reservation`'s, which is private to the policy).
fn admits(s: &Shadow, now: Seconds, request: &Resources, estimate: Option<Seconds>) -> Backfill {
    if let (Some(start), Some(est)) = (s.start, estimate) {
        if est >= 0.0 && now + est <= start {
            return Backfill::EndsBefore;
        }
    }
    if request.fits_within(&s.extra) {
        Backfill::InExtra
    } else {
        Backfill::No
    }
}
