//! The body of `POST /v1/jobs` and its checks: limits, user ids, resource amounts, and
//! the conversion into the store's [`NewJob`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::body::{object, whole};
use super::error::ApiError;
use crate::store::NewJob;

/// Longest accepted user id, in characters.
pub const MAX_USER_LEN: usize = 128;
/// Longest accepted entrypoint, in bytes (Ray passes it to a shell; 64 KiB is far more
/// than any real command line).
pub const MAX_ENTRYPOINT_BYTES: usize = 65_536;
/// Longest accepted external id, in characters.
pub const MAX_EXTERNAL_ID_LEN: usize = 256;
/// Accepted priority range (higher runs first within the user's queue).
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -1000..=1000;
/// Most metadata entries, and longest key and value, in characters.
pub const MAX_METADATA_ENTRIES: usize = 64;
pub const MAX_METADATA_KEY_LEN: usize = 128;
pub const MAX_METADATA_VALUE_LEN: usize = 4096;
/// Largest accepted runtime_env, serialized, in bytes.
pub const MAX_RUNTIME_ENV_BYTES: usize = 262_144;
/// Longest accepted max_runtime_s: one year, in seconds.
pub const MAX_RUNTIME_S: i64 = 31_536_000;
/// Largest accepted resource request per job: cores and GPUs (well past any cluster).
pub const MAX_CORES: f64 = 1.0e6;
/// Resources a job asks for. Absent fields take their defaults.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourcesIn {
    /// Cores, 0 to 1e6 with at most 4 decimal places (default 1). A job needs
    /// cpu > 0 or gpu > 0.
    #[schema(minimum = 0.0, maximum = 1000000.0, multiple_of = 0.0001)]
    pub cpu: Option<f64>,
    /// GPUs, 0 to 1e6 with at most 4 decimal places (default 0).
    #[schema(minimum = 0.0, maximum = 1000000.0, multiple_of = 0.0001)]
    pub gpu: Option<f64>,
    /// Bytes (default 0).
    #[serde(default, deserialize_with = "whole::opt")]
    #[schema(minimum = 0, maximum = 9223372036854775807_u64)]
    pub memory_bytes: Option<u64>,
}

/// `POST /v1/jobs` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// The gateway's user id: 1–128 characters, no whitespace, control or zero-width
    /// characters, not `.` or `..` (they cannot stand in a URL path).
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^(?!\.\.?$)[^\s\x00-\x1f\x7f-\x9f\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ufffd]+$"
    )]
    pub user: String,
    /// The command Ray runs, 1–65536 bytes, not only whitespace (Unicode White_Space),
    /// no NUL.
    #[schema(
        min_length = 1,
        max_length = 65536,
        pattern = r"^[^\x00]*[^\x00\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub entrypoint: String,
    /// Ray runtime_env, passed through as is (a JSON object).
    #[schema(value_type = Option<Object>)]
    pub runtime_env: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "object::opt")]
    pub resources: Option<ResourcesIn>,
    /// -1000..=1000, default 0; higher runs first within the user's queue.
    #[serde(default, deserialize_with = "whole::opt")]
    #[schema(minimum = -1000, maximum = 1000)]
    pub priority: Option<i32>,
    /// String to string, passed to Ray as job metadata: at most 64 entries, keys
    /// 1–128 characters, values at most 4096, no NUL.
    pub metadata: Option<BTreeMap<String, String>>,
    /// The gateway's id for this job (an idempotency key). A retry with the same
    /// (user, external_id) and the same payload returns the existing job with 200; the
    /// same key with a different payload is 422 `idempotency_key_reused`. 1–256
    /// characters, no NUL.
    #[schema(min_length = 1, max_length = 256, pattern = r"^[^\x00]*$")]
    pub external_id: Option<String>,
    /// Seconds, 1 to 31536000 (a year); the job is stopped when it runs longer
    /// (default: scheduler.default_max_runtime).
    #[serde(default, deserialize_with = "whole::opt")]
    #[schema(minimum = 1, maximum = 31536000)]
    pub max_runtime_s: Option<i64>,
}

/// Zero-width and bidirectional-control characters: they would let two user ids that
/// look the same on screen be different users.
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}' | '\u{00AD}')
}

/// Checks a user id (also used by the users API).
pub fn validate_user_id(field: &str, user: &str) -> Result<(), ApiError> {
    if user.is_empty() {
        return Err(ApiError::invalid(field, "must not be empty"));
    }
    if user.chars().count() > MAX_USER_LEN {
        return Err(ApiError::invalid(
            field,
            format!("must be at most {MAX_USER_LEN} characters"),
        ));
    }
    if user
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || is_invisible(c))
    {
        return Err(ApiError::invalid(
            field,
            "must not contain whitespace, control or invisible (zero-width) characters",
        ));
    }
    if user.contains(char::REPLACEMENT_CHARACTER) {
        // What a path or query with bytes that are not UTF-8 decodes to: never make a
        // user of an id the client did not send.
        return Err(ApiError::invalid(
            field,
            "must be UTF-8 (U+FFFD, the replacement character, is refused)",
        ));
    }
    // `/v1/users/../pause` is normalised away by browsers and HTTP clients: such a user
    // could never be addressed in a path.
    if user == "." || user == ".." {
        return Err(ApiError::invalid(
            field,
            "must not be `.` or `..` (they cannot be used in a URL path)",
        ));
    }
    Ok(())
}

/// Checks an `external_id` (a submission's, or the job list's filter): 1 to
/// [`MAX_EXTERNAL_ID_LEN`] characters, no NUL. Errors: 422 naming `field`.
pub fn validate_external_id(field: &str, ext: &str) -> Result<(), ApiError> {
    if ext.is_empty() || ext.chars().count() > MAX_EXTERNAL_ID_LEN {
        return Err(ApiError::invalid(
            field,
            format!("must be 1 to {MAX_EXTERNAL_ID_LEN} characters"),
        ));
    }
    if ext.contains('\0') {
        return Err(ApiError::invalid(field, "must not contain NUL characters"));
    }
    Ok(())
}

/// Ray's resource granularity: fractional amounts have at most 4 decimal places
/// (Ray refuses `num_cpus` finer than 0.0001).
pub const RESOURCE_STEP: f64 = 0.0001;

/// Checks a resource amount: finite, >= 0, at most [`MAX_CORES`], a multiple of
/// [`RESOURCE_STEP`].
pub fn validate_amount(field: &str, v: f64) -> Result<(), ApiError> {
    if !v.is_finite() {
        return Err(ApiError::invalid(field, "must be a finite number"));
    }
    if v < 0.0 {
        return Err(ApiError::invalid(field, "must be >= 0"));
    }
    if v > MAX_CORES {
        return Err(ApiError::invalid(
            field,
            format!("must be at most {MAX_CORES}"),
        ));
    }
    let steps = v / RESOURCE_STEP;
    // Tolerance for binary floating point: 1e-6 of a step, relatively more for huge values.
    let off_grid = (steps - steps.round()).abs() > 1e-6_f64.max(steps.abs() * 1e-12);
    if off_grid || (v > 0.0 && steps.round() == 0.0) {
        return Err(ApiError::invalid(
            field,
            "must have at most 4 decimal places (Ray's resource precision is 0.0001)",
        ));
    }
    Ok(())
}

impl SubmitRequest {
    /// Validates every field and applies defaults. Errors name the field (422).
    pub fn into_new_job(self) -> Result<NewJob, ApiError> {
        validate_user_id("user", &self.user)?;
        if self.entrypoint.trim().is_empty() {
            return Err(ApiError::invalid("entrypoint", "must not be empty"));
        }
        if self.entrypoint.len() > MAX_ENTRYPOINT_BYTES {
            return Err(ApiError::invalid(
                "entrypoint",
                format!("must be at most {MAX_ENTRYPOINT_BYTES} bytes"),
            ));
        }
        if self.entrypoint.contains('\0') {
            return Err(ApiError::invalid(
                "entrypoint",
                "must not contain NUL characters",
            ));
        }
        let r = self.resources.unwrap_or_default();
        // `+ 0.0` turns a -0.0 into 0.0 (shown as sent otherwise).
        let cpu = r.cpu.unwrap_or(1.0) + 0.0;
        let gpu = r.gpu.unwrap_or(0.0) + 0.0;
        validate_amount("resources.cpu", cpu)?;
        validate_amount("resources.gpu", gpu)?;
        if cpu <= 0.0 && gpu <= 0.0 {
            return Err(ApiError::invalid(
                "resources.cpu",
                "a job needs cpu > 0 or gpu > 0",
            ));
        }
        let memory = r.memory_bytes.unwrap_or(0);
        let memory_bytes = i64::try_from(memory)
            .map_err(|_| ApiError::invalid("resources.memory_bytes", "is too large"))?;
        let priority = self.priority.unwrap_or(0);
        if !PRIORITY_RANGE.contains(&priority) {
            return Err(ApiError::invalid(
                "priority",
                format!(
                    "must be between {} and {}",
                    PRIORITY_RANGE.start(),
                    PRIORITY_RANGE.end()
                ),
            ));
        }
        if let Some(env) = &self.runtime_env {
            if !env.is_object() {
                return Err(ApiError::invalid("runtime_env", "must be a JSON object"));
            }
            if env.to_string().len() > MAX_RUNTIME_ENV_BYTES {
                return Err(ApiError::invalid(
                    "runtime_env",
                    format!("must be at most {MAX_RUNTIME_ENV_BYTES} bytes"),
                ));
            }
        }
        if let Some(md) = &self.metadata {
            if md.len() > MAX_METADATA_ENTRIES {
                return Err(ApiError::invalid(
                    "metadata",
                    format!("must have at most {MAX_METADATA_ENTRIES} entries"),
                ));
            }
            for (k, v) in md {
                if k.is_empty() || k.chars().count() > MAX_METADATA_KEY_LEN {
                    return Err(ApiError::invalid(
                        format!("metadata.{k}"),
                        format!("keys must be 1 to {MAX_METADATA_KEY_LEN} characters"),
                    ));
                }
                if v.chars().count() > MAX_METADATA_VALUE_LEN {
                    return Err(ApiError::invalid(
                        format!("metadata.{k}"),
                        format!("values must be at most {MAX_METADATA_VALUE_LEN} characters"),
                    ));
                }
            }
        }
        if let Some(ext) = &self.external_id {
            validate_external_id("external_id", ext)?;
        }
        if let Some(s) = self.max_runtime_s {
            if !(1..=MAX_RUNTIME_S).contains(&s) {
                return Err(ApiError::invalid(
                    "max_runtime_s",
                    format!("must be between 1 and {MAX_RUNTIME_S} seconds"),
                ));
            }
        }
        Ok(NewJob {
            user: self.user,
            external_id: self.external_id,
            priority,
            entrypoint: self.entrypoint,
            runtime_env: self.runtime_env,
            metadata: self
                .metadata
                .map(|m| serde_json::to_value(m).unwrap_or_default()),
            cpu,
            gpu,
            memory_bytes,
            max_runtime_s: self.max_runtime_s,
        })
    }
}
