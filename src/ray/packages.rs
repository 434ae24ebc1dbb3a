//! `working_dir` / `py_modules` packages (Ray's Jobs API served by fairshare,
//! docs/ray-jobs-api.md): Ray's client zips a local directory, names it by a hash of its
//! content (`gcs://_ray_pkg_<hash>.zip`), uploads it with `PUT /api/packages/gcs/
//! <name>` and puts the URI into the job's `runtime_env`. fairshare keeps the upload
//! and, when the job is granted a cluster, sends it there before the submit unless
//! that cluster already has it (`GET /api/packages/...` answers 200).
//!
//! **Per owner** (issue 31): uploads are kept per owner (the uploading token's user,
//! or the shared namespace `""` of tokens without one), and a submit's `runtime_env`
//! is *pinned* to its owner's packages ([`pin_packages`]): each uploaded URI it names
//! is replaced by the name of that package's content on the clusters,
//! `gcs://_ray_pkg_fs_<hex SHA-256>.zip` ([`cluster_uri`]). A cluster's package names
//! are one namespace for every tenant, so a name must mean one content there: a user
//! who uploads under a URI someone else's job names changes nothing but their own.

use std::future::Future;

use super::{error_chain, RayClient};

/// The protocol of packages that go through the packages API; other URIs (`s3://`,
/// `https://`, ...) are fetched by Ray itself.
pub const UPLOADED_PROTOCOL: &str = "gcs";

/// The start of a package name on a cluster that fairshare chose: the hex SHA-256 of
/// the content follows, then `.zip`.
pub const CLUSTER_PREFIX: &str = "_ray_pkg_fs_";

/// The URI a package of this content digest (hex SHA-256) has on the clusters.
pub fn cluster_uri(digest: &str) -> String {
    format!("{UPLOADED_PROTOCOL}://{CLUSTER_PREFIX}{digest}.zip")
}

/// The digest a [`cluster_uri`] names; `None` for every other URI.
pub fn digest_in(uri: &str) -> Option<&str> {
    let name = uri.strip_prefix(UPLOADED_PROTOCOL)?.strip_prefix("://")?;
    let digest = name.strip_prefix(CLUSTER_PREFIX)?.strip_suffix(".zip")?;
    (digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    .then_some(digest)
}

/// Pins `runtime_env` to its submitter's packages: every uploaded package URI in
/// `working_dir` and `py_modules` for which `digest_of(uri)` finds the submitter's
/// package is replaced by its [`cluster_uri`]. A URI the submitter has not uploaded is
/// left as written (Ray reports it if the cluster lacks it; fairshare sends nothing
/// for it), and so is one that already is a [`cluster_uri`].
///
/// Errors: what `digest_of` returns (a database error).
pub async fn pin_packages<F, Fut, E>(
    runtime_env: &mut serde_json::Value,
    digest_of: F,
) -> Result<(), E>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<Option<String>, E>>,
{
    let Some(env) = runtime_env.as_object_mut() else {
        return Ok(());
    };
    let mut slots: Vec<&mut serde_json::Value> = Vec::new();
    let (mut wd, mut mods) = (None, None);
    for (k, v) in env.iter_mut() {
        match k.as_str() {
            "working_dir" => wd = Some(v),
            "py_modules" => mods = Some(v),
            _ => {}
        }
    }
    slots.extend(wd);
    if let Some(serde_json::Value::Array(items)) = mods {
        slots.extend(items.iter_mut());
    }
    for slot in slots {
        let Some(uri) = slot.as_str() else { continue };
        if digest_in(uri).is_some()
            || !matches!(split_uri(uri), Some((p, _)) if p == UPLOADED_PROTOCOL)
        {
            continue;
        }
        if let Some(digest) = digest_of(uri.to_string()).await? {
            *slot = serde_json::Value::String(cluster_uri(&digest));
        }
    }
    Ok(())
}

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
/// finds the package here, `PUT` it. (`store::package_content` finds only
/// [`cluster_uri`]s, so only pinned packages are sent, under the name of their
/// content.) A package neither here nor there is left for Ray
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
    fn cluster_uris_name_a_content_digest_and_nothing_else() {
        let d = "ab".repeat(32);
        let uri = cluster_uri(&d);
        assert_eq!(uri, format!("gcs://_ray_pkg_fs_{d}.zip"));
        assert_eq!(digest_in(&uri), Some(d.as_str()));
        assert!(split_uri(&uri).is_some(), "a name Ray's packages API takes");
        assert_eq!(digest_in("gcs://_ray_pkg_0123456789abcdef.zip"), None);
        assert_eq!(
            digest_in(&format!("gcs://_ray_pkg_fs_{}.zip", "AB".repeat(32))),
            None
        );
        assert_eq!(digest_in(&format!("s3://_ray_pkg_fs_{d}.zip")), None);
    }

    #[actix_web::test]
    async fn pinning_replaces_the_submitters_uploads_and_leaves_the_rest() {
        let d = "cd".repeat(32);
        let mut env = json!({
            "working_dir": "gcs://_ray_pkg_mine.zip",
            "py_modules": ["gcs://_ray_pkg_unknown.zip", "s3://b/m.zip", "gcs://_ray_pkg_mine.zip"],
            "env_vars": {"working_dir": "gcs://_ray_pkg_mine.zip"}
        });
        let want = d.clone();
        pin_packages(&mut env, |uri| {
            let want = want.clone();
            async move {
                Ok::<_, std::convert::Infallible>(
                    (uri == "gcs://_ray_pkg_mine.zip").then_some(want),
                )
            }
        })
        .await
        .unwrap();
        let pinned = cluster_uri(&d);
        assert_eq!(env["working_dir"], pinned.as_str());
        assert_eq!(
            env["py_modules"],
            json!(["gcs://_ray_pkg_unknown.zip", "s3://b/m.zip", pinned])
        );
        assert_eq!(env["env_vars"]["working_dir"], "gcs://_ray_pkg_mine.zip");
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
