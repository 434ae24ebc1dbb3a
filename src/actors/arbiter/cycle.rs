//! The arbiter's scheduling cycle, what it publishes of the clusters, and saving
//! decayed usage.

use std::time::{Duration, Instant};

use actix::{AsyncContext, Context};

use super::FairShareArbiter;
use crate::actors::messages::{Grant, OthersHold, Preempt};
use crate::actors::unix_now;
use crate::metrics;
use crate::store;
use crate::views::{CycleView, GrantView};

impl FairShareArbiter {
    /// Publishes the healthy clusters' totals to the API (see
    /// [`super::ClusterSizes`]). Only a cluster that reported CPUs or GPUs counts: a
    /// head that has just started may report no resources yet.
    ///
    /// An autoscaling cluster counts by its nodes, not its total: Ray runs a job's
    /// entrypoint on one node, so the largest job it can ever run is one node's (the
    /// head's or a node type's; issue 44).
    pub(super) fn publish_sizes(&self) {
        // An autoscaling cluster's nodes are configured: known even while it is
        // unreachable (a fresh tester's finding: a job no node type holds was accepted).
        let autoscaling = |name: &str| {
            self.settings
                .clusters
                .iter()
                .find(|s| s.name == name && s.autoscales())
        };
        let shapes = |c: &crate::policy::ClusterView| -> Vec<crate::policy::Resources> {
            match autoscaling(&c.name) {
                Some(s) => s.node_shapes().into_iter().map(|(_, r)| r).collect(),
                None => vec![c.total],
            }
        };
        self.sizes.set(
            self.ledger
                .cluster_views()
                .iter()
                // Pools are not where a job without a pool may go: the API checks a
                // pool job against its pool's configured capacity.
                .filter(|c| {
                    !c.pool
                        && (autoscaling(&c.name).is_some()
                            || (c.healthy && (c.total.cpu > 0.0 || c.total.gpu > 0.0)))
                })
                .flat_map(shapes)
                .collect(),
        );
    }

    pub(super) fn request_cycle(&mut self, ctx: &mut Context<Self>) {
        if self.cycle_requested || !self.ready {
            return;
        }
        self.cycle_requested = true;
        crate::actors::after_mailbox(ctx, |act: &mut Self, ctx| {
            act.cycle_requested = false;
            act.run_cycle();
            act.arm_guard_wake(ctx);
            act.arm_growth_batch(ctx);
        });
    }

    /// Whether this cycle is a scale-up batch's: it may grant into what autoscaling
    /// clusters can still grow by (`monitor.scale_up_batch`; always when that is 0).
    fn growth_open(&self, now: f64) -> bool {
        self.settings.monitor.scale_up_batch.is_zero()
            || self.growth_batch.is_some_and(|at| now >= at)
    }

    /// Arms the next scale-up batch (issue 44; DESIGN §2, "Autoscaling clusters"):
    /// while jobs are queued and a cluster can still grow, a cycle that may grant into
    /// the growth runs `monitor.scale_up_batch` from now, so that every job queued by
    /// then competes for the new nodes in fair-share order. Cycles between batches
    /// grant only what fits the nodes alive.
    pub(super) fn arm_growth_batch(&mut self, ctx: &mut Context<Self>) {
        let batch = self.settings.monitor.scale_up_batch;
        if batch.is_zero()
            || self.growth_batch.is_some()
            || self.queued_ids.is_empty()
            || self.growth_room.is_empty()
        {
            return;
        }
        self.growth_batch = Some(unix_now() + batch.as_secs_f64());
        // Just after the instant, as the guard's wake.
        ctx.run_later(batch + Duration::from_millis(1), |act, ctx| {
            act.request_cycle(ctx);
        });
    }

    /// Schedules a cycle for when the next waiting head passes the starvation guard
    /// (DESIGN §2, "Reservation"), so that the reservation is made then and not at
    /// the next finish or tick: the capacity that frees meanwhile would go to
    /// backfill. One such wake is pending at a time; a new instant replaces it.
    pub(super) fn arm_guard_wake(&mut self, ctx: &mut Context<Self>) {
        let at = self.ledger.guard_trips_at();
        if self.guard_wake.as_ref().map(|w| w.1) == at {
            return;
        }
        if let Some((handle, _)) = self.guard_wake.take() {
            ctx.cancel_future(handle);
        }
        let Some(at) = at else {
            return;
        };
        // Just after the instant (the guard is "waited longer than"); a wake beyond
        // the next tick is left to the tick.
        let delay = (at - unix_now()).max(0.0) + 0.001;
        if delay >= self.settings.scheduler.tick.as_secs_f64() {
            return;
        }
        let handle = ctx.run_later(Duration::from_secs_f64(delay), |act, ctx| {
            act.guard_wake = None;
            act.request_cycle(ctx);
        });
        self.guard_wake = Some((handle, at));
    }

    /// One scheduling cycle: the ledger decides, the arbiter carries out the grants.
    #[tracing::instrument(skip_all, fields(cycle = self.cycles + 1))]
    pub(super) fn run_cycle(&mut self) {
        let started = Instant::now();
        let now = unix_now();
        // Growth is withheld from fitting except in a scale-up batch's cycle.
        let open = self.growth_open(now);
        for name in self.growth.keys() {
            let room = match self.growth_room.get(name) {
                Some(room) if !open => *room,
                _ => crate::policy::Resources::ZERO,
            };
            self.ledger.withhold(name, room);
        }
        if open {
            self.growth_batch = None;
        }
        let outcome = self.ledger.cycle(now);
        let m = metrics::get();
        for (g, waited) in outcome.grants.iter().zip(&outcome.waited) {
            m.queue_wait.observe(waited.max(0.0));
            if self.queued_ids.remove(&g.job_id).is_some() {
                if let Some(q) = self.queued.get_mut(&g.user) {
                    *q = q.saturating_sub(1);
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
        if let Some(to) = &self.preempt_to {
            for preemption in self.ledger.preempt(now, &self.preemption) {
                tracing::info!(job_id = %preemption.job_id, user = %preemption.user,
                    for_job = %preemption.for_job, for_user = %preemption.for_user,
                    cluster = %preemption.cluster, "preempting");
                to.do_send(Preempt { preemption });
            }
        }
        if outcome.reservation.as_ref().map(|r| r.job_id) != self.reserved {
            match &outcome.reservation {
                Some(r) => tracing::info!(job_id = %r.job_id, user = %r.user,
                    cluster = %r.cluster,
                    guard_in_force_s = self.ledger.guard(), "reservation made"),
                None => {
                    if let Some(job_id) = self.reserved {
                        tracing::info!(%job_id, "reservation released");
                    }
                }
            }
            self.reserved = outcome.reservation.as_ref().map(|r| r.job_id);
        }
        if !outcome.grants.is_empty() || self.queued_ids.is_empty() {
            // Granted; or nothing waits, so the freed capacity goes to no job, and a
            // later grant (a new submission's) is not the finish's latency.
            self.freed_at = None;
        }
        let others_hold = !self.queued_ids.is_empty() && self.ledger.others_hold();
        if others_hold != self.others_hold.1 {
            self.others_hold.1 = others_hold;
            if let Some(to) = &self.others_hold.0 {
                to.do_send(OthersHold(others_hold));
            }
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

    /// Writes the decayed usage of every user whose usage changed since the last
    /// write, with its timestamp, so a restart carries it on (a stored `(usage,
    /// usage_at)` decays the same from then on with the share the user holds).
    pub(super) fn save_usage(&mut self) -> impl std::future::Future<Output = ()> + 'static {
        let rows = self.ledger.take_usage_changes();
        let db = self.db.clone();
        async move {
            if rows.is_empty() {
                return;
            }
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
