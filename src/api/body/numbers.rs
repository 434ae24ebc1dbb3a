//! Numbers checked as the client wrote them, not as the double they parse to
//! (DESIGN §4, "Numbers as written"). The JSON layer reads every number with a
//! fraction or an exponent as a double, which cannot tell `9007199254740993.0` from
//! `9007199254740992` or `0.30000000000000001` from `0.3`; these checks read the text.
//!
//! Each route lists its fields with a [`Written`] rule as dotted paths (`*` for any
//! key of a map: `users.*.max_resources.cpu`) and calls [`check`] on the body after
//! the typed parse, so that a missing or mistyped field keeps its own error. Only the
//! objects on those paths are read again; what a path does not reach (`runtime_env`)
//! is skipped over once.

use std::collections::BTreeMap;

use serde_json::value::RawValue;

use crate::api::error::ApiError;
// The bound of every integer field, and its reason, live with the resource rules
// (`memory_bytes` is held to it in the configuration too).
pub use crate::resources_check::{too_large, MAX_WHOLE};

/// Most decimal places of a resource amount: Ray's precision, 0.0001.
pub const RESOURCE_DECIMALS: i64 = 4;

/// How a number must be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// A whole number of magnitude at most [`MAX_WHOLE`], exactly: `600`, `600.0`,
    /// `6e2`, `6.00E2`; not `600.5`, not `600.00000000000000001`.
    Whole,
    /// At most [`RESOURCE_DECIMALS`] decimal places, exactly: `0.3`, `0.0001`,
    /// `1e-4`, `2.5E0`, `0.30000`; not `0.3000000001`.
    Resource,
    /// Any JSON value (a `runtime_env`, passed on to Ray) whose integers, written
    /// without a fraction or an exponent, fit 64 bits (`i64` or `u64`), as the JSON
    /// layer keeps them exactly; a longer one would be read as the nearest double
    /// and stored and compared so (`12345678901234567890123` as
    /// `1.2345678901234568e22`, equal to its neighbour), where Ray's Python keeps it.
    Integers64,
}

/// A JSON number's magnitude, exactly: `digits × 10^exponent` (`digits` without
/// leading or trailing zeros; empty for zero). The sign is the typed parse's.
#[derive(Debug, PartialEq, Eq)]
struct Decimal {
    digits: String,
    exponent: i64,
}

/// Reads a JSON number (`-?int(.frac)?([eE][+-]?exp)?`) exactly; `None` for
/// anything else (a string, `null`: the typed parse judged those).
fn decimal(text: &str) -> Option<Decimal> {
    let rest = text.strip_prefix('-').unwrap_or(text);
    let (mantissa, exp) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut exponent: i64 = match exp {
        None => 0,
        Some(e) => {
            let (sign, digits) = match e.as_bytes().first() {
                Some(b'-') => (-1, &e[1..]),
                Some(b'+') => (1, &e[1..]),
                _ => (1, e),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Saturated far beyond any bound here (the JSON layer refused numbers
            // out of a double's range already; `0e999999999999` is 0).
            let magnitude = digits
                .bytes()
                .fold(0_i64, |n, b| (n * 10 + i64::from(b - b'0')).min(1 << 40));
            sign * magnitude
        }
    };
    exponent -= frac.len() as i64;
    let all: String = int.chars().chain(frac.chars()).collect();
    let digits = all.trim_start_matches('0');
    let significant = digits.trim_end_matches('0');
    exponent += (digits.len() - significant.len()) as i64;
    Some(Decimal {
        digits: significant.to_string(),
        exponent: if significant.is_empty() { 0 } else { exponent },
    })
}

/// The first integer literal (no fraction, no exponent) in the JSON text `json`
/// that fits neither `i64` nor `u64`, strings skipped.
fn integer_beyond_64_bits(json: &str) -> Option<&str> {
    let b = json.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() {
                    match b[i] {
                        b'\\' => i += 2,
                        b'"' => {
                            i += 1;
                            break;
                        }
                        _ => i += 1,
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while i < b.len() && matches!(b[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                let token = &json[start..i];
                if !token.contains(['.', 'e', 'E'])
                    && token.parse::<i64>().is_err()
                    && token.parse::<u64>().is_err()
                {
                    return Some(token);
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// Why `text` breaks `rule`, if it does.
fn broken(text: &str, rule: Written) -> Option<String> {
    if rule == Written::Integers64 {
        return integer_beyond_64_bits(text).map(|n| {
            let shown: String = n.chars().take(40).collect();
            let more = if n.len() > 40 { "…" } else { "" };
            format!(
                "holds the integer {shown}{more}, beyond 64 bits: it could not be kept \
                 exactly (it would read as the nearest double); write it as a string"
            )
        });
    }
    let d = decimal(text)?;
    if d.digits.is_empty() {
        return None;
    }
    match rule {
        Written::Whole => {
            if d.exponent < 0 {
                return Some("must be a whole number (600 and 600.0 are; 600.5 is not)".into());
            }
            // Beyond 16 digits it is past 2^53 (16 digits) for sure.
            let magnitude = (d.digits.len() as i64 + d.exponent <= 16)
                .then(|| d.digits.parse::<u64>().ok())
                .flatten()
                .and_then(|m| m.checked_mul(10_u64.checked_pow(d.exponent as u32)?));
            match magnitude {
                Some(m) if m <= MAX_WHOLE => None,
                _ => Some(too_large()),
            }
        }
        Written::Integers64 => None,
        Written::Resource => (d.exponent < -RESOURCE_DECIMALS).then(|| {
            format!(
                "must have at most {RESOURCE_DECIMALS} decimal places as written \
                 (Ray's resource precision is 0.0001)"
            )
        }),
    }
}

/// Checks the numbers of `body` at `rules`' paths as written. Errors: 422 naming
/// the field (its path, map keys included). A body that is not a JSON object, or
/// a path that leads to no number, is left alone (the typed parse decides).
pub fn check(body: &[u8], rules: &[(&str, Written)]) -> Result<(), ApiError> {
    let Ok(text) = std::str::from_utf8(body) else {
        return Ok(());
    };
    let split: Vec<(Vec<&str>, Written)> = rules
        .iter()
        .map(|(path, rule)| (path.split('.').collect(), *rule))
        .collect();
    let rules: Vec<(&[&str], Written)> = split.iter().map(|(p, r)| (p.as_slice(), *r)).collect();
    walk(text, "", &rules)
}

/// [`check`] of the value `raw` found at `at` against `rules`, each with the rest
/// of its path from here.
fn walk(raw: &str, at: &str, rules: &[(&[&str], Written)]) -> Result<(), ApiError> {
    for (path, rule) in rules {
        if path.is_empty() {
            if let Some(reason) = broken(raw.trim(), *rule) {
                return Err(ApiError::invalid(at, reason));
            }
        }
    }
    if rules.iter().all(|(path, _)| path.is_empty()) {
        return Ok(());
    }
    // Duplicate keys: the last one, as the typed parse keeps it.
    let Ok(map) = serde_json::from_str::<BTreeMap<String, &RawValue>>(raw) else {
        return Ok(());
    };
    for (key, value) in &map {
        let deeper: Vec<(&[&str], Written)> = rules
            .iter()
            .filter_map(|(path, rule)| match path.split_first() {
                Some((first, rest)) if *first == "*" || first == key => Some((rest, *rule)),
                _ => None,
            })
            .collect();
        if !deeper.is_empty() {
            let here = if at.is_empty() {
                key.clone()
            } else {
                format!("{at}.{key}")
            };
            walk(value.get(), &here, &deeper)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(body: &str, rules: &[(&str, Written)]) -> Option<String> {
        match check(body.as_bytes(), rules) {
            Ok(()) => None,
            Err(ApiError::Invalid { field, .. }) => Some(field),
            Err(e) => panic!("{e}"),
        }
    }

    /// A fresh tester's finding: `12345678901234567890123` in a runtime_env was
    /// stored as `1.2345678901234568e22`, and a resubmit with `…124` was "the same".
    #[test]
    fn a_runtime_env_keeps_only_integers_it_can_keep_exactly() {
        let rules = [("runtime_env", Written::Integers64)];
        for ok in [
            r#"{"runtime_env": {"a": 1, "b": [-9223372036854775808, 18446744073709551615]}}"#,
            r#"{"runtime_env": {"x": 1.2345678901234568e22, "y": -0.0, "z": 0.5}}"#,
            r#"{"runtime_env": {"s": "12345678901234567890123", "e": "\"1234567890123456789012\""}}"#,
            r#"{"runtime_env": null, "priority": 12345678901234567890123}"#,
        ] {
            assert_eq!(field(ok, &rules), None, "{ok}");
        }
        for bad in [
            r#"{"runtime_env": {"y": 12345678901234567890123}}"#,
            r#"{"runtime_env": {"a": [1, {"b": -9223372036854775809}]}}"#,
            r#"{"runtime_env": {"a": "x\\", "b": 18446744073709551616}}"#,
        ] {
            assert_eq!(field(bad, &rules).as_deref(), Some("runtime_env"), "{bad}");
        }
    }

    #[test]
    fn whole_numbers_are_exact_as_written_up_to_two_to_the_53() {
        let rules = [("n", Written::Whole)];
        for ok in [
            "0",
            "-0",
            "0.0",
            "-0.0",
            "0e5",
            "600",
            "600.0",
            "6e2",
            "6.00E2",
            "6000e-1",
            "-1000",
            "9007199254740992",
            "9007199254740992.0",
            "9.007199254740992e15",
        ] {
            assert_eq!(field(&format!(r#"{{"n": {ok}}}"#), &rules), None, "{ok}");
        }
        for bad in [
            "600.5",
            "600.00000000000000001",
            "1e-1",
            "9007199254740993",
            "9007199254740993.0",
            "9.007199254740993e15",
            "1e16",
            "-9007199254740993",
            "18446744073709551616",
            "1e300",
        ] {
            assert_eq!(
                field(&format!(r#"{{"n": {bad}}}"#), &rules).as_deref(),
                Some("n"),
                "{bad}"
            );
        }
    }

    #[test]
    fn resource_amounts_have_at_most_four_decimals_as_written() {
        let rules = [("r.cpu", Written::Resource)];
        for ok in [
            "0.3", "0.0001", "1e-4", "2.5E0", "0.30000", "1000000", "12.3450", "0",
        ] {
            assert_eq!(
                field(&format!(r#"{{"r": {{"cpu": {ok}}}}}"#), &rules),
                None,
                "{ok}"
            );
        }
        for bad in [
            "0.3000000001",
            "0.30000000000000001",
            "0.00001",
            "1e-5",
            "1.23456",
        ] {
            assert_eq!(
                field(&format!(r#"{{"r": {{"cpu": {bad}}}}}"#), &rules).as_deref(),
                Some("r.cpu"),
                "{bad}"
            );
        }
    }

    #[test]
    fn paths_reach_map_keys_and_the_last_duplicate_and_skip_the_rest() {
        let rules = [("users.*.max.cpu", Written::Resource)];
        let body = r#"{"users": {"a": {"max": {"cpu": 1}}, "b.c": {"max": {"cpu": 0.00001}}}}"#;
        assert_eq!(field(body, &rules).as_deref(), Some("users.b.c.max.cpu"));
        // The last of a duplicate key counts, as in the typed parse.
        let rules = [("n", Written::Whole)];
        assert_eq!(field(r#"{"n": 0.5, "n": 1}"#, &rules), None);
        assert_eq!(field(r#"{"n": 1, "n": 0.5}"#, &rules).as_deref(), Some("n"));
        // Not a number, not an object, not there: the typed parse's business.
        for body in [
            r#"{"n": "x"}"#,
            r#"{"n": null}"#,
            "[1]",
            "{}",
            r#"{"m": 0.5}"#,
        ] {
            assert_eq!(field(body, &rules), None, "{body}");
        }
    }
}
