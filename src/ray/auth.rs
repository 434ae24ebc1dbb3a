//! Credentials toward one Ray cluster (issue 45 §1): Ray's token authentication
//! (`RAY_AUTH_MODE=token`, Ray 2.52+). A head with it answers 401 to every dashboard
//! request without `Authorization: Bearer <token>` (measured on Ray 2.60; Ray's own
//! client sends the same header, `ray/_private/authentication/`). The token comes from
//! the cluster's `auth_token_file`, else from Ray's own environment names
//! (`RAY_AUTH_TOKEN`, then the file `RAY_AUTH_TOKEN_PATH`), as Ray's client takes it.
//! A file is re-read when its modification time or length changes, and once more on
//! demand after Ray refused it ([`RayToken::reload`]), so a rotated Kubernetes Secret
//! takes effect without a restart. The token is never logged: this type's `Debug`
//! hides it, and errors name the file, never its content.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Where a cluster's token comes from.
#[derive(Clone, PartialEq, Eq)]
enum Source {
    /// No token: requests go without one.
    None,
    /// A token given in the environment (`RAY_AUTH_TOKEN`).
    Value(String),
    /// A file holding the token (`auth_token_file`, `RAY_AUTH_TOKEN_PATH`), and the
    /// key that named it (for messages).
    File(PathBuf, &'static str),
}

/// What was last read from a token file.
#[derive(Default)]
struct Read {
    /// The file's modification time and length when read.
    stamp: Option<(Option<SystemTime>, u64)>,
    /// The token, or why there is none.
    token: Option<Result<String, String>>,
}

/// One cluster's token, shared by the clones of its [`super::RayClient`].
#[derive(Clone)]
pub struct RayToken {
    source: Source,
    read: Arc<Mutex<Read>>,
}

impl std::fmt::Debug for RayToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match &self.source {
            Source::None => "none".to_string(),
            Source::Value(_) => "RAY_AUTH_TOKEN (hidden)".to_string(),
            Source::File(path, key) => format!("{key} {}", path.display()),
        };
        f.debug_struct("RayToken").field("source", &source).finish()
    }
}

impl RayToken {
    /// No token.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn none() -> RayToken {
        RayToken {
            source: Source::None,
            read: Arc::default(),
        }
    }

    /// The token in file `path` (re-read when it changes).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn file(path: PathBuf) -> RayToken {
        RayToken {
            source: Source::File(path, "auth_token_file"),
            read: Arc::default(),
        }
    }

    /// The token of a `[[clusters]]` entry: its `auth_token_file`, else
    /// `RAY_AUTH_TOKEN` or `RAY_AUTH_TOKEN_PATH` from `env`, else none.
    pub fn for_cluster(
        file: Option<&std::path::Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> RayToken {
        let source = match file {
            Some(path) => Source::File(path.to_path_buf(), "auth_token_file"),
            None => match (
                env("RAY_AUTH_TOKEN").filter(|t| !t.trim().is_empty()),
                env("RAY_AUTH_TOKEN_PATH").filter(|p| !p.trim().is_empty()),
            ) {
                (Some(token), _) => Source::Value(token.trim().to_string()),
                (None, Some(path)) => Source::File(PathBuf::from(path), "RAY_AUTH_TOKEN_PATH"),
                (None, None) => Source::None,
            },
        };
        RayToken {
            source,
            read: Arc::default(),
        }
    }

    /// Where the token comes from, for messages: `auth_token_file /path`,
    /// `RAY_AUTH_TOKEN`, or `no token` (never the token itself).
    pub fn describe(&self) -> String {
        match &self.source {
            Source::None => {
                "no token (set the cluster's auth_token_file, or RAY_AUTH_TOKEN)".into()
            }
            Source::Value(_) => "the token in RAY_AUTH_TOKEN".into(),
            Source::File(path, key) => format!("the token in {key} {}", path.display()),
        }
    }

    /// The token to send now: `Ok(None)` without one. A file is read the first time
    /// and again whenever its modification time or length has changed.
    ///
    /// Errors: the file cannot be read, is empty, or holds characters an HTTP header
    /// cannot carry (the message names the file, never its content).
    pub fn current(&self) -> Result<Option<String>, String> {
        match &self.source {
            Source::None => Ok(None),
            Source::Value(token) => check(token).map(Some),
            Source::File(path, key) => {
                let stamp = std::fs::metadata(path)
                    .map(|m| (m.modified().ok(), m.len()))
                    .ok();
                let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
                if read.token.is_none() || stamp.is_none() || read.stamp != stamp {
                    read.token = Some(read_token(path, key));
                    read.stamp = stamp;
                }
                read.token
                    .clone()
                    .unwrap_or_else(|| Ok(String::new()))
                    .map(Some)
            }
        }
    }

    /// Reads a token file again whatever its stamp says (after Ray refused the token:
    /// a Secret rewritten within the same second keeps its modification time).
    /// Whether the token changed.
    pub fn reload(&self) -> bool {
        let Source::File(path, key) = &self.source else {
            return false;
        };
        let fresh = read_token(path, key);
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let changed = read.token.as_ref() != Some(&fresh);
        read.token = Some(fresh);
        read.stamp = std::fs::metadata(path)
            .map(|m| (m.modified().ok(), m.len()))
            .ok();
        changed
    }
}

/// The token in `path`, trimmed as Ray trims it.
fn read_token(path: &std::path::Path, key: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {key} {}: {e}", path.display()))?;
    check(text.trim()).map_err(|why| format!("{key} {}: {why}", path.display()))
}

/// A token an `Authorization` header can carry: not empty, visible ASCII.
fn check(token: &str) -> Result<String, String> {
    if token.is_empty() {
        return Err("the token is empty".into());
    }
    if token.split_whitespace().count() > 1 {
        return Err("the token has spaces in it: the file must hold the token alone (no 'Bearer', no other words)".into());
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the token has characters an HTTP header cannot carry".into());
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_is_read_again_when_it_changes_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first-token\n").unwrap();
        let t = RayToken::file(path.clone());
        assert_eq!(t.current().unwrap().as_deref(), Some("first-token"));
        std::fs::write(&path, "second-token-longer\n").unwrap();
        assert_eq!(t.current().unwrap().as_deref(), Some("second-token-longer"));
        // Same length, maybe the same second: reload reads it anyway.
        std::fs::write(&path, "third-token-longerr\n").unwrap();
        assert!(t.reload());
        assert!(!t.reload(), "unchanged");
        assert_eq!(t.current().unwrap().as_deref(), Some("third-token-longerr"));
        assert!(!format!("{t:?}").contains("token-longer"), "{t:?}");
        std::fs::remove_file(&path).unwrap();
        let err = t.current().unwrap_err();
        assert!(err.contains("cannot read auth_token_file"), "{err}");
        std::fs::write(&path, "  \n").unwrap();
        assert!(t.current().unwrap_err().contains("empty"));
        std::fs::write(&path, "Bearer abc").unwrap();
        assert!(t.current().unwrap_err().contains("no 'Bearer'"));
        std::fs::write(&path, "ab\u{7}c").unwrap();
        assert!(t.current().unwrap_err().contains("cannot carry"));
    }

    #[test]
    fn ray_environment_names_are_taken_when_no_file_is_configured() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "from-path").unwrap();
        let p = path.display().to_string();
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let t = RayToken::for_cluster(None, env(&[("RAY_AUTH_TOKEN", " from-env ")]));
        assert_eq!(t.current().unwrap().as_deref(), Some("from-env"));
        assert!(!format!("{t:?}").contains("from-env"));
        let t = RayToken::for_cluster(None, |k| (k == "RAY_AUTH_TOKEN_PATH").then(|| p.clone()));
        assert_eq!(t.current().unwrap().as_deref(), Some("from-path"));
        let t = RayToken::for_cluster(Some(&path), env(&[("RAY_AUTH_TOKEN", "ignored")]));
        assert_eq!(t.current().unwrap().as_deref(), Some("from-path"));
        let t = RayToken::for_cluster(None, env(&[]));
        assert_eq!(t.current().unwrap(), None);
        assert!(t.describe().starts_with("no token"));
    }
}
