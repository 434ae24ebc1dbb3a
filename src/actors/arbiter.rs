//! `FairShareArbiter`: the only place where the fair-share decision is made.
//!
//! It owns per-user fair-share state (weight, pause, limits, decayed usage, the head
//! window each `UserQueue` announced), each cluster's capacity as the monitor last saw
//! it, and the reservations of every outstanding job. When anything changes it asks for
//! a cycle; requests coalesce into one cycle that runs once the mailbox is drained,
//! plus a safety cycle every `scheduler.tick`. The cycle itself is
//! [`crate::policy::run_cycle`]; the arbiter only feeds it and carries out its grants.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{
    Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, MessageResult, WrapFuture,
};
use entity::user;
use serde::Serialize;
use utoipa::ToSchema;

use super::dispatcher::Dispatcher;
use super::messages::{
    CapacityChanged, Demand, DispatchFailed, Enqueue, Grant, GrantDeclined, JobFinished,
    RemoveQueued, Requeued, UserSettings,
};
use super::user_queue::UserQueue;
use crate::api::jobs::ResourcesOut;
use crate::api::users::LiveUser;
use crate::config::Settings;
use crate::metrics::{self, OTHER_USERS};
use crate::policy::{
    self, ClusterView, JobId, OutstandingJob, PolicyConfig, QueuedJob, Resources, UserView,
};
use crate::store::{self, Db};

/// Seconds since the Unix epoch, the policy's clock.
pub fn unix_now() -> f64 {
    chrono::Utc::now().timestamp_micros() as f64 / 1e6
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
}

/// Amounts of each resource: cores, GPUs, bytes.
#[derive(Clone, Copy, Debug, Default, Serialize, ToSchema)]
pub struct Amounts {
    pub cpu: f64,
    pub gpu: f64,
    pub memory_bytes: f64,
}

impl From<Resources> for Amounts {
    fn from(r: Resources) -> Self {
        Amounts {
            cpu: r.cpu,
            gpu: r.gpu,
            memory_bytes: r.memory_bytes,
        }
    }
}

/// One cluster in [`SchedulerView`].
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ClusterStatusView {
    pub name: String,
    pub healthy: bool,
    pub capacity: Amounts,
    /// Ray's report of used capacity (lags by seconds).
    pub used_reported: Amounts,
    /// Resources of this service's outstanding jobs there.
    pub outstanding: Amounts,
    /// capacity − max(used_reported, outstanding).
    pub free: Amounts,
}

/// One user in the fair-share order.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct UserOrderView {
    pub user: String,
    /// (share + usage) / weight; smallest goes next.
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
    /// Unix time, seconds.
    pub at: f64,
    pub duration_seconds: f64,
    pub grants: Vec<GrantView>,
    /// The job capacity is held for: the reservation's job (backfill on), or the head
    /// the cycle stopped at (backfill off).
    pub stopped_for: Option<uuid::Uuid>,
}

/// `GET /v1/scheduler`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct SchedulerView {
    pub ready: bool,
    pub clusters: Vec<ClusterStatusView>,
    /// Users with queued jobs, in the order the next cycle would serve them.
    pub next_users: Vec<UserOrderView>,
    pub last_cycle: Option<CycleView>,
    pub cycles: u64,
    pub queued_jobs: usize,
    pub outstanding_jobs: usize,
    pub usage_half_life_seconds: f64,
    pub starvation_guard_seconds: f64,
    pub backfill: bool,
}

/// Ask for the view.
#[derive(Message)]
#[rtype(result = "SchedulerView")]
pub struct GetView;

/// Ask for one user's live state.
#[derive(Message)]
#[rtype(result = "Option<LiveUser>")]
pub struct GetUserState {
    pub user: String,
}

/// Ask why a queued job is not running.
#[derive(Message)]
#[rtype(result = "Option<String>")]
pub struct GetPendingReason {
    pub job_id: JobId,
}

/// Ask whether some healthy cluster could ever hold a job of this size. `None` while
/// no healthy cluster has reported its capacity (then nothing is refused).
#[derive(Message)]
#[rtype(result = "Option<bool>")]
pub struct FitsSomeCluster {
    pub resources: Resources,
}

/// Ask whether recovery is done.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct IsReady;

/// Recovery → arbiter: users from the database, outstanding jobs' reservations; then
/// the arbiter is ready.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Recovered {
    pub users: Vec<user::Model>,
    pub outstanding: Vec<entity::job::Model>,
}

/// Refresh per-user gauges for a scrape.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RefreshMetrics;

/// Save every user's decayed usage now (on shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct FlushUsage;

/// The arbiter.
pub struct FairShareArbiter {
    settings: Arc<Settings>,
    config: PolicyConfig,
    db: Db,
    dispatcher: Addr<Dispatcher>,
    users: BTreeMap<String, UserEntry>,
    queues: HashMap<String, Addr<UserQueue>>,
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
}

impl FairShareArbiter {
    /// A new arbiter; it knows the configured clusters (unhealthy until polled).
    pub fn new(settings: Arc<Settings>, db: Db, dispatcher: Addr<Dispatcher>) -> Self {
        let s = &settings.scheduler;
        let config = PolicyConfig {
            usage_half_life: s.usage_half_life.as_secs_f64(),
            starvation_guard: s.starvation_guard.as_secs_f64(),
            backfill: s.backfill,
            age_weight: s.age_weight,
            max_age: s.max_age.as_secs_f64(),
        };
        let clusters = settings
            .clusters
            .iter()
            .map(|c| (c.name.clone(), ClusterEntry::default()))
            .collect();
        FairShareArbiter {
            settings,
            config,
            db,
            dispatcher,
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
        e.max_resources = u.max_resources.as_ref().and_then(|v| {
            let l: crate::api::users::ResourceLimit = serde_json::from_value(v.clone()).ok()?;
            Some(Resources {
                cpu: l.cpu.unwrap_or(f64::INFINITY),
                gpu: l.gpu.unwrap_or(f64::INFINITY),
                memory_bytes: l.memory_bytes.map(|m| m as f64).unwrap_or(f64::INFINITY),
            })
        });
    }

    fn queue_for(&mut self, user: &str, ctx: &mut Context<Self>) -> Addr<UserQueue> {
        if let Some(a) = self.queues.get(user) {
            return a.clone();
        }
        let addr = UserQueue::new(
            user.to_string(),
            self.settings.scheduler.queue_window,
            ctx.address(),
            self.dispatcher.clone(),
            self.settings.scheduler.default_max_runtime.as_secs_f64(),
        )
        .start();
        self.queues.insert(user.to_string(), addr.clone());
        if !self.users.contains_key(user) {
            let e = self.default_entry();
            self.users.insert(user.to_string(), e);
        }
        addr
    }

    fn capacity(&self) -> Resources {
        self.clusters
            .values()
            .filter(|c| c.healthy)
            .fold(Resources::default(), |acc, c| acc + c.total)
    }

    fn allocations(&self) -> HashMap<&str, (Resources, u32)> {
        let mut out: HashMap<&str, (Resources, u32)> = HashMap::new();
        for r in self.outstanding.values() {
            let e = out.entry(r.user.as_str()).or_default();
            e.0 += r.resources;
            e.1 += 1;
        }
        out
    }

    /// Sum of one user's reservations (cores, GPUs, bytes).
    fn allocation_of(&self, user: &str) -> Resources {
        self.outstanding
            .values()
            .filter(|r| r.user == user)
            .fold(Resources::default(), |acc, r| acc + r.resources)
    }

    fn share_of(&self, user: &str) -> f64 {
        policy::dominant_share(&self.allocation_of(user), &self.capacity())
    }

    /// Every configured cluster as the policy sees it, with this service's own
    /// outstanding reservations there.
    fn cluster_views(&self) -> Vec<ClusterView> {
        let mut per_cluster: HashMap<&str, Resources> = HashMap::new();
        let mut jobs: HashMap<&str, Vec<OutstandingJob>> = HashMap::new();
        for r in self.outstanding.values() {
            *per_cluster.entry(r.cluster.as_str()).or_default() += r.resources;
            jobs.entry(r.cluster.as_str())
                .or_default()
                .push(OutstandingJob {
                    resources: r.resources,
                    expected_end: r.expected_end,
                });
        }
        self.clusters
            .iter()
            .map(|(name, c)| ClusterView {
                name: name.clone(),
                healthy: c.healthy,
                total: c.total,
                used_reported: c.used,
                outstanding: per_cluster.get(name.as_str()).copied().unwrap_or_default(),
                jobs: jobs.remove(name.as_str()).unwrap_or_default(),
            })
            .collect()
    }

    /// Brings one user's decayed usage to now with its current share; call before its
    /// allocation changes.
    fn touch_usage(&mut self, user: &str) {
        let share = self.share_of(user);
        let hl = self.config.usage_half_life;
        if let Some(e) = self.users.get_mut(user) {
            let now = unix_now();
            e.usage = policy::decay_usage(e.usage, e.usage_at, share, now, hl);
            e.usage_at = now;
        }
    }

    fn request_cycle(&mut self, ctx: &mut Context<Self>) {
        if self.cycle_requested || !self.ready {
            return;
        }
        self.cycle_requested = true;
        ctx.run_later(Duration::ZERO, |act, ctx| {
            act.cycle_requested = false;
            act.run_cycle(ctx);
        });
    }

    /// One scheduling cycle: bring usage to now, call the policy, carry out grants.
    #[tracing::instrument(skip_all, fields(cycle = self.cycles + 1))]
    fn run_cycle(&mut self, ctx: &mut Context<Self>) {
        let started = Instant::now();
        let now = unix_now();
        let capacity = self.capacity();
        let allocations: HashMap<String, (Resources, u32)> = self
            .allocations()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let hl = self.config.usage_half_life;
        let mut views = Vec::new();
        for (name, e) in self.users.iter_mut() {
            let (alloc, running) = allocations.get(name).copied().unwrap_or_default();
            let share = policy::dominant_share(&alloc, &capacity);
            e.usage = policy::decay_usage(e.usage, e.usage_at, share, now, hl);
            e.usage_at = now;
            // A job granted in an earlier cycle may still be in a window the queue sent
            // before it processed the grant: never offer it again.
            e.window
                .retain(|j| !self.outstanding.contains_key(&j.job_id));
            if e.window.is_empty() {
                continue;
            }
            views.push(UserView {
                user: name.clone(),
                weight: e.weight,
                paused: e.paused,
                max_running_jobs: e.max_running_jobs,
                max_resources: e.max_resources,
                outstanding_jobs: running,
                allocation: alloc,
                usage: e.usage,
                usage_at: e.usage_at,
                queue: e.window.clone(),
            });
        }
        let clusters = self.cluster_views();
        let outcome = policy::run_cycle(
            now,
            &self.config,
            &views,
            &clusters,
            self.reservation.as_ref(),
        );
        self.reservation.clone_from(&outcome.reservation);
        let m = metrics::get();
        for g in &outcome.grants {
            let (submitted_at, estimate) = self
                .users
                .get_mut(&g.user)
                .and_then(|e| {
                    let pos = e.window.iter().position(|j| j.job_id == g.job_id)?;
                    let j = e.window.remove(pos);
                    Some((j.submitted_at, j.runtime_estimate))
                })
                .unwrap_or((now, None));
            m.queue_wait.observe((now - submitted_at).max(0.0));
            self.outstanding.insert(
                g.job_id,
                Reservation {
                    user: g.user.clone(),
                    cluster: g.cluster.clone(),
                    resources: g.resources,
                    expected_end: estimate.map(|e| now + e),
                },
            );
            let queue = self.queue_for(&g.user, ctx);
            queue.do_send(Grant {
                job_id: g.job_id,
                cluster: g.cluster.clone(),
                granted_at: now,
            });
            tracing::info!(user = %g.user, job_id = %g.job_id, cluster = %g.cluster, "granted");
        }
        self.pending = outcome
            .pending
            .iter()
            .map(|(id, reason)| (*id, reason.to_string()))
            .collect();
        self.order = outcome
            .order
            .iter()
            .map(|o| UserOrderView {
                user: o.user.clone(),
                key: o.key,
                share: o.share,
                usage: o.usage,
            })
            .collect();
        let duration = started.elapsed().as_secs_f64();
        self.cycles += 1;
        m.cycles.inc();
        m.grants.inc_by(outcome.grants.len() as u64);
        m.cycle_duration.observe(duration);
        m.last_cycle.set(now);
        self.last = Some(CycleView {
            at: now,
            duration_seconds: duration,
            grants: outcome
                .grants
                .iter()
                .map(|g| GrantView {
                    user: g.user.clone(),
                    job_id: g.job_id,
                    cluster: g.cluster.clone(),
                })
                .collect(),
            stopped_for: outcome.stopped_for,
        });
    }

    /// Writes every user's decayed usage and its timestamp, so a restart keeps them.
    fn save_usage(&self) -> impl std::future::Future<Output = ()> + 'static {
        let rows: Vec<(String, f64, f64)> = self
            .users
            .iter()
            .map(|(id, e)| (id.clone(), e.usage, e.usage_at))
            .collect();
        let db = self.db.clone();
        async move {
            for (id, usage, at) in rows {
                let at = chrono::DateTime::from_timestamp_micros((at * 1e6) as i64)
                    .unwrap_or_else(store::now);
                if let Err(e) = store::save_usage(&db, &id, usage, at).await {
                    metrics::db_error();
                    tracing::warn!(error = %e, user = %id, "cannot save decayed usage");
                }
            }
        }
    }

    fn view(&self) -> SchedulerView {
        SchedulerView {
            ready: self.ready,
            clusters: self
                .cluster_views()
                .into_iter()
                .map(|c| ClusterStatusView {
                    free: c.free().into(),
                    name: c.name,
                    healthy: c.healthy,
                    capacity: c.total.into(),
                    used_reported: c.used_reported.into(),
                    outstanding: c.outstanding.into(),
                })
                .collect(),
            next_users: self.order.clone(),
            last_cycle: self.last.clone(),
            cycles: self.cycles,
            queued_jobs: self.users.values().map(|e| e.queued).sum(),
            outstanding_jobs: self.outstanding.len(),
            usage_half_life_seconds: self.config.usage_half_life,
            starvation_guard_seconds: self.config.starvation_guard,
            backfill: self.config.backfill,
        }
    }

    fn refresh_metrics(&self) {
        let m = metrics::get();
        let cap = self.settings.telemetry.per_user_metrics_max;
        m.queued_jobs.reset();
        m.running_jobs.reset();
        m.user_dominant_share.reset();
        m.user_weight.reset();
        m.user_fair_share.reset();
        let allocations = self.allocations();
        let capacity = self.capacity();
        let active_weight: f64 = self
            .users
            .iter()
            .filter(|(id, e)| e.queued > 0 || allocations.contains_key(id.as_str()))
            .map(|(_, e)| e.weight)
            .sum();
        for (i, (id, e)) in self.users.iter().enumerate() {
            let (alloc, running) = allocations.get(id.as_str()).copied().unwrap_or_default();
            let label = if i < cap { id.as_str() } else { OTHER_USERS };
            m.queued_jobs
                .with_label_values(&[label])
                .add(e.queued as i64);
            m.running_jobs
                .with_label_values(&[label])
                .add(i64::from(running));
            if i < cap {
                m.user_dominant_share
                    .with_label_values(&[label])
                    .set(policy::dominant_share(&alloc, &capacity));
                m.user_weight.with_label_values(&[label]).set(e.weight);
                let active = e.queued > 0 || running > 0;
                let fair = if active && active_weight > 0.0 {
                    e.weight / active_weight
                } else {
                    0.0
                };
                m.user_fair_share.with_label_values(&[label]).set(fair);
            }
        }
        m.users_paused
            .set(self.users.values().filter(|e| e.paused).count() as i64);
        for c in self.view().clusters {
            let used = Resources {
                cpu: c.used_reported.cpu.max(c.outstanding.cpu),
                gpu: c.used_reported.gpu.max(c.outstanding.gpu),
                memory_bytes: c.used_reported.memory_bytes.max(c.outstanding.memory_bytes),
            };
            let rows = [
                ("cpu", c.capacity.cpu, used.cpu, c.free.cpu),
                ("gpu", c.capacity.gpu, used.gpu, c.free.gpu),
                (
                    "memory_bytes",
                    c.capacity.memory_bytes,
                    used.memory_bytes,
                    c.free.memory_bytes,
                ),
            ];
            for (resource, capacity, used, free) in rows {
                let labels = [c.name.as_str(), resource];
                m.cluster_capacity.with_label_values(&labels).set(capacity);
                m.cluster_used.with_label_values(&labels).set(used);
                m.cluster_free.with_label_values(&labels).set(free);
            }
            m.cluster_healthy
                .with_label_values(&[c.name.as_str()])
                .set(i64::from(c.healthy));
        }
    }
}

impl Actor for FairShareArbiter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let tick = self.settings.scheduler.tick;
        ctx.run_interval(tick, |act, ctx| {
            if act.ready {
                act.run_cycle(ctx);
                ctx.spawn(act.save_usage().into_actor(act));
            }
        });
    }
}

impl Handler<Recovered> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: Recovered, ctx: &mut Context<Self>) {
        for u in &msg.users {
            self.apply_settings(u);
        }
        for j in msg.outstanding {
            if let Some(cluster) = j.cluster.clone() {
                let default_max_runtime = self.settings.scheduler.default_max_runtime;
                let summary = UserQueue::summary(&j, default_max_runtime.as_secs_f64());
                let granted_at = j
                    .dispatched_at
                    .or(j.started_at)
                    .map_or_else(unix_now, |t| t.timestamp_micros() as f64 / 1e6);
                self.outstanding.insert(
                    j.id,
                    Reservation {
                        user: j.user_id.clone(),
                        cluster,
                        resources: summary.resources,
                        expected_end: summary.runtime_estimate.map(|e| granted_at + e),
                    },
                );
            }
        }
        self.ready = true;
        self.request_cycle(ctx);
    }
}

impl Handler<Enqueue> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: Enqueue, ctx: &mut Context<Self>) {
        self.queue_for(&msg.job.user_id.clone(), ctx).do_send(msg);
    }
}

impl Handler<RemoveQueued> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: RemoveQueued, ctx: &mut Context<Self>) {
        if let Some(e) = self.users.get_mut(&msg.user) {
            e.window.retain(|j| j.job_id != msg.job_id);
        }
        self.pending.remove(&msg.job_id);
        self.queue_for(&msg.user.clone(), ctx).do_send(msg);
    }
}

impl Handler<Demand> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: Demand, ctx: &mut Context<Self>) {
        if !self.users.contains_key(&msg.user) {
            let e = self.default_entry();
            self.users.insert(msg.user.clone(), e);
        }
        if let Some(e) = self.users.get_mut(&msg.user) {
            e.window = msg.window;
            e.queued = msg.queued;
        }
        self.request_cycle(ctx);
    }
}

impl Handler<GrantDeclined> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: GrantDeclined, ctx: &mut Context<Self>) {
        self.touch_usage(&msg.user);
        self.outstanding.remove(&msg.job_id);
        self.request_cycle(ctx);
    }
}

impl Handler<DispatchFailed> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: DispatchFailed, ctx: &mut Context<Self>) {
        if let Some(r) = self.outstanding.get(&msg.job_id).cloned() {
            self.touch_usage(&r.user);
            self.outstanding.remove(&msg.job_id);
        }
        if let Some(job) = msg.requeue {
            self.queue_for(&job.user_id.clone(), ctx)
                .do_send(Enqueue { job });
        }
        self.request_cycle(ctx);
    }
}

impl Handler<Requeued> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: Requeued, ctx: &mut Context<Self>) {
        if let Some(r) = self.outstanding.get(&msg.job.id).cloned() {
            self.touch_usage(&r.user);
            self.outstanding.remove(&msg.job.id);
        }
        self.queue_for(&msg.job.user_id.clone(), ctx)
            .do_send(Enqueue { job: msg.job });
        self.request_cycle(ctx);
    }
}

impl Handler<CapacityChanged> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: CapacityChanged, ctx: &mut Context<Self>) {
        // Shares change with capacity: bring every user's usage to now first.
        let before = self
            .clusters
            .get(&msg.cluster)
            .map(|c| (c.healthy, c.total, c.used));
        let after = (msg.healthy, msg.total, msg.used);
        if before == Some(after) {
            return;
        }
        let users: Vec<String> = self.users.keys().cloned().collect();
        for u in users {
            self.touch_usage(&u);
        }
        let entry = self.clusters.entry(msg.cluster).or_default();
        entry.healthy = msg.healthy;
        entry.total = msg.total;
        entry.used = msg.used;
        self.request_cycle(ctx);
    }
}

impl Handler<JobFinished> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: JobFinished, ctx: &mut Context<Self>) {
        self.touch_usage(&msg.user);
        self.outstanding.remove(&msg.job_id);
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

impl Handler<GetView> for FairShareArbiter {
    type Result = MessageResult<GetView>;

    fn handle(&mut self, _: GetView, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.view())
    }
}

impl Handler<GetUserState> for FairShareArbiter {
    type Result = Option<LiveUser>;

    fn handle(&mut self, msg: GetUserState, _: &mut Context<Self>) -> Option<LiveUser> {
        let e = self.users.get(&msg.user)?;
        let capacity = self.capacity();
        let alloc = self.allocation_of(&msg.user);
        let share = policy::dominant_share(&alloc, &capacity);
        let usage = policy::decay_usage(
            e.usage,
            e.usage_at,
            share,
            unix_now(),
            self.config.usage_half_life,
        );
        Some(LiveUser {
            allocation: ResourcesOut {
                cpu: alloc.cpu,
                gpu: alloc.gpu,
                memory_bytes: alloc.memory_bytes.max(0.0) as u64,
            },
            share,
            usage,
            key: policy::fair_share_key(share, usage, e.weight),
        })
    }
}

impl Handler<GetPendingReason> for FairShareArbiter {
    type Result = Option<String>;

    fn handle(&mut self, msg: GetPendingReason, _: &mut Context<Self>) -> Option<String> {
        self.pending.get(&msg.job_id).cloned()
    }
}

impl Handler<FitsSomeCluster> for FairShareArbiter {
    type Result = Option<bool>;

    fn handle(&mut self, msg: FitsSomeCluster, _: &mut Context<Self>) -> Option<bool> {
        // A head that has just started may report no resources yet: only a healthy
        // cluster that reported CPUs or GPUs makes its capacity known.
        let clusters: Vec<ClusterView> = self
            .cluster_views()
            .into_iter()
            .filter(|c| c.healthy && (c.total.cpu > 0.0 || c.total.gpu > 0.0))
            .collect();
        if clusters.is_empty() {
            return None;
        }
        Some(policy::fits_some_cluster(&msg.resources, &clusters))
    }
}

impl Handler<IsReady> for FairShareArbiter {
    type Result = bool;

    fn handle(&mut self, _: IsReady, _: &mut Context<Self>) -> bool {
        self.ready
    }
}

impl Handler<RefreshMetrics> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, _: RefreshMetrics, _: &mut Context<Self>) {
        self.refresh_metrics();
    }
}

impl Handler<FlushUsage> for FairShareArbiter {
    type Result = actix::ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: FlushUsage, _: &mut Context<Self>) -> Self::Result {
        let users: Vec<String> = self.users.keys().cloned().collect();
        for u in &users {
            self.touch_usage(u);
        }
        Box::pin(self.save_usage().into_actor(self).map(|_, _, _| ()))
    }
}
