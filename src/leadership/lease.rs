//! The lease loop (DESIGN §10): the leader renews the `leases` row every
//! `leadership.renew_every`; a follower tries to take it once it lapses, and on
//! taking it runs recovery under the new term. A leader steps down when it cannot
//! renew, when another replica took the lease, or after a database error (to recover
//! again under a new term).

use std::sync::atomic::Ordering;

use super::Leadership;
use crate::actors::Scheduler;
use crate::metrics;
use crate::store::{self, Fence};

pub(super) struct LeaseLoop {
    pub(super) me: Leadership,
    /// The term this replica leads under.
    pub(super) term: Option<i64>,
    /// The last term it led under: it may take its own lease back under a new term
    /// after stepping down on a database error.
    pub(super) last_term: Option<i64>,
    /// `fairshare_db_errors_total` at the last tick.
    pub(super) db_errors: u64,
}

impl LeaseLoop {
    pub(super) async fn run(mut self) {
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
    pub(super) async fn tick(&mut self, first: bool) {
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
