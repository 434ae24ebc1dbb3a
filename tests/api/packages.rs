//! Packages belong to whoever uploaded them (issue 31, part 6): a package one confined
//! token uploads is invisible to another (its `GET` is 404, its own `PUT` keeps its own
//! bytes) and unusable by it (its job never gets the other's content), on both
//! databases; tokens without a user share one namespace.

use serde_json::json;
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, ResponseTemplate};

use crate::both_databases;
use crate::fake_ray;
use crate::helpers::{add_user_token, spawn_app_with, Db, TestApp, ADMIN, SUBMITTER};

const ALICE: &str = "alice-token-1";
const BOB: &str = "bob-token-12";
const CAROL: &str = "carol-token-1";
/// The name Ray's client would give a public template's directory: anyone can make it.
const GUESSED: &str = "/api/packages/gcs/_ray_pkg_0123456789abcdef.zip";

async fn put(app: &TestApp, token: &str, content: &[u8]) {
    let r = app
        .client
        .put(app.url(GUESSED))
        .bearer_auth(token)
        .body(content.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

async fn a_package_one_confined_user_uploads_is_invisible_and_unusable_to_another(db: Db) {
    let (server, state) = fake_ray::start(8.0, |_| {}).await;
    Mock::given(method("GET"))
        .and(path_regex("^/api/packages/"))
        .respond_with(ResponseTemplate::new(404))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path_regex("^/api/packages/"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"result": true})))
        .with_priority(1)
        .mount(&server)
        .await;
    let uri = server.uri();
    let Some(app) = spawn_app_with(db, move |s| {
        add_user_token(s, ALICE, "alice");
        add_user_token(s, BOB, "bob");
        add_user_token(s, CAROL, "carol");
        s.clusters = vec![fairshare::config::ClusterSettings {
            name: "local".into(),
            address: uri,
            ..Default::default()
        }];
        s.monitor.poll_interval = std::time::Duration::from_millis(100);
    })
    .await
    else {
        return;
    };
    let (bobs, alices) = (b"PK bob's code".to_vec(), b"PK alice's code".to_vec());
    // bob uploads first, under the name alice's client will use.
    put(&app, BOB, &bobs).await;
    // alice does not see it, so her client uploads hers, and hers is kept.
    assert_eq!(app.get(GUESSED, ALICE).await.status(), 404);
    assert_eq!(app.get(GUESSED, CAROL).await.status(), 404);
    assert_eq!(
        app.get(GUESSED, SUBMITTER).await.status(),
        404,
        "nor does a gateway"
    );
    put(&app, ALICE, &alices).await;
    assert_eq!(app.get(GUESSED, ALICE).await.status(), 200);
    assert_eq!(app.get(GUESSED, BOB).await.status(), 200);
    // Each submits a job naming the URI; carol names it without having uploaded it.
    let runtime_env = json!({"working_dir": "gcs://_ray_pkg_0123456789abcdef.zip"});
    for (token, sid) in [(ALICE, "a"), (BOB, "b"), (CAROL, "c")] {
        let r = app
            .post(
                "/api/jobs/",
                token,
                json!({"entrypoint": "python x.py", "submission_id": sid, "runtime_env": runtime_env}),
            )
            .await;
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while state.lock().unwrap().submitted.len() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the jobs never reached Ray"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let requests = server.received_requests().await.unwrap();
    // The job of each user names the cluster-side package of its own content.
    let mut working_dirs = std::collections::BTreeMap::new();
    for r in requests
        .iter()
        .filter(|r| r.method.as_str() == "POST" && r.url.path() == "/api/jobs/")
    {
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let job: serde_json::Value = app
            .get_json(
                &format!("/v1/jobs/{}", body["submission_id"].as_str().unwrap()),
                ADMIN,
            )
            .await;
        working_dirs.insert(
            job["user"].as_str().unwrap().to_string(),
            body["runtime_env"]["working_dir"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let named = |content: &[u8]| {
        format!(
            "gcs://_ray_pkg_fs_{}.zip",
            fairshare::store::package_digest_of(content)
        )
    };
    assert_eq!(working_dirs["alice"], named(&alices));
    assert_eq!(working_dirs["bob"], named(&bobs));
    assert_eq!(
        working_dirs["carol"], "gcs://_ray_pkg_0123456789abcdef.zip",
        "carol has no such package: hers is left for the cluster to report"
    );
    // What reached the cluster: each content under its own name, nothing for carol.
    let mut uploads: Vec<(String, Vec<u8>)> = requests
        .iter()
        .filter(|r| r.method.as_str() == "PUT")
        .map(|r| (r.url.path().to_string(), r.body.clone()))
        .collect();
    uploads.sort();
    let mut want = vec![
        (
            named(&alices).replace("gcs://", "/api/packages/gcs/"),
            alices.clone(),
        ),
        (
            named(&bobs).replace("gcs://", "/api/packages/gcs/"),
            bobs.clone(),
        ),
    ];
    want.sort();
    assert_eq!(uploads, want);
}
both_databases!(a_package_one_confined_user_uploads_is_invisible_and_unusable_to_another);

async fn tokens_without_a_user_share_one_package_namespace(db: Db) {
    let Some(app) = spawn_app_with(db, |s| add_user_token(s, ALICE, "alice")).await else {
        return;
    };
    put(&app, SUBMITTER, b"PK gateway").await;
    assert_eq!(app.get(GUESSED, ADMIN).await.status(), 200);
    assert_eq!(app.get(GUESSED, ALICE).await.status(), 404);
}
both_databases!(tokens_without_a_user_share_one_package_namespace);
