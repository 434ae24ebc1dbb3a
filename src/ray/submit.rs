//! Idempotent submission (DESIGN §5): never twice, ambiguous failures settled by a GET.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

use super::error::{error_chain, RayError};
use super::{RayClient, SubmitJob, SubmitOutcome};

// ---------------------------------------------------------------------------
// Idempotent submission (DESIGN §5)
// ---------------------------------------------------------------------------

/// How hard [`submit_idempotent`] tries before giving up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBudget {
    /// POST attempts in total, the first one included (0 counts as 1).
    pub attempts: u32,
    /// Wait before the second attempt; doubles after each further attempt.
    pub initial_backoff: Duration,
    /// Longest wait between two attempts.
    pub max_backoff: Duration,
}

impl Default for RetryBudget {
    /// 5 attempts, waits of 200 ms, 400 ms, 800 ms, 1.6 s (capped at 5 s): about 3 s
    /// of waiting plus request time before a job goes back to its queue, so a Ray
    /// restart of a few seconds does not cost the job its turn.
    fn default() -> Self {
        Self {
            attempts: 5,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// What [`submit_idempotent`] achieved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DispatchOutcome {
    /// Ray has the job. `already_existed`: Ray already had it when we asked (an earlier
    /// attempt, or a POST whose answer was lost, got through) rather than accepting it
    /// on a clean 2xx. `attempts`: POSTs sent (1 or more).
    Submitted {
        /// Ray already had the job (duplicate `submission_id`, or found by `GET` after
        /// an ambiguous failure).
        already_existed: bool,
        /// Number of POST attempts made, the successful one included.
        attempts: u32,
    },
    /// Ray refused the job for good (HTTP 4xx other than 408/429); the job should be
    /// FAILED with this message. The refusal is not retried.
    Rejected {
        /// Ray's message (the exception line of its traceback), at most 1000 chars.
        message: String,
    },
    /// Every attempt failed ambiguously and Ray does not know the job: the job goes
    /// back to its queue and the cluster is suspect.
    GaveUp {
        /// The last attempt's error, with its causes, and what the lookup found.
        last_error: String,
        /// Number of POST attempts made.
        attempts: u32,
    },
}

/// Why one submit attempt did not end with Ray holding the job.
#[derive(Debug)]
enum AttemptError {
    /// Ray refused the job for good (a non-retryable 4xx).
    Rejected(RayError),
    /// The caller's guard stopped the retries (the job was cancelled, or this replica
    /// no longer leads), after an earlier attempt found nothing in Ray.
    Abandoned {
        /// The earlier attempt's error.
        last: String,
        /// Why the guard stopped.
        why: String,
    },
    /// The POST failed ambiguously and the lookup did not find the job.
    Unresolved {
        submit: RayError,
        /// `None`: Ray answered 404 to the lookup. `Some`: the lookup failed too.
        lookup: Option<RayError>,
    },
}

impl std::fmt::Display for AttemptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Rejected(err) => f.write_str(&error_chain(err)),
            Self::Abandoned { last, why } => write!(f, "{last}; not retried: {why}"),
            Self::Unresolved {
                submit,
                lookup: None,
            } => write!(f, "{}; GET found no such job", error_chain(submit)),
            Self::Unresolved {
                submit,
                lookup: Some(lookup),
            } => write!(
                f,
                "{}; GET to check failed too: {}",
                error_chain(submit),
                error_chain(lookup)
            ),
        }
    }
}

/// One attempt: POST; on an ambiguous failure, `GET /api/jobs/{id}` decides.
/// `Ok(already_existed)` when Ray holds the job.
async fn submit_attempt(client: &RayClient, job: &SubmitJob) -> Result<bool, AttemptError> {
    match client.submit(job).await {
        Ok(SubmitOutcome::Submitted) => Ok(false),
        Ok(SubmitOutcome::AlreadyExists) => Ok(true),
        Err(err) if !err.is_retryable() => Err(AttemptError::Rejected(err)),
        Err(submit) => match client.get_job(&job.submission_id).await {
            Ok(Some(_)) => Ok(true),
            Ok(None) => Err(AttemptError::Unresolved {
                submit,
                lookup: None,
            }),
            Err(lookup) => Err(AttemptError::Unresolved {
                submit,
                lookup: Some(lookup),
            }),
        },
    }
}

/// Submits `job` so that Ray ends up with it at most once (DESIGN §5).
///
/// Each attempt POSTs the job. A clean 2xx is `Submitted{already_existed: false}`;
/// Ray's duplicate-`submission_id` 500 is `Submitted{already_existed: true}`; a 4xx
/// (other than 408/429) is `Rejected` at once. Any other failure (network error,
/// timeout, other 5xx, undecodable answer) is settled by `GET /api/jobs/{id}`: if
/// Ray has the job it is `Submitted{already_existed: true}`; if not (404 or the GET
/// failed) the POST is retried after an exponential backoff (backon's
/// `ExponentialBuilder`, no jitter, delays from `budget`). Once any answer shows the
/// job exists, nothing is POSTed again. After `budget.attempts` POSTs it is `GaveUp`.
///
/// Before each retry (never before the first POST) `keep_trying` is asked: an `Err`
/// with a reason ends the retries there (`GaveUp`, the reason in `last_error`) — the
/// dispatcher's guard, which stops when the job was cancelled meanwhile or this
/// replica no longer leads (DESIGN §3, §10).
///
/// Each retry is logged at `warn` with `submission_id`, `attempt` and `error`; the
/// entrypoint and runtime_env are never logged.
#[tracing::instrument(level = "debug", skip_all, fields(submission_id = %job.submission_id))]
pub async fn submit_idempotent<F, Fut>(
    client: &RayClient,
    job: &SubmitJob,
    budget: &RetryBudget,
    keep_trying: F,
) -> DispatchOutcome
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let attempts = AtomicU32::new(0);
    let last_error = std::sync::Mutex::new(String::new());
    let retries = usize::try_from(budget.attempts.max(1) - 1).unwrap_or(usize::MAX);
    let backoff = ExponentialBuilder::default()
        .with_min_delay(budget.initial_backoff)
        .with_max_delay(budget.max_backoff)
        .with_max_times(retries);
    let result = (|| async {
        if attempts.fetch_add(1, Ordering::Relaxed) > 0 {
            if let Err(why) = keep_trying().await {
                let last = last_error.lock().map(|l| l.clone()).unwrap_or_default();
                return Err(AttemptError::Abandoned { last, why });
            }
        }
        let res = submit_attempt(client, job).await;
        if let (Err(e), Ok(mut last)) = (&res, last_error.lock()) {
            *last = e.to_string();
        }
        res
    })
    .retry(backoff)
    .when(|err| matches!(err, AttemptError::Unresolved { .. }))
    .notify(|err, delay| {
        tracing::warn!(
            submission_id = %job.submission_id,
            attempt = attempts.load(Ordering::Relaxed),
            error = %err,
            retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            "submitting the job to Ray failed; retrying"
        );
    })
    .await;
    let attempts = attempts.load(Ordering::Relaxed);
    match result {
        Ok(already_existed) => DispatchOutcome::Submitted {
            already_existed,
            attempts,
        },
        Err(AttemptError::Rejected(err)) => DispatchOutcome::Rejected {
            message: match err {
                RayError::Client { message, .. } => message,
                other => error_chain(&other),
            },
        },
        Err(err @ (AttemptError::Unresolved { .. } | AttemptError::Abandoned { .. })) => {
            DispatchOutcome::GaveUp {
                last_error: err.to_string(),
                attempts: attempts
                    .saturating_sub(u32::from(matches!(err, AttemptError::Abandoned { .. }))),
            }
        }
    }
}
