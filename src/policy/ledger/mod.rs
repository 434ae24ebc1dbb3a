//! The policy's state between cycles: users, clusters, outstanding jobs and the
//! reservation, indexed so that a cycle costs what it grants and what changed, not
//! who is queued (DESIGN §2, "Cost").
//!
//! A [`Ledger`] is still pure: no I/O, no clock (every call that depends on time
//! takes `now`, seconds), no randomness. Feeding it the same calls gives the same
//! grants. [`Ledger::cycle`] makes exactly the decision [`crate::policy::run_cycle`] makes
//! on a snapshot of the same state (the property tests check it against the
//! straightforward O(users) implementation kept as their oracle); `run_cycle` is a
//! ledger built from the snapshot for one cycle.
//!
//! # What a cycle reads
//!
//! - **Head shapes.** Eligible users are grouped by their effective head's request
//!   (cores, GPUs, bytes). With backfill on, only a group whose request fits some
//!   healthy cluster's free capacity can lead to a grant: the others are not read.
//!   Within a group, users are kept in fair-share order by a key index (`index.rs`)
//!   (lower bounds of their keys that stay valid as keys drift with time), so the
//!   next user to serve is found by evaluating a few keys, not all.
//! - **Overdue heads.** Eligible users whose head has waited past the starvation
//!   guard sit in their own index; with no reservation held, a cycle reads them in
//!   fair-share order beside the shapes, and the first that fits no free capacity
//!   gets the reservation when a later user's job is about to be granted: it is
//!   **passed over by backfill** (read until one is found or nothing is left to
//!   grant).
//! - A held reservation is checked by name; its shadow walks the reserved cluster's
//!   outstanding jobs kept sorted by expected end.
//!
//! A cycle on a full cluster thus reads one fit test per head shape and nothing per
//! user (nothing can be granted, so nobody is passed over).
//!
//! # Pending reasons and the order
//!
//! Explanations are not computed by the cycle: [`Ledger::reason`] and
//! [`Ledger::order`] derive them when asked, from the user's current state and what
//! the last cycle left (free capacity after its grants, the reservation and its
//! expected start, where a strict cycle stopped, whether any cluster was healthy).
//! Right after a cycle they are exactly the reasons and order
//! [`crate::policy::CycleOutcome`] lists.
//!
//! # Time
//!
//! Time never goes backwards here: an earlier `now` than one seen before is taken
//! as the latest seen, so that the bounds the indexes keep stay valid.
//!
//! # Layout
//!
//! `mod.rs` the state; `hash.rs` its hashers; `events.rs` what the ledger is told
//! between cycles; `keys.rs` keys, their bounds and index membership; `index.rs` the
//! key index; `cycle.rs` the cycle and its streams; `reserve.rs` fitting, starvation
//! and the reservation; `explain.rs` reasons and the order; `read.rs` the rest of what
//! it answers; `tests.rs` the ledger against the oracle.

mod cycle;
mod events;
mod explain;
mod hash;
mod index;
mod keys;
mod preempt;
#[cfg(test)]
mod preempt_tests;
mod read;
mod reserve;
#[cfg(test)]
mod tests;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use cycle::CycleResult;
pub(crate) use hash::{FastHash, UidHasher};
pub use hash::{JobHasher, JobMap};
use index::KeyIndex;

use super::custom::{Custom, MAX_CUSTOM};
use super::share::cmp_f64;
use super::{
    dominant_share, ClusterView, JobId, OutstandingJob, PendingReason, PolicyConfig, QueuedJob,
    Reservation, Resources, Seconds, UserView,
};

/// A user's index in the ledger (dense, in order of first appearance).
pub(crate) type Uid = u32;

/// A user's place in fair-share order at one instant: the quantized key
/// ([`quantize_key`]), then the effective head's submit time (older first; `+∞`
/// without a head), then the name. Smaller is served first.
///
/// [`quantize_key`]: crate::policy::quantize_key
#[derive(Clone, Debug)]
pub(crate) struct Rank {
    pub key: f64,
    pub head_at: f64,
    pub name: Arc<str>,
}

impl Ord for Rank {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_f64(self.key, other.key)
            .then_with(|| cmp_f64(self.head_at, other.head_at))
            .then_with(|| self.name.cmp(&other.name))
    }
}

impl PartialOrd for Rank {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Rank {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Rank {}

/// A user's fair-share settings (what an admin sets).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserSettings {
    /// Weight `w > 0`.
    pub weight: f64,
    /// Paused: nothing new is granted.
    pub paused: bool,
    /// Cap on outstanding jobs.
    pub max_running_jobs: u32,
    /// Cap on the allocation (cores, GPUs, bytes; custom resources uncapped), if any.
    pub max_resources: Option<Resources>,
    /// The path of its group (`None`: the root).
    #[serde(default)]
    pub group: Option<String>,
}

impl Default for UserSettings {
    fn default() -> Self {
        UserSettings {
            weight: 1.0,
            paused: false,
            max_running_jobs: u32::MAX,
            max_resources: None,
            group: None,
        }
    }
}

/// One user's live fair-share state, as [`Ledger::user`] reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct UserState {
    /// Its settings.
    pub settings: UserSettings,
    /// Sum of its outstanding jobs' requests.
    pub allocation: Resources,
    /// Its outstanding (DISPATCHING, PENDING, RUNNING) jobs.
    pub outstanding: u32,
    /// Dominant share of `allocation` (fraction of the healthy capacity).
    pub share: f64,
    /// Decayed usage brought to the time asked.
    pub usage: f64,
    /// `(share + usage) / weight`, without the age term.
    pub key: f64,
    /// Jobs in its window.
    pub window: usize,
}

/// An outstanding job: its user, its cluster, what it holds.
#[derive(Clone, Debug)]
struct Job {
    uid: Uid,
    cluster: usize,
    /// What it is charged: what it declared, until [`Ledger::charge`] says what it
    /// holds on Ray.
    resources: Resources,
    /// What it declared.
    declared: Resources,
    /// The cluster's last report counted it.
    reported: bool,
    /// Its key in the cluster's `ends` (its expected end, and arrival).
    end_key: EndKey,
    /// When it started (was granted, or was counted by [`Ledger::start`]), seconds.
    started_at: Seconds,
    /// It may be preempted ([`Ledger::set_preemptible`], or granted from a window
    /// that said so).
    preemptible: bool,
    /// How many times it was preempted before this run.
    preemptions: u32,
    /// Preempted for this job: it is being stopped, and is no longer a candidate.
    stopping_for: Option<JobId>,
}

/// Order of expected ends: known ends by time (NaN as `+∞`, `−0` as `0`), unknown
/// last; ties by arrival (`seq`).
#[derive(Clone, Copy, Debug)]
struct EndKey {
    end: Option<Seconds>,
    seq: u64,
}

impl Ord for EndKey {
    fn cmp(&self, other: &Self) -> Ordering {
        super::reservation::cmp_raw_end(self.end, other.end).then_with(|| self.seq.cmp(&other.seq))
    }
}

impl PartialOrd for EndKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for EndKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for EndKey {}

/// One cluster: what Ray reported and this service's jobs on it.
#[derive(Clone, Debug)]
struct ClusterState {
    name: String,
    healthy: bool,
    total: Resources,
    /// As [`ClusterView::used_reported`].
    used_reported: Resources,
    /// As [`ClusterView::outstanding`].
    outstanding: Resources,
    /// As [`ClusterView::unreported`].
    unreported: Resources,
    /// Outstanding jobs by expected end (unknown last), then arrival.
    ends: BTreeMap<EndKey, (JobId, Resources)>,
    next_seq: u64,
    /// A pool (issue 30; [`ClusterView::pool`]).
    pool: bool,
    /// Capacity counted in `total` that no grant may take in the next cycle: an
    /// autoscaling cluster's growth (its potential less what is alive) between two
    /// scale-up batches ([`Ledger::withhold`]). Shares, reservations and preemption
    /// still count it; only fitting leaves it out.
    withheld: Resources,
}

impl ClusterState {
    fn new(name: &str) -> ClusterState {
        ClusterState {
            name: name.to_owned(),
            healthy: false,
            total: Resources::ZERO,
            used_reported: Resources::ZERO,
            outstanding: Resources::ZERO,
            unreported: Resources::ZERO,
            ends: BTreeMap::new(),
            next_seq: 0,
            pool: false,
            withheld: Resources::ZERO,
        }
    }

    /// The cluster as [`crate::policy::run_cycle`] takes it.
    fn view(&self) -> ClusterView {
        ClusterView {
            name: self.name.clone(),
            healthy: self.healthy,
            total: self.total,
            used_reported: self.used_reported,
            outstanding: self.outstanding,
            unreported: self.unreported,
            jobs: self
                .ends
                .iter()
                .map(|(k, (_, r))| OutstandingJob {
                    resources: *r,
                    expected_end: k.end,
                })
                .collect(),
            pool: self.pool,
        }
    }

    fn add(&mut self, job: JobId, resources: Resources, end: Option<Seconds>) -> EndKey {
        let key = EndKey {
            end,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        self.ends.insert(key, (job, resources));
        key
    }
}

/// The request of an effective head, as a hashable key: its components' bits (`−0`
/// as `0`): cores, GPUs, bytes, then every custom slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Shape([u64; 3 + MAX_CUSTOM]);

impl Shape {
    fn of(r: &Resources) -> Shape {
        let mut bits = [0.0_f64.to_bits(); 3 + MAX_CUSTOM];
        for (b, x) in bits.iter_mut().zip(r.components()) {
            *b = (x + 0.0).to_bits();
        }
        Shape(bits)
    }

    fn resources(self) -> Resources {
        let x = self.0.map(f64::from_bits);
        let mut custom = Custom::EMPTY;
        for (k, &v) in x[3..].iter().enumerate() {
            if v != 0.0 {
                custom.set(k, v);
            }
        }
        Resources::new(x[0], x[1], x[2]).with_custom(custom)
    }
}

/// An `f64` with the policy's total order, for ordered sets.
#[derive(Clone, Copy, Debug)]
struct Ordered(f64);

impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_f64(self.0, other.0)
    }
}

impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ordered {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ordered {}

/// One user.
#[derive(Clone, Debug)]
struct Account {
    name: Arc<str>,
    settings: UserSettings,
    /// Decayed usage `h` at `usage_at` (seconds).
    usage: f64,
    usage_at: Seconds,
    /// A prefix of its QUEUED jobs in queue order (a grant takes the head from the
    /// front).
    window: VecDeque<QueuedJob>,
    /// Index in `window` of the effective head (`window.len()` when none).
    cursor: usize,
    /// Sum of the window's requests (what it would hold if all of it ran), for the
    /// fair shares preemption compares with.
    queued: Resources,
    outstanding: u32,
    allocation: Resources,
    /// Dominant share of `allocation` against the ledger's capacity.
    share: f64,
    /// Takes part in cycles even with an empty window (a snapshot's user).
    pinned: bool,
    /// Where it is indexed.
    shape: Option<Shape>,
    waiting: Option<Ordered>,
    overdue: bool,
    /// The current cycle's grants emptied its window: it still takes part in it.
    emptied: bool,
    /// Its (usage, usage_at) changed since [`Ledger::take_usage_changes`].
    usage_dirty: bool,
}

impl Account {
    fn new(name: Arc<str>, settings: UserSettings, now: Seconds) -> Account {
        Account {
            name,
            settings,
            usage: 0.0,
            usage_at: now,
            window: VecDeque::new(),
            cursor: 0,
            queued: Resources::ZERO,
            outstanding: 0,
            allocation: Resources::ZERO,
            share: 0.0,
            pinned: false,
            shape: None,
            waiting: None,
            overdue: false,
            emptied: false,
            usage_dirty: false,
        }
    }

    fn head(&self) -> Option<&QueuedJob> {
        self.window.get(self.cursor)
    }

    /// Takes part in a cycle: in the cycle's input, as the arbiter passes users with
    /// a window.
    fn listed(&self) -> bool {
        self.pinned || self.emptied || !self.window.is_empty()
    }

    /// Holds capacity (some component of its allocation is positive).
    fn holds(&self) -> bool {
        self.allocation.components().any(|x| x > 0.0)
    }

    /// Why it cannot start `head` now regardless of capacity, if so (paused first,
    /// then `max_running_jobs`, then `max_resources`).
    fn ineligibility(&self, head: &QueuedJob) -> Option<PendingReason> {
        if self.settings.paused {
            return Some(PendingReason::Paused);
        }
        if self.outstanding >= self.settings.max_running_jobs {
            return Some(PendingReason::MaxRunningJobs {
                limit: self.settings.max_running_jobs,
            });
        }
        match &self.settings.max_resources {
            Some(max) if !(self.allocation + head.resources).fits_cap(max) => {
                Some(PendingReason::MaxResources)
            }
            _ => None,
        }
    }

    /// Has an effective head it may start now, capacity permitting.
    fn eligible(&self) -> bool {
        self.head().is_some_and(|h| self.ineligibility(h).is_none())
    }
}

/// What the last cycle left, for explanations.
#[derive(Clone, Debug)]
struct LastCycle {
    now: Seconds,
    /// Each healthy cluster's free capacity after the cycle's grants (empty: no
    /// cluster was healthy).
    free_after: Vec<Resources>,
    /// The reservation after the cycle, and seconds from `now` to its expected
    /// start (if known).
    hold: Option<(Reservation, Option<Seconds>)>,
    /// Strict order: the head the cycle stopped at.
    stopped_for: Option<JobId>,
    /// With groups: the reasons and order the cycle gave (the ledger does not
    /// derive them for a tree).
    grouped: Option<Grouped>,
}

/// What a cycle with groups said, kept for explanations until the next one.
#[derive(Clone, Debug)]
struct Grouped {
    reasons: HashMap<JobId, PendingReason>,
    pending: Vec<(JobId, PendingReason)>,
    order: Vec<crate::policy::UserOrder>,
}

/// The policy's state between cycles (module doc).
#[derive(Debug)]
pub struct Ledger {
    config: PolicyConfig,
    /// Settings of a user first seen through a window or a job.
    defaults: UserSettings,
    accounts: Vec<Account>,
    by_name: HashMap<Arc<str>, Uid>,
    /// In order of first appearance (indexes are stable); `by_cluster_name` sorts.
    clusters: Vec<ClusterState>,
    by_cluster_name: BTreeMap<String, usize>,
    jobs: JobMap<Job>,
    reservation: Option<Reservation>,
    /// The groups (empty: every user in the root, the incremental cycle).
    tree: crate::policy::Tree,
    /// Sum of the healthy clusters' totals, in name order.
    capacity: Resources,
    /// The healthy clusters' and pools' totals in name order (what "too large" is
    /// judged by).
    totals: Totals,
    /// The latest time seen.
    now: Seconds,
    /// Eligible users by their effective head's request.
    shapes: HashMap<Shape, KeyIndex, FastHash>,
    /// Eligible users whose head has not waited past the guard, by its submit time.
    waiting: BTreeSet<(Ordered, Uid)>,
    /// Eligible users whose head has waited past the guard.
    overdue: KeyIndex,
    last: Option<LastCycle>,
    /// Preemption's state between calls (`preempt.rs`).
    preempt: preempt::PreemptState,
    /// The run times of the jobs that ended ([`Ledger::end`]), which the guard in
    /// force follows.
    runtimes: crate::policy::starvation::TypicalRuntime,
    /// The starvation guard in force, seconds ([`crate::policy::starvation::guard`]).
    guard: Seconds,
}

impl Ledger {
    /// An empty ledger with the policy's knobs; users first seen through a window or
    /// a job get `defaults`.
    #[must_use]
    pub fn new(config: PolicyConfig, defaults: UserSettings) -> Ledger {
        let runtimes = crate::policy::starvation::TypicalRuntime::default();
        let guard = crate::policy::starvation::guard(&config, &runtimes);
        Ledger {
            config,
            defaults,
            accounts: Vec::new(),
            by_name: HashMap::new(),
            clusters: Vec::new(),
            by_cluster_name: BTreeMap::new(),
            jobs: HashMap::default(),
            reservation: None,
            tree: crate::policy::Tree::default(),
            capacity: Resources::ZERO,
            totals: Vec::new(),
            now: f64::NEG_INFINITY,
            shapes: HashMap::default(),
            waiting: BTreeSet::new(),
            overdue: KeyIndex::default(),
            last: None,
            preempt: preempt::PreemptState::default(),
            runtimes,
            guard,
        }
    }

    /// A ledger holding exactly a snapshot, as [`crate::policy::run_cycle`] takes one: every
    /// user takes part in the next cycle (even with an empty window), each with the
    /// allocation and outstanding count given, and each cluster as given (its
    /// `jobs` are what its reservation shadow walks).
    #[must_use]
    pub fn from_views(
        config: PolicyConfig,
        now: Seconds,
        users: &[UserView],
        clusters: &[ClusterView],
        reservation: Option<&Reservation>,
    ) -> Ledger {
        let config_licenses = config.licenses;
        let mut ledger = Ledger::new(config, UserSettings::default());
        ledger.now = now;
        for c in clusters {
            let k = ledger.cluster(&c.name);
            let state = &mut ledger.clusters[k];
            state.healthy = c.healthy;
            state.pool = c.pool;
            state.total = super::licenses::with_counts(c.total, &config_licenses);
            state.used_reported = c.used_reported;
            state.outstanding = c.outstanding;
            state.unreported = c.unreported;
            state.ends.clear();
            for j in &c.jobs {
                // A snapshot's jobs have no ids: the walk needs only what they hold.
                state.add(JobId::nil(), j.resources, j.expected_end);
            }
        }
        ledger.refresh_capacity();
        let mut sorted: Vec<&UserView> = users.iter().collect();
        sorted.sort_by(|a, b| a.user.cmp(&b.user));
        for v in sorted {
            let uid = ledger.account(&v.user, now);
            let share = dominant_share(&v.allocation, &ledger.capacity);
            let a = &mut ledger.accounts[uid as usize];
            a.settings = UserSettings {
                weight: v.weight,
                paused: v.paused,
                max_running_jobs: v.max_running_jobs,
                max_resources: v.max_resources,
                group: v.group.clone(),
            };
            a.usage = v.usage;
            a.usage_at = v.usage_at;
            a.outstanding = v.outstanding_jobs;
            a.allocation = v.allocation;
            a.share = share;
            a.window = v.queue.iter().cloned().collect();
            a.queued = preempt::sum(&a.window);
            a.pinned = true;
            ledger.reindex(uid, now);
        }
        ledger.reservation = reservation.cloned();
        ledger
    }

    fn clock(&mut self, now: Seconds) -> Seconds {
        if now > self.now || self.now.is_nan() {
            self.now = now;
        }
        self.now
    }

    /// The uid of `name`, created with the default settings if new.
    fn account(&mut self, name: &str, now: Seconds) -> Uid {
        if let Some(&uid) = self.by_name.get(name) {
            return uid;
        }
        let uid = Uid::try_from(self.accounts.len()).expect("fewer than 2^32 users");
        let name: Arc<str> = Arc::from(name);
        self.accounts
            .push(Account::new(name.clone(), self.defaults.clone(), now));
        self.by_name.insert(name, uid);
        uid
    }

    /// The index of cluster `name`, created (unhealthy, empty) if new.
    fn cluster(&mut self, name: &str) -> usize {
        if let Some(&k) = self.by_cluster_name.get(name) {
            return k;
        }
        let k = self.clusters.len();
        self.clusters.push(ClusterState::new(name));
        self.by_cluster_name.insert(name.to_owned(), k);
        k
    }
}

/// Whether a head submitted at `at` has waited longer than the starvation `guard`
/// at `now` (seconds): `now − at > guard`, false when any is NaN, the same test
/// wherever it is made.
fn overdue(now: Seconds, at: Seconds, guard: Seconds) -> bool {
    now - at > guard
}

/// Whether an age (seconds) saturates the age term of horizon `max_age`: the term
/// is `a · min(age / M, 1)`, constant from then on.
fn saturated(age: Seconds, max_age: Seconds) -> bool {
    age / max_age >= 1.0
}

/// The healthy clusters and pools, in name order: name, whether a pool, total (what
/// "too large" is judged by).
pub(crate) type Totals = Vec<(String, bool, Resources)>;

/// A reason `job` can never run as things stand, independent of other jobs:
/// larger than the total of every healthy cluster it may run on (`totals`: its
/// pool, or every cluster that is not a pool; none healthy at all: never this
/// reason) or, alone, than its user's `max_resources` (`user_cap`) or than a cap of
/// `group_caps` (its user's groups', nearest first, [`crate::policy::Tree::caps_of`]).
pub(crate) fn permanent_reason<'a>(
    job: &QueuedJob,
    user_cap: Option<&Resources>,
    mut group_caps: impl Iterator<Item = (&'a str, &'a Resources)>,
    totals: &[(String, bool, Resources)],
) -> Option<PendingReason> {
    let place = job.pool.as_deref();
    let too_large = !totals.is_empty()
        && !totals
            .iter()
            .any(|(n, p, t)| crate::policy::admits(n, *p, place) && job.resources.fits_within(t));
    if too_large {
        return Some(PendingReason::NoClusterLargeEnough);
    }
    if user_cap.is_some_and(|max| !job.resources.fits_cap(max)) {
        return Some(PendingReason::ExceedsMaxResources);
    }
    group_caps
        .find(|(_, max)| !job.resources.fits_cap(max))
        .map(|(group, _)| PendingReason::ExceedsGroupMaxResources {
            group: group.to_owned(),
        })
}
