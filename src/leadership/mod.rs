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
//!
//! Here: the [`Leadership`] handle and what it knows; beside it `lease` (the lease
//! loop), `hand_over` (the leader's `LISTEN` for followers' notifications),
//! `catch_up` (the leader's re-reading of what notifications may have missed) and
//! `sqlite_lock` ([`SqliteLock`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::actors::Scheduler;
use crate::config::Settings;
use crate::metrics;
use crate::store::{self, Db, Fence};
use crate::views::LeadershipView;

mod catch_up;
mod hand_over;
mod lease;
mod sqlite_lock;

use catch_up::catch_up;
pub use catch_up::{ChangeCursor, CATCH_UP_REWIND};
use hand_over::listen;
use lease::LeaseLoop;
pub use sqlite_lock::SqliteLock;

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
    /// (`job:<id>`, `user:<id>` or `groups`); a failure is only logged: the catch-up finds it.
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
