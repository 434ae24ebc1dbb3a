//! The checks of what a request says that more than one route makes, in one home: user
//! ids, external ids, resource amounts and custom resources, `memory_bytes`, weights,
//! job limits, resource caps and group paths. Each refuses with a 422 naming the field
//! it was given. The route modules import them from here, and this module imports no
//! route. The resource checks are [`crate::resources_check`]'s, which the
//! configuration's `[[sizes]]` share (a size is held to a job's rules); here they
//! become 422s.

use std::collections::BTreeMap;

use super::error::ApiError;
use super::shapes::ResourceLimit;
use crate::resources_check::{self, Refusal};

/// Longest accepted external id, in characters.
pub const MAX_EXTERNAL_ID_LEN: usize = 256;
pub use crate::policy::{MAX_WEIGHT, MIN_WEIGHT};
/// Largest accepted per-user job limits.
pub const MAX_JOB_LIMIT: i32 = 1_000_000;

/// Checks a user id (a submission's, a user's, a filter's): the rule of [`crate::user_id`], which
/// the configuration's `auth.tokens[].user` and the OpenAPI pattern share. Errors: 422
/// naming `field`, with the rule's reason.
pub fn validate_user_id(field: &str, user: &str) -> Result<(), ApiError> {
    match crate::user_id::problem(user) {
        Some(why) => Err(ApiError::invalid(field, why)),
        None => Ok(()),
    }
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

/// A shared check's refusal as the API's 422, naming the field it was given as.
fn refused(r: Refusal) -> ApiError {
    ApiError::invalid(r.field, r.reason)
}

/// Checks a resource amount: finite, >= 0, at most
/// [`MAX_CORES`](resources_check::MAX_CORES), with at most 4 decimal places
/// ([`resources_check::check_amount`]). Errors: 422 naming `field`.
pub fn validate_amount(field: &str, v: f64) -> Result<(), ApiError> {
    resources_check::check_amount(field, v).map_err(refused)
}

/// Checks `memory_bytes` (`field` names it): at most
/// [`MAX_WHOLE`](resources_check::MAX_WHOLE) (2^53), which the body's text is held to
/// as well; the column's `i64` ([`resources_check::check_memory_bytes`]). Errors: 422
/// naming `field`.
pub fn check_memory_bytes(field: &str, bytes: u64) -> Result<i64, ApiError> {
    resources_check::check_memory_bytes(field, bytes).map_err(refused)
}

/// Checks the custom resources of a job (`field` names the map, `resources.custom`):
/// [`resources_check::check_custom`]. Names are not registered here (a client's names
/// never take one of the process's slots; [`crate::api::accept`] refuses a name no
/// cluster reports). Errors: 422 naming the map, or `field.NAME`.
pub fn validate_custom(
    field: &str,
    custom: BTreeMap<String, f64>,
) -> Result<BTreeMap<String, f64>, ApiError> {
    resources_check::check_custom(field, custom).map_err(refused)
}

/// Checks a weight (`field` names it in the 422): finite, 1e-6 to 1e6.
pub(crate) fn check_weight(field: &str, w: f64) -> Result<(), ApiError> {
    if !w.is_finite() || w < MIN_WEIGHT {
        return Err(ApiError::invalid(
            field,
            format!("must be a finite number >= {MIN_WEIGHT}"),
        ));
    }
    if w > MAX_WEIGHT {
        return Err(ApiError::invalid(
            field,
            format!("must be at most {MAX_WEIGHT}"),
        ));
    }
    Ok(())
}

/// Checks a user's job limit (`max_running_jobs`, `max_queued_jobs`; `field` names
/// it): 1 to [`MAX_JOB_LIMIT`].
pub(crate) fn check_job_limit(field: &str, n: i32) -> Result<(), ApiError> {
    if !(1..=MAX_JOB_LIMIT).contains(&n) {
        return Err(ApiError::invalid(
            field,
            format!("must be between 1 and {MAX_JOB_LIMIT}, or null for the default"),
        ));
    }
    Ok(())
}

/// Checks a group's `max_running_jobs` (`field` names it): 0 to [`MAX_JOB_LIMIT`] (a
/// group's cap may be 0, a user's limit may not).
pub(crate) fn check_group_max_running(field: &str, n: i32) -> Result<(), ApiError> {
    if !(0..=MAX_JOB_LIMIT).contains(&n) {
        return Err(ApiError::invalid(
            field,
            format!("must be between 0 and {MAX_JOB_LIMIT}, or null for no cap"),
        ));
    }
    Ok(())
}

/// Checks a `max_resources` value; `field` is its name (`max_resources`), the 422
/// names the component (`max_resources.cpu`).
pub(crate) fn check_resource_limit(field: &str, limit: &ResourceLimit) -> Result<(), ApiError> {
    if let Some(c) = limit.cpu {
        validate_amount(&format!("{field}.cpu"), c)?;
    }
    if let Some(g) = limit.gpu {
        validate_amount(&format!("{field}.gpu"), g)?;
    }
    if let Some(m) = limit.memory_bytes {
        check_memory_bytes(&format!("{field}.memory_bytes"), m)?;
    }
    Ok(())
}

/// Segments no group path has: `.` and `..`, which a URL cannot carry as they are,
/// and the actions' names, so that `…/pause` is always the action.
const RESERVED: [&str; 4] = [".", "..", "pause", "resume"];

/// Checks a group path (422 naming `field`): the policy's rule
/// ([`crate::policy::groups::check_path`]), and none of the [`RESERVED`] segments.
pub(crate) fn check_path(field: &str, path: &str) -> Result<(), ApiError> {
    crate::policy::groups::check_path(path).map_err(|e| ApiError::invalid(field, e.to_string()))?;
    if path.split('/').any(|s| RESERVED.contains(&s)) {
        return Err(ApiError::invalid(
            field,
            format!(
                "{path:?} is not a group path: a segment may not be \".\", \"..\", \"pause\" or \"resume\""
            ),
        ));
    }
    Ok(())
}
