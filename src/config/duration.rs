//! Durations of the configuration (`#[serde(with = "crate::config::duration")]`,
//! deserializing only):
//! humantime strings such as `"30s"` or `"10m"`, at most [`MAX`]. A longer one
//! (e.g. `"300000000000y"`) is refused naming its key: the service adds durations
//! to the clock, which would overflow.

use std::time::Duration;

use serde::{de::Error as _, Deserializer};

/// The longest duration a setting may take: 100 years (of 365.25 days, as humantime
/// counts `"100years"`).
pub const MAX: Duration = Duration::from_secs(100 * 31_557_600);

/// `d` unless it is longer than [`MAX`]: then the error to give.
pub(super) fn bounded(d: Duration) -> Result<Duration, String> {
    if d > MAX {
        Err(format!(
            "{} is too long (at most 100 years)",
            humantime::format_duration(d)
        ))
    } else {
        Ok(d)
    }
}

/// The words that turn a duration setting off, in any case: `off`, also `none` and
/// `inf`. One list for the service's configuration and the simulator's flags.
pub const OFF_WORDS: [&str; 3] = ["off", "none", "inf"];

/// Parses a humantime duration (at most [`MAX`]) or one of `OFF_WORDS` (`None`): `off`,
/// `none` or `inf`, in any case.
///
/// # Errors
/// Neither: the message says what was expected.
pub fn parse_or_off(text: &str) -> Result<Option<Duration>, String> {
    let text = text.trim();
    if OFF_WORDS.iter().any(|w| text.eq_ignore_ascii_case(w)) {
        return Ok(None);
    }
    not_negative(text)?;
    let d = humantime::parse_duration(text)
        .map_err(|e| format!("{e} (a duration such as \"10m\", or \"off\")"))?;
    bounded(d).map(Some)
}

/// Refuses a duration written with a minus sign, which humantime would call
/// "expected number at 0", and says so when it is the next flag instead (a flag
/// given no value before another: `--half-life --no-backfill`).
fn not_negative(text: &str) -> Result<(), String> {
    if text.starts_with("--") {
        Err(format!("a duration is missing (found the flag {text})"))
    } else if text.starts_with('-') {
        Err(format!("{text} is negative: a duration is 0s or more"))
    } else {
        Ok(())
    }
}

/// Parses a humantime duration of at most [`MAX`] (the simulator's duration flags,
/// bounded as the service's settings are).
///
/// # Errors
/// Not a duration, or a longer one.
pub fn parse_bounded(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    not_negative(text)?;
    humantime::parse_duration(text)
        .map_err(|e| format!("{e} (a duration such as \"1h\" or \"0s\")"))
        .and_then(bounded)
}

/// As `humantime_serde`, refusing durations longer than [`MAX`].
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let d: Duration = humantime_serde::deserialize(d)?;
    bounded(d).map_err(D::Error::custom)
}
