//! One poll of one cluster: Ray's capacity report and job list, and what they mean
//! for each followed job (events applied through `store::apply`).

use std::collections::HashMap;
use std::time::Instant;

use entity::JobStatus;

use super::{Retiring, Tracked, STOP_RETRY};
use crate::lifecycle::{self, Limits};
use crate::metrics;
use crate::policy::JobId;
use crate::ray::{ClusterUsage, RayClient, RayError, RayJob, RayJobStatus};
use crate::store::{self, Applied, Db, Fence};

/// What the poll found for one followed job or attempt.
pub(super) enum Outcome {
    /// Listed by Ray, nothing to write; `running`: Ray shows it RUNNING.
    Seen { running: bool, pending: bool },
    /// Missing from an answering cluster, not for long enough yet.
    Missing,
    /// An event was applied (written, ignored or refused).
    Applied(Box<Applied>),
    /// A stop is still due (Ray has not carried it out): ask again.
    StopDue(String),
}

pub(super) struct ClusterPoll {
    pub(super) name: String,
    pub(super) usage: Result<ClusterUsage, RayError>,
    pub(super) jobs: Result<(), RayError>,
    pub(super) current: Vec<(JobId, Outcome)>,
    pub(super) retiring: Vec<(JobId, Outcome)>,
}

fn count(cluster: &str, endpoint: &str, r: &Result<impl Sized, RayError>) {
    let outcome = match r {
        Ok(_) => "ok",
        Err(e) => e.kind(),
    };
    metrics::get()
        .ray_requests
        .with_label_values(&[cluster, endpoint, outcome])
        .inc();
}

pub(super) fn stop_due(sent: Option<Instant>) -> bool {
    sent.is_none_or(|at| at.elapsed() > STOP_RETRY)
}

/// What the poll decides for one tracked current attempt.
async fn follow(
    db: &Db,
    fence: &Fence,
    client: &RayClient,
    t: &Tracked,
    cluster: &str,
    listed: Option<&RayJob>,
    limits: &Limits,
) -> Result<Outcome, sea_orm::DbErr> {
    // A DISPATCHING job is followed only after a restart, and missing from the list
    // means "never submitted": ask for it by id before deciding so.
    let looked_up;
    let ray = match (listed, t.job.status) {
        (None, JobStatus::Dispatching) => {
            let sid = lifecycle::current_submission_id(&t.job);
            match client.get_job(&sid).await {
                Ok(found) => {
                    looked_up = found;
                    looked_up.as_ref()
                }
                Err(e) => {
                    tracing::debug!(job_id = %t.job.id, error = %e, "lookup failed; retried next poll");
                    return Ok(Outcome::Missing);
                }
            }
        }
        _ => listed,
    };
    let missing_for = t.missing_since.map_or(0.0, |s| s.elapsed().as_secs_f64());
    let event = lifecycle::observe_current(
        &t.job,
        cluster,
        ray,
        missing_for,
        chrono::Utc::now(),
        limits,
    );
    if let Some(event) = event {
        return Ok(Outcome::Applied(Box::new(
            store::apply(db, fence, t.job.id, &event).await?,
        )));
    }
    Ok(match ray {
        None => Outcome::Missing,
        Some(r)
            if t.job.stop_reason.is_some()
                && !r.status.is_terminal()
                && stop_due(t.stop_sent_at) =>
        {
            Outcome::StopDue(lifecycle::current_submission_id(&t.job))
        }
        Some(r) => Outcome::Seen {
            running: r.status == RayJobStatus::Running,
            pending: r.status == RayJobStatus::Pending,
        },
    })
}

#[tracing::instrument(skip_all, fields(cluster = %name))]
pub(super) async fn poll_cluster(
    db: Db,
    fence: Fence,
    name: String,
    client: RayClient,
    jobs: Vec<(Tracked, Limits)>,
    retiring: Vec<Retiring>,
) -> ClusterPoll {
    let (usage, list) = tokio::join!(client.cluster_usage(), client.list_jobs());
    count(&name, "cluster_status", &usage);
    count(&name, "list_jobs", &list);
    let mut poll = ClusterPoll {
        name,
        usage,
        jobs: Ok(()),
        current: Vec::new(),
        retiring: Vec::new(),
    };
    let list = match list {
        Ok(list) => list,
        Err(e) => {
            poll.jobs = Err(e);
            return poll;
        }
    };
    let by_id: HashMap<&str, &RayJob> = list
        .iter()
        .filter_map(|j| j.submission_id.as_deref().map(|id| (id, j)))
        .collect();
    for (t, limits) in jobs {
        let sid = lifecycle::current_submission_id(&t.job);
        let listed = by_id.get(sid.as_str()).copied();
        match follow(&db, &fence, &client, &t, &poll.name, listed, &limits).await {
            Ok(o) => poll.current.push((t.job.id, o)),
            Err(e) if store::is_fenced(&e) => {
                // Expected after losing the lease: this replica is stepping down.
                tracing::warn!(job_id = %t.job.id, error = %e, "status change refused: this replica no longer leads");
            }
            Err(e) => {
                metrics::db_error();
                tracing::error!(job_id = %t.job.id, error = %e, "cannot record a status change; retried next poll");
            }
        }
    }
    for r in retiring {
        let sid = lifecycle::submission_id(r.msg.job_id, r.msg.attempt);
        let ray = by_id.get(sid.as_str()).copied();
        let outcome = match lifecycle::observe_retiring(ray) {
            Some(event) => store::apply(&db, &fence, r.msg.job_id, &event)
                .await
                .map(|a| Outcome::Applied(Box::new(a))),
            None if stop_due(r.stop_sent_at) => Ok(Outcome::StopDue(sid)),
            None => Ok(Outcome::Seen {
                running: false,
                pending: false,
            }),
        };
        match outcome {
            Ok(o) => poll.retiring.push((r.msg.job_id, o)),
            Err(e) => {
                metrics::db_error();
                tracing::error!(job_id = %r.msg.job_id, error = %e, "cannot record a retired attempt; retried next poll");
            }
        }
    }
    poll
}
