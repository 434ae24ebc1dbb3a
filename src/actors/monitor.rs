//! `RayCapacityMonitor`: polls every cluster (every `monitor.poll_interval`) — one
//! `GET /api/jobs/` and one `GET /api/cluster_status` each — because Ray has no
//! completion callback.
//!
//! It follows every job this service submitted: status changes are written to the
//! database (with their `job_events` row) before they are announced to the arbiter; a
//! job missing from a cluster that answers for longer than `monitor.lost_job_grace` is
//! FAILED as lost; a cluster that does not answer loses nothing. A running job past its
//! `max_runtime` is stopped. A recovered DISPATCHING job that the cluster does not
//! know goes back to QUEUED. Clusters are unhealthy after `monitor.failure_threshold`
//! failed polls in a row and healthy again when they answer.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, WrapFuture};
use chrono::{DateTime, Utc};
use entity::{job, JobStatus};
use futures_util::future::join_all;

use super::arbiter::FairShareArbiter;
use super::messages::{
    CapacityChanged, ClusterUnreachable, JobFinished, Requeued, StopRequested, Track,
};
use crate::config::Settings;
use crate::metrics;
use crate::policy::{JobId, Resources};
use crate::ray::{ClusterUsage, RayClient, RayError, RayJob, RayJobStatus};
use crate::store::{self, Db, TransitionFields};

/// How long to wait before sending a stop to Ray again for a job that has not stopped.
const STOP_RETRY: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
struct Tracked {
    job: job::Model,
    missing_since: Option<Instant>,
    stop_reason: Option<String>,
    stop_sent_at: Option<Instant>,
}

#[derive(Clone, Debug, Default)]
struct Health {
    healthy: bool,
    failures: u32,
    total: Resources,
}

/// Run one poll of every cluster now (tests and the interval both use it).
#[derive(Message)]
#[rtype(result = "()")]
pub struct PollNow;

/// The monitor.
pub struct RayCapacityMonitor {
    settings: Arc<Settings>,
    db: Db,
    clients: Arc<BTreeMap<String, RayClient>>,
    arbiter: Addr<FairShareArbiter>,
    health: BTreeMap<String, Health>,
    tracked: HashMap<JobId, Tracked>,
    stop_reasons: HashMap<JobId, String>,
    polling: bool,
}

/// What the poll decided for one tracked job.
enum Outcome {
    /// Seen in Ray with no change to write.
    Seen,
    /// Missing from an answering cluster since this instant.
    Missing(Instant),
    /// Moved to a new non-terminal status (already written).
    Moved(job::Model),
    /// Ended (already written).
    Finished(job::Model),
    /// A recovered DISPATCHING job Ray never got: QUEUED again (already written).
    Requeued(job::Model),
    /// Written by someone else first; re-read state.
    Gone,
    /// A stop was sent to Ray now.
    StopSent(String),
}

struct ClusterPoll {
    name: String,
    usage: Result<ClusterUsage, RayError>,
    jobs_ok: bool,
    outcomes: Vec<(JobId, Outcome)>,
}

fn to_resources(r: crate::ray::RayResources) -> Resources {
    Resources {
        cpu: r.cpu,
        gpu: r.gpu,
        memory_bytes: r.memory_bytes,
    }
}

fn ms_to_time(ms: Option<i64>) -> Option<DateTime<Utc>> {
    ms.and_then(DateTime::from_timestamp_millis)
}

fn map_status(s: &RayJobStatus) -> Option<JobStatus> {
    Some(match s {
        RayJobStatus::Pending => JobStatus::Pending,
        RayJobStatus::Running => JobStatus::Running,
        RayJobStatus::Succeeded => JobStatus::Succeeded,
        RayJobStatus::Failed => JobStatus::Failed,
        RayJobStatus::Stopped => JobStatus::Stopped,
        RayJobStatus::Unknown(_) => return None,
    })
}

/// Writes the change Ray reports for `t`, if any.
async fn settle(
    db: &Db,
    client: &RayClient,
    t: &Tracked,
    ray: &RayJob,
    max_runtime: Duration,
) -> Result<Outcome, sea_orm::DbErr> {
    let Some(to) = map_status(&ray.status) else {
        return Ok(Outcome::Seen);
    };
    let from = t.job.status;
    if to == from || (from == JobStatus::Running && to == JobStatus::Pending) {
        // Unchanged: enforce max_runtime and retry an unanswered stop.
        if to == JobStatus::Running {
            let started = t.job.started_at.unwrap_or_else(store::now);
            let ran = (Utc::now() - started).to_std().unwrap_or_default();
            let overdue = ran > max_runtime;
            let stop_due = t.stop_sent_at.is_none_or(|at| at.elapsed() > STOP_RETRY);
            if (overdue || t.stop_reason.is_some()) && stop_due {
                let reason = t.stop_reason.clone().unwrap_or_else(|| {
                    format!(
                        "stopped: ran longer than its max_runtime of {} s",
                        max_runtime.as_secs()
                    )
                });
                if let Err(e) = client.stop_job(&t.job.id.to_string()).await {
                    tracing::warn!(job_id = %t.job.id, error = %e, "stop request failed");
                }
                return Ok(Outcome::StopSent(reason));
            }
        }
        return Ok(Outcome::Seen);
    }
    let mut fields = TransitionFields::default();
    if matches!(to, JobStatus::Running) || to.is_terminal() {
        fields.started_at = t.job.started_at.or_else(|| ms_to_time(ray.start_time));
    }
    if to.is_terminal() {
        fields.finished_at = ms_to_time(ray.end_time);
    }
    let ray_message = ray.message.clone().filter(|m| !m.is_empty());
    fields.message = match to {
        JobStatus::Failed => Some(match (&ray.error_type, &ray_message) {
            (Some(kind), Some(m)) => format!("{kind}: {m}"),
            (None, Some(m)) => m.clone(),
            (Some(kind), None) => kind.clone(),
            (None, None) => "Ray reported the job FAILED".into(),
        }),
        JobStatus::Stopped => t.stop_reason.clone().or(ray_message),
        _ => ray_message,
    };
    let detail = format!("Ray reported {}", ray.status.as_str());
    let from_set: &[JobStatus] = &[
        JobStatus::Dispatching,
        JobStatus::Pending,
        JobStatus::Running,
    ];
    Ok(
        match store::transition(db, t.job.id, from_set, to, Some(detail), fields).await? {
            Some(j) if to.is_terminal() => Outcome::Finished(j),
            Some(j) => Outcome::Moved(j),
            None => Outcome::Gone,
        },
    )
}

/// Decides for a job that the answering cluster does not list.
async fn missing(
    db: &Db,
    t: &Tracked,
    cluster: &str,
    grace: Duration,
) -> Result<Outcome, sea_orm::DbErr> {
    if t.job.status == JobStatus::Dispatching {
        // Only recovered DISPATCHING jobs are tracked in that state: the process that
        // sent the POST is gone and Ray does not have it, so it was never submitted.
        let j = store::transition(
            db,
            t.job.id,
            &[JobStatus::Dispatching],
            JobStatus::Queued,
            Some(format!(
                "recovery: cluster {cluster} does not have it; back to the queue"
            )),
            TransitionFields::default(),
        )
        .await?;
        return Ok(j.map(Outcome::Requeued).unwrap_or(Outcome::Gone));
    }
    let since = t.missing_since.unwrap_or_else(Instant::now);
    if since.elapsed() < grace {
        return Ok(Outcome::Missing(since));
    }
    let message = format!(
        "Ray cluster {cluster} lost the job: missing from its job list for {} s (the cluster may have restarted)",
        grace.as_secs()
    );
    let j = store::transition(
        db,
        t.job.id,
        &[JobStatus::Pending, JobStatus::Running],
        JobStatus::Failed,
        Some("lost by the cluster".into()),
        TransitionFields {
            message: Some(message),
            ..Default::default()
        },
    )
    .await?;
    Ok(j.map(Outcome::Finished).unwrap_or(Outcome::Gone))
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

#[tracing::instrument(skip_all, fields(cluster = %name))]
async fn poll_cluster(
    db: Db,
    name: String,
    client: RayClient,
    jobs: Vec<Tracked>,
    default_runtime: Duration,
    grace: Duration,
) -> ClusterPoll {
    let (usage, list) = tokio::join!(client.cluster_usage(), client.list_jobs());
    count(&name, "cluster_status", &usage);
    count(&name, "list_jobs", &list);
    let mut outcomes = Vec::new();
    let jobs_ok = list.is_ok();
    if let Ok(list) = list {
        let by_id: HashMap<&str, &RayJob> = list
            .iter()
            .filter_map(|j| j.submission_id.as_deref().map(|id| (id, j)))
            .collect();
        for t in jobs {
            let id = t.job.id.to_string();
            let max_runtime = t
                .job
                .max_runtime_s
                .map(|s| Duration::from_secs(s.max(0) as u64))
                .unwrap_or(default_runtime);
            let res = match by_id.get(id.as_str()) {
                Some(ray) => settle(&db, &client, &t, ray, max_runtime).await,
                None => missing(&db, &t, &name, grace).await,
            };
            match res {
                Ok(o) => outcomes.push((t.job.id, o)),
                Err(e) => {
                    metrics::db_error();
                    tracing::error!(job_id = %t.job.id, error = %e, "cannot record a status change; retried next poll");
                }
            }
        }
    }
    ClusterPoll {
        name,
        usage,
        jobs_ok,
        outcomes,
    }
}

impl RayCapacityMonitor {
    /// A monitor for the configured clusters; every cluster starts unhealthy.
    pub fn new(
        settings: Arc<Settings>,
        db: Db,
        clients: Arc<BTreeMap<String, RayClient>>,
        arbiter: Addr<FairShareArbiter>,
    ) -> Self {
        let health = clients
            .keys()
            .map(|k| (k.clone(), Health::default()))
            .collect();
        RayCapacityMonitor {
            settings,
            db,
            clients,
            arbiter,
            health,
            tracked: HashMap::new(),
            stop_reasons: HashMap::new(),
            polling: false,
        }
    }

    fn poll(&mut self, ctx: &mut Context<Self>) {
        if self.polling {
            return;
        }
        self.polling = true;
        let default_runtime = self.settings.scheduler.default_max_runtime;
        let grace = self.settings.monitor.lost_job_grace;
        let polls: Vec<_> = self
            .clients
            .iter()
            .map(|(name, client)| {
                let jobs: Vec<Tracked> = self
                    .tracked
                    .values()
                    .filter(|t| t.job.cluster.as_deref() == Some(name.as_str()))
                    .cloned()
                    .collect();
                poll_cluster(
                    self.db.clone(),
                    name.clone(),
                    client.clone(),
                    jobs,
                    default_runtime,
                    grace,
                )
            })
            .collect();
        ctx.spawn(join_all(polls).into_actor(self).map(|results, act, _| {
            act.polling = false;
            for r in results {
                act.apply(r);
            }
        }));
    }

    fn apply(&mut self, r: ClusterPoll) {
        let threshold = self.settings.monitor.failure_threshold;
        let health = self.health.entry(r.name.clone()).or_default();
        let was_healthy = health.healthy;
        let used = match (&r.usage, r.jobs_ok) {
            (Ok(u), true) => {
                health.failures = 0;
                health.healthy = true;
                health.total = to_resources(u.total);
                Some(to_resources(u.used))
            }
            _ => {
                health.failures = health.failures.saturating_add(1);
                if health.failures >= threshold {
                    health.healthy = false;
                }
                if let Err(e) = &r.usage {
                    tracing::debug!(cluster = %r.name, error = %e, failures = health.failures, "cluster poll failed");
                }
                None
            }
        };
        if was_healthy != health.healthy {
            tracing::warn!(cluster = %r.name, healthy = health.healthy, "cluster health changed");
        }
        if used.is_some() || was_healthy != health.healthy {
            self.arbiter.do_send(CapacityChanged {
                cluster: r.name.clone(),
                healthy: health.healthy,
                total: health.total,
                used: used.unwrap_or_default(),
            });
        }
        let m = metrics::get();
        for (id, outcome) in r.outcomes {
            match outcome {
                Outcome::Seen => {
                    if let Some(t) = self.tracked.get_mut(&id) {
                        t.missing_since = None;
                    }
                }
                Outcome::Missing(since) => {
                    if let Some(t) = self.tracked.get_mut(&id) {
                        t.missing_since = Some(since);
                    }
                }
                Outcome::StopSent(reason) => {
                    if let Some(t) = self.tracked.get_mut(&id) {
                        t.stop_reason = Some(reason);
                        t.stop_sent_at = Some(Instant::now());
                        t.missing_since = None;
                    }
                }
                Outcome::Moved(j) => {
                    tracing::info!(job_id = %id, status = %j.status, "job moved");
                    if let Some(t) = self.tracked.get_mut(&id) {
                        t.job = j;
                        t.missing_since = None;
                    }
                }
                Outcome::Finished(j) => {
                    tracing::info!(job_id = %id, status = %j.status, "job finished");
                    m.jobs_finished
                        .with_label_values(&[j.status.as_str()])
                        .inc();
                    self.tracked.remove(&id);
                    self.stop_reasons.remove(&id);
                    self.arbiter.do_send(JobFinished {
                        job_id: id,
                        user: j.user_id,
                        status: j.status,
                    });
                }
                Outcome::Requeued(j) => {
                    self.tracked.remove(&id);
                    self.arbiter.do_send(Requeued { job: j });
                }
                Outcome::Gone => {
                    // Someone else moved it (e.g. recovery raced); stop following it.
                    self.tracked.remove(&id);
                }
            }
        }
    }
}

impl Actor for RayCapacityMonitor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let every = self.settings.monitor.poll_interval;
        self.poll(ctx);
        ctx.run_interval(every, |act, ctx| act.poll(ctx));
    }
}

impl Handler<PollNow> for RayCapacityMonitor {
    type Result = ();

    fn handle(&mut self, _: PollNow, ctx: &mut Context<Self>) {
        self.poll(ctx);
    }
}

impl Handler<Track> for RayCapacityMonitor {
    type Result = ();

    fn handle(&mut self, msg: Track, _: &mut Context<Self>) {
        let id = msg.job.id;
        let stop_reason = self.stop_reasons.remove(&id);
        self.tracked.insert(
            id,
            Tracked {
                job: msg.job,
                missing_since: None,
                stop_reason,
                stop_sent_at: None,
            },
        );
    }
}

impl Handler<StopRequested> for RayCapacityMonitor {
    type Result = ();

    fn handle(&mut self, msg: StopRequested, _: &mut Context<Self>) {
        match self.tracked.get_mut(&msg.job_id) {
            Some(t) => {
                t.stop_reason = Some(msg.reason);
                t.stop_sent_at = Some(Instant::now());
            }
            None => {
                self.stop_reasons.insert(msg.job_id, msg.reason);
            }
        }
    }
}

impl Handler<ClusterUnreachable> for RayCapacityMonitor {
    type Result = ();

    fn handle(&mut self, msg: ClusterUnreachable, _: &mut Context<Self>) {
        let threshold = self.settings.monitor.failure_threshold;
        let h = self.health.entry(msg.cluster.clone()).or_default();
        h.failures = h.failures.max(threshold);
        if h.healthy {
            h.healthy = false;
            tracing::warn!(cluster = %msg.cluster, "cluster marked unhealthy after a failed dispatch");
            self.arbiter.do_send(CapacityChanged {
                cluster: msg.cluster,
                healthy: false,
                total: h.total,
                used: Resources::default(),
            });
        }
    }
}
