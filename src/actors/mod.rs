//! The scheduler's actors (DESIGN §1) and [`Scheduler`], the handle the API holds.
//!
//! ```text
//! API ──Enqueue──▶ FairShareArbiter ──▶ UserQueue (one per user)
//!                    ▲   │ Grant            │ Demand ▲ / Dispatch ▼
//!                    │   └──────────────────┘        Dispatcher ──▶ Ray
//!   CapacityChanged, │                          StopInRay ▲  │ Track
//!   JobFinished      └──────── RayCapacityMonitor ────────┴──┘
//! ```
//! The actors are carriers: they turn what they see into lifecycle events
//! ([`crate::lifecycle`]), let [`crate::store::apply()`] write the decided step, and send
//! the next message. They reach each other through the handles of
//! [`messages`] (`Recipient`s), built once here; no actor file names another's type.
//! Recovery runs in [`Scheduler::start`] before the service reports ready
//! (`recovery.rs`).

mod arbiter;
mod dispatcher;
pub mod messages;
pub(crate) mod monitor;
mod recovery;
mod user_queue;

#[cfg(test)]
mod capacity_tests;
#[cfg(test)]
mod model;

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::{Addr, AsyncContext, Context};
use entity::{job, user, JobStatus};
use uuid::Uuid;

use arbiter::FairShareArbiter;
pub use arbiter::Known;
use dispatcher::Dispatcher;
use messages::{
    DispatcherHandle, Enqueue, Halt, MonitorHandle, QueueFactory, QueuePlace, RemoveQueued,
    StopInRay, Track, TrackRetiring, UserSettings,
};
use monitor::book::Origin;
use monitor::RayCapacityMonitor;
use user_queue::UserQueue;

use crate::config::Settings;
use crate::lifecycle::{Event, RayCall};
use crate::ray::{RayClient, RayError};
use crate::store::{self, Applied, Db, Fence};
use crate::views::{LiveUser, SchedulerView};

/// Whether a cluster can serve a job now: healthy, with some capacity (what
/// `GET /v1/scheduler`'s `next_users` and the what-if preview's reasons count).
pub(crate) fn cluster_serves(c: &crate::policy::ClusterView) -> bool {
    c.healthy && c.total.components().any(|x| x > 0.0)
}

/// Seals the waiting jobs' runtime_envs under this leader's newest key
/// ([`store::seal_stored`]), as a replica begins to lead. Waiting jobs sealed under a
/// key this replica's `secrets.runtime_env_keys` does not list cannot be sent by it:
/// said at WARN, naming the setting and the key ids; each such job waits (QUEUED)
/// until a replica that holds its key leads (the dispatcher holds it back).
async fn reseal_waiting(db: Db, sealer: Arc<crate::secrets::Sealer>, fence: Fence) {
    let done = match store::seal_stored(&db, &sealer, &fence).await {
        Ok(done) => done,
        Err(e) => {
            tracing::error!(error = %e, "cannot seal the stored runtime_envs (they are sealed when a replica next begins to lead)");
            return;
        }
    };
    if done.sealed > 0 {
        tracing::info!(
            jobs = done.sealed,
            key = sealer.newest().unwrap_or(""),
            "runtime_envs of waiting jobs sealed under the newest key"
        );
    }
    if done.corrupt > 0 {
        tracing::error!(jobs = done.corrupt, "waiting jobs hold a runtime_env that does not open (altered rows): they fail when dispatched");
    }
    if !done.unknown_keys.is_empty() {
        let keys: Vec<String> = done
            .unknown_keys
            .iter()
            .map(|(k, n)| format!("key {k} ({n} jobs)"))
            .collect();
        tracing::warn!(
            "secrets.runtime_env_keys: waiting jobs hold runtime_envs sealed with {}, which this \
             replica does not hold; they wait (QUEUED) until a replica that holds the key \
             leads: finish the rolling update, or put the key back (after the newest)",
            keys.join(", ")
        );
    }
}

/// Seconds since the Unix epoch, the policy's clock.
pub fn unix_now() -> f64 {
    chrono::Utc::now().timestamp_micros() as f64 / 1e6
}

/// Runs `f` on the actor once the messages already in its mailbox have been handled,
/// without a timer: `run_later(Duration::ZERO)` waits for tokio's next timer tick (up
/// to 1 ms), which the finish → dispatch path (issue 11) cannot afford. A spawned
/// future that yields once is polled again right after the mailbox is drained.
pub(crate) fn after_mailbox<A, F>(ctx: &mut A::Context, f: F)
where
    A: actix::Actor<Context = actix::Context<A>>,
    F: FnOnce(&mut A, &mut actix::Context<A>) + 'static,
{
    use actix::{ActorFutureExt, AsyncContext};
    ctx.spawn(
        actix::fut::wrap_future::<_, A>(tokio::task::yield_now())
            .map(move |(), act, ctx| f(act, ctx)),
    );
}

/// Runs `fut` (database and Ray I/O) as a task of the tokio runtime rather than of
/// the actor's own local task set, and awaits it; `None` if the runtime cancelled it
/// (shutting down).
///
/// Why: when the actix System stops, the local task set is dropped outside the
/// runtime, and a database connection dropped there panics in sqlx's pool ("this
/// functionality requires a Tokio context"). A runtime task is dropped inside it.
pub(crate) async fn off_actor<F>(fut: F) -> Option<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(fut).await.ok()
}

/// The logs of a job's current attempt, asked of its cluster directly (a follower has
/// no scheduler, DESIGN §10): `Ok(None)` when the cluster is not configured or Ray
/// does not know the attempt. Errors: the cluster does not answer.
pub async fn job_logs(settings: &Settings, j: &job::Model) -> Result<Option<String>, RayError> {
    let Some(c) = settings
        .clusters
        .iter()
        .find(|c| Some(&c.name) == j.cluster.as_ref())
    else {
        return Ok(None);
    };
    let Ok(client) = RayClient::for_cluster(c, settings.dispatcher.request_timeout) else {
        return Ok(None);
    };
    let sid = crate::lifecycle::current_submission_id(j);
    client.job_logs(&sid).await
}

/// The actors stopped answering (the process is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("the scheduler is not answering: {0}")]
pub struct SchedulerUnavailable(String);

/// What a cancel did ([`Scheduler::cancel`]).
#[derive(Debug)]
pub enum Cancelled {
    /// The job was QUEUED and is STOPPED now.
    Stopped(job::Model),
    /// The job is outstanding: a stop is asked of Ray; STOPPED when Ray confirms.
    StopRequested(job::Model),
    /// The job had already ended.
    AlreadyFinished(job::Model),
    /// No such job.
    NotFound,
}

/// What follows a written cancel or withdrawal step, for the actors (pure).
#[derive(Clone, Debug)]
pub(crate) enum CancelThen {
    /// Arbiter: the STOPPED job leaves its queue.
    RemoveQueued(RemoveQueued),
    /// Monitor: follow the outstanding job with its stop.
    Track(Box<job::Model>),
    /// Dispatcher: send the stop to Ray.
    Stop(StopInRay),
}

/// What follows a cancel step that left `job` as it is now, with the Ray call the
/// step asked for.
pub(crate) fn cancelled(job: &job::Model, ray: Option<RayCall>) -> Vec<CancelThen> {
    if job.pool.is_some() && job.status != JobStatus::Stopped {
        // An admitted or started pool job (issue 30): its runner stops it (the
        // `stop_requested` event) and reports finished; nothing to follow in Ray.
        return Vec::new();
    }
    let mut then = vec![if job.status == JobStatus::Stopped {
        CancelThen::RemoveQueued(RemoveQueued {
            user: job.user_id.clone(),
            job_id: job.id,
            place: Some(QueuePlace::of_row(job)),
        })
    } else {
        CancelThen::Track(Box::new(job.clone()))
    }];
    if let (Some(RayCall::Stop { submission_id }), Some(cluster)) = (ray, &job.cluster) {
        then.push(CancelThen::Stop(StopInRay {
            job_id: job.id,
            cluster: cluster.clone(),
            submission_id,
        }));
    }
    then
}

/// Tells the arbiter what a written step of a pool job (issue 30) freed: back in the
/// queue (released, lapsed lease, preempted), or ended. Nothing for a job still held.
/// `requeued` and `finished` are the arbiter's (its `ArbiterHandle`'s recipients, or
/// its address made into them).
pub(crate) fn tell_arbiter_pool_job(
    requeued: &actix::Recipient<messages::Requeued>,
    finished: &actix::Recipient<messages::JobFinished>,
    job: &job::Model,
) {
    if job.status == JobStatus::Queued {
        requeued.do_send(messages::Requeued {
            user: job.user_id.clone(),
            job: store::summary(job),
            held: false,
        });
    } else if job.status.is_terminal() {
        finished.do_send(messages::JobFinished {
            job_id: job.id,
            seen_at: std::time::Instant::now(),
        });
    }
}

/// What a runner's report did ([`Scheduler::report`]).
#[derive(Debug)]
pub enum Reported {
    /// Written (a transition, or a lease renewal): the job as it is now.
    Done(job::Model),
    /// The same report again, or one of an admission that is over: nothing written.
    Repeated(job::Model),
    /// It does not fit the job as it is (409): the job, and why.
    Conflict(job::Model, String),
    /// The job does not name a pool (409).
    NotAPoolJob(job::Model),
    /// No such job.
    NotFound,
}

/// Handle to the running actors. Cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    arbiter: Addr<FairShareArbiter>,
    dispatcher: DispatcherHandle,
    monitor: Addr<RayCapacityMonitor>,
    /// The dispatcher's address, for [`Scheduler::halt`] only.
    dispatcher_addr: Addr<Dispatcher>,
    clients: Arc<BTreeMap<String, RayClient>>,
    /// What every `store::apply` of these actors carries (DESIGN §10).
    fence: Fence,
    /// The healthy clusters' sizes as the arbiter last published them.
    sizes: arbiter::ClusterSizes,
    /// What signs attempts' notifications (`[notify]`); `None` when they are off.
    hints: Option<crate::ray::notify::Hints>,
    /// Every QUEUED job's estimated start, refreshed off the arbiter's cycle.
    estimates: crate::estimates::Estimates,
}

impl Scheduler {
    /// Starts the actors and recovers from the database (DESIGN §5 "Recovery"):
    /// QUEUED jobs rebuild the queues in order (a job with a retiring attempt is held
    /// until Ray confirms that attempt ended); DISPATCHING, PENDING and RUNNING jobs
    /// count as allocated and the monitor follows them — its first poll settles a
    /// DISPATCHING job (found in Ray → its status, unknown → QUEUED). A job whose
    /// cluster is no longer configured ends FAILED (or, DISPATCHING, goes back to the
    /// queue). No job is submitted twice: only QUEUED jobs are ever dispatched.
    ///
    /// On PostgreSQL the leadership loop calls this when the replica takes the lease
    /// (DESIGN §10), with `fence` = its term: every write of these actors is refused
    /// once another replica has taken over. On SQLite `fence` is [`Fence::Unfenced`].
    ///
    /// Errors: a bad cluster address, or the database failing during recovery.
    pub async fn start(db: Db, settings: Arc<Settings>, fence: Fence) -> anyhow::Result<Scheduler> {
        let mut clients = BTreeMap::new();
        for c in &settings.clusters {
            let client = RayClient::for_cluster(c, settings.dispatcher.request_timeout)
                .map_err(|e| anyhow::anyhow!("cluster {}: {e}", c.name))?;
            clients.insert(c.name.clone(), client);
        }
        let clients = Arc::new(clients);

        // Addresses exist before the actors run, so each can be handed the others'.
        let arbiter_ctx: Context<FairShareArbiter> = Context::new();
        let monitor_ctx: Context<RayCapacityMonitor> = Context::new();
        let dispatcher_ctx: Context<Dispatcher> = Context::new();
        let (arbiter, monitor, dispatcher) = (
            arbiter_ctx.address(),
            monitor_ctx.address(),
            dispatcher_ctx.address(),
        );
        let arbiter_handle = FairShareArbiter::handle(&arbiter);
        let dispatcher_handle = DispatcherHandle {
            dispatch: dispatcher.clone().recipient(),
            stop: dispatcher.clone().recipient(),
            preempt: dispatcher.clone().recipient(),
        };
        let monitor_handle = MonitorHandle {
            track: monitor.clone().recipient(),
            unreachable: monitor.clone().recipient(),
        };
        let _ = monitor_ctx.run(RayCapacityMonitor::new(
            settings.clone(),
            db.clone(),
            fence.clone(),
            clients.clone(),
            arbiter_handle.clone(),
            dispatcher_handle.clone(),
        ));
        let _ = dispatcher_ctx.run(Dispatcher::new(
            &settings,
            db.clone(),
            fence.clone(),
            clients.clone(),
            arbiter_handle,
            monitor_handle,
        ));
        let window = settings.scheduler.queue_window;
        let queues_dispatcher = dispatcher_handle.clone();
        let spawn_queue: QueueFactory = Box::new(move |user, arbiter| {
            UserQueue::spawn(user, window, arbiter, queues_dispatcher.clone())
        });
        let arbiter_actor = FairShareArbiter::new(settings.clone(), db.clone(), spawn_queue)
            .tell_others_hold(monitor.clone().recipient())
            .tell_preempt(dispatcher_handle.preempt.clone());
        let sizes = arbiter_actor.cluster_sizes();
        let _ = arbiter_ctx.run(arbiter_actor);

        let scheduler = Scheduler {
            arbiter,
            dispatcher: dispatcher_handle,
            monitor,
            dispatcher_addr: dispatcher,
            clients,
            fence,
            sizes,
            hints: crate::ray::notify::Hints::of(&settings.notify),
            estimates: crate::estimates::Estimates::default(),
        };
        // The estimates' refresh (issue 48), off the arbiter's cycle; it holds the
        // arbiter weakly and ends when the arbiter does.
        let weak = scheduler.arbiter.downgrade();
        tokio::spawn(crate::estimates::run(
            settings.clone(),
            db.clone(),
            scheduler.fence.clone(),
            move || {
                let weak = weak.clone();
                async move {
                    let Some(arbiter) = weak.upgrade() else {
                        return Err(());
                    };
                    arbiter
                        .send(arbiter::GetEstimateInput)
                        .await
                        .map_err(|_| ())
                }
            },
            scheduler.estimates.clone(),
        ));
        // Recovery runs beside the HTTP server, which answers /healthz at once and
        // /readyz 503 (with the progress) until it is done.
        let recovering = scheduler.clone();
        let reseal_fence = scheduler.fence.clone();
        let sealer = Arc::new(crate::secrets::Sealer::new(
            &settings.secrets.runtime_env_keys,
        ));
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            // Recovery is idempotent (reservations and queue entries are keyed by job
            // id), so a database error retries it; a fenced write means another
            // replica leads now, and these actors stop.
            loop {
                match recovering.recover(&db).await {
                    Ok(()) => {
                        tracing::info!(seconds = started.elapsed().as_secs_f64(), "ready");
                        // Waiting jobs' runtime_envs sealed under this leader's newest
                        // key, once recovery is done: the scan reads every waiting row,
                        // and on SQLite's one connection it would delay readiness
                        // (issue 43 §7); the dispatcher opens any key it holds
                        // meanwhile. Only the leader re-seals (DESIGN §6, "Secrets").
                        reseal_waiting(db.clone(), sealer, reseal_fence).await;
                        break;
                    }
                    Err(e)
                        if e.downcast_ref::<sea_orm::DbErr>()
                            .is_some_and(store::is_fenced) =>
                    {
                        tracing::warn!("recovery: another replica leads now; stopping");
                        recovering.halt();
                        break;
                    }
                    Err(e) => {
                        tracing::error!(error = %crate::errors::chain(e.as_ref()), "recovery failed; retrying in 1 s");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Ok(scheduler)
    }

    /// A QUEUED row as the arbiter takes it; a retiring attempt is followed.
    fn recovered_queued(&self, j: &job::Model) -> (String, crate::policy::QueuedJob, bool) {
        self.follow_retiring(j);
        (
            j.user_id.clone(),
            store::summary(j),
            j.retiring_attempt.is_some(),
        )
    }

    /// Has the monitor follow a QUEUED job's retiring attempt, if it has one.
    fn follow_retiring(&self, j: &job::Model) {
        if let (Some(attempt), Some(cluster)) = (j.retiring_attempt, &j.cluster) {
            self.monitor.do_send(TrackRetiring {
                job_id: j.id,
                user: j.user_id.clone(),
                cluster: cluster.clone(),
                attempt: attempt.max(1) as u32,
                resources: store::resources_of(j),
            });
        }
    }

    /// Queues a QUEUED job row; a retiring attempt makes it held and followed.
    fn enqueue(&self, j: &job::Model) {
        let (user, job, held) = self.recovered_queued(j);
        self.arbiter.do_send(Enqueue { user, job, held });
    }

    /// Whether some healthy cluster could ever hold a job of this size: `None` while
    /// no healthy cluster has reported its capacity (then nothing is refused).
    /// Read from what the arbiter publishes, without a message to it.
    pub async fn fits_some_cluster(&self, resources: crate::policy::Resources) -> Option<bool> {
        self.sizes.fits(&resources)
    }

    /// What `resources` lacks on every healthy cluster even when empty, by name
    /// (`"cpu"`, `"gpu"`, `"memory"`, custom names); empty when it fits one or no
    /// cluster has reported yet.
    pub fn short_of_every_cluster(&self, resources: &crate::policy::Resources) -> Vec<String> {
        self.sizes.short_of(resources)
    }

    /// A new QUEUED job (already committed), handed to the arbiter's mailbox without
    /// waiting for it to be handled: the mailbox is first in, first out, so every view
    /// of the queue depth asked of the arbiter after the submit is answered (`GET
    /// /v1/users`, `GET /v1/scheduler`, `/metrics`) includes it.
    pub async fn job_submitted(&self, j: &job::Model) {
        self.arbiter.do_send(Enqueue {
            user: j.user_id.clone(),
            job: store::summary(j),
            held: false,
        });
    }

    /// Cancels a job (DESIGN §3): the lifecycle decides, `store::apply` writes, and
    /// this carries out the rest — a QUEUED job leaves its queue; an outstanding one
    /// gets a stop sent to Ray and the monitor follows it to STOPPED.
    ///
    /// Errors: the database's.
    pub async fn cancel(
        db: &Db,
        scheduler: Option<&Scheduler>,
        id: Uuid,
    ) -> Result<Cancelled, sea_orm::DbErr> {
        Ok(
            match Self::stop_step(db, scheduler, id, &Event::CancelRequested).await? {
                Applied::NotFound => Cancelled::NotFound,
                Applied::Refused(job, _) => Cancelled::AlreadyFinished(job),
                Applied::Unchanged(job) => Cancelled::StopRequested(job),
                Applied::Changed { job, .. } if job.status == JobStatus::Stopped => {
                    Cancelled::Stopped(job)
                }
                Applied::Changed { job, .. } => Cancelled::StopRequested(job),
            },
        )
    }

    /// A pool job runner's report (issue 30, DESIGN §3 "Admission": `started`,
    /// `finished`, `release`, `heartbeat`): the lifecycle decides on the row inside the
    /// write's transaction (guarded on status and attempt, like a cancel), and on the
    /// leader the arbiter learns at once what it freed; a follower hands the job over
    /// to the leader (DESIGN §10).
    ///
    /// Errors: the database's.
    pub async fn report(
        db: &Db,
        scheduler: Option<&Scheduler>,
        id: Uuid,
        event: &Event,
    ) -> Result<Reported, sea_orm::DbErr> {
        Ok(match store::apply(db, &Fence::Unfenced, id, event).await? {
            Applied::NotFound => Reported::NotFound,
            Applied::Unchanged(job) => Reported::Repeated(job),
            Applied::Refused(job, crate::lifecycle::Refusal::ReportConflict { why, .. }) => {
                Reported::Conflict(job, why)
            }
            Applied::Refused(job, _) => Reported::NotAPoolJob(job),
            Applied::Changed { job, .. } => {
                if let Some(s) = scheduler {
                    let arbiter = &s.arbiter;
                    tell_arbiter_pool_job(
                        &arbiter.clone().recipient(),
                        &arbiter.clone().recipient(),
                        &job,
                    );
                }
                Reported::Done(job)
            }
        })
    }

    /// Ray's `DELETE` of a job its caller saw QUEUED ([`Event::WithdrawQueued`]): stops
    /// it only if it is still QUEUED, in the write's transaction; a job granted in
    /// between is left as it is. Returns the row as it ends up (`None`: no such job).
    pub async fn withdraw(
        db: &Db,
        scheduler: Option<&Scheduler>,
        id: Uuid,
    ) -> Result<Option<job::Model>, sea_orm::DbErr> {
        Ok(
            match Self::stop_step(db, scheduler, id, &Event::WithdrawQueued).await? {
                Applied::NotFound => None,
                Applied::Refused(job, _)
                | Applied::Unchanged(job)
                | Applied::Changed { job, .. } => Some(job),
            },
        )
    }

    /// Writes a cancel or withdrawal step and, when it changed the job, tells the
    /// actors (on the leader): a STOPPED job leaves its queue, an outstanding one is
    /// followed, a stop goes to Ray.
    async fn stop_step(
        db: &Db,
        scheduler: Option<&Scheduler>,
        id: Uuid,
        event: &Event,
    ) -> Result<Applied, sea_orm::DbErr> {
        let applied = store::apply(db, &Fence::Unfenced, id, event).await?;
        if let (Some(s), Applied::Changed { job, step }) = (scheduler, &applied) {
            s.after_cancel(job, step.ray.clone());
        }
        Ok(applied)
    }

    fn after_cancel(&self, job: &job::Model, ray: Option<RayCall>) {
        for then in cancelled(job, ray) {
            match then {
                CancelThen::RemoveQueued(m) => self.arbiter.do_send(m),
                CancelThen::Track(job) => self.monitor.do_send(Track {
                    job: *job,
                    origin: Origin::Changed,
                }),
                CancelThen::Stop(stop) => self.dispatcher.stop.do_send(stop),
            }
        }
    }

    /// What the arbiter knows of each job of `ids`, in order (the leader's catch-up).
    pub async fn classify(
        &self,
        ids: Vec<Uuid>,
    ) -> Result<Vec<arbiter::Known>, SchedulerUnavailable> {
        self.arbiter
            .send(arbiter::Classify(ids))
            .await
            .map_err(|e| SchedulerUnavailable(e.to_string()))
    }

    /// A job the catch-up found no longer QUEUED leaves the arbiter's queues.
    pub fn forget_queued(&self, user: &str, job_id: Uuid) {
        self.arbiter.do_send(RemoveQueued {
            user: user.to_string(),
            job_id,
            place: None,
        });
    }

    /// A user's settings changed; returns once the arbiter holds them.
    pub async fn user_changed(&self, u: &user::Model) {
        if let Err(e) = self.arbiter.send(UserSettings { user: u.clone() }).await {
            tracing::error!(error = %e, "arbiter unavailable");
        }
    }

    /// The groups changed (any of them, as stored now); returns once the arbiter
    /// holds the new tree.
    pub async fn groups_changed(&self, groups: Vec<entity::group::Model>) {
        if let Err(e) = self.arbiter.send(messages::SetGroups { groups }).await {
            tracing::error!(error = %e, "arbiter unavailable");
        }
    }

    /// Live figures of every group, by path; `None` while recovery is still loading
    /// the queues.
    pub async fn groups_state(
        &self,
    ) -> Option<std::collections::HashMap<String, crate::views::LiveGroup>> {
        self.arbiter
            .send(arbiter::GetGroupState)
            .await
            .ok()
            .flatten()
    }

    /// What an outstanding job holds on Ray now (cores, GPUs, bytes), by Ray's State
    /// API at the last poll that showed it; `None` when unknown.
    pub async fn actual(&self, job_id: Uuid) -> Option<crate::policy::Resources> {
        self.arbiter
            .send(arbiter::GetActual { job_id })
            .await
            .ok()
            .flatten()
    }

    /// Of autoscaling cluster `cluster`: the node types held back now (a scale-up of
    /// theirs did not come) and whether Ray can still add a node; `None` when it does
    /// not autoscale, has not been polled, or the arbiter cannot answer.
    pub async fn growth_now(&self, cluster: &str) -> Option<(Vec<String>, bool)> {
        self.arbiter
            .send(arbiter::GetHeldNodeTypes {
                cluster: cluster.to_string(),
            })
            .await
            .ok()
            .flatten()
    }

    /// Why a queued job is not running, from the last cycle.
    pub async fn pending_reason(&self, job_id: Uuid) -> Option<String> {
        self.arbiter
            .send(arbiter::GetPendingReason { job_id })
            .await
            .ok()
            .flatten()
    }

    /// Live fair-share state and counts of one user (`Some(id)`) or of every user the
    /// arbiter knows, in one message; `None` while recovery is still loading the
    /// queues (then the counts are not whole yet).
    pub async fn users_state(
        &self,
        user: Option<&str>,
    ) -> Option<std::collections::HashMap<String, LiveUser>> {
        self.arbiter
            .send(arbiter::GetUserState {
                user: user.map(str::to_string),
            })
            .await
            .ok()
            .flatten()
    }

    /// The scheduler view for `GET /v1/scheduler`.
    pub async fn view(&self) -> Result<SchedulerView, SchedulerUnavailable> {
        self.arbiter
            .send(arbiter::GetView)
            .await
            .map_err(|e| SchedulerUnavailable(e.to_string()))
    }

    /// A copy of the policy's input now, for the what-if preview; `Ok(None)` until
    /// recovery has loaded the queues.
    pub async fn snapshot(
        &self,
    ) -> Result<Option<crate::policy::preview::Snapshot>, SchedulerUnavailable> {
        self.arbiter
            .send(arbiter::GetSnapshot)
            .await
            .map_err(|e| SchedulerUnavailable(e.to_string()))
    }

    /// Every QUEUED job's estimated start at the last forward run (DESIGN §2,
    /// "Estimates").
    pub fn estimates(&self) -> &crate::estimates::Estimates {
        &self.estimates
    }

    /// Whether recovery is done.
    pub async fn ready(&self) -> bool {
        self.arbiter.send(arbiter::IsReady).await.unwrap_or(false)
    }

    /// QUEUED jobs loaded so far while recovery runs (`None` once it is done).
    pub async fn loading(&self) -> Option<usize> {
        self.arbiter.send(arbiter::Loaded).await.ok().flatten()
    }

    /// Brings per-user and per-cluster gauges up to date before a scrape.
    pub async fn refresh_metrics(&self) {
        let _ = self.arbiter.send(arbiter::RefreshMetrics).await;
    }

    /// What signs attempts' notifications; `None` when they are off.
    pub fn hints(&self) -> Option<&crate::ray::notify::Hints> {
        self.hints.as_ref()
    }

    /// A watcher's notification whose signature was checked (`ray::notify`): the
    /// monitor asks Ray about that attempt now, if it follows it.
    pub fn hint(&self, job_id: Uuid, attempt: u32, kind: crate::ray::notify::HintKind) {
        self.monitor.do_send(messages::Hint {
            job_id,
            attempt,
            kind,
        });
    }

    /// Polls every cluster now (tests use it to avoid waiting for the interval).
    pub fn poll_now(&self) {
        self.monitor.do_send(monitor::PollNow);
    }

    /// The logs of a job's current attempt from its cluster: `Ok(None)` when the
    /// cluster is not configured or Ray does not know the attempt. Errors: the
    /// cluster does not answer.
    pub async fn logs(&self, j: &job::Model) -> Result<Option<String>, RayError> {
        let Some(client) = j.cluster.as_ref().and_then(|c| self.clients.get(c)) else {
            return Ok(None);
        };
        let sid = crate::lifecycle::current_submission_id(j);
        client.job_logs(&sid).await
    }

    /// A job another replica changed (DESIGN §10: a `NOTIFY` or the catch-up read):
    /// a QUEUED job joins its queue unless the arbiter had it already; a STOPPED job
    /// that never left the queue leaves it; an outstanding job with a stop asked for is
    /// followed with that stop (and, when `stop_now`, the stop is sent to Ray at once;
    /// the monitor repeats it every 10 s until Ray confirms).
    pub fn remote_change(&self, j: &job::Model, stop_now: bool) {
        if j.pool.is_some() {
            // A pool job (issue 30): never followed in Ray; a report or a cancel on
            // another replica may have freed what its admission held.
            match j.status {
                JobStatus::Queued => self.arbiter.do_send(arbiter::RequeuedElsewhere {
                    requeued: messages::Requeued {
                        user: j.user_id.clone(),
                        job: store::summary(j),
                        held: false,
                    },
                    attempt: u32::try_from(j.attempt).unwrap_or(1),
                }),
                s if s.is_terminal() => {
                    if j.dispatched_at.is_none() {
                        self.arbiter.do_send(RemoveQueued {
                            user: j.user_id.clone(),
                            job_id: j.id,
                            place: Some(QueuePlace::of_row(j)),
                        });
                    } else {
                        self.arbiter.do_send(messages::JobFinished {
                            job_id: j.id,
                            seen_at: std::time::Instant::now(),
                        });
                    }
                }
                _ => {}
            }
            return;
        }
        match j.status {
            JobStatus::Queued => {
                let (user, job, held) = self.recovered_queued(j);
                self.arbiter
                    .do_send(arbiter::EnqueueIfNew(Enqueue { user, job, held }));
            }
            JobStatus::Stopped if j.dispatched_at.is_none() => {
                self.arbiter.do_send(RemoveQueued {
                    user: j.user_id.clone(),
                    job_id: j.id,
                    place: Some(QueuePlace::of_row(j)),
                });
            }
            JobStatus::Pending | JobStatus::Running if j.stop_reason.is_some() => {
                self.monitor.do_send(Track {
                    job: j.clone(),
                    origin: Origin::Changed,
                });
                if let (true, Some(cluster)) = (stop_now, &j.cluster) {
                    self.dispatcher.stop.do_send(StopInRay {
                        job_id: j.id,
                        cluster: cluster.clone(),
                        submission_id: crate::lifecycle::current_submission_id(j),
                    });
                }
            }
            _ => {}
        }
    }

    /// Stops the actors (this replica lost the lease or shuts down). Their writes were
    /// fenced already; this ends their polling and dispatching.
    pub fn halt(&self) {
        self.arbiter.do_send(Halt);
        self.monitor.do_send(Halt);
        self.dispatcher_addr.do_send(Halt);
    }

    /// The fence these actors write under.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// Saves decayed usage before the process exits.
    pub async fn shutdown(&self) {
        let _ = self.arbiter.send(arbiter::FlushUsage).await;
    }
}
