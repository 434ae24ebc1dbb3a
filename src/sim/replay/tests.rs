//! Tests of the live replay.

use std::path::{Path, PathBuf};

use std::time::Duration;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::*;
use crate::sim::swf::{Trace, TraceJob};

fn args() -> ReplayArgs {
    let mut a = ReplayArgs::new(PathBuf::from("t.swf.gz"), "http://127.0.0.1:1".into());
    a.time_scale = 100.0;
    a.cpu_scale = 0.01;
    a.progress = false;
    a
}

fn tj(number: u64, submit: f64, run: f64, cpus: u32, user: &str) -> TraceJob {
    TraceJob::new(number, submit, run, cpus, user)
}

#[test]
fn cpu_is_scaled_clamped_and_rounded() {
    let mut a = args();
    assert_eq!(scale_cpu(88, &a), 0.88);
    assert_eq!(scale_cpu(2, &a), 0.1, "floor min_cpu");
    a.max_cpu = Some(0.5);
    assert_eq!(scale_cpu(88, &a), 0.5, "cap max_cpu");
    a.cpu_scale = 1.0 / 3.0;
    a.max_cpu = None;
    assert_eq!(scale_cpu(1, &a), 0.3333, "Ray's 0.0001 step");
    a.min_cpu = 0.00015;
    a.cpu_scale = 0.0001;
    assert_eq!(scale_cpu(1, &a), 0.00015, "never below the floor");
}

#[test]
fn run_is_scaled_with_a_floor_and_entrypoint_has_three_decimals() {
    let a = args();
    assert_eq!(scale_run(250.0, &a), 2.5);
    assert_eq!(scale_run(30.0, &a), 1.0, "floor min_runtime_s");
    assert_eq!(entrypoint(2.5), "sleep 2.500");
    assert_eq!(entrypoint(1.0), "sleep 1.000");
    assert_eq!(entrypoint(0.0001), "sleep 0.001", "rounded up");
    assert_eq!(entrypoint(2592.28), "sleep 2592.280");
    assert_eq!(entrypoint(1.23449), "sleep 1.235");
}

#[test]
fn stem_drops_gz_and_swf() {
    assert_eq!(
        trace_stem(Path::new("examples/traces/coare-saliksik-2020.swf.gz")),
        "coare-saliksik-2020"
    );
    assert_eq!(trace_stem(Path::new("/x/NASA.swf")), "NASA");
    assert_eq!(trace_stem(Path::new("plain")), "plain");
    assert_eq!(trace_stem(Path::new(".gz")), ".gz");
}

#[test]
fn plan_selects_offsets_and_names_jobs() {
    let trace = Trace {
        jobs: vec![
            tj(1, 100.0, 50.0, 88, "u62"),
            tj(2, 1100.0, 500.0, 2, "u7"),
            tj(3, 2100.0, 5.0, 16, "u7"),
            tj(3, 2200.0, 5.0, 16, "u7"),
        ],
        max_procs: Some(128),
        skipped: 0,
    };
    let mut a = args();
    a.skip = 1;
    let p = plan(&trace, "t", &a);
    assert_eq!(p.len(), 3);
    assert_eq!(p[0].at_s, 0.0, "relative to the first selected job");
    assert_eq!(p[1].at_s, 10.0);
    assert_eq!(p[0].external_id, "t-2");
    assert_eq!(p[0].entrypoint(), "sleep 5.000");
    assert_eq!(p[0].cpu, 0.1);
    assert_eq!(p[1].cpu, 0.16);
    assert_eq!(p[2].external_id, "t-3.2", "repeated numbers stay distinct");
    a.skip = 0;
    a.limit = Some(2);
    let p = plan(&trace, "t", &a);
    assert_eq!(p.iter().map(|j| j.number).collect::<Vec<_>>(), vec![1, 2]);
}

/// A change that spoils one argument of [`args`].
type Spoil = fn(&mut ReplayArgs);

#[test]
fn validate_names_the_flag() {
    assert!(args().validate().is_ok());
    let cases: [(Spoil, &str); 5] = [
        (
            |a| {
                a.min_cpu = 1.0;
                a.max_cpu = Some(0.5);
            },
            "--max-cpu",
        ),
        (|a| a.time_scale = 0.0, "--time-scale"),
        (|a| a.cpu_scale = f64::NAN, "--cpu-scale"),
        (|a| a.min_runtime_s = -1.0, "--min-runtime"),
        // A tester's `--min-runtime 1e300` was blamed on `--time-scale`.
        (|a| a.min_runtime_s = 1e300, "--min-runtime"),
    ];
    for (spoil, flag) in cases {
        let mut a = args();
        spoil(&mut a);
        let e = a.validate().unwrap_err().to_string();
        assert!(e.contains(flag), "{flag}: {e}");
    }
}

#[test]
fn timeout_is_three_times_the_longer_of_span_and_work_plus_five_minutes() {
    let job = |at_s, sleep_s, cpu| PlannedJob {
        number: 0,
        user: "u".into(),
        external_id: "x".into(),
        at_s,
        sleep_s,
        cpu,
    };
    let p = vec![job(0.0, 8.0, 1.0), job(10.0, 8.0, 1.0)];
    assert_eq!(overall_timeout(&p, None), Duration::from_secs(3 * 20 + 300));
    let p = vec![job(0.0, 8.0, 2.0); 10];
    assert_eq!(
        overall_timeout(&p, Some(2.0)),
        Duration::from_secs(3 * 100 + 300)
    );
}

#[test]
fn percentile_and_slowdown() {
    assert_eq!(p95(&[]), 0.0);
    assert_eq!(p95(&[3.0]), 3.0);
    let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
    assert_eq!(p95(&v), 95.0);
    assert_eq!(p95(&[1.0, 2.0, 3.0]), 3.0);
    assert_eq!(bounded_slowdown(0.0, 1.0), 1.0);
    assert_eq!(bounded_slowdown(20.0, 2.0), 2.2);
    assert_eq!(bounded_slowdown(20.0, 20.0), 2.0);
}

#[test]
fn status_codes_are_classified() {
    assert_eq!(disposition(201), Disposition::Created);
    assert_eq!(disposition(200), Disposition::Existing);
    assert_eq!(disposition(429), Disposition::Retry);
    assert_eq!(disposition(503), Disposition::Retry);
    assert_eq!(disposition(422), Disposition::Reject);
    assert_eq!(disposition(413), Disposition::Reject);
    assert_eq!(disposition(401), Disposition::Fatal);
    assert_eq!(disposition(404), Disposition::Fatal);
}

fn record(user: &str, status: &str, times: [Option<f64>; 4]) -> JobRecord {
    let base = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
    let at = |s: Option<f64>| s.map(|s| base + chrono::Duration::milliseconds((s * 1e3) as i64));
    JobRecord {
        id: Uuid::new_v4(),
        user: user.into(),
        status: status.into(),
        submitted_at: at(times[0]).unwrap(),
        dispatched_at: at(times[1]),
        started_at: at(times[2]),
        finished_at: at(times[3]),
        message: None,
        resources: Some(RecordResources { cpu: 1.0 }),
    }
}

#[test]
fn table_has_users_by_jobs_an_all_row_and_the_overall_line() {
    let jobs = vec![
        // wait 2, run 20: bsld 1.1
        record(
            "u7",
            "SUCCEEDED",
            [Some(0.0), Some(1.0), Some(2.0), Some(22.0)],
        ),
        // wait 10 (dispatched only), no run
        record("u62", "FAILED", [Some(5.0), Some(15.0), None, Some(16.0)]),
        // wait 4, run 1: bsld (4 + 1) / 10 → 1
        record(
            "u62",
            "SUCCEEDED",
            [Some(6.0), Some(8.0), Some(10.0), Some(11.0)],
        ),
        // never started
        record("u62", "STOPPED", [Some(7.0), None, None, Some(8.0)]),
    ];
    let t = render_table(&jobs);
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[0].starts_with("user"), "{t}");
    assert!(lines[1].starts_with("u62 "), "most jobs first: {t}");
    let cols: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        cols,
        ["u62", "3", "1", "1", "1", "7.0", "10.0", "1.00"],
        "{t}"
    );
    let cols: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        cols,
        ["u7", "1", "1", "0", "0", "2.0", "2.0", "1.10"],
        "{t}"
    );
    let cols: Vec<&str> = lines[3].split_whitespace().collect();
    assert_eq!(
        cols,
        ["all", "4", "2", "1", "1", "5.3", "10.0", "1.05"],
        "{t}"
    );
    assert!(
        lines[4].contains("4 jobs, 2 succeeded, 1 failed, 1 stopped; makespan 22.0 s"),
        "{t}"
    );
}

#[test]
fn share_table_shows_actual_against_fair_share_and_the_fairness_error() {
    // Capacity 1 core. u62 holds it over [0, 10); u7 waits from 1 to 10, then
    // holds it over [10, 12). Contended [1, 10): fair 0.5 each, u62 has 1, u7
    // 0: error 0.5. Averages over [0, 12): u62 actual 10/12, u7 2/12; fair
    // u62 (1 + 9·0.5 + 0)/12, u7 (9·0.5 + 2)/12.
    let jobs = vec![
        record(
            "u62",
            "SUCCEEDED",
            [Some(0.0), Some(0.0), Some(0.0), Some(10.0)],
        ),
        record(
            "u7",
            "SUCCEEDED",
            [Some(1.0), Some(10.0), Some(10.0), Some(12.0)],
        ),
    ];
    let context = ShareContext {
        capacity_cpu: 1.0,
        weights: BTreeMap::new(),
        knobs: None,
    };
    let t = render_share_table(&jobs, &context);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["u62", "1", "83.3", "45.8", "0.0"],
        "{t}"
    );
    // u7 waited with nothing held over the whole contended time.
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["u7", "1", "16.7", "54.2", "100.0"],
        "{t}"
    );
    assert!(
        lines[3].starts_with(
            "fairness error 0.5000 (idle capacity 0.0000 + held beyond fair share 0.5000; \
             time average over 9.0 s contended of 12.0 s"
        ),
        "{t}"
    );
}

#[test]
fn share_table_counts_a_core_held_idle_for_a_wide_job_as_idle_capacity() {
    // Capacity 2 cores. u62's 1-core job runs over [0, 10); u7's 2-core job waits
    // from 1 to 10 with one core idle, then runs over [10, 12). Contended [1, 10)
    // (capped demands 0.5 + 1 > 1): fair 0.5 each, u62 has its 0.5, u7 nothing, the
    // other half of the cluster is idle: error 0.5, all of it idle capacity.
    let mut wide = record(
        "u7",
        "SUCCEEDED",
        [Some(1.0), Some(10.0), Some(10.0), Some(12.0)],
    );
    wide.resources = Some(RecordResources { cpu: 2.0 });
    let jobs = vec![
        record(
            "u62",
            "SUCCEEDED",
            [Some(0.0), Some(0.0), Some(0.0), Some(10.0)],
        ),
        wide,
    ];
    let context = ShareContext {
        capacity_cpu: 2.0,
        weights: BTreeMap::new(),
        knobs: None,
    };
    let t = render_share_table(&jobs, &context);
    let error = t
        .lines()
        .find(|l| l.starts_with("fairness error"))
        .unwrap_or_default();
    assert!(
        error.starts_with(
            "fairness error 0.5000 (idle capacity 0.5000 + held beyond fair share 0.0000; \
             time average over 9.0 s contended of 12.0 s"
        ),
        "{t}"
    );
}

#[test]
fn starved_share_counts_only_contended_time_with_jobs_queued_and_nothing_held() {
    // Capacity 1 core. u62 holds it over [0, 4) and [6, 10); u7 submits at 1 and
    // holds it over [4, 6), then has another job queued from 6 to 10 (it runs
    // [10, 11)). Contended: [1, 10) (u7 backlogged from 1, u62 from 6... u62's
    // second job was submitted at 0): 9 s. u7 starved over [1, 4) and [6, 10): 7 s
    // of 9; u62 over [4, 6): 2 s of 9.
    let jobs = vec![
        record(
            "u62",
            "SUCCEEDED",
            [Some(0.0), Some(0.0), Some(0.0), Some(4.0)],
        ),
        record(
            "u62",
            "SUCCEEDED",
            [Some(0.0), Some(6.0), Some(6.0), Some(10.0)],
        ),
        record(
            "u7",
            "SUCCEEDED",
            [Some(1.0), Some(4.0), Some(4.0), Some(6.0)],
        ),
        record(
            "u7",
            "SUCCEEDED",
            [Some(1.0), Some(10.0), Some(10.0), Some(11.0)],
        ),
    ];
    let context = ShareContext {
        capacity_cpu: 1.0,
        weights: BTreeMap::new(),
        knobs: None,
    };
    let t = render_share_table(&jobs, &context);
    let row = |user: &str| -> Vec<String> {
        t.lines()
            .find(|l| l.starts_with(user))
            .unwrap()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(row("u62")[4], format!("{:.1}", 100.0 * 2.0 / 9.0), "{t}");
    assert_eq!(row("u7")[4], format!("{:.1}", 100.0 * 7.0 / 9.0), "{t}");
}

#[test]
fn alternatives_simulate_the_same_jobs_under_every_policy() {
    // Capacity 2 cores. u62 submits eight 1-core jobs of 2 s at 0, u7 two at 1. As
    // measured, u7 waited for all eight (u62 held both cores over [0, 8)), which is
    // FIFO's schedule. fairshare gives u7 a core at 2, when u62's first two end.
    let mut jobs: Vec<JobRecord> = (0..8)
        .map(|i| {
            let s = f64::from(i / 2) * 2.0;
            record(
                "u62",
                "SUCCEEDED",
                [Some(0.0), Some(s), Some(s), Some(s + 2.0)],
            )
        })
        .collect();
    for _ in 0..2 {
        jobs.push(record(
            "u7",
            "SUCCEEDED",
            [Some(1.0), Some(8.0), Some(8.0), Some(10.0)],
        ));
    }
    let context = ShareContext {
        capacity_cpu: 2.0,
        weights: BTreeMap::new(),
        knobs: None,
    };
    let live = render_share_table(&jobs, &context);
    let t = render_alternatives(&jobs, &context);
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[0].starts_with("the same 10 jobs simulated"), "{t}");
    let error = |line: &str| -> f64 {
        line.split("fairness error ").nth(1).unwrap()[..6]
            .parse()
            .unwrap()
    };
    let live_error: f64 = live
        .lines()
        .find(|l| l.starts_with("fairness error"))
        .map(error)
        .unwrap();
    let fifo = lines
        .iter()
        .find(|l| l.trim_start().starts_with("fifo"))
        .unwrap();
    let fair = lines
        .iter()
        .find(|l| l.trim_start().starts_with("fairshare"))
        .unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l.trim_start().starts_with("gateway-loop")),
        "{t}"
    );
    assert!(
        fifo.ends_with("(simulated)") && fair.ends_with("(simulated)"),
        "{t}"
    );
    assert!(
        lines[0].contains("fairshare with the default settings"),
        "{t}"
    );
    // With the service's knobs read, the simulated fairshare uses them and says so:
    // the guard off and no backfill (strict order) is FIFO's schedule here.
    let strict = ShareContext {
        knobs: Some(ServiceKnobs {
            usage_half_life_s: 0.0,
            starvation_guard_s: None,
            starvation_runs: 0.0,
            backfill: false,
        }),
        ..context.clone()
    };
    let s = render_alternatives(&jobs, &strict);
    assert!(
        s.lines()
            .next()
            .unwrap()
            .contains("the service's half-life"),
        "{s}"
    );
    // FIFO reproduces the measured schedule, so its error is the run's.
    assert!((error(fifo) - live_error).abs() < 1e-4, "{live}\n{t}");
    assert!(error(fair) < error(fifo), "{t}");
}

/// A fake service: POST creates (or finds) a job, 422 beyond 4 cores, one 429 for
/// the first POST of user u2; GET lists every job as SUCCEEDED.
fn fake_service() -> (
    impl Fn(&wiremock::Request) -> wiremock::ResponseTemplate,
    impl Fn(&wiremock::Request) -> wiremock::ResponseTemplate,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let jobs: Arc<Mutex<Vec<(String, serde_json::Value)>>> = Arc::default();
    let throttled = Arc::new(AtomicBool::new(false));
    let store = jobs.clone();
    let post = move |req: &wiremock::Request| {
        let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
        if body["resources"]["cpu"].as_f64().unwrap() > 4.0 {
            return wiremock::ResponseTemplate::new(422).set_body_json(serde_json::json!(
                {"error": {"code": "invalid", "message": "resources.cpu: exceeds every cluster"}}
            ));
        }
        if body["user"] == "u2" && !throttled.swap(true, Ordering::SeqCst) {
            return wiremock::ResponseTemplate::new(429).insert_header("Retry-After", "0");
        }
        let ext = body["external_id"].as_str().unwrap().to_string();
        let mut jobs = store.lock().unwrap();
        if let Some((_, j)) = jobs.iter().find(|(e, _)| *e == ext) {
            return wiremock::ResponseTemplate::new(200).set_body_json(j.clone());
        }
        let now = Utc::now();
        let job = serde_json::json!({
            "id": Uuid::from_u128(jobs.len() as u128 + 1), "user": body["user"],
            "status": "QUEUED", "submitted_at": now, "dispatched_at": null,
            "started_at": null, "finished_at": null, "entrypoint": body["entrypoint"],
        });
        jobs.push((ext, job.clone()));
        wiremock::ResponseTemplate::new(201).set_body_json(job)
    };
    let list = move |_: &wiremock::Request| {
        let jobs = jobs.lock().unwrap();
        let mut page: Vec<serde_json::Value> = jobs.iter().map(|(_, j)| j.clone()).collect();
        page.reverse();
        for j in &mut page {
            let at: DateTime<Utc> = serde_json::from_value(j["submitted_at"].clone()).unwrap();
            j["status"] = "SUCCEEDED".into();
            j["dispatched_at"] = serde_json::json!(at + chrono::Duration::seconds(1));
            j["started_at"] = serde_json::json!(at + chrono::Duration::seconds(2));
            j["finished_at"] = serde_json::json!(at + chrono::Duration::seconds(12));
        }
        wiremock::ResponseTemplate::new(200)
            .set_body_json(serde_json::json!({"jobs": page, "next_after": null}))
    };
    (post, list)
}

fn fast() -> Tuning {
    Tuning {
        poll_interval: Duration::from_millis(20),
        backoff_min: Duration::from_millis(5),
        backoff_max: Duration::from_millis(20),
        unreachable_after: Duration::from_millis(500),
        ..Tuning::default()
    }
}

fn mini_trace(dir: &Path) -> PathBuf {
    let path = dir.join("mini.swf");
    let line = |n: u32, submit: u32, run: u32, procs: u32, user: u32| {
        format!("{n} {submit} 0 {run} {procs} -1 -1 {procs} -1 -1 1 {user} -1 -1 -1 -1 -1 -1\n")
    };
    let text = [
        "; MaxProcs: 400\n".to_string(),
        line(1, 0, 10, 88, 1),
        line(2, 5, 20, 2, 2),
        line(3, 5, 10, 500, 3),
        line(4, 10, 10, 16, 1),
    ]
    .concat();
    std::fs::write(&path, text).unwrap();
    path
}

/// Answers `GET /healthz` as the service does.
async fn healthy(server: &wiremock::MockServer) {
    wiremock::Mock::given(wiremock::matchers::path("/healthz"))
        .respond_with(
            wiremock::ResponseTemplate::new(200).set_body_json(serde_json::json!({"status": "ok"})),
        )
        .with_priority(1)
        .mount(server)
        .await;
}

#[tokio::test]
async fn replays_against_a_fake_service_and_reruns_idempotently() {
    use wiremock::matchers::{method, path};
    let server = wiremock::MockServer::start().await;
    healthy(&server).await;
    let (post, list) = fake_service();
    wiremock::Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(post)
        .mount(&server)
        .await;
    wiremock::Mock::given(method("GET"))
        .and(path("/v1/jobs"))
        .respond_with(list)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let mut a = args();
    a.trace = mini_trace(dir.path());
    a.server = format!("{}/", server.uri());
    a.time_scale = 100.0;
    a.min_runtime_s = 0.0;
    let s = replay_tuned(&a, &fast()).await.unwrap();
    assert_eq!(
        (
            s.jobs,
            s.succeeded,
            s.rejected,
            s.already_submitted,
            s.unsubmitted
        ),
        (3, 3, 1, 0, 0),
        "{}",
        s.table
    );
    assert!(!s.all_succeeded());
    assert!(s.table.contains("rejected: mini-3 (trace job 3, user u3, 5 cores): 422 invalid: resources.cpu: exceeds every cluster"), "{}", s.table);
    assert!(
        s.table.contains(
            "all               3         3      0       0         2.0        2.0      1.20"
        ),
        "{}",
        s.table
    );
    let again = replay_tuned(&a, &fast()).await.unwrap();
    assert_eq!(
        (again.jobs, again.already_submitted, again.succeeded),
        (3, 3, 3)
    );
    let posts = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method == wiremock::http::Method::POST)
        .count();
    assert_eq!(posts, 4 + 1 + 4, "4 jobs, one 429 retry, 4 again");
    let requests = server.received_requests().await.unwrap();
    let first_post = requests
        .iter()
        .find(|r| r.method == wiremock::http::Method::POST)
        .unwrap();
    let sent: serde_json::Value = serde_json::from_slice(&first_post.body).unwrap();
    assert_eq!(
        sent,
        serde_json::json!({"user": "u1", "entrypoint": "sleep 0.100",
            "resources": {"cpu": 0.88}, "external_id": "mini-1",
            "metadata": {"trace": "mini", "trace_job": "1"}})
    );
}

#[tokio::test]
async fn a_tiny_time_scale_is_refused_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args();
    a.trace = mini_trace(dir.path());
    a.time_scale = 1e-300;
    let e = replay_tuned(&a, &fast()).await.unwrap_err().to_string();
    assert!(
        e.contains("--time-scale 0.000") || e.contains("--time-scale 1e-300"),
        "{e}"
    );
    assert!(e.contains("too small"), "{e}");
}

#[tokio::test]
async fn a_refused_token_ends_the_replay() {
    let server = wiremock::MockServer::start().await;
    healthy(&server).await;
    wiremock::Mock::given(wiremock::matchers::any())
        .respond_with(wiremock::ResponseTemplate::new(401).set_body_json(
            serde_json::json!({"error": {"code": "unauthorized", "message": "bad token"}}),
        ))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let mut a = args();
    a.trace = mini_trace(dir.path());
    a.server = server.uri();
    let e = replay_tuned(&a, &fast()).await.unwrap_err();
    assert!(
        format!("{e:#}").contains("401 unauthorized: bad token"),
        "{e:#}"
    );
}

#[tokio::test]
async fn an_unreachable_service_ends_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args();
    a.trace = mini_trace(dir.path());
    a.server = "http://127.0.0.1:9".into();
    let tuning = Tuning {
        backoff_times: 1,
        ..fast()
    };
    // Nothing answers: it says so at once instead of retrying every submission.
    let e = replay_tuned(&a, &tuning).await.unwrap_err().to_string();
    assert!(
        e.contains("cannot reach the fairshare service at http://127.0.0.1:9"),
        "{e}"
    );
}

/// A bad port or host, a query, an empty token: each named before anything is sent
/// (a tester got "builder error; is it running?" for a port of 99999).
#[tokio::test]
async fn a_bad_server_url_or_an_empty_token_is_named() {
    let dir = tempfile::tempdir().unwrap();
    for (server, token, expected) in [
        ("http://127.0.0.1:99999", None, "not a valid URL"),
        ("http://[::1", None, "not a valid URL"),
        ("http://127.0.0.1:1/x?y=1", None, "query or fragment"),
        ("http://user:pw@127.0.0.1:1", None, "user or password"),
        ("ftp://127.0.0.1:1", None, "http:// or https://"),
        ("127.0.0.1:8080", None, "http:// or https://"),
        ("http://127.0.0.1:1", Some(String::new()), "token"),
        ("http://127.0.0.1:1", Some(" ".into()), "empty"),
        ("http://127.0.0.1:1", Some("secret\r".into()), "HTTP header"),
        ("http://127.0.0.1:1", Some("a\nb".into()), "HTTP header"),
    ] {
        let mut a = args();
        a.trace = mini_trace(dir.path());
        a.server = server.into();
        a.token = token;
        let e = replay_tuned(&a, &fast()).await.unwrap_err().to_string();
        assert!(e.contains(expected), "{server}: {e}");
    }
}

#[test]
fn tracker_counts_and_never_reopens_a_finished_job() {
    let mut t = Tracker::default();
    let mut done = record("u", "SUCCEEDED", [Some(0.0), None, None, Some(1.0)]);
    t.track(done.clone());
    let mut stale = done.clone();
    stale.status = "RUNNING".into();
    assert!(t.update(stale.clone()));
    t.track(stale);
    assert_eq!(t.progress().finished, 1);
    assert_eq!(t.oldest_open(), None);
    done.id = Uuid::new_v4();
    done.status = "QUEUED".into();
    t.track(done.clone());
    assert_eq!(t.oldest_open(), Some(done.submitted_at));
    let p = t.progress();
    assert_eq!((p.queued, p.finished, p.not_ok), (1, 1, 0));
    assert!(!t.update(record("u", "FAILED", [Some(0.0), None, None, None])));
}
