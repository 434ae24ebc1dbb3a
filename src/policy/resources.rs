//! Resource vectors and what one cluster has free.

use std::cmp::Ordering;
use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

use super::custom::Custom;

/// Relative tolerance of [`Resources::fits_within`] for cores and GPUs.
///
/// Requests and capacities are sums of f64 values (`0.1 + 0.2` cores is
/// `0.30000000000000004`), so an exact `<=` would refuse fits that are exact
/// in decimal. One part in 10⁹ of the larger side absorbs that rounding noise
/// (about 2·10⁶ ulps) while staying far below anything a request can mean:
/// 10⁻⁹ of a 1,000,000-core pool is 0.001 core. Bytes of memory are whole
/// numbers, exact in f64 up to 2⁵³ (the most a request may ask), so their sums
/// have no noise and they are compared exactly: a tolerance there let a job 64
/// bytes over a 64 GB cluster through, which Ray would then hold PENDING.
pub const FIT_TOLERANCE: f64 = 1e-9;

/// A vector of resources: what a job requests, what a user holds, what a
/// cluster has.
///
/// Units: `cpu` in cores, `gpu` in GPUs (both may be fractional, as in Ray),
/// `memory_bytes` in bytes (an f64 so that sums and ratios need no casts; it
/// is exact for whole byte counts up to 2⁵³ bytes = 8 PiB).
/// `custom` holds Ray's custom resources by name (counts, e.g. `{"QPU": 1}`;
/// [`Custom`]); in JSON it is a map, omitted when empty.
/// Components are expected finite and non-negative; a NaN component never
/// fits anywhere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    /// Cores.
    pub cpu: f64,
    /// GPUs.
    pub gpu: f64,
    /// Bytes of memory.
    pub memory_bytes: f64,
    /// Custom resources (Ray's custom resources, licenses), by name.
    #[serde(default, skip_serializing_if = "Custom::is_empty")]
    pub custom: Custom,
}

impl Resources {
    /// Nothing at all: 0 cores, 0 GPUs, 0 bytes.
    pub const ZERO: Resources = Resources {
        cpu: 0.0,
        gpu: 0.0,
        memory_bytes: 0.0,
        custom: Custom::EMPTY,
    };

    /// Builds a vector from cores, GPUs and bytes (no custom resource).
    #[must_use]
    pub const fn new(cpu: f64, gpu: f64, memory_bytes: f64) -> Resources {
        Resources {
            cpu,
            gpu,
            memory_bytes,
            custom: Custom::EMPTY,
        }
    }

    /// This vector with `custom` as its custom resources.
    #[must_use]
    pub const fn with_custom(self, custom: Custom) -> Resources {
        Resources { custom, ..self }
    }

    /// The built-in components in a fixed order: `[cpu, gpu, memory_bytes]`.
    #[must_use]
    pub const fn builtin(&self) -> [f64; 3] {
        [self.cpu, self.gpu, self.memory_bytes]
    }

    /// Every component: cores, GPUs, bytes, then the custom slots up to their
    /// length ([`Custom::len`]).
    pub fn components(&self) -> impl Iterator<Item = f64> + '_ {
        self.builtin()
            .into_iter()
            .chain(self.custom.amounts().iter().copied())
    }

    /// `(self_k, other_k)` for every component `k` either side may have: cores,
    /// GPUs, bytes, then custom slots up to the longer length (0 past a side's
    /// own length).
    pub fn pairs<'a>(&'a self, other: &'a Resources) -> impl Iterator<Item = (f64, f64)> + 'a {
        let len = self.custom.len().max(other.custom.len());
        // Borrowed, not copied: this is on the policy's hottest path.
        let (a, b) = (&self.custom, &other.custom);
        self.builtin()
            .into_iter()
            .zip(other.builtin())
            .chain((0..len).map(move |k| (a.get(k), b.get(k))))
    }

    fn zip_with(self, other: Resources, f: impl Fn(f64, f64) -> f64) -> Resources {
        Resources {
            cpu: f(self.cpu, other.cpu),
            gpu: f(self.gpu, other.gpu),
            memory_bytes: f(self.memory_bytes, other.memory_bytes),
            custom: self.custom.zip_with(other.custom, f),
        }
    }

    /// `self − other` per component, floored at 0 (a NaN difference becomes 0).
    #[must_use]
    pub fn saturating_sub(self, other: Resources) -> Resources {
        self.zip_with(other, |a, b| (a - b).max(0.0))
    }

    /// Every component times `factor` (a node type's resources × its maximum count).
    #[must_use]
    pub fn scaled(self, factor: f64) -> Resources {
        self.zip_with(self, |a, _| a * factor)
    }

    /// The larger of `self` and `other` per component (`f64::max`, so a NaN
    /// component yields the other side's value).
    #[must_use]
    pub fn max(self, other: Resources) -> Resources {
        self.zip_with(other, f64::max)
    }

    /// True when every component of `self` is at most the same component of
    /// `limit`: cores and GPUs allowing a relative slack of [`FIT_TOLERANCE`]
    /// times the larger magnitude of the two, so that rounding noise never
    /// refuses a fit; bytes exactly (whole numbers, no noise); custom resources
    /// like cores. A NaN on either side never fits (a custom slot past both
    /// sides' lengths is 0 on both and fits).
    #[must_use]
    pub fn fits_within(&self, limit: &Resources) -> bool {
        le_with_tolerance(self.cpu, limit.cpu)
            && le_with_tolerance(self.gpu, limit.gpu)
            && self.memory_bytes <= limit.memory_bytes
            && self.custom_fits_within(limit)
    }

    /// True when `self` is within a user's or group's cap `cap`
    /// (`max_resources`): cores, GPUs and bytes as in [`Resources::fits_within`];
    /// custom resources are not capped (a cap names only the built-in three).
    #[must_use]
    pub fn fits_cap(&self, cap: &Resources) -> bool {
        Resources::new(self.cpu, self.gpu, self.memory_bytes).fits_within(cap)
    }

    fn custom_fits_within(&self, limit: &Resources) -> bool {
        let len = self.custom.len().max(limit.custom.len());
        (0..len).all(|k| le_with_tolerance(self.custom.get(k), limit.custom.get(k)))
    }

    /// The first resource of `self` that `limit` cannot hold, by name (`"cpu"`,
    /// `"gpu"`, `"memory"` or a custom name), for messages; `None` when it fits.
    #[must_use]
    pub fn first_short(&self, limit: &Resources) -> Option<String> {
        if !le_with_tolerance(self.cpu, limit.cpu) {
            return Some("cpu".into());
        }
        if !le_with_tolerance(self.gpu, limit.gpu) {
            return Some("gpu".into());
        }
        if self
            .memory_bytes
            .partial_cmp(&limit.memory_bytes)
            .is_none_or(Ordering::is_gt)
        {
            return Some("memory".into());
        }
        let len = self.custom.len().max(limit.custom.len());
        (0..len)
            .find(|&k| !le_with_tolerance(self.custom.get(k), limit.custom.get(k)))
            .map(|k| super::custom::name(k).to_string())
    }
}

/// `a <= b`, up to a relative [`FIT_TOLERANCE`]; false when either is NaN.
fn le_with_tolerance(a: f64, b: f64) -> bool {
    a <= b || a - b <= FIT_TOLERANCE * a.abs().max(b.abs())
}

impl Add for Resources {
    type Output = Resources;

    /// Sum per component.
    fn add(self, other: Resources) -> Resources {
        self.zip_with(other, |a, b| a + b)
    }
}

impl AddAssign for Resources {
    fn add_assign(&mut self, other: Resources) {
        *self = *self + other;
    }
}

/// One Ray cluster as the policy sees it at the start of a cycle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    /// Unique name (the `[[clusters]]` name); grants name it.
    pub name: String,
    /// False while the monitor cannot reach it: never granted to, and its
    /// capacity is left out of the shares.
    pub healthy: bool,
    /// Capacity `C` of the cluster as Ray reports it.
    pub total: Resources,
    /// What Ray reports in use (all tenants, seconds late).
    pub used_reported: Resources,
    /// Sum of this service's outstanding (DISPATCHING, PENDING, RUNNING) jobs
    /// on this cluster, including ones Ray has not reported yet.
    pub outstanding: Resources,
    /// The part of `outstanding` that `used_reported` does not include yet: jobs
    /// granted, DISPATCHING, PENDING in Ray, or RUNNING for less than the report's
    /// lag (`monitor.usage_report_lag`).
    #[serde(default)]
    pub unreported: Resources,
    /// Those outstanding jobs one by one, with when each is expected to end
    /// (seconds, same clock as `now`; `None` when it has no runtime estimate).
    /// A reservation's expected start is computed from them
    /// ([`super::shadow`]); their resources should sum to `outstanding`.
    #[serde(default)]
    pub jobs: Vec<super::OutstandingJob>,
    /// A pool (issue 30): capacity this service admits jobs to but does not run
    /// (a runner starts them and reports back); only jobs naming it may go there
    /// ([`super::admits`]). Its capacity counts in the shares like a cluster's.
    #[serde(default)]
    pub pool: bool,
}

impl ClusterView {
    /// Free capacity: `total − max(used_reported + unreported, outstanding)` per
    /// resource, floored at 0 (DESIGN §2).
    ///
    /// Ray's report counts every tenant's usage, including our jobs it already
    /// shows, but lags by seconds; `unreported` adds our jobs it cannot show yet, so
    /// other tenants' usage is counted once and ours exactly once. The `max` with
    /// `outstanding` only matters if the report is wrong (our own jobs alone never
    /// exceed what is free). With `unreported = 0` and `used_reported = 0` (the
    /// simulator) this is `total − outstanding`.
    #[must_use]
    pub fn free(&self) -> Resources {
        self.total
            .saturating_sub((self.used_reported + self.unreported).max(self.outstanding))
    }

    /// What other tenants hold: `used_reported − (outstanding − unreported)` (the
    /// report less our jobs it includes) per resource, floored at 0. The policy assumes it stays, so a reservation can count
    /// at most `total − foreign` as free once this service's jobs end.
    #[must_use]
    pub fn foreign(&self) -> Resources {
        foreign(self.used_reported, self.outstanding, self.unreported)
    }
}

/// What other tenants hold on a cluster: `used_reported − (outstanding − unreported)`
/// per resource, floored at 0 (see [`ClusterView::foreign`]).
pub(crate) fn foreign(
    used_reported: Resources,
    outstanding: Resources,
    unreported: Resources,
) -> Resources {
    used_reported.saturating_sub(outstanding.saturating_sub(unreported))
}
