//! Usage accounting (issue 48, DESIGN §4 "Usage" and §6 "Usage rollup"): what each
//! job held on a cluster or pool, summed per hour into `usage_rollup_hourly` and
//! `usage_custom_hourly` and per day into `usage_rollup` and `usage_custom`, in the
//! transaction of the step that ends the hold ([`super::apply()`]), and the report over
//! any range read back from those sums, the jobs still holding resources, and the
//! ended jobs' waits.
//!
//! Two measures of what a job held: what it **declared** (`cpu_ms`, `gpu_ms`,
//! `memory_bs`, custom resources), and what it **actually** held by Ray's State API
//! (`actual_cpu_ms`, `actual_gpu_ms`, `actual_memory_bs`): each reading that
//! changes what a job holds closes the stretch before it into the rollup
//! ([`record_actual`], the row in `job_actual` says since when the current reading
//! holds), and the end of the hold closes the last one. A stretch with no reading (a
//! pool's job, a cluster without the State API, the seconds before the first
//! reading) counts what the job declared.
//!
//! Units are whole seconds (a hold runs from `floor(dispatched_at)` to
//! `floor(end)`); cores and GPUs are counted in thousandths (`cpu_ms` =
//! milli-core-seconds), memory in bytes (`memory_bs` = byte-seconds), custom
//! resources in thousandths. All sums are integers, so a report's rows add up
//! exactly, whichever way they are grouped.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Datelike, TimeZone, Utc};
use entity::{job, job_event, user, JobStatus};
use sea_orm::{
    AccessMode, ColumnTrait, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, IsolationLevel,
    QueryFilter, QueryOrder, QuerySelect, Statement, TransactionTrait, Value,
};
use uuid::Uuid;

use super::{Db, Fence};

/// Seconds in an hour: the span of the hourly rows.
pub const HOUR: i64 = 3_600;
/// Seconds in a day: the span of the daily rows.
pub const DAY: i64 = 86_400;

/// The metadata key by which a job names its size (`size` on `/v1/jobs`, the same key
/// on Ray's Jobs API); usage is reported per size by it.
pub const SIZE_KEY: &str = "fairshare.size";

/// What a job holds at a time: thousandths of cores and GPUs, bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate {
    /// Thousandths of a core.
    pub cpu_milli: i64,
    /// Thousandths of a GPU.
    pub gpu_milli: i64,
    /// Bytes.
    pub memory_bytes: i64,
}

impl Rate {
    /// `cpu` cores, `gpu` GPUs and `memory_bytes` bytes (negative or not finite: 0),
    /// rounded to thousandths and whole bytes.
    pub fn of(cpu: f64, gpu: f64, memory_bytes: f64) -> Rate {
        Rate {
            cpu_milli: milli(cpu),
            gpu_milli: milli(gpu),
            memory_bytes: if memory_bytes.is_finite() && memory_bytes > 0.0 {
                memory_bytes.round() as i64
            } else {
                0
            },
        }
    }
}

/// What one job held on one place from `from` to `to` (Unix seconds, `from <= to`):
/// declared, and actually when known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// Who it is charged to.
    pub key: Key,
    /// Thousandths of a core.
    pub cpu_milli: i64,
    /// Thousandths of a GPU.
    pub gpu_milli: i64,
    /// Bytes.
    pub memory_bytes: i64,
    /// Custom resources: name → thousandths.
    pub custom: BTreeMap<String, i64>,
    /// Unix seconds.
    pub from: i64,
    /// Unix seconds.
    pub to: i64,
    /// What it actually held over the whole hold by Ray's State API; `None`: no
    /// reading, counted as declared.
    pub actual: Option<Rate>,
}

impl Hold {
    /// What it declared, as a rate.
    pub fn declared(&self) -> Rate {
        Rate {
            cpu_milli: self.cpu_milli,
            gpu_milli: self.gpu_milli,
            memory_bytes: self.memory_bytes,
        }
    }
}

/// Whom a hold or an ended job is counted for: `""` for none (the root group, no
/// place, no size).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// The user id.
    pub user: String,
    /// The user's group path (`""`: the root).
    pub group: String,
    /// The Ray cluster or pool.
    pub place: String,
    /// The job's named size.
    pub size: String,
}

/// Sums of usage: integer units (module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sums {
    /// Milli-core-seconds.
    pub cpu_ms: i128,
    /// Milli-GPU-seconds.
    pub gpu_ms: i128,
    /// Byte-seconds.
    pub memory_bs: i128,
    /// Milli-core-seconds actually held (declared where no reading said).
    pub actual_cpu_ms: i128,
    /// Milli-GPU-seconds actually held.
    pub actual_gpu_ms: i128,
    /// Byte-seconds actually held.
    pub actual_memory_bs: i128,
    /// Custom resource name → milli-unit-seconds.
    pub custom: BTreeMap<String, i128>,
    /// Jobs that ended SUCCEEDED.
    pub succeeded: u64,
    /// Jobs that ended FAILED.
    pub failed: u64,
    /// Jobs that ended STOPPED.
    pub stopped: u64,
    /// Waits of the jobs that ended (and were granted): counts per bin of
    /// `WAIT_BOUNDS` (bounds 1 s, 5 s, 10 s … a day; the last bin: a day or more).
    pub waits: [u64; WAIT_BINS],
    /// The longest of those waits, seconds.
    pub wait_max: i64,
}

/// Bins of the wait histogram: bin `k < 15` holds waits below `WAIT_BOUNDS[k]`
/// seconds (and at or above the bound before it), bin 15 those of a day or more.
pub const WAIT_BOUNDS: [i64; WAIT_BINS - 1] = [
    1, 5, 10, 30, 60, 120, 300, 600, 1_200, 1_800, 3_600, 7_200, 14_400, 43_200, 86_400,
];

/// Number of bins of the wait histogram.
pub const WAIT_BINS: usize = 16;

/// The bin of a wait of `secs` seconds.
pub fn wait_bin(secs: i64) -> usize {
    WAIT_BOUNDS
        .iter()
        .position(|b| secs < *b)
        .unwrap_or(WAIT_BINS - 1)
}

impl Sums {
    /// Jobs whose waits are in the histogram.
    pub fn wait_count(&self) -> u64 {
        self.waits.iter().sum()
    }

    /// The nearest-rank `p`-th percentile (0 < p ≤ 100) of the waits as the histogram
    /// tells it: the upper bound of the bin that holds it (`WAIT_BOUNDS[k] - 1`), or the
    /// longest wait when that is smaller (always in the last bin); `None` without waits.
    pub fn wait_percentile(&self, p: f64) -> Option<i64> {
        let n = self.wait_count();
        if n == 0 {
            return None;
        }
        let rank = (((p / 100.0) * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (k, c) in self.waits.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let upper = WAIT_BOUNDS.get(k).map_or(self.wait_max, |b| b - 1);
                return Some(upper.min(self.wait_max));
            }
        }
        Some(self.wait_max)
    }
}

impl Sums {
    /// Adds `o` in.
    pub fn add(&mut self, o: &Sums) {
        self.cpu_ms += o.cpu_ms;
        self.gpu_ms += o.gpu_ms;
        self.memory_bs += o.memory_bs;
        self.actual_cpu_ms += o.actual_cpu_ms;
        self.actual_gpu_ms += o.actual_gpu_ms;
        self.actual_memory_bs += o.actual_memory_bs;
        for (k, v) in &o.custom {
            *self.custom.entry(k.clone()).or_default() += v;
        }
        self.succeeded += o.succeeded;
        self.failed += o.failed;
        self.stopped += o.stopped;
        for (a, b) in self.waits.iter_mut().zip(o.waits) {
            *a += b;
        }
        self.wait_max = self.wait_max.max(o.wait_max);
    }

    /// `hold`'s resources held for `secs` seconds: declared, and actually (its
    /// reading, else declared).
    pub fn held(hold: &Hold, secs: i64) -> Sums {
        let mut s = Sums::declared(hold, secs);
        s.add(&Sums::actually(
            hold.actual.unwrap_or(hold.declared()),
            secs,
        ));
        s
    }

    /// `hold`'s declared resources held for `secs` seconds (no actual use).
    pub fn declared(hold: &Hold, secs: i64) -> Sums {
        let s = secs as i128;
        Sums {
            cpu_ms: hold.cpu_milli as i128 * s,
            gpu_ms: hold.gpu_milli as i128 * s,
            memory_bs: hold.memory_bytes as i128 * s,
            custom: hold
                .custom
                .iter()
                .map(|(k, v)| (k.clone(), *v as i128 * s))
                .collect(),
            ..Sums::default()
        }
    }

    /// `rate` actually held for `secs` seconds (nothing declared).
    pub fn actually(rate: Rate, secs: i64) -> Sums {
        let s = secs as i128;
        Sums {
            actual_cpu_ms: rate.cpu_milli as i128 * s,
            actual_gpu_ms: rate.gpu_milli as i128 * s,
            actual_memory_bs: rate.memory_bytes as i128 * s,
            ..Sums::default()
        }
    }

    /// One job that ended in `status`, after a wait of `wait` seconds queued before
    /// its last grant (see `queued_before`; `None`: never granted).
    pub fn ended(status: JobStatus, wait: Option<i64>) -> Sums {
        let mut s = Sums::default();
        if let Some(w) = wait {
            let w = w.max(0);
            s.waits[wait_bin(w)] = 1;
            s.wait_max = w;
        }
        match status {
            JobStatus::Succeeded => s.succeeded = 1,
            JobStatus::Failed => s.failed = 1,
            JobStatus::Stopped => s.stopped = 1,
            _ => {}
        }
        s
    }

    fn is_zero(&self) -> bool {
        *self == Sums::default() || {
            let mut z = self.clone();
            z.custom.retain(|_, v| *v != 0);
            z == Sums::default()
        }
    }
}

/// `[from, to)` cut at the multiples of `span` (Unix seconds): each piece's bucket
/// start and length in seconds; nothing when `to <= from`.
pub fn split(from: i64, to: i64, span: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        let bucket = t.div_euclid(span) * span;
        let end = (bucket + span).min(to);
        out.push((bucket, end - t));
        t = end;
    }
    out
}

/// What the steps of one transaction add to the rollup: (span, bucket, key) → sums.
#[derive(Debug, Default)]
pub struct Deltas(BTreeMap<(i64, i64, Key), Sums>);

impl Deltas {
    /// Adds a hold, declared and actually (its reading, else declared), cut into
    /// hours and days.
    pub(crate) fn hold(&mut self, hold: &Hold) {
        self.cut(&hold.key, hold.from, hold.to, |secs| Sums::held(hold, secs));
    }

    /// Adds a hold's declared resources only, cut into hours and days.
    pub(crate) fn declared(&mut self, hold: &Hold) {
        self.cut(&hold.key, hold.from, hold.to, |secs| {
            Sums::declared(hold, secs)
        });
    }

    /// Adds `rate` actually held by `key` from `from` to `to` (Unix seconds), cut
    /// into hours and days.
    pub(crate) fn actual(&mut self, key: &Key, rate: Rate, from: i64, to: i64) {
        self.cut(key, from, to, |secs| Sums::actually(rate, secs));
    }

    fn cut(&mut self, key: &Key, from: i64, to: i64, sums: impl Fn(i64) -> Sums) {
        for span in [HOUR, DAY] {
            for (bucket, secs) in split(from, to, span) {
                self.0
                    .entry((span, bucket, key.clone()))
                    .or_default()
                    .add(&sums(secs));
            }
        }
    }

    /// Adds a job that ended in `status` at `at` (Unix seconds) after waiting `wait`
    /// seconds queued before its last grant (`None`: never granted).
    pub(crate) fn ended(&mut self, key: &Key, status: JobStatus, at: i64, wait: Option<i64>) {
        for span in [HOUR, DAY] {
            let bucket = at.div_euclid(span) * span;
            self.0
                .entry((span, bucket, key.clone()))
                .or_default()
                .add(&Sums::ended(status, wait));
        }
    }

    /// The hourly entries (each hold once): key and sums.
    pub(crate) fn hourly(&self) -> impl Iterator<Item = (&Key, &Sums)> {
        self.0
            .iter()
            .filter(|((span, _, _), _)| *span == HOUR)
            .map(|((_, _, k), s)| (k, s))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Rows per upsert statement.
const ROWS_PER_STATEMENT: usize = 64;

/// The rollup's tables for rows of `span`: sums, custom resources.
fn tables(span: i64) -> (&'static str, &'static str) {
    if span == HOUR {
        ("usage_rollup_hourly", "usage_custom_hourly")
    } else {
        ("usage_rollup", "usage_custom")
    }
}

fn clamp(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// Writes `deltas` into the rollup inside `conn`'s transaction: upserts that add to
/// the rows, in key order (every writer takes the rows' locks in that order on
/// PostgreSQL, after its job rows, so two cannot deadlock on them).
pub(crate) async fn record<C: ConnectionTrait>(conn: &C, deltas: &Deltas) -> Result<(), DbErr> {
    // Hourly rows, then daily ones (each in key order).
    for span in [HOUR, DAY] {
        let rows: Vec<_> = deltas
            .0
            .iter()
            .filter(|((s, _, _), sums)| *s == span && !sums.is_zero())
            .collect();
        record_rows(conn, span, &rows).await?;
    }
    Ok(())
}

type DeltaRow<'a> = (&'a (i64, i64, Key), &'a Sums);

/// The key of `usage_rollup` and `usage_rollup_hourly`.
const ROLLUP_KEY: [&str; 6] = ["span", "bucket", "user_id", "group_path", "place", "size"];

/// The daily sums per user and group, without place or size (migration 17): what
/// `by=user` and `by=group` read by day and by month, a row per user-day where the
/// wide table has one per user, place and size.
const USER_DAILY: &str = "usage_user_daily";

/// The key of [`USER_DAILY`].
const USER_DAILY_KEY: [&str; 3] = ["bucket", "user_id", "group_path"];

/// The sums' columns, in the order [`sum_values`] gives them.
fn sum_columns() -> Vec<String> {
    let mut c: Vec<String> = [
        "cpu_ms",
        "gpu_ms",
        "memory_bs",
        "actual_cpu_ms",
        "actual_gpu_ms",
        "actual_memory_bs",
        "succeeded",
        "failed",
        "stopped",
    ]
    .map(String::from)
    .to_vec();
    c.extend((0..WAIT_BINS).map(|k| format!("w{k}")));
    c.push("wait_max".into());
    c
}

fn sum_values(s: &Sums) -> impl Iterator<Item = Value> + '_ {
    [
        Value::from(clamp(s.cpu_ms)),
        Value::from(clamp(s.gpu_ms)),
        Value::from(clamp(s.memory_bs)),
        Value::from(clamp(s.actual_cpu_ms)),
        Value::from(clamp(s.actual_gpu_ms)),
        Value::from(clamp(s.actual_memory_bs)),
        Value::from(s.succeeded as i64),
        Value::from(s.failed as i64),
        Value::from(s.stopped as i64),
    ]
    .into_iter()
    .chain(s.waits.iter().map(|c| Value::from(*c as i32)))
    .chain(std::iter::once(Value::from(s.wait_max)))
}

/// Adds `rows` (each its key's values, in `key`'s order, and its sums) to `table`:
/// `INSERT … ON CONFLICT (key) DO UPDATE SET x = x + excluded.x` (the longest wait:
/// the larger), in statements of [`ROWS_PER_STATEMENT`] rows, in the order given.
async fn upsert_sums<C: ConnectionTrait>(
    conn: &C,
    table: &str,
    key: &[&str],
    rows: &[(Vec<Value>, &Sums)],
) -> Result<(), DbErr> {
    let backend = conn.get_database_backend();
    let sums = sum_columns();
    let greatest = match backend {
        DatabaseBackend::Sqlite => "MAX",
        _ => "GREATEST",
    };
    let set: Vec<String> = sums
        .iter()
        .map(|c| {
            if c == "wait_max" {
                format!("{c} = {greatest}({table}.{c}, excluded.{c})")
            } else {
                format!("{c} = {table}.{c} + excluded.{c}")
            }
        })
        .collect();
    let width = key.len() + sums.len();
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * width);
        let mut tuples = Vec::with_capacity(chunk.len());
        for (k, s) in chunk {
            let first = values.len();
            values.extend(k.iter().cloned());
            values.extend(sum_values(s));
            tuples.push(placeholders(backend, first, width));
        }
        let sql = format!(
            "INSERT INTO {table} ({}, {}) VALUES {} ON CONFLICT ({}) DO UPDATE SET {}",
            key.join(", "),
            sums.join(", "),
            tuples.join(", "),
            key.join(", "),
            set.join(", "),
        );
        conn.execute(Statement::from_sql_and_values(backend, sql, values))
            .await?;
    }
    Ok(())
}

async fn record_rows<C: ConnectionTrait>(
    conn: &C,
    span: i64,
    rows: &[DeltaRow<'_>],
) -> Result<(), DbErr> {
    let backend = conn.get_database_backend();
    let (rollup, custom_table) = tables(span);
    let keyed: Vec<(Vec<Value>, &Sums)> = rows
        .iter()
        .map(|&((span, bucket, key), s)| {
            (
                vec![
                    Value::from(*span as i32),
                    Value::from(*bucket),
                    Value::from(key.user.clone()),
                    Value::from(key.group.clone()),
                    Value::from(key.place.clone()),
                    Value::from(key.size.clone()),
                ],
                s,
            )
        })
        .collect();
    upsert_sums(conn, rollup, &ROLLUP_KEY, &keyed).await?;
    if span == DAY {
        // The same days per user and group (what `by=user` and `by=group` read).
        let mut narrow: BTreeMap<(i64, &str, &str), Sums> = BTreeMap::new();
        for &((_, bucket, key), s) in rows {
            narrow
                .entry((*bucket, key.user.as_str(), key.group.as_str()))
                .or_default()
                .add(s);
        }
        let keyed: Vec<(Vec<Value>, &Sums)> = narrow
            .iter()
            .map(|((bucket, user, group), s)| {
                (
                    vec![
                        Value::from(*bucket),
                        Value::from(user.to_string()),
                        Value::from(group.to_string()),
                    ],
                    s,
                )
            })
            .collect();
        upsert_sums(conn, USER_DAILY, &USER_DAILY_KEY, &keyed).await?;
    }
    let custom: Vec<_> = rows
        .iter()
        .flat_map(|&((span, bucket, key), s)| {
            s.custom
                .iter()
                .filter(|(_, v)| **v != 0)
                .map(move |(name, v)| (*span, *bucket, key, name, *v))
        })
        .collect();
    for chunk in custom.chunks(ROWS_PER_STATEMENT) {
        let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * 8);
        let mut tuples = Vec::with_capacity(chunk.len());
        for (span, bucket, key, name, v) in chunk {
            let first = values.len();
            values.extend([
                Value::from(*span as i32),
                Value::from(*bucket),
                Value::from(key.user.clone()),
                Value::from(key.group.clone()),
                Value::from(key.place.clone()),
                Value::from(key.size.clone()),
                Value::from((*name).clone()),
                Value::from(clamp(*v)),
            ]);
            tuples.push(placeholders(backend, first, 8));
        }
        let sql = format!(
            "INSERT INTO {custom_table} (span, bucket, user_id, group_path, place, size, \
             resource, amount_ms) VALUES {} \
             ON CONFLICT (span, bucket, user_id, group_path, place, size, resource) \
             DO UPDATE SET amount_ms = {custom_table}.amount_ms + excluded.amount_ms",
            tuples.join(", ")
        );
        conn.execute(Statement::from_sql_and_values(backend, sql, values))
            .await?;
    }
    Ok(())
}

/// Writes `holds` and `ended` jobs (key, final status, Unix seconds, wait in seconds)
/// into the rollup
/// in one transaction, as [`super::apply()`] does for the steps it writes: for tools
/// that load history (`scripts/bench-usage`) and tests.
pub async fn record_usage(
    db: &Db,
    holds: &[Hold],
    ended: &[(Key, JobStatus, i64, Option<i64>)],
) -> Result<(), DbErr> {
    let mut d = Deltas::default();
    for h in holds {
        d.hold(h);
    }
    for (k, status, at, wait) in ended {
        d.ended(k, *status, *at, *wait);
    }
    let txn = db.begin().await?;
    record(&txn, &d).await?;
    txn.commit().await
}

/// `(p1, p2, …)` for `n` parameters after the first `first`.
fn placeholders(backend: DatabaseBackend, first: usize, n: usize) -> String {
    let ps: Vec<String> = (first..first + n)
        .map(|i| match backend {
            DatabaseBackend::Postgres => format!("${}", i + 1),
            _ => "?".to_string(),
        })
        .collect();
    format!("({})", ps.join(", "))
}

/// The hold of a job that was outstanding since `dispatched_at` and stops holding at
/// `end`, charged to `group`; `None` when it never held (no `dispatched_at`).
pub fn hold_of(j: &job::Model, group: &str, end: DateTime<Utc>) -> Option<Hold> {
    let from = j.dispatched_at?.timestamp();
    let to = end.timestamp().max(from);
    Some(Hold {
        key: key_of(j, group),
        cpu_milli: milli(j.cpu),
        gpu_milli: milli(j.gpu),
        memory_bytes: j.memory_bytes.max(0),
        custom: super::custom_of(j)
            .into_iter()
            .map(|(k, v)| (k, milli(v)))
            .collect(),
        from,
        to,
        actual: None,
    })
}

/// A row of `job_actual`: since when (`since`, Unix seconds) the job's hold that
/// began at `dispatched` (Unix seconds) has held `rate` by Ray's State API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reading {
    dispatched: i64,
    since: i64,
    rate: Rate,
}

const READING_COLUMNS: &str = "job_id, dispatched, since, cpu_milli, gpu_milli, memory_bytes";

fn reading_of(r: &sea_orm::QueryResult) -> Result<(Uuid, Reading), DbErr> {
    Ok((
        r.try_get_by_index(0)?,
        Reading {
            dispatched: r.try_get_by_index(1)?,
            since: r.try_get_by_index(2)?,
            rate: Rate {
                cpu_milli: r.try_get_by_index(3)?,
                gpu_milli: r.try_get_by_index(4)?,
                memory_bytes: r.try_get_by_index(5)?,
            },
        },
    ))
}

/// Every row of `job_actual` (one per job holding resources that Ray's State API
/// read differently from what it declared).
async fn readings<C: ConnectionTrait>(conn: &C) -> Result<HashMap<Uuid, Reading>, DbErr> {
    conn.query_all(Statement::from_string(
        conn.get_database_backend(),
        format!("SELECT {READING_COLUMNS} FROM job_actual"),
    ))
    .await?
    .iter()
    .map(reading_of)
    .collect()
}

/// What a hold actually held from `since` on, and since when: the reading of its
/// own hold, else (none, or one of an earlier hold) its declared resources from the
/// start of the hold.
fn actual_since(hold: &Hold, reading: Option<&Reading>) -> (i64, Rate) {
    match reading {
        Some(r) if r.dispatched == hold.from => (r.since.clamp(hold.from, hold.to), r.rate),
        _ => (hold.from, hold.declared()),
    }
}

/// The end of a job's hold, for what it actually held (in [`super::apply()`]'s
/// transaction, after its job row): its `job_actual` row goes, and the stretch since
/// its last reading, at that reading (or its whole hold as declared, without one),
/// is added to `deltas`. `hold`: the hold that ends (`None`: it held nothing).
pub(crate) async fn end_actual<C: ConnectionTrait>(
    conn: &C,
    job_id: Uuid,
    hold: Option<&Hold>,
    deltas: &mut Deltas,
) -> Result<(), DbErr> {
    let backend = conn.get_database_backend();
    let row = conn
        .query_one(Statement::from_sql_and_values(
            backend,
            format!(
                "DELETE FROM job_actual WHERE job_id = {} RETURNING {READING_COLUMNS}",
                param(backend, 1)
            ),
            [Value::from(job_id)],
        ))
        .await?;
    let reading = row.as_ref().map(reading_of).transpose()?.map(|(_, r)| r);
    if let Some(hold) = hold {
        let (since, rate) = actual_since(hold, reading.as_ref());
        deltas.actual(&hold.key, rate, since, hold.to);
    }
    Ok(())
}

/// Records what jobs actually hold by a reading of Ray's State API taken at `at`
/// (Unix seconds): `readings` are job ids and what each holds. For each job still
/// holding resources whose reading differs from what it held until now (its last
/// reading, else what it declared), the stretch since then is added to the rollup's
/// actual columns and `job_actual` says the new reading holds from `at`. One
/// transaction, fenced like [`super::apply()`] (a stale leader writes nothing); jobs
/// locked in (user, id) order, as [`super::apply_many`] locks them. Returns how many
/// jobs' readings changed.
pub async fn record_actual(
    db: &Db,
    fence: &Fence,
    at: i64,
    readings_now: &[(Uuid, Rate)],
) -> Result<usize, DbErr> {
    if readings_now.is_empty() {
        return Ok(0);
    }
    let txn = db.begin().await?;
    let backend = txn.get_database_backend();
    if let Fence::Term { holder, term } = fence {
        super::lease::check_fence(&txn, holder, *term).await?;
    }
    let now: HashMap<Uuid, Rate> = readings_now.iter().copied().collect();
    let mut jobs = Vec::with_capacity(now.len());
    let ids: Vec<Uuid> = now.keys().copied().collect();
    for chunk in ids.chunks(500) {
        let mut q = job::Entity::find()
            .filter(job::Column::Id.is_in(chunk.iter().copied()))
            .order_by_asc(job::Column::UserId)
            .order_by_asc(job::Column::Id);
        if backend == DatabaseBackend::Postgres {
            q = q.lock_exclusive();
        }
        jobs.extend(q.all(&txn).await?);
    }
    let held = readings(&txn).await?;
    let mut groups: HashMap<String, String> = HashMap::new();
    let mut deltas = Deltas::default();
    let mut rows = Vec::new();
    for j in jobs {
        let (Some(rate), Some(dispatched)) = (now.get(&j.id), j.dispatched_at) else {
            continue;
        };
        if !j.status.is_outstanding() {
            continue;
        }
        let group = match groups.get(&j.user_id) {
            Some(g) => g.clone(),
            None => {
                let g = group_path(&txn, &j.user_id).await?;
                groups.insert(j.user_id.clone(), g.clone());
                g
            }
        };
        let end = Utc
            .timestamp_opt(at.max(dispatched.timestamp()), 0)
            .single()
            .unwrap_or(dispatched);
        let Some(hold) = hold_of(&j, &group, end) else {
            continue;
        };
        let (since, before) = actual_since(&hold, held.get(&j.id));
        if before == *rate {
            continue;
        }
        deltas.actual(&hold.key, before, since, hold.to);
        rows.push((j.id, hold.from, since.max(hold.to), *rate));
    }
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let mut values = Vec::with_capacity(chunk.len() * 6);
        let mut tuples = Vec::with_capacity(chunk.len());
        for (id, dispatched, since, rate) in chunk {
            let first = values.len();
            values.extend([
                Value::from(*id),
                Value::from(*dispatched),
                Value::from(*since),
                Value::from(rate.cpu_milli),
                Value::from(rate.gpu_milli),
                Value::from(rate.memory_bytes),
            ]);
            tuples.push(placeholders(backend, first, 6));
        }
        let sql = format!(
            "INSERT INTO job_actual ({READING_COLUMNS}) VALUES {} ON CONFLICT (job_id) DO UPDATE \
             SET dispatched = excluded.dispatched, since = excluded.since, \
             cpu_milli = excluded.cpu_milli, gpu_milli = excluded.gpu_milli, \
             memory_bytes = excluded.memory_bytes",
            tuples.join(", ")
        );
        txn.execute(Statement::from_sql_and_values(backend, sql, values))
            .await?;
    }
    record(&txn, &deltas).await?;
    txn.commit().await?;
    Ok(rows.len())
}

/// The key a job is counted under: its user, `group`, its cluster or pool, its size.
pub fn key_of(j: &job::Model, group: &str) -> Key {
    Key {
        user: j.user_id.clone(),
        group: group.to_string(),
        place: j.cluster.clone().unwrap_or_default(),
        size: size_of(j).unwrap_or_default(),
    }
}

/// The size a job named (`metadata["fairshare.size"]`).
pub fn size_of(j: &job::Model) -> Option<String> {
    j.metadata
        .as_ref()?
        .get(SIZE_KEY)?
        .as_str()
        .map(str::to_string)
}

fn milli(x: f64) -> i64 {
    if x.is_finite() && x > 0.0 {
        (x * 1000.0).round() as i64
    } else {
        0
    }
}

/// How long job `job` waited in the queue before its last grant, whole seconds: from
/// its submit, and from each return to the queue (a release, a lapsed lease, a pending
/// timeout, a preemption, a dispatch Ray was not ready for), to the next move out of
/// QUEUED, `floor` of both ends as holds are counted. What it held in between is not a
/// wait; for a job granted once this is its grant less its submit. Read from its
/// `job_events` rows (kept while the job lives; one indexed read of a few rows). The
/// caller asks only of a job that was granted (`dispatched_at` set: nothing moved it
/// back to the queue since).
pub(crate) async fn queued_before<C: ConnectionTrait>(
    conn: &C,
    job: &job::Model,
) -> Result<i64, DbErr> {
    let moves: Vec<(Option<JobStatus>, JobStatus, DateTime<Utc>)> = job_event::Entity::find()
        .select_only()
        .columns([
            job_event::Column::FromStatus,
            job_event::Column::ToStatus,
            job_event::Column::At,
        ])
        .filter(job_event::Column::JobId.eq(job.id))
        .order_by_asc(job_event::Column::Id)
        .into_tuple()
        .all(conn)
        .await?;
    Ok(queued_seconds(job.submitted_at, &moves))
}

/// The fold of [`queued_before`] over a job's moves `(from, to, at)` in order, from its
/// submit at `submitted` (queued from then: its intake row, from nothing to QUEUED,
/// changes nothing).
fn queued_seconds(
    submitted: DateTime<Utc>,
    moves: &[(Option<JobStatus>, JobStatus, DateTime<Utc>)],
) -> i64 {
    let mut since = Some(submitted.timestamp());
    let mut queued = 0;
    for (_, to, at) in moves {
        match (since, *to == JobStatus::Queued) {
            (None, true) => since = Some(at.timestamp()),
            (Some(s), false) => {
                queued += (at.timestamp() - s).max(0);
                since = None;
            }
            _ => {}
        }
    }
    queued
}

/// The group path of `user` (`""`: the root, or no such user).
pub(crate) async fn group_path<C: ConnectionTrait>(
    conn: &C,
    user_id: &str,
) -> Result<String, DbErr> {
    let g: Option<Option<String>> = user::Entity::find_by_id(user_id.to_string())
        .select_only()
        .column(user::Column::GroupPath)
        .into_tuple()
        .one(conn)
        .await?;
    Ok(g.flatten().unwrap_or_default())
}

/// How a report's rows are keyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    /// The user id.
    User,
    /// The user's group path (`""`: the root).
    Group,
    /// The Ray cluster or pool the job held resources on.
    Cluster,
    /// The job's named size (`""`: none).
    Size,
}

impl By {
    /// The query parameter's value.
    pub fn as_str(self) -> &'static str {
        match self {
            By::User => "user",
            By::Group => "group",
            By::Cluster => "cluster",
            By::Size => "size",
        }
    }

    /// Parses a `by=` value.
    pub fn parse(s: &str) -> Option<By> {
        [By::User, By::Group, By::Cluster, By::Size]
            .into_iter()
            .find(|b| b.as_str() == s)
    }

    fn column(self) -> &'static str {
        match self {
            By::User => "user_id",
            By::Group => "group_path",
            By::Cluster => "place",
            By::Size => "size",
        }
    }

    fn of(self, k: &Key) -> String {
        match self {
            By::User => k.user.clone(),
            By::Group => k.group.clone(),
            By::Cluster => k.place.clone(),
            By::Size => k.size.clone(),
        }
    }
}

/// A report's time step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// UTC hours (read from the hourly rows).
    Hour,
    /// UTC days (the daily rows).
    Day,
    /// Calendar months, UTC (the daily rows summed).
    Month,
}

impl Step {
    /// The query parameter's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Hour => "hour",
            Step::Day => "day",
            Step::Month => "month",
        }
    }

    /// Parses a `step=` value.
    pub fn parse(s: &str) -> Option<Step> {
        [Step::Hour, Step::Day, Step::Month]
            .into_iter()
            .find(|b| b.as_str() == s)
    }

    fn span(self) -> i64 {
        match self {
            Step::Hour => HOUR,
            Step::Day | Step::Month => DAY,
        }
    }

    /// The start of the step that holds `t` (Unix seconds).
    pub fn floor(self, t: i64) -> i64 {
        match self {
            Step::Hour | Step::Day => t.div_euclid(self.span()) * self.span(),
            Step::Month => {
                let d = Utc.timestamp_opt(t, 0).single().unwrap_or_default();
                Utc.with_ymd_and_hms(d.year(), d.month(), 1, 0, 0, 0)
                    .single()
                    .map(|m| m.timestamp())
                    .unwrap_or(t)
            }
        }
    }

    /// The start of the step after the one that starts at `start`.
    pub fn next(self, start: i64) -> i64 {
        match self {
            Step::Hour | Step::Day => start + self.span(),
            Step::Month => {
                let d = Utc.timestamp_opt(start, 0).single().unwrap_or_default();
                let (y, m) = if d.month() == 12 {
                    (d.year() + 1, 1)
                } else {
                    (d.year(), d.month() + 1)
                };
                Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0)
                    .single()
                    .map(|m| m.timestamp())
                    .unwrap_or(start + 31 * DAY)
            }
        }
    }

    /// `t` rounded up to a step boundary.
    pub fn ceil(self, t: i64) -> i64 {
        let f = self.floor(t);
        if f == t {
            t
        } else {
            self.next(f)
        }
    }
}

/// What a report asks: `[from, to)` in Unix seconds, already on step boundaries.
#[derive(Clone, Debug)]
pub struct UsageQuery {
    /// Unix seconds, a step's start.
    pub from: i64,
    /// Unix seconds, a step's start, after `from`.
    pub to: i64,
    /// The rows' time step.
    pub step: Step,
    /// The rows' key.
    pub by: By,
    /// Only this user's usage.
    pub user: Option<String>,
}

/// One row of a report: one step and one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageRow {
    /// The step's start, Unix seconds.
    pub start: i64,
    /// The key (`""`: none, e.g. the root group).
    pub key: String,
    /// Held in the step, and the jobs that ended in it (with their waits).
    pub sums: Sums,
}

/// The report: the rollup's sums in `[q.from, q.to)` (with the ended jobs' waits)
/// plus what jobs still holding resources have held up to `now` (Unix seconds); rows in
/// (start, key) order, only those with something in them. Read in one snapshot
/// (a repeatable-read, read-only transaction), so a job that ends while it runs is
/// counted once.
pub async fn report(db: &Db, q: &UsageQuery, now: i64) -> Result<Vec<UsageRow>, DbErr> {
    let txn = db
        .begin_with_config(
            (db.get_database_backend() == DatabaseBackend::Postgres)
                .then_some(IsolationLevel::RepeatableRead),
            (db.get_database_backend() == DatabaseBackend::Postgres)
                .then_some(AccessMode::ReadOnly),
        )
        .await?;
    let backend = txn.get_database_backend();
    if backend == DatabaseBackend::Postgres {
        // PostgreSQL's JIT would spend some 50 ms compiling the aggregate of a month
        // by day for a query that runs in less (BENCHMARKS.md, "Usage accounting").
        txn.execute_unprepared("SET LOCAL jit = off").await?;
    }
    let mut rows: BTreeMap<(i64, String), UsageRow> = BTreeMap::new();
    let step = q.step;
    fn entry(
        rows: &mut BTreeMap<(i64, String), UsageRow>,
        step: Step,
        start: i64,
        key: String,
    ) -> &mut UsageRow {
        let start = step.floor(start);
        rows.entry((start, key.clone()))
            .or_insert_with(|| UsageRow {
                start,
                key,
                sums: Sums::default(),
            })
    }
    let col = q.by.column();
    let mut params = vec![
        Value::from(q.step.span() as i32),
        Value::from(q.from),
        Value::from(q.to),
    ];
    let mut user_filter = String::new();
    if let Some(u) = &q.user {
        params.push(Value::from(u.clone()));
        user_filter = format!(" AND user_id = {}", param(backend, 4));
    }
    // By user or group by day or month: the narrow daily rows (one per user-day, not
    // one per user, place and size), read as they are by user (each row one user's
    // day, two only for a user whose group changed that day, added up below).
    let narrow = q.step != Step::Hour && matches!(q.by, By::User | By::Group);
    let (rollup, custom_table) = tables(q.step.span());
    // Without the span: [from, to, user].
    let narrow_params: Vec<Value> = params.iter().skip(1).cloned().collect();
    let (table, filter, sums_params) = if narrow {
        let user = if q.user.is_some() {
            format!(" AND user_id = {}", param(backend, 3))
        } else {
            String::new()
        };
        (
            USER_DAILY,
            format!(
                "bucket >= {} AND bucket < {}{user}",
                param(backend, 1),
                param(backend, 2)
            ),
            narrow_params,
        )
    } else {
        (
            rollup,
            format!(
                "span = {} AND bucket >= {} AND bucket < {}{user_filter}",
                param(backend, 1),
                param(backend, 2),
                param(backend, 3)
            ),
            params.clone(),
        )
    };
    let plain = narrow && q.by == By::User;
    let agg = |f: &str, c: &str| {
        if plain {
            c.to_string()
        } else {
            format!("CAST({f}({c}) AS BIGINT)")
        }
    };
    // Every sum in one text column ("120,0,3,…", in `sum_columns` order): a month
    // by user answers some 30,000 rows, and decoding 26 columns of each took longer
    // than reading them (BENCHMARKS.md, "Usage accounting").
    let columns: Vec<String> = sum_columns()
        .iter()
        .map(|c| {
            format!(
                "CAST({} AS TEXT)",
                agg(if c == "wait_max" { "MAX" } else { "SUM" }, c)
            )
        })
        .collect();
    let group_by = if plain {
        String::new()
    } else {
        format!(" GROUP BY bucket, {col}")
    };
    let sql = format!(
        "SELECT bucket, {col}, {} FROM {table} WHERE {filter}{group_by}",
        columns.join(" || ',' || "),
    );
    for r in txn
        .query_all(Statement::from_sql_and_values(backend, sql, sums_params))
        .await?
    {
        let bucket: i64 = r.try_get_by_index(0)?;
        let key: String = r.try_get_by_index(1)?;
        let packed: String = r.try_get_by_index(2)?;
        let mut v = [0i64; 9 + WAIT_BINS + 1];
        let mut fields = packed.split(',');
        for x in v.iter_mut() {
            let f = fields.next().unwrap_or("");
            *x = f
                .trim()
                .parse()
                .map_err(|e| DbErr::Custom(format!("{table}: a sum {f:?} in {packed:?}: {e}")))?;
        }
        let s = &mut entry(&mut rows, step, bucket, key).sums;
        s.cpu_ms += v[0] as i128;
        s.gpu_ms += v[1] as i128;
        s.memory_bs += v[2] as i128;
        s.actual_cpu_ms += v[3] as i128;
        s.actual_gpu_ms += v[4] as i128;
        s.actual_memory_bs += v[5] as i128;
        s.succeeded += v[6].max(0) as u64;
        s.failed += v[7].max(0) as u64;
        s.stopped += v[8].max(0) as u64;
        for (w, c) in s.waits.iter_mut().zip(&v[9..9 + WAIT_BINS]) {
            *w += (*c).max(0) as u64;
        }
        s.wait_max = s.wait_max.max(v[9 + WAIT_BINS]);
    }
    let sql = format!(
        "SELECT bucket, {col}, resource, CAST(SUM(amount_ms) AS BIGINT) FROM {custom_table} \
         WHERE span = {} AND bucket >= {} AND bucket < {}{user_filter} \
         GROUP BY bucket, {col}, resource",
        param(backend, 1),
        param(backend, 2),
        param(backend, 3),
    );
    for r in txn
        .query_all(Statement::from_sql_and_values(backend, sql, params))
        .await?
    {
        let bucket: i64 = r.try_get_by_index(0)?;
        let key: String = r.try_get_by_index(1)?;
        let name: String = r.try_get_by_index(2)?;
        let v: i64 = r.try_get_by_index(3)?;
        *entry(&mut rows, step, bucket, key)
            .sums
            .custom
            .entry(name)
            .or_default() += v as i128;
    }
    // Users' groups, for the jobs below.
    let groups: HashMap<String, String> = if q.by == By::Group {
        user::Entity::find()
            .select_only()
            .column(user::Column::Id)
            .column(user::Column::GroupPath)
            .into_tuple::<(String, Option<String>)>()
            .all(&txn)
            .await?
            .into_iter()
            .map(|(u, g)| (u, g.unwrap_or_default()))
            .collect()
    } else {
        HashMap::new()
    };
    let group = |u: &str| groups.get(u).cloned().unwrap_or_default();
    // Jobs holding resources now: held from their grant up to now.
    let mut live = job::Entity::find()
        .filter(
            job::Column::Status.is_in(JobStatus::ALL.into_iter().filter(|s| s.is_outstanding())),
        )
        .filter(job::Column::DispatchedAt.is_not_null());
    if let Some(u) = &q.user {
        live = live.filter(job::Column::UserId.eq(u.clone()));
    }
    let live = live.all(&txn).await?;
    // Their readings: the stretch since the last one is not in the rollup yet.
    let readings = if live.is_empty() {
        HashMap::new()
    } else {
        readings(&txn).await?
    };
    for j in live {
        let g = group(&j.user_id);
        let end = Utc.timestamp_opt(now, 0).single().unwrap_or_default();
        let Some(hold) = hold_of(&j, &g, end) else {
            continue;
        };
        let key = q.by.of(&hold.key);
        let (from, to) = (hold.from.max(q.from), hold.to.min(q.to));
        for (bucket, secs) in split(from, to, q.step.span()) {
            entry(&mut rows, step, bucket, key.clone())
                .sums
                .add(&Sums::declared(&hold, secs));
        }
        let (since, rate) = actual_since(&hold, readings.get(&j.id));
        for (bucket, secs) in split(since.max(q.from), to, q.step.span()) {
            entry(&mut rows, step, bucket, key.clone())
                .sums
                .add(&Sums::actually(rate, secs));
        }
    }
    txn.commit().await?;
    let mut out: Vec<UsageRow> = rows.into_values().filter(|r| !r.sums.is_zero()).collect();
    for r in &mut out {
        r.sums.custom.retain(|_, v| *v != 0);
    }
    Ok(out)
}

fn param(backend: DatabaseBackend, i: usize) -> String {
    match backend {
        DatabaseBackend::Postgres => format!("${i}"),
        _ => "?".to_string(),
    }
}

/// The nearest-rank `p`-th percentile (0 < p ≤ 100) of ascending `sorted`; `None`
/// when empty.
pub fn percentile(sorted: &[i64], p: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Deletes hourly rows older than `hourly_keep` seconds before `now` and daily rows
/// (the wide ones and the per-user ones) older than `daily_keep` (Unix seconds; 0
/// keeps forever). Returns the rows deleted.
pub async fn prune(db: &Db, now: i64, hourly_keep: i64, daily_keep: i64) -> Result<u64, DbErr> {
    let backend = db.get_database_backend();
    let mut n = 0;
    for (span, keep) in [(HOUR, hourly_keep), (DAY, daily_keep)] {
        if keep <= 0 {
            continue;
        }
        let before = Step::Day.floor(now - keep);
        let (rollup, custom) = tables(span);
        for table in [rollup, custom] {
            let sql = format!(
                "DELETE FROM {table} WHERE span = {} AND bucket < {}",
                param(backend, 1),
                param(backend, 2)
            );
            n += db
                .execute(Statement::from_sql_and_values(
                    backend,
                    sql,
                    [Value::from(span as i32), Value::from(before)],
                ))
                .await?
                .rows_affected();
        }
        if span == DAY {
            n += db
                .execute(Statement::from_sql_and_values(
                    backend,
                    format!(
                        "DELETE FROM {USER_DAILY} WHERE bucket < {}",
                        param(backend, 1)
                    ),
                    [Value::from(before)],
                ))
                .await?
                .rows_affected();
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job's wait is its time QUEUED before its last grant, each stretch `floor` of
    /// both ends; what it held between (an earlier attempt's run, a dispatch Ray was
    /// not ready for) is not a wait.
    #[test]
    fn a_wait_is_the_time_queued_before_the_last_grant() {
        use JobStatus as S;
        let t = |s: i64, ms: u32| Utc.timestamp_opt(s, ms * 1_000_000).unwrap();
        let submitted = t(100, 900);
        // Granted once: grant less submit, whole seconds at both ends.
        let once = [
            (None, S::Queued, t(100, 900)),
            (Some(S::Queued), S::Dispatching, t(103, 100)),
            (Some(S::Dispatching), S::Pending, t(104, 0)),
            (Some(S::Pending), S::Running, t(105, 0)),
            (Some(S::Running), S::Succeeded, t(200, 0)),
        ];
        assert_eq!(queued_seconds(submitted, &once), 3);
        // Ran 100 s, preempted back to the queue, waited 7 s, ran again: 3 + 7.
        let again = [
            (None, S::Queued, t(100, 900)),
            (Some(S::Queued), S::Dispatching, t(103, 100)),
            (Some(S::Dispatching), S::Running, t(104, 0)),
            (Some(S::Running), S::Queued, t(204, 500)),
            (Some(S::Queued), S::Dispatching, t(211, 400)),
            (Some(S::Dispatching), S::Running, t(212, 0)),
            (Some(S::Running), S::Succeeded, t(300, 0)),
        ];
        assert_eq!(queued_seconds(submitted, &again), 3 + 7);
        // A pool job released and admitted again within the same second: 0 more.
        let pool = [
            (None, S::Queued, t(100, 900)),
            (Some(S::Queued), S::Admitted, t(100, 950)),
            (Some(S::Admitted), S::Queued, t(150, 100)),
            (Some(S::Queued), S::Admitted, t(150, 200)),
            (Some(S::Admitted), S::Running, t(151, 0)),
            (Some(S::Running), S::Failed, t(160, 0)),
        ];
        assert_eq!(queued_seconds(submitted, &pool), 0);
        // No intake row (it changes nothing either way): from the submit.
        assert_eq!(queued_seconds(submitted, &once[1..]), 3);
    }

    #[test]
    fn split_cuts_at_span_boundaries() {
        assert_eq!(split(10, 10, HOUR), vec![]);
        assert_eq!(split(3590, 3610, HOUR), vec![(0, 10), (3600, 10)]);
        assert_eq!(
            split(0, 2 * HOUR + 5, HOUR),
            vec![(0, HOUR), (HOUR, HOUR), (2 * HOUR, 5)]
        );
    }

    #[test]
    fn months_are_calendar_months() {
        // 2026-02-15 → 2026-02-01, next 2026-03-01.
        let t = Utc
            .with_ymd_and_hms(2026, 2, 15, 12, 0, 0)
            .unwrap()
            .timestamp();
        let feb = Utc
            .with_ymd_and_hms(2026, 2, 1, 0, 0, 0)
            .unwrap()
            .timestamp();
        let mar = Utc
            .with_ymd_and_hms(2026, 3, 1, 0, 0, 0)
            .unwrap()
            .timestamp();
        assert_eq!(Step::Month.floor(t), feb);
        assert_eq!(Step::Month.next(feb), mar);
        assert_eq!(Step::Month.ceil(t), mar);
        assert_eq!(Step::Month.ceil(feb), feb);
        let dec = Utc
            .with_ymd_and_hms(2026, 12, 1, 0, 0, 0)
            .unwrap()
            .timestamp();
        let jan = Utc
            .with_ymd_and_hms(2027, 1, 1, 0, 0, 0)
            .unwrap()
            .timestamp();
        assert_eq!(Step::Month.next(dec), jan);
    }

    #[test]
    fn wait_percentiles_are_the_upper_bounds_of_their_bins() {
        let mut s = Sums::default();
        for w in [0, 3, 3, 40, 100_000] {
            s.add(&Sums::ended(JobStatus::Succeeded, Some(w)));
        }
        assert_eq!(s.wait_count(), 5);
        assert_eq!(s.wait_percentile(20.0), Some(0));
        assert_eq!(s.wait_percentile(50.0), Some(4));
        assert_eq!(s.wait_percentile(80.0), Some(59));
        assert_eq!(s.wait_percentile(99.0), Some(100_000));
        let mut one = Sums::default();
        one.add(&Sums::ended(JobStatus::Failed, Some(42)));
        assert_eq!(
            one.wait_percentile(50.0),
            Some(42),
            "the longest wait bounds it"
        );
        assert_eq!(Sums::default().wait_percentile(50.0), None);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<i64> = (1..=10).collect();
        assert_eq!(percentile(&v, 50.0), Some(5));
        assert_eq!(percentile(&v, 90.0), Some(9));
        assert_eq!(percentile(&v, 99.0), Some(10));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
