//! Ray's bytes (issue 31, part 2): every JSON body under `/api/` is written as Ray's
//! dashboard writes it, Python's `json.dumps` with its defaults: `", "` between items,
//! `": "` after keys, every character outside printable ASCII as `\uXXXX` (UTF-16
//! surrogate pairs beyond the BMP; DEL too), floats as Python's `repr` (`1e+16`,
//! `1e-05`, `100.0`), and fields in Ray's order ([`JobDetails`]). A client that scans
//! the raw bytes (the qiskit-serverless gateway looks for `"logs": "` in a log body)
//! finds what it finds on Ray. `tests/api/ray_bytes.rs` holds this to bodies recorded
//! from a real Ray head (`tests/fixtures/ray-2.60/`).

use std::io::{self, Write};

use actix_web::body::MessageBody;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::{Deserialize, Serialize};
use serde_json::ser::{CharEscape, Formatter};
use serde_json::Value;

use crate::api::ApiError;

/// serde_json's [`Formatter`] with `json.dumps`' defaults.
pub struct PyFormatter;

impl Formatter for PyFormatter {
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn write_f64<W: ?Sized + Write>(&mut self, w: &mut W, v: f64) -> io::Result<()> {
        w.write_all(py_float(v).as_bytes())
    }

    fn write_f32<W: ?Sized + Write>(&mut self, w: &mut W, v: f32) -> io::Result<()> {
        w.write_all(py_float(f64::from(v)).as_bytes())
    }

    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if c.is_ascii() && c != '\u{7f}' {
                continue;
            }
            w.write_all(&fragment.as_bytes()[start..i])?;
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                write!(w, "\\u{u:04x}")?;
            }
            start = i + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[start..])
    }

    fn write_char_escape<W: ?Sized + Write>(&mut self, w: &mut W, e: CharEscape) -> io::Result<()> {
        let s: &[u8] = match e {
            CharEscape::Quote => b"\\\"",
            CharEscape::ReverseSolidus => b"\\\\",
            CharEscape::Solidus => b"/",
            CharEscape::Backspace => b"\\b",
            CharEscape::FormFeed => b"\\f",
            CharEscape::LineFeed => b"\\n",
            CharEscape::CarriageReturn => b"\\r",
            CharEscape::Tab => b"\\t",
            CharEscape::AsciiControl(b) => return write!(w, "\\u{b:04x}"),
        };
        w.write_all(s)
    }
}

/// Python's `repr` of a float, as `json.dumps` writes it: the shortest digits that
/// read back, in fixed notation for exponents −4 to 15 (with `.0` when whole), else
/// `d.ddde±XX`; `NaN`, `Infinity`, `-Infinity` as `json.dumps` allows them.
pub fn py_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let n = digits.len() as i32;
    if (-4..16).contains(&exp) {
        let point = exp + 1;
        let body = if point <= 0 {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        } else if point >= n {
            format!("{digits}{}.0", "0".repeat((point - n) as usize))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        format!("{sign}{body}")
    } else {
        let rest = &digits[1..];
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{}{frac}e{esign}{:02}", &digits[..1], exp.abs())
    }
}

/// `value` as `json.dumps(value)` writes it.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter);
    // Serializing into a Vec fails only for a map with non-string keys, which none of
    // these bodies has; an empty body then shows the fault rather than a panic.
    if value.serialize(&mut ser).is_err() {
        out.clear();
    }
    out
}

/// A 200 with `value` as Ray's dashboard writes it (`application/json; charset=utf-8`,
/// as aiohttp labels it).
pub fn ok<T: Serialize + ?Sized>(value: &T) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json; charset=utf-8")
        .body(to_vec(value))
}

/// Ray's `JobDetails` in Ray's field order (Ray 2.60, `tests/fixtures/ray-2.60/get.body`),
/// and fairshare's own object last (Ray's client ignores it).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobDetails {
    #[serde(rename = "type")]
    pub kind: Value,
    pub job_id: Value,
    pub submission_id: Value,
    pub driver_info: Value,
    pub status: Value,
    pub entrypoint: Value,
    pub message: Value,
    pub error_type: Value,
    pub start_time: Value,
    pub end_time: Value,
    pub metadata: Value,
    pub runtime_env: Value,
    /// The job's custom resources (Ray's `entrypoint_resources`); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint_resources: Option<Value>,
    pub driver_agent_http_address: Value,
    pub driver_node_id: Value,
    pub driver_exit_code: Value,
    /// fairshare's view of the job; absent from Ray's own bodies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairshare: Option<Value>,
}

impl JobDetails {
    /// The details `v` holds (a JSON object with these fields; a missing one is null),
    /// in Ray's order.
    pub fn from_value(mut v: Value) -> JobDetails {
        let mut take = |k: &str| v.get_mut(k).map(Value::take).unwrap_or(Value::Null);
        JobDetails {
            kind: take("type"),
            job_id: take("job_id"),
            submission_id: take("submission_id"),
            driver_info: take("driver_info"),
            status: take("status"),
            entrypoint: take("entrypoint"),
            message: take("message"),
            error_type: take("error_type"),
            start_time: take("start_time"),
            end_time: take("end_time"),
            metadata: take("metadata"),
            runtime_env: take("runtime_env"),
            entrypoint_resources: Some(take("entrypoint_resources")).filter(|r| !r.is_null()),
            driver_agent_http_address: take("driver_agent_http_address"),
            driver_node_id: take("driver_node_id"),
            driver_exit_code: take("driver_exit_code"),
            fairshare: Some(take("fairshare")).filter(|f| !f.is_null()),
        }
    }
}

/// An error of a `/api/` route: fairshare's JSON error body, written as Ray writes
/// JSON ([`to_vec`]); status and headers (`Allow`, `Retry-After`) as `ApiError`'s.
#[derive(Debug)]
pub struct RayError(pub ApiError);

impl From<ApiError> for RayError {
    fn from(e: ApiError) -> Self {
        RayError(e)
    }
}

impl From<sea_orm::DbErr> for RayError {
    fn from(e: sea_orm::DbErr) -> Self {
        RayError(e.into())
    }
}

impl std::fmt::Display for RayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl ResponseError for RayError {
    fn status_code(&self) -> StatusCode {
        self.0.status_code()
    }

    fn error_response(&self) -> HttpResponse {
        let (head, body) = self.0.error_response().into_parts();
        match body.try_into_bytes() {
            Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                Ok(v) => head.set_body(to_vec(&v)).map_into_boxed_body(),
                Err(_) => head.set_body(bytes.to_vec()).map_into_boxed_body(),
            },
            Err(body) => head.set_body(body),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_read_as_pythons_repr() {
        for (v, py) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (0.5, "0.5"),
            (100.0, "100.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (0.0001, "0.0001"),
            (1e-5, "1e-05"),
            (1.25e-7, "1.25e-07"),
            (123456789.125, "123456789.125"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (0.1 + 0.2, "0.30000000000000004"),
        ] {
            assert_eq!(py_float(v), py, "{v:e}");
        }
    }

    #[test]
    fn bodies_are_written_with_json_dumps_defaults() {
        let v = json!({"a": [1, 2.5, null, true], "s": "é ✓ 😀 \u{7f} \"\\\n\t\u{1}/"});
        assert_eq!(
            String::from_utf8(to_vec(&v)).unwrap(),
            r#"{"a": [1, 2.5, null, true], "s": "\u00e9 \u2713 \ud83d\ude00 \u007f \"\\\n\t\u0001/"}"#
        );
        assert_eq!(to_vec(&json!({})), b"{}");
        assert_eq!(to_vec(&json!([])), b"[]");
    }
}
