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
    who: &super::auth::Identity,
    new: crate::store::NewJob,
) -> Result<Accepted, ApiError> {
    tracing::Span::current().record("user", new.user.as_str());
    // A license's seats are configured, not polled: checked on every replica, for a
    // pool's job and a cluster's alike (a fresh tester's finding: above its count a
    // cluster job was taken and waited for ever while no cluster was healthy, and
    // refused naming clusters, not the license, while one was).
    refuse_if_beyond_license(&state.settings, &new)?;
    if let Some(pool) = &new.pool {
        // A pool's capacity is configured, not polled: checked on every replica.
        refuse_if_not_for_pool(&state.settings, pool, &new)?;
    } else if let Some(s) = state.scheduler() {
        refuse_if_too_large(&s, &new).await?;
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
            join_group(state, &j).await;
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
            // The job is named, and what differs from it said, only to a caller
            // that may see it (not to a token of another pool, which could otherwise
            // learn its id or test guesses of its fields: found by testers).
            let visible = who.may_access_job(&existing);
            Err(ApiError::IdempotencyKeyReused {
                key: "external_id",
                job_id: visible.then_some(existing.id),
                external_id: existing.external_id.unwrap_or_default(),
                fields: if visible { differs } else { Vec::new() },
            })
        }
    }
}

/// The identity rule of groups (DESIGN §4, "Groups"): a job that carries a group
/// (`metadata["fairshare.group"]`, which `ray_compat.group_rules` find on Ray's API,
/// e.g. from `ENV_JOB_GATEWAY_INSTANCE`, and a gateway may give on `/v1`) puts its
/// user in that group when the user has none and the group exists. Groups are never
/// created so, and a user's group is never changed so (an admin's is kept); an
/// unknown group is logged and ignored. Told to the arbiter before the job, so the
/// job is scheduled in its group. A failure is logged, never the submit's.
async fn join_group(state: &AppState, j: &job::Model) {
    let Some(group) = j
        .metadata
        .as_ref()
        .and_then(|m| m.get(super::ray_compat::identity::GROUP_KEY))
        .and_then(serde_json::Value::as_str)
    else {
        return;
    };
    if super::validate::check_path("group", group).is_err() {
        tracing::info!(
            group,
            "the job's group is not a group path; the user stays where it is"
        );
        return;
    }
    match crate::store::join_group(&state.db, &j.user_id, group).await {
        Ok(crate::store::Joined::Joined(u)) => {
            tracing::info!(group, "the user joined the job's group");
            match state.scheduler() {
                Some(s) => s.user_changed(&u).await,
                None => state.leadership.hand_over(&format!("user:{}", u.id)).await,
            }
        }
        Ok(crate::store::Joined::Unchanged) => {}
        Ok(crate::store::Joined::UnknownGroup) => {
            tracing::info!(
                group,
                "the job names a group that does not exist; the user stays in the root"
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, group, "cannot put the user in the job's group");
        }
    }
}

/// Refuses (422, naming `resources.custom.<name>`) a job that asks more seats of a
/// `[[licenses]]` license than its count: a license counts across every cluster and
/// pool alike (DESIGN §2, "Licenses"), so no cluster or pool could ever run it.
fn refuse_if_beyond_license(
    settings: &crate::config::Settings,
    new: &crate::store::NewJob,
) -> Result<(), ApiError> {
    for (name, &amount) in &new.custom {
        if let Some(l) = settings.licenses.iter().find(|l| &l.name == name) {
            if amount > l.count {
                return Err(ApiError::invalid(
                    format!("resources.custom.{name}"),
                    format!(
                        "asks {amount} seats of the license {name:?}, which has {} \
                         ([[licenses]] count, shared by every cluster and pool)",
                        l.count
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Refuses (422) a job naming a pool that is not configured (`pool`), or one the pool
/// could not hold even when empty (the one resource short, or `resources`), like a job
/// too large for every cluster. A `[[licenses]]` seat is no resource of the pool's: a
/// license counts across every cluster and pool alike (DESIGN §2, "Licenses"), so it is
/// held to the license's count, not to the pool's capacity (issue 43, "Also check":
/// such a job was refused as too large for its pool).
fn refuse_if_not_for_pool(
    settings: &crate::config::Settings,
    pool: &str,
    new: &crate::store::NewJob,
) -> Result<(), ApiError> {
    use crate::policy::{custom, Resources};
    let Some(p) = settings.pool(pool) else {
        let known: Vec<&str> = settings.pools.iter().map(|p| p.name.as_str()).collect();
        return Err(ApiError::invalid(
            "pool",
            format!(
                "no pool named {pool:?} is configured (pools: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
        ));
    };
    let total = p.total();
    let mut wanted = Resources::new(new.cpu, new.gpu, new.memory_bytes as f64);
    let mut short = Vec::new();
    for (field, have, want) in [
        ("resources.cpu", total.cpu, new.cpu),
        ("resources.gpu", total.gpu, new.gpu),
        (
            "resources.memory_bytes",
            total.memory_bytes,
            new.memory_bytes as f64,
        ),
    ] {
        if want > have {
            short.push((field.to_string(), format!("{want} > {have}")));
        }
    }
    for (name, &amount) in &new.custom {
        if settings.licenses.iter().any(|l| &l.name == name) {
            // Held to its count ([`refuse_if_beyond_license`]), not to the pool's.
            continue;
        }
        let have = custom::lookup(name).map_or(0.0, |k| total.custom.get(k));
        if amount > have {
            short.push((
                format!("resources.custom.{name}"),
                format!("{amount} > {have}"),
            ));
        } else if let Some(k) = custom::lookup(name) {
            wanted.custom.set(k, amount);
        }
    }
    if short.is_empty() && wanted.fits_within(&total) {
        return Ok(());
    }
    let field = match short.as_slice() {
        [(field, _)] => field.clone(),
        _ => "resources".to_string(),
    };
    let what: Vec<String> = short.iter().map(|(f, x)| format!("{f}: {x}")).collect();
    Err(ApiError::invalid(
        field,
        format!(
            "pool {pool:?} is not large enough for this job ({}); a pool counts only the \
             resources of its capacity, so ask 0 of any other (cpu defaults to 1)",
            what.join(", ")
        ),
    ))
}

/// Refuses (422) a job no healthy cluster can hold even when empty, its custom
/// resources included, once some healthy cluster has reported its capacity. The field
/// is the one resource no cluster has enough of alone, where there is one (a GPU job
/// on CPU-only clusters names the GPUs, a QPU job on clusters without QPUs
/// `resources.custom.QPU`; on Ray's API `entrypoint_num_gpus`,
/// `entrypoint_resources.QPU`); `resources` when only the combination fails. The
/// message names what is short ([`crate::policy::short_of`] over the clusters'
/// totals).
///
/// A custom name this process has never seen is one no cluster reports: it is looked
/// up, never registered, so a client's names take none of the process's
/// [`crate::policy::custom::MAX_CUSTOM`] slots.
async fn refuse_if_too_large(
    s: &crate::actors::Scheduler,
    new: &crate::store::NewJob,
) -> Result<(), ApiError> {
    use crate::policy::{custom, Custom, Resources};
    let builtin = Resources::new(new.cpu, new.gpu, new.memory_bytes as f64);
    let mut wanted = Custom::EMPTY;
    let mut singles = Vec::new();
    for (name, &amount) in &new.custom {
        let field = format!("resources.custom.{name}");
        let Some(k) = custom::lookup(name) else {
            if s.fits_some_cluster(builtin).await.is_none() {
                // No cluster has reported yet: judged once one has (in the cycle).
                continue;
            }
            return Err(ApiError::invalid(
                field,
                format!(
                    "no healthy cluster has the resource {name:?}; see GET /v1/scheduler \
                     for cluster capacity"
                ),
            ));
        };
        wanted.set(k, amount);
        let mut one = Custom::EMPTY;
        one.set(k, amount);
        singles.push((field, Resources::ZERO.with_custom(one)));
    }
    let request = builtin.with_custom(wanted);
    if s.fits_some_cluster(request).await != Some(false) {
        return Ok(());
    }
    let mut field = "resources".to_string();
    let alone = [
        (
            "resources.cpu".to_string(),
            Resources::new(new.cpu, 0.0, 0.0),
        ),
        (
            "resources.gpu".to_string(),
            Resources::new(0.0, new.gpu, 0.0),
        ),
        (
            "resources.memory_bytes".to_string(),
            Resources::new(0.0, 0.0, new.memory_bytes as f64),
        ),
    ];
    for (name, one) in alone.into_iter().chain(singles) {
        if s.fits_some_cluster(one).await == Some(false) {
            field = name;
            break;
        }
    }
    let short = s.short_of_every_cluster(&request);
    let short = if short.is_empty() {
        String::new()
    } else {
        format!(" (short of {})", short.join(", "))
    };
    let custom = if new.custom.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = new.custom.iter().map(|(n, x)| format!("{n}={x}")).collect();
        format!(", {}", list.join(", "))
    };
    Err(ApiError::invalid(
        field,
        format!(
            "no healthy cluster is large enough for cpu={}, gpu={}, memory_bytes={}{custom}{short}; \
             see GET /v1/scheduler for cluster capacity",
            new.cpu, new.gpu, new.memory_bytes
        ),
    ))
}
