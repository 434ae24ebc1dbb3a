//! `FairShareArbiter`: the only place where the fair-share decision is made.
//!
//! It owns per-user fair-share state (weight, pause, limits, decayed usage, the head
//! window each `UserQueue` announced), each cluster's capacity as the monitor last saw
//! it, and the reservations of every outstanding job. When anything changes that can
//! lead to a grant it asks for a cycle; requests coalesce into one cycle that runs once
//! the mailbox is drained, plus a safety cycle every `scheduler.tick`. The cycle itself
//! is [`crate::policy::run_cycle`]; the arbiter only feeds it and carries out its
//! grants.
//!
//! A new window that cannot lead to a grant does not cost a cycle (DESIGN §2, "When a
//! cycle runs"): with backfill on and no reservation held, a user's changed window can
//! only start one of its own jobs, and only one that fits some healthy cluster's free
//! capacity as the last cycle left it (free capacity grows only through events that
//! ask for a cycle themselves). Such a window asks for a *refresh* instead: one cycle
//! at most [`REFRESH_AFTER`] later, however many windows changed meanwhile, so that
//! pending reasons and the order shown catch up. Under a flood of submissions to a
//! full (or unreachable) cluster the arbiter thus runs about ten cycles a second, not
//! one per mailbox drain.
//!
//! It also keeps each user's QUEUED count, updated as it forwards `Enqueue` and
//! `RemoveQueued` and as it grants, so that `GET /v1/users`, `GET /v1/scheduler` and
//! `fairshare_queued_jobs` give the same number at every moment.

mod cycle;
mod report;
mod what_if;

pub use report::{GetPendingReason, GetUserState, GetView, IsReady, Loaded};
pub use what_if::GetSnapshot;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, WrapFuture};
use entity::user;

use super::messages::{
    ArbiterHandle, CapacityChanged, Demand, DispatchEnded, Enqueue, EnqueueBatch, GrantDeclined,
    JobFinished, QueueFactory, QueueHandle, Release, RemoveQueued, Requeued, UserSettings,
};
use super::unix_now;
use crate::config::Settings;
use crate::policy::{self, JobId, PolicyConfig, QueuedJob, Resources};
use crate::store::Db;
use crate::views::{CycleView, UserOrderView};

/// Longest a changed window that cannot lead to a grant waits for the cycle that
/// refreshes pending reasons and the order (see the module docs).
pub const REFRESH_AFTER: Duration = Duration::from_millis(100);

/// How many ended jobs [`EnqueueIfNew`] remembers (a late notification of one of them
/// must not queue it again); older ones are forgotten, so memory stays bounded.
const RECENTLY_ENDED: usize = 65_536;

/// The totals of the healthy clusters that have reported CPUs or GPUs (cores, GPUs,
/// bytes), shared by the arbiter with the API so that `POST /v1/jobs` checks that a job
/// could ever fit without a message to the arbiter. Empty while no healthy cluster has
/// reported its capacity (then nothing is refused).
#[derive(Clone, Default)]
pub struct ClusterSizes(Arc<RwLock<Vec<Resources>>>);

impl ClusterSizes {
    /// Whether some healthy cluster could ever hold `request`: `None` while no healthy
    /// cluster has reported its capacity.
    pub fn fits(&self, request: &Resources) -> Option<bool> {
        let sizes = self.0.read().ok()?;
        if sizes.is_empty() {
            return None;
        }
        Some(sizes.iter().any(|total| request.fits_within(total)))
    }

    fn set(&self, sizes: Vec<Resources>) {
        if let Ok(mut s) = self.0.write() {
            *s = sizes;
        }
    }
}

/// What a granted job holds until it ends.
#[derive(Clone, Debug)]
struct Reservation {
    user: String,
    cluster: String,
    resources: Resources,
    /// Granted at (or, after recovery, dispatched at) plus the job's runtime
    /// estimate, seconds since the epoch; what the policy's reservation plans with.
    expected_end: Option<f64>,
}

#[derive(Clone, Debug)]
struct UserEntry {
    weight: f64,
    paused: bool,
    max_running_jobs: u32,
    max_resources: Option<Resources>,
    /// Decayed usage h_u at `usage_at` (seconds since the epoch).
    usage: f64,
    usage_at: f64,
    window: Vec<QueuedJob>,
    queued: usize,
}

#[derive(Clone, Debug, Default)]
struct ClusterEntry {
    healthy: bool,
    total: Resources,
    used: Resources,
    /// Our jobs that `used` already includes.
    reported: HashSet<JobId>,
    /// Other tenants' usage as of the last report: `used` less our jobs the report
    /// included (computed when it arrived, so a job of ours that finishes later
    /// frees its capacity at once rather than when the next report shows it).
    foreign: Resources,
}

/// Recovery → arbiter: users from the database, outstanding jobs' reservations; then
/// the arbiter is ready.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Recovered;

/// Recovery → arbiter, first: the users' settings and the reservations of every
/// outstanding job (before the monitor follows them, so a job that ends at once
/// releases what it holds).
#[derive(Message)]
#[rtype(result = "()")]
pub struct RecoveredOutstanding {
    pub users: Vec<user::Model>,
    pub outstanding: Vec<entity::job::Model>,
}

/// Recovery → arbiter: a chunk of QUEUED jobs read from the database, grouped by user:
/// `(user, [(job, held)])`. The arbiter counts them and hands each user's part to its
/// queue in one message.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EnqueueMany {
    pub users: Vec<(String, Vec<(QueuedJob, bool)>)>,
}

/// Hashes a job id (a UUID: its random bits) with one multiply per 8 bytes rather
/// than SipHash: the arbiter hashes every queued job's id at least twice.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
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
        self.0
    }
}

/// A map keyed by job id, hashed with [`IdHasher`].
pub(crate) type IdMap<V> = HashMap<JobId, V, BuildHasherDefault<IdHasher>>;

/// While recovery streams the queues in, a job cancelled before its row reached the
/// arbiter must not be queued after all: its id is remembered until loading ends.
#[derive(Default)]
struct Loading {
    removed: HashSet<JobId>,
    loaded: usize,
}

/// Refresh per-user gauges for a scrape.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RefreshMetrics;

/// Save every user's decayed usage now (on shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct FlushUsage;

/// A QUEUED job another replica committed (DESIGN §10): queued unless this arbiter
/// has queued or granted it before.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EnqueueIfNew(pub Enqueue);

/// What the arbiter knows of a job (the leader's catch-up, DESIGN §10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    /// Counted as QUEUED: in one of the queues.
    Queued,
    /// Granted and outstanding, or one of the [`RECENTLY_ENDED`] that left it.
    Left,
    /// Not known this term.
    Unknown,
}

/// Ask what the arbiter knows of each of these jobs: one [`Known`] per id, in order.
/// The leader's catch-up asks about the jobs that changed since its last round, so an
/// answer costs what changed, not what is queued.
#[derive(Message)]
#[rtype(result = "Vec<Known>")]
pub struct Classify(pub Vec<JobId>);

/// The arbiter.
pub struct FairShareArbiter {
    settings: Arc<Settings>,
    config: PolicyConfig,
    db: Db,
    /// Starts a user's queue actor.
    spawn_queue: QueueFactory,
    /// This arbiter's own handle, given to the queues it starts (set in `started`).
    me: Option<ArbiterHandle>,
    users: BTreeMap<String, UserEntry>,
    queues: HashMap<String, QueueHandle>,
    /// The earliest finish not yet followed by a cycle: its capacity is what the next
    /// cycle hands out.
    freed_at: Option<Instant>,
    /// `Some` until recovery has loaded every QUEUED job.
    loading: Option<Loading>,
    clusters: BTreeMap<String, ClusterEntry>,
    outstanding: HashMap<JobId, Reservation>,
    /// The policy's reservation, carried from one cycle to the next.
    reservation: Option<policy::Reservation>,
    pending: HashMap<JobId, String>,
    order: Vec<UserOrderView>,
    last: Option<CycleView>,
    cycles: u64,
    cycle_requested: bool,
    ready: bool,
    /// Every QUEUED job the queues hold, with its user's index in `names`: a job
    /// reaches the arbiter from the API, from recovery and (on PostgreSQL) from another
    /// replica, and a requeue may repeat, but it counts once. 20 bytes an entry.
    queued_ids: IdMap<u32>,
    /// Each user id that has queued a job, once; `queued_ids` holds indexes into it.
    names: Vec<Arc<str>>,
    /// Index of each user id in `names`.
    name_index: HashMap<Arc<str>, u32>,
    /// Each user's usage as last written.
    saved_usage: HashMap<String, f64>,
    /// The last [`RECENTLY_ENDED`] jobs that left this arbiter (granted and ended, or
    /// removed from the queue), oldest first: [`EnqueueIfNew`] skips them, as it skips
    /// queued and outstanding ones.
    ended: VecDeque<JobId>,
    ended_set: HashSet<JobId>,
    /// Each healthy cluster's free capacity as the last cycle left it (`None` before
    /// the first cycle): a window none of whose jobs fits any of them cannot lead to a
    /// grant.
    free_after: Option<Vec<Resources>>,
    /// A refresh cycle is scheduled.
    refresh_requested: bool,
    /// Shared with the API (see [`ClusterSizes`]).
    sizes: ClusterSizes,
}

impl FairShareArbiter {
    /// A new arbiter; it knows the configured clusters (unhealthy until polled).
    pub fn new(settings: Arc<Settings>, db: Db, spawn_queue: QueueFactory) -> Self {
        let config = settings.scheduler.policy();
        let clusters = settings
            .clusters
            .iter()
            .map(|c| (c.name.clone(), ClusterEntry::default()))
            .collect();
        FairShareArbiter {
            settings,
            config,
            db,
            spawn_queue,
            me: None,
            loading: Some(Loading::default()),
            freed_at: None,
            users: BTreeMap::new(),
            queues: HashMap::new(),
            clusters,
            outstanding: HashMap::new(),
            reservation: None,
            pending: HashMap::new(),
            order: Vec::new(),
            last: None,
            cycles: 0,
            cycle_requested: false,
            ready: false,
            queued_ids: IdMap::default(),
            names: Vec::new(),
            name_index: HashMap::new(),
            saved_usage: HashMap::new(),
            ended: VecDeque::new(),
            ended_set: HashSet::new(),
            free_after: None,
            refresh_requested: false,
            sizes: ClusterSizes::default(),
        }
    }

    /// The cluster sizes this arbiter publishes (call before starting it).
    pub fn cluster_sizes(&self) -> ClusterSizes {
        self.sizes.clone()
    }

    /// Remembers that `job_id` left this arbiter (see [`FairShareArbiter::ended`]).
    fn remember_ended(&mut self, job_id: JobId) {
        if !self.ended_set.insert(job_id) {
            return;
        }
        self.ended.push_back(job_id);
        if self.ended.len() > RECENTLY_ENDED {
            if let Some(old) = self.ended.pop_front() {
                self.ended_set.remove(&old);
            }
        }
    }

    /// Whether a user's new window could lead to a grant (see the module docs).
    fn may_grant(&self, window: &[QueuedJob]) -> bool {
        if !self.config.backfill || self.reservation.is_some() {
            return true;
        }
        let Some(free) = &self.free_after else {
            return true;
        };
        window
            .iter()
            .any(|j| free.iter().any(|f| j.resources.fits_within(f)))
    }

    /// The handle through which the queues, the dispatcher and the monitor reach the
    /// arbiter at `addr`.
    pub fn handle(addr: &actix::Addr<Self>) -> ArbiterHandle {
        ArbiterHandle {
            demand: addr.clone().recipient(),
            grant_declined: addr.clone().recipient(),
            dispatch_ended: addr.clone().recipient(),
            capacity: addr.clone().recipient(),
            finished: addr.clone().recipient(),
            requeued: addr.clone().recipient(),
            release: addr.clone().recipient(),
            remove_queued: addr.clone().recipient(),
        }
    }

    fn default_entry(&self) -> UserEntry {
        UserEntry {
            weight: 1.0,
            paused: false,
            max_running_jobs: self.settings.scheduler.default_max_running_jobs,
            max_resources: None,
            usage: 0.0,
            usage_at: unix_now(),
            window: Vec::new(),
            queued: 0,
        }
    }

    fn apply_settings(&mut self, u: &user::Model) {
        let default_running = self.settings.scheduler.default_max_running_jobs;
        let fresh = self.default_entry();
        if !self.users.contains_key(&u.id) {
            // What the database holds: not written again until it changes.
            self.saved_usage.insert(u.id.clone(), u.usage);
        }
        let e = self.users.entry(u.id.clone()).or_insert_with(|| UserEntry {
            usage: u.usage,
            usage_at: u.usage_at.timestamp_micros() as f64 / 1e6,
            ..fresh
        });
        e.weight = u.weight;
        e.paused = u.paused;
        e.max_running_jobs = u
            .max_running_jobs
            .map(|v| v.max(0) as u32)
            .unwrap_or(default_running);
        e.max_resources = u.max_resources.as_ref().map(|v| {
            // `{"cpu": .., "gpu": .., "memory_bytes": ..}`; a missing key caps nothing.
            let cap = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
            Resources {
                cpu: cap("cpu").unwrap_or(f64::INFINITY),
                gpu: cap("gpu").unwrap_or(f64::INFINITY),
                memory_bytes: cap("memory_bytes").unwrap_or(f64::INFINITY),
            }
        });
    }

    fn queue_for(&mut self, user: &str) -> QueueHandle {
        if let Some(q) = self.queues.get(user) {
            return q.clone();
        }
        let me = self
            .me
            .clone()
            .expect("the arbiter's handle is set when it starts");
        let q = (self.spawn_queue)(user.to_string(), me);
        self.queues.insert(user.to_string(), q.clone());
        self.entry(user);
        q
    }

    fn entry(&mut self, user: &str) -> &mut UserEntry {
        if !self.users.contains_key(user) {
            let e = self.default_entry();
            self.users.insert(user.to_string(), e);
        }
        self.users.get_mut(user).expect("inserted above")
    }

    /// The index of `user` in `names`, added if new.
    fn name_index(&mut self, user: &str) -> u32 {
        if let Some(i) = self.name_index.get(user) {
            return *i;
        }
        let i = u32::try_from(self.names.len()).expect("fewer than 2^32 users");
        let name: Arc<str> = Arc::from(user);
        self.names.push(name.clone());
        self.name_index.insert(name, i);
        i
    }

    /// Counts a QUEUED job of user `user_index` in, unless it is counted already or was
    /// removed while recovery loads. Returns whether its queue should get it.
    fn admit(&mut self, user_index: u32, job_id: JobId) -> bool {
        if let Some(l) = &mut self.loading {
            if l.removed.contains(&job_id) {
                return false;
            }
            l.loaded += 1;
        }
        self.queued_ids.insert(job_id, user_index).is_none()
    }

    /// Adds QUEUED jobs `(job, held)` of `user` to its queue (one message) and count.
    fn enqueue_all(&mut self, user: &str, jobs: Vec<(QueuedJob, bool)>) {
        let index = self.name_index(user);
        let mut admitted = jobs;
        admitted.retain(|(job, _)| self.admit(index, job.job_id));
        if admitted.is_empty() {
            return;
        }
        self.entry(user).queued += admitted.len();
        self.queue_for(user)
            .enqueue
            .do_send(EnqueueBatch { jobs: admitted });
    }

    /// Adds a QUEUED job to its user's queue and count.
    fn enqueue(&mut self, user: &str, job: QueuedJob, held: bool) {
        self.enqueue_all(user, vec![(job, held)]);
    }

    /// Releases what a grant reserved (the job ended or is queued again).
    fn release(&mut self, job_id: JobId) {
        if let Some(r) = self.outstanding.get(&job_id).cloned() {
            self.touch_usage(&r.user);
            self.outstanding.remove(&job_id);
            self.remember_ended(job_id);
        }
        for c in self.clusters.values_mut() {
            c.reported.remove(&job_id);
        }
    }
}

impl Actor for FairShareArbiter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.me = Some(Self::handle(&ctx.address()));
        let tick = self.settings.scheduler.tick;
        ctx.run_interval(tick, |act, ctx| {
            if act.ready {
                act.run_cycle();
                ctx.spawn(
                    super::off_actor(act.save_usage())
                        .into_actor(act)
                        .map(|_, _, _| ()),
                );
            }
        });
    }
}

impl Handler<RecoveredOutstanding> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: RecoveredOutstanding, _: &mut Context<Self>) {
        for u in &msg.users {
            self.apply_settings(u);
        }
        let default_runtime = self.settings.scheduler.default_max_runtime.as_secs_f64();
        for j in msg.outstanding {
            if let Some(cluster) = j.cluster.clone() {
                let summary = super::user_queue::summary(&j);
                let granted_at = j
                    .dispatched_at
                    .or(j.started_at)
                    .map_or_else(unix_now, |t| t.timestamp_micros() as f64 / 1e6);
                let estimate = summary.runtime_estimate.unwrap_or(default_runtime);
                self.outstanding.insert(
                    j.id,
                    Reservation {
                        user: j.user_id.clone(),
                        cluster,
                        resources: summary.resources,
                        expected_end: Some(granted_at + estimate),
                    },
                );
            }
        }
    }
}

impl Handler<EnqueueMany> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: EnqueueMany, _: &mut Context<Self>) {
        for (user, jobs) in msg.users {
            self.enqueue_all(&user, jobs);
        }
    }
}

impl Handler<Recovered> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, _: Recovered, ctx: &mut Context<Self>) {
        self.loading = None;
        self.ready = true;
        self.request_cycle(ctx);
    }
}

impl Handler<Enqueue> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: Enqueue, _: &mut Context<Self>) {
        self.enqueue(&msg.user, msg.job, msg.held);
    }
}

impl Handler<EnqueueIfNew> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: EnqueueIfNew, ctx: &mut Context<Self>) {
        let id = msg.0.job.job_id;
        if self.queued_ids.contains_key(&id)
            || self.outstanding.contains_key(&id)
            || self.ended_set.contains(&id)
        {
            return;
        }
        self.enqueue(&msg.0.user, msg.0.job, msg.0.held);
        self.request_cycle(ctx);
    }
}

impl Handler<Classify> for FairShareArbiter {
    type Result = actix::MessageResult<Classify>;

    fn handle(&mut self, msg: Classify, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(
            msg.0
                .iter()
                .map(|id| {
                    if self.queued_ids.contains_key(id) {
                        Known::Queued
                    } else if self.outstanding.contains_key(id) || self.ended_set.contains(id) {
                        Known::Left
                    } else {
                        Known::Unknown
                    }
                })
                .collect(),
        )
    }
}

impl Handler<super::messages::Halt> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, _: super::messages::Halt, ctx: &mut Context<Self>) {
        actix::ActorContext::stop(ctx);
    }
}

impl Handler<RemoveQueued> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: RemoveQueued, _: &mut Context<Self>) {
        if let Some(l) = &mut self.loading {
            l.removed.insert(msg.job_id);
        }
        // A job granted in this instant was counted out at its grant already.
        let counted = self.queued_ids.remove(&msg.job_id).is_some();
        if counted {
            self.remember_ended(msg.job_id);
        }
        if let Some(e) = self.users.get_mut(&msg.user) {
            e.window.retain(|j| j.job_id != msg.job_id);
            if counted {
                e.queued = e.queued.saturating_sub(1);
            }
        }
        self.pending.remove(&msg.job_id);
        self.queue_for(&msg.user).remove.do_send(msg);
    }
}

impl Handler<Release> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: Release, _: &mut Context<Self>) {
        self.queue_for(&msg.user).release.do_send(msg);
    }
}

impl Handler<Demand> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: Demand, ctx: &mut Context<Self>) {
        let mut window = msg.window;
        let default_runtime = self.settings.scheduler.default_max_runtime.as_secs_f64();
        for j in &mut window {
            // A job without `max_runtime_s` is stopped after the configured default:
            // that is its runtime estimate (the reservation plans with it).
            j.runtime_estimate.get_or_insert(default_runtime);
        }
        let may_grant = self.may_grant(&window);
        self.entry(&msg.user).window = window;
        if may_grant {
            self.request_cycle(ctx);
        } else {
            self.request_refresh(ctx);
        }
    }
}

impl Handler<GrantDeclined> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: GrantDeclined, ctx: &mut Context<Self>) {
        self.release(msg.job_id);
        self.request_cycle(ctx);
    }
}

impl Handler<DispatchEnded> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: DispatchEnded, ctx: &mut Context<Self>) {
        self.release(msg.job_id);
        if let Some(job) = msg.requeue {
            self.enqueue(&msg.user, job, false);
        }
        self.request_cycle(ctx);
    }
}

impl Handler<Requeued> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: Requeued, ctx: &mut Context<Self>) {
        self.release(msg.job.job_id);
        self.enqueue(&msg.user, msg.job, msg.held);
        self.request_cycle(ctx);
    }
}

impl Handler<CapacityChanged> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: CapacityChanged, ctx: &mut Context<Self>) {
        let reported: HashSet<JobId> = msg.reported.into_iter().collect();
        let before = self
            .clusters
            .get(&msg.cluster)
            .map(|c| (c.healthy, c.total, c.used, &c.reported));
        if before == Some((msg.healthy, msg.total, msg.used, &reported)) {
            return;
        }
        // Shares change with capacity: bring every user's usage to now first.
        self.touch_all_usage();
        let ours_reported = self
            .outstanding
            .iter()
            .filter(|(id, r)| r.cluster == msg.cluster && reported.contains(id))
            .fold(Resources::default(), |acc, (_, r)| acc + r.resources);
        let entry = self.clusters.entry(msg.cluster).or_default();
        entry.healthy = msg.healthy;
        entry.total = msg.total;
        entry.used = msg.used;
        entry.foreign = msg.used.saturating_sub(ours_reported);
        entry.reported = reported;
        self.publish_sizes();
        self.request_cycle(ctx);
    }
}

impl Handler<JobFinished> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: JobFinished, ctx: &mut Context<Self>) {
        self.freed_at.get_or_insert(msg.seen_at);
        self.release(msg.job_id);
        self.request_cycle(ctx);
    }
}

impl Handler<UserSettings> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: UserSettings, ctx: &mut Context<Self>) {
        self.touch_usage(&msg.user.id);
        self.apply_settings(&msg.user);
        self.request_cycle(ctx);
    }
}

impl Handler<FlushUsage> for FairShareArbiter {
    type Result = actix::ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: FlushUsage, _: &mut Context<Self>) -> Self::Result {
        self.touch_all_usage();
        Box::pin(self.save_usage().into_actor(self).map(|_, _, _| ()))
    }
}
