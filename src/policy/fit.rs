//! Fitting: best fit, and what a grant leaves free.

use std::cmp::Ordering;

use super::share::cmp_f64;
use super::{ClusterView, Resources};

/// What a grant would leave free, as a sum of fractions of the cluster:
/// `Σ_k (free_k − req_k) / total_k` over resources with `total_k > 0`.
pub(crate) fn leftover(request: &Resources, free: &Resources, total: &Resources) -> f64 {
    let len = request
        .custom
        .len()
        .max(free.custom.len())
        .max(total.custom.len());
    let (r, f, t) = (request.builtin(), free.builtin(), total.builtin());
    let custom = (0..len).map(|k| {
        (
            request.custom.get(k),
            free.custom.get(k),
            total.custom.get(k),
        )
    });
    (0..3)
        .map(|k| (r[k], f[k], t[k]))
        .chain(custom)
        .filter(|&(_, _, t)| t > 0.0)
        .map(|(r, f, t)| (f - r) / t)
        .sum()
}

/// Best fit: among `places` (each a tag, its free capacity and its total), the
/// tag of the one whose free capacity holds `request` and that is left tightest,
/// the smallest [`leftover`]; ties to the earlier place.
pub(crate) fn tightest<T>(
    request: &Resources,
    places: impl IntoIterator<Item = (T, Resources, Resources)>,
) -> Option<T> {
    let mut best: Option<(T, f64)> = None;
    for (tag, free, total) in places {
        if !request.fits_within(&free) {
            continue;
        }
        let score = leftover(request, &free, &total);
        if best
            .as_ref()
            .is_none_or(|(_, b)| cmp_f64(score, *b) == Ordering::Less)
        {
            best = Some((tag, score));
        }
    }
    best.map(|(tag, _)| tag)
}

/// The best-fit healthy cluster for `request` given the clusters' current
/// [`ClusterView::free`]: the one whose free capacity holds the request and
/// that is left tightest, `min Σ_k (free_k − req_k) / total_k` over resources
/// with `total_k > 0`, ties by name. `None` when no healthy cluster has room.
#[must_use]
pub fn best_fit<'a>(request: &Resources, clusters: &'a [ClusterView]) -> Option<&'a ClusterView> {
    let mut healthy: Vec<&ClusterView> = clusters.iter().filter(|c| c.healthy).collect();
    healthy.sort_by(|a, b| a.name.cmp(&b.name));
    tightest(request, healthy.into_iter().map(|c| (c, c.free(), c.total)))
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
