//! Records the bodies a real Ray head's Jobs API answers (Ray 2.60 of `.venv`), byte
//! for byte, into `tests/fixtures/ray-2.60/`: what `tests/api/ray_bytes.rs` holds
//! fairshare's `/api/` bodies to (issue 31, part 2). Run once, when Ray changes, and
//! commit the files:
//!
//! ```sh
//! FAIRSHARE_RAY_BIN=$PWD/.venv/bin/ray scripts/in-netns \
//!   cargo test --test ray record_ray_bodies -- --ignored
//! ```

use serde_json::json;

use crate::harness::{eventually, ray_bin, RayHead};
use crate::ONE_HEAD_AT_A_TIME;

#[tokio::test]
#[ignore = "records fixtures from a real Ray head; run by hand (see the module doc)"]
async fn record_ray_bodies() {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let ray = ray_bin();
    let head = RayHead::spawn(&ray, 2);
    head.wait_ready().await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ray-2.60");
    std::fs::create_dir_all(&dir).unwrap();
    let client = reqwest::Client::new();
    let base = head.dashboard.clone();
    let mut manifest = serde_json::Map::new();
    let mut save = |name: &str, status: u16, content_type: String, body: Vec<u8>| {
        std::fs::write(dir.join(format!("{name}.body")), &body).unwrap();
        manifest.insert(
            name.to_string(),
            json!({"status": status, "content_type": content_type}),
        );
    };
    macro_rules! record {
        ($name:expr, $req:expr) => {{
            let r = $req.send().await.unwrap();
            let status = r.status().as_u16();
            let ct = r
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default();
            let body = r.bytes().await.unwrap().to_vec();
            save($name, status, ct, body.clone());
            body
        }};
    }
    record!("version", client.get(format!("{base}/api/version")));
    // Non-ASCII, escapes and a float in what comes back.
    let submit = json!({
        "entrypoint": "printf 'h\u{e9}llo \u{2713} \u{1f600}\\ttab\\n'; echo done",
        "submission_id": "rec-1",
        "metadata": {"source": "récord", "k": "v"},
        "runtime_env": {"env_vars": {"SEED": "7"}},
        "entrypoint_num_cpus": 0.5
    });
    record!(
        "submit",
        client.post(format!("{base}/api/jobs/")).json(&submit)
    );
    eventually(120, "rec-1 SUCCEEDED", || {
        let client = client.clone();
        let url = format!("{base}/api/jobs/rec-1");
        async move {
            let v: serde_json::Value = client.get(&url).send().await.ok()?.json().await.ok()?;
            (v["status"] == "SUCCEEDED").then_some(())
        }
    })
    .await;
    record!("get", client.get(format!("{base}/api/jobs/rec-1")));
    record!("list", client.get(format!("{base}/api/jobs/")));
    record!("logs", client.get(format!("{base}/api/jobs/rec-1/logs")));
    record!(
        "stop_ended",
        client.post(format!("{base}/api/jobs/rec-1/stop"))
    );
    record!(
        "get_unknown",
        client.get(format!("{base}/api/jobs/no-such-job"))
    );
    record!(
        "logs_unknown",
        client.get(format!("{base}/api/jobs/no-such-job/logs"))
    );
    record!(
        "stop_unknown",
        client.post(format!("{base}/api/jobs/no-such-job/stop"))
    );
    record!(
        "submit_bad",
        client
            .post(format!("{base}/api/jobs/"))
            .json(&json!({"entrypoint": "x", "nonsense": 1}))
    );
    let running =
        json!({"entrypoint": "sleep 60", "submission_id": "rec-2", "entrypoint_num_cpus": 0.5});
    client
        .post(format!("{base}/api/jobs/"))
        .json(&running)
        .send()
        .await
        .unwrap();
    eventually(120, "rec-2 RUNNING", || {
        let client = client.clone();
        let url = format!("{base}/api/jobs/rec-2");
        async move {
            let v: serde_json::Value = client.get(&url).send().await.ok()?.json().await.ok()?;
            (v["status"] == "RUNNING").then_some(())
        }
    })
    .await;
    record!(
        "delete_running",
        client.delete(format!("{base}/api/jobs/rec-2"))
    );
    record!(
        "stop_running",
        client.post(format!("{base}/api/jobs/rec-2/stop"))
    );
    record!("delete", client.delete(format!("{base}/api/jobs/rec-1")));
    record!(
        "package_missing",
        client.get(format!(
            "{base}/api/packages/gcs/_ray_pkg_0123456789abcdef.zip"
        ))
    );
    record!(
        "package_put",
        client
            .put(format!(
                "{base}/api/packages/gcs/_ray_pkg_0123456789abcdef.zip"
            ))
            .body(b"PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0".to_vec())
    );
    record!(
        "package_exists",
        client.get(format!(
            "{base}/api/packages/gcs/_ray_pkg_0123456789abcdef.zip"
        ))
    );
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_string_pretty(&manifest).unwrap() + "\n",
    )
    .unwrap();
}
