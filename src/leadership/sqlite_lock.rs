//! The SQLite single-replica lock: an exclusive `flock` on `<database file>.lock`
//! that keeps a second service off the same database file.

use std::fs::File;
use std::time::Duration;

/// Keeps a second service off a SQLite database: an exclusive lock on
/// `<database file>.lock`, held for the life of the process (released by the OS when
/// it exits, however it exits).
pub struct SqliteLock {
    _file: File,
}

impl SqliteLock {
    /// Takes the lock for the SQLite database of `url`; `Ok(None)` for other
    /// databases and in-memory SQLite. Waits up to `wait` for a service of this
    /// process that is shutting down.
    ///
    /// Errors: another service holds the database (the message says so), or the lock
    /// file cannot be created.
    pub async fn take(url: &str, wait: Duration) -> anyhow::Result<Option<SqliteLock>> {
        let Some(rest) = url.strip_prefix("sqlite:") else {
            return Ok(None);
        };
        let path = rest.trim_start_matches("//");
        let path = path.split('?').next().unwrap_or_default();
        if path.is_empty() || path.contains(":memory:") {
            return Ok(None);
        }
        // The real file, so that a symlink or another spelling of the path names the
        // same lock (the database may not exist yet: then the path as given).
        let path = std::fs::canonicalize(path)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.to_string());
        let lock_path = format!("{path}.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| anyhow::anyhow!("cannot create the lock file {lock_path}: {e}"))?;
        let deadline = std::time::Instant::now() + wait;
        loop {
            match try_flock(&file) {
                Ok(true) => return Ok(Some(SqliteLock { _file: file })),
                Ok(false) if std::time::Instant::now() < deadline => {
                    actix_web::rt::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(false) => {
                    anyhow::bail!(
                        "another fairshare service is using the SQLite database {path} (it holds \
                         {lock_path}); SQLite runs one replica only — stop the other one, or use \
                         PostgreSQL for several replicas"
                    )
                }
                Err(e) => anyhow::bail!("cannot lock {lock_path}: {e}"),
            }
        }
    }
}

/// An exclusive, non-blocking `flock(2)`: `Ok(false)` when another open file holds it.
fn try_flock(file: &File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a file descriptor this `File` owns and keeps open.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}
