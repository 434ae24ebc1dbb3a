//! Keys, their bounds, and keeping each user in the indexes it belongs to.

use super::index::Bound;
use super::{overdue, permanent_reason, saturated, Ledger, Ordered, Rank, Shape, Uid};
use crate::policy::{age_term, decay_usage, fair_share_key, quantize_key, Seconds};

impl Ledger {
    /// The user's key at `now`: `(s + h) / w − a · min(age / M, 1)`, `h` brought to
    /// `now`, the age that of its effective head (none: no age term).
    pub(super) fn key(&self, uid: Uid, now: Seconds) -> f64 {
        self.key_parts(uid, now).0
    }

    /// The user's key at `now` and its decayed usage `h` then.
    pub(super) fn key_parts(&self, uid: Uid, now: Seconds) -> (f64, f64) {
        #[cfg(test)]
        super::tests::KEYS.with(|k| k.set(k.get() + 1));
        let a = &self.accounts[uid as usize];
        let c = &self.config;
        let usage = decay_usage(a.usage, a.usage_at, a.share, now, c.usage_half_life);
        let base = fair_share_key(a.share, usage, a.settings.weight);
        let age = a.head().map_or(0.0, |job| now - job.submitted_at);
        (base - age_term(age, c.age_weight, c.max_age), usage)
    }

    /// The user's exact rank given its key.
    pub(super) fn rank_of(&self, uid: Uid, key: f64) -> Rank {
        let a = &self.accounts[uid as usize];
        Rank {
            key: quantize_key(key),
            head_at: a.head().map_or(f64::INFINITY, |j| j.submitted_at),
            name: a.name.clone(),
        }
    }

    /// The user's exact rank at `now`.
    pub(super) fn rank(&self, uid: Uid, now: Seconds) -> Rank {
        self.rank_of(uid, self.key(uid, now))
    }

    /// The user's exact rank at `now` and a fresh lower bound of it.
    pub(super) fn rank_and_bound(&self, uid: Uid, now: Seconds) -> (Rank, Bound) {
        let (key, h) = self.key_parts(uid, now);
        (self.rank_of(uid, key), self.bound(uid, now, key, h))
    }

    /// Whether the user's key is the same at every instant from `now` on, bit for
    /// bit: no usage drift (history off or infinite, or `h = s` exactly) and no age
    /// term moving (off, saturated, no head, or a NaN age).
    pub(super) fn constant_key(&self, uid: Uid, now: Seconds) -> bool {
        let a = &self.accounts[uid as usize];
        let c = &self.config;
        let hl = c.usage_half_life;
        let usage_still = hl.is_nan()
            || hl <= 0.0
            || hl == f64::INFINITY
            || (a.usage == a.share && a.usage.is_finite());
        let valid = |x: f64| x.is_finite() && x > 0.0;
        let age_still = !(valid(c.age_weight) && valid(c.max_age))
            || a.head().is_none_or(|h| {
                let age = now - h.submitted_at;
                age.is_nan() || saturated(age, c.max_age)
            });
        usage_still && age_still
    }

    /// A lower bound of the user's quantized key from `now` on, given its key `key`
    /// and decayed usage `h` at `now`, falling at the fastest rate the key can fall
    /// (usage drifting down to the share at `λ (h − s) / w`, the age term at `a / M`
    /// until it saturates). A key that cannot move is exact. The margin covers the
    /// rounding of a key's evaluation and its quantization, relative to the
    /// magnitudes that enter it.
    pub(super) fn bound(&self, uid: Uid, now: Seconds, key: f64, h: f64) -> Bound {
        if self.constant_key(uid, now) {
            return Bound {
                value: quantize_key(key),
                slope: 0.0,
                common: 0.0,
                exact: true,
                at: now,
            };
        }
        let a = &self.accounts[uid as usize];
        let c = &self.config;
        let w = a.settings.weight;
        let hl = c.usage_half_life;
        let mut slope = 0.0;
        if hl.is_finite() && hl > 0.0 {
            let gap = h - a.share;
            if gap > 0.0 {
                slope += std::f64::consts::LN_2 / hl * gap / w;
            } else if gap.is_nan() {
                slope = f64::INFINITY;
            }
        }
        let valid = |x: f64| x.is_finite() && x > 0.0;
        // The age term's slope is the same for every user whose head's age has not
        // saturated: the index keeps it exact (index.rs, "classes").
        let mut common = 0.0;
        if valid(c.age_weight) && valid(c.max_age) {
            let unsaturated = a
                .head()
                .is_some_and(|j| !saturated(now - j.submitted_at, c.max_age));
            if unsaturated {
                common = c.age_weight / c.max_age;
                slope += common;
            }
        }
        let scale = (a.share.abs() + h.abs() + a.usage.abs()) / w + c.age_weight.abs();
        let margin = scale * f64::powi(2.0, -36) + f64::MIN_POSITIVE;
        Bound {
            value: key - margin,
            // Rounding of the slope itself.
            slope: slope * (1.0 + 1e-9),
            common,
            exact: false,
            at: now,
        }
    }

    /// Moves the effective head past jobs that can never run (larger than every
    /// healthy cluster, or alone over the user's or one of its groups'
    /// `max_resources`), from the start.
    pub(super) fn skip_unrunnable(&mut self, uid: Uid, from: usize) {
        let totals = &self.totals;
        let tree = &self.tree;
        let a = &mut self.accounts[uid as usize];
        let mut cursor = from;
        while let Some(job) = a.window.get(cursor) {
            let caps = tree.caps_of(a.settings.group.as_deref());
            if permanent_reason(job, a.settings.max_resources.as_ref(), caps, totals).is_none() {
                break;
            }
            cursor += 1;
        }
        a.cursor = cursor;
    }

    /// Takes a user out of every index.
    pub(super) fn unindex(&mut self, uid: Uid) {
        let a = &mut self.accounts[uid as usize];
        if let Some(shape) = a.shape.take() {
            if let Some(index) = self.shapes.get_mut(&shape) {
                index.remove(uid);
                if index.is_empty() {
                    self.shapes.remove(&shape);
                }
            }
        }
        if let Some(at) = a.waiting.take() {
            self.waiting.remove(&(at, uid));
        }
        if std::mem::take(&mut a.overdue) {
            self.overdue.remove(uid);
        }
    }

    /// Recomputes a user's effective head and puts it in the indexes it belongs to
    /// as of `now`.
    pub(super) fn reindex(&mut self, uid: Uid, now: Seconds) {
        self.unindex(uid);
        self.skip_unrunnable(uid, 0);
        let a = &self.accounts[uid as usize];
        if !(a.listed() && a.eligible()) {
            return;
        }
        let (key, h) = self.key_parts(uid, now);
        let bound = self.bound(uid, now, key, h);
        self.index_eligible(uid, now, bound);
    }

    /// Puts an eligible user in its shape's index and in `waiting` or `overdue`, with
    /// `bound`, a lower bound of its key from `now` on.
    pub(super) fn index_eligible(&mut self, uid: Uid, now: Seconds, bound: Bound) {
        let guard = self.guard;
        let a = &mut self.accounts[uid as usize];
        let Some(head) = a.head() else {
            return;
        };
        let (shape, at) = (Shape::of(&head.resources), head.submitted_at);
        self.shapes
            .entry(shape)
            .or_default()
            .insert(uid, at, &a.name, bound);
        a.shape = Some(shape);
        if overdue(now, at, guard) {
            a.overdue = true;
            self.overdue.insert(uid, at, &a.name, bound);
        } else {
            a.waiting = Some(Ordered(at));
            self.waiting.insert((Ordered(at), uid));
        }
    }

    /// Moves users whose head has now waited past the guard from `waiting` into
    /// `overdue`.
    pub(super) fn advance_overdue(&mut self, now: Seconds) {
        let guard = self.guard;
        while let Some(&(at, uid)) = self.waiting.first() {
            if !overdue(now, at.0, guard) {
                break;
            }
            self.waiting.pop_first();
            let bound = self.rank_and_bound(uid, now).1;
            let a = &mut self.accounts[uid as usize];
            a.waiting = None;
            a.overdue = true;
            self.overdue.insert(uid, at.0, &a.name, bound);
        }
    }
}
