//! Fault injection for tests (cargo feature `fault-injection`, which only the test
//! build turns on, through the package's dev-dependency on itself; a release build
//! has none of this).
//!
//! A test registers a hook for the database its service uses (the name, unique per
//! test); the service calls it at the point the hook names. Points:
//!
//! - [`on_intake_commit`]: after PostgreSQL intake's round trip 2 (`EXECUTE insert;
//!   COMMIT`) succeeded. The hook may end the writer's session and answer `true`: the
//!   writer then takes the answer to its `COMMIT` as lost with the connection (as when
//!   the session ends after the server committed and before its answer arrived, which
//!   no lock can make a test wait for), and settles the doubt as it does for a real
//!   loss (store/intake/postgres/, `commit`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

/// A hook: `true` means "the answer was lost".
pub type Hook = Arc<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;

static INTAKE_COMMIT: Mutex<Option<HashMap<String, Hook>>> = Mutex::new(None);

/// Calls `hook` after each intake commit on the PostgreSQL database `database` (its
/// name), until [`clear`].
pub fn on_intake_commit(database: &str, hook: Hook) {
    if let Ok(mut hooks) = INTAKE_COMMIT.lock() {
        hooks
            .get_or_insert_with(HashMap::new)
            .insert(database.to_string(), hook);
    }
}

/// Removes the hooks of `database`.
pub fn clear(database: &str) {
    if let Ok(mut hooks) = INTAKE_COMMIT.lock() {
        if let Some(h) = hooks.as_mut() {
            h.remove(database);
        }
    }
}

/// Runs the intake-commit hook of `database`, if any: whether the answer to the
/// commit is to be taken as lost.
pub(crate) async fn intake_commit_answer_lost(database: &str) -> bool {
    let hook = INTAKE_COMMIT
        .lock()
        .ok()
        .and_then(|h| h.as_ref()?.get(database).cloned());
    match hook {
        Some(hook) => hook().await,
        None => false,
    }
}
