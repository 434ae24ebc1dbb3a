//! The process's intake writer: the channel `POST /v1/jobs` hands its submissions to,
//! the batches taken from it ([`super::batch_len`]) and the transactions kept in
//! flight, each batch committed by [`super::submit_batch`]'s path and every request
//! answered once its batch committed.

use sea_orm::{ConnectionTrait, DatabaseBackend, DbErr};
use tokio::sync::{mpsc, oneshot};

use super::{batch_len, submit_batch_positioned, Answered, Intake, NewJob, MAX_BATCH};
use crate::config::DatabaseSettings;
use crate::store::{Db, StoreError};

/// Submissions waiting for the writer, at most; a full channel makes `POST /v1/jobs`
/// wait (back-pressure) rather than grow memory without bound.
const CHANNEL_CAPACITY: usize = 16 * MAX_BATCH;

struct Pending {
    new: NewJob,
    reply: oneshot::Sender<Answered>,
}

/// The process's intake writer (see the module docs). Cheap to clone.
///
/// One per process. On PostgreSQL it keeps up to `database.intake_pipeline`
/// transactions in flight: it takes the next batch while earlier ones commit, so a
/// request waits for the round trips of its own batch, not for those of the batch
/// before it as well. Batches that share a user wait for each other at the user lock
/// (in the order they were taken), which keeps the queue limits and idempotency as
/// they are with one transaction at a time. Writers that own disjoint users (four, by
/// a hash of the user id, each one transaction at a time) were tried and measured
/// slower (BENCHMARKS.md, round 4).
#[derive(Clone)]
pub struct IntakeWriter {
    tx: mpsc::Sender<Pending>,
}

impl IntakeWriter {
    /// Starts the writer on a thread of its own (`intake-writer`, its own tokio
    /// runtime), so that a batch waits for no actor's work: on the service's main
    /// thread it shared its turns with the arbiter and the queues, and its p99 grew
    /// from 26 to 42 ms (BENCHMARKS.md, round 5). `default_max_queued` is
    /// `scheduler.default_max_queued_jobs`.
    ///
    /// SQLite: the writer uses `db`, the process's one connection (its I/O runs on
    /// sqlx's own thread). PostgreSQL: a pool of its own of `database.intake_pipeline`
    /// connections (capped at `max_connections − 1`, at least 1), opened lazily from
    /// the writer's runtime, whose reactor then drives them; that many batches are in
    /// flight at once.
    pub fn start(db: Db, settings: &DatabaseSettings, default_max_queued: u32) -> IntakeWriter {
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let postgres = db.get_database_backend() == DatabaseBackend::Postgres;
        let in_flight = if postgres {
            settings
                .intake_pipeline
                .min(settings.max_connections.saturating_sub(1))
                .max(1)
        } else {
            1
        };
        let own = DatabaseSettings {
            max_connections: in_flight,
            ..settings.clone()
        };
        let spawned = std::thread::Builder::new()
            .name("intake-writer".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        // Every submit then answers 503 (the writer has stopped).
                        tracing::error!(error = %e, "the intake writer cannot start its runtime");
                        return;
                    }
                };
                rt.block_on(async move {
                    let db = if postgres {
                        match crate::store::connect_intake(&own).await {
                            Ok(own) => own,
                            Err(e) => {
                                tracing::warn!(error = %e, "the intake writer shares the service's pool: it could not open its own");
                                db
                            }
                        }
                    } else {
                        db
                    };
                    run(db, rx, default_max_queued, in_flight as usize).await
                })
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "the intake writer's thread did not start");
        }
        IntakeWriter { tx }
    }

    /// Submits one job; answers after the batch holding it committed. Errors as
    /// [`super::submit_job`]; [`StoreError::Db`] if the writer is gone (shutting down).
    pub async fn submit(&self, new: NewJob) -> Result<Intake, StoreError> {
        Ok(self.submit_positioned(new).await?.0)
    }

    /// [`IntakeWriter::submit`], with a created job's place in its user's queue as the
    /// commit left it (1 + its user's QUEUED jobs of a higher priority, or of the same
    /// and submitted before it); `None` for an existing job. Saves `POST /v1/jobs` a
    /// `COUNT(*)` of its own.
    pub async fn submit_positioned(
        &self,
        new: NewJob,
    ) -> Result<(Intake, Option<u64>), StoreError> {
        let (reply, answer) = oneshot::channel();
        let gone = || StoreError::Db(DbErr::Custom("the intake writer has stopped".into()));
        self.tx
            .send(Pending { new, reply })
            .await
            .map_err(|_| gone())?;
        let a = answer.await.map_err(|_| gone())?;
        Ok((a.answer?, a.position))
    }
}

async fn run(db: Db, mut rx: mpsc::Receiver<Pending>, default_max_queued: u32, in_flight: usize) {
    let mut batches = tokio::task::JoinSet::new();
    let mut pending = Vec::with_capacity(MAX_BATCH);
    // A batch tried in one round trip takes its submit time before its user locks;
    // it runs alone, so that no batch of this writer takes a lock it waits for and
    // commits a later submit time first (see `postgres::commit`, "One round trip").
    let mut alone = false;
    loop {
        while batches.len() >= in_flight || (alone && !batches.is_empty()) {
            batches.join_next().await;
        }
        // What is left of the last arrivals goes first; new ones are taken only once
        // it is gone, so jobs are committed in the order they arrived.
        if pending.is_empty() && rx.recv_many(&mut pending, MAX_BATCH).await == 0 {
            break;
        }
        let n = batch_len(pending.iter().map(|p| &p.new));
        let batch: Vec<Pending> = pending.drain(..n).collect();
        let db = db.clone();
        alone = batches.is_empty();
        let speculate = alone;
        batches.spawn(
            async move { commit_and_answer(&db, batch, default_max_queued, speculate).await },
        );
    }
    while batches.join_next().await.is_some() {}
}

/// Commits one batch and answers each of its requests.
async fn commit_and_answer(db: &Db, batch: Vec<Pending>, default_max_queued: u32, speculate: bool) {
    let (news, replies): (Vec<NewJob>, Vec<_>) =
        batch.into_iter().map(|p| (p.new, p.reply)).unzip();
    let size = news.len();
    let started = std::time::Instant::now();
    let answers = submit_batch_positioned(db, news, default_max_queued, speculate).await;
    let m = crate::metrics::get();
    m.intake_batch_size.observe(size as f64);
    m.intake_commit_seconds
        .observe(started.elapsed().as_secs_f64());
    for (reply, answer) in replies.into_iter().zip(answers) {
        // A client that went away no longer waits; its job is stored all the same.
        let _ = reply.send(answer);
    }
}
