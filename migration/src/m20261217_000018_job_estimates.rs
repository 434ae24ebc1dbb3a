//! Issue 48 §1, followers' estimates (DESIGN §2 "Estimates", §6): `job_estimates`,
//! the leader's last forward run as followers read it. One row per QUEUED job the run
//! started: `job_id`, `start_us` (its estimated start, Unix microseconds), `position`
//! (1-based, among the jobs that could use the same capacity), `basis` (`max_runtime`,
//! `learned` or `default`) and `computed_us` (when the run's state was taken, Unix
//! microseconds; the same in every row), `not_before_us` (the run stopped early, at
//! `estimates.horizon` or its cycle budget: the jobs it did not reach start no sooner
//! than this, Unix microseconds; null when it ran to its end). The leader replaces the whole table in one
//! transaction per refresh (on PostgreSQL only: on SQLite there are no followers),
//! the first `estimates::PERSISTED` jobs in order of estimated start.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum JobEstimates {
    Table,
    JobId,
    StartUs,
    Position,
    Basis,
    ComputedUs,
    NotBeforeUs,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(JobEstimates::Table)
                    .if_not_exists()
                    .col(
                        ColumnDef::new(JobEstimates::JobId)
                            .uuid()
                            .not_null()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(JobEstimates::StartUs)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(JobEstimates::Position)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(JobEstimates::Basis)
                            .string_len(16)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(JobEstimates::ComputedUs)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(JobEstimates::NotBeforeUs)
                            .big_integer()
                            .null(),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(JobEstimates::Table).to_owned())
            .await
    }
}
