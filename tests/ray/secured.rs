//! Issue 45 §1 on a real Ray head with Ray's token authentication
//! (`RAY_AUTH_MODE=token`): fairshare reaches it with the cluster's `auth_token_file`
//! (jobs through `/v1` and through Ray's own client on fairshare's `/api/` run, their
//! logs read through fairshare); given a wrong token it reports the cluster unhealthy
//! naming authentication and keeps the job QUEUED, never FAILED; the file replaced
//! while it runs is picked up.

use std::time::Duration;

use serde_json::json;

use crate::harness::{eventually, ray_bin, RayHead};
use crate::service::Service;
use crate::ONE_HEAD_AT_A_TIME;

const TOKEN: &str = "fairshare-test-token-4f1c9a";

const RAY_CLIENT: &str = r#"
import json, sys, time
from ray.job_submission import JobSubmissionClient, JobStatus
client = JobSubmissionClient(sys.argv[1])
sid = client.submit_job(entrypoint="echo via-ray-client", entrypoint_num_cpus=0.5,
                        metadata={"fairshare.user": "carol"})
deadline = time.time() + 120
while client.get_job_status(sid) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
    assert time.time() < deadline, "not finished in 120 s"
    time.sleep(0.2)
print(json.dumps({"sid": sid, "status": client.get_job_status(sid).value, "logs": client.get_job_logs(sid)}))
"#;

async fn scheduler_cluster(svc: &Service) -> serde_json::Value {
    svc.get("/v1/scheduler").await["clusters"][0].clone()
}

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn a_ray_head_that_requires_a_token_is_reached_with_the_clusters_token_file() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let head = RayHead::spawn_secured(&ray_bin(), 2, TOKEN);
    head.wait_ready().await;
    // The head really requires it.
    let bare = reqwest::get(format!("{}/api/jobs/", head.dashboard))
        .await
        .unwrap();
    assert_eq!(bare.status(), 401);

    let token_file = dir.path().join("ray-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let svc = Service::start_with_cluster(
        dir.path(),
        &head.dashboard,
        "",
        &format!("auth_token_file = \"{}\"", token_file.display()),
    )
    .await;
    eventually(60, "the secured cluster healthy", || async {
        (scheduler_cluster(&svc).await["healthy"] == true).then_some(())
    })
    .await;

    // Through /v1, logs through /v1.
    let job = svc.submit("alice", "echo via-v1", 0.5, json!({})).await;
    let id = job["id"].as_str().unwrap().to_string();
    eventually(120, "SUCCEEDED", || async {
        (svc.job(&id).await["status"] == "SUCCEEDED").then_some(())
    })
    .await;
    let logs = svc
        .client
        .get(format!("{}/v1/jobs/{id}/logs", svc.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(logs.contains("via-v1"), "{logs}");

    // Through fairshare's /api/ with Ray's own client.
    let script = dir.path().join("client.py");
    std::fs::write(&script, RAY_CLIENT).unwrap();
    let python = ray_bin().parent().unwrap().join("python");
    let out = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new(&python)
            .arg(&script)
            .arg(&svc.url)
            .env("RAY_USAGE_STATS_ENABLED", "0")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("Ray's client finished")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(v["status"], "SUCCEEDED", "{v}");
    assert!(
        v["logs"].as_str().unwrap().contains("via-ray-client"),
        "{v}"
    );

    // A wrong token: the cluster is unhealthy, the reason names authentication (and
    // not the token); a job waits QUEUED, never FAILED.
    std::fs::write(&token_file, "a-wrong-token-of-another-length\n").unwrap();
    let cluster = eventually(60, "unhealthy for its token", || async {
        let c = scheduler_cluster(&svc).await;
        (c["healthy"] == false).then_some(c)
    })
    .await;
    let reason = cluster["unhealthy_reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(reason.contains("authentication"), "{cluster}");
    assert!(reason.contains("auth_token_file"), "{cluster}");
    assert!(
        !reason.contains("a-wrong-token"),
        "the token is never shown: {cluster}"
    );
    let waiting = svc
        .submit("alice", "echo after-rotation", 0.5, json!({}))
        .await;
    let wid = waiting["id"].as_str().unwrap().to_string();
    // Several polls (250 ms each) while the token is wrong.
    let polled_from = std::time::Instant::now();
    eventually(30, "a few polls with the wrong token", || async {
        (polled_from.elapsed() > Duration::from_secs(2)).then_some(())
    })
    .await;
    assert_eq!(svc.job(&wid).await["status"], "QUEUED");
    assert!(
        !svc.log().contains("a-wrong-token"),
        "the token is never logged"
    );
    assert!(!svc.log().contains(TOKEN), "the token is never logged");

    // The file is replaced with the right token: picked up without a restart.
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    eventually(120, "the waiting job SUCCEEDED", || async {
        (svc.job(&wid).await["status"] == "SUCCEEDED").then_some(())
    })
    .await;
    assert_eq!(scheduler_cluster(&svc).await["healthy"], true);
}
