//! What the ledger answers besides explanations: outstanding jobs, users' live
//! state, and the snapshot a cycle decides on.

use std::sync::Arc;

use super::{Account, Ledger, Uid, UserState};
use crate::policy::{
    decay_usage, fair_share_key, ClusterView, JobId, Reservation, Resources, Seconds, UserView,
};

impl Ledger {
    /// The reservation the last cycle left, if any.
    pub fn reservation(&self) -> Option<&Reservation> {
        self.reservation.as_ref()
    }

    /// The policy's knobs as the next cycle applies them: the configured ones with
    /// `starvation_guard` the guard in force ([`Ledger::guard`]), what
    /// [`crate::policy::run_cycle`] on this ledger's snapshot takes to decide the same.
    #[must_use]
    pub fn policy_config(&self) -> crate::policy::PolicyConfig {
        crate::policy::PolicyConfig {
            starvation_guard: self.guard,
            ..self.config.clone()
        }
    }

    /// The starvation guard in force, seconds: `starvation_guard`, or
    /// `starvation_runs` typical run times of the jobs that ended when that is
    /// shorter ([`crate::policy::starvation::guard`]).
    #[must_use]
    pub fn guard(&self) -> Seconds {
        self.guard
    }

    /// When the next eligible head still within the guard passes it (its submit time
    /// plus the guard in force, seconds), if no reservation is held and backfill is
    /// on: a cycle then may make the reservation, which otherwise waits for the
    /// next event (the simulator's `guard_wake`; issue 43 §5, where it waited for the
    /// next finish). `None` when no head is waiting, or the guard is off.
    #[must_use]
    pub fn guard_trips_at(&self) -> Option<Seconds> {
        if !self.config.backfill || self.reservation.is_some() || !self.guard.is_finite() {
            return None;
        }
        self.waiting.first().map(|(at, _)| at.0 + self.guard)
    }

    /// The typical run time of the jobs that ended (a geometric mean of recent
    /// ends, seconds; [`crate::policy::starvation::TypicalRuntime`]); `None` before
    /// any ended.
    #[must_use]
    pub fn typical_runtime(&self) -> Option<Seconds> {
        self.runtimes.get()
    }

    /// Whether another tenant holds capacity (cores, GPUs or bytes) on a healthy
    /// cluster, by the last reports ([`ClusterView::foreign`]): its release is
    /// announced by no watcher, so the monitor must poll to learn of it.
    pub fn others_hold(&self) -> bool {
        self.clusters.iter().any(|c| {
            let f = crate::policy::resources::foreign(c.used_reported, c.outstanding, c.unreported);
            c.healthy && (f.cpu > 0.0 || f.gpu > 0.0 || f.memory_bytes > 0.0)
        })
    }

    /// Number of outstanding jobs.
    pub fn outstanding_count(&self) -> usize {
        self.jobs.len()
    }

    /// What an outstanding job declared and what it is charged (see
    /// [`Ledger::charge`]), cores, GPUs and bytes.
    pub fn job_resources(&self, job: &JobId) -> Option<(Resources, Resources)> {
        self.jobs.get(job).map(|j| (j.declared, j.resources))
    }

    /// Each user's declared allocation: what its outstanding jobs declared (its
    /// allocation is what they are charged).
    pub fn declared_allocations(&self) -> std::collections::HashMap<&str, Resources> {
        let mut by = std::collections::HashMap::new();
        for j in self.jobs.values() {
            let name: &str = &self.accounts[j.uid as usize].name;
            *by.entry(name).or_insert(Resources::ZERO) += j.declared;
        }
        by
    }

    /// Every outstanding job as the forward run of estimates takes it
    /// ([`crate::policy::estimate::Outstanding`]), in id order: its user, cluster,
    /// what it is charged, the ledger's expected end and its start; `end` is the
    /// ledger's expected end (`+∞` if unknown) until the caller sets its own.
    pub fn outstanding_jobs(&self) -> Vec<crate::policy::estimate::Outstanding> {
        let mut out: Vec<crate::policy::estimate::Outstanding> = self
            .jobs
            .iter()
            .map(|(id, j)| crate::policy::estimate::Outstanding {
                job_id: *id,
                user: self.accounts[j.uid as usize].name.to_string(),
                cluster: self.clusters[j.cluster].name.clone(),
                resources: j.resources,
                expected_end: j.end_key.end,
                started_at: j.started_at,
                end: j.end_key.end.unwrap_or(f64::INFINITY),
            })
            .collect();
        out.sort_by_key(|o| o.job_id);
        out
    }

    /// Whether `job` is outstanding.
    pub fn is_outstanding(&self, job: &JobId) -> bool {
        self.jobs.contains_key(job)
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

    /// Every cluster as [`crate::policy::run_cycle`] would see it, in name order.
    pub fn cluster_views(&self) -> Vec<ClusterView> {
        self.by_cluster_name
            .values()
            .map(|&k| self.clusters[k].view())
            .collect()
    }

    /// Every user the ledger knows, as [`crate::policy::run_cycle`] takes users (those with
    /// an empty window too), in name order.
    pub fn all_user_views(&self) -> Vec<UserView> {
        self.views_where(|_| true)
    }

    /// Every user that takes part in a cycle, as [`crate::policy::run_cycle`] would take it,
    /// in name order: with the ledger's [`Ledger::cluster_views`] and
    /// [`Ledger::reservation`], the snapshot whose cycle the next
    /// [`Ledger::cycle`] makes.
    pub fn user_views(&self) -> Vec<UserView> {
        self.views_where(Account::listed)
    }

    /// With groups, the users that take no part in the next cycle (nothing queued)
    /// but hold capacity, have outstanding jobs or decayed usage: what they hold and
    /// their usage count in their groups' totals, for the groups' limits and keys
    /// (issue 43 §1), in name order. Empty without groups.
    pub fn outside_views(&self) -> Vec<UserView> {
        if self.tree.is_empty() {
            return Vec::new();
        }
        self.views_where(|a| !a.listed() && (a.outstanding > 0 || a.holds() || a.usage > 0.0))
    }

    /// [`Ledger::all_user_views`] without their windows (`queue` empty): what the
    /// estimates' forward run needs from the arbiter, which takes the queues from the
    /// database instead (copying every window would hold the arbiter up).
    pub fn all_user_settings(&self) -> Vec<UserView> {
        self.views_where_with(|_| true, false)
    }

    fn views_where(&self, keep: impl Fn(&Account) -> bool) -> Vec<UserView> {
        self.views_where_with(keep, true)
    }

    fn views_where_with(&self, keep: impl Fn(&Account) -> bool, windows: bool) -> Vec<UserView> {
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
                group: a.settings.group.clone(),
                queue: if windows {
                    a.window.iter().cloned().collect()
                } else {
                    Vec::new()
                },
            })
            .collect()
    }

    /// Whether the job `head` may run on cluster `k` (its pool, or a cluster that
    /// is not a pool).
    pub(super) fn admits(&self, k: usize, head: &crate::policy::QueuedJob) -> bool {
        let c = &self.clusters[k];
        crate::policy::admits(&c.name, c.pool, head.pool.as_deref())
    }

    /// The capacity shares are measured against: the healthy clusters' totals
    /// summed, each license counted once.
    #[must_use]
    pub fn capacity(&self) -> Resources {
        self.capacity
    }
}
