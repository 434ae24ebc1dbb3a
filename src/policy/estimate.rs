//! Estimated start of every waiting job (issue 48 §1, DESIGN §2 "Estimates"): the
//! policy run forward in virtual time from a copy of the live state, as the simulator
//! runs it.
//!
//! Pure, like the rest of the policy: no clock, no I/O.
//!
//! # The forward run
//!
//! From a [`Snapshot`] (users with their whole queues in queue order, clusters,
//! reservation, groups, the policy's knobs with the guard in force) and the jobs
//! outstanding at its instant ([`Outstanding`]), one [`Ledger`] is built, the
//! outstanding jobs held by their users on their clusters, and time moves forward
//! from the snapshot's `now`:
//!
//! 1. a [`Ledger::cycle`] at `t`; each job it grants **starts at `t`** (its
//!    estimate) and is expected to end at `t +` its expected run time (the caller's
//!    `run_time`, below);
//! 2. `t` moves to the next event: the earliest expected end of an outstanding job,
//!    or the instant the next waiting head passes the starvation guard (a cycle then
//!    may make the reservation, as the arbiter's guard wake-up does);
//! 3. every job expected to end by `t` ends ([`Ledger::end`]), and the cycle runs
//!    again; until every queued job has started, nothing is left to end, or the
//!    budget ([`Limits`]) is spent.
//!
//! So backfill, the reservation and its shadow, limits, groups, pools, weights, decayed
//! usage and the age term all act as they will if nothing else happens: no new job
//! is submitted, none is cancelled, the clusters keep their totals and other tenants
//! their load, and jobs run as long as expected. **Preemption** is not run forward.
//!
//! **Two run times.** The ledger's own expected end of a job (what the reservation's
//! shadow and backfill read) is the policy's `runtime_estimate` (live: `max_runtime_s`,
//! else `scheduler.default_max_runtime`), as in the arbiter; the instant a job is
//! taken to end in the forward run is the caller's expected run time (`max_runtime_s`,
//! else what the service learned, else `estimates.default_runtime`): the policy
//! decides as it will, the jobs end when they are expected to. An outstanding job
//! expected to have ended already ([`Outstanding::end`] before `now`) ends at `now`.
//!
//! Other tenants' load on a cluster stays as Ray last reported it, less this
//! service's outstanding jobs (all taken as counted by the report).
//!
//! A job that never starts in the forward run (its user or group paused, at a limit
//! that only its own running jobs ending would lift when none are, a job larger than
//! every cluster, no healthy cluster, or past the budget) gets no estimate; when the
//! budget stopped the run, [`Forward::not_before`] says from when on the jobs it did
//! not reach could start.
//!
//! # Position
//!
//! Each estimated job's **position** is its 1-based place in the order of estimated
//! starts (ties: the order the forward run granted them) among the jobs that could use
//! the same capacity: the jobs of the same pool, or every job that is not a pool's
//! (they share the Ray clusters).
//!
//! # Cost
//!
//! One ledger cycle per distinct end instant, each costing what it grants and what
//! changed (DESIGN §2, "Cost"); O(J log J) for J jobs queued and outstanding besides.
//! `cargo bench --bench estimate` measures it (BENCHMARKS.md, issue 48).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use serde::{Deserialize, Serialize};

use super::preview::Snapshot;
use super::{decay_usage, dominant_share, JobId, Ledger, QueuedJob, Resources, Seconds};

/// A job outstanding (DISPATCHING, PENDING, RUNNING) at the snapshot's instant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outstanding {
    /// The job's id.
    pub job_id: JobId,
    /// Its user.
    pub user: String,
    /// The cluster (or pool) it holds capacity on.
    pub cluster: String,
    /// What it is charged (cores, GPUs, bytes, custom).
    pub resources: Resources,
    /// When the ledger expects it to end (its grant plus its policy run-time
    /// estimate), seconds, if known: what the reservation's shadow reads.
    pub expected_end: Option<Seconds>,
    /// When it started (was granted), seconds.
    pub started_at: Seconds,
    /// When the forward run takes it to end, seconds (its start plus its expected run
    /// time); before the snapshot's `now`: at `now`.
    pub end: Seconds,
}

/// The forward run's budget.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Stop after this many ledger cycles (each at one instant).
    pub max_cycles: usize,
    /// Stop once virtual time passes `now + horizon` seconds (jobs not started by
    /// then get no estimate).
    pub horizon: Seconds,
    /// Stop as soon as every one of these jobs has started (the simulator's
    /// estimates at submit need no more); empty: run on.
    pub until: Vec<JobId>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_cycles: usize::MAX,
            horizon: f64::INFINITY,
            until: Vec::new(),
        }
    }
}

/// What keeps a job from ever starting as things stand, whatever else runs or ends
/// (the jobs the forward run can never start, module doc): its user paused or at a
/// running-jobs limit of 0, a group above it paused or at a limit of 0, the job alone
/// larger than its user's or such a group's `max_resources`, or larger than every
/// healthy cluster it may run on (`ledger::permanent_reason`). Built from a
/// snapshot, so that a job the forward run did not read (past `estimates.max_jobs`)
/// is judged as one it read: neither gets an `estimated_after`.
#[derive(Clone, Debug, Default)]
pub struct Bars {
    /// The healthy clusters and pools: name, whether a pool, total.
    totals: super::ledger::Totals,
    /// By user: barred whatever the job (paused, a limit of 0, or a group's), and the
    /// caps a job alone must fit (its own and its groups').
    users: HashMap<String, (bool, Vec<Resources>)>,
}

impl Bars {
    /// The bars of `snapshot`'s users, groups and clusters.
    #[must_use]
    pub fn of(snapshot: &Snapshot) -> Bars {
        Bars::new(&snapshot.users, &snapshot.groups, &snapshot.clusters)
    }

    /// The bars of `users` (their settings; queues unused), `groups` and `clusters`
    /// (none: no job is judged too large, as a replica that does not lead knows no
    /// cluster's total).
    #[must_use]
    pub fn new(
        users: &[super::UserView],
        groups: &[super::GroupView],
        clusters: &[super::ClusterView],
    ) -> Bars {
        let mut totals: super::ledger::Totals = clusters
            .iter()
            .filter(|c| c.healthy)
            .map(|c| (c.name.clone(), c.pool, c.total))
            .collect();
        totals.sort_by(|a, b| a.0.cmp(&b.0));
        let groups: HashMap<&str, &super::GroupView> =
            groups.iter().map(|g| (g.path.as_str(), g)).collect();
        let users = users
            .iter()
            .map(|u| {
                let mut barred = u.paused || u.max_running_jobs == 0;
                let mut caps: Vec<Resources> = u.max_resources.into_iter().collect();
                let mut path = u.group.as_deref();
                while let Some(p) = path {
                    if let Some(g) = groups.get(p) {
                        barred |= g.paused || g.max_running_jobs == 0;
                        caps.extend(g.max_resources);
                    }
                    path = super::groups::parent(p);
                }
                (u.user.clone(), (barred, caps))
            })
            .collect();
        Bars { totals, users }
    }

    /// Whether `job` of `user` can never start as things stand (type doc). A user the
    /// snapshot does not know is not barred.
    #[must_use]
    pub fn never(&self, user: &str, job: &QueuedJob) -> bool {
        let (barred, caps) = match self.users.get(user) {
            Some((barred, caps)) => (*barred, caps.as_slice()),
            None => (false, &[][..]),
        };
        barred
            || caps.iter().any(|cap| !job.resources.fits_cap(cap))
            || super::ledger::permanent_reason(job, None, std::iter::empty(), &self.totals)
                .is_some()
    }
}

/// One queued job's estimated start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The job.
    pub job_id: JobId,
    /// Its user.
    pub user: String,
    /// When it is expected to start, seconds (the snapshot's clock).
    pub start: Seconds,
    /// The cluster the forward run starts it on.
    pub cluster: String,
    /// 1-based place among the jobs that could use the same capacity (module doc).
    pub position: usize,
}

/// What the forward run found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Forward {
    /// The jobs that start, in order of start (then grant order).
    pub estimates: Vec<Estimate>,
    /// Ledger cycles run.
    pub cycles: usize,
    /// The budget stopped it before every job started or nothing was left to end.
    pub cut: bool,
    /// When the budget stopped it: an instant no job it did not start would start
    /// before (the last cycle's instant when the cycles ran out; the next event's,
    /// past the horizon, when the horizon stopped it). `None` when it ran to its end
    /// (or `until` stopped it): a job not started then never starts as things stand.
    pub not_before: Option<Seconds>,
}

impl Forward {
    /// The estimates by job id.
    #[must_use]
    pub fn by_job(&self) -> HashMap<JobId, &Estimate> {
        self.estimates.iter().map(|e| (e.job_id, e)).collect()
    }
}

/// The ledger cycles a forward run from `outstanding` jobs and `queued` QUEUED ones
/// makes at most when nothing stops it: one at the start, then one per distinct event
/// instant, each an expected end (at most one per job outstanding or started) or a
/// head passing the starvation guard (at most one per queued job), and one more for
/// the budget's check after the last cycle: `2 + outstanding + 2 × queued`. With it as
/// [`Limits::max_cycles`] the budget never cuts a run (property test
/// `an_uncut_run_starts_exactly_the_jobs_not_barred`).
#[must_use]
pub fn cycles_needed(outstanding: usize, queued: usize) -> usize {
    2usize
        .saturating_add(outstanding)
        .saturating_add(queued.saturating_mul(2))
}

/// Seconds with a total order (`f64::total_cmp`), for the heap of ends.
#[derive(Clone, Copy, Debug, PartialEq)]
struct OrdSeconds(Seconds);

impl Eq for OrdSeconds {}

impl PartialOrd for OrdSeconds {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdSeconds {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A pending end in the forward run: (time, sequence, job), earliest first.
type EndHeap = BinaryHeap<Reverse<(OrdSeconds, u64, JobId)>>;

/// Runs the policy forward from `snapshot` (every user's queue in queue order; the
/// knobs with the guard in force) with the jobs `outstanding` at its instant, and
/// returns each queued job's estimated start (module doc). `run_time(job)` is how
/// long `job` is expected to run once started, seconds (finite, at least 0; others
/// count as 0). `snapshot`'s users' allocations and outstanding counts are taken from
/// `outstanding`, not from the users.
#[must_use]
pub fn forward(
    snapshot: &Snapshot,
    outstanding: &[Outstanding],
    run_time: impl Fn(&QueuedJob) -> Seconds,
    limits: Limits,
) -> Forward {
    let now = snapshot.now;
    let ledger_config = super::PolicyConfig {
        // The guard given is the one in force; it stays so in the forward run.
        starvation_runs: 0.0,
        ..snapshot.config.clone()
    };
    // Capacity as the ledger will measure shares against it.
    let capacity = snapshot.capacity();
    // Users bring their usage to `now` with the share they hold, then hold nothing:
    // their outstanding jobs are added back one by one, so that ending one frees it.
    let users: Vec<super::UserView> = snapshot
        .users
        .iter()
        .map(|u| {
            let share = dominant_share(&u.allocation, &capacity);
            let usage = decay_usage(
                u.usage,
                u.usage_at,
                share,
                now,
                ledger_config.usage_half_life,
            );
            super::UserView {
                usage,
                usage_at: now,
                outstanding_jobs: 0,
                allocation: Resources::ZERO,
                ..u.clone()
            }
        })
        .collect();
    // Clusters keep other tenants' load; this service's jobs are added back. Other
    // tenants' load is what Ray reports in use less every job of ours, counted or not
    // by the report yet (the policy, more careful, counts a job the report may not
    // show yet on top of it; here that would hold its capacity for ever).
    let clusters: Vec<super::ClusterView> = snapshot
        .clusters
        .iter()
        .map(|c| super::ClusterView {
            used_reported: c.used_reported.saturating_sub(c.outstanding),
            outstanding: Resources::ZERO,
            unreported: Resources::ZERO,
            jobs: Vec::new(),
            ..c.clone()
        })
        .collect();
    let mut ledger = Ledger::from_views(
        ledger_config,
        now,
        &users,
        &clusters,
        snapshot.reservation.as_ref(),
    );
    ledger.set_groups(&snapshot.groups);
    let mut ends: EndHeap = BinaryHeap::new();
    let mut seq = 0u64;
    for o in outstanding {
        ledger.start(
            now,
            o.job_id,
            &o.user,
            &o.cluster,
            o.resources,
            o.expected_end,
        );
        let end = if o.end >= now { o.end } else { now };
        ends.push(Reverse((OrdSeconds(end), seq, o.job_id)));
        seq += 1;
    }
    // Each queued job's expected run time, by id (the ledger hands back grants only).
    let mut runs: HashMap<JobId, Seconds> = HashMap::new();
    let mut waiting = 0usize;
    for u in &snapshot.users {
        for j in &u.queue {
            let r = run_time(j);
            runs.insert(j.job_id, if r.is_finite() && r > 0.0 { r } else { 0.0 });
            waiting += 1;
        }
    }
    let mut out = Forward::default();
    let mut started: Vec<(Seconds, String, JobId, String)> = Vec::new();
    let mut t = now;
    let mut left: std::collections::HashSet<JobId> = limits.until.iter().copied().collect();
    let until = !left.is_empty();
    loop {
        let grants = ledger.cycle(t).grants;
        out.cycles += 1;
        for g in grants {
            let run = runs.get(&g.job_id).copied().unwrap_or(0.0);
            ends.push(Reverse((OrdSeconds(t + run), seq, g.job_id)));
            seq += 1;
            left.remove(&g.job_id);
            started.push((t, g.user, g.job_id, g.cluster));
        }
        if (until && left.is_empty()) || started.len() >= waiting {
            break;
        }
        if out.cycles >= limits.max_cycles {
            out.cut = true;
            out.not_before = Some(t);
            break;
        }
        let next_end = ends.peek().map(|Reverse((at, _, _))| at.0);
        let trip = ledger.guard_trips_at().filter(|&at| at > t);
        let next = match (next_end, trip) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(x) => x,
                None => break,
            },
        };
        if next - now > limits.horizon {
            out.cut = true;
            out.not_before = Some(next);
            break;
        }
        // Time never stands still: an end "at" `t` was taken this round.
        t = if next > t { next } else { t };
        while let Some(Reverse((at, _, id))) = ends.peek().copied() {
            if at.0 > t {
                break;
            }
            ends.pop();
            ledger.end(t, id);
        }
    }
    // Positions: per place (a pool's name, or the Ray clusters), in start order.
    let place_of: HashMap<JobId, Option<&str>> = snapshot
        .users
        .iter()
        .flat_map(|u| u.queue.iter().map(|j| (j.job_id, j.pool.as_deref())))
        .collect();
    let mut counts: HashMap<Option<&str>, usize> = HashMap::new();
    // Grants come in time order already (one cycle per instant, instants rising).
    out.estimates = started
        .into_iter()
        .map(|(start, user, job_id, cluster)| {
            let place = place_of.get(&job_id).copied().flatten();
            let n = counts.entry(place).or_insert(0);
            *n += 1;
            Estimate {
                job_id,
                user,
                start,
                cluster,
                position: *n,
            }
        })
        .collect();
    out
}

/// Where a job's expected run time comes from (`estimate_basis` in the API).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// The job's own `max_runtime_s`.
    MaxRuntime,
    /// What the service learned of its user's and entrypoint's past runs
    /// ([`RunTimes`]).
    Learned,
    /// The configured default (`estimates.default_runtime`).
    Default,
}

impl Basis {
    /// The name the API shows: `max_runtime`, `learned` or `default`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::MaxRuntime => "max_runtime",
            Basis::Learned => "learned",
            Basis::Default => "default",
        }
    }
}

/// A job's expected run time, seconds, and where it comes from: `max_runtime` (its
/// `max_runtime_s`) where given, else `learned` (its user's and entrypoint's decayed
/// median), else `default`.
#[must_use]
pub fn expected_run(
    max_runtime: Option<Seconds>,
    learned: Option<Seconds>,
    default: Seconds,
) -> (Seconds, Basis) {
    match (max_runtime, learned) {
        (Some(m), _) if m.is_finite() && m >= 0.0 => (m, Basis::MaxRuntime),
        (_, Some(l)) if l.is_finite() && l >= 0.0 => (l, Basis::Learned),
        _ => (default, Basis::Default),
    }
}

/// Run times kept per (user, entrypoint): the most recent ones.
pub const LEARNED_RUNS: usize = 32;

/// Half-life of a run's weight in the decayed median, in runs: the run `i` runs
/// before the latest weighs `2^(−i / LEARNED_HALF_LIFE)`.
pub const LEARNED_HALF_LIFE: f64 = 8.0;

/// What the service has learned of how long jobs run, per user and entrypoint: the
/// **decayed median** of the last [`LEARNED_RUNS`] run times (from start to end) of
/// each pair, the run `i` runs back weighing `2^(−i/8)`: the smallest run time whose
/// weight, with every shorter one's, is at least half the total. A median, because run
/// times are heavy-tailed (one 3-day run must not move the estimate of a
/// 30-second entrypoint far); decayed, so that a changed workload shows within a few
/// runs.
#[derive(Clone, Debug, Default)]
pub struct RunTimes {
    by: HashMap<(String, String), std::collections::VecDeque<Seconds>>,
}

impl RunTimes {
    /// Counts a run of `entrypoint` by `user` that lasted `run` seconds (not a
    /// number, or below 0: ignored).
    pub fn observe(&mut self, user: &str, entrypoint: &str, run: Seconds) {
        if !(run.is_finite() && run >= 0.0) {
            return;
        }
        let runs = self
            .by
            .entry((user.to_owned(), entrypoint.to_owned()))
            .or_default();
        if runs.len() == LEARNED_RUNS {
            runs.pop_front();
        }
        runs.push_back(run);
    }

    /// The decayed median run time of `entrypoint` by `user`, seconds; `None` before
    /// any run of it ended.
    #[must_use]
    pub fn median(&self, user: &str, entrypoint: &str) -> Option<Seconds> {
        let runs = self.by.get(&(user.to_owned(), entrypoint.to_owned()))?;
        decayed_median(runs.iter().copied())
    }

    /// Pairs known.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by.len()
    }

    /// Whether no run was counted.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by.is_empty()
    }
}

/// The weighted median of `runs`, oldest first, the latest weighing 1 and each earlier
/// one `2^(−1/LEARNED_HALF_LIFE)` times the next ([`RunTimes`]).
fn decayed_median(runs: impl DoubleEndedIterator<Item = Seconds>) -> Option<Seconds> {
    let step = (-1.0 / LEARNED_HALF_LIFE).exp2();
    let mut weighted: Vec<(Seconds, f64)> = Vec::new();
    let mut w = 1.0;
    for r in runs.rev() {
        weighted.push((r, w));
        w *= step;
    }
    if weighted.is_empty() {
        return None;
    }
    weighted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: f64 = weighted.iter().map(|x| x.1).sum();
    let mut sum = 0.0;
    for (r, w) in &weighted {
        sum += w;
        if sum >= total / 2.0 {
            return Some(*r);
        }
    }
    weighted.last().map(|x| x.0)
}

#[cfg(test)]
mod tests;
