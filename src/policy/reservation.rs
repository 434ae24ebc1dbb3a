//! The sticky reservation and the EASY backfill test around it.
//!
//! EASY backfilling (D. Lifka, "The ANL/IBM SP scheduling system", JSSPP 1995;
//! A. Mu'alem, D. Feitelson, "Utilization, Predictability, Workloads, and User
//! Runtime Estimates in Scheduling the IBM SP2 with Backfilling", IEEE TPDS
//! 12(6), 2001): one job holds a reservation; from the expected end times of
//! the running jobs one computes its **shadow time** `S` (when enough capacity
//! will be free for it) and the **extra** capacity `E` (what will be free at
//! `S` beyond its request). Another job may start now only if it ends before
//! `S`, or if it fits in `E` (then `E` shrinks by its request). Either way the
//! reserved job can still start at `S`, provided the jobs run no longer than
//! their estimates.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use super::share::cmp_f64;
use super::{JobId, Resources, Seconds};

/// One outstanding (DISPATCHING, PENDING or RUNNING) job on a cluster, as far
/// as a reservation needs it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutstandingJob {
    /// What it holds.
    pub resources: Resources,
    /// When it is expected to end, seconds (its start plus its runtime
    /// estimate); `None` when it has no estimate. An end already in the past
    /// (the job overran its estimate) counts as "now".
    pub expected_end: Option<Seconds>,
}

/// Capacity held for one job that waited longer than the starvation guard.
///
/// State carried from one cycle to the next: [`super::CycleOutcome::reservation`]
/// is passed back as `run_cycle`'s `reservation` argument. It sticks to its
/// job (and, while that cluster stays healthy and large enough, to its
/// cluster) whatever the keys do, until the job is granted, leaves the
/// windows (cancelled), stops being its user's effective head, or its user
/// becomes ineligible (paused, at `max_running_jobs` or `max_resources`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    /// The reserved job.
    pub job_id: JobId,
    /// Its user.
    pub user: String,
    /// The cluster where capacity is held for it.
    pub cluster: String,
    /// Its request.
    pub resources: Resources,
    /// Expected start `S` as of the last cycle, seconds (`None`: unknown,
    /// because some job there has no runtime estimate).
    pub expected_start: Option<Seconds>,
    /// When the reservation was made, seconds.
    pub since: Seconds,
}

/// When a request can start on one cluster, and what is left over then.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shadow {
    /// Shadow time `S`, seconds: `now` if it fits already, else the expected
    /// end of the outstanding job after which it fits; `None` if it fits only
    /// once jobs without an estimate have ended (unknown time).
    pub start: Option<Seconds>,
    /// Extra capacity `E` at `S`: free then beyond the request.
    pub extra: Resources,
}

/// The shadow time and extra capacity of `request` on a cluster where this
/// service can use at most `ceiling` (its total less other tenants' load,
/// [`super::ClusterView::foreign`]) and its outstanding jobs hold `held` (the
/// sum of `jobs`' resources, or more), the `jobs` ending at their expected
/// ends.
///
/// Free at any time is `ceiling − (held − released)`, floored at 0, where
/// `released` sums the jobs ended by then. Walks the jobs by expected end
/// (unknown ends last), releasing each group that ends at the same known instant
/// (jobs without an estimate one at a time, in the given order), until the
/// request fits. If it never fits, `start` is `None` and `extra` is
/// zero. `O(n log n)` for `n` jobs.
#[must_use]
pub fn shadow(
    now: Seconds,
    request: &Resources,
    ceiling: Resources,
    held: Resources,
    jobs: &[OutstandingJob],
) -> Shadow {
    let mut order: Vec<(Option<Seconds>, Resources)> =
        jobs.iter().map(|j| (j.expected_end, j.resources)).collect();
    // Stable: jobs ending at the same instant are released in the order given.
    order.sort_by(|a, b| cmp_raw_end(a.0, b.0));
    shadow_sorted(now, request, ceiling, held, order)
}

/// [`shadow`] of jobs already in [`cmp_raw_end`] order, given as `(expected end,
/// resources)`.
pub(crate) fn shadow_sorted(
    now: Seconds,
    request: &Resources,
    ceiling: Resources,
    held: Resources,
    jobs: impl IntoIterator<Item = (Option<Seconds>, Resources)>,
) -> Shadow {
    let free = |released: Resources| ceiling.saturating_sub(held.saturating_sub(released));
    let mut released = Resources::ZERO;
    let avail = free(released);
    if request.fits_within(&avail) {
        return Shadow {
            start: Some(now),
            extra: avail.saturating_sub(*request),
        };
    }
    // An end already past (or NaN) counts as `now`; the order is kept (see
    // `cmp_raw_end`).
    let clamp = |e: Option<Seconds>| e.map(|e| if e > now { e } else { now });
    let mut jobs = jobs.into_iter().map(|(end, r)| (clamp(end), r)).peekable();
    while let Some((end, r)) = jobs.next() {
        released += r;
        // Jobs that end at one known instant are released together. Unknown ends
        // are not one instant: each is released on its own (in arrival order), so
        // that `E` is what is left beyond the request once just enough of them have
        // ended, not everything they hold (which let every job in as "extra" in
        // front of a reservation whose cluster ran only jobs without an estimate).
        while let Some(&(next, r)) = jobs.peek() {
            if end.is_none() || cmp_end(next, end) != Ordering::Equal {
                break;
            }
            released += r;
            jobs.next();
        }
        let avail = free(released);
        if request.fits_within(&avail) {
            return Shadow {
                start: end,
                extra: avail.saturating_sub(*request),
            };
        }
    }
    Shadow {
        start: None,
        extra: Resources::ZERO,
    }
}

/// Known ends first, in time order; unknown (`None`) last.
pub(crate) fn cmp_end(a: Option<Seconds>, b: Option<Seconds>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => cmp_f64(x, y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// The order in which a shadow walks expected ends as given (before clamping to
/// `now`): known ends by time with NaN first (a NaN end counts as already past),
/// unknown last. Clamping to any `now` keeps this order, so a list sorted once
/// stays sorted as time passes.
pub(crate) fn cmp_raw_end(a: Option<Seconds>, b: Option<Seconds>) -> Ordering {
    let low = |x: f64| {
        if x.is_nan() {
            f64::NEG_INFINITY
        } else {
            x + 0.0
        }
    };
    match (a, b) {
        (Some(x), Some(y)) => low(x).total_cmp(&low(y)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// The held reservation during a cycle: which slot, its shadow, and the extra
/// capacity backfilled jobs have not used yet.
#[derive(Clone, Debug)]
pub(crate) struct Hold {
    /// Index of the reserved cluster among the cycle's slots.
    pub slot: usize,
    /// Index of the reserved job's user among the cycle's users.
    pub user: usize,
    pub reservation: Reservation,
    pub shadow: Shadow,
}

/// How a job may start on the reserved cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backfill {
    /// It ends (by its estimate) no later than the shadow time.
    EndsBefore,
    /// It fits in the extra capacity, which it then uses up.
    InExtra,
    /// It would delay the reservation.
    No,
}

impl Hold {
    /// Whether a job of `request` with runtime `estimate` (seconds) may start
    /// at `now` on the reserved cluster without delaying the reservation.
    pub fn admits(&self, now: Seconds, request: &Resources, estimate: Option<Seconds>) -> Backfill {
        if let (Some(start), Some(est)) = (self.shadow.start, estimate) {
            if est >= 0.0 && now + est <= start {
                return Backfill::EndsBefore;
            }
        }
        if request.fits_within(&self.shadow.extra) {
            Backfill::InExtra
        } else {
            Backfill::No
        }
    }

    /// Records a backfilled start of `request` admitted as `how`.
    pub fn take(&mut self, request: &Resources, how: Backfill) {
        if how == Backfill::InExtra {
            self.shadow.extra = self.shadow.extra.saturating_sub(*request);
        }
    }

    /// Seconds from `now` to the expected start, if known.
    pub fn expected_in(&self, now: Seconds) -> Option<Seconds> {
        self.shadow.start.map(|s| (s - now).max(0.0))
    }
}
