//! Usage accounting (issue 48 part 3, DESIGN §4 "Usage", §6 "Usage rollup"): the sums
//! over users equal the sums over the cluster's holds for any range and step (a
//! property test on both databases), holds cut at the range's edges, and the report
//! of real jobs (a pool's, moved by a runner's reports through `store::apply`) kept
//! across a restart, in JSON and CSV.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use fairshare::config::{PoolSettings, Settings};
use fairshare::store::{
    self, Hold, UsageBy, UsageKey, UsageQuery, UsageRate, UsageRow, UsageStep, UsageSums,
};
use proptest::prelude::*;
use sea_orm::{ConnectionTrait, EntityTrait};
use serde_json::{json, Value};

use crate::both_databases;
use crate::helpers::{
    assert_error, property_on_db, start_on, test_settings, until, Db, TestApp, TestDb, SUBMITTER,
};

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600;

fn hold() -> impl Strategy<Value = Hold> {
    (
        (0usize..4, 0usize..3, 0usize..2, 0usize..3),
        0i64..4 * 86_400,
        0i64..2 * 86_400,
        (0i64..8_000, 0i64..4_000, 0i64..(1 << 36)),
        proptest::option::of(1i64..5_000),
        proptest::option::of((0i64..16_000, 0i64..4_000, 0i64..(1 << 36))),
    )
        .prop_map(
            |((u, g, p, z), start, len, (cpu, gpu, mem), qpu, actual)| Hold {
                key: UsageKey {
                    user: format!("u{u}"),
                    group: ["", "a", "a/b"][g].into(),
                    place: ["c1", "c2"][p].into(),
                    size: ["", "s", "m"][z].into(),
                },
                cpu_milli: cpu,
                gpu_milli: gpu,
                memory_bytes: mem,
                custom: qpu
                    .map(|q| BTreeMap::from([("QPU".to_string(), q)]))
                    .unwrap_or_default(),
                from: T0 + start,
                to: T0 + start + len,
                actual: actual.map(|(cpu_milli, gpu_milli, memory_bytes)| UsageRate {
                    cpu_milli,
                    gpu_milli,
                    memory_bytes,
                }),
            },
        )
}

fn step() -> impl Strategy<Value = UsageStep> {
    prop_oneof![
        Just(UsageStep::Hour),
        Just(UsageStep::Day),
        Just(UsageStep::Month)
    ]
}

/// What the rollup should say for `[from, to)`: each hold's overlap with it, by hand,
/// declared and actually (its reading, else declared).
fn by_hand(holds: &[Hold], from: i64, to: i64) -> UsageSums {
    let mut s = UsageSums::default();
    for h in holds {
        let secs = (h.to.min(to) - h.from.max(from)).max(0) as i128;
        s.cpu_ms += h.cpu_milli as i128 * secs;
        s.gpu_ms += h.gpu_milli as i128 * secs;
        s.memory_bs += h.memory_bytes as i128 * secs;
        let a = h.actual.unwrap_or(UsageRate {
            cpu_milli: h.cpu_milli,
            gpu_milli: h.gpu_milli,
            memory_bytes: h.memory_bytes,
        });
        s.actual_cpu_ms += a.cpu_milli as i128 * secs;
        s.actual_gpu_ms += a.gpu_milli as i128 * secs;
        s.actual_memory_bs += a.memory_bytes as i128 * secs;
        for (k, v) in &h.custom {
            *s.custom.entry(k.clone()).or_default() += *v as i128 * secs;
        }
    }
    s.custom.retain(|_, v| *v != 0);
    s
}

/// Each step's sums over every key of `rows`.
fn per_step(rows: &[UsageRow]) -> BTreeMap<i64, UsageSums> {
    let mut m: BTreeMap<i64, UsageSums> = BTreeMap::new();
    for r in rows {
        m.entry(r.start).or_default().add(&r.sums);
    }
    for s in m.values_mut() {
        s.custom.retain(|_, v| *v != 0);
    }
    m
}

/// The property: for random holds and ended jobs and any range and step, every
/// step's sums are the same by user, by group, by cluster and by size, and equal the
/// holds' overlaps with the step computed by hand; so a hold across the range's (or a
/// step's) edges is cut there, and the whole range adds up exactly.
fn sums_agree_whichever_way_they_are_grouped(which: Db) {
    let input = (
        proptest::collection::vec(hold(), 0..25),
        proptest::collection::vec(
            (
                0usize..4,
                0usize..3,
                0i64..5 * 86_400,
                proptest::option::of(0i64..200_000),
            ),
            0..10,
        ),
        0i64..4 * 86_400,
        1i64..4 * 86_400,
        step(),
    );
    property_on_db(
        which,
        24,
        input,
        |db, (holds, ended, off, len, step)| async move {
            db.execute_unprepared(
                "DELETE FROM usage_rollup; DELETE FROM usage_custom; \
                 DELETE FROM usage_rollup_hourly; DELETE FROM usage_custom_hourly; \
                 DELETE FROM usage_user_daily",
            )
            .await
            .unwrap();
            let statuses = [
                entity::JobStatus::Succeeded,
                entity::JobStatus::Failed,
                entity::JobStatus::Stopped,
            ];
            let ended: Vec<(UsageKey, entity::JobStatus, i64, Option<i64>)> = ended
                .into_iter()
                .map(|(u, st, at, wait)| {
                    (
                        UsageKey {
                            user: format!("u{u}"),
                            place: "c1".into(),
                            ..UsageKey::default()
                        },
                        statuses[st],
                        T0 + at,
                        wait,
                    )
                })
                .collect();
            store::record_usage(&db, &holds, &ended).await.unwrap();
            let (from, to) = (step.floor(T0 + off), step.ceil(T0 + off + len));
            let mut reports = Vec::new();
            for by in [
                UsageBy::User,
                UsageBy::Group,
                UsageBy::Cluster,
                UsageBy::Size,
            ] {
                let q = UsageQuery {
                    from,
                    to,
                    step,
                    by,
                    user: None,
                };
                reports.push(
                    store::usage_report(&db, &q, T0 + 100 * 86_400)
                        .await
                        .unwrap(),
                );
            }
            let by_user = per_step(&reports[0]);
            for (i, r) in reports.iter().enumerate().skip(1) {
                prop_assert_eq!(
                    &per_step(r),
                    &by_user,
                    "grouping {} differs from by user",
                    i
                );
            }
            // Each step, by hand.
            let mut t = from;
            while t < to {
                let next = step.next(t);
                let mut want = by_hand(&holds, t, next);
                for (_, st, at, wait) in &ended {
                    if (t..next).contains(at) {
                        want.add(&UsageSums::ended(*st, *wait));
                    }
                }
                let got = by_user.get(&t).cloned().unwrap_or_default();
                prop_assert_eq!(got, want, "step at {}", t);
                t = next;
            }
            // No row outside the range.
            prop_assert!(reports[0].iter().all(|r| r.start >= from && r.start < to));
            // One user's report is that user's rows of the full one.
            let q = UsageQuery {
                from,
                to,
                step,
                by: UsageBy::User,
                user: Some("u1".into()),
            };
            let one = store::usage_report(&db, &q, T0 + 100 * 86_400)
                .await
                .unwrap();
            let want: Vec<&UsageRow> = reports[0].iter().filter(|r| r.key == "u1").collect();
            prop_assert_eq!(one.iter().collect::<Vec<_>>(), want);
            Ok(())
        },
    );
}

#[test]
fn sums_agree_whichever_way_they_are_grouped_sqlite() {
    sums_agree_whichever_way_they_are_grouped(Db::Sqlite);
}

#[test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
fn sums_agree_whichever_way_they_are_grouped_postgres() {
    sums_agree_whichever_way_they_are_grouped(Db::Postgres);
}

/// The resources of one step: declared cores, GPUs, bytes, then the same actually.
type Held = [i128; 6];

fn held_of(s: &UsageSums) -> Held {
    [
        s.cpu_ms,
        s.gpu_ms,
        s.memory_bs,
        s.actual_cpu_ms,
        s.actual_gpu_ms,
        s.actual_memory_bs,
    ]
}

/// Each step's resources in a report of `step` over `[from, to)` as of `now`.
async fn held_per_step(
    db: &sea_orm::DatabaseConnection,
    step: UsageStep,
    from: i64,
    to: i64,
    now: i64,
) -> BTreeMap<i64, Held> {
    let q = UsageQuery {
        from,
        to,
        step,
        by: UsageBy::User,
        user: None,
    };
    let rows = store::usage_report(db, &q, now).await.unwrap();
    per_step(&rows)
        .into_iter()
        .map(|(t, s)| (t, held_of(&s)))
        .filter(|(_, h)| h.iter().any(|v| *v != 0))
        .collect()
}

/// By hand: each step's declared resources over `[d, end)` and actual ones over each
/// of `pieces` (from, to, rate).
fn pieces_per_step(
    step: UsageStep,
    from: i64,
    to: i64,
    declared: UsageRate,
    (d, end): (i64, i64),
    pieces: &[(i64, i64, UsageRate)],
) -> BTreeMap<i64, Held> {
    let overlap = |a: i64, b: i64, s: i64, n: i64| (b.min(n) - a.max(s)).max(0) as i128;
    let mut out = BTreeMap::new();
    let mut t = from;
    while t < to {
        let next = step.next(t);
        let secs = overlap(d, end, t, next);
        let mut h: Held = [
            declared.cpu_milli as i128 * secs,
            declared.gpu_milli as i128 * secs,
            declared.memory_bytes as i128 * secs,
            0,
            0,
            0,
        ];
        for (a, b, r) in pieces {
            let secs = overlap(*a, *b, t, next);
            h[3] += r.cpu_milli as i128 * secs;
            h[4] += r.gpu_milli as i128 * secs;
            h[5] += r.memory_bytes as i128 * secs;
        }
        if h.iter().any(|v| *v != 0) {
            out.insert(t, h);
        }
        t = next;
    }
    out
}

/// What a job actually held, written as the monitor writes it: readings of Ray's
/// State API (`store::record_actual`) at random times between the job's grant and its
/// end (`store::apply`), some the same as the one before it or as what it declared.
/// Every step of the report, while the job runs and after it ended, is exactly the
/// stretches by hand: declared until the first reading, then each reading until the
/// next; the declared columns the whole hold as declared. Nothing is left in
/// `job_actual` once the hold ended.
fn actual_use_is_each_readings_stretch(which: Db) {
    let input = (
        0i64..2 * 86_400,
        proptest::collection::vec((1i64..40_000, 0usize..3), 0..6),
        1i64..40_000,
        step(),
    );
    property_on_db(
        which,
        16,
        input,
        |db, (d, readings, tail, step)| async move {
            db.execute_unprepared(
                "DELETE FROM usage_rollup; DELETE FROM usage_custom; \
                 DELETE FROM usage_rollup_hourly; DELETE FROM usage_custom_hourly; \
                 DELETE FROM usage_user_daily; \
                 DELETE FROM job_actual",
            )
            .await
            .unwrap();
            let declared = UsageRate {
                cpu_milli: 1_000,
                gpu_milli: 0,
                memory_bytes: 1 << 30,
            };
            let rates = [
                declared,
                UsageRate {
                    cpu_milli: 7_000,
                    gpu_milli: 500,
                    memory_bytes: 3 << 30,
                },
                UsageRate {
                    cpu_milli: 250,
                    gpu_milli: 0,
                    memory_bytes: 1 << 20,
                },
            ];
            let d = T0 + d;
            let ts = |t: i64| DateTime::<Utc>::from_timestamp(t, 0).unwrap();
            let id = uuid::Uuid::now_v7();
            let row = entity::job::Model {
                entrypoint: "python train.py".into(),
                cpu: 1.0,
                memory_bytes: 1 << 30,
                cluster: Some("c1".into()),
                dispatched_at: Some(ts(d)),
                started_at: Some(ts(d)),
                attempt: 1,
                ..fairshare::store::job_row(id, "u1".into(), entity::JobStatus::Running, ts(d - 10))
            };
            entity::job::Entity::insert(sea_orm::IntoActiveModel::into_active_model(row))
                .exec_without_returning(&db)
                .await
                .unwrap();
            let (mut t, mut current, mut pieces) = (d, declared, Vec::new());
            for (gap, r) in readings {
                let at = t + gap;
                store::record_actual(&db, &store::Fence::Unfenced, at, &[(id, rates[r])])
                    .await
                    .unwrap();
                pieces.push((t, at, current));
                (t, current) = (at, rates[r]);
            }
            let end = t + tail;
            pieces.push((t, end, current));
            let (from, to) = (step.floor(d), step.ceil(end + 1));
            let want = pieces_per_step(step, from, to, declared, (d, end), &pieces);
            // While it runs (as of `end`), then once it ended at `end`.
            let live = held_per_step(&db, step, from, to, end).await;
            prop_assert_eq!(&live, &want, "while it runs");
            let ended = store::apply(
                &db,
                &store::Fence::Unfenced,
                id,
                &fairshare::lifecycle::Event::SeenFinished {
                    status: entity::JobStatus::Succeeded,
                    message: None,
                    started_at: None,
                    finished_at: Some(ts(end)),
                },
            )
            .await
            .unwrap();
            prop_assert!(
                matches!(ended, store::Applied::Changed { .. }),
                "{:?}",
                ended
            );
            let after = held_per_step(&db, step, from, to, end + 5_000).await;
            prop_assert_eq!(&after, &want, "after it ended");
            let left = db
                .query_one(sea_orm::Statement::from_string(
                    db.get_database_backend(),
                    "SELECT COUNT(*) FROM job_actual",
                ))
                .await
                .unwrap()
                .unwrap()
                .try_get_by_index::<i64>(0)
                .unwrap();
            prop_assert_eq!(left, 0);
            Ok(())
        },
    );
}

#[test]
fn actual_use_is_each_readings_stretch_sqlite() {
    actual_use_is_each_readings_stretch(Db::Sqlite);
}

#[test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
fn actual_use_is_each_readings_stretch_postgres() {
    actual_use_is_each_readings_stretch(Db::Postgres);
}

/// A pool `gw` of 8 cores and 4 cluster slots.
fn with_pool(s: &mut Settings) {
    s.pools = vec![PoolSettings {
        name: "gw".into(),
        capacity: BTreeMap::from([("cpu".to_string(), 8.0), ("clusters".to_string(), 4.0)]),
    }];
}

async fn job(app: &TestApp, id: &str) -> Value {
    app.get_json(&format!("/v1/jobs/{id}"), SUBMITTER).await
}

async fn report_ok(app: &TestApp, id: &str, what: &str, body: Value) {
    let resp = app
        .post(&format!("/v1/jobs/{id}/{what}"), SUBMITTER, body)
        .await;
    assert_eq!(resp.status(), 200, "{what} {id}: {:?}", resp.text().await);
}

async fn until_status(app: &TestApp, id: &str, status: &str) -> Value {
    until(15, status, || async {
        let j = job(app, id).await;
        (j["status"] == status).then_some(j)
    })
    .await
}

fn secs(v: &Value) -> i64 {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.timestamp())
        .expect("a time")
}

/// Seconds a job held, from its timeline: each move into ADMITTED to the next move out
/// of ADMITTED or RUNNING (whole seconds, as the rollup counts).
async fn held_seconds(app: &TestApp, id: &str) -> i64 {
    let v = app
        .get_json(&format!("/v1/jobs/{id}/events"), SUBMITTER)
        .await;
    let mut held = 0;
    let mut since = None;
    for e in v["events"].as_array().unwrap() {
        let to = e["to"].as_str().unwrap_or("");
        let at = secs(&e["at"]);
        match (to, since) {
            ("ADMITTED", None) => since = Some(at),
            ("RUNNING" | "ADMITTED", Some(_)) => {}
            (_, Some(s)) => {
                held += at - s;
                since = None;
            }
            _ => {}
        }
    }
    held
}

/// Seconds a job waited in the queue before its last grant, from its timeline: from its
/// submit, and from each move back into QUEUED, to the next move out of it (whole
/// seconds at both ends, as the rollup counts). What it held between is not a wait.
async fn queued_seconds(app: &TestApp, id: &str) -> i64 {
    let submitted = secs(&job(app, id).await["submitted_at"]);
    let v = app
        .get_json(&format!("/v1/jobs/{id}/events"), SUBMITTER)
        .await;
    let mut queued = 0;
    let mut since = Some(submitted);
    for e in v["events"].as_array().unwrap() {
        let at = secs(&e["at"]);
        match (since, e["to"] == "QUEUED") {
            (None, true) => since = Some(at),
            (Some(s), false) => {
                queued += at - s;
                since = None;
            }
            _ => {}
        }
    }
    queued
}

/// Waits until the clock has moved to the next whole second after `t`.
async fn past(t: i64) {
    until(5, "the next second", || async {
        (Utc::now().timestamp() > t).then_some(())
    })
    .await;
}

/// Real jobs of a pool, moved through `store::apply` by a runner's reports: one that
/// is released (back to the queue: its first hold ends), admitted again, started and
/// finishes,
/// one that fails. `/v1/usage` counts exactly what their timelines say they held, by
/// user, group and cluster alike; CSV says the same; a restart changes nothing.
async fn usage_of_real_jobs_survives_a_restart(which: Db) {
    let Some(db) = TestDb::new(which).await else {
        return;
    };
    let mut settings = test_settings(&db.url);
    with_pool(&mut settings);
    let app = start_on(db, settings.clone()).await;
    let res = json!({"cpu": 2, "custom": {"clusters": 1}});
    // Names of their own: the metrics are the test process's.
    let (alice, bob) = (format!("alice-{which:?}"), format!("bob-{which:?}"));
    let a = app
        .submit(&alice, json!({"pool": "gw", "resources": res}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let b = app
        .submit(&bob, json!({"pool": "gw", "resources": res}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let ja = until_status(&app, &a, "ADMITTED").await;
    let jb = until_status(&app, &b, "ADMITTED").await;
    past(secs(&ja["dispatched_at"])).await;
    report_ok(&app, &a, "release", json!({})).await;
    let ja = until(15, "alice's job admitted again", || async {
        let j = job(&app, &a).await;
        (j["status"] == "ADMITTED" && j["attempt"] == 2).then_some(j)
    })
    .await;
    report_ok(&app, &a, "started", json!({"attempt": 2})).await;
    past(secs(&ja["dispatched_at"])).await;
    report_ok(
        &app,
        &a,
        "finished",
        json!({"status": "SUCCEEDED", "attempt": 2}),
    )
    .await;
    past(secs(&jb["dispatched_at"])).await;
    report_ok(&app, &b, "finished", json!({"status": "FAILED"})).await;
    let held_a = held_seconds(&app, &a).await;
    let held_b = held_seconds(&app, &b).await;
    assert!(held_a >= 2 && held_b >= 1, "{held_a} {held_b}");

    let by_user = app.get_json("/v1/usage?by=user&step=day", SUBMITTER).await;
    let rows = by_user["rows"].as_array().unwrap();
    let sum = |key: &str, field: &str| -> f64 {
        rows.iter()
            .filter(|r| r["key"] == key)
            .map(|r| r[field].as_f64().unwrap())
            .sum()
    };
    assert_eq!(
        sum(&alice, "core_seconds"),
        2.0 * held_a as f64,
        "{by_user}"
    );
    assert_eq!(sum(&bob, "core_seconds"), 2.0 * held_b as f64, "{by_user}");
    let slots: f64 = rows
        .iter()
        .map(|r| r["custom_seconds"]["clusters"].as_f64().unwrap_or(0.0))
        .sum();
    assert_eq!(slots, (held_a + held_b) as f64);
    let ended = |key: &str, s: &str| -> u64 {
        rows.iter()
            .filter(|r| r["key"] == key)
            .map(|r| r["jobs"][s].as_u64().unwrap())
            .sum()
    };
    assert_eq!(ended(&alice, "succeeded"), 1);
    assert_eq!(ended(&bob, "failed"), 1);
    assert_eq!(ended(&alice, "failed") + ended(&bob, "succeeded"), 0);
    let waits: u64 = rows
        .iter()
        .map(|r| r["wait_seconds"]["count"].as_u64().unwrap())
        .sum();
    assert_eq!(waits, 2);
    // Alice's wait is her time queued, not her first attempt's hold (at least a second:
    // she was released only once the clock had passed her first grant's second).
    let queued_a = queued_seconds(&app, &a).await;
    let alice_row = rows.iter().find(|r| r["key"] == alice.as_str()).unwrap();
    assert_eq!(alice_row["wait_seconds"]["count"], 1, "{alice_row}");
    assert_eq!(alice_row["wait_seconds"]["p99"], queued_a, "{alice_row}");
    assert!(
        secs(&ja["dispatched_at"]) - secs(&ja["submitted_at"]) > queued_a,
        "her last grant less her submit counts her first hold too"
    );
    // By cluster: the same total, all on the pool.
    let by_cluster = app
        .get_json(
            "/v1/usage?by=cluster&step=hour&from=2026-01-01T00:00:00Z",
            SUBMITTER,
        )
        .await;
    let total: f64 = by_cluster["rows"]
        .as_array()
        .unwrap()
        .iter()
        .inspect(|r| assert_eq!(r["key"], "gw", "{r}"))
        .map(|r| r["core_seconds"].as_f64().unwrap())
        .sum();
    assert_eq!(total, 2.0 * (held_a + held_b) as f64);
    // CSV: a header and the same rows.
    let csv = app
        .client
        .get(app.url("/v1/usage?by=user&step=day"))
        .bearer_auth(SUBMITTER)
        .header("accept", "text/csv")
        .send()
        .await
        .unwrap();
    assert_eq!(csv.status(), 200);
    assert!(csv.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let text = csv.text().await.unwrap();
    let mut lines = text.lines();
    assert!(
        lines.next().unwrap().starts_with("start,key,core_seconds,"),
        "{text}"
    );
    let core: HashMap<String, f64> = lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[1].to_string(), f[2].parse::<f64>().unwrap())
        })
        .fold(HashMap::new(), |mut m, (k, v)| {
            *m.entry(k).or_default() += v;
            m
        });
    assert_eq!(core[&alice], 2.0 * held_a as f64, "{text}");
    // The counters in /metrics.
    // (Process-wide: other tests' users may have taken every label of its own, and
    // then alice's usage is under `_other`.)
    let metrics = app.metrics().await;
    let prefix = format!("fairshare_user_usage_total{{resource=\"cpu\",user=\"{alice}\"}} ");
    match metrics.lines().find(|l| l.starts_with(&prefix)) {
        Some(l) => assert_eq!(l, format!("{prefix}{}", 2 * held_a)),
        None => assert!(
            metrics.contains("user=\"_other\""),
            "no usage counter for {alice}"
        ),
    }
    // A restart: the same report, from the database.
    let db = app.stop().await;
    let app = start_on(db, settings).await;
    let again = app.get_json("/v1/usage?by=user&step=day", SUBMITTER).await;
    assert_eq!(again["rows"], by_user["rows"]);
    // 422 names the parameter.
    for (q, field) in [
        ("from=yesterday", "from"),
        ("step=week", "step"),
        ("by=planet", "by"),
        ("bogus=1", "bogus"),
    ] {
        let r = app.get(&format!("/v1/usage?{q}"), SUBMITTER).await;
        assert_error(r, 422, "invalid_field", Some(field)).await;
    }
    // A range that ends before it starts is empty.
    let empty = app
        .get_json(
            "/v1/usage?from=2030-02-01T00:00:00Z&to=2030-01-01T00:00:00Z",
            SUBMITTER,
        )
        .await;
    assert_eq!(empty["rows"], json!([]), "{empty}");
}
both_databases!(usage_of_real_jobs_survives_a_restart);

/// Named sizes (issue 48 part 4): a job that names one asks for its resources, on
/// `/v1` (`size`) and on Ray's Jobs API (metadata `fairshare.size`); an unknown size,
/// or a size with explicit resources (an empty object names none), is 422 naming the field; the OpenAPI document
/// lists the sizes; usage is reported per size.
async fn sizes_stand_for_resources_and_are_reported(which: Db) {
    let Some(db) = TestDb::new(which).await else {
        return;
    };
    let mut settings = test_settings(&db.url);
    with_pool(&mut settings);
    settings.pools[0]
        .capacity
        .insert("memory_bytes".into(), 64.0 * 1024.0 * 1024.0 * 1024.0);
    settings.sizes = vec![
        fairshare::config::SizeSettings {
            name: "m".into(),
            cpu: 2.0,
            gpu: 0.0,
            memory_bytes: 1 << 30,
            custom: BTreeMap::from([("clusters".to_string(), 1.0)]),
        },
        fairshare::config::SizeSettings {
            name: "xl".into(),
            cpu: 100_000.0,
            gpu: 0.0,
            memory_bytes: 0,
            custom: BTreeMap::from([("clusters".to_string(), 1.0)]),
        },
    ];
    let app = start_on(db, settings).await;
    let v = app.submit("sam", json!({"pool": "gw", "size": "m"})).await;
    assert_eq!(v["resources"]["cpu"], 2.0, "{v}");
    assert_eq!(v["resources"]["memory_bytes"], 1u64 << 30, "{v}");
    assert_eq!(v["resources"]["custom"]["clusters"], 1.0, "{v}");
    assert_eq!(v["metadata"]["fairshare.size"], "m", "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    for (body, field) in [
        (
            json!({"user": "sam", "entrypoint": "x", "pool": "gw", "size": "xxl"}),
            "size",
        ),
        // Too large for the pool: the error names the size the client sent, not
        // `resources.cpu` (a fresh tester's finding).
        (
            json!({"user": "sam", "entrypoint": "x", "pool": "gw", "size": "xl"}),
            "size",
        ),
        (
            json!({"user": "sam", "entrypoint": "x", "pool": "gw", "size": "m", "resources": {"cpu": 1}}),
            "size",
        ),
        (
            json!({"user": "sam", "entrypoint": "x", "pool": "gw", "size": "m", "metadata": {"fairshare.size": "s"}}),
            "size",
        ),
        // On /v1 with only the metadata key (as the Python client's `metadata=` sends
        // it): the field named is the one sent (a fresh tester's finding: `size`).
        (
            json!({"user": "sam", "entrypoint": "x", "pool": "gw", "metadata": {"fairshare.size": "nosuch"}}),
            "metadata.fairshare.size",
        ),
        (
            json!({"user": "sam", "entrypoint": "x", "pool": "gw", "metadata": {"fairshare.size": "m"}, "resources": {"cpu": 3}}),
            "metadata.fairshare.size",
        ),
        (
            json!({"user": "sam", "entrypoint": "x", "pool": "gw", "metadata": {"fairshare.size": "xl"}}),
            "metadata.fairshare.size",
        ),
    ] {
        let r = app.post("/v1/jobs", SUBMITTER, body).await;
        assert_error(r, 422, "invalid_field", Some(field)).await;
    }
    // Ray's Jobs API: the metadata key, not with entrypoint resources.
    let resp = app
        .post(
            "/api/jobs/",
            SUBMITTER,
            json!({"entrypoint": "x", "metadata": {"fairshare.user": "ray-sam",
                   "fairshare.pool": "gw", "fairshare.size": "m"}}),
        )
        .await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let page = app.get_json("/v1/jobs?user=ray-sam", SUBMITTER).await;
    assert_eq!(page["jobs"][0]["resources"]["cpu"], 2.0, "{page}");
    for (body, text) in [
        (
            json!({"entrypoint": "x", "entrypoint_num_cpus": 1, "metadata": {"fairshare.user": "ray-sam",
                   "fairshare.pool": "gw", "fairshare.size": "m"}}),
            "metadata.fairshare.size",
        ),
        (
            json!({"entrypoint": "x", "metadata": {"fairshare.user": "ray-sam",
                   "fairshare.pool": "gw", "fairshare.size": "nope"}}),
            "metadata.fairshare.size",
        ),
        (
            json!({"entrypoint": "x", "metadata": {"fairshare.user": "ray-sam",
                   "fairshare.pool": "gw", "fairshare.size": "xl"}}),
            "metadata.fairshare.size",
        ),
    ] {
        let resp = app.post("/api/jobs/", SUBMITTER, body).await;
        assert!(resp.status().is_client_error(), "{}", resp.status());
        let t = resp.text().await.unwrap();
        assert!(t.contains(text), "{t}");
    }
    // The document lists the sizes.
    let doc = app.get_json("/openapi.json", SUBMITTER).await;
    assert_eq!(
        doc["components"]["schemas"]["SubmitRequest"]["properties"]["size"]["enum"],
        json!(["m", "xl", null])
    );
    // Usage per size.
    let j = until_status(&app, &id, "ADMITTED").await;
    past(secs(&j["dispatched_at"])).await;
    report_ok(&app, &id, "finished", json!({"status": "SUCCEEDED"})).await;
    let held = held_seconds(&app, &id).await;
    assert!(held >= 1);
    let r = app
        .get_json("/v1/usage?by=size&step=hour&user=sam", SUBMITTER)
        .await;
    let rows = r["rows"].as_array().unwrap();
    let core: f64 = rows
        .iter()
        .inspect(|x| assert_eq!(x["key"], "m", "{x}"))
        .map(|x| x["core_seconds"].as_f64().unwrap())
        .sum();
    assert_eq!(core, 2.0 * held as f64, "{r}");
    let mem: f64 = rows
        .iter()
        .map(|x| x["memory_byte_seconds"].as_f64().unwrap())
        .sum();
    assert_eq!(mem, (1u64 << 30) as f64 * held as f64);
    // An empty resources object names none and goes with a size, on both APIs alike
    // (a fresh tester found Ray's `entrypoint_resources: {}` taken and `/v1`'s
    // `resources: {}` refused).
    for resources in [json!({}), json!({"custom": {}}), json!({"cpu": null})] {
        let v = app
            .submit(
                "sam",
                json!({"pool": "gw", "size": "m", "resources": resources}),
            )
            .await;
        assert_eq!(v["resources"]["cpu"], 2.0, "{v}");
    }
    let resp = app
        .post(
            "/api/jobs/",
            SUBMITTER,
            json!({"entrypoint": "x", "entrypoint_resources": {}, "metadata": {"fairshare.user": "ray-sam",
                   "fairshare.pool": "gw", "fairshare.size": "m"}}),
        )
        .await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
}
both_databases!(sizes_stand_for_resources_and_are_reported);

/// Submits a pool job of 2 cores and one cluster slot for `user`; its id.
async fn pool_job(app: &TestApp, user: &str) -> String {
    app.submit(
        user,
        json!({"pool": "gw", "resources": {"cpu": 2, "custom": {"clusters": 1}}}),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Each of `users`' core-seconds in `app`'s report for the last 30 days by day,
/// declared and actually, summed over the steps.
async fn core_seconds(app: &TestApp, users: &[&str]) -> Vec<(f64, f64)> {
    let v = app.get_json("/v1/usage?by=user&step=day", SUBMITTER).await;
    let rows = v["rows"].as_array().unwrap();
    users
        .iter()
        .map(|u| {
            rows.iter()
                .filter(|r| r["key"] == *u)
                .fold((0.0, 0.0), |(d, a), r| {
                    (
                        d + r["core_seconds"].as_f64().unwrap(),
                        a + r["actual"]["core_seconds"].as_f64().unwrap(),
                    )
                })
        })
        .collect()
}

/// Starts a job granted by `app` (ADMITTED, then the runner's `started`); returns it
/// once it has held for a whole second.
async fn started(app: &TestApp, id: &str) {
    let j = until_status(app, id, "ADMITTED").await;
    report_ok(app, id, "started", json!({})).await;
    past(secs(&j["dispatched_at"])).await;
}

/// Issue 48, "a restart … in the middle of a range loses nothing": pool jobs held
/// across a restart of the service, one ending before it and one after it, and a job
/// granted after it; the report after equals what their timelines say they held (2
/// cores each: pools have no State API, so actual = declared).
async fn usage_of_jobs_running_across_a_restart_is_kept(which: Db) {
    let Some(db) = TestDb::new(which).await else {
        return;
    };
    let mut settings = test_settings(&db.url);
    with_pool(&mut settings);
    let app = start_on(db, settings.clone()).await;
    let users = ["r-early", "r-across", "r-after"].map(|u| format!("{u}-{which:?}"));
    let early = pool_job(&app, &users[0]).await;
    let across = pool_job(&app, &users[1]).await;
    started(&app, &early).await;
    started(&app, &across).await;
    report_ok(&app, &early, "finished", json!({"status": "SUCCEEDED"})).await;
    let db = app.stop().await;
    let app = start_on(db, settings).await;
    let after = pool_job(&app, &users[2]).await;
    started(&app, &after).await;
    report_ok(&app, &across, "finished", json!({"status": "SUCCEEDED"})).await;
    report_ok(&app, &after, "finished", json!({"status": "FAILED"})).await;
    let mut want = Vec::new();
    for id in [&early, &across, &after] {
        let held = held_seconds(&app, id).await as f64;
        assert!(held >= 1.0);
        want.push((2.0 * held, 2.0 * held));
    }
    let names: Vec<&str> = users.iter().map(String::as_str).collect();
    assert_eq!(core_seconds(&app, &names).await, want);
}
both_databases!(usage_of_jobs_running_across_a_restart_is_kept);

/// Whether `app` leads.
async fn leads(app: &TestApp) -> bool {
    app.get_json("/v1/scheduler", SUBMITTER).await["leadership"]["is_leader"] == true
}

/// Issue 48, "a failover in the middle of a range loses nothing": two replicas on one
/// PostgreSQL database. The first leader grants pool jobs; one ends while it leads,
/// one runs across the failover and ends under the second leader, which also grants
/// and ends a third. Both replicas' reports, while the first leads and after the
/// second took over, equal what the jobs' timelines say they held.
#[actix_web::test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
async fn usage_of_jobs_running_across_a_failover_is_kept() {
    let Some(db) = TestDb::new(Db::Postgres).await else {
        return;
    };
    let replica = |id: &str| {
        let mut s = test_settings(&db.url);
        with_pool(&mut s);
        s.leadership.replica_id = id.into();
        s.leadership.lease = Duration::from_secs(2);
        s.leadership.renew_every = Duration::from_millis(500);
        s
    };
    let (sa, sb) = (replica("usage-a"), replica("usage-b"));
    let alias = db.alias();
    let a = start_on(db, sa).await;
    let b = start_on(alias, sb).await;
    assert!(leads(&a).await, "the first replica leads");
    assert!(!leads(&b).await, "the second follows");
    let users = ["f-early", "f-across", "f-after"];
    let early = pool_job(&a, users[0]).await;
    let across = pool_job(&b, users[1]).await;
    started(&a, &early).await;
    started(&a, &across).await;
    report_ok(&a, &early, "finished", json!({"status": "SUCCEEDED"})).await;
    // Mid-range, on the follower: the ended job, and the running one up to now.
    let mid = core_seconds(&b, &users).await;
    let held_early = held_seconds(&a, &early).await as f64;
    assert_eq!(mid[0], (2.0 * held_early, 2.0 * held_early));
    assert!(mid[1].0 >= 2.0, "{mid:?}");
    // The leader goes; the follower takes over.
    let db = a.stop().await;
    until(15, "the second replica leads", || async {
        leads(&b).await.then_some(())
    })
    .await;
    let after = pool_job(&b, users[2]).await;
    started(&b, &after).await;
    report_ok(&b, &across, "finished", json!({"status": "SUCCEEDED"})).await;
    report_ok(&b, &after, "finished", json!({"status": "SUCCEEDED"})).await;
    let mut want = Vec::new();
    for id in [&early, &across, &after] {
        let held = held_seconds(&b, id).await as f64;
        assert!(held >= 1.0);
        want.push((2.0 * held, 2.0 * held));
    }
    assert_eq!(core_seconds(&b, &users).await, want);
    // The slots (a custom resource) add up too, by cluster.
    let v = b
        .get_json(
            "/v1/usage?by=cluster&step=hour&from=2026-01-01T00:00:00Z",
            SUBMITTER,
        )
        .await;
    let slots: f64 = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["custom_seconds"]["clusters"].as_f64().unwrap_or(0.0))
        .sum();
    assert_eq!(slots, want.iter().map(|w| w.0 / 2.0).sum::<f64>());
    b.stop().await;
    drop(db);
}
