//! Issue 11: every intake batch needs, for each of its users, the QUEUED jobs per
//! priority (the queue limit, and each new job's queue position). Counted from the
//! jobs' index that read every index entry of the user's queue: 0.26 ms per batch at
//! 1,000 queued for the user on SQLite, ~2 ms at the default limit of 10,000, on the
//! one connection every writer shares.
//!
//! `queue_counts` keeps that count per `(user_id, priority)`, maintained by triggers on
//! `jobs` in the transaction that changes a job, so it is exact whatever writes the
//! table (intake, the lifecycle's steps, a deletion, an operator's SQL) and on
//! PostgreSQL across replicas. The migration fills it from the jobs already stored.
//! Rows that fall to 0 stay (a later job of that priority reuses them).
//!
//! Lock order on PostgreSQL: the triggers lock a `queue_counts` row while a statement
//! changes a job of that `(user, priority)`. A transaction that changes jobs of several
//! users must do so in user order (intake inserts its rows sorted by user;
//! `store::apply_many` visits its jobs by user, then id), else two such transactions
//! could deadlock.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Counts every stored QUEUED job (the migration's fill).
const FILL: &str = "INSERT INTO queue_counts (user_id, priority, queued) \
    SELECT user_id, priority, COUNT(*) FROM jobs WHERE status = 'QUEUED' \
    GROUP BY user_id, priority";

const TABLE: &str = "CREATE TABLE IF NOT EXISTS queue_counts (\
    user_id VARCHAR(128) NOT NULL, \
    priority INTEGER NOT NULL, \
    queued BIGINT NOT NULL, \
    PRIMARY KEY (user_id, priority))";

/// SQLite: row triggers (one upsert per row is cheap there; SQLite has no statement
/// triggers).
const SQLITE_TRIGGERS: [&str; 4] = [
    "CREATE TRIGGER queue_counts_insert AFTER INSERT ON jobs \
     WHEN NEW.status = 'QUEUED' BEGIN \
       INSERT INTO queue_counts (user_id, priority, queued) \
       VALUES (NEW.user_id, NEW.priority, 1) \
       ON CONFLICT (user_id, priority) DO UPDATE SET queued = queued + 1; \
     END",
    "CREATE TRIGGER queue_counts_leave AFTER UPDATE OF status, user_id, priority ON jobs \
     WHEN OLD.status = 'QUEUED' AND (NEW.status <> 'QUEUED' \
       OR NEW.user_id <> OLD.user_id OR NEW.priority <> OLD.priority) BEGIN \
       UPDATE queue_counts SET queued = queued - 1 \
       WHERE user_id = OLD.user_id AND priority = OLD.priority; \
     END",
    "CREATE TRIGGER queue_counts_enter AFTER UPDATE OF status, user_id, priority ON jobs \
     WHEN NEW.status = 'QUEUED' AND (OLD.status <> 'QUEUED' \
       OR NEW.user_id <> OLD.user_id OR NEW.priority <> OLD.priority) BEGIN \
       INSERT INTO queue_counts (user_id, priority, queued) \
       VALUES (NEW.user_id, NEW.priority, 1) \
       ON CONFLICT (user_id, priority) DO UPDATE SET queued = queued + 1; \
     END",
    "CREATE TRIGGER queue_counts_delete AFTER DELETE ON jobs \
     WHEN OLD.status = 'QUEUED' BEGIN \
       UPDATE queue_counts SET queued = queued - 1 \
       WHERE user_id = OLD.user_id AND priority = OLD.priority; \
     END",
];

/// PostgreSQL: a statement trigger for inserts (intake inserts up to 500 rows per
/// statement: one upsert per `(user, priority)`, in that order, instead of one per
/// row), row triggers for updates and deletes (the lifecycle changes one row per
/// statement).
const POSTGRES_TRIGGERS: [&str; 5] = [
    "CREATE OR REPLACE FUNCTION queue_counts_inserted() RETURNS trigger \
     LANGUAGE plpgsql AS $$ BEGIN \
       INSERT INTO queue_counts (user_id, priority, queued) \
       SELECT user_id, priority, COUNT(*) FROM inserted WHERE status = 'QUEUED' \
       GROUP BY user_id, priority ORDER BY user_id, priority \
       ON CONFLICT (user_id, priority) \
       DO UPDATE SET queued = queue_counts.queued + EXCLUDED.queued; \
       RETURN NULL; \
     END $$",
    "CREATE TRIGGER queue_counts_insert AFTER INSERT ON jobs \
     REFERENCING NEW TABLE AS inserted \
     FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_inserted()",
    "CREATE OR REPLACE FUNCTION queue_counts_changed() RETURNS trigger \
     LANGUAGE plpgsql AS $$ BEGIN \
       IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.status = 'QUEUED' THEN \
         UPDATE queue_counts SET queued = queued - 1 \
         WHERE user_id = OLD.user_id AND priority = OLD.priority; \
       END IF; \
       IF TG_OP = 'UPDATE' AND NEW.status = 'QUEUED' THEN \
         INSERT INTO queue_counts (user_id, priority, queued) \
         VALUES (NEW.user_id, NEW.priority, 1) \
         ON CONFLICT (user_id, priority) \
         DO UPDATE SET queued = queue_counts.queued + 1; \
       END IF; \
       RETURN NULL; \
     END $$",
    "CREATE TRIGGER queue_counts_update AFTER UPDATE OF status, user_id, priority ON jobs \
     FOR EACH ROW WHEN ((OLD.status = 'QUEUED' OR NEW.status = 'QUEUED') \
       AND (OLD.status IS DISTINCT FROM NEW.status \
         OR OLD.user_id IS DISTINCT FROM NEW.user_id \
         OR OLD.priority IS DISTINCT FROM NEW.priority)) \
     EXECUTE FUNCTION queue_counts_changed()",
    "CREATE TRIGGER queue_counts_delete AFTER DELETE ON jobs \
     FOR EACH ROW WHEN (OLD.status = 'QUEUED') \
     EXECUTE FUNCTION queue_counts_changed()",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared(TABLE).await?;
        db.execute_unprepared(FILL).await?;
        let triggers: &[&str] = match manager.get_database_backend() {
            DatabaseBackend::Postgres => &POSTGRES_TRIGGERS,
            _ => &SQLITE_TRIGGERS,
        };
        for t in triggers {
            db.execute_unprepared(t).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for t in [
            "queue_counts_insert",
            "queue_counts_leave",
            "queue_counts_enter",
            "queue_counts_update",
            "queue_counts_delete",
        ] {
            let drop = match manager.get_database_backend() {
                DatabaseBackend::Postgres => format!("DROP TRIGGER IF EXISTS {t} ON jobs"),
                _ => format!("DROP TRIGGER IF EXISTS {t}"),
            };
            db.execute_unprepared(&drop).await?;
        }
        if manager.get_database_backend() == DatabaseBackend::Postgres {
            db.execute_unprepared("DROP FUNCTION IF EXISTS queue_counts_inserted()")
                .await?;
            db.execute_unprepared("DROP FUNCTION IF EXISTS queue_counts_changed()")
                .await?;
        }
        db.execute_unprepared("DROP TABLE IF EXISTS queue_counts")
            .await?;
        Ok(())
    }
}
