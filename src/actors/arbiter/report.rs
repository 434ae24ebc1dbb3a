//! The arbiter's answers: the scheduler view, one user's live state, pending reasons,
//! readiness, and the per-user and per-cluster gauges.

use actix::{Context, Handler, Message, MessageResult};

use super::{FairShareArbiter, RefreshMetrics};
use crate::metrics::{self, OTHER_USERS};
use crate::policy::{self, JobId};
use crate::views::{ClusterStatusView, LiveUser, SchedulerView};

use super::unix_now;

/// Ask for the view.
#[derive(Message)]
#[rtype(result = "SchedulerView")]
pub struct GetView;

/// Ask for the live state of one user (`Some(id)`) or of every user (`None`).
#[derive(Message)]
#[rtype(result = "Option<std::collections::HashMap<String, LiveUser>>")]
pub struct GetUserState {
    pub user: Option<String>,
}

/// Ask why a queued job is not running.
#[derive(Message)]
#[rtype(result = "Option<String>")]
pub struct GetPendingReason {
    pub job_id: JobId,
}

/// Ask whether recovery is done.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct IsReady;

/// Ask how many QUEUED jobs recovery has loaded (`None` once it is done).
#[derive(Message)]
#[rtype(result = "Option<usize>")]
pub struct Loaded;

impl Handler<Loaded> for FairShareArbiter {
    type Result = Option<usize>;

    fn handle(&mut self, _: Loaded, _: &mut Context<Self>) -> Option<usize> {
        self.loading.as_ref().map(|l| l.loaded)
    }
}

impl FairShareArbiter {
    pub(super) fn view(&self) -> SchedulerView {
        SchedulerView {
            ready: self.ready,
            leadership: None,
            clusters: self
                .cluster_views()
                .into_iter()
                .map(|c| ClusterStatusView {
                    free: c.free().into(),
                    used_by_others: c
                        .used_reported
                        .saturating_sub(c.outstanding.saturating_sub(c.unreported))
                        .into(),
                    name: c.name,
                    healthy: c.healthy,
                    capacity: c.total.into(),
                    used_reported: c.used_reported.into(),
                    outstanding: c.outstanding.into(),
                    unreported: c.unreported.into(),
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

    pub(super) fn refresh_metrics(&self) {
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
        for c in self.cluster_views() {
            let used = (c.used_reported + c.unreported).max(c.outstanding);
            let free = c.free();
            let rows = [
                ("cpu", c.total.cpu, used.cpu, free.cpu),
                ("gpu", c.total.gpu, used.gpu, free.gpu),
                (
                    "memory_bytes",
                    c.total.memory_bytes,
                    used.memory_bytes,
                    free.memory_bytes,
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

impl Handler<GetView> for FairShareArbiter {
    type Result = MessageResult<GetView>;

    fn handle(&mut self, _: GetView, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.view())
    }
}

impl Handler<GetUserState> for FairShareArbiter {
    type Result = MessageResult<GetUserState>;

    /// `None` while recovery is still loading the queues (the counts are not whole
    /// yet); else the named user (or every user) the arbiter knows.
    fn handle(&mut self, msg: GetUserState, _: &mut Context<Self>) -> Self::Result {
        if self.loading.is_some() {
            return MessageResult(None);
        }
        let capacity = self.capacity();
        let allocations = self.allocations();
        let now = unix_now();
        let live = |e: &super::UserEntry, id: &str| {
            let (allocation, running) = allocations.get(id).copied().unwrap_or_default();
            let share = policy::dominant_share(&allocation, &capacity);
            let usage =
                policy::decay_usage(e.usage, e.usage_at, share, now, self.config.usage_half_life);
            LiveUser {
                allocation,
                share,
                usage,
                key: policy::fair_share_key(share, usage, e.weight),
                queued: e.queued,
                running,
            }
        };
        let out = match &msg.user {
            Some(id) => self
                .users
                .get(id)
                .map(|e| (id.clone(), live(e, id)))
                .into_iter()
                .collect(),
            None => self
                .users
                .iter()
                .map(|(id, e)| (id.clone(), live(e, id)))
                .collect(),
        };
        MessageResult(Some(out))
    }
}

impl Handler<GetPendingReason> for FairShareArbiter {
    type Result = Option<String>;

    fn handle(&mut self, msg: GetPendingReason, _: &mut Context<Self>) -> Option<String> {
        self.pending.get(&msg.job_id).cloned()
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
