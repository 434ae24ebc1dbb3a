//! Usage accounting (issue 48 part 3, DESIGN §4 "Usage", §6 "Usage rollup"): the sums
//! over users equal the sums over the cluster's holds for any range and step (a
//! property test on both databases), holds cut at the range's edges, and the report
//! of real jobs (a pool's, moved by a runner's reports through `store::apply`) kept
//! across a restart, in JSON and CSV.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use fairshare::config::{PoolSettings, Settings};
use fairshare::store::{self, Hold, UsageBy, UsageKey, UsageQuery, UsageRow, UsageStep, UsageSums};
use proptest::prelude::*;
use sea_orm::ConnectionTrait;
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
    )
        .prop_map(|((u, g, p, z), start, len, (cpu, gpu, mem), qpu)| Hold {
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
        })
}

fn step() -> impl Strategy<Value = UsageStep> {
    prop_oneof![
        Just(UsageStep::Hour),
        Just(UsageStep::Day),
        Just(UsageStep::Month)
    ]
}

/// What the rollup should say for `[from, to)`: each hold's overlap with it, by hand.
fn by_hand(holds: &[Hold], from: i64, to: i64) -> UsageSums {
    let mut s = UsageSums::default();
    for h in holds {
        let secs = (h.to.min(to) - h.from.max(from)).max(0);
        s.add(&UsageSums::held(h, secs));
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
            db.execute_unprepared("DELETE FROM usage_rollup; DELETE FROM usage_custom")
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
/// or a size with explicit resources, is 422 naming the field; the OpenAPI document
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
    settings.sizes = vec![fairshare::config::SizeSettings {
        name: "m".into(),
        cpu: 2.0,
        gpu: 0.0,
        memory_bytes: 1 << 30,
        custom: BTreeMap::from([("clusters".to_string(), 1.0)]),
    }];
    let app = start_on(db, settings).await;
    let v = app.submit("sam", json!({"pool": "gw", "size": "m"})).await;
    assert_eq!(v["resources"]["cpu"], 2.0, "{v}");
    assert_eq!(v["resources"]["memory_bytes"], 1u64 << 30, "{v}");
    assert_eq!(v["resources"]["custom"]["clusters"], 1.0, "{v}");
    assert_eq!(v["metadata"]["fairshare.size"], "m", "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    for (body, field) in [
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
        json!(["m"])
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
}
both_databases!(sizes_stand_for_resources_and_are_reported);
