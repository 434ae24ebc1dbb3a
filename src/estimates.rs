//! The estimated start of every waiting job, kept fresh off the arbiter's cycle
//! (issue 48 §1, DESIGN §2 "Estimates").
//!
//! A task beside the leader's actors wakes every `estimates.refresh` (5 s by default),
//! and, when the queues or the outstanding jobs changed since its last run:
//!
//! 1. asks the arbiter for a copy of what the policy holds **without the windows**
//!    (`actors::arbiter::GetEstimateInput`: users' settings, allocations and
//!    decayed usage, clusters, reservation, groups, the knobs with the guard in force,
//!    the outstanding jobs): O(users + outstanding), the only part that runs on the
//!    arbiter;
//! 2. reads every QUEUED and outstanding job from the database (the queues whole, not
//!    only the windows the arbiter holds; entrypoints; start times), and the runs that
//!    SUCCEEDED since its last read, which it learns run times from
//!    ([`RunTimes`]: per user and entrypoint);
//! 3. runs the policy forward ([`crate::policy::estimate::forward`]) on a blocking
//!    thread, each job expected to run its `max_runtime_s`, else its user's and
//!    entrypoint's decayed median, else `estimates.default_runtime`;
//! 4. replaces the table the API reads ([`Estimates`]);
//! 5. on PostgreSQL (where other replicas can follow), writes the first [`PERSISTED`]
//!    estimates, in order of estimated start, to `job_estimates` in one transaction,
//!    fenced by the leader's term ([`crate::store::save_estimates`]).
//!
//! Changes within one interval are thus taken together by one forward run, and the
//! API never waits for one. The next refresh waits at least ten times as long as the
//! last took (the write included), so refreshing costs at most a tenth of one core at
//! any queue length.
//!
//! A follower keeps its own table ([`Estimates::follow`]): every `estimates.refresh` it
//! reads the instant of the run `job_estimates` holds and, when it moved, every row;
//! so a follower answers as the leader did at its last refresh, a refresh (and the
//! read) later; for the jobs past the first [`PERSISTED`] it says only from when on
//! they could start (the last written start).
//!
//! A job the forward run stopped before reaching (horizon, cycle budget) has no
//! estimate, and [`Estimates::not_reached`] gives the instant it starts no sooner than
//! (`estimated_after` in the API).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use chrono::{DateTime, TimeZone, Utc};
use entity::JobStatus;
use sea_orm::ConnectionTrait;

use crate::config::Settings;
use crate::policy::estimate::{self, expected_run, Basis, Limits, RunTimes};
use crate::policy::{JobId, QueuedJob, Seconds, UserView};
use crate::store::Db;

/// One QUEUED job's estimate, as the API shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobEstimate {
    /// When it is expected to start (`None` only for an instant no time can show). A
    /// job the forward run does not start (paused user or group, a limit nothing
    /// running will lift, larger than every cluster, beyond the horizon or the cycle
    /// budget) has no entry at all.
    pub start: Option<DateTime<Utc>>,
    /// 1-based place among the waiting jobs that could use the same capacity (a
    /// pool's, or the Ray clusters'), in order of estimated start; `None` with `start`.
    pub position: Option<u64>,
    /// Where its expected run time comes from.
    pub basis: Basis,
}

/// The table the API reads: the estimate of every QUEUED job the last forward run
/// started.
#[derive(Clone, Default)]
pub struct Estimates(Arc<RwLock<Table>>);

#[derive(Default)]
struct Table {
    at: Option<DateTime<Utc>>,
    jobs: HashMap<JobId, JobEstimate>,
    /// The run stopped early (`estimates.horizon` or [`MAX_CYCLES`]): the jobs it did
    /// not reach start no sooner than this.
    not_before: Option<DateTime<Utc>>,
    /// What keeps a job from ever starting, as of the run's state: such a job has no
    /// `not_before` either (a follower's table has none: it does not know the state).
    bars: Option<estimate::Bars>,
    /// The users whose queues the read cut at `estimates.max_jobs` ([`per_user_cap`]).
    cut: Cut,
}

/// The users whose queues a refresh read only the first `k` jobs of: those jobs, and
/// by user the latest estimated start among them, which the user's jobs past the cut
/// (behind them in its queue) start no sooner than; the run's instant for a user none
/// of whose jobs read has an estimate (a fresh tester found a job behind a barred one
/// shown as if it could never start, and it started).
#[derive(Default)]
struct Cut {
    read: HashSet<JobId>,
    last: HashMap<String, DateTime<Utc>>,
}

impl Cut {
    /// The cut of `rows` (the QUEUED and outstanding jobs read), for `users`, given the
    /// run's estimates.
    fn of(
        rows: &[entity::job::Model],
        users: &HashSet<String>,
        jobs: &HashMap<JobId, JobEstimate>,
        at: DateTime<Utc>,
    ) -> Cut {
        let mut cut = Cut::default();
        if users.is_empty() {
            return cut;
        }
        for r in rows {
            if r.status != JobStatus::Queued || !users.contains(&r.user_id) {
                continue;
            }
            cut.read.insert(r.id);
            let start = jobs.get(&r.id).and_then(|e| e.start).unwrap_or(at);
            let last = cut.last.entry(r.user_id.clone()).or_insert(start);
            *last = (*last).max(start);
        }
        cut
    }
}

impl Estimates {
    /// The estimate of `job` at the last forward run, if it was QUEUED then.
    #[must_use]
    pub fn get(&self, job: &JobId) -> Option<JobEstimate> {
        self.0.read().ok()?.jobs.get(job).cloned()
    }

    /// When the last forward run's state was taken; `None` before the first.
    #[must_use]
    pub fn computed_at(&self) -> Option<DateTime<Utc>> {
        self.0.read().ok()?.at
    }

    /// Whether the last forward run's state keeps `job` of `user` from ever starting
    /// ([`estimate::Bars::never`]: a pause, a limit of 0, a cap it alone exceeds, no
    /// healthy cluster large enough); `false` before the first run.
    #[must_use]
    pub fn never(&self, user: &str, job: &QueuedJob) -> bool {
        self.0
            .read()
            .ok()
            .and_then(|t| t.bars.as_ref().map(|b| b.never(user, job)))
            .unwrap_or(false)
    }

    /// For a QUEUED job without an estimate, `job` of `user` submitted at
    /// `submitted_at`, queued by the run's instant and not kept from ever starting
    /// ([`estimate::Bars`]: paused, a limit of 0, larger than every cluster): the
    /// instant it starts no sooner than, which is where the last forward run stopped
    /// when it stopped early (horizon), else for a job past the read's cut at
    /// `estimates.max_jobs` (not read, behind its user's first jobs) the latest
    /// estimated start of its user's jobs read; else `None` (it cannot start as things
    /// stand, or the run did not have it).
    #[must_use]
    pub fn not_reached(
        &self,
        user: &str,
        job: &QueuedJob,
        submitted_at: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let t = self.0.read().ok()?;
        let at = t.at?;
        if submitted_at > at || t.bars.as_ref().is_some_and(|b| b.never(user, job)) {
            return None;
        }
        t.not_before.or_else(|| {
            (!t.cut.read.contains(&job.job_id))
                .then(|| t.cut.last.get(user).copied())
                .flatten()
        })
    }

    fn replace(
        &self,
        at: Option<DateTime<Utc>>,
        jobs: HashMap<JobId, JobEstimate>,
        not_before: Option<DateTime<Utc>>,
        bars: Option<estimate::Bars>,
        cut: Cut,
    ) {
        if let Ok(mut t) = self.0.write() {
            *t = Table {
                at,
                jobs,
                not_before,
                bars,
                cut,
            };
        }
    }

    /// A table a follower keeps from `job_estimates` (module doc): a task on the
    /// current runtime reads it every `estimates.refresh` while this replica does not
    /// lead (`leads` says whether it does: the leader's table is its own), and stops
    /// once every copy of the table is dropped. Estimates off: an empty table, no task.
    pub fn follow(db: Db, settings: &Settings, leads: impl Fn() -> bool + Send + 'static) -> Self {
        let table = Estimates::default();
        if !settings.estimates.enabled {
            return table;
        }
        let weak = Arc::downgrade(&table.0);
        let every = settings.estimates.refresh;
        let settings_default_max_running = settings.scheduler.default_max_running_jobs;
        tokio::spawn(async move {
            // The run last read (`None`: nothing read, or this replica led since).
            let mut read: Option<i64> = None;
            loop {
                tokio::time::sleep(every).await;
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                let table = Estimates(shared);
                if leads() {
                    read = None;
                    continue;
                }
                // The bars as stored, read at every tick (a fresh tester's findings: a
                // follower marked a paused user's job "after the horizon", and its Ray
                // job list said such a job waited for its turn); clusters' totals are
                // not stored, so a job too large for every cluster is not judged here.
                // One read of the users and groups a refresh, O(users).
                let bars = match stored_bars(&db, &settings_default_max_running).await {
                    Ok(bars) => Some(bars),
                    Err(e) => {
                        tracing::warn!(error = %e, "estimates: cannot read the users and groups");
                        None
                    }
                };
                match load(&db, read).await {
                    Ok(None) => {
                        if let (Some(bars), Ok(mut t)) = (bars, table.0.write()) {
                            t.bars = Some(bars);
                        }
                    }
                    Ok(Some((at, jobs, not_before))) => {
                        read = at;
                        let time = |us: i64| Utc.timestamp_micros(us).single();
                        table.replace(
                            at.and_then(time),
                            jobs,
                            not_before.and_then(time),
                            bars,
                            Cut::default(),
                        );
                    }
                    Err(e) => tracing::warn!(error = %e, "estimates: cannot read the leader's"),
                }
            }
        });
        table
    }
}

/// What a follower reads: the run's instant (Unix microseconds; `None` when the table
/// is empty), its estimates, and when it stopped early, the instant the jobs it did
/// not reach start no sooner than (Unix microseconds).
type Loaded = (Option<i64>, HashMap<JobId, JobEstimate>, Option<i64>);

/// The run `job_estimates` holds, unless it is the run `read` (`Ok(None)`).
/// The bars of the stored users and groups (no clusters: not stored), for a replica
/// that does not lead. `default_max_running`: `scheduler.default_max_running_jobs`.
pub async fn stored_bars(
    db: &Db,
    default_max_running: &u32,
) -> Result<estimate::Bars, sea_orm::DbErr> {
    let users: Vec<UserView> = crate::store::list_users(db)
        .await?
        .iter()
        .map(|u| UserView {
            user: u.id.clone(),
            weight: u.weight,
            paused: u.paused,
            max_running_jobs: u
                .max_running_jobs
                .map_or(*default_max_running, |v| v.max(0) as u32),
            max_resources: u.max_resources.as_ref().map(crate::store::resource_cap),
            outstanding_jobs: 0,
            allocation: crate::policy::Resources::ZERO,
            usage: 0.0,
            usage_at: 0.0,
            group: crate::store::group_of(u).map(str::to_owned),
            queue: Vec::new(),
        })
        .collect();
    let groups: Vec<crate::policy::GroupView> = crate::store::list_groups(db)
        .await?
        .iter()
        .map(crate::store::group_view)
        .collect();
    Ok(estimate::Bars::new(&users, &groups, &[]))
}

async fn load(db: &Db, read: Option<i64>) -> Result<Option<Loaded>, sea_orm::DbErr> {
    let at = crate::store::estimates_computed_at(db).await?;
    if at.is_some() && at == read {
        return Ok(None);
    }
    let rows = match at {
        Some(_) => crate::store::load_estimates(db).await?,
        None => Vec::new(),
    };
    let not_before = rows.iter().find_map(|r| r.not_before_us);
    let jobs = rows
        .into_iter()
        .map(|r| {
            let basis = match r.basis.as_str() {
                "max_runtime" => Basis::MaxRuntime,
                "learned" => Basis::Learned,
                _ => Basis::Default,
            };
            (
                r.job_id,
                JobEstimate {
                    start: Utc.timestamp_micros(r.start_us).single(),
                    position: u64::try_from(r.position).ok(),
                    basis,
                },
            )
        })
        .collect();
    Ok(Some((at, jobs, not_before)))
}

/// The estimates a follower reads, as the leader writes them: the first `max` of
/// `jobs` that have a start, in order of start (then position, then id), each with
/// the run's `not_before` (Unix microseconds), or when some are left out, the last
/// written one's start (the jobs left out start no sooner).
#[must_use]
pub fn to_store(
    jobs: &HashMap<JobId, JobEstimate>,
    max: usize,
    not_before: Option<i64>,
) -> Vec<crate::store::StoredEstimate> {
    let mut out: Vec<crate::store::StoredEstimate> = jobs
        .iter()
        .filter_map(|(id, e)| {
            Some(crate::store::StoredEstimate {
                job_id: *id,
                start_us: e.start?.timestamp_micros(),
                position: i64::try_from(e.position?).ok()?,
                basis: e.basis.as_str().to_owned(),
                not_before_us: not_before,
            })
        })
        .collect();
    let key = |r: &crate::store::StoredEstimate| (r.start_us, r.position, r.job_id);
    let left_out = out.len() > max;
    if left_out {
        out.select_nth_unstable_by_key(max, key);
        out.truncate(max);
    }
    out.sort_unstable_by_key(key);
    if left_out {
        let last = out.last().map(|r| r.start_us);
        for r in &mut out {
            r.not_before_us = last;
        }
    }
    out
}

/// Most ledger cycles one forward run makes, as a last resort: a run that reads
/// `jobs` QUEUED and outstanding jobs needs at most [`estimate::cycles_needed`] of them,
/// which `estimates.max_jobs` bounds (the refresh's cost is that cut's, DESIGN §2
/// "Estimates"); this caps a run whose reads were not cut at all (`max_jobs` at its
/// largest).
pub const MAX_CYCLES: usize = 1_000_000;

/// Most estimates one refresh writes for followers (`job_estimates`): the first in
/// order of estimated start. Bounds the write and each follower's read.
pub const PERSISTED: usize = 100_000;

/// A refresh waits at least this many times as long as the last one took.
const BUSY_SHARE: u32 = 10;

/// How many succeeded runs one read learns from at most (the rest the next time).
const LEARN_BATCH: u64 = 10_000;

/// How far back run times are learned from at start-up.
const LEARN_FROM_DAYS: i64 = 30;

/// Seconds since the epoch of a time.
fn secs(t: DateTime<Utc>) -> Seconds {
    t.timestamp_micros() as f64 / 1e6
}

/// The time of seconds since the epoch.
fn time(s: Seconds) -> Option<DateTime<Utc>> {
    if !s.is_finite() {
        return None;
    }
    Utc.timestamp_micros((s * 1e6).round() as i64).single()
}

/// What the arbiter hands the forward run; `Err(())`: the arbiter has stopped.
pub(crate) type Input = Result<
    Option<(
        crate::policy::preview::Snapshot,
        Vec<crate::policy::estimate::Outstanding>,
    )>,
    (),
>;

/// Runs the refresh loop until `input` says the arbiter has stopped (this replica no
/// longer leads). `input` asks the arbiter (`actors::arbiter::GetEstimateInput`).
/// On PostgreSQL each refresh also writes `job_estimates` for followers, under `fence`.
pub(crate) async fn run<F, Fut>(
    settings: Arc<Settings>,
    db: Db,
    fence: crate::store::Fence,
    input: F,
    table: Estimates,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Input>,
{
    let cfg = settings.estimates.clone();
    if !cfg.enabled {
        return;
    }
    let mut learned = RunTimes::default();
    let mut learned_to = Utc::now() - chrono::Duration::days(LEARN_FROM_DAYS);
    // What the last run saw: QUEUED and outstanding ids with their statuses, and the
    // run times learned (unchanged: no new run is needed).
    let mut last_seen: Option<(u64, usize)> = None;
    // The earliest start the last run estimated: once it has passed with the job still
    // waiting, the estimates are stale however little else changed (a fresh tester's
    // finding: a start in the past was shown for as long as nothing was submitted).
    let mut due: Option<DateTime<Utc>> = None;
    // How long the last refresh took (reads and forward run): the next waits at least
    // ten times that, so refreshes take at most a tenth of one core however much is
    // queued.
    let mut took = std::time::Duration::ZERO;
    loop {
        tokio::time::sleep(cfg.refresh.max(took * BUSY_SHARE)).await;
        let began = std::time::Instant::now();
        // Learn the runs that ended since the last read.
        let mut learned_now = 0usize;
        loop {
            match crate::store::succeeded_since(&db, learned_to, LEARN_BATCH).await {
                Ok(rows) => {
                    let n = rows.len();
                    for (user, entrypoint, started, finished) in rows {
                        learned.observe(&user, &entrypoint, secs(finished) - secs(started));
                        learned_to = learned_to.max(finished);
                    }
                    learned_now += n;
                    if (n as u64) < LEARN_BATCH {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "estimates: cannot read finished jobs");
                    break;
                }
            }
        }
        let (snapshot, outstanding) = match input().await {
            Err(()) => return,
            Ok(None) => continue,
            Ok(Some(x)) => x,
        };
        // The queues' lengths first: past `max_jobs` each user's queue is cut to its
        // first `k` jobs (config doc), so a refresh holds at most that many.
        let counts = match crate::store::queued_per_user(&db).await {
            Ok(counts) => counts,
            Err(e) => {
                tracing::warn!(error = %e, "estimates: cannot read the queues' lengths");
                continue;
            }
        };
        let cut = per_user_cap(counts.iter().map(|c| c.1), cfg.max_jobs);
        let rows = match crate::store::waiting_and_outstanding(&db, cut).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "estimates: cannot read the queues");
                continue;
            }
        };
        // Unchanged since the last run (same jobs in the same states, the same queue
        // lengths, the same users', groups' and clusters' settings, nothing learned,
        // same allocations) and no estimated start passed: nothing to do.
        let fingerprint = fingerprint(&rows, &outstanding) ^ {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            counts.hash(&mut h);
            settings_digest(&snapshot).hash(&mut h);
            h.finish()
        };
        let passed = due.is_some_and(|t| t <= Utc::now());
        if learned_now == 0 && !passed && last_seen == Some((fingerprint, rows.len())) {
            continue;
        }
        last_seen = Some((fingerprint, rows.len()));
        let params = Params {
            default_runtime: cfg.default_runtime.as_secs_f64(),
            horizon: cfg.horizon.as_secs_f64(),
            default_max_running: settings.scheduler.default_max_running_jobs,
            default_max_runtime: settings.scheduler.default_max_runtime.as_secs_f64(),
        };
        let at = time(snapshot.now).unwrap_or_else(Utc::now);
        let snapshot_learned = learned.clone();
        let started = std::time::Instant::now();
        let persist = db.get_database_backend() == sea_orm::DatabaseBackend::Postgres;
        let bars = estimate::Bars::of(&snapshot);
        let cut_users: HashSet<String> = counts
            .iter()
            .filter(|(_, n)| cut.is_some_and(|k| *n > k))
            .map(|(u, _)| u.clone())
            .collect();
        let result = tokio::task::spawn_blocking(move || {
            let (jobs, not_before) =
                compute(snapshot, outstanding, &rows, &snapshot_learned, &params);
            let not_before = not_before.and_then(time);
            let stored = if persist {
                to_store(&jobs, PERSISTED, not_before.map(|t| t.timestamp_micros()))
            } else {
                Vec::new()
            };
            let cut = Cut::of(&rows, &cut_users, &jobs, at);
            (jobs, stored, not_before, cut)
        })
        .await;
        match result {
            Ok((jobs, stored, not_before, cut)) => {
                tracing::debug!(
                    jobs = jobs.len(),
                    seconds = started.elapsed().as_secs_f64(),
                    "estimates refreshed"
                );
                due = jobs.values().filter_map(|e| e.start).min();
                table.replace(Some(at), jobs, not_before, Some(bars), cut);
                if persist {
                    let written =
                        crate::store::save_estimates(&db, &fence, at.timestamp_micros(), &stored)
                            .await;
                    match written {
                        Ok(()) => {}
                        // Another replica leads: its own task writes.
                        Err(e) if crate::store::is_fenced(&e) => return,
                        Err(e) => {
                            tracing::warn!(error = %e, "estimates: cannot write them for followers");
                        }
                    }
                }
                took = began.elapsed();
            }
            Err(e) => tracing::error!(error = %e, "estimates: the forward run failed"),
        }
    }
}

/// The first-`k` cut of every user's queue that keeps the jobs a forward run reads
/// within `max_jobs`: `None` when every queued job fits (`Σ queued ≤ max_jobs`), else
/// `Some(k)`, the largest `k` with `Σ_u min(queued_u, k) ≤ max_jobs`, at least 1 (so
/// each user's head is estimated however many users there are). `queued`: each
/// user's QUEUED count.
#[must_use]
pub fn per_user_cap(queued: impl Iterator<Item = u64> + Clone, max_jobs: u64) -> Option<u64> {
    let total: u64 = queued.clone().fold(0, u64::saturating_add);
    if total <= max_jobs {
        return None;
    }
    let held = |k: u64| {
        queued
            .clone()
            .map(|n| n.min(k))
            .fold(0, u64::saturating_add)
    };
    // The largest k in [1, longest] with held(k) ≤ max_jobs; held grows with k.
    let (mut lo, mut hi) = (1u64, queued.clone().max().unwrap_or(1));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if held(mid) <= max_jobs {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

/// What of the arbiter's copy changes estimates besides the jobs: each user's weight,
/// pause, limits and group, each group (its settings), each cluster's health and
/// capacity (a fresh tester's finding: a pause, a weight, a limit or a cluster that
/// shrank left the estimates as they were until the next submit). Allocations and
/// usage are not in it: they move with the jobs, which the fingerprint has.
fn settings_digest(snapshot: &crate::policy::preview::Snapshot) -> String {
    let users: Vec<_> = snapshot
        .users
        .iter()
        .map(|u| {
            (
                &u.user,
                u.weight.to_bits(),
                u.paused,
                u.max_running_jobs,
                format!("{:?}", u.max_resources),
                &u.group,
            )
        })
        .collect();
    let clusters: Vec<_> = snapshot
        .clusters
        .iter()
        .map(|c| (&c.name, c.healthy, format!("{:?}", c.total)))
        .collect();
    format!("{users:?}{clusters:?}{:?}", snapshot.groups)
}

/// A cheap digest of the jobs' ids and states and the outstanding jobs' charges.
fn fingerprint(rows: &[entity::job::Model], outstanding: &[estimate::Outstanding]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for r in rows {
        r.id.hash(&mut h);
        r.status.as_str().hash(&mut h);
        // A job granted again in the same state between two reads (a pool job whose
        // lease lapsed, QUEUED again with attempt + 1, and admitted anew) starts a new
        // run: its end moves, and with it the estimates behind it (a fresh tester saw
        // them stale by the time between the two grants).
        r.attempt.hash(&mut h);
    }
    for o in outstanding {
        o.job_id.hash(&mut h);
        for x in o.resources.components() {
            x.to_bits().hash(&mut h);
        }
    }
    h.finish()
}

/// What [`compute`] takes from the configuration.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// `estimates.default_runtime`, seconds.
    pub default_runtime: Seconds,
    /// `estimates.horizon`, seconds.
    pub horizon: Seconds,
    /// `scheduler.default_max_running_jobs` (a user the arbiter does not know yet).
    pub default_max_running: u32,
    /// `scheduler.default_max_runtime`, seconds: the policy's run-time estimate of a
    /// job without `max_runtime_s`, as the arbiter fills it in.
    pub default_max_runtime: Seconds,
}

/// The forward run on the arbiter's copy and the database's queues: the estimate of
/// every QUEUED job the run starts (pure; module doc; a job it does not start has no
/// entry) and, when the budget stopped it, the instant the others start no sooner
/// than (seconds; [`estimate::Forward::not_before`]).
#[must_use]
pub fn compute(
    mut snapshot: crate::policy::preview::Snapshot,
    mut outstanding: Vec<estimate::Outstanding>,
    rows: &[entity::job::Model],
    learned: &RunTimes,
    params: &Params,
) -> (HashMap<JobId, JobEstimate>, Option<Seconds>) {
    let default_runtime = params.default_runtime;
    let granted: HashSet<JobId> = outstanding.iter().map(|o| o.job_id).collect();
    // Each job's expected run time and its basis.
    let mut runs: HashMap<JobId, (Seconds, Basis)> = HashMap::with_capacity(rows.len());
    let mut queues: BTreeMap<&str, Vec<QueuedJob>> = BTreeMap::new();
    let mut started_at: HashMap<JobId, Seconds> = HashMap::new();
    for r in rows {
        let run = expected_run(
            r.max_runtime_s.map(|s| s as f64),
            learned.median(&r.user_id, &r.entrypoint),
            default_runtime,
        );
        runs.insert(r.id, run);
        if r.status == JobStatus::Queued {
            // Granted since the database was read: outstanding in the copy.
            if !granted.contains(&r.id) {
                let mut q = crate::store::summary(r);
                q.runtime_estimate.get_or_insert(params.default_max_runtime);
                queues.entry(&r.user_id).or_default().push(q);
            }
        } else if let Some(t) = r.started_at.or(r.dispatched_at) {
            started_at.insert(r.id, secs(t));
        }
    }
    // Outstanding jobs end at their start (as the database has it) plus their
    // expected run time.
    for o in &mut outstanding {
        let run = runs.get(&o.job_id).map_or(default_runtime, |r| r.0);
        let from = started_at.get(&o.job_id).copied().unwrap_or(o.started_at);
        o.end = from + run;
    }
    let mut by_user: HashMap<String, usize> = HashMap::new();
    for (i, u) in snapshot.users.iter().enumerate() {
        by_user.insert(u.user.clone(), i);
    }
    let waiting = queues.values().map(Vec::len).sum();
    for (user, queue) in queues {
        match by_user.get(user) {
            Some(&i) => snapshot.users[i].queue = queue,
            None => snapshot.users.push(UserView {
                user: user.to_owned(),
                weight: crate::store::DEFAULT_WEIGHT,
                paused: false,
                max_running_jobs: params.default_max_running,
                max_resources: None,
                outstanding_jobs: 0,
                allocation: crate::policy::Resources::ZERO,
                usage: 0.0,
                usage_at: snapshot.now,
                group: None,
                queue,
            }),
        }
    }
    let forward = estimate::forward(
        &snapshot,
        &outstanding,
        |j| runs.get(&j.job_id).map_or(default_runtime, |r| r.0),
        Limits {
            horizon: params.horizon,
            // Every job read is reached (or past the horizon): the cost is bounded by
            // `estimates.max_jobs`'s cut of the reads, not by cutting the run (issue
            // 48's decision, freshness against coverage: DESIGN §2 "Estimates").
            max_cycles: estimate::cycles_needed(outstanding.len(), waiting).min(MAX_CYCLES),
            ..Limits::default()
        },
    );
    // Only the jobs the run started: the API shows nothing (not even the basis) for the
    // others, and at 1,000,000 queued a refresh reads at most `estimates.max_jobs` of
    // them (BENCHMARKS.md, issue 48), so keeping the rest cost ≈ 60 B a job for nothing.
    let mut out = HashMap::with_capacity(forward.estimates.len());
    for e in &forward.estimates {
        let basis = runs.get(&e.job_id).map_or(Basis::Default, |r| r.1);
        out.insert(
            e.job_id,
            JobEstimate {
                start: time(e.start),
                position: Some(e.position as u64),
                basis,
            },
        );
    }
    (out, forward.not_before)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the leader writes for followers: only estimated jobs, the first `max` by
    /// start (then position, then id), in that order.
    #[test]
    fn the_stored_estimates_are_the_first_by_start() {
        let id = |n: u128| uuid::Uuid::from_u128(n);
        let t = |s: i64| Utc.timestamp_opt(s, 0).single();
        let e = |start: Option<DateTime<Utc>>, position: Option<u64>| JobEstimate {
            start,
            position,
            basis: Basis::Learned,
        };
        let jobs: HashMap<JobId, JobEstimate> = [
            (id(1), e(t(300), Some(3))),
            (id(2), e(t(100), Some(1))),
            (id(3), e(None, None)),
            (id(4), e(t(200), Some(2))),
            (id(5), e(t(200), Some(1))),
        ]
        .into_iter()
        .collect();
        let all = to_store(&jobs, 10, Some(7));
        let order: Vec<_> = all.iter().map(|r| r.job_id).collect();
        assert_eq!(order, vec![id(2), id(5), id(4), id(1)]);
        assert_eq!(all[0].start_us, 100_000_000);
        assert_eq!(all[0].position, 1);
        assert_eq!(all[0].basis, "learned");
        assert_eq!(all[0].not_before_us, Some(7));
        let first = to_store(&jobs, 2, None);
        let ids: Vec<_> = first.iter().map(|r| r.job_id).collect();
        assert_eq!(ids, vec![id(2), id(5)]);
        // The jobs left out start no sooner than the last written.
        assert!(first.iter().all(|r| r.not_before_us == Some(200_000_000)));
        assert!(to_store(&jobs, 0, None).is_empty());
    }
}

#[cfg(test)]
mod cap_tests {
    use super::per_user_cap;

    #[test]
    fn every_job_is_read_while_they_fit_the_cap() {
        assert_eq!(per_user_cap([3u64, 5, 2].into_iter(), 10), None);
        assert_eq!(per_user_cap([3u64, 5, 2].into_iter(), 11), None);
        assert_eq!(per_user_cap(std::iter::empty::<u64>(), 1), None);
    }

    #[test]
    fn past_the_cap_each_queue_is_cut_to_the_same_largest_length() {
        // 3 + 5 + 2 = 10 > 9: k = 4 reads 3 + 4 + 2 = 9.
        assert_eq!(per_user_cap([3u64, 5, 2].into_iter(), 9), Some(4));
        // k = 3 reads 3 + 3 + 2 = 8 ≤ 8; k = 4 would read 9.
        assert_eq!(per_user_cap([3u64, 5, 2].into_iter(), 8), Some(3));
        // 1,000 users × 1,000 queued under 100,000: 100 each.
        assert_eq!(
            per_user_cap(std::iter::repeat_n(1000u64, 1000), 100_000),
            Some(100)
        );
        // 10,000 × 100: 10 each.
        assert_eq!(
            per_user_cap(std::iter::repeat_n(100u64, 10_000), 100_000),
            Some(10)
        );
        // More users than the cap: every head still.
        assert_eq!(per_user_cap(std::iter::repeat_n(2u64, 50), 10), Some(1));
    }

    #[test]
    fn the_cut_is_the_largest_that_fits_for_any_queues() {
        // Exhaustive over small cases: held(k) ≤ max and held(k + 1) > max.
        let held = |q: &[u64], k: u64| q.iter().map(|&n| n.min(k)).sum::<u64>();
        for a in 0..6u64 {
            for b in 0..6u64 {
                for c in 0..6u64 {
                    let q = [a, b, c];
                    for max in 1..16u64 {
                        match per_user_cap(q.iter().copied(), max) {
                            None => assert!(a + b + c <= max),
                            Some(k) => {
                                assert!(a + b + c > max);
                                assert!(k >= 1);
                                assert!(k == 1 || held(&q, k) <= max, "{q:?} {max} {k}");
                                assert!(
                                    held(&q, k + 1) > max || k + 1 > a.max(b).max(c),
                                    "{q:?} {max} {k}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
