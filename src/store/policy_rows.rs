//! A row as the policy takes it, made in one place for the actors and the estimates
//! alike: a job's request ([`resources_of`]), a queued job ([`summary`]), a stored
//! `max_resources` ([`resource_cap`]) and a group ([`group_view`]).

use entity::{group, job};

use crate::policy::{GroupView, QueuedJob, Resources};

/// A job row's request as the policy counts it: cores, GPUs, bytes and its custom
/// resources ([`super::jobs::custom_of`]; the one place a row's resources are converted; a
/// negative byte count, which intake never stores, counts as 0).
///
/// Custom names are registered ([`crate::policy::custom::slot`]). A name that cannot
/// be (the process already knows [`crate::policy::custom::MAX_CUSTOM`] others, which
/// takes a restart after the clusters' names changed) makes the request fit nowhere:
/// its cores count as NaN, which never fits ([`Resources`]), so the job
/// waits (no cluster large enough) rather than going to Ray without its resource.
pub fn resources_of(j: &job::Model) -> Resources {
    use crate::policy::custom::Custom;
    let mut r = Resources::new(j.cpu, j.gpu, j.memory_bytes.max(0) as f64);
    let custom = super::jobs::custom_of(j);
    if custom.is_empty() {
        return r;
    }
    match Custom::from_names(custom.iter().map(|(n, &x)| (n.as_str(), x))) {
        Ok(c) => r.custom = c,
        Err(e) => {
            tracing::warn!(job_id = %j.id, error = %e, "a job's custom resource cannot be counted; it waits");
            r.cpu = f64::NAN;
        }
    }
    r
}

/// The policy's summary of a job row: resources in cores/GPUs/bytes, submit time in
/// seconds since the Unix epoch.
pub(crate) fn summary(j: &job::Model) -> QueuedJob {
    QueuedJob {
        job_id: j.id,
        resources: resources_of(j),
        priority: j.priority,
        submitted_at: j.submitted_at.timestamp_micros() as f64 / 1e6,
        // `None` here means "the configured default": the arbiter fills it in.
        runtime_estimate: j.max_runtime_s.map(|s| s as f64),
        // A pool job is preempted too: its runner is asked to stop it (DESIGN §3,
        // "Admission").
        preemptible: j.preemptible,
        preemptions: u32::try_from(j.preemptions).unwrap_or(0),
        pool: j.pool.clone(),
    }
}

/// A stored `max_resources` (`{"cpu": .., "gpu": .., "memory_bytes": ..}`, a user's
/// or a group's) as the policy takes it; a missing key caps nothing.
pub(crate) fn resource_cap(v: &serde_json::Value) -> Resources {
    let cap = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
    Resources::new(
        cap("cpu").unwrap_or(f64::INFINITY),
        cap("gpu").unwrap_or(f64::INFINITY),
        cap("memory_bytes").unwrap_or(f64::INFINITY),
    )
}

/// A stored group as the policy takes it: a missing limit is no limit; a
/// `max_resources` key that is missing caps nothing (as users').
pub(crate) fn group_view(g: &group::Model) -> GroupView {
    GroupView {
        path: g.path.clone(),
        weight: g.weight,
        paused: g.paused,
        max_running_jobs: g.max_running_jobs.map_or(u32::MAX, |v| v.max(0) as u32),
        max_resources: g.max_resources.as_ref().map(resource_cap),
    }
}
