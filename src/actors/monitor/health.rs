//! A cluster's health as the monitor keeps it (DESIGN §1 "Health"): what its polls and
//! the dispatcher's failed submissions say, as transitions with the instant passed
//! in (pure, so each rule is tested on its own below).
//!
//! Rules:
//! - `monitor.failure_threshold` failed polls in a row make a cluster unhealthy; a
//!   poll that answers makes it healthy again, unless a dispatch's hold runs on.
//! - A dispatch that found the cluster not ready (route missing, 5xx, timeouts) while
//!   its polls answer makes it unhealthy for a hold: `monitor.unhealthy_backoff`,
//!   doubled while such failures go on (a hold running, or ended within the longest
//!   hold), up to `monitor.unhealthy_backoff_max`.
//! - Once the polls fail too, the outage is theirs to judge: a failed poll drops the
//!   hold (its length is remembered for the doubling), and a dispatch that fails
//!   while the last poll failed sets none, so the first poll that answers ends the
//!   outage. Before, every job in flight when Ray
//!   went down doubled the hold as its retries gave up (1, 2, 4, 8, 16 s), and the
//!   hold outlasted the outage: `scripts/chaos` once saw the first dispatch 13.5 s
//!   after Ray answered again (bound 1.25 s).
//! - A poll Ray refused for this service's token (401/403) holds the next poll back,
//!   doubling the same way (issue 45 §1).

use std::time::{Duration, Instant};

use crate::config::MonitorSettings;
use crate::policy::Resources;

/// One cluster's health.
#[derive(Clone, Debug, Default)]
pub(super) struct Health {
    pub(super) healthy: bool,
    /// Failed polls in a row (at least the threshold after a dispatch found it not
    /// ready).
    pub(super) failures: u32,
    /// Its total capacity as last polled.
    pub(super) total: Resources,
    /// Unhealthy at least until then (a dispatch found the cluster not ready).
    hold_until: Option<Instant>,
    hold: Duration,
    /// When the last hold ended or ends, dropped or not: a failure within the longest
    /// hold of it doubles the next hold.
    last_hold_end: Option<Instant>,
    pub(super) last_warned: Option<Instant>,
    /// Why the last poll failed (shown while the cluster is unhealthy); `None` when
    /// the last poll answered.
    pub(super) last_error: Option<String>,
    /// Not polled before then: Ray refused this service's authentication.
    pub(super) poll_hold_until: Option<Instant>,
    poll_hold: Duration,
}

impl Health {
    /// A poll answered at `now`: healthy again unless a dispatch's hold runs past
    /// `now`.
    pub(super) fn poll_answered(&mut self, now: Instant) {
        self.failures = 0;
        self.last_error = None;
        self.poll_hold_until = None;
        self.poll_hold = Duration::ZERO;
        self.healthy = self.hold_until.is_none_or(|t| now >= t);
    }

    /// A poll failed at `now` with `error`; `refused`: Ray refused this service's
    /// token (the next poll waits, doubling). Unhealthy once `failure_threshold`
    /// polls in a row failed; a dispatch's hold is dropped (the polls judge the
    /// outage now).
    pub(super) fn poll_failed(
        &mut self,
        now: Instant,
        error: Option<String>,
        refused: bool,
        m: &MonitorSettings,
    ) {
        self.failures = self.failures.saturating_add(1);
        self.last_error = Some(error.unwrap_or_else(|| "unknown".into()));
        self.hold_until = None;
        if refused {
            self.poll_hold =
                (self.poll_hold * 2).clamp(m.unhealthy_backoff, m.unhealthy_backoff_max);
            self.poll_hold_until = Some(now + self.poll_hold);
        }
        if self.failures >= m.failure_threshold {
            self.healthy = false;
        }
    }

    /// A dispatch found the cluster not ready at `now`: unhealthy; held so for a
    /// doubling hold when its polls answer, with no hold when the last poll failed
    /// too. `true` when this turned a healthy cluster unhealthy.
    pub(super) fn dispatch_failed(&mut self, now: Instant, m: &MonitorSettings) -> bool {
        if self.last_error.is_none() {
            // A hold that is still running, or ended within the longest hold,
            // doubles; otherwise it starts again from the configured backoff.
            let recent = self
                .last_hold_end
                .is_some_and(|t| now < t || now.duration_since(t) < m.unhealthy_backoff_max);
            self.hold = if recent {
                (self.hold * 2).clamp(m.unhealthy_backoff, m.unhealthy_backoff_max)
            } else {
                m.unhealthy_backoff
            };
            self.hold_until = Some(now + self.hold);
            self.last_hold_end = self.hold_until;
        }
        self.failures = self.failures.max(m.failure_threshold);
        std::mem::replace(&mut self.healthy, false)
    }

    /// How long the current hold lasts (0 without one), for the log.
    pub(super) fn hold(&self) -> Duration {
        if self.hold_until.is_some() {
            self.hold
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> MonitorSettings {
        let mut m = crate::config::Settings::defaults().monitor;
        m.failure_threshold = 2;
        m.unhealthy_backoff = Duration::from_secs(1);
        m.unhealthy_backoff_max = Duration::from_secs(30);
        m
    }

    fn healthy() -> Health {
        let mut h = Health::default();
        h.poll_answered(Instant::now());
        assert!(h.healthy);
        h
    }

    /// Dispatches that fail while the polls answer hold the cluster unhealthy for
    /// 1, 2, 4 s (doubling), and a poll that answers within the hold does not end it.
    #[test]
    fn dispatch_failures_while_polls_answer_hold_it_for_a_doubling_time() {
        let m = settings();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut h = healthy();
        assert!(h.dispatch_failed(t0, &m), "it turned unhealthy");
        assert_eq!(h.hold(), s(1));
        assert!(!h.dispatch_failed(t0 + s(0), &m));
        assert_eq!(h.hold(), s(2));
        assert!(!h.dispatch_failed(t0, &m));
        assert_eq!(h.hold(), s(4));
        h.poll_answered(t0 + s(3));
        assert!(!h.healthy, "the hold runs to t0 + 4 s");
        h.poll_answered(t0 + s(4));
        assert!(h.healthy);
        // Within the longest hold of the last one's end: doubles again.
        h.dispatch_failed(t0 + s(10), &m);
        assert_eq!(h.hold(), s(8));
        // Long after: starts again from the backoff.
        h.poll_answered(t0 + s(18));
        h.dispatch_failed(t0 + s(100), &m);
        assert_eq!(h.hold(), s(1));
    }

    /// An outage the polls see too: however many in-flight dispatches fail during it
    /// (each job's retries give up at their own time), the first poll that answers
    /// ends it. The case `scripts/chaos` found: a 20-s outage, dispatches failing at
    /// its start, the first dispatch 13.5 s after Ray answered again.
    #[test]
    fn an_outage_the_polls_see_ends_at_the_first_poll_that_answers() {
        let m = settings();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        for before_polls in 0..6u64 {
            for during in 0..6u64 {
                let mut h = healthy();
                // Dispatches fail before any poll has (a hold, doubling)...
                for k in 0..before_polls {
                    h.dispatch_failed(t0 + ms(10 * k), &m);
                }
                // ...the polls fail (every 500 ms) while more dispatches give up.
                for k in 0..4u64 {
                    h.poll_failed(t0 + ms(500 * (k + 1)), Some("refused".into()), false, &m);
                    for j in 0..during {
                        h.dispatch_failed(t0 + ms(500 * (k + 1) + 10 * (j + 1)), &m);
                    }
                }
                assert!(!h.healthy);
                assert_eq!(h.hold(), Duration::ZERO, "{before_polls} {during}");
                // Ray answers at 2.5 s: healthy at once.
                h.poll_answered(t0 + ms(2500));
                assert!(h.healthy, "{before_polls} before, {during} during");
            }
        }
    }

    /// A hold dropped by a failed poll is still remembered: a dispatch failing again
    /// soon after the polls answer doubles it (a cluster that keeps refusing
    /// submissions is not tried every second).
    #[test]
    fn a_dropped_hold_still_doubles_the_next() {
        let m = settings();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut h = healthy();
        h.dispatch_failed(t0, &m);
        h.dispatch_failed(t0, &m);
        assert_eq!(h.hold(), s(2));
        h.poll_failed(t0 + s(1), None, false, &m);
        assert_eq!(h.hold(), Duration::ZERO);
        h.poll_answered(t0 + s(1));
        assert!(h.healthy, "the dropped hold no longer holds it");
        h.dispatch_failed(t0 + s(5), &m);
        assert_eq!(h.hold(), s(4));
    }

    /// One failed poll is below the threshold of 2; the second makes it unhealthy;
    /// a dispatch failing after the first (its poll failed) turns it unhealthy with
    /// no hold.
    #[test]
    fn polls_fail_to_the_threshold() {
        let m = settings();
        let t0 = Instant::now();
        let mut h = healthy();
        h.poll_failed(t0, None, false, &m);
        assert!(h.healthy);
        assert_eq!(h.last_error.as_deref(), Some("unknown"));
        h.poll_failed(t0, Some("timeout".into()), false, &m);
        assert!(!h.healthy);
        let mut h = healthy();
        h.poll_failed(t0, None, false, &m);
        assert!(h.dispatch_failed(t0, &m));
        assert_eq!(h.hold(), Duration::ZERO);
        h.poll_answered(t0);
        assert!(h.healthy);
    }

    /// A token Ray refuses holds the next poll back 1, 2, 4 s; an answer clears it.
    #[test]
    fn refused_polls_wait_longer_each_time() {
        let m = settings();
        let t0 = Instant::now();
        let mut h = healthy();
        for k in 0..3u32 {
            h.poll_failed(t0, Some("401".into()), true, &m);
            assert_eq!(h.poll_hold_until, Some(t0 + Duration::from_secs(1 << k)));
        }
        h.poll_answered(t0);
        assert_eq!(h.poll_hold_until, None);
    }
}
