//! `RayCapacityMonitor`: polls every cluster (every `monitor.poll_interval`) — one
//! `GET /api/jobs/` and one `GET /api/cluster_status` each — because Ray has no
//! completion callback.
//!
//! It follows every outstanding job this service submitted (and every retiring attempt
//! of a job queued again): [`crate::lifecycle::observe_current`] turns Ray's answer
//! into an event, `store::apply` writes the lifecycle's step before anything is
//! announced, and stops the step asks for go to the dispatcher. A stop that Ray has not
//! carried out is asked again every [`followed::STOP_RETRY`]. Clusters are unhealthy after
//! `monitor.failure_threshold` failed polls in a row, or for a growing hold after a
//! dispatch found them not ready, and healthy again when they answer; an unreachable
//! cluster is logged at `warn` at once and then at most every
//! `monitor.unreachable_warn_every`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, WrapFuture};
use entity::job;
use futures_util::future::join_all;

pub(crate) mod book;
mod followed;
pub(crate) mod poll;

use super::messages::{
    ArbiterHandle, CapacityChanged, ClusterUnreachable, DispatcherHandle, Hold, JobFinished,
    Release, RemoveQueued, Requeued, StopInRay, Track, TrackRetiring,
};
use crate::config::Settings;
use crate::lifecycle::Limits;
use crate::metrics;
use crate::policy::Resources;
use crate::ray::{error_chain, RayClient};
use crate::store::{Db, Fence};
use book::{Book, Effect, Retiring};
use poll::{poll_cluster, ClusterPoll};

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
    /// What it follows (pure; see [`book`]).
    book: Book,
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
            book: Book::default(),
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
                    .book
                    .current_on(name)
                    .map(|t| (t.clone(), self.limits(&t.job)))
                    .collect();
                let retiring = self.book.retiring_on(name).cloned().collect();
                let strays = self.book.strays_on(name).cloned().collect();
                let followed = self.book.followed_on(name);
                poll_cluster(
                    self.db.clone(),
                    self.fence.clone(),
                    name.clone(),
                    client.clone(),
                    poll::OnCluster {
                        jobs,
                        retiring,
                        strays,
                        followed,
                    },
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

    /// Sends what the book decided.
    fn carry(&self, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::Stop {
                    job_id,
                    cluster,
                    submission_id,
                } => self.dispatcher.stop.do_send(StopInRay {
                    job_id,
                    cluster,
                    submission_id,
                }),
                Effect::Finished { job_id } => self.arbiter.finished.do_send(JobFinished {
                    job_id,
                    seen_at: Instant::now(),
                }),
                Effect::Requeued { user, job, held } => {
                    self.arbiter.requeued.do_send(Requeued { user, job, held })
                }
                Effect::Release { user, job_id } => {
                    self.arbiter.release.do_send(Release { user, job_id })
                }
                Effect::RemoveQueued {
                    user,
                    job_id,
                    place,
                } => self.arbiter.remove_queued.do_send(RemoveQueued {
                    user,
                    job_id,
                    place,
                }),
                Effect::Hold {
                    user,
                    job_id,
                    place,
                } => self.arbiter.hold.do_send(Hold {
                    user,
                    job_id,
                    place,
                }),
            }
        }
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
        let name = r.name.clone();
        let now = Instant::now();
        let (effects, pending_in_ray) = self.book.absorb(r, now);
        self.carry(effects);
        metrics::get()
            .ray_pending_jobs
            .with_label_values(&[name.as_str()])
            .set(pending_in_ray);
        let Some(health) = self.health.get(&name) else {
            return;
        };
        // Attempts alive in Ray that are not a job's current one (retiring, strays)
        // count as used at their declared size until Ray's report covers them.
        let others = self.book.unreported_others(&name, lag, now);
        self.arbiter.capacity.do_send(CapacityChanged {
            cluster: name.clone(),
            healthy: health.healthy,
            total: health.total,
            used: used.map(|u| u + others).unwrap_or_default(),
            reported: self.book.reported(&name, lag, now),
        });
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
        self.book.track(msg.job, msg.origin, Instant::now());
    }
}

impl Handler<TrackRetiring> for RayCapacityMonitor {
    type Result = ();

    fn handle(&mut self, msg: TrackRetiring, _: &mut Context<Self>) {
        self.book.track_retiring(Retiring {
            job_id: msg.job_id,
            user: msg.user,
            cluster: msg.cluster,
            attempt: msg.attempt,
            resources: msg.resources,
            stop_sent_at: None,
            running_seen: None,
        });
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
