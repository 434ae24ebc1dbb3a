//! One scheduling cycle on the ledger: the decision of DESIGN §2 (progressive
//! filling in fair-share order, best fit, the sticky reservation and EASY backfill
//! around it), reading only the users that can change it.
//!
//! With backfill on, users are merged in exact rank order from a few **streams**:
//! each head shape that fits some cluster's free capacity (a shape that does not fit
//! now cannot fit later in the cycle: free capacity only shrinks), the users granted
//! during the cycle with their next head, and, while no reservation is held, the
//! overdue heads (one that fits no free capacity is starved when a later user's job
//! is about to be granted: passed over by backfill), read only until one of them is
//! found or nothing else is left to grant. Every other user would only be told why
//! it waits, which [`super::Ledger::reason`] derives when asked.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use super::FastHash;

use super::index::Verdict;
use super::{Ledger, Rank, Shape, Uid};
use crate::policy::reservation::Hold;
use crate::policy::{licenses, Grant, JobId, Reservation, Resources, Seconds};

/// A healthy cluster during a cycle.
#[derive(Debug)]
pub(super) struct Room {
    /// Index in the ledger's clusters.
    pub cluster: usize,
    pub total: Resources,
    pub free: Resources,
    /// `total − foreign`: the most that can ever be free for this service.
    pub ceiling: Resources,
    /// What this service's outstanding jobs hold, this cycle's grants included.
    pub held: Resources,
    /// This cycle's grants here: expected end and request, in grant order.
    pub added: Vec<(Option<Seconds>, Resources)>,
}

/// What one cycle decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleResult {
    /// The jobs to start, in grant order; the ledger already counts them as
    /// outstanding.
    pub grants: Vec<Grant>,
    /// The reserved job (backfill on), or the head a strict cycle stopped at.
    pub stopped_for: Option<JobId>,
    /// The reservation after the cycle.
    pub reservation: Option<Reservation>,
    /// For each grant, how long its job had queued (seconds from its submit time to
    /// the cycle).
    pub waited: Vec<Seconds>,
    /// Users whose window this cycle's grants emptied (they took part in it).
    pub(crate) emptied: Vec<Uid>,
}

/// Where a merged entry came from, so that its stream is read again when it is
/// taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    Shape(Shape),
    Overdue,
    Granted,
}

/// One cycle's working state.
pub(super) struct Run {
    pub(super) now: Seconds,
    pub(super) rooms: Vec<Room>,
    pub(super) grants: Vec<Grant>,
    pub(super) waited: Vec<Seconds>,
    /// Grants to record on their clusters once the cycle is done: job, user, cluster,
    /// request, expected end.
    pub(super) granted: Vec<(JobId, Uid, usize, Resources, Option<Seconds>)>,
    /// The granted jobs that may be preempted, with their preemptions so far.
    pub(super) preemptible: Vec<(JobId, u32)>,
    /// Users taken out of the indexes (served, or read by a stream): each is read at
    /// most once per cycle, and indexed again at its end.
    pub(super) taken: HashSet<Uid, FastHash>,
    /// Users set aside by a query (to index again at the end).
    pub(super) aside: Vec<Uid>,
    pub(super) emptied: Vec<Uid>,
}

impl Run {
    /// A cycle's state at `now` over `rooms`, nothing granted yet.
    fn new(now: Seconds, rooms: Vec<Room>) -> Run {
        Run {
            now,
            rooms,
            grants: Vec::new(),
            waited: Vec::new(),
            granted: Vec::new(),
            preemptible: Vec::new(),
            taken: HashSet::default(),
            aside: Vec::new(),
            emptied: Vec::new(),
        }
    }
}

type Merge = BinaryHeap<Reverse<(Rank, Uid, Source)>>;

impl Ledger {
    /// Runs one scheduling cycle at `now` (seconds): the grants (already counted as
    /// outstanding here, taken from their users' windows), the reservation to keep,
    /// and what explanations will say until the next cycle. The same decision as
    /// [`crate::policy::run_cycle`] on [`Ledger::user_views`],
    /// [`Ledger::cluster_views`] and [`Ledger::reservation`].
    pub fn cycle(&mut self, now: Seconds) -> CycleResult {
        let now = self.clock(now);
        if !self.tree.is_empty() || self.clusters.iter().any(|c| c.pool) {
            return self.cycle_grouped(now);
        }
        self.advance_overdue(now);
        let mut run = Run::new(now, self.rooms());
        self.serve_claims(&mut run);
        let (stopped_for, hold) = if run.rooms.is_empty() {
            (None, None)
        } else if self.config.backfill {
            let hold = self.reserve(&mut run);
            self.fill(&mut run, hold)
        } else {
            (self.strict(&mut run), None)
        };
        self.finish(run, stopped_for, hold)
    }

    /// The healthy clusters in name order, as a cycle starts with them.
    fn rooms(&self) -> Vec<Room> {
        let licenses = &self.config.licenses;
        // Licenses are one pool: what every outstanding job holds, on any cluster.
        let pooled = if licenses::any(licenses) {
            self.clusters.iter().fold(Resources::ZERO, |sum, c| {
                sum + licenses::part(&c.outstanding, licenses)
            })
        } else {
            Resources::ZERO
        };
        self.by_cluster_name
            .values()
            .filter(|&&k| self.clusters[k].healthy)
            .map(|&k| {
                let c = &self.clusters[k];
                let view = crate::policy::ClusterView {
                    name: String::new(),
                    healthy: true,
                    total: c.total,
                    used_reported: c.used_reported,
                    outstanding: c.outstanding,
                    unreported: c.unreported,
                    jobs: Vec::new(),
                    pool: false,
                };
                Room {
                    cluster: k,
                    total: c.total,
                    free: licenses::with_free(
                        view.free().saturating_sub(c.withheld),
                        licenses,
                        &pooled,
                    ),
                    ceiling: licenses::with_counts(
                        c.total.saturating_sub(view.foreign()),
                        licenses,
                    ),
                    held: licenses::with_held(c.outstanding, licenses, &pooled),
                    added: Vec::new(),
                }
            })
            .collect()
    }

    /// Records the grants on their clusters, indexes again every user the cycle took
    /// out, and keeps what explanations need.
    fn finish(&mut self, run: Run, stopped_for: Option<JobId>, hold: Option<Hold>) -> CycleResult {
        let now = run.now;
        self.book_run(&run);
        let reservation = hold.as_ref().map(|h| h.reservation.clone());
        self.reservation.clone_from(&reservation);
        self.last = Some(super::LastCycle {
            now,
            free_after: run.rooms.iter().map(|r| r.free).collect(),
            hold: hold.map(|h| {
                let expected_in = h.expected_in(now);
                (h.reservation, expected_in)
            }),
            stopped_for: if self.config.backfill {
                None
            } else {
                stopped_for
            },
            grouped: None,
        });
        CycleResult {
            grants: run.grants,
            waited: run.waited,
            stopped_for,
            reservation,
            emptied: run.emptied,
        }
    }

    /// Records `run`'s grants on their clusters (the preemptible ones as candidates)
    /// and indexes again every user it took out, set aside or emptied.
    fn book_run(&mut self, run: &Run) {
        let now = run.now;
        self.jobs.reserve(run.granted.len());
        for &(job, uid, k, resources, end) in &run.granted {
            self.book(now, job, uid, k, resources, end);
        }
        for &(job, preemptions) in &run.preemptible {
            self.set_preemptible(job, now, preemptions);
        }
        let mut again: Vec<Uid> = run
            .taken
            .iter()
            .copied()
            .chain(run.aside.iter().copied())
            .chain(run.emptied.iter().copied())
            .collect();
        again.sort_unstable();
        again.dedup();
        for uid in again {
            self.accounts[uid as usize].emptied = false;
            self.reindex(uid, now);
        }
    }

    /// A cycle with groups or pools: the straightforward cycle (hierarchical with
    /// groups, [`crate::policy::groups`]; placing jobs by pool,
    /// [`crate::policy::admits`]) on this ledger's snapshot, O(users) per grant, its
    /// grants then booked here as the incremental cycle books its own. Its reasons
    /// and order are kept for explanations.
    fn cycle_grouped(&mut self, now: Seconds) -> CycleResult {
        self.advance_overdue(now);
        // Heads that preempted are granted first, booked before the views are taken.
        let (claimed, held) = if self.preempt.claims.is_empty() {
            (None, Vec::new())
        } else {
            let mut run = Run::new(now, self.rooms());
            let held = self.serve_claims(&mut run);
            self.book_run(&run);
            (Some(run), held)
        };
        let users = self.user_views();
        let outside = self.outside_views();
        let mut clusters = self.cluster_views();
        // What claims hold back for heads whose victims are still stopping is not
        // free to this cycle either: counted as held by this service, unreported.
        for (k, amount) in held {
            let name = &self.clusters[k].name;
            if let Some(view) = clusters.iter_mut().find(|v| &v.name == name) {
                view.outstanding += amount;
                view.unreported += amount;
            }
        }
        let out = crate::policy::oracle::run_cycle_in(
            now,
            &self.policy_config(),
            &self.tree,
            &users,
            &outside,
            &clusters,
            self.reservation.as_ref(),
        );
        let mut run = Run::new(now, self.rooms());
        for g in &out.grants {
            let Some(&uid) = self.by_name.get(g.user.as_str()) else {
                continue;
            };
            let Some(k) = run
                .rooms
                .iter()
                .position(|r| self.clusters[r.cluster].name == g.cluster)
            else {
                continue;
            };
            debug_assert_eq!(
                self.accounts[uid as usize].head().map(|j| j.job_id),
                Some(g.job_id),
                "the hierarchical cycle grants effective heads"
            );
            run.taken.insert(uid);
            self.grant(&mut run, k, uid);
        }
        let mut result = self.finish(run, out.stopped_for, None);
        result.stopped_for = out.stopped_for;
        result.reservation.clone_from(&out.reservation);
        self.reservation.clone_from(&out.reservation);
        if let Some(last) = &mut self.last {
            last.hold = out.reservation.as_ref().map(|r| {
                let expected_in = out.pending.iter().find_map(|(id, reason)| match reason {
                    crate::policy::PendingReason::Reserved { expected_in, .. }
                        if *id == r.job_id =>
                    {
                        *expected_in
                    }
                    _ => None,
                });
                (r.clone(), expected_in)
            });
            last.grouped = Some(super::Grouped {
                reasons: out.pending.iter().cloned().collect(),
                pending: out.pending,
                order: out.order,
            });
        }
        if let Some(early) = claimed {
            result.grants.splice(0..0, early.grants);
            result.waited.splice(0..0, early.waited);
            result.emptied.splice(0..0, early.emptied);
        }
        result
    }

    // ----- granting -----------------------------------------------------------

    /// Grants `uid`'s effective head on `run.rooms[k]`: the user's allocation grows,
    /// its head moves on, the room's free capacity shrinks.
    pub(super) fn grant(&mut self, run: &mut Run, k: usize, uid: Uid) {
        let now = run.now;
        let a = &self.accounts[uid as usize];
        let Some(job) = a.head().cloned() else {
            return;
        };
        let cluster = run.rooms[k].cluster;
        let room = &mut run.rooms[k];
        room.free = room.free.saturating_sub(job.resources);
        room.held += job.resources;
        licenses::spread_grant(
            &job.resources,
            &self.config.licenses,
            run.rooms
                .iter_mut()
                .enumerate()
                .filter(|&(j, _)| j != k)
                .map(|(_, r)| (&mut r.free, &mut r.held)),
        );
        let end = job.runtime_estimate.map(|e| now + e);
        run.rooms[k].added.push((end, job.resources));
        run.grants.push(Grant {
            user: a.name.to_string(),
            job_id: job.job_id,
            cluster: self.clusters[cluster].name.clone(),
            resources: job.resources,
        });
        run.granted
            .push((job.job_id, uid, cluster, job.resources, end));
        if job.preemptible {
            run.preemptible.push((job.job_id, job.preemptions));
        }
        run.waited.push(now - job.submitted_at);
        // Its index entries are stale from here (it is taken, so no stream reads it
        // again); the end of the cycle indexes it afresh.
        self.touch_usage(uid, now);
        let capacity = self.capacity;
        let a = &mut self.accounts[uid as usize];
        a.allocation += job.resources;
        a.outstanding = a.outstanding.saturating_add(1);
        a.share = crate::policy::dominant_share(&a.allocation, &capacity);
        let at = a.cursor;
        a.window.remove(at);
        a.queued = a.queued.saturating_sub(job.resources);
        if a.window.is_empty() {
            a.emptied = true;
            run.emptied.push(uid);
        }
        self.skip_unrunnable(uid, at);
        run.taken.insert(uid);
    }

    // ----- streams ------------------------------------------------------------

    /// The next user of head shape `shape` in rank order not taken yet, taken out.
    fn pull_shape(&mut self, run: &mut Run, shape: Shape) -> Option<(Rank, Uid)> {
        let now = run.now;
        let mut index = self.shapes.remove(&shape)?;
        let (got, skipped) = index.pop_min(now, |uid| {
            if run.taken.contains(&uid) {
                Verdict::Skip
            } else {
                let (rank, bound) = self.rank_and_bound(uid, now);
                Verdict::Rank(rank, bound)
            }
        });
        for uid in skipped {
            self.accounts[uid as usize].shape = None;
        }
        if !index.is_empty() {
            self.shapes.insert(shape, index);
        }
        let (rank, uid) = got?;
        self.accounts[uid as usize].shape = None;
        run.taken.insert(uid);
        Some((rank, uid))
    }

    /// The next overdue user in rank order not taken yet, taken out.
    fn pull_overdue(&mut self, run: &mut Run) -> Option<(Rank, Uid)> {
        let now = run.now;
        let mut index = std::mem::take(&mut self.overdue);
        let (got, skipped) = index.pop_min(now, |uid| {
            if run.taken.contains(&uid) {
                return Verdict::Skip;
            }
            let (rank, bound) = self.rank_and_bound(uid, now);
            Verdict::Rank(rank, bound)
        });
        self.overdue = index;
        for uid in skipped {
            self.accounts[uid as usize].overdue = false;
            if !run.taken.contains(&uid) {
                run.aside.push(uid);
            }
        }
        let (rank, uid) = got?;
        self.accounts[uid as usize].overdue = false;
        run.taken.insert(uid);
        Some((rank, uid))
    }

    /// Pushes the next entry of `source` (a shape only while it fits some room).
    fn refill(&mut self, run: &mut Run, merge: &mut Merge, source: Source) {
        let next = match source {
            Source::Shape(shape) => {
                if !self.config.backfill || Self::fits_some_room(&run.rooms, &shape.resources()) {
                    self.pull_shape(run, shape)
                } else {
                    None
                }
            }
            Source::Overdue => self.pull_overdue(run),
            Source::Granted => None,
        };
        if let Some((rank, uid)) = next {
            merge.push(Reverse((rank, uid, source)));
        }
    }

    /// The first entry of every head shape's stream (backfill on: only shapes that
    /// fit some room).
    fn open_streams(&mut self, run: &mut Run, merge: &mut Merge) {
        let mut shapes: Vec<Shape> = self.shapes.keys().copied().collect();
        shapes.sort_unstable_by_key(|s| s.0);
        for shape in shapes {
            self.refill(run, merge, Source::Shape(shape));
        }
    }

    /// Backfill off: progressive filling in fair-share order that stops at the first
    /// head that fits nowhere. Returns that job, if the cycle stopped.
    fn strict(&mut self, run: &mut Run) -> Option<JobId> {
        let mut merge = Merge::new();
        self.open_streams(run, &mut merge);
        while let Some(Reverse((_, uid, source))) = merge.pop() {
            self.refill(run, &mut merge, source);
            let Some(head) = self.accounts[uid as usize].head().cloned() else {
                continue;
            };
            match Self::best_fit_room(&run.rooms, &head.resources) {
                Some(k) => {
                    self.grant(run, k, uid);
                    if self.accounts[uid as usize].eligible() {
                        let rank = self.rank(uid, run.now);
                        merge.push(Reverse((rank, uid, Source::Granted)));
                    }
                }
                None => return Some(head.job_id),
            }
        }
        None
    }

    /// Backfill on: progressive filling in fair-share order over the streams,
    /// skipping users whose head fits nowhere and starting a job on the reserved
    /// cluster only if it does not delay the reservation. With none held, the
    /// overdue heads are read in rank order too, while a grant may still follow
    /// them: the first that fits no free capacity is starved once a later user's
    /// job is about to be granted (passed over by backfill), and gets the
    /// reservation before that grant. Returns the reserved job and the
    /// reservation.
    fn fill(&mut self, run: &mut Run, mut hold: Option<Hold>) -> (Option<JobId>, Option<Hold>) {
        let mut merge = Merge::new();
        self.open_streams(run, &mut merge);
        // With nothing to grant, nobody can be passed over: the overdue heads are not
        // read (a full cluster costs a fit test per shape).
        if hold.is_none() && !merge.is_empty() {
            self.refill(run, &mut merge, Source::Overdue);
        }
        // The first head met (no reservation held) that waited past the guard and
        // fitted no free capacity.
        let mut waiting: Option<Uid> = None;
        while let Some(Reverse((_, uid, source))) = merge.pop() {
            if source != Source::Overdue {
                self.refill(run, &mut merge, source);
            }
            self.fill_one(run, &mut merge, &mut hold, &mut waiting, uid);
            // The next overdue head matters only while none is starved yet, no
            // reservation is held and something may still be granted after it.
            if source == Source::Overdue && hold.is_none() && waiting.is_none() && !merge.is_empty()
            {
                self.refill(run, &mut merge, Source::Overdue);
            }
        }
        (hold.as_ref().map(|h| h.reservation.job_id), hold)
    }

    /// One user's turn in [`Ledger::fill`].
    fn fill_one(
        &mut self,
        run: &mut Run,
        merge: &mut Merge,
        hold: &mut Option<Hold>,
        waiting: &mut Option<Uid>,
        uid: Uid,
    ) {
        if hold.as_ref().is_some_and(|h| h.user == uid as usize) {
            return;
        }
        let Some(head) = self.accounts[uid as usize].head().cloned() else {
            return;
        };
        let mut admitted = Self::admissible_room(run, &head, hold.as_ref());
        if admitted.is_some() && hold.is_none() {
            if let Some(starved) = waiting.take() {
                // This grant would pass the starved head over: it gets the
                // reservation first.
                let job = self.accounts[starved as usize].head().map(|j| j.resources);
                let now = run.now;
                *hold = job
                    .and_then(|job| self.soonest_room(run, &job))
                    .and_then(|k| self.hold_for(run, starved, k, now));
                admitted = Self::admissible_room(run, &head, hold.as_ref());
            }
        }
        match admitted {
            Some((k, how)) => {
                if let Some(h) = hold.as_mut().filter(|h| h.slot == k) {
                    h.take(&head.resources, how);
                }
                self.grant(run, k, uid);
                if self.accounts[uid as usize].eligible() {
                    let next = self.rank(uid, run.now);
                    merge.push(Reverse((next, uid, Source::Granted)));
                }
            }
            None => {
                if hold.is_none()
                    && waiting.is_none()
                    && super::overdue(run.now, head.submitted_at, self.guard)
                    && self.soonest_room(run, &head.resources).is_some()
                {
                    *waiting = Some(uid);
                }
            }
        }
    }
}
