//! The body of `POST /v1/jobs` and its checks: its limits, its fields (the checks
//! other routes share, user ids and resource amounts among them, are in
//! [`super::validate`]), and the conversion into the store's [`NewJob`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::body::numbers::{self, Written};
use super::body::{object, parse_json, whole};
use super::error::ApiError;
use super::validate::{
    check_memory_bytes, validate_amount, validate_custom, validate_external_id, validate_user_id,
};
use crate::store::NewJob;

/// Longest accepted entrypoint, in bytes (Ray passes it to a shell; 64 KiB is far more
/// than any real command line).
pub const MAX_ENTRYPOINT_BYTES: usize = 65_536;
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
/// Resources a job asks for. Absent fields take their defaults.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourcesIn {
    /// Cores, 0 to 1e6 with at most 4 decimal places (default 1). A job needs
    /// cpu > 0, gpu > 0 or a custom resource.
    #[schema(minimum = 0.0, maximum = 1000000.0, multiple_of = 0.0001)]
    pub cpu: Option<f64>,
    /// GPUs, 0 to 1e6 with at most 4 decimal places (default 0).
    #[schema(minimum = 0.0, maximum = 1000000.0, multiple_of = 0.0001)]
    pub gpu: Option<f64>,
    /// Bytes, a whole number from 0 to 2^53 (default 0).
    #[serde(default, deserialize_with = "whole::opt")]
    #[schema(minimum = 0, maximum = 9007199254740992_u64)]
    pub memory_bytes: Option<u64>,
    /// Custom resources (Ray's custom resources, e.g. `{"QPU": 1}`), by name: at most
    /// 8 names, each a valid Ray resource name (1–64 characters from `A-Z a-z 0-9 _ . :
    /// / -`, starting with a letter or `_`; not `CPU`, `GPU`, `memory`,
    /// `object_store_memory` nor `node:*`), each amount > 0 and at most 1e6 with at
    /// most 4 decimal places. Passed to Ray as `entrypoint_resources`; counted in the
    /// dominant share and in fitting. A job asking a resource no healthy cluster has
    /// (enough of) is refused (422).
    #[serde(default, deserialize_with = "object::opt")]
    #[schema(value_type = Option<BTreeMap<String, f64>>)]
    pub custom: Option<BTreeMap<String, f64>>,
}

impl ResourcesIn {
    /// Whether it names any resource (an amount given, or a custom name).
    #[must_use]
    pub fn names_any(&self) -> bool {
        self.cpu.is_some()
            || self.gpu.is_some()
            || self.memory_bytes.is_some()
            || self.custom.as_ref().is_some_and(|c| !c.is_empty())
    }
}

/// `POST /v1/jobs` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// The gateway's user id: 1–128 characters, no whitespace, control or invisible
    /// characters (format, zero-width, variation selectors, default-ignorable), not `.`
    /// or `..` (they cannot stand in a URL path).
    #[schema(min_length = 1, max_length = 128)]
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
    #[serde(default, deserialize_with = "whole::priority")]
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
    #[serde(default, deserialize_with = "whole::max_runtime")]
    #[schema(minimum = 1, maximum = 31536000)]
    pub max_runtime_s: Option<i64>,
    /// Whether the job may be stopped while it runs and queued again at its old place
    /// (attempt + 1), to give its capacity to a user below its fair share whose job
    /// has waited past `preemption.after` (DESIGN §2 "Preemption"). Absent or null:
    /// the user's default (`preemptible` of `PUT /v1/users/{id}`, false unless set).
    pub preemptible: Option<bool>,
    /// The pool the job must run in (issue 30): a `[[pools]]` name (422 naming `pool`
    /// for one that is not configured). fairshare admits it there by fair share and
    /// never sends it to Ray: the pool's runner learns it is ADMITTED (events,
    /// webhooks, `GET /v1/jobs?status=ADMITTED&pool=`), starts it and reports back
    /// (`POST /v1/jobs/{id}/started`, `/finished`, `/release`, `/heartbeat`). Its
    /// resources must fit the pool's capacity (a pool that does not count cores takes
    /// `cpu: 0`). Absent: a Ray cluster of the policy's choosing.
    #[schema(min_length = 1, max_length = 64)]
    pub pool: Option<String>,
    /// A named size (`[[sizes]]` in the configuration, issue 48): the job asks for the
    /// size's resources, and its usage is reported under the size
    /// (`metadata["fairshare.size"]` is set to it). Not with `resources` (422 naming
    /// `size`); an unknown size is 422 naming `size`.
    #[schema(min_length = 1, max_length = 64)]
    pub size: Option<String>,
}

/// The numbers of a `POST /v1/jobs` body checked as written ([`numbers::check`]).
pub const SUBMIT_NUMBERS: &[(&str, Written)] = &[
    ("resources.cpu", Written::Resource),
    ("resources.gpu", Written::Resource),
    ("resources.memory_bytes", Written::Whole),
    ("resources.custom.*", Written::Resource),
    ("priority", Written::Whole),
    ("max_runtime_s", Written::Whole),
    ("runtime_env", Written::Integers64),
];

impl SubmitRequest {
    /// Resolves a named size (`size`, or `metadata["fairshare.size"]` as Ray's Jobs
    /// API gives it) into the request's resources, and records it in the metadata
    /// (where usage finds it). Errors (422 naming `size`, or `metadata.fairshare.size`
    /// when only the metadata names it): a size not in `sizes`, a
    /// size together with `resources` (one or the other: a size is a contract of
    /// resources and of what is reported, and a job that changed them would be
    /// reported under a size it does not have), or `size` and the metadata key
    /// naming two different sizes. An empty `resources` (`{}`, or every field null)
    /// names no resource and goes with a size, as an empty `entrypoint_resources` does
    /// on Ray's Jobs API.
    pub fn with_size(mut self, sizes: &[crate::config::SizeSettings]) -> Result<Self, ApiError> {
        let key = crate::store::SIZE_KEY;
        let field = self.size_field();
        let in_metadata = self.metadata.as_ref().and_then(|m| m.get(key)).cloned();
        let name = match (self.size.take(), in_metadata) {
            (Some(a), Some(b)) if a != b => {
                return Err(ApiError::invalid(
                    "size",
                    format!("differs from metadata.{key} ({b:?})"),
                ))
            }
            (a, b) => match a.or(b) {
                Some(n) => n,
                None => return Ok(self),
            },
        };
        // Longer than any size's name may be (the schema's 64): not echoed back (a fresh
        // tester's finding: a 100,000-character name came back twice, 200 KB).
        if name.chars().count() > 64 {
            return Err(ApiError::invalid(
                &field,
                "must be at most 64 characters (a [[sizes]] name)",
            ));
        }
        let Some(size) = sizes.iter().find(|z| z.name == name) else {
            let known: Vec<&str> = sizes.iter().map(|z| z.name.as_str()).collect();
            return Err(ApiError::invalid(
                &field,
                if known.is_empty() {
                    format!("no size {name:?}: none is configured ([[sizes]])")
                } else {
                    format!("no size {name:?}; the sizes are {}", known.join(", "))
                },
            ));
        };
        if self.resources.as_ref().is_some_and(ResourcesIn::names_any) {
            return Err(ApiError::invalid(
                &field,
                "give either size or resources, not both",
            ));
        }
        self.resources = Some(ResourcesIn {
            cpu: Some(size.cpu),
            gpu: Some(size.gpu),
            memory_bytes: Some(size.memory_bytes),
            custom: (!size.custom.is_empty()).then(|| size.custom.clone()),
        });
        self.metadata
            .get_or_insert_with(Default::default)
            .insert(key.to_string(), name);
        Ok(self)
    }

    /// Where the request names its size: `size`, else `metadata.fairshare.size` (a
    /// client that set only the metadata key, as the Python client's `metadata=` does,
    /// is told about the field it sent: a fresh tester's finding).
    fn size_field(&self) -> String {
        if self.size.is_some() {
            "size".into()
        } else {
            format!("metadata.{}", crate::store::SIZE_KEY)
        }
    }

    /// For a job that names a size (`size` or the metadata key): an error about its
    /// resources, which the client did not send, is about the size: it names `size`
    /// (on Ray's API `metadata.fairshare.size`) and says which resource (a fresh
    /// tester's finding: a size too large for every cluster answered "resources.cpu").
    pub fn size_blame(&self) -> impl Fn(ApiError) -> ApiError {
        let key = crate::store::SIZE_KEY;
        let blamed = self.size_field();
        let size = self
            .size
            .clone()
            .or_else(|| self.metadata.as_ref().and_then(|m| m.get(key)).cloned())
            .filter(|n| n.chars().count() <= 64);
        move |e| match (&size, e) {
            (Some(name), ApiError::Invalid { field, reason })
                if field == "resources" || field.starts_with("resources.") =>
            {
                ApiError::Invalid {
                    field: blamed.clone(),
                    reason: format!("size {name:?} asks {field}: {reason}"),
                }
            }
            (_, e) => e,
        }
    }

    /// Parses a `POST /v1/jobs` body: the typed parse ([`parse_json`]), then its
    /// numbers as written ([`SUBMIT_NUMBERS`]). Errors: 400 not JSON, 422 naming the
    /// field.
    pub fn parse(body: &[u8]) -> Result<SubmitRequest, ApiError> {
        let request = parse_json(body, false)?;
        numbers::check(body, SUBMIT_NUMBERS)?;
        Ok(request)
    }

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
        let memory_bytes =
            check_memory_bytes("resources.memory_bytes", r.memory_bytes.unwrap_or(0))?;
        let custom = validate_custom("resources.custom", r.custom.unwrap_or_default())?;
        if cpu <= 0.0 && gpu <= 0.0 && custom.is_empty() {
            return Err(ApiError::invalid(
                "resources.cpu",
                "a job needs cpu > 0, gpu > 0 or a custom resource",
            ));
        }
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
        if let Some(p) = &self.pool {
            if p.is_empty() || p.len() > 64 {
                return Err(ApiError::invalid("pool", "must be 1 to 64 characters"));
            }
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
            runtime_env_digest: None,
            runtime_env_digests: Vec::new(),
            metadata: self
                .metadata
                .map(|m| serde_json::to_value(m).unwrap_or_default()),
            cpu,
            gpu,
            memory_bytes,
            custom,
            max_runtime_s: self.max_runtime_s,
            preemptible: self.preemptible,
            pool: self.pool,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// `n / 10^places` written out: `fixed(12345, 4)` = `1.2345`.
    fn fixed(n: u64, places: u32) -> String {
        let scale = 10_u64.pow(places);
        format!(
            "{}.{:0width$}",
            n / scale,
            n % scale,
            width = places as usize
        )
    }

    /// The ways a client may write `n / 10^places` (`places` ≥ 3): as is, with its
    /// trailing zeros trimmed, padded with more, and with an exponent (`e` or `E`).
    fn spellings(n: u64, places: u32) -> Vec<String> {
        let plain = fixed(n, places);
        let trimmed = plain
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string();
        vec![
            plain.clone(),
            trimmed,
            format!("{plain}000"),
            format!("{n}e-{places}"),
            format!("{}E-{}", n * 10, places + 1),
            format!("{}E-3", fixed(n, places - 3)),
        ]
    }

    /// A `POST /v1/jobs` body with `cpu` written as `cpu`, through the handler's
    /// checks: the parse with its numbers as written, then the fields.
    fn submit_cpu(cpu: &str) -> Result<NewJob, ApiError> {
        let body = format!(
            r#"{{"user": "u", "entrypoint": "e", "resources": {{"cpu": {cpu}, "gpu": 1}}}}"#
        );
        SubmitRequest::parse(body.as_bytes())?.into_new_job()
    }

    fn refused_on(result: Result<NewJob, ApiError>, field: &str) -> bool {
        matches!(result, Err(ApiError::Invalid { field: f, .. }) if f == field)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// F3: every amount of at most 4 decimal places within range is taken, in any
        /// spelling, as the double it names.
        #[test]
        fn every_amount_of_at_most_4_decimals_is_accepted(k in 0_u64..=10_000_000_000) {
            let exact: f64 = fixed(k, 4).parse().unwrap();
            for text in spellings(k, 4) {
                let job = submit_cpu(&text);
                prop_assert!(job.is_ok(), "{text}: {job:?}");
                prop_assert_eq!(job.unwrap().cpu, exact, "{}", text);
                prop_assert!(validate_amount("cpu", text.parse().unwrap()).is_ok(), "{}", text);
            }
        }

        /// F3: every amount with a 5th decimal place that is not 0 is refused naming
        /// the field, in any spelling, and on the double alone too
        /// (`validate_amount`, for callers without the text).
        #[test]
        fn every_amount_with_a_5th_decimal_is_refused(
            k in (0_u64..=99_999_999_999).prop_filter("5th place not 0", |k| k % 10 != 0),
        ) {
            for text in spellings(k, 5) {
                prop_assert!(refused_on(submit_cpu(&text), "resources.cpu"), "{}", text);
                prop_assert!(validate_amount("cpu", text.parse().unwrap()).is_err(), "{}", text);
            }
        }

        /// F3: a digit other than 0 anywhere past the 4th place is refused, however
        /// far (the rule had a tolerance: `0.3000000001` passed). Past about 15
        /// significant digits the double is the 4-place value's own; the text tells.
        #[test]
        fn a_digit_past_the_4th_place_is_refused_however_far(
            k in 0_u64..10_000_000_000,
            place in 5_usize..=24,
            digit in 1_u8..=9,
        ) {
            let zeros = "0".repeat(place - 5);
            // The digits without the point (no leading 0: JSON refuses `01e-5`).
            let digits = format!("{k}{zeros}{digit}");
            let digits = if k == 0 { digit.to_string() } else { digits };
            for text in [
                format!("{}{zeros}{digit}", fixed(k, 4)),
                format!("{digits}e-{place}"),
            ] {
                prop_assert!(refused_on(submit_cpu(&text), "resources.cpu"), "{}", text);
                let significant = k.to_string().len() + place - 4;
                if k > 0 && significant <= 15 {
                    prop_assert!(
                        validate_amount("cpu", text.parse().unwrap()).is_err(),
                        "{}", text
                    );
                }
            }
        }
    }

    #[test]
    fn the_tolerance_is_gone() {
        for ok in ["0.3", "0.0001", "1e-4", "2.5E0", "1000000", "999999.9999"] {
            assert!(submit_cpu(ok).is_ok(), "{ok}");
        }
        for bad in [
            "0.3000000001",
            "0.30000000000000004",
            "0.30000000000000001",
            "0.00001",
            "1000000.0001",
        ] {
            assert!(submit_cpu(bad).is_err(), "{bad}");
        }
    }

    /// Custom resources: a map of valid Ray resource names to amounts > 0, taken as
    /// given; every bad one is 422 naming the field (`resources.custom.NAME`, or the
    /// map itself for too many names), never accepted.
    #[test]
    fn custom_resources_are_checked_naming_the_field() {
        let submit = |custom: &str| {
            let body = format!(
                r#"{{"user": "u", "entrypoint": "e", "resources": {{"cpu": 1, "custom": {custom}}}}}"#
            );
            SubmitRequest::parse(body.as_bytes()).and_then(SubmitRequest::into_new_job)
        };
        let ok = submit(r#"{"QPU": 1, "license.a/b-c:d": 0.5}"#).unwrap();
        assert_eq!(
            ok.custom,
            BTreeMap::from([
                ("QPU".to_string(), 1.0),
                ("license.a/b-c:d".to_string(), 0.5)
            ])
        );
        assert!(submit("{}").unwrap().custom.is_empty());
        let nine: Vec<String> = (0..9).map(|i| format!(r#""r{i}": 1"#)).collect();
        let nine = format!("{{{}}}", nine.join(", "));
        for (custom, field) in [
            (r#"{"Q P U": 1}"#, "resources.custom.Q P U"),
            (r#"{"": 1}"#, "resources.custom."),
            (r#"{"1QPU": 1}"#, "resources.custom.1QPU"),
            (r#"{"QPU!": 1}"#, "resources.custom.QPU!"),
            (r#"{"CPU": 1}"#, "resources.custom.CPU"),
            (r#"{"GPU": 1}"#, "resources.custom.GPU"),
            (r#"{"memory": 1}"#, "resources.custom.memory"),
            (
                r#"{"object_store_memory": 1}"#,
                "resources.custom.object_store_memory",
            ),
            (r#"{"node:10.0.0.1": 1}"#, "resources.custom.node:10.0.0.1"),
            (r#"{"QPU": -1}"#, "resources.custom.QPU"),
            (r#"{"QPU": 0}"#, "resources.custom.QPU"),
            (r#"{"QPU": -0.0}"#, "resources.custom.QPU"),
            (r#"{"QPU": 1e400}"#, "resources.custom.QPU"),
            (r#"{"QPU": 2000000}"#, "resources.custom.QPU"),
            (r#"{"QPU": 0.00001}"#, "resources.custom.QPU"),
            (r#"{"QPU": 0.30000000000000001}"#, "resources.custom.QPU"),
            (r#"{"QPU": "1"}"#, "resources.custom.QPU"),
            (r#"{"QPU": null}"#, "resources.custom.QPU"),
            (&nine, "resources.custom"),
        ] {
            let r = submit(custom);
            assert!(
                refused_on(r, field),
                "{custom}: {field}: {:?}",
                submit(custom).err()
            );
        }
        let r = submit(r#"[["QPU", 1]]"#);
        assert!(
            refused_on(r, "resources.custom"),
            "serde's array form is refused"
        );
    }

    /// F2: `memory_bytes` is a whole number up to 2^53 as written; above it, or not
    /// whole as written, is 422 naming the field, however it is spelled.
    #[test]
    fn memory_bytes_is_exact_up_to_two_to_the_53() {
        let submit = |m: &str| {
            let body = format!(
                r#"{{"user": "u", "entrypoint": "e", "resources": {{"memory_bytes": {m}}}}}"#
            );
            SubmitRequest::parse(body.as_bytes()).and_then(SubmitRequest::into_new_job)
        };
        for (ok, bytes) in [
            ("9007199254740992", 1_i64 << 53),
            ("9007199254740992.0", 1 << 53),
            ("9.007199254740992e15", 1 << 53),
            ("1024.0", 1024),
            ("1.024E3", 1024),
        ] {
            assert_eq!(submit(ok).map(|j| j.memory_bytes).ok(), Some(bytes), "{ok}");
        }
        for bad in [
            "9007199254740993",
            "9007199254740993.0",
            "9.007199254740993e15",
            "9223372036854775807",
            "1024.5",
            "1024.00000000000000001",
        ] {
            assert!(refused_on(submit(bad), "resources.memory_bytes"), "{bad}");
        }
    }
}
