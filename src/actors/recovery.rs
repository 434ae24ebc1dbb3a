//! Recovery (DESIGN §5 "Recovery"): what [`Scheduler::start`] runs before the service
//! reports ready. Outstanding jobs go to the arbiter and the monitor first; then
//! every QUEUED job is streamed from the database and handed to the arbiter in
//! chunks grouped by user.

use entity::JobStatus;

use super::messages::Track;
use super::monitor::book::Origin;
use super::{arbiter, Scheduler};
use crate::lifecycle::Event;
use crate::store::{self, Applied, Db};

/// QUEUED jobs per message while recovery streams them to the arbiter.
const RECOVERY_CHUNK: usize = 10_000;

/// One chunk of recovered QUEUED jobs, grouped by user in the order users first
/// appear (each user's jobs in the order read).
#[derive(Default)]
struct RecoveryChunk {
    users: Vec<(String, Vec<(crate::policy::QueuedJob, bool)>)>,
    index: std::collections::HashMap<String, usize>,
    /// Jobs in the chunk.
    len: usize,
}

impl RecoveryChunk {
    fn push(&mut self, user: String, job: crate::policy::QueuedJob, held: bool) {
        self.len += 1;
        if let Some(i) = self.index.get(&user) {
            self.users[*i].1.push((job, held));
            return;
        }
        self.index.insert(user.clone(), self.users.len());
        self.users.push((user, vec![(job, held)]));
    }

    fn into_users(self) -> Vec<(String, Vec<(crate::policy::QueuedJob, bool)>)> {
        self.users
    }
}

impl Scheduler {
    /// Recovery (see [`Scheduler::start`]): outstanding jobs first, so the monitor
    /// settles DISPATCHING ones while the queues load; then every QUEUED job in one
    /// streaming query, handed to the arbiter in chunks; then ready.
    pub(super) async fn recover(&self, db: &Db) -> anyhow::Result<()> {
        let groups = store::list_groups(db).await?;
        let users = store::list_users(db).await?;
        let n_users = users.len();
        let mut outstanding = Vec::new();
        let mut requeued = Vec::new();
        let statuses = [
            JobStatus::Admitted,
            JobStatus::Dispatching,
            JobStatus::Pending,
            JobStatus::Running,
        ];
        for j in store::jobs_with_status(db, &statuses).await? {
            let cluster = j.cluster.clone().unwrap_or_default();
            // A pool job (issue 30) is booked on its pool and never looked for in Ray:
            // its runner reports, or its lease lapses.
            if j.pool.is_some() || self.clients.contains_key(&cluster) {
                outstanding.push(j);
                continue;
            }
            tracing::warn!(job_id = %j.id, cluster = %cluster, "recovery: the job's cluster is no longer configured");
            if let Applied::Changed { job, .. } =
                store::apply(db, &self.fence, j.id, &Event::ClusterRemoved { cluster }).await?
            {
                if job.status == JobStatus::Queued {
                    requeued.push(job);
                }
            }
        }
        let n_outstanding = outstanding.len();
        self.arbiter
            .send(arbiter::RecoveredOutstanding {
                groups,
                users,
                outstanding: outstanding.clone(),
            })
            .await
            .map_err(|e| anyhow::anyhow!("arbiter unavailable: {e}"))?;
        for j in outstanding.into_iter().filter(|j| j.pool.is_none()) {
            self.monitor.do_send(Track {
                job: j,
                origin: Origin::Recovered,
            });
        }
        for j in &requeued {
            self.enqueue(j);
        }
        // Each chunk goes to the arbiter grouped by user (one message per user to its
        // queue); the chunk before is awaited before the next is sent, so at most two
        // chunks are in memory however far the database read runs ahead.
        let mut chunk = RecoveryChunk::default();
        let mut n_queued = 0usize;
        let mut in_flight = None;
        // On SQLite, pages of one packed row each (see `store::queued_page_sqlite`).
        let mut rows = if sea_orm::ConnectionTrait::get_database_backend(db)
            == sea_orm::DatabaseBackend::Sqlite
        {
            futures_util::StreamExt::boxed(store::stream_queued_pages_sqlite(
                db,
                RECOVERY_CHUNK as u32,
            ))
        } else {
            futures_util::StreamExt::boxed(store::stream_queued(db).await?)
        };
        while let Some(j) = futures_util::TryStreamExt::try_next(&mut rows).await? {
            n_queued += 1;
            let (user, job, held) = self.recovered_queued(&j);
            chunk.push(user, job, held);
            if chunk.len >= RECOVERY_CHUNK {
                if let Some(sent) = in_flight.take() {
                    let _: Result<(), _> = sent.await;
                }
                let users = std::mem::take(&mut chunk).into_users();
                in_flight = Some(self.arbiter.send(arbiter::EnqueueMany { users }));
            }
        }
        drop(rows);
        if let Some(sent) = in_flight.take() {
            let _: Result<(), _> = sent.await;
        }
        self.arbiter.do_send(arbiter::EnqueueMany {
            users: chunk.into_users(),
        });
        tracing::info!(
            queued = n_queued,
            outstanding = n_outstanding,
            users = n_users,
            "recovered"
        );
        self.arbiter
            .send(arbiter::Recovered)
            .await
            .map_err(|e| anyhow::anyhow!("arbiter unavailable: {e}"))?;
        Ok(())
    }
}
