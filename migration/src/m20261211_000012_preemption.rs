//! Issue 28: preemption (DESIGN §2 "Preemption", §3). `jobs.preemptible` (the job
//! may be stopped and queued again for a user below its fair share; the job's own
//! value, else its user's default when it was submitted), `jobs.preemptions` (how
//! many times it was), `jobs.preempted_at` (when the stop of a preemption in flight
//! was decided: set while the stop is under way, so that a restart finishes the
//! requeue and counts `preemption.grace` from it; cleared once the job is queued
//! again) and `users.preemptible` (the user's default). Existing rows: not
//! preemptible, never preempted.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Jobs {
    Table,
    Preemptible,
    Preemptions,
    PreemptedAt,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Preemptible,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per ALTER: SQLite adds one column at a time.
        let columns = [
            (
                Jobs::Table.into_iden(),
                ColumnDef::new(Jobs::Preemptible)
                    .boolean()
                    .not_null()
                    .default(false)
                    .to_owned(),
            ),
            (
                Jobs::Table.into_iden(),
                ColumnDef::new(Jobs::Preemptions)
                    .integer()
                    .not_null()
                    .default(0)
                    .to_owned(),
            ),
            (
                Jobs::Table.into_iden(),
                ColumnDef::new(Jobs::PreemptedAt)
                    .timestamp_with_time_zone()
                    .null()
                    .to_owned(),
            ),
            (
                Users::Table.into_iden(),
                ColumnDef::new(Users::Preemptible)
                    .boolean()
                    .not_null()
                    .default(false)
                    .to_owned(),
            ),
        ];
        for (table, mut column) in columns {
            manager
                .alter_table(
                    Table::alter()
                        .table(table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for col in [Jobs::PreemptedAt, Jobs::Preemptions, Jobs::Preemptible] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Jobs::Table)
                        .drop_column(col)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .alter_table(
                Table::alter()
                    .table(Users::Table)
                    .drop_column(Users::Preemptible)
                    .to_owned(),
            )
            .await
    }
}
