//! Fitting and the sticky reservation, during a cycle.

use std::cmp::Ordering;

use super::cycle::{Room, Run};
use super::{Ledger, Uid};
use crate::policy::fit::tightest;
use crate::policy::reservation::{cmp_raw_end, shadow_sorted, Backfill, Hold, Shadow};
use crate::policy::share::cmp_f64;
use crate::policy::{QueuedJob, Reservation, Resources, Seconds};

impl Ledger {
    // ----- fitting ------------------------------------------------------------

    /// The best-fit room whose free capacity holds `request`: the smallest
    /// [`leftover`], ties to the earlier (smaller name).
    ///
    /// [`leftover`]: crate::policy::fit::leftover
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
    /// and grants its job if it fits now (then none is held: a new one is made only
    /// when the filling would pass a starved head over, [`Ledger::fill`]).
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
        None
    }
}
