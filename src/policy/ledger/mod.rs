//! The policy's state between cycles: users, clusters, outstanding jobs and the
//! reservation, indexed so that a cycle costs what it grants and what changed, not
//! who is queued (DESIGN §2, "Cost").
//!
//! A [`Ledger`] is still pure: no I/O, no clock (every call that depends on time
//! takes `now`, seconds), no randomness. Feeding it the same calls gives the same
//! grants. [`Ledger::cycle`] makes exactly the decision [`super::run_cycle`] makes
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
//!   guard sit in their own index; a reservation is made for the first of them in
//!   fair-share order when it is passed over: a user holding capacity has a larger
//!   key (the **holders** index gives the largest key, from upper bounds).
//! - A held reservation is checked by name; its shadow walks the reserved cluster's
//!   outstanding jobs kept sorted by expected end.
//!
//! A cycle on a full cluster with a reservation held (or no head past the guard)
//! thus reads one fit test per head shape and nothing per user.
//!
//! # Pending reasons and the order
//!
//! Explanations are not computed by the cycle: [`Ledger::reason`] and
//! [`Ledger::order`] derive them when asked, from the user's current state and what
//! the last cycle left (free capacity after its grants, the reservation and its
//! expected start, where a strict cycle stopped, whether any cluster was healthy).
//! Right after a cycle they are exactly the reasons and order
//! [`super::CycleOutcome`] lists.
//!
//! # Time
//!
//! Time never goes backwards here: an earlier `now` than one seen before is taken
//! as the latest seen, so that the bounds the indexes keep stay valid.

mod cycle;
mod explain;
mod index;
#[cfg(test)]
mod tests;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use cycle::CycleResult;
use index::{Bound, KeyIndex};

use super::share::cmp_f64;
use super::{
    age_term, decay_usage, dominant_share, fair_share_key, quantize_key, ClusterView, JobId,
    OutstandingJob, PendingReason, PolicyConfig, QueuedJob, Reservation, Resources, Seconds,
    UserView,
};

/// A user's index in the ledger (dense, in order of first appearance).
pub(crate) type Uid = u32;

/// Hashes a [`Uid`] with one multiply (they are dense small integers).
#[derive(Default)]
pub(crate) struct UidHasher(u64);

impl Hasher for UidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        // High bits into the low ones a table indexes by.
        self.0 ^ (self.0 >> 29)
    }
}

/// A map or set keyed by small integers or bit patterns, hashed with [`UidHasher`].
pub(crate) type FastHash = BuildHasherDefault<UidHasher>;

/// Hashes a job id with one multiply per 8 bytes and a final mix, rather than
/// SipHash (the arbiter and the ledger hash every queued or outstanding job's id at
/// least twice). The final mix spreads every input bit over the low bits a hash
/// table indexes by: ids whose bytes differ only in a few places (sequential test ids,
/// a v7 id's timestamp) would otherwise collide.
#[derive(Default)]
pub struct JobHasher(u64);

impl Hasher for JobHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }

    fn write_usize(&mut self, _: usize) {
        // Only the length prefix of the id's bytes: the same for every id.
    }

    fn finish(&self) -> u64 {
        // The finalizer of MurmurHash3 (fmix64).
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// A map keyed by job id, hashed with [`JobHasher`].
pub type JobMap<V> = HashMap<JobId, V, BuildHasherDefault<JobHasher>>;

/// A user's place in fair-share order at one instant: the quantized key
/// ([`quantize_key`]), then the effective head's submit time (older first; `+∞`
/// without a head), then the name. Smaller is served first.
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
    /// Cap on the allocation (cores, GPUs, bytes), if any.
    pub max_resources: Option<Resources>,
}

impl Default for UserSettings {
    fn default() -> Self {
        UserSettings {
            weight: 1.0,
            paused: false,
            max_running_jobs: u32::MAX,
            max_resources: None,
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

/// A job the ledger counts as outstanding.
#[derive(Clone, Debug, PartialEq)]
pub struct Outstanding {
    /// Its user.
    pub user: Arc<str>,
    /// The cluster it holds capacity on.
    pub cluster: String,
    /// What it holds.
    pub resources: Resources,
    /// Its start plus its runtime estimate, seconds, if known.
    pub expected_end: Option<Seconds>,
}

#[derive(Clone, Debug)]
struct Job {
    uid: Uid,
    cluster: usize,
    resources: Resources,
    expected_end: Option<Seconds>,
    /// The cluster's last report counted it.
    reported: bool,
    /// Its key in the cluster's `ends`.
    end_key: EndKey,
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
        }
    }

    /// The cluster as [`super::run_cycle`] takes it.
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
/// as `0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Shape([u64; 3]);

impl Shape {
    fn of(r: &Resources) -> Shape {
        Shape(r.components().map(|x| (x + 0.0).to_bits()))
    }

    fn resources(self) -> Resources {
        let [c, g, m] = self.0.map(f64::from_bits);
        Resources::new(c, g, m)
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
    holder: bool,
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
            outstanding: 0,
            allocation: Resources::ZERO,
            share: 0.0,
            pinned: false,
            shape: None,
            waiting: None,
            overdue: false,
            holder: false,
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
        self.allocation.components().iter().any(|&x| x > 0.0)
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
            Some(max) if !(self.allocation + head.resources).fits_within(max) => {
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
    backfill: bool,
    /// No cluster was healthy.
    no_healthy: bool,
    /// Each healthy cluster's free capacity after the cycle's grants.
    free_after: Vec<Resources>,
    /// The reservation after the cycle, and seconds from `now` to its expected
    /// start (if known).
    hold: Option<(Reservation, Option<Seconds>)>,
    /// Strict order: the head the cycle stopped at.
    stopped_for: Option<JobId>,
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
    /// Sum of the healthy clusters' totals, in name order.
    capacity: Resources,
    /// The healthy clusters' totals in name order (what "too large" is judged by).
    totals: Vec<Resources>,
    /// The latest time seen.
    now: Seconds,
    /// Eligible users by their effective head's request.
    shapes: HashMap<Shape, KeyIndex, FastHash>,
    /// Eligible users whose head has not waited past the guard, by its submit time.
    waiting: BTreeSet<(Ordered, Uid)>,
    /// Eligible users whose head has waited past the guard.
    overdue: KeyIndex,
    /// Listed users holding capacity, by upper bounds of their keys (negated).
    holders: KeyIndex,
    last: Option<LastCycle>,
}

impl Ledger {
    /// An empty ledger with the policy's knobs; users first seen through a window or
    /// a job get `defaults`.
    #[must_use]
    pub fn new(config: PolicyConfig, defaults: UserSettings) -> Ledger {
        Ledger {
            config,
            defaults,
            accounts: Vec::new(),
            by_name: HashMap::new(),
            clusters: Vec::new(),
            by_cluster_name: BTreeMap::new(),
            jobs: HashMap::default(),
            reservation: None,
            capacity: Resources::ZERO,
            totals: Vec::new(),
            now: f64::NEG_INFINITY,
            shapes: HashMap::default(),
            waiting: BTreeSet::new(),
            overdue: KeyIndex::default(),
            holders: KeyIndex::default(),
            last: None,
        }
    }

    /// A ledger holding exactly a snapshot, as [`super::run_cycle`] takes one: every
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
        let mut ledger = Ledger::new(config, UserSettings::default());
        ledger.now = now;
        for c in clusters {
            let k = ledger.cluster(&c.name);
            let state = &mut ledger.clusters[k];
            state.healthy = c.healthy;
            state.total = c.total;
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
            };
            a.usage = v.usage;
            a.usage_at = v.usage_at;
            a.outstanding = v.outstanding_jobs;
            a.allocation = v.allocation;
            a.share = share;
            a.window = v.queue.iter().cloned().collect();
            a.pinned = true;
            ledger.reindex(uid, now);
        }
        ledger.reservation = reservation.cloned();
        ledger
    }

    /// The policy's knobs.
    pub fn config(&self) -> &PolicyConfig {
        &self.config
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

    // ----- events -------------------------------------------------------------

    /// Sets a user's settings (creating it if new).
    pub fn set_user(&mut self, now: Seconds, name: &str, settings: UserSettings) {
        let now = self.clock(now);
        let uid = self.account(name, now);
        self.accounts[uid as usize].settings = settings;
        self.reindex(uid, now);
    }

    /// Sets a user's decayed usage `usage`, valid at `usage_at` (seconds), as read back
    /// from the database (creating the user if new).
    pub fn set_usage(&mut self, now: Seconds, name: &str, usage: f64, usage_at: Seconds) {
        let now = self.clock(now);
        let uid = self.account(name, now);
        let a = &mut self.accounts[uid as usize];
        a.usage = usage;
        a.usage_at = usage_at;
        self.reindex(uid, now);
    }

    /// Replaces a user's window: a prefix of its QUEUED jobs in queue order (priority
    /// desc, submit time, id). Jobs outstanding in the ledger are left out.
    pub fn set_window(&mut self, now: Seconds, name: &str, mut window: Vec<QueuedJob>) {
        let now = self.clock(now);
        let uid = self.account(name, now);
        window.retain(|j| !self.jobs.contains_key(&j.job_id));
        self.accounts[uid as usize].window = VecDeque::from(window);
        self.reindex(uid, now);
    }

    /// Makes sure `name` is known (with the default settings if new).
    pub fn ensure_user(&mut self, now: Seconds, name: &str) {
        let now = self.clock(now);
        self.account(name, now);
    }

    /// Whether `name` is known.
    pub fn knows(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Takes a QUEUED job out of its user's window (it was cancelled or left the
    /// queue); whether it was there.
    pub fn drop_queued(&mut self, now: Seconds, name: &str, job: JobId) -> bool {
        let now = self.clock(now);
        let Some(&uid) = self.by_name.get(name) else {
            return false;
        };
        let a = &mut self.accounts[uid as usize];
        let before = a.window.len();
        a.window.retain(|j| j.job_id != job);
        if a.window.len() == before {
            return false;
        }
        self.reindex(uid, now);
        true
    }

    /// Counts `job` of `user` as outstanding on `cluster` (a recovered job, or one
    /// granted outside a cycle), holding `resources` until [`Ledger::end`]; its
    /// expected end is seconds since the epoch, if known. Not counted twice.
    pub fn start(
        &mut self,
        now: Seconds,
        job: JobId,
        user: &str,
        cluster: &str,
        resources: Resources,
        expected_end: Option<Seconds>,
    ) {
        let now = self.clock(now);
        if self.jobs.contains_key(&job) {
            return;
        }
        let uid = self.account(user, now);
        let k = self.cluster(cluster);
        self.hold(now, uid, k, job, resources, expected_end);
        let a = &mut self.accounts[uid as usize];
        a.window.retain(|j| j.job_id != job);
        self.reindex(uid, now);
    }

    /// Adds a job to its user's allocation and its cluster's outstanding capacity.
    fn hold(
        &mut self,
        now: Seconds,
        uid: Uid,
        k: usize,
        job: JobId,
        resources: Resources,
        expected_end: Option<Seconds>,
    ) {
        self.touch_usage(uid, now);
        let capacity = self.capacity;
        let a = &mut self.accounts[uid as usize];
        a.allocation += resources;
        a.outstanding = a.outstanding.saturating_add(1);
        a.share = dominant_share(&a.allocation, &capacity);
        let c = &mut self.clusters[k];
        c.outstanding += resources;
        c.unreported += resources;
        let end_key = c.add(job, resources, expected_end);
        self.jobs.insert(
            job,
            Job {
                uid,
                cluster: k,
                resources,
                expected_end,
                reported: false,
                end_key,
            },
        );
    }

    /// Ends an outstanding job (it finished, was declined, or is queued again): what
    /// it held is free again. Returns it, or `None` if it was not outstanding.
    pub fn end(&mut self, now: Seconds, job: JobId) -> Option<Outstanding> {
        let now = self.clock(now);
        let j = self.jobs.remove(&job)?;
        self.touch_usage(j.uid, now);
        let capacity = self.capacity;
        let a = &mut self.accounts[j.uid as usize];
        a.outstanding = a.outstanding.saturating_sub(1);
        a.allocation = if a.outstanding == 0 {
            Resources::ZERO
        } else {
            a.allocation.saturating_sub(j.resources)
        };
        a.share = dominant_share(&a.allocation, &capacity);
        let c = &mut self.clusters[j.cluster];
        c.ends.remove(&j.end_key);
        if c.ends.is_empty() {
            c.used_reported = c
                .used_reported
                .saturating_sub(c.outstanding.saturating_sub(c.unreported));
            c.outstanding = Resources::ZERO;
            c.unreported = Resources::ZERO;
        } else {
            c.outstanding = c.outstanding.saturating_sub(j.resources);
            if j.reported {
                c.used_reported = c.used_reported.saturating_sub(j.resources);
            } else {
                c.unreported = c.unreported.saturating_sub(j.resources);
            }
        }
        let out = Outstanding {
            user: self.accounts[j.uid as usize].name.clone(),
            cluster: c.name.clone(),
            resources: j.resources,
            expected_end: j.expected_end,
        };
        self.reindex(j.uid, now);
        Some(out)
    }

    /// Takes a report of cluster `name`: whether it answers (`healthy`), its capacity
    /// `total` and what Ray reports in use (`used`, every tenant), of which
    /// `reported(job)` tells which of this service's jobs the report already counts.
    /// Other tenants' load is `used` less those jobs; the jobs it does not count yet
    /// are added to it when judging free capacity (DESIGN §2). Returns whether
    /// anything the policy sees changed.
    pub fn report_cluster(
        &mut self,
        now: Seconds,
        name: &str,
        healthy: bool,
        total: Resources,
        used: Resources,
        reported: impl Fn(&JobId) -> bool,
    ) -> bool {
        let now = self.clock(now);
        let k = self.cluster(name);
        let mut outstanding = Resources::ZERO;
        let mut unreported = Resources::ZERO;
        let mut ours_reported = Resources::ZERO;
        let ids: Vec<JobId> = self.clusters[k].ends.values().map(|(id, _)| *id).collect();
        for id in ids {
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            job.reported = reported(&id);
            outstanding += job.resources;
            if job.reported {
                ours_reported += job.resources;
            } else {
                unreported += job.resources;
            }
        }
        let foreign = used.saturating_sub(ours_reported);
        let c = &mut self.clusters[k];
        let resized = c.healthy != healthy || c.total != total;
        let before = (c.used_reported, c.outstanding, c.unreported);
        c.healthy = healthy;
        c.total = total;
        c.outstanding = outstanding;
        c.unreported = unreported;
        c.used_reported = foreign + outstanding.saturating_sub(unreported);
        let changed = resized || before != (c.used_reported, c.outstanding, c.unreported);
        if resized {
            self.resize(now);
        }
        changed
    }

    /// The healthy clusters changed: bring every user's usage to `now` with the
    /// share it held, then recompute capacity, shares and every index.
    fn resize(&mut self, now: Seconds) {
        for uid in 0..self.accounts.len() {
            self.touch_usage(uid as Uid, now);
        }
        self.refresh_capacity();
        let capacity = self.capacity;
        for a in &mut self.accounts {
            a.share = dominant_share(&a.allocation, &capacity);
        }
        for uid in 0..self.accounts.len() {
            self.reindex(uid as Uid, now);
        }
    }

    fn refresh_capacity(&mut self) {
        self.totals = self
            .by_cluster_name
            .values()
            .map(|&k| &self.clusters[k])
            .filter(|c| c.healthy)
            .map(|c| c.total)
            .collect();
        self.capacity = self
            .totals
            .iter()
            .fold(Resources::ZERO, |sum, total| sum + *total);
    }

    /// Brings a user's decayed usage to `now` with the share it holds (call before
    /// the share changes).
    fn touch_usage(&mut self, uid: Uid, now: Seconds) {
        let hl = self.config.usage_half_life;
        let a = &mut self.accounts[uid as usize];
        let usage = decay_usage(a.usage, a.usage_at, a.share, now, hl);
        // An unchanged value needs no write: from the stored pair it decays the same
        // (it equals the share, or history is off).
        if usage != a.usage {
            a.usage_dirty = true;
        }
        a.usage = usage;
        a.usage_at = now;
    }

    /// Brings every user's decayed usage to `now` (before saving them all).
    pub fn touch_all_usage(&mut self, now: Seconds) {
        let now = self.clock(now);
        for uid in 0..self.accounts.len() {
            self.touch_usage(uid as Uid, now);
            self.accounts[uid].usage_dirty = true;
        }
        for uid in 0..self.accounts.len() {
            self.reindex(uid as Uid, now);
        }
    }

    /// The users whose decayed usage changed since the last call: `(user, usage,
    /// usage_at)`, the usage valid at `usage_at` (seconds); what a restart needs to
    /// carry usage on.
    pub fn take_usage_changes(&mut self) -> Vec<(String, f64, Seconds)> {
        let mut out = Vec::new();
        for a in &mut self.accounts {
            if std::mem::take(&mut a.usage_dirty) {
                out.push((a.name.to_string(), a.usage, a.usage_at));
            }
        }
        out
    }

    // ----- keys and indexes ---------------------------------------------------

    /// The user's key at `now`: `(s + h) / w − a · min(age / M, 1)`, `h` brought to
    /// `now`, the age that of its effective head (none: no age term).
    fn key(&self, uid: Uid, now: Seconds) -> f64 {
        self.key_parts(uid, now).0
    }

    /// The user's key at `now` and its decayed usage `h` then.
    fn key_parts(&self, uid: Uid, now: Seconds) -> (f64, f64) {
        #[cfg(test)]
        tests::KEYS.with(|k| k.set(k.get() + 1));
        let a = &self.accounts[uid as usize];
        let c = &self.config;
        let usage = decay_usage(a.usage, a.usage_at, a.share, now, c.usage_half_life);
        let base = fair_share_key(a.share, usage, a.settings.weight);
        let age = a.head().map_or(0.0, |job| now - job.submitted_at);
        (base - age_term(age, c.age_weight, c.max_age), usage)
    }

    /// The user's exact rank given its key.
    fn rank_of(&self, uid: Uid, key: f64) -> Rank {
        let a = &self.accounts[uid as usize];
        Rank {
            key: quantize_key(key),
            head_at: a.head().map_or(f64::INFINITY, |j| j.submitted_at),
            name: a.name.clone(),
        }
    }

    /// The user's exact rank at `now`.
    fn rank(&self, uid: Uid, now: Seconds) -> Rank {
        self.rank_of(uid, self.key(uid, now))
    }

    /// The user's exact rank at `now` and a fresh lower bound of it.
    fn rank_and_bound(&self, uid: Uid, now: Seconds) -> (Rank, Bound) {
        let (key, h) = self.key_parts(uid, now);
        (self.rank_of(uid, key), self.bound(uid, now, key, h, true))
    }

    /// Whether the user's key is the same at every instant from `now` on, bit for
    /// bit: no usage drift (history off or infinite, or `h = s` exactly) and no age
    /// term moving (off, saturated, no head, or a NaN age).
    fn constant_key(&self, uid: Uid, now: Seconds) -> bool {
        let a = &self.accounts[uid as usize];
        let c = &self.config;
        let hl = c.usage_half_life;
        let usage_still = hl.is_nan()
            || hl <= 0.0
            || hl == f64::INFINITY
            || (a.usage == a.share && a.usage.is_finite());
        let valid = |x: f64| x.is_finite() && x > 0.0;
        let age_still = !(valid(c.age_weight) && valid(c.max_age))
            || a.head().is_none_or(|h| {
                let age = now - h.submitted_at;
                age.is_nan() || saturated(age, c.max_age)
            });
        usage_still && age_still
    }

    /// A bound of the user's quantized key from `now` on, given its key `key` and
    /// decayed usage `h` at `now`: with `falling`, a lower bound falling at the
    /// fastest rate the key can fall (usage drifting down to the share at
    /// `λ (h − s) / w`, the age term at `a / M` until it saturates); else the lower
    /// bound of the *negated* key (an upper bound of the key, rising at `λ (s − h) /
    /// w`), for the holders' maximum. A key that cannot move is exact. The margin
    /// covers the rounding of a key's evaluation and its quantization, relative to
    /// the magnitudes that enter it.
    fn bound(&self, uid: Uid, now: Seconds, key: f64, h: f64, falling: bool) -> Bound {
        let sign = if falling { 1.0 } else { -1.0 };
        if self.constant_key(uid, now) {
            return Bound {
                value: sign * quantize_key(key),
                slope: 0.0,
                exact: true,
                at: now,
            };
        }
        let a = &self.accounts[uid as usize];
        let c = &self.config;
        let w = a.settings.weight;
        let hl = c.usage_half_life;
        let mut slope = 0.0;
        if hl.is_finite() && hl > 0.0 {
            let gap = sign * (h - a.share);
            if gap > 0.0 {
                slope += std::f64::consts::LN_2 / hl * gap / w;
            } else if gap.is_nan() {
                slope = f64::INFINITY;
            }
        }
        let valid = |x: f64| x.is_finite() && x > 0.0;
        if falling && valid(c.age_weight) && valid(c.max_age) {
            let unsaturated = a
                .head()
                .is_some_and(|j| !saturated(now - j.submitted_at, c.max_age));
            if unsaturated {
                slope += c.age_weight / c.max_age;
            }
        }
        let scale = (a.share.abs() + h.abs() + a.usage.abs()) / w + c.age_weight.abs();
        let margin = scale * f64::powi(2.0, -36) + f64::MIN_POSITIVE;
        Bound {
            value: sign * key - margin,
            // Rounding of the slope itself.
            slope: slope * (1.0 + 1e-9),
            exact: false,
            at: now,
        }
    }

    /// Moves the effective head past jobs that can never run (larger than every
    /// healthy cluster, or alone over the user's `max_resources`), from the start.
    fn skip_unrunnable(&mut self, uid: Uid, from: usize) {
        let totals = &self.totals;
        let a = &mut self.accounts[uid as usize];
        let mut cursor = from;
        while let Some(job) = a.window.get(cursor) {
            if permanent_reason(job, a.settings.max_resources.as_ref(), totals).is_none() {
                break;
            }
            cursor += 1;
        }
        a.cursor = cursor;
    }

    /// Takes a user out of every index.
    fn unindex(&mut self, uid: Uid) {
        let a = &mut self.accounts[uid as usize];
        if let Some(shape) = a.shape.take() {
            if let Some(index) = self.shapes.get_mut(&shape) {
                index.remove(uid);
                if index.is_empty() {
                    self.shapes.remove(&shape);
                }
            }
        }
        if let Some(at) = a.waiting.take() {
            self.waiting.remove(&(at, uid));
        }
        if std::mem::take(&mut a.overdue) {
            self.overdue.remove(uid);
        }
        if std::mem::take(&mut a.holder) {
            self.holders.remove(uid);
        }
    }

    /// Recomputes a user's effective head and puts it in the indexes it belongs to
    /// as of `now`.
    fn reindex(&mut self, uid: Uid, now: Seconds) {
        self.unindex(uid);
        self.skip_unrunnable(uid, 0);
        let a = &self.accounts[uid as usize];
        let (holds, eligible) = (a.listed() && a.holds(), a.listed() && a.eligible());
        if !holds && !eligible {
            return;
        }
        let (key, h) = self.key_parts(uid, now);
        if holds {
            let bound = self.bound(uid, now, key, h, false);
            self.index_holder(uid, bound);
        }
        if eligible {
            let bound = self.bound(uid, now, key, h, true);
            self.index_eligible(uid, now, bound);
        }
    }

    fn index_holder(&mut self, uid: Uid, bound: Bound) {
        let a = &mut self.accounts[uid as usize];
        a.holder = true;
        self.holders.insert(uid, 0.0, &a.name, bound);
    }

    /// Puts an eligible user in its shape's index and in `waiting` or `overdue`, with
    /// `bound`, a lower bound of its key from `now` on.
    fn index_eligible(&mut self, uid: Uid, now: Seconds, bound: Bound) {
        let guard = self.config.starvation_guard;
        let a = &mut self.accounts[uid as usize];
        let Some(head) = a.head() else {
            return;
        };
        let (shape, at) = (Shape::of(&head.resources), head.submitted_at);
        self.shapes
            .entry(shape)
            .or_default()
            .insert(uid, at, &a.name, bound);
        a.shape = Some(shape);
        if overdue(now, at, guard) {
            a.overdue = true;
            self.overdue.insert(uid, at, &a.name, bound);
        } else {
            a.waiting = Some(Ordered(at));
            self.waiting.insert((Ordered(at), uid));
        }
    }

    /// Moves users whose head has now waited past the guard from `waiting` into
    /// `overdue`.
    fn advance_overdue(&mut self, now: Seconds) {
        let guard = self.config.starvation_guard;
        while let Some(&(at, uid)) = self.waiting.first() {
            if !overdue(now, at.0, guard) {
                break;
            }
            self.waiting.pop_first();
            let bound = self.rank_and_bound(uid, now).1;
            let a = &mut self.accounts[uid as usize];
            a.waiting = None;
            a.overdue = true;
            self.overdue.insert(uid, at.0, &a.name, bound);
        }
    }

    // ----- reading ------------------------------------------------------------

    /// The reservation the last cycle left, if any.
    pub fn reservation(&self) -> Option<&Reservation> {
        self.reservation.as_ref()
    }

    /// An outstanding job.
    pub fn outstanding(&self, job: &JobId) -> Option<Outstanding> {
        let j = self.jobs.get(job)?;
        Some(Outstanding {
            user: self.accounts[j.uid as usize].name.clone(),
            cluster: self.clusters[j.cluster].name.clone(),
            resources: j.resources,
            expected_end: j.expected_end,
        })
    }

    /// Number of outstanding jobs.
    pub fn outstanding_count(&self) -> usize {
        self.jobs.len()
    }

    /// Whether `job` is outstanding.
    pub fn is_outstanding(&self, job: &JobId) -> bool {
        self.jobs.contains_key(job)
    }

    /// The sum of the healthy clusters' totals (cores, GPUs, bytes).
    pub fn capacity(&self) -> Resources {
        self.capacity
    }

    /// One user's live state, its usage brought to `now`.
    pub fn user(&self, name: &str, now: Seconds) -> Option<UserState> {
        let &uid = self.by_name.get(name)?;
        Some(self.user_state(uid, now))
    }

    fn user_state(&self, uid: Uid, now: Seconds) -> UserState {
        let a = &self.accounts[uid as usize];
        let hl = self.config.usage_half_life;
        let usage = decay_usage(a.usage, a.usage_at, a.share, now, hl);
        UserState {
            settings: a.settings.clone(),
            allocation: a.allocation,
            outstanding: a.outstanding,
            share: a.share,
            usage,
            key: fair_share_key(a.share, usage, a.settings.weight),
            window: a.window.len(),
        }
    }

    /// Every user the ledger knows, by name, with its live state at `now`.
    pub fn users(&self, now: Seconds) -> impl Iterator<Item = (&str, UserState)> + '_ {
        self.by_name.values().map(move |&uid| {
            (
                &*self.accounts[uid as usize].name,
                self.user_state(uid, now),
            )
        })
    }

    /// The stored decayed usage of a user: `(usage, usage_at)`.
    pub fn usage_of(&self, name: &str) -> Option<(f64, Seconds)> {
        let &uid = self.by_name.get(name)?;
        let a = &self.accounts[uid as usize];
        Some((a.usage, a.usage_at))
    }

    /// Every cluster as [`super::run_cycle`] would see it, in name order.
    pub fn cluster_views(&self) -> Vec<ClusterView> {
        self.by_cluster_name
            .values()
            .map(|&k| self.clusters[k].view())
            .collect()
    }

    /// Every user the ledger knows, as [`super::run_cycle`] takes users (those with
    /// an empty window too), in name order.
    pub fn all_user_views(&self) -> Vec<UserView> {
        self.views_where(|_| true)
    }

    /// Every user that takes part in a cycle, as [`super::run_cycle`] would take it,
    /// in name order: with the ledger's [`Ledger::cluster_views`] and
    /// [`Ledger::reservation`], the snapshot whose cycle the next
    /// [`Ledger::cycle`] makes.
    pub fn user_views(&self) -> Vec<UserView> {
        self.views_where(Account::listed)
    }

    fn views_where(&self, keep: impl Fn(&Account) -> bool) -> Vec<UserView> {
        let mut names: Vec<(&Arc<str>, Uid)> = self.by_name.iter().map(|(n, &u)| (n, u)).collect();
        names.sort();
        names
            .into_iter()
            .map(|(_, uid)| &self.accounts[uid as usize])
            .filter(|a| keep(a))
            .map(|a| UserView {
                user: a.name.to_string(),
                weight: a.settings.weight,
                paused: a.settings.paused,
                max_running_jobs: a.settings.max_running_jobs,
                max_resources: a.settings.max_resources,
                outstanding_jobs: a.outstanding,
                allocation: a.allocation,
                usage: a.usage,
                usage_at: a.usage_at,
                queue: a.window.iter().cloned().collect(),
            })
            .collect()
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

/// A reason `job` can never run as things stand, independent of other jobs:
/// larger than every healthy cluster's total (`totals`; none healthy: never this
/// reason) or, alone, than its user's `max_resources`.
pub(crate) fn permanent_reason(
    job: &QueuedJob,
    max_resources: Option<&Resources>,
    totals: &[Resources],
) -> Option<PendingReason> {
    let too_large = !totals.is_empty() && !totals.iter().any(|t| job.resources.fits_within(t));
    if too_large {
        return Some(PendingReason::NoClusterLargeEnough);
    }
    match max_resources {
        Some(max) if !job.resources.fits_within(max) => Some(PendingReason::ExceedsMaxResources),
        _ => None,
    }
}
