//! Trusted access (issue 31, part 3): a header-less request from a configured source
//! network acts with the configured role, so the qiskit-serverless gateway's plain
//! `requests.get(f"{address}/api/jobs/{id}/logs")` works; from anywhere else it is 401
//! as before, and a network covering everything stops the service at start.

use serde_json::json;

use crate::both_databases;
use crate::helpers::{spawn_app_with, Db, TestApp, SUBMITTER};

async fn queued_job(app: &TestApp) -> String {
    let r = app
        .post(
            "/api/jobs/",
            SUBMITTER,
            json!({"entrypoint": "echo", "submission_id": "t-1", "metadata": {"fairshare.user": "alice"}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    "t-1".into()
}

async fn a_header_less_request_from_a_trusted_network_acts_with_its_role(db: Db) {
    let Some(app) = spawn_app_with(db, |s| {
        s.auth.trusted_networks = vec!["127.0.0.0/8".into()];
    })
    .await
    else {
        return;
    };
    let id = queued_job(&app).await;
    // The gateway's call, exactly: no headers at all.
    let r = app
        .client
        .get(app.url(&format!("/api/jobs/{id}/logs")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), r#"{"logs": ""}"#);
    // The role is the configured one (submitter): admin routes stay closed.
    let r = app
        .client
        .post(app.url("/v1/users/alice/pause"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // A request that does send a header is judged by its token, as before.
    let r = app
        .get(&format!("/api/jobs/{id}/logs"), "wrong-token")
        .await;
    assert_eq!(r.status(), 401);
}
both_databases!(a_header_less_request_from_a_trusted_network_acts_with_its_role);

async fn a_header_less_request_from_elsewhere_is_refused(db: Db) {
    let Some(app) = spawn_app_with(db, |s| {
        s.auth.trusted_networks = vec!["10.0.0.0/8".into(), "fd00::/8".into()];
    })
    .await
    else {
        return;
    };
    let id = queued_job(&app).await;
    let r = app
        .client
        .get(app.url(&format!("/api/jobs/{id}/logs")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}
both_databases!(a_header_less_request_from_elsewhere_is_refused);

#[test]
fn a_trusted_network_that_covers_everything_stops_the_service_at_start() {
    for (bad, why) in [
        ("0.0.0.0/0", "covers every address"),
        ("::/0", "covers every address"),
        ("10.0.0.0/33", "prefix length"),
        ("gateway.local", "not an IP address"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, format!("[auth]\ntrusted_networks = [\"{bad}\"]\n")).unwrap();
        let err = fairshare::Settings::load_with_env(Some(&path), Vec::<(String, String)>::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("auth.trusted_networks[0]") && err.contains(why),
            "{bad}: {err}"
        );
    }
}

/// Networks that cover everything only together are refused too (a fresh tester's
/// finding: `0.0.0.0/1` with `128.0.0.0/1` started), and an IPv4-mapped IPv6 network
/// is the IPv4 network it maps; networks that leave addresses out start.
#[test]
fn trusted_networks_that_together_cover_everything_stop_the_service_at_start() {
    let load = |nets: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let list: Vec<String> = nets.iter().map(|n| format!("\"{n}\"")).collect();
        std::fs::write(
            &path,
            format!("[auth]\ntrusted_networks = [{}]\n", list.join(", ")),
        )
        .unwrap();
        fairshare::Settings::load_with_env(Some(&path), Vec::<(String, String)>::new())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    for bad in [
        &["0.0.0.0/1", "128.0.0.0/1"][..],
        &["128.0.0.0/1", "10.0.0.0/8", "0.0.0.0/2", "64.0.0.0/2"],
        &["::/1", "8000::/1"],
        &["::ffff:0:0/97", "::ffff:128.0.0.0/97"],
    ] {
        let err = load(bad).unwrap_err();
        assert!(
            err.contains("auth.trusted_networks") && err.contains("cover every address"),
            "{bad:?}: {err}"
        );
    }
    let err = load(&["::ffff:0:0/96"]).unwrap_err();
    assert!(err.contains("covers every address"), "{err}");
    for good in [
        &["0.0.0.0/1", "128.0.0.0/2"][..],
        &["0.0.0.0/1", "::/1", "8000::/2"],
        &["10.0.0.0/8", "fd00::/8", "::ffff:10.0.0.0/104"],
    ] {
        assert_eq!(load(good), Ok(()), "{good:?}");
    }
}
