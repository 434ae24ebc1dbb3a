//! The oracle of the property tests: one scheduling cycle computed the
//! straightforward way, reading every user (a key and a heap entry each, O(users ·
//! log users)), as the policy was implemented before the incremental
//! [`super::Ledger`]. The tests check that the ledger grants, reserves and explains
//! exactly as this does; it is kept as the executable statement of DESIGN §2.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::custom::Custom;
use super::fit::{leftover, short_of};
use super::groups::{GroupTotals, Path};
use super::licenses;
use super::reservation::{shadow, Backfill, Hold, OutstandingJob, Reservation, Shadow};
use super::share::cmp_f64;
use super::{
    age_term, decay_usage, dominant_share, fair_share_key, quantize_key, ClusterView, CycleOutcome,
    Grant, JobId, PendingReason, PolicyConfig, QueuedJob, Resources, Seconds, Tree, UserOrder,
    UserView,
};

/// One user during a cycle.
struct UserState<'a> {
    view: &'a UserView,
    /// The healthy clusters' totals, for the permanent reasons.
    totals: &'a [(String, bool, Resources)],
    allocation: Resources,
    outstanding: u32,
    share: f64,
    /// `h_u` at `now`.
    usage: f64,
    /// Index in the window of the effective head (`queue.len()` when none).
    cursor: usize,
    /// The reasons given to jobs other than the effective head, by window
    /// index, in increasing order: the permanent ones of the jobs the cursor
    /// stepped over (a paused user: every job from the cursor on). Jobs
    /// behind the effective head are not looked at, so a cycle costs what it
    /// grants and who is queued, not how long the windows are (DESIGN §2,
    /// "Cost"). Empty for almost every user, so it allocates nothing.
    stepped: Vec<(usize, PendingReason)>,
    /// The effective head's reason, if one was given (its index is `cursor`).
    head_reason: Option<PendingReason>,
    /// The groups above the user, top first (empty: the root).
    groups: Vec<usize>,
    /// Their `max_resources`, nearest group first, with their paths.
    group_caps: Vec<(String, Resources)>,
}

/// The tree of groups during a cycle and what each group holds.
struct Groups<'a> {
    tree: &'a Tree,
    totals: Vec<GroupTotals>,
    capacity: Resources,
}

impl Groups<'_> {
    /// The place in hierarchical order of `state` (index `user`): its groups' keys
    /// top down, then its own quantized key, oldest head and index.
    fn path(
        &self,
        state: &UserState<'_>,
        user: usize,
        now: Seconds,
        config: &PolicyConfig,
    ) -> Path {
        Path::new(
            self.tree,
            &self.totals,
            &self.capacity,
            &state.groups,
            (
                quantize_key(state.key(now, config)),
                state.head().map_or(f64::INFINITY, |job| job.submitted_at),
                user,
            ),
        )
    }
}

impl<'a> UserState<'a> {
    fn new(
        view: &'a UserView,
        now: Seconds,
        config: &PolicyConfig,
        capacity: &Resources,
        totals: &'a [(String, bool, Resources)],
        tree: &Tree,
    ) -> UserState<'a> {
        let share = dominant_share(&view.allocation, capacity);
        let usage = decay_usage(
            view.usage,
            view.usage_at,
            share,
            now,
            config.usage_half_life,
        );
        let mut state = UserState {
            view,
            totals,
            allocation: view.allocation,
            outstanding: view.outstanding_jobs,
            share,
            usage,
            cursor: 0,
            stepped: Vec::new(),
            head_reason: None,
            groups: tree.path_of(view.group.as_deref()),
            group_caps: tree
                .caps_of(view.group.as_deref())
                .map(|(p, m)| (p.to_owned(), *m))
                .collect(),
        };
        state.skip_unrunnable();
        state
    }

    /// Moves the cursor over jobs that can never run, giving each its reason.
    fn skip_unrunnable(&mut self) {
        while let Some(job) = self.view.queue.get(self.cursor) {
            let Some(reason) = permanent_reason(job, self.view, &self.group_caps, self.totals)
            else {
                break;
            };
            self.stepped.push((self.cursor, reason));
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

    /// Why this user cannot start `head` now regardless of capacity, if so: its
    /// own settings first, then its groups' from the top.
    fn ineligibility(&self, head: &QueuedJob, groups: &Groups<'_>) -> Option<PendingReason> {
        if self.view.paused {
            return Some(PendingReason::Paused);
        }
        if self.outstanding >= self.view.max_running_jobs {
            return Some(PendingReason::MaxRunningJobs {
                limit: self.view.max_running_jobs,
            });
        }
        match &self.view.max_resources {
            Some(max) if !(self.allocation + head.resources).fits_cap(max) => {
                Some(PendingReason::MaxResources)
            }
            _ => super::groups::ineligibility(
                groups.tree,
                &groups.totals,
                &self.groups,
                &head.resources,
            ),
        }
    }

    fn set_head_reason(&mut self, reason: PendingReason) {
        if self.cursor >= self.view.queue.len() {
            return;
        }
        self.head_reason = Some(reason);
    }

    /// Paused (the user, or a group above it: `why`): every job in the window
    /// from the effective head on says so, or gives its permanent reason.
    fn mark_paused(&mut self, why: &PendingReason) {
        self.head_reason = None;
        for (index, job) in self.view.queue.iter().enumerate().skip(self.cursor) {
            let reason = permanent_reason(job, self.view, &self.group_caps, self.totals)
                .unwrap_or_else(|| why.clone());
            self.stepped.push((index, reason));
        }
    }

    /// Either an entry in `order` for this user (index `user`), or the head's
    /// reason is recorded. Nothing when the window is exhausted.
    fn enqueue_or_explain(
        &mut self,
        user: usize,
        now: Seconds,
        config: &PolicyConfig,
        slots: &[Slot<'_>],
        groups: &Groups<'_>,
        order: &mut Order,
    ) {
        let Some(head) = self.head() else {
            return;
        };
        match self.ineligibility(head, groups) {
            None => order.push(
                groups.path(self, user, now, config),
                best_fit_slot(head, slots).is_some(),
            ),
            Some(why @ (PendingReason::Paused | PendingReason::GroupPaused { .. })) => {
                self.mark_paused(&why);
            }
            Some(reason) => self.set_head_reason(reason),
        }
    }
}

/// The eligible users in fair-share order (a binary heap of their [`Path`]s),
/// counting those that may still lead to a grant (and so to a reservation: one
/// is made only when a grant would pass a starved head over), so that a cycle
/// stops visiting users once none can (see [`Order::settled`]).
struct Order {
    heap: BinaryHeap<Reverse<(Path, bool)>>,
    /// Entries whose head fitted some cluster's free capacity when pushed.
    fitting: usize,
}

#[cfg(test)]
thread_local! {
    /// Tests: never stop early (see [`Order::settled`]), to check that stopping
    /// early changes nothing.
    pub(super) static NO_SHORTCUT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Order {
    fn new() -> Order {
        Order {
            heap: BinaryHeap::new(),
            fitting: 0,
        }
    }

    fn push(&mut self, candidate: Path, fits: bool) {
        self.fitting += usize::from(fits);
        self.heap.push(Reverse((candidate, fits)));
    }

    fn pop(&mut self) -> Option<Path> {
        let Reverse((candidate, fits)) = self.heap.pop()?;
        self.fitting -= usize::from(fits);
        Some(candidate)
    }

    /// Whether no entry left can be granted: none fitted free capacity when
    /// pushed (free capacity only shrinks during a cycle). Then no entry can
    /// take a reservation either (one is made only before a grant that would
    /// pass a starved head over), and each would only be told
    /// [`PendingReason::WaitingForCapacity`].
    fn settled(&self) -> bool {
        #[cfg(test)]
        if NO_SHORTCUT.with(std::cell::Cell::get) {
            return false;
        }
        self.fitting == 0
    }

    /// Takes every entry out, in no particular order.
    fn drain(&mut self) -> impl Iterator<Item = Path> + '_ {
        self.fitting = 0;
        self.heap.drain().map(|Reverse((candidate, _))| candidate)
    }
}

/// A reason `job` can never run as things stand, independent of other jobs:
/// larger than the total of every healthy cluster it may run on (`totals`: name,
/// pool, total; none healthy at all: never this reason) or, alone, than its user's
/// `max_resources`, or than one of its groups' (`group_caps`, nearest first).
fn permanent_reason(
    job: &QueuedJob,
    view: &UserView,
    group_caps: &[(String, Resources)],
    totals: &[(String, bool, Resources)],
) -> Option<PendingReason> {
    let place = job.pool.as_deref();
    let too_large = !totals.is_empty()
        && !totals
            .iter()
            .any(|(n, p, t)| super::admits(n, *p, place) && job.resources.fits_within(t));
    if too_large {
        return Some(PendingReason::NoClusterLargeEnough);
    }
    if let Some(max) = &view.max_resources {
        if !job.resources.fits_cap(max) {
            return Some(PendingReason::ExceedsMaxResources);
        }
    }
    group_caps
        .iter()
        .find(|(_, max)| !job.resources.fits_cap(max))
        .map(|(group, _)| PendingReason::ExceedsGroupMaxResources {
            group: group.clone(),
        })
}

/// [`super::run_cycle`], computed the straightforward way.
#[cfg(test)]
#[must_use]
pub fn run_cycle(
    now: Seconds,
    config: &PolicyConfig,
    users: &[UserView],
    clusters: &[ClusterView],
    reservation: Option<&Reservation>,
) -> CycleOutcome {
    run_cycle_in(
        now,
        config,
        &Tree::default(),
        users,
        &[],
        clusters,
        reservation,
    )
}

/// One cycle with users in the groups of `tree` (hierarchical order, the groups'
/// limits and pause: [`super::groups`]), computed the straightforward way: the
/// ledger's cycle when there are groups.
///
/// `outside` are users that take no part in the cycle (nothing queued in their
/// window) but whose allocations, outstanding jobs and decayed usage still count in
/// their groups' totals: a group's limits and key count every job of every user
/// under it, queued or not (issue 43 §1: a user whose jobs all ran was missing from
/// its groups, which then ran past their limits). Their queues are not read.
#[must_use]
pub fn run_cycle_in(
    now: Seconds,
    config: &PolicyConfig,
    tree: &Tree,
    users: &[UserView],
    outside: &[UserView],
    clusters: &[ClusterView],
    reservation: Option<&Reservation>,
) -> CycleOutcome {
    let mut slots = healthy_slots(clusters, &config.licenses);
    let sum = slots
        .iter()
        .fold(Resources::ZERO, |sum, slot| sum + slot.total);
    // A license counts once, not once per cluster.
    let capacity = if slots.is_empty() {
        sum
    } else {
        licenses::with_counts(sum, &config.licenses)
    };

    let totals: Vec<(String, bool, Resources)> = slots
        .iter()
        .map(|slot| (slot.name.to_owned(), slot.pool, slot.total))
        .collect();

    let mut views: Vec<&UserView> = users.iter().collect();
    views.sort_by(|a, b| a.user.cmp(&b.user));
    let mut states: Vec<UserState<'_>> = views
        .into_iter()
        .map(|view| UserState::new(view, now, config, &capacity, &totals, tree))
        .collect();
    let outside: Vec<(Vec<usize>, Resources, u32, f64)> = outside
        .iter()
        .map(|v| {
            let share = dominant_share(&v.allocation, &capacity);
            let usage = decay_usage(v.usage, v.usage_at, share, now, config.usage_half_life);
            (
                tree.path_of(v.group.as_deref()),
                v.allocation,
                v.outstanding_jobs,
                usage,
            )
        })
        .collect();
    let group_totals = super::groups::roll_up(
        tree,
        states
            .iter()
            .map(|s| (s.groups.as_slice(), s.allocation, s.outstanding, s.usage))
            .chain(
                outside
                    .iter()
                    .map(|(g, a, o, h)| (g.as_slice(), *a, *o, *h)),
            ),
    );

    let mut cycle = Cycle {
        now,
        config,
        capacity,
        groups: Groups {
            tree,
            totals: group_totals,
            capacity,
        },
        grants: Vec::new(),
    };
    let (stopped_for, reservation) = if slots.is_empty() {
        explain_no_healthy_cluster(&mut states, &cycle.groups);
        (None, None)
    } else if config.backfill {
        let held = cycle.reserve(&mut slots, &mut states, reservation);
        cycle.backfill(&mut slots, &mut states, held)
    } else {
        (cycle.strict(&mut slots, &mut states), None)
    };

    let order = user_order(now, config, &cycle.groups, &states);
    // What each job may use: the free capacity of the clusters it may run on.
    let frees_for = |job: &QueuedJob| -> Vec<Resources> {
        slots
            .iter()
            .filter(|slot| slot.admits(job))
            .map(|slot| slot.free)
            .collect()
    };
    let pending = states
        .into_iter()
        .flat_map(|state| {
            let queue = &state.view.queue;
            let head = state.head_reason.map(|reason| (state.cursor, reason));
            state
                .stepped
                .into_iter()
                .chain(head)
                .filter_map(move |(index, reason)| Some((queue.get(index)?, reason)))
        })
        .map(|(job, reason)| match reason {
            PendingReason::WaitingForCapacity { .. } => (
                job.job_id,
                PendingReason::WaitingForCapacity {
                    short: short_of(&job.resources, &frees_for(job)),
                },
            ),
            reason => (job.job_id, reason),
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

/// No healthy cluster: every head says so, or that its user (or a group above
/// it) is paused.
fn explain_no_healthy_cluster(states: &mut [UserState<'_>], groups: &Groups<'_>) {
    for state in states {
        let Some(head) = state.head() else {
            continue;
        };
        match state.ineligibility(head, groups) {
            Some(why @ (PendingReason::Paused | PendingReason::GroupPaused { .. })) => {
                state.mark_paused(&why);
            }
            _ => state.set_head_reason(PendingReason::NoHealthyCluster),
        }
    }
}

/// What one cycle carries besides the slots and users.
struct Cycle<'c> {
    now: Seconds,
    config: &'c PolicyConfig,
    capacity: Resources,
    grants: Vec<Grant>,
    /// The groups and what they hold.
    groups: Groups<'c>,
}

impl Cycle<'_> {
    /// Grants `state`'s effective head on `slots[k]` and moves the head on.
    fn grant(&mut self, slots: &mut [Slot<'_>], k: usize, state: &mut UserState<'_>) {
        let (Some(job), Some(slot)) = (state.head(), slots.get_mut(k)) else {
            return;
        };
        slot.free = slot.free.saturating_sub(job.resources);
        slot.held += job.resources;
        let request = job.resources;
        licenses::spread_grant(
            &request,
            &self.config.licenses,
            slots
                .iter_mut()
                .enumerate()
                .filter(|&(j, _)| j != k)
                .map(|(_, s)| (&mut s.free, &mut s.held)),
        );
        let Some(slot) = slots.get_mut(k) else {
            return;
        };
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
        for &g in &state.groups {
            let t = &mut self.groups.totals[g];
            t.allocation += job.resources;
            t.outstanding = t.outstanding.saturating_add(1);
        }
    }

    /// Grants `state`'s head (user index `user`) on `slots[k]` and puts the user
    /// back in the order with its next head, or explains why it waits.
    fn grant_and_requeue(
        &mut self,
        slots: &mut [Slot<'_>],
        k: usize,
        state: &mut UserState<'_>,
        user: usize,
        order: &mut Order,
    ) {
        self.grant(slots, k, state);
        state.enqueue_or_explain(user, self.now, self.config, slots, &self.groups, order);
    }

    /// Whether `popped`, taken from the order, is stale: a grant to a user in one
    /// of its groups raised a group's key since it was pushed (keys only rise
    /// during a cycle, so an entry's path is never above its user's), or took a
    /// group to its limit. A stale entry goes back with its path now, or its head
    /// is told the group's limit; the caller takes the next one. Without groups
    /// only a user's own grants change its entry, and it is pushed afresh then.
    fn stale(
        &self,
        popped: &Path,
        slots: &[Slot<'_>],
        states: &mut [UserState<'_>],
        order: &mut Order,
    ) -> bool {
        if self.groups.tree.is_empty() {
            return false;
        }
        let user = popped.user();
        let state = &mut states[user];
        let Some(head) = state.head() else {
            return false;
        };
        if let Some(reason) = state.ineligibility(head, &self.groups) {
            state.set_head_reason(reason);
            return true;
        }
        let now = self.groups.path(state, user, self.now, self.config);
        if now == *popped {
            return false;
        }
        order.push(now, best_fit_slot(head, slots).is_some());
        true
    }

    /// The eligible users in fair-share order; ineligible heads get their reason.
    fn order(&self, slots: &[Slot<'_>], states: &mut [UserState<'_>]) -> Order {
        let mut order = Order::new();
        for (user, state) in states.iter_mut().enumerate() {
            state.enqueue_or_explain(user, self.now, self.config, slots, &self.groups, &mut order);
        }
        order
    }

    /// Backfill off: progressive filling that stops at the first head that
    /// fits nowhere. Returns that job, if the cycle stopped.
    fn strict(&mut self, slots: &mut [Slot<'_>], states: &mut [UserState<'_>]) -> Option<JobId> {
        let mut order = self.order(slots, states);
        while let Some(candidate) = order.pop() {
            if self.stale(&candidate, slots, states, &mut order) {
                continue;
            }
            let user = candidate.user();
            let Some(state) = states.get_mut(user) else {
                continue;
            };
            let Some(job) = state.head() else {
                continue;
            };
            if let Some(k) = best_fit_slot(job, slots) {
                self.grant_and_requeue(slots, k, state, user, &mut order);
                continue;
            }
            state.set_head_reason(PendingReason::WaitingForCapacity { short: Vec::new() });
            let behind = PendingReason::WaitingBehind { job_id: job.job_id };
            for other in order.drain() {
                if let Some(state) = states.get_mut(other.user()) {
                    state.set_head_reason(behind.clone());
                }
            }
            return Some(job.job_id);
        }
        None
    }

    /// Settles the reservation before the cycle's filling: keeps the held one
    /// if it is still valid, and grants its job if it fits now (then none is
    /// held: a new one is made only when the filling would pass a starved head
    /// over, [`Cycle::backfill`]).
    fn reserve(
        &mut self,
        slots: &mut [Slot<'_>],
        states: &mut [UserState<'_>],
        held: Option<&Reservation>,
    ) -> Option<Hold> {
        if let Some(hold) = held.and_then(|r| self.still_held(slots, states, r)) {
            let state = &mut states[hold.user];
            let Some(job) = state.head() else {
                return Some(hold);
            };
            match best_fit_slot(job, slots) {
                Some(k) => self.grant(slots, k, state),
                None => return Some(hold),
            }
        }
        None
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
        if state.ineligibility(head, &self.groups).is_some() {
            return None;
        }
        // Sticks to its cluster while that one is healthy and large enough for the
        // job (its total, not what other tenants leave now: a report that still
        // counts just-finished jobs must not drop it); else moves to where it can
        // start soonest.
        let slot = slots
            .iter()
            .position(|s| {
                s.name == held.cluster && s.admits(head) && head.resources.fits_within(&s.total)
            })
            .or_else(|| self.soonest_slot(slots, head))?;
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
    fn soonest_slot(&self, slots: &[Slot<'_>], job: &QueuedJob) -> Option<usize> {
        let request = &job.resources;
        let mut best: Option<(usize, Option<Seconds>)> = None;
        for (k, slot) in slots.iter().enumerate() {
            // Can ever hold it: the cluster's total (what other tenants seem to hold
            // now may be our own jobs Ray's lagging report still counts).
            if !slot.admits(job) || !request.fits_within(&slot.total) {
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

    /// A reservation for the effective head of `states[user]` on the cluster
    /// where it can start soonest, made at `now`.
    fn reserve_for(
        &self,
        slots: &[Slot<'_>],
        states: &[UserState<'_>],
        user: usize,
    ) -> Option<Hold> {
        let job = states.get(user)?.head()?;
        let slot = self.soonest_slot(slots, job)?;
        self.hold(slots, &states[user], user, slot, self.now)
    }

    /// Backfill on: progressive filling in key order, skipping users whose
    /// head fits nowhere, and starting a job on the reserved cluster only if
    /// it does not delay the reservation. With none held, a head is **starved**
    /// when it has waited past the starvation guard, fits no cluster's free
    /// capacity, and a job of a user after it in fair-share order is about to
    /// be granted (it is **passed over by backfill**); the first starved head
    /// in fair-share order then gets the reservation before that grant, which
    /// is granted only if it does not delay it. Returns the reserved job and
    /// the reservation for the next cycle.
    fn backfill(
        &mut self,
        slots: &mut [Slot<'_>],
        states: &mut [UserState<'_>],
        mut hold: Option<Hold>,
    ) -> (Option<JobId>, Option<Reservation>) {
        let mut order = self.order(slots, states);
        // The first head met in order (no reservation held) that waited past the
        // guard and fitted no free capacity: starved as soon as a later user's
        // job would be granted.
        let mut waiting: Option<usize> = None;
        loop {
            if order.settled() {
                // Nobody left can start, so nobody is passed over: the rest wait
                // for capacity, whatever their order (the reserved job's reason is
                // set below).
                for other in order.drain() {
                    states[other.user()]
                        .set_head_reason(PendingReason::WaitingForCapacity { short: Vec::new() });
                }
                break;
            }
            let Some(candidate) = order.pop() else {
                break;
            };
            if hold.as_ref().is_some_and(|h| h.user == candidate.user()) {
                continue; // the reserved job: it does not fit (see `reserve`)
            }
            if self.stale(&candidate, slots, states, &mut order) {
                continue;
            }
            let user = candidate.user();
            let Some(job) = states.get(user).and_then(UserState::head) else {
                continue;
            };
            let mut admitted = self.admissible_slot(slots, job, hold.as_ref());
            if admitted.is_some() && hold.is_none() {
                if let Some(starved) = waiting.take() {
                    // This grant would pass the starved head over: it gets the
                    // reservation first (its reason is set below).
                    hold = self.reserve_for(slots, states, starved);
                    admitted = self.admissible_slot(slots, job, hold.as_ref());
                }
            }
            match admitted {
                Some((k, how)) => {
                    if let Some(h) = hold.as_mut().filter(|h| h.slot == k) {
                        h.take(&job.resources, how);
                    }
                    self.grant_and_requeue(slots, k, &mut states[user], user, &mut order);
                }
                None => {
                    if hold.is_none()
                        && waiting.is_none()
                        && self.now - job.submitted_at > self.config.starvation_guard
                        && self.soonest_slot(slots, job).is_some()
                    {
                        waiting = Some(user);
                    }
                    let state = &mut states[user];
                    let reason = match &hold {
                        Some(h) if best_fit_slot(job, slots).is_some() => {
                            PendingReason::BlockedByReservation {
                                job_id: h.reservation.job_id,
                                until_in: h.expected_in(self.now),
                            }
                        }
                        _ => PendingReason::WaitingForCapacity { short: Vec::new() },
                    };
                    state.set_head_reason(reason);
                }
            }
        }
        // "Blocked" means the head fits free capacity as the cycle leaves it; one that
        // fitted when its turn came but not after later grants waits for capacity.
        for state in states.iter_mut() {
            if matches!(
                state.head_reason,
                Some(PendingReason::BlockedByReservation { .. })
            ) {
                let fits = state
                    .head()
                    .is_some_and(|job| best_fit_slot(job, slots).is_some());
                if !fits {
                    state.head_reason =
                        Some(PendingReason::WaitingForCapacity { short: Vec::new() });
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
            if !slot.admits(job) || !job.resources.fits_within(&slot.free) {
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
fn user_order(
    now: Seconds,
    config: &PolicyConfig,
    groups: &Groups<'_>,
    states: &[UserState<'_>],
) -> Vec<UserOrder> {
    // Sort the small ranks (the key is computed once per user), then build the
    // entries in that order.
    let mut ranked: Vec<(Path, f64)> = states
        .iter()
        .enumerate()
        .filter(|(_, state)| !state.view.queue.is_empty())
        .map(|(user, state)| {
            (
                groups.path(state, user, now, config),
                state.key(now, config),
            )
        })
        .collect();
    // Paths are unique (they end with the user's index): unstable is exact.
    ranked.sort_unstable_by_key(|entry| entry.0);
    ranked
        .into_iter()
        .map(|(rank, key)| {
            let state = &states[rank.user()];
            UserOrder {
                user: state.view.user.clone(),
                key,
                share: state.share,
                usage: state.usage,
            }
        })
        .collect()
}

/// A healthy cluster during a cycle: its capacity and what is still free.
struct Slot<'a> {
    pub name: &'a str,
    /// A pool ([`ClusterView::pool`]).
    pub pool: bool,
    pub total: Resources,
    pub free: Resources,
    /// `total − foreign`: the most that can ever be free for this service.
    pub ceiling: Resources,
    /// What this service's outstanding jobs hold, grants of this cycle
    /// included.
    pub held: Resources,
    /// Its outstanding jobs at the start of the cycle.
    pub jobs: &'a [OutstandingJob],
    /// Jobs granted to it during this cycle.
    pub added: Vec<OutstandingJob>,
}

impl Slot<'_> {
    /// Whether `job` may run here ([`super::admits`]).
    fn admits(&self, job: &QueuedJob) -> bool {
        super::admits(self.name, self.pool, job.pool.as_deref())
    }

    /// The shadow of `request` on this cluster at `now` ([`shadow`]).
    pub fn shadow(&self, now: Seconds, request: &Resources) -> Shadow {
        let jobs: Vec<OutstandingJob> = self.jobs.iter().chain(&self.added).copied().collect();
        shadow(now, request, self.ceiling, self.held, &jobs)
    }
}

/// The healthy clusters, sorted by name, with their free capacity; a license's
/// total is its count on every one, its free amount the count less what every
/// cluster's outstanding jobs hold ([`licenses`]).
fn healthy_slots<'a>(clusters: &'a [ClusterView], lic: &Custom) -> Vec<Slot<'a>> {
    let pooled = clusters.iter().fold(Resources::ZERO, |sum, c| {
        sum + licenses::part(&c.outstanding, lic)
    });
    let mut slots: Vec<Slot<'_>> = clusters
        .iter()
        .enumerate()
        .filter(|(_, c)| c.healthy)
        .map(|(_, c)| Slot {
            name: &c.name,
            pool: c.pool,
            total: licenses::with_counts(c.total, lic),
            free: licenses::with_free(c.free(), lic, &pooled),
            ceiling: licenses::with_counts(c.total.saturating_sub(c.foreign()), lic),
            held: licenses::with_held(c.outstanding, lic, &pooled),
            jobs: &c.jobs,
            added: Vec::new(),
        })
        .collect();
    slots.sort_by(|a, b| a.name.cmp(b.name));
    slots
}

/// Index (in `slots`) of the best-fit slot for `job`: among those it may run on
/// ([`super::admits`]) whose free capacity holds it, the smallest [`leftover`];
/// ties go to the earlier slot, that is the smaller name.
fn best_fit_slot(job: &QueuedJob, slots: &[Slot<'_>]) -> Option<usize> {
    let request = &job.resources;
    let mut best: Option<(usize, f64)> = None;
    for (i, slot) in slots.iter().enumerate() {
        if !slot.admits(job) || !request.fits_within(&slot.free) {
            continue;
        }
        let score = leftover(request, &slot.free, &slot.total);
        if best.is_none_or(|(_, b)| cmp_f64(score, b) == Ordering::Less) {
            best = Some((i, score));
        }
    }
    best.map(|(i, _)| i)
}
