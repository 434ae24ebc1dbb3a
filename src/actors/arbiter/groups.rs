//! The arbiter's groups (DESIGN §2 "Groups"): the tree it hands the ledger, and the
//! live figures of groups and the hierarchical fair shares of users that
//! `GET /v1/groups`, `GET /v1/users`, `GET /v1/shares` and `/metrics` show.

use std::collections::HashMap;

use actix::{Context, Handler, Message, MessageResult};

use super::FairShareArbiter;
use crate::actors::messages::SetGroups;
use crate::actors::unix_now;
use crate::policy::{dominant_share, GroupView};
use crate::views::LiveGroup;

/// Ask for the live figures of every group, by path; `None` while recovery is still
/// loading the queues (the counts are not whole yet).
#[derive(Message)]
#[rtype(result = "Option<HashMap<String, LiveGroup>>")]
pub struct GetGroupState;

impl FairShareArbiter {
    /// Each user's fair share (users the arbiter knows with queued or outstanding
    /// jobs; the others have none): with groups, the tree's division
    /// ([`crate::policy::groups::fair_shares`]) with every such user's demand taken as
    /// the whole capacity, so that each level divides by weight alone, as the flat
    /// figure (weight over the summed weights of users with work) does without
    /// groups.
    pub(super) fn fair_shares(&self) -> HashMap<String, f64> {
        let now = unix_now();
        let tree = self.ledger.tree();
        let mut names = Vec::new();
        let mut entries = Vec::new();
        for (id, &queued) in &self.queued {
            let Some(u) = self.ledger.user(id, now) else {
                continue;
            };
            if queued == 0 && u.outstanding == 0 {
                continue;
            }
            names.push(id.clone());
            entries.push((
                tree.path_of(u.settings.group.as_deref()),
                u.settings.weight,
                1.0,
            ));
        }
        let shares = crate::policy::groups::fair_shares(tree, &entries);
        names.into_iter().zip(shares).collect()
    }

    /// Every group's live figures, by path: sums over the users under it.
    pub(super) fn group_states(&self) -> HashMap<String, LiveGroup> {
        let now = unix_now();
        let tree = self.ledger.tree();
        let mut out: Vec<LiveGroup> = vec![LiveGroup::default(); tree.len()];
        let fair = self.fair_shares();
        for (id, &queued) in &self.queued {
            let Some(u) = self.ledger.user(id, now) else {
                continue;
            };
            for g in tree.path_of(u.settings.group.as_deref()) {
                let live = &mut out[g];
                live.allocation += u.allocation;
                live.queued += queued;
                live.running += u.outstanding;
                live.fair_share += fair.get(id).copied().unwrap_or(0.0);
            }
        }
        let capacity = self.ledger.capacity();
        tree.groups()
            .iter()
            .zip(out)
            .map(|(g, mut live)| {
                live.share = dominant_share(&live.allocation, &capacity);
                (g.path.clone(), live)
            })
            .collect()
    }
}

impl Handler<SetGroups> for FairShareArbiter {
    type Result = ();

    fn handle(&mut self, msg: SetGroups, ctx: &mut Context<Self>) {
        let mut groups: Vec<GroupView> = msg.groups.iter().map(crate::store::group_view).collect();
        groups.sort_by(|a, b| a.path.cmp(&b.path));
        if self.ledger.tree().groups() == groups.as_slice() {
            return;
        }
        tracing::info!(groups = groups.len(), "groups changed");
        self.ledger.set_groups(&groups);
        self.request_cycle(ctx);
    }
}

impl Handler<GetGroupState> for FairShareArbiter {
    type Result = MessageResult<GetGroupState>;

    fn handle(&mut self, _: GetGroupState, _: &mut Context<Self>) -> Self::Result {
        if self.loading.is_some() {
            return MessageResult(None);
        }
        MessageResult(Some(self.group_states()))
    }
}
