//! The fairness bookkeeping: snapshots after each step, integrated piecewise
//! constant up to the next event, and the run's outcome.

use std::cmp::Ordering;

use super::{JobOutcome, SharePoint, Sim, SimOutcome, Snapshot, UserState};
use crate::policy::Seconds;
use crate::sim::stats::{fill_in_order, jain_index};

/// The users with demand in water-filling order (`demand / weight`, ties by user
/// index: the order [`crate::sim::stats::fair_shares`] gives), kept from one step
/// to the next: a step changes a few users' demands, so putting the kept order
/// right by insertion costs about the number of users, where sorting afresh cost
/// `U log U` comparisons at every step.
#[derive(Debug, Default)]
pub(super) struct ShareOrder {
    /// User indices, in the order of the last step that needed it.
    users: Vec<usize>,
    /// Per user: in `users`.
    member: Vec<bool>,
    /// Per user: its index in this step's scratch arrays (`usize::MAX`: none).
    at: Vec<usize>,
    /// Per user: `demand / weight` this step.
    ratio: Vec<f64>,
    /// This step's order as scratch indices (users with a weight `> 0`).
    order: Vec<usize>,
}

impl ShareOrder {
    /// The water-filling order of this step's users with demand (`users[k]` with
    /// `weights[k]`, `demands[k]`, in user order), as indices into those arrays.
    pub(super) fn update(
        &mut self,
        users: &[usize],
        weights: &[f64],
        demands: &[f64],
        n: usize,
    ) -> &[usize] {
        self.member.resize(n, false);
        self.at.resize(n, usize::MAX);
        self.ratio.resize(n, 0.0);
        for (k, &u) in users.iter().enumerate() {
            self.at[u] = k;
            self.ratio[u] = demands[k] / weights[k];
        }
        let (at, member) = (&self.at, &mut self.member);
        self.users.retain(|&u| {
            let keep = at[u] != usize::MAX;
            member[u] = keep;
            keep
        });
        for &u in users {
            if !self.member[u] {
                self.member[u] = true;
                self.users.push(u);
            }
        }
        let ratio = &self.ratio;
        let before =
            |a: usize, b: usize| ratio[a].total_cmp(&ratio[b]).then(a.cmp(&b)) == Ordering::Less;
        for i in 1..self.users.len() {
            let u = self.users[i];
            let mut j = i;
            while j > 0 && before(u, self.users[j - 1]) {
                self.users[j] = self.users[j - 1];
                j -= 1;
            }
            self.users[j] = u;
        }
        self.order.clear();
        for &u in &self.users {
            let k = self.at[u];
            if weights[k] > 0.0 {
                self.order.push(k);
            }
        }
        for &u in users {
            self.at[u] = usize::MAX;
        }
        &self.order
    }
}

impl Sim<'_> {
    /// Adds the current snapshot over `[last_t, t)`.
    pub(super) fn integrate(&mut self, t: Seconds) {
        let dt = t - self.last_t;
        let capacity = f64::from(self.config.capacity);
        if dt > 0.0 && self.snapshot.queued {
            self.queued_s += dt;
            self.idle_integral += self.snapshot.idle_while_queued * dt;
            self.queued_error_integral += self.snapshot.queued_error * dt;
        }
        if dt > 0.0 && self.snapshot.contended {
            self.contended_s += dt;
            self.error_integral += self.snapshot.fairness_error * dt;
            self.contended_idle_integral += self.snapshot.idle_while_queued * dt / capacity;
            if let Some(jain) = self.snapshot.jain {
                self.jain_s += dt;
                self.jain_integral += jain * dt;
            }
            for &(u, excess) in &self.over_users {
                self.over_share_s[u] += excess * dt;
            }
        }
        self.last_t = self.last_t.max(t);
    }

    /// Computes the fairness metrics of the state after the step at `t`.
    pub(super) fn take_snapshot(&mut self, t: Seconds) {
        // The snapshot depends only on what runs and what queues: after a step
        // that changed neither (the stale finish of a preempted run, a wake-up
        // that started nothing) it is the one before. (An autoscaled cluster's
        // nodes change between events: taken afresh there.)
        if self.scaler.is_none() && self.snapshot_at == Some(self.state_changes) {
            return;
        }
        self.snapshot_at = Some(self.state_changes);
        let queued = self.queued_jobs > 0;
        self.over_users.clear();
        self.snapshot = Snapshot {
            idle_while_queued: if queued {
                self.free_cores() as f64
            } else {
                0.0
            },
            queued_error: 0.0,
            queued,
            contended: false,
            fairness_error: 0.0,
            jain: None,
        };
        if !queued && self.series.is_empty() {
            return;
        }
        let capacity = f64::from(self.config.capacity);
        self.update_demands();
        let contended = queued && self.snapshot_capped_demand > u64::from(self.config.capacity);
        let mut error = 0.0;
        let mut backlogged_hold = false;
        // The water level λ (fair / weight of the users it does not cap): each
        // user's uncapped share is `λ · w`.
        let level = if contended {
            self.scratch_fair
                .iter()
                .zip(&self.scratch_weights)
                .map(|(f, w)| f / w)
                .fold(0.0, f64::max)
        } else {
            0.0
        };
        self.scratch_ratios.clear();
        for (k, &u) in self.scratch_users.iter().enumerate() {
            let user = &self.users[u];
            let actual = user.running_cores as f64 / capacity;
            let fair = self.scratch_fair[k];
            error += (fair - actual).max(0.0);
            if contended {
                let excess = self.scratch_demands[k] - level * self.scratch_weights[k];
                self.over_users.push((u, excess));
            }
            if !user.queue.is_empty() && fair > 0.0 {
                self.scratch_ratios.push(actual / fair);
                backlogged_hold |= user.running_cores > 0;
            }
        }
        if queued {
            self.snapshot.queued_error = error;
        }
        if contended {
            self.snapshot.contended = true;
            self.snapshot.fairness_error = error;
            if backlogged_hold {
                self.snapshot.jain = Some(jain_index(&self.scratch_ratios));
            }
        }
        for (u, series) in &mut self.series {
            let user = &self.users[*u];
            let actual = user.running_cores as f64 / capacity;
            let fair = self
                .scratch_users
                .iter()
                .position(|v| v == u)
                .map_or(0.0, |k| self.scratch_fair[k]);
            let changed = series
                .points
                .last()
                .is_none_or(|p| p.actual != actual || p.fair != fair);
            if changed {
                series.points.push(SharePoint { t, actual, fair });
            }
        }
    }

    /// Brings the users with demand, their demands and fair shares (the
    /// scratch arrays of [`Self::demands_and_fair_shares`]) up to date: they
    /// depend only on the demands, which only submits and finishes change, so
    /// they are kept until one does.
    pub(super) fn update_demands(&mut self) {
        if self.snapshot_demands_at != Some(self.demand_changes) {
            self.snapshot_demands_at = Some(self.demand_changes);
            self.snapshot_capped_demand = self.demands_and_fair_shares();
        }
    }

    /// The users with demand, their weights, demands and fair shares (as
    /// [`crate::sim::stats::fair_shares`], or the groups'), into the scratch
    /// arrays; the demand capped at the capacity, summed.
    fn demands_and_fair_shares(&mut self) -> u64 {
        let capped_demand = gather_demands(
            &self.users,
            self.config.capacity,
            &mut self.scratch_users,
            &mut self.scratch_weights,
            &mut self.scratch_demands,
        );
        // `stats::fair_shares`, with the order kept between steps.
        self.scratch_fair.clear();
        let total: f64 = self.scratch_demands.iter().sum();
        if !self.tree.is_empty() {
            // Hierarchical: a user's fair share is its group's, divided.
            let entries: Vec<(Vec<usize>, f64, f64)> = self
                .scratch_users
                .iter()
                .zip(self.scratch_weights.iter().zip(&self.scratch_demands))
                .map(|(&u, (&w, &d))| (self.user_paths[u].clone(), w, d))
                .collect();
            self.scratch_fair = crate::policy::groups::fair_shares(&self.tree, &entries);
        } else if total <= 1.0 {
            self.scratch_fair.extend_from_slice(&self.scratch_demands);
        } else {
            self.scratch_fair.resize(self.scratch_demands.len(), 0.0);
            let order = self.share_order.update(
                &self.scratch_users,
                &self.scratch_weights,
                &self.scratch_demands,
                self.users.len(),
            );
            fill_in_order(
                &self.scratch_weights,
                &self.scratch_demands,
                order,
                &mut self.scratch_fair,
            );
        }
        capped_demand
    }

    pub(super) fn into_outcome(self, too_large: Vec<u64>) -> SimOutcome {
        let mut outcome = SimOutcome {
            policy: self.config.policy,
            capacity: self.config.capacity,
            users: self.users.iter().map(|u| u.name.clone()).collect(),
            weights: self.users.iter().map(|u| u.weight).collect(),
            jobs: Vec::with_capacity(self.jobs.len()),
            too_large,
            never_started: Vec::new(),
            queued_s: self.queued_s,
            idle_while_queued_core_s: self.idle_integral,
            queued_error_integral: self.queued_error_integral,
            contended_s: self.contended_s,
            fairness_error_integral: self.error_integral,
            contended_idle_integral: self.contended_idle_integral,
            jain_s: self.jain_s,
            jain_integral: self.jain_integral,
            steps: self.steps,
            cycles: self.cycles,
            preemptions: self.preemptions,
            lost_core_s: self.lost_core_s,
            series: self.series.into_iter().map(|(_, s)| s).collect(),
            above_share: self.over_share_s.iter().map(|&s| s > 0.0).collect(),
            autoscale: None,
        };
        let mut ran = Vec::new();
        for (j, job) in self.jobs.into_iter().enumerate() {
            match job.run_start {
                Some(start) => {
                    ran.push(j);
                    outcome.jobs.push(JobOutcome {
                        number: job.number,
                        user: job.user,
                        cpus: job.cpus,
                        submit: job.submit,
                        start,
                        run: job.run,
                        preemptions: job.preemptions,
                        preempted_run_s: job.cut_s,
                    });
                }
                None => outcome.never_started.push(job.number),
            }
        }
        outcome.autoscale = self.scaler.map(|s| s.into_outcome(&ran));
        outcome
    }
}

/// The users with demand (running and queued cores) in `users`, their weights and
/// demands as a fraction of `capacity` (cores), into `ids`, `weights` and `demands`
/// (cleared first); returns the demands capped at the capacity, summed (cores). The
/// input of the water-filling fair shares, for the fairness snapshot and Armada's.
pub(super) fn gather_demands(
    users: &[UserState],
    capacity: u32,
    ids: &mut Vec<usize>,
    weights: &mut Vec<f64>,
    demands: &mut Vec<f64>,
) -> u64 {
    ids.clear();
    weights.clear();
    demands.clear();
    let mut capped_demand = 0u64;
    for (u, user) in users.iter().enumerate() {
        let demand = user.running_cores + user.queued_cores;
        if demand > 0 {
            ids.push(u);
            weights.push(user.weight);
            demands.push(demand as f64 / f64::from(capacity));
            capped_demand += demand.min(u64::from(capacity));
        }
    }
    capped_demand
}
