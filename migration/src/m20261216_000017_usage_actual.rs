//! Issue 48 part 3, continued (DESIGN §6, "Usage rollup"):
//!
//! - **Actual use beside declared.** `usage_rollup` gains `actual_cpu_ms`,
//!   `actual_gpu_ms` and `actual_memory_bs`: what jobs held by Ray's State API (the
//!   arbiter's `CapacityChanged.actual`), in the same units as `cpu_ms`, `gpu_ms` and
//!   `memory_bs`; a stretch of a hold with no reading counts its declared resources
//!   there. Rows written before this migration had no reading: their actual columns
//!   are set to their declared ones.
//! - `job_actual`: one row per job holding resources that Ray's State API has read:
//!   the hold it belongs to (`dispatched`, Unix seconds, the job's `dispatched_at`),
//!   since when (`since`, Unix seconds) it holds `cpu_milli` thousandths of cores,
//!   `gpu_milli` thousandths of GPUs and `memory_bytes` bytes. Everything before
//!   `since` is in the rollup already; the row goes when the hold ends.
//! - **The hourly rows in tables of their own** (`usage_rollup_hourly`,
//!   `usage_custom_hourly`, the same columns): pruning them (35 days by default) no
//!   longer leaves holes between the daily rows, which a month's report reads.
//! - `usage_user_daily`: the daily sums per (bucket, user_id, group_path), without
//!   place and size, what a report by user or group by day or month reads (a row
//!   per user-day, ready to answer, where `usage_rollup` has one per user, place
//!   and size to add up); filled from `usage_rollup`'s daily rows.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DatabaseBackend, Statement};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum JobActual {
    Table,
    JobId,
    Dispatched,
    Since,
    CpuMilli,
    GpuMilli,
    MemoryBytes,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for col in ["actual_cpu_ms", "actual_gpu_ms", "actual_memory_bs"] {
            db.execute_unprepared(&format!(
                "ALTER TABLE usage_rollup ADD COLUMN {col} BIGINT NOT NULL DEFAULT 0"
            ))
            .await?;
        }
        db.execute_unprepared(
            "UPDATE usage_rollup SET actual_cpu_ms = cpu_ms, actual_gpu_ms = gpu_ms, \
             actual_memory_bs = memory_bs",
        )
        .await?;
        let backend = db.get_database_backend();
        for (hourly, daily) in [
            ("usage_rollup_hourly", "usage_rollup"),
            ("usage_custom_hourly", "usage_custom"),
        ] {
            let sql = if backend == DatabaseBackend::Postgres {
                // The columns, their defaults and the primary key.
                format!("CREATE TABLE IF NOT EXISTS {hourly} (LIKE {daily} INCLUDING ALL)")
            } else {
                // SQLite has no LIKE: the daily table's own statement, renamed.
                let row = db
                    .query_one(Statement::from_string(
                        backend,
                        format!("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = '{daily}'"),
                    ))
                    .await?
                    .ok_or_else(|| DbErr::Custom(format!("no table {daily}")))?;
                let create: String = row.try_get_by_index(0)?;
                let columns = create
                    .find('(')
                    .map(|i| &create[i..])
                    .ok_or_else(|| DbErr::Custom(format!("{daily}: {create}")))?;
                format!("CREATE TABLE IF NOT EXISTS {hourly} {columns}")
            };
            db.execute_unprepared(&sql).await?;
            db.execute_unprepared(&format!(
                "INSERT INTO {hourly} SELECT * FROM {daily} WHERE span = 3600"
            ))
            .await?;
            db.execute_unprepared(&format!("DELETE FROM {daily} WHERE span = 3600"))
                .await?;
        }
        let bins: Vec<String> = (0..16).map(|k| format!("w{k}")).collect();
        db.execute_unprepared(&format!(
            "CREATE TABLE IF NOT EXISTS usage_user_daily (\
               bucket BIGINT NOT NULL, user_id TEXT NOT NULL, group_path TEXT NOT NULL, \
               cpu_ms BIGINT NOT NULL DEFAULT 0, gpu_ms BIGINT NOT NULL DEFAULT 0, \
               memory_bs BIGINT NOT NULL DEFAULT 0, actual_cpu_ms BIGINT NOT NULL DEFAULT 0, \
               actual_gpu_ms BIGINT NOT NULL DEFAULT 0, \
               actual_memory_bs BIGINT NOT NULL DEFAULT 0, succeeded BIGINT NOT NULL DEFAULT 0, \
               failed BIGINT NOT NULL DEFAULT 0, stopped BIGINT NOT NULL DEFAULT 0, {}, \
               wait_max BIGINT NOT NULL DEFAULT 0, \
               PRIMARY KEY (bucket, user_id, group_path))",
            bins.iter()
                .map(|w| format!("{w} INTEGER NOT NULL DEFAULT 0"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .await?;
        let sums = [
            "cpu_ms",
            "gpu_ms",
            "memory_bs",
            "actual_cpu_ms",
            "actual_gpu_ms",
            "actual_memory_bs",
            "succeeded",
            "failed",
            "stopped",
        ]
        .iter()
        .map(|c| String::from(*c))
        .chain(bins.iter().cloned())
        .collect::<Vec<_>>();
        db.execute_unprepared(&format!(
            "INSERT INTO usage_user_daily (bucket, user_id, group_path, {}, wait_max) \
             SELECT bucket, user_id, group_path, {}, MAX(wait_max) FROM usage_rollup \
             WHERE span = 86400 GROUP BY bucket, user_id, group_path",
            sums.join(", "),
            sums.iter()
                .map(|c| format!("SUM({c})"))
                .collect::<Vec<_>>()
                .join(", "),
        ))
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(JobActual::Table)
                    .if_not_exists()
                    .col(
                        ColumnDef::new(JobActual::JobId)
                            .uuid()
                            .not_null()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(JobActual::Dispatched)
                            .big_integer()
                            .not_null(),
                    )
                    .col(ColumnDef::new(JobActual::Since).big_integer().not_null())
                    .col(ColumnDef::new(JobActual::CpuMilli).big_integer().not_null())
                    .col(ColumnDef::new(JobActual::GpuMilli).big_integer().not_null())
                    .col(
                        ColumnDef::new(JobActual::MemoryBytes)
                            .big_integer()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        manager
            .drop_table(Table::drop().table(JobActual::Table).if_exists().to_owned())
            .await?;
        db.execute_unprepared("DROP TABLE IF EXISTS usage_user_daily")
            .await?;
        for (hourly, daily) in [
            ("usage_rollup_hourly", "usage_rollup"),
            ("usage_custom_hourly", "usage_custom"),
        ] {
            db.execute_unprepared(&format!("INSERT INTO {daily} SELECT * FROM {hourly}"))
                .await?;
            db.execute_unprepared(&format!("DROP TABLE IF EXISTS {hourly}"))
                .await?;
        }
        for col in ["actual_cpu_ms", "actual_gpu_ms", "actual_memory_bs"] {
            db.execute_unprepared(&format!("ALTER TABLE usage_rollup DROP COLUMN {col}"))
                .await?;
        }
        Ok(())
    }
}
