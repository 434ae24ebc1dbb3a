//! The arbiter's one message for the what-if preview (issue 14 §3): a copy of the
//! policy's input as the next cycle would see it. The preview itself runs outside the
//! actor ([`crate::policy::preview`]), so asking never delays a cycle by more than the
//! copy.

use actix::{Context, Handler, Message, MessageResult};

use super::FairShareArbiter;
use crate::actors::unix_now;
use crate::policy::preview::Snapshot;
use crate::policy::{Resources, UserView};

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
        let allocations = self.allocations();
        let users = self
            .users
            .iter()
            .map(|(name, e)| {
                let (allocation, outstanding_jobs): (Resources, u32) =
                    allocations.get(name.as_str()).copied().unwrap_or_default();
                UserView {
                    user: name.clone(),
                    weight: e.weight,
                    paused: e.paused,
                    max_running_jobs: e.max_running_jobs,
                    max_resources: e.max_resources,
                    outstanding_jobs,
                    allocation,
                    usage: e.usage,
                    usage_at: e.usage_at,
                    // As the cycle does: a job granted already is never offered again.
                    queue: e
                        .window
                        .iter()
                        .filter(|j| !self.outstanding.contains_key(&j.job_id))
                        .cloned()
                        .collect(),
                }
            })
            .collect();
        MessageResult(Some(Snapshot {
            now: unix_now(),
            config: self.config.clone(),
            users,
            clusters: self.cluster_views(),
            reservation: self.reservation.clone(),
        }))
    }
}
