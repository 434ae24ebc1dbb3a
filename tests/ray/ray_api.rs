//! Ray's own clients in front of a real Ray head, through fairshare's `/api/`
//! (docs/ray-jobs-api.md): Python's `JobSubmissionClient` and the `ray job` CLI from
//! the Ray in `.venv`, pointed at the service instead of the dashboard.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::harness::{eventually, ray_bin, RayHead};
use crate::service::{all_terminal, Service};
use crate::{by_dispatch, ONE_HEAD_AT_A_TIME};

/// A gateway's token: acts for many users (names them in metadata).
const GATEWAY: &str = "gateway-token-1";
/// A token that submits as user `alice`.
const ALICE: &str = "alice-token-1";
/// An admin token, for the test's own `/v1` reads.
const ADMIN: &str = "admin-token-1";

fn tokens() -> String {
    format!(
        "[[auth.tokens]]\nname = \"gw\"\ntoken = \"{GATEWAY}\"\nrole = \"submitter\"\n\
         [[auth.tokens]]\nname = \"alice\"\ntoken = \"{ALICE}\"\nrole = \"submitter\"\nuser = \"alice\"\n\
         [[auth.tokens]]\nname = \"ops\"\ntoken = \"{ADMIN}\"\nrole = \"admin\"\n\
         [secrets]\nruntime_env_keys = [\"KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=\"]\n"
    )
}

/// The service with the tokens above; its `client` reads `/v1` as admin.
async fn service(dir: &Path, head: &RayHead, scheduler_toml: &str) -> Service {
    let mut svc = Service::start(
        dir,
        &head.dashboard,
        &format!("{scheduler_toml}\n{}", tokens()),
    )
    .await;
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {ADMIN}").parse().unwrap(),
    );
    svc.client = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();
    svc
}

/// Runs `program args` from the Ray virtualenv's `bin` with a deadline; (exit ok,
/// stdout, stderr).
async fn run(program: &str, args: &[&str], secs: u64) -> (bool, String, String) {
    let bin: PathBuf = ray_bin().parent().unwrap().join(program);
    let out = tokio::time::timeout(
        Duration::from_secs(secs),
        tokio::process::Command::new(&bin)
            .args(args)
            .env("RAY_USAGE_STATS_ENABLED", "0")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{program} {args:?} did not finish in {secs} s"))
    .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a Python script with Ray's client; its last stdout line is JSON.
async fn python(dir: &Path, name: &str, script: &str, args: &[&str]) -> serde_json::Value {
    let file = dir.join(name);
    std::fs::write(&file, script).unwrap();
    let mut all = vec![file.to_str().unwrap()];
    all.extend_from_slice(args);
    let (ok, stdout, stderr) = run("python", &all, 180).await;
    assert!(ok, "{name} failed:\n{stdout}\n{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{name}: {e}: {stdout}\n{stderr}"))
}

const WORKING_DIR_CLIENT: &str = r#"
import asyncio, json, sys
from ray.job_submission import JobSubmissionClient
url, token, wd = sys.argv[1:4]
client = JobSubmissionClient(url, headers={"Authorization": "Bearer " + token})
sid = client.submit_job(entrypoint="python script.py", runtime_env={"working_dir": wd},
                        submission_id="wd-1", entrypoint_num_cpus=1)
# The same submission again (a retry) is the same job.
again = client.submit_job(entrypoint="python script.py", runtime_env={"working_dir": wd},
                          submission_id="wd-1", entrypoint_num_cpus=1)
chunks = []
async def tail():
    async for lines in client.tail_job_logs(sid):
        chunks.append(lines)
asyncio.run(tail())
info = client.get_job_info(sid)
print(json.dumps({"sid": sid, "again": again, "tail": chunks, "status": info.status.value,
                  "metadata": info.metadata, "logs": client.get_job_logs(sid),
                  "listed": [j.submission_id for j in client.list_jobs()]}))
"#;

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn rays_own_client_and_cli_submit_through_fairshare_and_the_jobs_run_on_ray() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let ray = ray_bin();
    let dir = tempfile::tempdir().unwrap();
    let head = RayHead::spawn(&ray, 2);
    let svc = service(dir.path(), &head, "").await;
    head.wait_ready().await;

    // working_dir: Ray's client zips the directory and uploads it to fairshare, which
    // sends it to the cluster before the submit; the script reads a file beside it.
    let wd = dir.path().join("wd");
    std::fs::create_dir(&wd).unwrap();
    std::fs::write(
        wd.join("script.py"),
        "print('hello from', open('data.txt').read().strip())\n",
    )
    .unwrap();
    std::fs::write(wd.join("data.txt"), "working_dir-42\n").unwrap();
    let out = python(
        dir.path(),
        "wd.py",
        WORKING_DIR_CLIENT,
        &[&svc.url, ALICE, wd.to_str().unwrap()],
    )
    .await;
    let log = svc.log();
    assert_eq!(out["sid"], "wd-1", "{out}");
    assert_eq!(out["again"], "wd-1");
    assert_eq!(out["status"], "SUCCEEDED", "{out}\n{log}");
    let tail: String = out["tail"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    assert!(
        tail.contains("hello from working_dir-42"),
        "tail_job_logs streamed: {out}"
    );
    assert!(
        out["logs"]
            .as_str()
            .unwrap()
            .contains("hello from working_dir-42"),
        "{out}"
    );
    assert_eq!(
        out["listed"],
        json!(["wd-1"]),
        "alice's token lists alice's jobs"
    );
    // One job, alice's, in fairshare and in Ray.
    let jobs = svc.jobs().await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["user"], "alice");
    let id = jobs[0]["id"].as_str().unwrap().to_string();
    assert_eq!(head.jobs().await, vec![(id, "SUCCEEDED".to_string())]);
    assert!(log.contains("package uploaded to the cluster"), "{log}");

    // The `ray job` CLI, as a gateway acting for bob: submit without waiting, status,
    // stop of the running job, logs, list.
    let headers = format!("{{\"Authorization\": \"Bearer {GATEWAY}\"}}");
    let cli = |args: &[&str]| {
        let mut all = vec!["job"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--address", &svc.url, "--headers", &headers]);
        all.into_iter().map(str::to_string).collect::<Vec<_>>()
    };
    let args = cli(&[
        "submit",
        "--no-wait",
        "--submission-id",
        "cli-1",
        "--metadata-json",
        "{\"fairshare.user\": \"bob\"}",
        "--entrypoint-num-cpus",
        "1",
    ]);
    let mut submit: Vec<&str> = args.iter().map(String::as_str).collect();
    submit.extend_from_slice(&["--", "sleep", "60"]);
    let (ok, stdout, stderr) = run("ray", &submit, 60).await;
    assert!(ok, "ray job submit: {stdout}\n{stderr}");
    let status_args = cli(&["status", "cli-1"]);
    let status_args: Vec<&str> = status_args.iter().map(String::as_str).collect();
    eventually(90, "cli-1 RUNNING per `ray job status`", || async {
        let (_, out, err) = run("ray", &status_args, 60).await;
        (out + &err).contains("RUNNING").then_some(())
    })
    .await;
    let stop = cli(&["stop", "cli-1"]);
    let (ok, stdout, stderr) = run(
        "ray",
        &stop.iter().map(String::as_str).collect::<Vec<_>>(),
        90,
    )
    .await;
    assert!(ok, "ray job stop: {stdout}\n{stderr}");
    let (_, out, err) = run("ray", &status_args, 60).await;
    // `ray job status` words an ended job: "Job 'cli-1' was stopped".
    assert!(
        (out.clone() + &err).contains("Job 'cli-1' was stopped"),
        "{out}\n{err}"
    );
    let logs = cli(&["logs", "cli-1"]);
    let (ok, _, err) = run(
        "ray",
        &logs.iter().map(String::as_str).collect::<Vec<_>>(),
        60,
    )
    .await;
    assert!(ok, "ray job logs: {err}");
    let list = cli(&["list"]);
    let (ok, out, err) = run(
        "ray",
        &list.iter().map(String::as_str).collect::<Vec<_>>(),
        60,
    )
    .await;
    assert!(
        ok && (out.clone() + &err).contains("cli-1") && (out.clone() + &err).contains("wd-1"),
        "{out}\n{err}"
    );
    let bob = svc
        .jobs()
        .await
        .into_iter()
        .find(|j| j["user"] == "bob")
        .unwrap();
    assert_eq!(bob["status"], "STOPPED");
    assert!(bob["started_at"].is_string(), "it had run: {bob}");
    // `ray job delete` of the ended job: gone from fairshare and from Ray.
    let delete = cli(&["delete", "cli-1"]);
    let (ok, out, err) = run(
        "ray",
        &delete.iter().map(String::as_str).collect::<Vec<_>>(),
        60,
    )
    .await;
    assert!(ok, "ray job delete: {out}\n{err}");
    assert!(svc.jobs().await.iter().all(|j| j["user"] != "bob"));
    let bob_id = bob["id"].as_str().unwrap();
    assert!(
        head.jobs().await.iter().all(|(sid, _)| sid != bob_id),
        "Ray deleted its record too"
    );
}

const FAIR_SHARE_CLIENT: &str = r#"
import json, sys
from ray.job_submission import JobSubmissionClient
url, token = sys.argv[1:3]
client = JobSubmissionClient(url, headers={"Authorization": "Bearer " + token})
def submit(user, sid, entrypoint):
    return client.submit_job(entrypoint=entrypoint, submission_id=sid, entrypoint_num_cpus=1,
                             metadata={"fairshare.user": user})
# A queued job stopped at once never reaches Ray.
submit("alice", "doomed", "sleep 1")
stopped = client.stop_job("doomed")
doomed = client.get_job_info("doomed")
# alice submits all hers first; fair share still alternates the users.
for i in range(4):
    submit("alice", f"a-{i}", "sleep 2")
for i in range(4):
    submit("bob", f"b-{i}", "sleep 2")
pending = client.get_job_info("b-3")
print(json.dumps({"stopped": stopped, "doomed": doomed.status.value,
                  "pending": pending.status.value, "pending_message": pending.message}))
"#;

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn two_users_jobs_from_rays_client_run_in_fair_share_order_and_a_queued_stop_never_reaches_ray(
) {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let ray = ray_bin();
    let dir = tempfile::tempdir().unwrap();
    // The head starts while the jobs are submitted: the first cycle sees both queues.
    let head = RayHead::spawn(&ray, 2);
    let svc = service(dir.path(), &head, "usage_half_life = \"0s\"").await;
    let out = python(
        dir.path(),
        "fair.py",
        FAIR_SHARE_CLIENT,
        &[&svc.url, GATEWAY],
    )
    .await;
    assert_eq!(out["stopped"], true, "{out}");
    assert_eq!(out["doomed"], "STOPPED", "{out}");
    assert_eq!(out["pending"], "PENDING", "{out}");
    assert!(
        out["pending_message"]
            .as_str()
            .unwrap()
            .starts_with("queued in fairshare"),
        "{out}"
    );
    head.wait_ready().await;
    let jobs = all_terminal(&svc, 180).await;
    let log = svc.log();
    let succeeded = jobs.iter().filter(|j| j["status"] == "SUCCEEDED").count();
    assert_eq!(succeeded, 8, "{jobs:?}\n{log}");
    let doomed = jobs.iter().find(|j| j["external_id"] == "doomed").unwrap();
    assert_eq!(doomed["status"], "STOPPED");
    assert!(doomed["dispatched_at"].is_null(), "{doomed}");
    let doomed_id = doomed["id"].as_str().unwrap();
    assert!(
        head.jobs().await.iter().all(|(sid, _)| sid != doomed_id),
        "Ray never saw it"
    );
    // FIFO would start alice's first two; fair share starts one of each, then keeps
    // the users level.
    let order: Vec<String> = by_dispatch(&jobs)
        .into_iter()
        .map(|(_, user, _)| user)
        .collect();
    assert_eq!(order.len(), 8, "{order:?}");
    let first_two: std::collections::BTreeSet<&str> =
        order[..2].iter().map(String::as_str).collect();
    assert_eq!(
        first_two,
        ["alice", "bob"].into(),
        "dispatch order {order:?}"
    );
    let alice_in_first_four = order[..4].iter().filter(|u| *u == "alice").count();
    assert_eq!(alice_in_first_four, 2, "dispatch order {order:?}");
}
