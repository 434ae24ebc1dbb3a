//! What a job may ask for, in one place below both the configuration and the HTTP
//! layer: resource amounts ([`check_amount`]), `memory_bytes` ([`check_memory_bytes`])
//! and custom resources ([`check_custom`]). `api::validate` turns a [`Refusal`] into
//! its 422 naming the field, and the configuration into an error naming the
//! `[[sizes]]` key, so that a size is held to exactly a job's rules. It imports
//! neither of them.

use std::collections::BTreeMap;

use crate::policy::custom::{self, MAX_CUSTOM};

/// Largest accepted resource request per job: cores and GPUs (well past any cluster).
pub const MAX_CORES: f64 = 1.0e6;

/// Every whole number from 0 up to this one (2^53) is exact as a double, which is
/// how the policy, the console's JavaScript and most JSON clients read a number;
/// above it they are not (`2^53 + 1` reads as `2^53`). The bound of every
/// integer field: `memory_bytes` (8 PiB) and the small ones alike.
pub const MAX_WHOLE: u64 = 1 << 53;

/// A value refused: the field it was given as, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The field as the caller named it (`resources.cpu`, `sizes[0].custom.QPU`).
    pub field: String,
    /// Why, to follow the field's name (`must be >= 0`).
    pub reason: String,
}

impl Refusal {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Refusal {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// The reason given for a whole number beyond [`MAX_WHOLE`] in magnitude, however
/// it was found (as written, as parsed, as stored).
pub fn too_large() -> String {
    format!(
        "must be at most {MAX_WHOLE} in magnitude (2^53: whole numbers above it are not \
         exact as doubles)"
    )
}

/// Ray's resource granularity: fractional amounts have at most 4 decimal places
/// (Ray refuses `num_cpus` finer than 0.0001). Whether `v` is the double nearest a
/// decimal of at most 4 places, exactly: Rust's
/// `Display` of a double is the shortest decimal that reads back as it (without an
/// exponent), and a decimal of at most 4 places within [`MAX_CORES`] has at most 11
/// significant digits, so it is its double's shortest decimal. No tolerance: `0.3`
/// and `0.0001` pass, `0.3000000001` and `0.30000000000000004` (`0.1 + 0.2`) do not.
/// The API checks a body's text too (`api::body::numbers::check`), which also refuses
/// what no double shows (`0.30000000000000001` reads as `0.3`).
pub fn at_most_4_decimals(v: f64) -> bool {
    let shown = v.abs().to_string();
    shown
        .split_once('.')
        .is_none_or(|(_, decimals)| decimals.len() <= 4)
}

/// Checks a resource amount (`field` names it): finite, >= 0, at most [`MAX_CORES`],
/// with at most 4 decimal places ([`at_most_4_decimals`]).
pub fn check_amount(field: &str, v: f64) -> Result<(), Refusal> {
    if !v.is_finite() {
        return Err(Refusal::new(field, "must be a finite number"));
    }
    if v < 0.0 {
        return Err(Refusal::new(field, "must be >= 0"));
    }
    if v > MAX_CORES {
        return Err(Refusal::new(field, format!("must be at most {MAX_CORES}")));
    }
    if !at_most_4_decimals(v) {
        return Err(Refusal::new(
            field,
            "must have at most 4 decimal places (Ray's resource precision is 0.0001)",
        ));
    }
    Ok(())
}

/// Checks `memory_bytes` (`field` names it): at most [`MAX_WHOLE`] (2^53); the
/// column's `i64`.
pub fn check_memory_bytes(field: &str, bytes: u64) -> Result<i64, Refusal> {
    if bytes > MAX_WHOLE {
        return Err(Refusal::new(field, too_large()));
    }
    i64::try_from(bytes).map_err(|_| Refusal::new(field, "is too large"))
}

/// fairshare's own resources, which a custom resource may not be named after: a pool's
/// `capacity` and a size name them beside custom ones, and a job asking `custom.cpu`
/// asked for a resource no cluster reports (a tester's size `custom = { cpu = 2 }`
/// passed the start-up checks and no job could use it).
pub const OWN: [&str; 3] = ["cpu", "gpu", "memory_bytes"];

/// Checks the custom resources of a job (`field` names the map, `resources.custom`):
/// at most [`MAX_CUSTOM`] names, each a valid custom Ray resource name
/// ([`custom::check_name`]) and none of fairshare's own ([`OWN`]), each amount > 0 and valid as [`check_amount`] says.
/// Names are not registered here (a client's names never take one of the process's
/// slots; the API refuses a name no cluster reports). Refuses naming the map, or
/// `field.NAME`; gives the map back with each -0.0 as 0.0.
pub fn check_custom(
    field: &str,
    custom: BTreeMap<String, f64>,
) -> Result<BTreeMap<String, f64>, Refusal> {
    if custom.len() > MAX_CUSTOM {
        return Err(Refusal::new(
            field,
            format!("at most {MAX_CUSTOM} custom resources"),
        ));
    }
    let mut out = BTreeMap::new();
    for (name, amount) in custom {
        let at = format!("{field}.{name}");
        custom::check_name(&name).map_err(|e| Refusal::new(at.clone(), e.to_string()))?;
        if OWN.contains(&name.as_str()) {
            return Err(Refusal::new(
                at,
                format!(
                    "{name:?} is one of fairshare's own resources ({}), not a custom \
                     one: ask for it as such (on Ray's Jobs API entrypoint_num_cpus, \
                     entrypoint_num_gpus, entrypoint_memory)",
                    OWN.join(", ")
                ),
            ));
        }
        // `+ 0.0` turns a -0.0 into 0.0.
        let amount = amount + 0.0;
        check_amount(&at, amount)?;
        if amount <= 0.0 {
            return Err(Refusal::new(at, "must be > 0"));
        }
        out.insert(name, amount);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A custom resource named after one of fairshare's own is refused naming it;
    /// Ray's own names are refused by [`custom::check_name`]; others pass.
    #[test]
    fn a_custom_resource_may_not_take_a_built_in_name() {
        for name in ["cpu", "gpu", "memory_bytes", "CPU", "memory"] {
            let e = check_custom(
                "resources.custom",
                BTreeMap::from([(name.to_string(), 1.0)]),
            )
            .unwrap_err();
            assert_eq!(e.field, format!("resources.custom.{name}"), "{e:?}");
        }
        let ok = check_custom(
            "resources.custom",
            BTreeMap::from([("QPU".to_string(), 1.0)]),
        );
        assert_eq!(ok.unwrap()["QPU"], 1.0);
    }
}
