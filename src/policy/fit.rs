//! Fitting: the healthy clusters during a cycle, best fit, and what a grant
//! leaves free.

use std::cmp::Ordering;

use super::reservation::{shadow, OutstandingJob, Shadow};
use super::share::cmp_f64;
use super::{ClusterView, Resources, Seconds};

/// A healthy cluster during a cycle: its capacity and what is still free.
pub(crate) struct Slot<'a> {
    /// Index in the caller's slice.
    pub index: usize,
    pub name: &'a str,
    pub total: Resources,
    pub free: Resources,
    /// `total − foreign`: the most that can ever be free for this service.
    pub ceiling: Resources,
    /// What this service's outstanding jobs hold, grants of this cycle
    /// included.
    pub held: Resources,
    /// Its outstanding jobs at the start of the cycle.
    pub jobs: &'a [OutstandingJob],
    /// Jobs granted to it during this cycle.
    pub added: Vec<OutstandingJob>,
}

impl Slot<'_> {
    /// The shadow of `request` on this cluster at `now` ([`shadow`]).
    pub fn shadow(&self, now: Seconds, request: &Resources) -> Shadow {
        let jobs: Vec<OutstandingJob> = self.jobs.iter().chain(&self.added).copied().collect();
        shadow(now, request, self.ceiling, self.held, &jobs)
    }
}

/// The healthy clusters, sorted by name, with their free capacity.
pub(crate) fn healthy_slots(clusters: &[ClusterView]) -> Vec<Slot<'_>> {
    let mut slots: Vec<Slot<'_>> = clusters
        .iter()
        .enumerate()
        .filter(|(_, c)| c.healthy)
        .map(|(index, c)| Slot {
            index,
            name: &c.name,
            total: c.total,
            free: c.free(),
            ceiling: c.total.saturating_sub(c.foreign()),
            held: c.outstanding,
            jobs: &c.jobs,
            added: Vec::new(),
        })
        .collect();
    slots.sort_by(|a, b| a.name.cmp(b.name));
    slots
}

/// What a grant would leave free, as a sum of fractions of the cluster:
/// `Σ_k (free_k − req_k) / total_k` over resources with `total_k > 0`.
pub(crate) fn leftover(request: &Resources, free: &Resources, total: &Resources) -> f64 {
    let (req, free, total) = (request.components(), free.components(), total.components());
    (0..req.len())
        .filter(|&k| total[k] > 0.0)
        .map(|k| (free[k] - req[k]) / total[k])
        .sum()
}

/// Index (in `slots`) of the best-fit slot for `request`: among those whose
/// free capacity holds it, the smallest [`leftover`]; ties go to the earlier
/// slot, that is the smaller name.
pub(crate) fn best_fit_slot(request: &Resources, slots: &[Slot<'_>]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, slot) in slots.iter().enumerate() {
        if !request.fits_within(&slot.free) {
            continue;
        }
        let score = leftover(request, &slot.free, &slot.total);
        if best.is_none_or(|(_, b)| cmp_f64(score, b) == Ordering::Less) {
            best = Some((i, score));
        }
    }
    best.map(|(i, _)| i)
}

/// The best-fit healthy cluster for `request` given the clusters' current
/// [`ClusterView::free`]: the one whose free capacity holds the request and
/// that is left tightest, `min Σ_k (free_k − req_k) / total_k` over resources
/// with `total_k > 0`, ties by name. `None` when no healthy cluster has room.
#[must_use]
pub fn best_fit<'a>(request: &Resources, clusters: &'a [ClusterView]) -> Option<&'a ClusterView> {
    let slots = healthy_slots(clusters);
    best_fit_slot(request, &slots).and_then(|i| clusters.get(slots[i].index))
}

/// True when some healthy cluster could hold `request` when empty
/// (`request ≤ total`). A job for which this is false fits nowhere: the
/// service refuses it at submit time (422) and the policy never lets it block.
#[must_use]
pub fn fits_some_cluster(request: &Resources, clusters: &[ClusterView]) -> bool {
    clusters
        .iter()
        .any(|c| c.healthy && request.fits_within(&c.total))
}
