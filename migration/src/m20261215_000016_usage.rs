//! Issue 48 part 3: usage accounting (DESIGN §6, "Usage rollup"). Two tables of sums,
//! written by `store::apply` in the transaction of every step that ends a job's hold
//! on a cluster or pool (it ends, or goes back to the queue).
//!
//! - `usage_rollup`: one row per (span, bucket, user, group, place, size): `span` is
//!   3600 (an hour's row) or 86400 (a day's), `bucket` the UTC start of that hour or
//!   day in Unix seconds; `group_path`, `place` (the Ray cluster or pool) and `size`
//!   are `''` for none. Sums: `cpu_ms` milli-core-seconds, `gpu_ms` milli-GPU-seconds,
//!   `memory_bs` byte-seconds held (declared resources, whole seconds), and the jobs
//!   that ended in the bucket by status (`succeeded`, `failed`, `stopped`), a
//!   histogram of their waits (`w0`..`w15`, bins of `store::usage::WAIT_BOUNDS`) and
//!   the longest wait (`wait_max`, seconds).
//! - `usage_custom`: the same key plus `resource` (a custom resource's name):
//!   `amount_ms`, milli-units × seconds held.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::ConnectionTrait;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared(
            "CREATE TABLE IF NOT EXISTS usage_rollup (\
               span INTEGER NOT NULL, bucket BIGINT NOT NULL, user_id TEXT NOT NULL, \
               group_path TEXT NOT NULL, place TEXT NOT NULL, size TEXT NOT NULL, \
               cpu_ms BIGINT NOT NULL DEFAULT 0, gpu_ms BIGINT NOT NULL DEFAULT 0, \
               memory_bs BIGINT NOT NULL DEFAULT 0, succeeded BIGINT NOT NULL DEFAULT 0, \
               failed BIGINT NOT NULL DEFAULT 0, stopped BIGINT NOT NULL DEFAULT 0, \
               w0 INTEGER NOT NULL DEFAULT 0, w1 INTEGER NOT NULL DEFAULT 0, \
               w2 INTEGER NOT NULL DEFAULT 0, w3 INTEGER NOT NULL DEFAULT 0, \
               w4 INTEGER NOT NULL DEFAULT 0, w5 INTEGER NOT NULL DEFAULT 0, \
               w6 INTEGER NOT NULL DEFAULT 0, w7 INTEGER NOT NULL DEFAULT 0, \
               w8 INTEGER NOT NULL DEFAULT 0, w9 INTEGER NOT NULL DEFAULT 0, \
               w10 INTEGER NOT NULL DEFAULT 0, w11 INTEGER NOT NULL DEFAULT 0, \
               w12 INTEGER NOT NULL DEFAULT 0, w13 INTEGER NOT NULL DEFAULT 0, \
               w14 INTEGER NOT NULL DEFAULT 0, w15 INTEGER NOT NULL DEFAULT 0, \
               wait_max BIGINT NOT NULL DEFAULT 0, \
               PRIMARY KEY (span, bucket, user_id, group_path, place, size))",
        )
        .await?;
        db.execute_unprepared(
            "CREATE TABLE IF NOT EXISTS usage_custom (\
               span INTEGER NOT NULL, bucket BIGINT NOT NULL, user_id TEXT NOT NULL, \
               group_path TEXT NOT NULL, place TEXT NOT NULL, size TEXT NOT NULL, \
               resource TEXT NOT NULL, amount_ms BIGINT NOT NULL DEFAULT 0, \
               PRIMARY KEY (span, bucket, user_id, group_path, place, size, resource))",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared("DROP TABLE IF EXISTS usage_custom")
            .await?;
        db.execute_unprepared("DROP TABLE IF EXISTS usage_rollup")
            .await?;
        Ok(())
    }
}
