//! `GET /v1/usage` (issue 48, DESIGN §4 "Usage"): what users, groups, clusters or sizes
//! held over a range, step by step, from the database (`store::usage_report`), as
//! JSON or, with `Accept: text/csv`, CSV.

use std::collections::BTreeMap;

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, TimeZone, Timelike, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::body::parse_query;
use super::error::{ApiError, ErrorBody};
use super::validate::validate_user_id;
use super::AppState;
use crate::config::Role;
use crate::store::{self, UsageBy, UsageQuery, UsageRow, UsageStep};

/// The default range: this long before now.
pub const DEFAULT_DAYS: i64 = 30;

/// Query of `GET /v1/usage`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsageParams {
    /// Start of the range (RFC 3339, e.g. `2026-12-01T00:00:00Z`), rounded down to its
    /// step; default: 30 days before `to`. A range that ends at or before its start
    /// is empty. From 1970-01-01T00:00:00Z to 9999-01-01T00:00:00Z (422 otherwise),
    /// as `to`.
    #[param(value_type = Option<String>, format = DateTime)]
    pub from: Option<String>,
    /// End of the range, exclusive (RFC 3339), rounded up to its step; default: now.
    /// From 1970-01-01T00:00:00Z to 9999-01-01T00:00:00Z (422 otherwise).
    #[param(value_type = Option<String>, format = DateTime)]
    pub to: Option<String>,
    /// What each row is keyed by: `user` (default), `group` (the user's group path,
    /// `""` the root), `cluster` (the Ray cluster or pool) or `size` (the job's named
    /// size, `""` none).
    #[param(value_type = Option<UsageByName>)]
    pub by: Option<String>,
    /// The rows' time step: `hour`, `day` (default) or `month` (UTC).
    #[param(value_type = Option<UsageStepName>)]
    pub step: Option<String>,
    /// Only this user's usage (a token with a user sees only its own).
    #[param(value_type = Option<String>, min_length = 1, max_length = 128)]
    pub user: Option<String>,
}

/// A `by=` value (schema only).
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum UsageByName {
    User,
    Group,
    Cluster,
    Size,
}

/// A `step=` value (schema only).
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum UsageStepName {
    Hour,
    Day,
    Month,
}

/// The report.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UsageReport {
    /// Start of the range as answered (rounded down to the step).
    pub from: DateTime<Utc>,
    /// End of the range, exclusive, as answered (rounded up to the step); for a range
    /// asked to end at or before its start, equal to `from`: the empty range answered,
    /// with no rows (not the `to` asked: a tester read that as a value nobody asked).
    pub to: DateTime<Utc>,
    /// `hour`, `day` or `month`.
    pub step: String,
    /// `user`, `group`, `cluster` or `size`.
    pub by: String,
    /// When the report was read: jobs still holding resources count up to this moment.
    pub now: DateTime<Utc>,
    /// One row per step and key with anything in it, by start then key.
    pub rows: Vec<UsageRowView>,
}

/// One step and one key of a report.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UsageRowView {
    /// The step's start.
    pub start: DateTime<Utc>,
    /// The user id, group path, cluster or size (`""`: the root group, no cluster, no
    /// size).
    pub key: String,
    /// Core-seconds held (declared cores × seconds held).
    pub core_seconds: f64,
    /// GPU-seconds held.
    pub gpu_seconds: f64,
    /// Byte-seconds of memory held.
    pub memory_byte_seconds: f64,
    /// Custom resources: name → unit-seconds held.
    pub custom_seconds: BTreeMap<String, f64>,
    /// What the jobs actually held by Ray's State API (what `scheduler.charge =
    /// "actual"` charges); a stretch with no reading (a pool's job, a cluster without
    /// the State API, the seconds before a job's first reading) counts as declared.
    #[serde(default)]
    pub actual: ActualUse,
    /// Jobs that ended in the step, by final status.
    pub jobs: EndedJobs,
    /// Waits of the jobs that ended in the step and were granted: seconds queued
    /// before the job's last grant (from submit, and from each return to the queue, to
    /// the next grant; what it held between is not a wait).
    pub wait_seconds: Waits,
}

/// Resources actually held, by Ray's State API (declared where it had no reading).
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct ActualUse {
    /// Core-seconds.
    pub core_seconds: f64,
    /// GPU-seconds.
    pub gpu_seconds: f64,
    /// Byte-seconds of memory.
    pub memory_byte_seconds: f64,
}

/// Jobs that ended, by final status.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EndedJobs {
    pub succeeded: u64,
    pub failed: u64,
    pub stopped: u64,
}

/// Percentiles of waits, whole seconds, from a histogram (bins below 1, 5, 10, 30,
/// 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 43200, 86400 s and above): the
/// nearest-rank percentile's bin's upper bound (the bound less 1 s), or the longest
/// wait when that is less; null when `count` is 0. An upper bound, never an
/// understatement.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Waits {
    pub count: u64,
    pub p50: Option<i64>,
    pub p90: Option<i64>,
    pub p99: Option<i64>,
}

fn row_view(r: UsageRow) -> UsageRowView {
    let p = |q| r.sums.wait_percentile(q);
    UsageRowView {
        start: ts(r.start),
        key: r.key.clone(),
        core_seconds: r.sums.cpu_ms as f64 / 1000.0,
        gpu_seconds: r.sums.gpu_ms as f64 / 1000.0,
        memory_byte_seconds: r.sums.memory_bs as f64,
        custom_seconds: r
            .sums
            .custom
            .iter()
            .map(|(k, v)| (k.clone(), *v as f64 / 1000.0))
            .collect(),
        actual: ActualUse {
            core_seconds: r.sums.actual_cpu_ms as f64 / 1000.0,
            gpu_seconds: r.sums.actual_gpu_ms as f64 / 1000.0,
            memory_byte_seconds: r.sums.actual_memory_bs as f64,
        },
        jobs: EndedJobs {
            succeeded: r.sums.succeeded,
            failed: r.sums.failed,
            stopped: r.sums.stopped,
        },
        wait_seconds: Waits {
            count: r.sums.wait_count(),
            p50: p(50.0),
            p90: p(90.0),
            p99: p(99.0),
        },
    }
}

fn ts(t: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(t, 0).single().unwrap_or_default()
}

/// The latest `from` or `to` taken, seconds: 9999-01-01T00:00:00Z, so that a range
/// rounded up to whole steps still ends in a four-digit year (RFC 3339's; a fresh
/// tester's finding: `to=9999-12-31T23:59:59Z` answered `+10000-01-01T00:00:00Z`).
const LATEST: i64 = 253_370_764_800;

/// An RFC 3339 time from 1970-01-01T00:00:00Z to [`LATEST`], in seconds since the
/// epoch; 422 naming `field` otherwise.
///
/// A fraction of a second is taken and dropped (usage is kept in whole seconds), but
/// not past [`LATEST`] (`9999-01-01T00:00:00.5Z` is refused); second 60 is taken only
/// where RFC 3339 allows a leap second, at 23:59:60 UTC (chrono reads it anywhere; a
/// tester's `02:00:60Z` was taken as `02:00:59Z`).
fn parse_time(field: &str, s: &str) -> Result<i64, ApiError> {
    let parsed = DateTime::parse_from_rfc3339(s).map_err(|_| {
        ApiError::invalid(
            field,
            "must be an RFC 3339 time such as 2026-12-01T00:00:00Z",
        )
    })?;
    let utc = parsed.with_timezone(&Utc);
    if utc.nanosecond() >= 1_000_000_000 && (utc.hour(), utc.minute()) != (23, 59) {
        return Err(ApiError::invalid(
            field,
            "has second 60, a leap second, which RFC 3339 allows only at 23:59:60 UTC",
        ));
    }
    let t = utc.timestamp();
    let past_latest = t == LATEST && utc.timestamp_subsec_nanos() > 0;
    if (0..=LATEST).contains(&t) && !past_latest {
        Ok(t)
    } else {
        Err(ApiError::invalid(
            field,
            "must be from 1970-01-01T00:00:00Z to 9999-01-01T00:00:00Z",
        ))
    }
}

/// The query a request asks for, checked: 422 names the parameter at fault.
pub fn query_of(p: UsageParams, now: i64) -> Result<UsageQuery, ApiError> {
    let by = match p.by.as_deref() {
        None => UsageBy::User,
        Some(s) => UsageBy::parse(s)
            .ok_or_else(|| ApiError::invalid("by", "must be one of user, group, cluster, size"))?,
    };
    let step = match p.step.as_deref() {
        None => UsageStep::Day,
        Some(s) => UsageStep::parse(s)
            .ok_or_else(|| ApiError::invalid("step", "must be one of hour, day, month"))?,
    };
    let to = match p.to.as_deref() {
        None => now,
        Some(s) => parse_time("to", s)?,
    };
    let from = match p.from.as_deref() {
        // Not before the epoch, as a given `from` (a fresh tester's finding:
        // `to=1970-01-01T00:00:00Z` answered a `from` in 1969).
        None => (to - DEFAULT_DAYS * 86_400).max(0),
        Some(s) => parse_time("from", s)?,
    };
    // A range that ends at or before its start is empty (not an error: the rule spans
    // two parameters, which the OpenAPI document cannot state).
    let (from, to) = if from < to {
        (step.floor(from), step.ceil(to))
    } else {
        (step.floor(from), step.floor(from))
    };
    if let Some(u) = &p.user {
        validate_user_id("user", u)?;
    }
    Ok(UsageQuery {
        from,
        to,
        step,
        by,
        user: p.user,
    })
}

/// `GET /v1/usage?from=&to=&by=&step=&user=`: resources held per step and key
/// (declared cores, GPUs, bytes and custom resources × seconds held, and the cores,
/// GPUs and bytes actually held by Ray's State API), jobs ended by
/// status and their waits. From the database: the rollup written as holds end, plus
/// the jobs holding resources now (DESIGN §6, "Usage rollup"). `Accept: text/csv`
/// gives CSV (one line per row, a header first).
#[utoipa::path(get, path = "/v1/usage", tag = "usage", params(UsageParams), operation_id = "usage",
    responses((status = 200, description = "the report; CSV with `Accept: text/csv` (columns start, key, core_seconds, gpu_seconds, memory_byte_seconds, succeeded, failed, stopped, waits, wait_p50_s, wait_p90_s, wait_p99_s, actual_core_seconds, actual_gpu_seconds, actual_memory_byte_seconds, then custom:<name> per custom resource)",
                content((UsageReport = "application/json"), (String = "text/csv"))),
              (status = 401, body = ErrorBody),
              (status = 422, body = ErrorBody, description = "a parameter is invalid (details.field): a time that is not RFC 3339, an unknown by or step, a parameter not listed, or a user the token may not read"),
              (status = 503, body = ErrorBody, description = "the database is unavailable; Retry-After")),
    security(("bearer" = [])))]
pub async fn usage(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let who = state.auth.identify(&req, Role::Submitter, "read usage")?;
    let mut p: UsageParams = parse_query(req.query_string())?;
    if let Some(u) = &p.user {
        validate_user_id("user", u)?;
    }
    p.user = who.user_filter("user", p.user)?;
    let now = Utc::now().timestamp();
    let q = query_of(p, now)?;
    let rows = store::usage_report(&state.db, &q, now).await?;
    let report = report_of(&q, now, rows);
    if wants_csv(&req) {
        return Ok(HttpResponse::Ok()
            .content_type("text/csv; charset=utf-8")
            .body(to_csv(&report)));
    }
    Ok(HttpResponse::Ok().json(report))
}

/// The answer of `GET /v1/usage` for `q` read at `now` (Unix seconds) from `rows`
/// (`store::usage_report`'s): percentiles of the waits, units in seconds.
pub fn report_of(q: &UsageQuery, now: i64, rows: Vec<UsageRow>) -> UsageReport {
    UsageReport {
        from: ts(q.from),
        to: ts(q.to),
        step: q.step.as_str().into(),
        by: q.by.as_str().into(),
        now: ts(now),
        rows: rows.into_iter().map(row_view).collect(),
    }
}

/// Whether the request's `Accept` prefers CSV to JSON (RFC 9110 §12.5.1): each type's
/// quality is that of the most specific range matching it (`text/csv`, `text/*`, `*/*`;
/// `application/json`, `application/*`, `*/*`); CSV when its quality is above 0 and
/// above JSON's, or equal to it with `text/csv` listed before `application/json`.
/// Anything else, an `Accept` that does not parse or one that accepts neither, gets JSON
/// (the default, rather than 406).
fn wants_csv(req: &HttpRequest) -> bool {
    use actix_web::http::header::{Accept, Header, Quality};
    let Ok(accept) = Accept::parse(req) else {
        return false;
    };
    // The quality of the most specific range matching `type/subtype`, and where the
    // exact type is listed (for ties).
    let quality = |type_: &str, subtype: &str| {
        let mut best: Option<(u8, Quality)> = None;
        let mut listed = None;
        for (i, item) in accept.0.iter().enumerate() {
            let (t, s) = (item.item.type_().as_str(), item.item.subtype().as_str());
            let specificity = match (t == type_, s == subtype) {
                (true, true) => 2,
                (true, false) if s == "*" => 1,
                _ if t == "*" && s == "*" => 0,
                _ => continue,
            };
            if specificity == 2 {
                listed.get_or_insert(i);
            }
            if best.is_none_or(|(b, _)| specificity > b) {
                best = Some((specificity, item.quality));
            }
        }
        (best.map_or(Quality::ZERO, |(_, q)| q), listed)
    };
    let (csv, csv_at) = quality("text", "csv");
    let (json, json_at) = quality("application", "json");
    csv > Quality::ZERO
        && (csv > json || (csv == json && csv_at.is_some_and(|c| json_at.is_none_or(|j| c < j))))
}

/// A CSV field: quoted when it holds a comma, quote or line break; a leading `=`, `+`,
/// `-` or `@` gets a `'` first (a spreadsheet would take it for a formula).
fn csv_field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@']) {
        format!("'{s}")
    } else {
        s.to_string()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// The report as CSV: a header, then one line per row.
pub fn to_csv(r: &UsageReport) -> String {
    let custom: std::collections::BTreeSet<&String> = r
        .rows
        .iter()
        .flat_map(|x| x.custom_seconds.keys())
        .collect();
    let mut out = String::from(
        "start,key,core_seconds,gpu_seconds,memory_byte_seconds,succeeded,failed,stopped,waits,wait_p50_s,wait_p90_s,wait_p99_s,actual_core_seconds,actual_gpu_seconds,actual_memory_byte_seconds",
    );
    for c in &custom {
        out.push(',');
        out.push_str(&csv_field(&format!("custom:{c}")));
    }
    out.push('\n');
    let opt = |v: Option<i64>| v.map(|x| x.to_string()).unwrap_or_default();
    for x in &r.rows {
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            x.start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            csv_field(&x.key),
            x.core_seconds,
            x.gpu_seconds,
            x.memory_byte_seconds,
            x.jobs.succeeded,
            x.jobs.failed,
            x.jobs.stopped,
            x.wait_seconds.count,
            opt(x.wait_seconds.p50),
            opt(x.wait_seconds.p90),
            opt(x.wait_seconds.p99),
            x.actual.core_seconds,
            x.actual.gpu_seconds,
            x.actual.memory_byte_seconds,
        ));
        for c in &custom {
            out.push(',');
            out.push_str(&x.custom_seconds.get(*c).copied().unwrap_or(0.0).to_string());
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(from: Option<&str>, to: Option<&str>, step: Option<&str>) -> UsageParams {
        UsageParams {
            from: from.map(Into::into),
            to: to.map(Into::into),
            by: None,
            step: step.map(Into::into),
            user: None,
        }
    }

    /// `Accept` with q-values: a quality of 0 refuses a type, the higher quality wins,
    /// the most specific range gives a type its quality, ties go to the first listed.
    #[test]
    fn csv_is_chosen_by_the_accept_headers_qualities() {
        let wants = |accept: Option<&str>| {
            let mut req = actix_web::test::TestRequest::default();
            if let Some(a) = accept {
                req = req.insert_header(("accept", a));
            }
            wants_csv(&req.to_http_request())
        };
        for (accept, csv) in [
            (None, false),
            (Some("text/csv"), true),
            (Some("text/csv;q=0"), false),
            (Some("text/csv; q=0, application/json"), false),
            (Some("text/csv, application/json"), true),
            (Some("application/json, text/csv"), false),
            (Some("application/json;q=0.5, text/csv"), true),
            (Some("text/csv;q=0.4, application/json;q=0.5"), false),
            (Some("text/*"), true),
            (Some("text/*, text/csv;q=0"), false),
            (Some("*/*"), false),
            (Some("*/*;q=0.1, text/csv"), true),
            (Some("text/html"), false),
            (Some("not a media type"), false),
        ] {
            assert_eq!(wants(accept), csv, "Accept: {accept:?}");
        }
    }

    #[test]
    fn the_range_defaults_to_the_last_30_days_and_is_rounded_to_its_step() {
        let now = 1_765_000_000; // not on a day boundary
        let q = query_of(params(None, None, None), now).unwrap();
        assert_eq!(q.to, (now / 86_400 + 1) * 86_400);
        assert_eq!(q.from, (now - 30 * 86_400) / 86_400 * 86_400);
        let q = query_of(
            params(
                Some("2026-12-01T10:30:00Z"),
                Some("2026-12-01T12:00:00Z"),
                Some("hour"),
            ),
            now,
        )
        .unwrap();
        assert_eq!(q.to - q.from, 2 * 3_600);
    }

    #[test]
    fn bad_parameters_name_their_field() {
        let field = |p: UsageParams| match query_of(p, 1_765_000_000) {
            Err(ApiError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(params(Some("yesterday"), None, None)), "from");
        assert_eq!(
            field(params(None, Some("2026-13-01T00:00:00Z"), None)),
            "to"
        );
        assert_eq!(field(params(None, None, Some("week"))), "step");
        // Out of the four-digit years RFC 3339 writes, once rounded to a step.
        assert_eq!(
            field(params(None, Some("9999-12-31T23:59:59Z"), None)),
            "to"
        );
        assert_eq!(
            field(params(Some("1969-12-31T23:59:59Z"), None, None)),
            "from"
        );
        // Past the latest by a fraction (a tester's finding: it was taken).
        assert_eq!(
            field(params(None, Some("9999-01-01T00:00:00.5Z"), None)),
            "to"
        );
        // Second 60 anywhere but 23:59 UTC (chrono reads it anywhere).
        assert_eq!(
            field(params(Some("2026-12-01T02:00:60Z"), None, None)),
            "from"
        );
        assert_eq!(
            field(params(Some("2026-12-01T01:59:60+01:00"), None, None)),
            "from"
        );
        // A leap second where one can be, and a fraction, are taken (whole seconds).
        let leap = query_of(
            params(
                Some("2016-12-31T23:59:60Z"),
                Some("2016-12-31T23:59:59.75Z"),
                None,
            ),
            1_765_000_000,
        )
        .unwrap();
        assert_eq!(ts(leap.from).to_rfc3339(), "2016-12-31T00:00:00+00:00");
        let last = query_of(
            params(
                Some("9998-12-01T00:00:00Z"),
                Some("9999-01-01T00:00:00Z"),
                Some("month"),
            ),
            1_765_000_000,
        )
        .unwrap();
        assert_eq!(last.to, LATEST);
        let epoch = query_of(
            params(None, Some("1970-01-01T00:00:00Z"), None),
            1_765_000_000,
        )
        .unwrap();
        assert_eq!((epoch.from, epoch.to), (0, 0));
        assert_eq!(ts(last.to).to_rfc3339(), "9999-01-01T00:00:00+00:00");
    }

    #[test]
    fn a_range_that_ends_before_it_starts_is_empty() {
        let q = query_of(
            params(
                Some("2026-12-02T10:00:00Z"),
                Some("2026-12-01T00:00:00Z"),
                None,
            ),
            1_765_000_000,
        )
        .unwrap();
        assert_eq!(q.from, q.to);
    }

    #[test]
    fn csv_quotes_and_defuses_fields() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("=cmd"), "'=cmd");
        assert_eq!(csv_field("plain"), "plain");
    }
}
