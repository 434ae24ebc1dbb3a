//! Dominant share, decayed usage and the fair-share key.

use std::cmp::Ordering;

use super::{Resources, Seconds};

/// Low mantissa bits cleared by [`quantize_key`].
///
/// An f64 has 52 mantissa bits; keeping 40 leaves a relative resolution of
/// 2⁻⁴⁰ ≈ 9·10⁻¹³. Keys that went through different but equivalent arithmetic
/// differ by a few ulps (2⁻⁵² each), far below that, so they usually land on
/// the same quantized value and then tie exactly, letting the documented
/// tie-break (oldest head, then user id) decide. One grant, by contrast, moves
/// a key by at least one job's share: for a 1-core job on a 1,000,000-core pool
/// with weight 1000 that is 10⁻⁹ on a key of at most ~1, a relative step of
/// 10⁻⁹, three orders of magnitude above the resolution.
pub const KEY_DROPPED_BITS: u32 = 12;

/// Dominant share of an allocation: `max_k A_k / C_k` over the resources `k`
/// with `C_k > 0` (DRF, Ghodsi et al., NSDI 2011).
///
/// `allocation` and `capacity` are in the units of [`Resources`]; the result is
/// a dimensionless fraction (1.0 = all of some resource). Returns 0 when no
/// resource has capacity; negative and NaN ratios count as 0.
#[must_use]
pub fn dominant_share(allocation: &Resources, capacity: &Resources) -> f64 {
    allocation
        .pairs(capacity)
        .filter(|&(_, c)| c > 0.0)
        .map(|(a, c)| a / c)
        .fold(0.0, |best, r| if r > best { r } else { best })
}

/// Brings a decayed usage `h`, valid at `usage_at`, forward to `now`, assuming
/// the user held dominant share `share` in between:
///
/// `h ← h·e^(−λΔt) + s·(1 − e^(−λΔt))`, `λ = ln 2 / T`, `Δt = now − usage_at`
///
/// an exponential moving average of the dominant share with half-life `T`
/// (`half_life`, seconds), the decay of Slurm's multifactor priority plugin
/// (`PriorityDecayHalfLife`). All times are in seconds. `T <= 0` (or NaN)
/// turns history off and returns 0; a negative or NaN `Δt` is treated as 0
/// (no time passed); `T = ∞` keeps `h` as it is. Computed as
/// `h + (s − h)·(−expm1(−λΔt))`, which is exact in the limit of small `Δt`.
#[must_use]
pub fn decay_usage(
    usage: f64,
    usage_at: Seconds,
    share: f64,
    now: Seconds,
    half_life: Seconds,
) -> f64 {
    if half_life.is_nan() || half_life <= 0.0 {
        return 0.0;
    }
    let elapsed = now - usage_at;
    let elapsed = if elapsed > 0.0 { elapsed } else { 0.0 };
    let x = std::f64::consts::LN_2 * elapsed / half_life;
    let weight_of_share = -(-x).exp_m1();
    usage + (share - usage) * weight_of_share
}

/// The fair-share key `(s + h) / w`: dominant share `share` plus decayed usage
/// `usage`, divided by the user's `weight`. Smaller goes first.
///
/// A weight that is not finite and positive, or a NaN result, gives `+∞`: such
/// a user is still served, but after every user with a valid key.
#[must_use]
pub fn fair_share_key(share: f64, usage: f64, weight: f64) -> f64 {
    if !(weight.is_finite() && weight > 0.0) {
        return f64::INFINITY;
    }
    let key = (share + usage) / weight;
    if key.is_nan() {
        f64::INFINITY
    } else {
        key
    }
}

/// The age term subtracted from a user's key: `a · min(age / M, 1)` with
/// `a = age_weight` (dominant-share units) and `M = max_age` (seconds), where
/// `age` (seconds) is how long the user's effective head has waited. Like
/// Slurm's `PriorityWeightAge` × age factor (`PriorityMaxAge`), it grows
/// linearly and saturates, so it is bounded by `a`: a user cannot queue its
/// way past another by more than `a` of dominant share. Returns 0 when `a` or
/// `M` is not finite and positive, or `age` is not positive (or NaN).
#[must_use]
pub fn age_term(age: Seconds, age_weight: f64, max_age: Seconds) -> f64 {
    let valid = |x: f64| x.is_finite() && x > 0.0;
    if !(valid(age_weight) && valid(max_age)) || age.is_nan() || age <= 0.0 {
        return 0.0;
    }
    age_weight * (age / max_age).min(1.0)
}

/// Quantizes a key for comparison: clears the low [`KEY_DROPPED_BITS`] bits of
/// the mantissa (truncation toward zero), maps `−0` to `0` and NaN to `+∞`.
///
/// Monotone: `a <= b` implies `quantize_key(a) <= quantize_key(b)`, so it never
/// reverses an order, it only merges keys closer than about 2⁻⁴⁰ relative.
#[must_use]
pub fn quantize_key(key: f64) -> f64 {
    if key.is_nan() {
        return f64::INFINITY;
    }
    if key == 0.0 || key.is_infinite() {
        return key + 0.0; // folds −0 into +0
    }
    let mask = !((1u64 << KEY_DROPPED_BITS) - 1);
    f64::from_bits(key.to_bits() & mask)
}

/// Total order on f64 used by the policy's comparisons: NaN sorts as `+∞` and
/// `−0` equals `+0`.
pub(crate) fn cmp_f64(a: f64, b: f64) -> Ordering {
    fn normal(x: f64) -> f64 {
        if x.is_nan() {
            f64::INFINITY
        } else {
            x + 0.0
        }
    }
    normal(a).total_cmp(&normal(b))
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
    // Each ratio computed once, sorted stably: ties keep the input order.
    let mut by_ratio: Vec<(f64, usize)> = (0..demands.len())
        .filter(|&i| weights.get(i).is_some_and(|&w| w > 0.0))
        .map(|i| (demands[i] / weights[i], i))
        .collect();
    by_ratio.sort_by(|a, b| a.0.total_cmp(&b.0));
    let order: Vec<usize> = by_ratio.into_iter().map(|(_, i)| i).collect();
    fill_in_order(weights, demands, &order, out);
}

/// The water-filling of [`fair_shares`] once the users are in order: `order` holds
/// the indices of the users with a weight `> 0`, by `demand / weight` ascending
/// (`f64::total_cmp`), ties by index; the demands sum to more than 1. Writes their
/// shares into `out` (same index as the inputs) and leaves the others as they are
/// (the caller zeroes them). The simulator keeps `order` sorted between its steps.
pub fn fill_in_order(weights: &[f64], demands: &[f64], order: &[usize], out: &mut [f64]) {
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
