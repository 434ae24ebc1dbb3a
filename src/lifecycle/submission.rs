//! The Ray `submission_id` of each attempt of a job, and back: how fairshare names
//! what it submits, so that a retried submit is the same job to Ray (DESIGN §3).

use uuid::Uuid;

use super::JobFacts;

/// The Ray `submission_id` of a job's attempt: the job id itself for attempt 1 (so
/// jobs dispatched before attempts existed keep their id), `<job id>-<attempt>` after.
pub fn submission_id(job_id: Uuid, attempt: u32) -> String {
    if attempt <= 1 {
        job_id.to_string()
    } else {
        format!("{job_id}-{attempt}")
    }
}

/// The Ray `submission_id` of a job row's current attempt.
pub fn current_submission_id(j: &entity::job::Model) -> String {
    submission_id(j.id, JobFacts::of(j).attempt)
}

/// The job id and attempt a Ray `submission_id` names (the inverse of
/// [`submission_id`]); `None` for ids this service did not make.
pub fn parse_submission_id(id: &str) -> Option<(Uuid, u32)> {
    if let Ok(job) = Uuid::parse_str(id) {
        return Some((job, 1));
    }
    let (job, attempt) = id.rsplit_once('-')?;
    let attempt: u32 = attempt.parse().ok().filter(|a| *a >= 2)?;
    Some((Uuid::parse_str(job).ok()?, attempt))
}
