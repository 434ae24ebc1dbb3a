//! Fitting, the holders' largest key, starvation and the sticky reservation, during
//! a cycle.

use std::cmp::Ordering;

use super::cycle::{Room, Run};
use super::index::Verdict;
use super::{Ledger, Rank, Uid};
use crate::policy::fit::tightest;
use crate::policy::reservation::{cmp_raw_end, shadow_sorted, Backfill, Hold, Shadow};
use crate::policy::share::cmp_f64;
use crate::policy::{QueuedJob, Reservation, Resources, Seconds};

impl Ledger {
    // ----- fitting ------------------------------------------------------------

    /// The best-fit room whose free capacity holds `request`: the smallest
    /// [`leftover`], ties to the earlier (smaller name).
    pub(super) fn best_fit_room(rooms: &[Room], request: &Resources) -> Option<usize> {
        tightest(
            request,
            rooms.iter().enumerate().map(|(k, r)| (k, r.free, r.total)),
        )
    }

    pub(super) fn fits_some_room(rooms: &[Room], request: &Resources) -> bool {
        rooms.iter().any(|r| request.fits_within(&r.free))
    }

    /// The best-fit room whose free capacity holds `job` and where starting it does
    /// not delay the reservation, with how it is admitted there.
    pub(super) fn admissible_room(
        run: &Run,
        job: &QueuedJob,
        hold: Option<&Hold>,
    ) -> Option<(usize, Backfill)> {
        let admitted = run.rooms.iter().enumerate().filter_map(|(k, room)| {
            let how = match hold {
                Some(h) if h.slot == k => h.admits(run.now, &job.resources, job.runtime_estimate),
                _ => Backfill::EndsBefore,
            };
            (how != Backfill::No).then_some(((k, how), room.free, room.total))
        });
        tightest(&job.resources, admitted)
    }

    /// The shadow of `request` on `run.rooms[k]`: its outstanding jobs and this
    /// cycle's grants there, walked by expected end.
    pub(super) fn room_shadow(&self, run: &Run, k: usize, request: &Resources) -> Shadow {
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
    pub(super) fn soonest_room(&self, run: &Run, request: &Resources) -> Option<usize> {
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

    /// The largest quantized key among listed users holding capacity (`−∞` if none).
    pub(super) fn holders_max(&mut self, run: &mut Run) -> f64 {
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
    pub(super) fn starved(&mut self, run: &mut Run, uid: Uid) -> bool {
        let now = run.now;
        let a = &self.accounts[uid as usize];
        let Some(head) = a.head() else {
            return false;
        };
        if !super::overdue(now, head.submitted_at, self.guard)
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
    pub(super) fn hold_for(&self, run: &Run, uid: Uid, k: usize, since: Seconds) -> Option<Hold> {
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
    pub(super) fn still_held(&self, run: &Run, held: &Reservation) -> Option<Hold> {
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
    pub(super) fn reserve(&mut self, run: &mut Run) -> Option<Hold> {
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
    pub(super) fn new_reservation(&mut self, run: &mut Run) -> Option<Hold> {
        if self.overdue.is_empty() {
            return None;
        }
        let max = self.holders_max(run);
        let now = run.now;
        let mut index = std::mem::take(&mut self.overdue);
        let (first, skipped) = index.pop_min(now, |uid| {
            let a = &self.accounts[uid as usize];
            match a.head() {
                Some(h)
                    if super::overdue(now, h.submitted_at, self.guard)
                        && !Self::fits_some_room(&run.rooms, &h.resources) =>
                {
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
}
