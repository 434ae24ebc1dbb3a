//! Explanations, derived when asked rather than by every cycle: why a queued job is
//! not running, and the order in which users would be served.
//!
//! A reason is read from the user's current state (paused, limits, its effective
//! head) and what the last cycle left: whether any cluster was healthy, the free
//! capacity after its grants, the reservation and its expected start, and where a
//! strict cycle stopped. Right after a cycle this is exactly the reason
//! [`crate::policy::CycleOutcome::pending`] gives (the property tests check it); a
//! job queued since then is explained against the same cycle until the next one.

use super::{permanent_reason, Ledger, Uid};
use crate::policy::{short_of, JobId, PendingReason, Seconds, UserOrder};

impl Ledger {
    /// Why QUEUED `job` of `user` is not running: `None` if no cycle has run yet, or
    /// it is behind its user's effective head (only the head waits for a reason of
    /// its own), or it is not in the user's window and the user is not paused. Every
    /// queued job of a paused user says so, in its window or beyond it (the caller
    /// asks only about jobs it knows are QUEUED).
    #[must_use]
    pub fn reason(&self, user: &str, job: JobId) -> Option<PendingReason> {
        if let Some(grouped) = self.last.as_ref().and_then(|l| l.grouped.as_ref()) {
            if let Some((cluster, jobs)) = self.preempting_for(&job) {
                return Some(PendingReason::Preempting {
                    cluster: cluster.to_owned(),
                    jobs: jobs.to_vec(),
                });
            }
            return grouped.reasons.get(&job).cloned();
        }
        let &uid = self.by_name.get(user)?;
        let a = &self.accounts[uid as usize];
        match a.window.iter().position(|j| j.job_id == job) {
            Some(i) => self.reason_at(uid, i),
            None => (self.last.is_some() && a.settings.paused).then_some(PendingReason::Paused),
        }
    }

    /// The reason of the job at index `i` of `uid`'s window.
    fn reason_at(&self, uid: Uid, i: usize) -> Option<PendingReason> {
        let last = self.last.as_ref()?;
        let a = &self.accounts[uid as usize];
        let job = a.window.get(i)?;
        let permanent = || {
            let caps = self.tree.caps_of(a.settings.group.as_deref());
            permanent_reason(job, a.settings.max_resources.as_ref(), caps, &self.totals)
        };
        if i < a.cursor {
            return permanent();
        }
        if a.settings.paused {
            return Some(permanent().unwrap_or(PendingReason::Paused));
        }
        if i > a.cursor {
            return None;
        }
        if last.free_after.is_empty() {
            return Some(PendingReason::NoHealthyCluster);
        }
        if let Some(reason) = a.ineligibility(job) {
            return Some(reason);
        }
        if let Some((cluster, jobs)) = self.preempting_for(&job.job_id) {
            return Some(PendingReason::Preempting {
                cluster: cluster.to_owned(),
                jobs: jobs.to_vec(),
            });
        }
        if !self.config.backfill {
            return match last.stopped_for {
                Some(x) if x == job.job_id => Some(PendingReason::WaitingForCapacity {
                    short: short_of(&job.resources, &last.free_after),
                }),
                Some(x) => Some(PendingReason::WaitingBehind { job_id: x }),
                None => None,
            };
        }
        if let Some((held, expected_in)) = &last.hold {
            if held.job_id == job.job_id && *held.user == *a.name {
                return Some(PendingReason::Reserved {
                    cluster: held.cluster.clone(),
                    expected_in: *expected_in,
                    waited: last.now - job.submitted_at,
                });
            }
            if last.free_after.iter().any(|f| job.resources.fits_within(f)) {
                return Some(PendingReason::BlockedByReservation {
                    job_id: held.job_id,
                    until_in: *expected_in,
                });
            }
        }
        Some(PendingReason::WaitingForCapacity {
            short: short_of(&job.resources, &last.free_after),
        })
    }

    /// Every reason [`Ledger::reason`] gives, by user name, then window order: what
    /// [`crate::policy::CycleOutcome::pending`] lists. O(users · window).
    #[must_use]
    pub fn pending(&self) -> Vec<(JobId, PendingReason)> {
        if let Some(grouped) = self.last.as_ref().and_then(|l| l.grouped.as_ref()) {
            return grouped.pending.clone();
        }
        let mut names: Vec<(&str, Uid)> = self
            .by_name
            .iter()
            .map(|(name, &uid)| (&**name, uid))
            .collect();
        names.sort_unstable();
        let mut out = Vec::new();
        for (_, uid) in names {
            let a = &self.accounts[uid as usize];
            // Jobs behind the effective head have no reason, but a paused user's.
            let last = if a.settings.paused {
                a.window.len()
            } else {
                (a.cursor + 1).min(a.window.len())
            };
            for (i, job) in a.window.iter().enumerate().take(last) {
                if let Some(reason) = self.reason_at(uid, i) {
                    out.push((job.job_id, reason));
                }
            }
        }
        out
    }

    /// Every user with a window, in the order a cycle at `now` would serve them
    /// (rank: quantized key, oldest effective head, name), with its key, share and
    /// usage at `now`. O(users · log users).
    #[must_use]
    pub fn order(&self, now: Seconds) -> Vec<UserOrder> {
        self.order_of(now, &[])
    }

    /// The users the next cycle could serve (not paused, under their limits, with
    /// an effective head: a queued job some healthy cluster can hold and its
    /// `max_resources` allows), in the order a cycle at `now` would serve them.
    /// What `GET /v1/scheduler` shows as the next users.
    #[must_use]
    pub fn next_users(&self, now: Seconds) -> Vec<UserOrder> {
        let mut order = self.order(now);
        let blocked = self.group_blocked(now);
        order.retain(|o| {
            self.by_name.get(o.user.as_str()).is_some_and(|&uid| {
                self.accounts[uid as usize].eligible() && !blocked.contains(&uid)
            })
        });
        order
    }

    /// The users a group on their path keeps from starting their head now (paused,
    /// or at a limit; [`crate::policy::groups`]): empty without groups.
    pub(super) fn group_blocked(&self, now: Seconds) -> std::collections::HashSet<Uid> {
        let mut out = std::collections::HashSet::new();
        if self.tree.is_empty() {
            return out;
        }
        let (paths, totals) = self.group_totals(now);
        for (uid, (a, path)) in self.accounts.iter().zip(&paths).enumerate() {
            let Some(head) = a.head() else { continue };
            if crate::policy::groups::ineligibility(&self.tree, &totals, path, &head.resources)
                .is_some()
            {
                out.insert(uid as Uid);
            }
        }
        out
    }

    /// Each user's groups (top first) and what each group holds at `now`: every
    /// user under it counted, those with nothing queued too.
    fn group_totals(
        &self,
        now: Seconds,
    ) -> (Vec<Vec<usize>>, Vec<crate::policy::groups::GroupTotals>) {
        let hl = self.config.usage_half_life;
        let paths: Vec<Vec<usize>> = self
            .accounts
            .iter()
            .map(|a| self.tree.path_of(a.settings.group.as_deref()))
            .collect();
        let totals = crate::policy::groups::roll_up(
            &self.tree,
            self.accounts.iter().zip(&paths).map(|(a, path)| {
                let usage = crate::policy::decay_usage(a.usage, a.usage_at, a.share, now, hl);
                (path.as_slice(), a.allocation, a.outstanding, usage)
            }),
        );
        (paths, totals)
    }

    /// Whether a group on `uid`'s path keeps it from starting `head` now (paused, or
    /// a limit it would pass); false without groups.
    pub(super) fn group_stops(
        &self,
        uid: Uid,
        head: &crate::policy::Resources,
        now: Seconds,
    ) -> bool {
        if self.tree.is_empty() {
            return false;
        }
        let (paths, totals) = self.group_totals(now);
        crate::policy::groups::ineligibility(&self.tree, &totals, &paths[uid as usize], head)
            .is_some()
    }

    /// [`Ledger::order`], with `also` (users a cycle's grants emptied) included.
    pub(crate) fn order_of(&self, now: Seconds, also: &[Uid]) -> Vec<UserOrder> {
        if let Some(grouped) = self.last.as_ref().and_then(|l| l.grouped.as_ref()) {
            return grouped.order.clone();
        }
        let mut ranked: Vec<(super::Rank, Uid)> = self
            .by_name
            .values()
            .copied()
            .filter(|&uid| !self.accounts[uid as usize].window.is_empty() || also.contains(&uid))
            .map(|uid| (self.rank(uid, now), uid))
            .collect();
        ranked.sort_unstable();
        let hl = self.config.usage_half_life;
        ranked
            .into_iter()
            .map(|(_, uid)| {
                let a = &self.accounts[uid as usize];
                UserOrder {
                    user: a.name.to_string(),
                    key: self.key(uid, now),
                    share: a.share,
                    usage: crate::policy::decay_usage(a.usage, a.usage_at, a.share, now, hl),
                }
            })
            .collect()
    }
}
