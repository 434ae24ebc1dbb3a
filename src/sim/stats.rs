//! Statistics shared by the simulator's report ([`super::report`]) and the live
//! replay's ([`super::replay`]): percentiles, means, bounded slowdown, the
//! demand-capped fair share and Jain's index. Definitions in [`super::report`].

/// The bound `τ` of the bounded slowdown, seconds.
pub const BSLD_BOUND_S: f64 = 10.0;

/// Bounded slowdown `max(1, (wait + run) / max(run, τ))` with
/// `τ =` [`BSLD_BOUND_S`]; `wait` and `run` in seconds.
#[must_use]
pub fn bounded_slowdown(wait: f64, run: f64) -> f64 {
    ((wait + run) / run.max(BSLD_BOUND_S)).max(1.0)
}

/// Nearest-rank 95th percentile: the `⌈0.95·n⌉`-th smallest of `values`
/// (which it sorts in place); 0 for no values.
#[must_use]
pub fn p95(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = (values.len() * 95).div_ceil(100);
    values[rank.saturating_sub(1)]
}

/// Arithmetic mean of `values`; 0 for none.
#[must_use]
pub fn mean(values: impl IntoIterator<Item = f64>) -> f64 {
    let (sum, n) = values
        .into_iter()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Weighted max-min fair shares of a cluster of size 1, capped at demand
/// (water-filling), written to `out` (same index as the inputs).
///
/// `weights[i] > 0` and `demands[i] ≥ 0` (fractions of the cluster). When the
/// demands sum to at most 1 every user gets its demand; otherwise users are
/// filled in order of `demand / weight` and those not capped share what is left
/// in proportion to their weights. Users with a non-positive weight get 0.
pub fn fair_shares(weights: &[f64], demands: &[f64], out: &mut Vec<f64>) {
    out.clear();
    out.resize(demands.len(), 0.0);
    let total: f64 = demands.iter().sum();
    if total <= 1.0 {
        out.copy_from_slice(demands);
        return;
    }
    let mut order: Vec<usize> = (0..demands.len())
        .filter(|&i| weights.get(i).is_some_and(|&w| w > 0.0))
        .collect();
    order.sort_by(|&a, &b| (demands[a] / weights[a]).total_cmp(&(demands[b] / weights[b])));
    let mut remaining = 1.0;
    let mut weight_left: f64 = order.iter().map(|&i| weights[i]).sum();
    for (k, &i) in order.iter().enumerate() {
        let level = remaining / weight_left;
        if demands[i] <= weights[i] * level {
            out[i] = demands[i];
            remaining -= demands[i];
            weight_left -= weights[i];
        } else {
            for &j in &order[k..] {
                out[j] = weights[j] * level;
            }
            return;
        }
    }
}

/// Jain's fairness index `(Σ x)² / (n · Σ x²)` of `values`; 1 for no values or
/// when all are 0.
#[must_use]
pub fn jain_index(values: &[f64]) -> f64 {
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|x| x * x).sum();
    if values.is_empty() || squares <= 0.0 {
        1.0
    } else {
        sum * sum / (values.len() as f64 * squares)
    }
}
