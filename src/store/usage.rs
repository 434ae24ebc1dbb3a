//! Usage accounting (issue 48, DESIGN §4 "Usage" and §6 "Usage rollup"): what each
//! job held on a cluster or pool, summed per hour and per day into `usage_rollup`
//! and `usage_custom` in the transaction of the step that ends the hold
//! ([`super::apply`]), and the report over any range read back from those sums,
//! the jobs still holding resources, and the ended jobs' waits.
//!
//! Units are whole seconds (a hold runs from `floor(dispatched_at)` to
//! `floor(end)`); cores and GPUs are counted in thousandths (`cpu_ms` =
//! milli-core-seconds), memory in bytes (`memory_bs` = byte-seconds), custom
//! resources in thousandths. All sums are integers, so a report's rows add up
//! exactly, whichever way they are grouped.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Datelike, TimeZone, Utc};
use entity::{job, user, JobStatus};
use sea_orm::{
    AccessMode, ColumnTrait, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, IsolationLevel,
    QueryFilter, QuerySelect, Statement, TransactionTrait, Value,
};

use super::Db;

/// Seconds in an hour: the span of the hourly rows.
pub const HOUR: i64 = 3_600;
/// Seconds in a day: the span of the daily rows.
pub const DAY: i64 = 86_400;

/// The metadata key by which a job names its size (`size` on `/v1/jobs`, the same key
/// on Ray's Jobs API); usage is reported per size by it.
pub const SIZE_KEY: &str = "fairshare.size";

/// What one job held, as declared, on one place from `from` to `to` (Unix seconds,
/// `from <= to`).
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
    /// Custom resource name → milli-unit-seconds.
    pub custom: BTreeMap<String, i128>,
    /// Jobs that ended SUCCEEDED.
    pub succeeded: u64,
    /// Jobs that ended FAILED.
    pub failed: u64,
    /// Jobs that ended STOPPED.
    pub stopped: u64,
    /// Waits of the jobs that ended (and were granted): counts per bin of
    /// [`WAIT_BOUNDS`].
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

    /// `hold`'s resources held for `secs` seconds.
    pub fn held(hold: &Hold, secs: i64) -> Sums {
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

    /// One job that ended in `status`, after a wait of `wait` seconds from submit to
    /// its last grant (`None`: never granted).
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
    /// Adds a hold, cut into hours and days.
    pub(crate) fn hold(&mut self, hold: &Hold) {
        for span in [HOUR, DAY] {
            for (bucket, secs) in split(hold.from, hold.to, span) {
                self.0
                    .entry((span, bucket, hold.key.clone()))
                    .or_default()
                    .add(&Sums::held(hold, secs));
            }
        }
    }

    /// Adds a job that ended in `status` at `at` (Unix seconds) after waiting `wait`
    /// seconds for its last grant (`None`: never granted).
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

/// Columns of a `usage_rollup` row.
const ROLLUP_COLUMNS: usize = 12 + WAIT_BINS + 1;

fn clamp(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// Writes `deltas` into the rollup inside `conn`'s transaction: upserts that add to
/// the rows, in key order (every writer takes the rows' locks in that order on
/// PostgreSQL, after its job rows, so two cannot deadlock on them).
pub(crate) async fn record<C: ConnectionTrait>(conn: &C, deltas: &Deltas) -> Result<(), DbErr> {
    let backend = conn.get_database_backend();
    let rows: Vec<_> = deltas.0.iter().filter(|(_, s)| !s.is_zero()).collect();
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * ROLLUP_COLUMNS);
        let mut tuples = Vec::with_capacity(chunk.len());
        for ((span, bucket, key), s) in chunk {
            let first = values.len();
            values.extend([
                Value::from(*span as i32),
                Value::from(*bucket),
                Value::from(key.user.clone()),
                Value::from(key.group.clone()),
                Value::from(key.place.clone()),
                Value::from(key.size.clone()),
                Value::from(clamp(s.cpu_ms)),
                Value::from(clamp(s.gpu_ms)),
                Value::from(clamp(s.memory_bs)),
                Value::from(s.succeeded as i64),
                Value::from(s.failed as i64),
                Value::from(s.stopped as i64),
            ]);
            values.extend(s.waits.iter().map(|c| Value::from(*c as i32)));
            values.push(Value::from(s.wait_max));
            tuples.push(placeholders(backend, first, ROLLUP_COLUMNS));
        }
        let bins: Vec<String> = (0..WAIT_BINS).map(|k| format!("w{k}")).collect();
        let add_bins: Vec<String> = bins
            .iter()
            .map(|w| format!("{w} = usage_rollup.{w} + excluded.{w}"))
            .collect();
        let greatest = match backend {
            DatabaseBackend::Sqlite => "MAX",
            _ => "GREATEST",
        };
        let sql = format!(
            "INSERT INTO usage_rollup (span, bucket, user_id, group_path, place, size, \
             cpu_ms, gpu_ms, memory_bs, succeeded, failed, stopped, {}, wait_max) VALUES {} \
             ON CONFLICT (span, bucket, user_id, group_path, place, size) DO UPDATE SET \
             cpu_ms = usage_rollup.cpu_ms + excluded.cpu_ms, \
             gpu_ms = usage_rollup.gpu_ms + excluded.gpu_ms, \
             memory_bs = usage_rollup.memory_bs + excluded.memory_bs, \
             succeeded = usage_rollup.succeeded + excluded.succeeded, \
             failed = usage_rollup.failed + excluded.failed, \
             stopped = usage_rollup.stopped + excluded.stopped, {}, \
             wait_max = {greatest}(usage_rollup.wait_max, excluded.wait_max)",
            bins.join(", "),
            tuples.join(", "),
            add_bins.join(", "),
        );
        conn.execute(Statement::from_sql_and_values(backend, sql, values))
            .await?;
    }
    let custom: Vec<_> = rows
        .iter()
        .flat_map(|((span, bucket, key), s)| {
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
            "INSERT INTO usage_custom (span, bucket, user_id, group_path, place, size, \
             resource, amount_ms) VALUES {} \
             ON CONFLICT (span, bucket, user_id, group_path, place, size, resource) \
             DO UPDATE SET amount_ms = usage_custom.amount_ms + excluded.amount_ms",
            tuples.join(", ")
        );
        conn.execute(Statement::from_sql_and_values(backend, sql, values))
            .await?;
    }
    Ok(())
}

/// Writes `holds` and `ended` jobs (key, final status, Unix seconds, wait in seconds)
/// into the rollup
/// in one transaction, as [`super::apply`] does for the steps it writes: for tools
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
    })
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
    let bins: Vec<String> = (0..WAIT_BINS)
        .map(|k| format!("CAST(SUM(w{k}) AS BIGINT)"))
        .collect();
    let sql = format!(
        "SELECT bucket, {col}, CAST(SUM(cpu_ms) AS BIGINT), CAST(SUM(gpu_ms) AS BIGINT), \
         CAST(SUM(memory_bs) AS BIGINT), CAST(SUM(succeeded) AS BIGINT), \
         CAST(SUM(failed) AS BIGINT), CAST(SUM(stopped) AS BIGINT), {}, \
         CAST(MAX(wait_max) AS BIGINT) FROM usage_rollup \
         WHERE span = {} AND bucket >= {} AND bucket < {}{user_filter} GROUP BY bucket, {col}",
        bins.join(", "),
        param(backend, 1),
        param(backend, 2),
        param(backend, 3),
    );
    for r in txn
        .query_all(Statement::from_sql_and_values(backend, sql, params.clone()))
        .await?
    {
        let bucket: i64 = r.try_get_by_index(0)?;
        let key: String = r.try_get_by_index(1)?;
        let s = &mut entry(&mut rows, step, bucket, key).sums;
        s.cpu_ms += r.try_get_by_index::<i64>(2)? as i128;
        s.gpu_ms += r.try_get_by_index::<i64>(3)? as i128;
        s.memory_bs += r.try_get_by_index::<i64>(4)? as i128;
        s.succeeded += r.try_get_by_index::<i64>(5)?.max(0) as u64;
        s.failed += r.try_get_by_index::<i64>(6)?.max(0) as u64;
        s.stopped += r.try_get_by_index::<i64>(7)?.max(0) as u64;
        for k in 0..WAIT_BINS {
            s.waits[k] += r.try_get_by_index::<i64>(8 + k)?.max(0) as u64;
        }
        s.wait_max = s.wait_max.max(r.try_get_by_index::<i64>(8 + WAIT_BINS)?);
    }
    let sql = format!(
        "SELECT bucket, {col}, resource, CAST(SUM(amount_ms) AS BIGINT) FROM usage_custom \
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
    for j in live.all(&txn).await? {
        let g = group(&j.user_id);
        let end = Utc.timestamp_opt(now, 0).single().unwrap_or_default();
        let Some(mut hold) = hold_of(&j, &g, end) else {
            continue;
        };
        hold.from = hold.from.max(q.from);
        hold.to = hold.to.min(q.to);
        let key = q.by.of(&hold.key);
        for (bucket, secs) in split(hold.from, hold.to, q.step.span()) {
            entry(&mut rows, step, bucket, key.clone())
                .sums
                .add(&Sums::held(&hold, secs));
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
/// older than `daily_keep` (Unix seconds; 0 keeps forever). Returns the rows deleted.
pub async fn prune(db: &Db, now: i64, hourly_keep: i64, daily_keep: i64) -> Result<u64, DbErr> {
    let backend = db.get_database_backend();
    let mut n = 0;
    for (span, keep) in [(HOUR, hourly_keep), (DAY, daily_keep)] {
        if keep <= 0 {
            continue;
        }
        let before = Step::Day.floor(now - keep);
        for table in ["usage_rollup", "usage_custom"] {
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
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

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
