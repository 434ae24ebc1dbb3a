//! `FairShareArbiter`: the only place where the fair-share decision is made.
//!
//! It owns per-user fair-share state (weight, pause, limits, decayed usage, the head
//! window each `UserQueue` announced), each cluster's capacity as the monitor last saw
//! it, and the reservations of every outstanding job. When anything changes it asks for
//! a cycle; requests coalesce into one cycle that runs once the mailbox is drained,
//! plus a safety cycle every `scheduler.tick`. The cycle itself is
//! [`crate::policy::run_cycle`]; the arbiter only feeds it and carries out its grants.
//!
//! It also keeps each user's QUEUED count, updated as it forwards `Enqueue` and
//! `RemoveQueued` and as it grants, so that `GET /v1/users`, `GET /v1/scheduler` and
//! `fairshare_queued_jobs` give the same number at every moment.

mod report;

pub use report::{FitsSomeCluster, GetPendingReason, GetUserState, GetView, IsReady};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::HashSet;

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, WrapFuture};
use entity::user;

use super::messages::{
    ArbiterHandle, CapacityChanged, Demand, DispatchEnded, Enqueue, Grant, GrantDeclined,
    JobFinished, QueueFactory, QueueHandle, Release, RemoveQueued, Requeued, UserSettings,
};
use super::unix_now;
use crate::config::Settings;
use crate::metrics;
use crate::policy::{self, ClusterView, JobId, PolicyConfig, QueuedJob, Resources, UserView};
use crate::store::{self, Db};
use crate::views::{CycleView, GrantView, UserOrderView};

/// What a granted job holds until it ends.
#[derive(Clone, Debug)]
struct Reservation {
    user: String,
    cluster: String,
    resources: Resources,
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
}

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

/// A QUEUED job another replica committed (DESIGN §10): queued unless this arbiter
/// has queued or granted it before.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EnqueueIfNew(pub Enqueue);

/// Ask for the jobs counted as QUEUED (the leader's catch-up compares them with the
/// database, DESIGN §10).
#[derive(Message)]
#[rtype(result = "Vec<(String, JobId)>")]
pub struct QueuedIds;

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
    clusters: BTreeMap<String, ClusterEntry>,
    outstanding: HashMap<JobId, Reservation>,
    pending: HashMap<JobId, String>,
    order: Vec<UserOrderView>,
    last: Option<CycleView>,
    cycles: u64,
    cycle_requested: bool,
    ready: bool,
    /// Jobs counted in their user's `queued` (so counting is idempotent).
    queued_ids: HashMap<JobId, String>,
    /// Each user's usage as last written.
    saved_usage: HashMap<String, f64>,
    /// Every job this arbiter has queued ([`EnqueueIfNew`] skips them).
    seen: HashSet<JobId>,
}

impl FairShareArbiter {
    /// A new arbiter; it knows the configured clusters (unhealthy until polled).
    pub fn new(settings: Arc<Settings>, db: Db, spawn_queue: QueueFactory) -> Self {
        let s = &settings.scheduler;
        let config = PolicyConfig {
            usage_half_life: s.usage_half_life.as_secs_f64(),
            starvation_guard: s.starvation_guard.as_secs_f64(),
            backfill: s.backfill,
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
            spawn_queue,
            me: None,
            users: BTreeMap::new(),
            queues: HashMap::new(),
            clusters,
            outstanding: HashMap::new(),
            pending: HashMap::new(),
            order: Vec::new(),
            last: None,
            cycles: 0,
            cycle_requested: false,
            ready: false,
            queued_ids: HashMap::new(),
            saved_usage: HashMap::new(),
            seen: HashSet::new(),
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

    /// Adds a QUEUED job to its user's queue and count.
    fn enqueue(&mut self, user: &str, job: QueuedJob, held: bool) {
        self.seen.insert(job.job_id);
        if self
            .queued_ids
            .insert(job.job_id, user.to_string())
            .is_none()
        {
            self.entry(user).queued += 1;
        }
        self.queue_for(user).enqueue.do_send(Enqueue {
            user: user.to_string(),
            job,
            held,
        });
    }

    /// Releases what a grant reserved (the job ended or is queued again).
    fn release(&mut self, job_id: JobId) {
        if let Some(r) = self.outstanding.get(&job_id).cloned() {
            self.touch_usage(&r.user);
            self.outstanding.remove(&job_id);
        }
        for c in self.clusters.values_mut() {
            c.reported.remove(&job_id);
        }
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
        let mut per_cluster: HashMap<&str, (Resources, Resources)> = HashMap::new();
        for (id, r) in &self.outstanding {
            let e = per_cluster.entry(r.cluster.as_str()).or_default();
            e.0 += r.resources;
            let reported = self
                .clusters
                .get(&r.cluster)
                .is_some_and(|c| c.reported.contains(id));
            if !reported {
                e.1 += r.resources;
            }
        }
        self.clusters
            .iter()
            .map(|(name, c)| {
                let (outstanding, unreported) =
                    per_cluster.get(name.as_str()).copied().unwrap_or_default();
                ClusterView {
                    name: name.clone(),
                    healthy: c.healthy,
                    total: c.total,
                    used_reported: c.used,
                    outstanding,
                    unreported,
                }
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
        ctx.run_later(Duration::ZERO, |act, _| {
            act.cycle_requested = false;
            act.run_cycle();
        });
    }

    /// One scheduling cycle: bring usage to now, call the policy, carry out grants.
    #[tracing::instrument(skip_all, fields(cycle = self.cycles + 1))]
    fn run_cycle(&mut self) {
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
        let outcome = policy::run_cycle(now, &self.config, &views, &clusters);
        let m = metrics::get();
        for g in &outcome.grants {
            let submitted_at = self
                .users
                .get_mut(&g.user)
                .and_then(|e| {
                    let pos = e.window.iter().position(|j| j.job_id == g.job_id)?;
                    Some(e.window.remove(pos).submitted_at)
                })
                .unwrap_or(now);
            m.queue_wait.observe((now - submitted_at).max(0.0));
            self.outstanding.insert(
                g.job_id,
                Reservation {
                    user: g.user.clone(),
                    cluster: g.cluster.clone(),
                    resources: g.resources,
                },
            );
            if self.queued_ids.remove(&g.job_id).is_some() {
                if let Some(e) = self.users.get_mut(&g.user) {
                    e.queued = e.queued.saturating_sub(1);
                }
            }
            self.queue_for(&g.user).grant.do_send(Grant {
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
            at: chrono::DateTime::from_timestamp_micros((now * 1e6) as i64)
                .unwrap_or_else(store::now),
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

    /// Writes every user's decayed usage and its timestamp, so a restart (or the next
    /// leader) keeps them; a user whose usage has not changed since the last write is
    /// skipped (equal usage means it is 0, where the time does not matter, or was not
    /// brought forward).
    fn save_usage(&mut self) -> impl std::future::Future<Output = ()> + 'static {
        let rows: Vec<(String, f64, f64)> = self
            .users
            .iter()
            .filter(|(id, e)| self.saved_usage.get(*id) != Some(&e.usage))
            .map(|(id, e)| (id.clone(), e.usage, e.usage_at))
            .collect();
        for (id, usage, _) in &rows {
            self.saved_usage.insert(id.clone(), *usage);
        }
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
}

impl Actor for FairShareArbiter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let addr = ctx.address();
        self.me = Some(ArbiterHandle {
            demand: addr.clone().recipient(),
            grant_declined: addr.clone().recipient(),
            dispatch_ended: addr.clone().recipient(),
            capacity: addr.clone().recipient(),
            finished: addr.clone().recipient(),
            requeued: addr.clone().recipient(),
            release: addr.clone().recipient(),
            remove_queued: addr.recipient(),
        });
        let tick = self.settings.scheduler.tick;
        ctx.run_interval(tick, |act, ctx| {
            if act.ready {
                act.run_cycle();
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
                self.outstanding.insert(
                    j.id,
                    Reservation {
                        user: j.user_id.clone(),
                        cluster,
                        resources: super::user_queue::summary(&j).resources,
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

    fn handle(&mut self, msg: Enqueue, _: &mut Context<Self>) {
        self.enqueue(&msg.user, msg.job, msg.held);
    }
}

impl Handler<EnqueueIfNew> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: EnqueueIfNew, ctx: &mut Context<Self>) {
        let id = msg.0.job.job_id;
        if self.seen.contains(&id) || self.outstanding.contains_key(&id) {
            return;
        }
        self.enqueue(&msg.0.user, msg.0.job, msg.0.held);
        self.request_cycle(ctx);
    }
}

impl Handler<QueuedIds> for FairShareArbiter {
    type Result = actix::MessageResult<QueuedIds>;

    fn handle(&mut self, _: QueuedIds, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(
            self.queued_ids
                .iter()
                .map(|(id, user)| (user.clone(), *id))
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
        // A job granted in this instant was counted out at its grant already.
        let counted = self.queued_ids.remove(&msg.job_id).is_some();
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
        self.entry(&msg.user).window = msg.window;
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
        let users: Vec<String> = self.users.keys().cloned().collect();
        for u in users {
            self.touch_usage(&u);
        }
        let entry = self.clusters.entry(msg.cluster).or_default();
        entry.healthy = msg.healthy;
        entry.total = msg.total;
        entry.used = msg.used;
        entry.reported = reported;
        self.request_cycle(ctx);
    }
}

impl Handler<JobFinished> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: JobFinished, ctx: &mut Context<Self>) {
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
        let users: Vec<String> = self.users.keys().cloned().collect();
        for u in &users {
            self.touch_usage(u);
        }
        Box::pin(self.save_usage().into_actor(self).map(|_, _, _| ()))
    }
}
