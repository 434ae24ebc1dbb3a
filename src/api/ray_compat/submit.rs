//! Ray's `JobSubmitRequest` as a `/v1` submission: who the user is, the resource
//! mapping, and Ray's field names in errors.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::api::body::numbers::Written;
use crate::api::body::whole;
use crate::api::submit::{ResourcesIn, SubmitRequest};
use crate::api::ApiError;

/// The numbers of Ray's submit body checked as written
/// ([`crate::api::body::numbers::check`]), under Ray's field names.
pub const RAY_SUBMIT_NUMBERS: &[(&str, Written)] = &[
    ("entrypoint_num_cpus", Written::Resource),
    ("entrypoint_num_gpus", Written::Resource),
    ("entrypoint_memory", Written::Whole),
    ("entrypoint_resources.CPU", Written::Resource),
    ("entrypoint_resources.GPU", Written::Resource),
    ("entrypoint_resources.memory", Written::Whole),
    ("entrypoint_resources.*", Written::Resource),
    ("runtime_env", Written::Integers64),
];

pub use super::identity::USER_KEY;

/// Ray's `JobSubmitRequest`, field for field (Ray 2.60). Ray's client drops fields
/// that are `None`, so absent and `null` mean the same.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RaySubmitRequest {
    /// Shell command Ray runs.
    pub entrypoint: String,
    /// The client's id for the job: the idempotency key per user (`external_id`).
    pub submission_id: Option<String>,
    /// Ray's deprecated name of `submission_id`.
    pub job_id: Option<String>,
    /// Passed to Ray as is; `working_dir`/`py_modules` URIs of uploaded packages are
    /// sent to the cluster before the submit.
    pub runtime_env: Option<Value>,
    /// String to string; `fairshare.user` names the user by default
    /// ([`super::identity::user_of`]).
    pub metadata: Option<BTreeMap<String, String>>,
    /// Cores (Ray's default 0; see [`RaySubmitRequest::into_submit`]).
    pub entrypoint_num_cpus: Option<f64>,
    /// GPUs.
    pub entrypoint_num_gpus: Option<f64>,
    /// Bytes.
    #[serde(default, deserialize_with = "whole::opt")]
    pub entrypoint_memory: Option<u64>,
    /// `CPU`, `GPU` and `memory` map onto the three above; any other name is a custom
    /// resource (`resources.custom` of `/v1`, checked as there: 422 naming
    /// `entrypoint_resources.NAME`), passed to Ray as such.
    pub entrypoint_resources: Option<BTreeMap<String, f64>>,
    /// Refused unless empty (422): fairshare places jobs on clusters, not nodes.
    pub entrypoint_label_selector: Option<BTreeMap<String, String>>,
}

/// `/v1` field names in errors → Ray's.
/// The metadata key by which a job submitted through Ray's Jobs API says whether it
/// may be preempted: `"true"` or `"false"` (absent: its user's default). Kept in the
/// job's metadata as given.
pub const PREEMPTIBLE_KEY: &str = "fairshare.preemptible";

/// The metadata key by which a job submitted through Ray's Jobs API names the pool it
/// must run in (issue 30; `pool` on `/v1/jobs`). Kept in the job's metadata as given.
pub const POOL_KEY: &str = "fairshare.pool";

pub(super) fn ray_field(field: &str) -> String {
    match field {
        "user" => format!("metadata.{USER_KEY}"),
        other => match other.strip_prefix("resources.custom.") {
            Some(name) => format!("entrypoint_resources.{name}"),
            None => ray_name(other).to_string(),
        },
    }
}

/// The Ray name of a `/v1` payload field (`payload_differences` names these).
pub(super) fn ray_name(field: &str) -> &str {
    match field {
        "external_id" => "submission_id",
        "resources.cpu" | "resources" => "entrypoint_num_cpus",
        "resources.gpu" => "entrypoint_num_gpus",
        "resources.memory_bytes" => "entrypoint_memory",
        "resources.custom" => "entrypoint_resources",
        "preemptible" => "metadata.fairshare.preemptible",
        "pool" => "metadata.fairshare.pool",
        "size" => "metadata.fairshare.size",
        other => other,
    }
}

impl RaySubmitRequest {
    /// The `/v1` submission this is, for `user`. Resources: `entrypoint_num_cpus`,
    /// `_gpus`, `_memory` (or `CPU`, `GPU`, `memory` in `entrypoint_resources`). With
    /// none of them the job asks for `defaults` (`ray_compat.default_resources`, 1 CPU
    /// unless configured: Ray's default is 0, which fair share cannot count), and Ray
    /// reserves them for its driver; with GPUs and no CPUs it is 0 CPUs, as in Ray.
    ///
    /// Errors: 422 naming Ray's field.
    pub fn into_submit(
        self,
        user: String,
        defaults: &crate::config::DefaultResources,
    ) -> Result<SubmitRequest, ApiError> {
        let declared = self.entrypoint_num_cpus.is_some()
            || self.entrypoint_num_gpus.is_some()
            || self.entrypoint_memory.is_some()
            || self
                .entrypoint_resources
                .as_ref()
                .is_some_and(|r| !r.is_empty());
        let mut cpu = self.entrypoint_num_cpus;
        let mut gpu = self.entrypoint_num_gpus;
        let mut memory = self.entrypoint_memory;
        let mut custom = BTreeMap::new();
        for (key, amount) in self.entrypoint_resources.unwrap_or_default() {
            let field = format!("entrypoint_resources.{key}");
            let twice = || {
                ApiError::invalid(
                    field.clone(),
                    "given twice (also as entrypoint_num_*/entrypoint_memory)",
                )
            };
            match key.as_str() {
                "CPU" if cpu.is_none() => cpu = Some(amount),
                "GPU" if gpu.is_none() => gpu = Some(amount),
                "memory" if memory.is_none() => {
                    if !(amount.is_finite() && amount >= 0.0 && amount.fract() == 0.0) {
                        return Err(ApiError::invalid(field, "must be a whole number of bytes"));
                    }
                    memory = Some(amount as u64);
                }
                "CPU" | "GPU" | "memory" => return Err(twice()),
                _ => {
                    custom.insert(key, amount);
                }
            }
        }
        if self
            .entrypoint_label_selector
            .is_some_and(|s| !s.is_empty())
        {
            return Err(ApiError::invalid(
                "entrypoint_label_selector",
                "not supported: fairshare chooses the cluster, Ray the node",
            ));
        }
        if cpu.is_none() && gpu.is_some_and(|g| g > 0.0) {
            cpu = Some(0.0);
        }
        // A named size (issue 48) stands for the resources: `with_size` fills them.
        let sized = self
            .metadata
            .as_ref()
            .is_some_and(|m| m.contains_key(crate::store::SIZE_KEY));
        if sized && declared {
            return Err(ApiError::invalid(
                format!("metadata.{}", crate::store::SIZE_KEY),
                "give either a size or entrypoint resources, not both",
            ));
        }
        if !declared && !sized {
            cpu = Some(defaults.cpu);
            gpu = Some(defaults.gpu);
            memory = Some(defaults.memory_bytes);
        }
        let submission_id = match (self.submission_id, self.job_id) {
            (Some(a), Some(b)) if a != b => {
                return Err(ApiError::invalid(
                    "job_id",
                    "differs from submission_id (job_id is its deprecated name)",
                ))
            }
            (a, b) => a.or(b),
        };
        if let Some(id) = &submission_id {
            if id.trim().is_empty() || id.contains('/') || id.chars().any(char::is_control) {
                return Err(ApiError::invalid(
                    "submission_id",
                    "must be non-empty, without '/' or control characters (it is a URL path segment)",
                ));
            }
        }
        let preemptible = match self
            .metadata
            .as_ref()
            .and_then(|m| m.get(PREEMPTIBLE_KEY))
            .map(String::as_str)
        {
            None => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(_) => {
                return Err(ApiError::invalid(
                    format!("metadata.{PREEMPTIBLE_KEY}"),
                    "must be \"true\" or \"false\" (absent: the user's default)",
                ))
            }
        };
        let pool = self
            .metadata
            .as_ref()
            .and_then(|m| m.get(POOL_KEY))
            .cloned();
        Ok(SubmitRequest {
            pool,
            user,
            entrypoint: self.entrypoint,
            runtime_env: self.runtime_env,
            resources: (!sized).then_some(ResourcesIn {
                cpu,
                gpu,
                memory_bytes: memory,
                custom: (!custom.is_empty()).then_some(custom),
            }),
            size: None,
            priority: None,
            metadata: self.metadata,
            external_id: submission_id,
            max_runtime_s: None,
            preemptible,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn defaults() -> crate::config::DefaultResources {
        crate::config::Settings::defaults()
            .ray_compat
            .default_resources
    }

    fn request(body: Value) -> RaySubmitRequest {
        serde_json::from_value(body).unwrap()
    }

    /// The `/v1` submission of a Ray body, through `/v1`'s checks, with errors under
    /// Ray's names (as the handler renames them).
    fn ray_submit(body: Value) -> Result<crate::store::NewJob, ApiError> {
        request(body)
            .into_submit("u".into(), &defaults())?
            .into_new_job()
            .map_err(|e| match e {
                ApiError::Invalid { field, reason } => ApiError::Invalid {
                    field: ray_field(&field),
                    reason,
                },
                other => other,
            })
    }

    fn refused_on(r: Result<crate::store::NewJob, ApiError>, field: &str) -> bool {
        matches!(r, Err(ApiError::Invalid { field: ref f, .. }) if f == field)
    }

    #[test]
    fn entrypoint_resources_map_onto_cpu_gpu_memory_and_custom_ones_are_custom_resources() {
        let s = request(json!({"entrypoint": "x", "entrypoint_resources": {"CPU": 2.0, "GPU": 1.0, "memory": 1024.0}}))
            .into_submit("u".into(), &defaults())
            .unwrap();
        let r = s.resources.unwrap();
        assert_eq!(
            (r.cpu, r.gpu, r.memory_bytes),
            (Some(2.0), Some(1.0), Some(1024))
        );
        assert_eq!(r.custom, None);
        let job = ray_submit(json!({"entrypoint": "x", "entrypoint_num_cpus": 1,
            "entrypoint_resources": {"TPU": 1.0, "QPU": 0.5, "GPU": 1}}))
        .unwrap();
        assert_eq!((job.cpu, job.gpu), (1.0, 1.0));
        assert_eq!(
            job.custom,
            [("QPU".to_string(), 0.5), ("TPU".to_string(), 1.0)]
                .into_iter()
                .collect()
        );
        let err = request(json!({"entrypoint": "x", "entrypoint_num_cpus": 1, "entrypoint_resources": {"CPU": 2.0}}))
            .into_submit("u".into(), &defaults())
            .unwrap_err();
        assert!(
            matches!(err, ApiError::Invalid { ref field, .. } if field == "entrypoint_resources.CPU")
        );
    }

    /// Bad custom resources are 422 naming Ray's field, never accepted.
    #[test]
    fn bad_custom_entrypoint_resources_are_refused_naming_the_field() {
        for (resources, field) in [
            (json!({"Q P U": 1}), "entrypoint_resources.Q P U"),
            (json!({"1QPU": 1}), "entrypoint_resources.1QPU"),
            (
                json!({"node:10.0.0.1": 1}),
                "entrypoint_resources.node:10.0.0.1",
            ),
            (
                json!({"object_store_memory": 1}),
                "entrypoint_resources.object_store_memory",
            ),
            (json!({"QPU": -1}), "entrypoint_resources.QPU"),
            (json!({"QPU": 0}), "entrypoint_resources.QPU"),
            (json!({"QPU": 0.00001}), "entrypoint_resources.QPU"),
            (json!({"QPU": 2e6}), "entrypoint_resources.QPU"),
            (
                json!({"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1, "g": 1, "h": 1, "i": 1}),
                "entrypoint_resources",
            ),
        ] {
            let r = ray_submit(json!({"entrypoint": "x", "entrypoint_resources": resources}));
            assert!(refused_on(r, field), "{resources}: {field}");
        }
    }

    #[test]
    fn a_gpu_job_without_cpus_asks_for_no_cpu_and_a_bare_job_for_one() {
        let gpu = request(json!({"entrypoint": "x", "entrypoint_num_gpus": 1}))
            .into_submit("u".into(), &defaults())
            .unwrap()
            .into_new_job()
            .unwrap();
        assert_eq!((gpu.cpu, gpu.gpu), (0.0, 1.0));
        let bare = request(json!({"entrypoint": "x"}))
            .into_submit("u".into(), &defaults())
            .unwrap()
            .into_new_job()
            .unwrap();
        assert_eq!((bare.cpu, bare.gpu), (1.0, 0.0));
        let two = crate::config::DefaultResources {
            cpu: 2.0,
            gpu: 0.5,
            memory_bytes: 1024,
        };
        let bare = request(json!({"entrypoint": "x"}))
            .into_submit("u".into(), &two)
            .unwrap()
            .into_new_job()
            .unwrap();
        assert_eq!((bare.cpu, bare.gpu, bare.memory_bytes), (2.0, 0.5, 1024));
        let declared = request(json!({"entrypoint": "x", "entrypoint_memory": 10}))
            .into_submit("u".into(), &two)
            .unwrap()
            .into_new_job()
            .unwrap();
        assert_eq!(
            (declared.cpu, declared.memory_bytes),
            (1.0, 10),
            "a declared job keeps /v1's defaults"
        );
    }
}
