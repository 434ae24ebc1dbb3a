//! Ray's State API (Ray docs, "Ray State API": `GET /api/v0/actors`,
//! `GET /api/v0/tasks` on the dashboard): what every job holds right now, so that a
//! job is charged what it uses on Ray, not only what it declared (DESIGN §2, "What is
//! charged"; issue 32).
//!
//! A job submitted through the Jobs API holds, while it runs: its entrypoint's
//! reservation (`entrypoint_num_cpus` ...), held by the `JobSupervisor` actor named
//! `_ray_internal_job_actor_<submission_id>`; and whatever its driver starts, under
//! the driver's job id (hex, e.g. `02000000`, `job_id` in `GET /api/jobs/`): the
//! `required_resources` of its RUNNING normal tasks and of its ALIVE actors. An actor
//! being created is counted once it is ALIVE (its creation task is left out); tasks
//! of a placement group name their group's resources and are left out.

use std::collections::HashMap;

use serde::Deserialize;

use super::error::{decode, status_error, RayError};
use super::{RayClient, RayResources};

/// The prefix of the `JobSupervisor` actor's name; the submission id follows.
pub const SUPERVISOR_PREFIX: &str = "_ray_internal_job_actor_";

/// Most entries asked of one State API call. Ray's own default is 100; its hard
/// limit (`RAY_MAX_LIMIT_FROM_API_SERVER`) is 10,000. More alive entries than this
/// are reported as a truncated answer and the poll falls back to Ray's usage report.
pub const STATE_LIMIT: usize = 10_000;

/// What is alive on one cluster, by holder (cores, GPUs, bytes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Holdings {
    /// Per submission id: what its entrypoint holds (its `JobSupervisor` actor).
    pub entrypoints: HashMap<String, RayResources>,
    /// Per driver job id: what its RUNNING normal tasks and ALIVE actors hold.
    pub by_driver: HashMap<String, RayResources>,
    /// Everything alive, every tenant.
    pub total: RayResources,
}

impl Holdings {
    /// What the job `submission_id` (driver job id `driver`, once Ray knows it) holds,
    /// or `None` when its entrypoint holds nothing yet (not started in Ray).
    pub fn of(&self, submission_id: &str, driver: Option<&str>) -> Option<RayResources> {
        let entrypoint = *self.entrypoints.get(submission_id)?;
        let driver = driver
            .and_then(|d| self.by_driver.get(d))
            .copied()
            .unwrap_or_default();
        Some(entrypoint + driver)
    }

    /// These holdings less the entrypoint reservations of the jobs `ended` says Ray
    /// lists as ended (SUCCEEDED, FAILED, STOPPED; `ended(submission_id)`). Ray marks a
    /// job ended when its driver exits, and its `JobSupervisor` actor, which holds the
    /// reservation, exits a moment later; a reading taken in between would count that
    /// reservation as another tenant's load, and the capacity it is about to free
    /// would wait for the next reading (measured on a 2-CPU head: a finish whose
    /// capacity went to the next job 0.5–0.85 s late, BENCHMARKS "The Ray edge"). A
    /// job dispatched into it waits in Ray's queue for those milliseconds, as in Ray's
    /// own. What an ended job's tasks and actors still hold (a detached actor) is
    /// still held, and stays in the total.
    #[must_use]
    pub fn without_ended(mut self, ended: impl Fn(&str) -> bool) -> Self {
        let mut freed = RayResources::default();
        self.entrypoints.retain(|sid, held| {
            let keep = !ended(sid);
            if !keep {
                freed += *held;
            }
            keep
        });
        self.total = self.total.saturating_sub(freed);
        self
    }
}

#[derive(Deserialize)]
struct Answer<T> {
    data: Data<T>,
}

#[derive(Deserialize)]
struct Data<T> {
    result: Listing<T>,
}

#[derive(Deserialize)]
struct Listing<T> {
    #[serde(default)]
    total: Option<u64>,
    result: Vec<T>,
}

#[derive(Deserialize)]
struct Actor {
    #[serde(default)]
    job_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    required_resources: HashMap<String, f64>,
}

#[derive(Deserialize)]
struct Task {
    #[serde(default)]
    job_id: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    required_resources: HashMap<String, f64>,
}

/// Ray's resource map as the resources the scheduler counts: cores, GPUs, bytes and
/// custom resources ([`super::client::custom_slot`]: not `node:…`, the object store
/// or an accelerator type; a name beyond the registry's room is left out).
fn resources(r: &HashMap<String, f64>) -> RayResources {
    let ok = |v: f64| v.is_finite() && v > 0.0;
    let get = |k: &str| r.get(k).copied().filter(|&v| ok(v)).unwrap_or(0.0);
    let mut out = RayResources::new(get("CPU"), get("GPU"), get("memory"));
    for (name, &amount) in r {
        if !ok(amount) {
            continue;
        }
        if let Some(k) = super::client::custom_slot(name) {
            out.custom.set(k, amount);
        }
    }
    out
}

impl RayClient {
    /// What is alive on the cluster now (two State API calls, concurrently).
    ///
    /// Errors: either call fails, answers something else than the State API's
    /// listing, or reports more alive entries than [`STATE_LIMIT`] (the figure would
    /// be short).
    pub async fn holdings(&self) -> Result<Holdings, RayError> {
        let (actors, tasks) = tokio::join!(
            self.state_list::<Actor>("actors", "ALIVE"),
            self.state_list::<Task>("tasks", "RUNNING"),
        );
        let mut h = Holdings::default();
        for a in actors? {
            let held = resources(&a.required_resources);
            h.total += held;
            match a
                .name
                .as_deref()
                .and_then(|n| n.strip_prefix(SUPERVISOR_PREFIX))
            {
                Some(sid) => {
                    h.entrypoints.insert(sid.to_string(), held);
                }
                None => {
                    if let Some(job) = a.job_id {
                        *h.by_driver.entry(job).or_default() += held;
                    }
                }
            }
        }
        for t in tasks? {
            if t.kind.as_deref() != Some("NORMAL_TASK") {
                continue;
            }
            if t.required_resources.keys().any(|k| k.contains("_group_")) {
                continue;
            }
            let held = resources(&t.required_resources);
            h.total += held;
            if let Some(job) = t.job_id {
                *h.by_driver.entry(job).or_default() += held;
            }
        }
        Ok(h)
    }

    async fn state_list<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        state: &str,
    ) -> Result<Vec<T>, RayError> {
        let endpoint = if what == "actors" {
            "GET /api/v0/actors"
        } else {
            "GET /api/v0/tasks"
        };
        let mut url = self.url(&["api", "v0", what]);
        url.query_pairs_mut()
            .append_pair("filter_keys", "state")
            .append_pair("filter_predicates", "=")
            .append_pair("filter_values", state)
            .append_pair("detail", "1")
            .append_pair("limit", &STATE_LIMIT.to_string());
        let (status, bytes) = self.execute(self.http.get(url), endpoint).await?;
        if !status.is_success() {
            return Err(status_error(status, &String::from_utf8_lossy(&bytes)));
        }
        let answer: Answer<T> = decode(endpoint, &bytes)?;
        let listing = answer.data.result;
        if listing.total.unwrap_or(0) > listing.result.len() as u64
            && listing.result.len() >= STATE_LIMIT
        {
            return Err(RayError::Decode {
                endpoint: endpoint.to_owned(),
                detail: format!("more than {STATE_LIMIT} alive entries; the listing is truncated"),
            });
        }
        Ok(listing.result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_holds_its_entrypoint_and_what_its_driver_started() {
        let mut h = Holdings::default();
        h.entrypoints
            .insert("j1".into(), RayResources::new(1.0, 0.0, 0.0));
        h.by_driver
            .insert("02000000".into(), RayResources::new(1.5, 1.0, 0.0));
        assert_eq!(
            h.of("j1", Some("02000000")),
            Some(RayResources::new(2.5, 1.0, 0.0))
        );
        assert_eq!(h.of("j1", None), Some(RayResources::new(1.0, 0.0, 0.0)));
        assert_eq!(h.of("j2", Some("02000000")), None, "not started in Ray");
        let r: HashMap<String, f64> = [
            ("CPU".into(), 0.5),
            ("memory".into(), 1e9),
            ("QPU".into(), 1.0),
            ("GPU".into(), f64::NAN),
        ]
        .into_iter()
        .collect();
        let qpu = crate::policy::Custom::from_names([("QPU", 1.0)]).unwrap();
        assert_eq!(
            resources(&r),
            RayResources::new(0.5, 0.0, 1e9).with_custom(qpu),
            "custom resources count; a NaN does not"
        );
        let r: HashMap<String, f64> = [
            ("CPU".into(), 1.0),
            ("node:10.0.0.1".into(), 0.001),
            ("accelerator_type:A100".into(), 1.0),
            ("object_store_memory".into(), 1e6),
            ("CPU_group_0_abc".into(), 1.0),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            resources(&r),
            RayResources::new(1.0, 0.0, 0.0),
            "node, accelerator type, object store and placement-group resources are not custom"
        );
    }

    #[test]
    fn an_ended_jobs_entrypoint_is_about_to_be_free_but_its_detached_actor_is_held() {
        let mut h = Holdings::default();
        h.entrypoints
            .insert("ended".into(), RayResources::new(1.0, 0.0, 0.0));
        h.entrypoints
            .insert("running".into(), RayResources::new(0.5, 0.0, 0.0));
        // The ended job's driver left a detached actor of 0.25 CPU.
        h.by_driver
            .insert("01000000".into(), RayResources::new(0.25, 0.0, 0.0));
        h.total = RayResources::new(1.75, 0.0, 0.0);
        let h = h.without_ended(|sid| sid == "ended");
        assert_eq!(h.total, RayResources::new(0.75, 0.0, 0.0));
        assert_eq!(
            h.of("ended", Some("01000000")),
            None,
            "no longer holds its entrypoint"
        );
        assert_eq!(
            h.of("running", None),
            Some(RayResources::new(0.5, 0.0, 0.0))
        );
        assert_eq!(
            h.by_driver.get("01000000"),
            Some(&RayResources::new(0.25, 0.0, 0.0)),
            "what the ended driver started is still held"
        );
    }
}
