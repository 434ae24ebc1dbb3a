//! Preemption on the ledger (DESIGN §2, "Preemption"; the rules are in
//! [`crate::policy::PreemptionConfig`]'s module): which running jobs to stop, what
//! the ledger remembers of it, and queueing a stopped job again at its old place.
//!
//! With no outstanding job marked preemptible, [`Ledger::preempt`] returns at once
//! and nothing here changes any other decision.

// `!(x > y)` on floats is deliberate here: a NaN budget or wait counts as "no".
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use std::collections::{BTreeSet, VecDeque};

use super::cycle::Run;
use super::{Job, JobMap, Ledger, Uid};
use crate::policy::{
    dominant_share, fair_shares, licenses, JobId, Preemption, PreemptionConfig, QueuedJob,
    Resources, Seconds, FIT_TOLERANCE,
};

/// What preemption keeps between calls.
#[derive(Debug, Default)]
pub(super) struct PreemptState {
    /// Outstanding jobs that may be preempted and are not being stopped, per cluster
    /// (index), by start time (as [`f64::total_cmp`] orders it) then id: walked
    /// from the end, youngest first.
    by_start: Vec<BTreeSet<(i64, JobId)>>,
    /// For each head that preempted: the cluster and the jobs being stopped for it
    /// (an entry goes when the last of them ends).
    pub(super) waiting_for: JobMap<(usize, Vec<JobId>)>,
    /// When and how much (a sum of dominant shares) was preempted, within the last
    /// interval.
    spent: VecDeque<(Seconds, f64)>,
    /// Heads that preempted, in the order they did, with their user and cluster: the
    /// capacity their victims free is theirs ([`Ledger::serve_claims`]) until they
    /// start there or cannot.
    pub(super) claims: Vec<(JobId, Uid, usize)>,
}

/// A key that orders as [`f64::total_cmp`] orders `x`.
fn total_key(x: f64) -> i64 {
    let bits = x.to_bits() as i64;
    bits ^ (((bits >> 63) as u64) >> 1) as i64
}

impl PreemptState {
    /// `job` (on cluster `k`, started at `at`) becomes a candidate.
    fn enlist(&mut self, k: usize, at: Seconds, job: JobId) {
        if self.by_start.len() <= k {
            self.by_start.resize_with(k + 1, BTreeSet::new);
        }
        self.by_start[k].insert((total_key(at), job));
    }

    /// `job` (on cluster `k`, started at `at`) is no longer a candidate.
    fn delist(&mut self, k: usize, at: Seconds, job: JobId) {
        if let Some(set) = self.by_start.get_mut(k) {
            set.remove(&(total_key(at), job));
        }
    }

    /// Forgets every candidate (the jobs are no longer followed).
    pub(super) fn forget_all(&mut self) {
        self.by_start.clear();
    }

    /// Head `head` no longer waits for `job` to stop; its entry goes with its last job.
    fn unwait(&mut self, head: JobId, job: JobId) {
        if let Some((_, victims)) = self.waiting_for.get_mut(&head) {
            victims.retain(|&v| v != job);
            if victims.is_empty() {
                self.waiting_for.remove(&head);
            }
        }
    }
}

/// The sum of a window's requests.
pub(super) fn sum<'a>(window: impl IntoIterator<Item = &'a QueuedJob>) -> Resources {
    window
        .into_iter()
        .fold(Resources::ZERO, |acc, j| acc + j.resources)
}

/// `a ≤ b` up to the policy's relative tolerance.
fn at_most(a: f64, b: f64) -> bool {
    a <= b + FIT_TOLERANCE * a.abs().max(b.abs()).max(1.0)
}

/// A head of user `p` asking for victims at `now` on cluster `k`, which has `free`
/// capacity.
struct Ask<'a> {
    now: Seconds,
    k: usize,
    free: Resources,
    p: Uid,
    head: &'a QueuedJob,
}

/// One user's standing for a preemption round.
#[derive(Clone, Copy, Debug)]
struct Standing {
    /// Its allocation, less its jobs being stopped (and the victims taken so far).
    allocation: Resources,
    weight: f64,
    fair: f64,
    /// Its dominant share is above `fair` ([`Standing::refresh`] after a change).
    above: bool,
}

impl Standing {
    /// Recomputes `above` once `allocation` or `fair` changed.
    fn refresh(&mut self, capacity: &Resources) {
        self.above = !at_most(dominant_share(&self.allocation, capacity), self.fair);
    }
}

/// Every user's standing for a preemption round and, with groups, every group's:
/// what the users under it hold (less their jobs being stopped), so that the share
/// rule compares two users where their paths part, as the order does (issue 43 §2).
#[derive(Debug)]
struct Standings {
    users: Vec<Standing>,
    /// Each user's groups, top first (all empty without groups).
    paths: Vec<Vec<usize>>,
    /// Each group's allocation: the sum of its users' `allocation`.
    groups: Vec<Resources>,
}

/// One level of a user's path: a group, or the user itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    Group(usize),
    User(Uid),
}

impl Standings {
    /// Adds `r` to user `u`'s allocation (and its groups').
    fn add(&mut self, u: Uid, r: Resources, capacity: &Resources) {
        self.users[u as usize].allocation += r;
        self.users[u as usize].refresh(capacity);
        for &g in &self.paths[u as usize] {
            self.groups[g] += r;
        }
    }

    /// Takes `r` from user `u`'s allocation (and its groups').
    fn take(&mut self, u: Uid, r: Resources, capacity: &Resources) {
        let s = &mut self.users[u as usize];
        s.allocation = s.allocation.saturating_sub(r);
        s.refresh(capacity);
        for &g in &self.paths[u as usize] {
            self.groups[g] = self.groups[g].saturating_sub(r);
        }
    }

    /// The level at which the paths of `p` and `v` part: the two nodes there (the
    /// users themselves when both sit in the same group, or without groups).
    fn parting(&self, p: Uid, v: Uid) -> (Node, Node) {
        let (a, b) = (&self.paths[p as usize], &self.paths[v as usize]);
        for i in 0.. {
            match (a.get(i), b.get(i)) {
                (Some(&x), Some(&y)) if x == y => continue,
                (x, y) => {
                    return (
                        x.map_or(Node::User(p), |&g| Node::Group(g)),
                        y.map_or(Node::User(v), |&g| Node::Group(g)),
                    );
                }
            }
        }
        (Node::User(p), Node::User(v))
    }

    /// Whether `node` is `u` or a group above it.
    fn holds(&self, node: Node, u: Uid) -> bool {
        match node {
            Node::User(x) => x == u,
            Node::Group(g) => self.paths[u as usize].contains(&g),
        }
    }
}

impl Ledger {
    /// Marks outstanding `job` preemptible: it started at `started_at` (seconds) and
    /// was preempted `preemptions` times before. A job granted from a window that
    /// says `preemptible` is marked by the cycle; a recovered one is marked by the
    /// caller after [`Ledger::start`]. No-op for a job not outstanding.
    pub fn set_preemptible(&mut self, job: JobId, started_at: Seconds, preemptions: u32) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        if j.preemptible && j.stopping_for.is_none() {
            self.preempt.delist(j.cluster, j.started_at, job);
        }
        j.started_at = started_at;
        j.preemptions = preemptions;
        j.preemptible = true;
        if j.stopping_for.is_none() {
            self.preempt.enlist(j.cluster, started_at, job);
        }
    }

    /// Forgets what preemption knew of `job`, which `end` just took out.
    pub(super) fn forget_preemptible(&mut self, job: JobId, j: &Job) {
        match j.stopping_for {
            None if j.preemptible => self.preempt.delist(j.cluster, j.started_at, job),
            None => {}
            Some(head) => self.preempt.unwait(head, job),
        }
    }

    /// Queues `job` of `user` again (a preempted job, after [`Ledger::end`]) at its
    /// place in the window's queue order (priority descending, then submit time,
    /// then id), not at the back.
    pub fn requeue(&mut self, now: Seconds, user: &str, job: QueuedJob) {
        let now = self.clock(now);
        let uid = self.account(user, now);
        if self.jobs.contains_key(&job.job_id) {
            return;
        }
        let a = &mut self.accounts[uid as usize];
        if a.window.iter().any(|j| j.job_id == job.job_id) {
            return;
        }
        let place = a.window.partition_point(|j| {
            (std::cmp::Reverse(j.priority), j.submitted_at, j.job_id)
                <= (
                    std::cmp::Reverse(job.priority),
                    job.submitted_at,
                    job.job_id,
                )
        });
        a.queued += job.resources;
        a.window.insert(place, job);
        self.reindex(uid, now);
    }

    /// The preemption of `job` was not carried out (it had ended, was being stopped
    /// already, or did not run yet): it is a candidate again, and the head it was
    /// to be stopped for no longer waits for it. No-op for a job not being stopped.
    pub fn preemption_declined(&mut self, job: JobId) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        let Some(head) = j.stopping_for.take() else {
            return;
        };
        if j.preemptible {
            self.preempt.enlist(j.cluster, j.started_at, job);
        }
        self.preempt.unwait(head, job);
    }

    /// The cluster and the jobs being stopped for head `job`, if it preempted.
    #[must_use]
    pub fn preempting_for(&self, job: &JobId) -> Option<(&str, &[JobId])> {
        self.preempt
            .waiting_for
            .get(job)
            .map(|(k, victims)| (self.clusters[*k].name.as_str(), victims.as_slice()))
    }

    /// When the oldest preemption still counted against the budget leaves its
    /// window (`at + config.interval`, seconds), if any: a head refused for the
    /// budget may preempt from then on. The simulator wakes then, as the arbiter's
    /// periodic cycle would.
    #[must_use]
    pub fn budget_frees_at(&self, config: &PreemptionConfig) -> Option<Seconds> {
        self.preempt
            .spent
            .front()
            .map(|&(at, _)| at + config.interval)
    }

    /// Whether any outstanding job may be preempted now (marked, not being stopped).
    #[must_use]
    pub fn has_preemptible(&self) -> bool {
        self.preempt.by_start.iter().any(|set| !set.is_empty())
    }

    /// The preemptions to make at `now` (seconds), on the state the last cycle left
    /// (call it right after [`Ledger::cycle`]). The ledger marks each victim as being
    /// stopped (it is no longer a candidate, and its head preempts nothing more)
    /// but keeps counting what it holds until the caller ends it
    /// ([`Ledger::end`]) and queues it again ([`Ledger::requeue`]). In fair-share
    /// order of the heads; empty when no job is preemptible. Rules: the module
    /// doc of [`PreemptionConfig`].
    pub fn preempt(&mut self, now: Seconds, config: &PreemptionConfig) -> Vec<Preemption> {
        let now = self.clock(now);
        let mut out = Vec::new();
        if !self.has_preemptible() || !(now - config.after).is_finite() {
            return out;
        }
        while let Some(&(at, _)) = self.preempt.spent.front() {
            if now - at >= config.interval || !(now - at).is_finite() {
                self.preempt.spent.pop_front();
            } else {
                break;
            }
        }
        // Nothing preempted within the interval: one head's victims may exceed the
        // budget (else a budget below one job's share would never preempt at all).
        let mut fresh = self.preempt.spent.is_empty();
        let mut budget = config.budget - self.preempt.spent.iter().map(|s| s.1).sum::<f64>();
        if !fresh && (budget.is_nan() || budget <= 0.0) {
            return out;
        }
        let licenses = self.config.licenses;
        let pooled = self.clusters.iter().fold(Resources::ZERO, |sum, c| {
            sum + licenses::part(&c.outstanding, &licenses)
        });
        let mut rooms: Vec<(usize, Resources)> = self
            .by_cluster_name
            .values()
            .filter(|&&k| self.clusters[k].healthy)
            .map(|&k| {
                let c = &self.clusters[k];
                let free = c
                    .total
                    .saturating_sub((c.used_reported + c.unreported).max(c.outstanding));
                (k, licenses::with_free(free, &licenses, &pooled))
            })
            .collect();
        if rooms.is_empty() {
            return out;
        }
        // A head whose group is paused or at a limit does not preempt either.
        let blocked = self.group_blocked(now);
        let waiting: Vec<Uid> = (0..self.accounts.len() as Uid)
            .filter(|&uid| {
                let a = &self.accounts[uid as usize];
                let Some(head) = a.head() else { return false };
                let waited = now - head.submitted_at;
                a.listed()
                    && a.eligible()
                    && !blocked.contains(&uid)
                    && !waited.is_nan()
                    && waited > config.after
                    && !self.preempt.waiting_for.contains_key(&head.job_id)
                    && !self.preempt.claims.iter().any(|c| c.0 == head.job_id)
                    && !rooms
                        .iter()
                        .any(|(k, f)| self.admits(*k, head) && head.resources.fits_within(f))
            })
            .collect();
        // Past the interval's first preemption, a head whose victims would cost more
        // than the budget left preempts nothing: when that holds for every head, the
        // fair shares are not needed.
        if !fresh
            && waiting
                .iter()
                .all(|&uid| self.priced_out(uid, &rooms, budget))
        {
            return out;
        }
        let mut standing = self.standings();
        // Heads in the order the last cycle served in: hierarchical with groups.
        let place = self.served_order();
        let mut heads: Vec<(usize, super::Rank, Uid)> = waiting
            .into_iter()
            .filter(|&uid| {
                let s = &standing.users[uid as usize];
                !at_most(s.fair, dominant_share(&s.allocation, &self.capacity))
            })
            .map(|uid| {
                let at = place
                    .as_ref()
                    .and_then(|p| p.get(&*self.accounts[uid as usize].name).copied())
                    .unwrap_or(usize::MAX);
                (at, self.rank(uid, now), uid)
            })
            .collect();
        heads.sort();
        for (_, _, p) in heads {
            if !fresh && self.priced_out(p, &rooms, budget) {
                continue;
            }
            let Some(head) = self.accounts[p as usize].head().cloned() else {
                continue;
            };
            let mut best: Option<(usize, Vec<JobId>)> = None;
            for (i, (k, free)) in rooms.iter().enumerate() {
                if !self.admits(*k, &head) || !head.resources.fits_within(&self.clusters[*k].total)
                {
                    continue;
                }
                let ask = Ask {
                    now,
                    k: *k,
                    free: *free,
                    p,
                    head: &head,
                };
                if let Some(victims) = self.victims_on(config, &ask, &standing) {
                    if best.as_ref().is_none_or(|(_, b)| victims.len() < b.len()) {
                        best = Some((i, victims));
                    }
                }
            }
            let Some((i, victims)) = best else { continue };
            let cost: f64 = victims
                .iter()
                .map(|v| dominant_share(&self.jobs[v].resources, &self.capacity))
                .sum();
            if cost > budget && !fresh {
                continue;
            }
            fresh = false;
            budget -= cost;
            self.preempt.spent.push_back((now, cost));
            let k = rooms[i].0;
            let mut freed = Resources::ZERO;
            for v in &victims {
                let j = self.jobs.get_mut(v).expect("a victim is outstanding");
                j.stopping_for = Some(head.job_id);
                self.preempt.delist(j.cluster, j.started_at, *v);
                freed += j.resources;
                standing.take(j.uid, j.resources, &self.capacity);
                out.push(Preemption {
                    job_id: *v,
                    user: self.accounts[j.uid as usize].name.to_string(),
                    cluster: self.clusters[k].name.clone(),
                    resources: j.resources,
                    started_at: j.started_at,
                    preemptions: j.preemptions,
                    for_job: head.job_id,
                    for_user: self.accounts[p as usize].name.to_string(),
                });
            }
            // What is left once the head starts there is all later heads may count on.
            rooms[i].1 = (rooms[i].1 + freed).saturating_sub(head.resources);
            // The head's licenses leave the one pool every cluster draws on (its
            // victims' are counted free on their own cluster only: on the side of
            // caution).
            let taken = licenses::part(&head.resources, &licenses);
            for (j, room) in rooms.iter_mut().enumerate() {
                if j != i {
                    room.1 = room.1.saturating_sub(taken);
                }
            }
            standing.add(p, head.resources, &self.capacity);
            self.preempt.waiting_for.insert(head.job_id, (k, victims));
            self.preempt.claims.push((head.job_id, p, k));
            if budget.is_nan() || budget <= 0.0 {
                break;
            }
        }
        out
    }

    /// Gives each head that preempted the capacity its victims free, at the start
    /// of a cycle, before anything else is granted: while some of its victims are
    /// still being stopped, what the others have freed (up to its request) is held
    /// back from `run`'s room for its cluster; once all have ended, it is granted
    /// there if it fits. A claim goes when its head is granted, is no longer its
    /// user's effective head or eligible (a group on its path paused or at a limit
    /// included), its cluster is not healthy, or its victims
    /// have ended and it still does not fit (it may then preempt again). Without
    /// this the freed capacity went in fair-share order, where the victims' own
    /// users (now queued and holding less) could take it back at once. Returns what
    /// was held back, per cluster (index), for a cycle that does not use `run`'s
    /// rooms.
    pub(super) fn serve_claims(&mut self, run: &mut Run) -> Vec<(usize, Resources)> {
        let mut held = Vec::new();
        if self.preempt.claims.is_empty() {
            return held;
        }
        for (head, uid, k) in std::mem::take(&mut self.preempt.claims) {
            let a = &self.accounts[uid as usize];
            let Some(job) = a.head().filter(|j| j.job_id == head).cloned() else {
                continue;
            };
            // Nor if a group on its path is now paused or at a limit (other users
            // under it may have started jobs while its victims stopped).
            if !a.listed()
                || a.ineligibility(&job).is_some()
                || self.group_stops(uid, &job.resources, run.now)
            {
                continue;
            }
            let Some(r) = run.rooms.iter().position(|room| room.cluster == k) else {
                continue;
            };
            if let Some((_, victims)) = self.preempt.waiting_for.get(&head) {
                let stopping = victims
                    .iter()
                    .filter_map(|v| self.jobs.get(v))
                    .fold(Resources::ZERO, |acc, j| acc + j.resources);
                let room = &mut run.rooms[r];
                let before = room.free;
                room.free = room
                    .free
                    .saturating_sub(job.resources.saturating_sub(stopping));
                held.push((k, before.saturating_sub(room.free)));
                self.preempt.claims.push((head, uid, k));
                continue;
            }
            if job.resources.fits_within(&run.rooms[r].free) {
                self.grant(run, r, uid);
                // A participant of the filling like any other.
                run.taken.remove(&uid);
                self.reindex(uid, run.now);
            }
        }
        held
    }

    /// Whether user `uid`'s head lacks more on every one of `rooms` than `budget`
    /// may buy ([`over_budget`]); false without a head.
    fn priced_out(&self, uid: Uid, rooms: &[(usize, Resources)], budget: f64) -> bool {
        self.accounts[uid as usize]
            .head()
            .is_some_and(|head| over_budget(head, rooms, &self.capacity, budget))
    }

    /// The users in the order the last cycle left with groups (its hierarchical
    /// order, by name to place), `None` without groups (the flat rank is the order).
    fn served_order(&self) -> Option<std::collections::HashMap<&str, usize>> {
        if self.tree.is_empty() {
            return None;
        }
        let grouped = self.last.as_ref()?.grouped.as_ref()?;
        Some(
            grouped
                .order
                .iter()
                .enumerate()
                .map(|(i, o)| (o.user.as_str(), i))
                .collect(),
        )
    }

    /// Every user's allocation less its jobs being stopped, weight and fair share
    /// (zero for users without demand), and with groups every group's allocation.
    fn standings(&self) -> Standings {
        let users = self.user_standings();
        let (paths, groups) = if self.tree.is_empty() {
            (vec![Vec::new(); users.len()], Vec::new())
        } else {
            let paths: Vec<Vec<usize>> = self
                .accounts
                .iter()
                .map(|a| self.tree.path_of(a.settings.group.as_deref()))
                .collect();
            let mut groups = vec![Resources::ZERO; self.tree.len()];
            for (s, path) in users.iter().zip(&paths) {
                for &g in path {
                    groups[g] += s.allocation;
                }
            }
            (paths, groups)
        };
        Standings {
            users,
            paths,
            groups,
        }
    }

    /// [`Ledger::standings`]' users.
    fn user_standings(&self) -> Vec<Standing> {
        let mut standing: Vec<Standing> = self
            .accounts
            .iter()
            .map(|a| Standing {
                allocation: a.allocation,
                weight: a.settings.weight,
                fair: 0.0,
                above: false,
            })
            .collect();
        // The jobs being stopped are exactly the victims heads wait for.
        debug_assert_eq!(
            self.jobs
                .values()
                .filter(|j| j.stopping_for.is_some())
                .count(),
            self.preempt
                .waiting_for
                .values()
                .map(|(_, v)| v.len())
                .sum::<usize>(),
        );
        for (_, victims) in self.preempt.waiting_for.values() {
            for j in victims.iter().filter_map(|v| self.jobs.get(v)) {
                let s = &mut standing[j.uid as usize];
                s.allocation = s.allocation.saturating_sub(j.resources);
            }
        }
        let mut users = Vec::new();
        let mut weights = Vec::new();
        let mut demands = Vec::new();
        for (uid, a) in self.accounts.iter().enumerate() {
            let s = &standing[uid];
            let demand = dominant_share(&(s.allocation + a.queued), &self.capacity).min(1.0);
            let weight = if a.settings.weight.is_finite() && a.settings.weight > 0.0 {
                a.settings.weight
            } else {
                0.0
            };
            if demand > 0.0 && weight > 0.0 {
                users.push(uid);
                weights.push(weight);
                demands.push(demand);
            }
        }
        let mut fair = Vec::new();
        if self.tree.is_empty() {
            fair_shares(&weights, &demands, &mut fair);
        } else {
            // A user's fair share is its group's, divided (DESIGN §2, "Groups").
            let entries: Vec<(Vec<usize>, f64, f64)> = users
                .iter()
                .zip(weights.iter().zip(&demands))
                .map(|(&uid, (&w, &d))| {
                    let group = self.accounts[uid].settings.group.as_deref();
                    (self.tree.path_of(group), w, d)
                })
                .collect();
            fair = crate::policy::groups::fair_shares(&self.tree, &entries);
        }
        for (i, uid) in users.into_iter().enumerate() {
            standing[uid].fair = fair[i];
        }
        for s in &mut standing {
            s.refresh(&self.capacity);
        }
        standing
    }

    /// The jobs on cluster `k` that may be stopped at `now`: preemptible, not being
    /// stopped, run at least `min_runtime`, preempted fewer than `max_per_job` times;
    /// youngest first (the least work lost), equal starts by the larger id. A head's
    /// walk skips its own user's and (for the share rule) those of users not above
    /// their fair share.
    fn stoppable<'a>(
        &'a self,
        now: Seconds,
        config: &'a PreemptionConfig,
        k: usize,
    ) -> impl Iterator<Item = (JobId, &'a Job)> + 'a {
        self.preempt
            .by_start
            .get(k)
            .into_iter()
            .flat_map(|set| set.iter().rev())
            .filter_map(move |&(_, id)| {
                let j = self.jobs.get(&id)?;
                let ok = j.stopping_for.is_none()
                    && now - j.started_at >= config.min_runtime
                    && j.preemptions < config.max_per_job;
                ok.then_some((id, j))
            })
    }

    /// The victims on cluster `ask.k` (free capacity `ask.free`) that let the head
    /// fit, youngest first, or `None` if those allowed do not suffice: by the share
    /// rule, else (with `config.shortfall`) by the shortfall rule. The shortfall
    /// rule takes any other user's preemptible jobs, youngest first until the head
    /// fits, if what they hold (dominant shares, summed) is less than what the
    /// preemptor gains towards its fair share, `min(dominant_share(request), fair_p −
    /// dominant_share(A_p))`: each user's shortfall below its fair share grows by at
    /// most what it loses and the preemptor's falls by that gain, so the sum of the
    /// shortfalls (the fairness error of DESIGN §2 while contended) strictly falls
    /// with every such preemption, and two cannot undo each other.
    fn victims_on(
        &self,
        config: &PreemptionConfig,
        ask: &Ask<'_>,
        standing: &Standings,
    ) -> Option<Vec<JobId>> {
        let &Ask {
            now,
            k,
            free,
            p,
            head,
        } = ask;
        let capacity = &self.capacity;
        let sp = &standing.users[p as usize];
        // The share rule, where the paths of the preemptor and the victim's user
        // part (the users themselves without groups or in one group): the
        // preemptor's side after the preemption, its head included, must stay at or
        // below the victim's side after it, each divided by its weight, as the
        // order compares them.
        let allowed = self
            .stoppable(now, config, k)
            .filter(|(_, j)| j.uid != p && standing.users[j.uid as usize].above);
        let mut avail = free;
        let mut taken: Vec<(Uid, Resources)> = Vec::new();
        let mut victims = Vec::new();
        for (id, j) in allowed {
            let (v, held) = (j.uid, j.resources);
            let (a, b) = standing.parting(p, v);
            let taken_in = |node: Node| {
                taken
                    .iter()
                    .filter(|(u, _)| standing.holds(node, *u))
                    .fold(Resources::ZERO, |acc, (_, r)| acc + *r)
            };
            let side = |node: Node| match node {
                Node::User(u) => {
                    let s = &standing.users[u as usize];
                    (s.allocation, s.weight)
                }
                Node::Group(g) => (standing.groups[g], self.tree.groups()[g].weight),
            };
            let ((held_a, w_a), (held_b, w_b)) = (side(a), side(b));
            let preemptor_after = dominant_share(
                &(held_a.saturating_sub(taken_in(a)) + head.resources),
                capacity,
            ) / w_a;
            let victim_after =
                dominant_share(&held_b.saturating_sub(taken_in(b) + held), capacity) / w_b;
            if !at_most(preemptor_after, victim_after) {
                continue;
            }
            taken.push((v, held));
            victims.push(id);
            avail += held;
            if head.resources.fits_within(&avail) {
                return Some(victims);
            }
        }
        if !config.shortfall {
            return None;
        }
        // The shortfall rule.
        let gain = dominant_share(&head.resources, capacity)
            .min(sp.fair - dominant_share(&sp.allocation, capacity));
        let (taken, victims) = taking(
            free,
            head,
            self.stoppable(now, config, k)
                .filter(|(_, j)| j.uid != p)
                .map(|(id, j)| (id, j.resources)),
        )?;
        // Strictly less, beyond the policy's tolerance: equal (up to rounding) would
        // lower nothing.
        (!at_most(gain, dominant_share(&taken, capacity))).then_some(victims)
    }
}

/// Whether every set of victims that would let `head` fit on any of `rooms`
/// (cluster, free capacity) costs more than `budget` (a sum of dominant shares):
/// victims must hold at least what the head lacks there, `request − free` (up to the
/// fit's relative tolerance, [`FIT_TOLERANCE`]), and the sum of their dominant shares
/// is at least the dominant share of their sum. A cheap bound that spares the walk
/// over candidate victims (and the fair shares) for heads the budget would refuse.
pub(super) fn over_budget(
    head: &QueuedJob,
    rooms: &[(usize, Resources)],
    capacity: &Resources,
    budget: f64,
) -> bool {
    // Covers the fit's tolerance and the rounding of the victims' summed shares.
    let margin = 1e-6 * dominant_share(&head.resources, capacity) + 1e-12;
    rooms.iter().all(|(_, free)| {
        let lacks = head.resources.saturating_sub(*free);
        dominant_share(&lacks, capacity) - margin > budget
    })
}

/// The jobs of `candidates`, in their order, until `head` fits with `free`: what
/// they hold and their ids, or `None` if all of them do not let it fit.
fn taking(
    free: Resources,
    head: &QueuedJob,
    candidates: impl Iterator<Item = (JobId, Resources)>,
) -> Option<(Resources, Vec<JobId>)> {
    let mut avail = free;
    let mut taken = Resources::ZERO;
    let mut victims = Vec::new();
    for (id, held) in candidates {
        taken += held;
        victims.push(id);
        avail += held;
        if head.resources.fits_within(&avail) {
            return Some((taken, victims));
        }
    }
    None
}
