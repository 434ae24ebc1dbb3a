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

/// The resources `request` lacks given the free capacity of each healthy cluster
/// (`frees`), by name: those that no cluster has enough of free; when every
/// resource is somewhere free enough but no cluster has all of them, every
/// resource some cluster lacks. Built-in names first (`"cpu"`, `"gpu"`,
/// `"memory"`), then custom names in name order; empty when `request` fits some
/// cluster or `frees` is empty.
#[must_use]
pub fn short_of(request: &Resources, frees: &[Resources]) -> Vec<String> {
    if frees.is_empty() || frees.iter().any(|f| request.fits_within(f)) {
        return Vec::new();
    }
    let len = frees
        .iter()
        .map(|f| f.custom.len())
        .fold(request.custom.len(), usize::max);
    let lacks = |k: usize, f: &Resources| -> bool {
        let one = |x: &Resources| -> Resources {
            let mut r = Resources::ZERO;
            match k {
                0 => r.cpu = x.cpu,
                1 => r.gpu = x.gpu,
                2 => r.memory_bytes = x.memory_bytes,
                _ => r.custom.set(k - 3, x.custom.get(k - 3)),
            }
            r
        };
        !one(request).fits_within(&one(f))
    };
    let name = |k: usize| -> String {
        match k {
            0 => "cpu".into(),
            1 => "gpu".into(),
            2 => "memory".into(),
            _ => super::custom::name(k - 3).to_string(),
        }
    };
    let everywhere: Vec<usize> = (0..3 + len)
        .filter(|&k| frees.iter().all(|f| lacks(k, f)))
        .collect();
    let ks = if everywhere.is_empty() {
        (0..3 + len)
            .filter(|&k| frees.iter().any(|f| lacks(k, f)))
            .collect()
    } else {
        everywhere
    };
    let (builtin, mut custom): (Vec<usize>, Vec<usize>) = ks.into_iter().partition(|&k| k < 3);
    let mut custom_names: Vec<String> = custom.drain(..).map(name).collect();
    custom_names.sort_unstable();
    builtin.into_iter().map(name).chain(custom_names).collect()
}

/// Whether a job placed at `job_pool` (its [`super::QueuedJob::pool`]) may run on the
/// cluster or pool named `name` (`pool`: it is a pool): a job naming a pool only
/// there, any other job only on a cluster that is not a pool.
#[must_use]
pub fn admits(name: &str, pool: bool, job_pool: Option<&str>) -> bool {
    match job_pool {
        Some(p) => pool && p == name,
        None => !pool,
    }
}
