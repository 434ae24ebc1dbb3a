//! The arbiter's one message for the what-if preview (issue 14 §3): a copy of the
//! policy's input as the next cycle would see it. The preview itself runs outside the
//! actor ([`crate::policy::preview`]), so asking never delays a cycle by more than the
//! copy.

use actix::{Context, Handler, Message, MessageResult};

use super::FairShareArbiter;
use crate::actors::unix_now;
use crate::policy::preview::Snapshot;

/// Ask for a copy of the policy's input now: every user the arbiter knows (settings,
/// allocation, decayed usage, window of QUEUED jobs), every cluster, the reservation
/// and the policy's knobs. `None` until recovery has loaded the queues (the copy
/// would miss jobs).
#[derive(Message)]
#[rtype(result = "Option<Snapshot>")]
pub struct GetSnapshot;

impl Handler<GetSnapshot> for FairShareArbiter {
    type Result = MessageResult<GetSnapshot>;

    fn handle(&mut self, _: GetSnapshot, _: &mut Context<Self>) -> Self::Result {
        if self.loading.is_some() || !self.ready {
            return MessageResult(None);
        }
        MessageResult(Some(Snapshot {
            now: unix_now(),
            config: self.config.clone(),
            users: self.ledger.all_user_views(),
            clusters: self.ledger.cluster_views(),
            reservation: self.ledger.reservation().cloned(),
            groups: self.ledger.tree().groups().to_vec(),
        }))
    }
}

/// Ask for what the estimates' forward run needs from the arbiter (issue 48): every
/// user's settings, allocation and decayed usage **without** its window (the queues
/// come from the database: copying every window would hold a cycle up), every
/// cluster, the reservation, the knobs with the guard in force, and every outstanding
/// job. O(users + outstanding jobs); `None` until recovery has loaded the queues.
#[derive(Message)]
#[rtype(result = "Option<(Snapshot, Vec<crate::policy::estimate::Outstanding>)>")]
pub struct GetEstimateInput;

impl Handler<GetEstimateInput> for FairShareArbiter {
    type Result = MessageResult<GetEstimateInput>;

    fn handle(&mut self, _: GetEstimateInput, _: &mut Context<Self>) -> Self::Result {
        if self.loading.is_some() || !self.ready {
            return MessageResult(None);
        }
        MessageResult(Some((
            Snapshot {
                now: unix_now(),
                config: self.ledger.policy_config(),
                users: self.ledger.all_user_settings(),
                clusters: self.ledger.cluster_views(),
                reservation: self.ledger.reservation().cloned(),
                groups: self.ledger.tree().groups().to_vec(),
            },
            self.ledger.outstanding_jobs(),
        )))
    }
}
