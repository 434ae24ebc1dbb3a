//! Leadership among replicas on one PostgreSQL database (DESIGN §10).
//!
//! Every replica serves the whole API; exactly one, the leader, runs the scheduler's
//! actors ([`Scheduler`]). The leader is whoever holds the one row of `leases`:
//! it renews the row every `leadership.renew_every` (1 s) to `leadership.lease` (5 s)
//! ahead by the database's clock; a follower takes a lapsed row with term + 1 and runs
//! today's recovery ([`Scheduler::start`]) under that term. Every write of the
//! leader's actors goes through `store::apply` with a [`Fence`] naming holder and term,
//! which the database checks inside the write's transaction: a paused or partitioned
//! old leader cannot move a job once another replica took over.
//!
//! Followers hand work to the leader by PostgreSQL `NOTIFY` (job submitted or
//! cancelled, user changed); the leader `LISTEN`s and also re-reads QUEUED jobs,
//! requested stops and changed users every `leadership.catch_up_every`, so a missed
//! notification loses nothing.
//!
//! On SQLite there is one replica: it always leads, unfenced, and [`SqliteLock`] keeps
//! a second service off the same database file.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use entity::JobStatus;
use tokio::sync::watch;
use uuid::Uuid;

use crate::actors::Scheduler;
use crate::config::Settings;
use crate::metrics;
use crate::store::{self, Db, Fence};
use crate::views::LeadershipView;

/// What this replica knows about leadership right now.
#[derive(Clone, Default)]
struct Status {
    /// The running scheduler while this replica leads.
    scheduler: Option<Scheduler>,
    /// The leader's replica id as last read (`None`: no live lease seen).
    leader: Option<String>,
    term: i64,
    since: Option<DateTime<Utc>>,
    /// The newest `job_events` id read just before this term's recovery: the catch-up
    /// reads the changes after it (less [`CATCH_UP_REWIND`]).
    changes_from: i64,
}

struct Inner {
    replica: String,
    db: Db,
    settings: Arc<Settings>,
    status: watch::Sender<Status>,
    stopped: AtomicBool,
    /// On PostgreSQL: the lease decides; on SQLite: always leader.
    elected: bool,
}

/// Handle to this replica's leadership state. Cheap to clone.
#[derive(Clone)]
pub struct Leadership {
    inner: Arc<Inner>,
}

impl Leadership {
    /// Starts leadership: on SQLite this replica leads at once (recovery runs before
    /// this returns); on PostgreSQL it tries the lease once now (so a lone replica has
    /// recovered before it serves), then keeps a background loop that renews or takes
    /// the lease, a `LISTEN` task and the leader's catch-up.
    ///
    /// Errors: recovery failed on SQLite.
    pub async fn start(db: Db, settings: Arc<Settings>) -> anyhow::Result<Leadership> {
        let replica = settings.leadership.resolved_replica_id();
        let elected = sea_orm::ConnectionTrait::get_database_backend(&db)
            == sea_orm::DatabaseBackend::Postgres;
        let (tx, _) = watch::channel(Status::default());
        let me = Leadership {
            inner: Arc::new(Inner {
                replica: replica.clone(),
                db: db.clone(),
                settings: settings.clone(),
                status: tx,
                stopped: AtomicBool::new(false),
                elected,
            }),
        };
        if !elected {
            let s = Scheduler::start(db, settings, Fence::Unfenced).await?;
            me.set_leader(s, 0, store::now(), 0);
            return Ok(me);
        }
        tracing::info!(replica = %replica, "leadership: this replica takes part in the lease");
        let mut lp = LeaseLoop {
            me: me.clone(),
            term: None,
            last_term: None,
            db_errors: metrics::get().db_errors.get(),
        };
        lp.tick(true).await;
        actix_web::rt::spawn(lp.run());
        actix_web::rt::spawn(listen(me.clone()));
        actix_web::rt::spawn(catch_up(me.clone()));
        Ok(me)
    }

    /// The scheduler, while this replica leads.
    pub fn scheduler(&self) -> Option<Scheduler> {
        self.inner.status.borrow().scheduler.clone()
    }

    /// This replica's id.
    pub fn replica(&self) -> &str {
        &self.inner.replica
    }

    /// Who leads, as this replica knows it.
    pub fn view(&self) -> LeadershipView {
        let s = self.inner.status.borrow();
        LeadershipView {
            replica: self.inner.replica.clone(),
            is_leader: s.scheduler.is_some(),
            leader: s.leader.clone(),
            term: s.term,
            since: s.since,
        }
    }

    /// Tells the leader about a change this replica committed while it does not lead
    /// (`job:<id>` or `user:<id>`); a failure is only logged: the catch-up finds it.
    pub async fn hand_over(&self, payload: &str) {
        if let Err(e) = store::notify(&self.inner.db, payload).await {
            tracing::warn!(error = %e, payload, "cannot notify the leader; its catch-up will find the change");
        }
    }

    /// Stops taking part: the scheduler saves usage and stops, and the lease is let go
    /// so that a follower takes over at once.
    pub async fn shutdown(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        let (s, term) = {
            let st = self.inner.status.borrow();
            (st.scheduler.clone(), st.term)
        };
        if let Some(s) = s {
            s.shutdown().await;
            s.halt();
            if self.inner.elected {
                if let Err(e) =
                    store::lease_release(&self.inner.db, &self.inner.replica, term).await
                {
                    tracing::warn!(error = %e, "cannot release the lease; it lapses by itself");
                } else {
                    tracing::info!(term, "leadership released");
                }
            }
        }
        self.inner.status.send_modify(|st| st.scheduler = None);
        metrics::get().leader.reset();
    }

    fn set_leader(&self, s: Scheduler, term: i64, since: DateTime<Utc>, changes_from: i64) {
        let replica = self.inner.replica.clone();
        self.inner.status.send_modify(|st| {
            st.scheduler = Some(s);
            st.leader = Some(replica.clone());
            st.term = term;
            st.since = Some(since);
            st.changes_from = changes_from;
        });
        let m = metrics::get();
        m.leader.reset();
        m.leader.with_label_values(&[&replica]).set(1);
        m.lease_term.set(term);
        m.leader_since.set(since.timestamp_micros() as f64 / 1e6);
    }

    /// Stops the local scheduler, if any (the lease is lost or in doubt).
    fn step_down(&self, why: &str) {
        let s = self.inner.status.borrow().scheduler.clone();
        if let Some(s) = s {
            tracing::warn!(replica = %self.inner.replica, why, "leadership: stepping down");
            s.halt();
            metrics::clear_leader_gauges();
        }
        self.inner.status.send_modify(|st| st.scheduler = None);
        metrics::get().leader.reset();
    }

    fn follower_saw(&self, lease: &store::LeaseState) {
        let leader = (lease.live && !lease.holder.is_empty()).then(|| lease.holder.clone());
        self.inner.status.send_modify(|st| {
            st.leader = leader.clone();
            st.term = lease.term;
            st.since = Some(lease.acquired_at);
        });
        let m = metrics::get();
        m.leader.reset();
        if let Some(l) = &leader {
            m.leader.with_label_values(&[l]).set(0);
        }
        m.lease_term.set(lease.term);
        m.leader_since
            .set(lease.acquired_at.timestamp_micros() as f64 / 1e6);
    }
}

struct LeaseLoop {
    me: Leadership,
    /// The term this replica leads under.
    term: Option<i64>,
    /// The last term it led under: it may take its own lease back under a new term
    /// after stepping down on a database error.
    last_term: Option<i64>,
    /// `fairshare_db_errors_total` at the last tick.
    db_errors: u64,
}

impl LeaseLoop {
    async fn run(mut self) {
        let every = self.me.inner.settings.leadership.renew_every;
        loop {
            // A follower tries four times as often, so it takes a lapsed lease within
            // a quarter of `renew_every` of its expiry.
            let wait = if self.term.is_some() {
                every
            } else {
                every / 4
            };
            actix_web::rt::time::sleep(wait).await;
            if self.me.inner.stopped.load(Ordering::SeqCst) {
                return;
            }
            self.tick(false).await;
        }
    }

    /// One renewal (leader) or attempt to take the lease (follower). `first`: this
    /// process has not led yet, and may take a lease still held under its own id (it
    /// restarted under the same id, e.g. the same pod name).
    async fn tick(&mut self, first: bool) {
        let inner = &self.me.inner;
        let l = &inner.settings.leadership;
        let errors_now = metrics::get().db_errors.get();
        let db_failed = errors_now != self.db_errors;
        self.db_errors = errors_now;
        if let Some(term) = self.term {
            let renewed = tokio::time::timeout(
                l.renew_every,
                store::lease_renew(&inner.db, &inner.replica, term, l.lease),
            )
            .await;
            match renewed {
                Ok(Ok(true)) if !db_failed => return,
                Ok(Ok(true)) => {
                    // A write of the actors may have failed half-way (a reservation
                    // without its row moving): run recovery again under a new term.
                    self.me
                        .step_down("a database error since the last renewal; recovering again");
                }
                Ok(Ok(false)) => {
                    self.me.step_down("another replica took the lease");
                    self.last_term = None;
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "cannot renew the lease");
                    self.me.step_down("the lease could not be renewed");
                }
                Err(_) => self.me.step_down("renewing the lease timed out"),
            }
            self.term = None;
        }
        let reclaim = match (first, self.last_term) {
            (true, _) => store::Reclaim::AnyTerm,
            (false, Some(t)) => store::Reclaim::Term(t),
            (false, None) => store::Reclaim::Never,
        };
        let taken = store::lease_acquire(&inner.db, &inner.replica, l.lease, reclaim).await;
        match taken {
            Ok(Some((term, since))) => {
                tracing::info!(replica = %inner.replica, term, "leadership: took the lease; recovering");
                let fence = Fence::Term {
                    holder: inner.replica.clone(),
                    term,
                };
                let started = std::time::Instant::now();
                // Before recovery reads the jobs: a change after this id may be missing
                // from what recovery read, and is the catch-up's (DESIGN §10).
                let recovered = match store::last_event_id(&inner.db).await {
                    Ok(from) => Scheduler::start(inner.db.clone(), inner.settings.clone(), fence)
                        .await
                        .map(|s| (s, from)),
                    Err(e) => Err(anyhow::Error::new(e).context("reading the newest job event")),
                };
                match recovered {
                    Ok((s, changes_from)) => {
                        self.term = Some(term);
                        self.last_term = Some(term);
                        self.me.set_leader(s, term, since, changes_from);
                        metrics::get().leader_takeovers.inc();
                        tracing::info!(
                            replica = %inner.replica,
                            term,
                            recovery_seconds = started.elapsed().as_secs_f64(),
                            "leadership: leading"
                        );
                    }
                    Err(e) => {
                        // Keep the right to take it back under a new term next tick.
                        self.last_term = Some(term);
                        tracing::error!(
                            error = format!("{e:#}"),
                            "leadership: recovery failed; retrying"
                        );
                    }
                }
                self.db_errors = metrics::get().db_errors.get();
            }
            Ok(None) => match store::lease_state(&inner.db).await {
                Ok(lease) => self.me.follower_saw(&lease),
                Err(e) => tracing::debug!(error = %e, "cannot read the lease"),
            },
            Err(e) => tracing::warn!(error = %e, "leadership: cannot reach the lease"),
        }
    }
}

/// `LISTEN`s for followers' changes and hands them to the local scheduler while this
/// replica leads. The `LISTEN` connection lives on a thread of its own (with its own
/// runtime, which must outlive it), forwarding payloads here; it reconnects after a
/// failure (notifications sent meanwhile are the catch-up's).
async fn listen(me: Leadership) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let url = me.inner.settings.database.url.clone();
    let inner = me.inner.clone();
    let spawned = std::thread::Builder::new()
        .name("fairshare-listen".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(listen_thread(url, inner, tx));
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the LISTEN thread; the catch-up alone hands work over");
        return;
    }
    while let Some(payload) = rx.recv().await {
        if let Some(s) = me.scheduler() {
            handle_notification(&me.inner.db, &s, &payload).await;
        }
    }
}

async fn listen_thread(
    url: String,
    inner: Arc<Inner>,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
) {
    use sea_orm::sqlx::postgres::PgListener;
    while !inner.stopped.load(Ordering::SeqCst) && !tx.is_closed() {
        let mut listener = match PgListener::connect(&url).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(error = %e, "LISTEN: cannot connect; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Err(e) = listener.listen(store::NOTIFY_CHANNEL).await {
            tracing::debug!(error = %e, "LISTEN failed; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        loop {
            if inner.stopped.load(Ordering::SeqCst) || tx.is_closed() {
                return;
            }
            let n = match tokio::time::timeout(Duration::from_secs(1), listener.try_recv()).await {
                Err(_) => continue,
                Ok(Ok(Some(n))) => n,
                Ok(Ok(None)) => {
                    tracing::debug!("LISTEN connection lost; reconnected");
                    continue;
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "LISTEN connection failed");
                    break;
                }
            };
            if tx.send(n.payload().to_string()).is_err() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn handle_notification(db: &Db, s: &Scheduler, payload: &str) {
    if let Some(id) = payload.strip_prefix("job:") {
        let Ok(id) = Uuid::parse_str(id) else {
            return;
        };
        match store::get_job(db, id).await {
            Ok(Some(j)) => s.remote_change(&j, true),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, job_id = %id, "cannot read a notified job"),
        }
    } else if let Some(user) = payload.strip_prefix("user:") {
        match store::get_user(db, user).await {
            Ok(Some(u)) => s.user_changed(&u).await,
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, user, "cannot read a notified user"),
        }
    }
}

/// Ids of `job_events` the catch-up reads again at the start of a term, below the
/// newest id read before recovery: a transaction that took its ids before that one and
/// committed after it (several writers, each at most [`store::MAX_BATCH`] events a
/// transaction) is read so. Reading a change twice does nothing.
pub const CATCH_UP_REWIND: i64 = 4 * store::MAX_BATCH as i64;

/// Changes read per query, and at most per round (the rest waits for the next round).
const CHANGES_PAGE: u64 = 5_000;
const CHANGES_PER_ROUND: usize = 20 * CHANGES_PAGE as usize;

/// Most skipped ids waited for at once; past it the oldest are given up.
const MISSING_MAX: usize = 100_000;

/// The catch-up's place in `job_events` (DESIGN §10). Ids are taken in order but
/// committed in any order, so a read after `read_to` may skip ids that commit later:
/// those are kept as missing and looked up again each round until they appear or
/// `grace` has passed (a rolled-back transaction's ids never appear).
#[derive(Debug)]
pub struct ChangeCursor {
    read_to: i64,
    missing: BTreeMap<i64, Instant>,
    grace: Duration,
}

impl ChangeCursor {
    /// A cursor for the changes with ids above `after`.
    pub fn new(after: i64, grace: Duration) -> ChangeCursor {
        ChangeCursor {
            read_to: after.max(0),
            missing: BTreeMap::new(),
            grace,
        }
    }

    /// The highest id read.
    pub fn read_to(&self) -> i64 {
        self.read_to
    }

    /// The skipped ids still waited for, ascending.
    pub fn missing(&self) -> Vec<i64> {
        self.missing.keys().copied().collect()
    }

    /// Takes the ids of a read after [`ChangeCursor::read_to`] (ascending): the ids it
    /// skipped become missing (as of `now`).
    pub fn advance(&mut self, ids: &[i64], now: Instant) {
        for &id in ids {
            if id <= self.read_to {
                continue;
            }
            // A jump of more than MISSING_MAX ids (a sequence moved by hand) keeps only
            // the last MISSING_MAX of them.
            let first = (self.read_to + 1).max(id - MISSING_MAX as i64);
            for gap in first..id {
                self.missing.insert(gap, now);
            }
            self.read_to = id;
        }
        while self.missing.len() > MISSING_MAX {
            self.missing.pop_first();
        }
    }

    /// A missing id was read.
    pub fn found(&mut self, id: i64) {
        self.missing.remove(&id);
    }

    /// Gives up the missing ids waited for longer than the grace; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let before = self.missing.len();
        let grace = self.grace;
        self.missing
            .retain(|_, since| now.saturating_duration_since(*since) < grace);
        before - self.missing.len()
    }
}

/// The leader re-reads what followers may have changed without a notification
/// reaching it: the job changes committed since its last round (from `job_events`,
/// which every change of a job's status writes in its transaction), outstanding jobs
/// with a stop asked for, and users changed lately. A round costs what changed, not
/// what is queued (DESIGN §10).
async fn catch_up(me: Leadership) {
    let every = me.inner.settings.leadership.catch_up_every;
    let grace = me.inner.settings.events.gap_grace;
    // Clocks of replicas may differ: re-read users changed within this margin.
    let margin = chrono::Duration::seconds(30);
    // What was handed over already: users by `updated_at`.
    let mut sent: std::collections::HashMap<String, DateTime<Utc>> = Default::default();
    // The term the cursor belongs to.
    let mut cursor: Option<(i64, ChangeCursor)> = None;
    while !me.inner.stopped.load(Ordering::SeqCst) {
        actix_web::rt::time::sleep(every).await;
        let (s, term, from) = {
            let st = me.inner.status.borrow();
            (st.scheduler.clone(), st.term, st.changes_from)
        };
        let Some(s) = s else {
            sent.clear();
            cursor = None;
            continue;
        };
        if cursor.as_ref().map(|(t, _)| *t) != Some(term) {
            cursor = None;
        }
        let (_, c) =
            cursor.get_or_insert_with(|| (term, ChangeCursor::new(from - CATCH_UP_REWIND, grace)));
        if let Err(e) = catch_up_once(&me.inner.db, &s, c, margin, &mut sent).await {
            tracing::debug!(error = %e, "catch-up failed; next round retries");
        }
    }
}

async fn catch_up_once(
    db: &Db,
    s: &Scheduler,
    cursor: &mut ChangeCursor,
    margin: chrono::Duration,
    sent: &mut std::collections::HashMap<String, DateTime<Utc>>,
) -> Result<(), sea_orm::DbErr> {
    let now = Instant::now();
    let mut changes = Vec::new();
    for ids in cursor.missing().chunks(1000) {
        changes.extend(store::changes_with_ids(db, ids).await?);
    }
    for c in &changes {
        cursor.found(c.id);
    }
    let given_up = cursor.expire(now);
    if given_up > 0 {
        tracing::debug!(
            given_up,
            "catch-up: job event ids never committed (rolled back)"
        );
    }
    while changes.len() < CHANGES_PER_ROUND {
        let page = store::changes_after(db, cursor.read_to(), CHANGES_PAGE).await?;
        let ids: Vec<i64> = page.iter().map(|c| c.id).collect();
        cursor.advance(&ids, now);
        let full = page.len() as u64 == CHANGES_PAGE;
        changes.extend(page);
        if !full {
            break;
        }
    }
    reconcile_queues(db, s, &changes).await?;
    for j in store::outstanding_with_stop(db).await? {
        s.remote_change(&j, false);
    }
    for u in store::users_updated_since(db, store::now() - margin).await? {
        if sent.get(&u.id) != Some(&u.updated_at) {
            sent.insert(u.id.clone(), u.updated_at);
            s.user_changed(&u).await;
        }
    }
    Ok(())
}

/// Brings the arbiter's queues in line with the jobs `changes` moved into or out of
/// QUEUED: a QUEUED job it does not know joins its queue; a job it holds that is no
/// longer QUEUED leaves it. What it knows is asked first, then the rows are read, so a
/// job it queued before is not taken for unknown. Only jobs the arbiter does not know,
/// and held ones that left QUEUED, are read: a round of the leader's own intake reads
/// no job.
async fn reconcile_queues(
    db: &Db,
    s: &Scheduler,
    changes: &[store::Change],
) -> Result<(), sea_orm::DbErr> {
    use crate::actors::Known;
    let mut left: HashSet<Uuid> = HashSet::new();
    let mut touched: Vec<Uuid> = Vec::new();
    let mut seen: HashSet<Uuid> = HashSet::new();
    for c in changes.iter().filter(|c| c.touches_queue()) {
        if c.from == Some(JobStatus::Queued) {
            left.insert(c.job_id);
        }
        if seen.insert(c.job_id) {
            touched.push(c.job_id);
        }
    }
    if touched.is_empty() {
        return Ok(());
    }
    let Ok(known) = s.classify(touched.clone()).await else {
        return Ok(());
    };
    let mut held: HashSet<Uuid> = HashSet::new();
    let mut read: Vec<Uuid> = Vec::new();
    for (id, k) in touched.into_iter().zip(known) {
        match k {
            Known::Unknown => read.push(id),
            Known::Queued if left.contains(&id) => {
                held.insert(id);
                read.push(id);
            }
            Known::Queued | Known::Left => {}
        }
    }
    for j in store::jobs_with_ids(db, &read).await? {
        if held.contains(&j.id) {
            if j.status != JobStatus::Queued {
                s.forget_queued(&j.user_id, j.id);
            }
        } else {
            s.remote_change(&j, false);
        }
    }
    Ok(())
}

/// Keeps a second service off a SQLite database: an exclusive lock on
/// `<database file>.lock`, held for the life of the process (released by the OS when
/// it exits, however it exits).
pub struct SqliteLock {
    _file: File,
}

impl SqliteLock {
    /// Takes the lock for the SQLite database of `url`; `Ok(None)` for other
    /// databases and in-memory SQLite. Waits up to `wait` for a service of this
    /// process that is shutting down.
    ///
    /// Errors: another service holds the database (the message says so), or the lock
    /// file cannot be created.
    pub async fn take(url: &str, wait: Duration) -> anyhow::Result<Option<SqliteLock>> {
        let Some(rest) = url.strip_prefix("sqlite:") else {
            return Ok(None);
        };
        let path = rest.trim_start_matches("//");
        let path = path.split('?').next().unwrap_or_default();
        if path.is_empty() || path.contains(":memory:") {
            return Ok(None);
        }
        // The real file, so that a symlink or another spelling of the path names the
        // same lock (the database may not exist yet: then the path as given).
        let path = std::fs::canonicalize(path)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.to_string());
        let lock_path = format!("{path}.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| anyhow::anyhow!("cannot create the lock file {lock_path}: {e}"))?;
        let deadline = std::time::Instant::now() + wait;
        loop {
            match try_flock(&file) {
                Ok(true) => return Ok(Some(SqliteLock { _file: file })),
                Ok(false) if std::time::Instant::now() < deadline => {
                    actix_web::rt::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(false) => {
                    anyhow::bail!(
                        "another fairshare service is using the SQLite database {path} (it holds \
                         {lock_path}); SQLite runs one replica only — stop the other one, or use \
                         PostgreSQL for several replicas"
                    )
                }
                Err(e) => anyhow::bail!("cannot lock {lock_path}: {e}"),
            }
        }
    }
}

/// An exclusive, non-blocking `flock(2)`: `Ok(false)` when another open file holds it.
fn try_flock(file: &File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a file descriptor this `File` owns and keeps open.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One round of the catch-up against the ids `visible` (committed) at `now`: the
    /// missing ids that appeared, then every visible id after the cursor. Returns the
    /// ids read.
    fn round(c: &mut ChangeCursor, visible: &BTreeMap<i64, ()>, now: Instant) -> Vec<i64> {
        let mut read: Vec<i64> = c
            .missing()
            .into_iter()
            .filter(|id| visible.contains_key(id))
            .collect();
        for id in &read {
            c.found(*id);
        }
        c.expire(now);
        let after: Vec<i64> = visible
            .range(c.read_to() + 1..)
            .map(|(id, _)| *id)
            .collect();
        c.advance(&after, now);
        read.extend(after);
        read
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Ids taken in order and committed in any order, each within the grace of
        /// the first round that skipped it: every one is read exactly once, and once
        /// all have committed nothing is waited for.
        #[test]
        fn every_id_committed_within_the_grace_is_read_once(
            commit_round in proptest::collection::vec(0u32..6, 1..60),
        ) {
            let t0 = Instant::now();
            let mut c = ChangeCursor::new(0, Duration::from_secs(10));
            let mut visible = BTreeMap::new();
            let mut read = Vec::new();
            for k in 0..8u32 {
                for (i, r) in commit_round.iter().enumerate() {
                    if *r == k {
                        visible.insert(i as i64 + 1, ());
                    }
                }
                read.extend(round(&mut c, &visible, t0 + Duration::from_secs(u64::from(k))));
            }
            read.sort_unstable();
            let all: Vec<i64> = (1..=commit_round.len() as i64).collect();
            prop_assert_eq!(read, all);
            prop_assert!(c.missing().is_empty());
        }
    }

    #[test]
    fn a_skipped_id_is_given_up_after_the_grace() {
        let t0 = Instant::now();
        let mut c = ChangeCursor::new(10, Duration::from_secs(5));
        c.advance(&[11, 14], t0);
        assert_eq!(c.missing(), vec![12, 13]);
        c.found(12);
        assert_eq!(c.expire(t0 + Duration::from_secs(4)), 0);
        assert_eq!(c.missing(), vec![13]);
        assert_eq!(c.expire(t0 + Duration::from_secs(5)), 1);
        assert!(c.missing().is_empty());
        assert_eq!(c.read_to(), 14);
        // Ids at or below the cursor are not taken again.
        c.advance(&[13, 14, 15], t0);
        assert!(c.missing().is_empty());
        assert_eq!(c.read_to(), 15);
    }

    #[test]
    fn a_huge_jump_keeps_a_bounded_wait_list() {
        let t0 = Instant::now();
        let mut c = ChangeCursor::new(0, Duration::from_secs(5));
        c.advance(&[10 * MISSING_MAX as i64], t0);
        let missing = c.missing();
        assert_eq!(missing.len(), MISSING_MAX);
        assert_eq!(missing.last(), Some(&(10 * MISSING_MAX as i64 - 1)));
    }
}
