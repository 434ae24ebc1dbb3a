//! `RayCapacityMonitor`: polls every cluster (every `monitor.poll_interval`) — one
//! `GET /api/jobs/` and one `GET /api/cluster_status` each — because Ray has no
//! completion callback.
//!
//! It follows every outstanding job this service submitted (and every retiring attempt
//! of a job queued again): [`crate::lifecycle::observe_current`] turns Ray's answer
//! into an event, `store::apply` writes the lifecycle's step before anything is
//! announced, and stops the step asks for go to the dispatcher. A stop that Ray has not
//! carried out is asked again every [`STOP_RETRY`]. Clusters are unhealthy after
//! `monitor.failure_threshold` failed polls in a row, or for a growing hold after a
//! dispatch found them not ready, and healthy again when they answer; an unreachable
//! cluster is logged at `warn` at once and then at most every
//! `monitor.unreachable_warn_every`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, WrapFuture};
use entity::{job, JobStatus};
use futures_util::future::join_all;

mod poll;

use super::messages::{
    ArbiterHandle, CapacityChanged, ClusterUnreachable, DispatcherHandle, JobFinished, Release,
    RemoveQueued, Requeued, StopInRay, Track, TrackRetiring,
};
use super::user_queue::summary;
use crate::config::Settings;
use crate::lifecycle::{Limits, RayCall};
use crate::metrics;
use crate::policy::{JobId, Resources};
use crate::ray::{error_chain, RayClient};
use crate::store::{Applied, Db, Fence};
use poll::{poll_cluster, ClusterPoll, Outcome};

/// How long to wait before asking Ray again to stop a job that has not stopped.
pub(super) const STOP_RETRY: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub(super) struct Tracked {
    job: job::Model,
    missing_since: Option<Instant>,
    running_seen: Option<Instant>,
    stop_sent_at: Option<Instant>,
}

#[derive(Clone, Debug)]
pub(super) struct Retiring {
    msg: TrackRetiring,
    stop_sent_at: Option<Instant>,
}

#[derive(Clone, Debug, Default)]
struct Health {
    healthy: bool,
    failures: u32,
    total: Resources,
    /// Unhealthy at least until then (a dispatch found the cluster not ready).
    hold_until: Option<Instant>,
    hold: Duration,
    last_warned: Option<Instant>,
}

/// Run one poll of every cluster now (tests and the interval both use it).
#[derive(Message)]
#[rtype(result = "()")]
pub struct PollNow;

/// The monitor.
pub struct RayCapacityMonitor {
    settings: Arc<Settings>,
    db: Db,
    /// Carried into every `store::apply` (DESIGN §10).
    fence: Fence,
    clients: Arc<BTreeMap<String, RayClient>>,
    arbiter: ArbiterHandle,
    dispatcher: DispatcherHandle,
    health: BTreeMap<String, Health>,
    tracked: HashMap<JobId, Tracked>,
    retiring: HashMap<JobId, Retiring>,
    polling: bool,
}

impl RayCapacityMonitor {
    /// A monitor for the configured clusters; every cluster starts unhealthy.
    pub fn new(
        settings: Arc<Settings>,
        db: Db,
        fence: Fence,
        clients: Arc<BTreeMap<String, RayClient>>,
        arbiter: ArbiterHandle,
        dispatcher: DispatcherHandle,
    ) -> Self {
        let health = clients
            .keys()
            .map(|k| (k.clone(), Health::default()))
            .collect();
        RayCapacityMonitor {
            settings,
            db,
            fence,
            clients,
            arbiter,
            dispatcher,
            health,
            tracked: HashMap::new(),
            retiring: HashMap::new(),
            polling: false,
        }
    }

    fn limits(&self, j: &job::Model) -> Limits {
        let s = &self.settings;
        Limits {
            pending_timeout_s: s.monitor.pending_timeout.as_secs_f64(),
            max_runtime_s: j
                .max_runtime_s
                .map(|v| v.max(0) as f64)
                .unwrap_or(s.scheduler.default_max_runtime.as_secs_f64()),
            lost_job_grace_s: s.monitor.lost_job_grace.as_secs_f64(),
        }
    }

    fn poll(&mut self, ctx: &mut Context<Self>) {
        if self.polling {
            return;
        }
        self.polling = true;
        let polls: Vec<_> = self
            .clients
            .iter()
            .map(|(name, client)| {
                let jobs = self
                    .tracked
                    .values()
                    .filter(|t| t.job.cluster.as_deref() == Some(name.as_str()))
                    .map(|t| (t.clone(), self.limits(&t.job)))
                    .collect();
                let retiring = self
                    .retiring
                    .values()
                    .filter(|r| &r.msg.cluster == name)
                    .cloned()
                    .collect();
                poll_cluster(
                    self.db.clone(),
                    self.fence.clone(),
                    name.clone(),
                    client.clone(),
                    jobs,
                    retiring,
                )
            })
            .collect();
        ctx.spawn(
            super::off_actor(join_all(polls))
                .into_actor(self)
                .map(|results, act, _| {
                    act.polling = false;
                    for r in results.unwrap_or_default() {
                        act.apply(r);
                    }
                }),
        );
    }

    fn stop(&mut self, job_id: JobId, cluster: &str, submission_id: String) {
        self.dispatcher.stop.do_send(StopInRay {
            job_id,
            cluster: cluster.to_string(),
            submission_id,
        });
    }

    /// Health, logging and the capacity message for one cluster's poll.
    fn apply_health(&mut self, r: &ClusterPoll) -> Option<Resources> {
        let threshold = self.settings.monitor.failure_threshold;
        let warn_every = self.settings.monitor.unreachable_warn_every;
        let address = self
            .clients
            .get(&r.name)
            .map(|c| c.address().to_string())
            .unwrap_or_default();
        let health = self.health.entry(r.name.clone()).or_default();
        let was_healthy = health.healthy;
        let error = match (&r.usage, &r.jobs) {
            (Ok(_), Ok(())) => None,
            (Err(e), _) | (_, Err(e)) => Some(error_chain(e)),
        };
        let used = match (&r.usage, error) {
            (Ok(u), None) => {
                health.failures = 0;
                health.total = u.total;
                health.healthy = health.hold_until.is_none_or(|t| Instant::now() >= t);
                if health.healthy {
                    health.last_warned = None;
                }
                Some(u.used)
            }
            (_, error) => {
                health.failures = health.failures.saturating_add(1);
                if health.failures >= threshold {
                    health.healthy = false;
                }
                if health.last_warned.is_none_or(|t| t.elapsed() >= warn_every) {
                    health.last_warned = Some(Instant::now());
                    tracing::warn!(cluster = %r.name, %address, failures = health.failures,
                        error = error.as_deref().unwrap_or("unknown"),
                        "Ray cluster unreachable; its jobs keep their status and nothing is dispatched to it until it answers");
                }
                None
            }
        };
        if !was_healthy && health.healthy {
            tracing::info!(cluster = %r.name, %address, "Ray cluster healthy");
        } else if was_healthy && !health.healthy {
            tracing::warn!(cluster = %r.name, %address, "Ray cluster unhealthy");
        }
        used
    }

    fn apply(&mut self, r: ClusterPoll) {
        let used = self.apply_health(&r);
        let lag = self.settings.monitor.usage_report_lag;
        let mut pending_in_ray = 0i64;
        for (id, outcome) in r.current {
            match outcome {
                Outcome::Seen { running, pending } => {
                    pending_in_ray += i64::from(pending);
                    if let Some(t) = self.tracked.get_mut(&id) {
                        t.missing_since = None;
                        if running {
                            t.running_seen.get_or_insert_with(Instant::now);
                        }
                    }
                }
                Outcome::Missing => {
                    if let Some(t) = self.tracked.get_mut(&id) {
                        t.missing_since.get_or_insert_with(Instant::now);
                    }
                }
                Outcome::StopDue(sid) => {
                    if let Some(t) = self.tracked.get_mut(&id) {
                        t.stop_sent_at = Some(Instant::now());
                        t.missing_since = None;
                    }
                    self.stop(id, &r.name, sid);
                }
                Outcome::Applied(applied) => self.settle_current(id, &r.name, *applied),
            }
        }
        for (id, outcome) in r.retiring {
            match outcome {
                Outcome::StopDue(sid) => {
                    if let Some(t) = self.retiring.get_mut(&id) {
                        t.stop_sent_at = Some(Instant::now());
                    }
                    self.stop(id, &r.name, sid);
                }
                Outcome::Applied(applied) => self.settle_retiring(id, *applied),
                _ => {}
            }
        }
        metrics::get()
            .ray_pending_jobs
            .with_label_values(&[r.name.as_str()])
            .set(pending_in_ray);
        let Some(health) = self.health.get(&r.name) else {
            return;
        };
        let reported: Vec<JobId> = self
            .tracked
            .values()
            .filter(|t| t.job.cluster.as_deref() == Some(r.name.as_str()))
            .filter(|t| t.running_seen.is_some_and(|s| s.elapsed() >= lag))
            .map(|t| t.job.id)
            .collect();
        self.arbiter.capacity.do_send(CapacityChanged {
            cluster: r.name.clone(),
            healthy: health.healthy,
            total: health.total,
            used: used.unwrap_or_default(),
            reported,
        });
    }

    /// Announces what a step on a current attempt did.
    fn settle_current(&mut self, id: JobId, cluster: &str, applied: Applied) {
        let (job, ray) = match applied {
            Applied::Changed { job, step } => (job, step.ray),
            Applied::Unchanged(job) | Applied::Refused(job, _) => {
                if !job.status.is_outstanding() {
                    // Someone else moved it (e.g. a cancel of a recovered job).
                    self.tracked.remove(&id);
                }
                return;
            }
            Applied::NotFound => {
                self.tracked.remove(&id);
                return;
            }
        };
        if let Some(RayCall::Stop { submission_id }) = ray {
            self.stop(id, cluster, submission_id);
        }
        if job.status.is_terminal() {
            tracing::info!(job_id = %id, status = %job.status, "job finished");
            self.tracked.remove(&id);
            self.arbiter.finished.do_send(JobFinished {
                job_id: id,
                seen_at: Instant::now(),
            });
        } else if job.status == JobStatus::Queued {
            tracing::info!(job_id = %id, attempt = job.attempt, "job back in the queue");
            self.tracked.remove(&id);
            let held = job.retiring_attempt.is_some();
            if let Some(attempt) = job.retiring_attempt {
                self.retiring.insert(
                    id,
                    Retiring {
                        msg: TrackRetiring {
                            job_id: id,
                            user: job.user_id.clone(),
                            cluster: cluster.to_string(),
                            attempt: attempt.max(1) as u32,
                        },
                        stop_sent_at: Some(Instant::now()),
                    },
                );
            }
            self.arbiter.requeued.do_send(Requeued {
                user: job.user_id.clone(),
                job: summary(&job),
                held,
            });
        } else if let Some(t) = self.tracked.get_mut(&id) {
            tracing::info!(job_id = %id, status = %job.status, "job moved");
            if job.status == JobStatus::Running {
                t.running_seen.get_or_insert_with(Instant::now);
            }
            if job.stop_reason.is_some() && t.job.stop_reason.is_none() {
                t.stop_sent_at = Some(Instant::now());
            }
            t.job = job;
            t.missing_since = None;
        }
    }

    /// Announces what a step on a retiring attempt did.
    fn settle_retiring(&mut self, id: JobId, applied: Applied) {
        let Some(r) = self.retiring.remove(&id) else {
            return;
        };
        match applied {
            Applied::Changed { job, .. } if job.status == JobStatus::Queued => {
                self.arbiter.release.do_send(Release {
                    user: r.msg.user,
                    job_id: id,
                });
            }
            Applied::Changed { job, .. } if job.status.is_terminal() => {
                self.arbiter.remove_queued.do_send(RemoveQueued {
                    user: r.msg.user,
                    job_id: id,
                    place: Some(crate::actors::messages::QueuePlace::of_row(&job)),
                });
            }
            // Cancelled meanwhile (terminal), or gone: nothing more to follow.
            _ => {}
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

impl Handler<super::messages::Halt> for RayCapacityMonitor {
    type Result = ();

    fn handle(&mut self, _: super::messages::Halt, ctx: &mut Context<Self>) {
        actix::ActorContext::stop(ctx);
    }
}

impl Handler<Track> for RayCapacityMonitor {
    type Result = ();

    fn handle(&mut self, msg: Track, _: &mut Context<Self>) {
        let id = msg.job.id;
        match self.tracked.get_mut(&id) {
            Some(t) => {
                if msg.job.stop_reason.is_some() && t.job.stop_reason.is_none() {
                    t.stop_sent_at = Some(Instant::now());
                }
                t.job = msg.job;
            }
            None => {
                // Not sent by this monitor yet (a recovered or taken-over job with a
                // stop asked): the first poll that finds it alive in Ray sends it.
                let stop_sent_at = None;
                self.tracked.insert(
                    id,
                    Tracked {
                        job: msg.job,
                        missing_since: None,
                        running_seen: None,
                        stop_sent_at,
                    },
                );
            }
        }
    }
}

impl Handler<TrackRetiring> for RayCapacityMonitor {
    type Result = ();

    fn handle(&mut self, msg: TrackRetiring, _: &mut Context<Self>) {
        self.retiring.insert(
            msg.job_id,
            Retiring {
                msg,
                stop_sent_at: None,
            },
        );
    }
}

impl Handler<ClusterUnreachable> for RayCapacityMonitor {
    type Result = ();

    fn handle(&mut self, msg: ClusterUnreachable, _: &mut Context<Self>) {
        let m = &self.settings.monitor;
        let threshold = m.failure_threshold;
        let h = self.health.entry(msg.cluster.clone()).or_default();
        // A hold that is still running, or ended within the longest hold, doubles;
        // otherwise it starts again from the configured backoff.
        let recent = h
            .hold_until
            .is_some_and(|t| Instant::now() < t || t.elapsed() < m.unhealthy_backoff_max);
        h.hold = if recent {
            (h.hold * 2).clamp(m.unhealthy_backoff, m.unhealthy_backoff_max)
        } else {
            m.unhealthy_backoff
        };
        h.hold_until = Some(Instant::now() + h.hold);
        h.failures = h.failures.max(threshold);
        if h.healthy {
            h.healthy = false;
            tracing::warn!(cluster = %msg.cluster, hold_ms = h.hold.as_millis() as u64,
                "cluster marked unhealthy: a dispatch found it not ready");
            self.arbiter.capacity.do_send(CapacityChanged {
                cluster: msg.cluster,
                healthy: false,
                total: h.total,
                used: Resources::default(),
                reported: Vec::new(),
            });
        }
    }
}
