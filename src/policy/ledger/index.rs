//! A set of users kept in fair-share order between cycles although their keys move
//! with time.
//!
//! A user's key `(s + h(t)) / w − a · min(age(t) / M, 1)` changes as time passes: the
//! decayed usage `h` drifts toward the share `s` and the age term grows until it
//! saturates. Re-evaluating every key at every cycle is what made a cycle cost
//! O(users). Instead each entry stores a **lower bound** of the user's quantized key
//! that stays valid for every later instant: the key evaluated when the entry was
//! made, minus a margin for rounding and quantization, falling at a **slope** (per
//! second) no smaller than the fastest the key can fall:
//!
//! - decayed usage falls toward the share at most at `λ · max(h − s, 0) / w`
//!   (`dh/dt = λ (s − h)`, `λ = ln 2 / T`, and the gap only shrinks);
//! - the age term lowers the key at `a / M` until it saturates.
//!
//! A key that provably cannot move (no usage drifting: `h = s` bit for bit, or
//! history off; no age term: off, saturated, or no head) is stored **exact**: the
//! bound is the quantized key itself, so ties among such users resolve by the
//! tie-break without evaluating them.
//!
//! [`KeyIndex::pop_min`] finds the user with the smallest exact rank `(quantized
//! key, head's submit time, name)` by taking entries in the order of their bounds and
//! evaluating them exactly, until the next bound is above the best rank found: every
//! entry not evaluated has a rank at least its bound, so it cannot come first. The
//! entries it evaluated get fresh (tight) bounds. A cycle thus evaluates the users
//! near the front of the order and the users whose bounds have grown loose, not
//! every user.
//!
//! Entries are grouped in **classes** of equal slope, so that within a class the
//! order of the bounds does not change as time passes: a class is a B-tree ordered by
//! `bound + slope · (at − epoch)`. The smallest bound is found by comparing the first
//! entry of each class. A class's slope is the bound's slope with its **common** part
//! (the age term's `a / M`, the same for every user whose head's age has not
//! saturated) kept as it is and the rest (the usage's drift, per user) rounded up to
//! 4 significant bits, so that few classes exist. Rounding the common part too (as
//! this index first did) made every bound fall up to 1/8 faster than any key can:
//! users whose keys differ by less than that excess times the time since their last
//! evaluation (in a queue of heads submitted close together, most of them) were
//! evaluated again at every query, which made the estimates' forward run, one query
//! per instant a job ends, grow with the users (BENCHMARKS.md, issue 48).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use super::super::share::cmp_f64;
use super::super::Seconds;
use super::{Rank, Uid, UidHasher};

/// How long an index keeps one time origin, seconds. The origin only serves to keep
/// `slope · (t − epoch)` small, hence exact to many digits; past it every entry is
/// rewritten against a new origin (order within a class is unchanged, so it costs
/// O(entries), once a day).
const REBASE_AFTER: Seconds = 86_400.0;

/// Relative margin for the rounding of `bound + slope · (at − epoch)` and of the
/// subtraction at query time: a few ulps of the magnitudes involved, doubled twice.
const ROUNDING: f64 = 16.0 * f64::EPSILON;

/// Where a user's key stands at one instant and how fast it can fall.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Bound {
    /// A lower bound of the user's quantized key at `at` and (falling at `slope`)
    /// after it; the quantized key itself when `exact`.
    pub value: f64,
    /// Per second, `≥ 0`. `+∞` (or a NaN value) makes the entry be evaluated at
    /// every query.
    pub slope: f64,
    /// The part of `slope` that every member of the index shares, per second, `≥ 0`
    /// (the age term's `a / M` while it grows): the class keeps it exact and rounds
    /// only the rest (module doc, "classes").
    pub common: f64,
    /// `value` is the quantized key at every instant from `at` on.
    pub exact: bool,
    /// When the bound was taken, seconds.
    pub at: Seconds,
}

/// The volatile class: bounds that say nothing (non-finite), evaluated every time.
const VOLATILE: f64 = f64::INFINITY;

/// One entry of a class: ordered by the time-shifted bound, then the tie-break of
/// [`Rank`] (head's submit time, name), then the user (unique).
#[derive(Clone, Debug)]
struct Entry {
    shifted: f64,
    head_at: f64,
    name: Arc<str>,
    uid: Uid,
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_f64(self.shifted, other.shifted)
            .then_with(|| cmp_f64(self.head_at, other.head_at))
            .then_with(|| self.name.cmp(&other.name))
            .then_with(|| self.uid.cmp(&other.uid))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Entry {}

/// A class's key: the bits of its slope (per second, `≥ 0`: `0` for exact and
/// non-falling bounds, [`VOLATILE`] for bounds that say nothing), which order as the
/// slopes do.
type ClassKey = u64;

fn slope_of(class: ClassKey) -> f64 {
    f64::from_bits(class)
}

/// Users ordered by a lower bound of their rank (module doc).
#[derive(Debug, Default)]
pub(crate) struct KeyIndex {
    /// Time origin of the shifted bounds, seconds (`None` while empty).
    epoch: Option<Seconds>,
    /// The classes that have members, by slope (an emptied class goes: a query looks
    /// at each class's first entry, and as virtual time moves on, drifting usages
    /// pass through ever more slopes).
    classes: BTreeMap<ClassKey, BTreeSet<Entry>>,
    /// Each member's class and entry, to remove it.
    members: HashMap<Uid, (ClassKey, Entry), BuildHasherDefault<UidHasher>>,
}

/// What [`KeyIndex::pop_min`]'s evaluation says of one member.
pub(crate) enum Verdict {
    /// A candidate: its exact rank now, and a fresh bound should it go back.
    Rank(Rank, Bound),
    /// Not a candidate for this query: it leaves the index (the caller puts it back).
    Skip,
}

/// `slope` rounded up to 4 significant bits (at most 1/8 steeper).
fn round_up(slope: f64) -> f64 {
    const KEEP: u32 = 4;
    let mask = (1u64 << (52 - KEEP)) - 1;
    let bits = slope.to_bits();
    // Round the mantissa up; a carry into the exponent still gives a value ≥ slope.
    f64::from_bits((bits + mask) & !mask)
}

/// The slope of the class a bound falling at `slope`, of which `common` is shared by
/// every member, belongs to: `common` plus the rest rounded up to 4 significant bits
/// (at most 1/8 of the rest steeper), so that few classes exist and bounds whose slope
/// is (nearly) the common one fall (nearly) as fast as their keys. Never below `slope`.
fn class_slope(slope: f64, common: f64) -> f64 {
    if slope.is_nan() || slope < 0.0 || slope.is_infinite() {
        return VOLATILE;
    }
    if slope == 0.0 {
        return 0.0;
    }
    if common.is_finite() && common > 0.0 && slope > common {
        // `slope − common` is at least the exact difference's rounding, and rounding
        // `common + rest` to nearest cannot go below the representable `slope`; the
        // check keeps that true whatever the arithmetic.
        let c = common + round_up(slope - common);
        if c >= slope {
            return c;
        }
    }
    round_up(slope)
}

impl KeyIndex {
    /// Number of members.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    #[cfg(test)]
    pub fn contains(&self, uid: Uid) -> bool {
        self.members.contains_key(&uid)
    }

    /// Adds `uid` (its rank's tie-break: `head_at`, `name`) with `bound`; replaces
    /// an entry it had.
    pub fn insert(&mut self, uid: Uid, head_at: f64, name: &Arc<str>, bound: Bound) {
        self.remove(uid);
        let epoch = *self.epoch.get_or_insert(bound.at);
        let (slope, shifted) = if bound.exact {
            (0.0, bound.value)
        } else {
            let slope = class_slope(bound.slope, bound.common);
            if slope == VOLATILE || !bound.value.is_finite() {
                (VOLATILE, f64::NEG_INFINITY)
            } else if slope == 0.0 {
                (0.0, bound.value)
            } else {
                let lift = slope * (bound.at - epoch);
                let margin = ROUNDING * (bound.value.abs() + lift.abs() + slope * REBASE_AFTER);
                (slope, bound.value - margin + lift)
            }
        };
        // A non-exact bound of slope 0 shares the exact class: both stay put. (`+ 0.0`
        // folds a −0 into the class of +0.)
        let class: ClassKey = (slope + 0.0).to_bits();
        let entry = Entry {
            shifted,
            head_at,
            name: name.clone(),
            uid,
        };
        self.classes.entry(class).or_default().insert(entry.clone());
        self.members.insert(uid, (class, entry));
    }

    /// Removes `uid`; whether it was a member.
    pub fn remove(&mut self, uid: Uid) -> bool {
        let Some((class, entry)) = self.members.remove(&uid) else {
            return false;
        };
        if let Some(set) = self.classes.get_mut(&class) {
            set.remove(&entry);
            if set.is_empty() {
                self.classes.remove(&class);
            }
        }
        self.reset_if_empty();
        true
    }

    /// An empty index starts afresh: no classes, no time origin.
    fn reset_if_empty(&mut self) {
        if self.members.is_empty() {
            self.classes.clear();
            self.epoch = None;
        }
    }

    /// The lower bound at `now` of an entry of class `class`.
    fn bound_now(&self, class: ClassKey, entry: &Entry, now: Seconds) -> f64 {
        let slope = slope_of(class);
        if slope == 0.0 {
            return entry.shifted;
        }
        if slope == VOLATILE {
            return f64::NEG_INFINITY;
        }
        let drop = slope * (now - self.epoch.unwrap_or(now));
        entry.shifted - drop
    }

    /// The class whose first entry has the smallest bound at `now` (ties by the
    /// rank's tie-break), with that bound.
    fn front(&self, now: Seconds) -> Option<(ClassKey, f64)> {
        let mut best: Option<(ClassKey, f64, &Entry)> = None;
        for (&i, set) in &self.classes {
            let Some(entry) = set.first() else {
                continue;
            };
            let bound = self.bound_now(i, entry, now);
            let better = best.is_none_or(|(_, b, e)| {
                cmp_f64(bound, b)
                    .then_with(|| cmp_f64(entry.head_at, e.head_at))
                    .then_with(|| entry.name.cmp(&e.name))
                    .then_with(|| entry.uid.cmp(&e.uid))
                    == Ordering::Less
            });
            if better {
                best = Some((i, bound, entry));
            }
        }
        best.map(|(i, b, _)| (i, b))
    }

    /// Rewrites every entry against `now` as the time origin, if the current origin is
    /// older than [`REBASE_AFTER`]: `shifted − slope · (now − epoch)`, less a margin
    /// for this step's rounding. The same function of the old value is applied to the
    /// sets and to the members' copies, so removal still finds each entry.
    fn rebase(&mut self, now: Seconds) {
        let Some(epoch) = self.epoch else {
            return;
        };
        if (now - epoch).partial_cmp(&REBASE_AFTER) != Some(Ordering::Greater) {
            return;
        }
        let shift = |slope: f64, x: f64| {
            let drop = slope * (now - epoch);
            x - drop - ROUNDING * (x.abs() + drop.abs())
        };
        let moves = |slope: f64| slope != 0.0 && slope != VOLATILE;
        for (&class, set) in &mut self.classes {
            let slope = slope_of(class);
            if !moves(slope) {
                continue;
            }
            *set = std::mem::take(set)
                .into_iter()
                .map(|mut e| {
                    e.shifted = shift(slope, e.shifted);
                    e
                })
                .collect();
        }
        for (class, entry) in self.members.values_mut() {
            let slope = slope_of(*class);
            if moves(slope) {
                entry.shifted = shift(slope, entry.shifted);
            }
        }
        self.epoch = Some(now);
    }

    /// Takes out the member with the smallest exact rank at `now` among those `eval`
    /// accepts, and returns it with the members `eval` skipped on the way (also taken
    /// out; the caller puts them back when it is done with them). Members evaluated
    /// and not chosen go back at once with the fresh bound `eval` gave.
    ///
    /// `eval(uid)` must give the member's exact rank at `now`, with the same
    /// tie-break (`head_at`, name) it was inserted with, and a fresh bound.
    pub fn pop_min(
        &mut self,
        now: Seconds,
        mut eval: impl FnMut(Uid) -> Verdict,
    ) -> (Option<(Rank, Uid)>, Vec<Uid>) {
        self.rebase(now);
        let mut best: Option<(Rank, Uid, Bound)> = None;
        let mut losers: Vec<(Rank, Uid, Bound)> = Vec::new();
        let mut skipped = Vec::new();
        while let Some((class, bound)) = self.front(now) {
            if let Some((rank, _, _)) = &best {
                let Some(entry) = self.classes.get(&class).and_then(BTreeSet::first) else {
                    break;
                };
                let ahead = cmp_f64(bound, rank.key)
                    .then_with(|| cmp_f64(entry.head_at, rank.head_at))
                    .then_with(|| entry.name.cmp(&rank.name));
                if ahead == Ordering::Greater {
                    break;
                }
            }
            let Some(set) = self.classes.get_mut(&class) else {
                break;
            };
            let Some(entry) = set.pop_first() else {
                break;
            };
            if set.is_empty() {
                self.classes.remove(&class);
            }
            self.members.remove(&entry.uid);
            self.reset_if_empty();
            match eval(entry.uid) {
                Verdict::Skip => skipped.push(entry.uid),
                Verdict::Rank(rank, fresh) => {
                    let wins = best.as_ref().is_none_or(|(b, _, _)| rank < *b);
                    if wins {
                        if let Some(old) = best.replace((rank, entry.uid, fresh)) {
                            losers.push(old);
                        }
                    } else {
                        losers.push((rank, entry.uid, fresh));
                    }
                }
            }
        }
        for (rank, uid, fresh) in losers {
            self.insert(uid, rank.head_at, &rank.name, fresh);
        }
        (best.map(|(rank, uid, _)| (rank, uid)), skipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A member whose key is `k0 − slope · (t − at)` exactly (a linear key), so the
    /// bound `k0` falling at `slope` is tight.
    #[derive(Clone, Debug)]
    struct Linear {
        k0: f64,
        slope: f64,
        /// The part of `slope` every member shares ([`COMMON`] or 0).
        common: f64,
        at: f64,
        head_at: f64,
    }

    /// The slope shared by the members that have it (the age term's `a / M` with the
    /// service's defaults, 0.05 a day).
    const COMMON: f64 = 0.05 / 86_400.0;

    fn key(m: &Linear, t: f64) -> f64 {
        super::super::super::quantize_key(m.k0 - m.slope * (t - m.at))
    }

    fn bound(m: &Linear) -> Bound {
        let k = m.k0;
        if m.slope == 0.0 {
            return Bound {
                value: super::super::super::quantize_key(k),
                slope: 0.0,
                common: 0.0,
                exact: true,
                at: m.at,
            };
        }
        Bound {
            value: k - 1e-9 * (k.abs() + 1.0),
            slope: m.slope * (1.0 + 1e-12),
            common: m.common,
            exact: false,
            at: m.at,
        }
    }

    fn member() -> impl Strategy<Value = Linear> {
        (
            prop::sample::select(vec![-1.0, 0.0, 0.25, 0.5, 1.0, 3.0]),
            prop::sample::select(vec![0.0, 0.0, 1e-6, 2.3e-6, 1e-4, 1e-2]),
            any::<bool>(),
            0u32..100,
            0u32..4,
        )
            .prop_map(|(k0, drift, common, at, head)| {
                let common = if common { COMMON } else { 0.0 };
                Linear {
                    k0,
                    slope: drift + common,
                    common,
                    at: f64::from(at),
                    head_at: f64::from(head),
                }
            })
    }

    proptest! {
        /// Popping gives the members in exact rank order at each query time,
        /// whatever bounds they were inserted with, and skipped members come back
        /// to the caller.
        #[test]
        fn pops_follow_the_exact_order(
            members in prop::collection::vec(member(), 0..40),
            queries in prop::collection::vec(100u32..100_000, 1..6),
            skip_every in 0usize..5,
        ) {
            let names: Vec<Arc<str>> =
                (0..members.len()).map(|i| Arc::from(format!("u{i:03}"))).collect();
            let mut index = KeyIndex::default();
            for (i, m) in members.iter().enumerate() {
                index.insert(i as Uid, m.head_at, &names[i], bound(m));
            }
            let mut queries = queries;
            queries.sort_unstable();
            for q in queries {
                let now = f64::from(q);
                let mut seen = Vec::new();
                let mut expected: Vec<(Rank, Uid)> = (0..members.len())
                    .filter(|&i| index.contains(i as Uid))
                    .filter(|&i| skip_every == 0 || i % (skip_every + 1) != 0)
                    .map(|i| (Rank { key: key(&members[i], now), head_at: members[i].head_at,
                        name: names[i].clone() }, i as Uid))
                    .collect();
                expected.sort_by(|a, b| a.0.cmp(&b.0));
                let mut skipped_all = Vec::new();
                loop {
                    let (got, skipped) = index.pop_min(now, |uid| {
                        let i = uid as usize;
                        if skip_every != 0 && i % (skip_every + 1) == 0 {
                            return Verdict::Skip;
                        }
                        let m = &members[i];
                        let rank = Rank { key: key(m, now), head_at: m.head_at, name: names[i].clone() };
                        let fresh = Linear { k0: m.k0 - m.slope * (now - m.at), at: now, ..m.clone() };
                        Verdict::Rank(rank, bound(&fresh))
                    });
                    skipped_all.extend(skipped);
                    match got {
                        Some(x) => seen.push(x),
                        None => break,
                    }
                }
                prop_assert_eq!(seen.iter().map(|x| x.1).collect::<Vec<_>>(),
                    expected.iter().map(|x| x.1).collect::<Vec<_>>());
                // Put everyone back for the next query, with their original bounds.
                for (_, uid) in seen.into_iter() {
                    let i = uid as usize;
                    index.insert(uid, members[i].head_at, &names[i], bound(&members[i]));
                }
                for uid in skipped_all {
                    let i = uid as usize;
                    index.insert(uid, members[i].head_at, &names[i], bound(&members[i]));
                }
                prop_assert_eq!(index.len(), members.len());
            }
        }
    }

    #[test]
    fn class_slopes_round_up_to_four_significant_bits() {
        for s in [1e-9, 2.3e-6, 0.1, 1.0, 3.0, 1e6] {
            let c = class_slope(s, 0.0);
            assert!(c >= s && c <= s * 1.125, "{s} -> {c}");
        }
        assert_eq!(class_slope(0.0, 0.0), 0.0);
        assert_eq!(class_slope(f64::NAN, 0.0), VOLATILE);
        assert_eq!(class_slope(f64::INFINITY, COMMON), VOLATILE);
    }

    #[test]
    fn class_slopes_keep_the_common_part_and_round_the_rest() {
        // The age slope with the keys' fudge (keys::bound): 1.7 % above the slope
        // once rounded whole, a few parts in 10⁹ with the common part kept.
        let s = COMMON * (1.0 + 1e-9);
        assert!(class_slope(s, 0.0) > COMMON * 1.01);
        let c = class_slope(s, COMMON);
        assert!(c >= s && c <= COMMON * (1.0 + 2e-9), "{c}");
        // A drift on top: the drift alone is rounded.
        for drift in [1e-12, 3e-9, 1e-7, 5e-6] {
            let s = (COMMON + drift) * (1.0 + 1e-9);
            let c = class_slope(s, COMMON);
            assert!(c >= s && c <= COMMON + (s - COMMON) * 1.125 * (1.0 + 1e-12));
        }
        // A slope below its claimed common part (not made by the ledger): rounded
        // whole, still not below it.
        assert!(class_slope(COMMON / 2.0, COMMON) >= COMMON / 2.0);
    }

    /// A class whose last member left goes: a query compares only the classes that
    /// have members, however many slopes the members passed through.
    #[test]
    fn emptied_classes_go() {
        let name: Arc<str> = Arc::from("u");
        let mut index = KeyIndex::default();
        index.insert(
            9,
            0.0,
            &name,
            bound(&Linear {
                k0: 1.0,
                slope: 0.0,
                common: 0.0,
                at: 0.0,
                head_at: 0.0,
            }),
        );
        for k in 0..1000u32 {
            let slope = 1e-9 * f64::from(k + 1);
            let m = Linear {
                k0: 1.0,
                slope,
                common: 0.0,
                at: 0.0,
                head_at: 0.0,
            };
            index.insert(1, 0.0, &name, bound(&m));
            assert_eq!(index.classes.len(), 2, "slope {slope}");
        }
        assert!(index.remove(1));
        assert_eq!(index.classes.len(), 1);
        let (got, _) = index.pop_min(1.0, |_| {
            let m = Linear {
                k0: 1.0,
                slope: 0.0,
                common: 0.0,
                at: 1.0,
                head_at: 0.0,
            };
            Verdict::Rank(
                Rank {
                    key: key(&m, 1.0),
                    head_at: 0.0,
                    name: name.clone(),
                },
                bound(&m),
            )
        });
        assert_eq!(got.map(|g| g.1), Some(9));
        assert!(index.classes.is_empty() && index.is_empty());
    }

    /// Members whose keys fall together at the common slope, 10⁻⁶ apart (heads
    /// submitted ~1.7 s apart with the default age term): after a day of queries
    /// one pop still evaluates only the front, not every member whose gap is below
    /// the excess of a rounded slope (an eighth of it at most: ~7·10⁻⁸ a second, here
    /// 10⁻⁶ within 15 s).
    #[test]
    fn bounds_falling_at_the_common_slope_stay_tight() {
        let names: Vec<Arc<str>> = (0..1000).map(|i| Arc::from(format!("u{i:04}"))).collect();
        let member = |i: usize, at: f64| {
            let k0 = -0.001 + i as f64 * 1e-6 - COMMON * at;
            Linear {
                k0,
                slope: COMMON,
                common: COMMON,
                at,
                head_at: 0.0,
            }
        };
        let mut index = KeyIndex::default();
        for (i, name) in names.iter().enumerate() {
            index.insert(i as Uid, 0.0, name, bound(&member(i, 0.0)));
        }
        for q in 1..=24 {
            let now = f64::from(q) * 3600.0;
            let mut evaluated = 0;
            let (got, _) = index.pop_min(now, |uid| {
                evaluated += 1;
                let m = member(uid as usize, now);
                let rank = Rank {
                    key: key(&m, now),
                    head_at: 0.0,
                    name: names[uid as usize].clone(),
                };
                Verdict::Rank(rank, bound(&m))
            });
            let (_, uid) = got.expect("a member");
            assert_eq!(uid, 0);
            assert_eq!(evaluated, 1, "query at {now}");
            index.insert(uid, 0.0, &names[0], bound(&member(0, now)));
        }
    }

    #[test]
    fn exact_ties_resolve_without_evaluating_everyone() {
        let mut index = KeyIndex::default();
        let names: Vec<Arc<str>> = (0..1000).map(|i| Arc::from(format!("u{i:04}"))).collect();
        for (i, name) in names.iter().enumerate() {
            let b = Bound {
                value: 0.0,
                slope: 0.0,
                common: 0.0,
                exact: true,
                at: 0.0,
            };
            index.insert(i as Uid, 5.0, name, b);
        }
        let mut evaluated = 0;
        let (got, _) = index.pop_min(10.0, |uid| {
            evaluated += 1;
            let b = Bound {
                value: 0.0,
                slope: 0.0,
                common: 0.0,
                exact: true,
                at: 10.0,
            };
            Verdict::Rank(
                Rank {
                    key: 0.0,
                    head_at: 5.0,
                    name: names[uid as usize].clone(),
                },
                b,
            )
        });
        assert_eq!(got.map(|g| g.1), Some(0));
        assert_eq!(evaluated, 1);
    }
}
