//! Request body and query parsing with errors that name the field at fault.
//!
//! A body that is not JSON at all is 400; JSON of the wrong shape is 422 with the
//! dotted path of the field (`resources.cpu`); over `server.max_body_bytes` is 413.

use actix_web::web;
use serde::de::{DeserializeOwned, Deserializer};
use serde::Deserialize;

use super::error::ApiError;

pub mod numbers;

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
/// read, so a large upload that keeps moving is not cut off); 400 `bad_body` when the
/// body cannot be read (its framing is broken).
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
            // A fresh tester's finding: a broken chunked encoding said "not valid JSON".
            Ok(Some(Err(e))) => return Err(ApiError::BadBody(e.to_string())),
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
        ApiError::invalid(field, plain_reason(&reason))
    })
}

/// serde's reason for a value of the wrong type or out of range, in the API's words
/// (DESIGN §4, "Errors"): `invalid type: string "two", expected f64` becomes `must be
/// a number, not the string "two"`, `invalid value: integer `-5`, expected u32` `must
/// be a whole number from 0 to 4294967295, not -5`. No Rust type name reaches a
/// client. Other reasons (missing or unknown fields, ours) pass as they are.
pub fn plain_reason(reason: &str) -> String {
    let rest = reason
        .strip_prefix("invalid type: ")
        .or_else(|| reason.strip_prefix("invalid value: "));
    let Some((got, expected)) = rest.and_then(|r| r.rsplit_once(", expected ")) else {
        return reason.to_string();
    };
    format!(
        "must be {}, not {}",
        plain_expected(expected),
        plain_got(got)
    )
}

/// What a visitor expected (its `expecting` text), in the API's words.
fn plain_expected(expected: &str) -> String {
    let whole = |lo: i128, hi: i128| whole_range(lo, hi);
    match expected {
        "f32" | "f64" => "a number".into(),
        "i8" => whole(i8::MIN.into(), i8::MAX.into()),
        "i16" => whole(i16::MIN.into(), i16::MAX.into()),
        "i32" => whole(i32::MIN.into(), i32::MAX.into()),
        "i64" | "i128" | "isize" => whole(i64::MIN.into(), i64::MAX.into()),
        "u8" => whole(0, u8::MAX.into()),
        "u16" => whole(0, u16::MAX.into()),
        "u32" => whole(0, u32::MAX.into()),
        "u64" | "u128" | "usize" => whole(0, u64::MAX.into()),
        "a string" | "a borrowed string" | "a string or bytes" => "a string".into(),
        "a boolean" => "true or false".into(),
        "a sequence" => "a list".into(),
        "a map" => "a JSON object".into(),
        "unit" => "null".into(),
        "a character" | "char" => "a single character".into(),
        e if e.starts_with("struct ") => "a JSON object".into(),
        e if e.starts_with("a tuple of size ") => {
            format!("a list of {} items", &e["a tuple of size ".len()..])
        }
        e => e.to_string(),
    }
}

/// `a whole number from LO to HI`, each bound held to ±[`numbers::MAX_WHOLE`] (2^53),
/// the bound of every whole-number field.
fn whole_range(lo: i128, hi: i128) -> String {
    let max = i128::from(numbers::MAX_WHOLE);
    format!("a whole number from {} to {}", lo.max(-max), hi.min(max))
}

/// What the client sent, as serde's `Unexpected` shows it, in the API's words.
fn plain_got(got: &str) -> String {
    let quoted = |prefix: &str| {
        got.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('`'))
            .and_then(|r| r.strip_suffix('`'))
            .map(str::to_string)
    };
    if let Some(v) = quoted("integer ")
        .or_else(|| quoted("floating point "))
        .or_else(|| quoted("boolean "))
    {
        return v;
    }
    if let Some(s) = got.strip_prefix("string ") {
        return format!("the string {s}");
    }
    match got {
        "unit value" | "Option value" => "null".into(),
        "map" => "an object".into(),
        "sequence" => "a list".into(),
        other => other.to_string(),
    }
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
            // 128 levels): the field that holds the nesting (`resources.custom.QPU`
            // for `{"resources": {"custom": {"QPU": [[[…]]]}}}`), not the whole path
            // down to it nor only the top-level field (issue 43 §8).
            ApiError::invalid(deep_field(&path), "JSON nested deeper than 127 levels")
        } else {
            ApiError::BadJson(reason)
        }
    })?;
    de.end().map_err(|e| ApiError::BadJson(e.to_string()))?;
    Ok(value)
}

/// The field a nesting too deep is in, from the path down to where the parser gave
/// up: the keys before the first list index, at most [`DEEP_FIELD_KEYS`] of them
/// (an object nested in itself names its first levels, not 127 of them).
fn deep_field(path: &str) -> String {
    let keys: Vec<&str> = path
        .split('[')
        .next()
        .unwrap_or("")
        .split('.')
        .filter(|k| !k.is_empty())
        .take(DEEP_FIELD_KEYS)
        .collect();
    if keys.is_empty() {
        "(body)".to_string()
    } else {
        keys.join(".")
    }
}

/// Keys of a too-deep value's path named: the deepest fields the API declares are
/// three keys down (`resources.custom.NAME`, `users.NAME.max_resources`).
const DEEP_FIELD_KEYS: usize = 3;

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
        ApiError::invalid(field, plain_reason(&reason))
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

    /// A `T` that deserializes from an integer or a whole float within `B`'s range
    /// (the type's own by default; a field's documented range with a marker such as
    /// [`Priority`]), and says that range when the value is outside it or not a whole
    /// number.
    pub struct Whole<T, B = T>(pub T, std::marker::PhantomData<B>);

    /// The range of an integer type, or of a field as documented, to say it when a
    /// number is outside it.
    pub trait Bounds {
        const MIN: i128;
        const MAX: i128;
    }

    macro_rules! bounds {
        ($($t:ty),*) => {$(
            impl Bounds for $t {
                const MIN: i128 = <$t>::MIN as i128;
                const MAX: i128 = <$t>::MAX as i128;
            }
        )*};
    }
    bounds!(i8, i16, i32, i64, u8, u16, u32, u64, usize);

    macro_rules! documented {
        ($($(#[$doc:meta])* $name:ident = $lo:expr, $hi:expr;)*) => {$(
            $(#[$doc])*
            pub struct $name;
            impl Bounds for $name {
                const MIN: i128 = $lo;
                const MAX: i128 = $hi;
            }
        )*};
    }
    documented! {
        /// A job's `priority`: -1000 to 1000.
        Priority = -1000, 1000;
        /// A job's `max_runtime_s`: 1 s to a year.
        MaxRuntime = 1, 31_536_000;
        /// A user's `max_running_jobs` and `max_queued_jobs`: 1 to 1,000,000.
        UserJobLimit = 1, 1_000_000;
        /// A group's `max_running_jobs`: 0 to 1,000,000.
        GroupMaxRunning = 0, 1_000_000;
        /// The what-if preview's `limit`: 1 to 1000.
        PreviewLimit = 1, 1000;
    }

    impl<'de, T: TryFrom<i128>, B: Bounds> Deserialize<'de> for Whole<T, B> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<T, B>(std::marker::PhantomData<(T, B)>);
            impl<T: TryFrom<i128>, B: Bounds> V<T, B> {
                fn fit<E: de::Error>(n: i128) -> Result<Whole<T, B>, E> {
                    let out = || {
                        E::custom(format!(
                            "must be {}, not {n}",
                            super::whole_range(B::MIN, B::MAX)
                        ))
                    };
                    if !(B::MIN..=B::MAX).contains(&n) {
                        return Err(out());
                    }
                    T::try_from(n)
                        .map(|t| Whole(t, std::marker::PhantomData))
                        .map_err(|_| out())
                }
            }
            impl<T: TryFrom<i128>, B: Bounds> Visitor<'_> for V<T, B> {
                type Value = Whole<T, B>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str(&super::whole_range(B::MIN, B::MAX))
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
                        // A whole number too large for an integer (`18446744073709551616`,
                        // `1e20` read as doubles): out of this field's range, which it
                        // says (DESIGN §4), not "expected a whole number".
                        Err(E::custom(format!(
                            "must be {}, not {v:e}",
                            super::whole_range(B::MIN, B::MAX)
                        )))
                    } else {
                        Err(E::invalid_value(de::Unexpected::Float(v), &self))
                    }
                }
            }
            d.deserialize_any(V(std::marker::PhantomData))
        }
    }

    macro_rules! ranged {
        () => {};
        ($(#[$doc:meta])* opt $name:ident: $t:ty, $b:ty; $($rest:tt)*) => {
            $(#[$doc])*
            pub fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<$t>, D::Error> {
                Ok(Option::<Whole<$t, $b>>::deserialize(d)?.map(|w| w.0))
            }
            ranged! { $($rest)* }
        };
        ($(#[$doc:meta])* double $name:ident: $t:ty, $b:ty; $($rest:tt)*) => {
            $(#[$doc])*
            /// Absent = `None`, `null` = `Some(None)`.
            pub fn $name<'de, D: Deserializer<'de>>(
                d: D,
            ) -> Result<Option<Option<$t>>, D::Error> {
                Ok(Some(Option::<Whole<$t, $b>>::deserialize(d)?.map(|w| w.0)))
            }
            ranged! { $($rest)* }
        };
    }
    ranged! {
        /// `priority`, within [`Priority`].
        opt priority: i32, Priority;
        /// `max_runtime_s`, within [`MaxRuntime`].
        opt max_runtime: i64, MaxRuntime;
        /// A user's `max_running_jobs` or `max_queued_jobs`, within [`UserJobLimit`].
        double user_limit_double: i32, UserJobLimit;
        /// A group's `max_running_jobs`, within [`GroupMaxRunning`].
        double group_max_running_double: i32, GroupMaxRunning;
        /// The what-if preview's `limit`, within [`PreviewLimit`].
        opt preview_limit: u32, PreviewLimit;
    }

    /// For `Option<T>` fields.
    pub fn opt<'de, D: Deserializer<'de>, T: TryFrom<i128> + Bounds>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        Ok(Option::<Whole<T>>::deserialize(d)?.map(|w| w.0))
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

#[cfg(test)]
mod tests {
    use super::parse_json;
    use crate::api::error::ApiError;

    /// A fresh tester's finding: an unknown size of 100,000 characters was echoed
    /// back twice; a name longer than any size's is refused without it.
    #[test]
    fn a_size_name_longer_than_any_is_not_echoed() {
        let long = "x".repeat(100_000);
        let body = format!(r#"{{"user": "u", "entrypoint": "run", "size": "{long}"}}"#);
        let req = parse_json::<crate::api::submit::SubmitRequest>(body.as_bytes(), false)
            .expect("parses");
        match req.with_size(&[]) {
            Err(ApiError::Invalid { field, reason }) => {
                assert_eq!(field, "size");
                assert!(reason.len() < 200, "{} bytes", reason.len());
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    /// A fresh tester's finding: a whole-number field said its Rust type's range
    /// ("from -2147483648 to 2147483647") where the documented one is narrower.
    /// Each field with a documented range now says that range, for a value out of it
    /// and for one that is not a whole number, and takes its bounds.
    #[test]
    fn whole_number_fields_say_their_documented_range() {
        let reason = |body: &str| match parse_json::<crate::api::submit::SubmitRequest>(
            body.as_bytes(),
            false,
        ) {
            Err(ApiError::Invalid { field, reason }) => (field, reason),
            other => panic!("{body}: {other:?}"),
        };
        let base = r#""user": "u", "entrypoint": "run""#;
        for (extra, field, says) in [
            (
                r#""priority": "high""#,
                "priority",
                "a whole number from -1000 to 1000, not the string \"high\"",
            ),
            (
                r#""priority": 1.5"#,
                "priority",
                "a whole number from -1000 to 1000, not 1.5",
            ),
            (
                r#""priority": 1001"#,
                "priority",
                "a whole number from -1000 to 1000, not 1001",
            ),
            (
                r#""priority": 3000000000"#,
                "priority",
                "from -1000 to 1000, not 3000000000",
            ),
            (
                r#""max_runtime_s": 0"#,
                "max_runtime_s",
                "a whole number from 1 to 31536000, not 0",
            ),
        ] {
            let (f, r) = reason(&format!("{{{base}, {extra}}}"));
            assert_eq!(f, field, "{extra}");
            assert!(r.contains(says), "{extra}: {r}");
        }
        for ok in [
            r#""priority": -1000"#,
            r#""priority": 1000.0"#,
            r#""max_runtime_s": 31536000"#,
        ] {
            parse_json::<crate::api::submit::SubmitRequest>(
                format!("{{{base}, {ok}}}").as_bytes(),
                false,
            )
            .unwrap_or_else(|e| panic!("{ok}: {e:?}"));
        }
        let user = |body: &str| match parse_json::<crate::api::users::UserUpdate>(
            body.as_bytes(),
            false,
        ) {
            Err(ApiError::Invalid { field, reason }) => (field, reason),
            other => panic!("{body}: {other:?}"),
        };
        let (f, r) = user(r#"{"max_running_jobs": 3000000000}"#);
        assert_eq!(f, "max_running_jobs");
        assert!(r.contains("from 1 to 1000000, not 3000000000"), "{r}");
        let (f, r) = user(r#"{"max_queued_jobs": 1.5}"#);
        assert_eq!(f, "max_queued_jobs");
        assert!(r.contains("from 1 to 1000000"), "{r}");
        match parse_json::<crate::api::groups::GroupUpdate>(br#"{"max_running_jobs": -1}"#, false) {
            Err(ApiError::Invalid { field, reason }) => {
                assert_eq!(field, "max_running_jobs");
                assert!(reason.contains("from 0 to 1000000, not -1"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        match parse_json::<crate::api::what_if::WhatIfRequest>(br#"{"limit": "5"}"#, false) {
            Err(ApiError::Invalid { field, reason }) => {
                assert_eq!(field, "limit");
                assert!(reason.contains("from 1 to 1000"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}
