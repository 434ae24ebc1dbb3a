//! Ray's Jobs REST API under `/api/` (docs/ray-jobs-api.md): who the user is,
//! idempotency by `submission_id`, what a queued job reads as, stop and delete,
//! packages. Ray's own Python client and CLI drive it in `tests/ray/ray_api.rs`.

use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::both_databases;
use crate::fake_ray;
use crate::helpers::{
    add_user_token, app_with_cluster, assert_error, spawn_app_with, Db, SUBMITTER,
};

/// A token that submits as user `alice` only.
const ALICE: &str = "alice-token-1";

fn with_alice(s: &mut fairshare::Settings) {
    add_user_token(s, ALICE, "alice");
}

async fn the_user_is_the_tokens_own_or_the_one_a_gateway_names_in_metadata(db: Db) {
    let Some(app) = spawn_app_with(db, with_alice).await else {
        return;
    };
    // A token with a user: its jobs are that user's.
    let r = app
        .post(
            "/api/jobs/",
            ALICE,
            json!({"entrypoint": "echo a", "submission_id": "a-1"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap(),
        json!({"job_id": "a-1", "submission_id": "a-1"})
    );
    // A gateway's token names the user of each job.
    let r = app
        .post(
            "/api/jobs/",
            SUBMITTER,
            json!({"entrypoint": "echo b", "metadata": {"fairshare.user": "bob"}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let bob_sid = r.json::<serde_json::Value>().await.unwrap()["submission_id"]
        .as_str()
        .unwrap()
        .to_string();
    let bob: serde_json::Value = app
        .get(&format!("/v1/jobs/{bob_sid}"), SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(bob["user"], "bob");
    let alice: serde_json::Value = app.get("/api/jobs/a-1", ALICE).await.json().await.unwrap();
    assert_eq!(alice["fairshare"]["user"], "alice");
    // Without a user, or for another user than the token's: 422 on the metadata key.
    assert_error(
        app.post("/api/jobs/", SUBMITTER, json!({"entrypoint": "echo"}))
            .await,
        422,
        "invalid_field",
        Some("metadata.fairshare.user"),
    )
    .await;
    assert_error(
        app.post(
            "/api/jobs/",
            ALICE,
            json!({"entrypoint": "echo", "metadata": {"fairshare.user": "bob"}}),
        )
        .await,
        422,
        "invalid_field",
        Some("metadata.fairshare.user"),
    )
    .await;
    // alice's token sees alice's jobs only.
    let list: serde_json::Value = app.get("/api/jobs/", ALICE).await.json().await.unwrap();
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["submission_id"].as_str())
        .collect();
    assert_eq!(ids, vec!["a-1"]);
    assert_error(
        app.get(&format!("/api/jobs/{bob_sid}"), ALICE).await,
        404,
        "not_found",
        None,
    )
    .await;
    let all: serde_json::Value = app.get("/api/jobs/", SUBMITTER).await.json().await.unwrap();
    assert_eq!(all.as_array().unwrap().len(), 2);
    // No token: 401, as on /v1.
    assert_eq!(
        app.client
            .get(app.url("/api/jobs/"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
}
both_databases!(the_user_is_the_tokens_own_or_the_one_a_gateway_names_in_metadata);

async fn a_repeated_submission_id_is_the_same_job_and_another_body_is_refused(db: Db) {
    let Some(app) = spawn_app_with(db, with_alice).await else {
        return;
    };
    let body = json!({"entrypoint": "python x.py", "submission_id": "k-1", "entrypoint_num_cpus": 2,
                      "runtime_env": {"env_vars": {"A": "1"}}, "metadata": {"team": "x"}});
    for _ in 0..2 {
        let r = app.post("/api/jobs/", ALICE, body.clone()).await;
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.json::<serde_json::Value>().await.unwrap()["submission_id"],
            "k-1"
        );
    }
    let jobs: serde_json::Value = app
        .get("/v1/jobs?user=alice", SUBMITTER)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(jobs["jobs"][0]["resources"]["cpu"], 2.0);
    let mut other = body.clone();
    other["entrypoint_num_cpus"] = json!(1);
    let r = app.post("/api/jobs/", ALICE, other).await;
    assert_eq!(r.status(), 422);
    let e: serde_json::Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "idempotency_key_reused");
    assert_eq!(
        e["error"]["details"]["differs"],
        json!(["entrypoint_num_cpus"])
    );
    // Under /api/ the key is Ray's `submission_id`, in the message and the details.
    assert_eq!(e["error"]["details"]["field"], "submission_id", "{e}");
    assert_eq!(e["error"]["details"]["submission_id"], "k-1", "{e}");
    assert!(e["error"]["details"].get("external_id").is_none(), "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("submission_id \"k-1\" was already used")
            && message.contains("use a new submission_id")
            && !message.contains("external_id"),
        "{message}"
    );
}
both_databases!(a_repeated_submission_id_is_the_same_job_and_another_body_is_refused);

#[actix_web::test]
async fn bad_submissions_get_422_naming_rays_field() {
    let Some(app) = spawn_app_with(Db::Sqlite, with_alice).await else {
        return;
    };
    let cases = [
        (
            json!({"entrypoint": "x", "entrypoint_num_cpus": -1}),
            "entrypoint_num_cpus",
        ),
        (
            json!({"entrypoint": "x", "entrypoint_num_gpus": 0.00001}),
            "entrypoint_num_gpus",
        ),
        (
            json!({"entrypoint": "x", "entrypoint_memory": 1.5}),
            "entrypoint_memory",
        ),
        (
            json!({"entrypoint": "x", "entrypoint_num_cpus": 0}),
            "entrypoint_num_cpus",
        ),
        // Custom resources are taken (issue 29 part 2); bad ones are refused.
        (
            json!({"entrypoint": "x", "entrypoint_resources": {"T P U": 1}}),
            "entrypoint_resources.T P U",
        ),
        (
            json!({"entrypoint": "x", "entrypoint_resources": {"TPU": -1}}),
            "entrypoint_resources.TPU",
        ),
        (
            json!({"entrypoint": "x", "entrypoint_label_selector": {"zone": "a"}}),
            "entrypoint_label_selector",
        ),
        (
            json!({"entrypoint": "x", "submission_id": "a/b"}),
            "submission_id",
        ),
        (json!({"entrypoint": "x", "runtime_env": []}), "runtime_env"),
        (json!({"entrypoint": ""}), "entrypoint"),
        (json!({"entrypoint": "x", "colour": "red"}), "colour"),
        (json!({}), "entrypoint"),
    ];
    for (body, field) in cases {
        assert_error(
            app.post("/api/jobs/", ALICE, body).await,
            422,
            "invalid_field",
            Some(field),
        )
        .await;
    }
    assert_error(
        app.post_raw("/api/jobs/", ALICE, "not json").await,
        400,
        "bad_json",
        None,
    )
    .await;
    assert_error(
        app.get("/api/jobs/nope", ALICE).await,
        404,
        "not_found",
        None,
    )
    .await;
    let r = app
        .client
        .delete(app.url("/api/version"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let v: serde_json::Value = app.get("/api/version", ALICE).await.json().await.unwrap();
    assert_eq!(v["version"], "4");
    assert!(v["ray_version"].as_str().unwrap().starts_with("2."));
}

async fn a_queued_job_reads_as_pending_and_stops_and_deletes_at_once(db: Db) {
    let Some(app) = spawn_app_with(db, with_alice).await else {
        return;
    };
    // No cluster: the job stays QUEUED here.
    let r = app
        .post(
            "/api/jobs/",
            ALICE,
            json!({"entrypoint": "sleep 1", "submission_id": "q-1"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let d: serde_json::Value = app.get("/api/jobs/q-1", ALICE).await.json().await.unwrap();
    assert_eq!(d["status"], "PENDING");
    assert_eq!(d["type"], "SUBMISSION");
    assert!(
        d["message"]
            .as_str()
            .unwrap()
            .starts_with("queued in fairshare"),
        "{d}"
    );
    assert!(
        d["start_time"].as_i64().unwrap() > 1_700_000_000_000,
        "ms since the epoch: {d}"
    );
    assert_eq!(d["fairshare"]["status"], "QUEUED");
    let id = d["fairshare"]["id"].as_str().unwrap().to_string();
    // fairshare's own id names it too.
    let by_id: serde_json::Value = app
        .get(&format!("/api/jobs/{id}"), ALICE)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(by_id["submission_id"], "q-1");
    let logs: serde_json::Value = app
        .get("/api/jobs/q-1/logs", ALICE)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(logs, json!({"logs": ""}));
    let r = app.post("/api/jobs/q-1/stop", ALICE, json!(null)).await;
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap(),
        json!({"stopped": true})
    );
    let d: serde_json::Value = app.get("/api/jobs/q-1", ALICE).await.json().await.unwrap();
    assert_eq!(d["status"], "STOPPED");
    assert!(d["end_time"].as_i64().is_some(), "{d}");
    // A second stop: already ended, as Ray answers.
    let r = app.post("/api/jobs/q-1/stop", ALICE, json!(null)).await;
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap(),
        json!({"stopped": false})
    );
    let r = app
        .client
        .delete(app.url("/api/jobs/q-1"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap(),
        json!({"deleted": true})
    );
    assert_error(
        app.get("/api/jobs/q-1", ALICE).await,
        404,
        "not_found",
        None,
    )
    .await;
    // Deleting a job still queued stops it and deletes it.
    app.post(
        "/api/jobs/",
        ALICE,
        json!({"entrypoint": "sleep 1", "submission_id": "q-2"}),
    )
    .await;
    let d: serde_json::Value = app.get("/api/jobs/q-2", ALICE).await.json().await.unwrap();
    let id = d["fairshare"]["id"].as_str().unwrap().to_string();
    let r = app
        .client
        .delete(app.url("/api/jobs/q-2"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_error(
        app.get(&format!("/v1/jobs/{id}"), SUBMITTER).await,
        404,
        "not_found",
        None,
    )
    .await;
}
both_databases!(a_queued_job_reads_as_pending_and_stops_and_deletes_at_once);

async fn packages_are_kept_up_to_the_configured_size(db: Db) {
    let Some(app) = spawn_app_with(db, |s| {
        with_alice(s);
        s.ray_compat.max_package_bytes = 1000;
    })
    .await
    else {
        return;
    };
    let url = app.url("/api/packages/gcs/_ray_pkg_abc.zip");
    assert_error(
        app.get("/api/packages/gcs/_ray_pkg_abc.zip", ALICE).await,
        404,
        "not_found",
        None,
    )
    .await;
    let r = app
        .client
        .put(&url)
        .bearer_auth(ALICE)
        .body(vec![7u8; 1000])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        app.get("/api/packages/gcs/_ray_pkg_abc.zip", ALICE)
            .await
            .status(),
        200
    );
    let r = app
        .client
        .put(app.url("/api/packages/gcs/_ray_pkg_big.zip"))
        .bearer_auth(ALICE)
        .body(vec![7u8; 1001])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let r = app
        .client
        .put(app.url("/api/packages/s3/_ray_pkg_x.zip"))
        .bearer_auth(ALICE)
        .body(vec![1u8])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        app.client
            .put(&url)
            .body(vec![1u8])
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
}
both_databases!(packages_are_kept_up_to_the_configured_size);

#[actix_web::test]
async fn a_granted_job_sends_its_package_only_to_a_cluster_that_lacks_it_before_the_submit() {
    let (server, state) = fake_ray::start(4.0, |_| {}).await;
    let (have, lack) = (b"PK\x03\x04 have".to_vec(), b"PK\x03\x04 lack".to_vec());
    // Packages go to the cluster under the name of their content.
    let name = |content: &[u8]| {
        format!(
            "_ray_pkg_fs_{}.zip",
            fairshare::store::package_digest_of(content)
        )
    };
    let (have_name, lack_name) = (name(&have), name(&lack));
    // The cluster has package "have" and lacks "lack".
    Mock::given(method("GET"))
        .and(path(format!("/api/packages/gcs/{have_name}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"result": true})))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/api/packages/gcs/{lack_name}")))
        .respond_with(ResponseTemplate::new(404))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path(format!("/api/packages/gcs/{lack_name}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"result": true})))
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path(format!("/api/packages/gcs/{have_name}")))
        .respond_with(ResponseTemplate::new(200))
        .with_priority(1)
        .expect(0)
        .mount(&server)
        .await;
    let app = app_with_cluster("local", server.uri(), with_alice).await;
    for (name, content) in [("_ray_pkg_have.zip", &have), ("_ray_pkg_lack.zip", &lack)] {
        let r = app
            .client
            .put(app.url(&format!("/api/packages/gcs/{name}")))
            .bearer_auth(ALICE)
            .body(content.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let r = app
        .post(
            "/api/jobs/",
            ALICE,
            json!({"entrypoint": "python m.py", "submission_id": "p-1",
                   "runtime_env": {"working_dir": "gcs://_ray_pkg_have.zip", "py_modules": ["gcs://_ray_pkg_lack.zip"]}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while state.lock().unwrap().submitted.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the job never reached Ray"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The upload came before the submit.
    let requests = server.received_requests().await.unwrap();
    let order: Vec<String> = requests
        .iter()
        .filter(|r| r.method.as_str() != "GET")
        .map(|r| format!("{} {}", r.method, r.url.path()))
        .collect();
    let put = order
        .iter()
        .position(|r| *r == format!("PUT /api/packages/gcs/{lack_name}"));
    let post = order.iter().position(|r| r == "POST /api/jobs/");
    assert!(put.is_some() && put < post, "{order:?}");
    let uploaded = requests
        .iter()
        .find(|r| r.method.as_str() == "PUT")
        .map(|r| r.body.clone());
    assert_eq!(uploaded.as_deref(), Some(&lack[..]));
    // Ray is told the names of the contents.
    let submit: serde_json::Value = requests
        .iter()
        .find(|r| r.method.as_str() == "POST" && r.url.path() == "/api/jobs/")
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .unwrap();
    assert_eq!(
        submit["runtime_env"],
        json!({"working_dir": format!("gcs://{have_name}"), "py_modules": [format!("gcs://{lack_name}")]})
    );
    server.verify().await;
}

#[test]
fn the_ray_jobs_api_page_lists_every_route() {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/ray-jobs-api.md"))
            .expect("docs/ray-jobs-api.md");
    for (method, route) in fairshare::RAY_API_ROUTES {
        let line = format!("`{} {}`", method.to_uppercase(), route);
        assert!(
            page.contains(&line),
            "docs/ray-jobs-api.md does not list {line}"
        );
    }
}
