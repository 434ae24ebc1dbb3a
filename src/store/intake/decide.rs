//! What a batch answers and inserts, given what the database holds of its users and
//! keys ([`Stored`], read by `sqlite` or `postgres` inside the batch's transaction):
//! [`decide`], pure, which both databases' paths and the one-round-trip check share.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use entity::{job, JobStatus};
use uuid::Uuid;

use super::{payload_differences, Answered, Intake, NewJob};
use crate::store::StoreError;

/// What a repeated `(user, external_id)` gets: the job itself, or a conflict.
fn resolve_existing(new: &NewJob, existing: job::Model) -> Intake {
    let differs = payload_differences(new, &existing);
    if differs.is_empty() {
        Intake::Existing(existing)
    } else {
        Intake::Conflict { existing, differs }
    }
}

/// What a batch comes to once its stored state is read: each submission's answer,
/// the rows to insert (by user), and their submit time.
pub(super) type Decided = (
    Vec<Answered>,
    Vec<job::Model>,
    chrono::DateTime<chrono::Utc>,
);

/// A job row as it is created; `preemptible`: its own value, else its user's default
/// ([`Stored::preemptible`]).
pub(super) fn new_row(
    new: &NewJob,
    id: Uuid,
    at: chrono::DateTime<chrono::Utc>,
    preemptible: bool,
) -> job::Model {
    job::Model {
        id,
        user_id: new.user.clone(),
        external_id: new.external_id.clone(),
        status: JobStatus::Queued,
        priority: new.priority,
        entrypoint: new.entrypoint.clone(),
        runtime_env: new.runtime_env.clone(),
        metadata: new.metadata.clone(),
        cpu: new.cpu,
        gpu: new.gpu,
        memory_bytes: new.memory_bytes,
        cluster: None,
        message: None,
        max_runtime_s: new.max_runtime_s,
        submitted_at: at,
        dispatched_at: None,
        started_at: None,
        finished_at: None,
        attempt: 1,
        retiring_attempt: None,
        stop_reason: None,
        runtime_env_digest: new.runtime_env.as_ref().map(|_| new.runtime_env_digest()),
        preemptible,
        preemptions: 0,
        preempted_at: None,
        custom_resources: crate::store::custom_column(&new.custom),
        pool: new.pool.clone(),
        lease_expires_at: None,
    }
}

/// What the database holds of a batch's users and keys, read inside its transaction.
#[derive(Default)]
pub(super) struct Stored {
    /// Each user's queue limit (its own `max_queued_jobs`, else the default).
    pub(super) limits: HashMap<String, u32>,
    /// Each user's QUEUED jobs per priority (`queue_counts`), users with none absent.
    pub(super) by_priority: HashMap<String, BTreeMap<i32, u64>>,
    /// The stored jobs of the batch's `(user, external_id)` pairs.
    pub(super) known: BTreeMap<(String, String), job::Model>,
    /// The users whose jobs are preemptible unless they say otherwise
    /// (`users.preemptible`).
    pub(super) preemptible: BTreeSet<String>,
}

impl Stored {
    /// Records `user`'s queue limit: its own `max_queued_jobs`, else the default.
    pub(super) fn add_limit(&mut self, user: String, max_queued_jobs: Option<i32>, default: u32) {
        let limit = max_queued_jobs.map_or(default, |v| v.max(0) as u32);
        self.limits.insert(user, limit);
    }

    /// Records `user`'s default for preemption (`users.preemptible`).
    pub(super) fn add_preemptible(&mut self, user: &str, preemptible: bool) {
        if preemptible {
            self.preemptible.insert(user.to_string());
        }
    }

    pub(super) fn add_count(&mut self, user: String, priority: i32, queued: i64) {
        *self
            .by_priority
            .entry(user)
            .or_default()
            .entry(priority)
            .or_default() += queued.max(0) as u64;
    }

    pub(super) fn add_known(&mut self, jobs: Vec<job::Model>) {
        for j in jobs {
            if let Some(ext) = j.external_id.clone() {
                self.known.insert((j.user_id.clone(), ext), j);
            }
        }
    }
}

/// The batch's `(user, external_id)` pairs, each once, in order.
pub(super) fn key_pairs(batch: &[NewJob]) -> Vec<(&str, &str)> {
    let pairs: BTreeSet<(&str, &str)> = batch
        .iter()
        .filter_map(|n| Some((n.user.as_str(), n.external_id.as_deref()?)))
        .collect();
    pairs.into_iter().collect()
}

/// Answers each submission of `batch` against what is stored, in order, and returns
/// the rows to insert: a repeated key resolves against the stored job (or one created
/// earlier in the batch), a user at its limit gets [`StoreError::QueueFull`], and
/// every other submission becomes a new QUEUED job with its queue position.
pub(super) fn decide(
    batch: &[NewJob],
    stored: Stored,
    default_max_queued: u32,
    at: chrono::DateTime<chrono::Utc>,
    mut next_id: impl FnMut() -> Uuid,
) -> (Vec<Answered>, Vec<job::Model>) {
    let Stored {
        limits,
        by_priority,
        mut known,
        preemptible,
    } = stored;
    let mut queued: HashMap<String, u64> = by_priority
        .iter()
        .map(|(u, counts)| (u.clone(), counts.values().sum()))
        .collect();
    let mut answers = Vec::with_capacity(batch.len());
    let mut rows = Vec::new();
    // Per user, the jobs this batch creates: (priority, index in `answers`).
    let mut created: HashMap<&str, Vec<(Reverse<i32>, usize)>> = HashMap::new();
    for new in batch {
        if let Some(ext) = &new.external_id {
            if let Some(existing) = known.get(&(new.user.clone(), ext.clone())) {
                answers.push(Answered {
                    answer: Ok(resolve_existing(new, existing.clone())),
                    position: None,
                });
                continue;
            }
        }
        let limit = limits.get(&new.user).copied().unwrap_or(default_max_queued);
        let count = queued.entry(new.user.clone()).or_default();
        if *count >= u64::from(limit) {
            answers.push(Answered::failed(StoreError::QueueFull {
                user: new.user.clone(),
                limit,
            }));
            continue;
        }
        *count += 1;
        created
            .entry(new.user.as_str())
            .or_default()
            .push((Reverse(new.priority), answers.len()));
        let own = new
            .preemptible
            .unwrap_or_else(|| preemptible.contains(&new.user));
        let row = new_row(new, next_id(), at, own);
        if let Some(ext) = &new.external_id {
            known.insert((new.user.clone(), ext.clone()), row.clone());
        }
        answers.push(Answered {
            answer: Ok(Intake::Created(row.clone())),
            position: None,
        });
        rows.push(row);
    }
    // Positions: ahead of a new job are its user's stored QUEUED jobs of at least its
    // priority (all submitted before it) and the jobs of this batch that come first in
    // queue order (higher priority, or the same and created earlier: the same submit
    // time and a smaller id, ids being time-ordered).
    for (user, mut mine) in created {
        mine.sort_unstable();
        let stored = by_priority.get(user);
        for (rank, (Reverse(priority), i)) in mine.into_iter().enumerate() {
            let ahead: u64 = stored.map_or(0, |c| c.range(priority..).map(|(_, n)| n).sum());
            if let Some(a) = answers.get_mut(i) {
                a.position = Some(ahead + rank as u64 + 1);
            }
        }
    }
    (answers, rows)
}
