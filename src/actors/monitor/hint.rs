//! A notification from an attempt's watcher (`ray::notify`): ask Ray about that one
//! attempt now, and again shortly while Ray has not caught up with the driver (Ray
//! sees the driver's exit up to about 100 ms after the watcher does).

use std::time::{Duration, Instant};

use entity::JobStatus;

use super::followed::{Followed, Outcome};
use super::poll::{carry, probe_current};
use crate::lifecycle::{self, Limits};
use crate::ray::notify::HintKind;
use crate::ray::{RayClient, RayJobStatus};
use crate::store::{Db, Fence};

/// Waits between asks after a notification: about 1.3 s in all, after which the poll
/// takes over. Short first, because Ray usually catches up within 100 ms.
const ASK_AGAIN: [Duration; 7] = [
    Duration::from_millis(10),
    Duration::from_millis(20),
    Duration::from_millis(40),
    Duration::from_millis(80),
    Duration::from_millis(160),
    Duration::from_millis(320),
    Duration::from_millis(640),
];

/// Whether Ray's answer is what the notification announced (the attempt ended, or it
/// left PENDING).
fn caught_up(kind: HintKind, status: &RayJobStatus) -> bool {
    match kind {
        HintKind::Ended => status.is_terminal(),
        HintKind::Started => *status != RayJobStatus::Pending,
    }
}

/// Asks Ray about `t` (followed on `cluster`) after a `kind` notification, until Ray's
/// answer shows it, and writes what that answer decides. `None`: Ray did not answer,
/// did not catch up within [`ASK_AGAIN`], or nothing was to be written.
pub(super) async fn check(
    db: Db,
    fence: Fence,
    client: RayClient,
    cluster: String,
    t: Followed,
    limits: Limits,
    kind: HintKind,
) -> Option<Outcome> {
    let sid = lifecycle::current_submission_id(&t.job);
    let mut waits = ASK_AGAIN.iter();
    loop {
        let listed = match client.get_job(&sid).await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::debug!(submission_id = %sid, error = %e, "hint: Ray did not answer; the poll will");
                return None;
            }
        };
        let ready = listed.as_ref().is_some_and(|j| caught_up(kind, &j.status));
        if ready || (kind == HintKind::Started && t.job.status == JobStatus::Running) {
            let probe = probe_current(
                &t,
                &cluster,
                listed.as_ref(),
                &limits,
                chrono::Utc::now(),
                Instant::now(),
            );
            return match carry(&db, &fence, t.job.id, probe).await {
                Ok(o) => Some(o),
                Err(e) => {
                    tracing::warn!(job_id = %t.job.id, error = %e, "hint: cannot record Ray's answer; the poll will");
                    None
                }
            };
        }
        tokio::time::sleep(*waits.next()?).await;
    }
}
