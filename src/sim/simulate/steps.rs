//! One scheduling step of each policy: fairshare (the real `run_cycle`),
//! FIFO and the gateway loop.

use std::cmp::Reverse;

use rand::seq::SliceRandom;

use super::{job_id, Finish, Sim, UserState, CLUSTER_NAME, GATEWAY_MAX_RUNNING};
use crate::policy::{self, ClusterView, OutstandingJob, QueuedJob, Resources, Seconds, UserView};

impl Sim<'_> {
    pub(super) fn fair_share_cycle(&mut self, now: Seconds) {
        for u in 0..self.users.len() {
            self.touch_usage(u, now);
        }
        let free = self.free_cores();
        // Without a head that fits, run_cycle would grant nothing; it is
        // still called when it would make a reservation (no reservation held
        // and some head past the guard), so that the reservation exists from
        // the same instant as in the arbiter.
        let guard = self.config.starvation_guard_s;
        let starved = |user: &UserState| {
            user.queue
                .front()
                .is_some_and(|&j| now - self.jobs[j].submit > guard)
        };
        let may_reserve =
            self.config.backfill && self.reservation.is_none() && self.users.iter().any(starved);
        if !may_reserve && !self.some_head_fits(free, |_| true) {
            return;
        }
        let mut views = Vec::new();
        for (u, user) in self.users.iter().enumerate() {
            if user.queue.is_empty() {
                continue;
            }
            let mut queue = Vec::new();
            let mut cores = 0u64;
            for &j in &user.queue {
                let job = &self.jobs[j];
                queue.push(QueuedJob {
                    job_id: job_id(job.number),
                    resources: Resources::new(f64::from(job.cpus), 0.0, 0.0),
                    priority: 0,
                    submitted_at: job.submit,
                    runtime_estimate: job.estimate,
                });
                cores += u64::from(job.cpus);
                if cores > free {
                    break;
                }
            }
            views.push(UserView {
                user: user.name.clone(),
                weight: user.weight,
                paused: false,
                max_running_jobs: self.config.max_running_jobs,
                max_resources: None,
                outstanding_jobs: user.running_jobs,
                allocation: self.allocation(u),
                usage: user.usage,
                usage_at: user.usage_at,
                queue,
            });
        }
        let clusters = [ClusterView {
            name: CLUSTER_NAME.to_owned(),
            healthy: true,
            total: self.capacity,
            used_reported: Resources::ZERO,
            outstanding: Resources::new(self.used_cores as f64, 0.0, 0.0),
            unreported: Resources::ZERO,
            jobs: self.outstanding_jobs(),
        }];
        let outcome = policy::run_cycle(
            now,
            &self.policy_config,
            &views,
            &clusters,
            self.reservation.as_ref(),
        );
        self.reservation = outcome.reservation;
        self.cycles += 1;
        for grant in outcome.grants {
            let Some(&u) = self.user_index.get(&grant.user) else {
                continue;
            };
            let queue = &self.users[u].queue;
            let position = if queue
                .front()
                .is_some_and(|&j| job_id(self.jobs[j].number) == grant.job_id)
            {
                Some(0)
            } else {
                queue
                    .iter()
                    .position(|&j| job_id(self.jobs[j].number) == grant.job_id)
            };
            if let Some(j) = position.and_then(|p| self.users[u].queue.remove(p)) {
                self.start(j, now);
            }
        }
    }

    /// When the next queued head will have waited longer than the starvation
    /// guard (just after `submit + guard`), if no reservation is held and that
    /// is after `now`: the simulator runs a cycle then, as the arbiter's
    /// periodic tick would, so that the reservation is made when the guard
    /// trips and not only at the next submit or finish.
    pub(super) fn guard_wake(&self, now: Seconds) -> Option<Seconds> {
        let guard = self.config.starvation_guard_s;
        if !self.config.backfill || self.reservation.is_some() || !guard.is_finite() {
            return None;
        }
        self.users
            .iter()
            .filter_map(|user| user.queue.front())
            .map(|&j| just_after(self.jobs[j].submit + guard))
            .filter(|&at| at > now)
            .min_by(f64::total_cmp)
    }

    /// The running jobs with their expected ends (start + estimate).
    pub(super) fn outstanding_jobs(&self) -> Vec<OutstandingJob> {
        self.finishes
            .iter()
            .map(|Reverse(Finish(_, j))| {
                let job = &self.jobs[*j];
                OutstandingJob {
                    resources: Resources::new(f64::from(job.cpus), 0.0, 0.0),
                    expected_end: job.start.zip(job.estimate).map(|(s, e)| s + e),
                }
            })
            .collect()
    }

    pub(super) fn fifo_step(&mut self, now: Seconds) {
        let mut started = false;
        while let Some(&j) = self.fifo.front() {
            if u64::from(self.jobs[j].cpus) > self.free_cores() {
                break;
            }
            self.fifo.pop_front();
            let u = self.jobs[j].user;
            // Within a user, FIFO order is the user's own queue order.
            let queue = &mut self.users[u].queue;
            if queue.front() == Some(&j) {
                queue.pop_front();
            } else if let Some(p) = queue.iter().position(|&k| k == j) {
                queue.remove(p);
            }
            self.start(j, now);
            started = true;
        }
        if started {
            self.cycles += 1;
        }
    }

    /// One pass of the gateway loop at `now`; returns how many jobs it started.
    pub(super) fn gateway_pass(&mut self, now: Seconds) -> usize {
        let eligible = |user: &UserState| user.running_jobs < GATEWAY_MAX_RUNNING;
        if !self.some_head_fits(self.free_cores(), eligible) {
            return 0;
        }
        self.cycles += 1;
        let mut candidates: Vec<usize> = (0..self.users.len())
            .filter(|&u| eligible(&self.users[u]) && !self.users[u].queue.is_empty())
            .collect();
        candidates.sort_by(|&a, &b| self.users[a].name.cmp(&self.users[b].name));
        candidates.shuffle(&mut self.rng);
        let mut started = 0;
        for u in candidates {
            let free = self.free_cores();
            if free == 0 {
                break;
            }
            let Some(&j) = self.users[u].queue.front() else {
                continue;
            };
            if u64::from(self.jobs[j].cpus) <= free {
                self.users[u].queue.pop_front();
                self.start(j, now);
                started += 1;
            }
        }
        started
    }
}

/// The smallest f64 greater than `x` (`f64::next_up`, stable only since Rust
/// 1.86, above this crate's MSRV); `x` itself when it is not finite.
fn just_after(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    if x >= 0.0 {
        f64::from_bits((x + 0.0).to_bits() + 1)
    } else {
        f64::from_bits(x.to_bits() - 1)
    }
}
