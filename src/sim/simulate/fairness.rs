//! The fairness bookkeeping: snapshots after each step, integrated piecewise
//! constant up to the next event, and the run's outcome.

use super::{JobOutcome, SharePoint, Sim, SimOutcome, Snapshot};
use crate::policy::Seconds;
use crate::sim::stats::{fair_shares, jain_index};

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
        }
        self.last_t = self.last_t.max(t);
    }

    /// Computes the fairness metrics of the state after the step at `t`.
    pub(super) fn take_snapshot(&mut self, t: Seconds) {
        let queued = self.queued_jobs > 0;
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
        self.scratch_users.clear();
        self.scratch_weights.clear();
        self.scratch_demands.clear();
        let mut capped_demand = 0u64;
        for (u, user) in self.users.iter().enumerate() {
            let demand = user.running_cores + user.queued_cores;
            if demand > 0 {
                self.scratch_users.push(u);
                self.scratch_weights.push(user.weight);
                self.scratch_demands.push(demand as f64 / capacity);
                capped_demand += demand.min(u64::from(self.config.capacity));
            }
        }
        let contended = queued && capped_demand > u64::from(self.config.capacity);
        fair_shares(
            &self.scratch_weights,
            &self.scratch_demands,
            &mut self.scratch_fair,
        );
        let mut error = 0.0;
        let mut backlogged_hold = false;
        self.scratch_ratios.clear();
        for (k, &u) in self.scratch_users.iter().enumerate() {
            let user = &self.users[u];
            let actual = user.running_cores as f64 / capacity;
            let fair = self.scratch_fair[k];
            error += (fair - actual).max(0.0);
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
            series: self.series.into_iter().map(|(_, s)| s).collect(),
        };
        for job in self.jobs {
            match job.start {
                Some(start) => outcome.jobs.push(JobOutcome {
                    number: job.number,
                    user: job.user,
                    cpus: job.cpus,
                    submit: job.submit,
                    start,
                    run: job.run,
                }),
                None => outcome.never_started.push(job.number),
            }
        }
        outcome
    }
}
