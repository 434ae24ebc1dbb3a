//! The arbiter's answers: the scheduler view, one user's live state, pending reasons,
//! readiness, and the per-user and per-cluster gauges.

use actix::{Context, Handler, Message, MessageResult};

use super::{FairShareArbiter, RefreshMetrics};
use crate::metrics::{self, OTHER_USERS};
use crate::policy::{JobId, Resources};
use crate::views::{ClusterKind, ClusterStatusView, LiveUser, SchedulerView, UserOrderView};

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

/// Ask, of autoscaling cluster `cluster` as the monitor last reported it, which node
/// types are held back now (a scale-up of theirs did not come; issue 44) and whether
/// Ray can still add a node ([`crate::views::GrowthView::can_grow`]); `None` for a
/// cluster that does not autoscale or has not been polled.
#[derive(Message)]
#[rtype(result = "Option<(Vec<String>, bool)>")]
pub struct GetHeldNodeTypes {
    pub cluster: String,
}

/// Ask what an outstanding job holds on Ray now (cores, GPUs, bytes), by the last
/// State API reading that showed it; `None` when unknown.
#[derive(Message)]
#[rtype(result = "Option<Resources>")]
pub struct GetActual {
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
        let now = unix_now();
        let clusters = self.ledger.cluster_views();
        let frees = crate::policy::license_frees(&clusters, &self.config.licenses);
        // Only users a healthy cluster can serve: none while no cluster is healthy
        // with some capacity (the ledger keeps a head effective while no capacity is
        // known, so that a job is not skipped before any cluster has answered; issue
        // 43 §8: the only cluster unhealthy at capacity 0 still listed users).
        let serving = clusters.iter().any(crate::actors::cluster_serves);
        SchedulerView {
            ready: self.ready,
            leadership: None,
            clusters: clusters
                .into_iter()
                .zip(frees)
                .map(|(c, free)| {
                    // A pool has no report: everything on it is ours, booked as
                    // "unreported" by the ledger only because no report ever
                    // includes it. Shown as what it is: no report, no other tenant.
                    let (kind, used_reported, unreported) = if c.pool {
                        (ClusterKind::Pool, Resources::ZERO, Resources::ZERO)
                    } else {
                        (ClusterKind::Ray, c.used_reported, c.unreported)
                    };
                    let name = c.name.clone();
                    ClusterStatusView {
                        free: free.into(),
                        used_by_others: used_reported
                            .saturating_sub(c.outstanding.saturating_sub(unreported))
                            .into(),
                        name: c.name,
                        kind,
                        healthy: c.healthy,
                        capacity: c.total.into(),
                        used_reported: used_reported.into(),
                        outstanding: c.outstanding.into(),
                        unreported: unreported.into(),
                        admitted_jobs: None,
                        notifications: self.notifications.get(&name).cloned(),
                        unhealthy_reason: (!c.healthy)
                            .then(|| self.unhealthy_reasons.get(&name).cloned())
                            .flatten(),
                        running_jobs: None,
                        growth: self.growth.get(&name).cloned(),
                    }
                })
                .collect(),
            next_users: self
                .ledger
                .next_users(now)
                .into_iter()
                .filter(|_| serving)
                .map(|o| UserOrderView {
                    user: o.user,
                    key: o.key,
                    share: o.share,
                    usage: o.usage,
                })
                .collect(),
            last_cycle: self.last.clone(),
            cycles: self.cycles,
            queued_jobs: self.queued.values().sum(),
            outstanding_jobs: self.ledger.outstanding_count(),
            usage_half_life_seconds: self.config.usage_half_life,
            starvation_guard_seconds: self.config.starvation_guard,
            starvation_runs: self.config.starvation_runs,
            typical_runtime_seconds: self.ledger.typical_runtime(),
            guard_in_force_seconds: self.ledger.guard(),
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
        m.user_allocation.reset();
        let declared = self.ledger.declared_allocations();
        let now = unix_now();
        // Every user counted in `queued` is known to the ledger (`entry`,
        // `apply_settings` make it so together).
        let users: Vec<_> = self
            .queued
            .iter()
            .filter_map(|(id, &queued)| Some((id, self.ledger.user(id, now)?, queued)))
            .collect();
        let fair_shares = self.fair_shares();
        let mut paused = 0;
        for (i, (id, u, queued)) in users.into_iter().enumerate() {
            paused += i64::from(u.settings.paused);
            let label = if i < cap { id.as_str() } else { OTHER_USERS };
            m.queued_jobs.with_label_values(&[label]).add(queued as i64);
            m.running_jobs
                .with_label_values(&[label])
                .add(i64::from(u.outstanding));
            if i < cap {
                m.user_dominant_share
                    .with_label_values(&[label])
                    .set(u.share);
                m.user_weight
                    .with_label_values(&[label])
                    .set(u.settings.weight);
                let fair = fair_shares.get(id.as_str()).copied().unwrap_or(0.0);
                m.user_fair_share.with_label_values(&[label]).set(fair);
                let d = declared.get(id.as_str()).copied().unwrap_or_default();
                for (charged, r) in [("actual", u.allocation), ("declared", d)] {
                    for (resource, v) in [
                        ("cpu", r.cpu),
                        ("gpu", r.gpu),
                        ("memory_bytes", r.memory_bytes),
                    ] {
                        m.user_allocation
                            .with_label_values(&[label, resource, charged])
                            .set(v);
                    }
                }
            }
        }
        m.users_paused.set(paused);
        self.refresh_group_metrics();
        let clusters = self.ledger.cluster_views();
        let frees = crate::policy::license_frees(&clusters, &self.config.licenses);
        for (c, free) in clusters.into_iter().zip(frees) {
            let used = (c.used_reported + c.unreported).max(c.outstanding);
            let others = c.foreign();
            // Custom resources and licenses the cluster has, by name.
            let custom: Vec<(String, f64, f64, f64, f64)> = (0..c.total.custom.len())
                .filter(|&k| c.total.custom.get(k) > 0.0)
                .map(|k| {
                    (
                        crate::policy::custom::name(k).to_string(),
                        c.total.custom.get(k),
                        used.custom.get(k),
                        free.custom.get(k),
                        others.custom.get(k),
                    )
                })
                .collect();
            let rows = [
                ("cpu", c.total.cpu, used.cpu, free.cpu, others.cpu),
                ("gpu", c.total.gpu, used.gpu, free.gpu, others.gpu),
                (
                    "memory_bytes",
                    c.total.memory_bytes,
                    used.memory_bytes,
                    free.memory_bytes,
                    others.memory_bytes,
                ),
            ];
            let named = custom
                .iter()
                .map(|(n, t, u, f, o)| (n.as_str(), *t, *u, *f, *o));
            for (resource, capacity, used, free, others) in rows.into_iter().chain(named) {
                let labels = [c.name.as_str(), resource];
                m.cluster_capacity.with_label_values(&labels).set(capacity);
                m.cluster_used.with_label_values(&labels).set(used);
                m.cluster_free.with_label_values(&labels).set(free);
                m.cluster_used_by_others
                    .with_label_values(&labels)
                    .set(others);
            }
            m.cluster_healthy
                .with_label_values(&[c.name.as_str()])
                .set(i64::from(c.healthy));
        }
    }
}

impl FairShareArbiter {
    /// Per-group gauges (DESIGN §8), bounded as the per-user ones: the first
    /// `telemetry.per_user_metrics_max` groups in path order by name, the counts of
    /// the rest summed under `_other` (shares of the rest are not shown: a sum of
    /// shares of unrelated groups means nothing).
    fn refresh_group_metrics(&self) {
        let m = metrics::get();
        let cap = self.settings.telemetry.per_user_metrics_max;
        m.group_dominant_share.reset();
        m.group_fair_share.reset();
        m.group_queued_jobs.reset();
        m.group_running_jobs.reset();
        let states = self.group_states();
        for (i, g) in self.ledger.tree().groups().iter().enumerate() {
            let Some(live) = states.get(&g.path) else {
                continue;
            };
            let label = if i < cap {
                g.path.as_str()
            } else {
                OTHER_USERS
            };
            m.group_queued_jobs
                .with_label_values(&[label])
                .add(live.queued as i64);
            m.group_running_jobs
                .with_label_values(&[label])
                .add(i64::from(live.running));
            if i < cap {
                m.group_dominant_share
                    .with_label_values(&[label])
                    .set(live.share);
                m.group_fair_share
                    .with_label_values(&[label])
                    .set(live.fair_share);
            }
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
        let now = unix_now();
        let declared = self.ledger.declared_allocations();
        let fair = self.fair_shares();
        let live = |id: &str| {
            let u = self.ledger.user(id, now)?;
            Some(LiveUser {
                fair_share: fair.get(id).copied().unwrap_or(0.0),
                group: u.settings.group.clone(),
                allocation: u.allocation,
                declared: declared.get(id).copied().unwrap_or_default(),
                share: u.share,
                usage: u.usage,
                key: u.key,
                queued: self.queued.get(id).copied().unwrap_or(0),
                running: u.outstanding,
            })
        };
        let out = match &msg.user {
            Some(id) => self
                .queued
                .get_key_value(id)
                .and_then(|(id, _)| Some((id.clone(), live(id)?)))
                .into_iter()
                .collect(),
            None => self
                .queued
                .keys()
                .filter_map(|id| Some((id.clone(), live(id)?)))
                .collect(),
        };
        MessageResult(Some(out))
    }
}

impl Handler<GetActual> for FairShareArbiter {
    type Result = Option<Resources>;

    fn handle(&mut self, msg: GetActual, _: &mut Context<Self>) -> Option<Resources> {
        self.actual.get(&msg.job_id).copied()
    }
}

impl Handler<GetPendingReason> for FairShareArbiter {
    type Result = Option<String>;

    fn handle(&mut self, msg: GetPendingReason, _: &mut Context<Self>) -> Option<String> {
        let user = self
            .names
            .get(*self.queued_ids.get(&msg.job_id)? as usize)?;
        let reason = self.ledger.reason(user, msg.job_id)?;
        let mut text = reason.to_string();
        // While node types are held back after scale-ups that did not come, a job only
        // they could hold reads "no cluster large enough": say why (issue 44).
        if matches!(reason, crate::policy::PendingReason::NoClusterLargeEnough) {
            let mut held: Vec<String> = self
                .growth
                .iter()
                .flat_map(|(cluster, g)| {
                    g.node_types.iter().filter_map(move |t| {
                        t.held_for_seconds.map(|s| {
                            format!(
                                "node type {} of cluster {cluster} (counted again in {:.0} s)",
                                t.name,
                                s.ceil()
                            )
                        })
                    })
                })
                .collect();
            held.sort();
            if !held.is_empty() {
                text = format!(
                    "no cluster can hold this job now: Ray did not add a node within \
                     monitor.scale_up_timeout, so these node types are left out until then: {}",
                    held.join(", ")
                );
            }
        }
        Some(text)
    }
}

impl Handler<GetHeldNodeTypes> for FairShareArbiter {
    type Result = Option<(Vec<String>, bool)>;

    fn handle(
        &mut self,
        msg: GetHeldNodeTypes,
        _: &mut Context<Self>,
    ) -> Option<(Vec<String>, bool)> {
        self.growth.get(&msg.cluster).map(|g| {
            let held = g
                .node_types
                .iter()
                .filter(|t| t.held_for_seconds.is_some())
                .map(|t| t.name.clone())
                .collect();
            (held, g.can_grow)
        })
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
