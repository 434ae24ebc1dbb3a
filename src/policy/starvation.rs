//! How long a head may wait before it counts as starved: the starvation guard,
//! following the workload (DESIGN §2, "Reservation"; issue 43 §5–§6).
//!
//! A wall-clock guard alone (`scheduler.starvation_guard`, 5 min by default) lets
//! backfill give every freed slot to smaller jobs for as long as it lasts: on the
//! quickstart's 2-CPU head, u62's 0.352-CPU jobs never fit the 0.25-CPU slots that
//! freed, and the whole two-minute replay was shorter than the guard. How long a
//! head has been passed over means something only against how fast capacity turns
//! over, so the guard in force is the shorter of the configured one and
//! `starvation_runs` **typical run times**: the geometric mean of the run times of
//! the jobs that ended most recently (from grant to end, as the ledger saw them;
//! a plain mean over the first [`RUNTIME_MEMORY`] ends, then an exponential moving
//! average with weight `1/RUNTIME_MEMORY`). A geometric mean because run times are
//! heavy-tailed (seconds to days on the same trace): one 3-day job must not stretch
//! the guard for a flood of 30-second ones. A head has waited as long as the
//! capacity it needs would take to free up about `starvation_runs` times over; if
//! it still does not fit and a later user's job is about to take capacity, backfill
//! is taking it (passed over by backfill: the cycle then reserves for it, module
//! doc of [`crate::policy`]). `starvation_runs` is 1 by default (issue 43 §5–§6).
//!
//! The guard in force is quantized down to a power of `2^(1/4)` (steps of 19 %), so
//! that it changes rarely: each change re-sorts the heads past it.

use super::{PolicyConfig, Seconds};

/// Ends after which the typical run time moves as an exponential moving average
/// (weight `1 / RUNTIME_MEMORY` per end); before, it is the plain mean.
pub const RUNTIME_MEMORY: u32 = 100;

/// Shortest run time counted, seconds: a job that ends within a second of its grant
/// was declined, cancelled or failed at start (Ray's own start-up takes longer), and
/// is not counted: a burst of cancelled jobs must not shrink the guard to nothing
/// (a fresh tester's finding: twelve jobs cancelled after 50 ms made it 0.3 s).
pub const MIN_RUNTIME: Seconds = 1.0;

/// The typical run time of recently ended jobs: a geometric mean, in seconds
/// (module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TypicalRuntime {
    /// Mean of `ln(run time)` over recent ends.
    log_mean: f64,
    /// Ends counted, up to [`RUNTIME_MEMORY`].
    ends: u32,
}

impl TypicalRuntime {
    /// Counts one ended job that ran `runtime` seconds (from its grant); a run time
    /// that is not a number or below [`MIN_RUNTIME`] is ignored.
    pub fn observe(&mut self, runtime: Seconds) {
        if runtime.is_nan() || runtime < MIN_RUNTIME {
            return;
        }
        let x = runtime.min(f64::MAX).ln();
        self.ends = (self.ends + 1).min(RUNTIME_MEMORY);
        self.log_mean += (x - self.log_mean) / f64::from(self.ends);
    }

    /// The typical run time in seconds; `None` before any job ended.
    #[must_use]
    pub fn get(&self) -> Option<Seconds> {
        (self.ends > 0).then(|| self.log_mean.exp())
    }
}

/// The starvation guard in force, seconds: `config.starvation_guard`, or
/// `config.starvation_runs` typical run times when that is shorter (quantized down
/// to a power of `2^(1/4)`). The configured guard alone while no job has ended,
/// when `starvation_runs` is 0 or not finite, or when the configured guard is not
/// finite (reservations off).
#[must_use]
pub fn guard(config: &PolicyConfig, typical: &TypicalRuntime) -> Seconds {
    let cap = config.starvation_guard;
    let runs = config.starvation_runs;
    match typical.get() {
        Some(t) if runs > 0.0 && runs.is_finite() && cap.is_finite() => {
            let scaled = quantize_down(runs * t);
            if scaled < cap {
                scaled
            } else {
                cap
            }
        }
        _ => cap,
    }
}

/// `x` rounded down to a power of `2^(1/4)` (positive finite `x`; others as they
/// are).
fn quantize_down(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return x;
    }
    let steps = (x.log2() * 4.0).floor();
    let q = (steps / 4.0).exp2();
    // `log2` and `exp2` round: never return more than `x`.
    if q > x {
        ((steps - 1.0) / 4.0).exp2()
    } else {
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(guard: Seconds, runs: f64) -> PolicyConfig {
        PolicyConfig {
            usage_half_life: 0.0,
            starvation_guard: guard,
            starvation_runs: runs,
            backfill: true,
            age_weight: 0.0,
            max_age: 0.0,
            licenses: crate::policy::Custom::EMPTY,
        }
    }

    #[test]
    fn the_typical_run_time_is_the_geometric_mean_of_recent_ends() {
        let mut t = TypicalRuntime::default();
        assert_eq!(t.get(), None);
        t.observe(1.0);
        t.observe(100.0);
        // √(1 · 100) = 10.
        assert!((t.get().unwrap() - 10.0).abs() < 1e-9);
        // Jobs that end within a second (cancelled, declined) and NaN are ignored.
        t.observe(f64::NAN);
        t.observe(0.0);
        t.observe(0.99);
        assert!((t.get().unwrap() - 10.0).abs() < 1e-9);
        t.observe(1000.0);
        // ∛(1 · 100 · 1000) = 46.4.
        assert!((t.get().unwrap() - 100_000f64.cbrt()).abs() < 1e-9);
    }

    #[test]
    fn after_its_memory_the_mean_forgets_old_ends() {
        let mut t = TypicalRuntime::default();
        for _ in 0..RUNTIME_MEMORY {
            t.observe(1000.0);
        }
        // Then 1 s jobs: after k of them, ln t = ln 1000 · (1 − 1/100)^k.
        for _ in 0..300 {
            t.observe(1.0);
        }
        let expected = (1000f64.ln() * 0.99f64.powi(300)).exp();
        assert!((t.get().unwrap() - expected).abs() < 1e-9 * expected);
        assert!(t.get().unwrap() < 1.5);
    }

    #[test]
    fn the_guard_is_the_shorter_of_the_configured_one_and_the_runs() {
        let mut t = TypicalRuntime::default();
        // No job ended yet: the configured guard.
        assert_eq!(guard(&config(300.0, 2.0), &t), 300.0);
        t.observe(1.5);
        // 2 × 1.5 = 3 s, quantized down to 2^(6/4) = 2.83 s.
        assert_eq!(guard(&config(300.0, 2.0), &t), 2f64.powf(1.5));
        // The configured guard when it is shorter.
        assert_eq!(guard(&config(2.0, 2.0), &t), 2.0);
        // Off.
        assert_eq!(guard(&config(300.0, 0.0), &t), 300.0);
        assert_eq!(guard(&config(300.0, f64::INFINITY), &t), 300.0);
        assert_eq!(
            guard(&config(f64::INFINITY, 2.0), &t),
            f64::INFINITY,
            "reservations turned off stay off"
        );
    }

    #[test]
    fn quantizing_never_rounds_up() {
        for i in 1..2000 {
            let x = f64::from(i) * 0.37;
            let q = quantize_down(x);
            assert!(
                q <= x && q > x / 2f64.powf(0.25) * (1.0 - 1e-12),
                "{x} → {q}"
            );
        }
        // Exact powers stay.
        assert_eq!(quantize_down(4.0), 4.0);
        assert_eq!(quantize_down(0.0), 0.0);
    }
}
