//! Custom resources: named resources beyond cores, GPUs and memory (Ray's custom
//! resources, e.g. a node started with `--resources='{"QPU": 2}'`; licenses).
//!
//! A [`Custom`] vector is a fixed array of [`MAX_CUSTOM`] amounts indexed by a
//! *slot*; the process-wide registry ([`slot`], [`name`]) maps names to slots in the
//! order they are first seen, and never forgets one. Slots keep [`Resources`] `Copy`
//! and its arithmetic allocation-free. The policy itself never reads the registry:
//! it compares amounts slot by slot, so a decision does not depend on which name got
//! which slot (except, at an exact tie of the best-fit sum, by rounding: the sum runs
//! over slots in order). Only names cross the process boundary (JSON, the database,
//! Ray), never slots.
//!
//! [`Resources`]: super::Resources

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How many distinct custom resource names one process can know (cluster reports,
/// licenses and pools included). A name beyond this is refused with
/// [`NameError::TooMany`].
pub const MAX_CUSTOM: usize = 8;

/// Longest custom resource name, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// Names this service tracks as built-in resources, or that Ray reports about nodes
/// and the object store: never custom.
const RESERVED: [&str; 4] = ["CPU", "GPU", "memory", "object_store_memory"];

static NAMES: RwLock<Vec<Arc<str>>> = RwLock::new(Vec::new());

/// Why a custom resource name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Empty, longer than [`MAX_NAME_LEN`], or with a character outside
    /// `[A-Za-z0-9_.:/-]`, or not starting with a letter or `_`.
    #[error(
        "{0:?} is not a valid Ray resource name: 1 to 64 characters from A-Z a-z 0-9 _ . : / -, starting with a letter or _"
    )]
    Invalid(String),
    /// One of Ray's built-in names (`CPU`, `GPU`, `memory`, `object_store_memory`)
    /// or a `node:` resource, which names a node rather than capacity.
    #[error("{0:?} is a built-in Ray resource, not a custom one (use cpu, gpu or memory_bytes)")]
    Reserved(String),
    /// The registry already holds [`MAX_CUSTOM`] names.
    #[error("{0:?} would be custom resource number {n}; at most {MAX_CUSTOM} are supported", n = MAX_CUSTOM + 1)]
    TooMany(String),
}

/// Checks that `name` may be a custom resource: 1 to [`MAX_NAME_LEN`] bytes of
/// `[A-Za-z0-9_.:/-]`, starting with a letter or `_`, and neither a built-in Ray
/// resource nor a `node:` one.
///
/// # Errors
/// [`NameError::Invalid`] or [`NameError::Reserved`].
pub fn check_name(name: &str) -> Result<(), NameError> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "_.:/-".contains(c);
    let first_ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || name.len() > MAX_NAME_LEN || !name.chars().all(ok_char) {
        return Err(NameError::Invalid(name.to_owned()));
    }
    if RESERVED.contains(&name) || name.starts_with("node:") {
        return Err(NameError::Reserved(name.to_owned()));
    }
    Ok(())
}

/// The slot of `name`, registering it if it is new.
///
/// # Errors
/// [`NameError`] when the name is not valid ([`check_name`]) or the registry is
/// full.
pub fn slot(name: &str) -> Result<usize, NameError> {
    if let Some(k) = lookup(name) {
        return Ok(k);
    }
    check_name(name)?;
    let mut names = NAMES
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(k) = names.iter().position(|n| &**n == name) {
        return Ok(k);
    }
    if names.len() >= MAX_CUSTOM {
        return Err(NameError::TooMany(name.to_owned()));
    }
    names.push(Arc::from(name));
    Ok(names.len() - 1)
}

/// The slot of `name` if it is registered.
#[must_use]
pub fn lookup(name: &str) -> Option<usize> {
    let names = NAMES
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    names.iter().position(|n| &**n == name)
}

/// The name registered at `slot` (`"?"` for a slot never registered, which no
/// vector built through this module holds).
#[must_use]
pub fn name(slot: usize) -> Arc<str> {
    let names = NAMES
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    names.get(slot).cloned().unwrap_or_else(|| Arc::from("?"))
}

/// Amounts of custom resources, by slot (dimensionless counts, fractions allowed as
/// in Ray). Slots at or past `len` are 0, so loops stop at `len` and a vector
/// without custom resources costs nothing.
#[derive(Clone, Copy, Default)]
pub struct Custom {
    len: u8,
    amounts: [f64; MAX_CUSTOM],
}

impl Custom {
    /// No custom resource.
    pub const EMPTY: Custom = Custom {
        len: 0,
        amounts: [0.0; MAX_CUSTOM],
    };

    /// The amount in `slot` (0 when unset). Panics if `slot >= MAX_CUSTOM`.
    #[must_use]
    pub fn get(&self, slot: usize) -> f64 {
        self.amounts[slot]
    }

    /// Sets `slot` to `amount`. Panics if `slot >= MAX_CUSTOM`.
    pub fn set(&mut self, slot: usize, amount: f64) {
        self.amounts[slot] = amount;
        if slot >= usize::from(self.len) {
            // MAX_CUSTOM fits a u8.
            self.len = u8::try_from(slot + 1).unwrap_or(u8::MAX);
        }
    }

    /// The number of slots that may be non-zero (an upper bound).
    #[must_use]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// True when every amount is 0.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.amounts[..self.len()].iter().all(|&x| x == 0.0)
    }

    /// The amounts up to `len`.
    #[must_use]
    pub fn amounts(&self) -> &[f64] {
        &self.amounts[..self.len()]
    }

    /// `f(a, b)` per slot over the longer of the two lengths.
    #[must_use]
    pub(crate) fn zip_with(self, other: Custom, f: impl Fn(f64, f64) -> f64) -> Custom {
        let len = self.len.max(other.len);
        let mut out = Custom {
            len,
            amounts: [0.0; MAX_CUSTOM],
        };
        for k in 0..usize::from(len) {
            out.amounts[k] = f(self.amounts[k], other.amounts[k]);
        }
        out
    }

    /// The non-zero amounts by name.
    #[must_use]
    pub fn by_name(&self) -> BTreeMap<String, f64> {
        self.amounts()
            .iter()
            .enumerate()
            .filter(|&(_, &x)| x != 0.0)
            .map(|(k, &x)| (name(k).to_string(), x))
            .collect()
    }

    /// A vector from amounts by name, registering new names.
    ///
    /// # Errors
    /// [`NameError`] for the first name that cannot be registered.
    pub fn from_names<'a>(
        amounts: impl IntoIterator<Item = (&'a str, f64)>,
    ) -> Result<Custom, NameError> {
        let mut out = Custom::EMPTY;
        for (n, x) in amounts {
            out.set(slot(n)?, x);
        }
        Ok(out)
    }
}

impl PartialEq for Custom {
    /// Equal amounts in every slot, whatever the lengths.
    fn eq(&self, other: &Self) -> bool {
        let len = self.len().max(other.len());
        self.amounts[..len] == other.amounts[..len]
    }
}

impl fmt::Debug for Custom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(
                self.amounts()
                    .iter()
                    .enumerate()
                    .filter(|&(_, &x)| x != 0.0)
                    .map(|(k, x)| (name(k), x)),
            )
            .finish()
    }
}

impl Serialize for Custom {
    /// A map from name to amount, non-zero amounts only.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.by_name().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Custom {
    /// A map from name to amount; names are registered.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Custom, D::Error> {
        let map = BTreeMap::<String, f64>::deserialize(d)?;
        Custom::from_names(map.iter().map(|(n, &x)| (n.as_str(), x))).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_rays_rules() {
        for ok in [
            "QPU",
            "qpu_session",
            "_x",
            "accelerator_type:A100",
            "a/b-c.d",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "1QPU", "Q PU", "QPU!", "é", &"x".repeat(65)] {
            assert!(
                matches!(check_name(bad), Err(NameError::Invalid(_))),
                "{bad:?}"
            );
        }
        for reserved in [
            "CPU",
            "GPU",
            "memory",
            "object_store_memory",
            "node:1.2.3.4",
        ] {
            assert!(
                matches!(check_name(reserved), Err(NameError::Reserved(_))),
                "{reserved}"
            );
        }
    }

    #[test]
    fn slots_are_stable_and_vectors_compare_by_amount() {
        let a = slot("test_custom_a").unwrap();
        assert_eq!(slot("test_custom_a").unwrap(), a);
        assert_eq!(lookup("test_custom_a"), Some(a));
        assert_eq!(&*name(a), "test_custom_a");
        let mut x = Custom::EMPTY;
        x.set(a, 2.0);
        let y = Custom::from_names([("test_custom_a", 2.0)]).unwrap();
        assert_eq!(x, y);
        assert_ne!(x, Custom::EMPTY);
        let mut zero = Custom::EMPTY;
        zero.set(a, 0.0);
        assert_eq!(zero, Custom::EMPTY, "a zero amount equals no amount");
        assert!(zero.is_empty());
        let json = serde_json::to_value(x).unwrap();
        assert_eq!(json, serde_json::json!({"test_custom_a": 2.0}));
        let back: Custom = serde_json::from_value(json).unwrap();
        assert_eq!(back, x);
        assert!(serde_json::from_value::<Custom>(serde_json::json!({"CPU": 1.0})).is_err());
    }
}
