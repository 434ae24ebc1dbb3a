//! `working_dir` / `py_modules` packages (Ray's Jobs API served by fairshare, README
//! "Ray's Jobs API"): Ray's client zips a local directory, names it by a hash of its
//! content (`gcs://_ray_pkg_<hash>.zip`), uploads it with `PUT /api/packages/gcs/
//! <name>` and puts the URI into the job's `runtime_env`. fairshare keeps the upload
//! and, when the job is granted a cluster, sends it there before the submit unless
//! that cluster already has it (`GET /api/packages/...` answers 200).

use std::future::Future;

use super::{error_chain, RayClient};

/// The protocol of packages that go through the packages API; other URIs (`s3://`,
/// `https://`, ...) are fetched by Ray itself.
pub const UPLOADED_PROTOCOL: &str = "gcs";

/// The `(protocol, name)` of every uploaded package `runtime_env` names in
/// `working_dir` (a URI string) and `py_modules` (a list of URI strings), in that
/// order, without repeats. Local paths and other protocols are left out.
pub fn package_uris(runtime_env: Option<&serde_json::Value>) -> Vec<(String, String)> {
    let Some(env) = runtime_env else {
        return Vec::new();
    };
    let mut uris: Vec<&str> = Vec::new();
    if let Some(dir) = env.get("working_dir").and_then(|v| v.as_str()) {
        uris.push(dir);
    }
    if let Some(mods) = env.get("py_modules").and_then(|v| v.as_array()) {
        uris.extend(mods.iter().filter_map(|m| m.as_str()));
    }
    let mut out: Vec<(String, String)> = Vec::new();
    for uri in uris {
        if let Some((protocol, name)) = split_uri(uri) {
            if protocol == UPLOADED_PROTOCOL && !out.iter().any(|(_, n)| n == name) {
                out.push((protocol.to_string(), name.to_string()));
            }
        }
    }
    out
}

/// `gcs://_ray_pkg_x.zip` → `("gcs", "_ray_pkg_x.zip")`; `None` for anything that is
/// not `<protocol>://<name>` with a name that is one path segment.
pub fn split_uri(uri: &str) -> Option<(&str, &str)> {
    let (protocol, name) = uri.split_once("://")?;
    let ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    (ok(protocol) && ok(name) && name != "." && name != "..").then_some((protocol, name))
}

/// Makes sure `client`'s cluster has every uploaded package `runtime_env` names: for
/// each, `GET /api/packages/...` on the cluster; if it answers 404 and `load(uri)`
/// finds the package here, `PUT` it. A package neither here nor there is left for Ray
/// to report (the job fails there with Ray's own message).
///
/// Errors: a sentence naming the package and the cause, when the cluster did not
/// answer or refused the upload, or the package could not be read here; the job then
/// goes back to its queue like any dispatch the cluster did not take.
pub async fn send_packages<F, Fut, E>(
    client: &RayClient,
    runtime_env: Option<&serde_json::Value>,
    load: F,
) -> Result<(), String>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<Option<Vec<u8>>, E>>,
    E: std::fmt::Display,
{
    for (protocol, name) in package_uris(runtime_env) {
        let uri = format!("{protocol}://{name}");
        let present = client.package_exists(&protocol, &name).await.map_err(|e| {
            format!(
                "cannot check package {uri} on the cluster: {}",
                error_chain(&e)
            )
        })?;
        if present {
            continue;
        }
        let content = load(uri.clone())
            .await
            .map_err(|e| format!("cannot read package {uri}: {e}"))?;
        let Some(content) = content else {
            tracing::warn!(%uri, "the job names a package neither fairshare nor the cluster has");
            continue;
        };
        let bytes = content.len();
        client
            .upload_package(&protocol, &name, content)
            .await
            .map_err(|e| {
                format!(
                    "cannot upload package {uri} to the cluster: {}",
                    error_chain(&e)
                )
            })?;
        tracing::info!(%uri, bytes, "package uploaded to the cluster");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn package_uris_are_the_uploaded_working_dir_and_py_modules_once_each() {
        let env = json!({
            "working_dir": "gcs://_ray_pkg_a.zip",
            "py_modules": ["gcs://_ray_pkg_b.zip", "s3://bucket/m.zip", "gcs://_ray_pkg_a.zip", 3],
            "pip": ["requests"]
        });
        assert_eq!(
            package_uris(Some(&env)),
            vec![
                ("gcs".to_string(), "_ray_pkg_a.zip".to_string()),
                ("gcs".to_string(), "_ray_pkg_b.zip".to_string())
            ]
        );
        assert!(package_uris(Some(&json!({"working_dir": "./local"}))).is_empty());
        assert!(package_uris(None).is_empty());
    }

    #[test]
    fn split_uri_refuses_names_that_would_leave_their_path_segment() {
        assert_eq!(
            split_uri("gcs://_ray_pkg_a.zip"),
            Some(("gcs", "_ray_pkg_a.zip"))
        );
        assert_eq!(split_uri("gcs://a/b.zip"), None);
        assert_eq!(split_uri("gcs://.."), None);
        assert_eq!(split_uri("gcs://"), None);
        assert_eq!(split_uri("no-protocol"), None);
    }
}
