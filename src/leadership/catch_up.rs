//! The leader's catch-up (DESIGN §10): what followers changed without a notification
//! reaching the leader, re-read every `leadership.catch_up_every` from `job_events`
//! ([`ChangeCursor`] keeps its place across ids that commit out of order), from the
//! outstanding jobs with a stop asked for, from the users changed lately, and the
//! groups.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use entity::JobStatus;
use uuid::Uuid;

use super::Leadership;
use crate::actors::Scheduler;
use crate::store::{self, Db};

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
pub(super) async fn catch_up(me: Leadership) {
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
    // The groups: a handful of rows, read whole (a deletion leaves no `updated_at`
    // behind); the arbiter ignores the same tree again.
    s.groups_changed(store::list_groups(db).await?).await;
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
