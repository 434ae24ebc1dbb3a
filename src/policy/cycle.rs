//! One scheduling cycle: progressive filling over a heap of eligible users,
//! around the reservation.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::fit::{best_fit_slot, healthy_slots, leftover, Slot};
use super::reservation::{Backfill, Hold, OutstandingJob, Reservation};
use super::share::cmp_f64;
use super::{
    age_term, decay_usage, dominant_share, fair_share_key, quantize_key, ClusterView, CycleOutcome,
    Grant, JobId, PendingReason, PolicyConfig, QueuedJob, Resources, Seconds, UserOrder, UserView,
};

/// One user during a cycle.
struct UserState<'a> {
    view: &'a UserView,
    allocation: Resources,
    outstanding: u32,
    share: f64,
    /// `h_u` at `now`.
    usage: f64,
    /// Index in the window of the effective head (`queue.len()` when none).
    cursor: usize,
    /// Reason per window job. Before the cycle's decisions only the permanent
    /// ones (too large, over the user's limit) are set; the effective head
    /// skips them.
    reasons: Vec<Option<PendingReason>>,
}

impl<'a> UserState<'a> {
    fn new(
        view: &'a UserView,
        now: Seconds,
        config: &PolicyConfig,
        capacity: &Resources,
        slots: &[Slot<'_>],
    ) -> UserState<'a> {
        let share = dominant_share(&view.allocation, capacity);
        let usage = decay_usage(
            view.usage,
            view.usage_at,
            share,
            now,
            config.usage_half_life,
        );
        let reasons = view
            .queue
            .iter()
            .map(|job| permanent_reason(job, view, slots))
            .collect();
        let mut state = UserState {
            view,
            allocation: view.allocation,
            outstanding: view.outstanding_jobs,
            share,
            usage,
            cursor: 0,
            reasons,
        };
        state.skip_unrunnable();
        state
    }

    /// Moves the cursor over jobs that can never run.
    fn skip_unrunnable(&mut self) {
        while self.reasons.get(self.cursor).is_some_and(Option::is_some) {
            self.cursor += 1;
        }
    }

    fn head(&self) -> Option<&'a QueuedJob> {
        self.view.queue.get(self.cursor)
    }

    /// The key `(s_u + h_u) / w_u − a · min(age / M, 1)` at `now`, the age
    /// being that of the effective head (none: no age term).
    fn key(&self, now: Seconds, config: &PolicyConfig) -> f64 {
        let base = fair_share_key(self.share, self.usage, self.view.weight);
        let age = self.head().map_or(0.0, |job| now - job.submitted_at);
        base - age_term(age, config.age_weight, config.max_age)
    }

    /// Why this user cannot start `head` now regardless of capacity, if so.
    fn ineligibility(&self, head: &QueuedJob) -> Option<PendingReason> {
        if self.view.paused {
            return Some(PendingReason::Paused);
        }
        if self.outstanding >= self.view.max_running_jobs {
            return Some(PendingReason::MaxRunningJobs {
                limit: self.view.max_running_jobs,
            });
        }
        match &self.view.max_resources {
            Some(max) if !(self.allocation + head.resources).fits_within(max) => {
                Some(PendingReason::MaxResources)
            }
            _ => None,
        }
    }

    fn set_head_reason(&mut self, reason: PendingReason) {
        if let Some(slot) = self.reasons.get_mut(self.cursor) {
            *slot = Some(reason);
        }
    }

    /// Paused: every job in the window that has no permanent reason says so.
    fn mark_paused(&mut self) {
        for reason in self.reasons.iter_mut().skip(self.cursor) {
            if reason.is_none() {
                *reason = Some(PendingReason::Paused);
            }
        }
    }

    /// Either a heap entry for this user (index `user`), or the head's reason
    /// is recorded. Nothing when the window is exhausted.
    fn enqueue_or_explain(
        &mut self,
        user: usize,
        now: Seconds,
        config: &PolicyConfig,
        heap: &mut BinaryHeap<Reverse<Candidate>>,
    ) {
        let Some(head) = self.head() else {
            return;
        };
        match self.ineligibility(head) {
            None => heap.push(Reverse(Candidate {
                key: quantize_key(self.key(now, config)),
                head_at: head.submitted_at,
                user,
            })),
            Some(PendingReason::Paused) => self.mark_paused(),
            Some(reason) => self.set_head_reason(reason),
        }
    }
}

/// A reason `job` can never run as things stand, independent of other jobs.
fn permanent_reason(job: &QueuedJob, view: &UserView, slots: &[Slot<'_>]) -> Option<PendingReason> {
    let too_large = !slots.is_empty() && !slots.iter().any(|s| job.resources.fits_within(&s.total));
    if too_large {
        return Some(PendingReason::NoClusterLargeEnough);
    }
    match &view.max_resources {
        Some(max) if !job.resources.fits_within(max) => Some(PendingReason::ExceedsMaxResources),
        _ => None,
    }
}

/// An eligible user waiting in the order: smallest quantized key first, then
/// the oldest head, then the user's index (users are sorted by name).
#[derive(Clone, Copy, Debug)]
struct Candidate {
    key: f64,
    head_at: Seconds,
    user: usize,
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_f64(self.key, other.key)
            .then_with(|| cmp_f64(self.head_at, other.head_at))
            .then_with(|| self.user.cmp(&other.user))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Candidate {}

/// Runs one scheduling cycle at `now` (seconds) and returns the grants, the
/// pending reasons, the order of the users after it and the reservation to
/// pass to the next cycle.
///
/// `users` and `clusters` may come in any order (sorted internally by name);
/// `clusters` includes unhealthy ones, which are ignored. `reservation` is
/// the previous cycle's [`CycleOutcome::reservation`] (`None` at start-up).
/// See the module doc for the order, eligibility, best fit, reservation,
/// backfill and age rules.
#[must_use]
pub fn run_cycle(
    now: Seconds,
    config: &PolicyConfig,
    users: &[UserView],
    clusters: &[ClusterView],
    reservation: Option<&Reservation>,
) -> CycleOutcome {
    let mut slots = healthy_slots(clusters);
    let capacity = slots
        .iter()
        .fold(Resources::ZERO, |sum, slot| sum + slot.total);

    let mut views: Vec<&UserView> = users.iter().collect();
    views.sort_by(|a, b| a.user.cmp(&b.user));
    let mut states: Vec<UserState<'_>> = views
        .into_iter()
        .map(|view| UserState::new(view, now, config, &capacity, &slots))
        .collect();

    let mut cycle = Cycle {
        now,
        config,
        capacity,
        grants: Vec::new(),
    };
    let (stopped_for, reservation) = if slots.is_empty() {
        explain_no_healthy_cluster(&mut states);
        (None, None)
    } else if config.backfill {
        let held = cycle.reserve(&mut slots, &mut states, reservation);
        cycle.backfill(&mut slots, &mut states, held)
    } else {
        (cycle.strict(&mut slots, &mut states), None)
    };

    let order = user_order(now, config, &states);
    let pending = states
        .into_iter()
        .flat_map(|state| {
            state
                .view
                .queue
                .iter()
                .zip(state.reasons)
                .filter_map(|(job, reason)| reason.map(|r| (job.job_id, r)))
        })
        .collect();

    CycleOutcome {
        grants: cycle.grants,
        pending,
        order,
        stopped_for,
        reservation,
    }
}

/// No healthy cluster: every head says so, or that its user is paused.
fn explain_no_healthy_cluster(states: &mut [UserState<'_>]) {
    for state in states {
        if state.head().is_none() {
            continue;
        }
        if state.view.paused {
            state.mark_paused();
        } else {
            state.set_head_reason(PendingReason::NoHealthyCluster);
        }
    }
}

/// What one cycle carries besides the slots and users.
struct Cycle<'c> {
    now: Seconds,
    config: &'c PolicyConfig,
    capacity: Resources,
    grants: Vec<Grant>,
}

impl Cycle<'_> {
    /// Grants `state`'s effective head on `slots[k]` and moves the head on.
    fn grant(&mut self, slots: &mut [Slot<'_>], k: usize, state: &mut UserState<'_>) {
        let (Some(job), Some(slot)) = (state.head(), slots.get_mut(k)) else {
            return;
        };
        slot.free = slot.free.saturating_sub(job.resources);
        slot.held += job.resources;
        slot.added.push(OutstandingJob {
            resources: job.resources,
            expected_end: job.runtime_estimate.map(|e| self.now + e),
        });
        self.grants.push(Grant {
            user: state.view.user.clone(),
            job_id: job.job_id,
            cluster: slot.name.to_owned(),
            resources: job.resources,
        });
        state.allocation += job.resources;
        state.outstanding = state.outstanding.saturating_add(1);
        state.share = dominant_share(&state.allocation, &self.capacity);
        state.cursor += 1;
        state.skip_unrunnable();
    }

    /// The heap of eligible users; ineligible heads get their reason.
    fn heap(&self, states: &mut [UserState<'_>]) -> BinaryHeap<Reverse<Candidate>> {
        let mut heap = BinaryHeap::with_capacity(states.len());
        for (user, state) in states.iter_mut().enumerate() {
            state.enqueue_or_explain(user, self.now, self.config, &mut heap);
        }
        heap
    }

    /// Backfill off: progressive filling that stops at the first head that
    /// fits nowhere. Returns that job, if the cycle stopped.
    fn strict(&mut self, slots: &mut [Slot<'_>], states: &mut [UserState<'_>]) -> Option<JobId> {
        let mut heap = self.heap(states);
        while let Some(Reverse(candidate)) = heap.pop() {
            let Some(state) = states.get_mut(candidate.user) else {
                continue;
            };
            let Some(job) = state.head() else {
                continue;
            };
            if let Some(k) = best_fit_slot(&job.resources, slots) {
                self.grant(slots, k, state);
                state.enqueue_or_explain(candidate.user, self.now, self.config, &mut heap);
                continue;
            }
            state.set_head_reason(PendingReason::WaitingForCapacity);
            let behind = PendingReason::WaitingBehind { job_id: job.job_id };
            for Reverse(other) in heap.drain() {
                if let Some(state) = states.get_mut(other.user) {
                    state.set_head_reason(behind.clone());
                }
            }
            return Some(job.job_id);
        }
        None
    }

    /// Settles the reservation before the cycle's filling: keeps the held one
    /// if it is still valid, grants its job if it fits now, and otherwise (or
    /// then) makes one for the starved head first in fair-share order.
    fn reserve(
        &mut self,
        slots: &mut [Slot<'_>],
        states: &mut [UserState<'_>],
        held: Option<&Reservation>,
    ) -> Option<Hold> {
        if let Some(hold) = held.and_then(|r| self.still_held(slots, states, r)) {
            let state = &mut states[hold.user];
            let request = hold.reservation.resources;
            match best_fit_slot(&request, slots) {
                Some(k) => self.grant(slots, k, state),
                None => return Some(hold),
            }
        }
        self.new_reservation(slots, states)
    }

    /// The held reservation, if its job is still its user's effective head,
    /// the user is eligible for it and some healthy cluster can hold it.
    fn still_held(
        &self,
        slots: &[Slot<'_>],
        states: &[UserState<'_>],
        held: &Reservation,
    ) -> Option<Hold> {
        let user = states.iter().position(|s| s.view.user == held.user)?;
        let state = &states[user];
        let head = state.head().filter(|job| job.job_id == held.job_id)?;
        if state.ineligibility(head).is_some() {
            return None;
        }
        // Sticks to its cluster while that one is healthy and large enough for the
        // job (its total, not what other tenants leave now: a report that still
        // counts just-finished jobs must not drop it); else moves to where it can
        // start soonest.
        let slot = slots
            .iter()
            .position(|s| s.name == held.cluster && head.resources.fits_within(&s.total))
            .or_else(|| self.soonest_slot(slots, &head.resources))?;
        self.hold(slots, state, user, slot, held.since)
    }

    /// A reservation of `slots[slot]` for the effective head of `state`
    /// (index `user`).
    fn hold(
        &self,
        slots: &[Slot<'_>],
        state: &UserState<'_>,
        user: usize,
        slot: usize,
        since: Seconds,
    ) -> Option<Hold> {
        let job = state.head()?;
        let shadow = slots[slot].shadow(self.now, &job.resources);
        Some(Hold {
            slot,
            user,
            shadow,
            reservation: Reservation {
                job_id: job.job_id,
                user: state.view.user.clone(),
                cluster: slots[slot].name.to_owned(),
                resources: job.resources,
                expected_start: shadow.start,
                since,
            },
        })
    }

    /// The slot where `request` is expected to start soonest (unknown starts
    /// last, ties by name), among those whose total can hold it.
    fn soonest_slot(&self, slots: &[Slot<'_>], request: &Resources) -> Option<usize> {
        let mut best: Option<(usize, Option<Seconds>)> = None;
        for (k, slot) in slots.iter().enumerate() {
            // Can ever hold it: the cluster's total (what other tenants seem to hold
            // now may be our own jobs Ray's lagging report still counts).
            if !request.fits_within(&slot.total) {
                continue;
            }
            let start = slot.shadow(self.now, request).start;
            let better = match (best, start) {
                (None, _) => true,
                (Some((_, None)), Some(_)) => true,
                (Some((_, Some(b))), Some(s)) => cmp_f64(s, b) == Ordering::Less,
                _ => false,
            };
            if better {
                best = Some((k, start));
            }
        }
        best.map(|(k, _)| k)
    }

    /// Whether the effective head of `states[user]` is **starved**: its user
    /// is eligible for it, it has waited longer than the starvation guard,
    /// it fits no cluster's free capacity, and it is **passed over**: some
    /// user holding capacity comes after its user in fair-share order (a
    /// larger quantized key). A head that waits only behind its own user's
    /// running jobs is queued, not starved.
    fn starved(&self, slots: &[Slot<'_>], states: &[UserState<'_>], user: usize) -> bool {
        let Some(state) = states.get(user) else {
            return false;
        };
        let Some(head) = state.head() else {
            return false;
        };
        let waited_long = self.now - head.submitted_at > self.config.starvation_guard;
        if !waited_long
            || state.ineligibility(head).is_some()
            || best_fit_slot(&head.resources, slots).is_some()
        {
            return false;
        }
        let key = quantize_key(state.key(self.now, self.config));
        states.iter().any(|other| {
            let holds = other.allocation.components().iter().any(|&x| x > 0.0);
            holds
                && cmp_f64(quantize_key(other.key(self.now, self.config)), key) == Ordering::Greater
        })
    }

    /// A reservation for the effective head of `states[user]` on the cluster
    /// where it can start soonest, made at `now`.
    fn reserve_for(
        &self,
        slots: &[Slot<'_>],
        states: &[UserState<'_>],
        user: usize,
    ) -> Option<Hold> {
        let job = states.get(user)?.head()?;
        let slot = self.soonest_slot(slots, &job.resources)?;
        self.hold(slots, &states[user], user, slot, self.now)
    }

    /// A new reservation, before the cycle's filling, for the starved
    /// effective head that comes first in fair-share order (key, older head,
    /// user): the user the order owes most.
    fn new_reservation(&self, slots: &[Slot<'_>], states: &[UserState<'_>]) -> Option<Hold> {
        let first = (0..states.len())
            .filter(|&user| self.starved(slots, states, user))
            .filter_map(|user| {
                let state = &states[user];
                Some(Candidate {
                    key: quantize_key(state.key(self.now, self.config)),
                    head_at: state.head()?.submitted_at,
                    user,
                })
            })
            .min()?;
        self.reserve_for(slots, states, first.user)
    }

    /// Backfill on: progressive filling in key order, skipping users whose
    /// head fits nowhere, and starting a job on the reserved cluster only if
    /// it does not delay the reservation. Returns the reserved job and the
    /// reservation for the next cycle.
    fn backfill(
        &mut self,
        slots: &mut [Slot<'_>],
        states: &mut [UserState<'_>],
        mut hold: Option<Hold>,
    ) -> (Option<JobId>, Option<Reservation>) {
        let mut heap = self.heap(states);
        while let Some(Reverse(candidate)) = heap.pop() {
            if hold.as_ref().is_some_and(|h| h.user == candidate.user) {
                continue; // the reserved job: it does not fit (see `reserve`)
            }
            let user = candidate.user;
            let Some(job) = states.get(user).and_then(UserState::head) else {
                continue;
            };
            match self.admissible_slot(slots, job, hold.as_ref()) {
                Some((k, how)) => {
                    if let Some(h) = hold.as_mut().filter(|h| h.slot == k) {
                        h.take(&job.resources, how);
                    }
                    let state = &mut states[user];
                    self.grant(slots, k, state);
                    state.enqueue_or_explain(user, self.now, self.config, &mut heap);
                }
                None if hold.is_none() && self.starved(slots, states, user) => {
                    // No reservation yet: the first starved head met in
                    // fair-share order gets it (its reason is set below).
                    hold = self.reserve_for(slots, states, user);
                    if hold.is_none() {
                        states[user].set_head_reason(PendingReason::WaitingForCapacity);
                    }
                }
                None => {
                    let state = &mut states[user];
                    let reason = match &hold {
                        Some(h) if best_fit_slot(&job.resources, slots).is_some() => {
                            PendingReason::BlockedByReservation {
                                job_id: h.reservation.job_id,
                                until_in: h.expected_in(self.now),
                            }
                        }
                        _ => PendingReason::WaitingForCapacity,
                    };
                    state.set_head_reason(reason);
                }
            }
        }
        let Some(hold) = hold else {
            return (None, None);
        };
        let state = &mut states[hold.user];
        let waited = state.head().map_or(0.0, |job| self.now - job.submitted_at);
        state.set_head_reason(PendingReason::Reserved {
            cluster: hold.reservation.cluster.clone(),
            expected_in: hold.expected_in(self.now),
            waited,
        });
        (Some(hold.reservation.job_id), Some(hold.reservation))
    }

    /// The best-fit slot whose free capacity holds `job` and where starting it
    /// does not delay the reservation, with how it is admitted there.
    fn admissible_slot(
        &self,
        slots: &[Slot<'_>],
        job: &QueuedJob,
        hold: Option<&Hold>,
    ) -> Option<(usize, Backfill)> {
        let mut best: Option<(usize, Backfill, f64)> = None;
        for (k, slot) in slots.iter().enumerate() {
            if !job.resources.fits_within(&slot.free) {
                continue;
            }
            let how = match hold {
                Some(h) if h.slot == k => h.admits(self.now, &job.resources, job.runtime_estimate),
                _ => Backfill::EndsBefore,
            };
            if how == Backfill::No {
                continue;
            }
            let score = leftover(&job.resources, &slot.free, &slot.total);
            if best.is_none_or(|(_, _, b)| cmp_f64(score, b) == Ordering::Less) {
                best = Some((k, how, score));
            }
        }
        best.map(|(k, how, _)| (k, how))
    }
}

/// Users whose input window was not empty, in serving order after the cycle.
fn user_order(now: Seconds, config: &PolicyConfig, states: &[UserState<'_>]) -> Vec<UserOrder> {
    let mut ranked: Vec<(Candidate, UserOrder)> = states
        .iter()
        .enumerate()
        .filter(|(_, state)| !state.view.queue.is_empty())
        .map(|(user, state)| {
            let key = state.key(now, config);
            let rank = Candidate {
                key: quantize_key(key),
                head_at: state.head().map_or(f64::INFINITY, |job| job.submitted_at),
                user,
            };
            let entry = UserOrder {
                user: state.view.user.clone(),
                key,
                share: state.share,
                usage: state.usage,
            };
            (rank, entry)
        })
        .collect();
    ranked.sort_by_key(|entry| entry.0);
    ranked.into_iter().map(|(_, entry)| entry).collect()
}
