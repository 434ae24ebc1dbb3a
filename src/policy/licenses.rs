//! Licenses: custom resources counted once across all clusters (Slurm's licenses;
//! `[[licenses]] name, count`), e.g. "at most 4 jobs hold a session on the quantum
//! backend at once".
//!
//! A license is a custom slot with a count `N > 0` in [`PolicyConfig::licenses`]
//! (`super::PolicyConfig`). The policy treats it as a resource every healthy
//! cluster has, all sharing one pool: on each cluster the license's total and
//! ceiling are `N` and its free amount is `N` less what every outstanding job of
//! this service holds, on any cluster (healthy or not); a grant takes it from every
//! cluster at once. In the shares its capacity is `N`, once (not once per cluster).
//! Ray never sees a license (the service does not pass it to Ray).
//!
//! Two approximations, both on the side of caution: a reservation's expected start
//! and a preemption's victims count only licenses held by jobs on the same cluster
//! as coming free; and licenses are not reserved (a job backfilled on another
//! cluster may take a license a reserved job waits for).
//!
//! [`PolicyConfig::licenses`]: super::PolicyConfig::licenses

use super::{Custom, Resources};

/// `r` with every license slot set to its count (the totals and ceilings the
/// policy judges by).
#[must_use]
pub(crate) fn with_counts(mut r: Resources, licenses: &Custom) -> Resources {
    for (k, &n) in licenses.amounts().iter().enumerate() {
        if n > 0.0 {
            r.custom.set(k, n);
        }
    }
    r
}

/// `r` with every license slot set to its count less `held` (what free capacity
/// is for licenses), floored at 0.
#[must_use]
pub(crate) fn with_free(mut r: Resources, licenses: &Custom, held: &Resources) -> Resources {
    for (k, &n) in licenses.amounts().iter().enumerate() {
        if n > 0.0 {
            r.custom.set(k, (n - held.custom.get(k)).max(0.0));
        }
    }
    r
}

/// `r` with every license slot set to `held`'s amount.
#[must_use]
pub(crate) fn with_held(mut r: Resources, licenses: &Custom, held: &Resources) -> Resources {
    for (k, &n) in licenses.amounts().iter().enumerate() {
        if n > 0.0 {
            r.custom.set(k, held.custom.get(k));
        }
    }
    r
}

/// The license part of a request (0 elsewhere).
#[must_use]
pub(crate) fn part(r: &Resources, licenses: &Custom) -> Resources {
    let mut out = Resources::ZERO;
    for (k, &n) in licenses.amounts().iter().enumerate() {
        if n > 0.0 {
            out.custom.set(k, r.custom.get(k));
        }
    }
    out
}

/// True when some license has a count.
#[must_use]
pub(crate) fn any(licenses: &Custom) -> bool {
    licenses.amounts().iter().any(|&n| n > 0.0)
}

/// After a grant of `request` on one cluster: every other cluster's `(free, held)`
/// loses (gains) the licenses it took, since they share one pool. `others` yields
/// the other clusters' pairs.
pub(crate) fn spread_grant<'a>(
    request: &Resources,
    licenses: &Custom,
    others: impl Iterator<Item = (&'a mut Resources, &'a mut Resources)>,
) {
    if !any(licenses) {
        return;
    }
    let taken = part(request, licenses);
    if taken.custom.is_empty() {
        return;
    }
    for (free, held) in others {
        *free = free.saturating_sub(taken);
        *held += taken;
    }
}

/// `r` without its licenses: what is sent to Ray (a license is this service's
/// count, not a resource any Ray node has).
#[must_use]
pub fn without_licenses(mut r: Resources, licenses: &Custom) -> Resources {
    for (k, &n) in licenses.amounts().iter().enumerate() {
        if n > 0.0 {
            r.custom.set(k, 0.0);
        }
    }
    r
}

/// Each cluster's free capacity as the policy sees it: [`ClusterView::free`](super::ClusterView::free),
/// with every license's free amount the one pool's (its count less what every
/// cluster's outstanding jobs hold), for views and metrics.
#[must_use]
pub fn frees(clusters: &[super::ClusterView], licenses: &Custom) -> Vec<Resources> {
    let pooled = clusters.iter().fold(Resources::ZERO, |sum, c| {
        sum + part(&c.outstanding, licenses)
    });
    clusters
        .iter()
        .map(|c| with_free(c.free(), licenses, &pooled))
        .collect()
}
