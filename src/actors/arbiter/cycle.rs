//! The arbiter's scheduling cycle and what feeds it: capacity, allocations, the
//! clusters as the policy sees them, decayed usage, and saving it.

use std::collections::HashMap;
use std::time::Instant;

use actix::{AsyncContext, Context};

use super::{FairShareArbiter, Reservation};
use crate::actors::messages::Grant;
use crate::actors::unix_now;
use crate::metrics;
use crate::policy::{self, ClusterView, OutstandingJob, Resources, UserView};
use crate::store;
use crate::views::{CycleView, GrantView, UserOrderView};

impl FairShareArbiter {
    pub(super) fn capacity(&self) -> Resources {
        self.clusters
            .values()
            .filter(|c| c.healthy)
            .fold(Resources::default(), |acc, c| acc + c.total)
    }

    pub(super) fn allocations(&self) -> HashMap<&str, (Resources, u32)> {
        let mut out: HashMap<&str, (Resources, u32)> = HashMap::new();
        for r in self.outstanding.values() {
            let e = out.entry(r.user.as_str()).or_default();
            e.0 += r.resources;
            e.1 += 1;
        }
        out
    }

    /// Sum of one user's reservations (cores, GPUs, bytes).
    pub(super) fn allocation_of(&self, user: &str) -> Resources {
        self.outstanding
            .values()
            .filter(|r| r.user == user)
            .fold(Resources::default(), |acc, r| acc + r.resources)
    }

    pub(super) fn share_of(&self, user: &str) -> f64 {
        policy::dominant_share(&self.allocation_of(user), &self.capacity())
    }

    /// Every configured cluster as the policy sees it, with this service's own
    /// outstanding reservations there.
    pub(super) fn cluster_views(&self) -> Vec<ClusterView> {
        let mut per_cluster: HashMap<&str, (Resources, Resources)> = HashMap::new();
        let mut jobs: HashMap<&str, Vec<OutstandingJob>> = HashMap::new();
        for (id, r) in &self.outstanding {
            jobs.entry(r.cluster.as_str())
                .or_default()
                .push(OutstandingJob {
                    resources: r.resources,
                    expected_end: r.expected_end,
                });
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
                    // Ray's report as it stands for now: other tenants, plus our
                    // jobs it includes (free = total − foreign − our outstanding).
                    used_reported: c.foreign + outstanding.saturating_sub(unreported),
                    outstanding,
                    unreported,
                    jobs: jobs.remove(name.as_str()).unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Brings one user's decayed usage to now with its current share; call before its
    /// allocation changes.
    pub(super) fn touch_usage(&mut self, user: &str) {
        let share = self.share_of(user);
        let hl = self.config.usage_half_life;
        if let Some(e) = self.users.get_mut(user) {
            let now = unix_now();
            e.usage = policy::decay_usage(e.usage, e.usage_at, share, now, hl);
            e.usage_at = now;
        }
    }

    /// Brings every user's decayed usage to now, with the allocations computed once.
    pub(super) fn touch_all_usage(&mut self) {
        let capacity = self.capacity();
        let allocations: HashMap<String, Resources> = self
            .allocations()
            .into_iter()
            .map(|(k, (alloc, _))| (k.to_string(), alloc))
            .collect();
        let hl = self.config.usage_half_life;
        let now = unix_now();
        for (name, e) in self.users.iter_mut() {
            let alloc = allocations.get(name).copied().unwrap_or_default();
            let share = policy::dominant_share(&alloc, &capacity);
            e.usage = policy::decay_usage(e.usage, e.usage_at, share, now, hl);
            e.usage_at = now;
        }
    }

    /// Publishes the healthy clusters' totals to the API (see
    /// [`super::ClusterSizes`]). Only a cluster that reported CPUs or GPUs counts: a
    /// head that has just started may report no resources yet.
    pub(super) fn publish_sizes(&self) {
        self.sizes.set(
            self.clusters
                .values()
                .filter(|c| c.healthy && (c.total.cpu > 0.0 || c.total.gpu > 0.0))
                .map(|c| c.total)
                .collect(),
        );
    }

    /// Asks for a cycle at most [`super::REFRESH_AFTER`] from now, unless one runs
    /// before (see the module docs).
    pub(super) fn request_refresh(&mut self, ctx: &mut Context<Self>) {
        if self.refresh_requested || !self.ready {
            return;
        }
        self.refresh_requested = true;
        let since = self.cycles;
        ctx.run_later(super::REFRESH_AFTER, move |act, _| {
            act.refresh_requested = false;
            if act.cycles == since {
                act.run_cycle();
            }
        });
    }

    pub(super) fn request_cycle(&mut self, ctx: &mut Context<Self>) {
        if self.cycle_requested || !self.ready {
            return;
        }
        self.cycle_requested = true;
        crate::actors::after_mailbox(ctx, |act: &mut Self, _| {
            act.cycle_requested = false;
            act.run_cycle();
        });
    }

    /// One scheduling cycle: bring usage to now, call the policy, carry out grants.
    #[tracing::instrument(skip_all, fields(cycle = self.cycles + 1))]
    pub(super) fn run_cycle(&mut self) {
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
        // Free capacity as this cycle leaves it: a later window that fits none of it
        // cannot lead to a grant until capacity is freed (which asks for a cycle).
        let mut free: HashMap<&str, Resources> = clusters
            .iter()
            .filter(|c| c.healthy)
            .map(|c| (c.name.as_str(), c.free()))
            .collect();
        for g in &outcome.grants {
            if let Some(f) = free.get_mut(g.cluster.as_str()) {
                *f = f.saturating_sub(g.resources);
            }
        }
        self.free_after = Some(free.into_values().collect());
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
            if self.queued_ids.remove(&g.job_id).is_some() {
                if let Some(e) = self.users.get_mut(&g.user) {
                    e.queued = e.queued.saturating_sub(1);
                }
            }
            self.queue_for(&g.user).grant.do_send(Grant {
                job_id: g.job_id,
                cluster: g.cluster.clone(),
                granted_at: now,
                freed_at: self.freed_at,
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
        if !outcome.grants.is_empty() {
            self.freed_at = None;
        }
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

    /// Writes every user's decayed usage and its timestamp, so a restart keeps them.
    pub(super) fn save_usage(&mut self) -> impl std::future::Future<Output = ()> + 'static {
        // A user whose usage has not changed since the last write is skipped (equal
        // usage means it is 0, where the time does not matter, or was not brought
        // forward). A user the arbiter did not read from the database is new: its row
        // was created with usage 0 (a burst of one write per new user otherwise).
        let rows: Vec<(String, f64, f64)> = self
            .users
            .iter()
            .filter(|(id, e)| self.saved_usage.get(*id).copied().unwrap_or(0.0) != e.usage)
            .map(|(id, e)| (id.clone(), e.usage, e.usage_at))
            .collect();
        for (id, usage, _) in &rows {
            self.saved_usage.insert(id.clone(), *usage);
        }
        let db = self.db.clone();
        async move {
            let rows: Vec<_> = rows
                .into_iter()
                .map(|(id, usage, at)| {
                    let at = chrono::DateTime::from_timestamp_micros((at * 1e6) as i64)
                        .unwrap_or_else(store::now);
                    (id, usage, at)
                })
                .collect();
            if let Err(e) = store::save_usages(&db, &rows).await {
                metrics::db_error();
                tracing::warn!(error = %e, users = rows.len(), "cannot save decayed usage");
            }
        }
    }
}
