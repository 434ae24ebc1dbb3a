//! Ray's `JobSubmitRequest` as a `/v1` submission: who the user is, the resource
//! mapping, and Ray's field names in errors.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::api::auth::Identity;
use crate::api::body::numbers::Written;
use crate::api::body::whole;
use crate::api::jobs::{ResourcesIn, SubmitRequest};
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
];

/// The metadata key naming the user a job is for, when the token acts for many users.
pub const USER_KEY: &str = "fairshare.user";

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
    /// String to string; `fairshare.user` names the user (see [`user_of`]).
    pub metadata: Option<BTreeMap<String, String>>,
    /// Cores (Ray's default 0; see [`RaySubmitRequest::into_submit`]).
    pub entrypoint_num_cpus: Option<f64>,
    /// GPUs.
    pub entrypoint_num_gpus: Option<f64>,
    /// Bytes.
    #[serde(default, deserialize_with = "whole::opt")]
    pub entrypoint_memory: Option<u64>,
    /// Only `CPU`, `GPU` and `memory` are accepted (they map onto the three above);
    /// custom resources are refused (422): fair share counts cpu, gpu and memory.
    pub entrypoint_resources: Option<BTreeMap<String, f64>>,
    /// Refused unless empty (422): fairshare places jobs on clusters, not nodes.
    pub entrypoint_label_selector: Option<BTreeMap<String, String>>,
}

/// The user a request acts for: the token's own `user`, else
/// `metadata["fairshare.user"]` (a token acting for many users, as a gateway's does, or
/// no token configured). A token with a user may repeat it there but not name another.
///
/// Errors: 422 on `metadata.fairshare.user` when no user is named, or another than the
/// token's.
pub fn user_of(
    who: &Identity,
    metadata: Option<&BTreeMap<String, String>>,
) -> Result<String, ApiError> {
    let named = metadata.and_then(|m| m.get(USER_KEY));
    let field = format!("metadata.{USER_KEY}");
    match (&who.user, named) {
        (Some(own), None) => Ok(own.clone()),
        (Some(own), Some(n)) if n == own => Ok(own.clone()),
        (Some(own), Some(n)) => Err(ApiError::invalid(
            field,
            format!("this token submits as user {own:?}; it cannot submit for {n:?}"),
        )),
        (None, Some(n)) => Ok(n.clone()),
        (None, None) => Err(ApiError::invalid(
            field,
            format!(
                "no user: this token acts for many users, so each job names its user in \
                 metadata[\"{USER_KEY}\"] (or configure the token with a user)"
            ),
        )),
    }
}

/// `/v1` field names in errors → Ray's.
pub(super) fn ray_field(field: &str) -> String {
    match field {
        "user" => format!("metadata.{USER_KEY}"),
        other => ray_name(other).to_string(),
    }
}

/// The Ray name of a `/v1` payload field (`payload_differences` names these).
pub(super) fn ray_name(field: &str) -> &str {
    match field {
        "external_id" => "submission_id",
        "resources.cpu" | "resources" => "entrypoint_num_cpus",
        "resources.gpu" => "entrypoint_num_gpus",
        "resources.memory_bytes" => "entrypoint_memory",
        other => other,
    }
}

impl RaySubmitRequest {
    /// The `/v1` submission this is, for `user`. Resources: `entrypoint_num_cpus`,
    /// `_gpus`, `_memory` (or `CPU`, `GPU`, `memory` in `entrypoint_resources`). With
    /// none of them the job counts as 1 CPU, as on `/v1` (Ray's default is 0, which
    /// fair share cannot count), and Ray reserves that CPU for its driver; with GPUs
    /// and no CPUs it is 0 CPUs, as in Ray.
    ///
    /// Errors: 422 naming Ray's field.
    pub fn into_submit(self, user: String) -> Result<SubmitRequest, ApiError> {
        let mut cpu = self.entrypoint_num_cpus;
        let mut gpu = self.entrypoint_num_gpus;
        let mut memory = self.entrypoint_memory;
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
                    return Err(ApiError::invalid(
                        field,
                        "custom resources are not supported: fair share counts CPU, GPU and \
                         memory (entrypoint_num_cpus, entrypoint_num_gpus, entrypoint_memory)",
                    ))
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
        Ok(SubmitRequest {
            user,
            entrypoint: self.entrypoint,
            runtime_env: self.runtime_env,
            resources: Some(ResourcesIn {
                cpu,
                gpu,
                memory_bytes: memory,
            }),
            priority: None,
            metadata: self.metadata,
            external_id: submission_id,
            max_runtime_s: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Role;
    use serde_json::json;

    fn who(user: Option<&str>) -> Identity {
        Identity {
            role: Role::Submitter,
            user: user.map(str::to_string),
        }
    }

    fn md(user: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(USER_KEY.to_string(), user.to_string())])
    }

    #[test]
    fn the_user_is_the_tokens_own_else_the_one_metadata_names() {
        assert_eq!(user_of(&who(Some("alice")), None).unwrap(), "alice");
        assert_eq!(
            user_of(&who(Some("alice")), Some(&md("alice"))).unwrap(),
            "alice"
        );
        assert_eq!(user_of(&who(None), Some(&md("bob"))).unwrap(), "bob");
        let other = user_of(&who(Some("alice")), Some(&md("bob"))).unwrap_err();
        assert!(
            matches!(other, ApiError::Invalid { ref field, .. } if field == "metadata.fairshare.user")
        );
        let none = user_of(&who(None), Some(&BTreeMap::new())).unwrap_err();
        assert!(
            matches!(none, ApiError::Invalid { ref field, .. } if field == "metadata.fairshare.user")
        );
    }

    fn request(body: Value) -> RaySubmitRequest {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn entrypoint_resources_map_onto_cpu_gpu_memory_and_custom_ones_are_refused() {
        let s = request(json!({"entrypoint": "x", "entrypoint_resources": {"CPU": 2.0, "GPU": 1.0, "memory": 1024.0}}))
            .into_submit("u".into())
            .unwrap();
        let r = s.resources.unwrap();
        assert_eq!(
            (r.cpu, r.gpu, r.memory_bytes),
            (Some(2.0), Some(1.0), Some(1024))
        );
        let err = request(json!({"entrypoint": "x", "entrypoint_resources": {"TPU": 1.0}}))
            .into_submit("u".into())
            .unwrap_err();
        assert!(
            matches!(err, ApiError::Invalid { ref field, .. } if field == "entrypoint_resources.TPU")
        );
        let err = request(json!({"entrypoint": "x", "entrypoint_num_cpus": 1, "entrypoint_resources": {"CPU": 2.0}}))
            .into_submit("u".into())
            .unwrap_err();
        assert!(
            matches!(err, ApiError::Invalid { ref field, .. } if field == "entrypoint_resources.CPU")
        );
    }

    #[test]
    fn a_gpu_job_without_cpus_asks_for_no_cpu_and_a_bare_job_for_one() {
        let gpu = request(json!({"entrypoint": "x", "entrypoint_num_gpus": 1}))
            .into_submit("u".into())
            .unwrap()
            .into_new_job()
            .unwrap();
        assert_eq!((gpu.cpu, gpu.gpu), (0.0, 1.0));
        let bare = request(json!({"entrypoint": "x"}))
            .into_submit("u".into())
            .unwrap()
            .into_new_job()
            .unwrap();
        assert_eq!((bare.cpu, bare.gpu), (1.0, 0.0));
    }
}
