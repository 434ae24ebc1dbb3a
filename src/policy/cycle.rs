//! One scheduling cycle: progressive filling over a heap of eligible users.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::share::cmp_f64;
use super::{
    decay_usage, dominant_share, fair_share_key, quantize_key, ClusterView, CycleOutcome, Grant,
    JobId, PendingReason, PolicyConfig, QueuedJob, Resources, Seconds, UserOrder, UserView,
};

/// A healthy cluster during a cycle: its capacity and what is still free.
struct Slot<'a> {
    /// Index in the caller's slice.
    index: usize,
    name: &'a str,
    total: Resources,
    free: Resources,
}

/// The healthy clusters, sorted by name, with their free capacity.
fn healthy_slots(clusters: &[ClusterView]) -> Vec<Slot<'_>> {
    let mut slots: Vec<Slot<'_>> = clusters
        .iter()
        .enumerate()
        .filter(|(_, c)| c.healthy)
        .map(|(index, c)| Slot {
            index,
            name: &c.name,
            total: c.total,
            free: c.free(),
        })
        .collect();
    slots.sort_by(|a, b| a.name.cmp(b.name));
    slots
}

/// What a grant would leave free, as a sum of fractions of the cluster:
/// `Σ_k (free_k − req_k) / total_k` over resources with `total_k > 0`.
fn leftover(request: &Resources, free: &Resources, total: &Resources) -> f64 {
    let (req, free, total) = (request.components(), free.components(), total.components());
    (0..req.len())
        .filter(|&k| total[k] > 0.0)
        .map(|k| (free[k] - req[k]) / total[k])
        .sum()
}

/// Index (in `slots`) of the best-fit slot for `request`: among those whose
/// free capacity holds it, the smallest [`leftover`]; ties go to the earlier
/// slot, that is the smaller name.
fn best_fit_slot(request: &Resources, slots: &[Slot<'_>]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, slot) in slots.iter().enumerate() {
        if !request.fits_within(&slot.free) {
            continue;
        }
        let score = leftover(request, &slot.free, &slot.total);
        if best.is_none_or(|(_, b)| cmp_f64(score, b) == Ordering::Less) {
            best = Some((i, score));
        }
    }
    best.map(|(i, _)| i)
}

/// The best-fit healthy cluster for `request` given the clusters' current
/// [`ClusterView::free`]: the one whose free capacity holds the request and
/// that is left tightest, `min Σ_k (free_k − req_k) / total_k` over resources
/// with `total_k > 0`, ties by name. `None` when no healthy cluster has room.
#[must_use]
pub fn best_fit<'a>(request: &Resources, clusters: &'a [ClusterView]) -> Option<&'a ClusterView> {
    let slots = healthy_slots(clusters);
    best_fit_slot(request, &slots).and_then(|i| clusters.get(slots[i].index))
}

/// True when some healthy cluster could hold `request` when empty
/// (`request ≤ total`). A job for which this is false fits nowhere: the
/// service refuses it at submit time (422) and the policy never lets it block.
#[must_use]
pub fn fits_some_cluster(request: &Resources, clusters: &[ClusterView]) -> bool {
    clusters
        .iter()
        .any(|c| c.healthy && request.fits_within(&c.total))
}

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

    fn key(&self) -> f64 {
        fair_share_key(self.share, self.usage, self.view.weight)
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
    fn enqueue_or_explain(&mut self, user: usize, heap: &mut BinaryHeap<Reverse<Candidate>>) {
        let Some(head) = self.head() else {
            return;
        };
        match self.ineligibility(head) {
            None => heap.push(Reverse(Candidate {
                key: quantize_key(self.key()),
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
/// pending reasons and the order of the users after it.
///
/// `users` and `clusters` may come in any order (sorted internally by name);
/// `clusters` includes unhealthy ones, which are ignored. See the module doc
/// for the order, eligibility, best fit, backfill and starvation rules.
#[must_use]
pub fn run_cycle(
    now: Seconds,
    config: &PolicyConfig,
    users: &[UserView],
    clusters: &[ClusterView],
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

    let mut grants = Vec::new();
    let stopped_for = if slots.is_empty() {
        explain_no_healthy_cluster(&mut states);
        None
    } else {
        fill(now, config, &capacity, &mut slots, &mut states, &mut grants)
    };

    let order = user_order(&states);
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
        grants,
        pending,
        order,
        stopped_for,
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

/// Progressive filling: serves the eligible users in key order, appending to
/// `grants`, until no eligible user has a head that fits or the cycle stops.
/// Returns the job the cycle stopped for, if it did.
fn fill(
    now: Seconds,
    config: &PolicyConfig,
    capacity: &Resources,
    slots: &mut [Slot<'_>],
    states: &mut [UserState<'_>],
    grants: &mut Vec<Grant>,
) -> Option<JobId> {
    let mut heap = BinaryHeap::with_capacity(states.len());
    for (user, state) in states.iter_mut().enumerate() {
        state.enqueue_or_explain(user, &mut heap);
    }

    // The job the cycle stopped for, and the reason for the users behind it.
    let mut stopped: Option<(JobId, PendingReason)> = None;
    while let Some(Reverse(candidate)) = heap.pop() {
        let Some(state) = states.get_mut(candidate.user) else {
            continue;
        };
        let Some(job) = state.head() else {
            continue;
        };
        if let Some(slot) = best_fit_slot(&job.resources, slots).and_then(|k| slots.get_mut(k)) {
            slot.free = slot.free.saturating_sub(job.resources);
            grants.push(Grant {
                user: state.view.user.clone(),
                job_id: job.job_id,
                cluster: slot.name.to_owned(),
                resources: job.resources,
            });
            state.allocation += job.resources;
            state.outstanding = state.outstanding.saturating_add(1);
            state.share = dominant_share(&state.allocation, capacity);
            state.cursor += 1;
            state.skip_unrunnable();
            state.enqueue_or_explain(candidate.user, &mut heap);
        } else if !config.backfill {
            state.set_head_reason(PendingReason::WaitingForCapacity);
            let behind = PendingReason::WaitingBehind { job_id: job.job_id };
            stopped = Some((job.job_id, behind));
            break;
        } else if now - job.submitted_at > config.starvation_guard {
            let waited = now - job.submitted_at;
            state.set_head_reason(PendingReason::Starving { waited });
            let behind = PendingReason::ReservingForStarvedJob { job_id: job.job_id };
            stopped = Some((job.job_id, behind));
            break;
        } else {
            state.set_head_reason(PendingReason::WaitingForCapacity);
        }
    }

    let (job_id, behind) = stopped?;
    for Reverse(candidate) in heap.drain() {
        if let Some(state) = states.get_mut(candidate.user) {
            state.set_head_reason(behind.clone());
        }
    }
    Some(job_id)
}

/// Users whose input window was not empty, in serving order after the cycle.
fn user_order(states: &[UserState<'_>]) -> Vec<UserOrder> {
    let mut ranked: Vec<(Candidate, UserOrder)> = states
        .iter()
        .enumerate()
        .filter(|(_, state)| !state.view.queue.is_empty())
        .map(|(user, state)| {
            let key = state.key();
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
