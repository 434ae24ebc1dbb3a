//! Request body and query parsing with errors that name the field at fault.
//!
//! A body that is not JSON at all is 400; JSON of the wrong shape is 422 with the
//! dotted path of the field (`resources.cpu`); over `server.max_body_bytes` is 413.

use actix_web::web;
use serde::de::{DeserializeOwned, Deserializer};
use serde::Deserialize;

use super::error::ApiError;

/// Reads a JSON request body of at most `server.max_body_bytes`, with
/// `server.body_idle_timeout` (see [`read_body_limited`]). A body that is not empty
/// must come with `Content-Type: application/json` (any parameters, such as
/// `charset`): 415 otherwise (DESIGN §4, "Content-Type"). A browser sends a
/// cross-site `text/plain` or form body without asking the server first (no CORS
/// preflight), so this is what keeps another site's page from submitting through a
/// browser on the service's machine while no token is configured.
pub async fn read_body(
    req: &actix_web::HttpRequest,
    payload: web::Payload,
    server: &crate::config::ServerSettings,
) -> Result<web::Bytes, ApiError> {
    let body = read_body_limited(
        req,
        payload,
        server.max_body_bytes,
        server.body_idle_timeout,
    )
    .await?;
    if !body.is_empty() {
        check_json_content_type(req)?;
    }
    Ok(body)
}

/// Checks that `req` declares `Content-Type: application/json` (type and subtype in
/// any case, with or without parameters). Errors: 415 naming the header.
pub fn check_json_content_type(req: &actix_web::HttpRequest) -> Result<(), ApiError> {
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let is_json = declared.as_deref().is_some_and(|v| {
        let essence = v.split(';').next().unwrap_or("").trim();
        essence.eq_ignore_ascii_case("application/json")
    });
    if is_json {
        Ok(())
    } else {
        let mut shown = declared;
        if let Some(s) = shown.as_mut() {
            // Echo at most a line's worth of what the client sent.
            if let Some((cut, _)) = s.char_indices().nth(100) {
                s.truncate(cut);
                s.push('…');
            }
        }
        Err(ApiError::UnsupportedMediaType(shown))
    }
}

/// Reads the whole body, refusing more than `limit` bytes: at once when the declared
/// `Content-Length` is over the limit, else as soon as the bytes read exceed it.
/// Errors: 413 over the limit; 408 when no bytes arrive for `idle`
/// (`server.body_idle_timeout`: actix-web times out slow *headers*, not a body that
/// stops half-way, which would otherwise hold its connection for ever; counted per
/// read, so a large upload that keeps moving is not cut off); 400 when the body cannot
/// be read.
pub async fn read_body_limited(
    req: &actix_web::HttpRequest,
    mut payload: web::Payload,
    limit: usize,
    idle: std::time::Duration,
) -> Result<web::Bytes, ApiError> {
    use futures_util::StreamExt;
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let mut body = web::BytesMut::new();
    loop {
        match tokio::time::timeout(idle, payload.next()).await {
            Err(_) => {
                return Err(ApiError::BodyTimeout {
                    idle_s: idle.as_secs_f64(),
                })
            }
            Ok(None) => return Ok(body.freeze()),
            Ok(Some(Err(e))) => return Err(ApiError::BadJson(format!("cannot read body: {e}"))),
            Ok(Some(Ok(chunk))) => {
                if body.len() + chunk.len() > limit {
                    return Err(ApiError::PayloadTooLarge { limit });
                }
                body.extend_from_slice(&chunk);
            }
        }
    }
}

/// Parses `bytes` as JSON into `T`. An empty body parses as `{}` when `empty_ok`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8], empty_ok: bool) -> Result<T, ApiError> {
    let value: serde_json::Value = if empty_ok && bytes.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Object(Default::default())
    } else {
        parse_value(bytes)?
    };
    if !value.is_object() {
        return Err(ApiError::invalid("(body)", "must be a JSON object"));
    }
    if let Some(field) = find_nul(&value, "") {
        return Err(ApiError::invalid(
            field,
            "must not contain NUL (\\u0000) characters",
        ));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let reason = e.inner().to_string();
        let path = e.path().to_string();
        let field = if path == "." {
            // serde reports missing and unknown fields at the parent: take the name from
            // the message, e.g. "missing field `user`".
            reason
                .split('`')
                .nth(1)
                .map(str::to_string)
                .unwrap_or_else(|| "(body)".to_string())
        } else {
            path
        };
        ApiError::invalid(field, reason)
    })
}

/// Parses `bytes` as one JSON value. Syntax errors are 400 `bad_json`; a number too
/// large for a double (`1e400`, a 400-digit integer), which is valid JSON, is 422
/// naming the field it stands in (its path as `serde_path_to_error` tracked it), and
/// so is JSON nested deeper than 127 levels (naming the top-level field it is in).
fn parse_value(bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: serde_json::Value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let reason = e.into_inner().to_string();
        if reason.starts_with("number out of range") && path != "." {
            ApiError::invalid(path, "number out of range (larger than 1.8e308)")
        } else if reason.starts_with("recursion limit exceeded") {
            // Valid JSON, nested deeper than the parser goes (serde_json's limit of
            // 128 levels): the field it is in, not the whole path down to it.
            let field = path
                .split(['.', '['])
                .find(|f| !f.is_empty())
                .unwrap_or("(body)")
                .to_string();
            ApiError::invalid(field, "JSON nested deeper than 127 levels")
        } else {
            ApiError::BadJson(reason)
        }
    })?;
    de.end().map_err(|e| ApiError::BadJson(e.to_string()))?;
    Ok(value)
}

/// The dotted path of the first string or key in `v` that contains a NUL character,
/// which no database text column accepts (PostgreSQL refuses it outright).
fn find_nul(v: &serde_json::Value, path: &str) -> Option<String> {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match v {
        serde_json::Value::String(s) if s.contains('\0') => Some(if path.is_empty() {
            "(body)".into()
        } else {
            path.to_string()
        }),
        serde_json::Value::Array(items) => items.iter().enumerate().find_map(|(i, x)| {
            find_nul(
                x,
                &format!("{}[{i}]", if path.is_empty() { "(body)" } else { path }),
            )
        }),
        serde_json::Value::Object(map) => map.iter().find_map(|(k, x)| {
            if k.contains('\0') {
                Some(join(&k.replace('\0', "\\u0000")))
            } else {
                find_nul(x, &join(k))
            }
        }),
        _ => None,
    }
}

/// Parses a query string into `T`, naming the parameter at fault (422).
pub fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let pairs: Vec<(String, String)> = web::Query::<Vec<(String, String)>>::from_query(query)
        .map_err(|e| ApiError::invalid("(query)", e.to_string()))?
        .into_inner();
    let mut map = serde_json::Map::new();
    for (k, v) in pairs {
        if v.contains('\0') || k.contains('\0') {
            return Err(ApiError::invalid(k, "must not contain NUL characters"));
        }
        if map
            .insert(k.clone(), serde_json::Value::String(v))
            .is_some()
        {
            return Err(ApiError::invalid(k, "given more than once"));
        }
    }
    serde_path_to_error::deserialize(serde_json::Value::Object(map)).map_err(|e| {
        let reason = e.inner().to_string();
        let path = e.path().to_string();
        let field = if path == "." {
            reason.split('`').nth(1).unwrap_or("(query)").to_string()
        } else {
            path
        };
        ApiError::invalid(field, reason)
    })
}

/// For an `Option<Option<T>>` field with `#[serde(default, deserialize_with =
/// "nullable")]`: absent = `None`, `null` = `Some(None)` (serde alone reads `null` as
/// absent). For whole numbers and objects use `whole::double_opt`, `object::double_opt`.
pub fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Ok(Some(Option::<T>::deserialize(d)?))
}

/// Integer fields that also accept a whole number written with a decimal point
/// (`600.0`): JSON Schema counts it as an integer and Python clients send it. `600.5`,
/// and anything outside the target type's range, is refused naming the field (422).
///
/// Use with `#[serde(default, deserialize_with = "whole::opt")]` on `Option<T>`, or
/// `whole::double_opt` on `Option<Option<T>>` (absent vs `null`).
pub mod whole {
    use std::fmt;

    use serde::de::{self, Deserializer, Visitor};
    use serde::Deserialize;

    /// A `T` that deserializes from an integer or a whole float.
    pub struct Whole<T>(pub T);

    impl<'de, T: TryFrom<i128>> Deserialize<'de> for Whole<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<T>(std::marker::PhantomData<T>);
            impl<T: TryFrom<i128>> V<T> {
                fn fit<E: de::Error>(n: i128) -> Result<Whole<T>, E> {
                    T::try_from(n)
                        .map(Whole)
                        .map_err(|_| E::custom(format!("{n} is out of range for this field")))
                }
            }
            impl<T: TryFrom<i128>> Visitor<'_> for V<T> {
                type Value = Whole<T>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a whole number")
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                    Self::fit(i128::from(v))
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                    Self::fit(i128::from(v))
                }
                fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                    // 2^63 bounds every target type; beyond it the cast would saturate.
                    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.3e18 {
                        Self::fit(v as i128)
                    } else if v.is_finite() && v.fract() == 0.0 {
                        // A whole number too large for an integer (`18446744073709551616`
                        // reads as a double): say so, as the bound of every whole-number
                        // field (`numbers::MAX_WHOLE`), not "expected a whole number".
                        Err(E::custom(super::numbers::too_large()))
                    } else {
                        Err(E::invalid_value(de::Unexpected::Float(v), &self))
                    }
                }
            }
            d.deserialize_any(V(std::marker::PhantomData))
        }
    }

    /// For `Option<T>` fields.
    pub fn opt<'de, D: Deserializer<'de>, T: TryFrom<i128>>(d: D) -> Result<Option<T>, D::Error> {
        Ok(Option::<Whole<T>>::deserialize(d)?.map(|w| w.0))
    }

    /// For `Option<Option<T>>` fields: absent = `None`, `null` = `Some(None)`.
    pub fn double_opt<'de, D: Deserializer<'de>, T: TryFrom<i128>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Ok(Some(Option::<Whole<T>>::deserialize(d)?.map(|w| w.0)))
    }
}

/// Struct fields that take a JSON object only. serde's derived `Deserialize` also takes
/// a struct written as an array of its fields in order (`"resources": [1, 0]`), which
/// the OpenAPI document does not allow; these helpers refuse it (422 naming the field)
/// while errors inside the object keep their full path (`resources.cpu`).
///
/// Use with `#[serde(default, deserialize_with = "object::opt")]` on `Option<T>`,
/// `object::double_opt` on `Option<Option<T>>` (absent vs `null`), and `object::map`
/// on `BTreeMap<String, T>`.
pub mod object {
    use std::collections::BTreeMap;
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::value::MapAccessDeserializer;
    use serde::de::{Deserializer, MapAccess, Visitor};
    use serde::Deserialize;

    /// A `T` read from a JSON object only.
    pub struct ObjectOnly<T>(pub T);

    impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOnly<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<T>(PhantomData<T>);
            impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
                type Value = ObjectOnly<T>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                    T::deserialize(MapAccessDeserializer::new(map)).map(ObjectOnly)
                }
            }
            d.deserialize_map(V(PhantomData))
        }
    }

    /// For `Option<T>` fields.
    pub fn opt<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        Ok(Option::<ObjectOnly<T>>::deserialize(d)?.map(|o| o.0))
    }

    /// For `Option<Option<T>>` fields: absent = `None`, `null` = `Some(None)`.
    pub fn double_opt<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Ok(Some(Option::<ObjectOnly<T>>::deserialize(d)?.map(|o| o.0)))
    }

    /// For `BTreeMap<String, T>` fields whose values are objects.
    pub fn map<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, T>, D::Error> {
        Ok(BTreeMap::<String, ObjectOnly<T>>::deserialize(d)?
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect())
    }
}

/// Numbers checked as the client wrote them, not as the double they parse to
/// (DESIGN §4, "Numbers as written"). The JSON layer reads every number with a
/// fraction or an exponent as a double, which cannot tell `9007199254740993.0` from
/// `9007199254740992` or `0.30000000000000001` from `0.3`; these checks read the text.
///
/// Each route lists its fields with a [`Written`] rule as dotted paths (`*` for any
/// key of a map: `users.*.max_resources.cpu`) and calls [`check`] on the body after
/// the typed parse, so that a missing or mistyped field keeps its own error. Only the
/// objects on those paths are read again; what a path does not reach (`runtime_env`)
/// is skipped over once.
pub mod numbers {
    use std::collections::BTreeMap;

    use serde_json::value::RawValue;

    use crate::api::error::ApiError;

    /// Every whole number from 0 up to this one (2^53) is exact as a double, which is
    /// how the policy, the console's JavaScript and most JSON clients read a number;
    /// above it they are not (`2^53 + 1` reads as `2^53`). The bound of every
    /// integer field: `memory_bytes` (8 PiB) and the small ones alike.
    pub const MAX_WHOLE: u64 = 1 << 53;

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

    /// The reason given for a whole number beyond [`MAX_WHOLE`] in magnitude, however
    /// it was found (as written, as parsed, as stored).
    pub fn too_large() -> String {
        format!(
            "must be at most {MAX_WHOLE} in magnitude (2^53: whole numbers above it are not \
             exact as doubles)"
        )
    }

    /// Why `text` breaks `rule`, if it does.
    fn broken(text: &str, rule: Written) -> Option<String> {
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
        let rules: Vec<(&[&str], Written)> =
            split.iter().map(|(p, r)| (p.as_slice(), *r)).collect();
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
}
