//! SQLite's WAL checkpoints, off the commit path (issue 32; DESIGN §6, "SQLite").
//!
//! In WAL mode SQLite appends each commit to the `-wal` file and, by default, the commit
//! that takes the log past 1,000 pages copies the log back into the database file
//! itself (an automatic checkpoint), with `synchronous = FULL` an `fsync` of the log and
//! one of the database file, inside that commit. Whichever write crosses the line pays
//! for it: measured on a 2-CPU machine whose disk Ray's head also writes, 15–30 ms, where
//! a commit's own `fsync` takes about 1 ms (BENCHMARKS.md, "The Ray edge"). When that
//! write is a grant's `Granted` step, the next job's POST to Ray waits for it.
//!
//! So the service's connection does not checkpoint (`wal_autocheckpoint = 0`, set in
//! `store::options`), and a connection of its own here runs a PASSIVE checkpoint every
//! [`INTERVAL`]: it copies what no reader still needs without taking the write lock, so
//! commits go on meanwhile (SQLite, "Write-Ahead Logging", §3 "Checkpointing":
//! <https://www.sqlite.org/wal.html>). Durability is unchanged: every commit still
//! `fsync`s the log. A log fully copied is started again from its beginning by the next
//! commit, so it stays about as long as one interval's commits.

use std::str::FromStr;
use std::time::Duration;

use sea_orm::sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sea_orm::sqlx::{self, Connection, Row};

/// How often the checkpointer copies the log into the database file: 1 s (a busy
/// intake commits a few hundred batches a second, so the log stays a few MB at most).
pub const INTERVAL: Duration = Duration::from_secs(1);

/// Frames in the log above which a checkpoint that could not copy everything (a reader
/// held an old snapshot) is reported: 100,000 frames of 4 KiB, about 400 MB.
const LONG_LOG_FRAMES: i64 = 100_000;

/// Whether `url` names a SQLite database (the service's connection then does not
/// checkpoint, and [`spawn`] must run beside it).
#[must_use]
pub fn is_sqlite(url: &str) -> bool {
    url.starts_with("sqlite:")
}

/// The running checkpointer; dropping it stops it (the service's `serve` holds it
/// until it returns).
#[derive(Debug)]
pub struct Checkpointer(tokio::task::JoinHandle<()>);

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the checkpointer of the SQLite database at `url` on the current tokio
/// runtime; `None` for PostgreSQL (which checkpoints on its own). Opens its connection
/// first, so a database that cannot be opened is an error here, not a silent task.
///
/// # Errors
/// The database cannot be opened.
pub async fn spawn(url: &str) -> Result<Option<Checkpointer>, sqlx::Error> {
    if !is_sqlite(url) {
        return Ok(None);
    }
    let opts = SqliteConnectOptions::from_str(url)?
        .create_if_missing(false)
        .busy_timeout(Duration::from_secs(5));
    let mut conn = SqliteConnection::connect_with(&opts).await?;
    Ok(Some(Checkpointer(tokio::spawn(async move {
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut warned = false;
        loop {
            tick.tick().await;
            match checkpoint(&mut conn).await {
                Ok((log, copied)) => {
                    if log - copied > LONG_LOG_FRAMES && !warned {
                        warned = true;
                        tracing::warn!(log_frames = log, copied_frames = copied,
                            "the SQLite log keeps growing: a reader holds an old snapshot, so checkpoints cannot copy it back");
                    } else if log - copied <= LONG_LOG_FRAMES {
                        warned = false;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "SQLite checkpoint failed; trying again in {INTERVAL:?}");
                }
            }
        }
    }))))
}

/// One PASSIVE checkpoint: the frames in the log and how many of them are now in the
/// database file (`PRAGMA wal_checkpoint`'s second and third columns).
async fn checkpoint(conn: &mut SqliteConnection) -> Result<(i64, i64), sqlx::Error> {
    let row = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(&mut *conn)
        .await?;
    Ok((row.try_get::<i64, _>(1)?, row.try_get::<i64, _>(2)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the service's connection not checkpointing, the log is copied back by the
    /// checkpointer: after commits, one checkpoint leaves nothing uncopied.
    #[tokio::test]
    async fn the_checkpointer_copies_the_log_the_service_connection_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/c.db?mode=rwc", dir.path().display());
        let opts = SqliteConnectOptions::from_str(&url)
            .unwrap()
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .pragma("wal_autocheckpoint", "0");
        let mut writer = SqliteConnection::connect_with(&opts).await.unwrap();
        sqlx::query("CREATE TABLE t (x BLOB)")
            .execute(&mut writer)
            .await
            .unwrap();
        for _ in 0..300 {
            sqlx::query("INSERT INTO t VALUES (zeroblob(8000))")
                .execute(&mut writer)
                .await
                .unwrap();
        }
        // 300 commits of two pages each and no automatic checkpoint: all in the log.
        let wal = dir.path().join("c.db-wal");
        assert!(std::fs::metadata(&wal).unwrap().len() > 2_000_000);
        let ro = SqliteConnectOptions::from_str(&url).unwrap();
        let mut checkpointer = SqliteConnection::connect_with(&ro).await.unwrap();
        let (log, copied) = checkpoint(&mut checkpointer).await.unwrap();
        assert!(log > 600, "{log}");
        assert_eq!(log, copied);
        // The next commit starts the log again from its beginning.
        sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&mut writer)
            .await
            .unwrap();
        let (log, _) = checkpoint(&mut checkpointer).await.unwrap();
        assert!(log < 10, "the log restarted: {log}");
        assert!(!is_sqlite("postgres://x"));
        assert!(spawn("postgres://x").await.unwrap().is_none());
    }
}
