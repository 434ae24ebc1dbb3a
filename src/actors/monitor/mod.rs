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
//! dispatch found them not ready while their polls answer, and healthy again when they
//! answer (`health`); an unreachable
//! cluster is logged at `warn` at once and then at most every
//! `monitor.unreachable_warn_every`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, WrapFuture};
use entity::job;
use futures_util::future::join_all;

pub(crate) mod book;
mod followed;
pub(crate) mod growth;
mod health;
mod hint;
pub(crate) mod poll;

use super::messages::{
    ArbiterHandle, CapacityChanged, ClusterUnreachable, DispatcherHandle, Hint, Hold, JobFinished,
    OthersHold, Release, RemoveQueued, Requeued, StopInRay, Track, TrackRetiring,
};
use crate::config::Settings;
use crate::lifecycle::Limits;
use crate::metrics;
use crate::policy::{JobId, Resources};
use crate::ray::notify::HintKind;
use crate::ray::{error_chain, RayClient, RayError};
use crate::store::{Db, Fence};
use crate::views::NotificationsView;
use book::{Book, Effect, NoticeState, Retiring};
use health::Health;
use poll::{poll_cluster, ClusterPoll};

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
    /// A poll was asked for while one ran: run another once it is done.
    again: bool,
    /// The next poll, and when it is due.
    next: Option<(actix::SpawnHandle, Instant)>,
    /// When the last poll started: the next is due an interval after it, not after
    /// its end, so that a slow answer does not stretch the period.
    last_started: Option<Instant>,
    /// Attempts' watchers announce starts and ends (`[notify]`).
    hints_on: bool,
    /// Jobs are queued while another tenant holds capacity (the arbiter's
    /// [`OthersHold`]): poll at the fast interval.
    others_hold: bool,
    /// Jobs a notification is being checked for, each with the kind of a further
    /// notification that arrived meanwhile (checked once this check is done; an
    /// "ended" outranks a "started").
    checking: HashMap<JobId, Option<HintKind>>,
    /// Per cluster: when Ray's State API is next read, and its last reading.
    state: BTreeMap<String, StateReadings>,
    /// Per autoscaling cluster (`[[clusters.node_types]]`): nodes starting and whether
    /// its growth is held back (see [`growth`]).
    growth: BTreeMap<String, growth::Growth>,
    /// Per cluster: what each job held by the last State API reading written to the
    /// usage rollup (`store::record_actual`); only changes are written.
    actual_written: BTreeMap<String, HashMap<JobId, crate::store::UsageRate>>,
}

/// Ray's State API costs the dashboard time in proportion to what is alive (measured:
/// 47 ms at 100 running tasks, 0.67 s at 1,000; BENCHMARKS.md, "Ray's State API"), so
/// it is read at most every [`STATE_COST_SHARE`]⁻¹ times its last answer's duration,
/// and never more often than the poll; a poll in between carries the last reading over
/// ([`Book::carry_over`]).
#[derive(Default)]
struct StateReadings {
    due: Option<Instant>,
    last: Option<followed::UsageNow>,
}

/// Why a cluster is unhealthy when no poll failed: a dispatch found it not ready.
const NOT_READY: &str = "a dispatch found it not ready; held back before the next try";

/// The most of the dashboard's time the State API readings may take: a tenth.
const STATE_COST_SHARE: f64 = 0.1;

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
        // Every series from the start, so that a ratio of received to missed has data
        // on a path where nothing ever arrives.
        let m = metrics::get();
        for k in clients.keys() {
            for outcome in ["received", "missed", "late"] {
                m.notifications.with_label_values(&[k.as_str(), outcome]);
            }
            m.notifications_arriving
                .with_label_values(&[k.as_str()])
                .set(0);
        }
        RayCapacityMonitor {
            db,
            fence,
            clients,
            arbiter,
            dispatcher,
            health,
            hints_on: crate::ray::notify::Hints::of(&settings.notify).is_some(),
            others_hold: false,
            settings,
            book: Book::default(),
            polling: false,
            again: false,
            next: None,
            checking: HashMap::new(),
            actual_written: BTreeMap::new(),
            last_started: None,
            state: BTreeMap::new(),
            growth: BTreeMap::new(),
        }
    }

    /// How long until the next poll: `monitor.poll_interval` while something is
    /// awaited that no notification announces (see [`Book::awaits_the_poll`]; a cluster
    /// not healthy; notifications off; jobs queued while another tenant holds
    /// capacity), else `monitor.idle_poll_interval`.
    fn interval(&self) -> Duration {
        let m = &self.settings.monitor;
        let fast = !self.hints_on
            || self.others_hold
            || self.book.awaits_the_poll()
            || self.health.values().any(|h| !h.healthy);
        if fast {
            m.poll_interval
        } else {
            m.idle_poll_interval.max(m.poll_interval)
        }
    }

    /// When the next poll is due: [`Self::interval`] after the last one started, and
    /// at least a quarter of it after now (a poll slower than the interval is not
    /// followed by another at once).
    fn due(&self) -> Instant {
        let every = self.interval();
        let now = Instant::now();
        let at = self.last_started.map_or(now + every, |t| t + every);
        at.max(now + every / 4)
    }

    /// Schedules the next poll at [`Self::due`], replacing one scheduled.
    fn schedule(&mut self, ctx: &mut Context<Self>) {
        if let Some((handle, _)) = self.next.take() {
            ctx.cancel_future(handle);
        }
        let due = self.due();
        let handle = ctx.run_later(due.saturating_duration_since(Instant::now()), |act, ctx| {
            act.next = None;
            act.poll(ctx);
        });
        self.next = Some((handle, due));
    }

    /// Brings the next poll forward when something now awaits it sooner.
    fn hurry(&mut self, ctx: &mut Context<Self>) {
        let due = self.due();
        if self.next.as_ref().is_some_and(|(_, at)| *at > due) {
            self.schedule(ctx);
        }
    }

    /// What `GET /v1/scheduler` shows of `cluster`'s notification path.
    fn notifications_view(&self, cluster: &str) -> NotificationsView {
        let path = self.book.notice_path(cluster);
        let fast_ms = self.settings.monitor.poll_interval.as_millis();
        let poll_interval_ms = if self.hints_on && path.state != NoticeState::Arriving {
            fast_ms as u64
        } else {
            self.interval().as_millis() as u64
        };
        let (state, message) = if !self.hints_on {
            ("off", None)
        } else {
            let state = path.state.as_str();
            let message = match path.state {
                NoticeState::Arriving => None,
                NoticeState::Unproven => Some(format!(
                    "no end-of-job notification has arrived from this cluster yet; its jobs are polled every {fast_ms} ms until one does"
                )),
                NoticeState::Missing => Some(format!(
                    "end-of-job notifications are not arriving from this cluster; polling every {fast_ms} ms (its job processes must reach notify.url {})",
                    self.settings.notify.url
                )),
            };
            (state, message)
        };
        NotificationsView {
            state: state.to_string(),
            received: path.received,
            missed: path.missed,
            late: path.late,
            poll_interval_ms,
            message,
        }
    }

    /// Whether a job of cluster `name` asking `request` that Ray holds PENDING waits
    /// for a node (`monitor.scale_up_timeout`) rather than for resources to free up
    /// (`monitor.pending_timeout`): see [`growth::Growth::can_grow_for`]. False for a
    /// fixed cluster.
    fn can_grow_for(&self, name: &str, request: &crate::policy::Resources) -> bool {
        let Some(c) = self
            .settings
            .clusters
            .iter()
            .find(|c| c.name == name && c.autoscales())
        else {
            return false;
        };
        let alive = self.health.get(name).map(|h| h.total).unwrap_or_default();
        self.growth
            .get(name)
            .cloned()
            .unwrap_or_default()
            .can_grow_for(c, request, &alive, Instant::now())
    }

    fn limits(&self, j: &job::Model) -> Limits {
        let s = &self.settings;
        let scale_up = j
            .cluster
            .as_deref()
            .is_some_and(|name| self.can_grow_for(name, &crate::store::resources_of(j)));
        let pending = if scale_up {
            s.monitor.scale_up_timeout
        } else {
            s.monitor.pending_timeout
        };
        Limits {
            pending_timeout_s: pending.as_secs_f64(),
            scale_up,
            max_runtime_s: j
                .max_runtime_s
                .map(|v| v.max(0) as f64)
                .unwrap_or(s.scheduler.default_max_runtime.as_secs_f64()),
            lost_job_grace_s: s.monitor.lost_job_grace.as_secs_f64(),
            preemption_grace_s: s.preemption.grace.as_secs_f64(),
        }
    }

    fn poll(&mut self, ctx: &mut Context<Self>) {
        if self.polling {
            self.again = true;
            return;
        }
        self.polling = true;
        self.last_started = Some(Instant::now());
        let now = Instant::now();
        let polls: Vec<_> = self
            .clients
            .iter()
            .filter(|(name, _)| {
                self.health
                    .get(*name)
                    .and_then(|h| h.poll_hold_until)
                    .is_none_or(|t| now >= t)
            })
            .map(|(name, client)| {
                let jobs = self
                    .book
                    .current_on(name)
                    .map(|t| (t.clone(), self.limits(&t.job)))
                    .collect();
                let retiring = self.book.retiring_on(name).cloned().collect();
                let strays = self.book.strays_on(name).cloned().collect();
                let followed = self.book.followed_on(name);
                let read_state = self
                    .state
                    .get(name)
                    .and_then(|s| s.due)
                    .is_none_or(|due| Instant::now() >= due);
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
                        read_state,
                    },
                )
            })
            .collect();
        ctx.spawn(
            super::off_actor(join_all(polls))
                .into_actor(self)
                .map(|results, act, ctx| {
                    act.polling = false;
                    for r in results.unwrap_or_default() {
                        act.apply(r, ctx);
                    }
                    if std::mem::take(&mut act.again) {
                        act.poll(ctx);
                    } else {
                        act.schedule(ctx);
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
                Effect::Unannounced { job_id, cluster } => {
                    let m = metrics::get();
                    m.hint("started", "missing");
                    m.notifications
                        .with_label_values(&[cluster.as_str(), "missed"])
                        .inc();
                    tracing::debug!(%job_id, %cluster, "an attempt Ray ran announced nothing");
                }
                Effect::Announced { cluster } => metrics::get()
                    .notifications
                    .with_label_values(&[cluster.as_str(), "received"])
                    .inc(),
                Effect::Late { cluster } => metrics::get()
                    .notifications
                    .with_label_values(&[cluster.as_str(), "late"])
                    .inc(),
                Effect::NoticePathChanged { cluster, from, to } => {
                    metrics::get()
                        .notifications_arriving
                        .with_label_values(&[cluster.as_str()])
                        .set(i64::from(to == NoticeState::Arriving));
                    let url = &self.settings.notify.url;
                    let fast = self.settings.monitor.poll_interval;
                    if to == NoticeState::Missing {
                        tracing::warn!(%cluster, notify_url = %url, poll_interval = ?fast, was = from.as_str(),
                            "end-of-job notifications are not arriving from this cluster: a job Ray ran or ended sent none (its job processes must reach notify.url); its jobs are polled every monitor.poll_interval until notifications arrive again");
                    } else if from == NoticeState::Missing {
                        tracing::info!(%cluster, notify_url = %url,
                            "end-of-job notifications arrive from this cluster again; its poll returns to monitor.idle_poll_interval");
                    } else {
                        tracing::info!(%cluster, notify_url = %url,
                            "end-of-job notifications arrive from this cluster");
                    }
                }
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
                health.poll_answered(Instant::now());
                health.total = u.total;
                if let Some(g) = self.growth.get_mut(&r.name) {
                    g.nodes_starting = u.nodes_starting;
                }
                if health.healthy {
                    health.last_warned = None;
                }
                Some(u.used)
            }
            (_, error) => {
                let refused = matches!(&r.usage, Err(RayError::Unauthorized { .. }))
                    || matches!(&r.jobs, Err(RayError::Unauthorized { .. }));
                health.poll_failed(
                    Instant::now(),
                    error.clone(),
                    refused,
                    &self.settings.monitor,
                );
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

    fn apply(&mut self, r: ClusterPoll, ctx: &mut Context<Self>) {
        let settings = Arc::clone(&self.settings);
        let autoscaling = settings
            .clusters
            .iter()
            .find(|c| c.name == r.name && c.autoscales());
        if autoscaling.is_some() {
            self.growth.entry(r.name.clone()).or_default();
        }
        let name = r.name.clone();
        let now = Instant::now();
        // Jobs that waited `scale_up_timeout` for a node that did not come (the poll's
        // PENDING limits were the scale-up's, see `limits`): the node type each waited
        // for is left out of the potential for a while (issue 44).
        let timed_out: Vec<crate::policy::Resources> = r
            .current
            .iter()
            .filter_map(|(_, o)| match o {
                followed::Outcome::Applied(a) => match &**a {
                    crate::store::Applied::Changed { job, step }
                        if step.metric == Some(crate::lifecycle::Metric::PendingTimeout) =>
                    {
                        Some(crate::store::resources_of(job))
                    }
                    _ => None,
                },
                _ => None,
            })
            .filter(|req| self.can_grow_for(&name, req))
            .collect();
        let used = self.apply_health(&r);
        let lag = self.settings.monitor.usage_report_lag;
        if let (Some(c), Some(g)) = (autoscaling, self.growth.get_mut(&name)) {
            for req in &timed_out {
                let Some(t) = g.node_type_for(c, req, now) else {
                    continue;
                };
                let t = t.to_string();
                let hold = g.hold(&t, now, settings.monitor.scale_up_timeout);
                tracing::warn!(cluster = %name, node_type = %t, hold_s = hold.as_secs(),
                    failed_scale_ups = g.holds.get(&t).map_or(0, |h| h.failures),
                    "a job waited monitor.scale_up_timeout for Ray to add a node of this type \
                     and none came; the type is left out of the cluster's capacity for hold_s \
                     (doubling with each failure in a row)");
            }
        }
        let state_cost = r.state_cost;
        let mut usage_now = r.usage_now.clone();
        let (effects, pending_in_ray) = self.book.absorb(r, now);
        let readings = self.state.entry(name.clone()).or_default();
        match state_cost {
            Some(cost) => {
                let every = cost
                    .mul_f64(1.0 / STATE_COST_SHARE)
                    .max(self.settings.monitor.poll_interval);
                readings.due = Some(now + every);
                readings.last = usage_now.clone();
            }
            None => {
                usage_now = readings
                    .last
                    .as_ref()
                    .map(|last| self.book.carry_over(&name, last));
                if let Some(u) = &usage_now {
                    readings.last = Some(u.clone());
                }
            }
        }
        self.carry(effects);
        metrics::get()
            .ray_pending_jobs
            .with_label_values(&[name.as_str()])
            .set(pending_in_ray);
        let Some(health) = self.health.get(&name) else {
            return;
        };
        let (used, reported, actual) = match (used, usage_now) {
            // Ray's State API: what every job holds now, ours and every other
            // tenant's, from one reading (no lag to guess). Retiring and stray
            // attempts that hold nothing yet may start at any moment: counted at
            // their declared size.
            (Some(_), Some(u)) => {
                let others = self.book.others_not_holding(&name, &u.others_holding);
                let reported = u.jobs.iter().map(|(id, _)| *id).collect();
                (u.total + others, reported, u.jobs)
            }
            // Ray's usage report, which lags: our jobs count as included once seen
            // RUNNING for `usage_report_lag`; retiring and stray attempts not yet
            // included count at their declared size.
            (used, _) => {
                let others = self.book.unreported_others(&name, lag, now);
                (
                    used.map(|u| u + others).unwrap_or_default(),
                    self.book.reported(&name, lag, now),
                    Vec::new(),
                )
            }
        };
        let notifications = Some(self.notifications_view(&name));
        let unhealthy_reason = (!health.healthy).then(|| {
            health
                .last_error
                .clone()
                .unwrap_or_else(|| NOT_READY.to_string())
        });
        let alive = health.total;
        let healthy = health.healthy;
        if state_cost.is_some() && !actual.is_empty() {
            self.write_actual(&name, &actual, ctx);
        }
        let (total, growth) = match (autoscaling, self.growth.get_mut(&name)) {
            (Some(c), Some(g)) => {
                g.saw_alive(c, alive);
                let potential = g.potential(c, now);
                let declared = c.potential();
                if let Some(p) = declared.filter(|p| growth::larger_than_declared(&alive, p)) {
                    if !g.warned_small {
                        g.warned_small = true;
                        tracing::warn!(cluster = %name, alive = ?alive, potential = ?p,
                            "the nodes alive offer more than [[clusters.node_types]] declares \
                             the cluster can grow to; what is alive counts");
                    }
                }
                let view = g.view(c, alive, self.book.waiting_in_ray(&name), now);
                (growth::capacity(alive, potential), Some(view))
            }
            _ => (alive, None),
        };
        let growth_room = total.saturating_sub(alive);
        self.arbiter.capacity.do_send(CapacityChanged {
            cluster: name.clone(),
            unhealthy_reason,
            healthy,
            total,
            used,
            reported,
            actual,
            notifications,
            growth,
            growth_room,
        });
    }
}

impl RayCapacityMonitor {
    /// Writes a fresh State API reading of what `cluster`'s jobs hold into the usage
    /// rollup (DESIGN §6, "Usage rollup"): the jobs whose reading changed since the
    /// last one written. A failed write is logged and the next reading writes them all
    /// again (the database keeps only changes).
    fn write_actual(
        &mut self,
        cluster: &str,
        actual: &[(JobId, crate::policy::Resources)],
        ctx: &mut Context<Self>,
    ) {
        let now: HashMap<JobId, crate::store::UsageRate> = actual
            .iter()
            .map(|(id, r)| {
                (
                    *id,
                    crate::store::UsageRate::of(r.cpu, r.gpu, r.memory_bytes),
                )
            })
            .collect();
        let before = self
            .actual_written
            .insert(cluster.to_string(), now.clone())
            .unwrap_or_default();
        let changed: Vec<_> = now
            .into_iter()
            .filter(|(id, rate)| before.get(id) != Some(rate))
            .collect();
        if changed.is_empty() {
            return;
        }
        let (db, fence, cluster) = (self.db.clone(), self.fence.clone(), cluster.to_string());
        let at = chrono::Utc::now().timestamp();
        ctx.spawn(
            super::off_actor(async move {
                crate::store::record_actual(&db, &fence, at, &changed).await
            })
            .into_actor(self)
            .map(move |res, act, _| {
                if let Some(Err(e)) = res {
                    if !crate::store::is_fenced(&e) {
                        tracing::warn!(cluster = %cluster, error = %e,
                            "cannot write what jobs actually held into the usage rollup; the next reading tries again");
                    }
                    act.actual_written.remove(&cluster);
                }
            }),
        );
    }
}

impl Actor for RayCapacityMonitor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.poll(ctx);
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

    fn handle(&mut self, msg: Track, ctx: &mut Context<Self>) {
        self.book.track(msg.job, msg.origin, Instant::now());
        let effects = self.book.take_notice_effects();
        self.carry(effects);
        self.hurry(ctx);
    }
}

impl Handler<TrackRetiring> for RayCapacityMonitor {
    type Result = ();

    fn handle(&mut self, msg: TrackRetiring, ctx: &mut Context<Self>) {
        self.book.track_retiring(Retiring {
            job_id: msg.job_id,
            user: msg.user,
            cluster: msg.cluster,
            attempt: msg.attempt,
            resources: msg.resources,
            stop_sent_at: None,
            running_seen: None,
        });
        self.hurry(ctx);
    }
}

impl Handler<Hint> for RayCapacityMonitor {
    type Result = ();

    #[tracing::instrument(skip_all, fields(job_id = %msg.job_id, kind = msg.kind.as_str()))]
    fn handle(&mut self, msg: Hint, ctx: &mut Context<Self>) {
        // Its watcher reaches this service (remembered for a while if the attempt's
        // hand-over from the dispatcher is still to come).
        self.book.announced(msg.job_id, msg.attempt, Instant::now());
        let effects = self.book.take_notice_effects();
        self.carry(effects);
        self.check_hint(msg, ctx);
    }
}

impl RayCapacityMonitor {
    /// Asks Ray about the attempt a notification names ([`hint::check`]). A
    /// notification that arrives while a check of the same job runs is not lost
    /// (issue 43 §4: a short job's "ended" came 8–14 ms after its "started", whose
    /// check was still waiting for Ray): it is kept, the later kind winning, and
    /// checked once the running check is done, unless that check already settled the
    /// attempt.
    fn check_hint(&mut self, msg: Hint, ctx: &mut Context<Self>) {
        let followed = self
            .book
            .current(&msg.job_id)
            .filter(|t| t.job.attempt.max(1) as u32 == msg.attempt)
            .cloned();
        let Some(t) = followed else {
            // Not an attempt followed here now (ended, replayed, late): nothing to do.
            metrics::get().hint(msg.kind.as_str(), "ignored");
            return;
        };
        if let Some(waiting) = self.checking.get_mut(&msg.job_id) {
            metrics::get().hint(msg.kind.as_str(), "deferred");
            if *waiting != Some(HintKind::Ended) {
                *waiting = Some(msg.kind);
            }
            return;
        }
        let Some((cluster, client)) = t
            .job
            .cluster
            .clone()
            .and_then(|c| Some((c.clone(), self.clients.get(&c)?.clone())))
        else {
            metrics::get().hint(msg.kind.as_str(), "ignored");
            return;
        };
        metrics::get().hint(msg.kind.as_str(), "checked");
        self.checking.insert(msg.job_id, None);
        let limits = self.limits(&t.job);
        let check = hint::check(
            self.db.clone(),
            self.fence.clone(),
            client,
            cluster.clone(),
            t,
            limits,
            msg.kind,
        );
        ctx.spawn(
            super::off_actor(check)
                .into_actor(self)
                .map(move |outcome, act, ctx| {
                    let waiting = act.checking.remove(&msg.job_id).flatten();
                    if let Some(Some(outcome)) = outcome {
                        let poll = ClusterPoll {
                            name: cluster,
                            usage: Ok(Default::default()),
                            jobs: Ok(()),
                            current: vec![(msg.job_id, outcome)],
                            retiring: Vec::new(),
                            strays: Vec::new(),
                            usage_now: None,
                            state_cost: None,
                        };
                        let (effects, _) = act.book.absorb(poll, Instant::now());
                        act.carry(effects);
                    }
                    if let Some(kind) = waiting {
                        act.check_hint(Hint { kind, ..msg }, ctx);
                    }
                    act.hurry(ctx);
                }),
        );
    }
}

impl Handler<OthersHold> for RayCapacityMonitor {
    type Result = ();

    fn handle(&mut self, msg: OthersHold, ctx: &mut Context<Self>) {
        self.others_hold = msg.0;
        self.hurry(ctx);
    }
}

impl Handler<ClusterUnreachable> for RayCapacityMonitor {
    type Result = ();

    fn handle(&mut self, msg: ClusterUnreachable, ctx: &mut Context<Self>) {
        let m = &self.settings.monitor;
        let h = self.health.entry(msg.cluster.clone()).or_default();
        if h.dispatch_failed(Instant::now(), m) {
            tracing::warn!(cluster = %msg.cluster, hold_ms = h.hold().as_millis() as u64,
                "cluster marked unhealthy: a dispatch found it not ready");
            self.arbiter.capacity.do_send(CapacityChanged {
                cluster: msg.cluster,
                unhealthy_reason: Some(NOT_READY.into()),
                healthy: false,
                total: h.total,
                used: Resources::default(),
                reported: Vec::new(),
                actual: Vec::new(),
                notifications: None,
                growth: None,
                growth_room: Resources::ZERO,
            });
        }
        self.hurry(ctx);
    }
}
