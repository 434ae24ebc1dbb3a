//! One scheduling step of each policy: fairshare (a cycle of the ledger kept
//! across the run), FIFO and the gateway loop.

use rand::seq::SliceRandom;

use super::{Sim, UserState, GATEWAY_MAX_RUNNING};
use crate::policy::{Ledger, Seconds};

impl Sim<'_> {
    /// One fairshare step at `now`: a ledger cycle, unless it could grant nothing
    /// and make no reservation; its grants start their jobs.
    pub(super) fn fair_share_step(&mut self, now: Seconds) {
        // Preemptions free capacity at once (the simulator's stop takes no time), so
        // the cycle runs again after them; the budget bounds the rounds.
        loop {
            self.fair_share_cycle(now);
            let victims = self.preemptions_at(now);
            if victims.is_empty() {
                return;
            }
            for p in victims {
                let j = p.job_id.as_u128() as usize;
                if j < self.jobs.len() {
                    self.preempt(j, now);
                }
            }
        }
    }

    /// The ledger's preemptions at `now`, when some job may be preempted and the
    /// oldest head has waited past `preemption.after`.
    fn preemptions_at(&mut self, now: Seconds) -> Vec<crate::policy::Preemption> {
        let waited = self.head_past_after(now);
        match &mut self.ledger {
            Some(ledger) if waited && ledger.has_preemptible() => {
                ledger.preempt(now, &self.config.preemption)
            }
            _ => Vec::new(),
        }
    }

    /// When the next queued head will have waited past `preemption.after` (just
    /// after `submit + after`), or the budget's window moves on while a head has,
    /// whichever is first, if some job may be preempted: a step runs then, as the
    /// arbiter's periodic cycle would.
    pub(super) fn preempt_wake(&self, now: Seconds) -> Option<Seconds> {
        let after = self.config.preemption.after;
        let any = self.ledger.as_ref().is_some_and(Ledger::has_preemptible);
        if !any || !after.is_finite() {
            return None;
        }
        let from = (now - after - 1.0).max(0.0);
        let head = self
            .heads
            .range((super::time_key(from), 0)..)
            .map(|&(at, _)| just_after(f64::from_bits(at) + after))
            .find(|&at| at > now);
        // A head already past `after` may have been refused for the budget: wake when
        // the budget's window moves on.
        let waiting = self.head_past_after(now);
        let budget = self
            .ledger
            .as_ref()
            .and_then(|l| l.budget_frees_at(&self.config.preemption))
            .map(just_after)
            .filter(|&at| waiting && at > now);
        earliest(head, budget)
    }

    /// Whether the oldest queued head has waited past `preemption.after` at `now`.
    fn head_past_after(&self, now: Seconds) -> bool {
        let after = self.config.preemption.after;
        self.heads
            .first()
            .is_some_and(|&(at, _)| now - f64::from_bits(at) > after)
    }

    /// A ledger cycle at `now`, unless it could grant nothing and make no
    /// reservation; its grants start their jobs.
    fn fair_share_cycle(&mut self, now: Seconds) {
        let free = self.free_cores();
        let Some(ledger) = &mut self.ledger else {
            return;
        };
        let guard = ledger.guard();
        // Without a head that fits, the cycle would grant nothing; it still runs
        // when it would make a reservation (none held and some head past the
        // guard), so that the reservation exists from the same instant as in the
        // arbiter. The oldest head has waited longest.
        let overdue = self
            .heads
            .first()
            .is_some_and(|&(at, _)| now - f64::from_bits(at) > guard);
        let may_reserve = self.config.backfill && ledger.reservation().is_none() && overdue;
        let fits = self
            .head_cpus
            .first_key_value()
            .is_some_and(|(&cpus, _)| u64::from(cpus) <= free);
        if !may_reserve && !fits {
            return;
        }
        let grants = ledger.cycle(now).grants;
        self.cycles += 1;
        for grant in grants {
            let j = grant.job_id.as_u128() as usize;
            if j < self.jobs.len() && self.dequeue(j) {
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
        // The guard in force (it follows the run times of the jobs that ended).
        let guard = self
            .ledger
            .as_ref()
            .map_or(self.config.starvation_guard_s, Ledger::guard);
        let held = self
            .ledger
            .as_ref()
            .is_some_and(|l| l.reservation().is_some());
        if !self.config.backfill || held || !guard.is_finite() {
            return None;
        }
        // `just_after(at + guard) > now` holds from some head on in submit order
        // (it is monotone in `at`); heads older than a second before `now − guard`
        // cannot pass it, so the walk starts there.
        let from = (now - guard - 1.0).max(0.0);
        self.heads
            .range((super::time_key(from), 0)..)
            .map(|&(at, _)| just_after(f64::from_bits(at) + guard))
            .find(|&at| at > now)
    }

    pub(super) fn fifo_step(&mut self, now: Seconds) {
        let mut started = false;
        while let Some(&j) = self.fifo.front() {
            if u64::from(self.jobs[j].cpus) > self.free_cores() {
                break;
            }
            self.fifo.pop_front();
            // Within a user, FIFO order is the user's own queue order.
            self.dequeue(j);
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
                self.dequeue(j);
                self.start(j, now);
                started += 1;
            }
        }
        started
    }
}

/// The earlier of two optional times.
pub(super) fn earliest(a: Option<Seconds>, b: Option<Seconds>) -> Option<Seconds> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
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
