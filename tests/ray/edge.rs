//! Issue 32 on a real Ray head: the end of a job is known within milliseconds (its
//! watcher says so; the idle poll is 5 s), and a job is charged what it holds on
//! Ray (its entrypoint and the tasks it starts), another tenant's job counted as
//! foreign load.

use serde_json::json;

use crate::harness::{eventually, ray_bin, RayHead};
use crate::service::Service;
use crate::ONE_HEAD_AT_A_TIME;

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn the_end_of_a_job_is_known_within_milliseconds() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let head = RayHead::spawn(&ray_bin(), 2);
    head.wait_ready().await;
    let svc = Service::start(dir.path(), &head.dashboard, "").await;
    let http = reqwest::Client::new();
    for round in 0..3 {
        let job = svc.submit("u", "sleep 1", 0.5, json!({})).await;
        let id = job["id"].as_str().unwrap().to_string();
        eventually(120, "SUCCEEDED", || async {
            (svc.job(&id).await["status"] == "SUCCEEDED").then_some(())
        })
        .await;
        let events = svc.get(&format!("/v1/jobs/{id}/events")).await;
        let seen = events["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["to"] == "SUCCEEDED")
            .and_then(|e| e["at"].as_str())
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .expect("a SUCCEEDED event")
            .timestamp_millis();
        let ray: serde_json::Value = http
            .get(format!("{}/api/jobs/{id}", head.dashboard))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let ended = ray["end_time"].as_i64().expect("Ray's end_time");
        let late_ms = seen - ended;
        // The idle poll is 5 s: only the watcher's word gets it here this soon.
        assert!(
            late_ms < 1000,
            "round {round}: seen {late_ms} ms after Ray's end"
        );
    }
    let m = svc.metrics().await;
    assert!(
        metric(
            &m,
            "fairshare_attempt_hints_total{kind=\"ended\",outcome=\"checked\"}"
        ) >= 3.0,
        "{m}"
    );
}

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn a_job_is_charged_the_tasks_it_starts_and_another_tenant_counts_as_foreign() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let head = RayHead::spawn(&ray_bin(), 2);
    head.wait_ready().await;
    let svc = Service::start(dir.path(), &head.dashboard, "").await;
    let http = reqwest::Client::new();
    // Another tenant, straight into Ray: 0.25 CPU for its entrypoint.
    let r = http
        .post(format!("{}/api/jobs/", head.dashboard))
        .json(
            &json!({"entrypoint": "sleep 120", "submission_id": "other-tenant",
            "entrypoint_num_cpus": 0.25}),
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    // Ours: 0.25 CPU declared, and three tasks of 0.5 CPU once the driver runs.
    let script = "import ray, time\nray.init()\n@ray.remote(num_cpus=0.5)\ndef f():\n    time.sleep(120)\nray.get([f.remote() for _ in range(3)])\n";
    let entrypoint = format!("python -c '{script}'");
    let job = svc.submit("u", &entrypoint, 0.25, json!({})).await;
    let id = job["id"].as_str().unwrap().to_string();
    let user = eventually(
        180,
        "the user charged its entrypoint and three tasks",
        || async {
            let u = svc.get("/v1/users/u").await;
            (u["allocation"]["cpu"] == 1.75).then_some(u)
        },
    )
    .await;
    assert_eq!(user["declared_allocation"]["cpu"], 0.25, "{user}");
    let j = svc.job(&id).await;
    assert_eq!(j["actual_resources"]["cpu"], 1.75, "{j}");
    assert_eq!(j["resources"]["cpu"], 0.25, "{j}");
    let v = eventually(30, "the other tenant as foreign load", || async {
        let v = svc.get("/v1/scheduler").await;
        (v["clusters"][0]["used_by_others"]["cpu"] == 0.25).then_some(v)
    })
    .await;
    assert_eq!(v["clusters"][0]["free"]["cpu"], 0.0, "{v}");
    let r = svc.post(&format!("/v1/jobs/{id}/cancel")).await;
    assert_eq!(r.status(), 202);
    let _ = http
        .post(format!("{}/api/jobs/other-tenant/stop", head.dashboard))
        .send()
        .await;
    eventually(120, "STOPPED", || async {
        (svc.job(&id).await["status"] == "STOPPED").then_some(())
    })
    .await;
}

/// Every job of ours Ray knows, with Ray's `start_time` (set when it is submitted) and
/// `end_time`, in epoch ms, ordered by start.
async fn ray_times(http: &reqwest::Client, dashboard: &str) -> Vec<(String, i64, i64)> {
    let all: Vec<serde_json::Value> = http
        .get(format!("{dashboard}/api/jobs/"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut times: Vec<_> = all
        .iter()
        .filter_map(|j| {
            Some((
                j["submission_id"].as_str()?.to_string(),
                j["start_time"].as_i64()?,
                j["end_time"].as_i64()?,
            ))
        })
        .collect();
    times.sort_by_key(|t| t.1);
    times
}

/// Forwards every connection to `127.0.0.1:from` to `127.0.0.1:to` (a `notify.url`
/// that starts to work while the service runs).
async fn forward(from: u16, to: u16) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", from))
        .await
        .expect("bind the forwarder");
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

/// Issue 49 on a real Ray head: `notify.url` names a port where nothing listens (a
/// Ray whose job processes cannot reach the service). Jobs of 1 s run back to back
/// on a 1-CPU head: each next one reaches Ray within `poll_interval` (250 ms) + 100
/// ms of the previous one's end by Ray's own clock, and the cluster reports the
/// missing notifications. Then the URL starts to work (a forwarder on that port):
/// notifications arrive and the idle interval returns.
#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn jobs_run_back_to_back_when_notifications_cannot_arrive() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let head = RayHead::spawn(&ray_bin(), 1);
    head.wait_ready().await;
    let dead = crate::harness::free_port();
    let svc = Service::start(
        dir.path(),
        &head.dashboard,
        &format!("[notify]\nurl = \"http://127.0.0.1:{dead}\"\n"),
    )
    .await;
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for _ in 0..4 {
        let job = svc.submit("u", "sleep 1", 1.0, json!({})).await;
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        eventually(120, "SUCCEEDED", || async {
            (svc.job(id).await["status"] == "SUCCEEDED").then_some(())
        })
        .await;
    }
    let times = ray_times(&http, &head.dashboard).await;
    assert_eq!(times.len(), 4, "{times:?}");
    let gaps: Vec<i64> = times.windows(2).map(|w| w[1].1 - w[0].2).collect();
    eprintln!("notifications unreachable: ms from one job's end to the next's submit, by Ray's clock: {gaps:?}");
    // The first job went to Ray alone (one CPU); the rest each once the previous
    // ended. Idle polling (5 s) would leave seconds between them.
    for (i, gap) in gaps.iter().enumerate() {
        assert!(
            *gap <= 250 + 100,
            "job {} reached Ray {gap} ms after job {} ended (gaps {gaps:?})",
            i + 2,
            i + 1
        );
    }
    let view = svc.get("/v1/scheduler").await;
    let n = &view["clusters"][0]["notifications"];
    assert_eq!(n["state"], "missing", "{view}");
    assert!(n["missed"].as_u64() >= Some(4), "{view}");
    assert_eq!(n["poll_interval_ms"], 250, "{view}");
    assert!(
        n["message"]
            .as_str()
            .is_some_and(|m| m.contains("not arriving") && m.contains(&dead.to_string())),
        "{view}"
    );
    let m = svc.metrics().await;
    assert!(
        metric(
            &m,
            "fairshare_notifications_total{cluster=\"local\",outcome=\"missed\"}"
        ) >= 4.0,
        "{m}"
    );
    assert_eq!(
        svc.log()
            .matches("end-of-job notifications are not arriving")
            .count(),
        1,
        "one warning when the state changes, not one per job"
    );

    // The URL starts to work: the next jobs' notifications arrive, and after three
    // in a row (a path is trusted again only then) the idle interval returns.
    let service_port: u16 = svc.url.rsplit(':').next().unwrap().parse().unwrap();
    let _forwarder = forward(dead, service_port).await;
    for _ in 0..3 {
        let job = svc.submit("u", "sleep 1", 1.0, json!({})).await;
        let id = job["id"].as_str().unwrap().to_string();
        eventually(120, "SUCCEEDED", || async {
            (svc.job(&id).await["status"] == "SUCCEEDED").then_some(())
        })
        .await;
    }
    let view = eventually(10, "notifications arriving", || async {
        let view = svc.get("/v1/scheduler").await;
        (view["clusters"][0]["notifications"]["state"] == "arriving").then_some(view)
    })
    .await;
    let n = &view["clusters"][0]["notifications"];
    assert!(n["received"].as_u64() >= Some(3), "{view}");
    assert_eq!(n["poll_interval_ms"], 5000, "idle again: {view}");
    assert!(n.get("message").is_none(), "{view}");
    assert!(svc
        .log()
        .contains("end-of-job notifications arrive from this cluster again"));
}

/// The processes whose command line is exactly `args` (from `/proc/<pid>/cmdline`).
fn processes_running(args: &[&str]) -> usize {
    let wanted: Vec<u8> = args
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == wanted))
        .count()
}

/// A head stopped while a job runs leaves no driver behind. Ray runs a job's entrypoint
/// in a session of its own, outside the head's process group, and does not end it with
/// the head (measured on Ray 2.60: a `sleep 91` driver alive 24 s after its head had
/// stopped); a test's leftover drivers would run on into the next tests. [`RayHead`]'s
/// drop ends them, as `scripts/ray-head stop` does. The driver here runs its command
/// with an empty environment (`env -i`), as a fresh tester did: the shell Ray starts
/// has the head's `RAY_ADDRESS`, the `sleep` it runs has not, and the head's stop ends
/// the shell only; its process group, found before the stop, is ended whole.
#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn a_head_stopped_while_a_job_runs_leaves_no_driver_behind() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    // A command line no other test uses.
    let driver = ["sleep", "97.25"];
    let head = RayHead::spawn(&ray_bin(), 1);
    head.wait_ready().await;
    let r = head
        .client()
        .post(format!("{}/api/jobs/", head.dashboard))
        .json(
            &json!({"entrypoint": format!("env -i {}", driver.join(" ")),
                       "submission_id": "left-behind"}),
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    eventually(60, "the job's driver running", || async {
        let running = head
            .jobs()
            .await
            .iter()
            .any(|(id, s)| id == "left-behind" && s == "RUNNING");
        (running && processes_running(&driver) == 1).then_some(())
    })
    .await;
    drop(head);
    // The drop waits for the drivers' groups to end (SIGKILL after 5 s); their last
    // process may still be reaped a moment later.
    eventually(5, "no driver left once the head is dropped", || async {
        (processes_running(&driver) == 0).then_some(())
    })
    .await;
}
