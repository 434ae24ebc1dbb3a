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
