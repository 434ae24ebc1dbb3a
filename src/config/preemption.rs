//! `[preemption]` (DESIGN §2 "Preemption", §3, §7): when a running preemptible job
//! may be stopped and queued again for a user below its fair share. The defaults are
//! in `config/default.toml`, the one place each is written.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::ConfigError;
use crate::policy::PreemptionConfig;

/// `[preemption]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreemptionSettings {
    /// A head may preempt once it has waited longer than this (from its submit time);
    /// `"off"` (also `"none"` or `"inf"`, any case; `None`) turns preemption off.
    #[serde(deserialize_with = "duration_or_off")]
    pub after: Option<Duration>,
    /// A job that has run less than this is never preempted.
    #[serde(with = "crate::config::duration")]
    pub min_runtime: Duration,
    /// A job is never preempted more than this many times.
    pub max_per_job: u32,
    /// At most this fraction (0 to 1) of the capacity, as the victims' dominant
    /// shares summed, is preempted per `interval`.
    pub budget: f64,
    /// The window of `budget`.
    #[serde(with = "crate::config::duration")]
    pub interval: Duration,
    /// How long after a preemption's stop was sent the job goes back to the queue
    /// although Ray has not reported the attempt ended (it is then held, its attempt
    /// retiring, until Ray does).
    #[serde(with = "crate::config::duration")]
    pub grace: Duration,
    /// Whether the shortfall rule may allow victims the share rule does not
    /// ([`PreemptionConfig::shortfall`]).
    pub shortfall: bool,
}

/// A humantime duration, or `"off"` (also `"none"`, `"inf"`, in any case:
/// [`super::duration::parse_or_off`]).
fn duration_or_off<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    super::duration::parse_or_off(&s).map_err(serde::de::Error::custom)
}

impl PreemptionSettings {
    /// The policy's view (seconds); [`PreemptionConfig::OFF`]'s `after` when off.
    #[must_use]
    pub fn policy(&self) -> PreemptionConfig {
        PreemptionConfig {
            after: self.after.map_or(f64::INFINITY, |d| d.as_secs_f64()),
            min_runtime: self.min_runtime.as_secs_f64(),
            max_per_job: self.max_per_job,
            budget: self.budget,
            interval: self.interval.as_secs_f64(),
            shortfall: self.shortfall,
        }
    }

    /// Whether preemption is on.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.after.is_some()
    }

    /// Values that parse but mean nothing, refused naming their key.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: &str| {
            Err(ConfigError::Invalid {
                key: format!("preemption.{key}"),
                reason: reason.to_string(),
            })
        };
        if !(self.budget.is_finite() && (0.0..=1.0).contains(&self.budget)) {
            return invalid("budget", "must be a fraction from 0 to 1");
        }
        if self.interval.is_zero() {
            return invalid("interval", "must be more than 0");
        }
        if self.grace.is_zero() {
            return invalid("grace", "must be more than 0");
        }
        Ok(())
    }
}
