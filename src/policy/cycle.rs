//! [`run_cycle`]: one scheduling cycle on a snapshot.

use super::{ClusterView, CycleOutcome, Ledger, PolicyConfig, Reservation, Seconds, UserView};

/// Runs one scheduling cycle at `now` (seconds) and returns the grants, the
/// pending reasons, the order of the users after it and the reservation to
/// pass to the next cycle.
///
/// `users` and `clusters` may come in any order (sorted internally by name);
/// `clusters` includes unhealthy ones, which are ignored. `reservation` is
/// the previous cycle's [`CycleOutcome::reservation`] (`None` at start-up).
/// See the module doc for the order, eligibility, best fit, reservation,
/// backfill and age rules.
///
/// It is [`Ledger::cycle`] on a ledger built from the snapshot
/// ([`Ledger::from_views`]), with every pending reason and the whole order
/// written out: O(U log U) for U users, whatever it grants. A caller that keeps
/// its users between cycles keeps a [`Ledger`] instead, whose cycles cost what
/// they grant.
#[must_use]
pub fn run_cycle(
    now: Seconds,
    config: &PolicyConfig,
    users: &[UserView],
    clusters: &[ClusterView],
    reservation: Option<&Reservation>,
) -> CycleOutcome {
    run_cycle_in(now, config, &[], users, clusters, reservation)
}

/// [`run_cycle`] with users in the groups of `tree` (DESIGN §2, "Groups"):
/// hierarchical DRF, the groups' pause and limits ([`crate::policy::groups`]).
/// With no groups, exactly [`run_cycle`].
#[must_use]
pub fn run_cycle_in(
    now: Seconds,
    config: &PolicyConfig,
    groups: &[crate::policy::GroupView],
    users: &[UserView],
    clusters: &[ClusterView],
    reservation: Option<&Reservation>,
) -> CycleOutcome {
    let mut ledger = Ledger::from_views(config.clone(), now, users, clusters, reservation);
    ledger.set_groups(groups);
    let result = ledger.cycle(now);
    CycleOutcome {
        pending: ledger.pending(),
        order: ledger.order_of(now, &result.emptied),
        grants: result.grants,
        stopped_for: result.stopped_for,
        reservation: result.reservation,
    }
}
