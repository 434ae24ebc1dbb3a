//! One scheduling cycle on the ledger: the decision of DESIGN §2 (progressive
//! filling in fair-share order, best fit, the sticky reservation and EASY backfill
//! around it), reading only the users that can change it.
//!
//! With backfill on, users are merged in exact rank order from a few **streams**:
//! each head shape that fits some cluster's free capacity (a shape that does not fit
//! now cannot fit later in the cycle: free capacity only shrinks), the users granted
//! during the cycle with their next head, and, once a grant has happened while no
//! reservation is held, the overdue heads (a grant can raise the largest key among
//! holders, so a head past the guard may become passed over). Every other user would
//! only be told why it waits, which [`super::Ledger::reason`] derives when asked.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashSet};

use super::FastHash;

use super::index::Verdict;
use super::{Ledger, Rank, Shape, Uid};
use crate::policy::fit::leftover;
use crate::policy::reservation::{cmp_raw_end, shadow_sorted, Backfill, Hold, Shadow};
use crate::policy::share::cmp_f64;
use crate::policy::{Grant, JobId, QueuedJob, Reservation, Resources, Seconds};

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
    Shape(u64, u64, u64),
    Overdue,
    Granted,
}

/// One cycle's working state.
struct Run {
    now: Seconds,
    rooms: Vec<Room>,
    grants: Vec<Grant>,
    waited: Vec<Seconds>,
    /// Grants to record on their clusters once the cycle is done: job, user, cluster,
    /// request, expected end.
    granted: Vec<(JobId, Uid, usize, Resources, Option<Seconds>)>,
    /// Users taken out of the indexes (served, or read by a stream): each is read at
    /// most once per cycle, and indexed again at its end.
    taken: HashSet<Uid, FastHash>,
    /// Users granted since the holders' index last saw them (it is brought up to date
    /// when the holders' maximum is needed).
    stale_holders: Vec<Uid>,
    /// Users set aside by a query (to index again at the end).
    aside: Vec<Uid>,
    emptied: Vec<Uid>,
    /// The largest quantized key among holders, until the next grant.
    holders_max: Option<f64>,
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
        self.advance_overdue(now);
        let mut run = Run {
            now,
            rooms: self.rooms(),
            grants: Vec::new(),
            waited: Vec::new(),
            granted: Vec::new(),
            taken: HashSet::default(),
            stale_holders: Vec::new(),
            aside: Vec::new(),
            emptied: Vec::new(),
            holders_max: None,
        };
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
                };
                Room {
                    cluster: k,
                    total: c.total,
                    free: view.free(),
                    ceiling: c.total.saturating_sub(view.foreign()),
                    held: c.outstanding,
                    added: Vec::new(),
                }
            })
            .collect()
    }

    /// Records the grants on their clusters, indexes again every user the cycle took
    /// out, and keeps what explanations need.
    fn finish(&mut self, run: Run, stopped_for: Option<JobId>, hold: Option<Hold>) -> CycleResult {
        let now = run.now;
        self.jobs.reserve(run.granted.len());
        for &(job, uid, k, resources, end) in &run.granted {
            let c = &mut self.clusters[k];
            c.outstanding += resources;
            c.unreported += resources;
            let end_key = c.add(job, resources, end);
            self.jobs.insert(
                job,
                super::Job {
                    uid,
                    cluster: k,
                    resources,
                    expected_end: end,
                    reported: false,
                    end_key,
                },
            );
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
        let reservation = hold.as_ref().map(|h| h.reservation.clone());
        self.reservation.clone_from(&reservation);
        self.last = Some(super::LastCycle {
            now,
            backfill: self.config.backfill,
            no_healthy: run.rooms.is_empty(),
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
        });
        CycleResult {
            grants: run.grants,
            waited: run.waited,
            stopped_for,
            reservation,
            emptied: run.emptied,
        }
    }

    // ----- fitting ------------------------------------------------------------

    /// The best-fit room whose free capacity holds `request`: the smallest
    /// [`leftover`], ties to the earlier (smaller name).
    fn best_fit_room(rooms: &[Room], request: &Resources) -> Option<usize> {
        let mut best: Option<(usize, f64)> = None;
        for (i, room) in rooms.iter().enumerate() {
            if !request.fits_within(&room.free) {
                continue;
            }
            let score = leftover(request, &room.free, &room.total);
            if best.is_none_or(|(_, b)| cmp_f64(score, b) == Ordering::Less) {
                best = Some((i, score));
            }
        }
        best.map(|(i, _)| i)
    }

    fn fits_some_room(rooms: &[Room], request: &Resources) -> bool {
        rooms.iter().any(|r| request.fits_within(&r.free))
    }

    /// The best-fit room whose free capacity holds `job` and where starting it does
    /// not delay the reservation, with how it is admitted there.
    fn admissible_room(
        run: &Run,
        job: &QueuedJob,
        hold: Option<&Hold>,
    ) -> Option<(usize, Backfill)> {
        let mut best: Option<(usize, Backfill, f64)> = None;
        for (k, room) in run.rooms.iter().enumerate() {
            if !job.resources.fits_within(&room.free) {
                continue;
            }
            let how = match hold {
                Some(h) if h.slot == k => h.admits(run.now, &job.resources, job.runtime_estimate),
                _ => Backfill::EndsBefore,
            };
            if how == Backfill::No {
                continue;
            }
            let score = leftover(&job.resources, &room.free, &room.total);
            if best.is_none_or(|(_, _, b)| cmp_f64(score, b) == Ordering::Less) {
                best = Some((k, how, score));
            }
        }
        best.map(|(k, how, _)| (k, how))
    }

    /// The shadow of `request` on `run.rooms[k]`: its outstanding jobs and this
    /// cycle's grants there, walked by expected end.
    fn room_shadow(&self, run: &Run, k: usize, request: &Resources) -> Shadow {
        let room = &run.rooms[k];
        let mut added: Vec<(Option<Seconds>, Resources)> = room.added.clone();
        added.sort_by(|a, b| cmp_raw_end(a.0, b.0));
        let stored = self.clusters[room.cluster]
            .ends
            .iter()
            .map(|(key, (_, r))| (key.end, *r));
        // A stable merge: on equal ends, the cluster's jobs before this cycle's.
        let mut stored = stored.peekable();
        let mut added = added.into_iter().peekable();
        let merged = std::iter::from_fn(move || match (stored.peek(), added.peek()) {
            (Some(a), Some(b)) => {
                if cmp_raw_end(b.0, a.0) == Ordering::Less {
                    added.next()
                } else {
                    stored.next()
                }
            }
            (Some(_), None) => stored.next(),
            (None, Some(_)) => added.next(),
            (None, None) => None,
        });
        shadow_sorted(run.now, request, room.ceiling, room.held, merged)
    }

    /// The room where `request` is expected to start soonest (unknown starts last,
    /// ties by name), among those whose total can hold it.
    fn soonest_room(&self, run: &Run, request: &Resources) -> Option<usize> {
        let mut best: Option<(usize, Option<Seconds>)> = None;
        for k in 0..run.rooms.len() {
            if !request.fits_within(&run.rooms[k].total) {
                continue;
            }
            let start = self.room_shadow(run, k, request).start;
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

    // ----- granting -----------------------------------------------------------

    /// Grants `uid`'s effective head on `run.rooms[k]`: the user's allocation grows,
    /// its head moves on, the room's free capacity shrinks.
    fn grant(&mut self, run: &mut Run, k: usize, uid: Uid) {
        let now = run.now;
        let a = &self.accounts[uid as usize];
        let Some(job) = a.head().cloned() else {
            return;
        };
        let cluster = run.rooms[k].cluster;
        let room = &mut run.rooms[k];
        room.free = room.free.saturating_sub(job.resources);
        room.held += job.resources;
        let end = job.runtime_estimate.map(|e| now + e);
        room.added.push((end, job.resources));
        run.grants.push(Grant {
            user: a.name.to_string(),
            job_id: job.job_id,
            cluster: self.clusters[cluster].name.clone(),
            resources: job.resources,
        });
        run.granted
            .push((job.job_id, uid, cluster, job.resources, end));
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
        if a.window.is_empty() {
            a.emptied = true;
            run.emptied.push(uid);
        }
        self.skip_unrunnable(uid, at);
        // It holds capacity now, with a new key: the holders' maximum must see it.
        run.stale_holders.push(uid);
        run.holders_max = None;
        run.taken.insert(uid);
    }

    /// The largest quantized key among listed users holding capacity (`−∞` if none).
    fn holders_max(&mut self, run: &mut Run) -> f64 {
        if let Some(max) = run.holders_max {
            return max;
        }
        let now = run.now;
        for uid in std::mem::take(&mut run.stale_holders) {
            // A participant of this cycle (its window may be empty now).
            self.holders.remove(uid);
            self.accounts[uid as usize].holder = false;
            if self.accounts[uid as usize].holds() {
                let (key, h) = self.key_parts(uid, now);
                let bound = self.bound(uid, now, key, h, false);
                self.index_holder(uid, bound);
            }
        }
        let mut index = std::mem::take(&mut self.holders);
        let max = if index.is_empty() {
            f64::NEG_INFINITY
        } else {
            let (top, skipped) = index.pop_min(now, |uid| {
                let (key, h) = self.key_parts(uid, now);
                let bound = self.bound(uid, now, key, h, false);
                let rank = self.rank_of(uid, key);
                Verdict::Rank(
                    Rank {
                        key: -rank.key,
                        head_at: 0.0,
                        name: rank.name,
                    },
                    bound,
                )
            });
            debug_assert!(skipped.is_empty());
            match top {
                Some((rank, uid)) => {
                    let (key, h) = self.key_parts(uid, now);
                    let bound = self.bound(uid, now, key, h, false);
                    index.insert(uid, 0.0, &rank.name, bound);
                    -rank.key
                }
                None => f64::NEG_INFINITY,
            }
        };
        self.holders = index;
        run.holders_max = Some(max);
        max
    }

    /// Whether the effective head of `uid` is starved: waited past the guard,
    /// eligible, fits no room's free capacity, and passed over (some holder has a
    /// larger quantized key).
    fn starved(&mut self, run: &mut Run, uid: Uid) -> bool {
        let now = run.now;
        let a = &self.accounts[uid as usize];
        let Some(head) = a.head() else {
            return false;
        };
        if !super::overdue(now, head.submitted_at, self.config.starvation_guard)
            || a.ineligibility(head).is_some()
            || Self::best_fit_room(&run.rooms, &head.resources).is_some()
        {
            return false;
        }
        let key = self.rank(uid, now).key;
        let max = self.holders_max(run);
        cmp_f64(max, key) == Ordering::Greater
    }

    // ----- the reservation ----------------------------------------------------

    /// A reservation of `run.rooms[k]` for the effective head of `uid`, made at
    /// `since`.
    fn hold_for(&self, run: &Run, uid: Uid, k: usize, since: Seconds) -> Option<Hold> {
        let a = &self.accounts[uid as usize];
        let job = a.head()?;
        let shadow = self.room_shadow(run, k, &job.resources);
        Some(Hold {
            slot: k,
            user: uid as usize,
            shadow,
            reservation: Reservation {
                job_id: job.job_id,
                user: a.name.to_string(),
                cluster: self.clusters[run.rooms[k].cluster].name.clone(),
                resources: job.resources,
                expected_start: shadow.start,
                since,
            },
        })
    }

    /// The held reservation, if its job is still its user's effective head, the user
    /// is eligible for it, and some healthy cluster can hold it: its own while that
    /// one is healthy and large enough, else the one where it starts soonest.
    fn still_held(&self, run: &Run, held: &Reservation) -> Option<Hold> {
        let &uid = self.by_name.get(held.user.as_str())?;
        let a = &self.accounts[uid as usize];
        if !a.listed() {
            return None;
        }
        let head = a.head().filter(|j| j.job_id == held.job_id)?;
        if a.ineligibility(head).is_some() {
            return None;
        }
        let k = run
            .rooms
            .iter()
            .position(|r| {
                self.clusters[r.cluster].name == held.cluster
                    && head.resources.fits_within(&r.total)
            })
            .or_else(|| self.soonest_room(run, &head.resources))?;
        self.hold_for(run, uid, k, held.since)
    }

    /// Settles the reservation before filling: keeps the held one if still valid,
    /// grants its job if it fits now, and otherwise (or then) makes one for the
    /// starved head first in fair-share order.
    fn reserve(&mut self, run: &mut Run) -> Option<Hold> {
        if let Some(held) = self.reservation.clone() {
            if let Some(hold) = self.still_held(run, &held) {
                match Self::best_fit_room(&run.rooms, &hold.reservation.resources) {
                    Some(k) => {
                        let uid = hold.user as Uid;
                        self.grant(run, k, uid);
                        // A participant of the filling like any other.
                        run.taken.remove(&uid);
                        self.reindex(uid, run.now);
                    }
                    None => return Some(hold),
                }
            }
        }
        self.new_reservation(run)
    }

    /// A reservation for the starved head first in fair-share order, if any: the
    /// first overdue head that fits no room's free capacity, if its user is passed
    /// over (if it is not, no later one is: their keys are no smaller).
    fn new_reservation(&mut self, run: &mut Run) -> Option<Hold> {
        if self.overdue.is_empty() {
            return None;
        }
        let max = self.holders_max(run);
        let now = run.now;
        let mut index = std::mem::take(&mut self.overdue);
        let (first, skipped) = index.pop_min(now, |uid| {
            let a = &self.accounts[uid as usize];
            match a.head() {
                Some(h) if !Self::fits_some_room(&run.rooms, &h.resources) => {
                    let (rank, bound) = self.rank_and_bound(uid, now);
                    Verdict::Rank(rank, bound)
                }
                _ => Verdict::Skip,
            }
        });
        for uid in skipped.into_iter().chain(first.as_ref().map(|f| f.1)) {
            let a = &self.accounts[uid as usize];
            let at = a.head().map_or(f64::INFINITY, |h| h.submitted_at);
            index.insert(uid, at, &a.name, self.rank_and_bound(uid, now).1);
        }
        self.overdue = index;
        let (rank, uid) = first?;
        if cmp_f64(max, rank.key) != Ordering::Greater {
            return None;
        }
        let job = self.accounts[uid as usize].head()?.resources;
        let k = self.soonest_room(run, &job)?;
        self.hold_for(run, uid, k, now)
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

    /// The next overdue user ranked after `floor`, not taken yet, taken out.
    fn pull_overdue(&mut self, run: &mut Run, floor: &Rank) -> Option<(Rank, Uid)> {
        let now = run.now;
        let mut index = std::mem::take(&mut self.overdue);
        let (got, skipped) = index.pop_min(now, |uid| {
            if run.taken.contains(&uid) {
                return Verdict::Skip;
            }
            let (rank, bound) = self.rank_and_bound(uid, now);
            if rank <= *floor {
                Verdict::Skip
            } else {
                Verdict::Rank(rank, bound)
            }
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

    /// Pushes the next entry of `source` (a shape only while it fits some room, the
    /// overdue heads only while no reservation is held).
    fn refill(&mut self, run: &mut Run, merge: &mut Merge, source: Source, floor: Option<&Rank>) {
        let next = match source {
            Source::Shape(c, g, m) => {
                let shape = Shape([c, g, m]);
                if !self.config.backfill || Self::fits_some_room(&run.rooms, &shape.resources()) {
                    self.pull_shape(run, shape)
                } else {
                    None
                }
            }
            Source::Overdue => match floor {
                Some(floor) => self.pull_overdue(run, floor),
                None => None,
            },
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
            let [c, g, m] = shape.0;
            self.refill(run, merge, Source::Shape(c, g, m), None);
        }
    }

    /// Backfill off: progressive filling in fair-share order that stops at the first
    /// head that fits nowhere. Returns that job, if the cycle stopped.
    fn strict(&mut self, run: &mut Run) -> Option<JobId> {
        let mut merge = Merge::new();
        self.open_streams(run, &mut merge);
        while let Some(Reverse((_, uid, source))) = merge.pop() {
            self.refill(run, &mut merge, source, None);
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
    /// cluster only if it does not delay the reservation. Returns the reserved job
    /// and the reservation.
    fn fill(&mut self, run: &mut Run, mut hold: Option<Hold>) -> (Option<JobId>, Option<Hold>) {
        let mut merge = Merge::new();
        self.open_streams(run, &mut merge);
        // Overdue heads ranked after this are read once a grant has happened with no
        // reservation held (before it, none of them is passed over: see
        // `new_reservation`).
        let mut overdue_floor: Option<Rank> = None;
        while let Some(Reverse((rank, uid, source))) = merge.pop() {
            if source == Source::Overdue && hold.is_some() {
                overdue_floor = None;
            }
            self.refill(run, &mut merge, source, overdue_floor.as_ref());
            if hold.as_ref().is_some_and(|h| h.user == uid as usize) {
                continue;
            }
            let Some(head) = self.accounts[uid as usize].head().cloned() else {
                continue;
            };
            match Self::admissible_room(run, &head, hold.as_ref()) {
                Some((k, how)) => {
                    if let Some(h) = hold.as_mut().filter(|h| h.slot == k) {
                        h.take(&head.resources, how);
                    }
                    self.grant(run, k, uid);
                    if self.accounts[uid as usize].eligible() {
                        let next = self.rank(uid, run.now);
                        merge.push(Reverse((next, uid, Source::Granted)));
                    }
                    if hold.is_none() && overdue_floor.is_none() && !self.overdue.is_empty() {
                        overdue_floor = Some(rank.clone());
                        self.refill(run, &mut merge, Source::Overdue, Some(&rank));
                    }
                }
                None if hold.is_none() && self.starved(run, uid) => {
                    let now = run.now;
                    hold = self
                        .soonest_room(run, &head.resources)
                        .and_then(|k| self.hold_for(run, uid, k, now));
                }
                None => {}
            }
        }
        (hold.as_ref().map(|h| h.reservation.job_id), hold)
    }
}
