//! `FairShareArbiter`: the only place where the fair-share decision is made.
//!
//! It feeds the policy's [`Ledger`]: each user's settings, decayed usage and the head
//! window its `UserQueue` announced, each cluster's capacity as the monitor last saw
//! it, and every outstanding job. When anything changes that can lead to a grant it
//! asks for a cycle; requests coalesce into one cycle that runs once the mailbox is
//! drained, plus a safety cycle every `scheduler.tick`. The cycle itself is
//! [`Ledger::cycle`] (DESIGN §2): it reads only what can change its outcome, so a
//! cycle that cannot grant (a flood of submissions to a full cluster, say) costs
//! microseconds whatever is queued, and a cycle is asked for on every change.
//! Pending reasons and the order of the next users are derived from the ledger when
//! asked.
//!
//! It also keeps each user's QUEUED count, updated as it forwards `Enqueue` and
//! `RemoveQueued` and as it grants, so that `GET /v1/users`, `GET /v1/scheduler` and
//! `fairshare_queued_jobs` give the same number at every moment.

mod cycle;
mod groups;
mod recovery;
mod report;
mod what_if;

pub use groups::GetGroupState;
pub use recovery::{EnqueueMany, Recovered, RecoveredOutstanding};
pub use report::{
    GetActual, GetHeldNodeTypes, GetPendingReason, GetUserState, GetView, IsReady, Loaded,
};
pub use what_if::{GetEstimateInput, GetSnapshot};

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, WrapFuture};
use entity::user;

use super::messages::{
    ArbiterHandle, CapacityChanged, Demand, DispatchEnded, Enqueue, EnqueueBatch, GrantDeclined,
    Hold, JobFinished, OthersHold, PoolAdmitted, Preempt, PreemptDeclined, QueueFactory,
    QueueHandle, Release, RemoveQueued, Requeued, UserSettings,
};
use super::unix_now;
use crate::config::Settings;
use crate::policy::{
    JobId, Ledger, PolicyConfig, QueuedJob, Resources, UserSettings as PolicyUserSettings,
};
use crate::store::Db;
use crate::views::CycleView;

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

    /// The resources `request` lacks on every healthy cluster even when empty, by
    /// name ([`crate::policy::short_of`] over the clusters' totals): empty when it fits
    /// one, or while no healthy cluster has reported its capacity.
    pub fn short_of(&self, request: &Resources) -> Vec<String> {
        self.0
            .read()
            .map(|sizes| crate::policy::short_of(request, &sizes))
            .unwrap_or_default()
    }

    fn set(&self, sizes: Vec<Resources>) {
        if let Ok(mut s) = self.0.write() {
            *s = sizes;
        }
    }
}

/// A map keyed by job id, hashed cheaply ([`crate::policy::ledger::JobHasher`]).
pub(crate) type IdMap<V> = crate::policy::ledger::JobMap<V>;

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

/// A QUEUED pool job another replica committed or moved back from ADMITTED as
/// `attempt` (its runner released it, DESIGN §3 "Admission"): what its admission held
/// is freed and it is queued, once: only while the admission this arbiter counts is an
/// earlier attempt; with none counted, as [`EnqueueIfNew`].
#[derive(Message)]
#[rtype(result = "()")]
pub struct RequeuedElsewhere {
    pub requeued: Requeued,
    pub attempt: u32,
}

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
    /// The policy's state: users' settings, usage and windows, outstanding jobs,
    /// clusters and the reservation.
    ledger: Ledger,
    /// Every user the arbiter knows, with its QUEUED count.
    queued: BTreeMap<String, usize>,
    queues: HashMap<String, QueueHandle>,
    /// The earliest finish not yet followed by a cycle: its capacity is what the next
    /// cycle hands out.
    freed_at: Option<Instant>,
    /// `Some` until recovery has loaded every QUEUED job.
    loading: Option<Loading>,
    /// Each cluster's last report as taken (health, total, used, our jobs it counts):
    /// the same report again changes nothing.
    reports: HashMap<String, (bool, Resources, Resources, HashSet<JobId>)>,
    /// Each Ray cluster's notification path as the monitor last reported it (shown in
    /// `GET /v1/scheduler`).
    notifications: HashMap<String, crate::views::NotificationsView>,
    /// Why each unhealthy cluster is so, as the monitor last reported it.
    unhealthy_reasons: HashMap<String, String>,
    /// Per autoscaling cluster, its growth as the monitor last reported it (issue 44).
    growth: HashMap<String, crate::views::GrowthView>,
    /// Per autoscaling cluster, what it can still grow by (`CapacityChanged::growth_room`):
    /// withheld from fitting except in a scale-up batch's cycle.
    growth_room: HashMap<String, Resources>,
    /// When the next scale-up batch opens (seconds, `unix_now`'s clock; a wake is
    /// armed for it); `None` while no job waits for growth (`monitor.scale_up_batch`).
    growth_batch: Option<f64>,
    /// (cluster, custom slot) pairs already warned of: a cluster reporting a resource
    /// configured as a license.
    license_clash: HashSet<(String, usize)>,
    /// What each running job held at the last report that said so (Ray's State
    /// API), cores, GPUs and bytes; shown beside what it declared.
    actual: HashMap<JobId, Resources>,
    last: Option<CycleView>,
    cycles: u64,
    cycle_requested: bool,
    /// A cycle scheduled for when the next waiting head passes the starvation guard
    /// (`Ledger::guard_trips_at`), and that instant (Unix seconds).
    guard_wake: Option<(actix::SpawnHandle, f64)>,
    /// The job the last cycle left the reservation to (logged when it changes).
    reserved: Option<crate::policy::JobId>,
    ready: bool,
    /// Every QUEUED job the queues hold, with its user's index in `names`: a job
    /// reaches the arbiter from the API, from recovery and (on PostgreSQL) from another
    /// replica, and a requeue may repeat, but it counts once. 20 bytes an entry.
    queued_ids: IdMap<u32>,
    /// Each user id that has queued a job, once; `queued_ids` holds indexes into it.
    names: Vec<Arc<str>>,
    /// Index of each user id in `names`.
    name_index: HashMap<Arc<str>, u32>,
    /// The last [`RECENTLY_ENDED`] jobs that left this arbiter (granted and ended, or
    /// removed from the queue), oldest first: [`EnqueueIfNew`] skips them, as it skips
    /// queued and outstanding ones.
    ended: VecDeque<JobId>,
    ended_set: HashSet<JobId>,
    /// Shared with the API (see [`ClusterSizes`]).
    sizes: ClusterSizes,
    /// Where [`OthersHold`] goes (the monitor), and what it was last told.
    others_hold: (Option<actix::Recipient<OthersHold>>, bool),
    /// `[preemption]` as the policy takes it (`after` infinite when off).
    preemption: crate::policy::PreemptionConfig,
    /// Where the cycle's preemptions go (the dispatcher).
    preempt_to: Option<actix::Recipient<Preempt>>,
    /// The attempt of each outstanding pool job's admission ([`PoolAdmitted`]).
    admitted: IdMap<u32>,
}

impl FairShareArbiter {
    /// A new arbiter; it knows the configured clusters (unhealthy until polled).
    pub fn new(settings: Arc<Settings>, db: Db, spawn_queue: QueueFactory) -> Self {
        let config = settings.policy();
        let defaults = PolicyUserSettings {
            max_running_jobs: settings.scheduler.default_max_running_jobs,
            ..PolicyUserSettings::default()
        };
        let preemption = settings.preemption.policy();
        let mut ledger = Ledger::new(config.clone(), defaults);
        let now = unix_now();
        for c in &settings.clusters {
            ledger.report_cluster(
                now,
                &c.name,
                false,
                Resources::default(),
                Resources::default(),
                |_| false,
            );
        }
        // Pools (issue 30): their capacity is configured, not polled, and always
        // there; what is admitted to them is counted as the ledger grants it.
        for p in &settings.pools {
            ledger.set_pool(now, &p.name);
            ledger.report_cluster(now, &p.name, true, p.total(), Resources::ZERO, |_| true);
        }
        FairShareArbiter {
            settings,
            config,
            db,
            spawn_queue,
            me: None,
            ledger,
            queued: BTreeMap::new(),
            loading: Some(Loading::default()),
            freed_at: None,
            queues: HashMap::new(),
            reports: HashMap::new(),
            notifications: HashMap::new(),
            unhealthy_reasons: HashMap::new(),
            growth: HashMap::new(),
            growth_room: HashMap::new(),
            growth_batch: None,
            license_clash: HashSet::new(),
            actual: HashMap::new(),
            last: None,
            cycles: 0,
            cycle_requested: false,
            guard_wake: None,
            reserved: None,
            ready: false,
            queued_ids: IdMap::default(),
            names: Vec::new(),
            name_index: HashMap::new(),
            ended: VecDeque::new(),
            ended_set: HashSet::new(),
            sizes: ClusterSizes::default(),
            others_hold: (None, false),
            preemption,
            preempt_to: None,
            admitted: IdMap::default(),
        }
    }

    /// Sends the preemptions each cycle decides to `to` (the dispatcher).
    pub fn tell_preempt(mut self, to: actix::Recipient<Preempt>) -> Self {
        self.preempt_to = Some(to);
        self
    }

    /// Tells `to` (the monitor) whether jobs are queued while another tenant holds
    /// capacity, whenever that changes (see [`OthersHold`]).
    pub fn tell_others_hold(mut self, to: actix::Recipient<OthersHold>) -> Self {
        self.others_hold.0 = Some(to);
        self
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
            hold: addr.clone().recipient(),
            preempt_declined: addr.clone().recipient(),
            admitted: addr.clone().recipient(),
        }
    }

    /// Takes a user's settings (and, for a user the arbiter has not seen yet, its
    /// decayed usage) as stored.
    fn apply_settings(&mut self, u: &user::Model) {
        let now = unix_now();
        if !self.ledger.knows(&u.id) {
            let at = u.usage_at.timestamp_micros() as f64 / 1e6;
            self.ledger.set_usage(now, &u.id, u.usage, at);
        }
        let settings = PolicyUserSettings {
            weight: u.weight,
            paused: u.paused,
            max_running_jobs: u
                .max_running_jobs
                .map(|v| v.max(0) as u32)
                .unwrap_or(self.settings.scheduler.default_max_running_jobs),
            max_resources: u.max_resources.as_ref().map(crate::store::resource_cap),
            group: crate::store::group_of(u).map(str::to_owned),
        };
        self.ledger.set_user(now, &u.id, settings);
        self.queued.entry(u.id.clone()).or_default();
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

    /// The QUEUED count of `user`, which becomes known (default settings) if new.
    fn entry(&mut self, user: &str) -> &mut usize {
        if !self.queued.contains_key(user) {
            self.ledger.ensure_user(unix_now(), user);
            self.queued.insert(user.to_string(), 0);
        }
        self.queued.get_mut(user).expect("inserted above")
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
        *self.entry(user) += admitted.len();
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
        self.actual.remove(&job_id);
        self.admitted.remove(&job_id);
        if self.ledger.end(unix_now(), job_id) {
            self.remember_ended(job_id);
        }
        for (_, _, _, reported) in self.reports.values_mut() {
            reported.remove(&job_id);
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
                act.arm_guard_wake(ctx);
                act.arm_growth_batch(ctx);
                ctx.spawn(
                    super::off_actor(act.save_usage())
                        .into_actor(act)
                        .map(|_, _, _| ()),
                );
            }
        });
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
            || self.ledger.is_outstanding(&id)
            || self.ended_set.contains(&id)
        {
            return;
        }
        self.enqueue(&msg.0.user, msg.0.job, msg.0.held);
        self.request_cycle(ctx);
    }
}

impl Handler<RequeuedElsewhere> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: RequeuedElsewhere, ctx: &mut Context<Self>) {
        let id = msg.requeued.job.job_id;
        match self.admitted.get(&id) {
            // The admission this arbiter counts is over: free it, queue the job.
            Some(&counted) if counted < msg.attempt => self.release(id),
            // The same or a later admission: a repeat or a stale read.
            Some(_) => return,
            // No admission counted: a job submitted on another replica (or one whose
            // release was taken already), queued as [`EnqueueIfNew`] would.
            None => {
                if self.queued_ids.contains_key(&id)
                    || self.ledger.is_outstanding(&id)
                    || self.ended_set.contains(&id)
                {
                    return;
                }
            }
        }
        self.enqueue(&msg.requeued.user, msg.requeued.job, msg.requeued.held);
        self.request_cycle(ctx);
    }
}

impl Handler<PoolAdmitted> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: PoolAdmitted, _: &mut Context<Self>) {
        if self.ledger.is_outstanding(&msg.job_id) {
            self.admitted.insert(msg.job_id, msg.attempt);
        }
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
                    } else if self.ledger.is_outstanding(id) || self.ended_set.contains(id) {
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
        self.ledger.drop_queued(unix_now(), &msg.user, msg.job_id);
        if counted {
            if let Some(q) = self.queued.get_mut(&msg.user) {
                *q = q.saturating_sub(1);
            }
        }
        self.queue_for(&msg.user).remove.do_send(msg);
    }
}

impl Handler<Release> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: Release, _: &mut Context<Self>) {
        self.queue_for(&msg.user).release.do_send(msg);
    }
}

impl Handler<Hold> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: Hold, _: &mut Context<Self>) {
        self.queue_for(&msg.user).hold.do_send(msg);
    }
}

impl Handler<Demand> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: Demand, ctx: &mut Context<Self>) {
        let mut window = msg.window;
        // Only jobs counted as QUEUED: a window the queue sent before it heard of a
        // grant (or of a job's end) must not offer that job again.
        window.retain(|j| self.queued_ids.contains_key(&j.job_id));
        let default_runtime = self.settings.scheduler.default_max_runtime.as_secs_f64();
        for j in &mut window {
            // A job without `max_runtime_s` is stopped after the configured default:
            // that is its runtime estimate (the reservation plans with it).
            j.runtime_estimate.get_or_insert(default_runtime);
        }
        self.entry(&msg.user);
        self.ledger.set_window(unix_now(), &msg.user, window);
        self.request_cycle(ctx);
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
            self.enqueue(&msg.user, job, msg.held);
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
        // What each running job holds now, charged before the report is taken, so
        // that the cluster's foreign load is `used` less what our jobs hold.
        let now = unix_now();
        let mut charged = false;
        for (job, held) in &msg.actual {
            self.actual.insert(*job, *held);
            if self.settings.scheduler.charge == crate::config::Charge::Actual {
                charged |= self.ledger.charge(now, *job, *held);
            }
        }
        if let Some(n) = msg.notifications {
            self.notifications.insert(msg.cluster.clone(), n);
        }
        match msg.unhealthy_reason {
            Some(why) => self.unhealthy_reasons.insert(msg.cluster.clone(), why),
            None => self.unhealthy_reasons.remove(&msg.cluster),
        };
        if let Some(g) = msg.growth {
            self.growth.insert(msg.cluster.clone(), g);
        }
        if msg.growth_room == Resources::ZERO {
            self.growth_room.remove(&msg.cluster);
        } else {
            self.growth_room
                .insert(msg.cluster.clone(), msg.growth_room);
        }
        let reported: HashSet<JobId> = msg.reported.into_iter().collect();
        // A cluster that reports a resource named like a license: the license's
        // count is what the policy goes by, and the dispatcher never sends it to Ray
        // (DESIGN §2, "Licenses"): say so once per cluster and name.
        for (slot, &count) in self.config.licenses.amounts().iter().enumerate() {
            if count > 0.0
                && msg.total.custom.get(slot) > 0.0
                && self.license_clash.insert((msg.cluster.clone(), slot))
            {
                tracing::warn!(
                    cluster = %msg.cluster,
                    resource = %crate::policy::custom::name(slot),
                    reported = msg.total.custom.get(slot),
                    license = count,
                    "a cluster reports a resource that is configured as a license: the \
                     license's count applies and jobs asking for it are sent to Ray without it"
                );
            }
        }
        let report = (msg.healthy, msg.total, msg.used, reported);
        if !charged && self.reports.get(&msg.cluster) == Some(&report) {
            return;
        }
        let changed = self.ledger.report_cluster(
            unix_now(),
            &msg.cluster,
            report.0,
            report.1,
            report.2,
            |id| report.3.contains(id),
        );
        self.reports.insert(msg.cluster, report);
        self.publish_sizes();
        if changed || charged {
            self.request_cycle(ctx);
        }
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

impl Handler<PreemptDeclined> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: PreemptDeclined, ctx: &mut Context<Self>) {
        self.ledger.preemption_declined(msg.job_id);
        self.request_cycle(ctx);
    }
}

impl Handler<UserSettings> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: UserSettings, ctx: &mut Context<Self>) {
        self.apply_settings(&msg.user);
        self.request_cycle(ctx);
    }
}

impl Handler<FlushUsage> for FairShareArbiter {
    type Result = actix::ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: FlushUsage, _: &mut Context<Self>) -> Self::Result {
        self.ledger.touch_all_usage(unix_now());
        Box::pin(self.save_usage().into_actor(self).map(|_, _, _| ()))
    }
}
