//! Ray's exact bytes (issue 31, part 2): fairshare's `/api/` bodies against bodies
//! recorded from a real Ray 2.60 head (`tests/fixtures/ray-2.60/`, made by
//! `tests/ray/record.rs`), compared as bytes: Python's `json.dumps` spacing, `\uXXXX`
//! escapes (surrogate pairs too), Ray's field order and content type.

use serde_json::json;

use crate::both_databases;
use crate::helpers::{spawn_app_with, Db, ADMIN, SUBMITTER};
use fairshare::ray_json::{self as pyjson, JobDetails};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/ray-2.60/{name}.body",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

#[test]
fn rays_recorded_bodies_are_written_back_byte_for_byte() {
    // Job details, alone and in the list: Ray's fields (no more, no fewer), in Ray's
    // order, with Ray's escapes.
    let get = fixture("get");
    let details: JobDetails = serde_json::from_slice(&get).unwrap();
    assert_eq!(text(&pyjson::to_vec(&details)), text(&get));
    let list = fixture("list");
    let all: Vec<JobDetails> = serde_json::from_slice(&list).unwrap();
    assert_eq!(text(&pyjson::to_vec(&all)), text(&list));
    // Logs with tabs, newlines, non-ASCII and a character beyond the BMP.
    for name in ["logs", "stop_ended", "stop_running", "delete", "submit"] {
        let body = fixture(name);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(text(&pyjson::to_vec(&v)), text(&body), "{name}");
    }
    assert!(text(&fixture("logs")).contains(r"\ud83d\ude00"));
}

/// Ray's body with `(ray, ours)` values swapped in, as bytes.
fn with(recorded: &[u8], swaps: &[(&str, &str)]) -> String {
    let mut t = text(recorded);
    for (ray, ours) in swaps {
        t = t.replace(ray, ours);
    }
    t
}

async fn fairshares_api_bodies_are_rays_bytes(db: Db) {
    let Some(app) = spawn_app_with(db, |_| {}).await else {
        return;
    };
    let bytes = |r: reqwest::Response| async move {
        assert_eq!(
            r.headers()["content-type"],
            "application/json; charset=utf-8",
            "Ray's content type"
        );
        text(&r.bytes().await.unwrap())
    };
    // version: Ray's order and spacing; the commit and session are ours.
    let version: serde_json::Value = serde_json::from_slice(&fixture("version")).unwrap();
    let ours = bytes(app.get("/api/version", SUBMITTER).await).await;
    assert_eq!(
        ours,
        with(
            &fixture("version"),
            &[
                (version["ray_commit"].as_str().unwrap(), "fairshare"),
                (version["session_name"].as_str().unwrap(), "fairshare"),
            ]
        )
    );
    // submit: the same submission_id, the same bytes.
    let submit = json!({"entrypoint": "printf 'h\u{e9}llo'", "submission_id": "rec-1",
                        "metadata": {"fairshare.user": "alice", "source": "r\u{e9}cord"}});
    let ours = bytes(app.post("/api/jobs/", SUBMITTER, submit).await).await;
    assert_eq!(ours, text(&fixture("submit")));
    // get and list: Ray's fields in Ray's order, fairshare's own object last.
    let ours = bytes(app.get("/api/jobs/rec-1", SUBMITTER).await).await;
    let recorded = text(&fixture("get"));
    let order = |t: &str| -> Vec<usize> {
        let d: JobDetails = serde_json::from_slice(&fixture("get")).unwrap();
        let v = serde_json::to_value(&d).unwrap();
        let mut keys: Vec<&str> = Vec::new();
        for k in [
            "type",
            "job_id",
            "submission_id",
            "driver_info",
            "status",
            "entrypoint",
            "message",
            "error_type",
            "start_time",
            "end_time",
            "metadata",
            "runtime_env",
            "driver_agent_http_address",
            "driver_node_id",
            "driver_exit_code",
        ] {
            assert!(v.get(k).is_some(), "{k}");
            keys.push(k);
        }
        keys.iter()
            .map(|k| {
                t.find(&format!("\"{k}\": "))
                    .unwrap_or_else(|| panic!("{k} in {t}"))
            })
            .collect()
    };
    let (theirs, mine) = (order(&recorded), order(&ours));
    assert!(theirs.windows(2).all(|w| w[0] < w[1]), "{recorded}");
    assert!(mine.windows(2).all(|w| w[0] < w[1]), "{ours}");
    assert!(ours.starts_with(r#"{"type": "SUBMISSION", "job_id": null, "submission_id": "rec-1", "driver_info": null, "status": "PENDING", "entrypoint": "printf 'h\u00e9llo'", "#), "{ours}");
    assert!(ours.contains(r#""metadata": {"fairshare.user": "alice", "source": "r\u00e9cord"}, "runtime_env": null, "#), "{ours}");
    let fs = ours.find("\"fairshare\": ").unwrap();
    assert!(
        fs > *mine.last().unwrap(),
        "fairshare's object comes last: {ours}"
    );
    let listed = bytes(app.get("/api/jobs/", SUBMITTER).await).await;
    assert!(
        listed.starts_with(r#"[{"type": "SUBMISSION", "job_id": null, "submission_id": "rec-1", "#),
        "{listed}"
    );
    let listed_order = order(&listed);
    assert!(listed_order.windows(2).all(|w| w[0] < w[1]), "{listed}");
    // logs, stop, delete.
    let ours = bytes(app.get("/api/jobs/rec-1/logs", SUBMITTER).await).await;
    assert_eq!(ours, r#"{"logs": ""}"#);
    let ours = bytes(app.post("/api/jobs/rec-1/stop", SUBMITTER, json!({})).await).await;
    assert_eq!(ours, text(&fixture("stop_running")));
    let ours = bytes(app.post("/api/jobs/rec-1/stop", SUBMITTER, json!({})).await).await;
    assert_eq!(ours, text(&fixture("stop_ended")));
    let ours = bytes(app.delete("/api/jobs/rec-1", SUBMITTER).await).await;
    assert_eq!(ours, text(&fixture("delete")));
    // Errors: fairshare's JSON error, spaced as Ray writes JSON.
    for r in [
        app.get("/api/jobs/no-such-job", SUBMITTER).await,
        app.get("/api/jobs/no-such-job/logs", ADMIN).await,
        app.post(
            "/api/jobs/",
            SUBMITTER,
            json!({"entrypoint": "x", "nonsense": 1}),
        )
        .await,
        app.get("/api/jobs/", "not-a-token").await,
        app.client
            .patch(app.url("/api/jobs/"))
            .bearer_auth(SUBMITTER)
            .send()
            .await
            .unwrap(),
    ] {
        assert!(r.status().is_client_error());
        let t = text(&r.bytes().await.unwrap());
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        assert_eq!(t, text(&pyjson::to_vec(&v)));
        assert!(t.starts_with(r#"{"error": {"code": ""#), "{t}");
    }
    // Packages: an empty 200, as Ray answers.
    let r = app
        .client
        .put(app.url("/api/packages/gcs/_ray_pkg_0123456789abcdef.zip"))
        .bearer_auth(SUBMITTER)
        .body(b"PK".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.bytes().await.unwrap().to_vec()),
        (200, fixture("package_put"))
    );
    let r = app
        .get("/api/packages/gcs/_ray_pkg_0123456789abcdef.zip", SUBMITTER)
        .await;
    assert_eq!(
        (r.status().as_u16(), r.bytes().await.unwrap().to_vec()),
        (200, fixture("package_exists"))
    );
    // A path no route takes, under /api/: its error in Python's spacing too (a fresh
    // tester's finding); elsewhere the service's own compact JSON.
    for path in ["/api/nothing", "/api/jobs/x/y/z", "/api/cluster_status"] {
        let r = app.get(path, SUBMITTER).await;
        assert_eq!(r.status(), 404, "{path}");
        let body = text(&r.bytes().await.unwrap());
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], "not_found", "{body}");
        assert!(
            body.contains("\": {") && body.contains("\", \""),
            "{path}: {body}"
        );
    }
    let body = text(
        &app.get("/v2/nothing", SUBMITTER)
            .await
            .bytes()
            .await
            .unwrap(),
    );
    assert!(body.contains("\":{"), "{body}");
}
both_databases!(fairshares_api_bodies_are_rays_bytes);
