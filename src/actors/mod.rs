//! The scheduler's actors (DESIGN §1) and [`Scheduler`], the handle the API holds.
//!
//! ```text
//! API ──Enqueue──▶ FairShareArbiter ──▶ UserQueue (one per user)
//!                    ▲   │ Grant            │ Demand ▲ / Dispatch ▼
//!                    │   └──────────────────┘        Dispatcher ──▶ Ray
//!   CapacityChanged, │                                   │ Track
//!   JobFinished      └──────── RayCapacityMonitor ◀──────┘
//! ```
//! Addresses are created once here and passed in. Recovery runs in [`Scheduler::start`]
//! before the service reports ready.

pub mod arbiter;
pub mod dispatcher;
pub mod messages;
pub mod monitor;
pub mod user_queue;

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::{Actor, Addr, AsyncContext, Context};
use entity::{job, user, JobStatus};
use uuid::Uuid;

pub use arbiter::{FairShareArbiter, SchedulerView};
pub use dispatcher::Dispatcher;
pub use monitor::RayCapacityMonitor;
pub use user_queue::UserQueue;

use crate::api::users::LiveUser;
use crate::api::ApiError;
use crate::config::Settings;
use crate::ray::RayClient;
use crate::store::{self, Db, TransitionFields};
use messages::{Enqueue, RemoveQueued, StopJob, Track, UserSettings};

/// Handle to the running actors. Cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    arbiter: Addr<FairShareArbiter>,
    dispatcher: Addr<Dispatcher>,
    monitor: Addr<RayCapacityMonitor>,
    clients: Arc<BTreeMap<String, RayClient>>,
}

impl Scheduler {
    /// Starts the actors and recovers from the database (DESIGN §5 "Recovery"):
    /// QUEUED jobs rebuild the queues in order; DISPATCHING jobs are looked up in Ray
    /// by id (found → its status, 404 → QUEUED, cluster down → followed until it
    /// answers); PENDING and RUNNING count as allocated and are followed. No job is
    /// submitted twice: only QUEUED jobs are ever dispatched.
    ///
    /// Errors: a bad cluster address, or the database failing during recovery.
    pub async fn start(db: Db, settings: Arc<Settings>) -> anyhow::Result<Scheduler> {
        let mut clients = BTreeMap::new();
        for c in &settings.clusters {
            let client = RayClient::new(&c.address, settings.dispatcher.request_timeout)
                .map_err(|e| anyhow::anyhow!("cluster {}: {e}", c.name))?;
            clients.insert(c.name.clone(), client);
        }
        let clients = Arc::new(clients);

        // The arbiter's address exists before it runs, so the actors can name each other.
        let arbiter_ctx: Context<FairShareArbiter> = Context::new();
        let arbiter = arbiter_ctx.address();
        let monitor = RayCapacityMonitor::new(
            settings.clone(),
            db.clone(),
            clients.clone(),
            arbiter.clone(),
        )
        .start();
        let dispatcher = Dispatcher::new(
            &settings,
            db.clone(),
            clients.clone(),
            arbiter.clone(),
            monitor.clone(),
        )
        .start();
        let _ = arbiter_ctx.run(FairShareArbiter::new(
            settings.clone(),
            db.clone(),
            dispatcher.clone(),
        ));

        let scheduler = Scheduler {
            arbiter,
            dispatcher,
            monitor,
            clients,
        };
        scheduler.recover(&db).await?;
        Ok(scheduler)
    }

    async fn recover(&self, db: &Db) -> anyhow::Result<()> {
        let users = store::list_users(db).await?;
        let mut outstanding = Vec::new();
        for j in store::jobs_with_status(db, &[JobStatus::Dispatching]).await? {
            match self.lookup_dispatching(db, &j).await? {
                Some(j) if j.status == JobStatus::Queued => {
                    self.arbiter.do_send(Enqueue { job: j });
                }
                Some(j) if j.status.is_outstanding() => {
                    self.monitor.do_send(Track { job: j.clone() });
                    outstanding.push(j);
                }
                Some(_) => {}
                None => {
                    // Cluster unreachable: keep it allocated and let the monitor settle it.
                    self.monitor.do_send(Track { job: j.clone() });
                    outstanding.push(j);
                }
            }
        }
        for j in store::jobs_with_status(db, &[JobStatus::Pending, JobStatus::Running]).await? {
            let cluster = j.cluster.clone().unwrap_or_default();
            if !self.clients.contains_key(&cluster) {
                // Nobody can follow it: say so rather than keep it RUNNING forever.
                tracing::warn!(job_id = %j.id, cluster = %cluster, "recovery: the job's cluster is no longer configured");
                let message = format!(
                    "cluster {cluster:?} is no longer in the configuration; the job's outcome is unknown"
                );
                let failed = store::transition(
                    db,
                    j.id,
                    &[JobStatus::Pending, JobStatus::Running],
                    JobStatus::Failed,
                    Some("recovery: cluster not configured".into()),
                    TransitionFields {
                        message: Some(message),
                        ..Default::default()
                    },
                )
                .await?;
                if failed.is_some() {
                    crate::metrics::get()
                        .jobs_finished
                        .with_label_values(&["FAILED"])
                        .inc();
                }
                continue;
            }
            self.monitor.do_send(Track { job: j.clone() });
            outstanding.push(j);
        }
        let queued = store::jobs_with_status(db, &[JobStatus::Queued]).await?;
        let n_queued = queued.len();
        for j in queued {
            self.arbiter.do_send(Enqueue { job: j });
        }
        tracing::info!(
            queued = n_queued,
            outstanding = outstanding.len(),
            users = users.len(),
            "recovered"
        );
        self.arbiter
            .send(arbiter::Recovered { users, outstanding })
            .await
            .map_err(|e| anyhow::anyhow!("arbiter unavailable: {e}"))?;
        Ok(())
    }

    /// Settles one DISPATCHING job found at start. `None` when its cluster does not
    /// answer (it stays DISPATCHING).
    async fn lookup_dispatching(
        &self,
        db: &Db,
        j: &job::Model,
    ) -> anyhow::Result<Option<job::Model>> {
        let Some(client) = j.cluster.as_ref().and_then(|c| self.clients.get(c)) else {
            let back = store::transition(
                db,
                j.id,
                &[JobStatus::Dispatching],
                JobStatus::Queued,
                Some("recovery: no such cluster configured; back to the queue".into()),
                TransitionFields::default(),
            )
            .await?;
            return Ok(back);
        };
        match client.get_job(&j.id.to_string()).await {
            Ok(None) => Ok(store::transition(
                db,
                j.id,
                &[JobStatus::Dispatching],
                JobStatus::Queued,
                Some("recovery: Ray does not have it; back to the queue".into()),
                TransitionFields::default(),
            )
            .await?),
            Ok(Some(ray)) => {
                // Ray has it: it was submitted. PENDING now; the monitor's first poll
                // brings it to Ray's actual status.
                let detail = format!("recovery: found in Ray as {}", ray.status.as_str());
                Ok(store::transition(
                    db,
                    j.id,
                    &[JobStatus::Dispatching],
                    JobStatus::Pending,
                    Some(detail),
                    TransitionFields::default(),
                )
                .await?)
            }
            Err(e) => {
                tracing::warn!(job_id = %j.id, error = %e, "recovery: cluster does not answer; job stays DISPATCHING");
                Ok(None)
            }
        }
    }

    /// Refuses a job no healthy cluster could ever hold, when capacity is known
    /// (DESIGN §2). Errors: 422 naming `resources`, with the largest cluster's size.
    pub async fn check_fits(&self, cpu: f64, gpu: f64, memory_bytes: i64) -> Result<(), ApiError> {
        let resources = crate::policy::Resources {
            cpu,
            gpu,
            memory_bytes: memory_bytes.max(0) as f64,
        };
        match self.arbiter.send(arbiter::FitsSomeCluster { resources }).await {
            Ok(Some(false)) => Err(ApiError::invalid(
                "resources",
                format!(
                    "no healthy cluster is large enough for cpu={cpu}, gpu={gpu}, memory_bytes={memory_bytes}; \
                     see GET /v1/scheduler for cluster capacity"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// A new QUEUED job (already committed).
    pub fn job_submitted(&self, j: &job::Model) {
        self.arbiter.do_send(Enqueue { job: j.clone() });
    }

    /// A QUEUED job was cancelled (already STOPPED in the database).
    pub fn queued_job_cancelled(&self, j: &job::Model) {
        self.arbiter.do_send(RemoveQueued {
            user: j.user_id.clone(),
            job_id: j.id,
        });
    }

    /// Asks Ray to stop an outstanding job; it becomes STOPPED when Ray confirms.
    pub fn stop_outstanding(&self, j: &job::Model) {
        self.dispatcher.do_send(StopJob {
            job_id: j.id,
            reason: "cancelled by request".into(),
        });
    }

    /// A user's settings changed; returns once the arbiter holds them.
    pub async fn user_changed(&self, u: &user::Model) {
        if let Err(e) = self.arbiter.send(UserSettings { user: u.clone() }).await {
            tracing::error!(error = %e, "arbiter unavailable");
        }
    }

    /// Why a queued job is not running, from the last cycle.
    pub async fn pending_reason(&self, job_id: Uuid) -> Option<String> {
        self.arbiter
            .send(arbiter::GetPendingReason { job_id })
            .await
            .ok()
            .flatten()
    }

    /// One user's live fair-share state.
    pub async fn user_state(&self, user: &str) -> Option<LiveUser> {
        self.arbiter
            .send(arbiter::GetUserState {
                user: user.to_string(),
            })
            .await
            .ok()
            .flatten()
    }

    /// The scheduler view for `GET /v1/scheduler`.
    pub async fn view(&self) -> Result<SchedulerView, ApiError> {
        self.arbiter
            .send(arbiter::GetView)
            .await
            .map_err(|e| ApiError::Unavailable(format!("scheduler unavailable: {e}")))
    }

    /// Whether recovery is done.
    pub async fn ready(&self) -> bool {
        self.arbiter.send(arbiter::IsReady).await.unwrap_or(false)
    }

    /// Brings per-user and per-cluster gauges up to date before a scrape.
    pub async fn refresh_metrics(&self) {
        let _ = self.arbiter.send(arbiter::RefreshMetrics).await;
    }

    /// Polls every cluster now (tests use it to avoid waiting for the interval).
    pub fn poll_now(&self) {
        self.monitor.do_send(monitor::PollNow);
    }

    /// A job's logs from its cluster. Errors: 503 when the cluster does not answer.
    pub async fn logs(&self, cluster: &str, id: Uuid) -> Result<String, ApiError> {
        let Some(client) = self.clients.get(cluster) else {
            return Ok(String::new());
        };
        match client.job_logs(&id.to_string()).await {
            Ok(logs) => Ok(logs.unwrap_or_default()),
            Err(e) => Err(ApiError::Unavailable(format!("cluster {cluster}: {e}"))),
        }
    }

    /// Saves decayed usage before the process exits.
    pub async fn shutdown(&self) {
        let _ = self.arbiter.send(arbiter::FlushUsage).await;
    }
}
