//! One poll of one cluster: Ray's capacity report and job list, and what they mean
//! for each followed job (events applied through `store::apply`).

use std::collections::HashMap;
use std::time::Instant;

use entity::JobStatus;

use super::followed::{stop_due, Followed, Retiring, Stray};
pub(crate) use super::followed::{ClusterPoll, Outcome, StrayFound, UsageNow};
use crate::lifecycle::{self, Limits};
use crate::metrics;
use crate::policy::JobId;
use crate::ray::{RayClient, RayError, RayJob, RayJobStatus};
use crate::store::{self, Db, Fence};

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

/// What one followed attempt's poll asks for, decided from Ray's answer (pure).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Probe {
    /// Write this event through `store::apply`.
    Apply(lifecycle::Event),
    /// Missing from an answering cluster, not for long enough yet.
    Missing,
    /// A stop is due again.
    StopDue(String),
    /// Listed, nothing to write.
    Seen { running: bool, pending: bool },
    /// An attempt the sweep found is this service's own, followed or about to be.
    Ours,
    /// As [`Probe::Ours`], but a stop was asked: send it now (its submit is still in
    /// flight here; the dispatcher sends it again once it records Ray's answer).
    StopOurs(String),
    /// An attempt the sweep found is the row's retiring attempt: follow it as such.
    FollowRetiring,
}

/// Whether a followed current attempt that the list did not show must be asked for by
/// id before deciding: a DISPATCHING job is followed only after a restart, and missing
/// from the list means "never submitted" only if `GET /api/jobs/{id}` agrees.
pub(crate) fn needs_lookup(t: &Followed, listed: Option<&RayJob>) -> bool {
    listed.is_none() && t.job.status == JobStatus::Dispatching
}

/// What Ray's answer `ray` (listed or looked up; `None`: the cluster does not have
/// it) means for the followed current attempt `t` at `now`.
pub(crate) fn probe_current(
    t: &Followed,
    cluster: &str,
    ray: Option<&RayJob>,
    limits: &Limits,
    now_utc: chrono::DateTime<chrono::Utc>,
    now: Instant,
) -> Probe {
    let missing_for = t
        .missing_since
        .map_or(0.0, |s| now.saturating_duration_since(s).as_secs_f64());
    if let Some(event) =
        lifecycle::observe_current(&t.job, cluster, ray, missing_for, now_utc, limits)
    {
        return Probe::Apply(event);
    }
    match ray {
        None => Probe::Missing,
        Some(r)
            if t.job.stop_reason.is_some()
                && !r.status.is_terminal()
                && stop_due(t.stop_sent_at, now) =>
        {
            Probe::StopDue(lifecycle::current_submission_id(&t.job))
        }
        Some(r) => Probe::Seen {
            running: r.status == RayJobStatus::Running,
            pending: r.status == RayJobStatus::Pending,
        },
    }
}

/// What Ray's answer means for a followed retiring attempt at `now`.
pub(crate) fn probe_retiring(r: &Retiring, ray: Option<&RayJob>, now: Instant) -> Probe {
    match lifecycle::observe_retiring(ray) {
        Some(event) => Probe::Apply(event),
        None if stop_due(r.stop_sent_at, now) => {
            Probe::StopDue(lifecycle::submission_id(r.job_id, r.attempt))
        }
        None => Probe::Seen {
            running: ray.is_some_and(|j| j.status == RayJobStatus::Running),
            pending: false,
        },
    }
}

/// What to do about `attempt`, alive in Ray on `cluster` and followed by nobody, given
/// its job's row (`facts`):
/// - the row's current attempt, DISPATCHING, PENDING or RUNNING: [`Probe::Ours`]
///   (its submit is in flight here, or the dispatcher is handing it over), or
///   [`Probe::StopOurs`] when a stop was asked;
/// - the row's retiring attempt: [`Probe::FollowRetiring`];
/// - the current attempt of a QUEUED job (a POST that landed late, or whose answer was
///   lost): [`Probe::Apply`] of [`lifecycle::Event::StrayFound`] (the job moves to the
///   next attempt and waits for this one to end);
/// - anything else (the job ended, or moved on to a later attempt):
///   [`Probe::StopDue`] — stop it and follow it until Ray says it ended.
pub(crate) fn probe_stray(
    facts: &lifecycle::JobFacts,
    attempt: u32,
    cluster: &str,
    job_id: JobId,
) -> Probe {
    if facts.attempt == attempt && facts.status.is_outstanding() {
        return match facts.stop_reason {
            Some(_) => Probe::StopOurs(lifecycle::submission_id(job_id, attempt)),
            None => Probe::Ours,
        };
    }
    if facts.status == JobStatus::Queued && facts.retiring_attempt == Some(attempt) {
        return Probe::FollowRetiring;
    }
    if facts.status == JobStatus::Queued
        && facts.attempt == attempt
        && facts.retiring_attempt.is_none()
    {
        return Probe::Apply(lifecycle::Event::StrayFound {
            attempt,
            cluster: cluster.to_string(),
        });
    }
    Probe::StopDue(lifecycle::submission_id(job_id, attempt))
}

/// What Ray's answer means for a stray the monitor follows: gone once Ray lists it
/// ended or no longer lists it.
pub(crate) fn probe_followed_stray(s: &Stray, ray: Option<&RayJob>, now: Instant) -> Probe {
    match ray {
        Some(r) if !r.status.is_terminal() => {
            if stop_due(s.stop_sent_at, now) {
                Probe::StopDue(lifecycle::submission_id(s.job_id, s.attempt))
            } else {
                Probe::Seen {
                    running: r.status == RayJobStatus::Running,
                    pending: false,
                }
            }
        }
        _ => Probe::Missing,
    }
}

/// Carries out a probe: writes its event, or reports what it found.
pub(super) async fn carry(
    db: &Db,
    fence: &Fence,
    id: JobId,
    probe: Probe,
) -> Result<Outcome, sea_orm::DbErr> {
    Ok(match probe {
        Probe::Apply(event) => {
            Outcome::Applied(Box::new(store::apply(db, fence, id, &event).await?))
        }
        Probe::Missing => Outcome::Missing,
        Probe::StopDue(sid) => Outcome::StopDue(sid),
        Probe::Seen { running, pending } => Outcome::Seen { running, pending },
        Probe::Ours => Outcome::Ours,
        Probe::StopOurs(sid) => Outcome::StopOurs(sid),
        // Built by the sweep, which has the row.
        Probe::FollowRetiring => Outcome::Ours,
    })
}

/// What the poll decides for one tracked current attempt.
async fn follow(
    db: &Db,
    fence: &Fence,
    client: &RayClient,
    t: &Followed,
    cluster: &str,
    listed: Option<&RayJob>,
    limits: &Limits,
) -> Result<Outcome, sea_orm::DbErr> {
    let looked_up;
    let ray = if needs_lookup(t, listed) {
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
    } else {
        listed
    };
    let probe = probe_current(t, cluster, ray, limits, chrono::Utc::now(), Instant::now());
    carry(db, fence, t.job.id, probe).await
}

/// What one poll of a cluster looks at: the book's attempts on it, as they were when
/// the poll began.
pub(super) struct OnCluster {
    /// Current attempts, with the limits each is held to.
    pub(super) jobs: Vec<(Followed, Limits)>,
    pub(super) retiring: Vec<Retiring>,
    pub(super) strays: Vec<Stray>,
    /// Every attempt followed (the sweep leaves these alone).
    pub(super) followed: std::collections::HashSet<(JobId, u32)>,
    /// Whether Ray's State API is read this poll (its readings are paced by what
    /// they cost, see the monitor's `state_due`).
    pub(super) read_state: bool,
}

#[tracing::instrument(skip_all, fields(cluster = %name))]
pub(super) async fn poll_cluster(
    db: Db,
    fence: Fence,
    name: String,
    client: RayClient,
    on: OnCluster,
) -> ClusterPoll {
    let OnCluster {
        jobs,
        retiring,
        strays,
        followed,
        read_state,
    } = on;
    let timed_holdings = async {
        if !read_state {
            return None;
        }
        let started = Instant::now();
        let h = client.holdings().await;
        Some((h, started.elapsed()))
    };
    let (usage, list, holdings) =
        tokio::join!(client.cluster_usage(), client.list_jobs(), timed_holdings);
    let (holdings, state_cost) = match holdings {
        Some((h, cost)) => (Some(h), Some(cost)),
        None => (None, None),
    };
    count(&name, "cluster_status", &usage);
    count(&name, "list_jobs", &list);
    if let Some(h) = &holdings {
        count(&name, "state", h);
    }
    let mut poll = ClusterPoll {
        name,
        usage,
        jobs: Ok(()),
        current: Vec::new(),
        retiring: Vec::new(),
        strays: Vec::new(),
        usage_now: None,
        state_cost,
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
    let holdings = match holdings {
        Some(Ok(h)) => {
            let h = h.without_ended(|sid| by_id.get(sid).is_some_and(|j| j.status.is_terminal()));
            poll.usage_now = Some(usage_now(&h, &by_id, &jobs, &retiring, &strays));
            Some(h)
        }
        Some(Err(e)) => {
            tracing::debug!(error = %e, "Ray's State API did not answer; its usage report stands in");
            None
        }
        None => None,
    };
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
        let sid = lifecycle::submission_id(r.job_id, r.attempt);
        let ray = by_id.get(sid.as_str()).copied();
        let probe = probe_retiring(&r, ray, Instant::now());
        match carry(&db, &fence, r.job_id, probe).await {
            Ok(o) => poll.retiring.push((r.job_id, o)),
            Err(e) => {
                metrics::db_error();
                tracing::error!(job_id = %r.job_id, error = %e, "cannot record a retired attempt; retried next poll");
            }
        }
    }
    for st in strays {
        let sid = lifecycle::submission_id(st.job_id, st.attempt);
        let probe = probe_followed_stray(&st, by_id.get(sid.as_str()).copied(), Instant::now());
        let found = StrayFound {
            job_id: st.job_id,
            attempt: st.attempt,
            resources: st.resources,
        };
        // A followed stray's probe writes nothing.
        if let Ok(o) = carry(&db, &fence, st.job_id, probe).await {
            poll.strays.push((found, o));
        }
    }
    let swept_from = poll.strays.len();
    sweep(&db, &fence, &poll.name.clone(), &list, &followed, &mut poll).await;
    if let (Some(h), Some(u)) = (&holdings, poll.usage_now.as_mut()) {
        add_unfollowed_own(h, &by_id, &followed, &poll.strays[swept_from..], u);
    }
    poll
}

/// This service's attempts that hold resources in Ray's State API reading but that no
/// one followed when the poll began: a submit answered moments ago, whose Follow has
/// not reached the monitor yet. The sweep judged the listed ones (`swept`); one not
/// listed at all was accepted between the two readings. Each is reported as held by
/// its job, so that the ledger counts it as this service's own when the job is
/// outstanding there, never as another tenant's load; a stray or retiring attempt the
/// sweep found stays in the foreign load until the book follows it.
fn add_unfollowed_own(
    h: &crate::ray::state::Holdings,
    by_id: &HashMap<&str, &RayJob>,
    followed: &std::collections::HashSet<(JobId, u32)>,
    swept: &[(StrayFound, Outcome)],
    u: &mut UsageNow,
) {
    for sid in h.entrypoints.keys() {
        let Some((job_id, attempt)) = lifecycle::parse_submission_id(sid) else {
            continue;
        };
        if followed.contains(&(job_id, attempt)) || u.jobs.iter().any(|(id, _)| *id == job_id) {
            continue;
        }
        let judged = swept
            .iter()
            .find(|(f, _)| f.job_id == job_id && f.attempt == attempt);
        let own = match judged {
            Some((_, outcome)) => matches!(outcome, Outcome::Ours | Outcome::StopOurs(_)),
            None => !by_id.contains_key(sid.as_str()),
        };
        if !own {
            continue;
        }
        let driver = by_id.get(sid.as_str()).and_then(|j| j.job_id.as_deref());
        if let Some(held) = h.of(sid, driver) {
            u.jobs.push((job_id, held));
        }
    }
}

/// What the State API's `h` says the followed attempts hold.
fn usage_now(
    h: &crate::ray::state::Holdings,
    by_id: &HashMap<&str, &RayJob>,
    jobs: &[(Followed, Limits)],
    retiring: &[Retiring],
    strays: &[Stray],
) -> UsageNow {
    let jobs = jobs
        .iter()
        .filter_map(|(t, _)| {
            let sid = lifecycle::current_submission_id(&t.job);
            let driver = by_id.get(sid.as_str()).and_then(|j| j.job_id.as_deref());
            h.of(&sid, driver).map(|held| (t.job.id, held))
        })
        .collect();
    let others = retiring
        .iter()
        .map(|r| (r.job_id, r.attempt))
        .chain(strays.iter().map(|s| (s.job_id, s.attempt)))
        .filter(|(id, attempt)| {
            h.entrypoints
                .contains_key(&lifecycle::submission_id(*id, *attempt))
        })
        .collect();
    UsageNow {
        total: h.total,
        jobs,
        others_holding: others,
    }
}

/// The sweep: every attempt Ray lists alive whose `submission_id` is one of this
/// service's and that the monitor does not follow is judged against its job's row
/// ([`probe_stray`]), so that an attempt Ray accepted is never left unfollowed (a
/// POST that landed after its dispatch gave up, or after this process or another
/// leader restarted).
async fn sweep(
    db: &Db,
    fence: &Fence,
    cluster: &str,
    list: &[RayJob],
    followed: &std::collections::HashSet<(JobId, u32)>,
    poll: &mut ClusterPoll,
) {
    for j in list.iter().filter(|j| !j.status.is_terminal()) {
        let Some((job_id, attempt)) = j
            .submission_id
            .as_deref()
            .and_then(lifecycle::parse_submission_id)
        else {
            continue;
        };
        if followed.contains(&(job_id, attempt)) {
            continue;
        }
        let row = match store::get_job(db, job_id).await {
            Ok(Some(row)) => row,
            // Not this service's job (another deployment on the same cluster).
            Ok(None) => continue,
            Err(e) => {
                metrics::db_error();
                tracing::error!(%job_id, error = %e, "sweep: cannot read the job; retried next poll");
                continue;
            }
        };
        let found = StrayFound {
            job_id,
            attempt,
            resources: store::resources_of(&row),
        };
        let facts = lifecycle::JobFacts::of(&row);
        let outcome = match probe_stray(&facts, attempt, cluster, job_id) {
            Probe::FollowRetiring => Ok(Outcome::FollowRetiring(Box::new(Retiring::new(
                &row, cluster, attempt,
            )))),
            probe => carry(db, fence, job_id, probe).await,
        };
        match outcome {
            Ok(o) => poll.strays.push((found, o)),
            Err(e) if store::is_fenced(&e) => {
                tracing::warn!(%job_id, error = %e, "sweep: change refused: this replica no longer leads");
            }
            Err(e) => {
                metrics::db_error();
                tracing::error!(%job_id, error = %e, "sweep: cannot record a stray attempt; retried next poll");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Resources;
    use crate::ray::state::Holdings;
    use std::collections::HashSet;

    fn cpu(c: f64) -> Resources {
        Resources {
            cpu: c,
            ..Resources::ZERO
        }
    }

    fn listed(sid: &str, driver: &str) -> RayJob {
        RayJob {
            submission_id: Some(sid.into()),
            job_id: Some(driver.into()),
            status: RayJobStatus::Running,
            message: None,
            error_type: None,
            start_time: None,
            end_time: None,
            driver_exit_code: None,
        }
    }

    /// The CI failure (`usage::own_jobs_are_never_counted_as_another_tenants`): a job
    /// whose submit was answered while the poll ran holds 4 CPU in Ray; it is this
    /// service's own whether the list shows it (the sweep says so) or not (accepted
    /// between the readings), and a stray the sweep found is not.
    #[test]
    fn an_attempt_accepted_during_the_poll_is_never_another_tenants() {
        let (followed_job, fresh, unlisted, stray) = (
            uuid::Uuid::new_v4(),
            uuid::Uuid::new_v4(),
            uuid::Uuid::new_v4(),
            uuid::Uuid::new_v4(),
        );
        let sid = |j| lifecycle::submission_id(j, 1);
        let h = Holdings {
            entrypoints: [followed_job, fresh, unlisted, stray]
                .into_iter()
                .map(|j| (sid(j), cpu(1.0)))
                .collect(),
            by_driver: [("02".to_string(), cpu(3.0))].into_iter().collect(),
            total: cpu(7.0),
        };
        let jobs = [
            listed(&sid(followed_job), "01"),
            listed(&sid(fresh), "02"),
            listed(&sid(stray), "03"),
        ];
        let by_id: HashMap<&str, &RayJob> = jobs
            .iter()
            .map(|j| (j.submission_id.as_deref().unwrap(), j))
            .collect();
        let followed: HashSet<(JobId, u32)> = [(followed_job, 1)].into_iter().collect();
        let found = |j| StrayFound {
            job_id: j,
            attempt: 1,
            resources: cpu(1.0),
        };
        let swept = [
            (found(fresh), Outcome::Ours),
            (found(stray), Outcome::Missing),
        ];
        let mut u = UsageNow {
            total: h.total,
            jobs: vec![(followed_job, cpu(1.0))],
            others_holding: HashSet::new(),
        };
        add_unfollowed_own(&h, &by_id, &followed, &swept, &mut u);
        u.jobs.sort_by_key(|(id, _)| *id);
        let mut want = vec![
            (followed_job, cpu(1.0)),
            (fresh, cpu(4.0)),
            (unlisted, cpu(1.0)),
        ];
        want.sort_by_key(|(id, _)| *id);
        assert_eq!(u.jobs, want);
    }
}
