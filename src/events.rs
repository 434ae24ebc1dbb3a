//! Job events as a feed (DESIGN §4, "Events"): what `GET /v1/events` streams and the
//! webhooks deliver, read from `job_events` in id order.
//!
//! - The store's wake-up on commit ([`store::commits`]), which it sends right after a
//!   transaction that wrote `job_events` rows commits, wakes every [`Reader`] of this
//!   process at once. It is a wake-up only (a counter in a `watch` channel), not state:
//!   a reader always re-reads the database, and also looks every `events.poll_interval`
//!   on its own, which is how it sees another replica's events.
//! - [`GapGuard`] keeps a reader from skipping an event: on PostgreSQL an id is taken
//!   when the row is inserted, not when it commits, so id 11 can be visible before
//!   id 10. A reader hands out only the events up to the first missing id, and takes
//!   that id as never coming (a rolled-back transaction) once it has been missing for
//!   `events.gap_grace`.

use std::collections::VecDeque;
use std::time::Duration;

use sea_orm::DbErr;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::EventSettings;
use crate::store::{self, Db, JobEvent};

/// How often a reader looks without a wake-up on SQLite (see [`Reader::new`]).
const SQLITE_POLL: Duration = Duration::from_secs(5);

/// Events read from the database per query.
const BATCH: u64 = 500;

/// Decides how much of a read may be handed out (see the module docs).
#[derive(Clone, Debug)]
pub struct GapGuard {
    grace: Duration,
    /// The first id after a gap, and when the gap was first seen.
    waiting: Option<(i64, Instant)>,
}

impl GapGuard {
    /// A guard that gives a missing id `grace` to appear.
    pub fn new(grace: Duration) -> GapGuard {
        GapGuard {
            grace,
            waiting: None,
        }
    }

    /// Of `ids` (ascending, all above `cursor`), how many lead up to no unexplained gap
    /// at time `now`: ids are contiguous from `cursor + 1`, or a gap before one of them
    /// has been seen for at least the grace.
    pub fn ready(&mut self, cursor: i64, ids: &[i64], now: Instant) -> usize {
        let mut prev = cursor;
        for (i, &id) in ids.iter().enumerate() {
            if id != prev + 1 {
                match self.waiting {
                    Some((first, since)) if first == id => {
                        if now.duration_since(since) < self.grace {
                            return i;
                        }
                        self.waiting = None;
                    }
                    _ => {
                        self.waiting = Some((id, now));
                        if !self.grace.is_zero() {
                            return i;
                        }
                        self.waiting = None;
                    }
                }
            }
            prev = id;
        }
        ids.len()
    }

    /// Whether a gap is being waited for.
    pub fn waiting(&self) -> bool {
        self.waiting.is_some()
    }
}

/// How many event streams may read the database at once. Every commit wakes every
/// open stream; without a limit, a few hundred streams replaying history queue on the
/// pool (SQLite has one connection) ahead of the scheduler's own writes, which then
/// time out (found by a tester: 300 streams from `Last-Event-ID: 0`). With it, streams
/// queue among themselves and the pool sees at most this many of their queries.
const STREAM_READS_MAX: usize = 2;
static STREAM_READS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(STREAM_READS_MAX);

/// Reads the events after a cursor, waking on this process's commits.
pub struct Reader {
    db: Db,
    cursor: i64,
    guard: GapGuard,
    poll: Duration,
    wake: watch::Receiver<u64>,
    ready: VecDeque<JobEvent>,
}

impl Reader {
    /// A reader of the events with ids above `cursor`.
    pub fn new(db: Db, cursor: i64, settings: &EventSettings) -> Reader {
        // SQLite runs one replica, whose every commit wakes the reader: looking on its
        // own is only a safety net there, and would queue on SQLite's one connection.
        let poll = if sea_orm::ConnectionTrait::get_database_backend(&db)
            == sea_orm::DatabaseBackend::Sqlite
        {
            settings.poll_interval.max(SQLITE_POLL)
        } else {
            settings.poll_interval
        };
        Reader {
            db,
            cursor,
            guard: GapGuard::new(settings.gap_grace),
            poll,
            wake: store::commits(),
            ready: VecDeque::new(),
        }
    }

    /// Events read but not handed out yet (`next` returns them without a query).
    pub fn buffered(&self) -> usize {
        self.ready.len()
    }

    /// The next event, waiting up to `wait` for one; `None` when none came in time.
    ///
    /// Errors: the database's (the reader keeps its place; call again).
    pub async fn next(&mut self, wait: Duration) -> Result<Option<JobEvent>, DbErr> {
        if let Some(e) = self.ready.pop_front() {
            return Ok(Some(e));
        }
        let deadline = Instant::now() + wait;
        loop {
            // Mark the wake-ups seen before reading: a commit after the read wakes us.
            self.wake.borrow_and_update();
            let rows = {
                // Streams take turns at the database (see STREAM_READS).
                let _turn = STREAM_READS.acquire().await;
                store::events_after(&self.db, self.cursor, BATCH).await?
            };
            let ids: Vec<i64> = rows.iter().map(|e| e.id).collect();
            let n = self.guard.ready(self.cursor, &ids, Instant::now());
            if n > 0 {
                self.cursor = ids[n - 1];
                self.ready.extend(rows.into_iter().take(n));
                return Ok(self.ready.pop_front());
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            // Waiting out a gap: look again soon even without a commit here.
            let nap = if self.guard.waiting() {
                self.poll
                    .min(self.guard.grace / 4)
                    .max(Duration::from_millis(10))
            } else {
                self.poll
            };
            let nap = nap.min(deadline - now);
            if let Ok(Err(_)) = tokio::time::timeout(nap, self.wake.changed()).await {
                tokio::time::sleep(nap).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_ids_are_all_ready() {
        let mut g = GapGuard::new(Duration::from_secs(5));
        assert_eq!(g.ready(10, &[11, 12, 13], Instant::now()), 3);
        assert!(!g.waiting());
    }

    #[test]
    fn a_gap_holds_back_what_follows_it_until_the_grace_has_passed() {
        let mut g = GapGuard::new(Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(g.ready(10, &[11, 13, 14], t0), 1);
        assert_eq!(g.ready(11, &[13, 14], t0 + Duration::from_secs(4)), 0);
        assert_eq!(g.ready(11, &[13, 14], t0 + Duration::from_secs(5)), 2);
        assert!(!g.waiting());
    }

    #[test]
    fn a_gap_that_fills_in_is_read_in_order() {
        let mut g = GapGuard::new(Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(g.ready(10, &[12], t0), 0);
        assert_eq!(g.ready(10, &[11, 12], t0 + Duration::from_secs(1)), 2);
    }

    #[test]
    fn a_new_gap_starts_its_own_grace() {
        let mut g = GapGuard::new(Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(g.ready(10, &[12], t0), 0);
        assert_eq!(g.ready(10, &[12, 14], t0 + Duration::from_secs(5)), 1);
        assert_eq!(g.ready(12, &[14], t0 + Duration::from_secs(9)), 0);
        assert_eq!(g.ready(12, &[14], t0 + Duration::from_secs(10)), 1);
    }
}
