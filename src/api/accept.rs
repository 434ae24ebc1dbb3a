//! Taking a checked submission in, for `/v1/jobs` and Ray's `/api/jobs/` alike: the
//! fit check against the healthy clusters, sealing, the intake writer's commit, and
//! the hand-over to the scheduler.

use super::error::ApiError;
use super::AppState;
use crate::store::Intake;
use entity::job;

/// What [`accept`] made of a submission.
pub(crate) enum Accepted {
    /// A new QUEUED job, with its place in its user's queue as the intake transaction
    /// counted it (`None` when the writer could not count it).
    Created(job::Model, Option<u64>),
    /// A repeat of `(user, external_id)` with the same payload: the existing job.
    Existing(job::Model),
}

impl Accepted {
    /// The job, new or existing.
    pub(crate) fn into_job(self) -> job::Model {
        match self {
            Accepted::Created(j, _) | Accepted::Existing(j) => j,
        }
    }
}

/// Takes a checked submission (of `/v1/jobs` or Ray's `/api/jobs/`): refuses a job no
/// healthy cluster can hold (422 `resources`), commits it through the intake writer
/// and hands it to the scheduler; [`Accepted`] says whether it was new. 422
/// `idempotency_key_reused` for another payload, 429 when the user's queue is full.
pub(crate) async fn accept(
    state: &AppState,
    new: crate::store::NewJob,
) -> Result<Accepted, ApiError> {
    tracing::Span::current().record("user", new.user.as_str());
    if let Some(s) = state.scheduler() {
        use crate::policy::Resources;
        let request = Resources::new(new.cpu, new.gpu, new.memory_bytes as f64);
        if s.fits_some_cluster(request).await == Some(false) {
            // Named by the one resource no cluster has enough of, where there is one
            // (a GPU job on CPU-only clusters names the GPUs; on Ray's API
            // `entrypoint_num_gpus`); `resources` when only the combination fails.
            let mut field = "resources";
            for (name, alone) in [
                ("resources.cpu", Resources::new(new.cpu, 0.0, 0.0)),
                ("resources.gpu", Resources::new(0.0, new.gpu, 0.0)),
                (
                    "resources.memory_bytes",
                    Resources::new(0.0, 0.0, new.memory_bytes as f64),
                ),
            ] {
                if s.fits_some_cluster(alone).await == Some(false) {
                    field = name;
                    break;
                }
            }
            return Err(ApiError::invalid(
                field,
                format!(
                    "no healthy cluster is large enough for cpu={}, gpu={}, memory_bytes={}; \
                     see GET /v1/scheduler for cluster capacity",
                    new.cpu, new.gpu, new.memory_bytes
                ),
            ));
        }
    }
    // Sealed here, on the request's own thread (DESIGN §6, "Secrets"): intake stores
    // the sealed value and the digest a resubmit is compared with.
    let new = new.sealed(&state.sealer).map_err(|e| {
        tracing::error!(error = %e, "a runtime_env could not be sealed");
        ApiError::Unavailable(e.to_string())
    })?;
    // Committed by the intake writer in a batch with whatever else arrived (group
    // commit); answered only after that commit.
    let (intake, position) = state.intake.submit_positioned(new).await?;
    match intake {
        Intake::Created(j) => {
            tracing::Span::current().record("job_id", tracing::field::display(j.id));
            tracing::info!(
                cpu = j.cpu,
                gpu = j.gpu,
                memory_bytes = j.memory_bytes,
                "job queued"
            );
            crate::metrics::get().jobs_submitted.inc();
            // The leader queues it now; a follower hands it over (DESIGN §10).
            match state.scheduler() {
                Some(s) => s.job_submitted(&j).await,
                None => state.leadership.hand_over(&format!("job:{}", j.id)).await,
            }
            Ok(Accepted::Created(j, position))
        }
        Intake::Existing(j) => {
            tracing::Span::current().record("job_id", tracing::field::display(j.id));
            Ok(Accepted::Existing(j))
        }
        Intake::Conflict { existing, differs } => {
            tracing::Span::current().record("job_id", tracing::field::display(existing.id));
            tracing::info!(differs = ?differs, "external_id reused with another payload");
            Err(ApiError::IdempotencyKeyReused {
                key: "external_id",
                external_id: existing.external_id.unwrap_or_default(),
                job_id: existing.id,
                fields: differs,
            })
        }
    }
}
