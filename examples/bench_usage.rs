//! The usage report's latency and the rollup's size (issue 48 part 3): a fresh
//! database filled with N finished jobs of U users over D days (the `jobs` rows, and
//! their rollup written by `store::record_usage`, the function `store::apply`'s
//! writes share, in time order by chunks of 20,000 jobs as the service writes it when
//! holds end), pruned to the default retention, then `store::usage_report` timed
//! for the queries a console and a chargeback export make. Run by `scripts/bench-usage`.
//!
//!     cargo run --example bench_usage -- postgres://postgres@127.0.0.1:5432 1000000 1000 365
//!     cargo run --example bench_usage -- sqlite 100000 1000 365
//!
//! `BENCH_USAGE_URL` (with `BENCH_USAGE_NOW`) times a kept database again without
//! loading it; with `BENCH_USAGE_APPLY=N` too it times the write path instead (N
//! RUNNING jobs ended one by one through `store::apply`). Both print the reports'
//! times with and without the JSON answer built.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use entity::{job, JobStatus};
use fairshare::config::DatabaseSettings;
use fairshare::store::{self, Hold, UsageBy, UsageKey, UsageQuery, UsageStep};
use rand::{Rng, SeedableRng};
use sea_orm::{ConnectionTrait, Database, EntityTrait, IntoActiveModel};

const CHUNK: usize = 20_000;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let target = args.first().cloned().unwrap_or_else(|| "sqlite".into());
    let n: usize = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let users: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let days: i64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(365);

    let dir = tempfile::tempdir().expect("a temp dir");
    // BENCH_USAGE_URL: a database a run kept (BENCH_USAGE_KEEP), migrated and timed
    // again without loading anything (e.g. two copies of one database, timed with the
    // code before and after a change).
    if let Ok(url) = std::env::var("BENCH_USAGE_URL") {
        let db = store::connect(&DatabaseSettings {
            url,
            max_connections: 4,
            acquire_timeout: Duration::from_secs(30),
            idle_in_transaction_timeout: Duration::from_secs(600),
            intake_pipeline: 1,
        })
        .await
        .expect("the database opens");
        store::migrate(&db).await.expect("migrations apply");
        let now: i64 = std::env::var("BENCH_USAGE_NOW")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| Utc::now().timestamp());
        if let Some(n) = std::env::var("BENCH_USAGE_APPLY")
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
        {
            time_ends(&db, n).await;
        } else {
            time_reports(&db, now).await;
        }
        return;
    }
    let (url, pg) = if target.starts_with("postgres") {
        let name = format!("fs_bench_usage_{}", std::process::id());
        let admin = Database::connect(format!("{}/postgres", target.trim_end_matches('/')))
            .await
            .expect("PostgreSQL");
        admin
            .execute_unprepared(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create database");
        (
            format!("{}/{name}", target.trim_end_matches('/')),
            Some((admin, name)),
        )
    } else {
        (
            format!("sqlite://{}/bench.db?mode=rwc", dir.path().display()),
            None,
        )
    };
    let db = store::connect(&DatabaseSettings {
        url: url.clone(),
        max_connections: 4,
        acquire_timeout: Duration::from_secs(30),
        idle_in_transaction_timeout: Duration::from_secs(600),
        intake_pipeline: 1,
    })
    .await
    .expect("the database opens");
    store::migrate(&db).await.expect("migrations apply");

    let now = Utc::now().timestamp();
    let start = now - days * 86_400;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(48);
    let groups = ["", "ibm-q/open", "ibm-q/premium", "lab-a", "lab-b"];
    let t = Instant::now();
    let mut done = 0;
    while done < n {
        let m = CHUNK.min(n - done);
        let mut rows = Vec::with_capacity(m);
        let mut holds = Vec::with_capacity(m);
        let mut ended = Vec::with_capacity(m);
        for i in 0..m {
            let u = rng.gen_range(0..users);
            let user = format!("user{u:04}");
            let group = groups[u % groups.len()].to_string();
            let place = if rng.gen_bool(0.8) { "main" } else { "gw" };
            let size = match rng.gen_range(0..10) {
                0..=5 => "",
                6..=8 => "s",
                _ => "m",
            };
            let run = rng.gen_range(60..4 * 3_600);
            let wait = rng.gen_range(0..600);
            // In time order, chunk by chunk, as the service writes the rollup (each
            // hold when it ends): chunk `c` of `n / CHUNK` covers its slice of the range.
            let chunks = n.div_ceil(CHUNK) as i64;
            let c = (done / CHUNK) as i64;
            let slice = (now - start - 5 * 3_600) / chunks;
            let lo = start + c * slice;
            let submitted = rng.gen_range(lo..lo + slice);
            let dispatched = submitted + wait;
            let finished = dispatched + run;
            let status = match rng.gen_range(0..20) {
                0 => JobStatus::Failed,
                1 => JobStatus::Stopped,
                _ => JobStatus::Succeeded,
            };
            let cpu = [1.0, 2.0, 4.0, 0.5][rng.gen_range(0..4)];
            let memory = (1i64 << 30) * rng.gen_range(1..16);
            let ts = |s: i64| Utc.timestamp_opt(s, 0).single().expect("a time");
            let key = UsageKey {
                user: user.clone(),
                group,
                place: place.into(),
                size: size.into(),
            };
            holds.push(Hold {
                key: key.clone(),
                cpu_milli: (cpu * 1000.0) as i64,
                gpu_milli: 0,
                memory_bytes: memory,
                custom: BTreeMap::new(),
                from: dispatched,
                to: finished,
                actual: None,
            });
            ended.push((key, status, finished, Some(wait)));
            rows.push(
                job::Model {
                    external_id: Some(format!("e{}", done + i)),
                    entrypoint: "python train.py".into(),
                    metadata: (!size.is_empty())
                        .then(|| serde_json::json!({ store::SIZE_KEY: size })),
                    cpu,
                    memory_bytes: memory,
                    cluster: Some(place.into()),
                    dispatched_at: Some(ts(dispatched)),
                    started_at: Some(ts(dispatched)),
                    finished_at: Some(ts(finished)),
                    attempt: 1,
                    ..store::job_row(uuid::Uuid::now_v7(), user, status, ts(submitted))
                }
                .into_active_model(),
            );
        }
        for part in rows.chunks(1_000) {
            job::Entity::insert_many(part.to_vec())
                .exec_without_returning(&db)
                .await
                .expect("jobs inserted");
        }
        store::record_usage(&db, &holds, &ended)
            .await
            .expect("usage recorded");
        done += m;
        eprintln!("{done} jobs loaded ({:.0} s)", t.elapsed().as_secs_f64());
    }
    // Retention as configured by default: hourly rows 35 days, daily rows 400.
    store::prune_usage(&db, now, 35 * 86_400, 400 * 86_400)
        .await
        .expect("pruned");
    if pg.is_some() {
        // BENCH_USAGE_VACUUM_FULL: the heap compacted (the pruned hourly rows' space
        // given back), as after `VACUUM FULL`; else what autovacuum leaves.
        let full = std::env::var_os("BENCH_USAGE_VACUUM_FULL").is_some();
        db.execute_unprepared(if full {
            "VACUUM FULL ANALYZE"
        } else {
            "VACUUM ANALYZE"
        })
        .await
        .expect("vacuum");
    }
    let count = |sql: &'static str| {
        let db = db.clone();
        async move {
            let r = db
                .query_one(sea_orm::Statement::from_string(
                    db.get_database_backend(),
                    sql,
                ))
                .await
                .expect("count")
                .expect("a row");
            r.try_get_by_index::<i64>(0).expect("a number")
        }
    };
    let hourly = count("SELECT COUNT(*) FROM usage_rollup_hourly").await;
    let daily = count("SELECT COUNT(*) FROM usage_rollup WHERE span = 86400").await;
    let bytes = if pg.is_some() {
        count("SELECT CAST(pg_total_relation_size('usage_rollup') + pg_total_relation_size('usage_custom') \
               + pg_total_relation_size('usage_rollup_hourly') + pg_total_relation_size('usage_custom_hourly') AS BIGINT)")
            .await
    } else {
        -1
    };
    let jobs_bytes = if pg.is_some() {
        count("SELECT CAST(pg_total_relation_size('jobs') AS BIGINT)").await
    } else {
        -1
    };
    println!(
        "database: {}; {n} finished jobs of {users} users over {days} days (loaded in {:.0} s)",
        if pg.is_some() { "PostgreSQL" } else { "SQLite" },
        t.elapsed().as_secs_f64()
    );
    println!(
        "rollup: {daily} daily rows, {hourly} hourly rows (35 days kept), {} MiB with indexes (jobs table: {} MiB)",
        bytes as f64 / 1_048_576.0,
        jobs_bytes as f64 / 1_048_576.0
    );
    println!("now: {now} (BENCH_USAGE_NOW to time this database again as of then)");
    time_reports(&db, now).await;
    db.close().await.ok();
    if std::env::var_os("BENCH_USAGE_KEEP").is_some() {
        eprintln!("kept: {url}");
        return;
    }
    if let Some((admin, name)) = pg {
        admin
            .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
            .ok();
    }
}

/// Times the reports a console and a chargeback export make, as of `now`: 7 runs of
/// each, `store::usage_report` and then the JSON `GET /v1/usage` answers.
async fn time_reports(db: &store::Db, now: i64) {
    let month_ago = UsageStep::Day.floor(now - 30 * 86_400);
    let cases = [
        (
            "month by day per user",
            month_ago,
            UsageStep::Day,
            UsageBy::User,
        ),
        (
            "month by day per group",
            month_ago,
            UsageStep::Day,
            UsageBy::Group,
        ),
        (
            "year by month per user",
            now - 365 * 86_400,
            UsageStep::Month,
            UsageBy::User,
        ),
        (
            "day by hour per user",
            now - 86_400,
            UsageStep::Hour,
            UsageBy::User,
        ),
    ];
    // BENCH_USAGE_QUICK: the two month reports only.
    let quick = std::env::var_os("BENCH_USAGE_QUICK").is_some();
    for (what, from, step, by) in cases.into_iter().take(if quick { 2 } else { 4 }) {
        let q = UsageQuery {
            from: step.floor(from),
            to: step.ceil(now),
            step,
            by,
            user: None,
        };
        let mut times = Vec::new();
        let mut rows = 0;
        let mut bytes = 0;
        for _ in 0..7 {
            let t = Instant::now();
            let report = store::usage_report(db, &q, now).await.expect("report");
            let read = t.elapsed().as_secs_f64() * 1000.0;
            rows = report.len();
            // What the handler adds: the percentiles, the view, the JSON.
            bytes = serde_json::to_vec(&fairshare::usage_report_view(&q, now, report))
                .expect("JSON")
                .len();
            times.push((t.elapsed().as_secs_f64() * 1000.0, read));
        }
        times.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut reads: Vec<f64> = times.iter().map(|t| t.1).collect();
        reads.sort_by(f64::total_cmp);
        println!(
            "{what}: {rows} rows ({} KiB of JSON), median {:.0} ms, max {:.0} ms with the JSON; \
             the read alone median {:.0} ms (7 runs)",
            bytes / 1024,
            times[times.len() / 2].0,
            times[times.len() - 1].0,
            reads[reads.len() / 2],
        );
    }
}

/// The write path the rollup rides on: `n` RUNNING jobs (granted an hour ago, on 4
/// places, 100 users) ended one by one through `store::apply` (each its own
/// transaction, the rollup written in it); the median and 99th percentile per step.
async fn time_ends(db: &store::Db, n: usize) {
    let now = Utc::now().timestamp();
    let ts = |s: i64| Utc.timestamp_opt(s, 0).single().expect("a time");
    let mut ids = Vec::with_capacity(n);
    let mut rows = Vec::with_capacity(n);
    for i in 0..n {
        let id = uuid::Uuid::now_v7();
        ids.push(id);
        rows.push(
            job::Model {
                entrypoint: "python train.py".into(),
                cpu: 2.0,
                memory_bytes: 1 << 30,
                cluster: Some(format!("c{}", i % 4)),
                dispatched_at: Some(ts(now - 3_600 - i as i64)),
                started_at: Some(ts(now - 3_600 - i as i64)),
                attempt: 1,
                ..store::job_row(
                    id,
                    format!("user{:04}", i % 100),
                    JobStatus::Running,
                    ts(now - 3_700 - i as i64),
                )
            }
            .into_active_model(),
        );
    }
    for part in rows.chunks(1_000) {
        job::Entity::insert_many(part.to_vec())
            .exec_without_returning(db)
            .await
            .expect("jobs inserted");
    }
    let mut times = Vec::with_capacity(n);
    for id in ids {
        let t = Instant::now();
        store::apply(
            db,
            &store::Fence::Unfenced,
            id,
            &fairshare::lifecycle::Event::SeenFinished {
                status: JobStatus::Succeeded,
                message: None,
                started_at: None,
                finished_at: None,
            },
        )
        .await
        .expect("ended");
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{n} jobs ended one by one through store::apply: median {:.2} ms, p99 {:.2} ms per step",
        times[n / 2],
        times[(n * 99 / 100).min(n - 1)]
    );
}
